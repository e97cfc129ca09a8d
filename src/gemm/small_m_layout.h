/*
 * small_m_layout.h - the pure functions of the small-m GEMM kernel
 * (gemm_small_m.cu), usable from host C (tests, the launcher, the
 * heuristic) and device code: which block computes which part of C, which
 * k range each warp streams, and where each element of an mma fragment
 * comes from and goes to.
 *
 * The kernel streams the weight B once, with 16-byte loads, and runs
 * mma.sync m16n8k16 (fp32 accumulate) with the activations A (m <= 64 rows,
 * padded to mt tiles of 16 rows) as the mma's A operand and B as its B
 * operand. Work:
 *   chunk     32 consecutive k (LOOM_SMALLM_KC); chunks = ceil(k / 32)
 *   n-tile    the block's 128 columns: 4 warps of 32 columns side by side
 *             (LOOM_SMALLM_WN), which read the same activations (L1 hits)
 *             and, for B [k, n], 256 contiguous bytes of each weight row
 *   split     the chunks cut into `splits` aligned ranges (split-K)
 *   unit      (n-tile, split): one block. B [n, k]: n-tile-major (the
 *             blocks of one n-tile run together and read its rows end to
 *             end); B [k, n]: split-major (blocks running together read the
 *             same k rows across neighbouring n-tiles: whole rows)
 *   warp      the block's 8 warps are 4 along n x 2 along k (LOOM_SMALLM_WK);
 *             a warp streams its share of the unit's chunks (loom__smallm_range)
 * A unit's partial sums are reduced over its wk warps in shared memory in
 * warp order; with splits > 1 each unit stores its partial (fp32, m rows)
 * to a workspace slot and the last of an n-tile's units (a ticket) sums the
 * slots in split order: the result does not depend on timing.
 *
 * Fragments (lane = 4 g + t). mma m16n8k16 sums over 16 "logical" k per
 * step; which physical k stands behind a logical one is free, as long as A
 * and B use the same map. The kernel takes, in chunk step s (0, 1) and
 * fragment half h (0: logical k 2t+e, 1: 2t+8+e, e = 0, 1),
 *   physical k = 8 t + 4 s + 2 h + e       (loom__smallm_phys_k)
 * so that a thread's 8 physical k of a chunk are 8 consecutive elements:
 * one 16-byte load of an A row (rows g and g + 8 of each 16-row tile) and,
 * for B [n, k], one 16-byte load of a weight row (column 8 j + g of the
 * warp's 4 groups of 8 columns). For B [k, n] a thread loads 8 consecutive
 * columns 8 t .. 8 t + 7 of weight row loom__smallm_kn_row(g, s, h) and a
 * movmatrix transpose per 4-byte register q moves the pairs to the lanes
 * that own them; output column of register q, lane (g, t), element e is
 * then 8 t + 2 q + e. Host tests emulate a whole warp chunk with these
 * functions against a direct dot product.
 */
#ifndef LOOM_GEMM_SMALL_M_LAYOUT_H
#define LOOM_GEMM_SMALL_M_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "gemm/tile_order.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_SMALLM_THREADS 256  /* 8 warps */
#define LOOM_SMALLM_WARPS 8
#define LOOM_SMALLM_KC 32        /* k per chunk */
#define LOOM_SMALLM_MAX_M 64     /* at most 4 tiles of 16 rows */
#define LOOM_SMALLM_MAX_SPLITS 64

/* Warps along n (32 columns each) and along k; columns of a block's n-tile. */
#define LOOM_SMALLM_WN 4
#define LOOM_SMALLM_WK (LOOM_SMALLM_WARPS / LOOM_SMALLM_WN)
#define LOOM_SMALLM_BN (32 * LOOM_SMALLM_WN)
/* How a warp keeps the weight coming (config `stages` of bm=16; 0 is
 * LOOM_SMALLM_PIPE_DEFAULT):
 *   LOOM_SMALLM_PIPE_REGS (1, the first version): LOOM_SMALLM_UNROLL(mt)
 *     chunks of 16-byte loads into registers, then their math, then the
 *     next loads (the stream drains once per burst);
 *   LOOM_SMALLM_PIPE_REGS2 (2): bursts of 2 chunks, the next burst's loads
 *     issued before this one's math (double-buffered registers), so a warp
 *     always has 1-2 chunks on the way.
 * Measured on H100 (docs/perf/gemm.md, "Small-m kernel: the weight stream"): REGS2 4-7% faster than
 * REGS at m <= 16; cp.async rings in shared memory (1 or 2 chunks a stage,
 * 80-128 KiB a block in flight) were 5-15% slower than REGS, dropped. */
#define LOOM_SMALLM_PIPE_REGS 1
#define LOOM_SMALLM_PIPE_REGS2 2
#define LOOM_SMALLM_PIPES 3
#define LOOM_SMALLM_PIPE_DEFAULT LOOM_SMALLM_PIPE_REGS2
/* The pipe of config `stages` (0: the default). */
#define LOOM_SMALLM_PIPE_OF(stages) ((stages) == 0 ? LOOM_SMALLM_PIPE_DEFAULT : (stages))
/* Chunks a warp loads before it computes (16 bytes x 4 per chunk each):
 * PIPE_REGS; PIPE_REGS2 loads 2 a burst. */
#define LOOM_SMALLM_UNROLL(mt) ((mt) == 1 ? 4 : 2)

/* Tiles of 16 rows for m rows (1, 2 or 4). */
LOOM_HD int32_t loom__smallm_mt(int64_t m) { return m <= 16 ? 1 : m <= 32 ? 2 : 4; }

/* Shared memory of a block: the wk warps' partial tiles (mt 16 rows x bn
 * columns of fp32 each) for the in-block reduction, plus a ticket word. */
LOOM_HD size_t loom__smallm_smem_bytes(int32_t mt) {
  return (size_t)LOOM_SMALLM_WK * (size_t)(16 * mt) * (size_t)LOOM_SMALLM_BN * 4 + 16;
}

typedef struct loom__smallm_work {
  int32_t ntiles;  /* n-tiles: ceil(n / LOOM_SMALLM_BN) */
  int32_t chunks;  /* ceil(k / 32) */
  int32_t splits;  /* k ranges per n-tile, 1 .. min(chunks, LOOM_SMALLM_MAX_SPLITS) */
  int32_t tb;      /* B layout: 0 [n, k], 1 [k, n] */
} loom_smallm_work_t;

LOOM_HD loom_smallm_work_t loom__smallm_work(int64_t n, int64_t k, int32_t splits, int32_t tb) {
  loom_smallm_work_t w;
  w.tb = tb ? 1 : 0;
  w.ntiles = (int32_t)loom__ceil_div(n, LOOM_SMALLM_BN);
  w.chunks = (int32_t)loom__ceil_div(k, LOOM_SMALLM_KC);
  if (splits < 1) splits = 1;
  if (splits > LOOM_SMALLM_MAX_SPLITS) splits = LOOM_SMALLM_MAX_SPLITS;
  if (splits > w.chunks) splits = w.chunks;
  w.splits = splits;
  return w;
}

/* Blocks of the launch. */
LOOM_HD int64_t loom__smallm_units(const loom_smallm_work_t *w) { return (int64_t)w->ntiles * w->splits; }

/* The n-tile and split of unit (block) u. */
LOOM_HD void loom__smallm_unit(const loom_smallm_work_t *w, int64_t u, int32_t *ntile, int32_t *split) {
  if (w->tb) {
    *split = (int32_t)(u / w->ntiles);
    *ntile = (int32_t)(u - (int64_t)*split * w->ntiles);
  } else {
    *ntile = (int32_t)(u / w->splits);
    *split = (int32_t)(u - (int64_t)*ntile * w->splits);
  }
}

/* Chunks [*c0, *c1) of part `i` of `parts` of the chunk range [lo, hi):
 * split ranges (i = split of splits over [0, chunks)) and warp ranges (i =
 * warp of wk over a split's range) alike. */
LOOM_HD void loom__smallm_range(int32_t lo, int32_t hi, int32_t i, int32_t parts, int32_t *c0, int32_t *c1) {
  const int64_t len = hi - lo;
  *c0 = lo + (int32_t)(len * i / parts);
  *c1 = lo + (int32_t)(len * (i + 1) / parts);
}

/* Physical k (within a chunk) of lane-group position t (lane % 4), chunk
 * step s (0, 1), fragment half h (0, 1), element e (0, 1). */
LOOM_HD int32_t loom__smallm_phys_k(int32_t t, int32_t s, int32_t h, int32_t e) { return 8 * t + 4 * s + 2 * h + e; }

/* B [k, n]: the weight row (within a chunk) that lane (g, t) loads for step
 * s and half h; its 8 columns are 8 t .. 8 t + 7 of the warp's 32. After the
 * transposes, lane (g, t) holds rows loom__smallm_phys_k(t, s, h, 0 / 1). */
LOOM_HD int32_t loom__smallm_kn_row(int32_t g, int32_t s, int32_t h) { return 8 * (g >> 1) + 4 * s + 2 * h + (g & 1); }

/* The warp-tile column (0..31) of accumulator element e (0, 1) of group x
 * (B [n, k]: the 8-column group j; B [k, n]: the register q) in lane
 * position t. */
LOOM_HD int32_t loom__smallm_col(int32_t tb, int32_t x, int32_t t, int32_t e) {
  return tb ? 8 * t + 2 * x + e : 8 * x + 2 * t + e;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_SMALL_M_LAYOUT_H */
