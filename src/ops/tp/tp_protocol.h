/*
 * tp_protocol.h - the tensor-parallel ops' protocols as data
 * (core/protocol.h's form), built by tp_protocol.c for the model checkers,
 * and their signals' table, from which tp_linear.c names the kernels' wait
 * sites.
 */
#ifndef LOOM_OPS_TP_PROTOCOL_H
#define LOOM_OPS_TP_PROTOCOL_H

#include "core/protocol.h"

/* The tensor-parallel ops' signals: loom__tp_signals[i] for each i below. */
enum {
  LOOM__TP_PS_READY = 0, /* AllGather + GEMM: a peer's a_full writable */
  LOOM__TP_PS_CHUNK,     /* AllGather + GEMM: a peer's shard in this rank's a_full (the GEMM prologue's wait) */
  LOOM__TP_PS_SHARD,     /* the same chunk signals, waited for by the one-warp kernel before a shard's GEMM
                            (LOOM_TP_CE_SHARD_GEMMS; the AG protocol's model is the same) */
  LOOM__TP_PS_TILE,      /* GEMM + ReduceScatter: a peer's partial tile */
  LOOM__TP_PS_DONE,      /* GEMM + ReduceScatter: a peer done reading this rank's partial (or sum) */
  LOOM__TP_PS_GATHERED,  /* GEMM + AllReduce: a peer's reduced tile in this rank's out */
  LOOM__TP_PS_PUSHED,    /* bulk reduce: a peer's adds into this rank's sum complete */
  LOOM__TP_PS_FORK,      /* the side stream starts after the user's stream (an event) */
  LOOM__TP_PS_JOIN,      /* the user's stream goes on after the side stream (an event) */
  LOOM__TP_NSIG
};
extern const loom__proto_signal_t loom__tp_signals[LOOM__TP_NSIG];

typedef enum {
  LOOM__TP_PROTO_GEMM_RS = 0, /* GEMM + ReduceScatter (tile signals, done hand-back) */
  LOOM__TP_PROTO_GEMM_AR,     /* GEMM + AllReduce (GEMM + RS, then owners push, gathered signals) */
  LOOM__TP_PROTO_AG_GEMM,     /* AllGather (push) + GEMM */
  LOOM__TP_PROTO_GEMM_RS_BULK /* GEMM + ReduceScatter by bulk adds into the owners (pushed, done) */
} loom__tp_proto_op_t;

/* The protocol of op (a loom__tp_proto_op_t) at W ranks (one region per
 * rank's shard: the tiles of a shard behave alike). */
void loom__tp_protocol(int op, int W, loom__proto_t *p);

#endif /* LOOM_OPS_TP_PROTOCOL_H */
