// The safetensors reader and writer: a round trip; the exact bytes of a tiny file against the
// published format (8-byte little-endian header length, JSON header padded with spaces to 8 bytes,
// then the buffer); F16 and BF16 widened to float; and every kind of damage is an error naming the
// file.

#include "weft/checkpoint/safetensors.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "data/temp_dir.h"

namespace weft::checkpoint {
namespace {

using weft::testing::read_file;
using weft::testing::TempDir;
using weft::testing::write_file;

// A file image: the length prefix, the header as given (unpadded), the buffer.
std::string image(const std::string& header, const std::string& buffer) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + buffer;
}

std::string floats(std::initializer_list<float> v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

// The problems of parsing `bytes`, one string; "" when it parses.
std::string problems(const std::string& bytes) {
  auto r = parse_safetensors(bytes, "bad.safetensors");
  return r.ok() ? "" : r.status().message();
}

TEST(Safetensors, ATinyFileHasExactlyTheBytesOfThePublishedFormat) {
  TempDir dir;
  const std::vector<float> a = {1.0f, -2.0f}, b = {0.5f};
  const std::vector<SafetensorsInput> tensors = {{"a", {2}, a.data()}, {"b", {1, 1}, b.data()}};
  ASSERT_TRUE(write_safetensors(dir.path("t.safetensors"), tensors, {{"format", "pt"}}).ok());

  // Written out by hand from the format's description: N = 144 = 0x90 (141 bytes of JSON and 3
  // spaces of padding), then the JSON, then 1.0f, -2.0f and 0.5f as little-endian IEEE floats.
  std::string expected("\x90\x00\x00\x00\x00\x00\x00\x00", 8);
  expected +=
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[8,12]}}"
      "   ";
  expected += std::string("\x00\x00\x80\x3f", 4);  //  1.0f
  expected += std::string("\x00\x00\x00\xc0", 4);  // -2.0f
  expected += std::string("\x00\x00\x00\x3f", 4);  //  0.5f
  EXPECT_EQ(read_file(dir.path("t.safetensors")), expected);
  EXPECT_EQ(dir.files(), std::set<std::string>{"t.safetensors"});  // no temporary left behind
}

TEST(Safetensors, WhatIsWrittenReadsBackWithItsNamesShapesMetadataAndValues) {
  TempDir dir;
  std::vector<float> w(6), e;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 1.0f;
  const std::vector<SafetensorsInput> tensors = {
      {"layer.weight", {2, 3}, w.data()}, {"empty", {0, 4}, nullptr}, {"scalar", {}, w.data()}};
  ASSERT_TRUE(write_safetensors(dir.path("m.safetensors"), tensors,
                                {{"format", "pt"}, {"weft.name", "tiny"}})
                  .ok());
  auto r = SafetensorsReader::open(dir.path("m.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const SafetensorsHeader& h = r.value().header();
  EXPECT_EQ(h.data_start() % 8, 0);
  EXPECT_EQ(h.metadata.at("weft.name"), "tiny");
  ASSERT_EQ(h.tensors.size(), 3u);
  const SafetensorsTensor* t = h.find("layer.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, "F32");
  EXPECT_EQ(t->shape, (Shape{2, 3}));
  std::vector<float> back(6);
  ASSERT_TRUE(r.value().read(*t, back.data()).ok());
  EXPECT_EQ(back, w);
  EXPECT_EQ(h.find("empty")->shape, (Shape{0, 4}));
  float scalar = 0;
  ASSERT_TRUE(r.value().read(*h.find("scalar"), &scalar).ok());
  EXPECT_EQ(scalar, w[0]);
}

TEST(Safetensors, HalfAndBfloat16TensorsAreReadAsFloat) {
  TempDir dir;
  // F16 1.0, -2.0, 0.5 and BF16 1.0, -0.5, little-endian.
  const std::string f16("\x00\x3c\x00\xc0\x00\x38", 6), bf16("\x80\x3f\x00\xbf", 4);
  write_file(dir.path("h.safetensors"),
             image("{\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[6,10]},"
                   "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[10,18]}}",
                   f16 + bf16 + std::string(8, '\0')));
  auto r = SafetensorsReader::open(dir.path("h.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<float> h(3), b(2), i(1);
  ASSERT_TRUE(r.value().read(*r.value().header().find("h"), h.data()).ok());
  ASSERT_TRUE(r.value().read(*r.value().header().find("b"), b.data()).ok());
  EXPECT_EQ(h, (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(b, (std::vector<float>{1.0f, -0.5f}));
  Status s = r.value().read(*r.value().header().find("i"), i.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("h.safetensors: tensor 'i' is I64"), std::string::npos) << s.message();
}

TEST(Safetensors, AHeaderLengthThatDoesNotFitTheFileIsAnError) {
  EXPECT_NE(problems("abc").find("bad.safetensors: truncated: 3 bytes"), std::string::npos);
  std::string big = image("{}", "");
  big[0] = 100;  // 100 bytes of header announced, 2 present
  EXPECT_NE(problems(big).find("truncated: the header length is 100 bytes, but only 2"),
            std::string::npos)
      << problems(big);
  std::string huge = image("{}", "");
  huge[4] = 1;  // 2^32 + 2 bytes
  EXPECT_NE(problems(huge).find("over the format's limit of 100000000 bytes"), std::string::npos)
      << problems(huge);
}

TEST(Safetensors, AHeaderThatIsNotAJsonObjectIsAnError) {
  EXPECT_NE(problems(image("{\"a\": ", ""))
                .find("bad.safetensors: the safetensors header is not "
                      "JSON"),
            std::string::npos);
  EXPECT_NE(problems(image("[1, 2]", "")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(problems(image("{\"a\": \"\xff\"}", "")).find("not JSON"), std::string::npos)
      << "invalid UTF-8";
}

TEST(Safetensors, EntriesWithBadFieldsAreErrorsNamingTheTensor) {
  const std::string four = floats({1.0f});
  auto entry = [&](const std::string& body) {
    return problems(image("{\"t\":" + body + "}", four));
  };
  EXPECT_NE(entry("{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}")
                .find("bad.safetensors: tensor 't': unknown dtype 'F33'"),
            std::string::npos);
  EXPECT_NE(entry("{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}")
                .find("shape [-1] holds -1, not a dimension"),
            std::string::npos);
  EXPECT_NE(
      entry("{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}").find("not a dimension"),
      std::string::npos);
  EXPECT_NE(entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}")
                .find("data_offsets must be [begin, end]"),
            std::string::npos);
  EXPECT_NE(entry("{\"dtype\":\"F32\",\"shape\":[1]}").find("data_offsets must be"),
            std::string::npos);
  EXPECT_NE(entry("{\"shape\":[1],\"data_offsets\":[0,4]}").find("dtype is missing"),
            std::string::npos);
  EXPECT_NE(entry("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}")
                .find("unknown field 'x'"),
            std::string::npos);
  EXPECT_NE(entry("[1]").find("tensor 't': the entry is not an object"), std::string::npos);
  EXPECT_NE(problems(image("{\"__metadata__\":{\"format\":1}}", ""))
                .find("__metadata__.format must be a string, not 1"),
            std::string::npos);
}

TEST(Safetensors, OffsetsOutsideTheBufferOrOfTheWrongSizeAreErrors) {
  const std::string eight = floats({1.0f, 2.0f});
  auto one = [&](const std::string& shape, int begin, int end) {
    return problems(image("{\"t\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" +
                              std::to_string(begin) + "," + std::to_string(end) + "]}}",
                          eight));
  };
  EXPECT_EQ(one("[2]", 0, 8), "");
  EXPECT_NE(one("[2]", 0, 12).find("data_offsets [0, 12] do not lie in the 8-byte buffer"),
            std::string::npos);
  EXPECT_NE(one("[2]", 8, 0).find("do not lie in"), std::string::npos);
  EXPECT_NE(one("[3]", 0, 8).find("F32 [3] takes 12 bytes, but data_offsets [0, 8] hold 8"),
            std::string::npos);
  // A shape whose byte count overflows 64 bits.
  EXPECT_NE(one("[4294967296,4294967296]", 0, 8).find("takes more than 2^63 bytes"),
            std::string::npos);
}

TEST(Safetensors, TensorsMustTileTheBufferWithoutGapOverlapOrTrailingBytes) {
  auto two = [](int b0, int e0, int b1, int e1, const std::string& buffer) {
    auto t = [](const char* name, int b, int e) {
      return fmt::format("\"{}\":{{\"dtype\":\"U8\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                         name, e - b, b, e);
    };
    return problems(image(fmt::format("{{{},{}}}", t("x", b0, e0), t("y", b1, e1)), buffer));
  };
  EXPECT_EQ(two(0, 4, 4, 8, "12345678"), "");
  EXPECT_NE(two(0, 4, 2, 6, "123456").find("tensors 'x' and 'y' overlap (bytes [2, 4)"),
            std::string::npos)
      << two(0, 4, 2, 6, "123456");
  EXPECT_NE(two(0, 2, 4, 8, "12345678").find("bytes [2, 4) of the buffer belong to no tensor"),
            std::string::npos);
  EXPECT_NE(two(0, 4, 4, 8, "123456789")
                .find("the tensors end at byte 8 of the buffer, which holds 9 bytes"),
            std::string::npos);
  EXPECT_NE(problems(image("{}", "x")).find("end at byte 0"), std::string::npos);
}

TEST(Safetensors, ATensorNamedTwiceIsAnError) {
  const std::string t = "{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
  EXPECT_NE(
      problems(image("{\"a\":" + t + ",\"a\":" + t + "}", "")).find("tensor 'a' appears twice"),
      std::string::npos);
}

TEST(Safetensors, ATruncatedFileOnDiskIsAnErrorNamingIt) {
  TempDir dir;
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  const std::vector<SafetensorsInput> tensors = {{"a", {3}, a.data()}};
  const std::string path = dir.path("cut.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, {}).ok());
  const std::string whole = read_file(path);
  write_file(path, whole.substr(0, whole.size() - 4));
  auto r = SafetensorsReader::open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path + ": tensor 'a': data_offsets [0, 12] do not lie in the "
                                             "8-byte buffer"),
            std::string::npos)
      << r.status().message();
  write_file(path, whole.substr(0, 20));
  r = SafetensorsReader::open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path + ": truncated"), std::string::npos);
  auto missing = SafetensorsReader::open(dir.path("absent.safetensors"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("absent.safetensors: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace weft::checkpoint
