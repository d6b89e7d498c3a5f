#pragma once
// Flat buffers with named slices: all parameters (or all gradients, or one AdamW moment) of a model
// live in ONE allocation, and each tensor is a named, aligned slice of it. One allocation makes the
// optimizer a single pass over memory and collectives a single call per bucket; the names make
// checkpoints and tests readable.

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
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
  explicit FlatBuffer(BufferLayout layout)
      : layout_(std::move(layout)), own_(layout_.total()), data_(own_.data()) {}
  // A view of memory someone else owns (a backend's: kernels/backend.h), layout.total() floats
  // from `data`, which must outlive the view. data() and ptr() only compute addresses; zero() and
  // view() read or write through them, so they are for host memory only.
  static FlatBuffer view_of(BufferLayout layout, float* data) {
    FlatBuffer b;
    b.layout_ = std::move(layout);
    b.data_ = data;
    b.view_size_ = b.layout_.total();
    return b;
  }
  FlatBuffer(FlatBuffer&& o) noexcept { *this = std::move(o); }
  FlatBuffer& operator=(FlatBuffer&& o) noexcept {
    layout_ = std::move(o.layout_);
    own_ = std::move(o.own_);
    data_ = std::exchange(o.data_, nullptr);
    view_size_ = std::exchange(o.view_size_, 0);
    return *this;
  }

  const BufferLayout& layout() const { return layout_; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t size() const { return own_.size() > 0 ? own_.size() : view_size_; }
  // The bytes this buffer owns (0 for a view).
  int64_t bytes() const { return own_.bytes(); }
  void zero() {
    if (size() > 0) std::fill_n(data_, size(), 0.0f);
  }

  float* ptr(const std::string& name) { return data_ + layout_.at(name).offset; }
  const float* ptr(const std::string& name) const { return data_ + layout_.at(name).offset; }
  TensorView view(const std::string& name) {
    const auto& s = layout_.at(name);
    return TensorView{data_ + s.offset, s.shape};
  }

 private:
  BufferLayout layout_;
  AlignedBuffer<float> own_;
  float* data_ = nullptr;
  int64_t view_size_ = 0;
};

}  // namespace weft
