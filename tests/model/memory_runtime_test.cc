// The runtime part of model::estimate_rank_memory (issue #16): oneDNN's operand-packing buffers
// against the pages measured on this machine, and the split of a GEMM over threads.

#include <gtest/gtest.h>

#include "weft/kernels/backend.h"
#include "weft/model/memory.h"

namespace weft::model {
namespace {

// VmHWM's rise over a first single-threaded dnnl_sgemm(N, T, M, N, K) in a fresh process
// (oneDNN 2.6, AVX-512, 2026-12-01), KiB: the model is 2-7% above (the buffer's last pages stay
// untouched), and 0 where oneDNN does not pack B (measured at most 270 KiB there).
TEST(GemmPacking, MatchesThePagesOneDnnTouches) {
  struct Case {
    int64_t M, N, K, kib;
  } cases[] = {{512, 4096, 256, 4368}, {1024, 4096, 384, 6672}, {1024, 1536, 384, 2832},
               {512, 768, 768, 1684},  {480, 1024, 768, 2032},  {416, 4096, 256, 4464},
               {512, 256, 4096, 912},  {384, 4096, 256, 184},   {32, 8192, 256, 84},
               {512, 1024, 128, 32}};
  for (const Case& c : cases) {
    const double model = gemm_packing_bytes(c.M, c.N, c.K, true) / 1024.0;
    if (c.kib < 300) {
      EXPECT_EQ(model, 0) << c.M << "x" << c.N << "x" << c.K;
    } else {
      // Measured model/HWM: 1.01-1.26 (the largest at N = 256, where the untouched tail counts).
      EXPECT_NEAR(model / c.kib, 1.08, 0.2) << c.M << "x" << c.N << "x" << c.K << ": " << model;
    }
  }
  EXPECT_EQ(gemm_packing_bytes(512, 4096, 256, false), 0);  // B not transposed: nothing packed
}

// pipe-8l at B=4, T=128: the LM head's forward [512, 256] x [256, 4096] is the largest; on two
// threads kernels::sgemm splits it into two column slabs, each packing its half of the weight and
// all of A; the other forwards (N = 768, 1024, 256) pack less.
TEST(GemmPacking, ResidentPerThreadAfterTheSplit) {
  GptConfig cfg;
  cfg.n_layer = 8;
  cfg.n_embd = 256;
  cfg.n_head = 4;
  cfg.vocab_size = 4096;
  cfg.max_seq_len = 256;
  EXPECT_EQ(gemm_packing_resident(cfg, 4, 128, {}, 1, {}), 4 * (512 + 4096) * 256);
  EXPECT_EQ(gemm_packing_resident(cfg, 4, 128, {}, 2, {}), 2 * 4 * (512 + 2048) * 256);
  // 32 tokens: too few rows for oneDNN to pack.
  EXPECT_EQ(gemm_packing_resident(cfg, 2, 16, {}, 1, {}), 0);
  // Part of every rank's estimate, with the process's runtime code.
  const MemoryEstimate m = estimate_rank_memory(cfg, {.B = 4, .T = 128}, {});
  EXPECT_EQ(m.runtime, kDefaultRuntimeBytes + 4 * (512 + 4096) * 256);
}

// The tensor-parallel collectives' MPI temporary (memory.h): the sizes libnbc allocated in
// `weft tune`'s tp=2 trials of L=4, C=256 at B=8, T=64 ([512, 256] fp32 activations, 512 KiB),
// and the whole of a single-chunk tp rank's workspace beside it.
TEST(TpCollectives, HoldLibnbcsMeasuredTemporary) {
  constexpr int64_t kActivation = 512 * 256 * 4;
  EXPECT_EQ(tp_collective_temporaries(kActivation, {1, false}), 0);
  EXPECT_EQ(tp_collective_temporaries(kActivation, {2, false}), 524288);  // MPI_Iallreduce
  // Sequence parallelism's reduce-scatter is weft's ring: one receive block, 1/tp of the input.
  EXPECT_EQ(tp_collective_temporaries(kActivation, {2, true}), 262144);
  GptConfig cfg;
  cfg.n_layer = 4;
  cfg.n_embd = 256;
  cfg.n_head = 4;
  cfg.vocab_size = 4096;
  cfg.max_seq_len = 64;
  for (const bool sp : {false, true}) {
    const TpShape tp{2, sp};
    const MemoryEstimate m = estimate_rank_memory(cfg, {.B = 8, .T = 64, .tp = tp}, {});
    // The workspace's two host blocks as they are resident (whole huge pages from 2 MiB on), and
    // the runtime's sum of the step's losses (one double).
    const ActivationLayout w = gpt_workspace_layout(cfg, 8, 64, Recompute::None, tp);
    EXPECT_EQ(m.workspace, kernels::host_resident_bytes(w.act.total() * 4) +
                               kernels::host_resident_bytes(w.f32.total() * 4) + 64 * 64 * 4 +
                               (sp ? 262144 : 524288) + 8)
        << "sp=" << sp;
  }
}

}  // namespace
}  // namespace weft::model
