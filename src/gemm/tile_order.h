/*
 * tile_order.h - who computes which output tile, and when: the pure
 * scheduling functions of the GEMM engine, usable from host C and device code.
 *
 * Output C [m, n] is cut into tiles of bm x bn; tiles_m = ceil(m / bm),
 * tiles_n = ceil(n / bn), tile id t = tm * tiles_n + tn. A persistent grid of
 * `grid` blocks walks "steps": block b takes steps b, b + grid, b + 2 grid, ...
 * (loom_tile_step), and an order maps a step to a tile id:
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
 */
#ifndef LOOM_GEMM_TILE_ORDER_H
#define LOOM_GEMM_TILE_ORDER_H

#include <stdint.h>

#ifdef __CUDACC__
#define LOOM_HD static __host__ __device__ __forceinline__
#else
#define LOOM_HD static inline
#endif

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

/* ceil(a / b) for a >= 0, b > 0. */
LOOM_HD int64_t loom_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Number of tiles of the order. */
LOOM_HD int32_t loom_tile_count(const loom_tile_order_t *o) { return o->tiles_m * o->tiles_n; }

/* Tile id of step s (0 <= s < tiles) in GROUPED order on a rows x cols grid
 * of tiles: bands of `group` rows, column-major inside a band (the last band
 * may be shorter). */
LOOM_HD int32_t loom_tile_grouped(int32_t s, int32_t rows, int32_t cols, int32_t group) {
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
LOOM_HD int32_t loom_tile_at(const loom_tile_order_t *o, int32_t s) {
  if (o->kind == LOOM_TILE_ORDER_SCHEDULE) return o->schedule[s];
  const int32_t t = loom_tile_grouped(s, o->tiles_m, o->tiles_n, o->group);
  if (o->kind == LOOM_TILE_ORDER_RANK_SHIFTED) {
    int32_t tm = t / o->tiles_n + o->row_shift;
    if (tm >= o->tiles_m) tm -= o->tiles_m;
    return tm * o->tiles_n + t % o->tiles_n;
  }
  return t;
}

/* Tile row and column of tile id t. */
LOOM_HD void loom_tile_coords(const loom_tile_order_t *o, int32_t t, int32_t *tm, int32_t *tn) {
  *tm = t / o->tiles_n;
  *tn = t - (t / o->tiles_n) * o->tiles_n;
}

/* Persistent grid: the step that block b takes at its iteration i, or -1
 * once the block has no more work. */
LOOM_HD int32_t loom_tile_step(int32_t tiles, int32_t grid, int32_t b, int32_t i) {
  const int64_t s = (int64_t)b + (int64_t)i * grid;
  return s < tiles ? (int32_t)s : -1;
}

/* Blocks of a persistent grid: min(tiles, blocks_per_sm * sm_count), >= 1. */
LOOM_HD int32_t loom_tile_grid(int32_t tiles, int32_t sm_count, int32_t blocks_per_sm) {
  int64_t g = (int64_t)sm_count * (blocks_per_sm < 1 ? 1 : blocks_per_sm);
  if (g > tiles) g = tiles;
  return g < 1 ? 1 : (int32_t)g;
}

/* RANK_SHIFTED: the tile row at which the rows of rank `first_rank` start
 * when m rows are split evenly over `world` ranks (rank r owns rows
 * [r m / world, (r+1) m / world)), for tiles of bm rows. Flux's AG+GEMM uses
 * first_rank = rank (local rows first); a ring that starts after the local
 * rank uses rank + 1. */
LOOM_HD int32_t loom_tile_rank_shift(int64_t m, int32_t bm, int32_t world, int32_t first_rank) {
  if (world < 1) return 0;
  first_rank %= world;
  if (first_rank < 0) first_rank += world;
  const int64_t row = (int64_t)first_rank * m / world;
  const int64_t tiles_m = loom_ceil_div(m, bm);
  int64_t tm = row / bm;
  if (tm >= tiles_m) tm = 0;
  return (int32_t)tm;
}

/* Signals a tile's prologue waits for when signal j covers rows
 * [j rows_per_signal, (j+1) rows_per_signal): the first and last index
 * (inclusive) touched by tile row tm of bm rows, clipped to m. */
LOOM_HD void loom_tile_wait_range(int32_t tm, int32_t bm, int64_t m, int64_t rows_per_signal,
                                  int32_t *first, int32_t *last) {
  const int64_t r0 = (int64_t)tm * bm;
  int64_t r1 = r0 + bm;
  if (r1 > m) r1 = m;
  *first = (int32_t)(r0 / rows_per_signal);
  *last = (int32_t)((r1 - 1) / rows_per_signal);
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_TILE_ORDER_H */
