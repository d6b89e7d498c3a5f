#include "weft/model/memory.h"

#include <algorithm>
#include <map>
#include <vector>

#include "weft/model/activation_layout.h"
#include "weft/model/param_layout.h"
#include "weft/tensor/zero_shards.h"

namespace weft::model {

namespace {

constexpr int64_t kFloat = sizeof(float);
constexpr int64_t kPage = 4096;

// The MPI temporaries of one unit's gradient reduction on the busiest rank, in bytes (Open
// MPI 4.1's nonblocking collectives, libnbc; measured with MPI_Ireduce_scatter_block and
// MPI_Iallreduce on 2, 4 and 8 ranks of this machine, docs/planner.md §5):
//   all-reduce (ZeRO 0): the ring weft selects (comm/mpi_communicator.cc) receives one segment,
//     1/dp of the buffer, into a temporary on every rank;
//   reduce-scatter (ZeRO 1-3): ireduce_scatter_block reduces over a binomial tree to rank 0 and
//     scatters from there; each receive fills one of two full-size buffers, so rank 0 touches both
//     once it receives twice (dp > 2), one at dp = 2.
int64_t reduction_temporaries(int64_t unit_bytes, ZeroSharding zero) {
  if (zero.dp <= 1) return 0;  // one replica: no MPI collective runs
  if (zero.stage == 0) return (unit_bytes + zero.dp - 1) / zero.dp;
  return (zero.dp > 2 ? 2 : 1) * unit_bytes;
}

// glibc's malloc serves a request below its largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX,
// 32 MiB on 64-bit; the dynamic threshold rises to it as mapped blocks are freed) from the heap,
// where the pages stay resident after free: such temporaries count for the whole step. Larger ones
// are mapped and unmapped per call, so they count only while their reduction is in flight.
constexpr int64_t kHeapCeiling = int64_t{32} << 20;

// What a rank holds at one moment beyond its steady buffers (ZeRO's transient state).
struct Moment {
  int64_t grads = 0, params = 0, temporaries = 0;
  int64_t total() const { return grads + params + temporaries; }
};

// The busiest moment of one chunk's backward pass (and forward, for ZeRO 3's gathered units): the
// passes run as model::Gpt's backward does (the head's ln_f and tied wte, the layers last to
// first, the embedding's wpe and wte), each unit's reduction starts when its gradient is complete
// and at most kZeroBucketsInFlight are in flight; from ZeRO 2 on a unit's full gradient pages live
// from its first write until its reduction completes, and ZeRO 3 gathers a pass's units for it.
// `heap` collects the chunk's heap temporaries: per size, the most in flight at once (a freed block
// serves the next temporary of its size but, measured, not one of another size: pipe-8l's
// reduce-scatters hold two layers' and the wte's, 20 MiB on rank 0).
Moment busiest_moment(const ParamLayout& layout, const StageSpec& stage, ZeroSharding zero,
                      std::map<int64_t, int>& heap) {
  const int n = static_cast<int>(layout.units.size());
  std::vector<int64_t> pages(n), temporaries(n);
  int wte = -1, wpe = -1, ln_f = -1;
  std::vector<int> layers;
  for (int u = 0; u < n; ++u) {
    const ParamUnit& unit = layout.units[u];
    const int64_t bytes =
        (zero.stage == 0 ? unit.numel() : zero_padded_size(unit.numel(), zero.dp)) * kFloat;
    pages[u] = (unit.numel() * kFloat + kPage - 1) / kPage * kPage;
    temporaries[u] = reduction_temporaries(bytes, zero);
    if (unit.name == "wte") {
      wte = u;
    } else if (unit.name == "wpe") {
      wpe = u;
    } else if (unit.name == "ln_f") {
      ln_f = u;
    } else {
      layers.push_back(u);
    }
  }
  struct Pass {
    std::vector<int> gathered, written, ready;
  };
  std::vector<Pass> passes;
  if (stage.head) {
    Pass head{{ln_f, wte}, {ln_f, wte}, {ln_f}};
    if (!stage.embedding) head.ready.push_back(wte);  // else the embedding adds its part first
    passes.push_back(head);
  }
  for (auto l = layers.rbegin(); l != layers.rend(); ++l) passes.push_back({{*l}, {*l}, {*l}});
  if (stage.embedding) passes.push_back({{}, {wpe, wte}, {wpe, wte}});

  // Heap temporaries: the most of one size in flight at once.
  std::map<int64_t, int> count;
  for (int u = 0; u < n; ++u) {
    if (temporaries[u] > 0 && temporaries[u] < kHeapCeiling) ++count[temporaries[u]];
  }
  for (const auto& [bytes, k] : count) {
    heap[bytes] = std::max(heap[bytes], std::min(k, kZeroBucketsInFlight));
  }

  const bool lazy_grads = zero.stage >= 2, lazy_params = zero.stage >= 3;
  Moment best;
  if (lazy_params) {  // forward: the embedding gathers wte and wpe, the head wte and ln_f
    Moment forward;
    if (stage.embedding) forward.params = std::max(forward.params, pages[wte] + pages[wpe]);
    if (stage.head) forward.params = std::max(forward.params, pages[wte] + pages[ln_f]);
    for (int l : layers) forward.params = std::max(forward.params, pages[l]);
    best = forward;
  }
  std::vector<bool> written(n, false);
  std::vector<int> in_flight;  // oldest first
  auto now = [&](int64_t gathered) {
    Moment m;
    m.params = gathered;
    for (int u = 0; u < n; ++u) m.grads += lazy_grads && written[u] ? pages[u] : 0;
    for (int u : in_flight) m.temporaries += temporaries[u] >= kHeapCeiling ? temporaries[u] : 0;
    if (m.total() > best.total()) best = m;
  };
  for (const Pass& p : passes) {
    int64_t gathered = 0;
    for (int u : p.gathered) gathered += lazy_params ? pages[u] : 0;
    for (int u : p.written) written[u] = true;
    now(gathered);
    for (int u : p.ready) {
      if (in_flight.size() >= size_t{kZeroBucketsInFlight}) {
        written[in_flight.front()] = false;  // complete_oldest: its pages are returned
        in_flight.erase(in_flight.begin());
      }
      in_flight.push_back(u);
      now(0);
    }
  }
  return best;
}

// A chunk's steady parameters, gradients and optimizer state under ZeRO (see memory.h).
void add_model_state(MemoryEstimate& m, const ParamLayout& layout, ZeroSharding zero) {
  const int64_t P = layout.buffer.total() * kFloat;
  if (zero.stage == 0) {
    m.params += P;
    m.grads += P;
    m.optimizer += 2 * P;
    return;
  }
  int64_t S = 0, largest_shard = 0;
  for (const ParamUnit& u : layout.units) {
    const int64_t shard = zero_shard(u.numel(), zero.dp, 0).size() * kFloat;
    S += shard;
    largest_shard = std::max(largest_shard, shard);
  }
  m.optimizer += 2 * S;  // m, v
  if (zero.stage <= 2) {
    m.params += P;     // the model's copy, whole
    m.optimizer += S;  // master weights
  } else {
    m.params += S;  // master weights; the model's copy holds only gathered units (transient)
  }
  if (zero.stage == 1) {
    m.grads += P + S;  // the model's gradients and the reduced shard
  } else {
    m.grads += S + kZeroBucketsInFlight * largest_shard;  // the shard and the receive buffers
  }
}

}  // namespace

int64_t tp_collective_temporaries(int64_t activation_bytes, TpShape tp) {
  if (tp.tp <= 1) return 0;
  return (tp.sequence_parallel ? 2 : 1) * activation_bytes;
}

int64_t gemm_packing_bytes(int64_t M, int64_t N, int64_t K, bool trans_b) {
  if (!trans_b || K <= 128 || M <= 384) return 0;
  return kFloat * (std::min<int64_t>(M, 512) + std::min<int64_t>(N, 9984)) *
         std::min<int64_t>(K, 384);
}

int64_t gemm_packing_resident(const GptConfig& cfg, int B, int T, TpShape tp, int threads,
                              const StageSpec& stage) {
  // kernels/cpu/gemm.cc's split: one dnnl_sgemm per thread along C's longer side, in slabs of a
  // multiple of 16, when the GEMM has at least 2^24 flops and 128 rows or columns per thread.
  constexpr double kMinSplitFlops = double{1 << 24};
  constexpr int64_t kMinSlab = 128;
  const int64_t N = int64_t{B} * T, C = cfg.n_embd, t = tp.tp;
  std::vector<int64_t> most(std::max(1, threads), 0);  // per thread: its largest buffer
  auto forward = [&](int64_t out, int64_t in) {        // x[N, in] W^T -> [N, out]
    const int64_t extent = std::max(N, out);
    if (threads == 1 || 2.0 * N * out * in < kMinSplitFlops || extent < kMinSlab * threads) {
      most[0] = std::max(most[0], gemm_packing_bytes(N, out, in, true));
      return;
    }
    const int64_t units = (extent + 15) / 16;
    for (int i = 0; i < threads; ++i) {
      const int64_t slab = std::min(extent, units * (i + 1) / threads * 16) -
                           std::min(extent, units * i / threads * 16);
      if (slab <= 0) continue;
      const int64_t bytes = N >= out ? gemm_packing_bytes(slab, out, in, true)
                                     : gemm_packing_bytes(N, slab, in, true);
      most[i] = std::max(most[i], bytes);
    }
  };
  if (stage.end_layer(cfg) > stage.first_layer) {
    forward(3 * C / t, C);  // attn.qkv
    forward(C, C / t);      // attn.proj
    forward(4 * C / t, C);  // mlp.fc
    forward(C, 4 * C / t);  // mlp.proj
  }
  if (stage.head) forward(cfg.padded_vocab() / t, C);  // lm_head
  int64_t total = 0;
  for (const int64_t bytes : most) total += bytes;
  return total;
}

MemoryEstimate estimate_rank_memory(const GptConfig& cfg, int B, int T, Recompute mode, int threads,
                                    TpShape tp, const std::vector<ChunkMemory>& chunks,
                                    int microbatches, bool pipelined, bool deferred_weight_grads,
                                    ZeroSharding zero, int64_t runtime_bytes) {
  const int64_t f = sizeof(float), N = int64_t{B} * T, C = cfg.n_embd, t = tp.tp;
  const bool sp = tp.sequence_parallel && t > 1;
  const int64_t boundary = (sp ? N / t : N) * C;  // a stage's input or output, [Ns, C]
  MemoryEstimate m;
  // ZeRO's transient state: ZeRO 2/3 finish every reduction at the end of each backward pass, so
  // one chunk's busiest moment is the rank's; ZeRO 0/1 reduce after the last pass only, and a
  // chunk's reductions may run on into the next chunk's.
  Moment transient;
  std::map<int64_t, int> heap;  // heap temporaries: bytes -> at most in flight
  int64_t packing = 0;          // the GEMM packing buffers: the chunks run on the same threads
  for (const ChunkMemory& c : chunks) {
    const ParamLayout layout =
        gpt_param_layout(cfg, tp.tp, 0, c.stage, zero_unit_align(zero.stage, zero.dp));
    add_model_state(m, layout, zero);
    const Moment busiest = busiest_moment(layout, c.stage, zero, heap);
    if (zero.stage <= 1) {
      transient.temporaries += busiest.temporaries;
    } else if (busiest.total() > transient.total()) {
      transient = busiest;
    }
    m.activations += c.slots * gpt_activation_layout(cfg, B, T, mode, tp, c.stage).total() * f;
    m.workspace += gpt_grad_workspace_layout(cfg, B, T, tp).total() * f;
    packing = std::max(packing, gemm_packing_resident(cfg, B, T, tp, threads, c.stage));
    if (c.sends_grads) m.workspace += int64_t{microbatches} * boundary * f;
    if (deferred_weight_grads) {
      // dout of qkv [N,3C/t], attn.proj [N,C], mlp.fc [N,4C/t], mlp.proj [N,C] per layer, and
      // d(embed) [N,C] on the first stage, per slot.
      const int64_t layers = c.stage.end_layer(cfg) - c.stage.first_layer;
      const int64_t per_slot = layers * N * (7 * C / t + 2 * C) + (c.stage.embedding ? N * C : 0);
      m.workspace += c.slots * per_slot * f;
    }
  }
  m.params += transient.params;
  m.grads += transient.grads;
  m.workspace += transient.temporaries;
  for (const auto& [bytes, k] : heap) m.workspace += k * bytes;
  if (pipelined && t > 1 && !sp) m.workspace += N / t * C * f;  // scatter/gather receive buffer
  m.workspace += tp_collective_temporaries(N * C * f, tp);
  m.workspace += int64_t{threads} * T * T * f;  // attention backward: a T x T block per thread
  m.runtime = runtime_bytes + packing;
  return m;
}

MemoryEstimate estimate_training_memory(const GptConfig& cfg, int B, int T, Recompute mode,
                                        int threads, TpShape tp) {
  return estimate_rank_memory(cfg, B, T, mode, threads, tp, {ChunkMemory{}}, 1, false, false);
}

}  // namespace weft::model
