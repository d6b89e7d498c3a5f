#include "weft/core/fault.h"

#include <csignal>
#include <cstdlib>
#include <optional>
#include <string>

namespace weft {
namespace {

struct Fault {
  std::string point;
  int64_t index = -1;
  int rank = -1;  // -1: any
};

std::optional<Fault> parse(const char* spec) {
  if (spec == nullptr || *spec == '\0') return std::nullopt;
  const std::string s = spec;
  const size_t a = s.find(':');
  if (a == std::string::npos) return std::nullopt;
  const size_t b = s.find(':', a + 1);
  Fault f;
  f.point = s.substr(0, a);
  f.index =
      std::atoll(s.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1).c_str());
  if (b != std::string::npos) f.rank = std::atoi(s.c_str() + b + 1);
  return f;
}

int world_rank() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r != nullptr ? std::atoi(r) : 0;
}

}  // namespace

bool fault_requested(std::string_view point, int64_t index) {
  static const std::optional<Fault> fault = parse(std::getenv("WEFT_FAULT"));
  if (!fault || fault->point != point || fault->index != index) return false;
  return fault->rank < 0 || fault->rank == world_rank();
}

void fault_point(std::string_view point, int64_t index) {
  if (fault_requested(point, index)) std::raise(SIGKILL);
}

}  // namespace weft
