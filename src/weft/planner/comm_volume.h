#pragma once
// The communication of one training step per group, in weft's own conventions, so that a
// RecordingCommunicator wrapped around one real step can be compared with the planner element
// for element (docs/planner.md §4). Elements follow the Recording convention
// (comm/recording_communicator.h): all_reduce the buffer, all_gather the gathered output,
// reduce_scatter the input, send/recv the message.
//
// Per transformer layer and microbatch, on every rank of a tp group (n = b*s*h):
//   forward   2 all-reduces of n            (with sequence parallelism: 2 all-gathers + 2
//   backward  2 all-reduces of n             reduce-scatters of n, forward and backward alike)
//   full recomputation repeats the forward's collectives before the backward.
// Vocab-parallel embedding: forward 1 all-reduce of n (sp: reduce-scatter forward, all-gather
// backward). Vocab-parallel cross-entropy: forward one all-gather of 3 statistics per row,
// t*3*b*s elements (kernels/vocab_parallel_ce.h). LM head: backward all-reduce n of the input
// gradient (sp: reduce-scatter).
// Pipeline: per microbatch, one activation message per stage boundary forward and one gradient
// back, n/t elements (tp > 1 without sequence parallelism: each tp rank sends 1/t of the rows and
// the receiver all-gathers n over tp), and once per step the loss (1 fp64) from the last stage.
// Sequence parallelism also all-reduces each chunk's norm gradients over tp once per step.
// Data parallel, per step and unit (a layer, wte, wpe, ln_f, lm_head: those the variant has;
// padded for dp equal shards): ZeRO 0
// all-reduces the gradients once; ZeRO 1 reduce-scatters them once and all-gathers the updated
// parameters; ZeRO 2 reduce-scatters every microbatch's gradients and all-gathers once; ZeRO 3
// reduce-scatters every microbatch's and all-gathers a unit's parameters before each use in
// forward and backward (comm_volume.cc: data_parallel). Plus the loss (1 fp64) averaged over the
// replicas, and with ZeRO the squared gradient norm summed over the shards.
// Tied embeddings with pp > 1: the first and last pipeline ranks all-reduce the word embedding's
// gradient (Vp/t * h elements) once per step (group "embedding"); an untied lm_head needs none.
// The variants (model/gpt_config.h) change none of the activation traffic: every message and
// tensor-parallel collective is b*s*h, whatever the heads, the MLP or the norms.

#include <cstdint>
#include <string>

#include "weft/planner/config.h"

namespace weft::planner {

struct OpVolume {
  int64_t ops = 0;       // calls
  int64_t elements = 0;  // Recording convention, summed over calls
  int64_t bytes = 0;     // elements times their size under the job's precision (activations and
                         // the loss's statistics as activations/fp32, gradients as
                         // precision_bytes().grad, gathered weights as .weight)
  bool operator==(const OpVolume&) const = default;
};

struct GroupVolume {
  OpVolume all_reduce, reduce_scatter, all_gather, send, recv;
  bool operator==(const GroupVolume&) const = default;
};

// One pipeline rank's communication (every tp/dp rank of it records the same).
struct StepVolume {
  GroupVolume tp, pp, dp, embedding;
  bool operator==(const StepVolume&) const = default;
};

// Parameters held by pipeline rank `pp_rank` of one tp shard, as model::gpt_param_layout lays
// them out for any variant: its layers' matrices split by tp (biases of row-parallel layers and
// norms replicated), the word embedding (Vp/t rows) and a learned position table on the first
// rank, ln_f and the LM head on the last (the tied word embedding's copy when pp > 1, or
// lm_head's Vp/t rows).
int64_t local_parameters(const model::GptConfig& m, const layout::Layout& c, int pp_rank);

// Communication of pipeline rank `pp_rank` for one microbatch (tp and pp only) or for a whole
// step (all groups). With ZeRO the tp and embedding groups work on dp shards, whose contents
// (hence some element counts) differ slightly by dp rank.
StepVolume microbatch_volume(const Job& job, const layout::Layout& c, int pp_rank);
StepVolume step_volume(const Job& job, const layout::Layout& c, int pp_rank, int dp_rank = 0);

std::string format_volume(const StepVolume& v);

}  // namespace weft::planner
