/*
 * plan.h - the object every fused operation runs through.
 *
 * A plan belongs to one comm and owns: one slice of the comm's symmetric
 * workspace (same offset on every rank), the number of signal words at the
 * front of that slice, the call counter from which signal epochs are derived
 * (call e sets and waits for epoch e; every rank calls in the same order, so
 * epochs agree without exchanging them), the chosen kernel configuration and
 * the op it was made by (op.h: the door that made it, and the op's state
 * and its release).
 *
 * Slice layout, 256-aligned: [loom_dev_epoch_t (this rank's call counter,
 * used by this rank's kernels only) | signals: nsignals x uint32 | staging].
 * Kernels take their epoch from the device counter (loom__epoch_begin), so
 * calls captured in a CUDA graph advance it on every replay; `epoch` below
 * is the host's count of calls, for host-driven signals (copy engine).
 */
#ifndef LOOM_CORE_PLAN_H
#define LOOM_CORE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_op loom_op_t; /* op.h */

struct loom_plan {
  loom_comm_t comm;
  const loom_op_t *op;       /* the table it was made from (op.h) */
  size_t slice_offset;       /* slice start in the comm workspace (the epoch record; signals start at signals_offset) */
  size_t ws_bytes;           /* slice size */
  size_t epoch_offset;       /* loom_dev_epoch_t at the slice start */
  size_t signals_offset;     /* nsignals x uint32 */
  uint32_t nsignals;
  size_t staging_offset;     /* after the signals, rounded up */
  uint32_t epoch;            /* calls made so far */
  void *op_state;            /* op->state_bytes, released by op->release */
  cudaEvent_t done;          /* recorded by every eager call (loom__call_exit), waited for by destroy; NULL on a test comm */
  struct loom_trace *trace;  /* the calls' stage timelines at LOOM_DEBUG=TRACE (trace.h), else NULL */
};

/* LOOM_ERR_UNSUPPORTED for a valid description on a test comm without a
 * GPU (host tests stop there): an op's resolve or fill returns it. */
loom_result_t loom__plan_detached(const char *fn);

/* The epoch of the next call (and advances the counter). */
uint32_t loom__plan_next_epoch(loom_plan_t plan);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_PLAN_H */
