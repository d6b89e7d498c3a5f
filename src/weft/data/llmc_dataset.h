#pragma once
// llm.c's token files (karpathy/llm.c, dev/data/data_common.py write_datafile; read by
// llmc/dataloader.h): a header of 256 little-endian int32, then the tokens.
//
//   offset  size  field
//        0  4     magic 20240520
//        4  4     version 1 (GPT-2 tokens, uint16)
//        8  4     token count N
//       12  1012  zero
//     1024  2*N   tokens, uint16
//
// llm.c puts the end-of-text token (50256) before each document, so the documents are counted as
// its occurrences. Version 1 means GPT-2 tokens by definition (data_common.py's HEADERS_INFO), so
// the vocabulary is GPT-2's unless a sidecar PREFIX.json says otherwise.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "weft/core/status.h"
#include "weft/data/file_io.h"
#include "weft/data/sidecar.h"
#include "weft/data/token_dataset.h"

namespace weft::data {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr int32_t kGpt2EndOfText = 50256;
inline constexpr int kGpt2VocabSize = 50257;

class LlmcDataset final : public MappedTokenDataset {
 public:
  // `sidecar` (PATH without .bin, plus .json), when present, is checked against the data.
  static Result<std::unique_ptr<LlmcDataset>> open(const std::string& path,
                                                   std::optional<Sidecar> sidecar = {});

  std::string describe() const override;
  std::vector<std::string> files() const override { return {file_.path()}; }
  // GPT-2's vocabulary is only assumed (llm.c's files do not say), so the ids are scanned.
  bool ids_recorded() const override { return sidecar_.has_value(); }

 private:
  explicit LlmcDataset(MappedFile file) : MappedTokenDataset(std::move(file), kLlmcHeaderBytes) {
    assumed_vocab_size_ = kGpt2VocabSize;
    assumed_tokenizer_ = "gpt2";
    assumed_vocab_ = " of GPT-2 (llm.c version 1)";
  }
};

}  // namespace weft::data
