/*
 * proto_static.c - the static protocol checker: the exhaustive search's
 * verdict without exploring interleavings (protocol.h says why both are
 * the same; the events, their clocks and the accesses: proto_hb.c).
 *
 * With every reachable event's clock known, each property is a question
 * about events, not runs:
 *  - races: every pair of conflicting accesses of one object (a buffer of
 *    one rank) of which one writes, neither ordered before the other
 *    (proto_hb.c lists them); the breadth-first search would meet the pair
 *    after the events ordered before either of them, less one: sum over
 *    actors of the larger of the two clocks, minus one;
 *  - stale reads: every READ whose last write ordered before it, in some
 *    region, is of another call or none; met after the events ordered
 *    before it (its clock's sum, minus one);
 *  - the violation reported: of the least such depth, the kind of highest
 *    priority among those (the exhaustive search's choice);
 *  - deadlock: some actor has events no run reaches, and nothing else;
 *  - the once check last, as in the exhaustive search.
 * Cost: the clocks (events x actors) and, per object, its writes times its
 * accesses (the races' search); no state is stored.
 */
#include <stdio.h>
#include <string.h>

#include "core/proto_hb.h"

/* Events run before the search meets the race of (q, i) and (r, k). */
static int64_t loom__pst_depth2(const loom__pchk_t *c, int q, int i, int r, int k) {
  const int *a = &c->clk[q][(int64_t)i * c->A], *b = &c->clk[r][(int64_t)k * c->A];
  int64_t d = -1;
  for (int x = 0; x < c->A; ++x) d += a[x] > b[x] ? a[x] : b[x];
  return d;
}

/* Events run before the search meets READ (r, k)'s stale data. */
static int64_t loom__pst_depth1(const loom__pchk_t *c, int r, int k) {
  const int *b = &c->clk[r][(int64_t)k * c->A];
  int64_t d = -1;
  for (int x = 0; x < c->A; ++x) d += b[x];
  return d;
}

/* Every race (each pair once: under its later event in (actor, event) order). */
static void loom__pst_races(loom__pchk_t *c, loom__pviol_t *best) {
  for (int r = 0; r < c->A; ++r)
    for (int k = 0; k < c->reach[r]; ++k)
      for (int x = c->pf[r][k]; x < c->pf[r][k + 1]; ++x) {
        const int q = c->pair[x].q, i = c->pair[x].i, v = c->pkind[x];
        if (q > r || (q == r && i > k)) continue;
        c->rep->transitions++;
        const int64_t d = loom__pst_depth2(c, q, i, r, k);
        if (loom__pchk_better(v, d, best)) *best = (loom__pviol_t){v, d, r, k, q, i};
      }
}

/* Every READ that sees the data of another call. */
static void loom__pst_stale(loom__pchk_t *c, loom__pviol_t *best) {
  for (int x = 0; x < c->acc0[c->nobj]; ++x) {
    const int r = c->acc[x].q, k = c->acc[x].i;
    int q = -1, i = -1;
    if (c->ev[r][k].s.kind != LOOM__PS_READ || !loom__pchk_stale(c, r, k, &q, &i)) continue;
    const int64_t d = loom__pst_depth1(c, r, k);
    if (loom__pchk_better(LOOM__PV_STALE_READ, d, best)) *best = (loom__pviol_t){LOOM__PV_STALE_READ, d, r, k, q, i};
  }
}

/* The verdict once the events are prepared. */
static void loom__pst_verdict(loom__pchk_t *c) {
  loom__pviol_t best;
  memset(&best, 0, sizeof best);
  loom__pst_races(c, &best);
  loom__pst_stale(c, &best);
  for (int q = 0; q < c->A && !best.v; ++q)
    if (c->reach[q] < c->len[q]) best = (loom__pviol_t){LOOM__PV_DEADLOCK, 0, -1, -1, -1, -1};
  if (!best.v && !loom__pchk_once(c, &best)) return;
  loom__pchk_say(c, best.v, "the events (the static check: no run is shown):");
  loom__pchk_events(c, &best);
}

loom_result_t loom__proto_check_static(const loom__proto_t *p, int calls, loom__proto_report_t *rep) {
  loom__pchk_t c;
  loom_result_t rc = loom__pchk_prepare(&c, p, calls, rep);
  if (rc == LOOM_SUCCESS && !rep->violation) {
    for (int r = 0; r < c.A; ++r) rep->states += c.len[r];
    loom__pst_verdict(&c);
  }
  loom__pchk_free(&c);
  return rc;
}
