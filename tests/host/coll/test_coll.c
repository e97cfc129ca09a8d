/*
 * test_coll.c - host tests of loom's collectives without a GPU:
 *  - ownership (src/ops/coll/coll_schedule.h) at W = 1, 2, 3, 4, 8, 16, 64 and
 *    counts 1 .. large, odd, below W, not divisible by W or by 8, flat and
 *    in whole rows: every element has exactly one owner, slices start on a
 *    unit boundary (vectors aligned, rows whole), chunks partition each
 *    slice within the per-slice chunk bound;
 *  - orders: every gather step is a permutation of the ranks, every rank
 *    visits every peer once; the kernel's gather items (any grid) fetch each
 *    (peer, chunk) with data exactly once and wait only on reduced-chunk
 *    signals their owner's reduction sets; one-shot chunk orders are
 *    permutations that start in different places on different ranks;
 *  - description checks naming the field, the AUTO algorithm by size, and
 *    plan creation on a test comm;
 *  - the CPU references (src/ref/coll_ref.c): sums, the epilogue, the
 *    dropout mask, RMSNorm and LayerNorm, ReduceScatter as AllReduce's
 *    slice, AllGather exact.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/pointwise.h"
#include "ops/coll/coll.h"
#include "ops/coll/coll_schedule.h"
#include "ref/coll_ref.h"
#include "ref/ref.h"
#include "testing/hooks.h"

static const int32_t worlds[] = {1, 2, 3, 4, 8, 16, 64};
static const int64_t counts[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100, 127, 1000, 1023, 4096, 8191, 65537, 1000003};
static const int64_t colss[] = {0, 1, 3, 8, 13, 100, 1024};

LOOM_TEST(coll_slices_own_every_element_once_on_unit_boundaries) {
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ++ci)
      for (size_t ki = 0; ki < sizeof colss / sizeof *colss; ++ki) {
        const int32_t W = worlds[wi];
        const int64_t cols = colss[ki];
        const int64_t count = cols > 0 ? counts[ci] * cols : counts[ci];
        if (count > 4000000) continue;
        const int64_t unit = loom__coll_unit(cols), S = loom__coll_slice_elems(count, W, unit);
        CHECK(S % unit == 0 && S >= unit);
        int64_t next = 0, owned = 0;
        for (int32_t p = 0; p < W; ++p) {
          int64_t b, len;
          loom__coll_slice(count, W, p, unit, &b, &len);
          CHECK(len >= 0 && len <= S);
          CHECK_EQ_INT(b, next); /* in rank order, no gap, no overlap */
          if (len > 0) CHECK(b % unit == 0);
          if (cols > 0) CHECK(len % cols == 0); /* whole rows */
          /* only the last non-empty slice may be short of S */
          if (len > 0 && b + len < count) CHECK_EQ_INT(len, S);
          next = b + len;
          owned += len;
        }
        CHECK_EQ_INT(next, count);
        CHECK_EQ_INT(owned, count);
        /* the first rank always owns something; slices are balanced to a unit */
        int64_t b0, l0;
        loom__coll_slice(count, W, 0, unit, &b0, &l0);
        CHECK(l0 > 0);
        CHECK(S - unit < loom__ceil_div(count, W));
      }
}

/* fp32 vectors as two quads: every quad 0 .. 2 nv - 1 taken once, a warp's
 * 32 vectors on 64 contiguous quads (loom__coll_quads). */
LOOM_TEST(coll_quads_cover_every_quad_once_and_keep_warps_contiguous) {
  static const int64_t counts[] = {1, 2, 31, 32, 33, 63, 64, 65, 100, 1000, 4097};
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ++ci) {
    const int64_t nv = counts[ci];
    unsigned char *seen = (unsigned char *)calloc((size_t)(2 * nv), 1);
    int ok = seen != NULL;
    for (int64_t v = 0; ok && v < nv; ++v) {
      int64_t q0, q1;
      loom__coll_quads(v, nv, &q0, &q1);
      if (q0 < 0 || q1 < 0 || q0 >= 2 * nv || q1 >= 2 * nv || q0 == q1 || seen[q0] || seen[q1]) ok = 0;
      else seen[q0] = seen[q1] = 1;
      /* lane l of a whole tile: quads l and 32 + l of it */
      if (ok && (v | 31) < nv && (q0 != (v >> 5) * 64 + (v & 31) || q1 != q0 + 32)) ok = 0;
    }
    CHECK(ok);
    free(seen);
  }
}

LOOM_TEST(coll_chunks_partition_each_slice) {
  const int32_t grids[] = {1, 2, 7, 132};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ++ci)
      for (size_t ki = 0; ki < 4; ++ki)
        for (size_t gi = 0; gi < sizeof grids / sizeof *grids; ++gi) {
          const int32_t W = worlds[wi];
          const int64_t cols = colss[ki], count = cols > 0 ? counts[ci] * cols : counts[ci];
          const int64_t unit = loom__coll_unit(cols), S = loom__coll_slice_elems(count, W, unit);
          for (int64_t maxb = 64; maxb <= ((int64_t)256 << 10); maxb *= 64) {
            const int64_t C = loom__coll_chunk_elems(S, unit, grids[gi], 2, maxb);
            CHECK(C % unit == 0 && C >= unit);
            CHECK(C * 2 <= maxb || C == unit);
            const int64_t nch = loom__coll_chunks(S, C);
            for (int32_t p = 0; p < W; ++p) {
              int64_t b, len;
              loom__coll_slice(count, W, p, unit, &b, &len);
              const int64_t n = loom__coll_chunks(len, C);
              CHECK(n <= nch);
              int64_t next = b;
              for (int64_t j = 0; j < nch; ++j) {
                int64_t cb, cl;
                loom__coll_chunk(b, len, C, j, &cb, &cl);
                if (j < n) {
                  CHECK(cl > 0);
                  CHECK_EQ_INT(cb, next);
                  CHECK(cb % unit == 0);
                  next = cb + cl;
                } else {
                  CHECK_EQ_INT(cl, 0);
                }
              }
              CHECK_EQ_INT(next, b + len);
            }
          }
        }
}

LOOM_TEST(coll_gather_steps_are_permutations_and_visit_every_peer_once) {
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi) {
    const int32_t W = worlds[wi];
    int *seen = (int *)calloc((size_t)W, sizeof(int));
    for (int32_t i = 0; i < W; ++i) {
      memset(seen, 0, sizeof(int) * (size_t)W);
      for (int32_t r = 0; r < W; ++r) {
        const int32_t q = loom__coll_peer_at(r, W, i);
        CHECK(q >= 0 && q < W);
        CHECK((q == r) == (i == W - 1)); /* peers first, itself last */
        seen[q]++;
      }
      for (int32_t q = 0; q < W; ++q) CHECK_EQ_INT(seen[q], 1);
    }
    for (int32_t r = 0; r < W; ++r) {
      memset(seen, 0, sizeof(int) * (size_t)W);
      for (int32_t i = 0; i < W; ++i) seen[loom__coll_peer_at(r, W, i)]++;
      for (int32_t q = 0; q < W; ++q) CHECK_EQ_INT(seen[q], 1);
    }
    free(seen);
  }
}

/* The kernel's loops, replayed on the host: two-shot AllReduce and AllGather
 * gather items over any grid fetch every (peer, chunk) with data once, and
 * every reduced-chunk signal a rank waits for is set by its owner. */
LOOM_TEST(coll_gather_items_fetch_every_chunk_once_and_wait_on_set_signals) {
  const int32_t grids[] = {1, 3, 16, 132};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ++ci)
      for (size_t ki = 0; ki < 3; ++ki)
        for (size_t gi = 0; gi < sizeof grids / sizeof *grids; ++gi) {
          const int32_t W = worlds[wi], G = grids[gi];
          const int64_t cols = colss[ki], count = cols > 0 ? counts[ci] * cols : counts[ci];
          if (count > 200000) continue;
          const int64_t unit = loom__coll_unit(cols), S = loom__coll_slice_elems(count, W, unit);
          const int64_t C = loom__coll_chunk_elems(S, unit, G, 2, (int64_t)4 << 10), nch = loom__coll_chunks(S, C);
          /* set[q * nch + j]: owner q's reduction sets reduced[j] */
          char *set = (char *)calloc((size_t)(W * nch), 1);
          for (int32_t q = 0; q < W; ++q) {
            int64_t b, len;
            loom__coll_slice(count, W, q, unit, &b, &len);
            const int64_t n = loom__coll_chunks(len, C);
            for (int32_t blk = 0; blk < G; ++blk)
              for (int64_t it = blk; it < n; it += G) set[q * nch + it] = 1;
          }
          int *hits = (int *)calloc((size_t)count, sizeof(int));
          for (int32_t r = 0; r < W && W <= 16; ++r) {
            memset(hits, 0, sizeof(int) * (size_t)count);
            int64_t mb, ml;
            loom__coll_slice(count, W, r, unit, &mb, &ml);
            for (int64_t i = mb; i < mb + ml; ++i) hits[i]++; /* the reduction writes its own slice */
            for (int32_t blk = 0; blk < G; ++blk)
              for (int64_t t = blk; t < (int64_t)(W - 1) * nch; t += G) {
                int32_t step;
                int64_t j, qb, ql, cb, cl;
                loom__coll_gather_item(t, nch, &step, &j);
                CHECK(step >= 0 && step < W - 1 && j >= 0 && j < nch);
                const int32_t q = loom__coll_peer_at(r, W, step);
                CHECK(q != r);
                loom__coll_slice(count, W, q, unit, &qb, &ql);
                loom__coll_chunk(qb, ql, C, j, &cb, &cl);
                if (cl == 0) continue;
                CHECK(set[q * nch + j]); /* the wait is on a signal its owner sets */
                for (int64_t i = cb; i < cb + cl; ++i) hits[i]++;
              }
            for (int64_t i = 0; i < count; ++i)
              if (hits[i] != 1) {
                loom_test_fail(__FILE__, __LINE__, "W=%d count=%lld cols=%lld G=%d rank %d: element %lld written %d times", W,
                               (long long)count, (long long)cols, G, r, (long long)i, hits[i]);
                break;
              }
          }
          free(hits);
          free(set);
        }
}

LOOM_TEST(coll_one_shot_orders_are_permutations_starting_apart) {
  const int64_t nchs[] = {1, 2, 3, 5, 64, 100, 1000};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t ni = 0; ni < sizeof nchs / sizeof *nchs; ++ni) {
      const int32_t W = worlds[wi];
      const int64_t nch = nchs[ni];
      char *seen = (char *)malloc((size_t)nch);
      for (int32_t r = 0; r < W; ++r) {
        memset(seen, 0, (size_t)nch);
        for (int64_t q = 0; q < nch; ++q) {
          const int64_t j = loom__coll_one_shot_chunk(r, W, nch, q);
          CHECK(j >= 0 && j < nch && !seen[j]);
          seen[j] = 1;
        }
        /* rank r starts at r nch / W: distinct starts when there are enough chunks */
        if (nch >= W && r > 0) CHECK(loom__coll_one_shot_chunk(r, W, nch, 0) != loom__coll_one_shot_chunk(r - 1, W, nch, 0));
      }
      free(seen);
    }
}

LOOM_TEST(coll_grid_is_bounded_by_the_sms) {
  CHECK_EQ_INT(loom__coll_grid(1, 132), 1);
  CHECK_EQ_INT(loom__coll_grid(16 << 10, 132), 1);
  CHECK_EQ_INT(loom__coll_grid((16 << 10) + 1, 132), 2);
  CHECK_EQ_INT(loom__coll_grid(256 << 10, 132), 16);
  CHECK_EQ_INT(loom__coll_grid((int64_t)1 << 30, 132), 132);
  CHECK_EQ_INT(loom__coll_grid((int64_t)1 << 30, 1), 1);
}

LOOM_TEST(coll_desc_checks_name_the_field_and_auto_picks_by_size) {
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 1000, d.world_size = 2;
  loom_coll_algo_t a = LOOM_COLL_AUTO;
  const loom_coll_thresholds_t t0 = {0, 0, 256 << 10};
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_ONE_SHOT);
  d.count = (256 << 10) / 2; /* exactly the threshold: one-shot */
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_ONE_SHOT);
  d.count += 1;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_TWO_SHOT);
  d.algo = LOOM_COLL_ONE_SHOT;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_ONE_SHOT);
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_RS, 2, 132, &t0, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->algo=LOOM_COLL_ONE_SHOT");
  d.algo = (loom_coll_algo_t)7;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->algo=7");
  d.algo = LOOM_COLL_AUTO;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 4, 132, &t0, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->world_size=2");
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, NULL, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc=NULL");
#define BAD(field, value, text)                                                                    \
  do {                                                                                             \
    loom_coll_desc_t b = d;                                                                        \
    b.field = value;                                                                               \
    CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &b, &a), LOOM_ERR_INVALID_ARGUMENT); \
    CHECK_MSG(text);                                                                               \
  } while (0)
  BAD(struct_size, 8, "desc->struct_size=8");
  BAD(count, 0, "desc->count=0");
  BAD(count, -5, "desc->count=-5");
  BAD(dtype, (loom_dtype_t)9, "desc->dtype=9");
  BAD(out_type, (loom_dtype_t)9, "desc->out_type=9");
  BAD(cols, 2, "desc->cols=2"); /* 2 does not divide 131073 */
  BAD(cols, -1, "desc->cols=-1");
  BAD(norm, LOOM_NORM_RMS, "needs rows");
  BAD(norm, (loom_norm_t)5, "desc->norm=5");
  BAD(blocks, 133, "desc->blocks=133");
  BAD(blocks, -1, "desc->blocks=-1");
#undef BAD
  d.count = 4096, d.cols = 64, d.norm = LOOM_NORM_LAYER;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_SUCCESS);
  d.norm_eps = 0.f;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->norm_eps=0");
  d.norm_eps = 1e-5f;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AG, 2, 132, &t0, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("AllGather has no epilogue");
  d.count = 65536 * 2, d.cols = 65536;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->cols=65536");
  d.norm = LOOM_NORM_NONE, d.out_type = LOOM_FP32;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_SUCCESS);
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AG, 2, 132, &t0, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->out_type=0");
  d.world_size = 65;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 65, 132, &t0, &d, &a), LOOM_ERR_UNSUPPORTED);
}

LOOM_TEST(coll_ll_slots_are_a_permutation_and_regions_tile_the_buffer) {
  const int worlds[] = {2, 3, 4, 8, 16, 64};
  const int64_t counts[] = {1, 7, 8, 9, 1000, 131072};
  for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; ++wi) {
    const int W = worlds[wi];
    /* for each receiver, the W-1 senders take slots 0 .. W-2 once each */
    for (int q = 0; q < W; ++q) {
      uint64_t seen = 0;
      for (int s = 0; s < W; ++s) {
        if (s == q) continue;
        const int slot = loom__coll_push_slot(s, q, W);
        CHECK(slot >= 0 && slot < W - 1);
        CHECK((seen >> slot & 1u) == 0);
        seen |= (uint64_t)1 << slot;
      }
      CHECK_EQ_INT(__builtin_popcountll(seen), W - 1);
    }
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ++ci)
      for (int64_t es = 2; es <= 4; es += 2) {
        const int64_t n = counts[ci], sl = loom__coll_ll_slot_lines(n, es);
        /* a slot carries every element's bytes: 8-byte lines of one 4-byte word */
        const int64_t nl = loom__coll_ll_group_lines(es), groups = (n + 7) / 8;
        CHECK(sl * 4 >= n * es && sl % nl == 0);
        CHECK_EQ_INT(sl / nl, (groups + 31) / 32 * 32); /* whole tiles of 32 groups */
        /* every group's lines inside the slot, none shared; a line pair (k, k + 1) adjacent */
        {
          unsigned char *used = (unsigned char *)calloc((size_t)sl, 1);
          int ok = used != NULL;
          for (int64_t g = 0; ok && g < groups; ++g)
            for (int64_t k = 0; k < nl; ++k) {
              const int64_t l = loom__coll_ll_line(g, k, nl);
              if (l < 0 || l >= sl || used[l] || (k % 2 == 1 && l != loom__coll_ll_line(g, k - 1, nl) + 1)) ok = 0;
              else used[l] = 1;
            }
          CHECK(ok);
          free(used);
        }
        /* a warp's 32 groups (a tile) put each line pair in 512 contiguous bytes */
        CHECK_EQ_INT(loom__coll_ll_line(33, 2, nl) - loom__coll_ll_line(32, 2, nl), 2);
        CHECK_EQ_INT(loom__coll_ll_line(63, 0, nl) - loom__coll_ll_line(32, 0, nl), 62);
        /* (parity, slot) regions are disjoint, adjacent, and fill the buffer */
        int64_t next = 0;
        for (uint32_t par = 0; par < 2; ++par)
          for (int slot = 0; slot < W - 1; ++slot) {
            CHECK_EQ_INT(loom__coll_ll_line0(par, slot, W, sl), next);
            next += sl;
          }
        CHECK_EQ_INT(next * 8, loom__coll_ll_bytes(n, es, W));
        /* epochs e and e + 2 share a parity, e + 1 does not */
        CHECK_EQ_INT(loom__coll_ll_line0(5u, 0, W, sl), loom__coll_ll_line0(7u, 0, W, sl));
        CHECK(loom__coll_ll_line0(5u, 0, W, sl) != loom__coll_ll_line0(6u, 0, W, sl));
      }
  }
  CHECK_EQ_INT(loom__coll_ll_bytes(1000, 2, 1), 0);
  /* one group per thread, at most the SMs; rows: a block per row */
  CHECK_EQ_INT(loom__coll_ll_grid(1, 0, 512, 132), 1);
  CHECK_EQ_INT(loom__coll_ll_grid(8 * 512, 0, 512, 132), 1);
  CHECK_EQ_INT(loom__coll_ll_grid(8 * 512 + 1, 0, 512, 132), 2);
  CHECK_EQ_INT(loom__coll_ll_grid((int64_t)1 << 30, 0, 512, 132), 132);
  CHECK_EQ_INT(loom__coll_ll_grid(4096 * 16, 16, 512, 132), 16);
  CHECK_EQ_INT(loom__coll_ll_grid(4096 * 1000, 1000, 512, 132), 132);
}

LOOM_TEST(coll_push_regions_are_disjoint_aligned_and_inside_the_buffer) {
  const int worlds[] = {2, 3, 4, 8, 16, 64};
  const int64_t counts[] = {1, 7, 1000, 131073};
  for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; ++wi)
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ++ci)
      for (int64_t es = 2; es <= 4; es += 2) {
        const int W = worlds[wi];
        const int64_t n = counts[ci], sb = loom__coll_push_slot_bytes(n, es);
        const int64_t nch = 1 + n / 5000, total = loom__coll_push_bytes(n, es, W, nch);
        CHECK(sb >= n * es && sb % 256 == 0);
        /* data: 2 (W-1) adjacent slots of sb bytes, then the flags, one word per chunk */
        int64_t next = 0;
        for (uint32_t par = 0; par < 2; ++par)
          for (int slot = 0; slot < W - 1; ++slot) {
            CHECK_EQ_INT(loom__coll_push_data_off(par, slot, W, sb), next);
            next += sb;
          }
        for (uint32_t par = 0; par < 2; ++par)
          for (int slot = 0; slot < W - 1; ++slot)
            for (int64_t j = 0; j < nch; ++j) {
              CHECK_EQ_INT(loom__coll_push_flag_off(par, slot, j, W, sb, nch), next);
              next += 4;
            }
        CHECK_EQ_INT(next, total);
        CHECK_EQ_INT(loom__coll_push_data_off(3u, 0, W, sb), loom__coll_push_data_off(1u, 0, W, sb));
      }
  CHECK_EQ_INT(loom__coll_push_bytes(1000, 2, 1, 1), 0);
}

LOOM_TEST(coll_desc_auto_picks_ll_below_its_threshold_where_it_applies) {
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 1000, d.world_size = 2;
  loom_coll_algo_t a = LOOM_COLL_AUTO;
  const loom_coll_thresholds_t tl = {64 << 10, 0, 256 << 10}, t0 = {0, 0, 256 << 10};
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_LL);
  d.count = (64 << 10) / 2; /* exactly the LL threshold */
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_LL);
  d.count += 8;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_ONE_SHOT);
  d.dtype = LOOM_FP32, d.count = (64 << 10) / 4 + 1; /* bytes count the input's dtype */
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_ONE_SHOT);
  /* a norm over rows that are not whole groups: AUTO passes LL over, LL forced is refused */
  d.dtype = LOOM_BF16, d.count = 12 * 100, d.cols = 12, d.norm = LOOM_NORM_RMS;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_ONE_SHOT);
  d.algo = LOOM_COLL_LL;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->cols a multiple of 8 (cols=12)");
  d.cols = 16, d.count = 16 * 100;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_LL);
  d.algo = LOOM_COLL_AUTO;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_LL);
  /* a flat vector of any count; LL forced past the threshold; threshold 0: never */
  d.cols = 0, d.norm = LOOM_NORM_NONE, d.count = 1 << 24, d.algo = LOOM_COLL_LL;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_LL);
  d.count = 3, d.algo = LOOM_COLL_AUTO;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &t0, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_ONE_SHOT);
  d.algo = LOOM_COLL_LL;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_RS, 2, 132, &tl, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->algo=LOOM_COLL_LL applies to loom_plan_allreduce only");
  /* PUSH: any rows (a chunk is whole rows), forced only */
  d.algo = LOOM_COLL_PUSH, d.count = 12 * 100, d.cols = 12, d.norm = LOOM_NORM_RMS;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_SUCCESS);
  CHECK_EQ_INT(a, LOOM_COLL_PUSH);
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AG, 2, 132, &tl, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  d.algo = (loom_coll_algo_t)5, d.norm = LOOM_NORM_NONE;
  CHECK_RESULT(loom__coll_check_desc("f", LOOM__COLL_AR, 2, 132, &tl, &d, &a), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("_LL or _PUSH");
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_COLL_PUSH), "PUSH") != NULL);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_COLL_LL), "LL") != NULL);
}

LOOM_TEST(coll_auto_algo_shrinks_ll_push_and_one_shot_with_the_world) {
  const int64_t M = 1 << 20;
  const loom_coll_thresholds_t t = {M, 16 * M, 64 * M}, np = {M, 0, 64 * M}, none = {0, 0, 0};
  /* W = 2: LL to 1 MiB, PUSH to 16 MiB, one-shot to 64 MiB (all move the two-shot's bytes) */
  CHECK_EQ_INT(loom__coll_auto_algo(4096, 2, 1, &t), 1);
  CHECK_EQ_INT(loom__coll_auto_algo(M, 2, 1, &t), 1);
  CHECK_EQ_INT(loom__coll_auto_algo(M + 16, 2, 1, &t), 2);
  CHECK_EQ_INT(loom__coll_auto_algo(M, 2, 0, &t), 2); /* LL does not apply */
  CHECK_EQ_INT(loom__coll_auto_algo(16 * M, 2, 1, &t), 2);
  CHECK_EQ_INT(loom__coll_auto_algo(16 * M + 16, 2, 1, &t), 3);
  CHECK_EQ_INT(loom__coll_auto_algo(64 * M, 2, 1, &t), 3);
  CHECK_EQ_INT(loom__coll_auto_algo(64 * M + 16, 2, 1, &t), 4);
  CHECK_EQ_INT(loom__coll_auto_algo(M + 16, 2, 1, &np), 3); /* PUSH off */
  /* W = 4: LL to 1/3 MiB; PUSH while 3 x 2 / 4 x bytes <= 2 MiB (1.33 MiB) */
  CHECK_EQ_INT(loom__coll_auto_algo(M / 3, 4, 1, &t), 1);
  CHECK_EQ_INT(loom__coll_auto_algo(M / 3 + 16, 4, 1, &t), 2);
  CHECK_EQ_INT(loom__coll_auto_algo(M * 4 / 3, 4, 1, &t), 2);
  CHECK_EQ_INT(loom__coll_auto_algo(M * 4 / 3 + 16, 4, 1, &t), 4);
  CHECK_EQ_INT(loom__coll_auto_algo(M * 4 / 3, 4, 1, &np), 3);
  /* W = 8: LL to 1/7 MiB, then PUSH to 8/42 x 2 MiB (~390 KiB) */
  CHECK_EQ_INT(loom__coll_auto_algo(M / 7, 8, 1, &t), 1);
  CHECK_EQ_INT(loom__coll_auto_algo(300 << 10, 8, 1, &t), 2);
  CHECK_EQ_INT(loom__coll_auto_algo(400 << 10, 8, 1, &t), 4);
  /* W = 1 (nothing crosses a link): LL's one kernel up to the threshold */
  CHECK_EQ_INT(loom__coll_auto_algo(M, 1, 1, &t), 1);
  /* monotone in the size at every world: LL, PUSH, one-shot, two-shot */
  const int worlds[] = {1, 2, 3, 4, 8, 16, 64};
  for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; ++wi) {
    int last = 1;
    for (int64_t b = 16; b <= ((int64_t)1 << 31); b += b / 3 + 16) {
      const int a = loom__coll_auto_algo(b, worlds[wi], 1, &t);
      CHECK(a >= last);
      last = a;
    }
    CHECK_EQ_INT(last, 4);
  }
  /* thresholds 0: never LL, PUSH or one-shot */
  CHECK_EQ_INT(loom__coll_auto_algo(16, 2, 1, &none), 4);
}

LOOM_TEST(coll_plans_on_a_test_comm_check_then_refuse) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(1, 4, 1 << 20, &c), LOOM_SUCCESS);
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 1001, d.world_size = 4;
  loom_plan_t p = (loom_plan_t)1;
  CHECK_RESULT(loom_plan_allreduce(c, &d, &p), LOOM_ERR_UNSUPPORTED); /* valid, but no GPU behind the comm */
  CHECK_MSG("description is valid");
  CHECK(p == NULL);
  CHECK_RESULT(loom_plan_reduce_scatter(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_RESULT(loom_plan_all_gather(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  d.world_size = 2;
  CHECK_RESULT(loom_plan_allreduce(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_plan_allreduce: desc->world_size=2");
  CHECK_RESULT(loom_plan_allreduce(c, &d, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_plan_allreduce(NULL, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  CHECK_EQ_INT(loom__wait_site_clashes(), 0);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_COLL_REDUCED), "reduced chunk") != NULL);
}

/* ---- references ----------------------------------------------------------- */

LOOM_TEST(coll_ref_sums_over_ranks_with_the_pointwise_epilogue) {
  /* 3 ranks, 2 rows of 4 (fp32 inputs: exact) */
  float in0[8], in1[8], in2[8];
  for (int i = 0; i < 8; ++i) in0[i] = (float)i, in1[i] = 0.5f, in2[i] = -(float)(i % 3);
  const void *in[3] = {in0, in1, in2};
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 8, d.cols = 4, d.world_size = 3, d.dtype = LOOM_FP32, d.out_type = LOOM_FP32;
  double y[8];
  loom_ref_coll_reduce(&d, in, NULL, NULL, NULL, y);
  for (int i = 0; i < 8; ++i) CHECK(y[i] == (double)i + 0.5 - (double)(i % 3));
  const float bias[4] = {1, 2, 3, 4}, res[8] = {10, 10, 10, 10, 20, 20, 20, 20};
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  e.scale = 2.f, e.bias = bias, e.activation = LOOM_ACT_RELU, e.residual = res;
  loom_ref_coll_reduce(&d, in, &e, NULL, NULL, y);
  for (int i = 0; i < 8; ++i) {
    double v = 2.0 * ((double)i + 0.5 - (double)(i % 3)) + bias[i % 4];
    v = v > 0 ? v : 0;
    CHECK(fabs(y[i] - (v + res[i])) < 1e-12);
  }
}

LOOM_TEST(coll_ref_dropout_mask_is_the_kernels) {
  const int64_t n = 4096;
  float *x = (float *)malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) x[i] = 1.f + (float)(i % 7);
  const void *in[1] = {x};
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = n, d.world_size = 1, d.dtype = LOOM_FP32, d.out_type = LOOM_FP32;
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  e.dropout_p = 0.25f, e.dropout_seed = 0x1234567890ull, e.dropout_offset = 99;
  double *y = (double *)malloc((size_t)n * sizeof(double));
  loom_ref_coll_reduce(&d, in, &e, NULL, NULL, y);
  int64_t kept = 0;
  const uint32_t th = loom__dropout_threshold(0.25f);
  for (int64_t i = 0; i < n; ++i) {
    const int keep = loom__dropout_keep(e.dropout_seed, e.dropout_offset, (uint64_t)i, th);
    kept += keep;
    CHECK(keep ? fabs(y[i] - x[i] / 0.75) < 1e-9 : y[i] == 0.0);
  }
  CHECK(fabs((double)kept / n - 0.75) < 0.05);
  free(x), free(y);
}

LOOM_TEST(coll_ref_rmsnorm_and_layernorm_normalise_each_row) {
  const int64_t rows = 5, cols = 96;
  uint16_t a[5 * 96], b[5 * 96], w[96], nb[96];
  loom_ref_fill_random(LOOM_BF16, a, (size_t)(rows * cols), 11, 2.0);
  loom_ref_fill_random(LOOM_BF16, b, (size_t)(rows * cols), 12, 2.0);
  for (int c = 0; c < cols; ++c) loom_ref_store(LOOM_BF16, w, (size_t)c, 1.0), loom_ref_store(LOOM_BF16, nb, (size_t)c, 0.0);
  const void *in[2] = {a, b};
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = rows * cols, d.cols = cols, d.world_size = 2, d.norm = LOOM_NORM_RMS, d.norm_eps = 1e-6f;
  double y[5 * 96], s[5 * 96];
  loom_coll_desc_t flat = d;
  flat.norm = LOOM_NORM_NONE;
  loom_ref_coll_reduce(&flat, in, NULL, NULL, NULL, s);
  loom_ref_coll_reduce(&d, in, NULL, w, NULL, y);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0, ms_in = 0;
    for (int64_t c = 0; c < cols; ++c) ms += y[r * cols + c] * y[r * cols + c], ms_in += s[r * cols + c] * s[r * cols + c];
    CHECK(fabs(ms / cols - 1.0) < 1e-4);
    /* y = x / rms(x): the ratio is the same for every element of the row */
    const double rms = sqrt(ms_in / cols + 1e-6);
    for (int64_t c = 0; c < cols; ++c) CHECK(fabs(y[r * cols + c] * rms - s[r * cols + c]) < 1e-9);
  }
  d.norm = LOOM_NORM_LAYER;
  loom_ref_coll_reduce(&d, in, NULL, w, nb, y);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += y[r * cols + c];
    m /= cols;
    for (int64_t c = 0; c < cols; ++c) v += (y[r * cols + c] - m) * (y[r * cols + c] - m);
    CHECK(fabs(m) < 1e-9);
    CHECK(fabs(v / cols - 1.0) < 1e-4);
  }
}

LOOM_TEST(coll_ref_all_gather_places_each_slice_exactly) {
  for (size_t wi = 0; wi < 5; ++wi)
    for (size_t ci = 0; ci < 12; ++ci) {
      const int32_t W = worlds[wi];
      const int64_t count = counts[ci];
      loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
      d.count = count, d.world_size = W, d.dtype = LOOM_FP16, d.out_type = LOOM_FP16;
      uint16_t *full = (uint16_t *)malloc((size_t)count * 2), *got = (uint16_t *)malloc((size_t)count * 2);
      loom_ref_fill_random(LOOM_FP16, full, (size_t)count, 5 + ci, 1.0);
      const void *sl[64];
      for (int32_t p = 0; p < W; ++p) {
        int64_t b, len;
        loom__coll_slice(count, W, p, LOOM_COLL_VEC, &b, &len);
        sl[p] = full + b;
      }
      memset(got, 0, (size_t)count * 2);
      loom_ref_coll_all_gather(&d, sl, got);
      CHECK(memcmp(got, full, (size_t)count * 2) == 0);
      free(full), free(got);
    }
}
