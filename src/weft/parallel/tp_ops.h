#pragma once
// The tensor-parallel group a GPT is split across (Shoeybi et al. 2019, "Megatron-LM", §3). The
// pieces that are more than a GEMM on a shard are backend ops (kernels/backend.h): the
// vocabulary-parallel embedding (rank r of a tp group of size t owns the vocabulary rows
// [r*Vl, (r+1)*Vl), Vl = Vp/t, of the tied embedding wte) and the vocabulary-parallel
// cross-entropy, which never gathers the [N, V] logits (kernels/vocab_parallel_ce.h).
//
// The linear layers' conjugate operators (f: identity forward, all-reduce backward; g: all-reduce
// forward, identity backward; with sequence parallelism all-gather / reduce-scatter in their place)
// are written out where they are used, in model/gpt.cc, forward and backward side by side.

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

}  // namespace weft::parallel
