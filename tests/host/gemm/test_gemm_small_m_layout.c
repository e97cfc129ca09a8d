/*
 * test_gemm_small_m_layout.c - host tests of the small-m GEMM kernel's pure
 * functions (src/gemm/small_m_layout.h):
 *   - the units of a launch are every (n-tile, split) once, the split
 *     ranges and the warps' ranges inside them partition the chunks, for
 *     many n, k, split counts and both B layouts;
 *   - the physical-k map and the B [k, n] row map are permutations of a
 *     chunk's 32 k;
 *   - one warp's chunk, emulated register by register from these functions
 *     (16-byte loads, the movmatrix transposes for B [k, n], the PTX
 *     fragment layouts of mma.m16n8k16), gives the exact dot products of
 *     random integer data, for both layouts: what the kernel computes is C.
 * Runs on any machine.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/small_m_layout.h"

LOOM_TEST(gemm_small_m_units_and_ranges_partition_the_work) {
  const int64_t ns[] = {8, 128, 136, 576, 4608, 12288};
  const int64_t ks[] = {8, 32, 40, 96, 1536, 7176, 16384};
  const int32_t splits[] = {0, 1, 2, 3, 7, 16, 64, 1000};
  int combos = 0;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; ++a)
    for (size_t b = 0; b < sizeof ks / sizeof ks[0]; ++b)
      for (size_t c = 0; c < sizeof splits / sizeof splits[0]; ++c)
        for (int tb = 0; tb <= 1; ++tb) {
          const loom_smallm_work_t w = loom__smallm_work(ns[a], ks[b], splits[c], tb);
          CHECK(w.ntiles == loom__ceil_div(ns[a], LOOM_SMALLM_BN));
          CHECK(w.chunks == loom__ceil_div(ks[b], LOOM_SMALLM_KC));
          CHECK(w.splits >= 1 && w.splits <= w.chunks && w.splits <= LOOM_SMALLM_MAX_SPLITS);
          const int64_t units = loom__smallm_units(&w);
          CHECK(units == (int64_t)w.ntiles * w.splits);
          /* every (n-tile, split) once */
          char *seen = (char *)calloc((size_t)units, 1);
          for (int64_t u = 0; u < units; ++u) {
            int32_t nt = -1, sp = -1;
            loom__smallm_unit(&w, u, &nt, &sp);
            CHECK(nt >= 0 && nt < w.ntiles && sp >= 0 && sp < w.splits);
            if (nt >= 0 && nt < w.ntiles && sp >= 0 && sp < w.splits) seen[(int64_t)nt * w.splits + sp]++;
          }
          for (int64_t u = 0; u < units; ++u) CHECK(seen[u] == 1);
          free(seen);
          /* splits and warps partition the chunks: every chunk once */
          int32_t next = 0;
          for (int32_t sp = 0; sp < w.splits; ++sp) {
            int32_t s0, s1;
            loom__smallm_range(0, w.chunks, sp, w.splits, &s0, &s1);
            CHECK(s0 == next && s1 > s0);
            int32_t wnext = s0;
            for (int32_t wk = 0; wk < LOOM_SMALLM_WK; ++wk) {
              int32_t c0, c1;
              loom__smallm_range(s0, s1, wk, LOOM_SMALLM_WK, &c0, &c1);
              CHECK(c0 == wnext && c1 >= c0);
              wnext = c1;
            }
            CHECK(wnext == s1);
            next = s1;
          }
          CHECK(next == w.chunks);
          ++combos;
        }
  CHECK(combos == 6 * 7 * 8 * 2);
  /* B [n, k]: the blocks of one n-tile are consecutive; B [k, n]: one
   * split's blocks cover the n-tiles side by side */
  loom_smallm_work_t w = loom__smallm_work(1024, 4096, 4, 0);
  int32_t nt, sp;
  loom__smallm_unit(&w, 5, &nt, &sp);
  CHECK(nt == 1 && sp == 1);
  w = loom__smallm_work(1024, 4096, 4, 1);
  loom__smallm_unit(&w, 5, &nt, &sp);
  CHECK(nt == 5 && sp == 0);
  /* shared memory: the k-warps' tiles + ticket, within the default 48 KiB
   * up to 32 rows */
  CHECK(loom__smallm_smem_bytes(1) <= 48 * 1024 && loom__smallm_smem_bytes(2) <= 48 * 1024);
  CHECK(loom__smallm_smem_bytes(4) <= 227 * 1024);
  CHECK(LOOM_SMALLM_PIPE_OF(0) == LOOM_SMALLM_PIPE_DEFAULT &&
        LOOM_SMALLM_PIPE_OF(LOOM_SMALLM_PIPE_REGS) == LOOM_SMALLM_PIPE_REGS);
  CHECK(loom__smallm_mt(1) == 1 && loom__smallm_mt(16) == 1 && loom__smallm_mt(17) == 2 && loom__smallm_mt(33) == 4 &&
        loom__smallm_mt(64) == 4);
}

LOOM_TEST(gemm_small_m_k_maps_are_permutations) {
  int seen[32];
  memset(seen, 0, sizeof seen);
  for (int t = 0; t < 4; ++t)
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 2; ++e) {
          const int32_t p = loom__smallm_phys_k(t, s, h, e);
          CHECK(p >= 0 && p < 32);
          if (p >= 0 && p < 32) seen[p]++;
          /* a thread's 8 physical k are consecutive: one 16-byte load */
          CHECK(p / 8 == t);
        }
  for (int p = 0; p < 32; ++p) CHECK(seen[p] == 1);
  memset(seen, 0, sizeof seen);
  for (int g = 0; g < 8; ++g)
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < 2; ++h) {
        const int32_t r = loom__smallm_kn_row(g, s, h);
        CHECK(r >= 0 && r < 32);
        if (r >= 0 && r < 32) seen[r]++;
      }
  for (int p = 0; p < 32; ++p) CHECK(seen[p] == 1);
}

/* ---- one warp's chunk, register by register ---------------------------- */

/* A 16-bit element pair as the kernel holds it in a 32-bit register (low
 * half = lower index); values are small integers, kept as ints here. */
typedef struct pair { int lo, hi; } pair_t;

/* mma.m16n8k16 (PTX fragment layout, lane = 4 g + t): D [16 x 8] += A B,
 * A from a[lane][0..3], B from b[lane][0..1]. */
static void emu_mma(int64_t D[16][8], pair_t a[32][4], pair_t b[32][2]) {
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col)
      for (int l = 0; l < 16; ++l) {
        const int ta = (l % 8) / 2;
        const pair_t pa = a[(row % 8) * 4 + ta][(row >= 8) + 2 * (l >= 8)];
        const pair_t pb = b[col * 4 + ta][l >= 8];
        D[row][col] += (int64_t)(l % 2 ? pa.hi : pa.lo) * (l % 2 ? pb.hi : pb.lo);
      }
}

/* movmatrix.m8n8.trans.b16 over one register of each lane. */
static void emu_movmatrix(pair_t in[32], pair_t out[32]) {
  int v[8][8];
  for (int g = 0; g < 8; ++g)
    for (int t = 0; t < 4; ++t) v[g][2 * t] = in[g * 4 + t].lo, v[g][2 * t + 1] = in[g * 4 + t].hi;
  for (int g = 0; g < 8; ++g)
    for (int t = 0; t < 4; ++t) out[g * 4 + t].lo = v[2 * t][g], out[g * 4 + t].hi = v[2 * t + 1][g];
}

static void emu_chunk(int tb, int A[16][32], int Bnk[32][32], int64_t C[16][32]) {
  /* Bnk[n][k]; B [k, n] is its transpose in memory */
  memset(C, 0, sizeof(int64_t) * 16 * 32);
  /* A: lane (g, t) loads 8 consecutive k at 8 t of rows g and g + 8 */
  pair_t ar[32][2][4];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int r = 0; r < 2; ++r)
      for (int wd = 0; wd < 4; ++wd) {
        ar[lane][r][wd].lo = A[g + 8 * r][8 * t + 2 * wd];
        ar[lane][r][wd].hi = A[g + 8 * r][8 * t + 2 * wd + 1];
      }
  }
  /* B: lane (g, t), load x, word q */
  pair_t br[32][4][4];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int x = 0; x < 4; ++x)
      for (int q = 0; q < 4; ++q) {
        if (tb == 0) { /* row n = 8 x + g, k = 8 t + 2 q .. */
          br[lane][x][q].lo = Bnk[8 * x + g][8 * t + 2 * q];
          br[lane][x][q].hi = Bnk[8 * x + g][8 * t + 2 * q + 1];
        } else { /* weight row k = kn_row(g, s, h), columns 8 t + 2 q .. */
          const int k = loom__smallm_kn_row(g, x >> 1, x & 1);
          br[lane][x][q].lo = Bnk[8 * t + 2 * q][k];
          br[lane][x][q].hi = Bnk[8 * t + 2 * q + 1][k];
        }
      }
  }
  pair_t bt[4][4][32]; /* B [k, n]: transposed, [load x][word q][lane] */
  if (tb == 1)
    for (int x = 0; x < 4; ++x)
      for (int q = 0; q < 4; ++q) {
        pair_t in[32];
        for (int lane = 0; lane < 32; ++lane) in[lane] = br[lane][x][q];
        emu_movmatrix(in, bt[x][q]);
      }
  for (int grp = 0; grp < 4; ++grp) {
    int64_t D[16][8];
    memset(D, 0, sizeof D);
    for (int s = 0; s < 2; ++s) {
      pair_t fa[32][4], fb[32][2];
      for (int lane = 0; lane < 32; ++lane) {
        fa[lane][0] = ar[lane][0][2 * s], fa[lane][1] = ar[lane][1][2 * s];
        fa[lane][2] = ar[lane][0][2 * s + 1], fa[lane][3] = ar[lane][1][2 * s + 1];
        if (tb == 0) fb[lane][0] = br[lane][grp][2 * s], fb[lane][1] = br[lane][grp][2 * s + 1];
        else fb[lane][0] = bt[2 * s][grp][lane], fb[lane][1] = bt[2 * s + 1][grp][lane];
      }
      emu_mma(D, fa, fb);
    }
    /* lane (g, t) holds D[g (+8)][2 t + e]: its column in the warp tile */
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, t = lane & 3;
      for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 2; ++e) C[g + 8 * h][loom__smallm_col(tb, grp, t, e)] += D[g + 8 * h][2 * t + e];
    }
  }
}

LOOM_TEST(gemm_small_m_warp_chunk_emulation_is_exact) {
  uint64_t z = 0x2545f4914f6cdd1dull;
  for (int trial = 0; trial < 8; ++trial)
    for (int tb = 0; tb <= 1; ++tb) {
      int A[16][32], B[32][32];
      for (int r = 0; r < 16; ++r)
        for (int k = 0; k < 32; ++k) {
          z = z * 6364136223846793005ull + 1442695040888963407ull;
          A[r][k] = (int)((z >> 40) % 15) - 7;
        }
      for (int n = 0; n < 32; ++n)
        for (int k = 0; k < 32; ++k) {
          z = z * 6364136223846793005ull + 1442695040888963407ull;
          B[n][k] = (int)((z >> 40) % 15) - 7;
        }
      int64_t C[16][32];
      emu_chunk(tb, A, B, C);
      int bad = 0;
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 32; ++n) {
          int64_t ref = 0;
          for (int k = 0; k < 32; ++k) ref += (int64_t)A[r][k] * B[n][k];
          bad += C[r][n] != ref;
        }
      CHECK_EQ_INT(bad, 0);
    }
}
