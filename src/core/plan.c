/*
 * plan.c - the one door (op.h): plans made from an op's table in one
 * sequence, their slice of the workspace and its agreement, their state,
 * their destruction, and the entry and exit of every call. See plan.h and
 * op.h.
 */
#include "plan.h"
#include "comm.h"
#include "error.h"
#include "handle.h"
#include "log.h"
#include "op.h"
#include "param.h"
#include "trace.h"
#include "world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOOM_SLICE_ALIGN 256

/* ---- the slice and the agreement ------------------------------------------ */

/* The agreement on what every rank resolved: the op, the layout and the
 * slice's offset, so that ranks that made or destroyed plans in different
 * orders, or resolved different plans, all fail (`differ` says what must
 * match) instead of signalling into each other's slices. */
static loom_result_t plan_agree(loom_comm_t comm, const loom_op_t *op, const loom_plan_layout_t *lay,
                                size_t slice_offset) {
  char why[640];
  const uint64_t f[3] = {(uint64_t)lay->nsignals, (uint64_t)lay->staging_bytes, (uint64_t)slice_offset};
  const uint64_t h = loom__fnv64(loom__fnv64(lay->fingerprint, op->name, strlen(op->name)), f, sizeof f);
  snprintf(why, sizeof why, "%s; and every rank must make and destroy its plans in the same order (the plans' "
           "workspace slices differ otherwise)", op->differ && *op->differ ? op->differ
                                                                       : "the same description on every rank");
  return loom__comm_agree(comm, op->plan_fn, h, 0, why);
}

/* The slice may have held another plan's signals: zero it on every rank,
 * then fence, so that no peer signals into it before it is zeroed (every
 * peer's host is past destroying the plan that held it, which waited for
 * that plan's last call). */
static loom_result_t plan_zero_signals(loom_comm_t comm, size_t offset, size_t sig_bytes) {
  if (comm->detached) return LOOM_SUCCESS;
  cudaError_t e = cudaMemsetAsync((char *)comm->ws_ptr + offset, 0, sig_bytes, comm->stream);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "zeroing a plan's signals", __FILE__, __LINE__);
  return loom__comm_fence(comm);
}

/* Collective. Reserves the slice (LOOM_ERR_OUT_OF_MEMORY naming the op and
 * the bytes; the agreement answered as a refusal), agrees, zeroes the
 * signals, registers the handle. */
static loom_result_t plan_create(loom_comm_t comm, const loom_op_t *op, const loom_plan_layout_t *lay,
                                 loom_plan_t *out) {
  *out = NULL;
  const size_t sig_bytes = (sizeof(loom_dev_epoch_t) + (size_t)lay->nsignals * sizeof(uint32_t) + LOOM_SLICE_ALIGN -
                            1) / LOOM_SLICE_ALIGN * LOOM_SLICE_ALIGN;
  const size_t bytes = sig_bytes + lay->staging_bytes;
  loom_plan_t p = (loom_plan_t)calloc(1, sizeof *p);
  loom_result_t r = p ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of a plan failed");
  char who[96];
  snprintf(who, sizeof who, "a %s plan", op->name);
  if (r == LOOM_SUCCESS) r = loom__ws_reserve(&comm->ws_alloc, bytes, LOOM_SLICE_ALIGN, who, &p->slice_offset);
  if (r != LOOM_SUCCESS) {
    free(p);
    return loom__comm_refuse(comm, op->plan_fn, r);
  }
  r = plan_agree(comm, op, lay, p->slice_offset);
  if (r == LOOM_SUCCESS) r = plan_zero_signals(comm, p->slice_offset, sig_bytes);
  if (r == LOOM_SUCCESS) r = loom__handle_add(p, LOOM_HANDLE_PLAN);
  if (r != LOOM_SUCCESS) {
    loom__ws_release(&comm->ws_alloc, p->slice_offset);
    free(p);
    return r;
  }
  p->comm = comm;
  p->op = op;
  p->ws_bytes = bytes;
  p->epoch_offset = p->slice_offset;
  p->signals_offset = p->slice_offset + sizeof(loom_dev_epoch_t);
  p->nsignals = lay->nsignals;
  p->staging_offset = p->slice_offset + sig_bytes;
  comm->nplans++;
  *out = p;
  return LOOM_SUCCESS;
}

/* ---- the door --------------------------------------------------------------- */

loom_result_t loom__plan_detached(const char *fn) {
  return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: the description is valid; a test comm without a GPU cannot hold a plan",
                    fn);
}

/* The entry's first step: out checked and cleared, the comm checked. Not
 * collective: a failure here is the caller's misuse on this rank. */
static loom_result_t plan_begin(loom_comm_t comm, const char *fn, loom_plan_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: out=NULL", fn);
  *out = NULL;
  return loom__comm_check(comm, fn);
}

/* A state stopped at any step: released and freed. */
static void state_drop(loom_comm_t comm, const loom_op_t *op, void *state) {
  if (!state) return;
  op->release(comm, state);
  free(state);
}

/* A plan that failed after the agreement: destroyed (its state released)
 * and r returned with the failure's message kept. */
static loom_result_t plan_abandon(loom_plan_t plan, loom_result_t r) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", loom_last_error());
  (void)loom_plan_destroy(plan);
  return loom__fail(r, "%s", msg);
}

/* The state of a checked description and its layout; a failure answers
 * the agreement. */
static loom_result_t plan_resolve(loom_comm_t comm, const loom_op_t *op, const void *desc, void **state,
                                  loom_plan_layout_t *lay) {
  *state = calloc(1, op->state_bytes);
  loom_result_t r = *state ? LOOM_SUCCESS
                           : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation of the plan state (%zu bytes) "
                                        "failed", op->plan_fn, op->state_bytes);
  memset(lay, 0, sizeof *lay);
  if (r == LOOM_SUCCESS) r = op->resolve(op, comm, desc, *state);
  if (r == LOOM_SUCCESS) r = op->lay_out(op, comm, *state, lay);
  if (r == LOOM_SUCCESS) return LOOM_SUCCESS;
  state_drop(comm, op, *state);
  *state = NULL;
  return loom__comm_refuse(comm, op->plan_fn, r);
}

/* After the agreement: the done event, then the op's fill. */
static loom_result_t plan_fill(loom_plan_t plan) {
  if (!plan->comm->detached) {
    const cudaError_t e = cudaEventCreateWithFlags(&plan->done, cudaEventDisableTiming);
    if (e != cudaSuccess) return loom__cuda_fail((int)e, "cudaEventCreateWithFlags (a plan's done)", __FILE__, __LINE__);
  }
  plan->trace = loom__trace_create(plan);
  return plan->op->fill(plan, plan->op_state);
}

loom_result_t loom__plan_build(loom_comm_t comm, const loom_op_t *op, const void *desc, loom_plan_t *out) {
  *out = NULL;
  void *state = NULL;
  loom_plan_layout_t lay;
  LOOM_TRY(plan_resolve(comm, op, desc, &state, &lay));
  loom_plan_t plan = NULL;
  loom_result_t r = plan_create(comm, op, &lay, &plan);
  if (r != LOOM_SUCCESS) {
    state_drop(comm, op, state);
    return r;
  }
  plan->op_state = state;
  r = plan_fill(plan);
  if (r != LOOM_SUCCESS) return plan_abandon(plan, r);
  if (op->describe) op->describe(plan, state);
  *out = plan;
  return LOOM_SUCCESS;
}

/* Tuning before the plan, where the op tunes and tuning is asked for; a
 * tuner is collective and answers its own agreements. */
static loom_result_t plan_tune_if_asked(loom_comm_t comm, const loom_op_t *op, const void *desc) {
  /* (a world's ranks share one GPU: its timings are not W ranks') */
  if (!op->tune || comm->detached || comm->world || loom__param_TUNE() != 1 || !op->tune_asked(op, comm, desc))
    return LOOM_SUCCESS;
  LOOM_INFO("%s: LOOM_TUNE=1 and the tuning cache lacks this description: tuning it now", op->plan_fn);
  return op->tune(op, comm, desc, comm->stream);
}

loom_result_t loom__plan_make(loom_comm_t comm, const loom_op_t *op, const void *desc, loom_plan_t *out) {
  LOOM_TRY(plan_begin(comm, op->plan_fn, out));
  const loom_result_t r = op->check(op, comm, desc);
  if (r != LOOM_SUCCESS) return loom__comm_refuse(comm, op->plan_fn, r);
  LOOM_TRY(plan_tune_if_asked(comm, op, desc));
  return loom__plan_build(comm, op, desc, out);
}

loom_result_t loom__plan_tune(loom_comm_t comm, const loom_op_t *op, const char *fn, const void *desc,
                              cudaStream_t stream) {
  LOOM_TRY(loom__comm_check(comm, fn));
  loom_result_t r = op->check(op, comm, desc);
  if (r == LOOM_SUCCESS && comm->world) r = loom__world_unsupported(comm, fn, "tuning", LOOM_WORLD_NO_TIMING);
  if (r == LOOM_SUCCESS && comm->detached)
    r = loom__fail(LOOM_ERR_UNSUPPORTED, "%s: a test comm without a GPU cannot time", fn);
  if (r == LOOM_SUCCESS) r = loom__stream_not_capturing(fn, stream);
  if (r != LOOM_SUCCESS) return loom__comm_refuse(comm, fn, r);
  return op->tune(op, comm, desc, stream);
}

loom_result_t loom_plan_destroy(loom_plan_t plan) {
  LOOM_TRY(loom__check_plan(plan, "loom_plan_destroy"));
  loom__handle_remove(plan, LOOM_HANDLE_PLAN);
  if (plan->done) { /* the last call's kernels may still use what the state holds */
    const cudaError_t e = cudaEventSynchronize(plan->done);
    if (e != cudaSuccess)
      LOOM_WARN("loom_plan_destroy (%s): waiting for the last call: %s", plan->op->name, cudaGetErrorString(e));
    (void)cudaEventDestroy(plan->done);
  }
  loom__trace_destroy(plan, plan->trace);
  loom_comm_t comm = plan->comm;
  state_drop(comm, plan->op, plan->op_state);
  loom_result_t r = loom__ws_release(&comm->ws_alloc, plan->slice_offset);
  comm->nplans--;
  free(plan);
  return r;
}

/* ---- calls -------------------------------------------------------------------- */

uint32_t loom__plan_next_epoch(loom_plan_t plan) { return ++plan->epoch; }

const loom_op_t *loom__plan_op(loom_plan_t plan) { return plan ? plan->op : NULL; }

/* "a" or "an" before a name, as it is spelled. */
static const char *article(const char *name) { return name && strchr("aeiou", name[0]) ? "an" : "a"; }

loom_result_t loom__plan_state(loom_plan_t plan, const char *fn, const loom_op_family_t *family, const loom_op_t *op,
                               void **state) {
  LOOM_TRY(loom__check_plan(plan, fn));
  const loom_op_t *have = plan->op;
  const int ok = op ? have == op : (have->family && have->family == family);
  if (!ok || !plan->op_state) {
    if (op)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: plan=%p is %s %s plan, not %s %s plan", fn, (void *)plan,
                        article(have->name), have->name, article(op->name), op->name);
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: plan=%p is %s %s plan, not %s", fn, (void *)plan,
                      article(have->name), have->name, family->plans);
  }
  *state = plan->op_state;
  return LOOM_SUCCESS;
}

loom_result_t loom__call_enter(loom_plan_t plan, const char *fn, const loom_op_family_t *family, const loom_op_t *op,
                               cudaStream_t stream, void **state) {
  LOOM_TRY(loom__plan_state(plan, fn, family, op, state));
  LOOM_TRY(loom__comm_check(plan->comm, fn));
  LOOM_TRY(loom__world_skew(plan->comm, stream)); /* tests' staggered ranks in a world; nothing otherwise */
  loom__trace_start(plan, stream);
  return LOOM_SUCCESS;
}

loom_result_t loom__call_exit(loom_plan_t plan, cudaStream_t stream, int *capturing) {
  if (capturing) *capturing = 0;
  if (!plan->done) return LOOM_SUCCESS;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &cs);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "cudaStreamIsCapturing (a call's exit)", __FILE__, __LINE__);
  const int cap = cs == cudaStreamCaptureStatusActive;
  if (capturing) *capturing = cap;
  /* an eager call records the plan's `done` (loom_plan_destroy waits for
   * it); a captured one does not: an event node after every kernel node
   * costs 1.1-1.4 us per call in a graph of calls on an H200
   * (dev/coll/graph_nodes_probe), and a graph's replays are the caller's to
   * finish before it destroys what they use (loom.h, loom_plan_destroy) */
  if (!cap) {
    e = cudaEventRecord(plan->done, stream);
    if (e != cudaSuccess) return loom__cuda_fail((int)e, "cudaEventRecord (a call's exit)", __FILE__, __LINE__);
  }
  loom__trace_end(plan, stream);
  return LOOM_SUCCESS;
}

loom_result_t loom__plan_wait_last_call(loom_plan_t plan, const char *fn) {
  if (!plan->done) return LOOM_SUCCESS;
  const cudaError_t e = cudaEventSynchronize(plan->done);
  if (e != cudaSuccess) {
    char what[160];
    snprintf(what, sizeof what, "%s: cudaEventSynchronize (the plan's last call)", fn);
    return loom__cuda_fail((int)e, what, __FILE__, __LINE__);
  }
  return LOOM_SUCCESS;
}
