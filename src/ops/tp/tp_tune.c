/*
 * tp_tune.c - loom_ag_gemm_tune / loom_gemm_rs_tune / loom_gemm_ar_tune: time the tensor-parallel
 * ops' knobs for one description on this comm and record the fastest in the
 * tuning cache (core/tune.h, LOOM_TUNE_FILE), which plans made later with
 * transfer LOOM_TP_AUTO (chunk_rows and comm_blocks 0) take.
 *
 * Candidates: the sequential path with cuBLASLt (where it takes the dtypes:
 * a tuned op is never slower than the baseline it replaces; cuBLASLt's
 * algorithm itself timed among LOOM_TP_TUNE_CUBLASLT_CANDIDATES and recorded,
 * baseline/baseline.h) and with loom_gemm, and where the fused transfers can
 * run, AG: the copy engine with 4, 8, 16 chunks per shard and whole shards,
 * the SM copy kernel on 4, 8, 16 blocks; RS: the reduction on 4, 8, 16
 * blocks and the plan's own choice, and the atomic reduction; AR: the
 * sequential path (loom_gemm + loom_allreduce) and the fused reduction on
 * 4, 8, 16 blocks and the plan's own choice. Each candidate: a plan, 2 warm-up calls,
 * 5 timed calls back to back; its time is the maximum over ranks (an NCCL
 * all-reduce), so every rank picks the same winner (plans are collective
 * and must agree). Inputs are the tuner's own (a constant pattern: timing
 * does not depend on the values).
 *
 * AR's output is the tuner's own loom_malloc buffer (peers store into it).
 *
 * Key: "tp <op> W<W> <sms>sm m<m> n<n> k<k> <ab>-><c> <nk|kn> bias<0|1>
 * act<a>"; value: "transfer=<t> chunk=<rows> blocks=<n> gemm=<g>" (g: the
 * sequential path's GEMM, loom_tp_gemm_t; 0 for the fused transfers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/tune.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

int loom__tp_tune_key(int kind, const loom_tp_desc_t *d, int sms, char *key, size_t size) {
  const int n = snprintf(key, size, "tp %s W%d %dsm m%lld n%lld k%lld %s->%s %s bias%d act%d",
                         loom__tp_kind_op(kind), d->world_size, sms, (long long)d->m,
                         (long long)d->n, (long long)d->k, loom__dtype_name(d->ab_type), loom__dtype_name(d->c_type),
                         d->b_layout == LOOM_B_NK ? "nk" : "kn", d->has_bias ? 1 : 0, (int)d->activation);
  return n > 0 && (size_t)n < size;
}

void loom__tp_tune_format(const loom_tp_choice_t *c, char *out, size_t size) {
  snprintf(out, size, "transfer=%d chunk=%d blocks=%d gemm=%d", (int)c->transfer, c->chunk_rows, c->comm_blocks,
           (int)c->gemm);
}

loom_result_t loom__tp_tune_parse(const char *text, loom_tp_choice_t *out) {
  int tt = -1, c = -1, b = -1, g = 0, used = 0, used2 = 0;
  int ok = text && sscanf(text, "transfer=%d chunk=%d blocks=%d%n", &tt, &c, &b, &used) == 3;
  if (ok && text[used] != 0) /* the GEMM engine (entries of older files have none: AUTO) */
    ok = sscanf(text + used, " gemm=%d%n", &g, &used2) == 1 && text[used + used2] == 0;
  if (!ok || tt < LOOM_TP_SEQUENTIAL || tt > LOOM_TP_SM_ATOMIC || c < 0 || b < 0 || g < LOOM_TP_GEMM_AUTO ||
      g > LOOM_TP_GEMM_CUBLASLT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "tuning entry \"%s\": expected \"transfer=<1..4> chunk=<rows >= 0> blocks=<n >= 0> "
                      "[gemm=<0..2>]\"",
                      text ? text : "(null)");
  out->transfer = (loom_tp_transfer_t)tt, out->chunk_rows = c, out->comm_blocks = b, out->gemm = (loom_tp_gemm_t)g;
  return LOOM_SUCCESS;
}

/* One candidate's time (ms per call, max over ranks); collective. */
static loom_result_t time_candidate(loom_comm_t comm, const loom_tp_desc_t *d, int kind, void *a, void *b, void *c,
                                    void *bias, cudaStream_t stream, float *dev_ms, float *ms) {
  loom_plan_t plan = NULL;
  loom_result_t r = loom__tp_plan_make(comm, d, kind, &plan);
  LOOM_TRY(r);
  /* the sequential path with cuBLASLt: its first (warm-up) call times
   * cuBLASLt's candidates and records the winner, which this plan's later
   * calls and every later plan of the shape run (the bench's baseline is
   * timed the same way) */
  if (d->transfer == LOOM_TP_SEQUENTIAL && d->sequential_gemm == LOOM_TP_GEMM_CUBLASLT)
    ((loom_tp_state_t *)plan->op_state)->tune_base_gemm = 1;
  cudaEvent_t e0 = NULL, e1 = NULL;
  cudaError_t ce = cudaEventCreate(&e0);
  if (ce == cudaSuccess) ce = cudaEventCreate(&e1);
  if (ce != cudaSuccess) r = loom__cuda_fail((int)ce, "cudaEventCreate (tuning)", __FILE__, __LINE__);
  const int warm = 2, reps = 5;
  for (int i = 0; i < warm + reps && r == LOOM_SUCCESS; ++i) {
    if (i == warm && cudaEventRecord(e0, stream) != cudaSuccess) r = loom__fail(LOOM_ERR_CUDA, "tuning: event record");
    if (r == LOOM_SUCCESS)
      r = kind == LOOM__TP_AG   ? loom_ag_gemm(plan, a, b, c, NULL, d->has_bias ? bias : NULL, stream)
          : kind == LOOM__TP_RS ? loom_gemm_rs(plan, a, b, c, d->has_bias ? bias : NULL, stream)
                                : loom_gemm_ar(plan, a, b, c, NULL, stream);
  }
  if (r == LOOM_SUCCESS && cudaEventRecord(e1, stream) != cudaSuccess) r = loom__fail(LOOM_ERR_CUDA, "tuning: event record");
  if (r == LOOM_SUCCESS && (ce = cudaEventSynchronize(e1)) != cudaSuccess)
    r = loom__cuda_fail((int)ce, "cudaEventSynchronize (tuning)", __FILE__, __LINE__);
  if (r == LOOM_SUCCESS) r = loom__comm_check(comm, "loom_tp_tune");
  float t = 0.f;
  if (r == LOOM_SUCCESS && (ce = cudaEventElapsedTime(&t, e0, e1)) != cudaSuccess)
    r = loom__cuda_fail((int)ce, "cudaEventElapsedTime (tuning)", __FILE__, __LINE__);
  t /= (float)reps;
  /* every rank enters the reduction, failed or not (a failure is +inf) */
  if (r != LOOM_SUCCESS) t = 1e30f;
  loom_result_t rr = LOOM_SUCCESS;
  if ((ce = cudaMemcpyAsync(dev_ms, &t, sizeof t, cudaMemcpyHostToDevice, stream)) != cudaSuccess)
    rr = loom__cuda_fail((int)ce, "cudaMemcpyAsync (tuning)", __FILE__, __LINE__);
  ncclResult_t nr = rr == LOOM_SUCCESS ? ncclAllReduce(dev_ms, dev_ms, 1, ncclFloat32, ncclMax, comm->nccl, stream)
                                       : ncclSuccess;
  if (rr == LOOM_SUCCESS && nr != ncclSuccess) rr = loom__nccl_fail((int)nr, "ncclAllReduce (tuning)", __FILE__, __LINE__);
  if (rr == LOOM_SUCCESS && (ce = cudaMemcpyAsync(&t, dev_ms, sizeof t, cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
    rr = loom__cuda_fail((int)ce, "cudaMemcpyAsync (tuning)", __FILE__, __LINE__);
  if (rr == LOOM_SUCCESS && (ce = cudaStreamSynchronize(stream)) != cudaSuccess)
    rr = loom__cuda_fail((int)ce, "cudaStreamSynchronize (tuning)", __FILE__, __LINE__);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  const loom_result_t rd = loom_plan_destroy(plan);
  LOOM_TRY(r);
  LOOM_TRY(rr);
  LOOM_TRY(rd);
  *ms = t;
  return LOOM_SUCCESS;
}

loom_result_t loom__tp_tune(loom_comm_t comm, const loom_tp_desc_t *desc, int kind, cudaStream_t stream) {
  const char *fn = kind == LOOM__TP_AG ? "loom_ag_gemm_tune" : kind == LOOM__TP_RS ? "loom_gemm_rs_tune" : "loom_gemm_ar_tune";
  LOOM_TRY(loom__comm_check(comm, fn));
  loom_tp_transfer_t auto_t = LOOM_TP_SEQUENTIAL;
  int hooks_ok = 0;
  if (desc && desc->struct_size == sizeof *desc) {
    loom__gemm_path_t path = LOOM__PATH_BASE;
    const loom_gemm_desc_t g = loom__tp_gemm_desc(desc);
    if (loom__gemm_validate_desc(fn, &g) == LOOM_SUCCESS && loom__gemm_path(&g, &path) == LOOM_SUCCESS)
      hooks_ok = path != LOOM__PATH_BASE;
  }
  /* a rank that refuses here answers the first candidate plan's agreement
   * (loom__comm_refuse), so its peers do not wait in it */
  const loom_result_t rc =
      loom__tp_check_desc(fn, kind, comm->size, comm->sm_count, desc, &auto_t, comm->ws_all_reachable, hooks_ok);
  if (rc != LOOM_SUCCESS) return loom__comm_refuse(comm, fn, rc);
  if (comm->detached) return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: a test comm without a GPU cannot time", fn);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  const cudaError_t ce0 = cudaStreamIsCapturing(stream, &cs);
  if (ce0 != cudaSuccess)
    return loom__comm_refuse(comm, fn, loom__cuda_fail((int)ce0, "cudaStreamIsCapturing", __FILE__, __LINE__));
  if (cs != cudaStreamCaptureStatusNone)
    return loom__comm_refuse(comm, fn,
                             loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                                        "%s: stream %p is capturing a graph; tuning launches and synchronizes", fn,
                                        (void *)stream));
  const int W = comm->size;
  const int fused_ok = W > 1 && comm->ws_all_reachable && hooks_ok && W <= LOOM_TP_MAX_PEERS;
  const int64_t m = desc->m, n = desc->n, k = desc->k, S = loom_tp_shard_rows(m, W);
  const size_t ea = loom_dtype_size(desc->ab_type), ec = loom_dtype_size(desc->c_type);
  const size_t a_bytes = (size_t)(kind == LOOM__TP_AG ? S : m) * (size_t)k * ea;
  const size_t c_bytes = (size_t)(kind == LOOM__TP_RS ? S : m) * (size_t)n * ec;
  void *a = NULL, *b = NULL, *c = NULL, *bias = NULL;
  float *dev_ms = NULL;
  loom_result_t r = LOOM_SUCCESS;
  cudaError_t ce = cudaMalloc(&a, a_bytes);
  if (ce == cudaSuccess) ce = cudaMalloc(&b, (size_t)n * (size_t)k * ea);
  if (ce == cudaSuccess && kind != LOOM__TP_AR) ce = cudaMalloc(&c, c_bytes);
  if (ce == cudaSuccess) ce = cudaMalloc(&bias, (size_t)n * ec);
  if (ce == cudaSuccess) ce = cudaMalloc((void **)&dev_ms, sizeof(float));
  if (ce == cudaSuccess) ce = cudaMemsetAsync(a, 0x3c, a_bytes, stream);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(b, 0x3c, (size_t)n * (size_t)k * ea, stream);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(bias, 0x3c, (size_t)n * ec, stream);
  if (ce != cudaSuccess && r == LOOM_SUCCESS) r = loom__cuda_fail((int)ce, "tuning buffers", __FILE__, __LINE__);
  /* every rank tunes the same description and has its buffers (or every
   * rank learns that one has not) before the first candidate's plan */
  {
    const int64_t f[10] = {kind, desc->m, desc->n, desc->k, desc->ab_type, desc->c_type, desc->b_layout,
                           desc->has_bias, desc->activation, desc->world_size};
    r = r != LOOM_SUCCESS ? loom__comm_refuse(comm, fn, r)
                          : loom__comm_agree(comm, fn, loom__fnv64(LOOM_FNV64_INIT, f, sizeof f), 0,
                                             "every rank must tune the same loom_tp_desc_t");
  }
  /* AR: out in symmetric memory (collective: every rank got here) */
  if (kind == LOOM__TP_AR && r == LOOM_SUCCESS) r = loom__comm_malloc(comm, c_bytes, &c);

  /* candidates: (transfer, chunk_rows, comm_blocks, sequential GEMM) */
  loom_tp_choice_t cand[16];
  int nc = 0;
  memset(cand, 0, sizeof cand);
  if (loom__tp_cublaslt_takes(desc->ab_type, desc->c_type))
    cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SEQUENTIAL, .gemm = LOOM_TP_GEMM_CUBLASLT};
  cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SEQUENTIAL, .gemm = LOOM_TP_GEMM_LOOM};
  if (fused_ok) {
    if (kind == LOOM__TP_AG) {
      const int64_t per[4] = {1, 4, 8, 16};
      for (int i = 0; i < 4; ++i) {
        int64_t cr = loom_ceil_div(S, per[i]);
        if (cr < 1) cr = 1;
        int dup = 0;
        for (int j = 0; j < nc; ++j) dup |= cand[j].transfer == LOOM_TP_COPY_ENGINE && cand[j].chunk_rows == (int)cr;
        if (!dup) cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_COPY_ENGINE, .chunk_rows = (int)cr};
      }
    }
    const int blocks[4] = {0, 4, 8, 16};
    for (int i = kind == LOOM__TP_AG ? 1 : 0; i < 4; ++i)
      if (blocks[i] < comm->sm_count)
        cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SM_COPY, .comm_blocks = blocks[i]};
    if (kind == LOOM__TP_RS) cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SM_ATOMIC};
  }
  int best = -1;
  float best_ms = 0.f;
  for (int i = 0; i < nc && r == LOOM_SUCCESS; ++i) {
    loom_tp_desc_t d = *desc;
    d.transfer = cand[i].transfer, d.chunk_rows = cand[i].chunk_rows, d.comm_blocks = cand[i].comm_blocks;
    d.sequential_gemm = cand[i].gemm;
    float ms = 0.f;
    r = time_candidate(comm, &d, kind, a, b, c, bias, stream, dev_ms, &ms);
    if (r == LOOM_SUCCESS) {
      LOOM_INFO("%s: transfer %d chunk %d blocks %d gemm %d: %.4f ms", fn, (int)cand[i].transfer, cand[i].chunk_rows,
                cand[i].comm_blocks, (int)cand[i].gemm, ms);
      if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
  }
  cudaFree(a), cudaFree(b), cudaFree(bias), cudaFree(dev_ms);
  if (kind == LOOM__TP_AR) {
    if (c) {
      const loom_result_t rf = loom__comm_free(comm, c);
      if (r == LOOM_SUCCESS) r = rf;
    }
  } else {
    cudaFree(c);
  }
  LOOM_TRY(r);
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__tp_tune_key(kind, desc, comm->sm_count, key, sizeof key))
    return loom__fail(LOOM_ERR_INTERNAL, "%s: tuning key too long", fn);
  const loom_tp_choice_t won = cand[best];
  loom__tp_tune_format(&won, value, sizeof value);
  LOOM_TRY(loom__tune_put(key, value));
  LOOM_INFO("%s: %s = %s (%.4f ms)", fn, key, value, best_ms);
  const char *file = loom__param_TUNE_FILE();
  if (file && *file && comm->rank == 0) LOOM_TRY(loom__tune_save(file));
  return LOOM_SUCCESS;
}

loom_result_t loom_ag_gemm_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream) {
  return loom__tp_tune(comm, desc, LOOM__TP_AG, stream);
}

loom_result_t loom_gemm_rs_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream) {
  return loom__tp_tune(comm, desc, LOOM__TP_RS, stream);
}

loom_result_t loom_gemm_ar_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream) {
  return loom__tp_tune(comm, desc, LOOM__TP_AR, stream);
}
