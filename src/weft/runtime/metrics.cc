#include "weft/runtime/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "weft/core/clock.h"
#include "weft/core/pending_file.h"

namespace weft::runtime {
namespace {

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

nlohmann::json to_json(const StepRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = number(r.loss);
  if (r.val_loss) j["val_loss"] = number(*r.val_loss);
  j["lr"] = r.lr;
  j["grad_norm"] = number(r.grad_norm);
  j["step_ms"] = r.step_seconds * 1e3;
  j["tokens_per_s"] = r.tokens_per_s;
  if (r.mfu_spec) j["mfu_spec"] = number(*r.mfu_spec);
  if (r.mfu_gemm) j["mfu_gemm"] = number(*r.mfu_gemm);
  j["peak_mem_mib"] = static_cast<double>(r.peak_mem_bytes) / (1 << 20);
  j["skipped"] = r.skipped;
  j["epoch"] = r.epoch;
  j["tokens"] = r.tokens;
  if (r.checkpoint_seconds > 0) j["checkpoint_ms"] = r.checkpoint_seconds * 1e3;
  if (!r.rank_compute_ms.empty()) {
    j["rank_compute_ms"] = r.rank_compute_ms;
    j["rank_comm_ms"] = r.rank_comm_ms;
  }
  return j;
}

Result<MetricsWriter> MetricsWriter::open(const std::string& path, int64_t keep_through) {
  std::string kept;
  if (keep_through > 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      // A torn last line (the process died mid-write) fails to parse and is dropped.
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= keep_through) {
        kept += line + "\n";
      }
    }
  }
  Status s = write_file_atomic(path, kept);
  if (!s.ok()) return s;
  MetricsWriter w;
  w.path_ = path;
  w.file_.reset(std::fopen(path.c_str(), "a"));
  if (!w.file_)
    return Status::error(fmt::format("{}: cannot open metrics file for appending", path));
  return w;
}

Status MetricsWriter::write(const StepRecord& r) {
  const std::string line = to_json(r).dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() ||
      std::fflush(file_.get()) != 0) {
    return Status::error(fmt::format("{}: write failed", path_));
  }
  return {};
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

Progress::Progress(int64_t first_step, int64_t total_steps, int log_every, bool tty, std::FILE* out)
    : first_step_(first_step),
      total_steps_(total_steps),
      log_every_(log_every > 0 ? log_every : 1),
      tty_(tty),
      out_(out) {}

bool Progress::stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

std::string Progress::format(const StepRecord& r) const {
  std::string line = fmt::format("step {}/{} | loss {:.4f}", r.step, total_steps_, r.loss);
  if (r.val_loss) line += fmt::format(" | val {:.4f}", *r.val_loss);
  line +=
      fmt::format(" | lr {:.2e} | norm {:.3f} | {:.0f} tok/s", r.lr, r.grad_norm, r.tokens_per_s);
  if (r.mfu_spec) line += fmt::format(" | MFU {:.1f}%", 100 * *r.mfu_spec);
  if (r.mfu_gemm) line += fmt::format(" | {:.1f}% of GEMM", 100 * *r.mfu_gemm);
  line += fmt::format(" | {:.0f} MiB", static_cast<double>(r.peak_mem_bytes) / (1 << 20));
  const double elapsed = seconds_since(start_);
  const int64_t done = r.step - first_step_;
  if (done > 0 && r.step < total_steps_) {
    line += " | ETA " + format_duration(elapsed / done * (total_steps_ - r.step));
  }
  if (r.skipped) line += " | SKIPPED (non-finite)";
  return line;
}

void Progress::update(const StepRecord& r) {
  if (out_ == nullptr) return;
  if (tty_) {
    // \x1b[K clears what a longer previous line left behind; evaluations stay on screen.
    fmt::print(out_, "\r{}\x1b[K{}", format(r), r.val_loss ? "\n" : "");
    line_open_ = !r.val_loss;
  } else if (r.step % log_every_ == 0 || r.step == total_steps_ || r.val_loss || r.skipped) {
    fmt::print(out_, "{}\n", format(r));
  }
  std::fflush(out_);
}

void Progress::message(const std::string& line) {
  if (out_ == nullptr) return;
  if (line_open_) fmt::print(out_, "\n");
  line_open_ = false;
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);
}

void Progress::finish() {
  if (out_ != nullptr && line_open_) fmt::print(out_, "\n");
  line_open_ = false;
}

}  // namespace weft::runtime
