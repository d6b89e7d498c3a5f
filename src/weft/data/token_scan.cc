#include "weft/data/token_scan.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "weft/core/clock.h"
#include "weft/core/pending_file.h"
#include "weft/core/text_file.h"
#include "weft/data/file_io.h"

namespace weft::data {
namespace {

namespace fs = std::filesystem;

// Tokens per task: large enough that a task's bookkeeping is noise, small enough that the
// threads end together.
constexpr int64_t kChunk = int64_t{1} << 22;
constexpr int64_t kSampleBytes = int64_t{1} << 20;  // checksummed at each end of a file

// "<size>:<mtime ns>:<xxh3 of the first and last MiB>" of one file, or "" when unreadable.
std::string file_key(const std::string& path) {
  const Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat st {};
  if (file.fd < 0 || ::fstat(file.fd, &st) != 0) return "";
  const int64_t size = st.st_size;
  std::vector<char> buf(static_cast<size_t>(std::min(size, 2 * kSampleBytes)));
  const int64_t head = std::min(size, kSampleBytes);
  const int64_t tail = std::min(size - head, kSampleBytes);
  if (::pread(file.fd, buf.data(), static_cast<size_t>(head), 0) != head ||
      ::pread(file.fd, buf.data() + head, static_cast<size_t>(tail), size - tail) != tail) {
    return "";
  }
  const int64_t ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return fmt::format("{}:{}:{:016x}", size, ns, XXH3_64bits(buf.data(), buf.size()));
}

// Where the verdict for `files` is kept: beside the first file when its directory is writable,
// else in `fallback_dir` under a name made from the first file's absolute path.
std::string cache_path(const std::vector<std::string>& files, const std::string& fallback_dir) {
  const fs::path first = fs::absolute(files.front()).lexically_normal();
  const fs::path dir = first.parent_path();
  if (::access(dir.c_str(), W_OK | X_OK) == 0) return first.string() + ".ids.json";
  if (fallback_dir.empty()) return "";
  const std::string abs = first.string();
  return (fs::path(fallback_dir) /
          fmt::format("dataset-ids-{:016x}.json", XXH3_64bits(abs.data(), abs.size())))
      .string();
}

}  // namespace

TokenIdRange scan_token_ids(const TokenDataset& d, int threads) {
  TokenIdRange r;
  r.tokens = d.num_tokens();
  if (r.tokens == 0) return r;
  const int64_t chunks = (r.tokens + kChunk - 1) / kChunk;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, chunks));
  std::vector<std::pair<int64_t, int64_t>> found(static_cast<size_t>(chunks));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t c = next++; c < chunks; c = next++) {
      const int64_t at = c * kChunk;
      found[static_cast<size_t>(c)] = d.id_min_max(at, std::min(kChunk, r.tokens - at));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  r.min = found.front().first;
  r.max = found.front().second;
  for (const auto& [lo, hi] : found) {
    r.min = std::min(r.min, lo);
    r.max = std::max(r.max, hi);
  }
  return r;
}

CachedScan scan_token_ids_cached(const TokenDataset& d, const std::string& fallback_dir,
                                 int threads) {
  CachedScan out;
  const std::vector<std::string> files = d.files();
  nlohmann::json key = nlohmann::json::array();
  for (const std::string& f : files) key.push_back({{"file", f}, {"key", file_key(f)}});
  if (!files.empty()) out.cache_path = cache_path(files, fallback_dir);
  if (!out.cache_path.empty()) {
    if (auto text = read_text_file(out.cache_path)) {
      try {
        const auto j = nlohmann::json::parse(*text);
        if (j.at("files") == key) {
          out.range.min = j.at("min").get<int64_t>();
          out.range.max = j.at("max").get<int64_t>();
          out.range.tokens = j.at("tokens").get<int64_t>();
          out.cached = out.range.tokens == d.num_tokens();
          if (out.cached) return out;
        }
      } catch (const nlohmann::json::exception&) {
        // a cache of another version or a torn write: scan again and rewrite it
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  out.range = scan_token_ids(d, threads);
  out.seconds = seconds_since(t0);
  if (!out.cache_path.empty()) {
    const nlohmann::json j = {{"files", key},
                              {"min", out.range.min},
                              {"max", out.range.max},
                              {"tokens", out.range.tokens},
                              {"written_by", "weft (data/token_scan.h)"}};
    if (!write_file_atomic(out.cache_path, j.dump(2) + "\n").ok()) out.cache_path.clear();
  }
  return out;
}

Status check_token_ids(const TokenIdRange& range, const std::string& data_path, int vocab_size) {
  Status s;
  if (range.tokens > 0 && range.min < 0) {
    s.add(fmt::format("{}: holds the negative token id {}", data_path, range.min));
  }
  if (range.max >= vocab_size) {
    s.add(fmt::format(
        "{}: holds token id {}, outside the model's vocabulary [0, {}) (model.vocab_size): the "
        "dataset was made with a larger vocabulary than the model's; it has no sidecar "
        "(PREFIX.json) to say which",
        data_path, range.max, vocab_size));
  }
  return s;
}

}  // namespace weft::data
