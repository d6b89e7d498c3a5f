#include "weft/model/memory.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "weft/core/check.h"
#include "weft/core/memory_usage.h"
#include "weft/core/pending_file.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/gemm.h"
#include "weft/model/activation_layout.h"
#include "weft/model/param_layout.h"
#include "weft/optim/shards.h"

namespace weft::model {

namespace {

constexpr int64_t kFloat = sizeof(float);

// What a block the model or the optimizer takes from its backend counts as: what
// Backend::allocated_bytes() counts, 256-byte aligned (a BF16Mixed, device, backend; or any
// backend's own count); or, where the memory model predicts a host process's resident memory
// (fp32), the bytes in whole huge pages from 2 MiB on (kernels::host_resident_bytes).
int64_t block_bytes(int64_t bytes, Precision precision, Counted counted = Counted::Process) {
  return precision == Precision::BF16Mixed || counted == Counted::Backend
             ? backend_block_bytes(bytes)
             : kernels::host_resident_bytes(bytes);
}

// The MPI temporaries of one unit's gradient reduction on the busiest rank, in bytes (Open
// MPI 4.1's nonblocking collectives; measured with MPI_Iallreduce on 2, 4 and 8 ranks of this
// machine, docs/planner.md §5):
//   all-reduce (ZeRO 0): the ring weft selects (comm/mpi_communicator.cc) receives one segment,
//     1/dp of the buffer, into a temporary on every rank;
//   reduce-scatter (ZeRO 1-3): weft's own ring (comm/mpi_communicator.cc, RingReduceScatter)
//     receives one block, 1/dp of the buffer, and from dp = 3 on keeps a second for the running
//     sum.
int64_t reduction_temporaries(int64_t unit_bytes, ZeroSharding zero) {
  if (zero.dp <= 1) return 0;  // one replica: no MPI collective runs
  const int64_t block = (unit_bytes + zero.dp - 1) / zero.dp;
  return zero.stage == 0 ? block : (zero.dp > 2 ? 2 : 1) * block;
}

// glibc's malloc serves a request below the mmap threshold weft fixes (kMmapThresholdBytes, 1 MiB;
// core/memory_usage.h) from the heap, where the pages stay resident after free: such temporaries
// count for the whole step. Larger ones are mapped and unmapped per call, so they count only while
// their reduction is in flight. (Under glibc's dynamic threshold the line moved with what the
// process had freed, up to 32 MiB.)
constexpr int64_t kHeapCeiling = kMmapThresholdBytes;

// From ZeRO-2 on, the units a rank uses live in one pool of unit-sized buffers of its backend that
// all its chunks share (optim/unit_pool.h): a unit's full gradients from the first write of a
// backward pass until their reduction completes, under ZeRO-3 also its gathered parameters from
// gather to release. The pool keeps every buffer it ever made, so what stays resident is, per
// buffer size, the most in use at once over the passes. A size is the bytes asked for, as
// UnitPool::acquire matches them, not the block the backend rounds them to: on the host a layer's
// 3.0 MiB and the wte's 4.0 MiB both take a 4 MiB block of huge pages, but neither serves the
// other (counting them as one size left one buffer out: ZeRO-3 read 6% above its prediction at dp=2
// on a 4-layer C=256 GPT).
class PoolHeld {
 public:
  void take(int64_t bytes) {
    int& k = now_[bytes];
    most_[bytes] = std::max(most_[bytes], ++k);
  }
  void give(int64_t bytes) { --now_[bytes]; }
  int64_t held(Precision precision, Counted counted = Counted::Process) const {
    int64_t total = 0;
    for (const auto& [bytes, k] : most_) total += k * block_bytes(bytes, precision, counted);
    return total;
  }

 private:
  std::map<int64_t, int> now_, most_;
};

// One chunk's passes, run as model::Gpt and the optimizer run them: ZeRO-3's forward gathers the
// embedding's wte and wpe, each layer, then the head's ln_f and wte, one group at a time; the
// backward runs the head (ln_f and the tied wte), the layers last to first, then the embedding
// (wpe, wte), each gathering its units (ZeRO-3), taking gradient buffers for the units it writes,
// releasing its parameters and then marking its complete units ready; a ready unit's reduction
// starts at once, at most kZeroBucketsInFlight are in flight (the oldest completes first, giving
// its gradient buffer back), and all complete at the pass's end. Records the pool's buffers in
// `pool` (ZeRO 2/3), the heap temporaries in `heap` (per size, the most in flight at once: a freed
// block serves the next temporary of its size but, measured, not one of another size: pipe-8l's
// reduce-scatters hold two layers' and the wte's, 20 MiB on rank 0), and returns the most bytes of
// mapped (>= kHeapCeiling) temporaries in flight at once.
// With deferred weight gradients (zb-h1) the backward pass writes only the LayerNorms' gradients
// (and none of the embedding's) and marks nothing ready; the weight pass then writes the rest and
// marks every unit ready, last to first (model::Gpt::backward_weights).
int64_t run_passes(const ParamLayout& layout, const StageSpec& stage, ZeroSharding zero,
                   bool deferred, Precision precision, std::map<int64_t, int>& heap,
                   PoolHeld& pool) {
  const int64_t read_bytes = act_bytes(precision);
  const int n = static_cast<int>(layout.units.size());
  std::vector<int64_t> buffer(n), param_buffer(n), temporaries(n);
  int wte = -1, wpe = -1, ln_f = -1, lm_head = -1;
  std::vector<int> layers;
  for (int u = 0; u < n; ++u) {
    const optim::ParamUnit& unit = layout.units[u];
    const int64_t elements =
        zero.stage == 0 ? unit.numel() : optim::zero_padded_size(unit.numel(), zero.dp);
    const int64_t bytes = elements * kFloat;
    buffer[u] = bytes;  // as UnitPool::acquire is asked (PoolHeld)
    param_buffer[u] = elements * read_bytes;
    temporaries[u] = reduction_temporaries(bytes, zero);
    if (unit.name == "wte") {
      wte = u;
    } else if (unit.name == "wpe") {
      wpe = u;
    } else if (unit.name == "ln_f") {
      ln_f = u;
    } else if (unit.name == "lm_head") {
      lm_head = u;
    } else {
      layers.push_back(u);
    }
  }
  // The LM head's weight: the tied wte, or lm_head (model::Gpt::head_name).
  const int head_w = lm_head >= 0 ? lm_head : wte;
  struct Pass {
    std::vector<int> gathered, written, ready;
  };
  std::vector<Pass> forward, backward;
  if (stage.embedding) forward.push_back({{wte, wpe}, {}, {}});
  for (int l : layers) forward.push_back({{l}, {}, {}});
  if (stage.head) {
    forward.push_back({{ln_f, head_w}, {}, {}});
    Pass head{{ln_f, head_w}, {ln_f, head_w}, {ln_f}};
    // The tied wte gets the embedding's part first on a stage with both.
    if (head_w != wte || !stage.embedding) head.ready.push_back(head_w);
    if (deferred) head = {{ln_f, head_w}, {ln_f}, {}};
    backward.push_back(head);
  }
  for (auto l = layers.rbegin(); l != layers.rend(); ++l) {
    backward.push_back({{*l}, {*l}, deferred ? std::vector<int>{} : std::vector<int>{*l}});
  }
  if (deferred) {
    Pass weights{{}, {}, {}};
    if (stage.embedding) weights.written = {wpe, wte};
    if (stage.head) weights.written.push_back(head_w);
    for (int u = n - 1; u >= 0; --u) weights.ready.push_back(u);
    backward.push_back(weights);
  } else if (stage.embedding) {
    backward.push_back({{}, {wpe, wte}, {wpe, wte}});
  }
  // A unit the variant lacks (wpe with rotary positions) is -1: no pass touches it.
  for (auto* passes : {&forward, &backward}) {
    for (Pass& p : *passes) {
      for (auto* units : {&p.gathered, &p.written, &p.ready}) std::erase(*units, -1);
    }
  }

  // Heap temporaries: the most of one size in flight at once.
  std::map<int64_t, int> count;
  for (int u = 0; u < n; ++u) {
    if (temporaries[u] > 0 && temporaries[u] < kHeapCeiling) ++count[temporaries[u]];
  }
  for (const auto& [bytes, k] : count) {
    heap[bytes] = std::max(heap[bytes], std::min(k, optim::kZeroBucketsInFlight));
  }

  const bool pooled_grads = zero.stage >= 2, pooled_params = zero.stage >= 3;
  if (pooled_params) {
    for (const Pass& p : forward) {
      for (int u : p.gathered) pool.take(param_buffer[u]);
      for (int u : p.gathered) pool.give(param_buffer[u]);
    }
  }
  int64_t mapped = 0;
  std::vector<bool> written(n, false);
  std::vector<int> in_flight;  // oldest first
  auto complete_oldest = [&] {
    if (pooled_grads) pool.give(buffer[in_flight.front()]);
    written[in_flight.front()] = false;
    in_flight.erase(in_flight.begin());
  };
  for (const Pass& p : backward) {
    if (pooled_params) {
      for (int u : p.gathered) pool.take(param_buffer[u]);
    }
    for (int u : p.written) {
      if (!written[u] && pooled_grads) pool.take(buffer[u]);
      written[u] = true;
    }
    if (pooled_params) {
      for (int u : p.gathered) pool.give(param_buffer[u]);
    }
    for (int u : p.ready) {
      if (in_flight.size() >= size_t{optim::kZeroBucketsInFlight}) complete_oldest();
      in_flight.push_back(u);
      int64_t now = 0;
      for (int v : in_flight) now += temporaries[v] >= kHeapCeiling ? temporaries[v] : 0;
      mapped = std::max(mapped, now);
    }
  }
  while (!in_flight.empty()) complete_oldest();
  return mapped;
}

// A chunk's steady parameters, gradients and optimizer state under ZeRO (see memory.h), as the
// model and optim::DistributedOptimizer take them from the backend (block_bytes).
void add_model_state(MemoryEstimate& m, const ParamLayout& layout, ZeroSharding zero,
                     Precision precision, Counted counted) {
  const bool bf16 = precision == Precision::BF16Mixed;
  auto block = [&](int64_t bytes) { return block_bytes(bytes, precision, counted); };
  const int64_t n = layout.buffer.total();
  if (bf16) {  // the AdamW plan's tables, at the capacity the optimizer plans with
    const kernels::AdamWTableBytes table = kernels::adamw_table_bytes(
        {.segments = static_cast<int64_t>(layout.buffer.slices().size()), .elements = n});
    m.optimizer += block(table.segments) + block(table.chunks);
  }
  if (zero.stage == 0) {
    m.params += block(n * kFloat) + (bf16 ? block(n * 2) : 0);  // + the bf16 read copy
    m.grads += block(n * kFloat);
    m.optimizer += 2 * block(n * kFloat);  // AdamW's m and v
    return;
  }
  // Every rank's shard buffers are as large as rank 0's (equal ranges per unit).
  const int64_t S = optim::zero_owned_elements(layout, zero.stage, zero.dp, 0);
  m.optimizer += 2 * block(S * kFloat);  // m, v
  // The model's weights as the forward reads them, whole: fp32, or bf16 (the master weights are
  // the shard). ZeRO-3: gathered units are in the pool (run_passes).
  if (zero.stage <= 2) m.params += block(n * (bf16 ? 2 : kFloat));
  if (bf16) {
    m.optimizer += block(S * kFloat) + block(S * 2);  // the master shard and its bf16 copy
  } else if (zero.stage <= 2) {
    m.optimizer += block(S * kFloat);  // master weights
  } else {
    m.params += block(S * kFloat);  // master weights
  }
  m.grads += block(S * kFloat);  // the reduced shard
  // The model's gradients (ZeRO 2 on: the units in use, in the pool; run_passes).
  if (zero.stage == 1) m.grads += block(n * kFloat);
}

// The bytes of a stage's activation (per slot) or workspace layout (activation_layout.h: the
// model allocates exactly these), remembered per shape: the planner prices tens of thousands of
// layouts whose stages repeat a few hundred shapes, and building a layout names every slice.
int64_t layout_bytes(bool workspace, const GptConfig& cfg, const RankShape& shape,
                     const StageSpec& stage, const MemoryCounting& counting) {
  const auto& [B, T, mode, pp_rank, tp, zero] = shape;
  const Precision precision = counting.precision;
  const Counted counted = counting.counted;
  // The numbers a layout depends on (not the model's name: string keys cost the planner 12%).
  using Key = std::tuple<bool, decltype(cfg.shape_key()), int, int, int, int, bool, int, int, bool,
                         bool, int, int>;
  static std::mutex mutex;
  static std::map<Key, int64_t> cache;
  const Key key{workspace,
                cfg.shape_key(),
                B,
                T,
                static_cast<int>(mode),
                tp.tp,
                tp.sequence_parallel,
                stage.first_layer,
                stage.end_layer(cfg),
                stage.embedding,
                stage.head,
                static_cast<int>(precision),
                static_cast<int>(counted)};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const ActivationLayout layout =
      workspace ? gpt_workspace_layout(cfg, B, T, mode, tp, stage, precision)
                : gpt_activation_layout(cfg, B, T, mode, tp, stage, precision);
  // Its two blocks (model::Gpt::allocate).
  const int64_t bytes = block_bytes(layout.act.total() * act_bytes(precision), precision, counted) +
                        block_bytes(layout.f32.total() * 4, precision, counted);
  const std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, bytes);
  return bytes;
}

// A stage's parameter layout (param_layout.h), remembered per shape for the same reason: building
// one names every slice, and the planner asks for the same few hundred shapes again and again.
const ParamLayout& stage_param_layout(const GptConfig& cfg, int tp, const StageSpec& stage,
                                      int64_t unit_align) {
  using Key = std::tuple<decltype(cfg.shape_key()), int, int, int, bool, bool, int64_t>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<const ParamLayout>> cache;
  const Key key{cfg.shape_key(), tp,         stage.first_layer, stage.end_layer(cfg),
                stage.embedding, stage.head, unit_align};
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<const ParamLayout>& slot = cache[key];
  if (slot == nullptr) {
    slot = std::make_unique<const ParamLayout>(gpt_param_layout(cfg, tp, 0, stage, unit_align));
  }
  return *slot;
}

}  // namespace

int64_t tp_collective_temporaries(int64_t activation_bytes, TpShape tp) {
  if (tp.tp <= 1) return 0;
  if (!tp.sequence_parallel) return activation_bytes;
  const int64_t block = (activation_bytes + tp.tp - 1) / tp.tp;  // the ring's receive block
  return (tp.tp > 2 ? 2 : 1) * block;
}

int64_t gemm_packing_bytes(int64_t M, int64_t N, int64_t K, bool trans_b) {
  if (!trans_b || K <= 128 || M <= 384) return 0;
  return kFloat * (std::min<int64_t>(M, 512) + std::min<int64_t>(N, 9984)) *
         std::min<int64_t>(K, 384);
}

int64_t gemm_packing_resident(const GptConfig& cfg, int B, int T, TpShape tp, int threads,
                              const StageSpec& stage) {
  // kernels/cpu/gemm.cc's split, by its own rules (kernels/gemm.h): one dnnl_sgemm per thread
  // along C's longer side, in slabs of a multiple of 16, when the GEMM is large enough.
  const int64_t N = int64_t{B} * T, C = cfg.n_embd, t = tp.tp;
  std::vector<int64_t> most(std::max(1, threads), 0);  // per thread: its largest buffer
  auto forward = [&](int64_t out, int64_t in) {        // x[N, in] W^T -> [N, out]
    if (!kernels::gemm_splits(N, out, in, threads)) {
      most[0] = std::max(most[0], gemm_packing_bytes(N, out, in, true));
      return;
    }
    for (int i = 0; i < threads; ++i) {
      const auto [begin, end] = kernels::slab(std::max(N, out), i, threads);
      if (end <= begin) continue;
      const int64_t bytes = N >= out ? gemm_packing_bytes(end - begin, out, in, true)
                                     : gemm_packing_bytes(N, end - begin, in, true);
      most[i] = std::max(most[i], bytes);
    }
  };
  if (stage.end_layer(cfg) > stage.first_layer) {
    forward(cfg.qkv_width() / t, C);  // attn.qkv
    forward(C, C / t);                // attn.proj
    forward(cfg.fc_width() / t, C);   // mlp.fc
    forward(C, cfg.ffn() / t);        // mlp.proj
  }
  if (stage.head) forward(cfg.padded_vocab() / t, C);  // lm_head
  int64_t total = 0;
  for (const int64_t bytes : most) total += bytes;
  return total;
}

int64_t zero_pool_bytes(const GptConfig& cfg, const RankShape& shape, const RankProgram& rank,
                        Precision precision) {
  const ZeroSharding zero = shape.zero;
  if (zero.stage < 2) return 0;
  PoolHeld pool;
  std::map<int64_t, int> heap;  // not asked for here
  for (const ChunkMemory& c : rank.chunks) {
    run_passes(
        stage_param_layout(cfg, shape.tp.tp, c.stage, optim::zero_unit_align(zero.stage, zero.dp)),
        c.stage, zero, rank.deferred_weight_grads, precision, heap, pool);
  }
  return pool.held(precision);
}

int64_t snapshot_bytes(const GptConfig& cfg, const RankShape& shape, const RankProgram& rank) {
  const ZeroSharding zero = shape.zero;
  int64_t group = 0;  // floats of the params group over the chunks; m and v hold as many
  for (const ChunkMemory& c : rank.chunks) {
    const ParamLayout& layout =
        stage_param_layout(cfg, shape.tp.tp, c.stage, optim::zero_unit_align(zero.stage, zero.dp));
    group += zero.stage == 0 ? layout.buffer.total()
                             : optim::zero_owned_elements(layout, zero.stage, zero.dp, 0);
  }
  // The parameters, then from the next block m and v (runtime::CheckpointSaver::plan_snapshot).
  // The writer's staging buffer is not counted: only what is out of phase with its file goes
  // through it, and a snapshot's bytes are in phase but for the seams between pieces (the
  // background save of tests/runtime/train_memory_test.cc measured 122.8 MiB against 118.8).
  constexpr int64_t kBlock = kDirectBlockBytes / kFloat;
  return ((group + kBlock - 1) / kBlock * kBlock + 2 * group) * kFloat;
}

// One body for both engines: they run the same model and runtime, and differ only in what else
// lives in the memory counted. The host engine's is the process's: MPI's temporaries, the kernels'
// scratch and the process's runtime beside its buffers; the device engine's is the backend's
// arena, where only the buffers are.
MemoryEstimate estimate_rank_memory(const GptConfig& cfg, const RankShape& shape,
                                    const RankProgram& rank, const MemoryCounting& counting) {
  const auto& [B, T, mode, pp_rank, tp, zero] = shape;
  const Precision precision = counting.precision;
  const Counted counted = counting.counted;
  // The host process's own memory beside its buffers (MPI, kernel scratch, runtime) counts.
  const bool host = precision == Precision::FP32 && counted == Counted::Process;
  const int64_t N = int64_t{B} * T, C = cfg.n_embd, t = tp.tp, a = act_bytes(precision);
  const bool sp = tp.sequence_parallel && t > 1;
  const int64_t boundary = (sp ? N / t : N) * C * a;  // a stage's input or output, [Ns, C]
  auto block = [&](int64_t bytes) { return block_bytes(bytes, precision, counted); };
  MemoryEstimate m;
  // ZeRO's transient state: ZeRO 2/3 finish every reduction at the end of each backward pass, so
  // one chunk's busiest moment is the rank's; ZeRO 0/1 reduce after the last pass only, and a
  // chunk's reductions may run on into the next chunk's.
  int64_t mapped = 0;           // host: mapped MPI temporaries in flight at once
  PoolHeld pool;                // ZeRO 2/3: the rank's unit pool, over all its chunks' passes
  std::map<int64_t, int> heap;  // host: heap temporaries, bytes -> at most in flight
  int64_t packing = 0;          // host: the GEMM packing buffers (the chunks share the threads)
  for (const ChunkMemory& c : rank.chunks) {
    const ParamLayout& layout =
        stage_param_layout(cfg, tp.tp, c.stage, optim::zero_unit_align(zero.stage, zero.dp));
    add_model_state(m, layout, zero, precision, counted);
    if (host || zero.stage >= 2) {
      const int64_t busiest =
          run_passes(layout, c.stage, zero, rank.deferred_weight_grads, precision, heap, pool);
      mapped = zero.stage <= 1 ? mapped + busiest : std::max(mapped, busiest);
    }
    m.workspace += layout_bytes(true, cfg, shape, c.stage, counting);
    const int slots = rank.slots.at(c.pool);
    if (rank.deferred_weight_grads) {  // each slot's block, taken at its first I pass
      m.workspace += slots * block(deferred_grad_elements(cfg, B, T, tp, c.stage) * a);
    }
    if (host) {
      packing = std::max(packing, gemm_packing_resident(cfg, B, T, tp, counting.threads, c.stage));
    }
    if (c.stage.head) m.workspace += block(sizeof(double));  // the step's loss (pipeline_runner)
  }
  // Each slot pool's activations, in the layout of its chunks (the same for all of them).
  for (int p = 0; p < static_cast<int>(rank.slots.size()); ++p) {
    const auto c = std::find_if(rank.chunks.begin(), rank.chunks.end(),
                                [&](const ChunkMemory& c) { return c.pool == p; });
    WEFT_CHECK(c != rank.chunks.end(), "slot pool ", p, " has no chunk");
    m.activations += rank.slots[p] * layout_bytes(false, cfg, shape, c->stage, counting);
  }
  if (host && counting.snapshot) m.snapshot = snapshot_bytes(cfg, shape, rank);
  m.grads += pool.held(precision, counted);  // ZeRO-3: and the gathered parameters
  m.workspace += (rank.act_buffers + rank.grad_buffers) * block(boundary);
  // Scatter/gather (tp > 1 without sequence parallelism): the 1/tp part a boundary arrives in.
  if (rank.pipelined && t > 1 && !sp) m.workspace += block(N / t * C * a);
  if (!host) return m;
  m.workspace += mapped;
  for (const auto& [bytes, k] : heap) m.workspace += k * bytes;
  m.workspace += tp_collective_temporaries(N * C * a, tp);
  m.workspace += int64_t{counting.threads} * T * T * 4;  // attention backward: T x T per thread
  m.runtime = counting.runtime_bytes + packing;
  return m;
}

}  // namespace weft::model
