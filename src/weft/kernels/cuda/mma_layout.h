#pragma once
// Register layouts of the tensor-core instruction mma.sync.m16n8k16 (16-bit inputs, fp32
// accumulators) and the ldmatrix addressing flash_attention.cu uses to fill them. Pure index
// arithmetic, shared by the kernels and a host test that emulates the two instructions from their
// definitions (tests/kernels/cuda_host_test.cc), so a wrong index is caught without a GPU.
//
// Source: PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" and "ldmatrix".
// In a warp, lane = 4 g + t (g = lane / 4 the group, t = lane % 4 the thread in the group).
//   A (16 x 16, row-major), 4 registers of 2 halves, element i = 2 reg + half:
//     reg 0: (g, 2t + half)   reg 1: (g + 8, 2t + half)
//     reg 2: (g, 2t + 8 + half)   reg 3: (g + 8, 2t + 8 + half)
//   B (16 x 8, "col"), 2 registers of 2 halves: reg r: (k = 2t + half + 8 r, n = g)
//   C/D (16 x 8, fp32), 4 floats: e: (g + 8 (e / 2), 2t + e % 2)
// ldmatrix.x4 loads four 8x8 matrices of 16-bit elements; lane i gives the address of row i % 8
// of matrix i / 8. Register j of each lane receives two elements of matrix j: without .trans
// (row g, cols 2t, 2t + 1); with .trans (rows 2t, 2t + 1, col g).

#ifdef __CUDACC__
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

namespace weft::kernels::cuda::mma {

struct RowCol {
  int row;
  int col;
};

// ---- the instruction's fragments ----------------------------------------------------------

// Element i (0..7) of lane's A fragment: register i / 2, half i % 2.
WEFT_HOST_DEVICE constexpr RowCol a_element(int lane, int i) {
  const int reg = i / 2;
  return {lane / 4 + 8 * (reg % 2), 2 * (lane % 4) + i % 2 + 8 * (reg / 2)};
}
// Element i (0..3) of lane's B fragment, as (k, n).
WEFT_HOST_DEVICE constexpr RowCol b_element(int lane, int i) {
  return {2 * (lane % 4) + i % 2 + 8 * (i / 2), lane / 4};
}
// Accumulator e (0..3) of lane.
WEFT_HOST_DEVICE constexpr RowCol c_element(int lane, int e) {
  return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2};
}

// An A fragment over 16 columns made of two adjacent accumulator tiles (8 columns each): A
// register reg holds accumulators c_first(reg), c_first(reg) + 1 of tile c_tile(reg). This is
// what lets a product's output feed the next product from registers (P in P V).
WEFT_HOST_DEVICE constexpr int c_tile_of_a_register(int reg) { return reg / 2; }
WEFT_HOST_DEVICE constexpr int c_first_of_a_register(int reg) { return 2 * (reg % 2); }

// ---- ldmatrix addressing (row, col offsets within a tile, given per lane) ---------------------

// A fragment of the 16 x 16 block at (row0, col0): matrices (rows 0-7, cols 0-7), (8-15, 0-7),
// (0-7, 8-15), (8-15, 8-15) give registers 0..3.
WEFT_HOST_DEVICE constexpr RowCol ldmatrix_a(int lane) { return {lane % 16, 8 * (lane / 16)}; }

// B fragments of two n-tiles for a product with a stored tile transposed, B[k][n] = tile[n][k]
// (keys stored as rows, for S = Q K^T): registers 0, 1 for n 0..7, registers 2, 3 for n 8..15.
WEFT_HOST_DEVICE constexpr RowCol ldmatrix_b_transposed(int lane) {
  return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)};
}

// B fragments of two n-tiles for a product with a stored tile as is, B[k][n] = tile[k][n]
// (values stored as rows, for P V), loaded with .trans: registers 0, 1 for n 0..7, 2, 3 for 8..15.
WEFT_HOST_DEVICE constexpr RowCol ldmatrix_b(int lane) {
  return {lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)};
}

}  // namespace weft::kernels::cuda::mma
