/*
 * protocol.h - protocols as data, and the model checker that proves them
 * free of deadlocks and races over every interleaving of their ranks.
 *
 * The form. A protocol is, per rank r of W, the ordered lists of steps that
 * rank r's actors run in one call (one actor per rank, or more: a side
 * stream beside the main one) (the caller's accesses before and after the
 * kernel included: the caller writes `in` before the call, reads `out`
 * after it). Each step is one of
 *   WRITE buf@q [lo, hi)   rank r stores into regions lo..hi-1 of buffer
 *                          `buf` in rank q's memory (q == r: its own)
 *   READ  buf@q [lo, hi)   rank r loads them
 *   ADD   buf@q [lo, hi)   rank r adds into them (a reduction in memory:
 *                          ADDs commute with one another; against READs
 *                          and WRITEs they are writes)
 *   SET   sig@q[slot] = c + d   rank r stores the epoch value c + d into
 *                          slot `slot` of signal `sig` in rank q's memory
 *   WAIT  sig@q[slot] >= c + d  rank r spins until that slot holds at
 *                          least c + d
 * where c is the call number (1, 2, ...: calls run back to back on every
 * rank, so the list runs once per call) and d a small constant (0, or -1
 * for "the previous call"). Signals start at 0; a wait for a value <= 0
 * never blocks. Buffers and signals are named (loom__proto_buf/_sig).
 *
 * Semantics (what the checker assumes and what "ordered before" means).
 *  - Every step is atomic; a run is an interleaving of the actors' lists
 *    (an actor runs call 1's steps, then call 2's, ...). A WAIT can run
 *    only when its slot holds >= its value; the other steps can always
 *    run, except that with `call_barrier` a rank's actors start call c + 1
 *    only after all of them finished call c (the blocks of one kernel);
 *    without it (the default) only signals order a rank's actors: streams
 *    are forked and joined through local signals (an event record and
 *    wait is a SET and a WAIT).
 *  - Every signal slot has one writer (one actor SETs it) and its values
 *    never decrease in that actor's order (epochs only grow); the checker
 *    reports a protocol that breaks either.
 *  - Ordered before (happens-before, hb) is the smallest transitive
 *    relation containing program order within an actor (across calls
 *    too), with `call_barrier` the call boundary of a rank (every actor's
 *    last step of call c before every actor's first step of call c + 1)
 *    and, for each WAIT
 *    sig[slot] >= v, the edge from the FIRST
 *    SET of that slot (in its writer's order) whose value is >= v. The
 *    waiter may read any value >= v, written by that SET or a later one;
 *    release/acquire gives it at least the first one's history, so hb is
 *    what every run guarantees, whatever value the poll saw. hb does not
 *    depend on the interleaving.
 *  - Two accesses conflict when they touch overlapping regions of the same
 *    buffer of the same rank, come from different actors, and one writes.
 *
 * The checker (loom__proto_check) runs `calls` consecutive calls (two cover
 * buffer reuse across calls) and explores every interleaving: a state is
 * the vector of the actors' positions (signal values follow from it), the
 * visited states a hash set, and it proves, or prints a counterexample for:
 *  - no deadlock: in every reachable state some rank can move, until every
 *    actor finished every call (so every wait is eventually satisfied: an
 *    actor blocked forever is a deadlock once the others ran out);
 *  - no read before publish: a READ of call c sees, in every region, the
 *    data of a WRITE of call c that is ordered before it (not a stale
 *    call's, not none);
 *  - no overwrite before consumed / no race: every two conflicting accesses
 *    are ordered (a WRITE of call c+1 after every peer's READ of call c of
 *    the region, a READ after the WRITE it needs, WRITEs one after another).
 * A violation is reported with its trace: the steps, rank by rank, from
 * the start to the one that breaks the property (a shortest such run). What it does not prove:
 * anything about more than `calls` calls or other world sizes than the one
 * built (the tests use W = 2 and 3, two calls); the data computed; the
 * memory model below the step (fences, the proxies of TMA and the copy
 * engine are taken to give the release/acquire above); that the lists
 * agree with the kernels' code (they are written from the kernels' design).
 *
 *   protocol.c     building protocols (buffers, signals, steps, mutations)
 *   proto_check.c  the model checker
 *   proto_ops.c    the hand-written ops' protocols (coll, tp, embedding, optim)
 *   proto_lower.c  the language's fused collectives lowered to protocols
 */
#ifndef LOOM_LANG_PROTOCOL_H
#define LOOM_LANG_PROTOCOL_H

#include <stdint.h>

#include "loom.h"

#define LOOM__PROTO_MAXW 4      /* ranks */
#define LOOM__PROTO_MAXACT 8    /* actors (lists of steps), all ranks together */
#define LOOM__PROTO_MAXSTEPS 96 /* steps of one rank in one call */
#define LOOM__PROTO_MAXOBJ 8    /* buffers, signals */
#define LOOM__PROTO_MAXCALLS 3
#define LOOM__PROTO_NAME 32

typedef enum { LOOM__PS_WRITE = 0, LOOM__PS_READ, LOOM__PS_SET, LOOM__PS_WAIT, LOOM__PS_ADD } loom__ps_kind_t;

typedef struct loom__pstep {
  int8_t kind;   /* loom__ps_kind_t */
  int8_t owner;  /* the rank whose memory holds the buffer or signal */
  int8_t obj;    /* buffer or signal id */
  int8_t delta;  /* SET / WAIT: the value is call + delta */
  int16_t lo, hi; /* buffer: regions [lo, hi); signal: the slot in lo */
} loom__pstep_t;

typedef struct loom__proto {
  char name[LOOM__PROTO_NAME];
  int W;
  int nact;                        /* actors: W at first (actor r is rank r), more by loom__proto_actor */
  int rank_of[LOOM__PROTO_MAXACT];
  int call_barrier;                /* 1: a rank's actors meet at each call boundary (the blocks of one
                                    * kernel); 0: only the signals order them (fork / join of streams) */
  int nbuf, nsig;
  char buf[LOOM__PROTO_MAXOBJ][LOOM__PROTO_NAME];
  char sig[LOOM__PROTO_MAXOBJ][LOOM__PROTO_NAME];
  int n[LOOM__PROTO_MAXACT];
  loom__pstep_t steps[LOOM__PROTO_MAXACT][LOOM__PROTO_MAXSTEPS];
  int overflow; /* a step or name did not fit: loom__proto_check refuses it */
} loom__proto_t;

/* ---- protocol.c ------------------------------------------------------------- */
/* W ranks, one actor each (actor r runs on rank r). The step functions take
 * an actor `r` and the rank `owner` whose memory the step touches. */
void loom__proto_init(loom__proto_t *p, const char *name, int W);
/* A further actor on `rank` (a side stream, another block): its id. */
int loom__proto_actor(loom__proto_t *p, int rank);
/* The id of buffer / signal `name` (added on first use). */
int loom__proto_buf(loom__proto_t *p, const char *name);
int loom__proto_sig(loom__proto_t *p, const char *name);
void loom__proto_write(loom__proto_t *p, int r, int owner, int buf, int lo, int hi);
void loom__proto_read(loom__proto_t *p, int r, int owner, int buf, int lo, int hi);
void loom__proto_add(loom__proto_t *p, int r, int owner, int buf, int lo, int hi);
void loom__proto_set(loom__proto_t *p, int r, int owner, int sig, int slot, int delta);
void loom__proto_wait(loom__proto_t *p, int r, int owner, int sig, int slot, int delta);
/* Actor r waits for slot `slot` of `sig` in every peer's memory (the ranks
 * but r's own, from r's rank + 1 on). */
void loom__proto_wait_peers(loom__proto_t *p, int r, int sig, int slot, int delta);
/* "WAIT arrived@1[0] >= c" */
void loom__proto_step_str(const loom__proto_t *p, const loom__pstep_t *s, int call, char *out, int cap);
/* Mutations: a copy of p without step i of rank r, or without every SET
 * and WAIT of signal `sig` (the handshake gone). */
void loom__proto_drop_step(const loom__proto_t *p, int r, int i, loom__proto_t *out);
void loom__proto_drop_sig(const loom__proto_t *p, int sig, loom__proto_t *out);

/* ---- proto_check.c ---------------------------------------------------------- */
enum {
  LOOM__PV_NONE = 0,
  LOOM__PV_DEADLOCK,      /* no rank can move, some not finished */
  LOOM__PV_STALE_READ,    /* a READ sees no data of its own call */
  LOOM__PV_RACE_READ,     /* a READ not ordered after a peer's WRITE of the region */
  LOOM__PV_OVERWRITE,     /* a WRITE not ordered after a peer's READ of the region */
  LOOM__PV_RACE_WRITE,    /* two WRITEs of the region not ordered */
  LOOM__PV_SIGNAL         /* a slot with two writers, or a value that decreases */
};
typedef struct loom__proto_report {
  int violation;          /* LOOM__PV_* */
  int64_t states;         /* distinct states visited */
  int64_t transitions;
  char text[8192];        /* the violation and its trace ("" when none) */
} loom__proto_report_t;
/* Explores every interleaving of `calls` calls (1..LOOM__PROTO_MAXCALLS).
 * LOOM_SUCCESS whether or not a violation was found (rep says); an error
 * only for a malformed protocol or no memory. Stops at the first violation. */
loom_result_t loom__proto_check(const loom__proto_t *p, int calls, loom__proto_report_t *rep);
const char *loom__proto_violation_str(int v);

/* ---- proto_ops.c ------------------------------------------------------------ */
/* The hand-written ops' protocols at world size W (2..LOOM__PROTO_MAXW). */
typedef enum {
  LOOM__PROTO_AR_ONE_SHOT = 0, /* coll: AllReduce one-shot */
  LOOM__PROTO_AR_TWO_SHOT,     /* coll: AllReduce two-shot (ReduceScatter + AllGather through staging) */
  LOOM__PROTO_RS,              /* coll: ReduceScatter */
  LOOM__PROTO_AG,              /* coll: AllGather */
  LOOM__PROTO_GEMM_RS,         /* tp: GEMM + ReduceScatter (tile signals, done hand-back) */
  LOOM__PROTO_GEMM_AR,         /* tp: GEMM + AllReduce (GEMM + RS, then owners push, gathered signals) */
  LOOM__PROTO_AG_GEMM,         /* tp: AllGather (push) + GEMM */
  LOOM__PROTO_OPTIM_ADAM,      /* optim: RS-Opt-AG, Adam (ready, done) */
  LOOM__PROTO_OPTIM_LAMB,      /* optim: RS-Opt-AG, LAMB (ready, phase, done) */
  LOOM__PROTO_AR_ONE_SHOT_IP,  /* the four collectives in place */
  LOOM__PROTO_AR_TWO_SHOT_IP,
  LOOM__PROTO_RS_IP,
  LOOM__PROTO_AG_IP,
  LOOM__PROTO_EMB_FWD,         /* embedding: embedding-bag + All-to-All forward (ready, slice flags) */
  LOOM__PROTO_EMB_BWD,         /* embedding: the atomic backward (gready, gdone) */
  LOOM__PROTO_AR_LL,           /* coll: AllReduce LL (lines with their flag, two parities) */
  LOOM__PROTO_AR_PUSH,         /* coll: AllReduce PUSH (chunks stored into the peers, a flag each, two parities) */
  LOOM__PROTO_EMB_BWD_SORTED,  /* embedding: the sorted backward (gready, gdone; keys, sort, runs, heads) */
  LOOM__PROTO_GEMM_RS_BULK,    /* tp: GEMM + ReduceScatter by bulk adds into the owners (pushed, done) */
  LOOM__PROTO_MOE,             /* moe: a dispatch, then two combines (counts, delivered, comb_ready, comb_done) */
  LOOM__PROTO_OPS_COUNT
} loom__proto_op_t;
const char *loom__proto_op_name(int op);
void loom__proto_op(int op, int W, loom__proto_t *p);
/* The embedding forward's GIN path (compiled, never run; the plan refuses
 * it): ready_all 0 as its kernel is written (ready to the NVLink ranks
 * only: the checker finds a put overwriting a network rank's out that its
 * caller may still read), 1 with ready to and from every rank. */
void loom__proto_emb_gin(int W, int ready_all, loom__proto_t *p);

/* ---- proto_lower.c ---------------------------------------------------------- */
/* One unit of a scheduled program that talks to other ranks, and its protocol. */
typedef struct loom__proto_unit {
  char unit[64]; /* the stage's, fused collective's or operation's name (and the path) */
  loom__proto_t proto;
} loom__proto_unit_t;
struct loom_prog;
/* The language's protocols for the collectives no hand-written op has:
 * op is LOOM__OP_REDUCE, _BROADCAST, _ALLTOALL or _SEND (lang.h; Send: a
 * pair of ranks whatever W). */
void loom__proto_template(int op, int W, loom__proto_t *p);
/* The protocols of p's units at W ranks per group (2..LOOM__PROTO_MAXW), in
 * topological order; LOOM_ERR_INVALID_ARGUMENT if more than cap. */
loom_result_t loom__lang_lower(struct loom_prog *p, int W, loom__proto_unit_t *out, int cap, int *n);

#endif /* LOOM_LANG_PROTOCOL_H */
