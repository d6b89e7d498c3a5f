#include "weft/data/llmc_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "data/temp_dir.h"
#include "support/llmc_file.h"
#include "weft/data/token_dataset.h"

namespace weft::data {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

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

// Two documents the way llm.c's tokenizers write them: [eot] + tokens each.
const std::vector<int32_t> kTokens = {50256, 464, 3290, 13, 50256, 40, 716};

TEST(LlmcDataset, RoundTripsAndCountsDocumentsByEndOfText) {
  TempDir dir;
  const auto path = dir.path("shard_000.bin");
  write_llmc_tokens(path, kTokens).throw_if_error();
  auto ds = LlmcDataset::open(path).value_or_throw();
  EXPECT_EQ(ds->num_tokens(), 7);
  EXPECT_EQ(ds->num_documents(), 2);
  std::vector<int32_t> out(7);
  ds->read(0, 7, out.data());
  EXPECT_EQ(out, kTokens);
  EXPECT_EQ(ds->vocab_size(), 50257);  // version 1 means GPT-2 tokens
  EXPECT_EQ(ds->tokenizer(), "gpt2");
  EXPECT_EQ(ds->describe(), "llm.c v1, uint16, 7 tokens, 2 docs, tokenizer gpt2");
}

TEST(LlmcDataset, TextWithoutEndOfTextIsOneDocument) {
  TempDir dir;
  const auto path = dir.path("a.bin");
  write_llmc_tokens(path, std::vector<int32_t>{1, 2, 3}).throw_if_error();
  EXPECT_EQ(LlmcDataset::open(path).value_or_throw()->num_documents(), 1);
  write_llmc_tokens(path, std::vector<int32_t>{}).throw_if_error();
  EXPECT_EQ(LlmcDataset::open(path).value_or_throw()->num_documents(), 0);
}

TEST(LlmcDataset, HeaderBytesMatchLlmc) {
  TempDir dir;
  const auto path = dir.path("a.bin");
  write_llmc_tokens(path, std::vector<int32_t>{258, 7}).throw_if_error();
  const std::string bytes = read_file(path);
  ASSERT_EQ(bytes.size(), 1024u + 4u);
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 2);
  for (int i = 3; i < 256; ++i) ASSERT_EQ(header[i], 0) << i;
  EXPECT_EQ(static_cast<uint8_t>(bytes[1024]), 2);  // 258 = 0x0102, little-endian
  EXPECT_EQ(static_cast<uint8_t>(bytes[1025]), 1);
  EXPECT_EQ(static_cast<uint8_t>(bytes[1026]), 7);
}

TEST(LlmcDataset, OpenTokenDatasetRecognizesTheMagic) {
  TempDir dir;
  const auto path = dir.path("shard.bin");
  write_llmc_tokens(path, kTokens).throw_if_error();
  for (const std::string& p : {path, dir.path("shard")}) {
    auto ds = open_token_dataset(p).value_or_throw();
    EXPECT_EQ(ds->num_documents(), 2) << p;
  }
  // Any name, as long as the magic is llm.c's.
  write_file(dir.path("tokens.dat"), read_file(path));
  EXPECT_EQ(open_token_dataset(dir.path("tokens.dat")).value_or_throw()->num_tokens(), 7);
}

TEST(LlmcDataset, ASidecarOverridesTheVocabulary) {
  TempDir dir;
  const auto path = dir.path("shard.bin");
  write_llmc_tokens(path, std::vector<int32_t>{1, 2, 3, 7}).throw_if_error();
  write_file(dir.path("shard.json"), sidecar_json({"mine", 8, 7, 1, 4, "x.txt", ""}));
  auto ds = open_token_dataset(path).value_or_throw();
  EXPECT_EQ(ds->vocab_size(), 8);
  EXPECT_EQ(ds->tokenizer(), "mine");
  EXPECT_EQ(ds->num_documents(), 1);  // the sidecar's eod (7) counted
}

TEST(LlmcDataset, ReadingAnIdOutsideGpt2sVocabularyThrows) {
  TempDir dir;
  const auto path = dir.path("a.bin");
  write_llmc_tokens(path, std::vector<int32_t>{1, 60000}).throw_if_error();
  auto ds = LlmcDataset::open(path).value_or_throw();
  std::vector<int32_t> out(2);
  try {
    ds->read(0, 2, out.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"a.bin", "token 60000 at position 1", "GPT-2"});
  }
}

class CorruptLlmc : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.path("shard.bin");
    write_llmc_tokens(path, kTokens).throw_if_error();
    bytes = read_file(path);
  }
  std::string reopen_error(const std::string& new_bytes) {
    write_file(path, new_bytes);
    return error_of(LlmcDataset::open(path));
  }
  void set_int(std::string& b, int index, int32_t v) { std::memcpy(b.data() + 4 * index, &v, 4); }
  TempDir dir;
  std::string path, bytes;
};

TEST_F(CorruptLlmc, WrongMagic) {
  std::string bad = bytes;
  set_int(bad, 0, 12345);
  expect_mentions(reopen_error(bad),
                  {"shard.bin", "not an llm.c token file: magic 12345, expected 20240520"});
  set_int(bad, 0, 20240801);
  expect_mentions(reopen_error(bad), {"shard.bin", "LLaMA-3"});
  // The dispatcher, seeing no llm.c magic and no .idx, says both.
  set_int(bad, 0, 12345);
  write_file(path, bad);
  expect_mentions(error_of(open_token_dataset(path)),
                  {"shard.bin", "neither an llm.c token file (magic 12345", "shard.idx"});
}

TEST_F(CorruptLlmc, WrongVersion) {
  std::string bad = bytes;
  set_int(bad, 1, 2);
  expect_mentions(reopen_error(bad), {"shard.bin", "unsupported llm.c token file version 2"});
  write_file(path, bad);
  expect_mentions(error_of(open_token_dataset(path)), {"shard.bin", "version 2"});
}

TEST_F(CorruptLlmc, TruncatedHeader) {
  expect_mentions(reopen_error(bytes.substr(0, 100)),
                  {"shard.bin", "truncated: 100 bytes", "header alone takes 1024"});
}

TEST_F(CorruptLlmc, FewerTokensThanTheHeaderAnnounces) {
  expect_mentions(reopen_error(bytes.substr(0, bytes.size() - 2)),
                  {"shard.bin", "truncated: 1036 bytes", "announces 7 tokens (1038 bytes)"});
}

TEST_F(CorruptLlmc, BytesAfterTheTokens) {
  expect_mentions(reopen_error(bytes + "z"), {"shard.bin", "1 bytes after the 7 tokens"});
}

TEST_F(CorruptLlmc, NegativeCount) {
  std::string bad = bytes;
  set_int(bad, 2, -1);
  expect_mentions(reopen_error(bad), {"shard.bin", "negative token count -1"});
}

TEST(LlmcWriter, RejectsIdsAboveUint16AndLeavesNothing) {
  TempDir dir;
  const auto s = write_llmc_tokens(dir.path("a.bin"), std::vector<int32_t>{1, 70000});
  ASSERT_FALSE(s.ok());
  expect_mentions(s.message(), {"a.bin", "token id 70000 does not fit uint16"});
  EXPECT_TRUE(dir.files().empty());
}

}  // namespace
}  // namespace weft::data
