#include "weft/checkpoint/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "weft/core/dtype.h"
#include "weft/core/pending_file.h"

namespace weft::checkpoint {
namespace {

// The format is little-endian; so is every machine weft runs on, and the buffers are copied as is.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

using nlohmann::json;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A JSON value as a non-negative int64, or -1 when it is not a non-negative integer that fits.
int64_t as_count(const json& v) {
  if (!v.is_number_unsigned()) return -1;
  const auto u = v.get<uint64_t>();
  return u > static_cast<uint64_t>(kInt64Max) ? -1 : static_cast<int64_t>(u);
}

// prod(shape) * elem_bytes, or -1 when it exceeds int64.
int64_t byte_size(const Shape& shape, int64_t elem_bytes) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = elem_bytes;
  for (int64_t d : shape) {
    if (n > kInt64Max / d) return -1;
    n *= d;
  }
  return n;
}

// Checks one tensor entry; problems go to s (already prefixed with the origin).
void parse_entry(const std::string& origin, const std::string& name, const json& v,
                 int64_t buffer_bytes, SafetensorsHeader& h, Status& s) {
  auto bad = [&](const std::string& problem) {
    s.add(fmt::format("{}: tensor '{}': {}", origin, name, problem));
  };
  if (!v.is_object()) return bad("the entry is not an object");
  for (const auto& [key, unused] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      bad(fmt::format("unknown field '{}' (an entry has dtype, shape and data_offsets)", key));
    }
  }
  SafetensorsTensor t;
  t.name = name;
  bool ok = true;
  if (!v.contains("dtype") || !v["dtype"].is_string()) {
    bad("dtype is missing or not a string");
    ok = false;
  } else {
    t.dtype = v["dtype"].get<std::string>();
    t.dtype_bytes = safetensors_dtype_bytes(t.dtype);
    if (t.dtype_bytes == 0) {
      bad(fmt::format("unknown dtype '{}'", t.dtype));
      ok = false;
    }
  }
  if (!v.contains("shape") || !v["shape"].is_array()) {
    bad("shape is missing or not an array");
    ok = false;
  } else {
    for (const json& d : v["shape"]) {
      const int64_t n = as_count(d);
      if (n < 0) {
        bad(fmt::format("shape {} holds {}, not a dimension", v["shape"].dump(), d.dump()));
        ok = false;
        break;
      }
      t.shape.push_back(n);
    }
  }
  const json* offsets = v.contains("data_offsets") ? &v["data_offsets"] : nullptr;
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 ||
      as_count((*offsets)[0]) < 0 || as_count((*offsets)[1]) < 0) {
    bad("data_offsets must be [begin, end], two byte offsets");
    return;
  }
  t.begin = as_count((*offsets)[0]);
  t.end = as_count((*offsets)[1]);
  if (t.begin > t.end || t.end > buffer_bytes) {
    return bad(fmt::format("data_offsets [{}, {}] do not lie in the {}-byte buffer", t.begin, t.end,
                           buffer_bytes));
  }
  if (!ok) return;
  const int64_t bytes = byte_size(t.shape, t.dtype_bytes);
  if (bytes != t.end - t.begin) {
    return bad(fmt::format("{} {} takes {} bytes, but data_offsets [{}, {}] hold {}", t.dtype,
                           shape_str(t.shape), bytes < 0 ? "more than 2^63" : std::to_string(bytes),
                           t.begin, t.end, t.end - t.begin));
  }
  h.tensors.push_back(std::move(t));
}

// The 8-byte length prefix N of a file of `size` bytes: N must fit the file and the format's bound.
Status check_prefix(uint64_t n, int64_t size, std::string_view origin) {
  if (size < 8) {
    return Status::error(fmt::format(
        "{}: truncated: {} bytes, but a safetensors file starts with an 8-byte header length",
        origin, size));
  }
  if (n > static_cast<uint64_t>(kSafetensorsMaxHeader)) {
    return Status::error(fmt::format(
        "{}: header length {} is over the format's limit of {} bytes (not a safetensors file?)",
        origin, n, kSafetensorsMaxHeader));
  }
  if (n > static_cast<uint64_t>(size - 8)) {
    return Status::error(
        fmt::format("{}: truncated: the header length is {} bytes, but only {} bytes follow it",
                    origin, n, size - 8));
  }
  return {};
}

}  // namespace

const SafetensorsTensor* SafetensorsHeader::find(std::string_view name) const {
  const auto it = std::ranges::find(tensors, name, &SafetensorsTensor::name);
  return it == tensors.end() ? nullptr : &*it;
}

int64_t safetensors_dtype_bytes(std::string_view dtype) {
  // Every dtype of the format (safetensors/src/tensor.rs, enum Dtype).
  static const std::pair<std::string_view, int64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [name, bytes] : kSizes) {
    if (name == dtype) return bytes;
  }
  return 0;
}

Result<SafetensorsHeader> parse_safetensors_header(std::string_view header_json,
                                                   int64_t buffer_bytes, std::string_view origin) {
  const std::string where(origin);
  SafetensorsHeader h;
  h.header_bytes = static_cast<int64_t>(header_json.size());
  h.buffer_bytes = buffer_bytes;
  // nlohmann::json keeps the last of duplicate keys silently; a callback sees every key, so a
  // tensor named twice is caught.
  std::set<std::string> seen;
  std::vector<std::string> duplicates;
  json j;
  try {
    j = json::parse(header_json, [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 &&
          !seen.insert(parsed.get<std::string>()).second) {
        duplicates.push_back(parsed.get<std::string>());
      }
      return true;
    });
  } catch (const json::exception& e) {
    return Status::error(
        fmt::format("{}: the safetensors header is not JSON: {}", where, e.what()));
  }
  if (!j.is_object()) {
    return Status::error(fmt::format("{}: the safetensors header is not a JSON object", where));
  }
  Status s;
  for (const auto& d : duplicates) s.add(fmt::format("{}: tensor '{}' appears twice", where, d));
  for (const auto& [name, v] : j.items()) {
    if (name != kSafetensorsMetadataKey) {
      parse_entry(where, name, v, buffer_bytes, h, s);
      continue;
    }
    if (!v.is_object()) {
      s.add(fmt::format("{}: {} must be an object of strings", where, kSafetensorsMetadataKey));
      continue;
    }
    for (const auto& [key, value] : v.items()) {
      if (!value.is_string()) {
        s.add(fmt::format("{}: {}.{} must be a string, not {}", where, kSafetensorsMetadataKey, key,
                          value.dump()));
      } else {
        h.metadata[key] = value.get<std::string>();
      }
    }
  }
  if (!s.ok()) return s;
  // Buffer order; then the tensors must tile the buffer: each starts where the previous ended.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  int64_t at = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin < at) {
      s.add(fmt::format("{}: tensors '{}' and '{}' overlap (bytes [{}, {}) of the buffer)", where,
                        previous->name, t.name, t.begin, std::min(at, t.end)));
    } else if (t.begin > at) {
      s.add(fmt::format("{}: bytes [{}, {}) of the buffer belong to no tensor (before '{}')", where,
                        at, t.begin, t.name));
    }
    at = std::max(at, t.end);
    previous = &t;
  }
  if (s.ok() && at != buffer_bytes) {
    s.add(fmt::format("{}: the tensors end at byte {} of the buffer, which holds {} bytes", where,
                      at, buffer_bytes));
  }
  if (!s.ok()) return s;
  return h;
}

Result<SafetensorsHeader> parse_safetensors(std::string_view file_bytes, std::string_view origin) {
  const auto size = static_cast<int64_t>(file_bytes.size());
  uint64_t n = 0;
  if (size >= 8) std::memcpy(&n, file_bytes.data(), 8);
  if (Status s = check_prefix(n, size, origin); !s.ok()) return s;
  return parse_safetensors_header(file_bytes.substr(8, n), size - 8 - static_cast<int64_t>(n),
                                  origin);
}

Result<SafetensorsReader> SafetensorsReader::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error(fmt::format("{}: not a regular file", path));
  }
  // Only the length prefix and the header are read here; the buffer stays on disk.
  const auto size = static_cast<int64_t>(st.st_size);
  uint64_t n = 0;
  if (size >= 8 && ::pread(fd, &n, 8, 0) != 8) n = 0;
  Status s = check_prefix(n, size, path);
  std::string header(s.ok() ? n : 0, '\0');
  const int64_t got = read_fully(fd, header.data(), static_cast<int64_t>(header.size()), 8);
  ::close(fd);
  if (!s.ok()) return s;
  if (got != static_cast<int64_t>(header.size())) {
    return Status::error(fmt::format("{}: cannot read the {}-byte header", path, n));
  }
  auto h = parse_safetensors_header(header, size - 8 - static_cast<int64_t>(n), path);
  if (!h.ok()) return h.status();
  SafetensorsReader r;
  r.path_ = path;
  r.header_ = std::move(h).value();
  return r;
}

Status SafetensorsReader::read(const SafetensorsTensor& t, float* out) const {
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
    return Status::error(
        fmt::format("{}: tensor '{}' is {}; weft reads F32, F16 and BF16", path_, t.name, t.dtype));
  }
  const int64_t bytes = t.end - t.begin;
  std::vector<uint16_t> half;
  char* dst = reinterpret_cast<char*>(out);
  if (t.dtype != "F32") {
    half.resize(static_cast<size_t>(bytes / 2));
    dst = reinterpret_cast<char*>(half.data());
  }
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path_, strerror(errno)));
  const int64_t done = read_fully(fd, dst, bytes, header_.data_start() + t.begin);
  ::close(fd);
  if (done != bytes) {
    return Status::error(
        fmt::format("{}: short read of tensor '{}' (the file shrank?)", path_, t.name));
  }
  if (t.dtype == "F16") {
    for (size_t i = 0; i < half.size(); ++i) out[i] = F16{half[i]}.to_float();
  } else if (t.dtype == "BF16") {
    for (size_t i = 0; i < half.size(); ++i) out[i] = BF16{half[i]}.to_float();
  }
  return {};
}

Status write_safetensors(const std::string& path, std::span<const SafetensorsInput> tensors,
                         const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the keys in insertion order: metadata first, then the buffer's order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kSafetensorsMetadataKey] = metadata;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    WEFT_CHECK(t.name != kSafetensorsMetadataKey && !header.contains(t.name), "tensor name '",
               t.name, "' is reserved or used twice");
    const int64_t bytes = numel(t.shape) * int64_t{4};
    WEFT_CHECK(bytes == 0 || t.data != nullptr, "tensor '", t.name, "' has no data");
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  auto file = PendingFile::create(path);
  if (!file.ok()) return file.status();
  PendingFile f = std::move(file).value();
  const uint64_t n = text.size();
  Status s = f.write(&n, 8);
  if (s.ok()) s = f.write(text.data(), static_cast<int64_t>(text.size()));
  for (const auto& t : tensors) {
    const int64_t bytes = numel(t.shape) * int64_t{4};
    if (s.ok() && bytes > 0) s = f.write(t.data, bytes);
  }
  if (s.ok()) s = f.commit();
  return s;
}

}  // namespace weft::checkpoint
