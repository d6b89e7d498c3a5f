// read_text_file: a regular file's contents; nothing (at once) for what is missing, a directory,
// or a FIFO, which would block a reader forever.

#include "weft/core/text_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace weft {
namespace {
namespace fs = std::filesystem;

TEST(TextFile, ReadsRegularFilesOnly) {
  const fs::path dir = fs::temp_directory_path() / ("weft_text_file_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "a.toml").string(), fifo = (dir / "fifo").string();
  std::ofstream(file) << "x = 1\n";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(read_text_file(file).value_or("?"), "x = 1\n");
  EXPECT_FALSE(read_text_file((dir / "missing").string()).has_value());
  EXPECT_FALSE(read_text_file(dir.string()).has_value());
  EXPECT_FALSE(read_text_file(fifo).has_value());  // returns: nobody writes to it
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weft
