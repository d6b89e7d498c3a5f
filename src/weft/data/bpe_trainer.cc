// Byte-level BPE training; bpe_trainer.h describes the procedure.

#include "weft/data/bpe_trainer.h"

#include "weft/data/file_io.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

namespace weft::data {
namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

uint64_t pack(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t left_of(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t right_of(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

// The 256 bytes in GPT-2's id order, that of their byte-level characters: bytes_to_unicode() keeps
// the printable ones as themselves and moves the others past U+00FF.
std::array<uint8_t, 256> bytes_in_gpt2_order() {
  std::array<uint8_t, 256> order{};
  std::iota(order.begin(), order.end(), 0);
  std::ranges::sort(order, {}, byte_to_token_char);  // UTF-8 sorts as its code points
  return order;
}

}  // namespace

void BpeWordCounts::add_text(std::string_view text) {
  bytes_ += static_cast<int64_t>(text.size());
  pretokenizer_.for_each(text, [&](std::string_view piece) {
    ++counts_[std::string(piece)];
    ++pieces_;
  });
}

Status BpeWordCounts::add_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  // In blocks of about 1 MiB, cut only between "X\n" and "Y" with X and Y visible ASCII: no
  // piece spans such a point, so the counts are those of the whole file at once.
  auto visible = [](char c) { return c > ' ' && c < 0x7F; };
  std::string block, line;
  while (std::getline(in, line)) {
    if (block.size() >= (1u << 20) && block.size() >= 2 && block.back() == '\n' &&
        visible(block[block.size() - 2]) && !line.empty() && visible(line[0])) {
      add_text(block);
      block.clear();
    }
    block += line;
    if (!in.eof()) block += '\n';
  }
  if (in.bad()) return Status::error(fmt::format("cannot read {}: read error", path));
  add_text(block);
  return Status();
}

Status check_bpe_train_options(const BpeTrainOptions& options) {
  if (options.vocab_size < 257) {
    return Status::error(fmt::format(
        "vocabulary size {} is too small: byte-level BPE needs 256 byte tokens + <|endoftext|>",
        options.vocab_size));
  }
  return Status();
}

Result<BpeVocab> train_bpe(const BpeWordCounts& words, const BpeTrainOptions& options) {
  if (Status s = check_bpe_train_options(options); !s.ok()) return s;
  const int vocab_size = options.vocab_size;
  auto progress = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };

  // Tokens: bytes and strings by id; strings to ids to notice a merge result seen before.
  std::vector<std::string> bytes_of;
  std::unordered_map<std::string, int32_t> id_of;
  std::array<int32_t, 256> byte_id{};
  for (const uint8_t b : bytes_in_gpt2_order()) {
    byte_id[b] = static_cast<int32_t>(bytes_of.size());
    id_of.emplace(std::string(1, static_cast<char>(b)), byte_id[b]);
    bytes_of.emplace_back(1, static_cast<char>(b));
  }

  // Distinct pieces, sorted so the order of everything below depends only on the corpus.
  std::vector<const std::pair<const std::string, int64_t>*> sorted;
  sorted.reserve(words.counts().size());
  for (const auto& kv : words.counts()) sorted.push_back(&kv);
  std::sort(sorted.begin(), sorted.end(), [](auto* x, auto* y) { return x->first < y->first; });
  std::vector<std::vector<int32_t>> syms(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // pair -> pieces (may be stale)
  for (size_t w = 0; w < sorted.size(); ++w) {
    freq[w] = sorted[w]->second;
    for (const char c : sorted[w]->first) syms[w].push_back(byte_id[static_cast<uint8_t>(c)]);
    for (size_t i = 0; i + 1 < syms[w].size(); ++i) {
      const uint64_t key = pack(syms[w][i], syms[w][i + 1]);
      pair_count[key] += freq[w];
      auto& list = where[key];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) {
        list.push_back(static_cast<int32_t>(w));
      }
    }
  }

  // Max-heap of (count, pair) with lazy deletion: an entry is live while its count is current.
  struct Entry {
    int64_t count;
    uint64_t key;
  };
  auto less = [&](const Entry& x, const Entry& y) {
    if (x.count != y.count) return x.count < y.count;
    const std::string& xl = bytes_of[left_of(x.key)];
    const std::string& yl = bytes_of[left_of(y.key)];
    if (xl != yl) return xl > yl;
    return bytes_of[right_of(x.key)] > bytes_of[right_of(y.key)];
  };
  std::vector<Entry> heap;
  heap.reserve(pair_count.size());
  for (const auto& [key, count] : pair_count) heap.push_back({count, key});
  std::make_heap(heap.begin(), heap.end(), less);

  BpeVocab vocab;
  const size_t target = static_cast<size_t>(vocab_size) - 1;  // ids before <|endoftext|>
  const size_t report_every = std::max<size_t>(1, (target - 256) / 10);
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<int32_t> merged_syms;
  while (bytes_of.size() < target) {
    if (heap.empty()) {
      return Status::error(fmt::format(
          "the corpus ({} distinct pieces) has no pair left to merge after {} merges: it "
          "supports a vocabulary of {} tokens, not {}",
          sorted.size(), vocab.merges.size(), bytes_of.size() + 1, vocab_size));
    }
    std::pop_heap(heap.begin(), heap.end(), less);
    const Entry top = heap.back();
    heap.pop_back();
    const auto current = pair_count.find(top.key);
    if (current == pair_count.end() || current->second != top.count) continue;  // stale

    const int32_t a = left_of(top.key), b = right_of(top.key);
    std::string merged_bytes = bytes_of[a] + bytes_of[b];
    int32_t m;
    if (const auto it = id_of.find(merged_bytes); it != id_of.end()) {
      m = it->second;
    } else {
      m = static_cast<int32_t>(bytes_of.size());
      id_of.emplace(merged_bytes, m);
      bytes_of.push_back(std::move(merged_bytes));
    }
    vocab.merges.push_back(
        {bytes_to_token_string(bytes_of[a]), bytes_to_token_string(bytes_of[b])});

    // Re-count the pairs of every piece holding (a, b): subtract its old pairs, add its new.
    std::vector<int32_t> list = std::move(where[top.key]);
    where.erase(top.key);
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    delta.clear();
    for (const int32_t w : list) {
      std::vector<int32_t>& s = syms[w];
      merged_syms.clear();
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          merged_syms.push_back(m);
          i += 2;
        } else {
          merged_syms.push_back(s[i++]);
        }
      }
      if (merged_syms.size() == s.size()) continue;  // stale entry: the pair left this piece
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[pack(s[i], s[i + 1])] -= freq[w];
      for (size_t i = 0; i + 1 < merged_syms.size(); ++i) {
        const uint64_t key = pack(merged_syms[i], merged_syms[i + 1]);
        delta[key] += freq[w];
        if (merged_syms[i] == m || merged_syms[i + 1] == m) where[key].push_back(w);
      }
      s.swap(merged_syms);
    }
    for (const auto& [key, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_count[key];
      c += d;
      if (c > 0) {
        heap.push_back({c, key});
        std::push_heap(heap.begin(), heap.end(), less);
      } else {
        pair_count.erase(key);
      }
    }
    if (vocab.merges.size() % report_every == 0) {
      progress(fmt::format("merge {}: '{}' + '{}' (count {}), {}/{} tokens", vocab.merges.size(),
                           vocab.merges.back()[0], vocab.merges.back()[1], top.count,
                           bytes_of.size() + 1, vocab_size));
    }
  }

  if (id_of.contains(kEndOfText)) {
    return Status::error("a merge produced the string <|endoftext|>, which is reserved");
  }
  vocab.tokens.reserve(target + 1);
  for (const std::string& bytes : bytes_of) vocab.tokens.push_back(bytes_to_token_string(bytes));
  vocab.tokens.push_back(kEndOfText);
  return vocab;
}

std::string format_encoder_json(const BpeVocab& vocab) {
  std::string out = "{";
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (id > 0) out += ", ";
    // Python's json.dumps(ensure_ascii=True) escaping, for encoder.json byte for byte.
    out += nlohmann::json(vocab.tokens[id]).dump(-1, ' ', /*ensure_ascii=*/true);
    out += fmt::format(": {}", id);
  }
  out += "}";
  return out;
}

std::string format_vocab_bpe(const BpeVocab& vocab) {
  std::string out = "#version: 0.2\n";
  for (const auto& [left, right] : vocab.merges) {
    out += left;
    out += ' ';
    out += right;
    out += '\n';
  }
  return out;
}

Status write_bpe_files(const BpeVocab& vocab, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error(fmt::format("cannot create {}: {}", dir, ec.message()));
  Status status = write_file_atomic(dir + "/encoder.json", format_encoder_json(vocab));
  status.merge(write_file_atomic(dir + "/vocab.bpe", format_vocab_bpe(vocab)));
  return status;
}

}  // namespace weft::data
