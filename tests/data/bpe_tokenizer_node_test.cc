// weft's GPT-2 tokenizer against the reference itself: the npm package gpt-3-encoder 1.1.4 run by
// Node (tests/data/node_encode.js) on
//   - the whole King James Bible (4.4 MB, `bible -f "Gen1:1-Rev22:21"`, Debian's bible-kjv),
//     generated into a temporary folder, never committed;
//   - 60 KB of generated text mixing scripts, emoji, combining marks, every kind of whitespace
//     the regex treats specially, digits, the punctuation runs whose merges alias in the
//     reference's table (bpe_tokenizer.h), and two long pieces.
// Both sides cut the file into the same ~4 KiB chunks at line ends (see node_encode.js); the
// ids must be identical. Node's encode() is quadratic in a chunk: on the Bible it takes ~5 s at
// 4 KiB against 30-90 s at 64 KiB, and gives the same ids (no whitespace run of the Bible spans a
// cut at either size).
// Also trains a 4096-token vocabulary on the Bible and checks it round-trips the Bible exactly.

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/data/bpe_tokenizer.h"
#include "weft/data/bpe_trainer.h"

namespace weft::data {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

class NodeReference : public ::testing::Test {
 protected:
  static constexpr size_t kChunk = 4096;

  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("weft_bpe_node_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static fs::path kjv() {
    const fs::path path = *dir_ / "kjv.txt";
    if (!fs::exists(path)) {
      const std::string cmd = "bible -f 'Gen1:1-Rev22:21' > " + quoted(path.string());
      EXPECT_EQ(std::system(cmd.c_str()), 0)
          << "cannot run `bible` (Debian package bible-kjv; scripts/bootstrap.sh installs it)";
    }
    return path;
  }

  // Ids from the Node reference for the file at path.
  static std::vector<int32_t> node_ids(const fs::path& path) {
    const std::string src = WEFT_SOURCE_DIR;
    const fs::path module = src + "/assets/npm/node_modules/gpt-3-encoder";
    EXPECT_TRUE(fs::exists(module / "Encoder.js"))
        << module << " is missing: run scripts/fetch_assets.sh";
    const fs::path out = path.string() + ".node.ids";
    const std::string cmd = "node " + quoted(src + "/tests/data/node_encode.js") + " " +
                            quoted(module.string()) + " " + quoted(path.string()) + " " +
                            quoted(out.string()) + " " + std::to_string(kChunk);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "failed: " << cmd;
    const std::string bytes = read_file(out);
    std::vector<int32_t> ids(bytes.size() / sizeof(int32_t));
    std::memcpy(ids.data(), bytes.data(), ids.size() * sizeof(int32_t));
    return ids;
  }

  // The same chunks as node_encode.js: each ends just after the first '\n' at or past kChunk.
  static std::vector<int32_t> weft_ids(const BpeTokenizer& tok, const std::string& text) {
    std::vector<int32_t> ids;
    for (size_t start = 0; start < text.size();) {
      size_t end = text.size();
      if (start + kChunk < text.size()) {
        const size_t nl = text.find('\n', start + kChunk);
        end = nl == std::string::npos ? text.size() : nl + 1;
      }
      tok.encode_into(std::string_view(text).substr(start, end - start), ids);
      start = end;
    }
    return ids;
  }

  static void expect_same_ids(const BpeTokenizer& tok, const std::vector<int32_t>& expected,
                              const std::vector<int32_t>& got) {
    size_t i = 0;
    while (i < expected.size() && i < got.size() && expected[i] == got[i]) ++i;
    if (i == expected.size() && i == got.size()) return;
    auto around = [&](const std::vector<int32_t>& ids) {
      std::string s;
      for (size_t k = i >= 5 ? i - 5 : 0; k < std::min(ids.size(), i + 5); ++k) {
        s += "[" + tok.decode(ids[k]) + "]";
      }
      return s;
    };
    ADD_FAILURE() << "first difference at token " << i << " of " << expected.size() << " (weft has "
                  << got.size() << ")\n  node: " << around(expected) << "\n  weft: " << around(got);
  }

  static fs::path* dir_;
};

fs::path* NodeReference::dir_ = nullptr;

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tok =
      BpeTokenizer::load(resolve_tokenizer_dir("gpt2")).value_or_throw("run fetch_assets.sh");
  return tok;
}

TEST_F(NodeReference, EncodesTheWholeKingJamesBibleIdForId) {
  const fs::path path = kjv();
  const std::string text = read_file(path);
  ASSERT_GT(text.size(), 4'000'000u) << "the corpus should be the whole Bible";
  const std::vector<int32_t> expected = node_ids(path);
  ASSERT_GT(expected.size(), 1'000'000u);
  expect_same_ids(gpt2(), expected, weft_ids(gpt2(), text));
}

TEST_F(NodeReference, EncodesMixedScriptsWhitespaceAndPunctuationIdForId) {
  const std::vector<std::string> pieces = {"Hello",
                                           " world",
                                           "'s",
                                           "'t",
                                           "'re",
                                           "'ve",
                                           "'m",
                                           "'ll",
                                           "'d",
                                           "'S",
                                           "''",
                                           " '",
                                           "don't",
                                           "I'M",
                                           "\xC3\xA9t\xC3\xA9",
                                           "e\xCC\x81",
                                           "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97",
                                           "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
                                           "\xF0\x9F\x98\x80",
                                           "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
                                           "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                                           "\xD9\xA1\xD9\xA2\xD9\xA3",
                                           "\xC2\xBD",
                                           "\xE2\x85\xA7",
                                           "\xC2\xB2",
                                           "123",
                                           " 456",
                                           "3.14",
                                           "1,000",
                                           "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D",
                                           "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D",
                                           " ",
                                           "  ",
                                           "   ",
                                           "\t",
                                           "\n",
                                           "\r\n",
                                           "\n\n",
                                           " \n",
                                           "\xC2\xA0",
                                           "\xE2\x80\xA8",
                                           "\xE2\x80\xA9",
                                           "\xE3\x80\x80",
                                           "\xEF\xBB\xBF",
                                           "\xC2\x85",
                                           "\x0B",
                                           "\x0C",
                                           "\xE2\x80\x8B",
                                           "\xE1\xA0\x8E",
                                           "\xE2\x80\x89",
                                           "\xE2\x80\xAF",
                                           "\xE2\x81\x9F",
                                           "\xE1\x9A\x80",
                                           "!!",
                                           "...",
                                           "?!",
                                           "\xE2\x80\x94",
                                           "\xE2\x80\x9C",
                                           "<|endoftext|>",
                                           "\",\"",
                                           "\"],\"",
                                           "','",
                                           ",\"",
                                           "\"],[",
                                           "],[",
                                           ".,\"",
                                           "},\"",
                                           "),\"",
                                           "\xC4\xA0",
                                           "\xC3\xBF",
                                           "\xF0\x9D\x90\x80",
                                           "\xCC\x80",
                                           "\xE2\x82\xAC",
                                           "@user",
                                           "http://x.y/z?a=1&b=2",
                                           std::string(1, '\0'),
                                           "\x01",
                                           "\x7F",
                                           "\xC4\xB0",
                                           "\xCE\xA3\xCE\xB1",
                                           "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8"};
  std::string text;
  uint64_t x = 2463534242;
  while (text.size() < 60000) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    text += pieces[x % pieces.size()];
    if ((x >> 32) % 10 < 3) text += ' ';
  }
  // Long pieces take the linked-list BPE (bpe_tokenizer.cc, over 128 bytes): letters without a
  // space, and CJK without punctuation.
  std::string letters, cjk;
  for (int i = 0; i < 1500; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    letters += static_cast<char>('a' + x % 26);
    if (i < 200) {
      const uint32_t cp = 0x4E00 + static_cast<uint32_t>(x >> 20) % 0x5200;  // CJK ideographs
      cjk += static_cast<char>(0xE0 | (cp >> 12));
      cjk += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      cjk += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  text += " " + letters + "\n" + cjk + "\n";
  const fs::path path = *dir_ / "mixed.txt";
  std::ofstream(path, std::ios::binary) << text;
  const std::vector<int32_t> expected = node_ids(path);
  ASSERT_GT(expected.size(), 10'000u);
  expect_same_ids(gpt2(), expected, weft_ids(gpt2(), text));
}

TEST_F(NodeReference, TrainsOnTheBibleQuicklyAndRoundTripsIt) {
  const fs::path path = kjv();
  const auto t0 = std::chrono::steady_clock::now();
  BpeWordCounts words;
  ASSERT_TRUE(words.add_file(path.string()).ok());
  BpeTrainOptions options;
  options.vocab_size = 4096;
  const BpeVocab vocab = train_bpe(words, options).value_or_throw("train");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 30.0);  // ~0.2 s here; the issue asks for well under a minute on 2 cores
  const fs::path out = *dir_ / "kjv4096";
  ASSERT_TRUE(write_bpe_files(vocab, out.string()).ok());
  const BpeTokenizer tok = BpeTokenizer::load(out.string()).value_or_throw("load");
  EXPECT_EQ(tok.vocab_size(), 4096);
  const std::string text = read_file(path);
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(ids.size(), text.size() / 3);
}

}  // namespace
}  // namespace weft::data
