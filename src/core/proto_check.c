/*
 * proto_check.c - the exhaustive protocol checker (semantics, and why it
 * agrees with the static check: protocol.h; the events, their matching and
 * their clocks: proto_hb.c).
 *
 * Breadth first over the states (a state is the vector of the actors'
 * positions, packed into one integer in mixed radix; signal values follow
 * from it; the visited ones in a hash set, each with the state it was
 * reached from), so a counterexample is a shortest run. At each state: a
 * deadlock if no actor can move before all are done; for each move that is
 * an access, the races against the conflicting accesses other actors
 * already made (the one of highest priority), and for a READ without one
 * the call of the data it sees (the last WRITE of each region ordered
 * before it). The check of a move depends on the state and the move only,
 * and every reachable (state, move) is tried, so every conflict that some
 * run exhibits is found: two unordered conflicting accesses are both
 * enabled after the events ordered before either of them have run. Once a
 * violation is met, the rest of its level (states of as many events run)
 * is still checked and the violation of highest priority among the
 * level's is reported, with the run to its first occurrence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/proto_hb.h"

#define LOOM__PROTO_EXH_STATES ((int64_t)1 << 22) /* visited states before the search gives up */

typedef struct loom__pexh {
  loom__pchk_t *c;
  int64_t radix[LOOM__PROTO_EXH_MAXACT];
  int *stale[LOOM__PROTO_EXH_MAXACT]; /* [3 k]: READ k's loom__pchk_stale (-1: not known yet), its write */
  loom__pviol_t best;  /* the violation to report (best.v 0: none yet) */
  int64_t best_state;  /* the state its move leaves from */
} loom__pexh_t;

static void loom__pexh_decode(const loom__pexh_t *x, int64_t s, int *pc) {
  for (int r = x->c->A - 1; r >= 0; --r) pc[r] = (int)(s / x->radix[r]), s %= x->radix[r];
}

static int loom__pexh_enabled(const loom__pchk_t *c, const int *pc, int r) {
  if (pc[r] >= c->len[r]) return 0;
  const int n = c->p->n[r], k = pc[r];
  const int prev = c->p->call_barrier && n > 0 && k > 0 && k % n == 0 ? k / n : -1;
  for (int q = 0; prev > 0 && q < c->A; ++q)
    if (q != r && c->p->rank_of[q] == c->p->rank_of[r] && pc[q] < prev * c->p->n[q]) return 0;
  const loom__pev_t *e = &c->ev[r][k];
  if (e->s.kind != LOOM__PS_WAIT || e->mr == -1) return 1;
  return e->mr >= 0 && pc[e->mr] > e->mi;
}

/* The violation actor r's next event makes in state pc (0: none), with
 * the other event in *op, *oi: the race of highest priority against what
 * the others ran (one of the event's partners, proto_hb.c), else what a
 * READ sees (the same in every state: memo). */
static int loom__pexh_move(loom__pexh_t *x, const int *pc, int r, int *op, int *oi) {
  const loom__pchk_t *c = x->c;
  const int k = pc[r];
  int v = 0;
  for (int y = c->pf[r][k]; y < c->pf[r][k + 1]; ++y) {
    const int q = c->pair[y].q, i = c->pair[y].i;
    if (i < pc[q] && loom__pchk_priority(c->pkind[y]) > loom__pchk_priority(v)) v = c->pkind[y], *op = q, *oi = i;
  }
  if (v || c->ev[r][k].s.kind != LOOM__PS_READ) return v;
  int *m = &x->stale[r][3 * k];
  if (m[0] < 0) m[0] = loom__pchk_stale(c, r, k, &m[1], &m[2]);
  *op = m[1], *oi = m[2];
  return m[0];
}

/* The visited states: an open-addressing hash set of packed states, each
 * with the state it was first reached from (in one slot: one cache miss
 * per probe); `order` lists them breadth first (the queue). */
typedef struct loom__pslot {
  int64_t key, from; /* key -1: empty */
} loom__pslot_t;

typedef struct loom__pset {
  loom__pslot_t *slot;
  int64_t cap, n;
  int64_t *order;
} loom__pset_t;

static uint64_t loom__pset_hash(int64_t x) { /* splitmix64's finalizer: every bit of x moves every bit */
  uint64_t h = (uint64_t)x + 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

static loom_result_t loom__pset_grow(loom__pset_t *s) {
  const int64_t cap = s->cap ? s->cap * 2 : 1024;
  loom__pslot_t *slot = (loom__pslot_t *)malloc(sizeof *slot * (size_t)cap);
  int64_t *order = (int64_t *)realloc(s->order, sizeof(int64_t) * (size_t)(cap / 2 + 1));
  if (order) s->order = order;
  if (!slot || !order) {
    free(slot);
    return LOOM_ERR_OUT_OF_MEMORY;
  }
  for (int64_t i = 0; i < cap; ++i) slot[i].key = -1;
  for (int64_t i = 0; i < s->cap; ++i) {
    if (s->slot[i].key < 0) continue;
    uint64_t h = loom__pset_hash(s->slot[i].key) & (uint64_t)(cap - 1);
    while (slot[h].key >= 0) h = (h + 1) & (uint64_t)(cap - 1);
    slot[h] = s->slot[i];
  }
  free(s->slot);
  s->slot = slot, s->cap = cap;
  return LOOM_SUCCESS;
}

/* Adds x (reached from `from`): 1 if new, 0 if seen, -1 out of memory. */
static int loom__pset_add(loom__pset_t *s, int64_t x, int64_t from) {
  if (2 * (s->n + 1) > s->cap && loom__pset_grow(s) != LOOM_SUCCESS) return -1;
  uint64_t h = loom__pset_hash(x) & (uint64_t)(s->cap - 1);
  while (s->slot[h].key >= 0) {
    if (s->slot[h].key == x) return 0;
    h = (h + 1) & (uint64_t)(s->cap - 1);
  }
  s->slot[h].key = x, s->slot[h].from = from;
  s->order[s->n++] = x;
  return 1;
}

static int64_t loom__pset_from(const loom__pset_t *s, int64_t x) {
  uint64_t h = loom__pset_hash(x) & (uint64_t)(s->cap - 1);
  while (s->slot[h].key != x) h = (h + 1) & (uint64_t)(s->cap - 1);
  return s->slot[h].from;
}

/* The report of the violation found: the shortest run to the state its
 * move leaves from, then its events. */
static loom_result_t loom__pexh_trace(loom__pexh_t *x, const loom__pset_t *set) {
  loom__pchk_t *c = x->c;
  int64_t n = 0, depth = 1;
  for (int r = 0; r < c->A; ++r) depth += c->len[r];
  int64_t *path = (int64_t *)malloc(sizeof(int64_t) * (size_t)depth);
  if (!path) return LOOM_ERR_OUT_OF_MEMORY;
  int pc[LOOM__PROTO_EXH_MAXACT], prev[LOOM__PROTO_EXH_MAXACT];
  for (int64_t y = x->best_state; y >= 0 && n < depth; y = loom__pset_from(set, y)) path[n++] = y;
  loom__pchk_say(c, x->best.v, "the run:");
  loom__pexh_decode(x, path[n - 1], prev);
  for (int64_t i = n - 2; i >= 0; --i) {
    loom__pexh_decode(x, path[i], pc);
    for (int q = 0; q < c->A; ++q)
      if (pc[q] != prev[q]) loom__pchk_line(c, "  ", q, prev[q]);
    memcpy(prev, pc, sizeof pc);
  }
  free(path);
  loom__pchk_events(c, &x->best);
  return LOOM_SUCCESS;
}

/* Expands state s of `depth` events run: each enabled move checked, new
 * states queued while no violation is known. */
static loom_result_t loom__pexh_expand(loom__pexh_t *x, loom__pset_t *set, int64_t s, int64_t depth) {
  loom__pchk_t *c = x->c;
  int pc[LOOM__PROTO_EXH_MAXACT], moved = 0, finished = 1;
  loom__pexh_decode(x, s, pc);
  for (int r = 0; r < c->A; ++r) {
    finished &= pc[r] >= c->len[r];
    if (!loom__pexh_enabled(c, pc, r)) continue;
    moved = 1;
    c->rep->transitions++;
    int op = -1, oi = -1;
    const int v = loom__pexh_move(x, pc, r, &op, &oi);
    if (loom__pchk_better(v, depth, &x->best)) x->best = (loom__pviol_t){v, depth, r, pc[r], op, oi}, x->best_state = s;
    if (x->best.v) continue;
    if (loom__pset_add(set, s + x->radix[r], s) < 0) return LOOM_ERR_OUT_OF_MEMORY;
    if (set->n > LOOM__PROTO_EXH_STATES) return LOOM_ERR_UNSUPPORTED;
  }
  if (!moved && !finished && loom__pchk_better(LOOM__PV_DEADLOCK, depth, &x->best))
    x->best = (loom__pviol_t){LOOM__PV_DEADLOCK, depth, -1, -1, -1, -1}, x->best_state = s;
  return LOOM_SUCCESS;
}

static loom_result_t loom__pexh_explore(loom__pexh_t *x) {
  loom__pchk_t *c = x->c;
  int64_t prod = 1;
  for (int r = 0; r < c->A; ++r) {
    x->radix[r] = prod;
    if (prod > ((int64_t)1 << 62) / (c->len[r] + 1)) return LOOM_ERR_UNSUPPORTED;
    prod *= c->len[r] + 1;
  }
  loom__pset_t set;
  memset(&set, 0, sizeof set);
  loom_result_t rc = loom__pset_add(&set, 0, -1) < 0 ? LOOM_ERR_OUT_OF_MEMORY : LOOM_SUCCESS;
  for (int64_t head = 0; rc == LOOM_SUCCESS && head < set.n; ++head) {
    int pc[LOOM__PROTO_EXH_MAXACT];
    int64_t depth = 0;
    loom__pexh_decode(x, set.order[head], pc);
    for (int r = 0; r < c->A; ++r) depth += pc[r];
    if (x->best.v && depth > x->best.depth) break; /* the level of the first violation is done */
    rc = loom__pexh_expand(x, &set, set.order[head], depth);
  }
  c->rep->states = set.n;
  if (rc == LOOM_SUCCESS && x->best.v) rc = loom__pexh_trace(x, &set);
  free(set.slot), free(set.order);
  return rc;
}

loom_result_t loom__proto_check_exhaustive(const loom__proto_t *p, int calls, loom__proto_report_t *rep) {
  loom__pchk_t c;
  if (p && p->nact > LOOM__PROTO_EXH_MAXACT) {
    memset(rep, 0, sizeof *rep);
    return LOOM_ERR_UNSUPPORTED;
  }
  loom_result_t rc = loom__pchk_prepare(&c, p, calls, rep);
  rep->exhaustive = 1;
  if (rc == LOOM_SUCCESS && !rep->violation) {
    loom__pexh_t x;
    memset(&x, 0, sizeof x);
    x.c = &c;
    for (int r = 0; r < c.A && rc == LOOM_SUCCESS; ++r) {
      x.stale[r] = (int *)malloc(sizeof(int) * (3 * (size_t)c.len[r] + 1));
      if (!x.stale[r]) rc = LOOM_ERR_OUT_OF_MEMORY;
      for (int k = 0; x.stale[r] && k < c.len[r]; ++k) x.stale[r][3 * k] = -1;
    }
    if (rc == LOOM_SUCCESS) rc = loom__pexh_explore(&x);
    for (int r = 0; r < c.A; ++r) free(x.stale[r]);
    loom__pviol_t once;
    if (rc == LOOM_SUCCESS && !rep->violation && loom__pchk_once(&c, &once)) {
      loom__pchk_say(&c, once.v, "(in every run)");
      loom__pchk_events(&c, &once);
    }
  }
  loom__pchk_free(&c);
  return rc;
}

loom_result_t loom__proto_check(const loom__proto_t *p, int calls, loom__proto_report_t *rep) {
  if (p && p->nact <= LOOM__PROTO_EXH_MAXACT) {
    const loom_result_t rc = loom__proto_check_exhaustive(p, calls, rep);
    if (rc != LOOM_ERR_UNSUPPORTED) return rc;
  }
  return loom__proto_check_static(p, calls, rep);
}
