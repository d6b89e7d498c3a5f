#include "weft/runtime/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <span>
#include <tuple>
#include <vector>

#include "weft/core/memory_usage.h"
#include "weft/core/node.h"
#include "weft/kernels/kernels.h"
#include "weft/model/flops.h"
#include "weft/parallel/topology.h"
#include "weft/runtime/device_trainer.h"
#include "weft/runtime/gemm_ceiling.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {
namespace {

// How many of the job's ranks can compute at once: all of them, unless a node holds more ranks x
// threads than cores (oversubscribed, as in the tests), where they take turns.
int concurrent_ranks(int world_size, int threads) {
  const int per_node = local_processes(1);
  const int nodes = (world_size + per_node - 1) / per_node;
  return nodes * std::min(per_node, std::max(1, node_cores() / std::max(1, threads)));
}

CheckpointJob job_of(const RunConfig& cfg, const parallel::Coord& me, RankState& state,
                     comm::Communicator* world) {
  CheckpointJob job;
  job.model = cfg.model;
  job.layout = {cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp, cfg.parallel.vp,
                cfg.parallel.zero};
  job.tp_rank = me.tp;
  job.dp_rank = me.dp;
  job.pp_rank = me.pp;
  job.state = &state;
  job.world = world;
  return job;
}

}  // namespace

Result<schedule::Schedule> run_schedule(const RunConfig& cfg) {
  const auto& p = cfg.parallel;
  auto kind = schedule::parse_kind(p.schedule);
  if (!kind.ok()) return kind.status();
  return runner_schedule(cfg.model, kind.value(), p.pp, p.vp, cfg.microbatches());
}

RankShape rank_shape(const RunConfig& cfg, int pp_rank) {
  const auto& p = cfg.parallel;
  return {.B = cfg.train.micro_batch,
          .T = cfg.train.seq_len,
          .recompute = cfg.recompute(),
          .pp_rank = pp_rank,
          .tp = {p.tp, p.sequence_parallel},
          .zero = {p.zero, p.dp}};
}

namespace {

// The pipeline runner of this rank's chunks.
Result<std::unique_ptr<PipelineRunner>> make_runner(const RunConfig& cfg,
                                                    const parallel::ProcessGroups& groups,
                                                    int pp_rank) {
  auto program = run_schedule(cfg);
  if (!program.ok()) return program.status();
  return std::make_unique<PipelineRunner>(
      cfg.model, program.value(), pipeline_options(groups, rank_shape(cfg, pp_rank), cfg.adamw()));
}

// The steps of an engine: forwarded to what runs them (PipelineRunner, DeviceTrainer).
template <typename Runner>
class EngineOver : public Engine {
 public:
  void init(uint64_t seed) override { runner().init(seed); }
  StepStats step(const int32_t* tokens, const int32_t* targets, float lr,
                 double clip_norm) override {
    return runner().step(tokens, targets, lr, clip_norm);
  }
  float evaluate(const int32_t* tokens, const int32_t* targets, int batches, int total) override {
    return runner().evaluate(tokens, targets, batches, total);
  }

 protected:
  virtual Runner& runner() = 0;
};

// A rank's training state: its chunks' optim::DistributedOptimizer buffers
// (DistributedOptimizer::state()), in its backend's memory: read and written in place where that
// is host memory, else streamed a window at a time through a host buffer of `staging_bytes`,
// allocated at the first checkpoint (a run that never saves never holds it). No host copy of the
// model state exists either way.
class OptimizerState final : public RankState {
 public:
  OptimizerState(std::span<model::Gpt* const> chunks,
                 std::span<optim::DistributedOptimizer* const> opts, const RunConfig::Parallel& p,
                 int dp_rank, int64_t staging_bytes)
      : chunks_(chunks),
        opts_(opts),
        zero_(p.zero),
        dp_(p.dp),
        dp_rank_(dp_rank),
        staging_floats_(std::max<int64_t>(staging_bytes / int64_t{sizeof(float)}, 1)) {}
  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  checkpoint::ChunkPlace place(int j) const override {
    const model::Gpt& g = *chunks_[j];
    return {&g.param_layout(), g.stage(), zero_, dp_, dp_rank_};
  }
  float* host_buffer(int j, int group) override {
    if (!opts_[j]->backend().host_memory()) return nullptr;
    const optim::DistributedOptimizer::StateView s = opts_[j]->state();
    return group == 0 ? s.params : group == 1 ? s.m : s.v;
  }
  void read(int j, int group, int64_t at, int64_t n, float* out) override {
    opts_[j]->read_state(group, at, n, out);
  }
  void write(int j, int group, int64_t at, int64_t n, const float* in) override {
    opts_[j]->write_state(group, at, n, in);
  }
  std::span<float> staging() override {
    if (opts_[0]->backend().host_memory()) return {};
    if (staging_.empty()) staging_.resize(static_cast<size_t>(staging_floats_));
    return staging_;
  }
  int step_count() const override { return opts_[0]->step_count(); }
  optim::AdamWConfig adamw() const override { return opts_[0]->config(); }
  void loaded(int step_count) override {
    for (optim::DistributedOptimizer* opt : opts_) opt->state_loaded(step_count);
  }

 private:
  std::span<model::Gpt* const> chunks_;
  std::span<optim::DistributedOptimizer* const> opts_;
  int zero_, dp_, dp_rank_;
  int64_t staging_floats_;
  std::vector<float> staging_;
};

// The CPU kernels in fp32: PipelineRunner, its DistributedOptimizers (ZeRO 0-3) and finish_step.
class HostEngine final : public EngineOver<PipelineRunner> {
 public:
  HostEngine(const RunConfig& cfg, const parallel::Coord& me, comm::Communicator* world,
             int64_t rss_before, std::unique_ptr<PipelineRunner> runner)
      : cfg_(cfg),
        me_(me),
        world_(world),
        rss_before_(rss_before),
        runner_(std::move(runner)),
        state_(runner_->chunks(), runner_->optimizers(), cfg_.parallel, me.dp, 0) {}

  // "tp=2 pp=1 dp=1 (sequence parallel), 2 ranks x 1 thread; " or "1 thread; "
  std::string describe() const override {
    const int threads = kernels::num_threads();
    const auto& p = cfg_.parallel;
    const std::string threads_text = fmt::format("{} thread{}", threads, threads == 1 ? "" : "s");
    const int world = p.tp * p.pp * p.dp;
    if (world == 1) return threads_text + "; ";
    return fmt::format("tp={} pp={} dp={}{}, {} ranks x {}; ", p.tp, p.pp, p.dp,
                       p.sequence_parallel && p.tp > 1 ? " (sequence parallel)" : "", world,
                       threads_text);
  }

  // Each rank's ceiling at its thread count, times the ranks that can run at once: the job's.
  // The ceiling's operands and oneDNN's packing buffers for them are not training's memory: the
  // peak before each measurement is kept, and the measurement's burst forgotten.
  double gemm_ceiling(bool fresh) override {
    const int b = cfg_.train.micro_batch, T = cfg_.train.seq_len;
    peak_before_ceilings_ = std::max(peak_before_ceilings_, peak_resident_bytes());
    const double mine = fresh ? measure_gemm_ceiling(model::training_gemm_shapes(cfg_.model, b, T),
                                                     3, kernels::matmul_precision())
                                    .rate()
                              : cached_gemm_ceiling(cfg_.model, b, T);
    forget_burst();
    return mine * concurrent_ranks(cfg_.parallel.tp * cfg_.parallel.pp * cfg_.parallel.dp,
                                   kernels::num_threads());
  }

  Memory memory() const override {
    const int64_t peak = std::max(peak_resident_bytes(), peak_before_ceilings_);
    return {"peak memory per rank, measured (resident above the start) / predicted",
            static_cast<double>(peak - rss_before_),
            static_cast<double>(runner_->predicted_memory().total())};
  }

  CheckpointJob checkpoint_job() override { return job_of(cfg_, me_, state_, world_); }

 private:
  PipelineRunner& runner() override { return *runner_; }

  const RunConfig cfg_;
  parallel::Coord me_;
  comm::Communicator* world_;
  int64_t rss_before_ = 0;
  int64_t peak_before_ceilings_ = 0;
  std::unique_ptr<PipelineRunner> runner_;
  OptimizerState state_;
};

// A kernels::Backend in bf16 mixed precision: DeviceTrainer. Its checkpoints stream the state
// out of the backend's memory (OptimizerState); no host copy of the model state exists.
class DeviceEngine final : public EngineOver<DeviceTrainer> {
 public:
  DeviceEngine(const RunConfig& cfg, const parallel::Coord& me, comm::Communicator* world,
               const parallel::ProcessGroups& groups, const EngineDevice& device)
      : cfg_(cfg), me_(me), world_(world), backend_(*device.backend) {
    // This rank's groups on the device's memory: the same ranks as the host groups.
    auto data_group = [&](comm::Communicator& host) -> comm::Communicator* {
      device_groups_.push_back(device.group ? device.group(host)
                                            : host.split(0, host.rank(), host.name()));
      return device_groups_.back().get();
    };
    trainer_ = std::make_unique<DeviceTrainer>(
        cfg.model, run_schedule(cfg).value_or_throw("invalid pipeline"),
        pipeline_options(groups, rank_shape(cfg, me.pp), cfg.adamw(), &backend_, data_group));
    state_ = std::make_unique<OptimizerState>(trainer_->chunks(), trainer_->optimizers(),
                                              cfg.parallel, me.dp, device.staging_bytes);
  }

  // "tp=1 pp=2 dp=1, 2 ranks on host, bf16 mixed precision; "
  std::string describe() const override {
    const auto& p = cfg_.parallel;
    const int world = p.tp * p.pp * p.dp;
    return fmt::format(
        "{}{}, bf16 mixed precision; ",
        world > 1 ? fmt::format("tp={} pp={} dp={}, {} ranks on ", p.tp, p.pp, p.dp, world) : "",
        backend_.name());
  }
  double gemm_ceiling(bool) override {
    return device_gemm_ceiling(backend_, cfg_.model, cfg_.train.micro_batch, cfg_.train.seq_len);
  }
  Memory memory() const override {
    return {backend_.name() + " memory per rank, allocated / predicted",
            static_cast<double>(backend_.allocated_bytes()),
            static_cast<double>(trainer_->predicted_memory().total())};
  }

  CheckpointJob checkpoint_job() override { return job_of(cfg_, me_, *state_, world_); }

 private:
  DeviceTrainer& runner() override { return *trainer_; }

  const RunConfig cfg_;
  parallel::Coord me_;
  comm::Communicator* world_;
  kernels::Backend& backend_;
  // Before the trainer: its groups outlive the trainer's sends in flight.
  std::vector<std::unique_ptr<comm::Communicator>> device_groups_;
  std::unique_ptr<DeviceTrainer> trainer_;
  std::unique_ptr<OptimizerState> state_;
};

}  // namespace

double cached_gemm_ceiling(const model::GptConfig& cfg, int B, int T) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int, int, int, int, int>, double> cache;
  const auto key =
      std::make_tuple(cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.padded_vocab(), B, T,
                      kernels::num_threads(), static_cast<int>(kernels::matmul_precision()));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  // Three timed batches per shape: the ceiling is a reference line, not a benchmark.
  const double rate =
      measure_gemm_ceiling(model::training_gemm_shapes(cfg, B, T), 3, kernels::matmul_precision())
          .rate();
  cache[key] = rate;
  return rate;
}

Result<std::unique_ptr<Engine>> make_engine(const RunConfig& cfg,
                                            const parallel::ProcessGroups& groups,
                                            comm::Communicator* world, const EngineDevice& device) {
  const parallel::Topology topo({cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp});
  const parallel::Coord me = topo.coord(world != nullptr ? world->rank() : 0);
  if (device.backend != nullptr) {
    return std::unique_ptr<Engine>(std::make_unique<DeviceEngine>(cfg, me, world, groups, device));
  }
  const int64_t rss_before = current_resident_bytes();  // the model's memory is what comes after
  auto runner = make_runner(cfg, groups, me.pp);
  if (!runner.ok()) return runner.status();
  return std::unique_ptr<Engine>(
      std::make_unique<HostEngine>(cfg, me, world, rss_before, std::move(runner).value()));
}

}  // namespace weft::runtime
