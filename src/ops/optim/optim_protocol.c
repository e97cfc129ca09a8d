/*
 * optim_protocol.c - the distributed optimizers' protocols in the form of
 * core/protocol.h, as optim.h's kernels run them: ready = e into every
 * rank, the waits, the sums of the own chunk over every rank's gradients,
 * the stores of the updated chunk into every rank's parameters, done = e
 * into every rank and the waits for every peer's done; LAMB adds the
 * partial norms' table and the phase handshake between its kernels.
 * Regions are per rank chunks (region q: the chunks rank q owns); one
 * block per rank; the backward pass writes the gradients before the call,
 * the next forward pass reads the parameters after it and the caller may
 * rewrite them (a checkpoint load).
 */
#include "ops/optim/optim_protocol.h"
#include "ops/optim/optim.h" /* the wait sites */

const loom__proto_signal_t loom__optim_signals[LOOM__OPTIM_NSIG] = {
    [LOOM__OPTIM_PS_READY] = {"ready", LOOM_SITE_OPTIM_READY,
                              "optimizer step: a peer's gradients complete (its step started)"},
    [LOOM__OPTIM_PS_DONE] = {"done", LOOM_SITE_OPTIM_DONE,
                             "optimizer step: a peer still reading this rank's gradients or storing its parameters"},
    [LOOM__OPTIM_PS_PHASE] = {"phase", LOOM_SITE_OPTIM_PHASE, "LAMB step: a peer's partial norms"},
};

static int optim_sig(loom__proto_t *p, int i) { return loom__proto_sig_of(p, &loom__optim_signals[i]); }

/* Rank r's step: Adam (lamb = 0) or LAMB (lamb = 1). */
static void optim_rank(loom__proto_t *p, int r, int lamb) {
  const int W = p->W, grad = loom__proto_buf(p, "grad"), param = loom__proto_buf(p, "param");
  const int ready = optim_sig(p, LOOM__OPTIM_PS_READY), done = optim_sig(p, LOOM__OPTIM_PS_DONE);
  loom__proto_write(p, r, r, grad, 0, W); /* the backward pass */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, ready, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, ready, (r + 1 + i) % W, 0);
  for (int s = 0; s < W; ++s) loom__proto_read(p, r, s, grad, r, r + 1);
  if (lamb) {
    const int part = loom__proto_buf(p, "partial"), phase = optim_sig(p, LOOM__OPTIM_PS_PHASE);
    loom__proto_write(p, r, r, part, 0, 1);
    for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, phase, r, 0);
    for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, phase, (r + 1 + i) % W, 0);
    for (int s = 0; s < W; ++s) loom__proto_read(p, r, s, part, 0, 1); /* norms in global order */
  }
  for (int q = 0; q < W; ++q) loom__proto_write(p, r, (r + 1 + q) % W, param, r, r + 1);
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, done, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, done, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, param, 0, W); /* the next forward pass */
  loom__proto_write(p, r, r, param, 0, W); /* the caller may rewrite them after the step (a checkpoint) */
}

void loom__optim_protocol(int lamb, int W, loom__proto_t *p) {
  loom__proto_init(p, lamb ? "optim_lamb" : "optim_adam", W);
  for (int r = 0; r < W && !p->overflow; ++r) optim_rank(p, r, lamb);
}
