/*
 * test_grouped_schedule.c - the grouped GEMM's steps (gemm/grouped_schedule.h)
 * cover every (group, tile row, tile column) of every group exactly once,
 * each row of each group in exactly one tile row, never a group without
 * rows, at 1..256 groups with rows 0, 1, bm - 1, bm, bm + 1 and random,
 * several tile widths and bands; a malformed table (decreasing, negative,
 * past R) never places a tile outside [0, R); the arrival wait of a tile
 * names exactly the sources of its rows.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/grouped_schedule.h"

#define MAXG 256

static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One configuration: every step located, every tile seen once. */
static void check_config(const int64_t *rows, int G, int bm, int tiles_n, int band) {
  static int64_t off[MAXG + 1];
  static int32_t prefix[MAXG + 1];
  off[0] = 0;
  for (int g = 0; g < G; ++g) off[g + 1] = off[g] + rows[g];
  const int64_t total = loom__grouped_prefix(off, G, off[G], bm, tiles_n, prefix);
  int64_t want = 0;
  for (int g = 0; g < G; ++g) want += (rows[g] + bm - 1) / bm * tiles_n;
  CHECK_EQ_INT(total, want);
  /* seen[row][tn]: each row of A and each tile column exactly once */
  const int64_t R = off[G];
  unsigned char *seen = (unsigned char *)calloc((size_t)(R > 0 ? R : 1) * (size_t)tiles_n, 1);
  CHECK(seen != NULL);
  if (!seen) return;
  int bad = 0;
  for (int64_t t = 0; t < total; ++t) {
    int g = -1, tn = -1;
    int64_t row0 = -1, n = -1;
    loom__grouped_tile_at(off, prefix, G, off[G], bm, tiles_n, band, (int32_t)t, &g, &row0, &n, &tn);
    bad += g < 0 || g >= G || rows[g] == 0;                           /* a group with rows */
    bad += n < 1 || n > bm || row0 < off[g] || row0 + n > off[g + 1]; /* inside its group */
    bad += (row0 - off[g]) % bm != 0 || tn < 0 || tn >= tiles_n;
    if (bad) break;
    for (int64_t r = row0; r < row0 + n; ++r) seen[r * tiles_n + tn]++;
  }
  for (int64_t i = 0; i < R * tiles_n && !bad; ++i) bad += seen[i] != 1;
  if (bad) loom_test_fail(__FILE__, __LINE__, "G=%d bm=%d tiles_n=%d band=%d: a tile missed, repeated or misplaced", G,
                          bm, tiles_n, band);
  free(seen);
}

LOOM_TEST(grouped_schedule_covers_every_tile_once) {
  static int64_t rows[MAXG];
  uint64_t s = 0x6772706eull;
  const int Gs[] = {1, 2, 3, 8, 17, 64, 128, 256};
  const int bms[] = {64, 128};
  const int tns[] = {1, 3, 16};
  const int bands[] = {1, 4, 8};
  int configs = 0;
  for (size_t gi = 0; gi < sizeof Gs / sizeof *Gs; ++gi)
    for (size_t bi = 0; bi < 2; ++bi)
      for (size_t ti = 0; ti < 3; ++ti)
        for (size_t ba = 0; ba < 3; ++ba)
          for (int pattern = 0; pattern < 3; ++pattern) {
            const int G = Gs[gi], bm = bms[bi];
            for (int g = 0; g < G; ++g) {
              const int64_t edge[5] = {0, 1, bm - 1, bm, bm + 1};
              rows[g] = pattern == 0 ? edge[g % 5]
                        : pattern == 1 ? (int64_t)(next(&s) % (uint64_t)(3 * bm))
                                       : (g % 7 == 3 ? (int64_t)(next(&s) % 2000) : 0); /* mostly empty: skew */
            }
            check_config(rows, G, bm, tns[ti], bands[ba]);
            ++configs;
          }
  /* every group empty: no tiles at all */
  memset(rows, 0, sizeof rows);
  static int64_t off[MAXG + 1];
  static int32_t prefix[MAXG + 1];
  CHECK_EQ_INT(loom__grouped_prefix(off, 5, 0, 128, 4, prefix), 0);
  printf("    %d configurations checked\n", configs);
}

/* A table that is not non-decreasing, starts below 0 or runs past R: every
 * tile's rows stay inside [0, R) and inside its group's clamped bounds. */
LOOM_TEST(grouped_schedule_clamps_a_malformed_table) {
  uint64_t s = 0x636c616dull;
  static int64_t off[MAXG + 1];
  static int32_t prefix[MAXG + 1];
  for (int rep = 0; rep < 200; ++rep) {
    const int G = 1 + (int)(next(&s) % MAXG);
    const int64_t R = (int64_t)(next(&s) % 5000);
    for (int g = 0; g <= G; ++g) off[g] = (int64_t)(next(&s) % 12000) - 3000;
    const int bm = rep % 2 ? 64 : 128, tiles_n = 1 + rep % 5;
    const int32_t total = loom__grouped_prefix(off, G, R, bm, tiles_n, prefix);
    CHECK(total >= 0 && total <= G * ((R + bm - 1) / bm) * tiles_n); /* the launcher's bound */
    int bad = 0;
    for (int32_t t = 0; t < total && !bad; ++t) {
      int g, tn;
      int64_t row0, n, lo, hi;
      loom__grouped_tile_at(off, prefix, G, R, bm, tiles_n, 4, t, &g, &row0, &n, &tn);
      loom__grouped_bounds(off, g, R, &lo, &hi);
      bad += row0 < 0 || n < 1 || row0 + n > R || row0 < lo || row0 + n > hi || tn < 0 || tn >= tiles_n;
    }
    if (bad) loom_test_fail(__FILE__, __LINE__, "rep %d G=%d R=%lld: a tile outside [0, R) or its group", rep, G,
                            (long long)R);
  }
}

/* The arrival wait's sources (loom__grouped_arrival_next): for segments of
 * 1..64 sources (empty ones among them, a column of a strided table) and
 * every tile of bm rows of the group, exactly the sources whose non-empty
 * segment overlaps the tile's rows, in order; and those segments cover
 * every row of the tile that lies in the group. */
LOOM_TEST(grouped_arrival_waits_for_exactly_the_tiles_sources) {
  uint64_t s = 0x61727269ull;
  static int32_t table[64 * 7];
  int checked = 0;
  for (int rep = 0; rep < 400; ++rep) {
    const int S = 1 + (int)(next(&s) % 64), stride = 7, col = (int)(next(&s) % stride);
    const int64_t lo = (int64_t)(next(&s) % 1000);
    int64_t rows = 0;
    for (int q = 0; q < S; ++q) {
      const uint64_t k = next(&s) % 4;
      table[q * stride + col] = k == 0 ? 0 : k == 1 ? 1 : (int32_t)(next(&s) % 300);
      rows += table[q * stride + col];
    }
    const int bm = rep % 2 ? 64 : 128;
    for (int64_t r0 = lo; r0 < lo + rows; r0 += bm) {
      const int64_t r1 = r0 + bm < lo + rows ? r0 + bm : lo + rows;
      int want[64], nw = 0;
      int64_t at = lo;
      for (int q = 0; q < S; ++q) {
        const int64_t n = table[q * stride + col];
        if (n > 0 && at < r1 && at + n > r0) want[nw++] = q;
        at += n;
      }
      int got = 0, bad = 0;
      int64_t covered = 0;
      at = lo;
      for (int q = loom__grouped_arrival_next(table + col, stride, S, 0, &at, r0, r1); q < S;
           q = loom__grouped_arrival_next(table + col, stride, S, q + 1, &at, r0, r1)) {
        bad += got >= nw || want[got] != q;
        const int64_t b = at - table[q * stride + col], e = at; /* the segment just passed */
        covered += (e < r1 ? e : r1) - (b > r0 ? b : r0);
        ++got;
      }
      bad += got != nw || covered != r1 - r0;
      ++checked;
      if (bad) {
        loom_test_fail(__FILE__, __LINE__, "rep %d S=%d tile [%lld, %lld): %d sources, %d expected, %lld rows covered",
                       rep, S, (long long)r0, (long long)r1, got, nw, (long long)covered);
        return;
      }
    }
  }
  printf("    %d tiles checked\n", checked);
}
