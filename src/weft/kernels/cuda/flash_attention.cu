// Causal self-attention, FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with
// Better Parallelism and Work Partitioning", Algorithms 1 and 2), on bf16 inputs with fp32
// accumulation. docs/cuda.md walks through it.
//
// Forward. A thread block owns 64 queries of one (batch, head); each of its 4 warps owns 16 of
// them. It walks the key/value tiles of 64 keys up to the diagonal (causal: later tiles are all
// masked), double-buffered in shared memory by cp.async. Per tile, each warp computes
// S = Q K^T (16 x 64) with tensor-core mma.sync (m16n8k16, fp32 accumulators), updates its rows'
// running max m and sum l (the online softmax of Milakov & Gimelshein 2018), rescales its output
// accumulator, and adds P V with P taken straight from the S accumulators, rounded to 16 bits
// (the accumulator layout of m16n8k16 is the A-operand layout of the next product, so P never
// leaves registers). At the end O /= l and lse = m + log l is saved: the backward recomputes P
// from it, so the T x T matrix is never stored.
//
// Backward. D = rowsum(dO * O) first (a small kernel). Then, unlike the paper's single kernel
// with atomicAdd into dQ, two kernels without atomics, so the gradient is the same bits on every
// run: one owns 64 keys and accumulates dK and dV over the query tiles at or after the diagonal;
// the other owns 64 queries and accumulates dQ over the key tiles up to it. The cost is two
// recomputed products (7 instead of 5).
//
// Grouped-query attention (Ainslie et al. 2023): qkv's rows are [q: NH heads | k: NKV | v: NKV]
// (row width W = C + 2 NKV HS), and query head h reads key/value head h / (NH/NKV). The forward
// and the dQ kernel only read another head's K and V. The dK/dV kernel owns 64 keys of one
// key/value head and walks the (query head, query tile) pairs of its group head by head, in one
// double-buffered sequence, so a key/value head's gradient sums its group's query heads in
// registers, in a fixed order, without atomics. With NKV == NH the group is one head and every
// kernel does exactly what it did before grouping.
//
// The tensor-core fragment layouts and the ldmatrix addressing are in mma_layout.h, where a host
// test checks them against an emulation of the two instructions.

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "weft/kernels/cuda/common.cuh"
#include "weft/kernels/cuda/cuda_check.h"
#include "weft/kernels/cuda/kernels_cuda.h"
#include "weft/kernels/cuda/mma_layout.h"

namespace weft::kernels::cuda {
namespace detail {
namespace {

constexpr int kTileRows = 64;  // queries (or keys) a block owns, and keys (or queries) per step
constexpr int kWarps = 4;      // each owns 16 of the block's rows
constexpr int kThreads = kWarps * kWarpSize;
// Shared-memory rows are padded by 16 bytes, so the 8 rows one ldmatrix reads start in 8
// different groups of 4 banks (a row of 64 or 128 halves is 128 or 256 bytes: unpadded, all 8
// would hit the same banks).
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;

// ---- PTX wrappers ------------------------------------------------------------------------

template <typename T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Two floats rounded to bf16 in one register, the first in the low half (lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// 16 bytes global -> shared without passing through registers; zero-filled when !valid.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N of this thread's groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- tiles ------------------------------------------------------------------------------------

// Rows [row0, row0 + 64) of a [T, ld] matrix (columns [0, HS) from `base`) into a padded
// shared tile; rows >= T are zero-filled (never read from global memory).
template <typename T, int HS>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t ld, int row0, int rows) {
  constexpr int kChunksPerRow = HS / 8;  // 16-byte chunks of 8 halves
  for (int i = threadIdx.x; i < kTileRows * kChunksPerRow; i += kThreads) {
    const int r = i / kChunksPerRow;
    const int c = (i % kChunksPerRow) * 8;
    const bool valid = row0 + r < rows;
    const T* src = base + (valid ? static_cast<int64_t>(row0 + r) * ld + c : 0);
    cp_async_16(tile + r * (HS + kPad) + c, src, valid);
  }
}

// A fragment (16 x 16 at row0, col0) of a padded tile.
template <typename T, int HS>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int row0, int col0,
                                       int lane) {
  const mma::RowCol at = mma::ldmatrix_a(lane);
  ldmatrix_x4(a, tile + (row0 + at.row) * (HS + kPad) + col0 + at.col);
}

// B fragments of two adjacent n-tiles (8 columns each) for a product with the tile TRANSPOSED:
// B[k][n] = tile[n0 + n][k0 + k]. b[0], b[1] for columns n0..n0+7, b[2], b[3] for n0+8..n0+15.
template <typename T, int HS>
__device__ __forceinline__ void load_b_transposed(uint32_t (&b)[4], const T* tile, int n0, int k0,
                                                  int lane) {
  const mma::RowCol at = mma::ldmatrix_b_transposed(lane);
  ldmatrix_x4(b, tile + (n0 + at.row) * (HS + kPad) + k0 + at.col);
}

// B fragments for a product with the tile as is: B[k][n] = tile[k0 + k][n0 + n].
template <typename T, int HS>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const T* tile, int k0, int n0, int lane) {
  const mma::RowCol at = mma::ldmatrix_b(lane);
  ldmatrix_x4_trans(b, tile + (k0 + at.row) * (HS + kPad) + n0 + at.col);
}

// acc[16 x 64] = A-rows (16 x HS, from `a_tile` at row a_row0) . B-rows^T (64 rows of `b_tile`).
template <typename T, int HS>
__device__ __forceinline__ void product_rows(float (&acc)[8][4], const T* a_tile, int a_row0,
                                             const T* b_tile, int lane) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    uint32_t a[4];
    load_a<T, HS>(a, a_tile, a_row0, kk * 16, lane);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      load_b_transposed<T, HS>(b, b_tile, np * 16, kk * 16, lane);
      Mma<T>::run(acc[2 * np], a, b[0], b[1]);
      Mma<T>::run(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// Same with the A fragments already in registers.
template <typename T, int HS>
__device__ __forceinline__ void product_rows_reg(float (&acc)[8][4],
                                                 const uint32_t (&a)[HS / 16][4], const T* b_tile,
                                                 int lane) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      load_b_transposed<T, HS>(b, b_tile, np * 16, kk * 16, lane);
      Mma<T>::run(acc[2 * np], a[kk], b[0], b[1]);
      Mma<T>::run(acc[2 * np + 1], a[kk], b[2], b[3]);
    }
  }
}

// out[16 x HS] += P (16 x 64, the C fragments p, rounded to 16 bits) . tile (64 x HS).
template <typename T, int HS>
__device__ __forceinline__ void accumulate_pv(float (&out)[HS / 8][4], const float (&p)[8][4],
                                              const T* tile, int lane) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    uint32_t a[4];  // P's columns 16 kc .. 16 kc + 15 as an A fragment, from the accumulators
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const float* c = p[2 * kc + mma::c_tile_of_a_register(reg)] + mma::c_first_of_a_register(reg);
      a[reg] = pack2<T>(c[0], c[1]);
    }
#pragma unroll
    for (int dp = 0; dp < HS / 16; ++dp) {
      uint32_t b[4];
      load_b<T, HS>(b, tile, kc * 16, dp * 16, lane);
      Mma<T>::run(out[2 * dp], a, b[0], b[1]);
      Mma<T>::run(out[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Writes a warp's 16 x HS accumulator (times `scale`) to rows row0.. of a [T, ld] matrix.
template <typename T, int HS>
__device__ __forceinline__ void store_rows(T* base, int64_t ld, int row0, int rows,
                                           const float (&acc)[HS / 8][4], float scale0,
                                           float scale1, int lane) {
  const int r0 = row0 + mma::c_element(lane, 0).row;  // accumulators 0, 1
  const int r1 = row0 + mma::c_element(lane, 2).row;  // accumulators 2, 3
#pragma unroll
  for (int dt = 0; dt < HS / 8; ++dt) {
    const int col = dt * 8 + mma::c_element(lane, 0).col;
    if (r0 < rows) {
      *reinterpret_cast<uint32_t*>(base + static_cast<int64_t>(r0) * ld + col) =
          pack2<T>(acc[dt][0] * scale0, acc[dt][1] * scale0);
    }
    if (r1 < rows) {
      *reinterpret_cast<uint32_t*>(base + static_cast<int64_t>(r1) * ld + col) =
          pack2<T>(acc[dt][2] * scale1, acc[dt][3] * scale1);
    }
  }
}

struct Shape {
  int T;
  int C;
  int NH;
  int NKV;           // key/value heads; NH % NKV == 0
  int group;         // NH / NKV: query heads per key/value head
  int64_t ld;        // qkv's row width C + 2 NKV HS
  float scale_log2;  // softmax scale 1/sqrt(HS) times log2(e): exp(x) = exp2(x log2 e)
  float softmax_scale;
};

// ---- forward ------------------------------------------------------------------------------

template <typename T, int HS>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(T* out, float* lse, const T* qkv, Shape shape) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTile = kTileRows * (HS + kPad);
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tiles = q_tile + kTile;       // 2 buffers
  T* v_tiles = k_tiles + 2 * kTile;  // 2 buffers

  const int T_ = shape.T;
  const int C = shape.C;
  const int num_q_tiles = (T_ + kTileRows - 1) / kTileRows;
  const int qt = num_q_tiles - 1 - blockIdx.x;  // the longest rows first
  const int bh = blockIdx.y;
  const int b = bh / shape.NH;
  const int h = bh % shape.NH;
  const int64_t ld = shape.ld;
  const T* row0 = qkv + static_cast<int64_t>(b) * T_ * ld;
  const T* q_base = row0 + h * HS;
  const T* k_base = row0 + C + (h / shape.group) * HS;  // the group's key/value head
  const T* v_base = k_base + shape.NKV * HS;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int q0 = qt * kTileRows;
  const int warp_row0 = q0 + warp * 16;  // the warp's 16 query rows

  load_tile<T, HS>(q_tile, q_base, ld, q0, T_);
  load_tile<T, HS>(k_tiles, k_base, ld, 0, T_);
  load_tile<T, HS>(v_tiles, v_base, ld, 0, T_);
  cp_async_commit();

  uint32_t q_frag[HS / 16][4];
  float o[HS / 8][4];
#pragma unroll
  for (int dt = 0; dt < HS / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
  }
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};

  for (int kt = 0; kt <= qt; ++kt) {
    const int buf = kt & 1;
    if (kt < qt) {  // prefetch the next tile while this one is used
      load_tile<T, HS>(k_tiles + (buf ^ 1) * kTile, k_base, ld, (kt + 1) * kTileRows, T_);
      load_tile<T, HS>(v_tiles + (buf ^ 1) * kTile, v_base, ld, (kt + 1) * kTileRows, T_);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk)
        load_a<T, HS>(q_frag[kk], q_tile, warp * 16, kk * 16, lane);
    }
    const T* k_tile = k_tiles + buf * kTile;
    const T* v_tile = v_tiles + buf * kTile;

    float s[8][4];
    product_rows_reg<T, HS>(s, q_frag, k_tile, lane);
    if (kt == qt) {  // the diagonal tile: mask keys after the query
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const mma::RowCol at = mma::c_element(lane, e);
          if (kt * kTileRows + nt * 8 + at.col > warp_row0 + at.row) s[nt][e] = -INFINITY;
        }
      }
    }
    // Online softmax: new running max per row (over the 4 lanes sharing it), rescale.
    float new_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      new_max[0] = fmaxf(new_max[0], fmaxf(s[nt][0], s[nt][1]));
      new_max[1] = fmaxf(new_max[1], fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(kFullMask, new_max[r], 1));
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(kFullMask, new_max[r], 2));
    }
    // Key 0 is in tile 0 and never masked, so new_max is finite; exp2(-inf) = 0 the first time.
    float alpha[2];
    float max_scaled[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      alpha[r] = exp2f((row_max[r] - new_max[r]) * shape.scale_log2);
      row_max[r] = new_max[r];
      max_scaled[r] = new_max[r] * shape.scale_log2;
      row_sum[r] *= alpha[r];
    }
#pragma unroll
    for (int dt = 0; dt < HS / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(fmaf(s[nt][e], shape.scale_log2, -max_scaled[e / 2]));
        s[nt][e] = p;
        row_sum[e / 2] += p;
      }
    }
    accumulate_pv<T, HS>(o, s, v_tile, lane);
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(kFullMask, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(kFullMask, row_sum[r], 2);
  }
  T* out_base = out + static_cast<int64_t>(b) * T_ * C + h * HS;
  store_rows<T, HS>(out_base, C, warp_row0, T_, o, 1.f / row_sum[0], 1.f / row_sum[1], lane);
  if (lane % 4 == 0) {  // one lane of the 4 that share each row
    float* lse_bh = lse + static_cast<int64_t>(bh) * T_;
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // row r holds accumulators 2 r, 2 r + 1
      const int row = warp_row0 + mma::c_element(lane, 2 * r).row;
      if (row < T_) lse_bh[row] = row_max[r] * shape.softmax_scale + logf(row_sum[r]);
    }
  }
}

// ---- backward -----------------------------------------------------------------------------

// D[b,h,t] = dout[b,t,h,:] . out[b,t,h,:], one warp per (b, t, h).
template <typename T, int HS>
__global__ void flash_backward_dot_kernel(float* d, const T* out, const T* dout, int T_, int C,
                                          int NH, int64_t rows) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (w >= rows) return;
  const int h = static_cast<int>(w % NH);
  const int64_t bt = w / NH;
  const int64_t b = bt / T_;
  const int t = static_cast<int>(bt % T_);
  const int64_t offset = bt * C + h * HS;
  float acc = 0.f;
  for (int i = lane; i < HS; i += kWarpSize)
    acc += to_float(dout[offset + i]) * to_float(out[offset + i]);
  acc = warp_sum(acc);
  if (lane == 0) d[(b * NH + h) * T_ + t] = acc;
}

// A block owns keys [k0, k0 + 64) of one (b, key/value head g); warp w their 16 rows from
// k0 + 16 w. For each query head h of g's group, in order, and each query tile at or after the
// diagonal (one sequence of (h, query tile) steps, double-buffered across heads):
//   S^T = K Q^T          P^T = exp(S^T scale - lse_q), 0 where q < key or q >= T
//   dV += P^T dO         dP^T = V dO^T
//   dS^T = P^T (dP^T - D_q)          dK += dS^T Q   (times the softmax scale at the end)
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkdv_kernel(T* dqkv, const T* qkv, const T* dout, const float* lse,
                               const float* dvec, Shape shape) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTile = kTileRows * (HS + kPad);
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = k_tile + kTile;
  T* q_tiles = v_tile + kTile;                                        // 2 buffers
  T* do_tiles = q_tiles + 2 * kTile;                                  // 2 buffers
  float* lse_tiles = reinterpret_cast<float*>(do_tiles + 2 * kTile);  // 2 x 64
  float* d_tiles = lse_tiles + 2 * kTileRows;                         // 2 x 64

  const int T_ = shape.T;
  const int C = shape.C;
  const int num_tiles = (T_ + kTileRows - 1) / kTileRows;
  const int kt = blockIdx.x;  // key tile 0 sees every query tile: the longest first
  const int bg = blockIdx.y;
  const int b = bg / shape.NKV;
  const int g = bg % shape.NKV;
  const int64_t ld = shape.ld;
  const T* row0 = qkv + static_cast<int64_t>(b) * T_ * ld;
  const T* k_base = row0 + C + g * HS;
  const T* v_base = k_base + shape.NKV * HS;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int k0 = kt * kTileRows;
  const int warp_key0 = k0 + warp * 16;  // the warp's 16 keys
  // Steps: (query head h0 + step / nq, query tile kt + step % nq).
  const int h0 = g * shape.group;
  const int nq = num_tiles - kt;
  const int steps = shape.group * nq;

  // Query head h's Q and dO rows, and its row statistics of a query tile into shared memory
  // (plain loads; read after a barrier).
  auto q_base = [&](int h) { return row0 + h * HS; };
  auto do_base = [&](int h) { return dout + static_cast<int64_t>(b) * T_ * C + h * HS; };
  auto load_stats = [&](int buf, int h, int qt) {
    if (threadIdx.x < kTileRows) {
      const int64_t bh = static_cast<int64_t>(b) * shape.NH + h;
      const int q = qt * kTileRows + threadIdx.x;
      lse_tiles[buf * kTileRows + threadIdx.x] = q < T_ ? lse[bh * T_ + q] : 0.f;
      d_tiles[buf * kTileRows + threadIdx.x] = q < T_ ? dvec[bh * T_ + q] : 0.f;
    }
  };

  load_tile<T, HS>(k_tile, k_base, ld, k0, T_);
  load_tile<T, HS>(v_tile, v_base, ld, k0, T_);
  load_tile<T, HS>(q_tiles, q_base(h0), ld, kt * kTileRows, T_);
  load_tile<T, HS>(do_tiles, do_base(h0), C, kt * kTileRows, T_);
  load_stats(0, h0, kt);
  cp_async_commit();

  float dk[HS / 8][4];
  float dv[HS / 8][4];
#pragma unroll
  for (int dt = 0; dt < HS / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dk[dt][e] = 0.f;
      dv[dt][e] = 0.f;
    }
  }

  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    const int qt = kt + step % nq;
    if (step + 1 < steps) {  // prefetch the next step's tiles, maybe the next head's
      const int h_next = h0 + (step + 1) / nq;
      const int qt_next = kt + (step + 1) % nq;
      load_tile<T, HS>(q_tiles + (buf ^ 1) * kTile, q_base(h_next), ld, qt_next * kTileRows, T_);
      load_tile<T, HS>(do_tiles + (buf ^ 1) * kTile, do_base(h_next), C, qt_next * kTileRows, T_);
      load_stats(buf ^ 1, h_next, qt_next);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* q_tile = q_tiles + buf * kTile;
    const T* do_tile = do_tiles + buf * kTile;
    const float* lse_tile = lse_tiles + buf * kTileRows;
    const float* d_tile = d_tiles + buf * kTileRows;

    float p[8][4];  // P^T: rows = this warp's 16 keys, columns = the tile's 64 queries
    product_rows<T, HS>(p, k_tile, warp * 16, q_tile, lane);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const mma::RowCol at = mma::c_element(lane, e);
        const int col = nt * 8 + at.col;
        const int q = qt * kTileRows + col;
        const int key = warp_key0 + at.row;
        const float value = exp2f(fmaf(p[nt][e], shape.scale_log2, -lse_tile[col] * kLog2e));
        p[nt][e] = (q >= key && q < T_) ? value : 0.f;
      }
    }
    accumulate_pv<T, HS>(dv, p, do_tile, lane);
    float ds[8][4];  // dP^T, then dS^T
    product_rows<T, HS>(ds, v_tile, warp * 16, do_tile, lane);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ds[nt][e] = p[nt][e] * (ds[nt][e] - d_tile[nt * 8 + mma::c_element(lane, e).col]);
      }
    }
    accumulate_pv<T, HS>(dk, ds, q_tile, lane);
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }

  T* dk_base = dqkv + static_cast<int64_t>(b) * T_ * ld + C + g * HS;
  T* dv_base = dk_base + shape.NKV * HS;
  store_rows<T, HS>(dk_base, ld, k0 + warp * 16, T_, dk, shape.softmax_scale, shape.softmax_scale,
                    lane);
  store_rows<T, HS>(dv_base, ld, k0 + warp * 16, T_, dv, 1.f, 1.f, lane);
}

// A block owns queries [q0, q0 + 64) of one (b, h); for each key tile up to the diagonal:
//   S = Q K^T    P = exp(S scale - lse)    dP = dO V^T    dS = P (dP - D)    dQ += dS K
// At HS = 64, 4 blocks per SM (their shared memory allows 4): ptxas gave this kernel 128
// registers before grouped-query attention and 134 after (3 blocks) until asked for 4; it fits
// 128 without spilling (nvcc 13, -Xptxas -v).
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads, HS == 64 ? 4 : 1)
    flash_backward_dq_kernel(T* dqkv, const T* qkv, const T* dout, const float* lse,
                             const float* dvec, Shape shape) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTile = kTileRows * (HS + kPad);
  T* q_tile = reinterpret_cast<T*>(smem);
  T* do_tile = q_tile + kTile;
  T* k_tiles = do_tile + kTile;      // 2 buffers
  T* v_tiles = k_tiles + 2 * kTile;  // 2 buffers

  const int T_ = shape.T;
  const int C = shape.C;
  const int num_tiles = (T_ + kTileRows - 1) / kTileRows;
  const int qt = num_tiles - 1 - blockIdx.x;  // the longest rows first
  const int bh = blockIdx.y;
  const int b = bh / shape.NH;
  const int h = bh % shape.NH;
  const int64_t ld = shape.ld;
  const T* row0 = qkv + static_cast<int64_t>(b) * T_ * ld;
  const T* q_base = row0 + h * HS;
  const T* k_base = row0 + C + (h / shape.group) * HS;  // the group's key/value head
  const T* v_base = k_base + shape.NKV * HS;
  const T* do_base = dout + static_cast<int64_t>(b) * T_ * C + h * HS;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int q0 = qt * kTileRows;
  const int warp_row0 = q0 + warp * 16;  // the warp's 16 query rows

  load_tile<T, HS>(q_tile, q_base, ld, q0, T_);
  load_tile<T, HS>(do_tile, do_base, C, q0, T_);
  load_tile<T, HS>(k_tiles, k_base, ld, 0, T_);
  load_tile<T, HS>(v_tiles, v_base, ld, 0, T_);
  cp_async_commit();

  float lse_log2[2];
  float d_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // row r holds accumulators 2 r, 2 r + 1
    const int row = warp_row0 + mma::c_element(lane, 2 * r).row;
    const int64_t i = static_cast<int64_t>(bh) * T_ + row;
    lse_log2[r] = row < T_ ? lse[i] * kLog2e : 0.f;
    d_row[r] = row < T_ ? dvec[i] : 0.f;
  }

  uint32_t q_frag[HS / 16][4];
  uint32_t do_frag[HS / 16][4];
  float dq[HS / 8][4];
#pragma unroll
  for (int dt = 0; dt < HS / 8; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[dt][e] = 0.f;
  }

  for (int kt = 0; kt <= qt; ++kt) {
    const int buf = kt & 1;
    if (kt < qt) {
      load_tile<T, HS>(k_tiles + (buf ^ 1) * kTile, k_base, ld, (kt + 1) * kTileRows, T_);
      load_tile<T, HS>(v_tiles + (buf ^ 1) * kTile, v_base, ld, (kt + 1) * kTileRows, T_);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) {
        load_a<T, HS>(q_frag[kk], q_tile, warp * 16, kk * 16, lane);
        load_a<T, HS>(do_frag[kk], do_tile, warp * 16, kk * 16, lane);
      }
    }
    const T* k_tile = k_tiles + buf * kTile;
    const T* v_tile = v_tiles + buf * kTile;

    float p[8][4];
    product_rows_reg<T, HS>(p, q_frag, k_tile, lane);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const mma::RowCol at = mma::c_element(lane, e);
        const float value = exp2f(fmaf(p[nt][e], shape.scale_log2, -lse_log2[e / 2]));
        p[nt][e] = kt * kTileRows + nt * 8 + at.col <= warp_row0 + at.row ? value : 0.f;
      }
    }
    float ds[8][4];  // dP, then dS
    product_rows_reg<T, HS>(ds, do_frag, v_tile, lane);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[nt][e] = p[nt][e] * (ds[nt][e] - d_row[e / 2]);
    }
    accumulate_pv<T, HS>(dq, ds, k_tile, lane);
    __syncthreads();
  }

  T* dq_base = dqkv + static_cast<int64_t>(b) * T_ * ld + h * HS;
  store_rows<T, HS>(dq_base, ld, q0 + warp * 16, T_, dq, shape.softmax_scale, shape.softmax_scale,
                    lane);
}

// ---- launch -------------------------------------------------------------------------------

template <int HS>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(kTileRows) * (HS + kPad) * 2;
}

// Blocks may use more than 48 KB of shared memory only after opting in, once per kernel.
template <typename Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes) {
  WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
}

Shape make_shape(int B, int T_, int C, int NH, int NKV) {
  WEFT_CHECK(B > 0 && T_ > 0 && NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0,
             "flash attention with B=", B, " T=", T_, " C=", C, " NH=", NH, " NKV=", NKV);
  WEFT_CHECK(flash_attention_supports(C, NH), "flash attention takes head sizes 64 and 128; C=", C,
             " NH=", NH, " gives ", C / NH);
  WEFT_CHECK(static_cast<int64_t>(B) * NH <= 65535,
             "flash attention: B*NH=", static_cast<int64_t>(B) * NH, " exceeds the grid's 65535");
  const float softmax_scale = 1.f / std::sqrt(static_cast<float>(C / NH));
  const int64_t ld = C + 2 * static_cast<int64_t>(NKV) * (C / NH);
  return Shape{T_, C, NH, NKV, NH / NKV, ld, softmax_scale * kLog2e, softmax_scale};
}

void check_aligned(const void* p, const char* name) {
  WEFT_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "flash attention: ", name,
             " is not 16-byte aligned");
}

template <typename T, int HS>
void forward(T* out, float* lse, const T* qkv, int B, const Shape& shape, Stream stream) {
  const size_t smem = 5 * tile_bytes<HS>();
  static const bool configured = (allow_shared_memory(flash_forward_kernel<T, HS>, smem), true);
  (void)configured;
  const dim3 grid((shape.T + kTileRows - 1) / kTileRows, B * shape.NH);
  flash_forward_kernel<T, HS><<<grid, kThreads, smem, stream>>>(out, lse, qkv, shape);
  WEFT_CUDA_CHECK_LAUNCH();
}

template <typename T, int HS>
void backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, float* dvec,
              int B, const Shape& shape, Stream stream) {
  const int64_t rows = static_cast<int64_t>(B) * shape.T * shape.NH;
  const int warps_per_block = 8;
  flash_backward_dot_kernel<T, HS>
      <<<static_cast<unsigned>(ceil_div(rows, warps_per_block)), warps_per_block * kWarpSize, 0,
         stream>>>(dvec, out, dout, shape.T, shape.C, shape.NH, rows);
  WEFT_CUDA_CHECK_LAUNCH();

  const dim3 grid((shape.T + kTileRows - 1) / kTileRows, B * shape.NH);
  const dim3 kv_grid(grid.x, B * shape.NKV);  // a block per (key tile, b, key/value head)
  const size_t dkdv_smem = 6 * tile_bytes<HS>() + 4 * kTileRows * sizeof(float);
  static const bool dkdv_configured =
      (allow_shared_memory(flash_backward_dkdv_kernel<T, HS>, dkdv_smem), true);
  (void)dkdv_configured;
  flash_backward_dkdv_kernel<T, HS>
      <<<kv_grid, kThreads, dkdv_smem, stream>>>(dqkv, qkv, dout, lse, dvec, shape);
  WEFT_CUDA_CHECK_LAUNCH();

  const size_t dq_smem = 6 * tile_bytes<HS>();
  static const bool dq_configured =
      (allow_shared_memory(flash_backward_dq_kernel<T, HS>, dq_smem), true);
  (void)dq_configured;
  flash_backward_dq_kernel<T, HS>
      <<<grid, kThreads, dq_smem, stream>>>(dqkv, qkv, dout, lse, dvec, shape);
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace detail

bool flash_attention_supports(int C, int NH) {
  return NH > 0 && C % NH == 0 && (C / NH == 64 || C / NH == 128);
}

void flash_attention_forward(BF16* out, float* lse, const BF16* qkv, int B, int T, int C, int NH,
                             int NKV, Stream stream) {
  const detail::Shape shape = detail::make_shape(B, T, C, NH, NKV);
  detail::check_aligned(out, "out");
  detail::check_aligned(qkv, "qkv");
  using D = detail::device_t<BF16>;
  if (C / NH == 64) {
    detail::forward<D, 64>(detail::dev(out), lse, detail::dev(qkv), B, shape, stream);
  } else {
    detail::forward<D, 128>(detail::dev(out), lse, detail::dev(qkv), B, shape, stream);
  }
}

void flash_attention_backward(Context& ctx, BF16* dqkv, const BF16* dout, const BF16* qkv,
                              const BF16* out, const float* lse, int B, int T, int C, int NH,
                              int NKV) {
  const detail::Shape shape = detail::make_shape(B, T, C, NH, NKV);
  detail::check_aligned(dqkv, "dqkv");
  detail::check_aligned(dout, "dout");
  detail::check_aligned(qkv, "qkv");
  auto* dvec = static_cast<float*>(ctx.scratch(static_cast<size_t>(B) * NH * T * sizeof(float)));
  using D = detail::device_t<BF16>;
  if (C / NH == 64) {
    detail::backward<D, 64>(detail::dev(dqkv), detail::dev(dout), detail::dev(qkv),
                            detail::dev(out), lse, dvec, B, shape, ctx.stream());
  } else {
    detail::backward<D, 128>(detail::dev(dqkv), detail::dev(dout), detail::dev(qkv),
                             detail::dev(out), lse, dvec, B, shape, ctx.stream());
  }
}

}  // namespace weft::kernels::cuda
