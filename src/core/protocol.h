/*
 * protocol.h - protocols as data, and the two model checkers that prove them
 * free of deadlocks and races over every interleaving of their ranks.
 *
 * The form. A protocol is, per rank r of W, the ordered lists of steps that
 * rank r's actors run in one call (one actor per rank, or more: a side
 * stream beside the main one, the blocks of a kernel, the caller's stream
 * around them) (the caller's accesses before and after the kernel included:
 * the caller writes `in` before the call, reads `out` after it). Each step
 * is one of
 *   WRITE buf@q [lo, hi)   rank r stores into regions lo..hi-1 of buffer
 *                          `buf` in rank q's memory (q == r: its own)
 *   READ  buf@q [lo, hi)   rank r loads them
 *   ADD   buf@q [lo, hi)   rank r adds into them (a reduction in memory:
 *                          ADDs of one call commute with one another;
 *                          against READs and WRITEs they are writes)
 *   SET   sig@q[slot] = c + d   rank r stores the epoch value c + d into
 *                          slot `slot` of signal `sig` in rank q's memory
 *   WAIT  sig@q[slot] >= c + d  rank r spins until that slot holds at
 *                          least c + d
 * where c is the call number (1, 2, ...: calls run back to back on every
 * rank, so the list runs once per call) and d a small constant (0, or -1
 * for "the previous call"). Signals start at 0; a wait for a value <= 0
 * never blocks. Buffers and signals are named (loom__proto_buf/_sig). A
 * buffer may be marked written once per call (loom__proto_once: a result,
 * each of whose regions every call writes once and then reads).
 *
 * Semantics (what the checkers assume and what "ordered before" means).
 *  - Every step is atomic; a run is an interleaving of the actors' lists
 *    (an actor runs call 1's steps, then call 2's, ...). A WAIT can run
 *    only when its slot holds >= its value; the other steps can always
 *    run, except that with `call_barrier` a rank's actors start call c + 1
 *    only after all of them finished call c (the blocks of one kernel);
 *    without it (the default) only signals order a rank's actors: streams
 *    are forked and joined through local signals (an event record and
 *    wait, a kernel launch after the caller's stores, is a SET and a WAIT).
 *  - Every signal slot has one writer (one actor SETs it) and its values
 *    never decrease in that actor's order (epochs only grow); the checker
 *    reports a protocol that breaks either.
 *  - Ordered before (happens-before, hb) is the smallest transitive
 *    relation containing program order within an actor (across calls
 *    too), with `call_barrier` the call boundary of a rank (every actor's
 *    last step of call c before every actor's first step of call c + 1)
 *    and, for each WAIT sig[slot] >= v (v > 0), the edge from the FIRST
 *    SET of that slot (in its writer's order) whose value is >= v. The
 *    waiter may read any value >= v, written by that SET or a later one;
 *    release/acquire gives it at least the first one's history, so hb is
 *    what every run guarantees, whatever value the poll saw. hb does not
 *    depend on the interleaving.
 *  - Two accesses conflict when they touch overlapping regions of the same
 *    buffer of the same rank, come from different actors, and one writes
 *    (two ADDs of one call do not conflict).
 *
 * The properties, proven over `calls` consecutive calls (two cover buffer
 * reuse across calls), or reported with a counterexample:
 *  - no deadlock: in every reachable state some actor can move, until every
 *    actor finished every call (so every wait is eventually satisfied: an
 *    actor blocked forever is a deadlock once the others ran out);
 *  - no read before publish: a READ of call c sees, in every region, the
 *    data of a WRITE of call c that is ordered before it (not a stale
 *    call's, not none);
 *  - no overwrite before consumed / no race: every two conflicting accesses
 *    are ordered (a WRITE of call c+1 after every peer's READ of call c of
 *    the region, a READ after the WRITE it needs, WRITEs one after another);
 *  - one writer per signal slot, values that never decrease;
 *  - a buffer marked once: in every call each WRITE of a region is read (a
 *    READ of the call ordered after it) before another WRITE of the call
 *    replaces it, so a result is written once per call and used (a write
 *    nobody reads, or one overwritten unread, is reported).
 *
 * The two checkers. Both unroll the lists over the calls, match every WAIT
 * to its SET and give every event its vector clock of hb once (hb is
 * static); events no run reaches (behind a WAIT that never fires) get
 * none: R, the reachable events.
 *  - loom__proto_check_exhaustive explores every interleaving breadth first
 *    (a state: the actors' positions), so its counterexample is a shortest
 *    run. Up to LOOM__PROTO_EXH_MAXACT actors and a budget of states.
 *  - loom__proto_check_static decides the same without interleavings, at
 *    any size the form holds. Why that is exact: whether an event can run
 *    depends only on which events have run (its actor's previous one, the
 *    SET its WAIT is matched to: one writer whose values grow, so "slot >=
 *    v" is "the first SET >= v has run"; with call_barrier the last events
 *    of the call before), and once true stays true (signals only grow). So
 *    the reachable states are exactly the hb-closed subsets of R, and
 *      deadlock   <=> R is not every event: every hb-closed set but R has
 *                     an event of R whose predecessors all ran; R has none;
 *      race a, b  <=> two conflicting events of R, neither ordered before
 *                     the other: the hb-closure of both, less b, is a
 *                     reachable state in which b is enabled and a has run
 *                     (and a state where a ran and b runs contains it);
 *      stale b    <=> the last WRITE ordered before READ b of a region is
 *                     of another call or there is none: whenever b runs,
 *                     every write ordered before it has run, and any other
 *                     write that has run is unordered with b, a race
 *                     reported as such (the writes ordered before b are
 *                     totally ordered but for ADDs of one call, of which
 *                     any serves: the same call; a write race among them
 *                     is reported in its own right);
 *      signal and once: static already.
 *    Which violation is reported: the one the breadth-first search meets
 *    first, which is the least depth (events run before the move) of each:
 *    |hb-closure(a) u hb-closure(b)| - 1 for a race, |hb-closure(b)| - 1
 *    for a stale read, |R| for the deadlock; among violations of the least
 *    depth the kind of highest priority (a write race, an overwrite, a read
 *    race, a stale read). The exhaustive search finishes the level of its
 *    first violation and picks the same way, so both report the same kind
 *    (a host test compares them on every op and every mutation); the
 *    signal check comes first, the once check last (on a protocol with no
 *    other violation). The static report names the step and the actors of
 *    the violation (and the write a stale read sees) without a run.
 *  - loom__proto_check: the exhaustive search where it fits (its actors and
 *    its budget of states), else the static check.
 * What they do not prove: anything about more than `calls` calls or other
 * world sizes than the one built; the data computed; the memory model below
 * the step (fences, the proxies of TMA and the copy engine are taken to
 * give the release/acquire above); that the lists agree with the kernels'
 * code (each family builds its lists from the functions its kernels take
 * their schedule from: src/ops/<family>/<family>_protocol.c).
 *
 *   protocol.c      building protocols (buffers, signals, steps, mutations)
 *   proto_hb.c      what both checkers share: unrolling, matching, clocks,
 *                   conflicts, the once check, the report's lines
 *   proto_check.c   the exhaustive search
 *   proto_static.c  the static check
 * Each op family's protocol: src/ops/<family>/<family>_protocol.c; the
 * language's: src/lang/proto_ops.c (its table of the families' builders),
 * proto_lower.c, lower_proto.c.
 */
#ifndef LOOM_CORE_PROTOCOL_H
#define LOOM_CORE_PROTOCOL_H

#include <stdint.h>

#include "loom.h"

#define LOOM__PROTO_MAXW 16      /* ranks */
#define LOOM__PROTO_MAXACT 128   /* actors (lists of steps), all ranks together */
#define LOOM__PROTO_MAXOBJ 16    /* buffers, signals */
#define LOOM__PROTO_MAXSLOT 4096 /* slots of one signal */
#define LOOM__PROTO_MAXCALLS 3
#define LOOM__PROTO_NAME 32
#define LOOM__PROTO_EXH_MAXACT 8 /* actors the exhaustive search takes */
#define LOOM__PROTO_EXH_MAXW 4   /* the largest world the language's checks build (one actor per rank and
                                  * group: the exhaustive search's reach) */

typedef enum { LOOM__PS_WRITE = 0, LOOM__PS_READ, LOOM__PS_SET, LOOM__PS_WAIT, LOOM__PS_ADD } loom__ps_kind_t;

typedef struct loom__pstep {
  int8_t kind;   /* loom__ps_kind_t */
  int8_t owner;  /* the rank whose memory holds the buffer or signal */
  int8_t obj;    /* buffer or signal id */
  int8_t delta;  /* SET / WAIT: the value is call + delta */
  int32_t lo, hi; /* buffer: regions [lo, hi); signal: the slot in lo */
} loom__pstep_t;

/* A protocol owns its step lists (heap): loom__proto_free releases them. */
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
  unsigned char once[LOOM__PROTO_MAXOBJ]; /* buffer written once per call (loom__proto_once) */
  int n[LOOM__PROTO_MAXACT];       /* steps of each actor */
  int cap[LOOM__PROTO_MAXACT];
  loom__pstep_t *steps[LOOM__PROTO_MAXACT];
  int overflow; /* a step or name did not fit, or no memory: the checkers refuse it */
} loom__proto_t;

/* A family's signal: its name in the protocol, the wait site of the
 * kernels' waits on it and that site's name in timeout messages. */
typedef struct loom__proto_signal {
  const char *name;  /* the protocol's signal */
  uint32_t site;     /* core/signal.h's wait site (0: no device wait: an event between streams, program order) */
  const char *what;  /* the site's name; NULL where another layer names the site (the GEMM prologue's) */
} loom__proto_signal_t;

/* ---- protocol.c ------------------------------------------------------------- */
/* W ranks, one actor each (actor r runs on rank r); p's memory is taken
 * as fresh (nothing to release). The step functions take an actor `r` and
 * the rank `owner` whose memory the step touches. */
void loom__proto_init(loom__proto_t *p, const char *name, int W);
/* Releases p's steps (p then holds an empty protocol; NULL-safe). */
void loom__proto_free(loom__proto_t *p);
/* out = a copy of p (out's memory taken as fresh; free it). */
void loom__proto_copy(const loom__proto_t *p, loom__proto_t *out);
/* A further actor on `rank` (a side stream, another block): its id. */
int loom__proto_actor(loom__proto_t *p, int rank);
/* The id of buffer / signal `name` (added on first use). */
int loom__proto_buf(loom__proto_t *p, const char *name);
int loom__proto_sig(loom__proto_t *p, const char *name);
/* The id of a family table's signal `s` (its name). */
int loom__proto_sig_of(loom__proto_t *p, const loom__proto_signal_t *s);
/* Marks buffer `buf` written once per call (the once property above). */
void loom__proto_once(loom__proto_t *p, int buf);
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
/* Mutations (out's memory taken as fresh; free it): a copy of p without
 * step i of actor r; without every SET and WAIT of signal `sig` (the
 * handshake gone); without every WAIT of `sig` (the waits gone, the
 * signals still set). */
void loom__proto_drop_step(const loom__proto_t *p, int r, int i, loom__proto_t *out);
void loom__proto_drop_sig(const loom__proto_t *p, int sig, loom__proto_t *out);
void loom__proto_drop_waits(const loom__proto_t *p, int sig, loom__proto_t *out);
/* Registers the wait site of every entry of a family's table that names
 * one (what != NULL); the number refused (core/signal.h). */
int loom__proto_register_sites(const loom__proto_signal_t *t, int n);

/* ---- the checkers ------------------------------------------------------------ */
enum {
  LOOM__PV_NONE = 0,
  LOOM__PV_DEADLOCK,      /* no actor can move, some not finished */
  LOOM__PV_STALE_READ,    /* a READ sees no data of its own call */
  LOOM__PV_RACE_READ,     /* a READ not ordered after a peer's WRITE of the region */
  LOOM__PV_OVERWRITE,     /* a WRITE not ordered after a peer's READ of the region */
  LOOM__PV_RACE_WRITE,    /* two WRITEs of the region not ordered */
  LOOM__PV_SIGNAL,        /* a slot with two writers, or a value that decreases */
  LOOM__PV_ONCE           /* a once buffer's write read by nobody before it is replaced */
};
typedef struct loom__proto_report {
  int violation;          /* LOOM__PV_* */
  int exhaustive;         /* 1: the exhaustive search ran, 0: the static check */
  int64_t states;         /* exhaustive: distinct states visited; static: events analysed */
  int64_t transitions;    /* exhaustive: moves tried; static: conflicting pairs compared */
  char text[16384];       /* the violation and its trace or its events ("" when none) */
} loom__proto_report_t;
/* Each checks `calls` consecutive calls (1..LOOM__PROTO_MAXCALLS).
 * LOOM_SUCCESS whether or not a violation was found (rep says); an error
 * for a malformed protocol (LOOM_ERR_INVALID_ARGUMENT), no memory, or,
 * exhaustive, more actors or states than it takes (LOOM_ERR_UNSUPPORTED). */
loom_result_t loom__proto_check_exhaustive(const loom__proto_t *p, int calls, loom__proto_report_t *rep);
loom_result_t loom__proto_check_static(const loom__proto_t *p, int calls, loom__proto_report_t *rep);
/* The exhaustive search where it fits, else the static check. */
loom_result_t loom__proto_check(const loom__proto_t *p, int calls, loom__proto_report_t *rep);
const char *loom__proto_violation_str(int v);

#endif /* LOOM_CORE_PROTOCOL_H */
