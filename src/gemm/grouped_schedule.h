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
 * Limits: rows per group and the total are int64; a tile index is int64
 * (the total can pass 2^31 only with more than 2^31 / tiles_n tile rows).
 */
#ifndef LOOM_GEMM_GROUPED_SCHEDULE_H
#define LOOM_GEMM_GROUPED_SCHEDULE_H

#include <stdint.h>

#include "core/util.h"        /* LOOM_HD, loom__last_at_most */
#include "gemm/tile_order.h"  /* loom__tile_grouped */

#ifdef __cplusplus
extern "C" {
#endif

/* prefix[g] (G + 1 entries) = the first tile of group g; returns the total
 * tiles (prefix[G]). off: [G + 1] rows, non-decreasing. */
LOOM_HD int64_t loom__grouped_prefix(const int64_t *off, int G, int bm, int tiles_n, int64_t *prefix) {
  int64_t at = 0;
  for (int g = 0; g < G; ++g) {
    prefix[g] = at;
    const int64_t rows = off[g + 1] - off[g];
    at += (rows + bm - 1) / bm * tiles_n;
  }
  prefix[G] = at;
  return at;
}

/* The group of tile t (0 <= t < prefix[G]): the last g with prefix[g] <= t
 * and a tile of its own (groups without tiles share their prefix with the
 * next one). */
LOOM_HD int loom__grouped_group_of(const int64_t *prefix, int G, int64_t t) {
  return (int)loom__last_at_most(prefix, G, t);
}

/* Step t of the grouped GEMM: its group *g, first row *row0 (an index into
 * A's and C's rows), rows *rows (<= bm: a group's last tile row is short)
 * and tile column *tn. band: GROUPED band height in tile rows. */
LOOM_HD void loom__grouped_tile_at(const int64_t *off, const int64_t *prefix, int G, int bm, int tiles_n, int band,
                                   int64_t t, int *g, int64_t *row0, int64_t *rows, int *tn) {
  const int gg = loom__grouped_group_of(prefix, G, t);
  const int64_t group_rows = off[gg + 1] - off[gg];
  const int32_t tiles_m = (int32_t)((group_rows + bm - 1) / bm);
  const int32_t id = loom__tile_grouped((int32_t)(t - prefix[gg]), tiles_m, tiles_n, band);
  const int32_t tm = id / tiles_n;
  *g = gg;
  *tn = id - tm * tiles_n;
  *row0 = off[gg] + (int64_t)tm * bm;
  const int64_t left = off[gg + 1] - *row0;
  *rows = left < bm ? left : bm;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_GROUPED_SCHEDULE_H */
