// The planner's communication volume in weft's conventions (planner/comm_volume.h), checked
// against the formulas by hand: what a RecordingCommunicator around one real step must record.

#include <gtest/gtest.h>

#include "weft/planner/comm_volume.h"

namespace weft::planner {
namespace {

Job job() {
  Job j;
  j.model = {.name = "t",
             .n_layer = 8,
             .n_embd = 64,
             .n_head = 4,
             .vocab_size = 100,
             .pad_vocab_to = 64,
             .max_seq_len = 32};
  j.seq_len = 16;
  j.global_batch = 16;
  j.world = 8;
  j.precision = Precision::FP32;
  return j;
}

TEST(CommVolume, TensorParallelLayersAllReduceTwiceForwardAndTwiceBackward) {
  const Job j = job();
  const layout::Layout c{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 2};
  const int64_t n = 2 * 16 * 64;  // b*s*h
  // Middle of nothing: rank 0 has 4 layers and the embedding.
  const StepVolume first = microbatch_volume(j, c, 0);
  EXPECT_EQ(first.tp.all_reduce.ops, 4 * 4 + 1);
  EXPECT_EQ(first.tp.all_reduce.elements, (4 * 4 + 1) * n);
  // Rank 1: 4 layers and the LM head's input gradient (all-reduces), the cross-entropy's three
  // statistics per row gathered from t = 2 ranks (2 * 3 * b*s).
  const StepVolume last = microbatch_volume(j, c, 1);
  EXPECT_EQ(last.tp.all_reduce.ops, 4 * 4 + 1);
  EXPECT_EQ(last.tp.all_reduce.elements, 4 * 4 * n + n);
  // And the pipeline's scatter/gather: the received activation, 1/t per rank, is all-gathered.
  EXPECT_EQ(last.tp.all_gather.ops, 2);
  EXPECT_EQ(last.tp.all_gather.elements, n + 2 * 3 * 2 * 16);
  EXPECT_EQ(last.pp.recv.elements, n / 2);
  // fp32: 4 bytes per element, the loss statistics included.
  EXPECT_EQ(last.tp.all_reduce.bytes, 4 * last.tp.all_reduce.elements);
  EXPECT_EQ(last.tp.all_gather.bytes, 4 * last.tp.all_gather.elements);
}

TEST(CommVolume, BytesFollowThePrecision) {
  Job j = job();
  j.precision = Precision::BF16Mixed;
  layout::Layout c{.tp = 2, .pp = 1, .dp = 4, .micro_batch = 1, .zero = 1};
  const StepVolume v = step_volume(j, c, 0);
  const int64_t n = 16 * 64, m = 4;
  // Activations in bf16, the cross-entropy's gathered statistics (t * 3 * b*s) in fp32.
  EXPECT_EQ(v.tp.all_reduce.bytes, m * 2 * (v.tp.all_reduce.ops / m) * n);
  EXPECT_EQ(v.tp.all_gather.bytes, m * 4 * 2 * 3 * 16);
  // ZeRO-1: fp32 gradients scattered, bf16 weights gathered.
  EXPECT_EQ(v.dp.reduce_scatter.bytes, 4 * v.dp.reduce_scatter.elements);
  EXPECT_EQ(v.dp.all_gather.bytes, 2 * v.dp.all_gather.elements);
}

TEST(CommVolume, SequenceParallelismTradesEachAllReduceForAGatherAndAScatter) {
  const Job j = job();
  const layout::Layout c{.tp = 2, .pp = 1, .dp = 4, .micro_batch = 1, .sequence_parallel = true};
  const int64_t n = 16 * 64;
  const StepVolume v = microbatch_volume(j, c, 0);
  // 8 layers x (2 forward + 2 backward), + embedding (RS forward, AG backward), + head (ln_f's
  // AG forward, RS backward), + the cross-entropy's statistics (AG of t * 3 * b*s).
  EXPECT_EQ(v.tp.all_gather.ops, 8 * 4 + 2 + 1);
  EXPECT_EQ(v.tp.reduce_scatter.ops, 8 * 4 + 1 + 1);
  EXPECT_EQ(v.tp.all_gather.elements, (8 * 4 + 2) * n + 2 * 3 * 16);
  EXPECT_EQ(v.tp.all_reduce.ops, 0);
}

TEST(CommVolume, FullRecomputationRepeatsTheForwardCollectives) {
  const Job j = job();
  layout::Layout c{.tp = 2, .pp = 1, .dp = 4, .micro_batch = 1};
  const int64_t base = microbatch_volume(j, c, 0).tp.all_reduce.ops;
  c.recompute = model::Recompute::Full;
  EXPECT_EQ(microbatch_volume(j, c, 0).tp.all_reduce.ops, base + 8 * 2);
}

TEST(CommVolume, PipelineRanksSendOneActivationAndOneGradientPerBoundary) {
  const Job j = job();
  const layout::Layout c{.tp = 1,
                         .pp = 4,
                         .dp = 2,
                         .vp = 2,
                         .micro_batch = 2,
                         .schedule = schedule::Kind::Interleaved};
  const int64_t n = 2 * 16 * 64;
  // 8 stages; rank 0 holds stages 0 and 4: stage 0 has one boundary, stage 4 two.
  const StepVolume v0 = microbatch_volume(j, c, 0);
  EXPECT_EQ(v0.pp.send.ops, 3);
  EXPECT_EQ(v0.pp.recv.ops, 3);
  EXPECT_EQ(v0.pp.send.elements, 3 * n);
  // A step has m = 16 / (2*2) = 4 microbatches.
  EXPECT_EQ(step_volume(j, c, 0).pp.send.ops, 12);
}

TEST(CommVolume, DataParallelTrafficFollowsTheZeroStageUnitByUnit) {
  const Job j = job();  // 8 layers on one stage: units wte, wpe, h.0 .. h.7, ln_f; m = 2
  layout::Layout c{.tp = 1, .pp = 1, .dp = 8, .micro_batch = 1};
  const int64_t p = local_parameters(j.model, c, 0);
  // ZeRO 0: one all-reduce per unit (its elements, slices' alignment padding included), and the
  // loss.
  StepVolume v = step_volume(j, c, 0);
  EXPECT_EQ(v.dp.all_reduce.ops, 11 + 1);
  EXPECT_GE(v.dp.all_reduce.elements, p + 1);
  EXPECT_LE(v.dp.all_reduce.elements, p + 1 + 11 * 16 * 12);
  EXPECT_EQ(v.dp.reduce_scatter.ops, 0);
  // ZeRO 2: every microbatch's gradient reduce-scattered, unit by unit (padded to 8 equal
  // shards); the updated parameters all-gathered once; the loss and the norm's shards.
  c.zero = 2;
  v = step_volume(j, c, 0);
  EXPECT_EQ(v.dp.all_reduce.ops, 2);
  EXPECT_EQ(v.dp.reduce_scatter.ops, 2 * 11);
  EXPECT_EQ(v.dp.all_gather.ops, 11);
  EXPECT_EQ(v.dp.reduce_scatter.elements, 2 * v.dp.all_gather.elements);
  EXPECT_GE(v.dp.all_gather.elements, p);
  EXPECT_EQ(v.dp.all_gather.elements % (8 * 16), 0);
  // ZeRO 3: a unit gathered before each use: wte 3 times (embedding, head forward and backward),
  // wpe once, each layer and ln_f twice, per microbatch.
  c.zero = 3;
  v = step_volume(j, c, 0);
  EXPECT_EQ(v.dp.all_gather.ops, 2 * (3 + 1 + 8 * 2 + 2));
  EXPECT_EQ(v.dp.reduce_scatter.ops, 2 * 11);
}

TEST(CommVolume, LocalParametersSumToTheModelWithoutTensorParallelism) {
  const Job j = job();
  const model::GptConfig& m = j.model;
  const int64_t h = m.n_embd, Vp = m.padded_vocab();
  const int64_t whole =
      Vp * h + int64_t{m.max_seq_len} * h + m.n_layer * (12 * h * h + 13 * h) + 2 * h;
  EXPECT_EQ(local_parameters(m, {.tp = 1, .pp = 1, .dp = 1}, 0), whole);
  // With pp = 2 the last rank also holds the tied word embedding.
  const layout::Layout c{.tp = 1, .pp = 2, .dp = 1};
  EXPECT_EQ(local_parameters(m, c, 0) + local_parameters(m, c, 1), whole + Vp * h);
}

// Llama's choices on the test job: rotary positions (no wpe), RMSNorm (no norm biases), a SwiGLU
// MLP of F = 96, 2 key/value heads for 4 query heads, an untied LM head, no biases.
Job llama_job() {
  Job j = job();
  j.model.position = model::Position::Rope;
  j.model.norm = model::NormKind::RMSNorm;
  j.model.mlp = model::MlpKind::SwiGLU;
  j.model.ffn_hidden_size = 96;
  j.model.n_kv_head = 2;
  j.model.tie_embeddings = false;
  j.model.bias = false;
  return j;
}

TEST(CommVolume, LocalParametersCountEveryVariantsTensorsOnce) {
  const int64_t h = 64, HS = 16, F = 96, Vp = 128, L = 8;
  // By hand from the contract (model/param_layout.h): q 4 heads and k, v 2 heads each, proj,
  // gate and up, down, two RMSNorm weights; ln_f's weight; wte and lm_head.
  const int64_t layer = (4 + 2 + 2) * HS * h + h * h + 2 * F * h + F * h + 2 * h;
  const int64_t whole = L * layer + h + 2 * Vp * h;
  const model::GptConfig m = llama_job().model;
  EXPECT_EQ(local_parameters(m, {}, 0), whole);
  // A pipeline splits them, the LM head on the last rank and no tied copy anywhere.
  const layout::Layout c{.tp = 1, .pp = 4};
  EXPECT_EQ(local_parameters(m, c, 0), 2 * layer + Vp * h);
  EXPECT_EQ(local_parameters(m, c, 1), 2 * layer);
  EXPECT_EQ(local_parameters(m, c, 3), 2 * layer + h + Vp * h);
  // tp = 2 splits the heads (q 2, k 1, v 1 per rank), F, the vocabulary; the norms stay whole.
  const layout::Layout t{.tp = 2, .pp = 2};
  EXPECT_EQ(local_parameters(m, t, 1), 4 * ((layer - 2 * h) / 2 + 2 * h) + h + Vp / 2 * h);
  // Each choice alone, against GPT-2's count: what it adds or removes.
  const model::GptConfig g = job().model;
  const int64_t gpt2 = local_parameters(g, {}, 0);
  auto with = [&](auto change) {
    model::GptConfig v = g;
    change(v);
    return local_parameters(v, {}, 0) - gpt2;
  };
  EXPECT_EQ(with([](auto& v) { v.position = model::Position::Rope; }), -32 * h);  // no wpe
  EXPECT_EQ(with([](auto& v) { v.norm = model::NormKind::RMSNorm; }), -(2 * L + 1) * h);
  EXPECT_EQ(with([](auto& v) { v.n_kv_head = 1; }), -L * (2 * 3 * HS * h + 2 * 3 * HS));
  EXPECT_EQ(with([](auto& v) { v.tie_embeddings = false; }), Vp * h);
  EXPECT_EQ(with([](auto& v) { v.bias = false; }), -L * (3 * h + h + 4 * h + h + 2 * h) - h);
  EXPECT_EQ(with([](auto& v) { v.ffn_hidden_size = 96; }), L * (96 - 4 * h) * (2 * h + 1));
  EXPECT_EQ(with([](auto& v) { v.mlp = model::MlpKind::SwiGLU; }), L * (4 * h) * (h + 1));
}

TEST(CommVolume, AnUntiedHeadHasNoEmbeddingSumAndItsOwnUnit) {
  const Job j = llama_job();
  layout::Layout c{.tp = 1, .pp = 2, .dp = 2, .micro_batch = 1};
  // No tied copy to sync between the first and last pipeline ranks.
  for (int r = 0; r < 2; ++r) EXPECT_EQ(step_volume(j, c, r).embedding, GroupVolume{}) << r;
  // ZeRO 3, m = 8 microbatches: rank 0 gathers wte once per microbatch (the embedding only) and
  // its 4 layers twice; rank 1 its 4 layers, ln_f and lm_head twice. No wpe.
  c.zero = 3;
  EXPECT_EQ(step_volume(j, c, 0).dp.all_gather.ops, 8 * (1 + 4 * 2));
  EXPECT_EQ(step_volume(j, c, 1).dp.all_gather.ops, 8 * (4 * 2 + 2 + 2));
  EXPECT_EQ(step_volume(j, c, 0).dp.reduce_scatter.ops, 8 * (1 + 4));
  EXPECT_EQ(step_volume(j, c, 1).dp.reduce_scatter.ops, 8 * (4 + 2));
  // The activations' traffic is GPT-2's: b*s*h per message and collective.
  c = {.tp = 2, .pp = 2, .dp = 1, .micro_batch = 2};
  EXPECT_EQ(microbatch_volume(j, c, 0), microbatch_volume(job(), c, 0));
  EXPECT_EQ(microbatch_volume(j, c, 1), microbatch_volume(job(), c, 1));
}

TEST(CommVolume, SequenceParallelismSumsTheRmsNormWeightsOnly) {
  const layout::Layout c{.tp = 2, .pp = 1, .dp = 1, .micro_batch = 1, .sequence_parallel = true};
  // 8 layers of 2 norms, and ln_f: C each (RMSNorm has no bias), 2C each for GPT-2's LayerNorms.
  EXPECT_EQ(step_volume(llama_job(), c, 0).tp.all_reduce.elements, (2 * 8 + 1) * 64);
  EXPECT_EQ(step_volume(job(), c, 0).tp.all_reduce.elements, (2 * 8 + 1) * 2 * 64);
}

}  // namespace
}  // namespace weft::planner
