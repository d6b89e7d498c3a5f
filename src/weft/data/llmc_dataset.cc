#include "weft/data/llmc_dataset.h"

#include <fmt/core.h>

namespace weft::data {

Result<std::unique_ptr<LlmcDataset>> LlmcDataset::open(const std::string& path,
                                                       std::optional<Sidecar> sidecar) {
  auto file_or = MappedFile::open(path);
  if (!file_or.ok()) return file_or.status();
  MappedFile file = std::move(file_or).value();
  auto fail = [&](const std::string& problem) { return Status::error(path + ": " + problem); };
  const int64_t size = file.size();
  if (size < kLlmcHeaderBytes) {
    return fail(fmt::format("truncated: {} bytes, but the llm.c header alone takes {}", size,
                            kLlmcHeaderBytes));
  }
  const int32_t magic = load_at<int32_t>(file.data(), 0);
  const int32_t version = load_at<int32_t>(file.data(), 1);
  const int32_t count = load_at<int32_t>(file.data(), 2);
  if (magic != kLlmcMagic) {
    return fail(fmt::format("not an llm.c token file: magic {}, expected {}{}", magic, kLlmcMagic,
                            magic == 20240801 ? " (20240801 is llm.c's LLaMA-3 format, which "
                                                "weft does not read)"
                                              : ""));
  }
  if (version != kLlmcVersion) {
    return fail(fmt::format(
        "unsupported llm.c token file version {} (weft reads version 1: GPT-2 uint16 tokens)",
        version));
  }
  if (count < 0) return fail(fmt::format("negative token count {} in the header", count));
  const int64_t expected = kLlmcHeaderBytes + 2 * int64_t{count};
  if (size < expected) {
    return fail(fmt::format("truncated: {} bytes, but the header announces {} tokens ({} bytes)",
                            size, count, expected));
  }
  if (size > expected) {
    return fail(
        fmt::format("{} bytes after the {} tokens the header announces", size - expected, count));
  }
  std::unique_ptr<LlmcDataset> ds(new LlmcDataset(std::move(file)));
  ds->num_tokens_ = count;
  // Each document starts with the end-of-text token (llm.c's tokenizers write [eot] + doc).
  const int32_t eod = sidecar ? sidecar->eod : kGpt2EndOfText;
  const std::byte* tokens = ds->file_.data() + kLlmcHeaderBytes;
  int64_t docs = 0;
  for (int64_t i = 0; i < count; ++i) docs += load_at<uint16_t>(tokens, i) == eod;
  ds->num_documents_ = docs > 0 ? docs : (count > 0 ? 1 : 0);
  if (Status st = ds->set_sidecar(std::move(sidecar), path); !st.ok()) return st;
  return ds;
}

std::string LlmcDataset::describe() const {
  return fmt::format("llm.c v1, uint16, {} tokens, {} docs, tokenizer {}", human_count(num_tokens_),
                     human_count(num_documents_), tokenizer());
}

}  // namespace weft::data
