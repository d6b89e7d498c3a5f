#include "weft/core/log.h"

#include <cstdio>
#include <mutex>

namespace weft::log {
namespace {
Level g_level = Level::Info;
std::string g_tag;
std::mutex g_mutex;
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
}  // namespace

void set_level(Level level) { g_level = level; }
void set_tag(std::string tag) { g_tag = std::move(tag); }

void write(Level level, const std::string& message) {
  if (level < g_level) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_tag.empty()) {
    std::fprintf(stderr, "[%s] %s\n", kNames[static_cast<int>(level)], message.c_str());
  } else {
    std::fprintf(stderr, "[%s %s] %s\n", kNames[static_cast<int>(level)], g_tag.c_str(),
                 message.c_str());
  }
}

}  // namespace weft::log
