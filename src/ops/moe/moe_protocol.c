/*
 * moe_protocol.c - the MoE dispatch / combine protocol in the form of
 * core/protocol.h, as moe.h's kernels (moe_kernels.cu) and loom_moe_mlp's
 * sequence (moe_mlp.c) run it. One list is a sequence of cycles, each a
 * dispatch, the experts and 0, 1 or more combines of its rows (a combine
 * returns the last dispatch's rows: a caller may combine again); every
 * call of the plan, dispatch or combine, takes the next epoch, so each
 * signal has a slot per epoch of the list (a later epoch's store into the
 * kernels' one word per rank only delays a wait: separate slots order no
 * less). Regions are per source rank (region s of an owner's receive
 * buffer: the rows s sent it; of a source's combine buffer: the rows owner
 * s returned). A rank's blocks are one actor (the grid barriers order
 * them); its waits and signals towards itself are program order, left out.
 *
 *   dispatch: the caller's rows and routing; the counts into every rank's
 *     table, each word stamped with the epoch (its own signal:
 *     counts_ready); the layout's wait for every source's word, its reads
 *     of the table, the layout (kept, offsets) written; the rows and
 *     origins into every owner's receive buffer; delivered into every
 *     rank; the wait for every source's delivered (the experts read what
 *     arrived).
 *   the experts (the caller's grouped GEMMs, moe_mlp.c): gate/up reads the
 *     received rows and writes h, down reads h and (unfused) writes its
 *     outputs into the receive buffer (y = recv, as loom_moe_mlp runs it)
 *     or (fused) reads the origins and stores each row into its source's
 *     combine buffer.
 *   combine: comb_ready into every rank; (unfused) the wait for every
 *     rank's comb_ready (its combine buffer is free: its last combine's
 *     reduction is over), the origins and outputs read and stored into
 *     every source's combine buffer; comb_done into every rank, the wait
 *     for every owner's, the reduction of the own combine buffer into out,
 *     which the caller reads. The fused combine neither waits for
 *     comb_ready nor sends (moe.h: the dispatch just before it waited for
 *     every source's counts, which each stored after its last reduction).
 *   the arrival form (moe.h): a rank that runs it publishes its counts
 *     with the top bit, so every source of that cycle (having waited for
 *     every word) also stores arrived[source] into each owner after its
 *     rows; the dispatch starts its gate/up GEMM as a programmatic
 *     dependent (a second actor of the rank: after the dispatch's launch,
 *     it waits for the layout's ready, then for each source's arrived
 *     before it reads that source's rows), stores ready after its layout,
 *     and skips the delivered wait; the stream goes on (down GEMM, the
 *     fused combine) once the GEMM ended, which waited for the dispatch's
 *     grid.
 * The combine and out buffers are marked once: every row of a call's
 * result is written once and read.
 */
#include <string.h>

#include "ops/moe/moe_protocol.h"
#include "ops/moe/moe.h" /* the wait sites */

const loom__proto_signal_t loom__moe_signals[LOOM__MOE_NSIG] = {
    [LOOM__MOE_PS_COUNTS] = {"counts_ready", LOOM_SITE_MOE_COUNTS,
                             "MoE dispatch: a rank's expert counts (its dispatch started)"},
    [LOOM__MOE_PS_DELIVERED] = {"delivered", LOOM_SITE_MOE_DELIVERED,
                                "MoE dispatch: a source's rows in this rank's receive buffer"},
    [LOOM__MOE_PS_COMB_READY] = {"comb_ready", LOOM_SITE_MOE_COMB_READY,
                                 "MoE combine: a rank's combine buffer writable (its combine started)"},
    [LOOM__MOE_PS_COMB_DONE] = {"comb_done", LOOM_SITE_MOE_COMB_DONE,
                                "MoE combine: an expert rank's outputs in this rank's combine buffer"},
    [LOOM__MOE_PS_GRID] = {"grid", LOOM_SITE_MOE_GRID,
                           "MoE dispatch: the blocks of this rank's own kernel (a grid barrier)"},
    [LOOM__MOE_PS_READY] = {"ready", LOOM_SITE_MOE_LAYOUT,
                            "MoE gate/up GEMM (dispatch in its prologue): this rank's layout"},
    [LOOM__MOE_PS_ARRIVED] = {"arrived", LOOM_SITE_MOE_ARRIVED,
                              "MoE gate/up GEMM (dispatch in its prologue): a source's rows of an expert"},
    [LOOM__MOE_PS_LAUNCH] = {"launch", 0, NULL},
    [LOOM__MOE_PS_GEMM] = {"gemm", 0, NULL},
};

/* The builder's state: buffer and signal ids, each rank's GEMM actor. */
typedef struct moe_pb {
  loom__proto_t *p;
  int W, mut;
  int x, counts, layout, recv, origin, h, comb, out;
  int sig[LOOM__MOE_NSIG];
  int gemm[LOOM__PROTO_MAXW]; /* the arrival form's gate/up GEMM of each rank (-1: none) */
} moe_pb_t;

/* Rank r's form in cycle y (the fused forms need a combine). */
static int moe_form(const loom__moe_cycle_t *y, int r) {
  return y->combines > 0 && y->form[r] >= LOOM__MOE_FORM_UNFUSED && y->form[r] <= LOOM__MOE_FORM_ARRIVAL
             ? y->form[r] : LOOM__MOE_FORM_UNFUSED;
}

/* The id of the table's signal i (declared on first use: a protocol has the signals it uses). */
static int moe_sig(moe_pb_t *m, int i) {
  if (m->sig[i] < 0) m->sig[i] = loom__proto_sig_of(m->p, &loom__moe_signals[i]);
  return m->sig[i];
}

/* Rank r SETs sig's slot (epoch e, source r) into every peer. */
static void moe_tell_peers(moe_pb_t *m, int r, int sig, int e) {
  for (int i = 0; i < m->W - 1; ++i) loom__proto_set(m->p, r, (r + 1 + i) % m->W, moe_sig(m, sig), e * m->W + r, 0);
}

/* Rank r WAITs for every peer's slot of sig (epoch e). */
static void moe_hear_peers(moe_pb_t *m, int r, int sig, int e, int delta) {
  for (int i = 0; i < m->W - 1; ++i)
    loom__proto_wait(m->p, r, r, moe_sig(m, sig), e * m->W + (r + 1 + i) % m->W, delta);
}

/* Rank r's dispatch of epoch e in form f (any: some rank of the cycle runs the arrival form). */
static void moe_dispatch(moe_pb_t *m, int r, int e, int f, int any) {
  loom__proto_t *p = m->p;
  const int W = m->W, arrival = f == LOOM__MOE_FORM_ARRIVAL;
  loom__proto_write(p, r, r, m->x, 0, 1); /* the caller's rows and routing */
  if (arrival) loom__proto_set(p, r, r, moe_sig(m, LOOM__MOE_PS_LAUNCH), e, 0);
  for (int i = 0; i < W; ++i) { /* publish: the counts word is its own signal */
    const int q = (r + 1 + i) % W;
    loom__proto_write(p, r, q, m->counts, r, r + 1);
    if (q != r) loom__proto_set(p, r, q, moe_sig(m, LOOM__MOE_PS_COUNTS), e * W + r, 0);
  }
  moe_hear_peers(m, r, LOOM__MOE_PS_COUNTS, e, m->mut & LOOM__MOE_MUT_COUNTS_BEHIND ? -1 : 0); /* layout */
  loom__proto_read(p, r, r, m->counts, 0, W);
  loom__proto_write(p, r, r, m->layout, 0, 1);
  if (arrival) loom__proto_set(p, r, r, moe_sig(m, LOOM__MOE_PS_READY), e, 0);
  loom__proto_read(p, r, r, m->x, 0, 1); /* send: rows and origins into every owner */
  for (int i = 0; i < W; ++i) {
    const int q = (r + 1 + i) % W;
    loom__proto_write(p, r, q, m->recv, r, r + 1);
    loom__proto_write(p, r, q, m->origin, r, r + 1);
    if (any) loom__proto_set(p, r, q, moe_sig(m, LOOM__MOE_PS_ARRIVED), e * W + r, 0);
  }
  moe_tell_peers(m, r, LOOM__MOE_PS_DELIVERED, e);
  if (!arrival) moe_hear_peers(m, r, LOOM__MOE_PS_DELIVERED, e, 0);
}

/* The arrival form's gate/up GEMM of rank r (epoch e of the dispatch). */
static void moe_arrival_gemm(moe_pb_t *m, int r, int e) {
  loom__proto_t *p = m->p;
  const int g = m->gemm[r], W = m->W;
  loom__proto_wait(p, g, r, moe_sig(m, LOOM__MOE_PS_LAUNCH), e, 0);
  loom__proto_wait(p, g, r, moe_sig(m, LOOM__MOE_PS_READY), e, 0);
  loom__proto_read(p, g, r, m->layout, 0, 1);
  for (int i = 0; i < W; ++i) { /* the tiles, each after its source's rows arrived */
    const int s = (r + i) % W;
    loom__proto_wait(p, g, r, moe_sig(m, LOOM__MOE_PS_ARRIVED), e * W + s, 0);
    loom__proto_read(p, g, r, m->recv, s, s + 1);
  }
  loom__proto_write(p, g, r, m->h, 0, 1);
  loom__proto_set(p, g, r, moe_sig(m, LOOM__MOE_PS_GEMM), e, 0);
}

/* Rank r's scatter: its outputs (origins, rows) into every source's combine buffer. */
static void moe_scatter(moe_pb_t *m, int r, int read_recv) {
  loom__proto_read(m->p, r, r, m->origin, 0, m->W);
  if (read_recv) loom__proto_read(m->p, r, r, m->recv, 0, m->W);
  for (int i = 0; i < m->W; ++i) loom__proto_write(m->p, r, (r + 1 + i) % m->W, m->comb, r, r + 1);
}

/* Rank r's experts after the dispatch of epoch e, in form f. */
static void moe_experts(moe_pb_t *m, int r, int e, int f) {
  loom__proto_t *p = m->p;
  if (f == LOOM__MOE_FORM_ARRIVAL) {
    moe_arrival_gemm(m, r, e);
    loom__proto_wait(p, r, r, moe_sig(m, LOOM__MOE_PS_GEMM), e, 0);
  } else {
    loom__proto_read(p, r, r, m->layout, 0, 1);
    loom__proto_read(p, r, r, m->recv, 0, m->W); /* gate/up */
    loom__proto_write(p, r, r, m->h, 0, 1);
  }
  loom__proto_read(p, r, r, m->h, 0, 1); /* down */
  if (f == LOOM__MOE_FORM_UNFUSED) loom__proto_write(p, r, r, m->recv, 0, m->W); /* y = recv */
  else moe_scatter(m, r, 0);
}

/* Rank r's combine of epoch e; fused: the rows are in the sources' buffers already. */
static void moe_combine(moe_pb_t *m, int r, int e, int fused) {
  loom__proto_t *p = m->p;
  moe_tell_peers(m, r, LOOM__MOE_PS_COMB_READY, e);
  if (!fused) {
    moe_hear_peers(m, r, LOOM__MOE_PS_COMB_READY, e, 0);
    moe_scatter(m, r, 1);
  }
  moe_tell_peers(m, r, LOOM__MOE_PS_COMB_DONE, e);
  moe_hear_peers(m, r, LOOM__MOE_PS_COMB_DONE, e, 0); /* reduce */
  loom__proto_read(p, r, r, m->comb, 0, m->W);
  loom__proto_write(p, r, r, m->out, 0, 1);
  loom__proto_read(p, r, r, m->out, 0, 1); /* the caller's use of the output */
}

/* Rank r's cycle y from epoch e on; the next free epoch. */
static int moe_cycle(moe_pb_t *m, int r, const loom__moe_cycle_t *y, int e) {
  const int f = moe_form(y, r);
  int any = 0;
  for (int q = 0; q < m->W; ++q) any |= moe_form(y, q) == LOOM__MOE_FORM_ARRIVAL;
  moe_dispatch(m, r, e, f, any);
  moe_experts(m, r, e, f);
  for (int j = 0; j < y->combines; ++j) {
    const int later = j == 1 && (m->mut & LOOM__MOE_MUT_FUSE_LATER);
    if (later) moe_scatter(m, r, 1); /* the mutation: a later combine's rows stored without its ready wait */
    moe_combine(m, r, e + 1 + j, (j == 0 && f != LOOM__MOE_FORM_UNFUSED) || later);
  }
  return e + 1 + y->combines;
}

static void moe_names(moe_pb_t *m) {
  loom__proto_t *p = m->p;
  m->x = loom__proto_buf(p, "x"), m->counts = loom__proto_buf(p, "counts"), m->layout = loom__proto_buf(p, "layout");
  m->recv = loom__proto_buf(p, "recv"), m->origin = loom__proto_buf(p, "origin"), m->h = loom__proto_buf(p, "h");
  m->comb = loom__proto_buf(p, "combine"), m->out = loom__proto_buf(p, "out");
  loom__proto_once(p, m->comb), loom__proto_once(p, m->out);
  for (int i = 0; i < LOOM__MOE_NSIG; ++i) m->sig[i] = -1;
}

void loom__moe_protocol(int W, int ncycles, const loom__moe_cycle_t *cycles, int mutations, loom__proto_t *p) {
  moe_pb_t m;
  memset(&m, 0, sizeof m);
  m.p = p, m.W = W, m.mut = mutations;
  loom__proto_init(p, "moe", W);
  if (p->overflow || ncycles < 1 || !cycles) {
    p->overflow = 1;
    return;
  }
  moe_names(&m);
  for (int r = 0; r < W; ++r) {
    m.gemm[r] = -1;
    for (int k = 0; k < ncycles && m.gemm[r] < 0; ++k)
      if (moe_form(&cycles[k], r) == LOOM__MOE_FORM_ARRIVAL) m.gemm[r] = loom__proto_actor(p, r);
  }
  for (int r = 0; r < W; ++r)
    for (int k = 0, e = 0; k < ncycles; ++k) e = moe_cycle(&m, r, &cycles[k], e);
}
