#pragma once
// The safetensors format (Hugging Face, https://github.com/huggingface/safetensors, README
// "Format"), read and written by weft itself:
//
//   offset  size  field
//        0     8  N, the header length, uint64 little-endian
//        8     N  the header: a UTF-8 JSON object
//                   {"__metadata__": {"format": "pt", ...},            optional, string -> string
//                    "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}
//                 padded with spaces (0x20) so that 8 + N is a multiple of 8
//      8+N  rest  the byte buffer: tensors in row-major little-endian order; data_offsets are
//                 relative to the start of the buffer, END - BEGIN = prod(shape) * dtype size,
//                 and the tensors cover the buffer exactly (no gap, no overlap, nothing after)
//
// The reader checks all of this (as the reference Rust implementation does, including its 100 MB
// bound on N) and reports every problem with the file's name; it converts F32, F16 and BF16 to
// float. The writer writes F32 with the header keys in buffer order, like the reference writer.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/status.h"
#include "weft/tensor/tensor.h"

namespace weft::checkpoint {

// The reference implementation refuses headers larger than this (MAX_HEADER_SIZE).
inline constexpr int64_t kSafetensorsMaxHeader = 100'000'000;
inline constexpr const char* kSafetensorsMetadataKey = "__metadata__";

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // the format's name: "F32", "F16", "BF16", "I64", ...
  int64_t dtype_bytes = 0;
  Shape shape;
  int64_t begin = 0, end = 0;  // bytes, relative to the buffer
};

struct SafetensorsHeader {
  int64_t header_bytes = 0;                     // N
  int64_t buffer_bytes = 0;                     // the file's size minus 8 + N
  std::vector<SafetensorsTensor> tensors;       // in buffer order
  std::map<std::string, std::string> metadata;  // "__metadata__"
  int64_t data_start() const { return 8 + header_bytes; }
  const SafetensorsTensor* find(std::string_view name) const;
};

// Element size of a safetensors dtype name; 0 for a name the format does not define.
int64_t safetensors_dtype_bytes(std::string_view dtype);

// Checks the JSON header (its N bytes, padding included) against a buffer of `buffer_bytes`.
// Problems are prefixed with `origin` (the file name).
Result<SafetensorsHeader> parse_safetensors_header(std::string_view header_json,
                                                   int64_t buffer_bytes, std::string_view origin);
// The same for a whole file image held in memory (length prefix, header and buffer).
Result<SafetensorsHeader> parse_safetensors(std::string_view file_bytes, std::string_view origin);

// A safetensors file on disk: the header is read and checked by open(); tensors are read one at a
// time, so a file larger than memory can be converted tensor by tensor.
class SafetensorsReader {
 public:
  static Result<SafetensorsReader> open(const std::string& path);
  const SafetensorsHeader& header() const { return header_; }
  // Reads tensor `t` into out[numel(t.shape)] as float (F32 as is; F16 and BF16 widened exactly).
  Status read(const SafetensorsTensor& t, float* out) const;

 private:
  std::string path_;
  SafetensorsHeader header_;
};

struct SafetensorsInput {
  std::string name;
  Shape shape;
  const float* data = nullptr;  // numel(shape) floats
};

// Writes `tensors` as F32, in this order, with `metadata` as "__metadata__", atomically (a
// temporary renamed into place; a failure leaves `path` as it was).
Status write_safetensors(const std::string& path, std::span<const SafetensorsInput> tensors,
                         const std::map<std::string, std::string>& metadata);

}  // namespace weft::checkpoint
