#include "weft/planner/report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

#include "weft/planner/memory_model.h"
#include "weft/schedule/text.h"

namespace weft::planner {
namespace {

std::string gib(double bytes) { return fmt::format("{:.1f}", bytes / kGiB); }

// FLOP/s with a unit that keeps a CPU's rate readable: "312 TFLOP/s", "108.7 GFLOP/s".
std::string rate(double flops) {
  if (flops >= 1e12) return fmt::format("{:.4g} TFLOP/s", flops / 1e12);
  return fmt::format("{:.4g} GFLOP/s", flops / 1e9);
}

}  // namespace

std::string describe(const Cluster& cluster, const Job& job) {
  std::string out =
      fmt::format("{} on {} x {} ({}, {} per node), global batch {} x {} tokens, {}",
                  job.model.name, job.world, cluster.device, cluster.name, cluster.devices_per_node,
                  job.global_batch, job.seq_len, precision_name(job.precision));
  if (job.tokens > 0) out += fmt::format(", {:.3g} tokens to train", job.tokens);
  return out;
}

std::string format_ranking(const SearchResult& result, const Job& job, int top) {
  // GFLOP/s when the devices are CPUs: TFLOP/s would print 0.1.
  const bool giga = !result.ranked.empty() && result.ranked.front().tflops_per_device < 1;
  const double unit = giga ? 1e3 : 1;
  std::string out = fmt::format(
      "{:>3}  {:<50} {:>8} | {:>7} {:>6} {:>6} {:>6} {:>6} {:>5} | {:>5} {:>5} {:>5} {:>5} {:>5} "
      "{:>5} | {:>9} {:>7} {:>5}",
      "#", "configuration", "step s", "compute", "bubble", "tp", "pp", "dp", "optim", "wts",
      "grads", "optst", "acts", "bufs", "GiB", "tokens/s", giga ? "GFLOP/s" : "TFLOP/s", "MFU");
  if (job.tokens > 0) out += fmt::format(" {:>7}", "days");
  out += "\n";
  const int n = std::min<int>(top, result.ranked.size());
  for (int i = 0; i < n; ++i) {
    const Prediction& p = result.ranked[i];
    const StepBreakdown& t = p.time;
    const MemoryBreakdown& m = p.memory;
    out += fmt::format(
        "{:>3}  {:<50} {:>8.3f} | {:>7.3f} {:>6.3f} {:>6.3f} {:>6.3f} {:>6.3f} {:>5.3f} | {:>5} "
        "{:>5} {:>5} {:>5} {:>5} {:>5} | {:>9.4g} {:>7.1f} {:>4.1f}%",
        i + 1, short_name(p.config), t.total, t.compute, t.bubble, t.tp_comm, t.pp_comm, t.dp_comm,
        t.optimizer, gib(m.weights), gib(m.grads), gib(m.optimizer), gib(m.activations),
        gib(m.buffers), gib(m.total()), p.tokens_per_s, p.tflops_per_device * unit, 100 * p.mfu);
    if (job.tokens > 0) out += fmt::format(" {:>7.1f}", p.days);
    out += "\n";
  }
  return out;
}

std::string format_infeasible(const SearchResult& result, int examples) {
  std::string out;
  for (const auto& [reason, count] : result.reason_counts) {
    out += fmt::format("  {:>6} x {}\n", count, reason);
  }
  // The memory verdicts closest to fitting: the instructive ones.
  std::vector<const Prediction*> memory;
  for (const Prediction& p : result.infeasible) {
    if (p.memory.total() > 0 && p.reasons.front().starts_with("needs ")) memory.push_back(&p);
  }
  std::sort(memory.begin(), memory.end(), [](const Prediction* a, const Prediction* b) {
    return a->memory.total() < b->memory.total();
  });
  for (int i = 0; i < std::min<int>(examples, memory.size()); ++i) {
    out +=
        fmt::format("  e.g. {}: {}\n", short_name(memory[i]->config), memory[i]->reasons.front());
  }
  return out;
}

std::string format_prediction(const Prediction& p, const Cluster& cluster, const Job& job) {
  std::string out = fmt::format("configuration   {}\n", to_string(p.config));
  if (!p.feasible) {
    out += "verdict         infeasible\n";
    for (const auto& r : p.reasons) out += fmt::format("  - {}\n", r);
  }
  if (p.time.total > 0) {
    const StepBreakdown& t = p.time;
    auto pct = [&](double x) { return 100 * x / t.total; };
    out += fmt::format(
        "step time       {:.4g} s = compute {:.4g} ({:.1f}%) + bubble {:.4g} ({:.1f}%) + tp {:.4g} "
        "({:.1f}%) + pp {:.4g} ({:.1f}%) + dp {:.4g} ({:.1f}%) + optimizer {:.4g} ({:.1f}%)\n",
        t.total, t.compute, pct(t.compute), t.bubble, pct(t.bubble), t.tp_comm, pct(t.tp_comm),
        t.pp_comm, pct(t.pp_comm), t.dp_comm, pct(t.dp_comm), t.optimizer, pct(t.optimizer));
    out += fmt::format(
        "throughput      {:.4g} tokens/s, {} per device (recomputation counted), MFU {:.1f}% of "
        "{}\n",
        p.tokens_per_s, rate(p.tflops_per_device * 1e12), 100 * p.mfu,
        rate(compute_peak(cluster, job.precision)));
    if (p.days > 0) out += fmt::format("time to train   {:.1f} days\n", p.days);
  }
  const MemoryBreakdown& m = p.memory;
  out += fmt::format(
      "memory/device   {} = weights {} + grads {} + optimizer {} + activations {} + buffers {}{}"
      " (capacity {}, {} usable)\n",
      format_bytes(m.total()), format_bytes(m.weights), format_bytes(m.grads),
      format_bytes(m.optimizer), format_bytes(m.activations), format_bytes(m.buffers),
      m.snapshot > 0 ? " + checkpoint snapshot " + format_bytes(m.snapshot) : "",
      format_bytes(cluster.memory_bytes), format_bytes(cluster.usable_memory()));
  if (!p.in_flight.empty()) {
    // At most 16 ranks, then the last one.
    const size_t shown = p.in_flight.size() > 17 ? 16 : p.in_flight.size();
    std::string list =
        fmt::format("{}", fmt::join(p.in_flight.begin(), p.in_flight.begin() + shown, " "));
    if (shown < p.in_flight.size()) list += fmt::format(" ... {}", p.in_flight.back());
    out += fmt::format("in flight       {}  ((stage, microbatch) pairs per pipeline rank)\n", list);
  }
  auto group = [&](const char* name, const GroupLink& g) {
    if (g.size <= 1) return fmt::format("{} -", name);
    return fmt::format("{} {} over the {} link ({:.0f} GB/s, {:.1f} us)", name, g.size,
                       span_name(g.span), g.link.bandwidth / 1e9, g.link.latency * 1e6);
  };
  if (p.time.total > 0) {
    out += fmt::format("placement       {}; {}; {}\n", group("tp", p.placement.tp),
                       group("dp", p.placement.dp), group("pp", p.placement.pp));
  }
  return out;
}

std::string chrome_trace_json(const schedule::Timeline& timeline, const std::string& title) {
  using nlohmann::json;
  json events = json::array();
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", title}}}});
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", fmt::format("pipeline rank {}", r)}}}});
    for (const schedule::Slot& slot : timeline.ranks[r]) {
      const schedule::Instr& in = slot.instr;
      if (slot.end <= slot.start) continue;
      events.push_back(
          {{"name", schedule::is_compute(in.op) ? schedule::grid_label(in, timeline.shape)
                                                : schedule::instr_to_text(in)},
           {"cat", std::string(schedule::op_name(in.op))},
           {"ph", "X"},
           {"pid", 0},
           {"tid", r},
           {"ts", slot.start * 1e6},
           {"dur", (slot.end - slot.start) * 1e6},
           {"args", {{"stage", in.stage}, {"microbatch", in.microbatch}}}});
    }
  }
  return json({{"traceEvents", events}, {"displayTimeUnit", "ms"}}).dump(1) + "\n";
}

}  // namespace weft::planner
