/*
 * test_tp_schedule.c - host tests of the tensor-parallel ops' ordering and
 * ownership functions (src/ops/tp/tp_schedule.h) at W = 1, 2, 3, 4, 8, 16, 64
 * and many m (odd, below W, not divisible by W), and of their description
 * checks (tp_linear.c, no GPU):
 *  - shards partition [0, m) in rank order;
 *  - AG: every step of the push order is a permutation, the arrival order is
 *    its inverse, every row is delivered to every rank exactly once (own rows
 *    in place or by the local copy), every chunk signal a GEMM tile waits for
 *    (loom__tile_wait_chunk, as the kernels walk it) is one its sender sets,
 *    and the waits of a tile cover exactly its rows;
 *  - RS: every output tile row of an owner receives W partials (one per
 *    source, each routed by loom__tile_dst_range), the owner's reduction
 *    waits only on tiles some source signals to it, and the rank-shifted
 *    orders are permutations starting at the shard of rank + 1;
 *  - AR: every output row of every tile is reduced by exactly one owner and
 *    delivered to every rank exactly once, every gathered signal a rank
 *    waits for is set on it by exactly one owner, and every one set is
 *    waited for (no signal index shared by two tiles or owners).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/error.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

static const int32_t worlds[] = {1, 2, 3, 4, 8, 16, 64};
static const int64_t ms[] = {1, 2, 3, 5, 7, 8, 63, 64, 100, 127, 128, 129, 255, 1000, 1023, 4096, 8191};

LOOM_TEST(tp_shards_partition_the_rows_in_rank_order) {
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi) {
      const int32_t W = worlds[wi];
      const int64_t m = ms[mi], S = loom__tp_shard_rows(m, W);
      int64_t next = 0;
      for (int32_t p = 0; p < W; ++p) {
        const int64_t b = loom__tp_shard_begin(m, W, p), len = loom__tp_shard_len(m, W, p);
        CHECK(len >= 0 && len <= S);
        if (len > 0) CHECK_EQ_INT(b, next);
        next = b + len;
        if (W * S == m) CHECK_EQ_INT(len, S); /* equal shards when W divides m */
      }
      CHECK_EQ_INT(next, m);
    }
}

LOOM_TEST(tp_ag_push_steps_are_permutations_and_arrivals_their_inverse) {
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi) {
    const int32_t W = worlds[wi];
    int *recv = (int *)calloc((size_t)W, sizeof(int));
    for (int32_t i = 0; i + 1 < W; ++i) {
      memset(recv, 0, sizeof(int) * (size_t)W);
      for (int32_t r = 0; r < W; ++r) {
        const int32_t d = loom__ag_push_dest(r, W, i);
        CHECK(d >= 0 && d < W && d != r);
        recv[d]++;
        CHECK_EQ_INT(loom__ag_arrival_src(d, W, i), r);
      }
      for (int32_t d = 0; d < W; ++d) CHECK_EQ_INT(recv[d], 1);
    }
    /* rank d hears from d+1, d+2, ... in that order: ring order after d */
    for (int32_t d = 0; d < W; ++d)
      for (int32_t i = 0; i + 1 < W; ++i) CHECK_EQ_INT(loom__ag_arrival_src(d, W, i), (d + 1 + i) % W);
    free(recv);
  }
}

LOOM_TEST(tp_ag_every_row_arrives_once_and_every_wait_is_on_a_set_signal) {
  const int64_t chunks[] = {0, 1, 3, 16, 100, 128};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
      for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ++ci) {
        const int32_t W = worlds[wi];
        const int64_t m = ms[mi], S = loom__tp_shard_rows(m, W);
        int64_t cr = chunks[ci] > 0 ? chunks[ci] : S;
        if (cr > S) cr = S;
        const int64_t cps = loom__ag_chunks_per_shard(m, W, cr);
        /* the signals set on any receiving rank: chunk j of shard p, j < shard chunks */
        char *set = (char *)calloc((size_t)(W * cps), 1);
        int *hits = (int *)calloc((size_t)m, sizeof(int));
        for (int32_t p = 0; p < W; ++p) {
          const int64_t nch = loom__ag_shard_chunks(m, W, p, cr);
          CHECK(nch <= cps);
          for (int64_t j = 0; j < nch; ++j) {
            int64_t r0, r1;
            loom__ag_chunk(m, W, p, cr, j, &r0, &r1);
            CHECK(r0 < r1);
            for (int64_t r = r0; r < r1; ++r) hits[r]++;
            set[p * cps + j] = 1;
            /* the kernels' numbering of the chunk's rows is this signal */
            int64_t end = 0;
            CHECK_EQ_INT(loom__tile_wait_chunk(r0, m, S, cr, &end), p * cps + j);
            CHECK_EQ_INT(end, r1);
          }
        }
        for (int64_t r = 0; r < m; ++r) CHECK_EQ_INT(hits[r], 1);
        /* a tile's waits (as the GEMM walks them) are set signals, and cover its rows */
        for (int32_t tm = 0; tm < loom__ceil_div(m, 128); ++tm) {
          int64_t r1 = (int64_t)tm * 128 + 128;
          if (r1 > m) r1 = m;
          int64_t covered = 0, prev = -1;
          for (int64_t row = (int64_t)tm * 128, end = 0; row < r1; row = end) {
            const int32_t j = loom__tile_wait_chunk(row, m, S, cr, &end);
            CHECK(j >= 0 && j < W * cps && set[j]);
            CHECK(j > prev);
            CHECK(end > row);
            prev = j;
            covered += (end < r1 ? end : r1) - row;
          }
          CHECK_EQ_INT(covered, r1 - (int64_t)tm * 128);
        }
        free(set);
        free(hits);
      }
}

/* The AG copy kernel's items (loom__ag_copy_item, as the kernel walks them):
 * with first_step 0 or 1, every (step, chunk) pair is one item, chunks stay
 * inside the shard, and each destination gets each of the rank's rows once.
 * (Before this function existed the kernel computed the chunk as
 * q - step x nch, negative from the first push on: an illegal address at
 * W >= 2 that W = 1 never reached.) */
LOOM_TEST(tp_ag_copy_kernel_items_cover_every_step_and_chunk_once) {
  const int64_t chunks[] = {0, 1, 3, 16, 100};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
      for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ++ci)
        for (int32_t first = 0; first <= 1; ++first) {
          const int32_t W = worlds[wi];
          const int64_t m = ms[mi], S = loom__tp_shard_rows(m, W);
          int64_t cr = chunks[ci] > 0 ? chunks[ci] : S;
          if (cr > S) cr = S;
          for (int32_t r = 0; r < W; r += (W > 8 ? 7 : 1)) {
            const int64_t nch = loom__ag_shard_chunks(m, W, r, cr);
            if (nch == 0) continue;
            const int64_t items = (int64_t)(W - first) * nch, len = loom__tp_shard_len(m, W, r);
            char *seen = (char *)calloc((size_t)(W * nch), 1);
            int64_t *rows_to = (int64_t *)calloc((size_t)W, sizeof(int64_t));
            for (int64_t q = 0; q < items; ++q) {
              int32_t step;
              int64_t j;
              loom__ag_copy_item(q, nch, first, &step, &j);
              CHECK(step >= first && step < W);
              CHECK(j >= 0 && j < nch);
              CHECK(!seen[step * nch + j]);
              seen[step * nch + j] = 1;
              const int32_t dest = step == 0 ? r : loom__ag_push_dest(r, W, step - 1);
              int64_t r0, r1;
              loom__ag_chunk(m, W, r, cr, j, &r0, &r1);
              CHECK(r0 >= loom__tp_shard_begin(m, W, r) && r1 <= loom__tp_shard_begin(m, W, r) + len && r0 < r1);
              rows_to[dest] += r1 - r0;
            }
            for (int32_t d = 0; d < W; ++d)
              CHECK_EQ_INT(rows_to[d], d == r && first == 1 ? 0 : len);
            free(seen);
            free(rows_to);
          }
        }
}

LOOM_TEST(tp_rs_every_owned_tile_gets_w_partials_and_orders_are_permutations) {
  const int32_t bm = 128, bns[] = {128, 256};
  const int64_t ns[] = {8, 1000, 4096};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
      for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ++ni)
        for (size_t bi = 0; bi < 2; ++bi) {
          const int32_t W = worlds[wi];
          const int64_t m = ms[mi], n = ns[ni], S = loom__tp_shard_rows(m, W);
          const int32_t bn = bns[bi];
          loom_tile_order_t o;
          memset(&o, 0, sizeof o);
          o.tiles_m = (int32_t)loom__ceil_div(m, bm);
          o.tiles_n = (int32_t)loom__ceil_div(n, bn);
          o.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
          o.group = 4;
          const int32_t tiles = loom__tile_count(&o);
          /* signals[owner][src][tile]: how often source src signals tile t to owner */
          int *sig = (int *)calloc((size_t)W * (size_t)W * (size_t)tiles, sizeof(int));
          char *seen = (char *)malloc((size_t)tiles);
          for (int32_t src = 0; src < W; ++src) {
            o.row_shift = loom__tp_row_shift(m, W, src + 1, bm);
            CHECK(o.row_shift >= 0 && o.row_shift < o.tiles_m);
            memset(seen, 0, (size_t)tiles);
            for (int32_t s = 0; s < tiles; ++s) {
              const int32_t t = loom__tile_at(&o, s);
              CHECK(t >= 0 && t < tiles && !seen[t]);
              seen[t] = 1;
              if (s == 0 && loom__tp_shard_len(m, W, (src + 1) % W) > 0) /* peers' rows first */
                CHECK_EQ_INT(t / o.tiles_n, loom__tp_shard_begin(m, W, (src + 1) % W) / bm);
              int32_t d0, d1, tm = t / o.tiles_n;
              loom__tile_dst_range(tm, bm, m, S, &d0, &d1);
              CHECK(d0 >= 0 && d1 < W && d0 <= d1);
              for (int32_t d = d0; d <= d1; ++d) {
                CHECK(loom__tp_shard_len(m, W, d) > 0); /* a tile only goes to owners of rows */
                sig[((size_t)d * W + src) * tiles + t]++;
              }
            }
          }
          /* each owner's reduction waits for every source on each of its tiles */
          for (int32_t p = 0; p < W; ++p) {
            int32_t t0, t1;
            loom__rs_owner_tile_rows(m, W, p, bm, &t0, &t1);
            if (loom__tp_shard_len(m, W, p) == 0) CHECK(t1 < t0);
            for (int32_t tm = 0; tm < o.tiles_m; ++tm)
              for (int32_t tn = 0; tn < o.tiles_n; ++tn)
                for (int32_t src = 0; src < W; ++src) {
                  const int c = sig[((size_t)p * W + src) * tiles + (size_t)tm * o.tiles_n + tn];
                  CHECK_EQ_INT(c, tm >= t0 && tm <= t1 ? 1 : 0);
                }
          }
          free(sig);
          free(seen);
        }
}

/* AUTO for AllGather+GEMM is sequential exactly where a shard is shorter
 * than the smallest hooked tile (no tile row of own rows: nothing to
 * overlap), at every world size; GEMM+ReduceScatter stays fused. */
LOOM_TEST(tp_auto_is_sequential_where_no_tile_can_overlap) {
  const int ws[] = {2, 3, 4, 8, 16, 64};
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; ++i) {
    const int W = ws[i];
    const int64_t ms[] = {1, (int64_t)W, 64, 63 * (int64_t)W, 63 * (int64_t)W + 1, 64 * (int64_t)W, 64 * (int64_t)W + 1,
                          8192};
    for (size_t j = 0; j < sizeof ms / sizeof ms[0]; ++j) {
      loom_tp_desc_t d = LOOM_TP_DESC_INIT;
      d.m = ms[j], d.n = 256, d.k = 512, d.world_size = W;
      loom_tp_transfer_t t = LOOM_TP_AUTO;
      CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, W, 132, &d, &t, 1, 1), LOOM_SUCCESS);
      const int64_t S = loom__tp_shard_rows(d.m, W);
      CHECK_EQ_INT(t, S >= 64 ? LOOM_TP_COPY_ENGINE : LOOM_TP_SEQUENTIAL);
      CHECK_EQ_INT(S >= 64, d.m > 63 * (int64_t)W); /* ceil(m / W) >= 64 */
      CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, W, 132, &d, &t, 1, 1), LOOM_SUCCESS);
      /* the bulk reduction where its shape rule holds (the plan falls back where the GPU cannot) */
      CHECK_EQ_INT(t, loom__tp_bulk_shape_ok(d.m, W) ? LOOM_TP_BULK_REDUCE : LOOM_TP_SM_COPY);
      CHECK_EQ_INT(t == LOOM_TP_BULK_REDUCE, d.m == 64 * (int64_t)W || (d.m == 8192 && 8192 % W == 0));
      d.transfer = LOOM_TP_COPY_ENGINE; /* asked for: taken whatever m */
      CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, W, 132, &d, &t, 1, 1), LOOM_SUCCESS);
      CHECK_EQ_INT(t, LOOM_TP_COPY_ENGINE);
    }
  }
}

/* The plan's default AG chunk: within the shard; with the copy engine never
 * shorter than a tile row (a shorter chunk lets no tile start earlier and
 * costs a copy and a signal launch); more than one chunk per shard only
 * where the shard holds more than one tile row. */
LOOM_TEST(tp_ag_default_chunk_is_at_least_a_tile_row_with_the_copy_engine) {
  const int64_t Ss[] = {1, 7, 32, 63, 64, 65, 128, 256, 300, 1024, 4096, 100000};
  const int bms[] = {64, 128};
  const int blocks[] = {0, 4, 16};
  const int32_t ces[] = {1, 2, 4};
  for (size_t i = 0; i < sizeof Ss / sizeof Ss[0]; ++i)
    for (size_t b = 0; b < 2; ++b)
      for (size_t k = 0; k < 3; ++k)
        for (size_t e = 0; e < 3; ++e) {
          const int64_t S = Ss[i];
          const int64_t c = loom__ag_default_chunk_rows(S, bms[b], blocks[k], ces[e]);
          CHECK(c >= 1 && c <= S);
          if (blocks[k] == 0) {
            CHECK(c >= (S < bms[b] ? S : bms[b]));
            CHECK_EQ_INT(loom__ceil_div(S, c) > 1, S > bms[b] && ces[e] > 1);
            CHECK(loom__ceil_div(S, c) <= ces[e]);
          } else {
            CHECK(loom__ceil_div(S, c) <= 2 * (int64_t)blocks[k]);
          }
        }
  /* m = 64 and 512 at W = 2 (S = 32, 256), 128-row tiles, 4 chunks asked: 1 and 2 chunks */
  CHECK_EQ_INT(loom__ag_default_chunk_rows(32, 128, 0, 4), 32);
  CHECK_EQ_INT(loom__ag_default_chunk_rows(256, 128, 0, 4), 128);
  CHECK_EQ_INT(loom__ag_default_chunk_rows(4096, 128, 0, 4), 1024);
  CHECK_EQ_INT(loom__ag_default_chunk_rows(4096, 128, 0, 1), 4096);
  CHECK_EQ_INT(loom__ag_default_chunk_rows(4096, 128, 0, 0), 4096);
}

/* AUTO's shape rule: AG fused only where a shard's rows reach the GPU's
 * ridge (H100-like: ~320 rows), RS only where the GEMM has more tiles than
 * its grid; both monotone in m (once fused, fused for every larger m). */
LOOM_TEST(tp_auto_shape_rule_is_the_ridge_for_ag_and_one_wave_for_rs) {
  const double h100 = loom__tp_ridge_rows(132, 1.98e9, 9, 3.35e12), h200 = loom__tp_ridge_rows(132, 1.98e9, 9, 4.8e12);
  CHECK(h100 > 300 && h100 < 340);
  CHECK(h200 > 210 && h200 < 240);
  CHECK(loom__tp_ridge_rows(108, 1.41e9, 8, 2.0e12) > 140 && loom__tp_ridge_rows(108, 1.41e9, 8, 2.0e12) < 170);
  CHECK_EQ_INT(loom__tp_ridge_rows(132, 1.98e9, 9, 0.0) == 0.0, 1); /* unknown bandwidth: no rule */
  const int ws[] = {2, 3, 4, 8, 16, 64};
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; ++i) {
    int was_ag = 0, was_rs = 0;
    for (int64_t m = 1; m <= 65536; m = m * 3 / 2 + 1) {
      const int64_t S = loom__tp_shard_rows(m, ws[i]);
      const int ag = loom__tp_auto_fused(LOOM__TP_AG, S, 0, 0, h100);
      CHECK_EQ_INT(ag, S >= 320 ? 1 : S < 300 ? 0 : ag);
      CHECK(!was_ag || ag);
      was_ag = ag;
      const int64_t tiles = loom__ceil_div(m, 128) * loom__ceil_div(8192, 128);
      const int64_t grid = 132 - loom__tp_comm_sms(tiles, 132, 4, 16);
      const int rs = loom__tp_auto_fused(LOOM__TP_RS, S, tiles, grid, h100);
      CHECK_EQ_INT(rs, tiles > grid);
      CHECK(!was_rs || rs);
      was_rs = rs;
    }
  }
  /* the measured rows (W = 2, Llama-3-70B RS n = 8192 in 128-wide tiles): m = 64..256 one wave */
  CHECK_EQ_INT(loom__tp_auto_fused(LOOM__TP_RS, 128, 2 * 64, 128, h100), 0);
  CHECK_EQ_INT(loom__tp_auto_fused(LOOM__TP_RS, 256, 4 * 64, 128, h100), 1);
  CHECK_EQ_INT(loom__tp_auto_fused(LOOM__TP_AG, 256, 0, 0, h100), 0); /* AG m = 512 */
  CHECK_EQ_INT(loom__tp_auto_fused(LOOM__TP_AG, 512, 0, 0, h100), 1); /* AG m = 1024 */
  /* AR: never fused untuned, whatever the shape */
  CHECK_EQ_INT(loom__tp_auto_fused(LOOM__TP_AR, 8192, 64 * 24, 120, h100), 0);
  CHECK_EQ_INT(loom__tp_auto_fused(LOOM__TP_AR, 64, 1, 120, h100), 0);
}

/* AG bands: every band of the rank-shifted grouped order lies inside one
 * shard (rows of one rank only) when the shards are whole tile rows. */
LOOM_TEST(tp_ag_bands_never_mix_two_shards) {
  const int ws[] = {2, 3, 4, 8, 16, 64};
  const int groups[] = {1, 3, 8, 16};
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; ++i)
    for (int rows = 1; rows <= 40; rows += (rows < 10 ? 1 : 7))
      for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; ++gi) {
        const int W = ws[i];
        const int g = loom__ag_band_rows(rows, groups[gi]);
        CHECK(g >= 1 && g <= groups[gi] && rows % g == 0);
        for (int h = g + 1; h <= groups[gi]; ++h) CHECK(rows % h != 0); /* the largest */
        const int64_t m = (int64_t)W * rows * 128;
        for (int rank = 0; rank < W && rank < 5; ++rank) {
          loom_tile_order_t o;
          memset(&o, 0, sizeof o);
          o.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
          o.tiles_m = (int32_t)(m / 128), o.tiles_n = 3, o.group = g;
          o.row_shift = (int32_t)loom__tp_row_shift(m, W, rank, 128);
          /* steps of one band: g x tiles_n consecutive steps; their tile rows' shards agree */
          for (int32_t s0 = 0; s0 < o.tiles_m * o.tiles_n; s0 += g * o.tiles_n) {
            const int32_t first = loom__tile_at(&o, s0) / o.tiles_n / rows;
            for (int32_t s = s0; s < s0 + g * o.tiles_n; ++s) CHECK_EQ_INT(loom__tile_at(&o, s) / o.tiles_n / rows, first);
          }
          CHECK_EQ_INT(loom__tile_at(&o, 0) / o.tiles_n / rows, rank); /* the own shard first */
        }
      }
  CHECK_EQ_INT(loom__ag_band_rows(0, 16), 16); /* uneven shards: unchanged */
  CHECK_EQ_INT(loom__ag_band_rows(4, 16), 4);  /* Llama m = 1024, W = 2 */
  CHECK_EQ_INT(loom__ag_band_rows(32, 16), 16);
  CHECK_EQ_INT(loom__ag_band_rows(12, 16), 12);
  CHECK_EQ_INT(loom__ag_band_rows(7, 4), 1);
}

LOOM_TEST(tp_bulk_shapes_are_equal_shards_of_64_row_multiples) {
  for (int32_t W = 1; W <= 72; ++W)
    for (int64_t m = 1; m <= 4096; ++m) {
      const int64_t S = loom__tp_shard_rows(m, W);
      const int ok = m % W == 0 && (m / W) % 64 == 0;
      CHECK_EQ_INT(loom__tp_bulk_shape_ok(m, W), ok);
      /* what the GEMM's epilogue relies on: every 64-row chunk has one owner, inside its shard */
      if (ok)
        for (int64_t r = 0; r < m; r += 64) CHECK_EQ_INT((r + 63) / S, r / S);
    }
}

/* The bulk reduction's striped order: a permutation at any world size;
 * with equal shards of whole tile rows, every round of W steps adds into
 * every owner once, in the order rank + 1, ..., rank. */
LOOM_TEST(tp_rs_striped_order_is_a_permutation_that_takes_owners_in_turn) {
  static int32_t order[64 * 40];
  static unsigned char seen[64 * 40];
  const int32_t ws[] = {1, 2, 3, 4, 8, 16, 64};
  const int64_t ms[] = {64, 128, 320, 1024, 1000, 4096};
  for (size_t wi = 0; wi < sizeof ws / sizeof *ws; ++wi)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
      for (int32_t bm = 64; bm <= 128; bm += 64)
        for (int32_t tn = 1; tn <= 40; tn += 13) {
          const int32_t W = ws[wi];
          const int64_t m = ms[mi];
          const int32_t tm = (int32_t)loom__ceil_div(m, bm), tiles = tm * tn;
          if (tiles > 64 * 40) continue;
          for (int32_t r = 0; r < W; r += W > 4 ? W / 4 : 1) {
            memset(seen, 0, sizeof seen);
            loom__rs_striped_order(m, W, r, bm, tn, 4, order);
            for (int32_t s = 0; s < tiles; ++s) {
              CHECK(order[s] >= 0 && order[s] < tiles && !seen[order[s]]);
              if (order[s] >= 0 && order[s] < tiles) seen[order[s]] = 1;
            }
            const int64_t S = loom__tp_shard_rows(m, W);
            if (!loom__tp_bulk_shape_ok(m, W) || S % bm != 0) continue;
            for (int32_t s = 0; s < tiles; ++s) /* owner of step s: rank + 1 + s mod W */
              CHECK_EQ_INT((int32_t)((int64_t)(order[s] / tn) * bm / S), (r + 1 + s % W) % W);
          }
        }
}

/* AUTO's bulk-reduction rule: never under 1.5 waves or at one rank; more
 * communication per FLOP (smaller k, fp32 outputs, more ranks) never turns
 * a fused choice sequential; and the fitting half's measured shapes on
 * H200 (W = 2, bf16) come out as they were fitted. */
LOOM_TEST(tp_bulk_rule_waves_waste_and_communication) {
  const double r = loom__tp_flop_per_link_byte(132, 1.98e9, 9);
  CHECK(r > 2300 && r < 2450);
  CHECK_EQ_INT(loom__tp_bulk_pays(132, 132, 512, 2, 2, r), 0);  /* one wave */
  CHECK_EQ_INT(loom__tp_bulk_pays(196, 132, 512, 2, 2, r), 0);  /* 1.48 waves */
  CHECK_EQ_INT(loom__tp_bulk_pays(1024, 132, 512, 1, 2, r), 0); /* one rank */
  for (int64_t tiles = 1; tiles < 5000; tiles += 7)
    for (int64_t k = 64; k <= 65536; k *= 2)
      if (loom__tp_bulk_pays(tiles, 132, k, 2, 2, r)) {
        CHECK_EQ_INT(loom__tp_bulk_pays(tiles, 132, k / 2, 2, 2, r), 1);
        CHECK_EQ_INT(loom__tp_bulk_pays(tiles, 132, k, 2, 4, r), 1);
        CHECK_EQ_INT(loom__tp_bulk_pays(tiles, 132, k, 8, 2, r), 1);
      }
  /* fitting-half rows (tiles of the plan's tile, k per rank): seq / bulk measured */
  CHECK_EQ_INT(loom__tp_bulk_pays(608, 132, 8192, 2, 2, r), 0); /* DeepSeek-V3 o TP2 m=2048: 0.95 */
  CHECK_EQ_INT(loom__tp_bulk_pays(768, 132, 1536, 2, 2, r), 1); /* GPT-3 o TP8 m=2048: 1.28 */
  CHECK_EQ_INT(loom__tp_bulk_pays(256, 132, 6144, 2, 2, r), 1); /* GPT-3 o TP2 m=512: 1.03 */
  CHECK_EQ_INT(loom__tp_bulk_pays(152, 132, 4608, 2, 2, r), 0); /* DeepSeek-V3 fc2 TP4 m=512: 0.75 */
  CHECK_EQ_INT(loom__tp_bulk_pays(512, 132, 2048, 2, 2, r), 1); /* Llama-3-70B o TP4 m=2048: 1.22 */
}

/* AUTO's AllGather + GEMM rule: never at one rank, k < 2048 or shards under
 * 1024 rows; more rows or a longer k never turn a fused choice sequential;
 * rows of the shape set (W = 2, bf16; seq / copy engine on H200 with the
 * copy engine's one chunk per shard and signal copies) come out as chosen. */
LOOM_TEST(tp_ag_rule_shard_rows_and_k) {
  CHECK_EQ_INT(loom__tp_ag_pays(4096, 8192, 1), 0);
  CHECK_EQ_INT(loom__tp_ag_pays(4096, 1536, 2), 0); /* k < 2048 */
  CHECK_EQ_INT(loom__tp_ag_pays(512, 8192, 2), 0);  /* 512-row shards */
  for (int64_t S = 64; S <= 16384; S *= 2)
    for (int64_t k = 512; k <= 65536; k *= 2)
      for (int32_t W = 1; W <= 8; ++W)
        if (loom__tp_ag_pays(S, k, W)) {
          CHECK_EQ_INT(loom__tp_ag_pays(2 * S, k, W), 1);
          CHECK_EQ_INT(loom__tp_ag_pays(S, 2 * k, W), 1);
        }
  /* shape-set rows (fitting half unless marked): seq / copy engine */
  CHECK_EQ_INT(loom__tp_ag_pays(1024, 2048, 2), 1);  /* Qwen3-30B-A3B qkv TP8 m=2048: 1.16 (0.88 with four chunks) */
  CHECK_EQ_INT(loom__tp_ag_pays(1024, 6144, 2), 1);  /* Mixtral-8x22B qkv TP8 m=2048: 1.21 */
  CHECK_EQ_INT(loom__tp_ag_pays(1024, 4096, 2), 1);  /* held-out Llama-3-8B qkv TP8 m=2048: 1.13-1.16 */
  CHECK_EQ_INT(loom__tp_ag_pays(256, 12288, 2), 0);  /* 256-row shards: 8 of 15 fitting rows won, 0.85-1.22 */
}

LOOM_TEST(tp_desc_checks_name_the_field) {
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 1000, d.n = 256, d.k = 512, d.world_size = 2;
  loom_tp_transfer_t t = LOOM_TP_AUTO;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_COPY_ENGINE);
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SM_COPY);
  /* not reachable, or no loom kernel: AUTO falls back; a fused transfer is refused */
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 0, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SEQUENTIAL);
  d.transfer = LOOM_TP_SM_COPY;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 0), LOOM_ERR_UNSUPPORTED);
  CHECK(strstr(loom_last_error(), "LOOM_TP_SM_COPY") != NULL);
  d.transfer = LOOM_TP_COPY_ENGINE;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "transfer=LOOM_TP_COPY_ENGINE") != NULL);
  d.transfer = LOOM_TP_SM_ATOMIC;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SM_ATOMIC);
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "LOOM_TP_SM_ATOMIC") != NULL);
  /* the bulk reduction: RS only, W equal shards of 64-row multiples (m = 1000 at W = 2: 500 rows) */
  d.transfer = LOOM_TP_BULK_REDUCE;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_ERR_UNSUPPORTED);
  CHECK(strstr(loom_last_error(), "m=1000") != NULL && strstr(loom_last_error(), "64 rows") != NULL);
  d.m = 1024;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_BULK_REDUCE);
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "transfer=LOOM_TP_BULK_REDUCE") != NULL);
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 0, 1), LOOM_ERR_UNSUPPORTED); /* not reachable */
  d.m = 1000;
  d.transfer = (loom_tp_transfer_t)9;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "transfer=9") != NULL);
  d.transfer = LOOM_TP_AUTO;
  d.world_size = 3;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "world_size=3") != NULL);
  d.world_size = 2;
  d.n = 100;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "n=100") != NULL);
  d.n = 256;
  d.comm_blocks = 132;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "comm_blocks=132") != NULL);
  d.comm_blocks = 0;
  d.chunk_rows = -1;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "chunk_rows=-1") != NULL);
  d.chunk_rows = 0;
  d.struct_size = 8;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "struct_size=8") != NULL);
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, NULL, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  /* W = 1: AUTO is the GEMM alone (sequential) */
  d.struct_size = sizeof d;
  d.world_size = 1;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 1, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SEQUENTIAL);
}

LOOM_TEST(tp_comm_sms_gives_the_gemm_no_extra_wave) {
  /* 512 tiles on 132 SMs: 128 blocks run 4 waves, fewer run 5: 4 SMs for communication */
  CHECK_EQ_INT(loom__tp_comm_sms(512, 132, 4, 16), 4);
  /* 896 tiles: 7 waves from 128 blocks (896 / 128) up to 131: the most SMs that keep 7 */
  CHECK_EQ_INT(loom__tp_comm_sms(896, 132, 4, 16), 4);
  /* few tiles: the GEMM needs one wave whatever it gets: the most SMs */
  CHECK_EQ_INT(loom__tp_comm_sms(40, 132, 4, 16), 16);
  for (int64_t tiles = 1; tiles < 5000; tiles += 37)
    for (int32_t sms = 20; sms <= 148; sms += 16) {
      const int32_t b = loom__tp_comm_sms(tiles, sms, 4, 16);
      CHECK(b >= 4 && b <= 16 && b < sms);
      /* no other choice in range needs fewer waves */
      for (int32_t o = 4; o <= 16 && o < sms; ++o) CHECK(loom__ceil_div(tiles, sms - b) <= loom__ceil_div(tiles, sms - o));
    }
}

LOOM_TEST(tp_desc_activation_is_checked) {
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 64, d.n = 64, d.k = 64, d.world_size = 2;
  loom_tp_transfer_t t;
  d.activation = LOOM_ACT_GELU_TANH;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "activation=2") != NULL);
  d.activation = (loom_activation_t)7;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "activation=7") != NULL);
}

LOOM_TEST(tp_tune_key_and_value_round_trip) {
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 8192, d.n = 24576, d.k = 12288, d.b_layout = LOOM_B_NK, d.has_bias = 1, d.world_size = 2;
  char key[160], v[160];
  CHECK(loom__tp_tune_key(LOOM__TP_AG, &d, 132, key, sizeof key));
  CHECK(strcmp(key, "tp ag_gemm W2 132sm m8192 n24576 k12288 bf16->bf16 nk bias1 act0") == 0);
  CHECK(loom__tp_tune_key(LOOM__TP_RS, &d, 132, key, sizeof key));
  CHECK(strstr(key, "tp gemm_rs W2") == key);
  CHECK(!loom__tp_tune_key(LOOM__TP_AG, &d, 132, key, 16)); /* too long for the buffer */
  const loom_tp_choice_t ce = {LOOM_TP_COPY_ENGINE, 512, 0, LOOM_TP_GEMM_AUTO};
  loom__tp_tune_format(&ce, v, sizeof v);
  CHECK(strcmp(v, "transfer=2 chunk=512 blocks=0 gemm=0") == 0);
  loom_tp_choice_t ch = {LOOM_TP_AUTO, -1, -1, LOOM_TP_GEMM_LOOM};
  CHECK_RESULT(loom__tp_tune_parse(v, &ch), LOOM_SUCCESS);
  CHECK_EQ_INT(ch.transfer, LOOM_TP_COPY_ENGINE);
  CHECK_EQ_INT(ch.chunk_rows, 512);
  CHECK_EQ_INT(ch.comm_blocks, 0);
  CHECK_EQ_INT(ch.gemm, LOOM_TP_GEMM_AUTO);
  const loom_tp_choice_t seq = {LOOM_TP_SEQUENTIAL, 0, 0, LOOM_TP_GEMM_CUBLASLT};
  loom__tp_tune_format(&seq, v, sizeof v);
  CHECK_RESULT(loom__tp_tune_parse(v, &ch), LOOM_SUCCESS);
  CHECK_EQ_INT(ch.transfer, LOOM_TP_SEQUENTIAL);
  CHECK_EQ_INT(ch.gemm, LOOM_TP_GEMM_CUBLASLT);
  /* an entry of an older file (no gemm=): the engine is AUTO */
  CHECK_RESULT(loom__tp_tune_parse("transfer=1 chunk=0 blocks=0", &ch), LOOM_SUCCESS);
  CHECK_EQ_INT(ch.transfer, LOOM_TP_SEQUENTIAL);
  CHECK_EQ_INT(ch.gemm, LOOM_TP_GEMM_AUTO);
  const char *bad[] = {"transfer=0 chunk=1 blocks=0", "transfer=7 chunk=1 blocks=0", "transfer=2 chunk=-1 blocks=0",
                       "transfer=2 chunk=1", "transfer=2 chunk=1 blocks=0 x", "transfer=1 chunk=0 blocks=0 gemm=3",
                       "transfer=1 chunk=0 blocks=0 gemm=-1", "transfer=1 chunk=0 blocks=0 gemm=1 x",
                       "transfer=1 chunk=0 blocks=0 gemm=", "bn=128", ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
    CHECK_RESULT(loom__tp_tune_parse(bad[i], &ch), LOOM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(loom_last_error(), bad[i]) != NULL);
  }
}

/* The decomposed paths' schedules at any world size: AG's steps pair every
 * send with the receive of the same step and bring every shard to every
 * rank once; RS's ring sums each owner's chunk at every rank once, in the
 * order owner + 1, owner + 2, .., owner, and what a rank sends at step s is
 * the chunk its successor computes at step s + 1. */
LOOM_TEST(tp_decomposed_schedules_pair_every_step_at_any_world_size) {
  for (int32_t W = 1; W <= 72; ++W) {
    for (int32_t r = 0; r < W; ++r) {
      unsigned char got[72] = {0};
      got[r] = 1; /* the own shard */
      for (int32_t i = 1; i < W; ++i) {
        const int32_t to = loom__dec_ag_to(r, W, i), from = loom__dec_ag_from(r, W, i);
        CHECK(to >= 0 && to < W && from >= 0 && from < W && to != r && from != r);
        CHECK_EQ_INT(loom__dec_ag_from(to, W, i), r); /* the receiver of this send receives from r */
        CHECK_EQ_INT(loom__dec_ag_to(from, W, i), r);
        got[from]++;
      }
      for (int32_t p = 0; p < W; ++p) CHECK_EQ_INT(got[p], 1);
    }
    for (int32_t p = 0; p < W; ++p) { /* owner p's chunk: the ranks that sum it, step by step */
      int32_t at = -1;
      for (int32_t s = 0; s < W; ++s) {
        int32_t n = 0;
        for (int32_t r = 0; r < W; ++r)
          if (loom__dec_rs_chunk(r, W, s) == p) at = r, ++n;
        CHECK_EQ_INT(n, 1);
        CHECK_EQ_INT(at, (p + 1 + s) % W);
      }
      CHECK_EQ_INT(at, p); /* the last step's is the owner's own */
    }
    for (int32_t r = 0; r < W; ++r)
      for (int32_t s = 0; s + 1 < W; ++s)
        CHECK_EQ_INT(loom__dec_rs_chunk((r + 1) % W, W, s + 1), loom__dec_rs_chunk(r, W, s));
  }
}

/* The decomposed path: offered for AG and RS wherever NCCL runs (no peer
 * memory, no hooked GEMM), refused by name for GEMM+AllReduce; it is not a
 * fused transfer, runs the sequential path's GEMM engine, and round-trips
 * through the tuning cache. */
LOOM_TEST(tp_decomposed_is_offered_for_ag_and_rs_and_refused_for_ar) {
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 1000, d.n = 256, d.k = 512, d.world_size = 4, d.transfer = LOOM_TP_DECOMPOSED;
  for (int reach = 0; reach < 2; ++reach)
    for (int hooks = 0; hooks < 2; ++hooks) {
      loom_tp_transfer_t t = LOOM_TP_AUTO;
      CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 4, 132, &d, &t, reach, hooks), LOOM_SUCCESS);
      CHECK_EQ_INT(t, LOOM_TP_DECOMPOSED);
      CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 4, 132, &d, &t, reach, hooks), LOOM_SUCCESS);
      CHECK_EQ_INT(t, LOOM_TP_DECOMPOSED);
    }
  loom_tp_transfer_t t = LOOM_TP_AUTO;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 4, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "transfer=LOOM_TP_DECOMPOSED") != NULL &&
        strstr(loom_last_error(), "GEMM+AllReduce") != NULL);
  /* only the hooked transfers are fused */
  const loom_tp_transfer_t all[7] = {LOOM_TP_AUTO,    LOOM_TP_SEQUENTIAL, LOOM_TP_COPY_ENGINE, LOOM_TP_SM_COPY,
                                     LOOM_TP_SM_ATOMIC, LOOM_TP_BULK_REDUCE, LOOM_TP_DECOMPOSED};
  const int fused[7] = {0, 0, 1, 1, 1, 1, 0};
  for (int i = 0; i < 7; ++i) CHECK_EQ_INT(loom__tp_fused(all[i]), fused[i]);
  CHECK(strcmp(loom__tp_transfer_name(LOOM_TP_DECOMPOSED), "LOOM_TP_DECOMPOSED") == 0);
  /* its GEMM: the sequential path's rule */
  CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_DECOMPOSED), LOOM_TP_GEMM_CUBLASLT);
  d.c_type = LOOM_FP16; /* bf16 -> fp16: not cuBLASLt's */
  CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_DECOMPOSED), LOOM_TP_GEMM_LOOM);
  d.c_type = LOOM_BF16, d.sequential_gemm = LOOM_TP_GEMM_LOOM;
  CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_DECOMPOSED), LOOM_TP_GEMM_LOOM);
  /* a tuned choice of it applies where NCCL runs, the fused ones not */
  const loom_tp_choice_t dec = {LOOM_TP_DECOMPOSED, 0, 0, LOOM_TP_GEMM_CUBLASLT};
  d.sequential_gemm = LOOM_TP_GEMM_AUTO, d.transfer = LOOM_TP_AUTO;
  CHECK_RESULT(loom__tp_check_choice("f", LOOM__TP_AG, 4, 132, &d, &dec, 0, 0), LOOM_SUCCESS);
  const loom_tp_choice_t ce = {LOOM_TP_COPY_ENGINE, 0, 0, LOOM_TP_GEMM_AUTO};
  CHECK_RESULT(loom__tp_check_choice("f", LOOM__TP_AG, 4, 132, &d, &ce, 0, 0), LOOM_ERR_UNSUPPORTED);
  CHECK_RESULT(loom__tp_check_choice("f", LOOM__TP_AR, 4, 132, &d, &dec, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  char v[160];
  loom__tp_tune_format(&dec, v, sizeof v);
  CHECK(strcmp(v, "transfer=6 chunk=0 blocks=0 gemm=2") == 0);
  loom_tp_choice_t ch = {LOOM_TP_AUTO, -1, -1, LOOM_TP_GEMM_AUTO};
  CHECK_RESULT(loom__tp_tune_parse(v, &ch), LOOM_SUCCESS);
  CHECK_EQ_INT(ch.transfer, LOOM_TP_DECOMPOSED);
  CHECK_EQ_INT(ch.gemm, LOOM_TP_GEMM_CUBLASLT);
  /* AUTO never resolves to it untuned (it is the tuner's to choose) */
  for (int64_t m = 64; m <= 8192; m *= 2) {
    d.m = m;
    CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 4, 132, &d, &t, 1, 1), LOOM_SUCCESS);
    CHECK(t != LOOM_TP_DECOMPOSED);
  }
}

/* The sequential path's GEMM: cuBLASLt by default where it takes the
 * dtypes, loom_gemm where it does not or where asked; the fused transfers
 * always run loom's kernel; an engine cuBLASLt cannot be is refused by
 * name, and so is an unknown one. */
LOOM_TEST(tp_sequential_gemm_resolution_and_refusals) {
  const loom_dtype_t ab[2] = {LOOM_BF16, LOOM_FP16}, cs[3] = {LOOM_BF16, LOOM_FP16, LOOM_FP32};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      loom_tp_desc_t d = LOOM_TP_DESC_INIT;
      d.m = 300, d.n = 256, d.k = 128, d.ab_type = ab[i], d.c_type = cs[j], d.world_size = 2;
      const int takes = cs[j] == ab[i] || cs[j] == LOOM_FP32;
      CHECK_EQ_INT(loom__tp_cublaslt_takes(ab[i], cs[j]), takes);
      CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_SEQUENTIAL), takes ? LOOM_TP_GEMM_CUBLASLT : LOOM_TP_GEMM_LOOM);
      /* the copy engine's shard GEMMs (LOOM_TP_CE_SHARD_GEMMS) run the sequential path's engine */
      CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_COPY_ENGINE),
                   loom__tp_ce_shard_gemms(LOOM_TP_COPY_ENGINE) ? loom__tp_resolve_gemm(&d, LOOM_TP_SEQUENTIAL)
                                                                : LOOM_TP_GEMM_LOOM);
      CHECK_EQ_INT(loom__tp_ce_shard_gemms(LOOM_TP_SM_COPY), 0);
      CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_SM_COPY), LOOM_TP_GEMM_LOOM);
      d.sequential_gemm = LOOM_TP_GEMM_LOOM;
      CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_SEQUENTIAL), LOOM_TP_GEMM_LOOM);
      loom_tp_transfer_t t = LOOM_TP_AUTO;
      CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
      d.sequential_gemm = LOOM_TP_GEMM_CUBLASLT;
      if (takes) {
        CHECK_EQ_INT(loom__tp_resolve_gemm(&d, LOOM_TP_SEQUENTIAL), LOOM_TP_GEMM_CUBLASLT);
        CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
      } else {
        CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_RS, 2, 132, &d, &t, 1, 1), LOOM_ERR_UNSUPPORTED);
        CHECK(strstr(loom_last_error(), "desc->sequential_gemm=LOOM_TP_GEMM_CUBLASLT") != NULL);
      }
      d.sequential_gemm = (loom_tp_gemm_t)3;
      CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AG, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
      CHECK(strstr(loom_last_error(), "desc->sequential_gemm=3") != NULL);
    }
}

LOOM_TEST(tp_ar_every_row_reaches_every_rank_once_and_every_gathered_wait_is_set) {
  const int32_t bms[] = {64, 128};
  const int32_t tns[] = {1, 3};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
      for (size_t bi = 0; bi < 2; ++bi)
        for (size_t ni = 0; ni < 2; ++ni) {
          const int32_t W = worlds[wi], bm = bms[bi], tiles_n = tns[ni];
          const int64_t m = ms[mi];
          const int32_t tiles_m = (int32_t)loom__ceil_div(m, bm);
          const int64_t tiles = (int64_t)tiles_m * tiles_n, nsig = (int64_t)W * tiles;
          /* set[d][sig]: how often a gathered signal is set on rank d;
           * hits[d][row][tn]: how often row `row` of column tile tn lands in d's out */
          int *set = (int *)calloc((size_t)W * (size_t)nsig, sizeof(int));
          int *hits = (int *)calloc((size_t)W * (size_t)m * (size_t)tiles_n, sizeof(int));
          char *owns = (char *)calloc((size_t)W * (size_t)tiles_m, 1);
          for (int32_t o = 0; o < W; ++o) {
            int32_t t0, t1;
            loom__rs_owner_tile_rows(m, W, o, bm, &t0, &t1);
            if (loom__tp_shard_len(m, W, o) == 0) {
              CHECK(t1 < t0);
              continue;
            }
            for (int32_t tm = t0; tm <= t1; ++tm) {
              owns[(size_t)o * tiles_m + tm] = 1;
              int64_t r0, r1;
              loom__rs_tile_rows(m, W, o, bm, tm, &r0, &r1);
              CHECK(r1 > r0 && r0 >= (int64_t)tm * bm && r1 <= (int64_t)(tm + 1) * bm && r1 <= m);
              for (int32_t tn = 0; tn < tiles_n; ++tn) {
                const int64_t t = (int64_t)tm * tiles_n + tn;
                for (int32_t d = 0; d < W; ++d) {
                  for (int64_t row = r0; row < r1; ++row) hits[((size_t)d * m + row) * tiles_n + tn]++;
                  if (d == o) continue;
                  const uint32_t sig = loom__ar_gathered_signal(o, tiles, t);
                  CHECK((int64_t)sig < nsig);
                  set[(size_t)d * nsig + sig]++;
                }
              }
            }
          }
          /* every row of every column tile on every rank exactly once */
          for (size_t i = 0; i < (size_t)W * (size_t)m * (size_t)tiles_n; ++i)
            if (hits[i] != 1) {
              CHECK_EQ_INT(hits[i], 1);
              break;
            }
          /* each rank's waits: every tile, each owner of its rows but itself */
          for (int32_t d = 0; d < W; ++d) {
            int64_t waited = 0, wset = 0;
            for (int64_t t = 0; t < tiles; ++t) {
              const int32_t tm = (int32_t)(t / tiles_n);
              int32_t p0, p1;
              loom__ar_tile_owners(m, W, bm, tm, &p0, &p1);
              CHECK(p0 >= 0 && p1 < W && p0 <= p1);
              for (int32_t o = 0; o < W; ++o) CHECK_EQ_INT(o >= p0 && o <= p1, owns[(size_t)o * tiles_m + tm]);
              for (int32_t o = p0; o <= p1; ++o) {
                if (o == d) continue;
                ++waited;
                CHECK_EQ_INT(set[(size_t)d * nsig + loom__ar_gathered_signal(o, tiles, t)], 1);
              }
            }
            for (int64_t sg = 0; sg < nsig; ++sg) {
              CHECK(set[(size_t)d * nsig + sg] <= 1);
              wset += set[(size_t)d * nsig + sg];
            }
            CHECK_EQ_INT(waited, wset); /* no signal set that nobody waits for */
          }
          free(set), free(hits), free(owns);
        }
}

LOOM_TEST(tp_ar_desc_checks_name_the_field) {
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 1000, d.n = 256, d.k = 512, d.world_size = 2;
  loom_tp_transfer_t t = LOOM_TP_AUTO;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SM_COPY);
  /* no loom kernel for the shape: AUTO is sequential (loom_gemm + loom_allreduce) */
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 0), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SEQUENTIAL);
  /* W = 1: AUTO is sequential; SM_COPY still runs the fused protocol */
  d.world_size = 1;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 1, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SEQUENTIAL);
  d.transfer = LOOM_TP_SM_COPY;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 1, 132, &d, &t, 1, 1), LOOM_SUCCESS);
  CHECK_EQ_INT(t, LOOM_TP_SM_COPY);
  d.world_size = 2;
  /* the bias and the activation come through the call's epilogue */
  d.transfer = LOOM_TP_AUTO;
  d.has_bias = 1;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "has_bias=1") != NULL && strstr(loom_last_error(), "epilogue") != NULL);
  d.has_bias = 0;
  d.activation = LOOM_ACT_GELU_ERF;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "activation=3") != NULL && strstr(loom_last_error(), "epilogue") != NULL);
  d.activation = LOOM_ACT_NONE;
  d.transfer = LOOM_TP_COPY_ENGINE;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "transfer=LOOM_TP_COPY_ENGINE") != NULL &&
        strstr(loom_last_error(), "GEMM+AllReduce") != NULL);
  d.transfer = LOOM_TP_SM_ATOMIC;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "transfer=LOOM_TP_SM_ATOMIC") != NULL &&
        strstr(loom_last_error(), "GEMM+AllReduce") != NULL);
  /* not one NVLink domain: refused whatever the transfer (even sequential: loom_allreduce) */
  d.transfer = LOOM_TP_SEQUENTIAL;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 0, 1), LOOM_ERR_UNSUPPORTED);
  CHECK(strstr(loom_last_error(), "load/store reachable") != NULL);
  d.transfer = LOOM_TP_SM_COPY;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 0), LOOM_ERR_UNSUPPORTED);
  CHECK(strstr(loom_last_error(), "LOOM_TP_SM_COPY") != NULL);
  /* the GEMM fields as loom_gemm checks them */
  d.transfer = LOOM_TP_AUTO;
  d.k = 100;
  CHECK_RESULT(loom__tp_check_desc("f", LOOM__TP_AR, 2, 132, &d, &t, 1, 1), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "k=100") != NULL);
  /* its tuning key and plan name */
  d.k = 512;
  char key[160];
  CHECK(loom__tp_tune_key(LOOM__TP_AR, &d, 132, key, sizeof key));
  CHECK(strcmp(key, "tp gemm_ar W2 132sm m1000 n256 k512 bf16->bf16 kn bias0 act0") == 0);
  CHECK(strcmp(loom__tp_kind_op(LOOM__TP_AR), "gemm_ar") == 0);
}
