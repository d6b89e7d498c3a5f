#pragma once
// The parameters of a GPT model: names, shapes, initialization and weight-decay flags, in the
// order they sit in the flat parameter buffer. Names follow GPT-2's module tree
// ("h.3.attn.qkv.weight") whatever the variant (gpt_config.h): attn.qkv holds q, k and v (NKV
// heads each for k and v); mlp.fc holds SwiGLU's gate and up projections, [gate; up]; an untied
// LM head is `lm_head` [Vp, C]; wpe exists only with learned positions, the biases only with
// `bias` (LayerNorm's with norm_bias()). Linear weights are stored [out, in] (as torch.nn.Linear).
//
// Under tensor parallelism (Shoeybi et al. 2019, "Megatron-LM") a rank holds its shard of each
// parameter, in the same order; the layout records each tensor's global shape and how it is split,
// so initialization, gathering and checkpoints address every element by its global index.
//   column-parallel (split output rows): attn.qkv (q, k and v each split by heads), mlp.fc
//                                        (SwiGLU: gate and up each split), wte (vocabulary
//                                        rows; also the tied LM head), lm_head
//   row-parallel (split input columns):  attn.proj.weight, mlp.proj.weight
//   replicated:                          LayerNorms, wpe, row-parallel biases

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weft/model/gpt_config.h"
#include "weft/optim/shards.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

// How tensor parallelism splits one parameter.
struct TpSplit {
  int dim = -1;    // -1: replicated on every tp rank; 0: rows; 1: columns (2-D tensors)
  int blocks = 1;  // dim 0 holds `blocks` parts, each split across ranks (attn.qkv: q, k, v)
  // The parts' relative sizes (attn.qkv under grouped-query attention: NH, NKV, NKV); equal
  // when 0.
  int64_t weights[3] = {0, 0, 0};
  bool replicated() const { return dim < 0; }
  // Rows [first, first + count) of part b of a dim-0 extent of `rows`.
  std::pair<int64_t, int64_t> part_rows(int b, int64_t rows) const;
};

// A contiguous run of a shard: local element offset, global element offset, length.
struct ShardRun {
  int64_t local = 0, global = 0, n = 0;
};
// The runs of rank `rank`'s shard of a tensor of global shape `global` (in local order), clipped
// to its local elements [begin, end) (end < 0: to the last) with local offsets counted from begin:
// a part of a shard (a ZeRO part, a checkpoint piece) costs runs for that part only.
std::vector<ShardRun> shard_runs(const Shape& global, TpSplit split, int tp, int rank,
                                 int64_t begin = 0, int64_t end = -1);
// The local shape of that shard.
Shape shard_shape(const Shape& global, TpSplit split, int tp);

struct ParamInit {
  enum class Kind { Normal, Zeros, Ones } kind = Kind::Zeros;
  float std = 0.0f;
  bool weight_decay = false;  // AdamW decays matrices and embeddings, not biases or LayerNorm
  int64_t live_rows = -1;     // global rows beyond this stay zero (wte's vocabulary padding)
};

// The buffer and its units (optim::UnitLayout: ZeRO shards them), with what the model needs.
struct ParamLayout : optim::UnitLayout {
  std::vector<ParamInit> init;       // parallel to buffer.slices()
  std::vector<Shape> global_shapes;  // parallel to buffer.slices()
  std::vector<TpSplit> splits;       // parallel to buffer.slices()
  int tp = 1, tp_rank = 0;
  std::vector<ShardRun> runs(size_t slice, int64_t begin = 0, int64_t end = -1) const {
    return shard_runs(global_shapes[slice], splits[slice], tp, tp_rank, begin, end);
  }
  int64_t count() const { return buffer.numel(); }
  int unit_index(const std::string& name) const;  // -1 when the stage has no such unit
  std::vector<bool> weight_decay_flags() const {  // one per slice
    std::vector<bool> f;
    for (const auto& i : init) f.push_back(i.weight_decay);
    return f;
  }
};

// The part of the model one pipeline stage (a model chunk) holds: a contiguous run of layers, plus
// the embedding on the first stage and the head (ln_f, the LM head: the tied wte or lm_head) on
// the last. The default is the whole model. With tied embeddings both ends hold wte: the first
// and last stage keep their copies in sync by summing their gradients (Narayanan et al. SC'21).
struct StageSpec {
  int first_layer = 0;
  int layers = -1;  // -1: through the last layer
  bool embedding = true;
  bool head = true;
  int end_layer(const GptConfig& c) const { return layers < 0 ? c.n_layer : first_layer + layers; }
};

// Global stage s of S = pp*vp stages of L/S layers each (checked by validate_pipeline).
StageSpec pipeline_stage(const GptConfig& cfg, int s, int S);
// The layers must split evenly into pp*vp stages. Every problem at once, in the user's terms.
Status validate_pipeline(const GptConfig& cfg, int pp, int vp);
// What a model stage holding `slots` microbatches of B x T needs (model::Gpt):
// validate_for_run, B > 0, slots >= 1, and the stage's layers a run of the model's.
Status validate_stage(const GptConfig& cfg, int B, int T, const StageSpec& stage, int slots);

// Whether a parameter is a norm's weight or bias (ln_1, ln_2, ln_f; LayerNorm or RMSNorm).
bool is_layernorm_param(const std::string& name);

// Per-layer names, so model code and tests spell them once.
std::string layer_param(int layer, const char* suffix);  // layer_param(3, "ln_1.weight")

// Rank tp_rank's shards under tensor parallelism of size tp (checked by validate_tensor_parallel)
// of the parameters of `stage`, in the serial order and under their global names. Each unit starts
// on a multiple of unit_align elements and the buffer's total is padded to one (ZeRO's in-place
// collectives over a unit need its padded length: optim::zero_unit_align).
ParamLayout gpt_param_layout(const GptConfig& cfg, int tp = 1, int tp_rank = 0,
                             StageSpec stage = {}, int64_t unit_align = BufferLayout::kAlignElems);

// GPT-2 initialization (Radford et al. 2019; nanoGPT): N(0, 0.02) for matrices, wte and lm_head,
// N(0, 0.01) for wpe, N(0, 0.02/sqrt(2L)) for the residual projections (attn.proj, mlp.proj), zero
// biases, norm weight 1 (Megatron-LM initializes its Llama-style models the same way). Element i of
// parameter `name` is normal_at(stream_key(seed, name), i): the value depends only on (seed, name,
// global index), whatever the layout: a shard holds exactly its slice of the serial model.
void init_params(FlatBuffer& params, const ParamLayout& layout, uint64_t seed);
// The same values for elements [begin, begin + n) of slice `slice` only, into out[0, n) (ZeRO
// initializes just the parts a rank owns: optim/shards.h).
void init_slice(const ParamLayout& layout, size_t slice, uint64_t seed, int64_t begin, int64_t n,
                float* out);

}  // namespace weft::model
