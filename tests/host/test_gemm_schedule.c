/*
 * test_gemm_schedule.c - host tests of the GEMM tile scheduler
 * (src/gemm/tile_order.h): every order is a permutation of the tiles, a
 * persistent grid visits every tile exactly once, grouped order stays inside
 * its band, rank-shifted order starts at the chosen rank's rows, and the
 * prologue's signal ranges cover exactly the tile's rows. Runs on any machine.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/test.h"
#include "gemm/tile_order.h"

/* Visits every tile through a persistent grid of `grid` blocks; checks each
 * tile is seen exactly once and steps are handed out in range. */
static int visit_all(const loom_tile_order_t *o, int32_t grid, int *seen) {
  const int32_t tiles = loom_tile_count(o);
  memset(seen, 0, sizeof(int) * (size_t)tiles);
  int ok = 1;
  for (int32_t b = 0; b < grid; ++b) {
    for (int32_t i = 0;; ++i) {
      const int32_t s = loom_tile_step(tiles, grid, b, i);
      if (s < 0) break;
      if (s >= tiles) { ok = 0; break; }
      const int32_t t = loom_tile_at(o, s);
      if (t < 0 || t >= tiles) { ok = 0; continue; }
      int32_t tm, tn;
      loom_tile_coords(o, t, &tm, &tn);
      if (tm < 0 || tm >= o->tiles_m || tn < 0 || tn >= o->tiles_n) ok = 0;
      seen[t]++;
    }
  }
  for (int32_t t = 0; t < tiles; ++t) ok &= seen[t] == 1;
  return ok;
}

LOOM_TEST(gemm_schedule_grouped_visits_every_tile_once) {
  const int64_t ms[] = {1, 7, 64, 127, 128, 1000, 3001, 8192};
  const int64_t ns[] = {8, 136, 1024, 12288, 24576};
  const int32_t bms[] = {64, 128};
  const int32_t bns[] = {64, 128, 256};
  const int32_t grids[] = {1, 3, 66, 132, 1000};
  const int32_t groups[] = {1, 2, 8, 16, 1000};
  int *seen = malloc(sizeof(int) * 64 * 96 * 4);
  int combos = 0, bad = 0;
  for (size_t a = 0; a < sizeof ms / sizeof ms[0]; ++a)
    for (size_t b = 0; b < sizeof ns / sizeof ns[0]; ++b)
      for (size_t c = 0; c < sizeof bms / sizeof bms[0]; ++c)
        for (size_t d = 0; d < sizeof bns / sizeof bns[0]; ++d)
          for (size_t e = 0; e < sizeof groups / sizeof groups[0]; ++e) {
            loom_tile_order_t o = {(int32_t)loom_ceil_div(ms[a], bms[c]),
                                   (int32_t)loom_ceil_div(ns[b], bns[d]), LOOM_TILE_ORDER_GROUPED,
                                   groups[e], 0, NULL};
            if ((size_t)loom_tile_count(&o) > 64u * 96u * 4u) continue;
            for (size_t f = 0; f < sizeof grids / sizeof grids[0]; ++f) {
              const int32_t g = loom_tile_grid(loom_tile_count(&o), grids[f], 1);
              combos++;
              if (!visit_all(&o, g, seen)) {
                if (bad++ < 5)
                  printf("    grouped m=%lld n=%lld tile=%dx%d group=%d grid=%d: not a permutation\n",
                         (long long)ms[a], (long long)ns[b], bms[c], bns[d], groups[e], g);
              }
            }
          }
  free(seen);
  CHECK(combos > 1000);
  CHECK_EQ_INT(bad, 0);
}

LOOM_TEST(gemm_schedule_grouped_stays_in_band) {
  /* consecutive steps stay inside a band of `group` tile rows; the band
   * advances only after all its columns */
  const int32_t rows = 13, cols = 7, group = 4;
  int32_t prev_band = 0;
  for (int32_t s = 0; s < rows * cols; ++s) {
    const int32_t t = loom_tile_grouped(s, rows, cols, group);
    const int32_t tm = t / cols, band = tm / group;
    CHECK(band >= prev_band);
    CHECK(s / (group * cols) == band);
    prev_band = band;
  }
  /* inside a full band, column-major: step 1 is the next row, same column */
  CHECK_EQ_INT(loom_tile_grouped(0, rows, cols, group), 0);
  CHECK_EQ_INT(loom_tile_grouped(1, rows, cols, group), cols);
  CHECK_EQ_INT(loom_tile_grouped(group, rows, cols, group), 1);
  /* group 1 is plain row-major */
  for (int32_t s = 0; s < rows * cols; ++s) CHECK_EQ_INT(loom_tile_grouped(s, rows, cols, 1), s);
}

LOOM_TEST(gemm_schedule_rank_shifted_is_permutation_starting_at_rank) {
  const int32_t worlds[] = {1, 2, 3, 4, 8, 16, 64};
  const int64_t m_locals[] = {1, 64, 100, 128, 1000, 4096};
  const int32_t bms[] = {64, 128};
  int *seen = malloc(sizeof(int) * 1 << 20);
  int bad = 0, combos = 0;
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; ++w)
    for (size_t a = 0; a < sizeof m_locals / sizeof m_locals[0]; ++a)
      for (size_t c = 0; c < sizeof bms / sizeof bms[0]; ++c) {
        const int32_t world = worlds[w];
        const int64_t m = m_locals[a] * world;
        const int32_t tiles_m = (int32_t)loom_ceil_div(m, bms[c]);
        if ((int64_t)tiles_m * 5 > (1 << 20)) continue;
        for (int32_t rank = 0; rank < world; ++rank) {
          const int32_t shift = loom_tile_rank_shift(m, bms[c], world, rank + 1);
          loom_tile_order_t o = {tiles_m, 5, LOOM_TILE_ORDER_RANK_SHIFTED, 8, shift, NULL};
          combos++;
          if (shift < 0 || shift >= tiles_m) bad++;
          if (!visit_all(&o, loom_tile_grid(loom_tile_count(&o), 132, 1), seen)) bad++;
          /* step 0 starts in the tile row holding rank+1's first row */
          int32_t tm, tn;
          loom_tile_coords(&o, loom_tile_at(&o, 0), &tm, &tn);
          const int64_t first_row = (int64_t)((rank + 1) % world) * m / world;
          if (!(tm * (int64_t)bms[c] <= first_row && first_row < (tm + 1) * (int64_t)bms[c])) {
            if (bad++ < 5)
              printf("    rank-shift world=%d rank=%d m=%lld bm=%d: step 0 at tile row %d, rows of rank+1 start at %lld\n",
                     world, rank, (long long)m, bms[c], tm, (long long)first_row);
          }
          if (tn != 0) bad++;
        }
      }
  free(seen);
  CHECK(combos > 200);
  CHECK_EQ_INT(bad, 0);
  /* world 2, m 8192, bm 128: rank 0 taking rank 1's rows first starts at row block 32 */
  CHECK_EQ_INT(loom_tile_rank_shift(8192, 128, 2, 1), 32);
  CHECK_EQ_INT(loom_tile_rank_shift(8192, 128, 2, 2), 0);
  CHECK_EQ_INT(loom_tile_rank_shift(8192, 128, 2, -1), 32);
}

LOOM_TEST(gemm_schedule_explicit_table) {
  /* a host-set schedule (reverse order) is followed exactly */
  enum { TM = 5, TN = 3 };
  int32_t table[TM * TN];
  for (int32_t i = 0; i < TM * TN; ++i) table[i] = TM * TN - 1 - i;
  loom_tile_order_t o = {TM, TN, LOOM_TILE_ORDER_SCHEDULE, 1, 0, table};
  int seen[TM * TN];
  CHECK(visit_all(&o, 4, seen));
  for (int32_t s = 0; s < TM * TN; ++s) CHECK_EQ_INT(loom_tile_at(&o, s), TM * TN - 1 - s);
}

LOOM_TEST(gemm_schedule_grid_and_steps) {
  CHECK_EQ_INT(loom_tile_grid(1, 132, 1), 1);
  CHECK_EQ_INT(loom_tile_grid(96, 132, 1), 96);
  CHECK_EQ_INT(loom_tile_grid(768, 132, 1), 132);
  CHECK_EQ_INT(loom_tile_grid(768, 132, 2), 264);
  CHECK_EQ_INT(loom_tile_grid(0, 132, 1), 1);
  CHECK_EQ_INT(loom_tile_step(10, 4, 1, 0), 1);
  CHECK_EQ_INT(loom_tile_step(10, 4, 1, 2), 9);
  CHECK_EQ_INT(loom_tile_step(10, 4, 2, 2), -1);
  CHECK_EQ_INT(loom_ceil_div(3001, 128), 24);
  CHECK_EQ_INT(loom_ceil_div(128, 128), 1);
}

LOOM_TEST(gemm_schedule_wait_ranges_cover_rows) {
  /* every row of every tile row falls in [first, last], and no index beyond */
  const int64_t ms[] = {1, 100, 128, 1000, 8192};
  const int64_t rps[] = {1, 64, 100, 128, 4096};
  const int32_t bms[] = {64, 128};
  int bad = 0;
  for (size_t a = 0; a < 5; ++a)
    for (size_t b = 0; b < 5; ++b)
      for (size_t c = 0; c < 2; ++c) {
        const int32_t tiles_m = (int32_t)loom_ceil_div(ms[a], bms[c]);
        for (int32_t tm = 0; tm < tiles_m; ++tm) {
          int32_t first, last;
          loom_tile_wait_range(tm, bms[c], ms[a], rps[b], &first, &last);
          const int64_t r0 = (int64_t)tm * bms[c];
          int64_t r1 = r0 + bms[c];
          if (r1 > ms[a]) r1 = ms[a];
          if (first != r0 / rps[b] || last != (r1 - 1) / rps[b] || last < first) bad++;
          if ((int64_t)last * rps[b] >= ms[a]) bad++;
        }
      }
  CHECK_EQ_INT(bad, 0);
}
