#pragma once
// Flat buffers with named slices: all parameters (or all gradients, or one AdamW moment) of a model
// live in ONE allocation, and each tensor is a named, aligned slice of it. One allocation makes the
// optimizer a single pass over memory and collectives a single call per bucket; the names make
// checkpoints and tests readable.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "weft/tensor/aligned_buffer.h"
#include "weft/tensor/tensor.h"

namespace weft {

struct SliceSpec {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in elements from the start of the buffer
  int64_t numel = 0;
};

// The names, shapes and offsets of a flat buffer; pure bookkeeping, no memory.
class BufferLayout {
 public:
  // Slices start on a 16-element (64-byte) boundary so vector kernels see aligned rows.
  static constexpr int64_t kAlignElems = 16;

  // Appends a slice; names must be unique. Returns its offset, a multiple of `align` (itself a
  // multiple of kAlignElems).
  int64_t add(const std::string& name, const Shape& shape, int64_t align = kAlignElems);
  // Rounds the total up to a multiple of `align` (room after the last slice).
  void pad_to(int64_t align);
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SliceSpec& at(const std::string& name) const;
  const std::vector<SliceSpec>& slices() const { return slices_; }
  int64_t total() const { return total_; }  // elements including alignment padding
  int64_t numel() const;                    // elements excluding padding

 private:
  std::vector<SliceSpec> slices_;
  std::unordered_map<std::string, size_t> index_;
  int64_t total_ = 0;
};

class FlatBuffer {
 public:
  FlatBuffer() = default;
  explicit FlatBuffer(BufferLayout layout) : layout_(std::move(layout)), data_(layout_.total()) {}

  const BufferLayout& layout() const { return layout_; }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  int64_t size() const { return data_.size(); }
  int64_t bytes() const { return data_.bytes(); }
  void zero() { data_.zero(); }

  float* ptr(const std::string& name) { return data_.data() + layout_.at(name).offset; }
  const float* ptr(const std::string& name) const { return data_.data() + layout_.at(name).offset; }
  TensorView view(const std::string& name) {
    const auto& s = layout_.at(name);
    return TensorView{data_.data() + s.offset, s.shape};
  }

 private:
  BufferLayout layout_;
  AlignedBuffer<float> data_;
};

}  // namespace weft
