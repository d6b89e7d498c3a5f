#pragma once
// WEFT_CHECK(cond, msg...): an always-on invariant check. On failure it throws weft::Error whose
// message carries file:line, the failed condition and the streamed message parts:
//   WEFT_CHECK(C % NH == 0, "C=", C, " is not divisible by NH=", NH);
// WEFT_FAIL(msg...): the same failure, unconditionally ("check failed: false: msg"), as a statement
// the compiler knows does not return (a function may end with it; WEFT_CHECK(false, ...) inside
// its do-while left GCC's sanitizer build warning that control reaches the function's end).

#include <sstream>
#include <stdexcept>
#include <string>

namespace weft {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const Args&... args) {
  std::ostringstream os;
  os << file << ":" << line << ": check failed: " << cond;
  if constexpr (sizeof...(args) > 0) {
    os << ": ";
    (os << ... << args);
  }
  throw Error(os.str());
}
}  // namespace detail

}  // namespace weft

#define WEFT_CHECK(cond, ...)                                                             \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::weft::detail::check_failed(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                                     \
  } while (0)

#define WEFT_FAIL(...) ::weft::detail::check_failed(__FILE__, __LINE__, "false", __VA_ARGS__)
