/*
 * proto_hb.h - what the two protocol checkers share (protocol.h says why
 * they decide the same): the protocol unrolled over the calls into events,
 * every WAIT matched to its SET, every reachable event's vector clock of
 * happens-before, the accesses of each buffer of each rank, how a pair of
 * accesses conflicts, what a READ sees, the once check, and the lines of a
 * report. Private to core's checker files.
 *
 *   proto_hb.c      the shared analysis
 *   proto_check.c   the exhaustive search (over states)
 *   proto_static.c  the static check (over pairs of events)
 */
#ifndef LOOM_CORE_PROTO_HB_H
#define LOOM_CORE_PROTO_HB_H

#include <stdint.h>

#include "core/protocol.h"

typedef struct loom__pev {
  loom__pstep_t s;
  int call;
  int mr, mi; /* WAIT: the matching SET's actor and event (mr -1: none needed; -2: none exists) */
} loom__pev_t;

/* An access: actor q's event i. */
typedef struct loom__pacc {
  int q, i;
} loom__pacc_t;

typedef struct loom__pchk {
  const loom__proto_t *p;
  int A, calls;                     /* actors, calls unrolled */
  int len[LOOM__PROTO_MAXACT];      /* events of each actor */
  int reach[LOOM__PROTO_MAXACT];    /* of them, those some run reaches (a prefix) */
  loom__pev_t *ev[LOOM__PROTO_MAXACT];
  int *clk[LOOM__PROTO_MAXACT];     /* [k * A + q]: actor q's events ordered before or at event k */
  int nobj;                         /* W x nbuf: buffer b of rank q is object q * nbuf + b */
  int *acc0, *wr0;                  /* [nobj + 1]: each object's first entry in acc / wr */
  loom__pacc_t *acc, *wr;           /* every access, the writing ones (WRITE, ADD): by object, then (q, i) */
  int *pf[LOOM__PROTO_MAXACT];      /* [len + 1]: event k's races are pair[pf[r][k] .. pf[r][k + 1]) */
  loom__pacc_t *pair;               /* the other event of each race (an unordered conflicting pair, listed
                                       under both of its events) */
  int8_t *pkind;                    /* and its violation (loom__pchk_pair) */
  int64_t npair;
  loom__proto_report_t *rep;
} loom__pchk_t;

/* A violation found: its kind (LOOM__PV_*), the depth at which the
 * breadth-first search meets it, actor r's event k and the other event
 * (q, i) (q -1: none). */
typedef struct loom__pviol {
  int v;
  int64_t depth;
  int r, k, q, i;
} loom__pviol_t;

/* Validates p, unrolls it over `calls`, checks and matches its signals
 * (a LOOM__PV_SIGNAL violation is reported into rep), gives the reachable
 * events their clocks, lists the accesses and every event's races. LOOM_ERR_INVALID_ARGUMENT
 * for a malformed protocol, LOOM_ERR_OUT_OF_MEMORY. Free c with
 * loom__pchk_free whatever it returns. */
loom_result_t loom__pchk_prepare(loom__pchk_t *c, const loom__proto_t *p, int calls, loom__proto_report_t *rep);
void loom__pchk_free(loom__pchk_t *c);

/* Event (q, i) ordered before event (r, k) (both reachable)? */
static inline int loom__pchk_hb(const loom__pchk_t *c, int q, int i, int r, int k) {
  if (q == r) return i < k;
  return c->clk[r][(int64_t)k * c->A + q] > i;
}

/* The violation that accesses (q, i) and (r, k) of different actors make
 * if neither is ordered before the other: a LOOM__PV_RACE_WRITE,
 * _OVERWRITE or _RACE_READ; 0 when they do not conflict or are ordered. */
int loom__pchk_pair(const loom__pchk_t *c, int q, int i, int r, int k);
/* The READ (r, k) against the writes ordered before it: in its first
 * region whose last such write is of another call (or none), that write
 * in *q, *i (*q -1: none) and LOOM__PV_STALE_READ; 0 if every region holds
 * this call's data. */
int loom__pchk_stale(const loom__pchk_t *c, int r, int k, int *q, int *i);
/* The priority of a kind among violations met at one depth (0: none). */
int loom__pchk_priority(int v);
/* 1 if violation v met at depth d is reported before `best` (less depth,
 * then a kind of higher priority; the first found among equals). */
int loom__pchk_better(int v, int64_t d, const loom__pviol_t *best);
/* The once check over the reachable events: the first write of a once
 * buffer replaced unread or never read (LOOM__PV_ONCE into *out), 0. */
int loom__pchk_once(const loom__pchk_t *c, loom__pviol_t *out);

/* The report: its head ("name: violation: msg"), then lines of events. */
void loom__pchk_say(loom__pchk_t *c, int v, const char *msg);
void loom__pchk_line(loom__pchk_t *c, const char *lead, int r, int k);
/* The lines of violation x (without a run): the event and the other
 * event, or for a deadlock each blocked actor's next step. */
void loom__pchk_events(loom__pchk_t *c, const loom__pviol_t *x);

#endif /* LOOM_CORE_PROTO_HB_H */
