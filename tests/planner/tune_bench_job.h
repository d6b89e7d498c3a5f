#pragma once
// The job bench/tune/run.sh tunes (issue 16): a 4-layer GPT (C=256, 4 heads, V=4096 padded to
// 128), T=64, global batch 8, fp32 on `world` CPU processes. The planner's tests that check its
// prices against this machine's trials use it.

#include "weft/planner/config.h"

namespace weft::planner::test {

inline Job tune_bench_job(int world = 2) {
  Job j;
  j.model = {.name = "tune-4l",
             .n_layer = 4,
             .n_embd = 256,
             .n_head = 4,
             .vocab_size = 4096,
             .pad_vocab_to = 128,
             .max_seq_len = 64};
  j.seq_len = 64;
  j.global_batch = 8;
  j.world = world;
  j.precision = Precision::FP32;
  return j;
}

}  // namespace weft::planner::test
