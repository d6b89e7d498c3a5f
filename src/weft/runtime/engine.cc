#include "weft/runtime/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "weft/core/memory_usage.h"
#include "weft/core/node.h"
#include "weft/kernels/kernels.h"
#include "weft/layout/rank.h"
#include "weft/parallel/topology.h"
#include "weft/runtime/gemm_ceiling.h"
#include "weft/runtime/pipeline_runner.h"

namespace weft::runtime {
namespace {

// How many of the job's ranks can compute at once: all of them, unless a node holds more ranks x
// threads than cores (oversubscribed, as in the tests), where they take turns.
int concurrent_ranks(int world_size, int threads) {
  const int per_node = local_processes(1);
  const int nodes = (world_size + per_node - 1) / per_node;
  return nodes * std::min(per_node, std::max(1, node_cores() / std::max(1, threads)));
}

// The GEMM ceiling (FLOP/s) of this model's training GEMMs at micro batch B and length T on this
// machine: measured on the first call for a shape, or when `fresh`, else the first measurement.
// Three timed batches per shape: the ceiling is a reference line, not a benchmark.
double gemm_ceiling_of(const model::GptConfig& cfg, int B, int T, bool fresh) {
  static std::mutex mu;
  static std::map<std::tuple<decltype(cfg.shape_key()), int, int, int, int>, double> cache;
  const auto key = std::make_tuple(cfg.shape_key(), B, T, kernels::num_threads(),
                                   static_cast<int>(kernels::matmul_precision()));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(key);
  if (!fresh && it != cache.end()) return it->second;
  const double rate = GemmCeilingMeter(model::training_gemm_shapes(cfg, B, T))
                          .measure(3, kernels::matmul_precision())
                          .rate();
  if (it == cache.end()) cache.emplace(key, rate);
  return rate;
}

}  // namespace

Result<schedule::Schedule> run_schedule(const config::RunConfig& cfg) {
  const auto& p = cfg.parallel;
  return runner_schedule(cfg.model, p.schedule, p.pp, p.vp, cfg.microbatches());
}

Engine::Engine(const config::RunConfig& cfg, const parallel::Coord& me, comm::Communicator* world,
               const parallel::ProcessGroups& groups, const schedule::Schedule& program,
               const EngineDevice& device)
    : cfg_(cfg), me_(me), world_(world), device_(device.backend) {
  // This rank's groups on the device's memory: the same ranks as the host groups.
  DataGroups data_group;
  if (device_ != nullptr) {
    data_group = [&](comm::Communicator& host) -> comm::Communicator* {
      device_groups_.push_back(device.group ? device.group(host)
                                            : host.split(0, host.rank(), host.name()));
      return device_groups_.back().get();
    };
  }
  rss_before_ = current_resident_bytes();  // the model's memory is what comes after
  runner_ = std::make_unique<PipelineRunner>(
      cfg.model, program,
      pipeline_options(groups, layout::rank_shape(cfg.parallel, cfg.train.seq_len, me.pp),
                       cfg.adamw(), device_, data_group));
  state_ = std::make_unique<RankState>(runner_->chunks(), runner_->optimizers(), cfg.parallel,
                                       me.dp, device_ != nullptr ? device.staging_bytes : 0);
}

Engine::~Engine() = default;

std::string Engine::describe() const {
  const auto& p = cfg_.parallel;
  const int world = p.grid().world();
  if (device_ != nullptr) {  // "tp=1 pp=2 dp=1, 2 ranks on host, bf16 mixed precision; "
    return fmt::format(
        "{}{}, bf16 mixed precision; ",
        world > 1 ? fmt::format("tp={} pp={} dp={}, {} ranks on ", p.tp, p.pp, p.dp, world) : "",
        device_->name());
  }
  // "tp=2 pp=1 dp=1 (sequence parallel), 2 ranks x 1 thread; " or "1 thread; "
  const int threads = kernels::num_threads();
  const std::string threads_text = fmt::format("{} thread{}", threads, threads == 1 ? "" : "s");
  if (world == 1) return threads_text + "; ";
  return fmt::format("tp={} pp={} dp={}{}, {} ranks x {}; ", p.tp, p.pp, p.dp,
                     p.sequence_parallel && p.tp > 1 ? " (sequence parallel)" : "", world,
                     threads_text);
}

double Engine::gemm_ceiling(bool fresh) {
  const int b = cfg_.parallel.micro_batch, T = cfg_.train.seq_len;
  if (device_ != nullptr) return device_gemm_ceiling(*device_, cfg_.model, b, T);
  // Each rank's ceiling at its thread count, times the ranks that can run at once: the job's.
  double mine = 0;
  outside_training([&] { mine = gemm_ceiling_of(cfg_.model, b, T, fresh); });
  return mine * concurrent_ranks(cfg_.parallel.grid().world(), kernels::num_threads());
}

void Engine::outside_training(const std::function<void()>& measure) {
  peak_before_ceilings_ = std::max(peak_before_ceilings_, peak_resident_bytes());
  measure();
  forget_burst();
}

Engine::Memory Engine::memory() const {
  // A ZeRO-0 replica other than dp rank 0 writes no part of a checkpoint, so keeps no snapshot.
  const bool snapshot = cfg_.keeps_snapshot() && (cfg_.parallel.zero > 0 || me_.dp == 0);
  const auto predicted = static_cast<double>(runner_->predicted_memory(snapshot).total());
  if (device_ != nullptr) {
    return {device_->name() + " memory per rank, allocated / predicted",
            static_cast<double>(device_->allocated_bytes()), predicted};
  }
  const int64_t peak = std::max(peak_resident_bytes(), peak_before_ceilings_);
  return {"peak memory per rank, measured (resident above the start) / predicted",
          static_cast<double>(peak - rss_before_), predicted};
}

CheckpointJob Engine::checkpoint_job() {
  return {.model = cfg_.model,
          .layout = cfg_.parallel,
          .tp_rank = me_.tp,
          .dp_rank = me_.dp,
          .pp_rank = me_.pp,
          .state = state_.get(),
          .world = world_};
}

Result<std::unique_ptr<Engine>> make_engine(const config::RunConfig& cfg,
                                            const parallel::ProcessGroups& groups,
                                            comm::Communicator* world, const EngineDevice& device) {
  const parallel::Topology topo(cfg.parallel.grid());
  const parallel::Coord me = topo.coord(world != nullptr ? world->rank() : 0);
  auto program = run_schedule(cfg);
  if (!program.ok()) return program.status();
  return std::make_unique<Engine>(cfg, me, world, groups, program.value(), device);
}

}  // namespace weft::runtime
