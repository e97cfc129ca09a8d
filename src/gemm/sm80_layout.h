/*
 * sm80_layout.h - the pure functions of the portable sm80 GEMM path
 * (gemm_sm80.cuh), usable from host C (tests) and device code: where a 16-byte
 * chunk of a tile lives in shared memory, and which tile width to run.
 *
 * Shared-memory tiles are arrays of 16-byte chunks (8 bf16/fp16 elements).
 * ldmatrix reads an 8 x 8 matrix as 8 row addresses of 16 bytes each, one
 * per lane of a quarter warp; those 8 chunks must fall into 8 different
 * 16-byte bank groups of a 128-byte line or the read is replayed. cp.async
 * writes whole chunks, so an XOR swizzle of the chunk index is free.
 *
 *   K-major tile [rows][BK = 32] (A, and B [n, k]): 64-byte rows, 4 chunks,
 *     two rows per 128-byte line. ldmatrix reads 8 consecutive rows at one
 *     chunk c: chunk c of row r is stored at chunk c ^ ((r >> 1) & 3), so the
 *     8 rows land at (r & 1) * 4 + (c ^ ((r >> 1) & 3)) = 8 distinct groups.
 *   N-major tile [BK rows][bn] (B [k, n]): rows of bn * 2 >= 256 bytes; a
 *     transposed ldmatrix reads 8 consecutive k rows at one chunk c: chunk c
 *     of row r is stored at c ^ (r & 7) (the low 3 bits of the chunk index).
 *
 * Host tests (tests/host/gemm/test_gemm_sm80_layout.c) check that both maps are
 * permutations of the tile's chunks and that every ldmatrix phase the
 * kernel issues is conflict-free.
 */
#ifndef LOOM_GEMM_SM80_LAYOUT_H
#define LOOM_GEMM_SM80_LAYOUT_H

#include <stdint.h>
#include "gemm/tile_order.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_SM80_BM 128     /* tile rows */
#define LOOM_SM80_BK 32      /* k per pipeline stage */
#define LOOM_SM80_STAGES 4   /* cp.async pipeline depth */
#define LOOM_SM80_THREADS 256 /* 8 warps: 2 along m (64 rows each) x 4 along n (bn / 4 columns each) */

/* Byte offset of chunk c (0..3) of row r in a K-major [rows][32] tile. */
LOOM_HD uint32_t loom__sm80_off_kmajor(int32_t r, int32_t c) {
  return (uint32_t)r * 64u + ((uint32_t)(c ^ ((r >> 1) & 3)) << 4);
}

/* Byte offset of chunk c (0..bn/8-1) of k row r in an N-major [32][bn] tile. */
LOOM_HD uint32_t loom__sm80_off_nmajor(int32_t r, int32_t c, int32_t bn) {
  return (uint32_t)r * (uint32_t)(bn * 2) + ((uint32_t)(c ^ (r & 7)) << 4);
}

/* ldmatrix.x4 row address (byte offset in the tile) that lane `lane`
 * supplies, per k16 step kk (0 or 1) of a 32-wide k-block:
 *   frag_a    A fragment of an m16 x k16 block at tile rows [r0, r0 + 16):
 *             matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7,
 *             k 8-15), (rows 8-15, k 8-15) = mma registers a0..a3.
 *   frag_bnk  B [n, k] (K-major), two n8 tiles at rows [n0, n0 + 16):
 *             matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
 *             (n 8-15, k 8-15) = b0, b1 of tile n0 and b0, b1 of tile n0 + 8.
 *   frag_bkn  B [k, n] (N-major, ldmatrix .trans), the same four matrices
 *             read as (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
 *             (k 8-15, n 8-15); n0 a multiple of 16.
 * Rows 16 further down a K-major tile are exactly 1024 bytes further (the
 * swizzle has period 8 rows), which the kernel uses to hoist the lane terms. */
LOOM_HD uint32_t loom__sm80_frag_a(int32_t lane, int32_t r0, int32_t kk) {
  return loom__sm80_off_kmajor(r0 + (lane & 15), kk * 2 + (lane >> 4));
}
LOOM_HD uint32_t loom__sm80_frag_bnk(int32_t lane, int32_t n0, int32_t kk) {
  return loom__sm80_off_kmajor(n0 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1));
}
LOOM_HD uint32_t loom__sm80_frag_bkn(int32_t lane, int32_t n0, int32_t kk, int32_t bn) {
  return loom__sm80_off_nmajor(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), n0 / 8 + (lane >> 4), bn);
}

/* Bytes of one pipeline stage (A tile + B tile) and of the whole pipeline. */
LOOM_HD uint32_t loom__sm80_stage_bytes(int32_t bn) {
  return (uint32_t)(LOOM_SM80_BM * LOOM_SM80_BK * 2 + bn * LOOM_SM80_BK * 2);
}
LOOM_HD uint32_t loom__sm80_smem_bytes(int32_t bn) { return LOOM_SM80_STAGES * loom__sm80_stage_bytes(bn); }

/* Relative speeds of the two widths (one SM, main loop), estimated before
 * the first measurement and kept because the picks they give matched the
 * better width on most shapes (docs/perf/gemm.md, "sm80 tile width"; a refit is pending):
 * LOOM_SM80_R128x2 two 128 x 128 blocks side by side vs one 128 x 256,
 * LOOM_SM80_R128x1 one 128 x 128 block alone. */
#define LOOM_SM80_R128x2 0.90
#define LOOM_SM80_R128x1 0.70

/* Tile width for C [m, n] on a GPU of sm_count SMs where blocks_128 blocks
 * of 128 x 128 fit on one SM (2 where registers and shared memory allow,
 * else 1; 128 x 256 always runs one block per SM). Estimated time, in units
 * of one 128 x 128 tile's work at the 128 x 256 rate: bn 256 costs 2 per
 * wave of sm_count tiles (a half-empty tile costs the same); bn 128 costs
 * blocks_128 / R128x2 per wave of sm_count x blocks_128 tiles when the wave
 * puts two blocks on some SM, else 1 / R128x1. The cheaper width wins; ties
 * go to 256. Returns 128 or 256. */
LOOM_HD int32_t loom__sm80_pick_bn(int64_t m, int64_t n, int32_t sm_count, int32_t blocks_128) {
  if (sm_count < 1) sm_count = 1;
  if (blocks_128 < 1) blocks_128 = 1;
  if (blocks_128 > 2) blocks_128 = 2;
  const int64_t tm = loom__ceil_div(m, LOOM_SM80_BM);
  const int64_t t256 = tm * loom__ceil_div(n, 256), t128 = tm * loom__ceil_div(n, 128);
  const double time256 = 2.0 * (double)loom__ceil_div(t256, sm_count);
  const int64_t slots = (int64_t)sm_count * blocks_128;
  const int64_t waves = loom__ceil_div(t128, slots);
  const int64_t last = t128 - (waves - 1) * slots; /* blocks of the last wave */
  const double full = blocks_128 == 2 ? 2.0 / LOOM_SM80_R128x2 : 1.0 / LOOM_SM80_R128x1;
  const double time128 = (double)(waves - 1) * full + (last > sm_count ? full : 1.0 / LOOM_SM80_R128x1);
  return time128 < time256 - 1e-9 ? 128 : 256;
}

/* Split-K for C [m, n] = A [m, k] x B: the number of aligned k ranges each
 * 128 x 128 tile is cut into (1: none). Only where the 128-wide tiles fill
 * at most half of the sm_count x blocks_128 block slots (decode-sized m:
 * too few blocks to keep the weight streaming from every SM); then as many
 * splits as fit the slots in one wave, at most 16, each at least 512 deep
 * in k (pipeline fill and the partials' round trip amortised). */
LOOM_HD int32_t loom__sm80_pick_splits(int64_t m, int64_t n, int64_t k, int32_t sm_count, int32_t blocks_128) {
  if (sm_count < 1) sm_count = 1;
  if (blocks_128 < 1) blocks_128 = 1;
  const int64_t tiles = loom__ceil_div(m, LOOM_SM80_BM) * loom__ceil_div(n, 128);
  const int64_t slots = (int64_t)sm_count * blocks_128;
  if (tiles < 1 || 2 * tiles > slots) return 1;
  int64_t s = slots / tiles;
  if (s > 16) s = 16;
  if (s > k / 512) s = k / 512;
  return s < 2 ? 1 : (int32_t)s;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_SM80_LAYOUT_H */
