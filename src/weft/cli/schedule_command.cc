// weft schedule: generate a pipeline schedule (or read one in the text form), draw its time x
// rank grid on a unit-cost clock, report the bubble and each rank's peak in-flight
// microbatches, write an SVG of the timeline, and with --check prove it deadlock-free.
// docs/schedules.md explains the schedules, the formulas and the text form.

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <ranges>
#include <string>

#include "weft/cli/commands.h"
#include "weft/core/pending_file.h"
#include "weft/core/status.h"
#include "weft/core/text_file.h"
#include "weft/schedule/schedule.h"
#include "weft/schedule/simulate.h"
#include "weft/schedule/svg.h"
#include "weft/schedule/text.h"

namespace weft::cli {
namespace {

struct ScheduleOptions {
  std::string kind;
  int pp = 0, microbatches = 0, vp = 1;
  std::string svg = "schedule.svg";
  std::string from;
  std::string text;
  bool check = false;
};

void write_file(const std::string& path, const std::string& contents, const std::string& what) {
  write_file_atomic(path, contents)
      .throw_if_error(fmt::format("cannot write the {} to '{}'", what, path));
}

schedule::Schedule build(const ScheduleOptions& o, bool pp_given, bool m_given) {
  using namespace schedule;
  if (!o.from.empty()) {
    const std::optional<std::string> text = read_text_file(o.from);
    if (!text) throw Error(fmt::format("cannot read --from '{}'", o.from));
    Schedule s = parse_text(*text).value_or_throw(fmt::format("cannot parse '{}'", o.from));
    check_structure(s).throw_if_error(fmt::format("malformed schedule in '{}'", o.from));
    return s;
  }
  Status status;
  Kind kind = Kind::OneFOneB;
  if (o.kind.empty()) {
    status.add("--kind is required: gpipe, 1f1b, interleaved or zb-h1 (or --from FILE)");
  } else if (Result<Kind> k = parse_kind(o.kind); k.ok()) {
    kind = k.value();
  } else {
    status.merge(k.status());
  }
  if (!pp_given) status.add("--pp is required (pipeline ranks)");
  if (!m_given) status.add("--microbatches is required");
  const schedule::Shape shape{.pp = o.pp, .vp = o.vp, .microbatches = o.microbatches};
  if (pp_given && m_given) {
    status.merge(status.ok() ? check_shape(kind, shape) : check_sizes(shape));
  }
  status.throw_if_error("invalid schedule request");
  // What the executor will run: messages lowered, the step's end appended.
  return add_optimizer_step(add_communication(make_schedule(kind, shape).value_or_throw()));
}

void run_schedule(const ScheduleOptions& o, bool pp_given, bool m_given) {
  using namespace schedule;
  const Schedule s = build(o, pp_given, m_given);
  const schedule::Shape& shape = s.shape;
  const Timeline timeline = simulate(s, unit_costs(shape));

  fmt::print(
      "{}: pp={} vp={} microbatches={}  (clock: every F, B, I, W one slot; messages free)\n\n",
      kind_name(s.kind), shape.pp, shape.vp, shape.microbatches);
  fmt::print("{}", format_grid(timeline));
  fmt::print(
      "\nF forward  B backward  I input-gradient backward  W weight-gradient backward  . idle\n");
  if (shape.vp > 1) {
    fmt::print("a, b, ...: the rank's model chunk (rank r, chunk c runs stage c*pp + r)\n");
  }
  fmt::print("\n");
  if (!timeline.deadlocked()) {
    fmt::print("bubble fraction  {:.4f}  (idle / busy time over all ranks)\n",
               timeline.bubble_fraction);
  }
  const std::vector<int> peaks = peak_in_flight(s);
  std::string peak_list;
  for (std::size_t r = 0; r < peaks.size(); ++r) {
    peak_list += fmt::format("{}rank {}: {}", r ? ", " : "", r, peaks[r]);
  }
  fmt::print("peak in flight   {}  ({} between a forward and its last backward)\n", peak_list,
             shape.vp > 1 ? "(stage, microbatch) pairs" : "microbatches");
  if (!o.svg.empty()) {
    write_file(o.svg,
               render_svg(timeline, fmt::format("{} pp={} vp={} microbatches={}", kind_name(s.kind),
                                                shape.pp, shape.vp, shape.microbatches)),
               "SVG");
    fmt::print("svg              {}\n", o.svg);
  }
  if (!o.text.empty()) {
    write_file(o.text, to_text(s), "text form");
    fmt::print("text form        {}\n", o.text);
  }

  if (o.check) {
    const Status status = validate(s);
    if (!status.ok()) throw Error(status.message("check failed: the schedule is invalid"));
    const auto count = [&](bool (*is)(Op)) {
      return std::ranges::count_if(s.programs | std::views::join,
                                   [&](const Instr& in) { return is(in.op); });
    };
    fmt::print(
        "check            ok: every invariant holds and the simulation ends ({} compute, {} "
        "sends, {} receives; sends eager, receives blocking)\n",
        count(is_compute), count(is_send), count(is_recv));
  } else if (timeline.deadlocked()) {
    Status status;
    for (const Blocked& b : timeline.blocked) {
      status.add(fmt::format("rank {} #{} {} blocks: {}", b.rank, b.index, instr_to_text(b.instr),
                             b.waiting_for));
    }
    throw Error(status.message("the schedule deadlocks"));
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "schedule", "Draw a pipeline schedule's time x rank grid, its bubble and memory; --check it");
  auto o = std::make_shared<ScheduleOptions>();
  auto* from = cmd->add_option("--from", o->from,
                               "read a schedule in the text form instead of generating one");
  cmd->add_option("--kind", o->kind, "gpipe | 1f1b | interleaved | zb-h1")->excludes(from);
  auto* pp = cmd->add_option("--pp", o->pp, "pipeline ranks")->excludes(from);
  auto* m =
      cmd->add_option("--microbatches", o->microbatches, "microbatches per step")->excludes(from);
  cmd->add_option("--vp", o->vp, "model chunks per rank (interleaved only)")
      ->capture_default_str()
      ->excludes(from);
  cmd->add_option("--svg", o->svg, "write the timeline as SVG here (empty: none)")
      ->capture_default_str();
  cmd->add_option("--text", o->text, "also write the lowered schedule in the text form here");
  cmd->add_flag("--check", o->check,
                "validate every invariant and prove by simulation that the schedule cannot "
                "deadlock; name the blocking instructions if it can");
  cmd->callback([o, pp, m] { run_schedule(*o, pp->count() > 0, m->count() > 0); });
}

}  // namespace weft::cli
