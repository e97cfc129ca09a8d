/*
 * proto_waits.h - "every wait is needed", the mutation test the families'
 * protocol tests share: each wait the kernels run is dropped in turn from
 * the family's protocol (the data its model checker proves,
 * src/ops/<family>/<family>_protocol.c) and the rest is checked.
 *
 * What "a wait" is: a line of a kernel. A WAIT is a kernel's when its
 * family's table of signals gives its signal a device wait site; the
 * stream-order signals (a launch after the caller's stores, a block's exit
 * before the caller's loads: site 0) are CUDA's, not a line that could be
 * lost. A wait every block of a kernel runs is one line, so it is dropped
 * from every actor of its rank at once; and where the protocol splits one
 * word of the kernel into slots (a rank's done, set by its last block, is
 * a slot per block there), the family's `word` function maps a slot to
 * its word, and the waits for every slot of the word go together.
 *
 * The test says which drops it expects the rest to cover (another wait
 * orders the same accesses); every other drop must be reported, and every
 * expected cover must hold.
 */
#ifndef LOOM_TESTS_HOST_PROTO_WAITS_H
#define LOOM_TESTS_HOST_PROTO_WAITS_H

#include "core/protocol.h"

/* The id of a family table's signal s in p, -1 if p has none. */
int proto_sig_id(const loom__proto_t *p, const loom__proto_signal_t *s);

typedef struct proto_family_waits {
  const loom__proto_signal_t *table; /* the family's signals */
  int nsig;
  const void *ctx;                   /* the test's, passed to the functions below */
  /* The kernel word of wait w's slot (NULL: the slot is the word). */
  int (*word)(const void *ctx, const loom__proto_t *p, const loom__pstep_t *w);
  /* 1 when the test expects p without wait w (of actor a, dropped from
   * a's rank) to hold; 0 when it expects a violation. */
  int (*covered)(const void *ctx, const loom__proto_t *p, int a, const loom__pstep_t *w);
} proto_family_waits_t;

typedef struct proto_waits_tally {
  int tried;   /* drops expected to be reported */
  int caught;  /* of those, reported */
  int covered; /* drops expected to be covered (and found so) */
} proto_waits_tally_t;

/* Drops each kernel wait of p in turn, checks the rest over two calls
 * with the static check and fails the running test where the verdict is
 * not the one f->covered expects. Adds to *t. */
void proto_every_kernel_wait(const loom__proto_t *p, const proto_family_waits_t *f, proto_waits_tally_t *t);

#endif /* LOOM_TESTS_HOST_PROTO_WAITS_H */
