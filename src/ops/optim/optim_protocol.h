/*
 * optim_protocol.h - the distributed optimizers' protocols as data
 * (core/protocol.h's form), built by optim_protocol.c for the model
 * checkers, and their signals' table, from which optim.c names the
 * kernels' wait sites.
 */
#ifndef LOOM_OPS_OPTIM_PROTOCOL_H
#define LOOM_OPS_OPTIM_PROTOCOL_H

#include "core/protocol.h"

/* The optimizers' signals: loom__optim_signals[i] for each i below. */
enum {
  LOOM__OPTIM_PS_READY = 0, /* a rank's gradients complete, its parameters free (its step started) */
  LOOM__OPTIM_PS_DONE,      /* a rank done reading its peers' gradients and storing their parameters */
  LOOM__OPTIM_PS_PHASE,     /* LAMB: a rank's partial norms in its table */
  LOOM__OPTIM_NSIG
};
extern const loom__proto_signal_t loom__optim_signals[LOOM__OPTIM_NSIG];

/* The RS-Opt-AG step's protocol at W ranks: Adam (lamb 0) or LAMB (1). */
void loom__optim_protocol(int lamb, int W, loom__proto_t *p);

#endif /* LOOM_OPS_OPTIM_PROTOCOL_H */
