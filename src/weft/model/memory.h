#pragma once
// The one memory model (issue #19): what one training process of either precision allocates for
// its model (one tensor-parallel rank's shards): parameters, gradients, the AdamW state, saved
// activations and the backward workspace, each from the same list of buffers the model allocates
// from, so the trainer's launch gate (the device arena's size, the host launch check) and the
// planner (planner::peak_memory, for every precision) are told what is allocated.
//   fp32       the host engine (model::Gpt, PipelineRunner, optim::DistributedOptimizer): the
//              layouts of param_layout.h and activation_layout.h, with ZeRO's shards and
//              transients, the MPI temporaries, kernel scratch (per-thread attention rows) under
//              workspace, and the process's runtime (oneDNN's code and packing buffers).
//   bf16-mixed the device engine (model::Gpt on a bf16 backend, runtime::PipelineRunner on it):
//   bf16
//              compute with fp32 master weights, gradients and AdamW state (Micikevicius et al.
//              2018), exactly the backend allocations: the model's buffers (activation_layout.h),
//              the moments and the pipeline's send buffers.

#include <cstdint>
#include <vector>

#include "weft/core/dtype.h"
#include "weft/kernels/kernels.h"
#include "weft/model/activation_layout.h"
#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"

namespace weft::model {

// The precision policy (fp32, or bf16 compute with fp32 master weights).
using weft::Precision;  // core/dtype.h

// The ZeRO stage and the data-parallel size it shards over.
struct ZeroSharding {
  int stage = 0;
  int dp = 1;
};

// A rank's part of a layout as the memory model sees it: [B, T] microbatches, tp.tp and zero.dp the
// sizes of its tp and dp groups, pp_rank whose RankProgram it runs (layout::rank_program). Known
// before any group exists, so a device's arena is sized from it (runtime::device_arena_bytes).
struct RankShape {
  int B = 1, T = 1;
  Recompute recompute = Recompute::None;
  int pp_rank = 0;
  TpShape tp = {};  // (= {}: designated initializers may leave it out)
  ZeroSharding zero = {};
};

// `runtime`: what the process holds for running any model at all, not for this one's tensors: the
// GEMM library's generated and loaded code and its operand-packing buffers (see below).
// `snapshot`: an asynchronous checkpoint's copy of the rank's state (MemoryCounting::snapshot).
struct MemoryEstimate {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, runtime = 0;  // B
  int64_t snapshot = 0;
  int64_t total() const {
    return params + grads + optimizer + activations + workspace + runtime + snapshot;
  }
};

// What a training process holds once it runs its first step beyond its model's buffers, measured on
// this machine (oneDNN 2.6, AVX-512, x86-64; /proc/self/smaps at the memory baseline and after the
// run, `weft bench step` and 1- and 4-rank `weft train`, models from C=32 to C=384): oneDNN's
// JIT-generated GEMM kernels (3,456 KiB of anonymous executable pages), the pages of code the run
// touches first (libdnnl 2,560-2,856 KiB, weft 330-530, libm 80-176) and the trainer's own small
// heap blocks (metrics, sampler, messages: 450-700 KiB). The same for every model and thread count;
// another CPU or oneDNN build JITs other kernels, so a cluster preset may give its own
// (memory.runtime_mib, which `weft calibrate` measures: 11.03 MiB on this machine on 2026-12-01,
// with the heap temporaries of oneDNN and MPI and the code and data pages a tune trial touches).
// The vendor presets' default is the AVX-512 host's; a training process prices its own host's
// (kernels::host_runtime_bytes).
constexpr int64_t kDefaultRuntimeBytes = kernels::kRuntimeBytesAvx512;  // 7.5 MiB

// The temporary Open MPI 4.1's nonblocking collectives (libnbc) allocate for a tensor-parallel
// collective over an activation of `activation_bytes` ([N, C] fp32, N = B*T): below the mmap
// threshold weft fixes (core/memory_usage.h, 1 MiB) every one (each g of the forward, each f of
// the backward) reuses one heap block, resident for the whole step; a larger one is mapped per call
// and counted as if it were, since one is in flight in every layer's forward and backward.
// Measured by intercepting malloc in `weft tune`'s trials on 2 ranks (L=4, C=256, T=64, B=8):
// MPI_Iallreduce allocates the whole buffer (524,288 B for [512, 256]; 262,144 at B=4). Sequence
// parallelism's reduce-scatter is weft's ring (comm/mpi_communicator.cc), whose receive block is
// 1/tp of its input, plus a running-sum block from tp = 3 on (libnbc's MPI_Ireduce_scatter_block
// took twice the input). The collectives run one at a time. 0 without tensor parallelism.
int64_t tp_collective_temporaries(int64_t activation_bytes, TpShape tp);

// The pages of operand-packing buffer oneDNN's sgemm (2.6, AVX-512) touches in one single-threaded
// call C[M,N] = op(A)[M,K] op(B)[K,N], measured as VmHWM's rise over a first dnnl_sgemm call: with
// B transposed (a linear layer's forward, x W^T), K > 128 and M > 384 it packs blocks of A (at most
// 512 rows) and B (at most 9,984 columns), each at most 384 deep: 4 (min(M, 512) + min(N, 9984))
// min(K, 384) bytes, 2-7% above the measured rise for M 416-2048, N 256-8192, K 256-768 (the
// buffer's last pages stay untouched); every other call touches at most 270 KiB, counted as 0.
int64_t gemm_packing_bytes(int64_t M, int64_t N, int64_t K, bool trans_b);

// The packing buffers of the forward GEMMs of `stage` on `threads` threads, as they stay resident:
// kernels::sgemm splits a large GEMM into one slab per thread (kernels/cpu/gemm.cc), each thread
// mallocs in its own glibc arena, and a freed buffer's pages stay in that arena, so the process
// holds, per thread, the largest buffer that thread ever packed. One of 1 MiB or more is mapped per
// call instead (core/memory_usage.h) and counted the same: the largest is the LM head's forward,
// packed as the step reaches its peak (GPT-2 124M, dp4 ZeRO 0-3: measured 1.000-1.001x).
int64_t gemm_packing_resident(const GptConfig& cfg, int B, int T, TpShape tp, int threads,
                              const StageSpec& stage);

// One model chunk of a pipeline rank, as the runtime builds it (runtime/pipeline_runner.h).
struct ChunkMemory {
  StageSpec stage;
  int pool = 0;  // the rank's pool of activation slots it takes its microbatches' slots from
};

// What a pipeline rank's program keeps, from its schedule (layout::rank_program computes it, for
// the runtime and the planner alike): nothing here counts microbatches, only what is in flight.
// The default: one process with the whole model (one chunk, one slot, no pipeline).
struct RankProgram {
  std::vector<ChunkMemory> chunks = {ChunkMemory{}};  // chunk j: stage Shape::stage_of(rank, j)
  // Per pool, its activation slots: the most microbatches its chunks keep in flight at once
  // (schedule::peak_in_flight_per_group). Chunks of one slot layout share a pool.
  std::vector<int> slots = {1};
  // Send buffers ([Ns,C] activations each; schedule::send_buffers): for the stage outputs and
  // for the input gradients this rank produces, each back in its pool when its send completes.
  int act_buffers = 0;
  int grad_buffers = 0;
  bool pipelined = false;              // pp > 1: boundaries cross ranks
  bool deferred_weight_grads = false;  // zb-h1's W passes
};

// How a rank's memory is counted besides its shape: the engine's precision; the host kernels'
// `threads` (their GEMM packing buffers and attention scratch); `runtime_bytes`, the process's own
// (kernels::host_runtime_bytes() on the host; 0 for a device's arena); and `counted` (FP32 only; a
// BF16Mixed rank is always counted as its backend's): Process, the host process's resident memory
// as below; Backend, only what the buffers take from their backend, as Backend::allocated_bytes()
// counts it (each block in 256 bytes, nothing else), which the tests compare with a host fp32
// backend's own count.
enum class Counted { Process, Backend };
// `snapshot`: the rank keeps a copy of its training state for asynchronous checkpoints
// (runtime::CheckpointSaver: every state group it writes part of, whole, fp32; a ZeRO-0 replica
// other than dp rank 0 writes nothing and keeps none). In host memory: counted for the host
// process (FP32, Process) only; a device's snapshot is outside its backend's memory.
struct MemoryCounting {
  Precision precision = Precision::FP32;
  int threads = 1;
  int64_t runtime_bytes = kDefaultRuntimeBytes;
  Counted counted = Counted::Process;
  bool snapshot = false;
};

// What a pipeline rank of weft's trainer allocates for its chunks (`rank`: the program of
// shape.pp_rank), exactly.
//
// Precision::FP32 (the host engine): per chunk the parameters, gradients and both AdamW moments
// and a backward workspace; per slot pool its slots of its chunks' activation layout; the rank's
// send buffers (RankProgram, a boundary [Ns,C] each); the scatter/gather receive buffer (tp > 1
// without sequence parallelism, pp > 1); the tensor-parallel collectives' MPI temporary
// (tp_collective_temporaries); with deferred weight gradients (ZB-H1) the kept output gradients
// of every slot; and the attention backward's T x T row block per thread. With ZeRO
// (optim/distributed_optimizer.h), per chunk and with S its shard (1/dp of every unit, padded),
// the steady state:
//   stage 1: + S reduced gradients; m, v and master weights 3S instead of m, v
//   stage 2: gradients S; parameters whole; 3S
//   stage 3: as 2, and parameters S (the master shard)
// plus the busiest moment of a pass, found by walking the backward (docs/planner.md §5): from
// stage 2 on the full gradients of the units written and not yet reduced (the tied wte's from the
// head until the embedding's reduction), stage 3's gathered units, and the reductions in flight's
// MPI temporaries on the busiest rank (all-reduce: 1/dp of the unit; reduce-scatter: two copies,
// one at dp = 2), those below glibc's mmap ceiling (32 MiB) kept on the heap for the whole step.
// Under `runtime`: `runtime_bytes` and the largest chunk's resident GEMM packing buffers.
//
// Precision::BF16Mixed (the device engine), what runtime::PipelineRunner takes from its backend,
// each block rounded up to the backend's 256 bytes, as Backend::allocated_bytes() counts:
// per chunk model::Gpt's buffers (fp32 master weights and their bf16 copy under params, fp32
// gradients, the model's workspace of activation_layout.h, and with deferred weight gradients a
// block for them per slot of its pool), per pool its slots' activations, the AdamW
// moments m and v (fp32) and the AdamW plan's two tables (kernels::adamw_table_bytes at a tensor
// per segment over the chunk) under optimizer, and the rank's bf16 send buffers. `runtime` is 0
// (the arena's own blocks are device_arena_bytes' margin); `threads` does not matter;
// `pipelined` with tp > 1 and no sequence parallelism adds scatter/gather's receive buffer (1/tp
// of a boundary). ZeRO as for FP32, in the backend's blocks and without the MPI temporaries
// (host memory, not the device's); ZeRO 1 on keeps a bf16 copy of the master shard beside it.
MemoryEstimate estimate_rank_memory(const GptConfig& cfg, const RankShape& shape,
                                    const RankProgram& rank, const MemoryCounting& counting = {});

// The host memory a rank keeps for asynchronous checkpoints (MemoryCounting::snapshot), whatever
// its precision: per chunk its fp32 parameters (from ZeRO 1 on, the master shard) and AdamW's two
// moments, each whole, the moments from a 4 KiB boundary on.
int64_t snapshot_bytes(const GptConfig& cfg, const RankShape& shape, const RankProgram& rank);

// ZeRO 2/3: what a rank's unit pool (optim/unit_pool.h) holds once its chunks have run a step, in
// the backend's blocks: per size asked for, the most buffers in use at once over their passes
// (estimate_rank_memory counts it under grads). 0 below ZeRO 2.
int64_t zero_pool_bytes(const GptConfig& cfg, const RankShape& shape, const RankProgram& rank,
                        Precision precision);

}  // namespace weft::model
