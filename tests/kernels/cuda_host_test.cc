// The host-side arithmetic of the CUDA backend, which needs neither CUDA nor a GPU and so is
// built and run everywhere: the arena's bump allocation, the multi-tensor chunk table, the
// deterministic embedding-backward plan, the 16-bit rounding the GPU tests compare against, and
// flash attention's tensor-core fragment indexing (mma_layout.h) against an emulation of
// ldmatrix and mma.sync written from the PTX ISA's definitions.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/host_plans.h"
#include "weft/kernels/cuda/mma_layout.h"

namespace weft::kernels::cuda {
namespace {

TEST(BumpAllocator, AlignsEachBlock) {
  BumpAllocator bump(1000);
  EXPECT_EQ(bump.allocate(3, 1), 0u);
  EXPECT_EQ(bump.allocate(10, 16), 16u);
  EXPECT_EQ(bump.allocate(1, 256), 256u);
  EXPECT_EQ(bump.used(), 257u);
  EXPECT_EQ(bump.allocate(0, 8), 264u);  // an empty block still aligns
}

TEST(BumpAllocator, ReleasesToAMark) {
  BumpAllocator bump(1 << 20);
  bump.allocate(100, 256);
  const size_t mark = bump.mark();
  const size_t first = bump.allocate(5000, 256);
  bump.allocate(7, 4);
  bump.release(mark);
  EXPECT_EQ(bump.used(), 100u);
  EXPECT_EQ(bump.allocate(5000, 256), first);          // the same memory again
  EXPECT_THROW(bump.release(bump.used() + 1), Error);  // above the top
}

TEST(BumpAllocator, RefusesWhatDoesNotFitWithTheSizes) {
  BumpAllocator bump(1024);
  bump.allocate(1000, 1);
  try {
    bump.allocate(100, 16);  // 1008 + 100 > 1024
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("exhausted"), std::string::npos) << message;
    EXPECT_NE(message.find("100 bytes"), std::string::npos) << message;
  }
  EXPECT_EQ(bump.used(), 1000u);             // a refused request changes nothing
  EXPECT_THROW(bump.allocate(1, 3), Error);  // not a power of two
  EXPECT_THROW(bump.allocate(size_t{1} << 62, 1), Error);
  EXPECT_EQ(bump.allocate(24, 1), 1000u);  // exactly full
}

TEST(MakeChunks, CutsSegmentsWithoutStraddling) {
  const std::vector<int64_t> sizes = {0, 1, 4096, 4097};
  const std::vector<Chunk> chunks = make_chunks(sizes, 4096);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].segment, 1);
  EXPECT_EQ(chunks[0].offset, 0);
  EXPECT_EQ(chunks[1].segment, 2);
  EXPECT_EQ(chunks[2].segment, 3);
  EXPECT_EQ(chunks[2].offset, 0);
  EXPECT_EQ(chunks[3].segment, 3);
  EXPECT_EQ(chunks[3].offset, 4096);
  EXPECT_THROW(make_chunks(sizes, 0), Error);
}

TEST(MakeChunks, CoversEveryElementOnce) {
  std::mt19937 gen(std::random_device{}());
  std::uniform_int_distribution<int64_t> size(0, 3000);
  std::vector<int64_t> sizes(37);
  for (int64_t& s : sizes) s = size(gen);
  const int64_t chunk = 257;
  std::vector<std::vector<int>> seen(sizes.size());
  for (size_t s = 0; s < sizes.size(); ++s) seen[s].assign(static_cast<size_t>(sizes[s]), 0);
  for (const Chunk& c : make_chunks(sizes, chunk)) {
    for (int64_t i = c.offset; i < std::min(c.offset + chunk, sizes[c.segment]); ++i) {
      ++seen[c.segment][i];
    }
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (int count : seen[s]) ASSERT_EQ(count, 1) << "segment " << s;
  }
}

TEST(GroupTokens, GroupsPositionsByTokenInPositionOrder) {
  const std::vector<int32_t> tokens = {5, 2, 5, 0, 2, 5};
  const TokenRuns runs = group_tokens(tokens);
  EXPECT_EQ(runs.positions, (std::vector<int32_t>{3, 1, 4, 0, 2, 5}));
  EXPECT_EQ(runs.run_starts, (std::vector<int32_t>{0, 1, 3, 6}));
  EXPECT_EQ(runs.run_tokens, (std::vector<int32_t>{0, 2, 5}));
  EXPECT_EQ(runs.num_runs(), 3);
}

TEST(GroupTokens, HandlesEmptyInputAndRejectsNegativeTokens) {
  const TokenRuns empty = group_tokens({});
  EXPECT_EQ(empty.num_runs(), 0);
  EXPECT_EQ(empty.run_starts, (std::vector<int32_t>{0}));
  const std::vector<int32_t> bad = {1, -1};
  EXPECT_THROW(group_tokens(bad), Error);
}

// A vocabulary shard's plan (tensor parallelism): only the tokens in [v0, v0 + count), at local
// rows, in the same order as the unsharded plan; other ids (other ranks', negative) are skipped.
TEST(GroupTokens, GroupsOnlyTheTokensOfAShardAtLocalRows) {
  const std::vector<int32_t> tokens = {5, 2, 7, 5, -1, 3, 2, 9, 5, 4};
  const TokenRuns shard = group_tokens_in_range(tokens, 2, 4);  // rows of tokens 2..5
  EXPECT_EQ(shard.positions, (std::vector<int32_t>{1, 6, 5, 9, 0, 3, 8}));
  EXPECT_EQ(shard.run_starts, (std::vector<int32_t>{0, 2, 3, 4, 7}));
  EXPECT_EQ(shard.run_tokens, (std::vector<int32_t>{0, 1, 2, 3}));

  const TokenRuns none = group_tokens_in_range(tokens, 10, 6);  // no token of this shard
  EXPECT_EQ(none.num_runs(), 0);
  EXPECT_TRUE(none.positions.empty());
  EXPECT_EQ(none.run_starts, (std::vector<int32_t>{0}));
  EXPECT_THROW(group_tokens_in_range(tokens, -1, 4), Error);
}

// Shards that tile [0, V) give, run by run, the unsharded plan with rows offset by v0: the same
// positions in the same order, so each dwte row gets the same sum in the same order.
TEST(GroupTokens, ShardPlansConcatenateToTheFullPlan) {
  std::mt19937 rng(7);
  const int V = 1001;
  std::vector<int32_t> tokens(4096);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 300) * 3 % V;  // repeats, gaps
  const TokenRuns full = group_tokens(tokens);
  for (const int shards : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << shards << " shards");
    const int Vl = (V + shards - 1) / shards;
    TokenRuns joined;
    joined.run_starts.push_back(0);
    for (int r = 0; r < shards; ++r) {
      const TokenRuns part = group_tokens_in_range(tokens, r * Vl, Vl);
      const int32_t base = static_cast<int32_t>(joined.positions.size());
      joined.positions.insert(joined.positions.end(), part.positions.begin(), part.positions.end());
      for (int32_t k = 0; k < part.num_runs(); ++k) {
        ASSERT_LT(part.run_tokens[k], Vl);
        joined.run_tokens.push_back(part.run_tokens[k] + r * Vl);
        joined.run_starts.push_back(base + part.run_starts[k + 1]);
      }
    }
    EXPECT_EQ(joined.positions, full.positions);
    EXPECT_EQ(joined.run_starts, full.run_starts);
    EXPECT_EQ(joined.run_tokens, full.run_tokens);
  }
}

// What the GPU conversions are compared against (tests/kernels/cuda_kernels_test.cc): round to
// nearest, ties to even.
TEST(HostRounding, TiesGoToEven) {
  // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: even is 1.
  EXPECT_EQ(BF16::from_float(1.f + 0x1p-8f).bits, 0x3F80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(BF16::from_float(1.f + 3 * 0x1p-8f).bits, 0x3F82);
  // fp16 has 10 fraction bits: 1 + 2^-11 ties to 1, 1 + 3 * 2^-11 to 1 + 2^-9.
  EXPECT_EQ(F16::from_float(1.f + 0x1p-11f).bits, 0x3C00);
  EXPECT_EQ(F16::from_float(1.f + 3 * 0x1p-11f).bits, 0x3C02);
  EXPECT_EQ(F16::from_float(65520.f).bits, 0x7C00);  // rounds past the largest finite: inf
  EXPECT_EQ(F16::from_float(65519.f).bits, 0x7BFF);
}

// ---- tensor-core fragments ----------------------------------------------------------------
// One warp's registers, emulated: per lane, 4 registers of two 16-bit halves (values kept as
// floats; the layouts are what is under test, not the rounding).
using Regs = std::array<std::array<std::array<float, 2>, 4>, 32>;
using Accumulators = std::array<std::array<float, 4>, 32>;
using Tile = std::vector<float>;  // row-major [rows, ld]

// ldmatrix.sync.aligned.m8n8.x4[.trans].b16, by its definition: lane i gives the address of row
// i % 8 of matrix i / 8 (here: a (row, col) into `tile`, the row's 8 elements follow). Register j
// of lane L receives elements (L / 4, 2 (L % 4) + h) of matrix j, or (2 (L % 4) + h, L / 4) with
// .trans.
Regs ldmatrix_x4(const Tile& tile, int ld, const std::function<mma::RowCol(int)>& address,
                 bool trans) {
  Regs r{};
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < 4; ++j) {
      for (int h = 0; h < 2; ++h) {
        const int row_in = trans ? 2 * (lane % 4) + h : lane / 4;
        const int col_in = trans ? lane / 4 : 2 * (lane % 4) + h;
        const mma::RowCol a = address(8 * j + row_in);
        r[lane][j][h] = tile[static_cast<size_t>(a.row * ld + a.col + col_in)];
      }
    }
  }
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32: d += A (16 x 16) B (16 x 8), A from registers 0..3 of
// `a`, B from registers b_reg, b_reg + 1 of `b`. Gathers the matrices through the layout
// functions and checks that each element comes from exactly one lane.
void mma_emulated(Accumulators& d, const Regs& a, const Regs& b, int b_reg) {
  double A[16][16] = {};
  double B[16][8] = {};
  int seen_a[16][16] = {};
  int seen_b[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const mma::RowCol e = mma::a_element(lane, i);
      A[e.row][e.col] = a[lane][i / 2][i % 2];
      ++seen_a[e.row][e.col];
    }
    for (int i = 0; i < 4; ++i) {
      const mma::RowCol e = mma::b_element(lane, i);
      B[e.row][e.col] = b[lane][b_reg + i / 2][i % 2];
      ++seen_b[e.row][e.col];
    }
  }
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) ASSERT_EQ(seen_a[r][c], 1) << "A element " << r << "," << c;
    for (int c = 0; c < 8; ++c) ASSERT_EQ(seen_b[r][c], 1) << "B element " << r << "," << c;
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 4; ++e) {
      const mma::RowCol at = mma::c_element(lane, e);
      double acc = 0.0;
      for (int k = 0; k < 16; ++k) acc += A[at.row][k] * B[k][at.col];
      d[lane][e] += static_cast<float>(acc);
    }
  }
}

Tile random_tile(int rows, int ld, std::mt19937& gen) {
  std::uniform_int_distribution<int> dist(-8, 8);  // small integers: every sum is exact
  Tile t(static_cast<size_t>(rows * ld));
  for (float& x : t) x = static_cast<float>(dist(gen));
  return t;
}

TEST(MmaLayout, FragmentsCoverEachMatrixOnce) {
  int a[16][16] = {};
  int b[16][8] = {};
  int c[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) ++a[mma::a_element(lane, i).row][mma::a_element(lane, i).col];
    for (int i = 0; i < 4; ++i) {
      ++b[mma::b_element(lane, i).row][mma::b_element(lane, i).col];
      ++c[mma::c_element(lane, i).row][mma::c_element(lane, i).col];
    }
  }
  for (int r = 0; r < 16; ++r) {
    for (int k = 0; k < 16; ++k) EXPECT_EQ(a[r][k], 1);
    for (int k = 0; k < 8; ++k) EXPECT_EQ(b[r][k], 1);
    for (int k = 0; k < 8; ++k) EXPECT_EQ(c[r][k], 1);
  }
}

TEST(MmaLayout, TwoAccumulatorTilesAreOneAFragment) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int reg = 0; reg < 4; ++reg) {
      for (int h = 0; h < 2; ++h) {
        const mma::RowCol a = mma::a_element(lane, 2 * reg + h);
        const mma::RowCol c = mma::c_element(lane, mma::c_first_of_a_register(reg) + h);
        EXPECT_EQ(a.row, c.row);
        EXPECT_EQ(a.col, 8 * mma::c_tile_of_a_register(reg) + c.col);
      }
    }
  }
}

TEST(MmaLayout, LdmatrixAddressingLoadsAnAFragment) {
  std::mt19937 gen(7);
  const int ld = 72;  // a 64 x 64 tile padded as in flash_attention.cu
  const Tile tile = random_tile(64, ld, gen);
  const int row0 = 16;
  const int col0 = 32;
  const Regs r = ldmatrix_x4(
      tile, ld,
      [&](int lane) {
        const mma::RowCol at = mma::ldmatrix_a(lane);
        return mma::RowCol{row0 + at.row, col0 + at.col};
      },
      false);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const mma::RowCol e = mma::a_element(lane, i);
      EXPECT_EQ(r[lane][i / 2][i % 2], tile[(row0 + e.row) * ld + col0 + e.col]);
    }
  }
}

// The two products of the flash attention forward, for warp 1 of a block, composed exactly as
// flash_attention.cu's product_rows and accumulate_pv compose them:
//   S[16 x 64] = Q[rows 16..31] K^T          O[16 x HS] = P K-independent . V  (P = S here)
TEST(MmaLayout, WarpProductsComposeIntoMatrixProducts) {
  constexpr int HS = 64;
  constexpr int ld = HS + 8;
  std::mt19937 gen(11);
  const Tile q = random_tile(64, ld, gen);
  const Tile k = random_tile(64, ld, gen);
  const Tile v = random_tile(64, ld, gen);
  const int warp_row0 = 16;

  // product_rows: acc[nt][e] over 8 n-tiles of 8 keys.
  std::array<Accumulators, 8> s{};
  for (int kk = 0; kk < HS / 16; ++kk) {
    const Regs a = ldmatrix_x4(
        q, ld,
        [&](int lane) {
          const mma::RowCol at = mma::ldmatrix_a(lane);
          return mma::RowCol{warp_row0 + at.row, kk * 16 + at.col};
        },
        false);
    for (int np = 0; np < 4; ++np) {
      const Regs b = ldmatrix_x4(
          k, ld,
          [&](int lane) {
            const mma::RowCol at = mma::ldmatrix_b_transposed(lane);
            return mma::RowCol{np * 16 + at.row, kk * 16 + at.col};
          },
          false);
      mma_emulated(s[2 * np], a, b, 0);
      mma_emulated(s[2 * np + 1], a, b, 2);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int nt = 0; nt < 8; ++nt) {
      for (int e = 0; e < 4; ++e) {
        const mma::RowCol at = mma::c_element(lane, e);
        const int row = warp_row0 + at.row;
        const int key = nt * 8 + at.col;
        double want = 0.0;
        for (int d = 0; d < HS; ++d) want += q[row * ld + d] * k[key * ld + d];
        ASSERT_EQ(s[nt][lane][e], want) << "S row " << row << " key " << key;
      }
    }
  }

  // accumulate_pv: the accumulators become A fragments of 16 keys, V comes through .trans.
  std::array<Accumulators, HS / 8> o{};
  for (int kc = 0; kc < 4; ++kc) {
    Regs a{};
    for (int lane = 0; lane < 32; ++lane) {
      for (int reg = 0; reg < 4; ++reg) {
        const Accumulators& c = s[2 * kc + mma::c_tile_of_a_register(reg)];
        a[lane][reg] = {c[lane][mma::c_first_of_a_register(reg)],
                        c[lane][mma::c_first_of_a_register(reg) + 1]};
      }
    }
    for (int dp = 0; dp < HS / 16; ++dp) {
      const Regs b = ldmatrix_x4(
          v, ld,
          [&](int lane) {
            const mma::RowCol at = mma::ldmatrix_b(lane);
            return mma::RowCol{kc * 16 + at.row, dp * 16 + at.col};
          },
          true);
      mma_emulated(o[2 * dp], a, b, 0);
      mma_emulated(o[2 * dp + 1], a, b, 2);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int dt = 0; dt < HS / 8; ++dt) {
      for (int e = 0; e < 4; ++e) {
        const mma::RowCol at = mma::c_element(lane, e);
        const int row = warp_row0 + at.row;
        const int d = dt * 8 + at.col;
        double want = 0.0;
        for (int key = 0; key < 64; ++key) {
          double score = 0.0;
          for (int x = 0; x < HS; ++x) score += q[row * ld + x] * k[key * ld + x];
          want += score * v[key * ld + d];
        }
        ASSERT_EQ(o[dt][lane][e], want) << "O row " << row << " dim " << d;
      }
    }
  }
}

}  // namespace
}  // namespace weft::kernels::cuda
