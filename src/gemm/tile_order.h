/*
 * tile_order.h - who computes which output tile, and when: the pure
 * scheduling functions of the GEMM engine, usable from host C and device code.
 *
 * Output C [m, n] is cut into tiles of bm x bn; tiles_m = ceil(m / bm),
 * tiles_n = ceil(n / bn), tile id t = tm * tiles_n + tn. A persistent grid of
 * `grid` blocks walks "steps": block b takes steps b, b + grid, b + 2 grid, ...
 * (loom__tile_step), and an order maps a step to a tile id:
 *
 *   GROUPED       L2-friendly: steps run down a band of `group` tile rows
 *                 (column by column inside the band) before moving on, so the
 *                 blocks running at once share A rows and B columns in L2.
 *   RANK_SHIFTED  GROUPED order on tile rows rotated by `row_shift` tiles:
 *                 step 0 starts at the row block of a chosen rank (Flux: a
 *                 rank first computes the rows it already owns, then the rows
 *                 of rank+1, rank+2, ... in the order they arrive).
 *   SCHEDULE      an explicit table [tiles] of tile ids (a host-set or
 *                 communication-driven arrival order); must be a permutation.
 *
 * Every order is a permutation of [0, tiles): host tests check it for many
 * (m, n, tile, grid, group, rank, world). Nothing here allocates or fails.
 *
 * Work (loom_work_t): which k-blocks of which step a block computes. Steps
 * [0, dp_tiles) are data-parallel: whole tiles, block b takes b, b + grid,
 * ... Steps [dp_tiles, tiles) are stream-K: their k-blocks, laid end to end
 * (T = sk_tiles x kblocks iterations, sk tile j owning [j K, (j+1) K)), are
 * cut into sk_blocks contiguous ranges, block b < sk_blocks taking
 * [floor(b T / S), floor((b+1) T / S)); each range falls into segments at tile
 * boundaries. A tile whose range spans blocks [first, last] (first < last) is
 * finished by whichever of them arrives last (a ticket per sk tile): every
 * contributor writes its fp32 partial to workspace slot (b + j), the last one
 * sums the slots of blocks first..last in that order (deterministic), then
 * runs the epilogue. S <= T keeps every range non-empty (host tests check
 * coverage, slots and balance for many shapes).
 *
 * Split-K (splits >= 1) is the other way to share the k-loop of steps
 * [dp_tiles, tiles): each tile's k-blocks are cut into `splits` aligned
 * ranges, unit u = split x sk_tiles + j, and units go round-robin over the
 * whole grid after the data-parallel steps (block b: u = b, b + grid, ...).
 * Blocks running at the same time then sit at the same k range of
 * neighbouring tiles, as in the data-parallel grid (B shared in L2 by tile
 * rows, DRAM pages shared by neighbouring columns), which stream-K's
 * contiguous ranges give up. Unit u uses slot u; contributor c of tile j
 * (split c) uses slot j + c sk_tiles. splits <= kblocks keeps ranges non-empty.
 * With split_band = B (0 < B < sk_tiles) the units go band by band instead:
 * the units of sk tiles [0, B) (split-major inside the band), then those of
 * [B, 2B), ...; a GEMM whose tiles wait for rows that arrive in step order
 * then never has a unit wait behind one of a later band (the split-major
 * order put split 1 of the first tiles behind split 0 of the last). Slots
 * stay j + c sk_tiles.
 */
#ifndef LOOM_GEMM_TILE_ORDER_H
#define LOOM_GEMM_TILE_ORDER_H

#include <stdint.h>

#include "core/util.h" /* LOOM_HD, loom__ceil_div */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_tile_order_kind {
  LOOM_TILE_ORDER_GROUPED = 0,
  LOOM_TILE_ORDER_RANK_SHIFTED = 1,
  LOOM_TILE_ORDER_SCHEDULE = 2
} loom_tile_order_kind_t;

/* Everything a block needs to map a step to a tile (a kernel argument). */
typedef struct loom_tile_order {
  int32_t tiles_m, tiles_n; /* output tiles along m and n */
  int32_t kind;             /* loom_tile_order_kind_t */
  int32_t group;            /* GROUPED/RANK_SHIFTED: band height in tile rows (>= 1) */
  int32_t row_shift;        /* RANK_SHIFTED: tile row taken first, in [0, tiles_m) */
  const int32_t *schedule;  /* SCHEDULE: device (or host, in tests) array [tiles] */
} loom_tile_order_t;

/* Number of tiles of the order. */
LOOM_HD int32_t loom__tile_count(const loom_tile_order_t *o) { return o->tiles_m * o->tiles_n; }

/* Tile id of step s (0 <= s < tiles) in GROUPED order on a rows x cols grid
 * of tiles: bands of `group` rows, column-major inside a band (the last band
 * may be shorter). */
LOOM_HD int32_t loom__tile_grouped(int32_t s, int32_t rows, int32_t cols, int32_t group) {
  if (group < 1) group = 1;
  if (group > rows) group = rows;
  const int32_t per_band = group * cols;
  const int32_t band = s / per_band;
  const int32_t first_row = band * group;
  int32_t h = rows - first_row;
  if (h > group) h = group;
  const int32_t r = s - band * per_band; /* position inside the band */
  const int32_t tm = first_row + r % h;
  const int32_t tn = r / h;
  return tm * cols + tn;
}

/* Tile id of step s (0 <= s < tiles) for order o. */
LOOM_HD int32_t loom__tile_at(const loom_tile_order_t *o, int32_t s) {
  if (o->kind == LOOM_TILE_ORDER_SCHEDULE) return o->schedule[s];
  const int32_t t = loom__tile_grouped(s, o->tiles_m, o->tiles_n, o->group);
  if (o->kind == LOOM_TILE_ORDER_RANK_SHIFTED) {
    int32_t tm = t / o->tiles_n + o->row_shift;
    if (tm >= o->tiles_m) tm -= o->tiles_m;
    return tm * o->tiles_n + t % o->tiles_n;
  }
  return t;
}

/* Tile row and column of tile id t. */
LOOM_HD void loom__tile_coords(const loom_tile_order_t *o, int32_t t, int32_t *tm, int32_t *tn) {
  *tm = t / o->tiles_n;
  *tn = t - (t / o->tiles_n) * o->tiles_n;
}

/* Clusters of cl blocks stacked along m (cl 1: plain tiles): the order runs
 * over steps of cl tile rows. loom__cluster_order makes that order from a
 * GROUPED or RANK_SHIFTED tile order (tiles_m, group and row_shift in tile
 * rows): tile rows and band height divided by cl (rounded up / down, at
 * least 1), the row shift divided by cl (rounded down: a shift that cl
 * divides starts the order at the same tile row; loom__cluster_order_fits
 * says whether it does). Not for SCHEDULE orders. */
LOOM_HD loom_tile_order_t loom__cluster_order(loom_tile_order_t o, int32_t cl) {
  o.tiles_m = (o.tiles_m + cl - 1) / cl;
  o.group = o.group > cl ? o.group / cl : 1;
  o.row_shift = o.kind == LOOM_TILE_ORDER_RANK_SHIFTED ? o.row_shift / cl : 0;
  return o;
}

/* The order keeps its meaning in steps of cl tile rows: GROUPED, or
 * RANK_SHIFTED with a row shift that cl divides. */
LOOM_HD int loom__cluster_order_fits(const loom_tile_order_t *o, int32_t cl) {
  return o->kind == LOOM_TILE_ORDER_GROUPED || (o->kind == LOOM_TILE_ORDER_RANK_SHIFTED && o->row_shift % cl == 0);
}

/* The tile (tm, tn) that the block of cluster rank `rank` computes when its
 * cluster takes the step whose order entry (in the cluster order o) is t. At
 * the bottom edge tm may be past the last tile row (odd tile rows): that
 * block loads no A and stores nothing. */
LOOM_HD void loom__cluster_coords(const loom_tile_order_t *o, int32_t t, int32_t rank, int32_t cl, int32_t *tm,
                                 int32_t *tn) {
  loom__tile_coords(o, t, tm, tn);
  *tm = *tm * cl + rank;
}

/* Persistent grid: the step that block b takes at its iteration i, or -1
 * once the block has no more work. */
LOOM_HD int32_t loom__tile_step(int32_t tiles, int32_t grid, int32_t b, int32_t i) {
  const int64_t s = (int64_t)b + (int64_t)i * grid;
  return s < tiles ? (int32_t)s : -1;
}

/* Blocks of a persistent grid: min(tiles, blocks_per_sm * sm_count), >= 1. */
LOOM_HD int32_t loom__tile_grid(int32_t tiles, int32_t sm_count, int32_t blocks_per_sm) {
  int64_t g = (int64_t)sm_count * (blocks_per_sm < 1 ? 1 : blocks_per_sm);
  if (g > tiles) g = tiles;
  return g < 1 ? 1 : (int32_t)g;
}

/* RANK_SHIFTED: the tile row at which the rows of rank `first_rank` start
 * when m rows are split evenly over `world` ranks (rank r owns rows
 * [r m / world, (r+1) m / world)), for tiles of bm rows. Flux's AG+GEMM uses
 * first_rank = rank (local rows first); a ring that starts after the local
 * rank uses rank + 1. */
LOOM_HD int32_t loom__tile_rank_shift(int64_t m, int32_t bm, int32_t world, int32_t first_rank) {
  if (world < 1) return 0;
  first_rank %= world;
  if (first_rank < 0) first_rank += world;
  const int64_t row = (int64_t)first_rank * m / world;
  const int64_t tiles_m = loom__ceil_div(m, bm);
  int64_t tm = row / bm;
  if (tm >= tiles_m) tm = 0;
  return (int32_t)tm;
}

/* Signals a tile's prologue waits for when signal j covers rows
 * [j rows_per_signal, (j+1) rows_per_signal): the first and last index
 * (inclusive) touched by tile row tm of bm rows, clipped to m. */
LOOM_HD void loom__tile_wait_range(int32_t tm, int32_t bm, int64_t m, int64_t rows_per_signal,
                                  int32_t *first, int32_t *last) {
  const int64_t r0 = (int64_t)tm * bm;
  int64_t r1 = r0 + bm;
  if (r1 > m) r1 = m;
  *first = (int32_t)(r0 / rows_per_signal);
  *last = (int32_t)((r1 - 1) / rows_per_signal);
}

/* Prologue wait signals of a gathered A whose m rows come in shards of
 * rows_per_shard rows (shard p: rows [p S, min((p+1) S, m)); 0: one shard of
 * all m rows), each shard cut into chunks of rows_per_signal rows with one
 * signal per chunk: row r's signal is (r / S) ceil(S / c) + (r % S) / c. Returns
 * the signal of `row` and sets *end to the first row after its chunk (clipped
 * to m), so that a tile's rows [r0, r1) wait on the signals met by
 * row = r0, *end, ... while row < r1. With rows_per_shard 0 this is
 * loom__tile_wait_range's numbering. */
LOOM_HD int32_t loom__tile_wait_chunk(int64_t row, int64_t m, int64_t rows_per_shard, int64_t rows_per_signal,
                                     int64_t *end) {
  const int64_t S = rows_per_shard > 0 ? rows_per_shard : m;
  const int64_t c = rows_per_signal > 0 ? rows_per_signal : S;
  const int64_t p = row / S, in = row - p * S;
  const int64_t j = in / c;
  int64_t e = p * S + (j + 1) * c;
  if (e > (p + 1) * S) e = (p + 1) * S;
  if (e > m) e = m;
  *end = e;
  return (int32_t)(p * loom__ceil_div(S, c) + j);
}

/* Destinations of a tile whose rows [tm bm, min(tm bm + bm, m)) are routed
 * by rows_per_dst (0: one destination): the first and last (inclusive). */
LOOM_HD void loom__tile_dst_range(int32_t tm, int32_t bm, int64_t m, int64_t rows_per_dst, int32_t *first,
                                 int32_t *last) {
  const int64_t r0 = (int64_t)tm * bm;
  int64_t r1 = r0 + bm;
  if (r1 > m) r1 = m;
  if (rows_per_dst <= 0) {
    *first = *last = 0;
    return;
  }
  *first = (int32_t)(r0 / rows_per_dst);
  *last = (int32_t)((r1 - 1) / rows_per_dst);
}

/* ---- stream-K work decomposition ---------------------------------------- */

typedef struct loom_work {
  int32_t tiles;     /* steps of the order */
  int32_t kblocks;   /* k-blocks per tile (>= 1) */
  int32_t grid;      /* blocks of the launch */
  int32_t dp_tiles;  /* steps [0, dp_tiles) are whole tiles (data-parallel) */
  int32_t sk_blocks; /* stream-K: blocks [0, sk_blocks) share steps [dp_tiles, tiles); 1 <= S <= T when there are any */
  int32_t splits;    /* 0: stream-K as above; >= 1: split-K into `splits` aligned k ranges (<= kblocks) */
  int32_t split_band; /* split-K: units band by band over this many sk tiles (0 or >= sk tiles: one band) */
} loom_work_t;

/* One piece of a block's work: k-blocks [k0, k1) of step `step`. */
typedef struct loom_segment {
  int32_t step;
  int32_t k0, k1;
  int32_t sk;          /* 1: shared tile (partial + ticket), 0: whole tile, direct epilogue */
  int32_t sk_tile;     /* step - dp_tiles (sk only): ticket index */
  int32_t first, last; /* stream-K: blocks contributing to the tile, in k order */
  int32_t nseg;        /* contributors of the tile (sk only) */
  int32_t slot;        /* this segment's workspace slot (sk only) */
  int32_t slot0, slot_step; /* contributor c (k order) wrote slot slot0 + c slot_step */
} loom_segment_t;

/* Stream-K iterations T = (tiles - dp_tiles) x kblocks. */
LOOM_HD int64_t loom__work_sk_iters(const loom_work_t *w) {
  return (int64_t)(w->tiles - w->dp_tiles) * (int64_t)w->kblocks;
}

/* First stream-K iteration of block b (b in [0, sk_blocks]). */
LOOM_HD int64_t loom__work_sk_start(const loom_work_t *w, int32_t b) {
  return (int64_t)b * loom__work_sk_iters(w) / (int64_t)w->sk_blocks;
}

/* The block whose stream-K range holds iteration i (0 <= i < T): the
 * largest b with floor(b T / S) <= i. */
LOOM_HD int32_t loom__work_sk_block_of(const loom_work_t *w, int64_t i) {
  const int64_t T = loom__work_sk_iters(w);
  return (int32_t)(((i + 1) * (int64_t)w->sk_blocks - 1) / T);
}

/* Data-parallel tiles of block b. */
LOOM_HD int32_t loom__work_dp_count(const loom_work_t *w, int32_t b) {
  return w->dp_tiles > b ? (w->dp_tiles - b + w->grid - 1) / w->grid : 0;
}

/* Stream-K: workspace slot (of 128 x bn fp32) that block b uses for sk tile
 * j. Slots of different (tile, block) pairs differ; all are
 * < sk_blocks + sk_tiles - 1. */
LOOM_HD int32_t loom__work_slot(int32_t b, int32_t sk_tile) { return b + sk_tile; }

/* Workspace slots a launch needs (0 without shared tiles). */
LOOM_HD int64_t loom__work_slots(const loom_work_t *w) {
  const int64_t sk_tiles = w->tiles - w->dp_tiles;
  if (sk_tiles <= 0) return 0;
  return w->splits > 0 ? sk_tiles * w->splits : (int64_t)w->sk_blocks + sk_tiles - 1;
}

/* Segment i (0, 1, ...) of block b: 1 and *seg filled, or 0 when the block
 * has no more work. Segments come in step order. */
LOOM_HD int loom__work_segment(const loom_work_t *w, int32_t b, int32_t i, loom_segment_t *seg) {
  const int32_t ndp = loom__work_dp_count(w, b);
  seg->sk = 0, seg->sk_tile = -1, seg->first = b, seg->last = b;
  seg->nseg = 1, seg->slot = -1, seg->slot0 = -1, seg->slot_step = 0;
  if (i < ndp) {
    seg->step = b + i * w->grid;
    seg->k0 = 0, seg->k1 = w->kblocks;
    return 1;
  }
  if (w->tiles <= w->dp_tiles) return 0;
  if (w->splits > 0) {
    const int32_t sk_tiles = w->tiles - w->dp_tiles;
    const int64_t u = (int64_t)b + (int64_t)(i - ndp) * w->grid;
    if (u >= (int64_t)sk_tiles * w->splits) return 0;
    const int32_t band = w->split_band > 0 && w->split_band < sk_tiles ? w->split_band : sk_tiles;
    const int32_t q = (int32_t)(u / ((int64_t)band * w->splits)), j0 = q * band;
    const int32_t len = sk_tiles - j0 < band ? sk_tiles - j0 : band;
    const int64_t r = u - (int64_t)j0 * w->splits;
    const int32_t split = (int32_t)(r / len), j = j0 + (int32_t)(r - (int64_t)split * len);
    seg->step = w->dp_tiles + j;
    seg->k0 = (int32_t)((int64_t)split * w->kblocks / w->splits);
    seg->k1 = (int32_t)((int64_t)(split + 1) * w->kblocks / w->splits);
    seg->sk_tile = j;
    seg->sk = w->splits > 1;
    seg->nseg = w->splits;
    seg->slot = j + split * sk_tiles, seg->slot0 = j, seg->slot_step = sk_tiles;
    return 1;
  }
  if (b >= w->sk_blocks) return 0;
  const int64_t K = w->kblocks;
  const int64_t lo = loom__work_sk_start(w, b), hi = loom__work_sk_start(w, b + 1);
  const int64_t j = lo / K + (i - ndp); /* sk tile of this segment */
  const int64_t t0 = j * K;             /* its first iteration */
  if (t0 >= hi) return 0;
  const int64_t a = lo > t0 ? lo : t0, e = hi < t0 + K ? hi : t0 + K;
  seg->step = w->dp_tiles + (int32_t)j;
  seg->k0 = (int32_t)(a - t0), seg->k1 = (int32_t)(e - t0);
  seg->first = loom__work_sk_block_of(w, t0);
  seg->last = loom__work_sk_block_of(w, t0 + K - 1);
  seg->sk_tile = (int32_t)j;
  seg->sk = seg->first != seg->last;
  seg->nseg = seg->last - seg->first + 1;
  seg->slot = loom__work_slot(b, (int32_t)j);
  seg->slot0 = loom__work_slot(seg->first, (int32_t)j), seg->slot_step = 1;
  return 1;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_TILE_ORDER_H */
