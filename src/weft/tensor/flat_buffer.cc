#include "weft/tensor/flat_buffer.h"

#include <fmt/format.h>

#include "weft/core/check.h"

namespace weft {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t BufferLayout::add(const std::string& name, const Shape& shape, int64_t align) {
  WEFT_CHECK(!contains(name), "duplicate slice name '", name, "'");
  WEFT_CHECK(align > 0 && align % kAlignElems == 0, "slice alignment ", align,
             " is not a multiple of ", kAlignElems);
  for (int64_t d : shape) WEFT_CHECK(d > 0, "slice '", name, "' has shape ", shape_str(shape));
  int64_t offset = (total_ + align - 1) / align * align;
  SliceSpec s{name, shape, offset, weft::numel(shape)};
  index_[name] = slices_.size();
  slices_.push_back(s);
  total_ = offset + s.numel;
  return offset;
}

void BufferLayout::pad_to(int64_t align) {
  WEFT_CHECK(align > 0, "alignment ", align);
  total_ = (total_ + align - 1) / align * align;
}

const SliceSpec& BufferLayout::at(const std::string& name) const {
  auto it = index_.find(name);
  WEFT_CHECK(it != index_.end(), "no slice named '", name, "'");
  return slices_[it->second];
}

int64_t BufferLayout::numel() const {
  int64_t n = 0;
  for (const auto& s : slices_) n += s.numel;
  return n;
}

}  // namespace weft
