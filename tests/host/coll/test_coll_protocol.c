/*
 * test_coll_protocol.c - the collectives' protocol (src/ops/coll/coll.h),
 * as its family builds it from the schedule the kernels take
 * (coll_protocol.c over coll_schedule.h: W ranks x G blocks as actors, the
 * caller's stream beside them, arrival, the arrival wait, reduction chunks
 * with their signals, gather items in loom__coll_peer_at order, every
 * block's done, the hand-back wait, the one-shot in-place write-back; LL's
 * lines and PUSH's chunks), proven by the model checker (core/protocol.h:
 * the static check, every interleaving's verdict) over three calls:
 *  - every read of a peer's `in` sees the input of the same call (never the
 *    next call's, never an in-place result), every staging read sees the
 *    reduced data of the same call (no read before publish, no overwrite
 *    before consumed);
 *  - nothing deadlocks;
 *  - every output element is written by the call exactly once: the caller's
 *    read of the result sees this call's data in every element (so it was
 *    written), and the result buffer is marked once (each write read
 *    before another replaces it, none the call does not return).
 * For AllReduce one-shot and two-shot (in place or not), ReduceScatter,
 * AllGather, LL and PUSH, the slices' LL (ReduceScatter and AllGather,
 * where every slice is nonempty; where one is empty it fails, below); W = 1, 2, 3, 4, 8, 16, counts not divisible by
 * W or 8, 1..3 blocks. The checker can fail: without the arrival wait,
 * the hand-back wait or the reduced-chunk wait, without any single wait
 * of a kernel, and with a result write widened or dropped, it reports a
 * violation.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "ops/coll/coll_protocol.h"
#include "tests/host/proto_waits.h"

static const char *kind_name(int kind) {
  static const char *names[LOOM__CK_KINDS] = {"one-shot", "two-shot", "reduce-scatter", "all-gather", "LL", "PUSH",
                                              "reduce-scatter LL", "all-gather LL"};
  return kind >= 0 && kind < LOOM__CK_KINDS ? names[kind] : "?";
}

/* The slices' LL (ReduceScatter, AllGather) */
static int slices_ll(int kind) { return kind == LOOM__CK_LL_RS || kind == LOOM__CK_LL_AG; }

/* Every rank's slice nonempty: where the slices' LL applies (loom__coll_ll_slices_ok, alignment aside). */
static int slices_nonempty(int64_t count, int W, int64_t unit) {
  return (int64_t)(W - 1) * loom__coll_slice_elems(count, W, unit) < count;
}

/* The verdict on s's protocol over three calls (-1: refused). */
static int verdict(const loom__coll_proto_t *s, loom__proto_report_t *rep) {
  static loom__proto_t p;
  loom__coll_protocol(s, &p);
  const loom_result_t r = loom__proto_check_static(&p, 3, rep);
  loom__proto_free(&p);
  return r == LOOM_SUCCESS ? rep->violation : -1;
}

LOOM_TEST(coll_protocol_no_stale_read_no_deadlock_every_output_once) {
  static loom__proto_report_t rep;
  const int worlds[] = {1, 2, 3, 4, 8, 16};
  const int64_t counts[] = {1, 5, 17, 40, 63};
  int n = 0;
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ++ci)
      for (int kind = LOOM__CK_ONE_SHOT; kind < LOOM__CK_KINDS; ++kind)
        for (int in_place = 0; in_place < 2; ++in_place)
          for (int G = 1; G <= 3; ++G)
            for (int64_t unit = 1; unit <= 3; unit += 2)
              for (int64_t chunk = unit; chunk <= 2 * unit; chunk += unit) {
                const int W = worlds[wi];
                int64_t count = counts[ci];
                const int flat = kind == LOOM__CK_LL || kind == LOOM__CK_PUSH || slices_ll(kind);
                if (unit > 1 && flat) continue; /* flat only */
                if (slices_ll(kind) && !slices_nonempty(count, W, unit)) continue; /* not applied (below) */
                /* the test's time: PUSH's flags grow as W^2 x chunks */
                if ((W == 16 && (ci % 2 == 1 || unit > 1 || G == 2)) || (W >= 8 && flat && counts[ci] > 17)) continue;
                if (unit > 1) count = (count / unit + 1) * unit; /* rows */
                const loom__coll_proto_t s = {kind, W, G, count, unit, chunk, in_place, 2, 0};
                const int v = verdict(&s, &rep);
                ++n;
                if (v != LOOM__PV_NONE)
                  loom_test_fail(__FILE__, __LINE__, "%s%s W=%d G=%d count=%lld unit=%lld chunk=%lld: %s\n%s",
                                 kind_name(kind), in_place ? " in place" : "", W, G, (long long)count,
                                 (long long)unit, (long long)chunk,
                                 v < 0 ? "refused" : loom__proto_violation_str(v), rep.text);
              }
  printf("    %d protocols checked, W = 1 .. 16\n", n);
}

/* A data violation: a race, an overwrite, a stale read, a lost result. */
static int data_violation(int v) { return v > 0 && v != LOOM__PV_DEADLOCK && v != LOOM__PV_SIGNAL; }

/* The model can fail: without the arrival wait a rank reads a peer's input
 * before the peer's caller wrote it (or, two-shot, rewrites its staging
 * while a slow peer still reads it); without the hand-back wait the caller
 * rewrites `in` while a peer still reads it; without the reduced-chunk wait
 * a rank fetches a chunk before its owner reduced it. The checker shows
 * each at every world size and block count. */
LOOM_TEST(coll_protocol_model_catches_a_missing_wait) {
  static loom__proto_t p, m;
  static loom__proto_report_t rep;
  const int sigs[] = {LOOM__COLL_PS_ARRIVED, LOOM__COLL_PS_DONE, LOOM__COLL_PS_REDUCED};
  int tried = 0;
  for (int W = 2; W <= 8; W = W < 4 ? W + 1 : 2 * W)
    for (int G = 1; G <= 3; ++G)
      for (int kind = LOOM__CK_ONE_SHOT; kind <= LOOM__CK_AG; ++kind)
        for (size_t k = 0; k < sizeof sigs / sizeof *sigs; ++k) {
          if (sigs[k] == LOOM__COLL_PS_DONE && kind == LOOM__CK_TWO_SHOT) continue;    /* no hand-back wait */
          if (sigs[k] == LOOM__COLL_PS_REDUCED && kind != LOOM__CK_TWO_SHOT) continue; /* only two-shot's chunks */
          const loom__coll_proto_t s = {kind, W, G, 40, 1, 4, 0, 2, 0};
          loom__coll_protocol(&s, &p);
          loom__proto_drop_waits(&p, loom__proto_sig_of(&p, &loom__coll_signals[sigs[k]]), &m);
          CHECK_RESULT(loom__proto_check_static(&m, 2, &rep), LOOM_SUCCESS);
          if (!data_violation(rep.violation))
            loom_test_fail(__FILE__, __LINE__, "%s W=%d G=%d without the %s waits: %s", kind_name(kind), W, G,
                           loom__coll_signals[sigs[k]].name, loom__proto_violation_str(rep.violation));
          tried++;
          loom__proto_free(&p), loom__proto_free(&m);
        }
  CHECK(tried > 0);
}

/* The kernel word of a coll wait's slot: a rank's done is one word (its
 * last block sets it), a slot per block in the protocol. */
static int coll_word(const void *ctx, const loom__proto_t *p, const loom__pstep_t *w) {
  return w->obj == proto_sig_id(p, &loom__coll_signals[LOOM__COLL_PS_DONE]) ? 0 : w->lo;
}

/* Which dropped wait the rest covers: a wait for the own rank's done (a
 * block's for its siblings': the caller waits for every block's exit
 * before it rewrites `in`, and the one-shot in place copies back into
 * `in` the chunks its block reduced, which no sibling reads). */
static int coll_covered(const void *ctx, const loom__proto_t *p, int a, const loom__pstep_t *w) {
  return w->obj == proto_sig_id(p, &loom__coll_signals[LOOM__COLL_PS_DONE]) && w->owner == p->rank_of[a];
}

/* Every wait of the kernels of W = 4 ranks dropped in turn (from every
 * block that runs it), one block or two: caught, but the covered ones. */
LOOM_TEST(coll_protocol_every_wait_needed) {
  static loom__proto_t p;
  proto_waits_tally_t t = {0, 0, 0};
  for (int kind = LOOM__CK_ONE_SHOT; kind < LOOM__CK_KINDS; ++kind)
    for (int ip = 0; ip < 2; ++ip)
      for (int G = 1; G <= 2; ++G) {
        const loom__coll_proto_t s = {kind, 4, G, 17, 1, 2, ip, 2, 0};
        const proto_family_waits_t f = {loom__coll_signals, LOOM__COLL_NSIG, &s, coll_word, coll_covered};
        loom__coll_protocol(&s, &p);
        proto_every_kernel_wait(&p, &f, &t);
        loom__proto_free(&p);
      }
  printf("    %d of %d kernel waits caught; %d own-rank done waits (covered)\n", t.caught, t.tried, t.covered);
  CHECK(t.tried > 0 && t.covered > 0);
}

/* Every output element written once per call and returned: a result
 * write widened beyond the rank's slice (ReduceScatter) is a write the
 * call does not return (one block; with two, it also meets the other
 * block's write of those elements, unordered); a result write dropped
 * leaves the caller the last call's data. */
LOOM_TEST(coll_protocol_output_written_once) {
  static loom__proto_t p, m;
  static loom__proto_report_t rep;
  for (int G = 1; G <= 2; ++G) {
    const loom__coll_proto_t s = {LOOM__CK_RS, 3, G, 17, 1, 2, 0, 2, 0};
    loom__coll_protocol(&s, &p);
    const int out = loom__proto_buf(&p, "out");
    int a = -1, i = -1;
    for (int x = 0; x < p.nact && a < 0; ++x)
      for (int k = 0; k < p.n[x] && a < 0; ++k)
        if (p.steps[x][k].kind == LOOM__PS_WRITE && p.steps[x][k].obj == out) a = x, i = k;
    CHECK(a >= 0);
    if (a < 0) continue;
    loom__proto_copy(&p, &m);
    m.steps[a][i].lo = 0, m.steps[a][i].hi = 17; /* the whole vector, not the slice */
    CHECK_RESULT(loom__proto_check_static(&m, 2, &rep), LOOM_SUCCESS);
    CHECK_EQ_INT(rep.violation, G == 1 ? LOOM__PV_ONCE : LOOM__PV_RACE_WRITE);
    loom__proto_free(&m);
    loom__proto_drop_step(&p, a, i, &m);
    CHECK_RESULT(loom__proto_check_static(&m, 2, &rep), LOOM_SUCCESS);
    CHECK_EQ_INT(rep.violation, LOOM__PV_STALE_READ);
    loom__proto_free(&m), loom__proto_free(&p);
  }
}

/* The slices' LL needs every rank's slice nonempty: with an empty one, its
 * rank receives no line from its peers, so nothing holds it back, and two
 * calls on it rewrite a slot of the parity a peer is still reading (or a
 * peer rewrites one it still reads). The checker shows it at every world
 * size where a slice is empty, and the rule (loom__coll_ll_slices_ok)
 * refuses exactly those. */
LOOM_TEST(coll_protocol_slices_ll_needs_every_slice_nonempty) {
  static loom__proto_report_t rep;
  int shown = 0;
  for (int kind = LOOM__CK_LL_RS; kind <= LOOM__CK_LL_AG; ++kind)
    for (int W = 3; W <= 8; ++W)
      for (int64_t count = 1; count <= 2 * W; ++count) {
        const int nonempty = slices_nonempty(count, W, 1);
        CHECK_EQ_INT(loom__coll_ll_slices_ok(count * 8, W, 8), nonempty); /* the same slices in groups of 8 */
        if (nonempty) continue;
        const loom__coll_proto_t s = {kind, W, 1, count, 1, 1, 0, 2, 0};
        const int v = verdict(&s, &rep);
        if (v == LOOM__PV_NONE || v < 0)
          loom_test_fail(__FILE__, __LINE__, "%s W=%d count=%lld (an empty slice): %s", kind_name(kind), W,
                         (long long)count, v < 0 ? "refused" : "no violation");
        shown++;
      }
  CHECK(shown > 0);
}

/* AUTO of ReduceScatter and AllGather: the slices' LL where it applies and
 * (W-1) x S x esize <= twice the LL threshold; the pull kernel otherwise. */
LOOM_TEST(coll_auto_picks_the_slices_ll_by_its_rule) {
  const loom_coll_thresholds_t th = {(int64_t)1 << 19, (int64_t)4 << 20, (int64_t)16 << 20};
  const loom_coll_thresholds_t never = {0, (int64_t)4 << 20, (int64_t)16 << 20};
  /* W = 2: S x 2 bytes <= 1 MiB: 1 Mi bf16 elements in all */
  CHECK_EQ_INT(loom__coll_auto_ll_slices((int64_t)1 << 20, 2, 2, 8, &th), 1);
  CHECK_EQ_INT(loom__coll_auto_ll_slices(((int64_t)1 << 20) + 16, 2, 2, 8, &th), 0);
  CHECK_EQ_INT(loom__coll_auto_ll_slices(2048, 2, 2, 8, &never), 0);
  /* W = 8: 7 S x 4 <= 1 MiB */
  const int64_t S = ((int64_t)1 << 20) / 28 / 8 * 8;
  CHECK_EQ_INT(loom__coll_auto_ll_slices(8 * S, 4, 8, 8, &th), 1);
  CHECK_EQ_INT(loom__coll_auto_ll_slices(8 * (S + 64), 4, 8, 8, &th), 0);
  /* an empty slice (count 8 at W = 2: one group) and rows of 12 (slices off the groups): never */
  CHECK_EQ_INT(loom__coll_auto_ll_slices(8, 2, 2, 8, &th), 0);
  CHECK_EQ_INT(loom__coll_auto_ll_slices(1200, 2, 2, 12, &th), 0);
  CHECK_EQ_INT(loom__coll_auto_ll_slices(1200, 2, 2, 16, &th), 1);
  /* W = 1: always applies (nothing is pushed) */
  CHECK_EQ_INT(loom__coll_auto_ll_slices(5, 2, 1, 8, &th), 1);
}
