// Byte-level BPE training: the requested vocabulary size, GPT-2's id order for the bytes and
// its file format byte for byte, determinism, round trips through BpeTokenizer::load, and the
// errors a user can cause.

#include "weft/data/bpe_trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/data/bpe_tokenizer.h"

namespace weft::data {
namespace {

namespace fs = std::filesystem;

// About 200 KB of deterministic text: English-like words, numbers, punctuation, a little
// Unicode, line breaks.
std::string corpus() {
  static const std::vector<std::string> words = {"the",
                                                 "of",
                                                 "and",
                                                 "to",
                                                 "in",
                                                 "a",
                                                 "is",
                                                 "that",
                                                 "for",
                                                 "it",
                                                 "as",
                                                 "was",
                                                 "with",
                                                 "be",
                                                 "by",
                                                 "on",
                                                 "not",
                                                 "he",
                                                 "I",
                                                 "this",
                                                 "are",
                                                 "or",
                                                 "his",
                                                 "from",
                                                 "at",
                                                 "which",
                                                 "but",
                                                 "have",
                                                 "an",
                                                 "had",
                                                 "they",
                                                 "you",
                                                 "were",
                                                 "their",
                                                 "one",
                                                 "all",
                                                 "we",
                                                 "can",
                                                 "her",
                                                 "has",
                                                 "there",
                                                 "been",
                                                 "if",
                                                 "more",
                                                 "when",
                                                 "will",
                                                 "would",
                                                 "who",
                                                 "so",
                                                 "no",
                                                 "tokenizer",
                                                 "merge",
                                                 "byte",
                                                 "pair",
                                                 "encoding",
                                                 "caf\xC3\xA9",
                                                 "na\xC3\xAFve",
                                                 "\xE4\xB8\xAD\xE6\x96\x87",
                                                 "don't",
                                                 "it's",
                                                 "1999",
                                                 "3.14",
                                                 "--",
                                                 "(see",
                                                 "note)"};
  static const std::vector<std::string> syllables = {
      "ka",  "lo",  "mi",  "ter", "son", "ble", "qua",       "ri",       "ent",
      "pho", "str", "ing", "un",  "ex",  "ly",  "tion",      "gra",      "vo",
      "ze",  "dun", "ash", "per", "ol",  "ix",  "\xC3\xB6r", "\xC3\xA5s"};
  std::string text;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  while (text.size() < 200000) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    if (x % 3 == 0) {  // an invented word of 1 to 3 syllables: thousands of distinct pieces
      for (uint64_t k = 0, n = 1 + (x >> 8) % 3; k < n; ++k) {
        text += syllables[(x >> (16 + 5 * k)) % syllables.size()];
      }
    } else {
      text += words[(x >> 11) % words.size()];
    }
    const int r = static_cast<int>((x >> 40) % 20);
    text += r == 0 ? ".\n" : r == 1 ? ", " : " ";
  }
  return text;
}

BpeWordCounts counts_of(const std::string& text) {
  BpeWordCounts w;
  w.add_text(text);
  return w;
}

BpeVocab train(const std::string& text, int vocab_size) {
  BpeTrainOptions o;
  o.vocab_size = vocab_size;
  return train_bpe(counts_of(text), o).value_or_throw("train_bpe");
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weft_bpe_train_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

using BpeTrainer = TempDir;

TEST_F(BpeTrainer, TrainedVocabularyHasTheRequestedSizeAndLoads) {
  const BpeVocab v = train(corpus(), 600);
  ASSERT_EQ(v.tokens.size(), 600u);
  EXPECT_EQ(v.tokens.back(), "<|endoftext|>");
  ASSERT_TRUE(write_bpe_files(v, dir_.string()).ok());
  const BpeTokenizer tok = BpeTokenizer::load(dir_.string()).value_or_throw("load");
  EXPECT_EQ(tok.vocab_size(), 600);
  EXPECT_EQ(tok.eot_id(), 599);
  EXPECT_EQ(tok.identity().rfind("bpe-600-", 0), 0u) << tok.identity();
}

TEST_F(BpeTrainer, TrainedTokenizerRoundTripsAndCompresses) {
  const std::string text = corpus();
  ASSERT_TRUE(write_bpe_files(train(text, 800), dir_.string()).ok());
  const BpeTokenizer tok = BpeTokenizer::load(dir_.string()).value_or_throw("load");
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(ids.size(), text.size() / 3);  // the corpus's words became tokens
  // Text it never saw, and bytes that are not UTF-8, still round-trip.
  const std::string unseen = "Zebras \xF0\x9F\xA6\x93 quizzically \xFF\xFE jump \xE2\x80\xA8!";
  EXPECT_EQ(tok.decode(tok.encode(unseen)), unseen);
}

TEST_F(BpeTrainer, TrainingIsDeterministic) {
  const std::string text = corpus();
  const BpeVocab a = train(text, 700), b = train(text, 700);
  EXPECT_EQ(format_encoder_json(a), format_encoder_json(b));
  EXPECT_EQ(format_vocab_bpe(a), format_vocab_bpe(b));
  // A smaller vocabulary is a prefix of a larger one: same merges in the same order.
  const BpeVocab small = train(text, 400);
  ASSERT_LE(small.merges.size(), a.merges.size());
  EXPECT_TRUE(std::equal(small.merges.begin(), small.merges.end(), a.merges.begin()));
}

TEST_F(BpeTrainer, MergesTheMostFrequentPairFirstAndBreaksTiesByBytes) {
  // Per line: (a, b) 3 times, (space, a) twice, then (space, c), (c, d), (space, x), (x, y) once.
  std::string text;
  for (int i = 0; i < 10; ++i) text += "ab ab ab cd xy\n";
  const BpeVocab v = train(text, 257 + 3);
  using Merge = std::array<std::string, 2>;
  const std::string space = "\xC4\xA0";  // U+0120, GPT-2's spelling of the byte ' '
  EXPECT_EQ(v.merges, (std::vector<Merge>{{"a", "b"}, {space, "ab"}, {space, "c"}}));
}

TEST_F(BpeTrainer, BytesComeFirstInGpt2sOrder) {
  const BpeVocab v = train("hello hello", 259);
  ASSERT_EQ(v.tokens.size(), 259u);
  // GPT-2's bytes_to_unicode order: '!'..'~', then U+00A1.., then the remapped bytes from U+0100.
  EXPECT_EQ(v.tokens[0], "!");
  EXPECT_EQ(v.tokens[93], "~");
  EXPECT_EQ(v.tokens[94], "\xC2\xA1");   // U+00A1
  EXPECT_EQ(v.tokens[188], "\xC4\x80");  // U+0100, byte 0x00
  EXPECT_EQ(v.tokens[220], "\xC4\xA0");  // U+0120, byte ' '
  for (int b = 0; b < 256; ++b) {
    EXPECT_NE(std::find(v.tokens.begin(), v.tokens.begin() + 256,
                        byte_to_token_char(static_cast<uint8_t>(b))),
              v.tokens.begin() + 256);
  }
}

TEST_F(BpeTrainer, WritesGpt2sOwnFilesByteForByte) {
  const std::string gpt2 = resolve_tokenizer_dir("gpt2");
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const std::string encoder = read(gpt2 + "/encoder.json"), merges = read(gpt2 + "/vocab.bpe");
  ASSERT_FALSE(encoder.empty()) << "GPT-2's files are missing: run scripts/fetch_assets.sh";
  BpeVocab v;
  const nlohmann::json json = nlohmann::json::parse(encoder);
  v.tokens.resize(json.size());
  for (const auto& [token, id] : json.items()) v.tokens[id.get<size_t>()] = token;
  std::istringstream lines(merges);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    v.merges.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  EXPECT_TRUE(format_encoder_json(v) == encoder);
  EXPECT_TRUE(format_vocab_bpe(v) == merges);
}

TEST_F(BpeTrainer, CountingAFileEqualsCountingItsText) {
  std::string text = corpus();
  for (int i = 0; i < 6; ++i) text += text;  // 12 MB: crosses the 1 MiB blocks of add_file
  text += "\n\n  trailing   ";
  const fs::path path = dir_ / "corpus.txt";
  std::ofstream(path, std::ios::binary) << text;
  BpeWordCounts from_file;
  ASSERT_TRUE(from_file.add_file(path.string()).ok());
  const BpeWordCounts from_text = counts_of(text);
  EXPECT_EQ(from_file.bytes(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(from_file.pieces(), from_text.pieces());
  EXPECT_TRUE(from_file.counts() == from_text.counts());
}

TEST_F(BpeTrainer, MissingCorpusFileIsNamed) {
  BpeWordCounts w;
  const Status s = w.add_file((dir_ / "nope.txt").string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nope.txt: No such file"), std::string::npos) << s.message();
}

TEST_F(BpeTrainer, TooSmallVocabularyIsRejected) {
  BpeTrainOptions o;
  o.vocab_size = 100;
  const Result<BpeVocab> r = train_bpe(counts_of("abc"), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("vocabulary size 100 is too small"), std::string::npos);
}

TEST_F(BpeTrainer, CorpusTooSmallForTheVocabularySaysHowFarItGot) {
  BpeTrainOptions o;
  o.vocab_size = 1000;
  const Result<BpeVocab> r = train_bpe(counts_of("abcd abcd"), o);
  ASSERT_FALSE(r.ok());
  // " abcd" and "abcd": a+b, ab+c, abc+d, space+abcd: 4 merges, 261 tokens.
  EXPECT_NE(r.status().message().find("supports a vocabulary of 261 tokens, not 1000"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace weft::data
