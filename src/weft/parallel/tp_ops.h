#pragma once
// The tensor-parallel pieces of a GPT that are more than a GEMM on a shard (Shoeybi et al. 2019,
// "Megatron-LM", §3): the vocabulary-parallel embedding. Rank r of a tp group of size t owns the
// vocabulary rows [r*Vl, (r+1)*Vl), Vl = Vp/t, of the tied embedding wte. The vocabulary-parallel
// cross-entropy, which never gathers the [N, V] logits, is kernels/vocab_parallel_ce.h: one
// algorithm for every backend, its arithmetic shared with the CUDA kernels.
//
// The linear layers' conjugate operators (f: identity forward, all-reduce backward; g: all-reduce
// forward, identity backward; with sequence parallelism all-gather / reduce-scatter in their place)
// are written out where they are used, in model/gpt.cc, forward and backward side by side.

#include <cstdint>

#include "weft/comm/communicator.h"

namespace weft::parallel {

// The tensor-parallel group a model is split across, and whether the residual stream is split
// along the sequence too (Korthikanti et al. 2022). A null comm means tp = 1.
struct TensorParallel {
  comm::Communicator* comm = nullptr;
  bool sequence_parallel = false;
  int size() const { return comm != nullptr ? comm->size() : 1; }
  int rank() const { return comm != nullptr ? comm->rank() : 0; }
};

// out[N,C] = (v0 <= tok < v0+Vl ? wte_local[tok - v0] : 0) + (add_wpe ? wpe[t] : 0), N = B*T.
// Summed over the tp ranks (one of which adds wpe) this is the serial embedding.
void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte_local,
                                      const float* wpe, bool add_wpe, int B, int T, int C,
                                      int64_t v0, int64_t Vl);
// dwte_local[Vl,C] += rows of dout[N,C] whose token is local; dwpe[T,C] += sum over b of dout
// (every rank gets the whole dwpe: dout is the full gradient on every rank).
void vocab_parallel_embedding_backward(float* dwte_local, float* dwpe, const float* dout,
                                       const int32_t* tokens, int B, int T, int C, int64_t v0,
                                       int64_t Vl);

}  // namespace weft::parallel
