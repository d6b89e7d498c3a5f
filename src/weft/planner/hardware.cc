#include "weft/planner/hardware.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <sstream>
#include <utility>

#include "weft/core/suggest.h"
#include "weft/core/text_file.h"
#include "weft/core/toml_reader.h"
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

// An int key of a preset: read_toml's range error, worded as presets have always worded it.
int integer(TomlReader& r, const char* key, int fallback, bool required, Status& s) {
  const int64_t v = r.get<int64_t>(key, fallback, required);
  if (std::in_range<int>(v)) return static_cast<int>(v);
  s.add(fmt::format("{}.{}={} is too large", r.path(), key, v));
  return fallback;
}

Link read_link(const toml::table* links, const char* name, bool required, Status& s) {
  const toml::table* t = links ? (*links)[name].as_table() : nullptr;
  if (t == nullptr) {
    if (required) s.add(fmt::format("missing table [link.{}]", name));
    return {};
  }
  TomlReader r(t, fmt::format("link.{}", name), s);
  Link l;
  l.bandwidth = r.get<double>("bandwidth_gbps", 0, true) * kGB;
  l.latency = r.get<double>("latency_us", 0, true) * kMicro;
  l.reduce_scatter_bandwidth = r.get<double>("reduce_scatter_bandwidth_gbps", 0) * kGB;
  l.all_gather_bandwidth = r.get<double>("all_gather_bandwidth_gbps", 0) * kGB;
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

double Cluster::peak(NumberFormat f) const {
  return f == NumberFormat::BF16   ? peak_bf16
         : f == NumberFormat::FP16 ? peak_fp16
         : f == NumberFormat::TF32 ? peak_tf32
                                   : peak_fp32;
}

Status validate(const Cluster& c) {
  Status s;
  auto positive = [&](const char* key, double v) {
    if (!(v > 0)) s.add(fmt::format("{}={} must be > 0", key, v));
  };
  auto non_negative = [&](const char* key, double v, const char* note = "") {
    if (!(v >= 0)) s.add(fmt::format("{}={} must be >= 0{}", key, v, note));
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
  non_negative("memory.optimizer_bandwidth_gbps", c.optimizer_bandwidth / kGB,
               " (0: bandwidth_gbps)");
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
  non_negative("calibration.step_overhead_ms", c.step_overhead / kMilli);
  non_negative("calibration.weight_passes", c.weight_passes);
  non_negative("calibration.tp_collective_overhead_us", c.tp_collective_overhead / kMicro);
  non_negative("calibration.gemm_speed", c.gemm_speed, " (0: not measured)");
  positive("link.network.bandwidth_gbps", c.network.bandwidth);
  return s;
}

Result<Cluster> parse_cluster(const std::string& text, const std::string& origin) {
  const auto parsed = parse_toml(text, origin);
  if (!parsed.ok()) return parsed.status();
  const toml::table& root = parsed.value();
  Status s;
  Cluster c;
  {
    const std::vector<std::string> tables = {"cluster", "memory",      "peak_tflops", "gemm",
                                             "link",    "calibration", "attention"};
    for (const std::string& k : unknown_keys(root, tables)) {
      s.add(fmt::format("unknown table [{}]{}", k, did_you_mean(k, tables)));
    }
    for (const auto& t : {"cluster", "memory", "peak_tflops", "gemm"}) {
      if (!root[t].as_table()) s.add(fmt::format("missing table [{}]", t));
    }
  }
  {
    TomlReader r(root["cluster"].as_table(), "cluster", s);
    c.name = r.get<std::string>("name", "", true);
    c.description = r.get<std::string>("description", "");
    c.device = r.get<std::string>("device", "", true);
    c.devices_per_node = integer(r, "devices_per_node", 1, true, s);
    c.devices_per_package = integer(r, "devices_per_package", 1, false, s);
    c.max_nodes = integer(r, "max_nodes", 0, false, s);
    r.report_unknown();
  }
  {
    TomlReader r(root["memory"].as_table(), "memory", s);
    c.memory_bytes = r.get<double>("capacity_gib", 0, true) * kGiB;
    c.reserved_bytes = r.get<double>("reserved_gib", 0) * kGiB;
    c.memory_bandwidth = r.get<double>("bandwidth_gbps", 0, true) * kGB;
    c.memory_efficiency = r.get<double>("efficiency", 1);
    c.optimizer_bandwidth = r.get<double>("optimizer_bandwidth_gbps", 0) * kGB;
    const double runtime_mib =
        r.get<double>("runtime_mib", static_cast<double>(model::kDefaultRuntimeBytes) / kMiB);
    c.runtime_bytes = std::llround(runtime_mib * kMiB);
    r.report_unknown();
  }
  {
    TomlReader r(root["peak_tflops"].as_table(), "peak_tflops", s);
    c.peak_bf16 = r.get<double>("bf16", 0) * kTera;
    c.peak_fp16 = r.get<double>("fp16", 0) * kTera;
    c.peak_tf32 = r.get<double>("tf32", 0) * kTera;
    c.peak_fp32 = r.get<double>("fp32", 0) * kTera;
    r.report_unknown();
  }
  {
    TomlReader r(root["gemm"].as_table(), "gemm", s);
    c.gemm.compute_units = integer(r, "compute_units", 1, true, s);
    c.gemm.tile_m = integer(r, "tile_m", 128, false, s);
    c.gemm.tile_n = integer(r, "tile_n", 128, false, s);
    c.gemm.efficiency = r.get<double>("efficiency", 0.75, true);
    c.gemm.k_half = r.get<double>("k_half", 0);
    c.gemm.min_time = r.get<double>("min_time_us", 0) * kMicro;
    r.report_unknown();
  }
  {
    const toml::table* links = root["link"].as_table();
    if (links == nullptr) s.add("missing table [link]");
    TomlReader r(links, "link", s);
    r.known({"package", "node", "network"});  // read_link() reads each
    r.report_unknown();
    c.package = read_link(links, "package", false, s);
    c.node = read_link(links, "node", false, s);
    c.network = read_link(links, "network", true, s);
  }
  {
    TomlReader r(root["attention"].as_table(), "attention", s);  // optional
    c.flash_forward = r.get<double>("flash_forward_tflops", 0) * kTera;
    c.flash_backward = r.get<double>("flash_backward_tflops", 0) * kTera;
    r.report_unknown();
  }
  {
    // Optional: only a preset refitted from measured steps has it.
    TomlReader r(root["calibration"].as_table(), "calibration", s);
    c.compute_scale = r.get<double>("compute_scale", 1);
    c.step_overhead = r.get<double>("step_overhead_ms", 0) * kMilli;
    c.weight_passes = r.get<double>("weight_passes", 0);
    c.tp_collective_overhead = r.get<double>("tp_collective_overhead_us", 0) * kMicro;
    c.gemm_speed = r.get<double>("gemm_speed", 0);
    c.calibration_note = r.get<std::string>("note", "");
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
