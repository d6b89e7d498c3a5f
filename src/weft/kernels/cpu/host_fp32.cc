// The host FP32 implementation of Backend (backend.h): the optimized CPU kernels of ops.inc
// (kernels::cpu: OpenMP, oneDNN GEMM) behind the one contract. Where the contract fuses two steps
// (a GEMM with its GeLU, a residual add with the LayerNorm after it) this runs the two kernels one
// after the other, which is the arithmetic model::Gpt has always run on the CPU: the fp32
// equivalence suites and the PyTorch oracle (1e-5) hold through it unchanged.
//
// Attention keeps the probabilities att[B,NH,T,T] for its backward (cpu::attention_backward reads
// them), so under selective recomputation the model drops exactly them; the bf16 backends keep
// only lse[B,NH,T] (backend.h).

#include <cstdint>
#include <cstring>
#include <memory>

#include "weft/core/check.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/cpu/host_backend.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels {
namespace {

class HostFp32Backend final : public HostBackend<HostFp32Backend, float> {
 public:
  void convert(float* out, const float* in, int64_t n) {
    WEFT_CHECK(n >= 0, "negative element count ", n);
    if (out != in && n > 0) std::memmove(out, in, static_cast<size_t>(n) * sizeof(float));
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) {
    cpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens_host,
                          int B, int T, int C) {
    cpu::embedding_backward(dwte, dwpe, dout, tokens_host, B, T, C);
  }

  // dwte[Vl,C] += the rows of dout whose token is this rank's; dwpe[T,C] += sum over b (when not
  // null). Each thread owns whole columns and walks the rows in order: deterministic, no races.
  void embedding_backward_shard(float* dwte, float* dwpe, const float* dout,
                                const int32_t* tokens_host, int B, int T, int C, int v0, int Vl) {
    const int64_t N = int64_t{B} * T;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; ++c) {
      for (int64_t n = 0; n < N; ++n) {
        const float d = dout[n * C + c];
        const int64_t v = tokens_host[n] - int64_t{v0};
        if (v >= 0 && v < Vl) dwte[v * C + c] += d;
        if (dwpe != nullptr) dwpe[(n % T) * C + c] += d;
      }
    }
  }

  void residual_forward(float* out, const float* a, const float* b, int64_t n) {
    cpu::residual_forward(out, a, b, n);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C, Norm norm) {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, norm);
  }
  void fused_residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                        const float* a, const float* b, const float* weight,
                                        const float* bias, int N, int C, Norm norm) {
    cpu::residual_forward(residual, a, b, int64_t{N} * C);
    cpu::layernorm_forward(out, mean, rstd, residual, weight, bias, N, C, norm);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C, Norm norm) {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, norm);
  }

  void linear_forward(float* out, float* pre_gelu, const float* inp, const float* weight,
                      const float* bias, int N, int IC, int OC) {
    cpu::matmul_forward(pre_gelu != nullptr ? pre_gelu : out, inp, weight, bias, N, IC, OC);
    if (pre_gelu != nullptr) cpu::gelu_forward(out, pre_gelu, int64_t{N} * OC);
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* gelu_pre, int N, int IC,
                       int OC) {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
    // GeLU's backward in place (ops.inc: dinp may be dout itself).
    if (gelu_pre != nullptr && dinp != nullptr) {
      cpu::gelu_backward(dinp, gelu_pre, dinp, int64_t{N} * IC);
    }
  }

  void swiglu_forward(float* out, const float* inp, int N, int F) {
    cpu::swiglu_forward(out, inp, N, F);
  }
  void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F) {
    cpu::swiglu_backward(dinp, dout, inp, N, F);
  }
  void rope(float* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) {
    cpu::rope(qkv, B, T, NH, NKV, HS, theta, inverse);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                         int NKV) {
    cpu::attention_forward(out, att, qkv, B, T, C, NH, NKV);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* /*out*/,
                          const float* att, int B, int T, int C, int NH, int NKV) {
    cpu::attention_backward(dqkv, dout, qkv, att, B, T, C, NH, NKV);
  }
  int64_t attention_saved_floats(int B, int T, int NH) const override {
    return int64_t{B} * NH * T * T;
  }

  void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, float dloss,
                             int N, int V, int Vp) {
    cpu::softmax_cross_entropy_fused(losses, logits, targets, dloss, N, V, Vp);
  }

  double linear_forward_seconds(int N, int IC, int OC, int reps) override {
    WEFT_CHECK(N > 0 && IC > 0 && OC > 0 && reps >= 1, "linear_forward_seconds with N=", N,
               " IC=", IC, " OC=", OC, " reps=", reps);
    return time_linear_forward(N, IC, OC, reps);
  }
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(Precision precision) {
  if (precision == Precision::FP32) return std::make_unique<HostFp32Backend>();
  return make_host_bf16_backend();
}

Backend& host_fp32() {
  static HostFp32Backend backend;
  return backend;
}

}  // namespace weft::kernels
