/*
 * test_moe_protocol.c - the MoE dispatch / combine signal protocol (moe.h)
 * played on the host: W ranks as actors, each running its calls' steps in
 * stream order over several cycles of dispatch, the expert step (reads the
 * received rows, writes the outputs in place, as loom_moe_mlp's down GEMM
 * does) and, in most cycles, combine; under random interleavings (every
 * step atomic: the kernels' fences and grid barriers make their effects
 * visible in this order; a rank's blocks are one actor). A cycle has
 * no combine, one, or two (a combine returns the last dispatch's rows:
 * a caller may combine again). A cycle of one combine may be
 * loom_moe_mlp's fused form on some ranks or all: the expert step stores
 * its outputs straight into the sources' combine buffers (no ready wait,
 * no send) and the combine kernel stores ready, done, and reduces (moe.h
 * says why no ready wait is needed there; a mutation that fuses a second
 * combine, where it would be needed, is caught). Such a cycle may also
 * run the arrival form (the dispatch in the gate/up GEMM's prologue) on
 * some ranks or all: when any rank of the cycle runs it (the counts' top
 * bit), every source also signals arrived after its send; a rank of that
 * form skips the dispatch's delivered wait, and its expert step waits for
 * arrived from every source instead (a mutation without that wait is
 * caught). Each buffer region
 * carries whose data it holds:
 *   recv[p][s]  the rows source s stored in owner p's receive buffer
 *               (c: cycle c's tokens; -c: cycle c's expert outputs)
 *   comb[s][p]  the rows owner p stored in source s's combine buffer
 *               (the epoch of the combine that stored them)
 * The counts words carry the epoch of the call that stored them (the
 * data is its own signal). The test checks that
 *  - the layout reads this call's counts from every source;
 *  - the expert step reads this cycle's rows from every source, the
 *    combine's send this cycle's outputs, the reduce this cycle's rows
 *    from every owner (nobody overwrote a buffer still in use);
 *  - nothing deadlocks.
 * W = 1, 2, 3, 4, 8, 16; a mutation test shows the model catches each
 * dropped or weakened wait.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/signal.h"

enum {
  D_PUBLISH,   /* counts[p][r] = e for every p */
  D_COUNTS,    /* waits: every word of counts[r] at epoch e; reads them */
  D_SEND,      /* recv[p][r] = c for every p */
  D_ARRIVED,   /* arrived[p][r] = e (when a rank of the cycle runs the arrival form) */
  D_DELIVERED, /* delivered[p][r] = e */
  D_WAIT,      /* waits: delivered[r][s] >= e for every s */
  X_EXPERTS,   /* reads recv[r][*] (c), writes them (-c) */
  C_READY,     /* comb_ready[p][r] = e */
  C_WAIT,      /* waits: comb_ready[r][s] >= e */
  C_SEND,      /* reads recv[r][*] (-c); comb[s][r] = e for every s */
  C_DONE,      /* comb_done[p][r] = e */
  C_REDUCE,    /* waits: comb_done[r][s] >= e; reads comb[r][*] (e) */
  X_SCATTER,   /* the fused expert step: reads recv[r][*] (c); comb[s][r] = e (its combine's) */
  X_UP         /* the arrival form's gate/up GEMM: waits arrived[r][s] >= e; reads recv[r][*] (c) */
};

enum {
  M_NONE,
  M_NO_COUNTS_WAIT,   /* the layout reads the counts without waiting */
  M_NO_READY_WAIT,    /* the combine sends without its buffers' ready wait */
  M_ANY_COUNTS,       /* the counts wait takes any stored word (epoch != 0), not this call's */
  M_NO_DELIVER_WAIT,  /* the dispatch completes without the delivered wait */
  M_FUSED_SECOND,     /* the second of two combines fused (no dispatch just before it) */
  M_NO_ARRIVAL_WAIT   /* the arrival form's GEMM reads the rows without waiting for arrived */
};

/* The forms of the single-combine cycles: every rank unfused, fused or
 * arrival; fused on odd rank + cycle; unfused / fused / arrival by (rank +
 * cycle) % 3. */
enum { FUSE_NONE, FUSE_ALL, FUSE_MIXED, FUSE_ARRIVAL, FUSE_MIXED3, FUSE_MODES };
enum { FORM_UNFUSED, FORM_FUSED, FORM_ARRIVAL };

typedef struct step {
  int kind, cycle;
  uint32_t e;
} step_t;

typedef struct moe_sim {
  int W, mutate;
  uint32_t *counts, *delivered, *ready, *done, *arrived; /* [r * W + s]: rank r's word of source s */
  int *recv, *comb;                            /* [p * W + s] */
} moe_sim_t;

#define AT(a, r, s) ((a)[(r) * sim->W + (s)])

/* 1 when every word s of rank r's array `a` has reached e. */
static int all_reached(const moe_sim_t *sim, const uint32_t *a, int r, uint32_t e) {
  for (int s = 0; s < sim->W; ++s)
    if (!loom__epoch_reached(AT(a, r, s), e)) return 0;
  return 1;
}

static int ready(const moe_sim_t *sim, int r, const step_t *st) {
  switch (st->kind) {
    case D_COUNTS:
      if (sim->mutate == M_NO_COUNTS_WAIT) return 1;
      if (sim->mutate == M_ANY_COUNTS) {
        for (int s = 0; s < sim->W; ++s)
          if (AT(sim->counts, r, s) == 0) return 0;
        return 1;
      }
      return all_reached(sim, sim->counts, r, st->e);
    case D_WAIT: return sim->mutate == M_NO_DELIVER_WAIT || all_reached(sim, sim->delivered, r, st->e);
    case C_WAIT: return sim->mutate == M_NO_READY_WAIT || all_reached(sim, sim->ready, r, st->e);
    case C_REDUCE: return all_reached(sim, sim->done, r, st->e);
    case X_UP: return sim->mutate == M_NO_ARRIVAL_WAIT || all_reached(sim, sim->arrived, r, st->e);
    default: return 1;
  }
}

/* Runs a step; 0 when it read data of another call. */
static int run(moe_sim_t *sim, int r, const step_t *st) {
  const int W = sim->W, c = st->cycle;
  for (int q = 0; q < W; ++q) switch (st->kind) {
      case D_PUBLISH: AT(sim->counts, q, r) = st->e; break;
      case D_COUNTS:
        if (AT(sim->counts, r, q) != st->e) return 0;
        break;
      case D_SEND: AT(sim->recv, q, r) = c; break;
      case D_ARRIVED: AT(sim->arrived, q, r) = st->e; break;
      case D_DELIVERED: AT(sim->delivered, q, r) = st->e; break;
      case X_UP:
        if (AT(sim->recv, r, q) != c) return 0;
        break;
      case X_EXPERTS:
        if (AT(sim->recv, r, q) != c) return 0;
        AT(sim->recv, r, q) = -c;
        break;
      case C_READY: AT(sim->ready, q, r) = st->e; break;
      case C_SEND:
        if (AT(sim->recv, r, q) != -c) return 0;
        AT(sim->comb, q, r) = (int)st->e;
        break;
      case C_DONE: AT(sim->done, q, r) = st->e; break;
      case C_REDUCE:
        if (AT(sim->comb, r, q) != (int)st->e) return 0;
        break;
      case X_SCATTER:
        if (AT(sim->recv, r, q) != c) return 0;
        AT(sim->comb, q, r) = (int)st->e;
        break;
      default: break;
    }
  return 1;
}

/* Rank r's form in a single-combine cycle c. */
static int form_of(int fuse, int r, int c) {
  switch (fuse) {
    case FUSE_ALL: return FORM_FUSED;
    case FUSE_MIXED: return (r + c) % 2 == 1 ? FORM_FUSED : FORM_UNFUSED;
    case FUSE_ARRIVAL: return FORM_ARRIVAL;
    case FUSE_MIXED3: return (r + c) % 3;
    default: return FORM_UNFUSED;
  }
}

/* Rank r's step list (of W ranks): `cycles` cycles of a dispatch, then no
 * combine (c % 3 == 0), two (c % 3 == 1) or one; each call takes the next
 * epoch (the same on every rank). A fused combine (per `fuse`; the second
 * of two under M_FUSED_SECOND) replaces the expert step, its wait and its
 * send by the scatter; the arrival form also drops the delivered wait and
 * puts its GEMM's wait for arrived before the scatter. Every source signals
 * arrived where some rank of the cycle runs the arrival form. */
static int build(int W, int cycles, int r, int fuse, int mutate, step_t *st, int cap) {
  int n = 0;
  uint32_t e = 0;
  for (int c = 1; c <= cycles; ++c) {
    const int combines = c % 3 == 0 ? 0 : c % 3 == 1 ? 2 : 1;
    const int form = combines == 1 ? form_of(fuse, r, c) : FORM_UNFUSED;
    int any_arrival = 0;
    for (int q = 0; q < W && combines == 1; ++q) any_arrival |= form_of(fuse, q, c) == FORM_ARRIVAL;
    const int kinds[] = {D_PUBLISH, D_COUNTS, D_SEND, D_ARRIVED, D_DELIVERED, D_WAIT};
    ++e;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds && n < cap; ++k)
      if ((kinds[k] != D_ARRIVED || any_arrival) && (kinds[k] != D_WAIT || form != FORM_ARRIVAL))
        st[n++] = (step_t){kinds[k], c, e};
    const int fused1 = form != FORM_UNFUSED;
    if (form == FORM_ARRIVAL && n < cap) st[n++] = (step_t){X_UP, c, e};
    if (!fused1 && n < cap) st[n++] = (step_t){X_EXPERTS, c, e};
    for (int j = 0; j < combines; ++j) {
      ++e;
      const int fused = fused1 || (j == 1 && mutate == M_FUSED_SECOND);
      if (fused && n < cap) st[n++] = (step_t){X_SCATTER, c, e};
      const int ck[] = {C_READY, C_WAIT, C_SEND, C_DONE, C_REDUCE};
      for (size_t k = 0; k < sizeof ck / sizeof *ck && n < cap; ++k)
        if (!fused || (ck[k] != C_WAIT && ck[k] != C_SEND)) st[n++] = (step_t){ck[k], c, e};
    }
  }
  return n;
}

/* Plays the cycles; 0 on success, 1 deadlock, 2 a read of another call's data. */
static int play(int W, int cycles, uint64_t seed, int mutate, int fuse) {
  moe_sim_t sim;
  memset(&sim, 0, sizeof sim);
  sim.W = W, sim.mutate = mutate;
  const size_t n2 = (size_t)W * (size_t)W;
  sim.counts = (uint32_t *)calloc(n2, 4), sim.delivered = (uint32_t *)calloc(n2, 4);
  sim.ready = (uint32_t *)calloc(n2, 4), sim.done = (uint32_t *)calloc(n2, 4), sim.arrived = (uint32_t *)calloc(n2, 4);
  sim.recv = (int *)calloc(n2, sizeof(int)), sim.comb = (int *)calloc(n2, sizeof(int));
  step_t(*steps)[256] = (step_t(*)[256])malloc(sizeof *steps * (size_t)W);
  int *len = (int *)malloc(sizeof(int) * (size_t)W);
  for (int r = 0; r < W; ++r) len[r] = build(W, cycles, r, fuse, mutate, steps[r], 256);
  int *pc = (int *)calloc((size_t)W, sizeof(int)), *cand = (int *)malloc(sizeof(int) * (size_t)W);
  uint64_t x = seed | 1;
  int rc = 0;
  for (;;) {
    int nc = 0, alive = 0;
    for (int r = 0; r < W; ++r) {
      if (pc[r] >= len[r]) continue;
      alive++;
      if (ready(&sim, r, &steps[r][pc[r]])) cand[nc++] = r;
    }
    if (!alive) break;
    if (!nc) {
      rc = 1;
      break;
    }
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const int r = cand[x % (uint64_t)nc];
    if (!run(&sim, r, &steps[r][pc[r]])) {
      rc = 2;
      break;
    }
    pc[r]++;
  }
  free(pc), free(cand), free(steps), free(len);
  free(sim.counts), free(sim.delivered), free(sim.ready), free(sim.done), free(sim.arrived), free(sim.recv);
  free(sim.comb);
  return rc;
}

LOOM_TEST(moe_protocol_no_stale_read_no_deadlock_w1_to_16) {
  static const int worlds[] = {1, 2, 3, 4, 8, 16};
  static const char *const fuses[] = {"unfused", "fused", "mixed", "arrival", "three forms mixed"};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (int fuse = FUSE_NONE; fuse < FUSE_MODES; ++fuse)
      for (uint64_t seed = 1; seed <= 200; ++seed) {
        const int rc = play(worlds[wi], 7, seed * 0x9e3779b97f4a7c15ull + (uint64_t)wi, M_NONE, fuse);
        if (rc)
          loom_test_fail(__FILE__, __LINE__, "W=%d %s seed %llu: %s", worlds[wi], fuses[fuse],
                         (unsigned long long)seed, rc == 1 ? "deadlock" : "read data of another call");
      }
}

/* The model can fail: without the counts wait a source's count is read
 * before it is stored; a wait that takes any stored word reads the last
 * call's; without the ready wait an owner's second combine stores into a
 * source's combine buffer while that source still reduces the first (and
 * so does a fused second combine: the fused form relies on the dispatch
 * just before it); without the delivered wait the experts read rows not
 * yet there, and so does the arrival form's GEMM without its wait for
 * arrived. Some interleaving shows each. */
LOOM_TEST(moe_protocol_model_catches_a_missing_wait) {
  static const char *const names[] = {"",
                                      "no counts wait",
                                      "no ready wait",
                                      "any counts word",
                                      "no delivered wait",
                                      "a fused second combine",
                                      "no arrival wait"};
  for (int mutate = M_NO_COUNTS_WAIT; mutate <= M_NO_ARRIVAL_WAIT; ++mutate) {
    int caught = 0;
    for (uint64_t seed = 1; seed <= 4000 && !caught; ++seed)
      caught = play(2 + (int)(seed % 3), 7, seed * 0x9e3779b97f4a7c15ull, mutate, (int)(seed % FUSE_MODES)) == 2;
    if (!caught) loom_test_fail(__FILE__, __LINE__, "mutation \"%s\" went unnoticed", names[mutate]);
  }
}
