/*
 * test_gemm_schedule.c - host tests of the GEMM tile scheduler
 * (src/gemm/tile_order.h): every order is a permutation of the tiles, a
 * persistent grid visits every tile exactly once, grouped order stays inside
 * its band, rank-shifted order starts at the chosen rank's rows, and the
 * prologue's signal ranges cover exactly the tile's rows; stream-K segments
 * cover every k-block of every tile once, with distinct workspace slots and
 * balanced ranges (the configuration choice: test_gemm_heuristic.c). Runs
 * on any machine.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/gemm.h"
#include "gemm/tile_order.h"

/* Visits every tile through a persistent grid of `grid` blocks; checks each
 * tile is seen exactly once and steps are handed out in range. */
static int visit_all(const loom_tile_order_t *o, int32_t grid, int *seen) {
  const int32_t tiles = loom__tile_count(o);
  memset(seen, 0, sizeof(int) * (size_t)tiles);
  int ok = 1;
  for (int32_t b = 0; b < grid; ++b) {
    for (int32_t i = 0;; ++i) {
      const int32_t s = loom__tile_step(tiles, grid, b, i);
      if (s < 0) break;
      if (s >= tiles) { ok = 0; break; }
      const int32_t t = loom__tile_at(o, s);
      if (t < 0 || t >= tiles) { ok = 0; continue; }
      int32_t tm, tn;
      loom__tile_coords(o, t, &tm, &tn);
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
            loom_tile_order_t o = {(int32_t)loom__ceil_div(ms[a], bms[c]),
                                   (int32_t)loom__ceil_div(ns[b], bns[d]), LOOM_TILE_ORDER_GROUPED,
                                   groups[e], 0, NULL};
            if ((size_t)loom__tile_count(&o) > 64u * 96u * 4u) continue;
            for (size_t f = 0; f < sizeof grids / sizeof grids[0]; ++f) {
              const int32_t g = loom__tile_grid(loom__tile_count(&o), grids[f], 1);
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
    const int32_t t = loom__tile_grouped(s, rows, cols, group);
    const int32_t tm = t / cols, band = tm / group;
    CHECK(band >= prev_band);
    CHECK(s / (group * cols) == band);
    prev_band = band;
  }
  /* inside a full band, column-major: step 1 is the next row, same column */
  CHECK_EQ_INT(loom__tile_grouped(0, rows, cols, group), 0);
  CHECK_EQ_INT(loom__tile_grouped(1, rows, cols, group), cols);
  CHECK_EQ_INT(loom__tile_grouped(group, rows, cols, group), 1);
  /* group 1 is plain row-major */
  for (int32_t s = 0; s < rows * cols; ++s) CHECK_EQ_INT(loom__tile_grouped(s, rows, cols, 1), s);
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
        const int32_t tiles_m = (int32_t)loom__ceil_div(m, bms[c]);
        if ((int64_t)tiles_m * 5 > (1 << 20)) continue;
        for (int32_t rank = 0; rank < world; ++rank) {
          const int32_t shift = loom__tile_rank_shift(m, bms[c], world, rank + 1);
          loom_tile_order_t o = {tiles_m, 5, LOOM_TILE_ORDER_RANK_SHIFTED, 8, shift, NULL};
          combos++;
          if (shift < 0 || shift >= tiles_m) bad++;
          if (!visit_all(&o, loom__tile_grid(loom__tile_count(&o), 132, 1), seen)) bad++;
          /* step 0 starts in the tile row holding rank+1's first row */
          int32_t tm, tn;
          loom__tile_coords(&o, loom__tile_at(&o, 0), &tm, &tn);
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
  CHECK_EQ_INT(loom__tile_rank_shift(8192, 128, 2, 1), 32);
  CHECK_EQ_INT(loom__tile_rank_shift(8192, 128, 2, 2), 0);
  CHECK_EQ_INT(loom__tile_rank_shift(8192, 128, 2, -1), 32);
}

LOOM_TEST(gemm_schedule_explicit_table) {
  /* a host-set schedule (reverse order) is followed exactly */
  enum { TM = 5, TN = 3 };
  int32_t table[TM * TN];
  for (int32_t i = 0; i < TM * TN; ++i) table[i] = TM * TN - 1 - i;
  loom_tile_order_t o = {TM, TN, LOOM_TILE_ORDER_SCHEDULE, 1, 0, table};
  int seen[TM * TN];
  CHECK(visit_all(&o, 4, seen));
  for (int32_t s = 0; s < TM * TN; ++s) CHECK_EQ_INT(loom__tile_at(&o, s), TM * TN - 1 - s);
}

LOOM_TEST(gemm_schedule_grid_and_steps) {
  CHECK_EQ_INT(loom__tile_grid(1, 132, 1), 1);
  CHECK_EQ_INT(loom__tile_grid(96, 132, 1), 96);
  CHECK_EQ_INT(loom__tile_grid(768, 132, 1), 132);
  CHECK_EQ_INT(loom__tile_grid(768, 132, 2), 264);
  CHECK_EQ_INT(loom__tile_grid(0, 132, 1), 1);
  CHECK_EQ_INT(loom__tile_step(10, 4, 1, 0), 1);
  CHECK_EQ_INT(loom__tile_step(10, 4, 1, 2), 9);
  CHECK_EQ_INT(loom__tile_step(10, 4, 2, 2), -1);
  CHECK_EQ_INT(loom__ceil_div(3001, 128), 24);
  CHECK_EQ_INT(loom__ceil_div(128, 128), 1);
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
        const int32_t tiles_m = (int32_t)loom__ceil_div(ms[a], bms[c]);
        for (int32_t tm = 0; tm < tiles_m; ++tm) {
          int32_t first, last;
          loom__tile_wait_range(tm, bms[c], ms[a], rps[b], &first, &last);
          const int64_t r0 = (int64_t)tm * bms[c];
          int64_t r1 = r0 + bms[c];
          if (r1 > ms[a]) r1 = ms[a];
          if (first != r0 / rps[b] || last != (r1 - 1) / rps[b] || last < first) bad++;
          if ((int64_t)last * rps[b] >= ms[a]) bad++;
        }
      }
  CHECK_EQ_INT(bad, 0);
}

/* ---- stream-K work decomposition ----------------------------------------- */

/* Walks every block's segments for w; checks that each (step, k-block) is
 * computed exactly once, segments are non-empty and in step order, shared
 * tiles have exactly nseg contributors whose slots are slot0 + c slot_step
 * (c = 0 .. nseg-1 in k order, all slots distinct and below
 * loom__work_slots), every segment of a tile agrees on nseg/slot0/slot_step,
 * whole-tile segments cover the whole k range; stream-K: [first, last] are
 * the contributors and ranges differ by at most one iteration. Returns the
 * number of violations (prints the first few). */
enum { WMAX_TILES = 300, WMAX_SEG = 300 };
static int check_work(const loom_work_t *w, uint8_t *cover, int32_t *contrib, uint8_t *slot_used, int32_t *kstart) {
  const int32_t K = w->kblocks, sk_tiles = w->tiles - w->dp_tiles;
  const int64_t T = loom__work_sk_iters(w);
  memset(cover, 0, (size_t)w->tiles * (size_t)K);
  memset(contrib, 0, sizeof(int32_t) * WMAX_TILES * 4);
  int32_t *tnseg = contrib + WMAX_TILES, *tslot0 = contrib + 2 * WMAX_TILES, *tstep = contrib + 3 * WMAX_TILES;
  const int64_t nslots = loom__work_slots(w);
  memset(slot_used, 0, (size_t)(nslots > 0 ? nslots : 1));
  for (int x = 0; x < WMAX_TILES * WMAX_SEG; ++x) kstart[x] = -1;
  int bad = 0;
  int64_t min_it = INT64_MAX, max_it = 0;
#define WBAD(...) do { if (bad++ < 5) printf("    work tiles=%d K=%d grid=%d dp=%d S=%d splits=%d: ", w->tiles, K, w->grid, w->dp_tiles, w->sk_blocks, w->splits), printf(__VA_ARGS__), printf("\n"); } while (0)
  for (int32_t b = 0; b < w->grid; ++b) {
    loom_segment_t sg;
    int32_t prev_step = -1;
    int64_t sk_it = 0;
    for (int32_t i = 0; loom__work_segment(w, b, i, &sg); ++i) {
      if (i > 100000) { WBAD("block %d: endless segments", b); break; }
      if (w->splits == 0 && (sg.step <= prev_step)) WBAD("block %d seg %d: step %d after %d", b, i, sg.step, prev_step);
      if (sg.step < 0 || sg.step >= w->tiles) { WBAD("block %d seg %d: step %d", b, i, sg.step); continue; }
      prev_step = sg.step;
      if (!(0 <= sg.k0 && sg.k0 < sg.k1 && sg.k1 <= K)) { WBAD("block %d: k range [%d, %d)", b, sg.k0, sg.k1); continue; }
      for (int32_t k = sg.k0; k < sg.k1; ++k) cover[(size_t)sg.step * K + k]++;
      if (sg.step >= w->dp_tiles) {
        sk_it += sg.k1 - sg.k0;
        const int32_t j = sg.step - w->dp_tiles;
        if (sg.sk_tile != j) WBAD("sk_tile %d for step %d", sg.sk_tile, sg.step);
        if (w->splits == 0) {
          if (!(sg.first <= b && b <= sg.last)) WBAD("block %d outside [%d, %d]", b, sg.first, sg.last);
          if (sg.sk != (sg.first != sg.last)) WBAD("sk flag");
        }
        if (!sg.sk && (sg.k0 != 0 || sg.k1 != K)) WBAD("unshared tile segment [%d, %d)", sg.k0, sg.k1);
        if (sg.sk) {
          if (sg.nseg < 2 || sg.nseg > WMAX_SEG || sg.slot_step < 1) { WBAD("nseg %d step %d", sg.nseg, sg.slot_step); continue; }
          if (contrib[j] == 0) tnseg[j] = sg.nseg, tslot0[j] = sg.slot0, tstep[j] = sg.slot_step;
          else if (tnseg[j] != sg.nseg || tslot0[j] != sg.slot0 || tstep[j] != sg.slot_step) WBAD("tile %d: segments disagree", j);
          contrib[j]++;
          const int32_t sl = sg.slot;
          if (sl < 0 || sl >= nslots) WBAD("slot %d of %lld", sl, (long long)nslots);
          else if (slot_used[sl]++) WBAD("slot %d used twice", sl);
          const int32_t c = (sl - sg.slot0) / sg.slot_step;
          if ((sl - sg.slot0) % sg.slot_step != 0 || c < 0 || c >= sg.nseg) { WBAD("slot %d not slot0 %d + c x %d", sl, sg.slot0, sg.slot_step); continue; }
          if (kstart[j * WMAX_SEG + c] != -1) WBAD("tile %d contributor %d twice", j, c);
          kstart[j * WMAX_SEG + c] = sg.k0;
          if (w->splits == 0 && c != b - sg.first) WBAD("stream-K contributor index %d for block %d (first %d)", c, b, sg.first);
        }
      } else if (sg.sk || sg.k0 != 0 || sg.k1 != K) {
        WBAD("data-parallel segment of step %d not whole", sg.step);
      }
    }
    if (w->splits == 0 && b < w->sk_blocks && T > 0) {
      if (sk_it < min_it) min_it = sk_it;
      if (sk_it > max_it) max_it = sk_it;
    }
  }
  for (int64_t x = 0; x < (int64_t)w->tiles * K; ++x)
    if (cover[x] != 1) { WBAD("step %lld k-block %lld covered %d times", (long long)(x / K), (long long)(x % K), cover[x]); break; }
  for (int32_t j = 0; j < sk_tiles; ++j) {
    if (contrib[j] == 0) continue; /* whole tile */
    if (contrib[j] != tnseg[j]) WBAD("sk tile %d: %d contributors, expected %d", j, contrib[j], tnseg[j]);
    for (int32_t c = 1; c < tnseg[j] && c < WMAX_SEG; ++c)
      if (!(kstart[j * WMAX_SEG + c - 1] < kstart[j * WMAX_SEG + c])) WBAD("tile %d: contributors not in k order", j);
  }
  if (w->splits == 0 && T > 0 && max_it - min_it > 1) WBAD("stream-K ranges %lld..%lld iterations", (long long)min_it, (long long)max_it);
#undef WBAD
  return bad;
}

LOOM_TEST(gemm_schedule_stream_k_covers_every_k_block_once) {
  const int32_t tiles_[] = {1, 2, 7, 32, 48, 56, 96, 131, 133, 200, 300};
  const int32_t ks[] = {1, 2, 3, 17, 64, 129, 224};
  const int32_t grids[] = {1, 3, 8, 66, 132};
  uint8_t *cover = malloc(300 * 224);
  int32_t *contrib = malloc(sizeof(int32_t) * WMAX_TILES * 4);
  uint8_t *slots = malloc(300 * 16 + 300);
  int32_t *kstart = malloc(sizeof(int32_t) * WMAX_TILES * WMAX_SEG);
  int bad = 0, combos = 0;
  for (size_t a = 0; a < sizeof tiles_ / sizeof tiles_[0]; ++a)
    for (size_t c = 0; c < sizeof ks / sizeof ks[0]; ++c)
      for (size_t g = 0; g < sizeof grids / sizeof grids[0]; ++g)
        for (int mode = 0; mode < 9; ++mode) {
          loom_work_t w;
          memset(&w, 0, sizeof w);
          w.tiles = tiles_[a], w.kblocks = ks[c], w.grid = grids[g];
          /* 0: all data-parallel, 1: all stream-K, 2: all but one wave's remainder
           * data-parallel, 3: stream-K over fewer blocks than the grid;
           * 4-6: split-K into 2, 5, 16 ranges (all tiles; 6: the tail);
           * 7, 8: split-K into 5 ranges band by band (bands of 3 and 16 tiles; 8: the tail) */
          int32_t sk = mode == 0 ? 0 : (mode == 2 || mode == 6 || mode == 8) ? (w.tiles > w.grid ? w.grid + w.tiles % w.grid : w.tiles) : w.tiles;
          w.dp_tiles = w.tiles - sk;
          if (mode >= 4) {
            int32_t sp = mode == 4 ? 2 : mode == 6 ? 16 : 5;
            if (sp > w.kblocks) sp = w.kblocks;
            w.splits = sp;
            w.split_band = mode == 7 ? 3 : mode == 8 ? 16 : 0;
            w.sk_blocks = 0;
          } else {
            int64_t T = (int64_t)sk * w.kblocks;
            int32_t S = mode == 3 ? (w.grid + 1) / 2 : w.grid;
            if (S > T) S = (int32_t)T;
            w.sk_blocks = sk ? S : 0;
          }
          combos++;
          bad += check_work(&w, cover, contrib, slots, kstart);
        }
  free(cover), free(contrib), free(slots), free(kstart);
  CHECK(combos > 2000);
  CHECK_EQ_INT(bad, 0);
}

LOOM_TEST(gemm_schedule_split_k_aligned_example) {
  /* 3 tiles of 10 k-blocks, 2 splits, grid 4: units 0..5 = (split 0: tiles
   * 0 1 2, split 1: tiles 0 1 2); block 1 takes units 1 and 5 */
  loom_work_t w = {3, 10, 4, 0, 0, 2, 0};
  loom_segment_t s;
  CHECK_EQ_INT(loom__work_slots(&w), 6);
  CHECK(loom__work_segment(&w, 1, 0, &s));
  CHECK(s.step == 1 && s.k0 == 0 && s.k1 == 5 && s.sk && s.nseg == 2 && s.slot == 1 && s.slot0 == 1 && s.slot_step == 3);
  CHECK(loom__work_segment(&w, 1, 1, &s));
  CHECK(s.step == 2 && s.k0 == 5 && s.k1 == 10 && s.slot == 5 && s.slot0 == 2);
  CHECK(!loom__work_segment(&w, 1, 2, &s));
  CHECK(loom__work_segment(&w, 3, 0, &s) && s.step == 0 && s.k0 == 5 && s.slot == 3);
  CHECK(!loom__work_segment(&w, 3, 1, &s));
  /* one split: whole tiles, no fixup */
  loom_work_t w1 = {3, 10, 4, 0, 0, 1, 0};
  CHECK(loom__work_segment(&w1, 2, 0, &s) && s.step == 2 && !s.sk && s.k0 == 0 && s.k1 == 10);
}

LOOM_TEST(gemm_schedule_split_k_bands_example) {
  /* 5 tiles of 10 k-blocks, 2 splits, bands of 2 tiles, grid 3: units 0..9 =
   * (tiles 0 1 split 0, tiles 0 1 split 1, tiles 2 3 split 0, tiles 2 3
   * split 1, tile 4 split 0, tile 4 split 1); slots stay tile + split x 5 */
  loom_work_t w = {5, 10, 3, 0, 0, 2, 2};
  loom_segment_t s;
  memset(&s, 0, sizeof s);
  const int32_t step[10] = {0, 1, 0, 1, 2, 3, 2, 3, 4, 4}, k0[10] = {0, 0, 5, 5, 0, 0, 5, 5, 0, 5};
  for (int32_t u = 0; u < 10; ++u) {
    CHECK(loom__work_segment(&w, u % 3, u / 3, &s));
    CHECK(s.step == step[u] && s.k0 == k0[u] && s.k1 == k0[u] + 5 && s.sk && s.nseg == 2);
    CHECK(s.slot == step[u] + (k0[u] / 5) * 5 && s.slot0 == step[u] && s.slot_step == 5);
  }
  CHECK(!loom__work_segment(&w, 1, 3, &s));
  /* a band as wide as every tile: the split-major order */
  loom_work_t wa = {5, 10, 3, 0, 0, 2, 5}, wb = {5, 10, 3, 0, 0, 2, 0};
  loom_segment_t sa, sb;
  memset(&sa, 0, sizeof sa), memset(&sb, 0, sizeof sb);
  for (int32_t u = 0; u < 10; ++u) {
    CHECK(loom__work_segment(&wa, u % 3, u / 3, &sa) && loom__work_segment(&wb, u % 3, u / 3, &sb));
    CHECK(sa.step == sb.step && sa.k0 == sb.k0 && sa.slot == sb.slot);
  }
}

LOOM_TEST(gemm_schedule_stream_k_example) {
  /* 2 tiles of 3 k-blocks over 4 blocks: T = 6, ranges [0,1) [1,3) [3,4) [4,6) */
  loom_work_t w = {2, 3, 4, 0, 4, 0, 0};
  loom_segment_t s;
  CHECK(loom__work_segment(&w, 0, 0, &s));
  CHECK(s.step == 0 && s.k0 == 0 && s.k1 == 1 && s.sk && s.first == 0 && s.last == 1);
  CHECK(!loom__work_segment(&w, 0, 1, &s));
  CHECK(loom__work_segment(&w, 1, 0, &s));
  CHECK(s.step == 0 && s.k0 == 1 && s.k1 == 3 && s.sk);
  CHECK(!loom__work_segment(&w, 1, 1, &s));
  CHECK(loom__work_segment(&w, 2, 0, &s));
  CHECK(s.step == 1 && s.k0 == 0 && s.k1 == 1 && s.first == 2 && s.last == 3);
  CHECK(loom__work_segment(&w, 3, 0, &s));
  CHECK(s.step == 1 && s.k0 == 1 && s.k1 == 3 && s.sk_tile == 1);
  CHECK_EQ_INT(loom__work_slot(3, 1), 4);
  /* one data-parallel tile per block first, then the stream-K steps */
  loom_work_t w2 = {10, 4, 4, 8, 4, 0, 0};
  CHECK(loom__work_segment(&w2, 1, 0, &s) && s.step == 1 && !s.sk);
  CHECK(loom__work_segment(&w2, 1, 1, &s) && s.step == 5 && !s.sk);
  CHECK(loom__work_segment(&w2, 1, 2, &s) && s.step == 8 && s.k0 == 2 && s.k1 == 4 && s.sk);
  CHECK(!loom__work_segment(&w2, 1, 3, &s));
}

/* 2x1 clusters: the cluster-step order and the per-rank coordinates cover
 * every tile exactly once for persistent grids of ncl clusters, with exactly
 * tiles_n idle blocks (past the last tile row) when the tile rows are odd;
 * GROUPED orders and RANK_SHIFTED ones (every row shift: the hooked GEMMs
 * of the fused ops), whose first step, when the shift is even, holds the
 * shifted tile row. */
LOOM_TEST(gemm_cluster_steps_cover_every_tile_once) {
  int *seen = (int *)malloc(sizeof(int) * 64 * 64);
  for (int32_t tiles_m = 1; tiles_m <= 9; ++tiles_m)
    for (int32_t tiles_n = 1; tiles_n <= 13; tiles_n += 3)
      for (int32_t group = 1; group <= 16; group *= 4)
        for (int32_t ncl = 1; ncl <= 20; ncl += 6)
        for (int32_t shift = -1; shift < tiles_m; ++shift) {
          loom_tile_order_t o;
          memset(&o, 0, sizeof o);
          o.kind = shift < 0 ? LOOM_TILE_ORDER_GROUPED : LOOM_TILE_ORDER_RANK_SHIFTED;
          o.tiles_m = tiles_m, o.tiles_n = tiles_n, o.group = group, o.row_shift = shift < 0 ? 0 : shift;
          const loom_tile_order_t co = loom__cluster_order(o, 2);
          CHECK_EQ_INT(loom__cluster_order_fits(&o, 2), shift < 0 || shift % 2 == 0);
          if (shift >= 0 && shift % 2 == 0) { /* the first step: the shifted row, as without clusters */
            int32_t tm, tn;
            loom__cluster_coords(&co, loom__tile_at(&co, 0), 0, 2, &tm, &tn);
            CHECK_EQ_INT(tm, loom__tile_at(&o, 0) / tiles_n);
          }
          CHECK(co.tiles_m == (tiles_m + 1) / 2 && co.group >= 1);
          const int32_t steps = loom__tile_count(&co);
          memset(seen, 0, sizeof(int) * (size_t)(tiles_m * tiles_n));
          int idle = 0, bad = 0;
          for (int32_t c = 0; c < ncl; ++c)
            for (int32_t i = 0;; ++i) {
              const int32_t s = loom__tile_step(steps, ncl, c, i);
              if (s < 0) break;
              const int32_t t = loom__tile_at(&co, s);
              for (int32_t r = 0; r < 2; ++r) {
                int32_t tm, tn;
                loom__cluster_coords(&co, t, r, 2, &tm, &tn);
                if (tm >= tiles_m) idle++;
                else if (tm < 0 || tn < 0 || tn >= tiles_n) bad++;
                else seen[tm * tiles_n + tn]++;
              }
            }
          int once = 1;
          for (int32_t x = 0; x < tiles_m * tiles_n; ++x) once &= seen[x] == 1;
          CHECK(once && !bad);
          CHECK(idle == (tiles_m % 2 ? tiles_n : 0));
        }
  free(seen);
}

/* The launchers' order/hook check (loom__gemm_order): hooks whose
 * activation is not a loom_activation_t are refused by name (the sm90
 * launcher picks one kernel per activation), as are a rank shift past the
 * tile rows and a wait granularity below one row. */
LOOM_TEST(gemm_order_refuses_bad_hooks) {
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(300, 512, 256, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  loom_gemm_hooks_t h;
  loom_tile_order_t o;
  memset(&h, 0, sizeof h);
  CHECK_RESULT(loom__gemm_order(&d, &h, 128, 128, 16, &o), LOOM_SUCCESS);
  CHECK_EQ_INT(o.tiles_m, 3);
  CHECK_EQ_INT(o.tiles_n, 4);
  for (int act = LOOM_ACT_NONE; act <= LOOM_ACT_GELU_ERF; ++act) {
    h.activation = act;
    CHECK_RESULT(loom__gemm_order(&d, &h, 128, 128, 16, &o), LOOM_SUCCESS);
  }
  h.activation = 7;
  CHECK_RESULT(loom__gemm_order(&d, &h, 128, 128, 16, &o), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("activation=7");
  h.activation = -1;
  CHECK_RESULT(loom__gemm_order(&d, &h, 128, 128, 16, &o), LOOM_ERR_INVALID_ARGUMENT);
  h.activation = LOOM_ACT_NONE;
  h.order.kind = LOOM_TILE_ORDER_RANK_SHIFTED, h.order.row_shift = 3; /* 3 tile rows: shifts 0..2 */
  CHECK_RESULT(loom__gemm_order(&d, &h, 128, 128, 16, &o), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("row_shift=3");
  h.order.row_shift = 2;
  CHECK_RESULT(loom__gemm_order(&d, &h, 128, 128, 16, &o), LOOM_SUCCESS);
  h.wait_signals = (uint32_t *)&h; /* any non-NULL pointer: only the check runs */
  h.wait_rows_per_signal = 0;
  CHECK_RESULT(loom__gemm_order(&d, &h, 128, 128, 16, &o), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("wait_rows_per_signal=0");
}
