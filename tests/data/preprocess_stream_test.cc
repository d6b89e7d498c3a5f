// `weft preprocess` on a generated input of 320 MiB (one .txt document, the hardest case: nothing
// but the cutting keeps it from being held whole) must keep resident memory flat. Labelled slow.
// WEFT_STREAM_TEST_BYTES overrides the size (to measure throughput on a smaller input).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/temp_dir.h"
#include "weft/core/memory_usage.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/data/indexed_dataset.h"
#include "weft/data/preprocess.h"

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_UNDER_SANITIZER 1
#endif
#endif

namespace weft::data {
namespace {

// English-looking text with a Zipf-like vocabulary of made-up words, numbers (many distinct
// pieces, so the tokenizer's cache is exercised too), punctuation and paragraphs.
class TextGenerator {
 public:
  TextGenerator() {
    const char* syllables[] = {"the", "an", "or", "ing", "ed", "re", "con", "pro", "ex", "ly",
                               "ti",  "on", "al", "er",  "st", "qu", "ve",  "mi",  "da", "ko"};
    for (int i = 0; i < 4000; ++i) {
      std::string w;
      for (int k = 0, n = 1 + static_cast<int>(next() % 4); k < n; ++k) w += syllables[next() % 20];
      words_.push_back(w);
    }
  }
  // Appends about n bytes of text.
  void append(std::string& out, size_t n) {
    const size_t target = out.size() + n;
    while (out.size() < target) {
      const uint64_t r = next();
      const size_t rank = (r % 4000) * ((r >> 12) % 4000) / 4000;  // small ranks are frequent
      if (r % 97 == 0) {
        out += std::to_string(r % 1000000);
      } else {
        out += words_[rank];
      }
      const uint64_t p = (r >> 24) % 100;
      out += p < 80 ? " " : p < 88 ? ", " : p < 96 ? ". " : p < 99 ? ".\n" : ".\n\n";
    }
  }

 private:
  uint64_t next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return state_ >> 17;
  }
  uint64_t state_ = 42;
  std::vector<std::string> words_;
};

// Without GPT-2's files: a stand-in that does comparable work (one id per word).
TextEncoder word_hash_encoder() {
  TextEncoder e;
  e.encode_into = [](std::string_view text, std::vector<int32_t>& out) {
    size_t i = 0;
    while (i < text.size()) {
      size_t j = i + 1;
      while (j < text.size() && text[j] != ' ' && text[j] != '\n') ++j;
      out.push_back(
          static_cast<int32_t>(std::hash<std::string_view>{}(text.substr(i, j - i)) % 50000));
      i = j;
    }
  };
  e.vocab_size = 50257;
  e.eod = 50256;
  e.identity = "word-hash";
  return e;
}

// 320 MiB of text in one document, under a 160 MiB bound on resident memory: a preprocessor that
// held the text (320 MiB) or its tokens (about 500 MiB as int32) would cross the bound. Measured
// peak: 82 MB at 268 MB of input, 113 MB at 1 GB (the input was 1 GB until this test's 43 s
// mattered to CI).
TEST(PreprocessStreaming, ADocumentTwiceTheBoundKeepsResidentMemoryFlat) {
#ifdef WEFT_UNDER_SANITIZER
  GTEST_SKIP() << "resident memory means nothing under AddressSanitizer";
#endif
  int64_t bytes = int64_t{320} << 20;
  if (const char* env = std::getenv("WEFT_STREAM_TEST_BYTES")) bytes = std::atoll(env);
  testing::TempDir dir;
  const std::string input = dir.path("corpus.txt");
  {
    auto t0 = std::chrono::steady_clock::now();
    std::ofstream out(input, std::ios::binary);
    TextGenerator gen;
    std::string block;
    for (int64_t written = 0; written < bytes; written += static_cast<int64_t>(block.size())) {
      block.clear();
      gen.append(block, std::min<int64_t>(8 << 20, bytes - written));
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
    ASSERT_TRUE(out.good()) << "cannot write " << input;
    std::printf("generated %.0f MB in %.1f s\n", static_cast<double>(bytes) / 1e6,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto input_size = static_cast<int64_t>(std::filesystem::file_size(input));
  const int64_t rss_before = current_resident_bytes();

  PreprocessOptions o;
  o.input = input;
  o.output = dir.path("out");
  o.progress = true;  // on a log: a line every 10 s, which shows ctest -V the rate
  const bool have_gpt2 = std::filesystem::exists(resolve_tokenizer_dir("gpt2") + "/encoder.json");
  const auto stats =
      (have_gpt2 ? preprocess(o) : preprocess(o, word_hash_encoder())).value_or_throw();
  const int64_t peak = peak_resident_bytes();
  std::filesystem::remove(input);  // the disk is not ours to fill

  std::printf(
      "%s: %.0f MB -> %lld tokens in %.1f s (%.1f MB/s, %d workers); resident memory: %.0f MB "
      "before, peak %.0f MB\n",
      have_gpt2 ? "gpt2" : "word-hash stand-in", static_cast<double>(stats.input_bytes) / 1e6,
      static_cast<long long>(stats.tokens), stats.seconds,
      static_cast<double>(stats.input_bytes) / 1e6 / stats.seconds, stats.workers,
      static_cast<double>(rss_before) / 1e6, static_cast<double>(peak) / 1e6);
  EXPECT_EQ(stats.input_bytes, input_size);
  EXPECT_GE(input_size, bytes);
  EXPECT_EQ(stats.documents, 1);
  EXPECT_LT(peak, int64_t{160} << 20) << "resident memory grew with the input";

  auto ds = IndexedDataset::open(o.output).value_or_throw();
  EXPECT_EQ(ds->num_tokens(), stats.tokens);
  EXPECT_EQ(ds->num_documents(), 1);
  std::vector<int32_t> last(1);
  ds->read(ds->num_tokens() - 1, 1, last.data());
  EXPECT_EQ(last[0], 50256);  // EOD closes the document
}

}  // namespace
}  // namespace weft::data
