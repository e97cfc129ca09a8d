/*
 * plan.c - see plan.h.
 */
#include "plan.h"
#include "comm.h"
#include "error.h"
#include "handle.h"
#include "log.h"
#include "tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOOM_SLICE_ALIGN 256

loom_result_t loom__plan_create(loom_comm_t comm, const char *fn, const char *op, uint32_t nsignals,
                                size_t staging_bytes, uint64_t hash, const char *differ, loom_plan_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s plan: out=NULL", op);
  *out = NULL;
  LOOM_TRY(loom__comm_check(comm, op));
  size_t sig_bytes = (sizeof(loom_dev_epoch_t) + (size_t)nsignals * sizeof(uint32_t) + LOOM_SLICE_ALIGN - 1) /
                     LOOM_SLICE_ALIGN * LOOM_SLICE_ALIGN;
  size_t bytes = sig_bytes + staging_bytes;
  loom_plan_t p = (loom_plan_t)calloc(1, sizeof *p);
  loom_result_t r = p ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of a plan failed");
  char who[96];
  snprintf(who, sizeof who, "a %s plan", op);
  if (r == LOOM_SUCCESS) r = loom__ws_reserve(&comm->ws_alloc, bytes, LOOM_SLICE_ALIGN, who, &p->slice_offset);
  /* the agreement: the same plan, at the same slice, on every rank */
  if (r != LOOM_SUCCESS) {
    free(p);
    return loom__comm_refuse(comm, fn, r);
  }
  {
    char why[640];
    const uint64_t f[3] = {(uint64_t)nsignals, (uint64_t)staging_bytes, (uint64_t)p->slice_offset};
    const uint64_t h = loom__fnv64(loom__fnv64(hash, op, strlen(op)), f, sizeof f);
    snprintf(why, sizeof why, "%s; and every rank must make and destroy its plans in the same order (the plans' "
             "workspace slices differ otherwise)", differ && *differ ? differ : "the same description on every rank");
    const loom_result_t ra = loom__comm_agree(comm, fn, h, 0, why);
    if (ra != LOOM_SUCCESS) {
      loom__ws_release(&comm->ws_alloc, p->slice_offset);
      free(p);
      return ra;
    }
  }
  /* The slice may have held another plan's signals: zero it on every rank,
   * then fence, so that no peer signals into it before it is zeroed. */
  if (r == LOOM_SUCCESS && !comm->detached) {
    cudaError_t e = cudaMemsetAsync((char *)comm->ws_ptr + p->slice_offset, 0, sig_bytes, comm->stream);
    if (e != cudaSuccess) r = loom__cuda_fail((int)e, "zeroing a plan's signals", __FILE__, __LINE__);
    if (r == LOOM_SUCCESS) r = loom__comm_fence(comm);
    if (r != LOOM_SUCCESS) loom__ws_release(&comm->ws_alloc, p->slice_offset);
  }
  if (r == LOOM_SUCCESS) {
    r = loom__handle_add(p, LOOM_HANDLE_PLAN);
    if (r != LOOM_SUCCESS) loom__ws_release(&comm->ws_alloc, p->slice_offset);
  }
  if (r != LOOM_SUCCESS) {
    free(p);
    return r;
  }
  p->comm = comm;
  p->op = op;
  p->ws_bytes = bytes;
  p->epoch_offset = p->slice_offset;
  p->signals_offset = p->slice_offset + sizeof(loom_dev_epoch_t);
  p->nsignals = nsignals;
  p->staging_offset = p->slice_offset + sig_bytes;
  comm->nplans++;
  *out = p;
  return LOOM_SUCCESS;
}

int loom__plan_tuning(loom_plan_t plan, const char *key, char *value, size_t size) {
  snprintf(plan->tune_key, sizeof plan->tune_key, "%s", key);
  int found = loom__tune_get(key, value, size);
  LOOM_INFO("%s plan: tuning key \"%s\": %s%s", plan->op, key, found ? "tuned: " : "not tuned, heuristic default",
            found ? value : "");
  return found;
}

uint32_t loom__plan_next_epoch(loom_plan_t plan) { return ++plan->epoch; }

loom_result_t loom_plan_destroy(loom_plan_t plan) {
  LOOM_TRY(loom__check_plan(plan, "loom_plan_destroy"));
  loom__handle_remove(plan, LOOM_HANDLE_PLAN);
  if (plan->destroy_op) plan->destroy_op(plan);
  loom_comm_t comm = plan->comm;
  loom_result_t r = loom__ws_release(&comm->ws_alloc, plan->slice_offset);
  comm->nplans--;
  free(plan);
  return r;
}

loom_result_t loom__plan_begin(loom_comm_t comm, const char *fn, loom_plan_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: out=NULL", fn);
  *out = NULL;
  return loom__comm_check(comm, fn);
}

loom_result_t loom__plan_detached(const char *fn) {
  return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: the description is valid; a test comm without a GPU cannot hold a plan",
                    fn);
}

void *loom__plan_state_alloc(loom_comm_t comm, const char *fn, size_t bytes, loom_result_t *r) {
  void *st = calloc(1, bytes);
  *r = LOOM_SUCCESS;
  if (!st)
    *r = loom__comm_refuse(comm, fn,
                           loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation of the plan state failed", fn));
  return st;
}

loom_result_t loom__plan_abandon(loom_plan_t plan, loom_result_t r) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", loom_last_error());
  (void)loom_plan_destroy(plan);
  return loom__fail(r, "%s", msg);
}

loom_result_t loom__plan_done_create(cudaEvent_t *done) {
  cudaError_t e = cudaEventCreateWithFlags(done, cudaEventDisableTiming);
  return e == cudaSuccess ? LOOM_SUCCESS : loom__cuda_fail((int)e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
}

loom_result_t loom__plan_done_record(cudaEvent_t done, cudaStream_t stream, int *capturing) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &cs);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "cudaStreamIsCapturing(stream, &cs)", __FILE__, __LINE__);
  if (capturing) *capturing = cs == cudaStreamCaptureStatusActive;
  e = cudaEventRecordWithFlags(done, stream,
                               cs == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault);
  if (e != cudaSuccess)
    return loom__cuda_fail((int)e,
                           "cudaEventRecordWithFlags(st->done, stream, cs == cudaStreamCaptureStatusActive ? "
                           "cudaEventRecordExternal : cudaEventRecordDefault)",
                           __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

void loom__plan_done_release(cudaEvent_t done, const char *who) {
  if (!done) return;
  cudaError_t e = cudaEventSynchronize(done);
  if (e != cudaSuccess) LOOM_WARN("loom_plan_destroy (%s): waiting for the last call: %s", who, cudaGetErrorString(e));
  (void)cudaEventDestroy(done);
}
