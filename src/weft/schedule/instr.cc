#include "weft/schedule/instr.h"

#include <array>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "weft/core/suggest.h"

namespace weft::schedule {
namespace {

struct OpEntry {
  Op op;
  std::string_view name;
  std::string_view code;
};
// The one table for Op: long name (CLI, messages) and short code (text form, grid).
constexpr std::array<OpEntry, 10> kOps = {{
    {Op::Forward, "forward", "F"},
    {Op::Backward, "backward", "B"},
    {Op::BackwardInput, "backward-input", "I"},
    {Op::BackwardWeight, "backward-weight", "W"},
    {Op::SendAct, "send-act", "SA"},
    {Op::RecvAct, "recv-act", "RA"},
    {Op::SendGrad, "send-grad", "SG"},
    {Op::RecvGrad, "recv-grad", "RG"},
    {Op::ReduceGrads, "reduce-grads", "R"},
    {Op::OptimizerStep, "optimizer-step", "O"},
}};
constexpr std::array<Op, kOps.size()> kOpList = [] {
  std::array<Op, kOps.size()> ops{};
  for (std::size_t i = 0; i < kOps.size(); ++i) ops[i] = kOps[i].op;
  return ops;
}();

struct KindEntry {
  Kind kind;
  std::string_view name;
};
constexpr std::array<KindEntry, 4> kKinds = {{
    {Kind::GPipe, "gpipe"},
    {Kind::OneFOneB, "1f1b"},
    {Kind::Interleaved, "interleaved"},
    {Kind::ZeroBubbleH1, "zb-h1"},
}};
constexpr std::array<Kind, kKinds.size()> kKindList = {Kind::GPipe, Kind::OneFOneB,
                                                       Kind::Interleaved, Kind::ZeroBubbleH1};

// The value of the entry of `table` named `name`; else the error "unknown <what> 'name'".
template <class Entry, std::size_t N, class Value>
Result<Value> parse_named(const std::array<Entry, N>& table, Value Entry::*value,
                          std::string_view name, std::string_view what) {
  std::vector<std::string> known;
  for (const Entry& e : table) {
    if (e.name == name) return e.*value;
    known.emplace_back(e.name);
  }
  return Status::error(fmt::format("unknown {} '{}'{}; known: {}", what, name,
                                   did_you_mean(name, known), fmt::join(known, ", ")));
}

const OpEntry& entry(Op op) {
  for (const auto& e : kOps) {
    if (e.op == op) return e;
  }
  WEFT_FAIL("unknown Op ", static_cast<int>(op));
}

}  // namespace

std::span<const Op> all_ops() { return kOpList; }
std::string_view op_name(Op op) { return entry(op).name; }
std::string_view op_code(Op op) { return entry(op).code; }

Result<Op> parse_op(std::string_view name) { return parse_named(kOps, &OpEntry::op, name, "op"); }

std::span<const Kind> all_kinds() { return kKindList; }

std::string_view kind_name(Kind kind) {
  for (const auto& e : kKinds) {
    if (e.kind == kind) return e.name;
  }
  WEFT_FAIL("unknown Kind ", static_cast<int>(kind));
}

Result<Kind> parse_kind(std::string_view name) {
  return parse_named(kKinds, &KindEntry::kind, name, "schedule kind");
}

bool is_compute(Op op) {
  return op == Op::Forward || op == Op::Backward || op == Op::BackwardInput ||
         op == Op::BackwardWeight;
}
bool is_send(Op op) { return op == Op::SendAct || op == Op::SendGrad; }
bool is_recv(Op op) { return op == Op::RecvAct || op == Op::RecvGrad; }
bool is_p2p(Op op) { return is_send(op) || is_recv(op); }
bool has_microbatch(Op op) { return op != Op::ReduceGrads && op != Op::OptimizerStep; }

}  // namespace weft::schedule
