#pragma once
// Reading a whole (small) text file: configs, presets, metadata. Writes go through
// pending_file.h (temporary name + rename).

#include <optional>
#include <string>

namespace weft {

// The file's contents; nullopt when it cannot be opened or read, or is not a regular file (a
// FIFO would block, a device might never end).
std::optional<std::string> read_text_file(const std::string& path);

}  // namespace weft
