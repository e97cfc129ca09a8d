/*
 * grouped_schedule.h - which tile a persistent grouped GEMM computes at
 * each step, when the groups' row counts are known only on the device (pure
 * functions, host and device; host-tested at 1..256 groups). The grouped
 * GEMM of a mixture-of-experts layer: group g (a local expert) multiplies
 * rows [off[g], off[g+1]) of A (the dispatch's receive buffer: rows grouped
 * by expert, moe_schedule.h) by its own B_g; off[] comes from the dispatch
 * kernels, so neither the tile count nor where a group starts is known when
 * the grid is launched.
 *
 * Tiles. Group g has tm_g = ceil(rows_g / bm) tile rows of tiles_n tiles
 * each; its first tile is prefix[g] = sum_{g' < g} tm_g' tiles_n, and the
 * total is prefix[G]. A group with no rows has no tiles: it costs nothing
 * but its entry in the prefix (an expert that received nothing). Inside a
 * group the tiles go in GROUPED order (tile_order.h: bands of `band` tile
 * rows, column-major inside a band), so consecutive steps share B_g's
 * columns and A's rows as the plain GEMM's do.
 * A persistent kernel's block takes steps b, b + grid, ... while step <
 * prefix[G]; each step is located by a binary search over prefix[] (G + 1
 * entries: one block computes the prefix in shared memory at its start).
 *
 * Bounds. Group g's rows are off[g] and off[g + 1] clamped into [0, R]
 * (R: rows of A and C) with the end no lower than the start
 * (loom__grouped_bounds): a table that is not non-decreasing or runs past R
 * (a caller's mistake) cannot place a tile outside A and C; the rows of
 * groups that overlap are then written twice (unspecified values), never
 * out of bounds.
 *
 * Limits: the tile prefix is int32 (it lives in the kernel's shared memory:
 * 4 (G + 1) bytes); the launcher keeps the worst case G ceil(R / bm) tiles_n
 * (every group clamped to all of [0, R)) below 2^31.
 */
#ifndef LOOM_GEMM_GROUPED_SCHEDULE_H
#define LOOM_GEMM_GROUPED_SCHEDULE_H

#include <stdint.h>

#include "core/util.h"        /* LOOM_HD, loom__last_at_most_i32 */
#include "gemm/tile_order.h"  /* loom__tile_grouped */

#ifdef __cplusplus
extern "C" {
#endif

/* Rows [*lo, *hi) of group g: off[g], off[g + 1] clamped into [0, R], hi >= lo. */
LOOM_HD void loom__grouped_bounds(const int64_t *off, int g, int64_t R, int64_t *lo, int64_t *hi) {
  int64_t a = off[g], b = off[g + 1];
  a = a < 0 ? 0 : a > R ? R : a;
  b = b < a ? a : b > R ? R : b;
  *lo = a, *hi = b;
}

/* Tiles of a group of `rows` rows. */
LOOM_HD int32_t loom__grouped_tiles(int64_t rows, int bm, int tiles_n) {
  return (int32_t)((rows + bm - 1) / bm) * tiles_n;
}

/* prefix[g] (G + 1 entries) = the first tile of group g; returns the total
 * tiles (prefix[G]). off: [G + 1] rows; R: rows of A and C. */
LOOM_HD int32_t loom__grouped_prefix(const int64_t *off, int G, int64_t R, int bm, int tiles_n, int32_t *prefix) {
  int32_t at = 0;
  for (int g = 0; g < G; ++g) {
    int64_t lo, hi;
    loom__grouped_bounds(off, g, R, &lo, &hi);
    prefix[g] = at;
    at += loom__grouped_tiles(hi - lo, bm, tiles_n);
  }
  prefix[G] = at;
  return at;
}

/* The group of tile t (0 <= t < prefix[G]): the last g with prefix[g] <= t
 * (groups without tiles share their prefix with the next one). */
LOOM_HD int loom__grouped_group_of(const int32_t *prefix, int G, int32_t t) {
  return (int)loom__last_at_most_i32(prefix, G, t);
}

/* Step t of the grouped GEMM: its group *g, first row *row0 (an index into
 * A's and C's rows), rows *rows (<= bm: a group's last tile row is short)
 * and tile column *tn. band: GROUPED band height in tile rows. */
LOOM_HD void loom__grouped_tile_at(const int64_t *off, const int32_t *prefix, int G, int64_t R, int bm, int tiles_n,
                                   int band, int32_t t, int *g, int64_t *row0, int64_t *rows, int *tn) {
  const int gg = loom__grouped_group_of(prefix, G, t);
  int64_t lo, hi;
  loom__grouped_bounds(off, gg, R, &lo, &hi);
  const int32_t tiles_m = (int32_t)((hi - lo + bm - 1) / bm);
  const int32_t id = loom__tile_grouped(t - prefix[gg], tiles_m, tiles_n, band);
  const int32_t tm = id / tiles_n;
  *g = gg;
  *tn = id - tm * tiles_n;
  *row0 = lo + (int64_t)tm * bm;
  const int64_t left = hi - *row0;
  *rows = left < bm ? left : bm;
}

/* The arrival wait of a tile (gemm.h, loom_grouped_arrival_t): group g
 * starts at row lo and holds the segments of sources 0..S-1 in order,
 * rows_from[s * stride] rows each (rows_from: the group's column); the
 * tile covers rows [r0, r1). Returns the first source >= s whose segment
 * is not empty and overlaps the tile, S when none is left; *at carries the
 * segment's start from call to call (start: s = 0, *at = lo; then s = the
 * returned source + 1, *at unchanged). */
LOOM_HD int loom__grouped_arrival_next(const int32_t *rows_from, int64_t stride, int S, int s, int64_t *at, int64_t r0,
                                       int64_t r1) {
  for (; s < S && *at < r1; ++s) {
    const int64_t n = rows_from[(int64_t)s * stride], start = *at;
    *at = start + (n > 0 ? n : 0);
    if (n > 0 && start + n > r0) return s;
  }
  return S;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_GROUPED_SCHEDULE_H */
