#pragma once
// What a run reports about each step: one JSON line per step in METRICS.jsonl (flushed as it is
// written, so a crash loses nothing already logged), and a progress display on stderr: one line
// refreshed in place with an ETA on a terminal, plain log lines every log_every steps otherwise.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/status.h"

namespace weft::runtime {

struct StepRecord {
  int64_t step = 0;  // steps completed, this one included (1 for the first)
  float loss = 0;    // mean over the global batch
  std::optional<float> val_loss;
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_seconds = 0;
  double tokens_per_s = 0;
  std::optional<double> mfu_spec;  // model FLOPs / (time x train.peak_gflops), when given
  std::optional<double> mfu_gemm;  // model FLOPs / (time x measured GEMM ceiling)
  int64_t peak_mem_bytes = 0;      // peak resident memory of the process so far
  bool skipped = false;            // non-finite loss or gradient: no update was made
  int64_t epoch = 0;
  int64_t tokens = 0;       // training tokens consumed so far
  double comm_seconds = 0;  // of step_seconds, this rank blocked in communication
  // After the step, what checkpoints held training: a save started (in the background: its
  // snapshot) or written, or one in flight committed; 0 when none was.
  double checkpoint_seconds = 0;
  // At the end of each log interval: every rank's mean compute time (step_ms - comm) and exposed
  // communication per step over the interval, by world rank (Trainer: stragglers).
  std::vector<double> rank_compute_ms, rank_comm_ms;
};

// {"step":..,"loss":..,"val_loss":..(eval steps only),"lr":..,"grad_norm":..,"step_ms":..,
//  "tokens_per_s":..,"mfu_spec":..(when a peak is given),"mfu_gemm":..,"peak_mem_mib":..,
//  "skipped":..,"epoch":..,"tokens":..,"checkpoint_ms":..(steps with a save started or
//  committed),"rank_compute_ms":[..],"rank_comm_ms":[..] (at the end of a log interval)}; a
//  non-finite number is written as null.
nlohmann::json to_json(const StepRecord& r);

class MetricsWriter {
 public:
  // Opens PATH for appending after dropping its records with step > keep_through (those an
  // interrupted run logged after the checkpoint a resumed run starts from); the rewrite is atomic.
  // keep_through = 0 starts a fresh file.
  static Result<MetricsWriter> open(const std::string& path, int64_t keep_through);
  Status write(const StepRecord& r);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

class Progress {
 public:
  // tty: refresh one line with '\r'; otherwise a line every log_every steps (and the last).
  Progress(int64_t first_step, int64_t total_steps, int log_every, bool tty,
           std::FILE* out = stderr);
  static bool stderr_is_tty();

  void update(const StepRecord& r);
  // A line of its own (warnings, checkpoint saves) that does not garble the refreshed line.
  void message(const std::string& line);
  void finish();

 private:
  std::string format(const StepRecord& r) const;
  int64_t first_step_, total_steps_;
  int log_every_;
  bool tty_;
  std::FILE* out_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace weft::runtime
