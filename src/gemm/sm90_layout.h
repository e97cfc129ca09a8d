/*
 * sm90_layout.h - the pure functions of the sm90 GEMM kernel's shapes
 * (gemm_sm90.cuh), usable from host C (tests, the launcher) and device code:
 * pipeline depth and shared-memory footprint per tile shape, and which part
 * of a block's tile each consumer warpgroup computes.
 *
 * Tile widths bn 128, 192, 224 or 256 at bm 128, 128 or 256 at bm 64.
 * The odd widths fill the SMs where 256 leaves a quarter of them idle in
 * the last wave: 192 for n = 12288 / 24576 (Flux: 64 / 128 tiles across),
 * 224 for n = 14336 (Llama-3-70B up at TP=2: 64 across); 4 stages, no
 * clusters; a 224-wide stage is sized for 256 columns (see B_TX).
 *
 * Two tile heights:
 *   bm 128  (the default): the two consumer warpgroups split the 128 rows,
 *           64 each, and both read the whole B stage (bn columns). At
 *           m <= 64 the second warpgroup has nothing to do and the A box is
 *           half out of bounds.
 *   bm 64   (the decode variant, config bm = 64): a 64 x bn tile whose
 *           columns are split between the warpgroups, bn / 2 each (wgmma
 *           m64n{bn/2}k16), both reading the same 64-row A stage. The A
 *           stage shrinks from 16 to 8 KiB, which buys deeper B pipelines:
 *           bn 256: 5 stages (160 KiB of B per SM in flight, against 4 x 32
 *           KiB = 128 KiB at bm 128); bn 128: 8 stages (128 KiB, against
 *           6 x 16 = 96 KiB). To fit 5 stages of 40 KiB, bm 64 x bn 256 keeps
 *           one 8 KiB TMA-epilogue buffer per warpgroup instead of two.
 *
 * Shared memory of a block: stages x (A bm x 64 x 2 + B bn x 64 x 2) bytes,
 * 1024-aligned (the 128B swizzle repeats every 1024 bytes), then the TMA
 * epilogue's buffers (2 warpgroups x bufs x 8 KiB; none in the hooked
 * kernels, which store from registers), then 2 x stages mbarriers, an abort
 * flag and a ticket (16 bytes), a grouped GEMM's tile prefix (G + 1 int32)
 * and step ring (LOOM_SM90_GROUPED_BYTES), plus 1024 bytes of slack to
 * align the start.
 * Host tests (tests/host/gemm/test_gemm_sm90_layout.c) check that every shape
 * fits the 227 KiB a block may opt into and that one more stage would not,
 * and that the warpgroups' parts partition the tile and the B stage.
 */
#ifndef LOOM_GEMM_SM90_LAYOUT_H
#define LOOM_GEMM_SM90_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "gemm/tile_order.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_SM90_BK 64          /* k per pipeline stage (128 bytes of bf16/fp16: one swizzle row) */
#define LOOM_SM90_THREADS 384    /* producer warpgroup + two consumer warpgroups */
#define LOOM_SM90_SMEM_MAX (227 * 1024) /* dynamic shared memory a block may opt into on sm_90 */
#define LOOM_SM90_EPI_BUF 8192   /* one TMA-epilogue chunk: 64 rows x 128 bytes */

/* Pipeline depth of bm x bn tiles (compile-time constant in the kernel). */
#define LOOM_SM90_STAGES(bm, bn) ((bm) == 64 ? ((bn) == 256 ? 5 : 8) : ((bn) == 128 ? 6 : 4))
/* TMA-epilogue buffers per consumer warpgroup (plain kernels). */
#define LOOM_SM90_EPI_BUFS(bm, bn) ((bm) == 64 && (bn) == 256 ? 1 : 2)
/* Bytes of one stage's A (bm rows) and B (bn columns, rounded up to whole
 * 64-column boxes) k-block. */
#define LOOM_SM90_A_BYTES(bm) ((bm) * LOOM_SM90_BK * 2)
#define LOOM_SM90_B_BYTES(bn) ((((bn) + 63) / 64) * 64 * LOOM_SM90_BK * 2)
/* Bytes the TMA delivers into a B stage: bn rows of B [n, k] (tb 0), or
 * whole 64-column boxes of B [k, n] (tb 1; bn 224 loads 4 boxes, the last
 * one half past the tile: its stage is sized for 256 columns either way). */
#define LOOM_SM90_B_TX(bn, tb) ((tb) ? LOOM_SM90_B_BYTES(bn) : (bn) * LOOM_SM90_BK * 2)
/* Bytes of the TMA epilogue's buffers (both warpgroups); 0 with hooks. */
#define LOOM_SM90_EPI_BYTES(bm, bn, hooks) ((hooks) ? 0 : 2 * LOOM_SM90_EPI_BUFS(bm, bn) * LOOM_SM90_EPI_BUF)

/* Bytes a grouped GEMM's block adds: its tile prefix (G + 1 int32), then
 * the ring of its dynamic schedule (LOOM_SM90_RING steps and 2 mbarriers
 * each: a grouped GEMM on arriving rows takes its tiles from a counter). */
#define LOOM_SM90_RING 4
#define LOOM_SM90_GROUPED_PREFIX_BYTES(groups) ((4 * ((groups) + 1) + 15) / 16 * 16)
#define LOOM_SM90_GROUPED_BYTES(groups) (LOOM_SM90_GROUPED_PREFIX_BYTES(groups) + LOOM_SM90_RING * 20)
/* Dynamic shared memory of a block with `stages` stages of bm x bn. */
LOOM_HD size_t loom__sm90_smem_bytes(int32_t bm, int32_t bn, int32_t stages, int32_t bufs, int hooks) {
  return (size_t)stages * (size_t)(LOOM_SM90_A_BYTES(bm) + LOOM_SM90_B_BYTES(bn)) +
         (hooks ? 0 : (size_t)2 * (size_t)bufs * LOOM_SM90_EPI_BUF) + (size_t)stages * 16 + 16 + 1024;
}

/* The part of a bm x bn tile that consumer warpgroup cw (0 or 1) computes:
 * rows [row, row + 64) and columns [col, col + cols) of the tile, its A rows
 * at byte a_off of the A stage and its B columns at byte b_off of the B
 * stage (tb 0: B [n, k] staged K-major, 128 bytes per column; tb 1: B [k, n]
 * staged as 64-column boxes of 8 KiB). */
typedef struct loom__sm90_wg_part {
  int32_t row, col, cols;
  uint32_t a_off, b_off;
} loom_sm90_wg_part_t;

LOOM_HD loom_sm90_wg_part_t loom__sm90_wg_part(int32_t bm, int32_t bn, int32_t tb, int32_t cw) {
  loom_sm90_wg_part_t p;
  if (bm == 128) { /* rows split, every column */
    p.row = 64 * cw, p.col = 0, p.cols = bn;
    p.a_off = (uint32_t)(64 * cw) * 128u, p.b_off = 0;
  } else { /* columns split, every row */
    p.row = 0, p.col = cw * (bn / 2), p.cols = bn / 2;
    p.a_off = 0;
    p.b_off = tb ? (uint32_t)(cw * (bn / 2) / 64) * 8192u : (uint32_t)(cw * (bn / 2)) * 128u;
  }
  return p;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_SM90_LAYOUT_H */
