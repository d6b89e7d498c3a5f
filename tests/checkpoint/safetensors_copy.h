#pragma once
// A safetensors file's tensors held in memory as inputs for write_safetensors, so that a test can
// rewrite an export with tensors dropped, reshaped or added.

#include <string>
#include <vector>

#include "weft/checkpoint/safetensors.h"

namespace weft::test {

struct SafetensorsCopy {
  std::vector<checkpoint::SafetensorsTensor> tensors;  // the file's, in buffer order
  std::vector<std::vector<float>> data;                // parallel to tensors
  // The tensors as they were, for write_safetensors (pointing into data).
  std::vector<checkpoint::SafetensorsInput> inputs() const {
    std::vector<checkpoint::SafetensorsInput> in;
    for (size_t i = 0; i < tensors.size(); ++i) {
      in.push_back({tensors[i].name, tensors[i].shape, data[i].data()});
    }
    return in;
  }
};

inline SafetensorsCopy read_safetensors_copy(const std::string& path) {
  const checkpoint::SafetensorsReader st =
      checkpoint::SafetensorsReader::open(path).value_or_throw("open");
  SafetensorsCopy c;
  c.tensors = st.header().tensors;
  for (const checkpoint::SafetensorsTensor& t : c.tensors) {
    c.data.emplace_back(static_cast<size_t>(numel(t.shape)));
    st.read(t, c.data.back().data()).throw_if_error("read");
  }
  return c;
}

}  // namespace weft::test
