#pragma once
// The training loop, resume -> build -> loop -> report: data from the Sampler, gradient
// accumulation to the global batch (train_step), the learning-rate schedule, validation every
// eval_every steps, metrics, progress, checkpoints every save_every steps and at the end, resume,
// and a clean stop on SIGINT/SIGTERM. One process, or every rank of a tensor-, pipeline- and
// data-parallel job: every rank runs this loop through its Engine (engine.h: the CPU kernels in
// fp32, or a device in bf16 mixed precision, decided once by make_engine), world rank 0 alone
// prints and writes metrics; every rank writes its own part of each checkpoint
// (runtime/checkpointing.h), which loads under any layout and on either engine.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/config/run_config.h"
#include "weft/core/status.h"
#include "weft/core/stop_signals.h"
#include "weft/data/token_dataset.h"
#include "weft/model/gpt.h"
#include "weft/optim/adamw.h"
#include "weft/parallel/groups.h"
#include "weft/runtime/engine.h"
#include "weft/runtime/metrics.h"

namespace weft::runtime {

struct TrainerOptions {
  // "": a fresh run (an error when run.out_dir already holds checkpoints, so nothing is
  // overwritten by mistake); "auto": continue from the latest checkpoint in run.out_dir when there
  // is one, else start fresh; anything else: a checkpoint directory, or a root holding `latest`.
  std::string resume;
  // Stop, with a checkpoint, once this many steps are complete (0: run to train.steps). The lr
  // schedule still spans train.steps, so a run split this way equals an uninterrupted one.
  int64_t stop_after = 0;
  // The command's stop signals: the first SIGINT/SIGTERM/SIGUSR1 it hears finishes the step,
  // checkpoints, returns. The command listens from before MPI starts until it ends, and main()
  // routes the signals (core/stop_signals.h says why both). Null: no signal stops this run.
  const StopSignalListener* signals = nullptr;
  bool measure_gemm_ceiling = true;  // for MFU against the GEMM ceiling
  // Measures the ceiling (FLOP/s) instead of the engine (Engine::gemm_ceiling's contract): for
  // tests of what the trainer does with a measurement.
  std::function<double(bool fresh)> gemm_ceiling;
  bool progress = true;  // progress on stderr
  // Recorded in checkpoints for `weft generate`: how to load the tokenizer ("gpt2" or an absolute
  // directory; default data.tokenizer) and what it is (BpeTokenizer::identity(), "" if none).
  std::string tokenizer_spec;
  std::string tokenizer_identity;
  std::function<void(const StepRecord&)> on_step;  // after each step's metrics are written
  // The job's ranks (from comm::MpiSession::world()); null: one process. Its size must equal
  // parallel.tp * pp * dp.
  comm::Communicator* world = nullptr;
  // Train on this backend (`weft train --device`: the GPU, or its host emulation) in mixed
  // precision instead of on the CPU kernels in fp32 (engine.h); its checkpoints load under any
  // layout and on either engine.
  EngineDevice device;
};

struct TrainResult {
  int64_t first_step = 0;  // steps complete when this invocation started (> 0 when resumed)
  int64_t last_step = 0;   // steps complete when it returned
  bool stopped = false;    // by a stop signal
  int stop_signal = 0;     // SIGINT, SIGTERM or SIGUSR1
  std::string resumed_from;
  std::string checkpoint;  // the last checkpoint written ("" when none)
  std::vector<StepRecord> records;
};

class Trainer {
 public:
  // cfg must have passed validate() and validate_data() with this dataset (the CLI does both).
  Trainer(config::RunConfig cfg, const data::TokenDataset& dataset, TrainerOptions options = {});
  ~Trainer();

  // Runs to train.steps (or stop_after, or a stop signal). Errors: a checkpoint that cannot be
  // resumed from or written, an out_dir holding another run, files that cannot be written.
  Result<TrainResult> run();

  // After run(): this rank's engine as the run ended; its training state (parameters, AdamW's
  // moments, wherever they are) is engine()->checkpoint_job().state. Null before run() built it.
  Engine* engine() const { return engine_.get(); }

 private:
  class MfuReference;
  struct Run;
  // run()'s parts: the sampler, the engine (loaded on a resume), the metrics and the start line;
  // the loop; a checkpoint; a validation; what follows each step (its record, the skipped-step
  // rules, a periodic save).
  Status build(Run& run, const parallel::Coord& me);
  Status train(Run& run);
  // A checkpoint of the current step, written now or in the background; also commits a save in
  // flight (finished first) and reports what was committed (report_saves).
  Status save(Run& run, bool background);
  void report_saves(Run& run);
  float evaluate(Run& run);
  Status after_step(Run& run, StepRecord& r);
  // A collective error that ends the run (the same on every rank): `why`, then the last
  // checkpoint, then `advice`.
  Status give_up(Run& run, const std::string& why, const std::string& advice = "");

  config::RunConfig cfg_;
  const data::TokenDataset* dataset_;
  TrainerOptions options_;
  parallel::ProcessGroups groups_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace weft::runtime
