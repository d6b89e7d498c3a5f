// Row-major GEMM with bfloat16 inputs and fp32 accumulation and output, through oneDNN's matmul
// primitive (brgemm kernels on avx512_bf16 CPUs: about twice dnnl_sgemm's rate, see
// docs/gemm-backend.md), and the process-wide matmul precision of kernels.h. Where oneDNN has no
// bf16 matmul for the CPU (AVX2-only hosts), the rounded operands are multiplied by sgemm
// (run_matmul): the same rounding and fp32 accumulation, so results do not depend on the host.
//
// The fp32 inputs are rounded to bf16 (round to nearest even) into per-thread scratch buffers on
// every call. B keeps its layout (the primitive's memory descriptor carries its transpose); a
// transposed A is transposed while it is converted, as oneDNN 2.6's kernels run a transposed
// source at about half speed. Operands larger than kMaxChunk elements are converted and multiplied
// in chunks along one of M, N, K, so the scratch stays small (tens of MiB even for the logits GEMMs
// of a large batch). Chunks along K accumulate into C in fp32 (beta = 1 after the first), like the
// GEMM itself.
//
// Threads: as in gemm.cc, C is split along its longer side into one slab per thread. The threads
// first convert the operand they share together, then (after one barrier) each converts its own
// slab of the other and runs a oneDNN matmul planned for one thread on it, with its own
// scratchpad. No nested OpenMP region is opened (see convert_block). Every element of C is
// computed by one thread in a fixed order: results are deterministic for a fixed thread count.
//
// oneDNN primitives are expensive to create, so they are cached per (shape, transpose of B, ldc,
// planned threads, alpha, beta).

#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/kernels/gemm.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels {
namespace {

std::atomic<MatmulPrecision> g_matmul_precision{MatmulPrecision::F32};
std::atomic<bool> g_force_widened{false};  // force_bf16_gemm_widened

// Largest operand chunk converted at once, in elements (16 MiB of bf16). At GPT-2 124M's sizes
// only the vocabulary GEMMs are chunked up to B*T = 5461 tokens.
constexpr int64_t kMaxChunk = int64_t{1} << 23;
// Conversions of fewer elements than this stay on the calling thread.
constexpr int64_t kMinParallelConvert = int64_t{1} << 16;
// Cached primitives; the cache is emptied when it reaches this size (a GPT step uses a few dozen).
constexpr size_t kMaxPrimitives = 256;

// ---- fp32 -> bf16 ----------------------------------------------------------------------------

// dst[i] = bf16(src[i]), round to nearest even. The AVX-512 BF16 instruction treats fp32 denormal
// inputs as zero (|x| < 1.2e-38, far below anything a GEMM input here holds); the portable loop
// keeps them, as BF16::from_float does.
void convert_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512BF16__)
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, std::bit_cast<__m512i>(v));
  }
  if (i < n) {
    const int64_t r = n - i;  // 1..31
    const __mmask16 lo = static_cast<__mmask16>(r >= 16 ? 0xFFFF : (1u << r) - 1);
    const __mmask16 hi = static_cast<__mmask16>(r <= 16 ? 0 : (1u << (r - 16)) - 1);
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + i + 16),
                                           _mm512_maskz_loadu_ps(lo, src + i));
    const __mmask32 mask = static_cast<__mmask32>((1u << r) - 1);
    _mm512_mask_storeu_epi16(dst + i, mask, std::bit_cast<__m512i>(v));
  }
#else
  // (a declared loop variable: GCC 12 rejects `omp simd` over `for (; i < n; ++i)`)
#pragma omp simd
  for (int64_t j = i; j < n; ++j) dst[j] = BF16::from_float(src[j]).bits;
#endif
}

// dst[r * cols + c] = bf16(src[r * ld + c]) for r < rows, c < cols: a block of a row-major matrix
// into a dense one. Parallel when large and called outside an OpenMP region; inside one it opens
// no nested region, not even an inactive one: with those, every later parallel region's threads
// waited milliseconds for each other on a busy machine (libgomp apparently stops spin-waiting and
// parks idle threads), which made a GPT-2 124M step 6x slower, fp32 GEMMs included.
void convert_block(const float* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst) {
  if (rows > 1 && rows * cols >= kMinParallelConvert && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) convert_row(src + r * ld, dst + r * cols, cols);
  } else {
    for (int64_t r = 0; r < rows; ++r) convert_row(src + r * ld, dst + r * cols, cols);
  }
}

#if defined(__AVX512BF16__)
// GCC 12's unpack/shuffle intrinsics pass an undefined vector as their (unused) merge source,
// which -Wmaybe-uninitialized reports once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Transposes the 16 x 16 floats in r[0..15] (row i = r[i]) in registers.
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xDD);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
  }
}
#pragma GCC diagnostic pop
#endif

// dst[m * K + k] = bf16(src[k * ld + m]) for m < M, k < K: the transpose of a [K, M] block of a
// row-major matrix, dense. In 32 x 16 tiles (two register transposes, one 64-byte store per row),
// 512 columns at a time so the rows being read stay in cache; about half the plain conversion's
// rate.
void convert_transposed(const float* src, int64_t ld, int64_t K, int64_t M, uint16_t* dst) {
  int64_t m_done = 0;
#if defined(__AVX512BF16__)
  constexpr int64_t kColumns = 512;
  const int64_t M16 = M / 16 * 16, K32 = K / 32 * 32;
  for (int64_t m0 = 0; m0 < M16; m0 += kColumns) {
    const int64_t m1 = std::min(M16, m0 + kColumns);
    for (int64_t k = 0; k < K32; k += 32) {
      for (int64_t m = m0; m < m1; m += 16) {
        __m512 lo[16], hi[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) lo[i] = _mm512_loadu_ps(src + (k + i) * ld + m);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) hi[i] = _mm512_loadu_ps(src + (k + 16 + i) * ld + m);
        transpose16x16(lo);
        transpose16x16(hi);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          _mm512_storeu_si512(dst + (m + i) * K + k,
                              std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(hi[i], lo[i])));
        }
      }
    }
    for (int64_t m = m0; m < m1; ++m) {  // the last K % 32 columns of these rows
      for (int64_t k = K32; k < K; ++k) dst[m * K + k] = BF16::from_float(src[k * ld + m]).bits;
    }
  }
  m_done = M16;
#endif
  for (int64_t m = m_done; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) dst[m * K + k] = BF16::from_float(src[k * ld + m]).bits;
  }
}

// One growable, 64-byte aligned buffer per operand (and oneDNN scratchpad) and thread.
class Scratch {
 public:
  void* bytes(size_t n) {
    if (n > capacity_) {
      data_.reset(static_cast<std::byte*>(::operator new[](n, std::align_val_t{64})));
      capacity_ = n;
    }
    return data_.get();
  }
  uint16_t* bf16(int64_t n) { return static_cast<uint16_t*>(bytes(static_cast<size_t>(n) * 2)); }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], Free> data_;
  size_t capacity_ = 0;
};

// ---- primitives ------------------------------------------------------------------------------

struct Key {
  int64_t M, N, K, ldc;
  bool trans_b;
  int threads;           // oneDNN plans the primitive's work for this many
  uint32_t alpha, beta;  // bit patterns
  auto operator<=>(const Key&) const = default;
};

struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// C[M,N] = alpha A op(B) + beta C for dense bf16 A [M, K] and B ([N, K] when trans_b, else
// [K, N]) and fp32 C with leading dimension ldc.
Matmul make_matmul(const Key& k) {
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a({k.M, k.K}, dt::bf16, dims{k.K, 1});
  const dnnl::memory::desc b({k.K, k.N}, dt::bf16, k.trans_b ? dims{1, k.K} : dims{k.N, 1});
  const dnnl::memory::desc c({k.M, k.N}, dt::f32, dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  // A caller-owned scratchpad per thread: with oneDNN's own (shared) one, two threads running the
  // same primitive at once corrupt each other's packed B.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const float alpha = std::bit_cast<float>(k.alpha), beta = std::bit_cast<float>(k.beta);
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (beta != 0.f) {  // dst = alpha A B + beta dst
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
  return {dnnl::matmul(pd), a, b, c, pd.scratchpad_desc()};
}

Matmul cached_matmul(const Key& k) {
  static std::mutex mutex;
  static std::map<Key, Matmul> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(k); it != cache.end()) return it->second;
  if (cache.size() >= kMaxPrimitives) cache.clear();
  try {
    return cache.emplace(k, make_matmul(k)).first->second;
  } catch (const dnnl::error& e) {
    WEFT_FAIL("sgemm_bf16: oneDNN matmul (M=", k.M, " N=", k.N, " K=", k.K, " trans_b=", k.trans_b,
              " ldc=", k.ldc, ") failed: ", e.what());
  }
}

// Per-thread scratch: `first` holds A (or a thread's own slab), `second` B (or the shared operand).
thread_local Scratch first_scratch, second_scratch;

// op(A)[M, K] as dense row-major bf16 (A row-major with leading dimension lda, stored [K, M] when
// trans_a): the oneDNN kernels are much faster on a plain source than on a transposed one.
// Parallel when called outside an OpenMP region.
void convert_a(bool trans_a, const float* A, int64_t lda, int64_t M, int64_t K, uint16_t* a) {
  if (!trans_a) {
    convert_block(A, lda, M, K, a);
    return;
  }
  if (omp_in_parallel() || M * K < kMinParallelConvert) {  // no nested region (convert_block)
    convert_transposed(A, lda, K, M, a);
    return;
  }
#pragma omp parallel
  {
    const auto [begin, end] = slab(M, omp_get_thread_num(), omp_get_num_threads());
    if (end > begin) convert_transposed(A + begin, lda, K, end - begin, a + begin * K);
  }
}

// op(B)[K, N] as dense bf16 in B's orientation ([N, K] when trans_b; the kernels handle both).
void convert_b(bool trans_b, const float* B, int64_t ldb, int64_t K, int64_t N, uint16_t* b) {
  convert_block(B, ldb, trans_b ? N : K, trans_b ? K : N, b);
}

// Whether this CPU has a oneDNN bf16 matmul: oneDNN 2.6 has none below avx512_core (an AVX2-only
// host refuses every bf16 primitive descriptor). Asked once, with a small primitive.
bool bf16_matmul_available() {
  static const bool available = [] {
    try {
      make_matmul({16, 16, 16, 16, false, 1, std::bit_cast<uint32_t>(1.f), 0});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

// dst[i] = float(src[i]): exact (a bf16 is an fp32 with its low 16 bits zero).
void widen(const uint16_t* src, int64_t n, float* dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16{src[i]}.to_float();
}

// C[M,N] = alpha a b + beta C for a = convert_a's dense [M, K], b = convert_b's. Without a bf16
// matmul on this CPU the rounded operands are widened back to fp32 (exactly) and multiplied by
// sgemm: the same products of bf16 inputs accumulated in fp32, at sgemm's rate, so the bf16
// precision (and the host bf16 backend that emulates the GPU) means the same numbers on every
// host.
void run_matmul(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* a,
                const uint16_t* b, float beta, float* C, int64_t ldc) {
  if (bf16_gemm_path() == Bf16GemmPath::Widened) {
    thread_local Scratch wide_a, wide_b;
    float* a32 = static_cast<float*>(wide_a.bytes(static_cast<size_t>(M * K) * sizeof(float)));
    float* b32 = static_cast<float*>(wide_b.bytes(static_cast<size_t>(K * N) * sizeof(float)));
    widen(a, M * K, a32);
    widen(b, K * N, b32);
    sgemm(false, trans_b, M, N, K, alpha, a32, K, b32, trans_b ? K : N, beta, C, ldc);
    return;
  }
  const uint32_t alpha_bits = std::bit_cast<uint32_t>(alpha);
  const uint32_t beta_bits = std::bit_cast<uint32_t>(beta);
  const int plan_threads = omp_get_max_threads();  // what oneDNN plans for (dnnl_get_max_threads)
  const Matmul mm = cached_matmul({M, N, K, ldc, trans_b, plan_threads, alpha_bits, beta_bits});
  dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  thread_local Scratch scratchpad;
  dnnl::memory a_mem(mm.a, engine, const_cast<uint16_t*>(a));
  dnnl::memory b_mem(mm.b, engine, const_cast<uint16_t*>(b));
  dnnl::memory c_mem(mm.c, engine, C);
  dnnl::memory s_mem(mm.scratchpad, engine, scratchpad.bytes(mm.scratchpad.get_size()));
  mm.primitive.execute(stream, {{DNNL_ARG_SRC, a_mem},
                                {DNNL_ARG_WEIGHTS, b_mem},
                                {DNNL_ARG_DST, c_mem},
                                {DNNL_ARG_SCRATCHPAD, s_mem}});
  stream.wait();
}

// One GEMM on fp32 operands that fit the scratch: converts, then multiplies, split across threads
// when large enough.
void gemm_block(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (!gemm_splits(M, N, K, threads)) {
    uint16_t* a = first_scratch.bf16(M * K);
    uint16_t* b = second_scratch.bf16(K * N);
    convert_a(trans_a, A, lda, M, K, a);
    convert_b(trans_b, B, ldb, K, N, b);
    run_matmul(trans_b, M, N, K, alpha, a, b, beta, C, ldc);
    return;
  }

  // By rows the threads share B and each converts its rows of A; by columns the other way round.
  const bool by_rows = M >= N;  // split the longer side of C
  uint16_t* shared = second_scratch.bf16(by_rows ? K * N : M * K);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(
        1);  // this thread's primitives are planned for one thread (this region only)
    const int parts = omp_get_num_threads();
    const int id = omp_get_thread_num();
    // 1. the shared operand, each thread a part, then a barrier
    if (by_rows) {
      const int64_t rows = trans_b ? N : K, cols = trans_b ? K : N;  // as stored
      const auto [r0, r1] = slab(rows, id, parts);
      if (r1 > r0) convert_block(B + r0 * ldb, ldb, r1 - r0, cols, shared + r0 * cols);
    } else {
      const auto [m0, m1] = slab(M, id, parts);
      if (m1 > m0) {
        convert_a(trans_a, trans_a ? A + m0 : A + m0 * lda, lda, m1 - m0, K, shared + m0 * K);
      }
    }
#pragma omp barrier
    // 2. this thread's slab of C
    const auto [begin, end] = slab(by_rows ? M : N, id, parts);
    const int64_t len = end - begin;
    if (len > 0) {
      try {
        if (by_rows) {  // C[begin:end, :] = alpha op(A)[begin:end, :] op(B) + beta C[begin:end, :]
          uint16_t* a = first_scratch.bf16(len * K);
          convert_a(trans_a, trans_a ? A + begin : A + begin * lda, lda, len, K, a);
          run_matmul(trans_b, len, N, K, alpha, a, shared, beta, C + begin * ldc, ldc);
        } else {  // C[:, begin:end] = alpha op(A) op(B)[:, begin:end] + beta C[:, begin:end]
          uint16_t* b = first_scratch.bf16(K * len);
          convert_b(trans_b, trans_b ? B + begin * ldb : B + begin, ldb, K, len, b);
          run_matmul(trans_b, M, len, K, alpha, shared, b, beta, C + begin, ldc);
        }
      } catch (...) {
        errors[static_cast<size_t>(id)] = std::current_exception();
      }
    }
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Splits [0, n) into ceil(elems / kMaxChunk) nearly equal chunks (multiples of 16 but the last).
int64_t chunk_length(int64_t n, int64_t elems) {
  const int64_t chunks = (elems + kMaxChunk - 1) / kMaxChunk;
  const int64_t len = (n + chunks - 1) / chunks;
  return std::min(n, (len + 15) / 16 * 16);
}

}  // namespace

void set_matmul_precision(MatmulPrecision precision) {
  g_matmul_precision.store(precision, std::memory_order_relaxed);
}

MatmulPrecision matmul_precision() { return g_matmul_precision.load(std::memory_order_relaxed); }

Bf16GemmPath bf16_gemm_path() {
  return g_force_widened.load(std::memory_order_relaxed) || !bf16_matmul_available()
             ? Bf16GemmPath::Widened
             : Bf16GemmPath::Native;
}

void force_bf16_gemm_widened(bool widened) {
  g_force_widened.store(widened, std::memory_order_relaxed);
}

void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc) {
  WEFT_CHECK(M >= 0 && N >= 0 && K >= 0, "sgemm_bf16: negative size M=", M, " N=", N, " K=", K);
  if (M == 0 || N == 0 || K == 0) {  // nothing to round: sgemm's C = beta C
    sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M * K <= kMaxChunk && K * N <= kMaxChunk) {
    gemm_block(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Chunk along the longest dimension that shrinks every operand too large for the scratch (M
  // shrinks A, N shrinks B, K both).
  const bool a_fits = M * K <= kMaxChunk, b_fits = K * N <= kMaxChunk;
  if ((!a_fits && !b_fits) || K >= (a_fits ? N : M)) {
    // C = alpha sum_chunks op(A)[:, k0:k1] op(B)[k0:k1, :] + beta C
    const int64_t len = chunk_length(K, K * std::max(M, N));
    for (int64_t k0 = 0; k0 < K; k0 += len) {
      const float* a = trans_a ? A + k0 * lda : A + k0;
      const float* b = trans_b ? B + k0 : B + k0 * ldb;
      gemm_block(trans_a, trans_b, M, N, std::min(len, K - k0), alpha, a, lda, b, ldb,
                 k0 == 0 ? beta : 1.f, C, ldc);
    }
  } else if (!a_fits) {  // C[m0:m1, :] = alpha op(A)[m0:m1, :] op(B) + beta C[m0:m1, :]
    const int64_t len = chunk_length(M, M * K);
    for (int64_t m0 = 0; m0 < M; m0 += len) {
      const float* a = trans_a ? A + m0 : A + m0 * lda;
      gemm_block(trans_a, trans_b, std::min(len, M - m0), N, K, alpha, a, lda, B, ldb, beta,
                 C + m0 * ldc, ldc);
    }
  } else {  // C[:, n0:n1] = alpha op(A) op(B)[:, n0:n1] + beta C[:, n0:n1]
    const int64_t len = chunk_length(N, K * N);
    for (int64_t n0 = 0; n0 < N; n0 += len) {
      const float* b = trans_b ? B + n0 * ldb : B + n0;
      gemm_block(trans_a, trans_b, M, std::min(len, N - n0), K, alpha, A, lda, b, ldb, beta, C + n0,
                 ldc);
    }
  }
}

}  // namespace weft::kernels
