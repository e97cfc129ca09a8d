/*
 * plan.h - the object every fused operation runs through.
 *
 * A plan belongs to one comm and owns: one slice of the comm's symmetric
 * workspace (same offset on every rank), the number of signal words at the
 * front of that slice, the call counter from which signal epochs are derived
 * (call e sets and waits for epoch e; every rank calls in the same order, so
 * epochs agree without exchanging them), the chosen kernel configuration and
 * its tuning key. An op stores its own state in `op_state` and frees it in
 * `destroy_op`.
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

#define LOOM_TUNE_KEY_BYTES 160

struct loom_plan {
  loom_comm_t comm;
  const char *op;            /* "ag_gemm", ... (static string) */
  size_t slice_offset;       /* slice start in the comm workspace (the epoch record; signals start at signals_offset) */
  size_t ws_bytes;           /* slice size */
  size_t epoch_offset;       /* loom_dev_epoch_t at the slice start */
  size_t signals_offset;     /* nsignals x uint32 */
  uint32_t nsignals;
  size_t staging_offset;     /* after the signals, rounded up */
  uint32_t epoch;            /* calls made so far */
  char tune_key[LOOM_TUNE_KEY_BYTES];
  void *op_state;
  void (*destroy_op)(loom_plan_t plan);
};

/* Collective (same arguments on every rank). Reserves the slice (fails
 * with LOOM_ERR_OUT_OF_MEMORY naming `op` and the bytes needed), then the
 * ranks agree (loom__comm_agree, `fn` naming the call) on `hash` (what the
 * caller resolved: its description and choices), op, nsignals,
 * staging_bytes and the slice's offset, so that ranks that made or
 * destroyed plans in different orders, or resolved different plans, all
 * fail (`differ` says what must match) instead of signalling into each
 * other's slices; only then is the slice zeroed, so no peer can still be
 * waiting on a word of it (every peer's host is past destroying the plan
 * that held it, which waits for that plan's last call), and a fence makes
 * the zeros visible before any peer's next signal. A caller that refuses
 * its arguments before this point answers the agreement through
 * loom__comm_refuse instead. */
loom_result_t loom__plan_create(loom_comm_t comm, const char *fn, const char *op, uint32_t nsignals,
                                size_t staging_bytes, uint64_t hash, const char *differ, loom_plan_t *out);

/* Records the plan's tuning key and looks it up in the tuning cache:
 * 1 and the value in value[size] if tuned, 0 (use the heuristic) if not. */
int loom__plan_tuning(loom_plan_t plan, const char *key, char *value, size_t size);

/* The steps every op's plan creation shares. */

/* The entry's first step: out checked (`fn`: out=NULL) and cleared, the
 * comm checked. Not collective: a failure here is the caller's misuse on
 * this rank, before any agreement. */
loom_result_t loom__plan_begin(loom_comm_t comm, const char *fn, loom_plan_t *out);

/* LOOM_ERR_UNSUPPORTED for a valid description on a test comm without a
 * GPU (host tests stop there). */
loom_result_t loom__plan_detached(const char *fn);

/* The op's zeroed state of `bytes`; NULL (LOOM_ERR_OUT_OF_MEMORY in *r,
 * the plan agreement answered through loom__comm_refuse) on failure. */
void *loom__plan_state_alloc(loom_comm_t comm, const char *fn, size_t bytes, loom_result_t *r);

/* A plan that failed after loom__plan_create: destroys it (its op state
 * too) and returns r with the failure's message kept. */
loom_result_t loom__plan_abandon(loom_plan_t plan, loom_result_t r);

/* The plan's `done` event (recorded by every call, waited for by destroy). */
loom_result_t loom__plan_done_create(cudaEvent_t *done);

/* Records `done` on stream (inside a capture as an event node, so graph
 * replays record it too); *capturing (where not NULL): whether it was. */
loom_result_t loom__plan_done_record(cudaEvent_t done, cudaStream_t stream, int *capturing);

/* Waits for the plan's last call (its `done`) and destroys the event; a
 * failure is a warning naming `who` (destroy goes on). */
void loom__plan_done_release(cudaEvent_t done, const char *who);

/* The epoch of the next call (and advances the counter). */
uint32_t loom__plan_next_epoch(loom_plan_t plan);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_PLAN_H */
