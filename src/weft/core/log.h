#pragma once
// Minimal leveled logging to stderr, with an optional process tag such as "tp1-dp0-pp2".

#include <fmt/core.h>

#include <string>

namespace weft::log {

enum class Level { Debug, Info, Warn, Error };

void set_level(Level level);
void set_tag(std::string tag);
void write(Level level, const std::string& message);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace weft::log
