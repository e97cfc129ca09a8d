/*
 * gemm_rs.c - loom_gemm_rs: c_shard = this rank's rows of the sum over
 * ranks of A [m, k] x B (+ bias), the row-parallel linear layer of sequence
 * parallelism.
 *
 * Fused (tp_linear.h): every rank's GEMM computes all m rows of its partial
 * product into its own partial buffer (symmetric memory, the plain kernel's
 * TMA-store epilogue), tile rows starting at the shard of rank + 1 (peers'
 * rows first, each rank on a different owner at first), and signals each
 * tile to the owner(s) of its rows once its stores are complete. On the
 * side stream the owner's reduction kernel (comm_blocks blocks) waits for
 * each of its tiles' W signals, reads the W partials through NVLink, sums
 * them in fp32 in rank order, adds the bias and rounds once into c_shard;
 * after the GEMM the same kernel runs again on every SM and takes the tiles
 * the side launch has not reached (tiles are claimed from a counter), so
 * that the tail after the GEMM's last wave is short; the last block tells
 * the sources their buffers may be overwritten (the next call's begin
 * kernel waits for that).
 * Sequential: the GEMM (cuBLASLt or loom_gemm) into a partial buffer (bias on rank 0 only), then
 * NCCL reduce-scatter (a reduce per shard when the shards are uneven).
 * Decomposed (a ring): the same GEMM cut into the W shards' row chunks; at
 * step s rank r computes its partial of owner r - 1 - s's chunk, adds the
 * sum of that chunk rank r - 1 sent at step s - 1 (c_type, fp32 add, one
 * rounding), and sends the sum on to rank r + 1 from the side stream while
 * the next step's GEMM runs; the last step's chunk is the rank's own, whose
 * sum goes into c_shard with no transfer after it.
 * The fused call is the reduce-scatter engine (rs_engine.c, shared with
 * loom_gemm_ar); here the bias is the reduction's epilogue's only step (the
 * same fp32 addition before the one rounding) and c_shard its only output.
 */
#include <stddef.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/pointwise.h"
#include "core/ptr_check.h"
#include "core/trace.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

static loom_result_t rs_sequential(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b,
                                   void *c_shard, const void *bias, cudaStream_t stream) {
  loom_comm_t comm = plan->comm;
  loom_gemm_desc_t g = st->gemm;
  const size_t row = (size_t)g.n * loom_dtype_size(g.c_type);
  const ncclDataType_t nt = loom__tp_nccl_type(g.c_type);
  const int W = st->world;
  /* the bias once in the sum: on rank 0's partial */
  const int with_bias = g.has_bias && st->rank == 0;
  g.has_bias = with_bias;
  LOOM_TRY(loom__tp_seq_gemm(st, &g, a, b, st->partial, with_bias ? bias : NULL, stream));
  loom__trace_mark(plan, "gemm", stream);
  if ((int64_t)W * st->shard_rows == g.m) {
    LOOM_NCCL(ncclReduceScatter(st->partial, c_shard, (size_t)st->shard_rows * (size_t)g.n, nt, ncclSum, comm->nccl,
                                stream));
    return LOOM_SUCCESS;
  }
  LOOM_NCCL(ncclGroupStart());
  ncclResult_t n = ncclSuccess;
  for (int p = 0; p < W && n == ncclSuccess; ++p) {
    const int64_t len = loom__tp_shard_len(g.m, W, p), b0 = loom__tp_shard_begin(g.m, W, p);
    if (len > 0)
      n = ncclReduce((const char *)st->partial + (size_t)b0 * row, p == st->rank ? c_shard : NULL,
                     (size_t)len * (size_t)g.n, nt, ncclSum, p, comm->nccl, stream);
  }
  const ncclResult_t n2 = ncclGroupEnd();
  if (n != ncclSuccess) return loom__nccl_fail((int)n, "ncclReduce (loom_gemm_rs, uneven shards)", __FILE__, __LINE__);
  if (n2 != ncclSuccess) return loom__nccl_fail((int)n2, "ncclGroupEnd (loom_gemm_rs)", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

/* Chunk p's rows of buffer base ([W S, n] of c_type). */
static char *rs_rows(const loom_tp_state_t *st, void *base, int p) {
  const size_t crow = (size_t)st->gemm.n * loom_dtype_size(st->gemm.c_type);
  return (char *)base + (size_t)loom__tp_shard_begin(st->gemm.m, st->world, p) * crow;
}

/* Side stream, after step s's sum: that sum to rank + 1, the next step's
 * chunk (rank - 1's sum so far) from rank - 1; then the step's event. */
static loom_result_t rs_ring_exchange(loom_plan_t plan, loom_tp_state_t *st, int s) {
  const loom_gemm_desc_t *g = &st->gemm;
  const int W = st->world, p = loom__dec_rs_chunk(st->rank, W, s), q = loom__dec_rs_chunk(st->rank, W, s + 1);
  const int64_t lp = loom__tp_shard_len(g->m, W, p), lq = loom__tp_shard_len(g->m, W, q);
  LOOM_CUDA(cudaStreamWaitEvent(st->side, st->steps[s], 0));
  LOOM_TRY(loom__tp_sendrecv(plan->comm, st->side, rs_rows(st, st->partial, p), (size_t)lp * (size_t)g->n,
                             (st->rank + 1) % W, rs_rows(st, st->recv, q), (size_t)lq * (size_t)g->n,
                             (st->rank - 1 + W) % W, g->c_type, "loom_gemm_rs"));
  LOOM_CUDA(cudaEventRecord(st->steps[W + s], st->side));
  return LOOM_SUCCESS;
}

/* Step s on the user's stream: this rank's partial of its chunk (bias on
 * rank 0 only), plus the sum received at step s - 1; the last step's sum
 * into c_shard. */
static loom_result_t rs_ring_step(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b,
                                  void *c_shard, const void *bias, int s, cudaStream_t stream) {
  loom_gemm_desc_t g = st->gemm;
  const int W = st->world, p = loom__dec_rs_chunk(st->rank, W, s), last = s == W - 1;
  const int64_t len = loom__tp_shard_len(g.m, W, p);
  const size_t arow = (size_t)g.k * loom_dtype_size(g.ab_type), n = (size_t)len * (size_t)g.n;
  g.m = len;
  g.has_bias = g.has_bias && st->rank == 0;
  void *mine = last && s == 0 ? c_shard : rs_rows(st, st->partial, p); /* W = 1: straight into c_shard */
  if (len > 0)
    LOOM_TRY(loom__tp_seq_gemm(st, &g, (const char *)a + (size_t)loom__tp_shard_begin(st->gemm.m, W, p) * arow, b,
                               mine, g.has_bias ? bias : NULL, stream));
  if (s > 0) {
    LOOM_CUDA(cudaStreamWaitEvent(stream, st->steps[W + s - 1], 0));
    LOOM_TRY(loom__tp_add(last ? c_shard : mine, mine, rs_rows(st, st->recv, p), n, g.c_type, stream));
  }
  if (last) return LOOM_SUCCESS;
  LOOM_CUDA(cudaEventRecord(st->steps[s], stream));
  return rs_ring_exchange(plan, st, s);
}

static loom_result_t rs_decomposed(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b,
                                   void *c_shard, const void *bias, cudaStream_t stream) {
  LOOM_TRY(loom__tp_fork(st, stream));
  loom_result_t r = LOOM_SUCCESS;
  for (int s = 0; s < st->world && r == LOOM_SUCCESS; ++s) r = rs_ring_step(plan, st, a, b, c_shard, bias, s, stream);
  st->tune_base_gemm = 0; /* every chunk shape's cuBLASLt algorithm timed (the tuner's warm-up call) */
  loom__trace_mark(plan, "gemm", stream);
  /* join even when a step failed to launch: the side stream's work is queued */
  const loom_result_t rj = loom__tp_join(st, stream);
  LOOM_TRY(r);
  return rj;
}

static loom_result_t rs_fused(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b, void *c_shard,
                              const void *bias, cudaStream_t stream) {
  loom_rs_reduce_args_t ra;
  memset(&ra, 0, sizeof ra);
  /* the bias through the epilogue: the same fp32 addition before the one rounding */
  loom_epilogue_t epi = LOOM_EPILOGUE_INIT;
  epi.bias = st->gemm.has_bias ? bias : NULL;
  LOOM_TRY(loom__pointwise_make("loom_gemm_rs", &epi, st->gemm.c_type, st->gemm.n, &ra.pw));
  ra.dst[0] = (char *)c_shard;
  ra.nout = 1;
  ra.dst_row_base = st->my_begin;
  ra.gath_off = (size_t)-1;
  return loom__rs_fused(plan, st, a, b, &ra, stream);
}

loom_result_t loom_gemm_rs(loom_plan_t plan, const void *a, const void *b, void *c_shard, const void *bias,
                           cudaStream_t stream) {
  const char *fn = "loom_gemm_rs";
  loom_tp_state_t *st;
  const loom_tp_call_t call = {a, b, c_shard, NULL, bias, NULL};
  LOOM_TRY(loom__tp_enter(plan, fn, LOOM__TP_RS, &call, NULL, stream, &st));
  (void)loom__plan_next_epoch(plan);
  if (st->transfer == LOOM_TP_SEQUENTIAL)
    LOOM_TRY(rs_sequential(plan, st, a, b, c_shard, bias, stream));
  else if (st->transfer == LOOM_TP_DECOMPOSED)
    LOOM_TRY(rs_decomposed(plan, st, a, b, c_shard, bias, stream));
  else
    LOOM_TRY(rs_fused(plan, st, a, b, c_shard, bias, stream));
  return loom__call_exit(plan, stream, NULL);
}
