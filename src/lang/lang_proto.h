/*
 * lang_proto.h - the language's protocols (core/protocol.h's form): the
 * table of the hand-written ops' protocols, each built by its family's
 * builder (proto_ops.c), and the protocols of a scheduled program's units
 * (proto_lower.c).
 */
#ifndef LOOM_LANG_LANG_PROTO_H
#define LOOM_LANG_LANG_PROTO_H

#include "loom.h"
#include "core/protocol.h"

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
  LOOM__PROTO_MOE,             /* moe: a dispatch, the experts, two combines (counts, delivered, comb_ready, ...) */
  LOOM__PROTO_RS_LL,           /* coll: ReduceScatter LL (the peers' slices pushed as lines, two parities) */
  LOOM__PROTO_AG_LL,           /* coll: AllGather LL (the own slice pushed as lines, two parities) */
  LOOM__PROTO_OPS_COUNT
} loom__proto_op_t;
const char *loom__proto_op_name(int op);
/* p's memory is taken as fresh (loom__proto_free it). */
void loom__proto_op(int op, int W, loom__proto_t *p);

/* ---- proto_lower.c ---------------------------------------------------------- */
/* One unit of a scheduled program that talks to other ranks, and its protocol. */
typedef struct loom__proto_unit {
  char unit[64]; /* the stage's, fused collective's or operation's name (and the path) */
  loom__proto_t proto;
} loom__proto_unit_t;
struct loom_prog;
/* The language's protocols for the collectives no hand-written op has:
 * op is LOOM__OP_REDUCE, _BROADCAST, _ALLTOALL or _SEND (lang.h; Send: a
 * pair of ranks whatever W). p's memory is taken as fresh. */
void loom__proto_template(int op, int W, loom__proto_t *p);
/* The protocols of p's units at W ranks per group (2..LOOM__PROTO_MAXW), in
 * topological order; LOOM_ERR_INVALID_ARGUMENT if more than cap. The units
 * own their protocols: loom__proto_units_free(out, *n) releases them
 * (whatever it returned). */
loom_result_t loom__lang_lower(struct loom_prog *p, int W, loom__proto_unit_t *out, int cap, int *n);
void loom__proto_units_free(loom__proto_unit_t *u, int n);

#endif /* LOOM_LANG_LANG_PROTO_H */
