/*
 * test_gemm_sm80_layout.c - host tests of the sm80 GEMM path's pure
 * functions (src/gemm/sm80_layout.h):
 *   - the shared-memory chunk swizzles are permutations of a tile's chunks;
 *   - an emulation of ldmatrix (.x4, and .trans) and of the mma.sync
 *     m16n8k16 fragment layout (PTX ISA: a0..a3, b0..b1) on a tile whose
 *     elements are tagged with their (row, k) / (k, n) coordinates: every
 *     fragment register of every lane holds exactly the elements mma expects,
 *     for both B layouts and both tile widths, every warp, every k16 step;
 *   - the kernel's hoisted offsets equal the direct ones: from the lane's
 *     offset at its first block and kk = 0, K-major tiles: kk = 1 is ^ 32,
 *     a further m16 / n16 block + 1024; B [k, n]: n16 pair j is ^ (32 j),
 *     kk adds 32 bn;
 *   - every 8-address phase of every ldmatrix is bank-conflict-free;
 *   - the tile-width and split-K heuristics' choices.
 * Runs on any machine.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/sm80_layout.h"

/* Tags: element (i, j) of a logical [rows][cols] tile -> i * 1024 + j. */
static uint16_t tag(int i, int j) { return (uint16_t)(i * 1024 + j); }

/* Emulated ldmatrix.x4: lane l supplies addrs[l]; matrix q is read from the
 * 8 addresses of lanes 8q..8q+7 (8 elements each). Non-trans: lane l gets
 * row l/4, elements 2(l%4), 2(l%4)+1 of each matrix; trans: column l/4,
 * rows 2(l%4), 2(l%4)+1. out[l][q][e]. */
static void ldmatrix_x4(const uint8_t *smem, const uint32_t *addrs, int trans, uint16_t out[32][4][2]) {
  for (int l = 0; l < 32; ++l)
    for (int q = 0; q < 4; ++q)
      for (int e = 0; e < 2; ++e) {
        int row, col;
        if (!trans) row = l / 4, col = 2 * (l % 4) + e;
        else row = 2 * (l % 4) + e, col = l / 4;
        uint16_t v;
        memcpy(&v, smem + addrs[8 * q + row] + 2 * col, 2);
        out[l][q][e] = v;
      }
}

/* 1 if the 8 addresses of each phase fall into 8 different 16-byte groups
 * of a 128-byte line (and are 16-byte aligned). */
static int conflict_free(const uint32_t *addrs) {
  for (int q = 0; q < 4; ++q) {
    int used = 0;
    for (int j = 0; j < 8; ++j) {
      const uint32_t a = addrs[8 * q + j];
      if (a % 16) return 0;
      used |= 1 << ((a / 16) % 8);
    }
    if (used != 0xFF) return 0;
  }
  return 1;
}

LOOM_TEST(gemm_sm80_swizzle_is_permutation) {
  /* K-major [256][32]: 1024 chunks; N-major [32][bn] */
  static int seen[4096];
  memset(seen, 0, sizeof seen);
  int ok = 1;
  for (int r = 0; r < 256; ++r)
    for (int c = 0; c < 4; ++c) {
      const uint32_t o = loom__sm80_off_kmajor(r, c);
      ok &= o % 16 == 0 && o / 16 < 1024;
      if (o / 16 < 1024) seen[o / 16]++;
    }
  for (int i = 0; i < 1024; ++i) ok &= seen[i] == 1;
  CHECK(ok);
  for (int bn = 128; bn <= 256; bn += 128) {
    memset(seen, 0, sizeof seen);
    const int chunks = 32 * bn / 8;
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < bn / 8; ++c) {
        const uint32_t o = loom__sm80_off_nmajor(r, c, bn);
        ok &= o % 16 == 0 && (int)(o / 16) < chunks;
        if ((int)(o / 16) < chunks) seen[o / 16]++;
      }
    for (int i = 0; i < chunks; ++i) ok &= seen[i] == 1;
    CHECK(ok);
  }
  CHECK_EQ_INT(loom__sm80_stage_bytes(256), 128 * 64 + 256 * 64);
  CHECK_EQ_INT(loom__sm80_smem_bytes(128), 4 * 16384);
}

/* Fills a stage's A tile [128][32] and B tile with tags through the same
 * offset functions the cp.async loader uses. */
static void fill_tiles(uint8_t *sa, uint8_t *sb, int bn, int tb) {
  for (int r = 0; r < 128; ++r)
    for (int k = 0; k < 32; ++k) {
      const uint16_t v = tag(r, k);
      memcpy(sa + loom__sm80_off_kmajor(r, k / 8) + 2 * (k % 8), &v, 2);
    }
  for (int n = 0; n < bn; ++n)
    for (int k = 0; k < 32; ++k) {
      const uint16_t v = tag(k, n); /* B element (k, n) */
      const uint32_t o = tb ? loom__sm80_off_nmajor(k, n / 8, bn) + 2 * (n % 8)
                            : loom__sm80_off_kmajor(n, k / 8) + 2 * (k % 8);
      memcpy(sb + o, &v, 2);
    }
}

LOOM_TEST(gemm_sm80_fragments_match_mma_layout) {
  static uint8_t sa[128 * 64], sb[32 * 256 * 2];
  int bad_a = 0, bad_b = 0, bad_hoist = 0, conflicts = 0;
  for (int bn = 128; bn <= 256; bn += 128)
    for (int tb = 0; tb < 2; ++tb) {
      memset(sa, 0xEE, sizeof sa), memset(sb, 0xEE, sizeof sb);
      fill_tiles(sa, sb, bn, tb);
      const int wn_cols = bn / 4, ni = wn_cols / 8;
      for (int warp = 0; warp < 8; ++warp) {
        const int wm = warp / 4, wn = warp % 4;
        for (int kk = 0; kk < 2; ++kk) {
          uint32_t addrs[32];
          uint16_t fr[32][4][2];
          /* A: 4 m16 blocks */
          for (int i = 0; i < 4; ++i) {
            for (int l = 0; l < 32; ++l) {
              addrs[l] = loom__sm80_frag_a(l, wm * 64 + i * 16, kk);
              bad_hoist += addrs[l] != (loom__sm80_frag_a(l, wm * 64, 0) ^ (uint32_t)(kk << 5)) + 1024u * (uint32_t)i;
            }
            conflicts += !conflict_free(addrs);
            ldmatrix_x4(sa, addrs, 0, fr);
            for (int l = 0; l < 32; ++l) {
              const int g = l / 4, t = l % 4;
              for (int q = 0; q < 4; ++q)
                for (int e = 0; e < 2; ++e) {
                  /* a0: (g, 2t+e) a1: (g+8, 2t+e) a2: (g, 2t+8+e) a3: (g+8, 2t+8+e) */
                  const int row = wm * 64 + i * 16 + g + 8 * (q & 1), k = kk * 16 + 2 * t + 8 * (q >> 1) + e;
                  bad_a += fr[l][q][e] != tag(row, k);
                }
            }
          }
          /* B: ni/2 pairs of n8 tiles */
          for (int j = 0; j < ni / 2; ++j) {
            const int n0 = wn * wn_cols + j * 16;
            for (int l = 0; l < 32; ++l) {
              if (tb) {
                addrs[l] = loom__sm80_frag_bkn(l, n0, kk, bn);
                bad_hoist += addrs[l] != (loom__sm80_frag_bkn(l, wn * wn_cols, 0, bn) ^ (uint32_t)(j << 5)) +
                                             (uint32_t)(kk * 32 * bn);
              } else {
                addrs[l] = loom__sm80_frag_bnk(l, n0, kk);
                bad_hoist += addrs[l] != (loom__sm80_frag_bnk(l, wn * wn_cols, 0) ^ (uint32_t)(kk << 5)) + 1024u * (uint32_t)j;
              }
            }
            conflicts += !conflict_free(addrs);
            ldmatrix_x4(sb, addrs, tb, fr);
            for (int l = 0; l < 32; ++l) {
              const int g = l / 4, t = l % 4;
              for (int q = 0; q < 4; ++q)
                for (int e = 0; e < 2; ++e) {
                  /* regs 0, 1: b0, b1 of tile n0; regs 2, 3: of tile n0 + 8.
                   * b0: (k = 2t+e, n = g), b1: (k = 2t+8+e, n = g) */
                  const int n = n0 + g + 8 * (q >> 1), k = kk * 16 + 2 * t + 8 * (q & 1) + e;
                  bad_b += fr[l][q][e] != tag(k, n);
                }
            }
          }
        }
      }
    }
  CHECK_EQ_INT(bad_a, 0);
  CHECK_EQ_INT(bad_b, 0);
  CHECK_EQ_INT(bad_hoist, 0);
  CHECK_EQ_INT(conflicts, 0);
}

LOOM_TEST(gemm_sm80_pick_bn) {
  /* large: both widths fill their waves; 256 wins the tie (0.9 on 128) */
  CHECK_EQ_INT(loom__sm80_pick_bn(8192, 8192, 132, 2), 256);
  /* results are always 128 or 256, for many shapes */
  int ok = 1;
  for (int64_t m = 1; m <= 9000; m = m * 3 + 1)
    for (int64_t n = 8; n <= 30000; n = n * 2 + 8) {
      const int32_t b = loom__sm80_pick_bn(m, n, 132, 2);
      ok &= b == 128 || b == 256;
      ok &= loom__sm80_pick_bn(m, n, 108, 1) == 128 || loom__sm80_pick_bn(m, n, 108, 1) == 256;
    }
  CHECK(ok);
  /* n <= 128: one 128-wide tile column does the same work as a half-empty
   * 256-wide one, in the same waves: 128 (no padded columns) must not lose */
  CHECK_EQ_INT(loom__sm80_pick_bn(4096, 128, 132, 2), 128);
}

LOOM_TEST(gemm_sm80_pick_splits) {
  /* decode batches with few tiles split; every tile count x splits fits the
   * block slots of one wave; nothing splits where the tiles fill the GPU */
  CHECK_EQ_INT(loom__sm80_pick_splits(64, 8192, 14336, 132, 2), 4);   /* 64 tiles, 264 slots */
  CHECK_EQ_INT(loom__sm80_pick_splits(64, 14336, 8192, 132, 2), 2);   /* 112 tiles */
  CHECK_EQ_INT(loom__sm80_pick_splits(64, 24576, 12288, 132, 2), 1);  /* 192 tiles > half the slots */
  CHECK_EQ_INT(loom__sm80_pick_splits(4096, 4096, 4096, 132, 2), 1);
  CHECK_EQ_INT(loom__sm80_pick_splits(1, 128, 1 << 20, 132, 2), 16);  /* capped at 16 */
  CHECK_EQ_INT(loom__sm80_pick_splits(1, 128, 1024, 132, 2), 2);      /* >= 512 deep each */
  CHECK_EQ_INT(loom__sm80_pick_splits(1, 128, 1000, 132, 2), 1);
  int ok = 1;
  for (int64_t m = 1; m <= 5000; m = m * 2 + 3)
    for (int64_t n = 8; n <= 40000; n = n * 3 + 8)
      for (int64_t k = 8; k <= 70000; k = k * 5 + 8)
        for (int sms = 1; sms <= 200; sms += 37) {
          const int32_t s = loom__sm80_pick_splits(m, n, k, sms, 2);
          const int64_t tiles = loom__ceil_div(m, 128) * loom__ceil_div(n, 128);
          ok &= s >= 1 && s <= 16;
          if (s > 1) ok &= tiles * s <= 2 * (int64_t)sms && k / s >= 512;
        }
  CHECK(ok);
}
