#include "weft/data/token_dataset.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "weft/data/indexed_dataset.h"
#include "weft/data/llmc_dataset.h"
#include "weft/data/sidecar.h"

namespace weft::data {

namespace {

bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// The first int32 of a file, when it has one.
std::optional<int32_t> first_int32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t v;
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) return std::nullopt;
  return v;
}

}  // namespace

Result<std::unique_ptr<TokenDataset>> open_token_dataset(const std::string& path) {
  std::string prefix = path;
  if (path.ends_with(".bin") || path.ends_with(".idx")) prefix = path.substr(0, path.size() - 4);
  const std::string bin = prefix + ".bin", idx = prefix + ".idx";

  // A file of another name that is an llm.c token file is read as one.
  std::string llmc_path;
  if (!is_file(bin) && !is_file(idx)) {
    if (!is_file(path)) {
      return Status::error(
          fmt::format("{}: no such dataset (neither {} nor {} exists)", path, bin, idx));
    }
    if (first_int32(path) != kLlmcMagic) {
      return Status::error(fmt::format(
          "{}: not a dataset: expected PREFIX.bin with PREFIX.idx (Megatron) or an llm.c token "
          "file (magic {})",
          path, kLlmcMagic));
    }
    llmc_path = path;
  } else if (!is_file(idx)) {
    // Only a .bin: llm.c's format, or half of a Megatron dataset.
    const auto magic = first_int32(bin);
    if (magic != kLlmcMagic) {
      return Status::error(fmt::format(
          "{}: neither an llm.c token file (magic {}, expected {}) nor a Megatron dataset ({} does "
          "not exist)",
          bin, magic ? std::to_string(*magic) : "missing", kLlmcMagic, idx));
    }
    llmc_path = bin;
  }

  if (!llmc_path.empty()) prefix = llmc_path.ends_with(".bin") ? prefix : llmc_path;
  auto sidecar = read_sidecar(prefix + ".json");
  if (!sidecar.ok()) return sidecar.status();
  if (!llmc_path.empty()) {
    auto ds = LlmcDataset::open(llmc_path, std::move(sidecar).value());
    if (!ds.ok()) return ds.status();
    return std::unique_ptr<TokenDataset>(std::move(ds).value());
  }
  auto ds = IndexedDataset::open(prefix, std::move(sidecar).value());
  if (!ds.ok()) return ds.status();
  return std::unique_ptr<TokenDataset>(std::move(ds).value());
}

void MappedTokenDataset::read(int64_t offset, int64_t n, int32_t* out) const {
  WEFT_CHECK(offset >= 0 && n >= 0 && offset + n <= num_tokens_, "reading tokens [", offset, ", ",
             offset + n, ") of ", file_.path(), " which holds ", num_tokens_);
  const std::optional<int> vocab = vocab_size();  // not value_or: an int cannot hold 2^31
  const int64_t limit = vocab ? *vocab : int64_t{std::numeric_limits<int32_t>::max()} + 1;
  const int64_t width = token_type_size(type_);
  const std::byte* src = file_.data() + first_byte_ + offset * width;
  const int64_t bad = widen_tokens(src, type_, n, out, limit);
  if (bad >= 0) {
    throw Error(fmt::format("{}: token {} at position {} is outside the vocabulary [0, {}){}",
                            file_.path(), load_token(src + bad * width, type_), offset + bad, limit,
                            sidecar_ ? " of " + sidecar_->path : assumed_vocab_));
  }
}

std::pair<int64_t, int64_t> MappedTokenDataset::id_min_max(int64_t offset, int64_t n) const {
  return token_min_max(file_.data() + first_byte_ + offset * token_type_size(type_), type_, n);
}

Status MappedTokenDataset::set_sidecar(std::optional<Sidecar> sidecar,
                                       const std::string& data_path) {
  if (sidecar) {
    Status s = check_sidecar(*sidecar, data_path, num_tokens_, num_documents_, type_);
    if (!s.ok()) return s;
  }
  sidecar_ = std::move(sidecar);
  return {};
}

std::pair<int64_t, int64_t> TokenDataset::id_min_max(int64_t offset, int64_t n) const {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  read(offset, n, ids.data());
  const auto [lo, hi] = std::minmax_element(ids.begin(), ids.end());
  return {*lo, *hi};
}

Status check_vocabulary(const TokenDataset& data, const std::string& data_path,
                        int model_vocab_size, const std::string& tokenizer_identity,
                        int tokenizer_vocab_size) {
  Status status;
  const auto data_vocab = data.vocab_size();
  const std::string data_tokenizer = data.tokenizer();
  if (data_vocab && *data_vocab > model_vocab_size) {
    status.add(fmt::format(
        "vocabulary mismatch: {} was tokenized with a vocabulary of {} ({}), larger than the "
        "model's vocab_size={}",
        data_path, *data_vocab, data_tokenizer.empty() ? "unknown tokenizer" : data_tokenizer,
        model_vocab_size));
  }
  if (tokenizer_vocab_size > model_vocab_size) {
    status.add(fmt::format(
        "vocabulary mismatch: tokenizer {} has {} tokens, more than the model's vocab_size={}",
        tokenizer_identity, tokenizer_vocab_size, model_vocab_size));
  }
  if (!tokenizer_identity.empty() && !data_tokenizer.empty() &&
      tokenizer_identity != data_tokenizer) {
    status.add(fmt::format("tokenizer mismatch: {} was tokenized with {}, but this run uses {}",
                           data_path, data_tokenizer, tokenizer_identity));
  } else if (data_vocab && tokenizer_vocab_size > 0 && *data_vocab != tokenizer_vocab_size) {
    status.add(fmt::format(
        "vocabulary mismatch: {} was tokenized with a vocabulary of {}, but tokenizer {} has {}",
        data_path, *data_vocab, tokenizer_identity, tokenizer_vocab_size));
  }
  return status;
}

}  // namespace weft::data
