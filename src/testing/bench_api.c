/*
 * bench_api.c - see bench_api.h. Each function forwards to the library's
 * internal entry of the same purpose; nothing here changes what the library
 * does. The pointwise kernel is bench_pointwise.cu.
 */
#include "testing/bench_api.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "baseline/baseline.h"
#include "codegen/rtc.h"
#include "core/error.h"
#include "core/pointwise.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "ops/embedding/embedding_a2a.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_schedule.h"
#include "ops/optim/optim.h"
#include "ops/tp/tp_linear.h"

_Static_assert(sizeof(loom_gemm_config_t) <= sizeof(loom_bench_gemm_config_t),
               "loom_bench_gemm_config_t must hold a loom_gemm_config_t");
_Static_assert(sizeof(loom_pointwise_t) <= sizeof(loom_bench_pointwise_t),
               "loom_bench_pointwise_t must hold a loom_pointwise_t");

/* bench_pointwise.cu */
int loom__bench_pointwise_launch(const void *x, void *y, int64_t count, const loom_pointwise_t *pw,
                                 cudaStream_t stream);

static const loom_gemm_config_t *gemm_cfg(const loom_bench_gemm_config_t *c) {
  return c ? (const loom_gemm_config_t *)(const void *)c->opaque : NULL;
}

/* ---- errors -------------------------------------------------------------- */

loom_result_t loom_bench_fail(loom_result_t code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom__fail(code, "%s", msg);
}

loom_result_t loom_bench_cuda_fail(int err, const char *what, const char *file, int line) {
  return loom__cuda_fail(err, what, file, line);
}

loom_result_t loom_bench_nccl_fail(int err, const char *what, const char *file, int line) {
  return loom__nccl_fail(err, what, file, line);
}

/* ---- baselines ----------------------------------------------------------- */

loom_result_t loom_bench_base_gemm(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                   cudaStream_t stream) {
  return loom__base_gemm(d, a, b, c, bias, stream);
}

loom_result_t loom_bench_base_gemm_tune(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                        const void *bias, int candidates, cudaStream_t stream, float *best_ms) {
  return loom__base_gemm_tune(d, a, b, c, bias, candidates, stream, best_ms);
}

void loom_bench_base_gemm_release(void) { loom__base_gemm_release(); }

loom_result_t loom_bench_base_allgather(ncclComm_t nccl, const void *send, void *recv, size_t count_per_rank,
                                        loom_dtype_t dtype, cudaStream_t stream) {
  return loom__base_allgather(nccl, send, recv, count_per_rank, dtype, stream);
}

loom_result_t loom_bench_base_reducescatter(ncclComm_t nccl, const void *send, void *recv, size_t count_per_rank,
                                            loom_dtype_t dtype, cudaStream_t stream) {
  return loom__base_reducescatter(nccl, send, recv, count_per_rank, dtype, stream);
}

loom_result_t loom_bench_base_allreduce(ncclComm_t nccl, const void *send, void *recv, size_t count,
                                        loom_dtype_t dtype, cudaStream_t stream) {
  return loom__base_allreduce(nccl, send, recv, count, dtype, stream);
}

loom_result_t loom_bench_base_alltoall(ncclComm_t nccl, const void *send, void *recv, size_t count_per_peer,
                                       loom_dtype_t dtype, cudaStream_t stream) {
  return loom__base_alltoall(nccl, send, recv, count_per_peer, dtype, stream);
}

/* ---- GEMM engine --------------------------------------------------------- */

int loom_bench_gemm_weights(int half, loom_gemm_weight_t *out, int max) { return loom__gemm_weights(half, out, max); }

int loom_bench_gemm_family_layers(int f, int tp, loom_gemm_weight_t *out, int max) {
  return loom__gemm_family_layers(f, tp, out, max);
}

loom_gemm_desc_t loom_bench_gemm_shape_variant(int64_t m, int64_t n, int64_t k) {
  return loom__gemm_shape_variant(m, n, k);
}

void loom_bench_gemm_config_text(const loom_gemm_desc_t *d, char *out, size_t size) {
  loom__gemm_path_t path = LOOM__PATH_BASE;
  if (loom__gemm_path(d, &path) != LOOM_SUCCESS || path == LOOM__PATH_BASE) {
    snprintf(out, size, "cuBLASLt path");
    return;
  }
  loom__gemm_device_t dev;
  if (loom__gemm_device(&dev) != LOOM_SUCCESS) {
    snprintf(out, size, "configuration unknown: %s", loom_last_error());
    return;
  }
  const int sm90 = path == LOOM__PATH_SM90;
  int tuned = 0;
  loom_gemm_config_t c;
  if (loom__gemm_tuned_config(d, sm90 ? "sm90" : "sm80", dev.sms, &c, &tuned) != LOOM_SUCCESS || !tuned)
    c = loom__gemm_choose(d, &dev, sm90);
  char v[80];
  loom__gemm_config_format(&c, v, sizeof v);
  snprintf(out, size, "%s%s %s", sm90 ? "" : "sm80 ", tuned ? "tuned" : "model", v);
}

loom_result_t loom_bench_gemm_sm80(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                   const loom_bench_gemm_config_t *cfg, cudaStream_t stream) {
  return loom__gemm_sm80(d, a, b, c, bias, gemm_cfg(cfg), NULL, stream);
}

loom_result_t loom_bench_gemm_sm90(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                   const loom_bench_gemm_config_t *cfg, cudaStream_t stream) {
  return loom__gemm_sm90(d, a, b, c, bias, gemm_cfg(cfg), NULL, stream);
}

loom_result_t loom_bench_gemm_hooks_idle(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                         const void *bias, const loom_bench_gemm_config_t *cfg, cudaStream_t stream) {
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  return loom__gemm_hooked(d, a, b, c, bias, gemm_cfg(cfg), &h, stream);
}

loom_bench_gemm_config_t loom_bench_gemm_config_tile(int bm, int bn) {
  loom_bench_gemm_config_t out;
  memset(&out, 0, sizeof out);
  loom_gemm_config_t c;
  memset(&c, 0, sizeof c);
  c.bm = bm, c.bn = bn;
  memcpy(out.opaque, &c, sizeof c);
  return out;
}

loom_result_t loom_bench_tp_gemm_config(loom_plan_t plan, loom_bench_gemm_config_t *cfg, int *cluster) {
  const char *fn = "loom_bench_tp_gemm_config";
  loom_tp_state_t *st;
  LOOM_TRY(loom__tp_state(plan, fn, -1, &st));
  if (!cfg) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: cfg=NULL", fn);
  if (!loom__tp_fused(st->transfer) || st->gemm_cfg.bn <= 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: plan=%p has no fused GEMM (it runs %s)", fn, (void *)plan,
                      loom__tp_transfer_name(st->transfer));
  memset(cfg, 0, sizeof *cfg);
  memcpy(cfg->opaque, &st->gemm_cfg, sizeof st->gemm_cfg);
  if (cluster) *cluster = st->gemm_cfg.cluster;
  return LOOM_SUCCESS;
}

/* ---- optimizers ---------------------------------------------------------- */

loom_result_t loom_bench_optim_update_plan(loom_comm_t comm, const loom_optim_desc_t *desc, int lamb,
                                           loom_plan_t *out) {
  return loom__optim_update_plan(comm, desc, lamb, out);
}

/* ---- loom programs ------------------------------------------------------- */

void loom_bench_rtc_cache_clear(void) { loom__rtc_cache_clear(); }

/* ---- embedding ----------------------------------------------------------- */

loom_result_t loom_bench_plan_embedding_a2a(loom_comm_t comm, const loom_embedding_desc_t *desc, int local_first,
                                            loom_embedding_path_t path, loom_plan_t *out) {
  const loom__emb_plan_opts_t opts = {local_first, path};
  return loom__plan_embedding_a2a_opts(comm, desc, &opts, out);
}

loom_result_t loom_bench_emb_part(loom_plan_t plan, int *part) { return loom__emb_get_part(plan, part); }

loom_result_t loom_bench_emb_kernel_regs(loom_dtype_t table_type, loom_dtype_t out_type, int dim, int *regs,
                                         int *spill_bytes) {
  return loom__emb_kernel_regs(table_type, out_type, dim, 0, regs, spill_bytes);
}

loom_result_t loom_bench_emb_backward_sorted(loom_plan_t plan) {
  return loom__emb_set_backward(plan, LOOM_EMB_BWD_SORTED);
}

size_t loom_bench_emb_sorted_scratch_bytes(int64_t n, int dim) { return loom__emb_sorted_scratch_bytes(n, dim); }

/* ---- pointwise ----------------------------------------------------------- */

loom_result_t loom_bench_pointwise_make(const loom_epilogue_t *epi, loom_dtype_t out_type, int64_t cols,
                                        loom_bench_pointwise_t *pw) {
  if (!pw) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_bench_pointwise_make: pw=NULL");
  loom_pointwise_t p;
  LOOM_TRY(loom__pointwise_make("loom_bench_pointwise_make", epi, out_type, cols, &p));
  memset(pw, 0, sizeof *pw);
  memcpy(pw->opaque, &p, sizeof p);
  return LOOM_SUCCESS;
}

loom_result_t loom_bench_pointwise_run(const loom_bench_pointwise_t *pw, const void *x, void *y, int64_t count,
                                       cudaStream_t stream) {
  const int e =
      loom__bench_pointwise_launch(x, y, count, (const loom_pointwise_t *)(const void *)pw->opaque, stream);
  if (e) return loom__cuda_fail(e, "loom_bench_pointwise_run", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

int loom_bench_moe_expert_rank(int experts, int world, int e) { return loom__moe_expert_rank(experts, world, e); }

loom_result_t loom_bench_moe_mlp_form(loom_plan_t plan, const void *x, const int32_t *ids, const float *weights,
                                      int64_t tokens, const void *gate_up, const void *down, void *out, int path,
                                      cudaStream_t stream) {
  const loom_moe_mlp_choice_t c = {(loom_moe_mlp_path_t)path, 0, 0, 0, 0};
  return loom__moe_mlp_run(plan, "loom_bench_moe_mlp_form", x, ids, weights, tokens, gate_up, down, out, &c, stream);
}

loom_result_t loom_bench_moe_mlp_choice(loom_plan_t plan, int64_t tokens, char *out, size_t size) {
  loom_moe_mlp_choice_t c;
  LOOM_TRY(loom__moe_mlp_choice(plan, tokens, &c));
  loom__moe_mlp_tune_format(&c, out, size);
  return LOOM_SUCCESS;
}

loom_result_t loom_bench_gemm_grouped_tile(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, void *c,
                                           const int64_t *offsets, int bm, int bn, int glu, int *bm_out,
                                           int *bn_out, cudaStream_t stream) {
  LOOM_TRY(loom__grouped_validate("loom_bench_gemm_grouped_tile", d, a, b, c, NULL, offsets));
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  loom_gemm_config_t cfg = loom__grouped_sm90_config(d, dev.sms);
  if (bm || bn) cfg.bm = bm, cfg.bn = bn;
  if (glu) cfg.bn = 256;
  if (bm_out) *bm_out = cfg.bm;
  if (bn_out) *bn_out = cfg.bn;
  return loom__gemm_grouped_sm90(d, a, b, c, NULL, offsets, &cfg, glu, stream);
}
