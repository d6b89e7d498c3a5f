#include "weft/planner/hardware.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include <toml++/toml.h>

#include "weft/core/suggest.h"
#include "weft/core/text_file.h"
#include "weft/core/weft_files.h"

namespace weft::planner {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGB = 1e9;  // link and memory bandwidths are quoted in decimal GB/s
constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;
constexpr double kMilli = 1e-3;

constexpr std::array<std::pair<NumberFormat, std::string_view>, 4> kFormats = {{
    {NumberFormat::BF16, "bf16"},
    {NumberFormat::FP16, "fp16"},
    {NumberFormat::TF32, "tf32"},
    {NumberFormat::FP32, "fp32"},
}};

// Reads one [table] of a preset: every key it reads is known; the rest are reported with the
// nearest known key. Missing required keys and wrong types are reported too.
class TableReader {
 public:
  TableReader(const toml::table* t, std::string path, Status& s) : t_(t), path_(path), s_(s) {}

  double number(const char* key, double fallback, bool required) {
    known_.emplace_back(key);
    if (t_ == nullptr) return fallback;
    auto node = (*t_)[key];
    if (!node) {
      if (required) s_.add(fmt::format("missing key {}.{}", path_, key));
      return fallback;
    }
    if (auto v = node.value<double>()) return *v;
    s_.add(fmt::format("{}.{} must be a number", path_, key));
    return fallback;
  }
  int integer(const char* key, int fallback, bool required) {
    known_.emplace_back(key);
    if (t_ == nullptr) return fallback;
    auto node = (*t_)[key];
    if (!node) {
      if (required) s_.add(fmt::format("missing key {}.{}", path_, key));
      return fallback;
    }
    if (node.is_integer()) {
      const int64_t v = *node.value<int64_t>();
      if (std::in_range<int>(v)) return static_cast<int>(v);
      s_.add(fmt::format("{}.{}={} is too large", path_, key, v));
      return fallback;
    }
    s_.add(fmt::format("{}.{} must be an integer", path_, key));
    return fallback;
  }
  std::string text(const char* key, const std::string& fallback, bool required) {
    known_.emplace_back(key);
    if (t_ == nullptr) return fallback;
    auto node = (*t_)[key];
    if (!node) {
      if (required) s_.add(fmt::format("missing key {}.{}", path_, key));
      return fallback;
    }
    if (auto v = node.value<std::string>()) return *v;
    s_.add(fmt::format("{}.{} must be a string", path_, key));
    return fallback;
  }
  void table(const char* key) { known_.emplace_back(key); }  // a sub-table read elsewhere
  // Call last: every key that was not read is unknown.
  void report_unknown() {
    if (t_ == nullptr) return;
    for (const auto& [key, node] : *t_) {
      const std::string k(key.str());
      if (std::find(known_.begin(), known_.end(), k) == known_.end()) {
        s_.add(fmt::format("unknown key {}.{}{}", path_, k, did_you_mean(k, known_)));
      }
    }
  }

 private:
  const toml::table* t_;
  std::string path_;
  Status& s_;
  std::vector<std::string> known_;
};

Link read_link(const toml::table* links, const char* name, bool required, Status& s) {
  const toml::table* t = links ? (*links)[name].as_table() : nullptr;
  if (t == nullptr) {
    if (required) s.add(fmt::format("missing table [link.{}]", name));
    return {};
  }
  TableReader r(t, fmt::format("link.{}", name), s);
  Link l;
  l.bandwidth = r.number("bandwidth_gbps", 0, true) * kGB;
  l.latency = r.number("latency_us", 0, true) * kMicro;
  l.reduce_scatter_bandwidth = r.number("reduce_scatter_bandwidth_gbps", 0, false) * kGB;
  l.all_gather_bandwidth = r.number("all_gather_bandwidth_gbps", 0, false) * kGB;
  r.report_unknown();
  return l;
}

}  // namespace

std::string_view number_format_name(NumberFormat f) {
  for (const auto& [format, name] : kFormats) {
    if (format == f) return name;
  }
  return "?";
}

Result<NumberFormat> parse_number_format(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& [format, n] : kFormats) {
    if (n == name) return format;
    names.emplace_back(n);
  }
  return Status::error(fmt::format("unknown number format '{}'{}: one of bf16, fp16, tf32, fp32",
                                   name, did_you_mean(name, names)));
}

double Cluster::peak(NumberFormat f) const {
  switch (f) {
    case NumberFormat::BF16:
      return peak_bf16;
    case NumberFormat::FP16:
      return peak_fp16;
    case NumberFormat::TF32:
      return peak_tf32;
    case NumberFormat::FP32:
      return peak_fp32;
  }
  return 0;
}

Status validate(const Cluster& c) {
  Status s;
  auto positive = [&](const char* key, double v) {
    if (!(v > 0)) s.add(fmt::format("{}={} must be > 0", key, v));
  };
  auto fraction = [&](const char* key, double v) {
    if (!(v > 0 && v <= 1)) s.add(fmt::format("{}={} must be in (0, 1]", key, v));
  };
  if (c.name.empty()) s.add("cluster.name must not be empty");
  positive("cluster.devices_per_node", c.devices_per_node);
  positive("cluster.devices_per_package", c.devices_per_package);
  if (c.devices_per_node > 0 && c.devices_per_package > 0 &&
      c.devices_per_node % c.devices_per_package != 0) {
    s.add(fmt::format("cluster.devices_per_node={} is not divisible by devices_per_package={}",
                      c.devices_per_node, c.devices_per_package));
  }
  if (c.max_nodes < 0) s.add(fmt::format("cluster.max_nodes={} must be >= 0", c.max_nodes));
  positive("memory.capacity_gib", c.memory_bytes);
  if (c.reserved_bytes < 0 || c.reserved_bytes >= c.memory_bytes) {
    s.add(fmt::format("memory.reserved_gib={:.3g} must be in [0, capacity_gib={:.3g})",
                      c.reserved_bytes / kGiB, c.memory_bytes / kGiB));
  }
  positive("memory.bandwidth_gbps", c.memory_bandwidth);
  if (c.runtime_bytes < 0) {
    s.add(fmt::format("memory.runtime_mib={:.4g} must be >= 0", c.runtime_bytes / kMiB));
  }
  fraction("memory.efficiency", c.memory_efficiency);
  if (!(c.optimizer_bandwidth >= 0)) {
    s.add(fmt::format("memory.optimizer_bandwidth_gbps={} must be >= 0 (0: bandwidth_gbps)",
                      c.optimizer_bandwidth / kGB));
  }
  if (c.peak_bf16 <= 0 && c.peak_fp16 <= 0 && c.peak_tf32 <= 0 && c.peak_fp32 <= 0) {
    s.add("peak_tflops needs at least one rate (bf16, fp16, tf32 or fp32)");
  }
  positive("gemm.compute_units", c.gemm.compute_units);
  positive("gemm.tile_m", c.gemm.tile_m);
  positive("gemm.tile_n", c.gemm.tile_n);
  fraction("gemm.efficiency", c.gemm.efficiency);
  if (c.gemm.k_half < 0) s.add(fmt::format("gemm.k_half={} must be >= 0", c.gemm.k_half));
  if (c.gemm.min_time < 0) s.add("gemm.min_time_us must be >= 0");
  if (c.devices_per_node > 1) positive("link.node.bandwidth_gbps", c.node.bandwidth);
  for (const auto& [name, l] : {std::pair<const char*, const Link*>{"package", &c.package},
                                {"node", &c.node},
                                {"network", &c.network}}) {
    if (l->reduce_scatter_bandwidth < 0 || l->all_gather_bandwidth < 0) {
      s.add(
          fmt::format("link.{}: reduce_scatter_bandwidth_gbps and all_gather_bandwidth_gbps "
                      "must be >= 0 (0: the link's bandwidth_gbps)",
                      name));
    }
  }
  if (!(c.flash_forward >= 0 && c.flash_backward >= 0) ||
      (c.flash_forward > 0) != (c.flash_backward > 0)) {
    s.add(fmt::format(
        "attention: flash_forward_tflops={} and flash_backward_tflops={} must both be > 0 (a "
        "fused attention kernel) or both absent",
        c.flash_forward / kTera, c.flash_backward / kTera));
  }
  positive("calibration.compute_scale", c.compute_scale);
  if (!(c.step_overhead >= 0)) {
    s.add(fmt::format("calibration.step_overhead_ms={} must be >= 0", c.step_overhead / kMilli));
  }
  if (!(c.weight_passes >= 0)) {
    s.add(fmt::format("calibration.weight_passes={} must be >= 0", c.weight_passes));
  }
  if (!(c.tp_collective_overhead >= 0)) {
    s.add(fmt::format("calibration.tp_collective_overhead_us={} must be >= 0",
                      c.tp_collective_overhead / kMicro));
  }
  if (!(c.gemm_speed >= 0)) {
    s.add(fmt::format("calibration.gemm_speed={} must be >= 0 (0: not measured)", c.gemm_speed));
  }
  positive("link.network.bandwidth_gbps", c.network.bandwidth);
  return s;
}

Result<Cluster> parse_cluster(const std::string& text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{}: TOML syntax error at line {}: {}", origin,
                                     e.source().begin.line, e.description()));
  }
  Status s;
  Cluster c;
  {
    const std::vector<std::string> tables = {"cluster", "memory",      "peak_tflops", "gemm",
                                             "link",    "calibration", "attention"};
    for (const auto& [key, node] : root) {
      const std::string k(key.str());
      if (std::find(tables.begin(), tables.end(), k) == tables.end()) {
        s.add(fmt::format("unknown table [{}]{}", k, did_you_mean(k, tables)));
      }
    }
    for (const auto& t : {"cluster", "memory", "peak_tflops", "gemm"}) {
      if (!root[t].as_table()) s.add(fmt::format("missing table [{}]", t));
    }
  }
  {
    TableReader r(root["cluster"].as_table(), "cluster", s);
    c.name = r.text("name", "", true);
    c.description = r.text("description", "", false);
    c.device = r.text("device", "", true);
    c.devices_per_node = r.integer("devices_per_node", 1, true);
    c.devices_per_package = r.integer("devices_per_package", 1, false);
    c.max_nodes = r.integer("max_nodes", 0, false);
    r.report_unknown();
  }
  {
    TableReader r(root["memory"].as_table(), "memory", s);
    c.memory_bytes = r.number("capacity_gib", 0, true) * kGiB;
    c.reserved_bytes = r.number("reserved_gib", 0, false) * kGiB;
    c.memory_bandwidth = r.number("bandwidth_gbps", 0, true) * kGB;
    c.memory_efficiency = r.number("efficiency", 1, false);
    c.optimizer_bandwidth = r.number("optimizer_bandwidth_gbps", 0, false) * kGB;
    const double runtime_mib =
        r.number("runtime_mib", static_cast<double>(model::kDefaultRuntimeBytes) / kMiB, false);
    c.runtime_bytes = std::llround(runtime_mib * kMiB);
    r.report_unknown();
  }
  {
    TableReader r(root["peak_tflops"].as_table(), "peak_tflops", s);
    c.peak_bf16 = r.number("bf16", 0, false) * kTera;
    c.peak_fp16 = r.number("fp16", 0, false) * kTera;
    c.peak_tf32 = r.number("tf32", 0, false) * kTera;
    c.peak_fp32 = r.number("fp32", 0, false) * kTera;
    r.report_unknown();
  }
  {
    TableReader r(root["gemm"].as_table(), "gemm", s);
    c.gemm.compute_units = r.integer("compute_units", 1, true);
    c.gemm.tile_m = r.integer("tile_m", 128, false);
    c.gemm.tile_n = r.integer("tile_n", 128, false);
    c.gemm.efficiency = r.number("efficiency", 0.75, true);
    c.gemm.k_half = r.number("k_half", 0, false);
    c.gemm.min_time = r.number("min_time_us", 0, false) * kMicro;
    r.report_unknown();
  }
  {
    const toml::table* links = root["link"].as_table();
    if (links == nullptr) s.add("missing table [link]");
    TableReader r(links, "link", s);
    r.table("package");
    r.table("node");
    r.table("network");
    r.report_unknown();
    c.package = read_link(links, "package", false, s);
    c.node = read_link(links, "node", false, s);
    c.network = read_link(links, "network", true, s);
  }
  {
    TableReader r(root["attention"].as_table(), "attention", s);  // optional
    c.flash_forward = r.number("flash_forward_tflops", 0, false) * kTera;
    c.flash_backward = r.number("flash_backward_tflops", 0, false) * kTera;
    r.report_unknown();
  }
  {
    // Optional: only a preset refitted from measured steps has it.
    TableReader r(root["calibration"].as_table(), "calibration", s);
    c.compute_scale = r.number("compute_scale", 1, false);
    c.step_overhead = r.number("step_overhead_ms", 0, false) * kMilli;
    c.weight_passes = r.number("weight_passes", 0, false);
    c.tp_collective_overhead = r.number("tp_collective_overhead_us", 0, false) * kMicro;
    c.gemm_speed = r.number("gemm_speed", 0, false);
    c.calibration_note = r.text("note", "", false);
    r.report_unknown();
  }
  if (s.ok()) s.merge(validate(c));
  if (!s.ok()) return s.prefixed(origin);
  return c;
}

Result<Cluster> load_cluster(const std::string& path) {
  const auto text = read_text_file(find_weft_file(path));
  if (!text) return Status::error(fmt::format("{}: cannot open cluster preset", path));
  return parse_cluster(*text, path);
}

std::string to_toml(const Cluster& c, const std::string& header_comment) {
  // A TOML basic string's escapes: a note or description with a quote reads back unchanged.
  auto quoted = [](const std::string& text) {
    std::string q = "\"";
    for (char ch : text) {
      if (ch == '"' || ch == '\\') q += '\\';
      q += ch;
    }
    return q + '"';
  };
  // The header is comment lines whatever the caller passed: a line without '#' gets "# ", and a
  // blank line separates it from the tables.
  std::string out;
  if (!header_comment.empty()) {
    std::istringstream in(header_comment);
    std::string line;
    while (std::getline(in, line)) {
      out += (line.empty() || line.starts_with('#') ? line : "# " + line) + "\n";
    }
    if (!out.ends_with("\n\n")) out += "\n";
  }
  auto link = [&](const char* name, const Link& l) {
    if (!l.present()) return;
    out += fmt::format("\n[link.{}]\nbandwidth_gbps = {:.6g}\nlatency_us = {:.6g}\n", name,
                       l.bandwidth / kGB, l.latency / kMicro);
    if (l.reduce_scatter_bandwidth > 0) {
      out +=
          fmt::format("reduce_scatter_bandwidth_gbps = {:.6g}\n", l.reduce_scatter_bandwidth / kGB);
    }
    if (l.all_gather_bandwidth > 0) {
      out += fmt::format("all_gather_bandwidth_gbps = {:.6g}\n", l.all_gather_bandwidth / kGB);
    }
  };
  out += fmt::format(
      "[cluster]\nname = {}\ndescription = {}\ndevice = {}\ndevices_per_node = {}\n"
      "devices_per_package = {}\nmax_nodes = {}\n",
      quoted(c.name), quoted(c.description), quoted(c.device), c.devices_per_node,
      c.devices_per_package, c.max_nodes);
  out += fmt::format(
      "\n[memory]\ncapacity_gib = {:.6g}\nreserved_gib = {:.6g}\nbandwidth_gbps = {:.6g}\n"
      "efficiency = {:.4g}\n",
      c.memory_bytes / kGiB, c.reserved_bytes / kGiB, c.memory_bandwidth / kGB,
      c.memory_efficiency);
  if (c.optimizer_bandwidth > 0) {
    out += fmt::format("optimizer_bandwidth_gbps = {:.6g}\n", c.optimizer_bandwidth / kGB);
  }
  if (c.runtime_bytes != model::kDefaultRuntimeBytes) {
    // The shortest text that reads back as the same double: bytes / 2^20 is exact, so the byte
    // count round-trips (6 significant digits of MiB would not, for a measured figure).
    out += fmt::format("runtime_mib = {}\n", static_cast<double>(c.runtime_bytes) / kMiB);
  }
  out += "\n[peak_tflops]\n";
  for (const auto& [format, name] : kFormats) {
    if (c.peak(format) > 0) out += fmt::format("{} = {:.6g}\n", name, c.peak(format) / kTera);
  }
  out += fmt::format(
      "\n[gemm]\ncompute_units = {}\ntile_m = {}\ntile_n = {}\nefficiency = {:.4g}\n"
      "k_half = {:.6g}\nmin_time_us = {:.6g}\n",
      c.gemm.compute_units, c.gemm.tile_m, c.gemm.tile_n, c.gemm.efficiency, c.gemm.k_half,
      c.gemm.min_time / kMicro);
  link("package", c.package);
  link("node", c.node);
  link("network", c.network);
  if (c.flash_attention()) {
    out += fmt::format(
        "\n[attention]\nflash_forward_tflops = {:.6g}\nflash_backward_tflops = {:.6g}\n",
        c.flash_forward / kTera, c.flash_backward / kTera);
  }
  if (c.compute_scale != 1 || c.step_overhead != 0 || c.weight_passes != 0 ||
      c.tp_collective_overhead != 0 || c.gemm_speed != 0 || !c.calibration_note.empty()) {
    out += fmt::format("\n[calibration]\ncompute_scale = {:.6g}\nstep_overhead_ms = {:.6g}\n",
                       c.compute_scale, c.step_overhead / kMilli);
    // Written only when fitted: a preset without it reads as 0, today's pricing.
    if (c.weight_passes != 0) out += fmt::format("weight_passes = {:.6g}\n", c.weight_passes);
    if (c.tp_collective_overhead != 0) {
      out += fmt::format("tp_collective_overhead_us = {:.6g}\n", c.tp_collective_overhead / kMicro);
    }
    if (c.gemm_speed != 0) out += fmt::format("gemm_speed = {:.6g}\n", c.gemm_speed);
    out += fmt::format("note = {}\n", quoted(c.calibration_note));
  }
  return out;
}

}  // namespace weft::planner
