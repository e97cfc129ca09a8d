/*
 * coll_protocol.h - the collectives' protocol as data (core/protocol.h's
 * form), built by coll_protocol.c from the schedule the kernels take
 * (coll_schedule.h), for the model checkers (the language's table of ops,
 * tests/host/coll/test_coll_protocol.c at any world size), and their
 * signals' table, from which coll.c names the kernels' wait sites.
 */
#ifndef LOOM_OPS_COLL_PROTOCOL_H
#define LOOM_OPS_COLL_PROTOCOL_H

#include <stdint.h>

#include "core/protocol.h"
#include "ops/coll/coll.h"

/* The collectives' signals: loom__coll_signals[i] for each i below. */
enum {
  LOOM__COLL_PS_ARRIVED = 0, /* a rank's call started: its input readable */
  LOOM__COLL_PS_REDUCED,     /* two-shot: an owner's chunk reduced into its staging */
  LOOM__COLL_PS_DONE,        /* a rank done reading its peers' buffers */
  LOOM__COLL_PS_LINE,        /* LL: a line's flag */
  LOOM__COLL_PS_FLAG,        /* PUSH: a chunk's flag */
  LOOM__COLL_PS_LAUNCH,      /* the kernel's blocks start after the caller's stores (stream order) */
  LOOM__COLL_PS_EXIT,        /* a block's end, before the caller's next use (stream order) */
  LOOM__COLL_NSIG
};
extern const loom__proto_signal_t loom__coll_signals[LOOM__COLL_NSIG];

/* A call of a collective as its kernel runs it. */
typedef struct loom__coll_proto {
  int kind;        /* loom__coll_kernel_kind_t */
  int world;       /* W (1 .. LOOM__PROTO_MAXW) */
  int blocks;      /* G, the kernel's grid (each block an actor; G > 1 adds the caller's stream) */
  int64_t count;   /* elements of the vector */
  int64_t unit;    /* slicing unit (loom__coll_unit) */
  int64_t chunk;   /* chunk elements (a multiple of unit) */
  int in_place;    /* coll.h's loom_coll_args_t.in_place (AllReduce, ReduceScatter, AllGather) */
  int esize;       /* LL: bytes per input element (2 or 4; 0: 4) */
  int one_parity;  /* LL, PUSH, a mutation: every call on parity 0 (the kernels alternate two) */
} loom__coll_proto_t;

/* The protocol of s's collective: W ranks' kernels (block by block, in
 * coll_kernels.cu's order, over coll_schedule.h's slices, chunks and
 * orders), the caller's stores of `in` before each call and its loads of
 * the result after it. The result buffer is marked once (written once per
 * call, then read). A bad spec gives an overflowed protocol (the checkers
 * refuse it). */
void loom__coll_protocol(const loom__coll_proto_t *s, loom__proto_t *p);

#endif /* LOOM_OPS_COLL_PROTOCOL_H */
