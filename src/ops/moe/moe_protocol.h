/*
 * moe_protocol.h - the MoE dispatch / combine protocol as data
 * (core/protocol.h's form), built by moe_protocol.c for the model checkers
 * (the language's table of ops, tests/host/moe/test_moe_protocol.c at any
 * world size and mix of forms), and its signals' table, from which
 * moe_plan.c names the kernels' wait sites.
 */
#ifndef LOOM_OPS_MOE_PROTOCOL_H
#define LOOM_OPS_MOE_PROTOCOL_H

#include "core/protocol.h"

/* The MoE ops' signals: loom__moe_signals[i] for each i below. */
enum {
  LOOM__MOE_PS_COUNTS = 0,  /* a source's counts word of this call (the data is its own signal) */
  LOOM__MOE_PS_DELIVERED,   /* a source's rows in this rank's receive buffer */
  LOOM__MOE_PS_COMB_READY,  /* a source's combine buffer writable (its combine started) */
  LOOM__MOE_PS_COMB_DONE,   /* an owner's expert outputs in this rank's combine buffer */
  LOOM__MOE_PS_GRID,        /* the dispatch's grid barrier (its blocks: one actor here) */
  LOOM__MOE_PS_READY,       /* the arrival form: this rank's layout, for its gate/up GEMM */
  LOOM__MOE_PS_ARRIVED,     /* the arrival form: a source's rows of this rank's experts */
  LOOM__MOE_PS_LAUNCH,      /* the arrival form: the dispatch started its dependent GEMM (programmatic launch) */
  LOOM__MOE_PS_GEMM,        /* the arrival form: the gate/up GEMM ended (the stream goes on) */
  LOOM__MOE_NSIG
};
extern const loom__proto_signal_t loom__moe_signals[LOOM__MOE_NSIG];

/* A rank's form of a dispatch and the combine right after it. */
typedef enum {
  LOOM__MOE_FORM_UNFUSED = 0, /* loom_moe_dispatch, the experts (outputs into the receive buffer), loom_moe_combine */
  LOOM__MOE_FORM_FUSED,       /* loom_moe_mlp fused: the down GEMM stores into the sources' combine buffers */
  LOOM__MOE_FORM_ARRIVAL      /* loom_moe_mlp fused all: that, and the dispatch in the gate/up GEMM's prologue */
} loom__moe_form_t;

/* One cycle: a dispatch, the experts, `combines` combines of its rows. */
typedef struct loom__moe_cycle {
  int combines;                   /* 0, 1, 2, ... (the fused forms need one at least; else unfused) */
  int form[LOOM__PROTO_MAXW];     /* each rank's loom__moe_form_t (of the dispatch and the first combine) */
} loom__moe_cycle_t;

/* Mutations the kernels never run (a test shows the checker catches each). */
enum {
  LOOM__MOE_MUT_COUNTS_BEHIND = 1, /* the counts wait takes the last call's word (a wait for any stored word) */
  LOOM__MOE_MUT_FUSE_LATER = 2     /* a cycle's second combine fused (no dispatch just before it) */
};

/* The protocol of `ncycles` cycles at W ranks (one call of the checker
 * runs them all, in order, each call of the plan on its own epoch). */
void loom__moe_protocol(int W, int ncycles, const loom__moe_cycle_t *cycles, int mutations, loom__proto_t *p);

#endif /* LOOM_OPS_MOE_PROTOCOL_H */
