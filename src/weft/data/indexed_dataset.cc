#include "weft/data/indexed_dataset.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace weft::data {

namespace {
// Megatron's DType enum (megatron/core/datasets/indexed_dataset.py): the code is the enum value.
// It has no uint32; 6 float64 and 7 float32 hold no token ids.
constexpr std::pair<TokenType, uint8_t> kMegatronCodes[] = {
    {TokenType::U8, 1},  {TokenType::I8, 2},  {TokenType::I16, 3},
    {TokenType::I32, 4}, {TokenType::I64, 5}, {TokenType::U16, 8}};

uint8_t megatron_dtype_code(TokenType type) {
  for (const auto& [t, code] : kMegatronCodes) {
    if (t == type) return code;
  }
  WEFT_FAIL("Megatron's indexed dataset cannot store ", token_type_name(type));
}

std::optional<TokenType> token_type_from_megatron_code(uint8_t code) {
  for (const auto& [t, c] : kMegatronCodes) {
    if (c == code) return t;
  }
  return std::nullopt;
}

template <typename T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// Entries read back per chunk when the index is assembled: bounded memory, large I/O.
constexpr int64_t kIndexChunk = 1 << 16;

}  // namespace

// ---- writer ----

struct IndexedDatasetWriter::State {
  std::string prefix;
  TokenType type;
  PendingFile bin, idx, doc_ends;  // doc_ends: scratch, never committed
  int64_t num_tokens = 0;
  int64_t num_sequences = 0;
  int64_t num_documents = 0;
  int64_t sequence_length = 0;  // tokens in the open sequence
  std::vector<std::byte> staging = {};
  bool finished = false;

  Status close_sequence() {
    const auto len = static_cast<int32_t>(sequence_length);
    sequence_length = 0;
    ++num_sequences;
    return idx.write(&len, sizeof len);  // sequence_lengths stream straight into the index
  }
};

IndexedDatasetWriter::IndexedDatasetWriter(std::unique_ptr<State> state) : s_(std::move(state)) {}
IndexedDatasetWriter::IndexedDatasetWriter(IndexedDatasetWriter&&) noexcept = default;
IndexedDatasetWriter& IndexedDatasetWriter::operator=(IndexedDatasetWriter&&) noexcept = default;
IndexedDatasetWriter::~IndexedDatasetWriter() = default;  // PendingFile removes the temporaries

Result<IndexedDatasetWriter> IndexedDatasetWriter::create(const std::string& prefix,
                                                          TokenType type) {
  WEFT_CHECK(type != TokenType::U32, "Megatron's indexed dataset has no uint32 type");
  auto bin = PendingFile::create(prefix + ".bin");
  if (!bin.ok()) return bin.status();
  auto idx = PendingFile::create(prefix + ".idx");
  if (!idx.ok()) return idx.status();
  auto doc_ends = PendingFile::create(prefix + ".idx.documents");
  if (!doc_ends.ok()) return doc_ends.status();
  auto s = std::unique_ptr<State>(new State{.prefix = prefix,
                                            .type = type,
                                            .bin = std::move(bin).value(),
                                            .idx = std::move(idx).value(),
                                            .doc_ends = std::move(doc_ends).value()});
  // The header's counts are unknown until finish(); reserve its bytes now so that the lengths can
  // stream in behind it.
  std::byte header[kMmidIdxHeaderBytes] = {};
  if (auto st = s->idx.write(header, sizeof header); !st.ok()) return st;
  return IndexedDatasetWriter(std::move(s));
}

Status IndexedDatasetWriter::append(std::span<const int32_t> tokens) {
  State& s = *s_;
  WEFT_CHECK(!s.finished, "append() after finish()");
  const int64_t max_id = token_type_max(s.type);
  const int64_t width = token_type_size(s.type);
  size_t i = 0;
  while (i < tokens.size()) {
    // A sequence length is an int32: a document longer than that continues in a new sequence of
    // the same document, which Megatron's index allows.
    constexpr int64_t kMaxSequence = std::numeric_limits<int32_t>::max();
    if (s.sequence_length == kMaxSequence) {
      if (auto st = s.close_sequence(); !st.ok()) return st;
    }
    const size_t n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(tokens.size() - i),
                                                           kMaxSequence - s.sequence_length));
    const std::span<const int32_t> part = tokens.subspan(i, n);
    const auto bad = std::ranges::find_if(part, [&](int32_t t) { return t < 0 || t > max_id; });
    if (bad != part.end()) {
      return Status::error(fmt::format("{}: token id {} does not fit the stored type {}",
                                       s.bin.path(), *bad, token_type_name(s.type)));
    }
    s.staging.resize(n * static_cast<size_t>(width));
    narrow_tokens(part.data(), static_cast<int64_t>(n), s.type, s.staging.data());
    if (auto st = s.bin.write(s.staging.data(), static_cast<int64_t>(s.staging.size())); !st.ok()) {
      return st;
    }
    s.sequence_length += static_cast<int64_t>(n);
    s.num_tokens += static_cast<int64_t>(n);
    i += n;
  }
  return {};
}

Status IndexedDatasetWriter::end_document() {
  State& s = *s_;
  WEFT_CHECK(!s.finished, "end_document() after finish()");
  if (auto st = s.close_sequence(); !st.ok()) return st;
  ++s.num_documents;
  const int64_t end = s.num_sequences;  // Megatron: document_indices.append(len(sequence_lengths))
  return s.doc_ends.write(&end, sizeof end);
}

Status IndexedDatasetWriter::finish(const std::string& sidecar_json) {
  State& s = *s_;
  WEFT_CHECK(!s.finished, "finish() called twice");
  if (s.sequence_length > 0) {
    return Status::error(s.bin.path() + ": finish() with tokens after the last end_document()");
  }
  const int64_t S = s.num_sequences;
  const int64_t D = s.num_documents + 1;

  // sequence_pointers: byte offsets of back-to-back sequences (_IndexWriter._sequence_pointers),
  // computed from the lengths already on disk, a chunk at a time.
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  int64_t pointer = 0;
  const int64_t width = token_type_size(s.type);
  for (int64_t first = 0; first < S; first += kIndexChunk) {
    const int64_t n = std::min(kIndexChunk, S - first);
    lengths.resize(static_cast<size_t>(n));
    pointers.resize(static_cast<size_t>(n));
    if (auto st = s.idx.read_at(kMmidIdxHeaderBytes + 4 * first, lengths.data(), 4 * n); !st.ok()) {
      return st;
    }
    for (int64_t k = 0; k < n; ++k) {
      pointers[static_cast<size_t>(k)] = pointer;
      pointer += lengths[static_cast<size_t>(k)] * width;
    }
    if (auto st = s.idx.write(pointers.data(), 8 * n); !st.ok()) return st;
  }
  // document_indices: the leading 0, then each document's end, copied from the scratch file.
  const int64_t zero = 0;
  if (auto st = s.idx.write(&zero, sizeof zero); !st.ok()) return st;
  std::vector<int64_t> ends;
  for (int64_t first = 0; first < D - 1; first += kIndexChunk) {
    const int64_t n = std::min(kIndexChunk, D - 1 - first);
    ends.resize(static_cast<size_t>(n));
    if (auto st = s.doc_ends.read_at(8 * first, ends.data(), 8 * n); !st.ok()) return st;
    if (auto st = s.idx.write(ends.data(), 8 * n); !st.ok()) return st;
  }
  std::byte header[kMmidIdxHeaderBytes];
  std::memcpy(header, kMmidIdxMagic, sizeof kMmidIdxMagic);
  store<uint64_t>(header + 9, 1);
  store<uint8_t>(header + 17, megatron_dtype_code(s.type));
  store<uint64_t>(header + 18, static_cast<uint64_t>(S));
  store<uint64_t>(header + 26, static_cast<uint64_t>(D));
  if (auto st = s.idx.write_at(0, header, sizeof header); !st.ok()) return st;

  std::optional<PendingFile> json;
  if (!sidecar_json.empty()) {
    auto f = PendingFile::create(s.prefix + ".json");
    if (!f.ok()) return f.status();
    json.emplace(std::move(f).value());
    if (auto st = json->write(sidecar_json.data(), static_cast<int64_t>(sidecar_json.size()));
        !st.ok()) {
      return st;
    }
  }
  // Make everything durable before the first rename, so a late failure renames nothing.
  std::vector<PendingFile*> files = {&s.bin};
  if (json) files.push_back(&*json);
  files.push_back(&s.idx);
  for (PendingFile* f : files) {
    if (auto st = f->close(); !st.ok()) return st;
  }
  for (PendingFile* f : files) {
    if (auto st = f->commit(); !st.ok()) return st;
  }
  s.finished = true;
  return {};
}

int64_t IndexedDatasetWriter::num_tokens() const { return s_->num_tokens; }
int64_t IndexedDatasetWriter::num_documents() const { return s_->num_documents; }

// ---- reader ----

Result<MmidIdxIndex> parse_mmididx_index(std::span<const std::byte> idx, std::string_view origin) {
  const std::byte* p = idx.data();
  const auto size = static_cast<int64_t>(idx.size());
  auto fail = [&](const std::string& problem) {
    return Status::error(fmt::format("{}: {}", origin, problem));
  };

  if (size < kMmidIdxHeaderBytes) {
    return fail(fmt::format("truncated: {} bytes, but the MMIDIDX header alone takes {}", size,
                            kMmidIdxHeaderBytes));
  }
  if (std::memcmp(p, kMmidIdxMagic, sizeof kMmidIdxMagic) != 0) {
    std::string seen;
    for (int i = 0; i < 9; ++i) {
      const auto c = static_cast<unsigned char>(p[i]);
      seen += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c))
                                      : fmt::format("\\x{:02x}", c);
    }
    return fail("not a Megatron indexed dataset index: magic \"" + seen +
                "\", expected \"MMIDIDX\\x00\\x00\"");
  }
  const auto version = load_at<uint64_t>(p + 9);
  if (version != 1) {
    return fail(fmt::format("unsupported MMIDIDX version {} (weft reads version 1)", version));
  }
  const auto code = load_at<uint8_t>(p + 17);
  const auto type = token_type_from_megatron_code(code);
  if (!type) {
    return fail(code == 6 || code == 7
                    ? fmt::format("dtype code {} ({}) holds no token ids", code,
                                  code == 6 ? "float64" : "float32")
                    : fmt::format("unknown dtype code {} (Megatron's codes are 1 to 8)", code));
  }
  const auto S = load_at<uint64_t>(p + 18);
  const auto D = load_at<uint64_t>(p + 26);
  // Bound the counts by the file size before multiplying, so that no product can overflow.
  const auto body = static_cast<uint64_t>(size - kMmidIdxHeaderBytes);
  if (S > body / 12 || D > body / 8 || 12 * S + 8 * D > body) {
    constexpr uint64_t kHuge = uint64_t{1} << 40;  // beyond this the byte count would overflow
    return fail(fmt::format(
        "truncated: {} bytes, but its header announces {} sequences and {} document index "
        "entries, which need {} bytes",
        size, S, D,
        S < kHuge && D < kHuge ? std::to_string(kMmidIdxHeaderBytes + 12 * S + 8 * D)
                               : "far more"));
  }
  const uint64_t expected = kMmidIdxHeaderBytes + 12 * S + 8 * D;
  if (static_cast<uint64_t>(size) != expected && static_cast<uint64_t>(size) != expected + S) {
    return fail(fmt::format("{} unexpected bytes after the document index (expected {} bytes)",
                            static_cast<uint64_t>(size) - expected, expected));
  }
  if (D == 0) return fail("the document index is empty (Megatron's starts with a 0)");

  MmidIdxIndex index;
  index.type = *type;
  index.num_sequences = static_cast<int64_t>(S);
  index.num_documents = static_cast<int64_t>(D) - 1;
  const std::byte* lengths = p + kMmidIdxHeaderBytes;
  const std::byte* pointers = lengths + 4 * S;
  const std::byte* documents = pointers + 8 * S;

  // Sequences are stored back to back (Megatron computes the pointers from the lengths), so the
  // .bin read in order is the token stream; anything else means a damaged index.
  const int64_t width = token_type_size(*type);
  int64_t expected_pointer = 0;
  for (int64_t i = 0; i < index.num_sequences; ++i) {
    const auto len = load_at<int32_t>(lengths, i);
    const auto ptr = load_at<int64_t>(pointers, i);
    if (len < 0) return fail(fmt::format("sequence {} has negative length {}", i, len));
    if (ptr != expected_pointer) {
      return fail(fmt::format(
          "sequence {} starts at byte {} of the .bin, expected {} (sequences are stored back to "
          "back)",
          i, ptr, expected_pointer));
    }
    // A sequence is at most 2^34 bytes; a crafted index of 2^29 of them could still overflow.
    if (len * width > std::numeric_limits<int64_t>::max() - expected_pointer) {
      return fail(fmt::format("sequence {} ends beyond 2^63 bytes of .bin", i));
    }
    expected_pointer += len * width;
  }
  int64_t previous = 0;
  for (int64_t i = 0; i <= index.num_documents; ++i) {
    const auto d = load_at<int64_t>(documents, i);
    if ((i == 0 && d != 0) || d < previous || d > index.num_sequences) {
      return fail(fmt::format(
          "document index entry {} is {}: entries must start at 0 and rise to the sequence "
          "count {}",
          i, d, index.num_sequences));
    }
    previous = d;
  }
  if (previous != index.num_sequences) {
    return fail(fmt::format("the document index ends at sequence {}, not at the sequence count {}",
                            previous, index.num_sequences));
  }
  index.bin_bytes = expected_pointer;
  return index;
}

Result<std::unique_ptr<IndexedDataset>> IndexedDataset::open(const std::string& prefix,
                                                             std::optional<Sidecar> sidecar) {
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";
  auto idx_or = MappedFile::open(idx_path);
  if (!idx_or.ok()) return idx_or.status();
  MappedFile idx = std::move(idx_or).value();
  auto parsed =
      parse_mmididx_index(std::span(idx.data(), static_cast<size_t>(idx.size())), idx_path);
  if (!parsed.ok()) return parsed.status();
  const MmidIdxIndex& index = parsed.value();

  auto bin_or = MappedFile::open(bin_path);
  if (!bin_or.ok()) return bin_or.status();
  std::unique_ptr<IndexedDataset> ds(new IndexedDataset(std::move(idx), std::move(bin_or).value()));
  ds->type_ = index.type;
  ds->num_sequences_ = index.num_sequences;
  ds->num_documents_ = index.num_documents;
  const int64_t width = token_type_size(index.type);
  const int64_t expected = index.bin_bytes;
  const int64_t bin_size = ds->file_.size();
  if (bin_size < expected) {
    return Status::error(
        fmt::format("{}: truncated: {} bytes, but {} describes {} {} tokens ({} bytes)", bin_path,
                    bin_size, idx_path, expected / width, token_type_name(index.type), expected));
  }
  if (bin_size > expected) {
    return Status::error(fmt::format(
        "{}: {} bytes, but {} describes only {} {} tokens ({} bytes): the two files do not belong "
        "together",
        bin_path, bin_size, idx_path, expected / width, token_type_name(index.type), expected));
  }
  ds->num_tokens_ = expected / width;
  if (Status st = ds->set_sidecar(std::move(sidecar), bin_path); !st.ok()) return st;
  return ds;
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  WEFT_CHECK(i >= 0 && i < num_sequences_, "sequence ", i, " of ", num_sequences_);
  return load_at<int32_t>(idx_.data() + kMmidIdxHeaderBytes + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  WEFT_CHECK(i >= 0 && i < num_sequences_, "sequence ", i, " of ", num_sequences_);
  return load_at<int64_t>(idx_.data() + kMmidIdxHeaderBytes + 4 * num_sequences_ + 8 * i);
}

int64_t IndexedDataset::document_index(int64_t i) const {
  WEFT_CHECK(i >= 0 && i <= num_documents_, "document index entry ", i, " of ", num_documents_ + 1);
  return load_at<int64_t>(idx_.data() + kMmidIdxHeaderBytes + 12 * num_sequences_ + 8 * i);
}

std::string IndexedDataset::describe() const {
  std::string d = fmt::format("megatron mmididx v1, {}, {} tokens, {} docs", token_type_name(type_),
                              human_count(num_tokens_), human_count(num_documents_));
  if (sidecar_)
    d += fmt::format(", tokenizer {} (vocab {})", sidecar_->tokenizer, sidecar_->vocab_size);
  return d;
}

}  // namespace weft::data
