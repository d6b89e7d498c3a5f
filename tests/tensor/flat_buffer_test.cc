// Flat buffers with named slices: aligned offsets, bookkeeping, lookups by name, and the
// 64-byte aligned, zeroed allocation underneath.

#include "weft/tensor/flat_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "weft/tensor/aligned_buffer.h"
#include "weft/tensor/tensor.h"

namespace weft {
namespace {

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

BufferLayout small_layout() {
  BufferLayout layout;
  layout.add("wte", {5, 7});   // 35 elements
  layout.add("ln.b", {3});     // 3 elements
  layout.add("fc.w", {4, 4});  // 16 elements
  layout.add("fc.b", {1});
  return layout;
}

TEST(Shape, NumelIsTheProductOfTheDims) {
  EXPECT_EQ(numel({768, 2304}), 768 * 2304);
  EXPECT_EQ(numel({7}), 7);
  EXPECT_EQ(numel({}), 1);  // a scalar
  EXPECT_EQ(shape_str({768, 2304}), "[768, 2304]");
}

TEST(BufferLayout, StartsEverySliceOnASixteenElementBoundary) {
  BufferLayout layout = small_layout();
  ASSERT_EQ(layout.slices().size(), 4u);
  EXPECT_EQ(layout.at("wte").offset, 0);
  EXPECT_EQ(layout.at("ln.b").offset, 48);  // 35 rounded up
  EXPECT_EQ(layout.at("fc.w").offset, 64);  // 48 + 3 rounded up
  EXPECT_EQ(layout.at("fc.b").offset, 80);  // 64 + 16 is already aligned
  for (const auto& s : layout.slices()) EXPECT_EQ(s.offset % BufferLayout::kAlignElems, 0);
}

TEST(BufferLayout, AddReturnsTheOffset) {
  BufferLayout layout;
  EXPECT_EQ(layout.add("a", {1}), 0);
  EXPECT_EQ(layout.add("b", {16}), 16);
  EXPECT_EQ(layout.add("c", {2, 3}), 32);
}

TEST(BufferLayout, TotalIncludesPaddingAndNumelDoesNot) {
  BufferLayout layout = small_layout();
  EXPECT_EQ(layout.total(), 81);  // last slice ends at 80 + 1; no trailing padding
  EXPECT_EQ(layout.numel(), 35 + 3 + 16 + 1);
  EXPECT_EQ(BufferLayout{}.total(), 0);
  EXPECT_EQ(BufferLayout{}.numel(), 0);
}

TEST(BufferLayout, RecordsNameShapeAndNumelInOrder) {
  BufferLayout layout = small_layout();
  const auto& s = layout.slices()[2];
  EXPECT_EQ(s.name, "fc.w");
  EXPECT_EQ(s.shape, (Shape{4, 4}));
  EXPECT_EQ(s.numel, 16);
  EXPECT_TRUE(layout.contains("fc.w"));
  EXPECT_FALSE(layout.contains("fc"));
}

TEST(BufferLayout, RejectsDuplicateNames) {
  BufferLayout layout = small_layout();
  const std::string msg = error_of([&] { layout.add("fc.w", {2}); });
  EXPECT_NE(msg.find("duplicate slice name 'fc.w'"), std::string::npos) << msg;
  EXPECT_EQ(layout.slices().size(), 4u);
  EXPECT_EQ(layout.total(), 81);
}

TEST(BufferLayout, RejectsNonPositiveDims) {
  BufferLayout layout;
  EXPECT_THROW(layout.add("zero", {4, 0}), Error);
  EXPECT_THROW(layout.add("negative", {-1}), Error);
  const std::string msg = error_of([&] { layout.add("w", {3, 0, 2}); });
  EXPECT_NE(msg.find("slice 'w' has shape [3, 0, 2]"), std::string::npos) << msg;
  EXPECT_TRUE(layout.slices().empty());
  EXPECT_EQ(layout.total(), 0);
}

TEST(BufferLayout, UnknownNameErrorNamesTheSlice) {
  BufferLayout layout = small_layout();
  const std::string msg = error_of([&] { (void)layout.at("h.0.attn.w"); });
  EXPECT_NE(msg.find("no slice named 'h.0.attn.w'"), std::string::npos) << msg;
}

TEST(FlatBuffer, AllocatesTheLayoutTotalZeroInitialized) {
  FlatBuffer buf(small_layout());
  ASSERT_EQ(buf.size(), 81);
  EXPECT_EQ(buf.bytes(), 81 * 4);
  EXPECT_TRUE(aligned64(buf.data()));
  for (int64_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf.data()[i], 0.0f) << i;
}

TEST(FlatBuffer, PointsIntoTheAllocationByName) {
  FlatBuffer buf(small_layout());
  EXPECT_EQ(buf.ptr("wte"), buf.data());
  EXPECT_EQ(buf.ptr("fc.w"), buf.data() + 64);
  const FlatBuffer& cbuf = buf;
  EXPECT_EQ(cbuf.ptr("ln.b"), cbuf.data() + 48);
  for (const auto& s : buf.layout().slices()) EXPECT_TRUE(aligned64(buf.ptr(s.name))) << s.name;
}

TEST(FlatBuffer, ViewCarriesPointerAndShape) {
  FlatBuffer buf(small_layout());
  TensorView v = buf.view("wte");
  EXPECT_EQ(v.data, buf.data());
  EXPECT_EQ(v.shape, (Shape{5, 7}));
  EXPECT_EQ(v.numel(), 35);
  v.data[34] = 2.5f;
  EXPECT_EQ(buf.data()[34], 2.5f);
}

TEST(FlatBuffer, WritesThroughOneSliceDoNotTouchAnother) {
  FlatBuffer buf(small_layout());
  float* w = buf.ptr("wte");
  for (int i = 0; i < 35; ++i) w[i] = 1.0f;
  float* b = buf.ptr("ln.b");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b[i], 0.0f);
  for (int64_t i = 35; i < 48; ++i) EXPECT_EQ(buf.data()[i], 0.0f) << "padding " << i;
}

TEST(FlatBuffer, UnknownNameErrorNamesTheSlice) {
  FlatBuffer buf(small_layout());
  std::string msg = error_of([&] { (void)buf.ptr("nope"); });
  EXPECT_NE(msg.find("no slice named 'nope'"), std::string::npos) << msg;
  msg = error_of([&] { (void)buf.view("also.nope"); });
  EXPECT_NE(msg.find("no slice named 'also.nope'"), std::string::npos) << msg;
}

TEST(FlatBuffer, ZeroClearsEveryElement) {
  FlatBuffer buf(small_layout());
  for (int64_t i = 0; i < buf.size(); ++i) buf.data()[i] = 1.0f + static_cast<float>(i);
  buf.zero();
  for (int64_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf.data()[i], 0.0f) << i;
}

TEST(AlignedBuffer, IsSixtyFourByteAlignedAndZeroed) {
  for (int64_t n : {1, 3, 16, 17, 1000, 100003}) {
    AlignedBuffer<float> buf(n);
    ASSERT_EQ(buf.size(), n);
    EXPECT_EQ(buf.bytes(), n * 4);
    EXPECT_TRUE(aligned64(buf.data())) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], 0.0f) << n << " " << i;
  }
  AlignedBuffer<uint16_t> small(5);
  EXPECT_TRUE(aligned64(small.data()));
  EXPECT_EQ(small.bytes(), 10);
}

TEST(AlignedBuffer, EmptyBufferHasNoStorage) {
  AlignedBuffer<float> a;
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0);
  AlignedBuffer<float> b(0);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.size(), 0);
  b.zero();  // no-op on an empty buffer
}

TEST(AlignedBuffer, RejectsNegativeSizes) { EXPECT_THROW(AlignedBuffer<float>(-1), Error); }

TEST(AlignedBuffer, MoveConstructionTransfersOwnership) {
  AlignedBuffer<float> a(10);
  a[3] = 7.0f;
  float* p = a.data();
  AlignedBuffer<float> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 10);
  EXPECT_EQ(b[3], 7.0f);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0);
}

TEST(AlignedBuffer, MoveAssignmentTransfersOwnership) {
  AlignedBuffer<float> a(10);
  a[9] = 1.5f;
  float* p = a.data();
  AlignedBuffer<float> b(4);
  b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 10);
  EXPECT_EQ(b[9], 1.5f);
  b = AlignedBuffer<float>(3);  // the old storage is released, not leaked or freed twice
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b[2], 0.0f);
}

TEST(AlignedBuffer, ZeroClearsTheContents) {
  AlignedBuffer<float> buf(33);
  for (int64_t i = 0; i < 33; ++i) buf[i] = 3.0f;
  buf.zero();
  for (int64_t i = 0; i < 33; ++i) ASSERT_EQ(buf[i], 0.0f);
}

TEST(FlatBuffer, IsMovable) {
  FlatBuffer a(small_layout());
  a.ptr("fc.b")[0] = 4.0f;
  FlatBuffer b = std::move(a);
  EXPECT_EQ(b.ptr("fc.b")[0], 4.0f);
  EXPECT_EQ(b.size(), 81);
}

}  // namespace
}  // namespace weft
