/*
 * test_moe_schedule.c - host tests of the MoE layout (src/ops/moe/
 * moe_schedule.h) at world sizes this machine cannot run (2..64), and of
 * the CPU reference's layer (src/ref/moe_ref.h).
 *
 * For every (W, E, k, routing mode, tokens-per-rank pattern, capacity) a
 * routing is drawn and one dispatch and combine are simulated on every
 * rank, checking: counts match a direct count; the receive regions of the
 * (expert, source) pairs tile each rank's buffer exactly in (local expert,
 * source) order; each source's bases agree with the owner's offsets; every
 * kept row lands once, in its expert's region, from its source, in token
 * order; dropped rows are exactly those the capacity rule drops (counted
 * independently in global token order); every received row's origin sends
 * it back once to its (token, j) and each token reduces its contributions
 * in j order. Routing modes: uniform, Zipf-skewed, every token to one
 * expert, every token to the same k experts, whole ranks never chosen.
 * The reference's layer through dispatch/experts/combine must equal the
 * direct per-token computation bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "ops/moe/moe_schedule.h"
#include "ref/moe_ref.h"

static const int g_worlds[] = {2, 3, 4, 8, 16, 64};
#define NWORLDS ((int)(sizeof g_worlds / sizeof *g_worlds))

/* ---- random numbers (xorshift64*, seeded per configuration) ---------------- */

static uint64_t g_rng;
static void rng_seed(uint64_t s) { g_rng = (s ^ loom_test_seed()) * 0x9e3779b97f4a7c15ull | 1; }
static uint64_t rng_next(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}
static int rng_below(int n) { return (int)(rng_next() % (uint64_t)n); }
static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

/* ---- routings ------------------------------------------------------------------ */

enum { MODE_UNIFORM, MODE_ZIPF, MODE_ONE_EXPERT, MODE_SAME_K, MODE_EMPTY_RANKS, NMODES };
static const char *const g_mode_names[] = {"uniform", "zipf", "one-expert", "same-k", "empty-ranks"};

typedef struct routing {
  int W, E, k;
  int64_t *T;
  int32_t **ids;
  double **w;
} routing_t;

static void routing_free(routing_t *r) {
  for (int p = 0; p < r->W; ++p) {
    free(r->ids[p]);
    free(r->w[p]);
  }
  free(r->ids);
  free(r->w);
  free(r->T);
}

/* Tokens on rank p under pattern tp: 0 odd counts, 1 some ranks empty, 2 all
 * ranks empty but one, 3 random 0..max. */
static int64_t tokens_of(int tp, int p, int W, int max) {
  switch (tp) {
    case 0: return 1 + (p * 7 + 5) % max;
    case 1: return p % 3 == 1 ? 0 : (p * 13 + 3) % (max + 1);
    case 2: return p == W / 2 ? max : 0;
    default: return rng_below(max + 1);
  }
}

/* 1 if mode allows expert e (MODE_EMPTY_RANKS: experts of ranks p % 3 == 0 only). */
static int allowed(const routing_t *r, int mode, int e) {
  return mode != MODE_EMPTY_RANKS || loom__moe_expert_rank(r->E, r->W, e) % 3 == 0;
}

/* One expert drawn by mode (may repeat one already taken; the caller redraws). */
static int draw_expert(const routing_t *r, int mode) {
  if (mode == MODE_ZIPF) { /* P(e) ~ 1 / (e + 1), by inversion on a running sum */
    double z = 0.0, u;
    for (int e = 0; e < r->E; ++e) z += 1.0 / (e + 1);
    u = rng_unit() * z;
    for (int e = 0; e < r->E; ++e)
      if ((u -= 1.0 / (e + 1)) < 0) return e;
    return r->E - 1;
  }
  return rng_below(r->E);
}

static void route_token(const routing_t *r, int mode, int32_t *ids, double *w) {
  for (int j = 0; j < r->k; ++j) {
    int e = -1, dup = 1;
    if (mode == MODE_SAME_K) e = (r->E - 1 + j) % r->E, dup = 0;
    else if (mode == MODE_ONE_EXPERT && j == 0) e = r->E / 2, dup = 0;
    for (int tries = 0; dup; ++tries) {
      e = tries < 64 ? draw_expert(r, mode) : (e + 1) % r->E; /* bounded: walk on after 64 draws */
      dup = !allowed(r, mode, e);
      for (int i = 0; i < j && !dup; ++i) dup = ids[i] == e;
    }
    ids[j] = e;
    w[j] = 0.05 + rng_unit();
  }
}

/* Allowed experts under mode (the routing needs at least k). */
static int allowed_count(const routing_t *r, int mode) {
  int n = 0;
  for (int e = 0; e < r->E; ++e) n += allowed(r, mode, e);
  return n;
}

static int routing_make(routing_t *r, int W, int E, int k, int mode, int tp, int max, uint64_t seed) {
  r->W = W, r->E = E, r->k = k;
  if (allowed_count(r, mode) < k) return -1;
  rng_seed(seed);
  r->T = (int64_t *)malloc((size_t)W * sizeof(int64_t));
  r->ids = (int32_t **)calloc((size_t)W, sizeof(int32_t *));
  r->w = (double **)calloc((size_t)W, sizeof(double *));
  for (int p = 0; p < W; ++p) {
    r->T[p] = tokens_of(tp, p, W, max);
    r->ids[p] = (int32_t *)malloc((size_t)(r->T[p] * k) * sizeof(int32_t) + 1);
    r->w[p] = (double *)malloc((size_t)(r->T[p] * k) * sizeof(double) + 1);
    for (int64_t t = 0; t < r->T[p]; ++t) route_token(r, mode, r->ids[p] + t * k, r->w[p] + t * k);
  }
  return 0;
}

/* ---- the layout, simulated ------------------------------------------------------ */

/* A reference-model view of a routing: what the ref's kept_direct needs. */
static loom_ref_moe_t model_of(const routing_t *r, int64_t cap) {
  loom_ref_moe_t m;
  memset(&m, 0, sizeof m);
  m.world = r->W, m.experts = r->E, m.topk = r->k, m.capacity = cap;
  m.tokens = r->T;
  m.ids = (const int32_t *const *)r->ids;
  m.w = (const double *const *)r->w;
  return m;
}

/* Counts of every source (checked against a direct count) and kept. */
static void counts_and_kept(const routing_t *r, int64_t cap, int32_t *counts, int32_t *kept) {
  const int W = r->W, E = r->E;
  for (int s = 0; s < W; ++s) {
    int64_t bad = 0;
    CHECK_EQ_INT(loom__moe_check_routing(r->ids[s], r->T[s], r->k, E, &bad), 0);
    loom__moe_count_rows(r->ids[s], r->T[s], r->k, E, counts + (size_t)s * E);
    for (int e = 0; e < E; ++e) {
      int64_t n = 0;
      for (int64_t i = 0; i < r->T[s] * r->k; ++i) n += r->ids[s][i] == e;
      CHECK_EQ_INT(counts[(size_t)s * E + e], n);
    }
  }
  loom__moe_apply_capacity(counts, W, E, cap, kept);
}

/* Owner p's offsets tile [0, total) in (l, s) order with the kept sizes. */
static void check_offsets(const routing_t *r, const int32_t *kept, int p, const int64_t *off, int64_t total) {
  const int W = r->W, E = r->E, n = loom__moe_experts_on(E, W, p), e0 = loom__moe_expert_begin(E, W, p);
  CHECK_EQ_INT(off[0], 0);
  CHECK_EQ_INT(off[(size_t)n * W], total);
  int64_t sum = 0;
  for (int l = 0; l < n; ++l) {
    CHECK_EQ_INT(off[(size_t)(l + 1) * W] - off[(size_t)l * W], loom__moe_expert_rows(kept, W, E, e0 + l));
    for (int s = 0; s < W; ++s) {
      CHECK_EQ_INT(off[(size_t)l * W + s], sum);
      CHECK_EQ_INT(off[(size_t)l * W + s + 1] - off[(size_t)l * W + s], kept[(size_t)s * E + e0 + l]);
      sum += kept[(size_t)s * E + e0 + l];
    }
  }
  CHECK_EQ_INT(sum, total);
}

typedef struct sim {
  int64_t *total;    /* [W] */
  int64_t **off;     /* [W] -> offsets */
  uint32_t **hits;   /* [W] -> [total_p] deliveries of each receive row */
  int32_t **origin;  /* [W] -> [total_p] */
} sim_t;

/* Source s's rows: bases agree with the owners, every kept row lands once
 * in its (expert, source) region at its token-order position. */
static void check_source(const routing_t *r, const int32_t *kept, const uint8_t *kept_direct, int s, sim_t *sm) {
  const int W = r->W, E = r->E, k = r->k;
  int64_t *base = (int64_t *)malloc((size_t)E * sizeof(int64_t)), *slot = (int64_t *)malloc((size_t)(r->T[s] * k + 1) * 8);
  int32_t *cursor = (int32_t *)malloc((size_t)E * sizeof(int32_t)), *order = (int32_t *)calloc((size_t)E, sizeof(int32_t));
  loom__moe_source_bases(kept, W, E, s, base);
  for (int e = 0; e < E; ++e) {
    const int p = loom__moe_expert_rank(E, W, e), l = loom__moe_expert_local(E, W, e);
    CHECK_EQ_INT(base[e], sm->off[p][(size_t)l * W + s]);
  }
  loom__moe_dispatch_slots(r->ids[s], r->T[s], k, E, kept + (size_t)s * E, base, cursor, slot);
  for (int64_t i = 0; i < r->T[s] * k; ++i) {
    const int e = r->ids[s][i], p = loom__moe_expert_rank(E, W, e), m = order[e]++;
    CHECK_EQ_INT(slot[i] >= 0, kept_direct[i]);
    if (slot[i] < 0) continue;
    if (slot[i] >= sm->total[p]) { CHECK(!"receive row outside the buffer"); break; }
    int l, src;
    int64_t pos;
    loom__moe_recv_locate(sm->off[p], loom__moe_experts_on(E, W, p), W, slot[i], &l, &src, &pos);
    CHECK_EQ_INT(l, loom__moe_expert_local(E, W, e));
    CHECK_EQ_INT(src, s);
    CHECK_EQ_INT(pos, m); /* token order inside the region */
    sm->hits[p][slot[i]]++;
    sm->origin[p][slot[i]] = loom__moe_origin(i / k, (int)(i % k), k);
  }
  free(base);
  free(slot);
  free(cursor);
  free(order);
}

/* Every received row's origin goes back once to its (token, j); tokens
 * reduce their kept contributions once each, j ascending. */
static void check_combine(const routing_t *r, uint8_t *const *kept_direct, sim_t *sm) {
  const int W = r->W, E = r->E, k = r->k;
  uint32_t **back = (uint32_t **)calloc((size_t)W, sizeof(uint32_t *));
  for (int s = 0; s < W; ++s) back[s] = (uint32_t *)calloc((size_t)(r->T[s] * k + 1), sizeof(uint32_t));
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < sm->total[p]; ++i) {
      int l, s;
      int64_t pos;
      loom__moe_recv_locate(sm->off[p], loom__moe_experts_on(E, W, p), W, i, &l, &s, &pos);
      const int32_t o = sm->origin[p][i];
      const int64_t t = loom__moe_origin_token(o, k);
      if (t >= r->T[s]) { CHECK(!"origin token outside its source"); continue; }
      CHECK_EQ_INT(r->ids[s][t * k + loom__moe_origin_k(o, k)], loom__moe_expert_begin(E, W, p) + l);
      back[s][o]++;
    }
  for (int s = 0; s < W; ++s)
    for (int64_t t = 0; t < r->T[s]; ++t) {
      int last = -1; /* the reduction's visiting order: j ascending over kept */
      for (int j = 0; j < k; ++j) {
        CHECK_EQ_INT(back[s][t * k + j], kept_direct[s][t * k + j]);
        if (back[s][t * k + j]) {
          CHECK(j > last);
          last = j;
        }
      }
    }
  for (int s = 0; s < W; ++s) free(back[s]);
  free(back);
}

/* Capacity: each expert keeps min(C, rows) rows. */
static void check_capacity(const routing_t *r, const int32_t *counts, const int32_t *kept, int64_t cap) {
  for (int e = 0; e < r->E; ++e) {
    const int64_t all = loom__moe_expert_rows(counts, r->W, r->E, e);
    const int64_t want = cap > 0 && cap < all ? cap : all;
    CHECK_EQ_INT(loom__moe_expert_rows(kept, r->W, r->E, e), want);
  }
}

/* Allocates sm's per-owner arrays from the kept matrix. */
static void sim_init(const routing_t *r, const int32_t *kept, sim_t *sm) {
  const int W = r->W;
  const size_t nw = (size_t)(W > 0 ? W : 1);
  sm->total = (int64_t *)calloc(nw, sizeof(int64_t));
  sm->off = (int64_t **)calloc(nw, sizeof(int64_t *));
  sm->hits = (uint32_t **)calloc(nw, sizeof(uint32_t *));
  sm->origin = (int32_t **)calloc(nw, sizeof(int32_t *));
  for (int p = 0; p < W; ++p) {
    sm->off[p] = (int64_t *)malloc(((size_t)loom__moe_experts_on(r->E, W, p) * W + 1) * sizeof(int64_t));
    sm->total[p] = loom__moe_recv_offsets(kept, W, r->E, p, sm->off[p]);
    check_offsets(r, kept, p, sm->off[p], sm->total[p]);
    sm->hits[p] = (uint32_t *)calloc((size_t)sm->total[p] + 1, sizeof(uint32_t));
    sm->origin[p] = (int32_t *)malloc(((size_t)sm->total[p] + 1) * sizeof(int32_t));
  }
}

static void sim_free(int W, sim_t *sm) {
  for (int p = 0; p < W; ++p) {
    free(sm->off[p]);
    free(sm->hits[p]);
    free(sm->origin[p]);
  }
  free(sm->total);
  free(sm->off);
  free(sm->hits);
  free(sm->origin);
}

/* One routing under capacity cap; returns the failed checks. */
static int check_layout(const routing_t *r, int64_t cap) {
  const int fails0 = loom_test_failures, W = r->W, E = r->E;
  int32_t *counts = (int32_t *)malloc((size_t)W * E * sizeof(int32_t)), *kept = (int32_t *)malloc((size_t)W * E * sizeof(int32_t));
  uint8_t **kd = (uint8_t **)calloc((size_t)W, sizeof(uint8_t *));
  for (int s = 0; s < W; ++s) kd[s] = (uint8_t *)malloc((size_t)(r->T[s] * r->k) + 1);
  loom_ref_moe_t m = model_of(r, cap);
  CHECK_EQ_INT(loom_ref_moe_kept_direct(&m, kd), 0);
  counts_and_kept(r, cap, counts, kept);
  check_capacity(r, counts, kept, cap);
  sim_t sm;
  sim_init(r, kept, &sm);
  for (int s = 0; s < W; ++s) check_source(r, kept, kd[s], s, &sm);
  int64_t bad = 0;
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < sm.total[p]; ++i) bad += sm.hits[p][i] != 1;
  CHECK_EQ_INT(bad, 0); /* every receive row filled exactly once */
  if (!bad) check_combine(r, kd, &sm);
  sim_free(W, &sm);
  for (int s = 0; s < W; ++s) free(kd[s]);
  free(kd);
  free(counts);
  free(kept);
  return loom_test_failures - fails0;
}

/* ---- tests --------------------------------------------------------------------------- */

LOOM_TEST(moe_schedule_experts_over_ranks) {
  for (int wi = 0; wi < NWORLDS; ++wi) {
    const int W = g_worlds[wi];
    for (int E = 1; E <= 300; E += (E < 70 ? 1 : 23)) {
      int next = 0, nmin = E, nmax = 0;
      for (int p = 0; p < W; ++p) {
        const int b = loom__moe_expert_begin(E, W, p), n = loom__moe_experts_on(E, W, p);
        CHECK_EQ_INT(b, next);
        nmin = n < nmin ? n : nmin, nmax = n > nmax ? n : nmax;
        for (int l = 0; l < n; ++l) {
          CHECK_EQ_INT(loom__moe_expert_rank(E, W, b + l), p);
          CHECK_EQ_INT(loom__moe_expert_local(E, W, b + l), l);
        }
        next = b + n;
      }
      CHECK_EQ_INT(next, E); /* the ranges tile [0, E) */
      CHECK_EQ_INT(loom__moe_expert_begin(E, W, W), E);
      CHECK(nmax - nmin <= 1);
      CHECK_EQ_INT(nmax, loom__moe_experts_max(E, W));
      if (E % W == 0) CHECK_EQ_INT(nmin, E / W);
    }
  }
}

LOOM_TEST(moe_schedule_send_order_remote_first) {
  for (int wi = 0; wi < NWORLDS; ++wi) {
    const int W = g_worlds[wi];
    for (int i = 0; i < W; ++i) {
      uint8_t *seen = (uint8_t *)calloc((size_t)W, 1);
      for (int r = 0; r < W; ++r) {
        const int q = loom__moe_dest_at(W, r, i);
        CHECK_EQ_INT(loom__moe_dest_pos(W, r, q), i);
        seen[q]++; /* step i: every rank is the destination of exactly one source */
        if (i == 0) CHECK_EQ_INT(q, (r + 1) % W);
        if (i == W - 1) CHECK_EQ_INT(q, r);
      }
      for (int q = 0; q < W; ++q) CHECK_EQ_INT(seen[q], 1);
      free(seen);
    }
  }
}

/* The configuration a failed check ran, for the log. */
static void report_failing(int W, int E, int k, int mode, int tokens, int64_t cap) {
  printf("    failing: W=%d E=%d k=%d mode=%s tokens=%d cap=%lld\n", W, E, k, g_mode_names[mode], tokens, (long long)cap);
}

/* Experts to try at world W (uneven, fewer than W, several per rank). */
static int experts_at(int W, int i) {
  const int Es[] = {W, 4 * W, W + 3, W > 2 ? W / 2 : 1, 1};
  return Es[i];
}

LOOM_TEST(moe_schedule_every_row_once_w2_to_64) {
  static const int ks[] = {1, 2, 3, 8};
  int configs = 0;
  for (int wi = 0; wi < NWORLDS; ++wi)
    for (int ei = 0; ei < 5; ++ei)
      for (int ki = 0; ki < 4; ++ki)
        for (int mode = 0; mode < NMODES; ++mode)
          for (int tp = 0; tp < 4; ++tp) {
            const int W = g_worlds[wi], E = experts_at(W, ei), k = ks[ki];
            const int max = W >= 16 ? 9 : 37;
            if (k > E) continue;
            routing_t r;
            if (routing_make(&r, W, E, k, mode, tp, max, (uint64_t)(configs + 1) * 7919u)) continue;
            const int64_t caps[] = {0, 1, 3, (int64_t)max * W * k / E + 1};
            for (int ci = 0; ci < 4; ++ci) {
              if (check_layout(&r, caps[ci])) {
                report_failing(W, E, k, mode, tp, caps[ci]);
                routing_free(&r);
                return;
              }
              ++configs;
            }
            routing_free(&r);
          }
  printf("    %d configurations checked\n", configs);
}

LOOM_TEST(moe_schedule_topk_1_to_8_and_skew) {
  int configs = 0;
  for (int wi = 0; wi < NWORLDS; ++wi)
    for (int k = 1; k <= LOOM_MOE_MAX_TOPK; ++k)
      for (int mode = 0; mode < NMODES; ++mode) {
        const int W = g_worlds[wi], E = 2 * W + 5 > k ? 2 * W + 5 : k;
        routing_t r;
        if (routing_make(&r, W, E, k, mode, 3, 23, (uint64_t)(k * 131 + mode * 17 + W))) continue;
        CHECK_EQ_INT(check_layout(&r, 0), 0);
        CHECK_EQ_INT(check_layout(&r, 2), 0);
        routing_free(&r);
        configs += 2;
      }
  printf("    %d configurations checked\n", configs);
}

/* A hand-made case: W = 2, E = 2, k = 1, capacity 2. Rank 0 routes tokens
 * 0, 1, 2 to expert 0; rank 1 routes token 0 to expert 0 and token 1 to
 * expert 1: expert 0 keeps rank 0's tokens 0 and 1 (lowest global index)
 * and drops rank 0's token 2 and rank 1's token 0. */
LOOM_TEST(moe_schedule_capacity_drops_the_documented_rows) {
  int32_t ids0[] = {0, 0, 0}, ids1[] = {0, 1}, counts[4], kept[4], cursor[2];
  int64_t base[2], slot0[3], slot1[2], off0[3], off1[3];
  loom__moe_count_rows(ids0, 3, 1, 2, counts);
  loom__moe_count_rows(ids1, 2, 1, 2, counts + 2);
  loom__moe_apply_capacity(counts, 2, 2, 2, kept);
  CHECK(kept[0] == 2 && kept[1] == 0 && kept[2] == 0 && kept[3] == 1);
  loom__moe_source_bases(kept, 2, 2, 0, base);
  loom__moe_dispatch_slots(ids0, 3, 1, 2, kept, base, cursor, slot0);
  CHECK(slot0[0] == 0 && slot0[1] == 1 && slot0[2] == -1);
  loom__moe_source_bases(kept, 2, 2, 1, base);
  loom__moe_dispatch_slots(ids1, 2, 1, 2, kept + 2, base, cursor, slot1);
  CHECK(slot1[0] == -1 && slot1[1] == 0);
  CHECK_EQ_INT(loom__moe_recv_offsets(kept, 2, 2, 0, off0), 2);
  CHECK_EQ_INT(loom__moe_recv_offsets(kept, 2, 2, 1, off1), 1);
  /* dropless: everything kept; rank 0 receives 4 rows, rank 1's first */
  loom__moe_apply_capacity(counts, 2, 2, 0, kept);
  CHECK_EQ_INT(loom__moe_recv_offsets(kept, 2, 2, 0, off0), 4);
  CHECK(off0[0] == 0 && off0[1] == 3);
}

LOOM_TEST(moe_schedule_routing_checks) {
  int32_t ok[] = {0, 3, 1, 2}, dup[] = {0, 3, 2, 2}, out[] = {0, 1, 4, 0}, neg[] = {0, -1};
  int64_t bad = 0;
  CHECK_EQ_INT(loom__moe_check_routing(ok, 2, 2, 4, &bad), 0);
  CHECK_EQ_INT(bad, -1);
  CHECK_EQ_INT(loom__moe_check_routing(dup, 2, 2, 4, &bad), 2);
  CHECK_EQ_INT(bad, 3);
  CHECK_EQ_INT(loom__moe_check_routing(out, 2, 2, 4, &bad), 1);
  CHECK_EQ_INT(bad, 2);
  CHECK_EQ_INT(loom__moe_check_routing(neg, 1, 2, 4, &bad), 1);
  CHECK_EQ_INT(bad, 1);
  CHECK_EQ_INT(loom__moe_check_routing(ok, 1, 4, 4, &bad), 0); /* one token, top-4 */
  CHECK_EQ_INT(loom__moe_check_routing(ok, 0, 4, 4, &bad), 0); /* no tokens */
}

LOOM_TEST(moe_schedule_description_limits) {
  const char *what = NULL;
  int64_t v = 0;
  CHECK_EQ_INT(loom__moe_desc_check(2, 8, 2, 4096, 0, &what, &v), 0);
  CHECK_EQ_INT(loom__moe_desc_check(64, 256, 8, 4096, 0, &what, &v), 0);
  CHECK_EQ_INT(loom__moe_desc_check(0, 8, 2, 1, 0, &what, &v), 1);
  CHECK_EQ_INT(loom__moe_desc_check(2, 0, 1, 1, 0, &what, &v), 2);
  CHECK_EQ_INT(loom__moe_desc_check(2, LOOM_MOE_MAX_EXPERTS + 1, 1, 1, 0, &what, &v), 2);
  CHECK_EQ_INT(loom__moe_desc_check(2, 8, 0, 1, 0, &what, &v), 3);
  CHECK_EQ_INT(loom__moe_desc_check(2, 8, 9, 1, 0, &what, &v), 3);
  CHECK_EQ_INT(loom__moe_desc_check(2, 4, 5, 1, 0, &what, &v), 3); /* k > E */
  CHECK_EQ_INT(loom__moe_desc_check(2, 8, 2, -1, 0, &what, &v), 4);
  CHECK_EQ_INT(loom__moe_desc_check(1, 8, 8, LOOM_MOE_MAX_ROWS / 8 + 1, 0, &what, &v), 4);
  CHECK_EQ_INT(loom__moe_desc_check(1, 8, 8, LOOM_MOE_MAX_ROWS / 8, 0, &what, &v), 0);
  CHECK_EQ_INT(loom__moe_desc_check(2, 8, 2, 16, -1, &what, &v), 5);
  /* 64 ranks x 2^22 tokens x top-8 over 8 experts a rank: 2^31 rows > limit */
  CHECK_EQ_INT(loom__moe_desc_check(64, 512, 8, (int64_t)1 << 22, 0, &what, &v), 6);
  CHECK_EQ_INT(v, (int64_t)1 << 31);
  CHECK(strstr(what, "worst-case") != NULL);
  CHECK_EQ_INT(loom__moe_desc_check(64, 512, 8, ((int64_t)1 << 22) - 1, 0, &what, &v), 0);
  /* with 4 experts a rank a token sends a rank at most 4 rows: 2^30 */
  CHECK_EQ_INT(loom__moe_desc_check(64, 256, 8, (int64_t)1 << 22, 0, &what, &v), 0);
  /* a capacity bounds it: 8 experts x 2^20 rows */
  CHECK_EQ_INT(loom__moe_desc_check(64, 512, 8, (int64_t)1 << 22, (int64_t)1 << 20, &what, &v), 0);
  CHECK_EQ_INT(loom__moe_worst_recv_rows(64, 512, 8, (int64_t)1 << 22, (int64_t)1 << 20), (int64_t)1 << 23);
  /* top-8 over 1 expert per rank: each token sends a rank at most one row */
  CHECK_EQ_INT(loom__moe_worst_recv_rows(64, 64, 8, 100, 0), 6400);
  CHECK_EQ_INT(loom__moe_worst_recv_rows(64, 32, 8, 100, 0), 0 + 6400); /* half the ranks own one */
  CHECK_EQ_INT(loom__moe_worst_recv_rows(4, 8, 1, 0, 0), 0);
}

/* ---- the reference's layer: through the layout == directly per token ---------- */

/* x rows and expert weights of one layer; m points into them. */
typedef struct layer {
  loom_ref_moe_t m;
  double **x, *wg, *wu, *wd;
} layer_t;

static double *random_doubles(size_t n, double scale) {
  double *v = (double *)malloc((n ? n : 1) * sizeof(double));
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2.0 * rng_unit() - 1.0);
  return v;
}

static void layer_make(layer_t *L, const routing_t *r, int H, int F, int64_t cap) {
  L->m = model_of(r, cap);
  L->m.hidden = H, L->m.ffn = F;
  L->x = (double **)calloc((size_t)r->W, sizeof(double *));
  for (int p = 0; p < r->W; ++p) L->x[p] = random_doubles((size_t)(r->T[p] * H), 1.0);
  L->wg = random_doubles((size_t)r->E * H * F, 0.5);
  L->wu = random_doubles((size_t)r->E * H * F, 0.5);
  L->wd = random_doubles((size_t)r->E * F * H, 0.5);
  L->m.x = (const double *const *)L->x;
  L->m.w_gate = L->wg, L->m.w_up = L->wu, L->m.w_down = L->wd;
}

static void layer_free(layer_t *L) {
  for (int p = 0; p < L->m.world; ++p) free(L->x[p]);
  free(L->x);
  free(L->wg);
  free(L->wu);
  free(L->wd);
}

static double **rank_buffers(const int64_t *rows, int W, int H) {
  double **b = (double **)calloc((size_t)W, sizeof(double *));
  for (int p = 0; p < W; ++p) b[p] = (double *)calloc((size_t)(rows[p] * H) + 1, sizeof(double));
  return b;
}
static void rank_buffers_free(double **b, int W) {
  for (int p = 0; p < W; ++p) free(b[p]);
  free(b);
}

/* Dispatch alone: every received row is its origin token's row, bit for bit. */
static void check_dispatched_rows(const layer_t *L, const loom_ref_moe_recv_t *rv) {
  const loom_ref_moe_t *m = &L->m;
  const int W = m->world, H = m->hidden;
  int64_t bad = 0;
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < rv->total[p]; ++i) {
      int l, s;
      int64_t pos;
      loom__moe_recv_locate(rv->off[p], loom__moe_experts_on(m->experts, W, p), W, i, &l, &s, &pos);
      const int64_t t = loom__moe_origin_token(rv->origin[p][i], m->topk);
      bad += t >= m->tokens[s] ||
             memcmp(rv->rows[p] + (size_t)i * H, m->x[s] + (size_t)t * H, (size_t)H * sizeof(double)) != 0;
    }
  CHECK_EQ_INT(bad, 0);
}

/* One layer: direct vs dispatch -> experts -> combine; returns failed checks. */
static int check_layer(const routing_t *r, int H, int F, int64_t cap) {
  const int fails0 = loom_test_failures, W = r->W;
  layer_t L;
  layer_make(&L, r, H, F, cap);
  double **direct = rank_buffers(r->T, W, H), **combined = rank_buffers(r->T, W, H);
  loom_ref_moe_recv_t rv;
  CHECK_EQ_INT(loom_ref_moe_layer_direct(&L.m, direct), 0);
  CHECK_EQ_INT(loom_ref_moe_dispatch(&L.m, &rv), 0);
  check_dispatched_rows(&L, &rv);
  double **y = rank_buffers(rv.total, W, H);
  CHECK_EQ_INT(loom_ref_moe_experts(&L.m, &rv, y), 0);
  CHECK_EQ_INT(loom_ref_moe_combine(&L.m, &rv, (const double *const *)y, combined), 0);
  int64_t differ = 0, nonzero = 0;
  for (int p = 0; p < W; ++p)
    for (int64_t i = 0; i < r->T[p] * H; ++i) {
      differ += memcmp(&direct[p][i], &combined[p][i], sizeof(double)) != 0; /* bit for bit */
      nonzero += direct[p][i] != 0.0;
    }
  CHECK_EQ_INT(differ, 0);
  int64_t kept_rows = 0, tokens = 0;
  for (int p = 0; p < W; ++p) kept_rows += rv.total[p], tokens += r->T[p];
  if (kept_rows > 0) CHECK(nonzero > 0); /* the layer computed something */
  CHECK(kept_rows <= tokens * r->k);
  rank_buffers_free(y, W);
  loom_ref_moe_recv_free(&L.m, &rv);
  rank_buffers_free(direct, W);
  rank_buffers_free(combined, W);
  layer_free(&L);
  return loom_test_failures - fails0;
}

LOOM_TEST(moe_ref_layer_through_layout_equals_direct_w2_to_64) {
  int configs = 0;
  for (int wi = 0; wi < NWORLDS; ++wi)
    for (int mode = 0; mode < NMODES; ++mode)
      for (int ki = 0; ki < 3; ++ki) {
        const int W = g_worlds[wi], k = ki == 0 ? 1 : ki == 1 ? 2 : 8;
        const int E = W + 3 > k ? W + 3 : k, tp = (mode + ki) % 4;
        routing_t r;
        if (routing_make(&r, W, E, k, mode, tp, W >= 16 ? 6 : 19, (uint64_t)(W * 1000 + mode * 10 + ki))) continue;
        const int64_t caps[] = {0, 2};
        for (int ci = 0; ci < 2; ++ci) {
          if (check_layer(&r, 5, 7, caps[ci])) {
            report_failing(W, E, k, mode, tp, caps[ci]);
            routing_free(&r);
            return;
          }
          ++configs;
        }
        routing_free(&r);
      }
  printf("    %d layers checked bit for bit\n", configs);
}

/* Experts owning no rows at all, whole ranks idle, and E < W (ranks with no
 * expert): the layer still matches, and a world of one is the plain layer. */
LOOM_TEST(moe_ref_layer_idle_ranks_and_world_of_one) {
  routing_t r;
  CHECK_EQ_INT(routing_make(&r, 8, 3, 2, MODE_SAME_K, 1, 11, 5), 0); /* 5 of 8 ranks own no expert */
  CHECK_EQ_INT(check_layer(&r, 4, 3, 0), 0);
  routing_free(&r);
  CHECK_EQ_INT(routing_make(&r, 1, 6, 3, MODE_ZIPF, 0, 17, 6), 0);
  CHECK_EQ_INT(check_layer(&r, 6, 10, 0), 0);
  CHECK_EQ_INT(check_layer(&r, 6, 10, 4), 0);
  CHECK_EQ_INT(check_layout(&r, 0), 0);
  routing_free(&r);
}
