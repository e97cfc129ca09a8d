/*
 * proto_check.c - the protocol model checker (semantics: protocol.h).
 *
 * 1. Unroll: actor a's events are its list repeated `calls` times (event k
 *    is step k mod n of call k / n + 1).
 * 2. Match: each WAIT for v > 0 is matched to the first SET of its slot
 *    with a value >= v (every slot must have one writer whose values never
 *    decrease: otherwise a LOOM__PV_SIGNAL violation). Because of that, a
 *    WAIT can run exactly when its matching SET has run, so a state is the
 *    vector of the actors' positions alone: signal values follow from it.
 * 3. Clocks: happens-before is static (it does not depend on the
 *    interleaving), so each event gets a vector clock once: clk[e][q] = the
 *    number of actor q's events ordered before or at e. Events that no run
 *    reaches (behind a WAIT that can never fire) keep none.
 * 4. Explore: breadth first over the states (the positions packed into one
 *    integer in mixed radix; the visited ones in a hash set, each with the
 *    state it was reached from), so a counterexample is a shortest run. At
 *    each state: a deadlock if no actor can move before all are done; for
 *    each move that is an access, the races against the conflicting
 *    accesses other actors already made, and for a READ the call of the
 *    data it sees (the last WRITE of each region ordered before it).
 * The check of a move depends on the state and the move only, and every
 * reachable (state, move) is tried once, so every conflict that some run
 * exhibits is found: two unordered conflicting accesses are both enabled
 * after the events ordered before either of them have run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/protocol.h"

#define LOOM__PROTO_MAXSLOT 64
#define LOOM__PROTO_MAXSTATES ((int64_t)1 << 26) /* visited states before the checker gives up */

typedef struct loom__pev {
  loom__pstep_t s;
  int call;
  int mr, mi; /* WAIT: the matching SET's rank and event (mr -1: none needed; -2: none exists) */
} loom__pev_t;

typedef struct loom__pchk {
  const loom__proto_t *p;
  int W, calls;
  int len[LOOM__PROTO_MAXACT];
  loom__pev_t *ev[LOOM__PROTO_MAXACT];
  int *clk[LOOM__PROTO_MAXACT]; /* [k * W + q] (W: the actors here); -1: unreachable */
  int64_t radix[LOOM__PROTO_MAXACT];
  loom__proto_report_t *rep;
} loom__pchk_t;

const char *loom__proto_violation_str(int v) {
  switch (v) {
    case LOOM__PV_NONE: return "none";
    case LOOM__PV_DEADLOCK: return "deadlock";
    case LOOM__PV_STALE_READ: return "read before publish (the data of another call)";
    case LOOM__PV_RACE_READ: return "read not ordered after a peer's write (read before publish)";
    case LOOM__PV_OVERWRITE: return "overwrite of a region a peer may still read (no consumed handshake)";
    case LOOM__PV_RACE_WRITE: return "two writes of a region not ordered";
    case LOOM__PV_SIGNAL: return "a signal with two writers or a decreasing value";
    default: return "?";
  }
}

static int loom__pchk_slot(const loom__pstep_t *s) {
  return (s->owner * LOOM__PROTO_MAXOBJ + s->obj) * LOOM__PROTO_MAXSLOT + s->lo;
}

/* Validates the steps and unrolls them over the calls. */
static loom_result_t loom__pchk_unroll(loom__pchk_t *c) {
  const loom__proto_t *p = c->p;
  if (p->overflow || p->W < 1 || p->W > LOOM__PROTO_MAXW || p->nact < 1 || p->nact > LOOM__PROTO_MAXACT)
    return LOOM_ERR_INVALID_ARGUMENT;
  for (int r = 0; r < p->nact; ++r) {
    for (int i = 0; i < p->n[r]; ++i) {
      const loom__pstep_t *s = &p->steps[r][i];
      const int isbuf = s->kind == LOOM__PS_WRITE || s->kind == LOOM__PS_READ || s->kind == LOOM__PS_ADD;
      if (s->obj < 0 || s->obj >= (isbuf ? p->nbuf : p->nsig) || (!isbuf && s->lo >= LOOM__PROTO_MAXSLOT))
        return LOOM_ERR_INVALID_ARGUMENT;
    }
    c->len[r] = p->n[r] * c->calls;
    c->ev[r] = (loom__pev_t *)calloc((size_t)c->len[r] + 1, sizeof(loom__pev_t));
    c->clk[r] = (int *)malloc(sizeof(int) * ((size_t)c->len[r] * (size_t)c->W + 1));
    if (!c->ev[r] || !c->clk[r]) return LOOM_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < c->len[r]; ++k) {
      c->ev[r][k].s = p->steps[r][k % p->n[r]];
      c->ev[r][k].call = k / p->n[r] + 1;
      c->ev[r][k].mr = -1;
    }
  }
  return LOOM_SUCCESS;
}

static void loom__pchk_say(loom__pchk_t *c, int v, const char *msg) {
  c->rep->violation = v;
  snprintf(c->rep->text, sizeof c->rep->text, "%s: %s: %s\n", c->p->name, loom__proto_violation_str(v), msg);
}

/* Checks one writer per slot and growing values; matches every WAIT. */
static void loom__pchk_match(loom__pchk_t *c) {
  int writer[LOOM__PROTO_MAXW * LOOM__PROTO_MAXOBJ * LOOM__PROTO_MAXSLOT]; /* actor */
  int last[LOOM__PROTO_MAXW * LOOM__PROTO_MAXOBJ * LOOM__PROTO_MAXSLOT];
  char msg[256], st[96];
  for (size_t i = 0; i < sizeof writer / sizeof *writer; ++i) writer[i] = -1, last[i] = 0;
  for (int r = 0; r < c->W; ++r)
    for (int k = 0; k < c->len[r]; ++k) {
      const loom__pev_t *e = &c->ev[r][k];
      if (e->s.kind != LOOM__PS_SET) continue;
      const int sl = loom__pchk_slot(&e->s), v = e->call + e->s.delta;
      if ((writer[sl] >= 0 && writer[sl] != r) || v < last[sl]) {
        loom__proto_step_str(c->p, &e->s, e->call, st, sizeof st);
        snprintf(msg, sizeof msg, "actor %d (rank %d) call %d: %s", r, c->p->rank_of[r], e->call, st);
        loom__pchk_say(c, LOOM__PV_SIGNAL, msg);
        return;
      }
      writer[sl] = r, last[sl] = v;
    }
  for (int r = 0; r < c->W; ++r)
    for (int k = 0; k < c->len[r]; ++k) {
      loom__pev_t *e = &c->ev[r][k];
      if (e->s.kind != LOOM__PS_WAIT || e->call + e->s.delta <= 0) continue;
      const int sl = loom__pchk_slot(&e->s), w = writer[sl];
      e->mr = -2;
      for (int i = 0; w >= 0 && i < c->len[w]; ++i) {
        const loom__pev_t *s = &c->ev[w][i];
        if (s->s.kind == LOOM__PS_SET && loom__pchk_slot(&s->s) == sl && s->call + s->s.delta >= e->call + e->s.delta) {
          e->mr = w, e->mi = i;
          break;
        }
      }
    }
}

/* The call boundary before actor r's event k: -1 if k starts no call c >= 2,
 * else the call c - 1 that every actor of r's rank must have finished. */
static int loom__pchk_boundary(const loom__pchk_t *c, int r, int k) {
  const int n = c->p->n[r];
  return c->p->call_barrier && n > 0 && k > 0 && k % n == 0 ? k / n : -1;
}

/* Joins clock ck with the clock of actor q's event i. */
static void loom__pchk_join(loom__pchk_t *c, int *ck, int q, int i) {
  for (int x = 0; x < c->W; ++x) {
    const int m = c->clk[q][(size_t)i * c->W + x];
    if (m > ck[x]) ck[x] = m;
  }
}

/* Can the clock of actor r's event k be computed (done[]: computed so far)? */
static int loom__pchk_ready(const loom__pchk_t *c, const int *done, int r, int k) {
  const loom__pev_t *e = &c->ev[r][k];
  if (e->s.kind == LOOM__PS_WAIT && e->mr != -1 && (e->mr == -2 || e->mi >= done[e->mr])) return 0;
  const int prev = loom__pchk_boundary(c, r, k);
  for (int q = 0; prev > 0 && q < c->W; ++q)
    if (q != r && c->p->rank_of[q] == c->p->rank_of[r] && c->p->n[q] > 0 && done[q] < prev * c->p->n[q]) return 0;
  return 1;
}

/* Vector clocks in a topological order of program order, call boundaries
 * and matched edges. */
static void loom__pchk_clocks(loom__pchk_t *c) {
  const int W = c->W;
  int done[LOOM__PROTO_MAXACT] = {0}, progress = 1;
  for (int r = 0; r < W; ++r)
    for (int i = 0; i < c->len[r] * W; ++i) c->clk[r][i] = -1;
  while (progress) {
    progress = 0;
    for (int r = 0; r < W; ++r)
      while (done[r] < c->len[r] && loom__pchk_ready(c, done, r, done[r])) {
        const int k = done[r], prev = loom__pchk_boundary(c, r, k);
        const loom__pev_t *e = &c->ev[r][k];
        int *ck = &c->clk[r][(size_t)k * W];
        for (int q = 0; q < W; ++q) ck[q] = k > 0 ? c->clk[r][(size_t)(k - 1) * W + q] : 0;
        if (e->s.kind == LOOM__PS_WAIT && e->mr >= 0) loom__pchk_join(c, ck, e->mr, e->mi);
        for (int q = 0; prev > 0 && q < W; ++q)
          if (q != r && c->p->rank_of[q] == c->p->rank_of[r] && c->p->n[q] > 0)
            loom__pchk_join(c, ck, q, prev * c->p->n[q] - 1);
        ck[r] = k + 1;
        done[r]++, progress = 1;
      }
  }
}

/* Event (p, i) ordered before event (r, k)? */
static int loom__pchk_hb(const loom__pchk_t *c, int p, int i, int r, int k) {
  if (p == r) return i < k;
  return c->clk[r][(size_t)k * c->W + p] > i;
}

static int loom__pchk_overlap(const loom__pstep_t *a, const loom__pstep_t *b) {
  return a->owner == b->owner && a->obj == b->obj && a->lo < b->hi && b->lo < a->hi;
}

static int loom__pchk_access(const loom__pstep_t *s) {
  return s->kind == LOOM__PS_WRITE || s->kind == LOOM__PS_READ || s->kind == LOOM__PS_ADD;
}

/* A step that changes the data: WRITE or ADD. */
static int loom__pchk_writes(const loom__pstep_t *s) { return s->kind == LOOM__PS_WRITE || s->kind == LOOM__PS_ADD; }

/* The violation rank r's event k makes in state pc (0: none); *op, *oi: the other event. */
static int loom__pchk_move(const loom__pchk_t *c, const int *pc, int r, int k, int *op, int *oi) {
  const loom__pev_t *b = &c->ev[r][k];
  if (!loom__pchk_access(&b->s)) return 0;
  for (int q = 0; q < c->W; ++q) {
    if (q == r) continue;
    for (int i = 0; i < pc[q]; ++i) {
      const loom__pev_t *a = &c->ev[q][i];
      if (!loom__pchk_access(&a->s) || !loom__pchk_overlap(&a->s, &b->s)) continue;
      if (a->s.kind == LOOM__PS_READ && b->s.kind == LOOM__PS_READ) continue;
      /* additions of the same call commute; of different calls, the reads
       * and the zeroing WRITE between them must order them */
      if (a->s.kind == LOOM__PS_ADD && b->s.kind == LOOM__PS_ADD && a->call == b->call) continue;
      if (loom__pchk_hb(c, q, i, r, k)) continue;
      *op = q, *oi = i;
      if (loom__pchk_writes(&a->s) && loom__pchk_writes(&b->s)) return LOOM__PV_RACE_WRITE;
      /* a read of call c against a write of a later call: the next call
       * overwrites what a peer may still read; else the read may come
       * before the write that publishes its data */
      const loom__pev_t *rd = a->s.kind == LOOM__PS_READ ? a : b, *wr = rd == a ? b : a;
      return rd->call < wr->call ? LOOM__PV_OVERWRITE : LOOM__PV_RACE_READ;
    }
  }
  if (b->s.kind != LOOM__PS_READ) return 0;
  for (int g = b->s.lo; g < b->s.hi; ++g) {
    int lq = -1, li = -1;
    for (int q = 0; q < c->W; ++q)
      for (int i = 0; i < (q == r ? k : pc[q]); ++i) {
        const loom__pstep_t *a = &c->ev[q][i].s;
        if (!loom__pchk_writes(a) || a->owner != b->s.owner || a->obj != b->s.obj || g < a->lo || g >= a->hi) continue;
        if (lq < 0 || loom__pchk_hb(c, lq, li, q, i)) lq = q, li = i;
      }
    if (lq < 0 || c->ev[lq][li].call != b->call) {
      *op = lq, *oi = li;
      return LOOM__PV_STALE_READ;
    }
  }
  return 0;
}

static void loom__pchk_decode(const loom__pchk_t *c, int64_t x, int *pc) {
  for (int r = c->W - 1; r >= 0; --r) pc[r] = (int)(x / c->radix[r]), x %= c->radix[r];
}

static int loom__pchk_enabled(const loom__pchk_t *c, const int *pc, int r) {
  if (pc[r] >= c->len[r]) return 0;
  const int prev = loom__pchk_boundary(c, r, pc[r]);
  for (int q = 0; prev > 0 && q < c->W; ++q)
    if (q != r && c->p->rank_of[q] == c->p->rank_of[r] && pc[q] < prev * c->p->n[q]) return 0;
  const loom__pev_t *e = &c->ev[r][pc[r]];
  if (e->s.kind != LOOM__PS_WAIT || e->mr == -1) return 1;
  return e->mr >= 0 && pc[e->mr] > e->mi;
}

/* The visited states: an open-addressing hash set of packed states, each
 * with the state it was first reached from; `order` lists them breadth
 * first (the queue). */
typedef struct loom__pset {
  int64_t *key, *from; /* key -1: empty */
  int64_t cap, n;
  int64_t *order;
} loom__pset_t;

static uint64_t loom__pset_hash(int64_t x) {
  uint64_t h = (uint64_t)x * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static loom_result_t loom__pset_grow(loom__pset_t *s) {
  const int64_t cap = s->cap ? s->cap * 2 : 1024;
  int64_t *key = (int64_t *)malloc(sizeof(int64_t) * (size_t)cap), *from = (int64_t *)malloc(sizeof(int64_t) * (size_t)cap);
  int64_t *order = (int64_t *)realloc(s->order, sizeof(int64_t) * (size_t)(cap / 2 + 1));
  if (!key || !from || !order) {
    free(key), free(from);
    if (order) s->order = order;
    return LOOM_ERR_OUT_OF_MEMORY;
  }
  s->order = order;
  for (int64_t i = 0; i < cap; ++i) key[i] = -1;
  for (int64_t i = 0; i < s->cap; ++i) {
    if (s->key[i] < 0) continue;
    uint64_t h = loom__pset_hash(s->key[i]) & (uint64_t)(cap - 1);
    while (key[h] >= 0) h = (h + 1) & (uint64_t)(cap - 1);
    key[h] = s->key[i], from[h] = s->from[i];
  }
  free(s->key), free(s->from);
  s->key = key, s->from = from, s->cap = cap;
  return LOOM_SUCCESS;
}

/* Adds x (reached from `from`): 1 if new, 0 if seen, -1 out of memory. */
static int loom__pset_add(loom__pset_t *s, int64_t x, int64_t from) {
  if (2 * (s->n + 1) > s->cap && loom__pset_grow(s) != LOOM_SUCCESS) return -1;
  uint64_t h = loom__pset_hash(x) & (uint64_t)(s->cap - 1);
  while (s->key[h] >= 0) {
    if (s->key[h] == x) return 0;
    h = (h + 1) & (uint64_t)(s->cap - 1);
  }
  s->key[h] = x, s->from[h] = from;
  s->order[s->n++] = x;
  return 1;
}

static int64_t loom__pset_from(const loom__pset_t *s, int64_t x) {
  uint64_t h = loom__pset_hash(x) & (uint64_t)(s->cap - 1);
  while (s->key[h] != x) h = (h + 1) & (uint64_t)(s->cap - 1);
  return s->from[h];
}

/* Appends one event's line to the report: "rank 1 call 2 step 3: ..." (an
 * actor beyond the first of its rank: "rank 1 actor 4 ..."). */
static void loom__pchk_line(loom__pchk_t *c, const char *lead, int r, int k) {
  char st[96], who[32];
  const loom__pev_t *e = &c->ev[r][k];
  loom__proto_step_str(c->p, &e->s, e->call, st, sizeof st);
  if (r < c->p->W) snprintf(who, sizeof who, "rank %d", r);
  else snprintf(who, sizeof who, "rank %d actor %d", c->p->rank_of[r], r);
  const size_t n = strlen(c->rep->text);
  if (n + 1 < sizeof c->rep->text)
    snprintf(c->rep->text + n, sizeof c->rep->text - n, "%s %s call %d step %d: %s\n", lead, who, e->call,
             k % c->p->n[r], st);
}

/* The report of violation v: the shortest run to state x, then the move of
 * actor r (and the other event op/oi it conflicts with), or, for a
 * deadlock, each blocked actor's step. */
static void loom__pchk_trace(loom__pchk_t *c, const loom__pset_t *set, int64_t x, int v, int r, int op, int oi) {
  int64_t path[LOOM__PROTO_MAXACT * LOOM__PROTO_MAXSTEPS * LOOM__PROTO_MAXCALLS + 1];
  int n = 0, pc[LOOM__PROTO_MAXACT], prev[LOOM__PROTO_MAXACT];
  for (int64_t y = x; y >= 0; y = loom__pset_from(set, y)) path[n++] = y;
  loom__pchk_say(c, v, "the run:");
  loom__pchk_decode(c, path[n - 1], prev);
  for (int i = n - 2; i >= 0; --i) {
    loom__pchk_decode(c, path[i], pc);
    for (int q = 0; q < c->W; ++q)
      if (pc[q] != prev[q]) loom__pchk_line(c, "  ", q, prev[q]);
    memcpy(prev, pc, sizeof pc);
  }
  loom__pchk_decode(c, x, pc);
  if (v == LOOM__PV_DEADLOCK) {
    for (int q = 0; q < c->W; ++q)
      if (pc[q] < c->len[q]) loom__pchk_line(c, "  blocked:", q, pc[q]);
    return;
  }
  loom__pchk_line(c, "  ==>", r, pc[r]);
  if (op >= 0) loom__pchk_line(c, v == LOOM__PV_STALE_READ ? "  sees the data of:" : "  not ordered with:", op, oi);
  else loom__pchk_line(c, "  sees no write of its call:", r, pc[r]);
}

/* Expands state x: each enabled move checked, new states queued. */
static loom_result_t loom__pchk_expand(loom__pchk_t *c, loom__pset_t *set, int64_t x) {
  int pc[LOOM__PROTO_MAXACT], moved = 0, finished = 1;
  loom__pchk_decode(c, x, pc);
  for (int r = 0; r < c->W; ++r) {
    finished &= pc[r] >= c->len[r];
    if (!loom__pchk_enabled(c, pc, r)) continue;
    moved = 1;
    c->rep->transitions++;
    int op = -1, oi = -1;
    const int v = loom__pchk_move(c, pc, r, pc[r], &op, &oi);
    if (v) {
      loom__pchk_trace(c, set, x, v, r, op, oi);
      return LOOM_SUCCESS;
    }
    if (loom__pset_add(set, x + c->radix[r], x) < 0) return LOOM_ERR_OUT_OF_MEMORY;
    if (set->n > LOOM__PROTO_MAXSTATES) return LOOM_ERR_UNSUPPORTED;
  }
  if (!moved && !finished) loom__pchk_trace(c, set, x, LOOM__PV_DEADLOCK, -1, -1, -1);
  return LOOM_SUCCESS;
}

static loom_result_t loom__pchk_explore(loom__pchk_t *c) {
  int64_t prod = 1;
  for (int r = 0; r < c->W; ++r) {
    c->radix[r] = prod;
    if (prod > ((int64_t)1 << 62) / (c->len[r] + 1)) return LOOM_ERR_UNSUPPORTED;
    prod *= c->len[r] + 1;
  }
  loom__pset_t set;
  memset(&set, 0, sizeof set);
  loom_result_t rc = loom__pset_add(&set, 0, -1) < 0 ? LOOM_ERR_OUT_OF_MEMORY : LOOM_SUCCESS;
  for (int64_t head = 0; rc == LOOM_SUCCESS && head < set.n && c->rep->violation == LOOM__PV_NONE; ++head)
    rc = loom__pchk_expand(c, &set, set.order[head]);
  c->rep->states = set.n;
  free(set.key), free(set.from), free(set.order);
  return rc;
}

loom_result_t loom__proto_check(const loom__proto_t *p, int calls, loom__proto_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  if (!p || calls < 1 || calls > LOOM__PROTO_MAXCALLS) return LOOM_ERR_INVALID_ARGUMENT;
  loom__pchk_t c;
  memset(&c, 0, sizeof c);
  c.p = p, c.W = p->nact, c.calls = calls, c.rep = rep;
  loom_result_t rc = loom__pchk_unroll(&c);
  if (rc == LOOM_SUCCESS) loom__pchk_match(&c);
  if (rc == LOOM_SUCCESS && rep->violation == LOOM__PV_NONE) {
    loom__pchk_clocks(&c);
    rc = loom__pchk_explore(&c);
  }
  for (int r = 0; r < LOOM__PROTO_MAXACT; ++r) free(c.ev[r]), free(c.clk[r]);
  return rc;
}
