// The linear layer through cuBLASLt, and the Context that holds cuBLASLt's state. Host code only
// (cuBLASLt runs its own kernels), so it is compiled by the C++ compiler, not nvcc.
//
// Row-major tensors seen by column-major cuBLAS: a row-major X[R,S] is the column-major matrix
// X^T (S x R, leading dimension S). So, with W[OC,IC] and inp[N,IC]:
//   out  = inp @ W^T      is  out^T  (OC x N)  = op_T(W^T as IC x OC) . inp^T (IC x N)
//   dinp = dout @ W       is  dinp^T (IC x N)  = W^T (IC x OC) . dout^T (OC x N)
//   dW  += dout^T @ inp   is  dW^T   (IC x OC) = inp^T (IC x N) . op_T(dout^T as OC x N)

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include "weft/kernels/cuda/cuda_check.h"
#include "weft/kernels/cuda/internal.h"
#include "weft/kernels/cuda/kernels_cuda.h"

#define WEFT_CUBLAS_CHECK(call)                                                             \
  do {                                                                                      \
    const cublasStatus_t weft_cublas_status_ = (call);                                      \
    if (weft_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                     \
      ::weft::kernels::cuda::cublas_failed(weft_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)

namespace weft::kernels::cuda {

[[noreturn]] void cublas_failed(cublasStatus_t status, const char* call, const char* file,
                                int line) {
  std::ostringstream os;
  os << file << ":" << line << ": cuBLAS error: " << call << ": "
     << cublasLtGetStatusString(status);
  throw Error(os.str());
}

namespace {

// What decides cuBLASLt's choice of algorithm: the problem's shape, types, epilogue and the
// alignment of its pointers, the epilogue's bias and aux vectors included (cublasLt.h: the
// heuristic reads their values for the alignment; a bias slice of the flat weight copy may be
// less aligned than the last one of the same shape). The heuristic query costs tens of
// microseconds, so its answer is kept per key (including "no algorithm").
using GemmKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int,
                           int, uint32_t, uint32_t, uint32_t, int64_t, uint32_t, uint32_t>;

}  // namespace

struct Context::Impl {
  Stream stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  std::map<GemmKey, std::optional<cublasLtMatmulAlgo_t>> algos;
};

Context::Context(Arena& arena, Stream stream, size_t workspace_bytes, size_t scratch_bytes)
    : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->workspace = arena.allocate(workspace_bytes);
  impl_->workspace_bytes = workspace_bytes;
  impl_->scratch = arena.allocate(scratch_bytes);
  impl_->scratch_bytes = scratch_bytes;
  WEFT_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
}

Context::~Context() {
  if (impl_->handle != nullptr) (void)cublasLtDestroy(impl_->handle);
}

Stream Context::stream() const { return impl_->stream; }

void* Context::scratch(size_t bytes) const {
  WEFT_CHECK(bytes <= impl_->scratch_bytes, "a kernel needs ", bytes,
             " bytes of scratch; the context has ", impl_->scratch_bytes,
             " (raise Context's scratch_bytes)");
  return impl_->scratch;
}

size_t Context::scratch_bytes() const { return impl_->scratch_bytes; }

namespace {

// The largest power of two up to 256 that divides the address.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment >>= 1;
  return alignment;
}

// D (m x n, column-major) = op(A) . op(B) + beta D, fp32 accumulation and scale.
struct Gemm {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0;
  int n = 0;
  int k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F;
  cudaDataType_t d_type = CUDA_R_32F;
  float beta = 0.f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;  // the GeLU epilogues' pre-activation (written by GELU_AUX, read by DGELU)
  int64_t aux_ld = 0;
};

template <typename T, auto Destroy>
struct Deleter {
  void operator()(T p) const { (void)Destroy(p); }
};
using MatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>,
                                   Deleter<cublasLtMatmulDesc_t, &cublasLtMatmulDescDestroy>>;
using Layout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>,
                               Deleter<cublasLtMatrixLayout_t, &cublasLtMatrixLayoutDestroy>>;
using Preference =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                    Deleter<cublasLtMatmulPreference_t, &cublasLtMatmulPreferenceDestroy>>;

Layout make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                               static_cast<uint64_t>(cols), ld));
  return Layout(layout);
}

template <typename V>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const V& value) {
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename V>
void set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute,
         const V& value) {
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
}

// Runs the product, or returns false when cuBLASLt has no algorithm for it (an epilogue at a
// shape or alignment it does not take; the caller then does the epilogue itself).
bool try_gemm(Context::Impl& ctx, const Gemm& g) {
  cublasLtMatmulDesc_t raw_desc = nullptr;
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  MatmulDesc desc(raw_desc);
  set(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
  if (g.bias != nullptr) set(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.aux != nullptr) {
    set(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
  }
  const Layout a = make_layout(g.ab_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda);
  const Layout b = make_layout(g.ab_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb);
  const Layout d = make_layout(g.d_type, g.m, g.n, g.ldd);

  const uint32_t align_a = alignment_of(g.a);
  const uint32_t align_b = alignment_of(g.b);
  const uint32_t align_d = alignment_of(g.d);
  const uint32_t align_bias = g.bias != nullptr ? alignment_of(g.bias) : 0;
  const uint32_t align_aux = g.aux != nullptr ? alignment_of(g.aux) : 0;
  const GemmKey key{g.trans_a, g.trans_b, g.m,       g.n,        g.k,        g.lda,
                    g.ldb,     g.ldd,     g.ab_type, g.d_type,   g.epilogue, align_a,
                    align_b,   align_d,   g.aux_ld,  align_bias, align_aux};
  auto it = ctx.algos.find(key);
  if (it == ctx.algos.end()) {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
    Preference pref(raw_pref);
    set(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        static_cast<uint64_t>(ctx.workspace_bytes));
    // The heuristic assumes 256-byte aligned matrices unless told otherwise; a slice into a
    // larger buffer may be less aligned.
    set(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
    set(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
    set(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d);
    set(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        ctx.handle, raw_desc, a.get(), b.get(), d.get(), d.get(), raw_pref, 1, &result, &count);
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (status == CUBLAS_STATUS_SUCCESS && count > 0) {
      algo = result.algo;
    } else if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_SUCCESS &&
               g.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
      // With an epilogue, a refusal of any kind (an aux or bias argument the epilogue kernels do
      // not take) means "no fused kernel": the caller's plain product reports real errors.
      WEFT_CUBLAS_CHECK(status);
    }
    it = ctx.algos.emplace(key, algo).first;
  }
  if (!it->second.has_value()) return false;
  const float alpha = 1.f;
  const cublasStatus_t status = cublasLtMatmul(
      ctx.handle, raw_desc, &alpha, g.a, a.get(), g.b, b.get(), &g.beta, g.d, d.get(), g.d, d.get(),
      &*it->second, ctx.workspace, ctx.workspace_bytes, ctx.stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    it->second.reset();  // an epilogue the chosen kernel refuses at run time: fall back from now on
    return false;
  }
  WEFT_CUBLAS_CHECK(status);
  return true;
}

void run_gemm(Context::Impl& ctx, const Gemm& g) {
  WEFT_CHECK(try_gemm(ctx, g), "cuBLASLt has no algorithm for the ", g.m, " x ", g.n, " x ", g.k,
             " product (types ", g.ab_type, " -> ", g.d_type, ")");
}

void check_linear_dims(int N, int IC, int OC) {
  WEFT_CHECK(N >= 0 && IC > 0 && OC > 0, "linear layer with N=", N, " IC=", IC, " OC=", OC);
}

// out[N,OC] = inp[N,IC] @ weight[OC,IC]^T (into pre when pre is non-null), as column-major
// out^T = op_T(weight^T) . inp^T.
Gemm forward_gemm(BF16* out, const BF16* inp, const BF16* weight, int N, int IC, int OC) {
  Gemm g;
  g.trans_a = true;
  g.m = OC;
  g.n = N;
  g.k = IC;
  g.a = weight;
  g.lda = IC;
  g.b = inp;
  g.ldb = IC;
  g.d = out;
  g.ldd = OC;
  g.ab_type = CUDA_R_16BF;
  g.d_type = CUDA_R_16BF;
  return g;
}

}  // namespace

void linear_forward(Context& ctx, BF16* out, BF16* pre_gelu, const BF16* inp, const BF16* weight,
                    const BF16* bias, int N, int IC, int OC) {
  check_linear_dims(N, IC, OC);
  if (N == 0) return;
  // cuBLASLt's GeLU epilogues need the aux leading dimension (OC here) divisible by 8
  // (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); other widths take the separate kernel.
  const bool fuse = pre_gelu == nullptr || OC % 8 == 0;
  Gemm fused = forward_gemm(out, inp, weight, N, IC, OC);
  if (pre_gelu != nullptr) {
    fused.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    fused.aux = pre_gelu;
    fused.aux_ld = OC;
  } else if (bias != nullptr) {
    fused.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  fused.bias = bias;
  if (fuse && try_gemm(ctx.impl(), fused)) return;
  // No fused epilogue for this shape: the plain product, then bias and GeLU in one kernel.
  run_gemm(ctx.impl(), forward_gemm(pre_gelu != nullptr ? pre_gelu : out, inp, weight, N, IC, OC));
  if (bias != nullptr || pre_gelu != nullptr) {
    detail::launch_bias_gelu(out, pre_gelu, bias, N, OC, ctx.stream());
  }
}

// dinp = (dout @ weight) [* gelu'(gelu_pre)] (written); dweight += dout^T @ inp; dbias += column
// sums of dout (ops.inc's rule).
void linear_backward(Context& ctx, BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                     const BF16* inp, const BF16* weight, const BF16* gelu_pre, int N, int IC,
                     int OC) {
  check_linear_dims(N, IC, OC);
  if (N == 0) return;
  if (dinp != nullptr) {
    Gemm g;
    g.m = IC;
    g.n = N;
    g.k = OC;
    g.a = weight;
    g.lda = IC;
    g.b = dout;
    g.ldb = OC;
    g.d = dinp;
    g.ldd = IC;
    g.ab_type = CUDA_R_16BF;
    g.d_type = CUDA_R_16BF;
    bool done = false;
    if (gelu_pre != nullptr && IC % 8 == 0) {  // DGELU's aux leading dimension: as forward's
      Gemm fused = g;
      fused.epilogue = CUBLASLT_EPILOGUE_DGELU;
      fused.aux = const_cast<BF16*>(gelu_pre);  // read, not written, by DGELU
      fused.aux_ld = IC;
      done = try_gemm(ctx.impl(), fused);
    }
    if (!done) {
      run_gemm(ctx.impl(), g);
      if (gelu_pre != nullptr) {
        detail::launch_gelu_backward_inplace(dinp, gelu_pre, static_cast<int64_t>(N) * IC,
                                             ctx.stream());
      }
    }
  }
  if (dweight != nullptr) {
    Gemm g;
    g.trans_b = true;
    g.m = IC;
    g.n = OC;
    g.k = N;
    g.a = inp;
    g.lda = IC;
    g.b = dout;
    g.ldb = OC;
    g.d = dweight;
    g.ldd = IC;
    g.ab_type = CUDA_R_16BF;
    g.d_type = CUDA_R_32F;
    g.beta = 1.f;
    run_gemm(ctx.impl(), g);
  }
  if (dbias != nullptr) detail::launch_column_sums(ctx, dbias, dout, N, OC);
}

}  // namespace weft::kernels::cuda
