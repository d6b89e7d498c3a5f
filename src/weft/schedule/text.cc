#include "weft/schedule/text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ranges>

#include <fmt/format.h>

namespace weft::schedule {
namespace {

constexpr std::string_view kInstrForms =
    "2F0, 2B0, 2I0, 2W0, 2SA0>3, 2RA0<1, 2SG0>1, 2RG0<3, 2R, O";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Reads a non-negative decimal number of at most 9 digits at `pos`; -1 if there is none.
int read_number(std::string_view s, std::size_t& pos) {
  std::size_t start = pos;
  int value = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])) && pos - start < 9) {
    value = value * 10 + (s[pos] - '0');
    ++pos;
  }
  return pos == start ? -1 : value;
}

std::string chunk_marker(int chunk) {
  if (chunk < 26) return std::string(1, static_cast<char>('a' + chunk));
  return fmt::format("[{}]", chunk);
}

}  // namespace

std::string instr_to_text(const Instr& in) {
  if (in.op == Op::OptimizerStep) return std::string(op_code(in.op));
  std::string text = fmt::format("{}{}", in.stage, op_code(in.op));
  if (has_microbatch(in.op)) text += std::to_string(in.microbatch);
  if (is_p2p(in.op)) text += fmt::format("{}{}", is_send(in.op) ? '>' : '<', in.peer);
  return text;
}

Result<Instr> parse_instr(std::string_view text) {
  auto bad = [&](std::string_view why) -> Status {
    return Status::error(
        fmt::format("'{}' is not an instruction: {} (forms: {})", text, why, kInstrForms));
  };
  std::size_t pos = 0;
  const int stage = read_number(text, pos);
  const std::size_t code_start = pos;
  while (pos < text.size() && std::isupper(static_cast<unsigned char>(text[pos]))) ++pos;
  const std::string_view code = text.substr(code_start, pos - code_start);
  const auto ops = all_ops();
  const auto op_it =
      std::find_if(ops.begin(), ops.end(), [&](Op op) { return op_code(op) == code; });
  if (op_it == ops.end()) {
    return bad(code.empty() ? "no op code" : fmt::format("unknown op code '{}'", code));
  }
  const Op op = *op_it;
  const int microbatch = read_number(text, pos);
  char arrow = 0;
  int peer = -1;
  if (pos < text.size() && (text[pos] == '>' || text[pos] == '<')) {
    arrow = text[pos++];
    peer = read_number(text, pos);
    if (peer < 0) return bad("no peer rank after the arrow");
  }
  if (pos != text.size()) return bad(fmt::format("unexpected '{}'", text.substr(pos)));

  const bool wants_stage = op != Op::OptimizerStep;
  const char wants_arrow = is_send(op) ? '>' : is_recv(op) ? '<' : 0;
  if (wants_stage && stage < 0) return bad("missing the stage before the op code");
  if (!wants_stage && stage >= 0) return bad("O takes no stage");
  if (has_microbatch(op) && microbatch < 0) return bad("missing the microbatch after the op code");
  if (!has_microbatch(op) && microbatch >= 0) {
    return bad(fmt::format("{} takes no microbatch", code));
  }
  if (arrow != wants_arrow) {
    return bad(wants_arrow == 0 ? fmt::format("{} takes no peer", code)
                                : fmt::format("{} needs '{}peer'", code, wants_arrow));
  }
  return Instr{op, wants_stage ? stage : -1, microbatch, peer};
}

std::string program_to_text(const Program& program) {
  if (program.empty()) return "-";
  return fmt::format("{}", fmt::join(program | std::views::transform(instr_to_text), ","));
}

Result<Program> parse_program(std::string_view line) {
  line = trim(line);
  Program program;
  if (line == "-") return program;
  Status status;
  std::size_t item = 0;
  while (true) {
    const std::size_t comma = line.find(',');
    const std::string_view token = trim(line.substr(0, comma));
    Result<Instr> in = parse_instr(token);
    if (in.ok()) {
      program.push_back(in.value());
    } else {
      status.add(fmt::format("item {}: {}", item, in.status().problems().front()));
    }
    ++item;
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  if (!status.ok()) return status;
  return program;
}

std::string to_text(const Schedule& schedule) {
  const Shape& shape = schedule.shape;
  std::string out = fmt::format("kind={} pp={} vp={} microbatches={}\n", kind_name(schedule.kind),
                                shape.pp, shape.vp, shape.microbatches);
  for (const Program& program : schedule.programs) out += program_to_text(program) + "\n";
  return out;
}

Result<Schedule> parse_text(std::string_view text) {
  Status status;
  Schedule schedule;
  bool have_header = false;
  int line_number = 0;
  for (const auto part : text | std::views::split('\n')) {
    const std::string_view line = trim({part.begin(), part.end()});
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    if (!have_header) {
      have_header = true;
      bool kind = false, pp = false, vp = false, m = false;
      std::string_view rest = line;
      while (!rest.empty()) {
        const std::size_t space = rest.find(' ');
        const std::string_view field = rest.substr(0, space);
        rest = trim(space == std::string_view::npos ? std::string_view{} : rest.substr(space));
        const std::size_t eq = field.find('=');
        const std::string_view key = field.substr(0, eq);
        const std::string_view value =
            eq == std::string_view::npos ? std::string_view{} : field.substr(eq + 1);
        auto number = [&](int& out, bool& seen) {
          std::size_t pos = 0;
          out = read_number(value, pos);
          seen = true;
          if (out < 0 || pos != value.size()) {
            status.add(
                fmt::format("line {}: {} wants a number, got '{}'", line_number, key, value));
          }
        };
        if (key == "kind") {
          kind = true;
          Result<Kind> k = parse_kind(value);
          if (k.ok()) {
            schedule.kind = k.value();
          } else {
            status.add(fmt::format("line {}: {}", line_number, k.status().problems().front()));
          }
        } else if (key == "pp") {
          number(schedule.shape.pp, pp);
        } else if (key == "vp") {
          number(schedule.shape.vp, vp);
        } else if (key == "microbatches") {
          number(schedule.shape.microbatches, m);
        } else {
          status.add(fmt::format("line {}: unknown header field '{}'", line_number, field));
        }
      }
      if (!(kind && pp && vp && m)) {
        status.add(fmt::format(
            "line {}: the header needs kind=, pp=, vp= and microbatches= (e.g. 'kind=1f1b pp=4 "
            "vp=1 microbatches=8'), got '{}'",
            line_number, line));
      }
      continue;
    }
    Result<Program> program = parse_program(line);
    if (program.ok()) {
      schedule.programs.push_back(std::move(program).value());
    } else {
      for (const auto& p : program.status().problems()) {
        status.add(fmt::format("line {} (rank {}), {}", line_number, schedule.programs.size(), p));
      }
      schedule.programs.emplace_back();
    }
  }
  if (!have_header) status.add("empty schedule text: no header line");
  if (have_header && status.ok() &&
      static_cast<int>(schedule.programs.size()) != schedule.shape.pp) {
    status.add(fmt::format("{} program lines for pp={} (one line per pipeline rank)",
                           schedule.programs.size(), schedule.shape.pp));
  }
  if (!status.ok()) return status;
  return schedule;
}

std::string grid_label(const Instr& in, const Shape& shape) {
  std::string label(op_code(in.op));
  if (has_microbatch(in.op)) label += std::to_string(in.microbatch);
  if (shape.vp > 1 && in.stage >= 0) label += chunk_marker(shape.chunk_of(in.stage));
  return label;
}

std::string format_grid(const Timeline& timeline) {
  const Shape& shape = timeline.shape;
  const int slots = static_cast<int>(std::ceil(timeline.makespan));
  std::vector<std::vector<std::string>> cells(timeline.ranks.size(),
                                              std::vector<std::string>(slots, "."));
  std::size_t width = 1;
  for (std::size_t rank = 0; rank < timeline.ranks.size(); ++rank) {
    for (const Slot& slot : timeline.ranks[rank]) {
      if (is_p2p(slot.instr.op) || slot.end <= slot.start) continue;
      WEFT_CHECK(slot.start == std::floor(slot.start) && slot.end == std::floor(slot.end),
                 "format_grid needs whole time units (simulate with unit_costs()), got ",
                 instr_to_text(slot.instr), " at [", slot.start, ", ", slot.end, ")");
      const std::string label = grid_label(slot.instr, shape);
      width = std::max(width, label.size());
      for (int t = static_cast<int>(slot.start); t < static_cast<int>(slot.end); ++t) {
        cells[rank][t] = label;
      }
    }
  }
  const std::size_t rank_digits = std::to_string(std::max<std::size_t>(1, cells.size()) - 1).size();
  std::string out;
  for (std::size_t rank = 0; rank < cells.size(); ++rank) {
    std::string row = fmt::format("rank {:<{}} |", rank, rank_digits);
    for (const std::string& cell : cells[rank]) row += fmt::format(" {:<{}}", cell, width);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  return out;
}

std::string format_grid(const Schedule& schedule) {
  return format_grid(simulate(schedule, unit_costs(schedule.shape)));
}

}  // namespace weft::schedule
