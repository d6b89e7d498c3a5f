#pragma once
// The tests' writer of llm.c token files (data/llmc_dataset.h has the layout): the reader's
// fixtures. Written under a temporary name and renamed, like every dataset file.

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/pending_file.h"
#include "weft/core/status.h"
#include "weft/data/llmc_dataset.h"

namespace weft::data {

// Writes an llm.c version 1 token file; ids must fit uint16.
inline Status write_llmc_tokens(const std::string& path, std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::error(
        fmt::format("{}: {} tokens do not fit llm.c's int32 count", path, tokens.size()));
  }
  auto file_or = PendingFile::create(path);
  if (!file_or.ok()) return file_or.status();
  PendingFile file = std::move(file_or).value();
  int32_t header[256] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  if (auto st = file.write(header, sizeof header); !st.ok()) return st;
  std::vector<uint16_t> chunk;
  for (size_t i = 0; i < tokens.size(); i += chunk.size()) {
    chunk.assign(std::min<size_t>(1 << 20, tokens.size() - i), 0);
    for (size_t k = 0; k < chunk.size(); ++k) {
      const int32_t t = tokens[i + k];
      if (t < 0 || t > 65535) {
        return Status::error(fmt::format("{}: token id {} does not fit uint16", path, t));
      }
      chunk[k] = static_cast<uint16_t>(t);
    }
    if (auto st = file.write(chunk.data(), static_cast<int64_t>(2 * chunk.size())); !st.ok()) {
      return st;
    }
  }
  return file.commit();
}

}  // namespace weft::data
