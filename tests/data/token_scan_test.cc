// The token-id scan of datasets without a sidecar (data/token_scan.h): the range over every token,
// whatever the chunking and the thread count; the cached verdict beside the dataset, reused while
// the files are the same and redone when they change; and the error that names the id.

#include "weft/data/token_scan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "support/llmc_file.h"
#include "temp_dir.h"
#include "weft/data/indexed_dataset.h"
#include "weft/data/llmc_dataset.h"

namespace weft::data {
namespace {

// A Megatron dataset without a sidecar: int32 ids, `n` tokens counting up modulo 1000 except
// `planted` at `at` (the last token by default: the end of the last, partial chunk).
std::unique_ptr<TokenDataset> write_megatron(const std::string& prefix, int64_t n, int32_t planted,
                                             int64_t at = -1) {
  if (at < 0) at = n - 1;
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(i % 1000);
  t[static_cast<size_t>(at)] = planted;
  auto w = IndexedDatasetWriter::create(prefix, TokenType::I32).value_or_throw("create");
  EXPECT_TRUE(w.append(t).ok());
  EXPECT_TRUE(w.end_document().ok());
  EXPECT_TRUE(w.finish().ok());
  auto d = open_token_dataset(prefix).value_or_throw("open");
  EXPECT_FALSE(d->ids_recorded());
  return d;
}

TEST(TokenScan, FindsTheLeastAndLargestIdWhereverTheyAre) {
  testing::TempDir dir;
  // 9M tokens: two full chunks of 4M and a partial one, the outlier in the partial one's last.
  const int64_t n = 9'000'001;
  auto d = write_megatron(dir.path("big"), n, 70'000);
  for (int threads : {1, 2, 3}) {
    const TokenIdRange r = scan_token_ids(*d, threads);
    EXPECT_EQ(r.tokens, n);
    EXPECT_EQ(r.min, 0);
    EXPECT_EQ(r.max, 70'000) << threads << " threads";
  }
  // A negative id in the first chunk (weft's writer refuses one; another tool's may not): patched
  // into the .bin, where Megatron stores the tokens back to back from byte 0.
  write_megatron(dir.path("neg"), 5000, 0, 17);
  {
    std::fstream bin(dir.path("neg.bin"), std::ios::in | std::ios::out | std::ios::binary);
    const int32_t minus3 = -3;
    bin.seekp(17 * sizeof(int32_t));
    bin.write(reinterpret_cast<const char*>(&minus3), sizeof minus3);
  }
  auto neg = open_token_dataset(dir.path("neg")).value_or_throw("open");
  EXPECT_EQ(scan_token_ids(*neg).min, -3);
  EXPECT_EQ(scan_token_ids(*neg).max, 999);
  EXPECT_NE(
      check_token_ids(scan_token_ids(*neg), "neg", 1000).message().find("negative token id -3"),
      std::string::npos);
}

TEST(TokenScan, AnLlmcFileIsScannedEvenThoughItsVocabularyIsAssumed) {
  testing::TempDir dir;
  std::vector<int32_t> t(3000, 5);
  t[2999] = 60'000;  // beyond GPT-2's 50257, which read() would reject mid-run
  ASSERT_TRUE(write_llmc_tokens(dir.path("x.bin"), t).ok());
  auto d = open_token_dataset(dir.path("x.bin")).value_or_throw("open");
  EXPECT_FALSE(d->ids_recorded());
  EXPECT_EQ(scan_token_ids(*d).max, 60'000);
  const Status s = check_token_ids(scan_token_ids(*d), dir.path("x.bin"), 50304);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("holds token id 60000, outside the model's vocabulary [0, 50304)"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(check_token_ids(scan_token_ids(*d), "x", 60'001).ok());
}

TEST(TokenScan, TheVerdictIsCachedBesideTheDataAndRedoneWhenTheFilesChange) {
  testing::TempDir dir;
  const std::string prefix = dir.path("d");
  {
    auto d = write_megatron(prefix, 20'000, 4242);
    const CachedScan first = scan_token_ids_cached(*d, "");
    EXPECT_FALSE(first.cached);
    EXPECT_EQ(first.cache_path, prefix + ".bin.ids.json");
    EXPECT_TRUE(std::filesystem::exists(first.cache_path));
    const CachedScan again = scan_token_ids_cached(*d, "");
    EXPECT_TRUE(again.cached);
    EXPECT_EQ(again.range.max, 4242);
  }
  // The same size, other ids: the key (size, time, checksum of both ends) changes.
  auto d = write_megatron(prefix, 20'000, 777);
  const CachedScan changed = scan_token_ids_cached(*d, "");
  EXPECT_FALSE(changed.cached);
  EXPECT_EQ(changed.range.max, 999);
  // A cache someone edited by hand to claim another range for these files is still keyed by
  // them, so it is trusted; a torn one is rescanned and rewritten.
  std::ofstream(changed.cache_path) << "{\"files\": [";
  const CachedScan torn = scan_token_ids_cached(*d, "");
  EXPECT_FALSE(torn.cached);
  EXPECT_EQ(torn.range.max, 999);
  EXPECT_TRUE(scan_token_ids_cached(*d, "").cached);
}

}  // namespace
}  // namespace weft::data
