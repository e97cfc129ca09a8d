/*
 * embedding_protocol.h - the embedding-bag + All-to-All protocols as data
 * (core/protocol.h's form), built by embedding_protocol.c for the model
 * checkers, and their signals' table, from which embedding_a2a_plan.c
 * names the kernels' wait sites.
 */
#ifndef LOOM_OPS_EMBEDDING_PROTOCOL_H
#define LOOM_OPS_EMBEDDING_PROTOCOL_H

#include "core/protocol.h"

/* The embedding's signals: loom__emb_signals[i] for each i below. */
enum {
  LOOM__EMB_PS_FLAG = 0, /* forward: a slice in this rank's out */
  LOOM__EMB_PS_GREADY,   /* backward: a peer's grad_out readable */
  LOOM__EMB_PS_GDONE,    /* backward: a peer done reading this rank's grad_out */
  LOOM__EMB_PS_READY,    /* forward: a peer's out writable */
  LOOM__EMB_NSIG
};
extern const loom__proto_signal_t loom__emb_signals[LOOM__EMB_NSIG];

typedef enum {
  LOOM__EMB_PROTO_FWD = 0,   /* the forward (ready, slice flags) */
  LOOM__EMB_PROTO_BWD,       /* the atomic backward (gready, gdone) */
  LOOM__EMB_PROTO_BWD_SORTED /* the sorted backward (gready, gdone; keys, sort, runs, heads) */
} loom__emb_proto_op_t;

/* The protocol of op (a loom__emb_proto_op_t) at W ranks (one slice per
 * source and destination). */
void loom__emb_protocol(int op, int W, loom__proto_t *p);
/* The forward's GIN path (compiled, never run; the plan refuses it):
 * ready_all 0 as its kernel is written (ready to the NVLink ranks only:
 * the checker finds a put overwriting a network rank's out that its caller
 * may still read), 1 with ready to and from every rank. */
void loom__emb_protocol_gin(int W, int ready_all, loom__proto_t *p);

#endif /* LOOM_OPS_EMBEDDING_PROTOCOL_H */
