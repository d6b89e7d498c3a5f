#include "weft/model/gemm_shapes.h"

namespace weft::model {

std::vector<GemmShape> training_gemm_shapes(const GptConfig& cfg, int B, int T) {
  const int64_t N = int64_t{B} * T, C = cfg.n_embd, Vp = cfg.padded_vocab();
  std::vector<GemmShape> out;
  // linear layer inp[N,IC] -> out[N,OC] with weight [OC,IC]
  auto linear = [&](const std::string& name, int64_t IC, int64_t OC, int count) {
    out.push_back({name + ".fwd", false, true, N, OC, IC, count});    // inp @ W^T
    out.push_back({name + ".dinp", false, false, N, IC, OC, count});  // dout @ W
    out.push_back({name + ".dw", true, false, OC, IC, N, count});     // dout^T @ inp
  };
  // The variant's widths (gpt_config.h): qkv C + 2 NKV HS, fc F or SwiGLU's 2F, proj's input F.
  linear("h.attn.qkv", C, cfg.qkv_width(), cfg.n_layer);
  linear("h.attn.proj", C, C, cfg.n_layer);
  linear("h.mlp.fc", C, cfg.fc_width(), cfg.n_layer);
  linear("h.mlp.proj", cfg.ffn(), C, cfg.n_layer);
  linear("lm_head", C, Vp, 1);
  return out;
}

}  // namespace weft::model
