#include "weft/data/preprocess.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/temp_dir.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/data/indexed_dataset.h"
#include "weft/data/token_dataset.h"

namespace weft::data {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& p : parts) {
    EXPECT_NE(message.find(p), std::string::npos) << "'" << message << "' lacks '" << p << "'";
  }
}

// One token per byte, EOD 256: lossless, so a dataset can be turned back into its documents.
TextEncoder byte_encoder() {
  TextEncoder e;
  e.encode_into = [](std::string_view text, std::vector<int32_t>& out) {
    for (unsigned char c : text) out.push_back(c);
  };
  e.vocab_size = 257;
  e.eod = 256;
  e.identity = "bytes";
  return e;
}

PreprocessOptions options(const TempDir& dir, const std::string& input) {
  PreprocessOptions o;
  o.input = dir.path(input);
  o.output = dir.path("out");
  o.workers = 3;
  o.progress = false;
  return o;
}

std::vector<int32_t> tokens_of(const std::string& prefix) {
  auto ds = open_token_dataset(prefix).value_or_throw();
  std::vector<int32_t> t(static_cast<size_t>(ds->num_tokens()));
  ds->read(0, ds->num_tokens(), t.data());
  return t;
}

// The documents of a byte-encoded dataset; checks that each ends with EOD.
std::vector<std::string> documents_of(const std::string& prefix) {
  std::vector<std::string> docs(1);
  for (int32_t t : tokens_of(prefix)) {
    if (t == 256) {
      docs.emplace_back();
    } else {
      docs.back() += static_cast<char>(t);
    }
  }
  EXPECT_TRUE(docs.back().empty()) << "the stream does not end with EOD";
  docs.pop_back();
  return docs;
}

std::string error_of(const Result<PreprocessStats>& r) {
  EXPECT_FALSE(r.ok()) << "expected an error";
  return r.ok() ? std::string() : r.status().message();
}

TEST(Preprocess, TxtIsOneDocument) {
  TempDir dir;
  const std::string text = "first line\n\nsecond paragraph\n";
  write_file(dir.path("in.txt"), text);
  const auto stats = preprocess(options(dir, "in.txt"), byte_encoder()).value_or_throw();
  EXPECT_EQ(stats.documents, 1);
  EXPECT_EQ(stats.tokens, static_cast<int64_t>(text.size()) + 1);
  EXPECT_EQ(stats.input_bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(stats.token_type, TokenType::U16);
  EXPECT_EQ(documents_of(dir.path("out")), std::vector<std::string>{text});
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.txt", "out.bin", "out.idx", "out.json"}));
}

TEST(Preprocess, WritesTheSidecar) {
  TempDir dir;
  write_file(dir.path("in.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"c\"}\n");
  preprocess(options(dir, "in.jsonl"), byte_encoder()).value_or_throw();
  const auto j = nlohmann::json::parse(read_file(dir.path("out.json")));
  EXPECT_EQ(j["tokenizer"], "bytes");
  EXPECT_EQ(j["vocab_size"], 257);
  EXPECT_EQ(j["eod"], 256);
  EXPECT_EQ(j["documents"], 2);
  EXPECT_EQ(j["tokens"], 5);
  EXPECT_EQ(j["source"], dir.path("in.jsonl"));
  auto ds = open_token_dataset(dir.path("out")).value_or_throw();
  EXPECT_EQ(ds->vocab_size(), 257);
  EXPECT_EQ(ds->tokenizer(), "bytes");
}

TEST(Preprocess, LongDocumentsAreCutIntoPiecesWithoutLosingAByte) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    text += "line " + std::to_string(i) + (i % 7 ? " ends here\n" : "  \n  ");
    if (i % 50 == 0) text += "\xc3\xa9\xe4\xb8\xad";  // multi-byte characters
  }
  write_file(dir.path("in.txt"), text);
  auto o = options(dir, "in.txt");
  o.piece_bytes = 100;
  const auto stats = preprocess(o, byte_encoder()).value_or_throw();
  EXPECT_EQ(stats.documents, 1);
  EXPECT_EQ(documents_of(dir.path("out")), std::vector<std::string>{text});
}

TEST(Preprocess, SplitBlankLinesMakesParagraphsDocuments) {
  TempDir dir;
  write_file(dir.path("in.txt"), "\n\none\ntwo  \n\n \t \n  three\r\n\r\nfour\n\n\n five\nsix");
  auto o = options(dir, "in.txt");
  o.split_blank_lines = true;
  const auto stats = preprocess(o, byte_encoder()).value_or_throw();
  EXPECT_EQ(stats.documents, 4);
  EXPECT_EQ(documents_of(dir.path("out")),
            (std::vector<std::string>{"one\ntwo  ", "  three\r", "four", " five\nsix"}));
}

TEST(Preprocess, SplitBlankLinesDoesNotDependOnPieceSizeOrWorkers) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    text += 'w';  // (one += at a time: GCC 12 warns falsely on "w" + std::to_string(...))
    text += std::to_string(i * 7919 % 1000);
    text += i % 13 == 0 ? "\n\n" : i % 3 ? " " : "\n";
  }
  write_file(dir.path("in.txt"), text);
  auto o = options(dir, "in.txt");
  o.split_blank_lines = true;
  o.workers = 1;
  o.piece_bytes = 1 << 20;
  preprocess(o, byte_encoder()).value_or_throw();
  const std::string bin = read_file(dir.path("out.bin")), idx = read_file(dir.path("out.idx"));
  for (int workers : {2, 5}) {
    o.workers = workers;
    o.piece_bytes = 64;
    preprocess(o, byte_encoder()).value_or_throw();
    EXPECT_EQ(read_file(dir.path("out.bin")), bin) << workers;
    // Paragraphs shorter than a piece are one sequence each either way.
    EXPECT_EQ(read_file(dir.path("out.idx")), idx) << workers;
  }
}

TEST(Preprocess, JsonlReadsTheTextFieldLikeMegatron) {
  TempDir dir;
  write_file(dir.path("in.jsonl"),
             "{\"text\": \"hello\", \"id\": 1}\n"
             "\n"
             "{\"id\": 2, \"text\": \"caf\\u00e9 \\\"q\\\"\\n\"}\r\n"
             "{\"text\": \"\"}\n"
             "{\"text\": \"last, no newline\"}");
  const auto stats = preprocess(options(dir, "in.jsonl"), byte_encoder()).value_or_throw();
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.empty_documents, 1);
  EXPECT_EQ(documents_of(dir.path("out")),
            (std::vector<std::string>{"hello", "caf\xc3\xa9 \"q\"\n", "last, no newline"}));
}

TEST(Preprocess, JsonKeyChoosesTheField) {
  TempDir dir;
  write_file(dir.path("in.jsonl"), "{\"content\": \"x\", \"text\": \"no\"}\n");
  auto o = options(dir, "in.jsonl");
  o.json_key = "content";
  preprocess(o, byte_encoder()).value_or_throw();
  EXPECT_EQ(documents_of(dir.path("out")), std::vector<std::string>{"x"});
}

TEST(Preprocess, ManyWorkersWriteInInputOrder) {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> expected;
  for (int i = 0; i < 3000; ++i) {
    expected.push_back("document " + std::to_string(i) +
                       std::string(static_cast<size_t>(i % 37), '.'));
    jsonl += nlohmann::json{{"text", expected.back()}}.dump() + "\n";
  }
  write_file(dir.path("in.jsonl"), jsonl);
  auto o = options(dir, "in.jsonl");
  o.workers = 8;
  o.piece_bytes = 100;
  const auto stats = preprocess(o, byte_encoder()).value_or_throw();
  EXPECT_EQ(stats.documents, 3000);
  EXPECT_EQ(documents_of(dir.path("out")), expected);
}

TEST(Preprocess, LargeVocabulariesAreStoredAsInt32) {
  TempDir dir;
  write_file(dir.path("in.txt"), "ab");
  TextEncoder e = byte_encoder();
  e.vocab_size = 70000;
  e.eod = 69999;
  const auto stats = preprocess(options(dir, "in.txt"), e).value_or_throw();
  EXPECT_EQ(stats.token_type, TokenType::I32);
  EXPECT_EQ(tokens_of(dir.path("out")), (std::vector<int32_t>{'a', 'b', 69999}));
}

TEST(Preprocess, AnEmptyInputMakesAnEmptyDataset) {
  TempDir dir;
  write_file(dir.path("in.txt"), "");
  const auto stats = preprocess(options(dir, "in.txt"), byte_encoder()).value_or_throw();
  EXPECT_EQ(stats.documents, 0);
  EXPECT_EQ(open_token_dataset(dir.path("out")).value_or_throw()->num_tokens(), 0);
}

// ---- bad input: one clear error naming the file, nothing written ----

TEST(Preprocess, BadJsonLineIsNamedByFileAndLine) {
  TempDir dir;
  write_file(dir.path("in.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": nope}\n");
  expect_mentions(error_of(preprocess(options(dir, "in.jsonl"), byte_encoder())),
                  {"in.jsonl:3: invalid JSON", "syntax error"});
  EXPECT_EQ(dir.files(), std::set<std::string>{"in.jsonl"});
}

TEST(Preprocess, TheFirstBadLineInTheFileIsReported) {
  TempDir dir;
  std::string jsonl;
  for (int i = 1; i <= 500; ++i) {
    jsonl += (i == 321 || i == 400) ? "{\"text\": 5}\n" : "{\"text\": \"fine\"}\n";
  }
  write_file(dir.path("in.jsonl"), jsonl);
  auto o = options(dir, "in.jsonl");
  o.workers = 6;
  o.piece_bytes = 40;
  const auto message = error_of(preprocess(o, byte_encoder()));
  expect_mentions(message, {"in.jsonl:321: field \"text\" is number, not a string"});
  EXPECT_EQ(message.find(":400:"), std::string::npos);
}

TEST(Preprocess, JsonLinesMustBeObjectsWithTheField) {
  TempDir dir;
  write_file(dir.path("in.jsonl"), "[1, 2]\n");
  expect_mentions(error_of(preprocess(options(dir, "in.jsonl"), byte_encoder())),
                  {"in.jsonl:1: expected a JSON object, not array"});
  write_file(dir.path("in.jsonl"), "{\"body\": \"x\"}\n");
  expect_mentions(error_of(preprocess(options(dir, "in.jsonl"), byte_encoder())),
                  {"in.jsonl:1: no \"text\" field", "--json-key"});
}

TEST(Preprocess, InvalidUtf8IsNamedByFileAndLine) {
  TempDir dir;
  write_file(dir.path("in.txt"), "good\nbad \xff here\n");
  expect_mentions(error_of(preprocess(options(dir, "in.txt"), byte_encoder())),
                  {"in.txt:2: invalid UTF-8: byte 0xFF"});
  write_file(dir.path("in.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"\xc0\xaf\"}\n");
  expect_mentions(error_of(preprocess(options(dir, "in.jsonl"), byte_encoder())),
                  {"in.jsonl:2: invalid UTF-8: byte 0xC0"});
  auto o = options(dir, "in.txt");
  o.split_blank_lines = true;
  write_file(dir.path("in.txt"), "p1\n\np2 line 3\n\xed\xa0\x80 surrogate on line 4\n");
  expect_mentions(error_of(preprocess(o, byte_encoder())), {"in.txt:4: invalid UTF-8: byte 0xED"});
}

TEST(Preprocess, AFailedRunKeepsTheExistingDatasetAndLeavesNoTemporaries) {
  TempDir dir;
  write_file(dir.path("in.jsonl"), "{\"text\": \"old data\"}\n");
  preprocess(options(dir, "in.jsonl"), byte_encoder()).value_or_throw();
  const std::string bin = read_file(dir.path("out.bin")), idx = read_file(dir.path("out.idx")),
                    json = read_file(dir.path("out.json"));
  std::string jsonl;
  for (int i = 0; i < 2000; ++i) jsonl += "{\"text\": \"new data, a lot of it\"}\n";
  write_file(dir.path("in.jsonl"), jsonl + "{broken\n");
  auto o = options(dir, "in.jsonl");
  o.piece_bytes = 256;
  expect_mentions(error_of(preprocess(o, byte_encoder())), {"in.jsonl:2001: invalid JSON"});
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.jsonl", "out.bin", "out.idx", "out.json"}));
  EXPECT_EQ(read_file(dir.path("out.bin")), bin);
  EXPECT_EQ(read_file(dir.path("out.idx")), idx);
  EXPECT_EQ(read_file(dir.path("out.json")), json);
}

TEST(Preprocess, MissingInputOrBadOptionsAreNamed) {
  TempDir dir;
  expect_mentions(error_of(preprocess(options(dir, "absent.txt"), byte_encoder())),
                  {"absent.txt: cannot open: No such file or directory"});
  write_file(dir.path("in.csv"), "a,b\n");
  expect_mentions(error_of(preprocess(options(dir, "in.csv"), byte_encoder())),
                  {"in.csv: unknown input format (expected a .txt or .jsonl file)"});
  write_file(dir.path("in.jsonl"), "{}\n");
  auto o = options(dir, "in.jsonl");
  o.split_blank_lines = true;
  expect_mentions(error_of(preprocess(o, byte_encoder())),
                  {"--split-blank-lines applies to .txt input"});
  o = options(dir, "in.jsonl");
  o.output = dir.path("missing/dir/out");
  expect_mentions(error_of(preprocess(o, byte_encoder())),
                  {"missing/dir/out.bin", "cannot create"});
  EXPECT_EQ(dir.files(), (std::set<std::string>{"in.csv", "in.jsonl"}));
}

TEST(Preprocess, AMissingTokenizerIsNamed) {
  TempDir dir;
  write_file(dir.path("in.txt"), "x");
  auto o = options(dir, "in.txt");
  o.tokenizer = dir.path("no-tokenizer");
  expect_mentions(error_of(preprocess(o)), {"cannot load the tokenizer", "no-tokenizer"});
  EXPECT_EQ(dir.files(), std::set<std::string>{"in.txt"});
  o.input = dir.path("absent.jsonl");  // every problem at once
  expect_mentions(error_of(preprocess(o)), {"absent.jsonl: cannot open", "no-tokenizer"});
}

// ---- text helpers ----

TEST(FindInvalidUtf8, AcceptsWellFormedAndFindsTheFirstBadByte) {
  const auto npos = std::string_view::npos;
  EXPECT_EQ(find_invalid_utf8("plain ascii, long enough for the fast path"), npos);
  EXPECT_EQ(find_invalid_utf8("\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"), npos);
  EXPECT_EQ(find_invalid_utf8("ab\xc0\xaf"), 2u);        // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xe0\x80\xaf"), 0u);      // overlong, 3 bytes
  EXPECT_EQ(find_invalid_utf8("x\xed\xa0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("abc\xe4\xb8"), 3u);       // truncated at the end
  EXPECT_EQ(find_invalid_utf8("abcdefgh\x80"), 8u);      // stray continuation byte
  EXPECT_EQ(find_invalid_utf8("\xff"), 0u);
}

TEST(FindCut, PrefersANewlineBetweenNonSpaceCharacters) {
  //                   0123456 7890123 4567890123456
  const std::string t = "aaaaaa\n  bbbb  \ncccc\ndd  \n  eeeeeeee";
  EXPECT_EQ(find_cut(t, 1, 30), 21u);  // after "cccc\n", before "dd": both sides solid
  EXPECT_EQ(find_cut(t, 1, 18), 16u);  // neither '\n' has solid neighbours: the last one
}

TEST(FindCut, FallsBackToTheLastNewlineThenToACharacterBoundary) {
  const std::string spaces = "a \n b \n c \n d            ";
  EXPECT_EQ(find_cut(spaces, 1, 12), 11u);  // no solid neighbours anywhere: the last '\n'
  std::string accents;
  for (int i = 0; i < 20; ++i) accents += "\xc3\xa9";  // 2-byte characters, no newline
  EXPECT_EQ(find_cut(accents, 1, 11), 10u);            // 11 is inside a character
  EXPECT_EQ(find_cut(accents, 1, 12), 12u);
}

// ---- with GPT-2's tokenizer (assets/gpt2, fetched by scripts/bootstrap.sh) ----

class WithGpt2 : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = resolve_tokenizer_dir("gpt2");
    if (!std::filesystem::exists(dir + "/encoder.json")) {
      GTEST_SKIP() << "GPT-2's tokenizer files are not in " << dir << " (scripts/fetch_assets.sh)";
    }
    static const BpeTokenizer loaded = BpeTokenizer::load(dir).value_or_throw();
    tok = &loaded;
  }
  std::vector<int32_t> encode(std::string_view s) const { return tok->encode(s); }
  const BpeTokenizer* tok = nullptr;
};

std::string varied_text(int lines) {
  const char* words[] = {"the", "Weft", "don't", "3.14", "naïve",        "中文", "--",  "x",
                         "\t",  "  ",   "it's",  "2024", "\xc2\xa0nbsp", "end.", "(a)", "Ω"};
  std::string text;
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u, state >> 8; };
  for (int i = 0; i < lines; ++i) {
    const int n = static_cast<int>(next() % 14);
    if (next() % 5 == 0) text += " ";
    for (int k = 0; k < n; ++k) {
      text += words[next() % 16];
      if (k + 1 < n ? next() % 4 != 0 : next() % 6 == 0) text += " ";  // some trailing spaces
    }
    text += (next() % 9 == 0) ? "\n\n" : "\n";
  }
  return text;
}

TEST_F(WithGpt2, NaiveCutsAtANewlineWouldChangeTheIds) {
  // Why find_cut() wants non-space on both sides: "\n\n" is one token, and a cut between the
  // two newlines (the left one has a solid neighbour, the right one not) splits it.
  auto whole = encode("a\n\n\nb");
  auto left = encode("a\n"), right = encode("\n\nb");
  left.insert(left.end(), right.begin(), right.end());
  EXPECT_NE(whole, left);
}

TEST_F(WithGpt2, CutPointsEncodeExactlyLikeTheWhole) {
  const std::string text = varied_text(4000);
  const auto whole = encode(text);
  int cuts = 0;
  auto solid = [](char c) { return static_cast<unsigned char>(c) > 0x20; };
  for (size_t lo = 1; lo + 2000 < text.size(); lo += 997) {
    const size_t p = find_cut(text, lo, lo + 1000);
    ASSERT_TRUE(text[p - 1] == '\n' && solid(text[p - 2]) && solid(text[p]))
        << "no ideal cut in [" << lo << ", " << lo + 1000 << "]";
    auto left = encode(std::string_view(text).substr(0, p));
    const auto right = encode(std::string_view(text).substr(p));
    left.insert(left.end(), right.begin(), right.end());
    ASSERT_EQ(left, whole) << "cut at " << p;
    ++cuts;
  }
  EXPECT_GT(cuts, 50);
}

TEST_F(WithGpt2, PreprocessedLongDocumentEqualsTheWholeEncoding) {
  TempDir dir;
  const std::string text = varied_text(20000);
  write_file(dir.path("in.txt"), text);
  PreprocessOptions o;
  o.input = dir.path("in.txt");
  o.output = dir.path("out");
  o.tokenizer = "gpt2";
  o.workers = 3;
  o.progress = false;
  o.piece_bytes = 4096;  // dozens of pieces
  const auto stats = preprocess(o).value_or_throw();
  auto expected = encode(text);
  expected.push_back(tok->eot_id());
  EXPECT_EQ(tokens_of(dir.path("out")), expected);
  EXPECT_EQ(stats.documents, 1);
  auto ds = open_token_dataset(dir.path("out")).value_or_throw();
  EXPECT_EQ(ds->tokenizer(), "gpt2");
  EXPECT_EQ(ds->vocab_size(), 50257);
  EXPECT_TRUE(
      check_vocabulary(*ds, dir.path("out"), 50257, tok->identity(), tok->vocab_size()).ok());
}

TEST_F(WithGpt2, JsonlDocumentsAreEncodedOneByOne) {
  TempDir dir;
  std::string jsonl;
  std::vector<int32_t> expected;
  const std::string text = varied_text(300);
  for (size_t i = 0; i + 400 < text.size(); i += 400) {
    const std::string doc = text.substr(i, 400);
    if (find_invalid_utf8(doc) != std::string_view::npos) continue;  // cut mid-character
    jsonl += nlohmann::json{{"text", doc}}.dump() + "\n";
    const auto ids = encode(doc);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(50256);
  }
  write_file(dir.path("in.jsonl"), jsonl);
  PreprocessOptions o;
  o.input = dir.path("in.jsonl");
  o.output = dir.path("out");
  o.progress = false;
  o.piece_bytes = 1000;
  preprocess(o).value_or_throw();
  EXPECT_EQ(tokens_of(dir.path("out")), expected);
}

}  // namespace
}  // namespace weft::data
