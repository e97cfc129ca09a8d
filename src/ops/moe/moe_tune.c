/*
 * moe_tune.c - loom_moe_mlp_tune: times loom_moe_mlp's two forms (the
 * combine fused into the down GEMM's epilogue, and the unfused sequence)
 * on the caller's arguments and records the faster in the tuning cache
 * (core/tune.h, LOOM_TUNE_FILE), which AUTO calls of the same shape and
 * tokens' bucket then run (moe_mlp.c, moe_mlp_resolve).
 *
 * Each form: 2 warm-up calls, 5 timed back to back on `stream`; its time
 * is the largest over the ranks (an NCCL all-reduce), so every rank records
 * the same winner. A rank whose calls failed enters the reduction with
 * 1e30 so that none waits for it.
 *
 * Key: "moe mlp W<W> <sms>sm H<H> F<F> E<E> k<k> <dtype> cap<capacity>
 * t<bucket>" (bucket: the next power of two of the tokens); value:
 * "path=<1 fused | 2 unfused>".
 */
#include <stdio.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/tune.h"
#include "ops/moe/moe.h"

typedef struct {
  const void *x, *gate_up, *down;
  const int32_t *ids;
  const float *weights;
  int64_t tokens;
  void *out;
} moe_tune_args_t;

/* Form `path`'s time (ms per call, rank-local; 1e30 where a call failed). */
static loom_result_t moe_tune_time(loom_plan_t plan, const moe_tune_args_t *a, loom_moe_mlp_path_t path,
                                   cudaStream_t stream, float *ms) {
  const char *fn = "loom_moe_mlp_tune";
  const int warm = 2, reps = 5;
  cudaEvent_t e[2] = {NULL, NULL};
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < 2 && r == LOOM_SUCCESS; ++i) {
    const cudaError_t ce = cudaEventCreate(&e[i]);
    if (ce != cudaSuccess) r = loom__cuda_fail((int)ce, "cudaEventCreate (tuning)", __FILE__, __LINE__);
  }
  for (int i = 0; i < warm + reps && r == LOOM_SUCCESS; ++i) {
    if (i == warm && cudaEventRecord(e[0], stream) != cudaSuccess) r = loom__fail(LOOM_ERR_CUDA, "%s: event record", fn);
    if (r == LOOM_SUCCESS)
      r = loom__moe_mlp_run(plan, fn, a->x, a->ids, a->weights, a->tokens, a->gate_up, a->down, a->out, path, stream);
  }
  if (r == LOOM_SUCCESS && cudaEventRecord(e[1], stream) != cudaSuccess) r = loom__fail(LOOM_ERR_CUDA, "%s: event record", fn);
  cudaError_t ce = cudaSuccess;
  if (r == LOOM_SUCCESS && (ce = cudaEventSynchronize(e[1])) != cudaSuccess)
    r = loom__cuda_fail((int)ce, "cudaEventSynchronize (tuning)", __FILE__, __LINE__);
  float t = 0.f;
  if (r == LOOM_SUCCESS && (ce = cudaEventElapsedTime(&t, e[0], e[1])) != cudaSuccess)
    r = loom__cuda_fail((int)ce, "cudaEventElapsedTime (tuning)", __FILE__, __LINE__);
  for (int i = 0; i < 2; ++i)
    if (e[i]) cudaEventDestroy(e[i]);
  *ms = r == LOOM_SUCCESS ? t / (float)reps : 1e30f;
  return r;
}

/* The winner into the tuning cache (and rank 0's LOOM_TUNE_FILE). */
static loom_result_t moe_tune_record(loom_plan_t plan, const loom_moe_state_t *st, int64_t tokens,
                                     loom_moe_mlp_path_t won, const float ms[2]) {
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__moe_mlp_tune_key(&st->desc, st->world, plan->comm->sm_count, tokens, key, sizeof key))
    return loom__fail(LOOM_ERR_INTERNAL, "loom_moe_mlp_tune: tuning key too long");
  snprintf(value, sizeof value, "path=%d", (int)won);
  LOOM_TRY(loom__tune_put(key, value));
  LOOM_INFO("loom_moe_mlp_tune: %s = %s (fused %.4f ms, unfused %.4f ms)", key, value, ms[0], ms[1]);
  const char *file = loom__param_TUNE_FILE();
  if (file && *file && plan->comm->rank == 0) LOOM_TRY(loom__tune_save(file));
  return LOOM_SUCCESS;
}

loom_result_t loom_moe_mlp_tune(loom_plan_t plan, const void *x, const int32_t *ids, const float *weights,
                                int64_t tokens, const void *gate_up, const void *down, void *out,
                                cudaStream_t stream) {
  const char *fn = "loom_moe_mlp_tune";
  loom_moe_state_t *st;
  LOOM_TRY(loom__moe_enter(plan, fn, &st));
  LOOM_TRY(loom__stream_not_capturing(fn, stream));
  const moe_tune_args_t a = {x, gate_up, down, ids, weights, tokens, out};
  float *dev_ms = NULL;
  LOOM_CUDA(cudaMalloc((void **)&dev_ms, sizeof *dev_ms));
  static const loom_moe_mlp_path_t forms[2] = {LOOM_MOE_MLP_FUSED, LOOM_MOE_MLP_UNFUSED};
  float ms[2] = {0.f, 0.f};
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < 2; ++i) {
    float mine = 0.f;
    const loom_result_t rt = moe_tune_time(plan, &a, forms[i], stream, &mine);
    const loom_result_t rm = loom__comm_max_ms(plan->comm, mine, dev_ms, stream, &ms[i]);
    if (r == LOOM_SUCCESS) r = rt != LOOM_SUCCESS ? rt : rm;
    /* a rank that failed stops every rank here (none waits for it in the next form's calls) */
    if (r == LOOM_SUCCESS && ms[i] >= 1e29f)
      r = loom__fail(LOOM_ERR_INTERNAL, "%s: another rank's calls failed (its own error says why)", fn);
    if (r != LOOM_SUCCESS) break;
  }
  cudaFree(dev_ms);
  LOOM_TRY(r);
  return moe_tune_record(plan, st, tokens, ms[0] <= ms[1] ? forms[0] : forms[1], ms);
}
