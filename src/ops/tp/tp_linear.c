/*
 * tp_linear.c - what the tensor-parallel ops' calls (ag_gemm.c, gemm_rs.c,
 * gemm_ar.c) share: the entry and exit, the sequential path's GEMM, the
 * fork/join around the side stream, the hooks every fused GEMM starts from,
 * the peers' addresses of a symmetric buffer, names. Plans are made in
 * tp_plan.c; the protocol is in tp_linear.h.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baseline/baseline.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/op.h"
#include "core/param.h"
#include "core/plan.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_protocol.h"
#include "ops/tp/tp_schedule.h"

/* The kernels' wait sites, named from the protocol's table of signals. */
__attribute__((constructor)) static void loom__tp_wait_sites(void) {
  loom__proto_register_sites(loom__tp_signals, LOOM__TP_NSIG);
}

const char *loom__tp_kind_op(int k) { return k == LOOM__TP_AG ? "ag_gemm" : k == LOOM__TP_RS ? "gemm_rs" : "gemm_ar"; }

const char *loom__tp_gemm_name(loom_tp_gemm_t g) {
  return g == LOOM_TP_GEMM_LOOM ? "loom" : g == LOOM_TP_GEMM_CUBLASLT ? "cuBLASLt" : "auto";
}

int loom__tp_cublaslt_takes(loom_dtype_t ab, loom_dtype_t c) { return c == ab || c == LOOM_FP32; }

LOOM_PARAM_INT(TP_CE_SHARD_GEMMS, "1",
               "AllGather+GEMM by the copy engine: 1 computes the rows shard by shard with the sequential "
               "path's GEMM engine (cuBLASLt where it takes the dtypes): the own shard's at once, each peer's "
               "once it has landed (a one-warp wait before it); 0: one hooked GEMM whose tiles wait for their "
               "rows (measured at W = 2: the shard GEMMs 1.07-1.17x faster, geomean per set)")

int loom__tp_ce_shard_gemms(loom_tp_transfer_t t) {
  return t == LOOM_TP_COPY_ENGINE && loom__param_TP_CE_SHARD_GEMMS() != 0;
}

loom_tp_gemm_t loom__tp_resolve_gemm(const loom_tp_desc_t *d, loom_tp_transfer_t t) {
  if (loom__tp_fused(t) && !loom__tp_ce_shard_gemms(t)) return LOOM_TP_GEMM_LOOM;
  if (d->sequential_gemm != LOOM_TP_GEMM_AUTO) return d->sequential_gemm;
  return loom__tp_cublaslt_takes(d->ab_type, d->c_type) ? LOOM_TP_GEMM_CUBLASLT : LOOM_TP_GEMM_LOOM;
}

loom_result_t loom__tp_seq_gemm(loom_tp_state_t *st, const loom_gemm_desc_t *g, const void *a, const void *b,
                                void *c, const void *bias, cudaStream_t stream) {
  if (st->gemm_engine == LOOM_TP_GEMM_CUBLASLT && st->tune_base_gemm) {
    /* the winner is recorded for this shape and these alignments; C is computed */
    if (st->transfer != LOOM_TP_DECOMPOSED) st->tune_base_gemm = 0;
    return loom__base_gemm_tune(g, a, b, c, bias, LOOM_TP_TUNE_CUBLASLT_CANDIDATES, stream, NULL);
  }
  if (st->gemm_engine == LOOM_TP_GEMM_CUBLASLT) return loom__base_gemm(g, a, b, c, bias, stream);
  return loom_gemm(g, a, b, c, bias, stream);
}

const char *loom__tp_transfer_name(loom_tp_transfer_t t) {
  switch (t) {
    case LOOM_TP_AUTO: return "LOOM_TP_AUTO";
    case LOOM_TP_SEQUENTIAL: return "LOOM_TP_SEQUENTIAL";
    case LOOM_TP_COPY_ENGINE: return "LOOM_TP_COPY_ENGINE";
    case LOOM_TP_SM_COPY: return "LOOM_TP_SM_COPY";
    case LOOM_TP_SM_ATOMIC: return "LOOM_TP_SM_ATOMIC";
    case LOOM_TP_BULK_REDUCE: return "LOOM_TP_BULK_REDUCE";
    case LOOM_TP_DECOMPOSED: return "LOOM_TP_DECOMPOSED";
  }
  return "unknown";
}

loom_gemm_desc_t loom__tp_gemm_desc(const loom_tp_desc_t *d) {
  loom_gemm_desc_t g = LOOM_GEMM_DESC(d->m, d->n, d->k, d->ab_type, d->c_type, d->b_layout, d->has_bias);
  return g;
}

loom_result_t loom__tp_state(loom_plan_t plan, const char *fn, int kind, loom_tp_state_t **st) {
  return loom__plan_state(plan, fn, &loom__tp_family, kind >= 0 ? &loom__tp_ops[kind] : NULL, (void **)st);
}

loom_result_t loom__tp_enter(loom_plan_t plan, const char *fn, int kind, const loom_tp_call_t *call,
                             loom_pointwise_t *pw, cudaStream_t stream, loom_tp_state_t **st) {
  LOOM_TRY(loom__call_enter(plan, fn, NULL, &loom__tp_ops[kind], stream, (void **)st));
  return loom__tp_check_call(fn, kind, plan->comm, &(*st)->desc, call, pw);
}

/* The hooks every fused call's GEMM starts from: tiles in rank-shifted
 * order starting at shift_rank's rows, the plan's epoch word, the comm. */
void loom__tp_hooks_base(loom_plan_t plan, const loom_tp_state_t *st, int shift_rank, loom_dev_comm_t dc,
                         loom_gemm_hooks_t *h) {
  memset(h, 0, sizeof *h);
  h->order.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
  h->order.row_shift = loom__tp_row_shift(st->gemm.m, st->world, shift_rank, st->gemm_bm);
  h->epoch_word = (const uint32_t *)((const char *)plan->comm->ws_ptr + plan->epoch_offset);
  h->comm = dc;
}

loom_result_t loom__tp_peer_addresses(const char *fn, const char *what, loom_comm_t comm, const void *p, size_t bytes,
                                      char **peer) {
  return loom__peer_addresses(fn, what, comm, p, bytes,
                              "peers store into it, so it must be symmetric memory (or pass NULL to use the plan's "
                              "own buffer)",
                              peer);
}
loom_result_t loom__tp_fork(loom_tp_state_t *st, cudaStream_t stream) {
  LOOM_CUDA(cudaEventRecord(st->fork, stream));
  LOOM_CUDA(cudaStreamWaitEvent(st->side, st->fork, 0));
  return LOOM_SUCCESS;
}

loom_result_t loom__tp_join(loom_tp_state_t *st, cudaStream_t stream) {
  LOOM_CUDA(cudaEventRecord(st->join, st->side));
  LOOM_CUDA(cudaStreamWaitEvent(stream, st->join, 0));
  return LOOM_SUCCESS;
}


loom_result_t loom__tp_sendrecv(loom_comm_t comm, cudaStream_t side, const void *send, size_t send_count, int to,
                                void *recv, size_t recv_count, int from, loom_dtype_t t, const char *fn) {
  const ncclDataType_t nt = loom__tp_nccl_type(t);
  char what[96];
  LOOM_NCCL(ncclGroupStart());
  ncclResult_t n = ncclSuccess;
  if (send_count > 0) n = ncclSend(send, send_count, nt, to, comm->nccl, side);
  if (n == ncclSuccess && recv_count > 0) n = ncclRecv(recv, recv_count, nt, from, comm->nccl, side);
  const ncclResult_t n2 = ncclGroupEnd();
  snprintf(what, sizeof what, "%s (%s, decomposed)", n != ncclSuccess ? "ncclSend / ncclRecv" : "ncclGroupEnd", fn);
  if (n != ncclSuccess) return loom__nccl_fail((int)n, what, __FILE__, __LINE__);
  if (n2 != ncclSuccess) return loom__nccl_fail((int)n2, what, __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

ncclDataType_t loom__tp_nccl_type(loom_dtype_t t) {
  return t == LOOM_FP32 ? ncclFloat32 : t == LOOM_BF16 ? ncclBfloat16 : ncclFloat16;
}
