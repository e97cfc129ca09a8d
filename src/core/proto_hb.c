/*
 * proto_hb.c - what both protocol checkers share (proto_hb.h; the
 * semantics and why the checkers agree: protocol.h).
 *
 * 1. Unroll: actor a's events are its list repeated `calls` times (event k
 *    is step k mod n of call k / n + 1).
 * 2. Match: each WAIT for v > 0 is matched to the first SET of its slot
 *    with a value >= v (every slot must have one writer whose values never
 *    decrease: otherwise a LOOM__PV_SIGNAL violation). Because of that, a
 *    WAIT can run exactly when its matching SET has run.
 * 3. Clocks: happens-before is static (it does not depend on the
 *    interleaving), so each event gets a vector clock once: clk[e][q] = the
 *    number of actor q's events ordered before or at e, in a topological
 *    order of program order, call boundaries and matched edges. Events
 *    that no run reaches (behind a WAIT that can never fire) get none; the
 *    others are R, a prefix of each actor's events.
 * 4. Accesses: the reachable READs, WRITEs and ADDs of each buffer of each
 *    rank (an object), in (actor, event) order, and the writing ones apart:
 *    a READ's writes are looked up by object.
 * 5. Races: every unordered conflicting pair of reachable accesses (a
 *    write against each access of its object), listed under both events:
 *    the static check reads them, the exhaustive search asks of a move only
 *    whether one of its event's partners has run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/proto_hb.h"

const char *loom__proto_violation_str(int v) {
  switch (v) {
    case LOOM__PV_NONE: return "none";
    case LOOM__PV_DEADLOCK: return "deadlock";
    case LOOM__PV_STALE_READ: return "read before publish (the data of another call)";
    case LOOM__PV_RACE_READ: return "read not ordered after a peer's write (read before publish)";
    case LOOM__PV_OVERWRITE: return "overwrite of a region a peer may still read (no consumed handshake)";
    case LOOM__PV_RACE_WRITE: return "two writes of a region not ordered";
    case LOOM__PV_SIGNAL: return "a signal with two writers or a decreasing value";
    case LOOM__PV_ONCE: return "a result written and not read before the call replaces it or ends";
    default: return "?";
  }
}

static int loom__pchk_isbuf(const loom__pstep_t *s) {
  return s->kind == LOOM__PS_WRITE || s->kind == LOOM__PS_READ || s->kind == LOOM__PS_ADD;
}

/* A step that changes the data: WRITE or ADD. */
static int loom__pchk_writes(const loom__pstep_t *s) { return s->kind == LOOM__PS_WRITE || s->kind == LOOM__PS_ADD; }

/* Validates the steps and unrolls them over the calls. */
static loom_result_t loom__pchk_unroll(loom__pchk_t *c) {
  const loom__proto_t *p = c->p;
  if (p->overflow || p->W < 1 || p->W > LOOM__PROTO_MAXW || p->nact < 1 || p->nact > LOOM__PROTO_MAXACT)
    return LOOM_ERR_INVALID_ARGUMENT;
  for (int r = 0; r < p->nact; ++r) {
    if (p->rank_of[r] < 0 || p->rank_of[r] >= p->W) return LOOM_ERR_INVALID_ARGUMENT;
    for (int i = 0; i < p->n[r]; ++i) {
      const loom__pstep_t *s = &p->steps[r][i];
      const int isbuf = loom__pchk_isbuf(s);
      if (s->kind < 0 || s->kind > LOOM__PS_ADD || s->owner < 0 || s->owner >= p->W || s->obj < 0 ||
          s->obj >= (isbuf ? p->nbuf : p->nsig) || (!isbuf && s->lo >= LOOM__PROTO_MAXSLOT) || s->lo < 0 ||
          s->hi < s->lo)
        return LOOM_ERR_INVALID_ARGUMENT;
    }
    c->len[r] = p->n[r] * c->calls;
    c->ev[r] = (loom__pev_t *)calloc((size_t)c->len[r] + 1, sizeof(loom__pev_t));
    c->clk[r] = (int *)malloc(sizeof(int) * ((size_t)c->len[r] * (size_t)c->A + 1));
    if (!c->ev[r] || !c->clk[r]) return LOOM_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < c->len[r]; ++k) {
      c->ev[r][k].s = p->steps[r][k % p->n[r]];
      c->ev[r][k].call = k / p->n[r] + 1;
      c->ev[r][k].mr = -1;
    }
  }
  return LOOM_SUCCESS;
}

void loom__pchk_say(loom__pchk_t *c, int v, const char *msg) {
  c->rep->violation = v;
  snprintf(c->rep->text, sizeof c->rep->text, "%s: %s: %s\n", c->p->name, loom__proto_violation_str(v), msg);
}

/* The SETs of every signal slot, each slot's in its writer's order:
 * slot x's are the events set[first[x] .. first[x + 1]) of actor writer[x]. */
typedef struct loom__pslots {
  int n, per;  /* slots; slots per (owner, signal) */
  int *writer, *last, *first, *set;
} loom__pslots_t;

static int loom__pchk_slot(const loom__pslots_t *t, const loom__pchk_t *c, const loom__pstep_t *s) {
  return (s->owner * c->p->nsig + s->obj) * t->per + s->lo;
}

static void loom__pslots_free(loom__pslots_t *t) { free(t->writer), free(t->last), free(t->first), free(t->set); }

/* Counts every slot's SETs; a LOOM__PV_SIGNAL violation (reported) for a
 * slot with two writers or a decreasing value. */
static loom_result_t loom__pchk_count_sets(loom__pchk_t *c, loom__pslots_t *t) {
  int total = 0;
  t->per = 1;
  for (int r = 0; r < c->A; ++r) {
    total += c->len[r];
    for (int i = 0; i < c->p->n[r]; ++i)
      if (!loom__pchk_isbuf(&c->p->steps[r][i]) && c->p->steps[r][i].lo >= t->per) t->per = c->p->steps[r][i].lo + 1;
  }
  t->n = c->p->W * (c->p->nsig > 0 ? c->p->nsig : 1) * t->per;
  t->writer = (int *)malloc(sizeof(int) * (size_t)t->n), t->last = (int *)calloc((size_t)t->n, sizeof(int));
  t->first = (int *)calloc((size_t)t->n + 1, sizeof(int)), t->set = (int *)malloc(sizeof(int) * ((size_t)total + 1));
  if (!t->writer || !t->last || !t->first || !t->set) return LOOM_ERR_OUT_OF_MEMORY;
  for (int x = 0; x < t->n; ++x) t->writer[x] = -1;
  for (int r = 0; r < c->A; ++r)
    for (int k = 0; k < c->len[r]; ++k) {
      const loom__pev_t *e = &c->ev[r][k];
      if (e->s.kind != LOOM__PS_SET) continue;
      const int x = loom__pchk_slot(t, c, &e->s), v = e->call + e->s.delta;
      if ((t->writer[x] >= 0 && t->writer[x] != r) || v < t->last[x]) {
        char msg[256], st[96];
        loom__proto_step_str(c->p, &e->s, e->call, st, sizeof st);
        snprintf(msg, sizeof msg, "actor %d (rank %d) call %d: %s", r, c->p->rank_of[r], e->call, st);
        loom__pchk_say(c, LOOM__PV_SIGNAL, msg);
        return LOOM_SUCCESS;
      }
      t->writer[x] = r, t->last[x] = v, t->first[x + 1]++;
    }
  return LOOM_SUCCESS;
}

/* Matches every WAIT for v > 0 to the first SET of its slot >= v. */
static loom_result_t loom__pchk_match(loom__pchk_t *c) {
  loom__pslots_t t;
  memset(&t, 0, sizeof t);
  loom_result_t rc = loom__pchk_count_sets(c, &t);
  if (rc != LOOM_SUCCESS || c->rep->violation) {
    loom__pslots_free(&t);
    return rc;
  }
  for (int x = 0; x < t.n; ++x) t.first[x + 1] += t.first[x];
  for (int x = 0; x < t.n; ++x) t.last[x] = t.first[x]; /* now: the next free entry of slot x */
  for (int r = 0; r < c->A; ++r)
    for (int k = 0; k < c->len[r]; ++k)
      if (c->ev[r][k].s.kind == LOOM__PS_SET) t.set[t.last[loom__pchk_slot(&t, c, &c->ev[r][k].s)]++] = k;
  for (int r = 0; r < c->A; ++r)
    for (int k = 0; k < c->len[r]; ++k) {
      loom__pev_t *e = &c->ev[r][k];
      const int v = e->call + e->s.delta;
      if (e->s.kind != LOOM__PS_WAIT || v <= 0) continue;
      const int x = loom__pchk_slot(&t, c, &e->s), w = t.writer[x];
      int lo = t.first[x], hi = t.first[x + 1]; /* the first SET >= v: values grow in the writer's order */
      while (w >= 0 && lo < hi) {
        const int mid = (lo + hi) / 2;
        const loom__pev_t *s = &c->ev[w][t.set[mid]];
        if (s->call + s->s.delta >= v) hi = mid;
        else lo = mid + 1;
      }
      e->mr = w >= 0 && lo < t.first[x + 1] ? w : -2;
      e->mi = e->mr >= 0 ? t.set[lo] : 0;
    }
  loom__pslots_free(&t);
  return LOOM_SUCCESS;
}

/* The call boundary before actor r's event k: -1 if k starts no call c >= 2,
 * else the call c - 1 that every actor of r's rank must have finished. */
static int loom__pchk_boundary(const loom__pchk_t *c, int r, int k) {
  const int n = c->p->n[r];
  return c->p->call_barrier && n > 0 && k > 0 && k % n == 0 ? k / n : -1;
}

/* Joins clock ck with the clock of actor q's event i. */
static void loom__pchk_join(loom__pchk_t *c, int *ck, int q, int i) {
  const int *m = &c->clk[q][(int64_t)i * c->A];
  for (int x = 0; x < c->A; ++x)
    if (m[x] > ck[x]) ck[x] = m[x];
}

/* Can the clock of actor r's event k be computed (done[]: computed so far)? */
static int loom__pchk_ready(const loom__pchk_t *c, const int *done, int r, int k) {
  const loom__pev_t *e = &c->ev[r][k];
  if (e->s.kind == LOOM__PS_WAIT && e->mr != -1 && (e->mr == -2 || e->mi >= done[e->mr])) return 0;
  const int prev = loom__pchk_boundary(c, r, k);
  for (int q = 0; prev > 0 && q < c->A; ++q)
    if (q != r && c->p->rank_of[q] == c->p->rank_of[r] && c->p->n[q] > 0 && done[q] < prev * c->p->n[q]) return 0;
  return 1;
}

/* Vector clocks in a topological order of program order, call boundaries
 * and matched edges; c->reach[r]: how many of r's events got one. */
static void loom__pchk_clocks(loom__pchk_t *c) {
  const int A = c->A;
  int progress = 1;
  for (int r = 0; r < A; ++r) c->reach[r] = 0;
  while (progress) {
    progress = 0;
    for (int r = 0; r < A; ++r)
      while (c->reach[r] < c->len[r] && loom__pchk_ready(c, c->reach, r, c->reach[r])) {
        const int k = c->reach[r], prev = loom__pchk_boundary(c, r, k);
        const loom__pev_t *e = &c->ev[r][k];
        int *ck = &c->clk[r][(int64_t)k * A];
        for (int q = 0; q < A; ++q) ck[q] = k > 0 ? c->clk[r][(int64_t)(k - 1) * A + q] : 0;
        if (e->s.kind == LOOM__PS_WAIT && e->mr >= 0) loom__pchk_join(c, ck, e->mr, e->mi);
        for (int q = 0; prev > 0 && q < A; ++q)
          if (q != r && c->p->rank_of[q] == c->p->rank_of[r] && c->p->n[q] > 0)
            loom__pchk_join(c, ck, q, prev * c->p->n[q] - 1);
        ck[r] = k + 1;
        c->reach[r]++, progress = 1;
      }
  }
}

/* The reachable accesses by object, in (actor, event) order: all of them
 * (acc) and the writing ones (wr). */
static loom_result_t loom__pchk_accesses(loom__pchk_t *c) {
  const int nbuf = c->p->nbuf;
  c->nobj = c->p->W * (nbuf > 0 ? nbuf : 1);
  int na = 0, nw = 0;
  c->acc0 = (int *)calloc((size_t)c->nobj + 2, sizeof(int)), c->wr0 = (int *)calloc((size_t)c->nobj + 2, sizeof(int));
  if (!c->acc0 || !c->wr0) return LOOM_ERR_OUT_OF_MEMORY;
  for (int pass = 0; pass < 2; ++pass) {
    for (int r = 0; r < c->A; ++r)
      for (int k = 0; k < c->reach[r]; ++k) {
        const loom__pstep_t *s = &c->ev[r][k].s;
        if (!loom__pchk_isbuf(s)) continue;
        const int o = s->owner * nbuf + s->obj;
        if (pass == 0) {
          c->acc0[o + 2]++, na++;
          if (loom__pchk_writes(s)) c->wr0[o + 2]++, nw++;
          continue;
        }
        c->acc[c->acc0[o + 1]++] = (loom__pacc_t){r, k};
        if (loom__pchk_writes(s)) c->wr[c->wr0[o + 1]++] = (loom__pacc_t){r, k};
      }
    if (pass == 1) break;
    for (int o = 0; o < c->nobj; ++o) c->acc0[o + 2] += c->acc0[o + 1], c->wr0[o + 2] += c->wr0[o + 1];
    c->acc = (loom__pacc_t *)malloc(sizeof(loom__pacc_t) * ((size_t)na + 1));
    c->wr = (loom__pacc_t *)malloc(sizeof(loom__pacc_t) * ((size_t)nw + 1));
    if (!c->acc || !c->wr) return LOOM_ERR_OUT_OF_MEMORY;
  }
  return LOOM_SUCCESS; /* acc0[o] .. acc0[o + 1]: object o's (the fill shifted the counts down by one) */
}

/* Every event's races (unordered conflicting pairs), in two passes: count, then list. */
static loom_result_t loom__pchk_races(loom__pchk_t *c) {
  int start[LOOM__PROTO_MAXACT] = {0};
  for (int r = 0; r < c->A; ++r)
    if (!(c->pf[r] = (int *)calloc((size_t)c->len[r] + 2, sizeof(int)))) return LOOM_ERR_OUT_OF_MEMORY;
  for (int pass = 0; pass < 2; ++pass) {
    for (int o = 0; o < c->nobj; ++o)
      for (int w = c->wr0[o]; w < c->wr0[o + 1]; ++w)
        for (int x = c->acc0[o]; x < c->acc0[o + 1]; ++x) {
          const int q = c->wr[w].q, i = c->wr[w].i, r = c->acc[x].q, k = c->acc[x].i;
          if (r == q || (c->ev[r][k].s.kind != LOOM__PS_READ && (r < q || (r == q && k < i)))) continue;
          const int v = loom__pchk_pair(c, q, i, r, k);
          if (!v) continue;
          if (pass == 0) {
            c->pf[q][i + 2]++, c->pf[r][k + 2]++, c->npair++;
            continue;
          }
          const int a = c->pf[q][i + 1]++, b = c->pf[r][k + 1]++;
          c->pair[a] = (loom__pacc_t){r, k}, c->pair[b] = (loom__pacc_t){q, i};
          c->pkind[a] = c->pkind[b] = (int8_t)v;
        }
    if (pass == 1) break;
    int64_t base = 0; /* every actor's lists after the previous actor's, in one array */
    for (int r = 0; r < c->A; ++r) {
      c->pf[r][1] = start[r] = (int)base;
      for (int k = 0; k < c->len[r]; ++k) c->pf[r][k + 2] += c->pf[r][k + 1];
      base = c->pf[r][c->len[r] + 1];
    }
    c->pair = (loom__pacc_t *)malloc(sizeof(loom__pacc_t) * ((size_t)base + 1));
    c->pkind = (int8_t *)malloc((size_t)base + 1);
    if (!c->pair || !c->pkind) return LOOM_ERR_OUT_OF_MEMORY;
  }
  for (int r = 0; r < c->A; ++r) c->pf[r][0] = start[r]; /* the fill shifted the ends down by one */
  return LOOM_SUCCESS;
}

loom_result_t loom__pchk_prepare(loom__pchk_t *c, const loom__proto_t *p, int calls, loom__proto_report_t *rep) {
  memset(c, 0, sizeof *c);
  memset(rep, 0, sizeof *rep);
  if (!p || calls < 1 || calls > LOOM__PROTO_MAXCALLS) return LOOM_ERR_INVALID_ARGUMENT;
  c->p = p, c->A = p->nact, c->calls = calls, c->rep = rep;
  loom_result_t rc = loom__pchk_unroll(c);
  if (rc == LOOM_SUCCESS) rc = loom__pchk_match(c);
  if (rc != LOOM_SUCCESS || rep->violation) return rc;
  loom__pchk_clocks(c);
  rc = loom__pchk_accesses(c);
  return rc == LOOM_SUCCESS ? loom__pchk_races(c) : rc;
}

void loom__pchk_free(loom__pchk_t *c) {
  for (int r = 0; r < LOOM__PROTO_MAXACT; ++r) free(c->ev[r]), free(c->clk[r]), free(c->pf[r]);
  free(c->acc0), free(c->wr0), free(c->acc), free(c->wr), free(c->pair), free(c->pkind);
  memset(c->ev, 0, sizeof c->ev), memset(c->clk, 0, sizeof c->clk), memset(c->pf, 0, sizeof c->pf);
  c->acc0 = c->wr0 = NULL, c->acc = c->wr = c->pair = NULL, c->pkind = NULL;
}

static int loom__pchk_overlap(const loom__pstep_t *a, const loom__pstep_t *b) {
  return a->owner == b->owner && a->obj == b->obj && a->lo < b->hi && b->lo < a->hi;
}

int loom__pchk_pair(const loom__pchk_t *c, int q, int i, int r, int k) {
  const loom__pev_t *a = &c->ev[q][i], *b = &c->ev[r][k];
  if (q == r || !loom__pchk_overlap(&a->s, &b->s)) return 0;
  if (a->s.kind == LOOM__PS_READ && b->s.kind == LOOM__PS_READ) return 0;
  /* additions of the same call commute; of different calls, the reads
   * and the zeroing WRITE between them must order them */
  if (a->s.kind == LOOM__PS_ADD && b->s.kind == LOOM__PS_ADD && a->call == b->call) return 0;
  if (loom__pchk_hb(c, q, i, r, k) || loom__pchk_hb(c, r, k, q, i)) return 0;
  if (loom__pchk_writes(&a->s) && loom__pchk_writes(&b->s)) return LOOM__PV_RACE_WRITE;
  /* a read of call c against a write of a later call: the next call
   * overwrites what a peer may still read; else the read may come
   * before the write that publishes its data */
  const loom__pev_t *rd = a->s.kind == LOOM__PS_READ ? a : b, *wr = rd == a ? b : a;
  return rd->call < wr->call ? LOOM__PV_OVERWRITE : LOOM__PV_RACE_READ;
}

int loom__pchk_stale(const loom__pchk_t *c, int r, int k, int *oq, int *oi) {
  const loom__pev_t *b = &c->ev[r][k];
  if (b->s.kind != LOOM__PS_READ) return 0;
  const int o = b->s.owner * c->p->nbuf + b->s.obj;
  for (int g = b->s.lo; g < b->s.hi; ++g) {
    int lq = -1, li = -1;
    for (int x = c->wr0[o]; x < c->wr0[o + 1]; ++x) {
      const int q = c->wr[x].q, i = c->wr[x].i;
      const loom__pstep_t *a = &c->ev[q][i].s;
      if (g < a->lo || g >= a->hi || !loom__pchk_hb(c, q, i, r, k)) continue;
      if (lq < 0 || loom__pchk_hb(c, lq, li, q, i)) lq = q, li = i;
    }
    if (lq < 0 || c->ev[lq][li].call != b->call) {
      *oq = lq, *oi = li;
      return LOOM__PV_STALE_READ;
    }
  }
  return 0;
}

int loom__pchk_priority(int v) {
  switch (v) {
    case LOOM__PV_RACE_WRITE: return 4;
    case LOOM__PV_OVERWRITE: return 3;
    case LOOM__PV_RACE_READ: return 2;
    case LOOM__PV_STALE_READ: return 1;
    default: return 0;
  }
}

int loom__pchk_better(int v, int64_t d, const loom__pviol_t *best) {
  if (!v) return 0;
  if (!best->v || d < best->depth) return 1;
  return d == best->depth && loom__pchk_priority(v) > loom__pchk_priority(best->v);
}

/* Write (q, i) of region g read before the call replaces it? */
static int loom__pchk_read_before_replaced(const loom__pchk_t *c, int o, int q, int i, int g) {
  const int call = c->ev[q][i].call;
  for (int x = c->acc0[o]; x < c->acc0[o + 1]; ++x) {
    const int r = c->acc[x].q, k = c->acc[x].i;
    const loom__pev_t *rd = &c->ev[r][k];
    if (rd->s.kind != LOOM__PS_READ || rd->call != call || g < rd->s.lo || g >= rd->s.hi ||
        !loom__pchk_hb(c, q, i, r, k))
      continue;
    int replaced = 0;
    for (int y = c->wr0[o]; y < c->wr0[o + 1] && !replaced; ++y) {
      const int q2 = c->wr[y].q, i2 = c->wr[y].i;
      const loom__pev_t *w2 = &c->ev[q2][i2];
      replaced = (q2 != q || i2 != i) && w2->s.kind == LOOM__PS_WRITE && w2->call == call && g >= w2->s.lo &&
                 g < w2->s.hi && loom__pchk_hb(c, q, i, q2, i2) && loom__pchk_hb(c, q2, i2, r, k);
    }
    if (!replaced) return 1;
  }
  return 0;
}

int loom__pchk_once(const loom__pchk_t *c, loom__pviol_t *out) {
  if (c->p->nbuf == 0) return 0;
  for (int o = 0; o < c->nobj; ++o) {
    if (!c->p->once[o % c->p->nbuf]) continue;
    for (int x = c->wr0[o]; x < c->wr0[o + 1]; ++x) {
      const int q = c->wr[x].q, i = c->wr[x].i;
      const loom__pstep_t *w = &c->ev[q][i].s;
      for (int g = w->lo; g < w->hi && w->kind == LOOM__PS_WRITE; ++g)
        if (!loom__pchk_read_before_replaced(c, o, q, i, g)) {
          *out = (loom__pviol_t){LOOM__PV_ONCE, 0, q, i, -1, -1};
          return LOOM__PV_ONCE;
        }
    }
  }
  return 0;
}

void loom__pchk_line(loom__pchk_t *c, const char *lead, int r, int k) {
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

void loom__pchk_events(loom__pchk_t *c, const loom__pviol_t *x) {
  if (x->v == LOOM__PV_DEADLOCK) {
    for (int q = 0; q < c->A; ++q)
      if (c->reach[q] < c->len[q]) loom__pchk_line(c, "  blocked:", q, c->reach[q]);
    return;
  }
  loom__pchk_line(c, "  ==>", x->r, x->k);
  if (x->v == LOOM__PV_ONCE) return;
  const char *with = x->v == LOOM__PV_STALE_READ ? "  sees the data of:" : "  not ordered with:";
  if (x->q >= 0) loom__pchk_line(c, with, x->q, x->i);
  else loom__pchk_line(c, "  sees no write of its call:", x->r, x->k);
}
