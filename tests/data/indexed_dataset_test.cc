#include "weft/data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "data/temp_dir.h"
#include "weft/data/token_dataset.h"

namespace weft::data {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

// Writes documents (EOD is part of each, as preprocess writes them) and returns the prefix.
std::string write_dataset(const TempDir& dir, const std::vector<std::vector<int32_t>>& docs,
                          TokenType type = TokenType::U16, const std::string& sidecar = "") {
  const std::string prefix = dir.path("data");
  auto writer = IndexedDatasetWriter::create(prefix, type).value_or_throw();
  for (const auto& d : docs) {
    writer.append(d).throw_if_error();
    writer.end_document().throw_if_error();
  }
  writer.finish(sidecar).throw_if_error();
  return prefix;
}

template <typename T>
std::string error_of(const Result<T>& r) {
  EXPECT_FALSE(r.ok()) << "expected an error";
  return r.ok() ? std::string() : r.status().message();
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& p : parts) {
    EXPECT_NE(message.find(p), std::string::npos) << "'" << message << "' lacks '" << p << "'";
  }
}

std::vector<int32_t> read_all(const TokenDataset& ds) {
  std::vector<int32_t> out(static_cast<size_t>(ds.num_tokens()));
  ds.read(0, ds.num_tokens(), out.data());
  return out;
}

const std::vector<std::vector<int32_t>> kDocs = {{5, 6, 9}, {7, 9}, {1, 2, 3, 4, 9}};

TEST(IndexedDataset, RoundTripsDocumentsAsOneStream) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs);
  auto ds = IndexedDataset::open(prefix).value_or_throw();
  EXPECT_EQ(ds->num_tokens(), 10);
  EXPECT_EQ(ds->num_documents(), 3);
  EXPECT_EQ(ds->num_sequences(), 3);
  EXPECT_EQ(ds->token_type(), TokenType::U16);
  EXPECT_EQ(read_all(*ds), (std::vector<int32_t>{5, 6, 9, 7, 9, 1, 2, 3, 4, 9}));
  std::vector<int32_t> middle(4);
  ds->read(4, 4, middle.data());
  EXPECT_EQ(middle, (std::vector<int32_t>{9, 1, 2, 3}));
  EXPECT_EQ(ds->sequence_length(2), 5);
  EXPECT_EQ(ds->sequence_pointer(2), 10);  // bytes: 3 + 2 uint16 tokens before it
  EXPECT_EQ(ds->document_index(0), 0);
  EXPECT_EQ(ds->document_index(3), 3);
  EXPECT_FALSE(ds->vocab_size().has_value());
  EXPECT_EQ(ds->tokenizer(), "");
  EXPECT_EQ(ds->describe(), "megatron mmididx v1, uint16, 10 tokens, 3 docs");
}

TEST(IndexedDataset, StoresInt32WhenAskedAndKeepsLargeIds) {
  TempDir dir;
  const auto prefix = write_dataset(dir, {{70000, 1, 99999}}, TokenType::I32);
  auto ds = IndexedDataset::open(prefix).value_or_throw();
  EXPECT_EQ(ds->token_type(), TokenType::I32);
  EXPECT_EQ(read_all(*ds), (std::vector<int32_t>{70000, 1, 99999}));
}

TEST(IndexedDataset, AnEmptyDatasetIsValid) {
  TempDir dir;
  const auto prefix = write_dataset(dir, {});
  auto ds = IndexedDataset::open(prefix).value_or_throw();
  EXPECT_EQ(ds->num_tokens(), 0);
  EXPECT_EQ(ds->num_documents(), 0);
  EXPECT_EQ(read_file(prefix + ".idx").size(), 34u + 8u);  // header + the leading 0
}

// The layout of megatron/core/datasets/indexed_dataset.py, byte by byte, computed by hand.
TEST(IndexedDataset, IndexBytesMatchMegatronLayout) {
  TempDir dir;
  const auto prefix = write_dataset(dir, {{5, 6, 9}, {7, 9}});
  const std::string idx = read_file(prefix + ".idx");
  const std::vector<uint8_t> expected = {
      'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,  // 0: _INDEX_HEADER
      1,   0,   0,   0,   0,   0,   0,   0,     // 9: version <Q 1
      8,                                        // 17: dtype code <B, 8 = uint16
      2,   0,   0,   0,   0,   0,   0,   0,     // 18: sequence count <Q
      3,   0,   0,   0,   0,   0,   0,   0,     // 26: document count <Q (documents + 1)
      3,   0,   0,   0,                         // 34: sequence_lengths int32[2]
      2,   0,   0,   0,                         //
      0,   0,   0,   0,   0,   0,   0,   0,     // 42: sequence_pointers int64[2], in bytes
      6,   0,   0,   0,   0,   0,   0,   0,     //
      0,   0,   0,   0,   0,   0,   0,   0,     // 58: document_indices int64[3]
      1,   0,   0,   0,   0,   0,   0,   0,     //
      2,   0,   0,   0,   0,   0,   0,   0,     // 82 bytes in all
  };
  ASSERT_EQ(idx.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(static_cast<uint8_t>(idx[i]), expected[i]) << "byte " << i;
  }
  const std::string bin = read_file(prefix + ".bin");
  const std::vector<uint8_t> tokens = {5, 0, 6, 0, 9, 0, 7, 0, 9, 0};  // uint16 little-endian
  ASSERT_EQ(bin.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(static_cast<uint8_t>(bin[i]), tokens[i]);
}

TEST(IndexedDataset, DocumentsLongerThanAnInt32SequenceWouldSplitIntoSequences) {
  // Not exercised at 2^31 tokens (8 GB); the rule is checked through the index instead: a
  // document of n tokens is one sequence, and documents end where their sequences do.
  TempDir dir;
  const auto prefix = dir.path("data");
  auto writer = IndexedDatasetWriter::create(prefix, TokenType::U16).value_or_throw();
  for (int i = 0; i < 5; ++i) writer.append(std::vector<int32_t>{i}).throw_if_error();
  writer.end_document().throw_if_error();
  writer.finish().throw_if_error();
  auto ds = IndexedDataset::open(prefix).value_or_throw();
  EXPECT_EQ(ds->num_sequences(), 1);
  EXPECT_EQ(ds->sequence_length(0), 5);
}

// What Megatron's preprocess_data.py writes with --split-sentences: several sequences per
// document. Built by hand here; the stream is still the .bin in order.
TEST(IndexedDataset, ReadsSeveralSequencesPerDocumentAndMultimodalModes) {
  TempDir dir;
  const std::string prefix = dir.path("mega");
  std::string idx(kMmidIdxMagic, sizeof kMmidIdxMagic);
  auto put = [&idx](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint64_t{1});
  put(uint8_t{4});  // int32
  put(uint64_t{3});
  put(uint64_t{3});
  for (int32_t len : {2, 1, 3}) put(len);
  for (int64_t ptr : {0, 8, 12}) put(ptr);
  for (int64_t d : {0, 2, 3}) put(d);  // document 0 = sequences 0 and 1; document 1 = sequence 2
  write_file(prefix + ".idx", idx);
  std::string bin;
  for (int32_t t : {11, 12, 13, 21, 22, 23}) bin.append(reinterpret_cast<const char*>(&t), 4);
  write_file(prefix + ".bin", bin);
  auto ds = IndexedDataset::open(prefix).value_or_throw();
  EXPECT_EQ(ds->num_documents(), 2);
  EXPECT_EQ(ds->num_sequences(), 3);
  EXPECT_EQ(read_all(*ds), (std::vector<int32_t>{11, 12, 13, 21, 22, 23}));
  // Multimodal datasets append one int8 mode per sequence: accepted, ignored.
  write_file(prefix + ".idx", idx + std::string(3, '\0'));
  EXPECT_EQ(IndexedDataset::open(prefix).value_or_throw()->num_tokens(), 6);
}

TEST(IndexedDatasetWriter, RejectsIdsTheStoredTypeCannotHold) {
  TempDir dir;
  auto writer = IndexedDatasetWriter::create(dir.path("data"), TokenType::U16).value_or_throw();
  const auto s = writer.append(std::vector<int32_t>{1, 65536});
  ASSERT_FALSE(s.ok());
  expect_mentions(s.message(), {"data.bin", "token id 65536", "uint16"});
}

TEST(IndexedDatasetWriter, AbandonedWriterLeavesNothingAndKeepsTheOldDataset) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, "{}\n");
  const std::string old_bin = read_file(prefix + ".bin"), old_idx = read_file(prefix + ".idx");
  const auto before = dir.files();
  {
    auto writer = IndexedDatasetWriter::create(prefix, TokenType::U16).value_or_throw();
    writer.append(std::vector<int32_t>(1000, 3)).throw_if_error();
    writer.end_document().throw_if_error();
    EXPECT_GT(dir.files().size(), before.size());  // its temporaries exist while it works
  }
  EXPECT_EQ(dir.files(), before);
  EXPECT_EQ(read_file(prefix + ".bin"), old_bin);
  EXPECT_EQ(read_file(prefix + ".idx"), old_idx);
}

TEST(IndexedDatasetWriter, WritesTheSidecarWithTheData) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, "{\"x\": 1}\n");
  EXPECT_EQ(read_file(prefix + ".json"), "{\"x\": 1}\n");
  EXPECT_EQ(dir.files(), (std::set<std::string>{"data.bin", "data.idx", "data.json"}));
}

TEST(IndexedDatasetWriter, FailsClearlyWhenTheOutputDirectoryIsMissing) {
  TempDir dir;
  const auto r = IndexedDatasetWriter::create(dir.path("no/such/dir/data"), TokenType::U16);
  expect_mentions(error_of(r),
                  {"no/such/dir/data.bin", "cannot create", "No such file or directory"});
}

// ---- corruption: every error names the file and the problem ----

class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix = write_dataset(dir, kDocs);
    idx = read_file(prefix + ".idx");
  }
  std::string reopen_error(const std::string& new_idx) {
    write_file(prefix + ".idx", new_idx);
    return error_of(IndexedDataset::open(prefix));
  }
  TempDir dir;
  std::string prefix, idx;
};

TEST_F(CorruptIndex, WrongMagic) {
  std::string bad = idx;
  bad[0] = 'X';
  expect_mentions(reopen_error(bad),
                  {"data.idx", "not a Megatron indexed dataset index", "XMIDIDX\\x00\\x00"});
}

TEST_F(CorruptIndex, WrongVersion) {
  std::string bad = idx;
  bad[9] = 2;
  expect_mentions(reopen_error(bad), {"data.idx", "unsupported MMIDIDX version 2"});
}

TEST_F(CorruptIndex, UnknownDtypeCode) {
  std::string bad = idx;
  bad[17] = 9;
  expect_mentions(reopen_error(bad), {"data.idx", "unknown dtype code 9"});
  bad[17] = 7;
  expect_mentions(reopen_error(bad), {"data.idx", "dtype code 7 (float32) holds no token ids"});
}

TEST_F(CorruptIndex, TruncatedHeader) {
  expect_mentions(reopen_error(idx.substr(0, 20)),
                  {"data.idx", "truncated: 20 bytes", "header alone takes 34"});
}

TEST_F(CorruptIndex, TruncatedArrays) {
  expect_mentions(
      reopen_error(idx.substr(0, idx.size() - 8)),
      {"data.idx", "truncated", "3 sequences and 4 document index entries", "need 102 bytes"});
}

TEST_F(CorruptIndex, AbsurdCountsAreTruncationNotACrash) {
  std::string bad = idx;
  std::memset(bad.data() + 18, 0xff, 8);  // 2^64 - 1 sequences
  expect_mentions(reopen_error(bad), {"data.idx", "truncated", "far more"});
}

TEST_F(CorruptIndex, TrailingBytes) {
  expect_mentions(reopen_error(idx + "xx"), {"data.idx", "2 unexpected bytes"});
}

TEST_F(CorruptIndex, PointersThatDoNotFollowTheLengths) {
  std::string bad = idx;
  const int64_t wrong = 8;
  std::memcpy(bad.data() + 34 + 12 + 8, &wrong, 8);  // sequence 1 should start at byte 6
  expect_mentions(reopen_error(bad),
                  {"data.idx", "sequence 1 starts at byte 8 of the .bin, expected 6"});
}

TEST_F(CorruptIndex, DocumentIndexNotEndingAtTheSequenceCount) {
  std::string bad = idx;
  const int64_t wrong = 2;
  std::memcpy(bad.data() + 34 + 36 + 24, &wrong, 8);  // last entry: 2 instead of 3
  expect_mentions(reopen_error(bad),
                  {"data.idx", "ends at sequence 2, not at the sequence count 3"});
}

TEST_F(CorruptIndex, BinShorterThanThePointersSay) {
  const std::string bin = read_file(prefix + ".bin");
  write_file(prefix + ".bin", bin.substr(0, bin.size() - 4));
  expect_mentions(error_of(IndexedDataset::open(prefix)),
                  {"data.bin", "truncated: 16 bytes", "data.idx", "10 uint16 tokens (20 bytes)"});
}

TEST_F(CorruptIndex, BinLongerThanThePointersSay) {
  write_file(prefix + ".bin", read_file(prefix + ".bin") + "ab");
  expect_mentions(error_of(IndexedDataset::open(prefix)),
                  {"data.bin", "22 bytes", "do not belong together"});
}

TEST_F(CorruptIndex, MissingBin) {
  std::filesystem::remove(prefix + ".bin");
  expect_mentions(error_of(IndexedDataset::open(prefix)),
                  {"data.bin", "cannot open", "No such file or directory"});
  expect_mentions(error_of(open_token_dataset(prefix)), {"data.bin", "cannot open"});
}

TEST_F(CorruptIndex, MissingIdx) {
  std::filesystem::remove(prefix + ".idx");
  expect_mentions(error_of(IndexedDataset::open(prefix)), {"data.idx", "cannot open"});
  // Through the dispatcher: a lone .bin that is not llm.c's is named as such.
  expect_mentions(error_of(open_token_dataset(prefix)),
                  {"data.bin", "neither an llm.c token file", "data.idx does not exist"});
}

// ---- open_token_dataset and the sidecar ----

std::string sidecar_text(int vocab, int64_t docs, int64_t tokens, int eod = 9) {
  Sidecar s{"test-tok", vocab, eod, docs, tokens, "corpus.txt", ""};
  return sidecar_json(s);
}

TEST(OpenTokenDataset, FindsTheDatasetByPrefixOrEitherFile) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, sidecar_text(10, 3, 10));
  for (const std::string& path : {prefix, prefix + ".bin", prefix + ".idx"}) {
    auto ds = open_token_dataset(path).value_or_throw();
    EXPECT_EQ(ds->num_tokens(), 10) << path;
    EXPECT_EQ(ds->vocab_size(), 10);
    EXPECT_EQ(ds->tokenizer(), "test-tok");
    EXPECT_EQ(read_all(*ds), (std::vector<int32_t>{5, 6, 9, 7, 9, 1, 2, 3, 4, 9}));
  }
}

TEST(OpenTokenDataset, NamesWhatItLookedFor) {
  TempDir dir;
  expect_mentions(error_of(open_token_dataset(dir.path("nothing"))),
                  {"nothing: no such dataset", "nothing.bin", "nothing.idx"});
  write_file(dir.path("notes.md"), "hello");
  expect_mentions(error_of(open_token_dataset(dir.path("notes.md"))), {"notes.md: not a dataset"});
}

TEST(OpenTokenDataset, ASidecarFromAnotherDatasetIsAnError) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, sidecar_text(10, 3, 11));
  expect_mentions(error_of(open_token_dataset(prefix)),
                  {"data.json describes 11 tokens in 3 documents", "data.bin holds 10 tokens",
                   "belongs to another dataset"});
}

TEST(OpenTokenDataset, AVocabularyLargerThanTheStoredTypeIsAMismatch) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, sidecar_text(100000, 3, 10));
  expect_mentions(
      error_of(open_token_dataset(prefix)),
      {"vocabulary mismatch", "data.json says vocab_size=100000", "data.bin", "uint16"});
}

TEST(OpenTokenDataset, ABrokenSidecarIsNamed) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, "{\"tokenizer\": 3,");
  expect_mentions(error_of(open_token_dataset(prefix)), {"data.json", "not valid JSON"});
  write_file(prefix + ".json", "{\"tokenizer\": 3}");
  const auto message = error_of(open_token_dataset(prefix));
  expect_mentions(message, {"data.json: field \"tokenizer\" must be a string",
                            "data.json: missing field \"vocab_size\""});
}

TEST(OpenTokenDataset, ReadingAnIdOutsideTheVocabularyThrowsNamingTheFile) {
  TempDir dir;
  // ids up to 9 with a vocabulary of 8: the sidecar's counts match, the ids do not fit
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, sidecar_text(8, 3, 10, /*eod=*/7));
  auto ds = open_token_dataset(prefix).value_or_throw();
  std::vector<int32_t> out(10);
  ds->read(5, 4, out.data());  // 1 2 3 4: fine
  try {
    ds->read(0, 3, out.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"data.bin", "token 9 at position 2", "[0, 8)", "data.json"});
  }
}

TEST(CheckVocabulary, AcceptsAgreement) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, sidecar_text(10, 3, 10));
  auto ds = open_token_dataset(prefix).value_or_throw();
  EXPECT_TRUE(check_vocabulary(*ds, prefix, 10, "test-tok", 10).ok());
  EXPECT_TRUE(check_vocabulary(*ds, prefix, 128).ok());  // a model may pad its vocabulary
}

TEST(CheckVocabulary, NamesEachMismatch) {
  TempDir dir;
  const auto prefix = write_dataset(dir, kDocs, TokenType::U16, sidecar_text(10, 3, 10));
  auto ds = open_token_dataset(prefix).value_or_throw();
  const auto model = check_vocabulary(*ds, prefix, 8);
  expect_mentions(model.message(), {"vocabulary mismatch",
                                    "data was tokenized with a vocabulary "
                                    "of 10 (test-tok)",
                                    "model's vocab_size=8"});
  const auto tokenizer = check_vocabulary(*ds, prefix, 50257, "gpt2", 50257);
  expect_mentions(tokenizer.message(),
                  {"tokenizer mismatch", "tokenized with test-tok", "this run uses gpt2"});
  const auto tokenizer_vocab = check_vocabulary(*ds, prefix, 64, "test-tok", 12);
  expect_mentions(tokenizer_vocab.message(), {"vocabulary of 10, but tokenizer test-tok has 12"});
  const auto too_big = check_vocabulary(*ds, prefix, 10, "test-tok", 11);
  EXPECT_EQ(too_big.problems().size(), 2u) << too_big.message();
}

}  // namespace
}  // namespace weft::data
