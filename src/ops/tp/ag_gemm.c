/*
 * ag_gemm.c - loom_ag_gemm: C [m, n] = AllGather(A shards) [m, k] x B
 * (+ bias), the column-parallel linear layer of sequence parallelism.
 *
 * Fused (tp_linear.h): the begin kernel tells the peers that this rank's
 * gathered buffer is writable; on the side stream this rank's shard is
 * pushed into every peer's buffer (in loom__ag_push_dest's order), chunk by
 * chunk, each chunk followed by its signal: by the copy engine
 * (cudaMemcpyAsync into the peer's window, then a 4-byte copy of the go
 * word the ready wait left into the peer's signal; a shard is one chunk
 * unless LOOM_TP_CE_CHUNKS or desc->chunk_rows say otherwise) or by a copy
 * kernel on comm_blocks SMs. Meanwhile on the user's stream, by the copy
 * engine (LOOM_TP_CE_SHARD_GEMMS, the default): the own shard's rows by the
 * sequential path's GEMM engine straight from a_shard, then each peer's
 * shard in arrival order (ring order after this rank) after a one-warp
 * wait for its chunk signals; the own rows go into the caller's a_full on
 * the side stream. Otherwise (SM copy, or the setting off) the own shard
 * goes into place (unless it is there already) and one hooked GEMM runs
 * with its tiles in arrival order, each tile waiting only for the chunks of
 * its rows.
 * Sequential: NCCL all-gather (a broadcast per shard when the shards are
 * uneven) into the gathered buffer, then the GEMM (cuBLASLt or loom_gemm,
 * the plan's gemm engine).
 * Decomposed: the GEMM of the own shard's rows on the user's stream while,
 * on the side stream, step i = 1 .. W-1 sends the own shard to rank - i and
 * receives rank + i's into the gathered buffer (ncclSend / ncclRecv in one
 * group: at step i every rank sends to the rank that receives from it);
 * each received shard's GEMM follows its step's event. The own shard goes
 * into the caller's a_full last on the side stream (a_full holds all of A
 * after the call, as on every transfer; the plan's own buffer skips it).
 */
#include <stddef.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/op.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/ptr_check.h"
#include "core/trace.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

static loom_result_t ag_sequential(loom_plan_t plan, loom_tp_state_t *st, const char *a_shard, char *dst,
                                   const void *b, void *c, const void *bias, cudaStream_t stream) {
  loom_comm_t comm = plan->comm;
  const loom_gemm_desc_t *g = &st->gemm;
  const size_t row = (size_t)g->k * loom_dtype_size(g->ab_type);
  const ncclDataType_t nt = loom__tp_nccl_type(g->ab_type);
  const int W = st->world;
  if ((int64_t)W * st->shard_rows == g->m) {
    LOOM_NCCL(ncclAllGather(a_shard, dst, (size_t)st->shard_rows * (size_t)g->k, nt, comm->nccl, stream));
  } else {
    LOOM_NCCL(ncclGroupStart());
    ncclResult_t n = ncclSuccess;
    for (int p = 0; p < W && n == ncclSuccess; ++p) {
      const int64_t len = loom__tp_shard_len(g->m, W, p), b0 = loom__tp_shard_begin(g->m, W, p);
      if (len > 0)
        n = ncclBroadcast(p == st->rank ? (const void *)a_shard : NULL, dst + (size_t)b0 * row,
                          (size_t)len * (size_t)g->k, nt, p, comm->nccl, stream);
    }
    const ncclResult_t n2 = ncclGroupEnd();
    if (n != ncclSuccess) return loom__nccl_fail((int)n, "ncclBroadcast (loom_ag_gemm, uneven shards)", __FILE__, __LINE__);
    if (n2 != ncclSuccess) return loom__nccl_fail((int)n2, "ncclGroupEnd (loom_ag_gemm)", __FILE__, __LINE__);
  }
  loom__trace_mark(plan, "nccl", stream);
  LOOM_TRY(loom__tp_seq_gemm(st, g, dst, b, c, bias, stream));
  loom__trace_mark(plan, "gemm", stream);
  if (st->desc.activation != LOOM_ACT_NONE)
    LOOM_TRY(loom__tp_activation(c, (size_t)g->m * (size_t)g->n, g->c_type, (int)st->desc.activation, stream));
  return LOOM_SUCCESS;
}

/* The GEMM of shard p's rows of the gathered A (rows [b0, b0 + len)) into
 * the same rows of C (the sequential path's engine: decomposed, and the
 * copy engine's shard GEMMs). */
static loom_result_t ag_shard_gemm(loom_tp_state_t *st, const char *a_rows, const void *b, char *c, const void *bias,
                                   int p, cudaStream_t stream) {
  loom_gemm_desc_t d = st->gemm;
  d.m = loom__tp_shard_len(st->gemm.m, st->world, p);
  if (d.m == 0) return LOOM_SUCCESS;
  const size_t crow = (size_t)d.n * loom_dtype_size(d.c_type);
  return loom__tp_seq_gemm(st, &d, a_rows, b, c + (size_t)loom__tp_shard_begin(st->gemm.m, st->world, p) * crow,
                           bias, stream);
}

/* Step i of the decomposed exchange on the side stream: the own shard to
 * rank - i, rank + i's shard into dst; then the step's event. */
static loom_result_t ag_exchange_step(loom_plan_t plan, loom_tp_state_t *st, const char *a_shard, char *dst, int i) {
  const loom_gemm_desc_t *g = &st->gemm;
  const int W = st->world, to = loom__dec_ag_to(st->rank, W, i), from = loom__dec_ag_from(st->rank, W, i);
  const int64_t from_len = loom__tp_shard_len(g->m, W, from);
  const size_t row = (size_t)g->k * loom_dtype_size(g->ab_type);
  LOOM_TRY(loom__tp_sendrecv(plan->comm, st->side, a_shard, (size_t)st->my_len * (size_t)g->k, to,
                             dst + (size_t)loom__tp_shard_begin(g->m, W, from) * row, (size_t)from_len * (size_t)g->k,
                             from, g->ab_type, "loom_ag_gemm"));
  LOOM_CUDA(cudaEventRecord(st->steps[i], st->side));
  return LOOM_SUCCESS;
}

static loom_result_t ag_decomposed_steps(loom_plan_t plan, loom_tp_state_t *st, const char *a_shard, char *dst,
                                         const void *b, char *c, const void *bias, cudaStream_t stream) {
  const loom_gemm_desc_t *g = &st->gemm;
  const size_t row = (size_t)g->k * loom_dtype_size(g->ab_type);
  const int W = st->world;
  LOOM_TRY(ag_shard_gemm(st, a_shard, b, c, bias, st->rank, stream));
  loom__trace_mark(plan, "gemm.own", stream);
  for (int i = 1; i < W; ++i) {
    const int from = loom__dec_ag_from(st->rank, W, i);
    LOOM_TRY(ag_exchange_step(plan, st, a_shard, dst, i));
    LOOM_CUDA(cudaStreamWaitEvent(stream, st->steps[i], 0));
    LOOM_TRY(ag_shard_gemm(st, dst + (size_t)loom__tp_shard_begin(g->m, W, from) * row, b, c, bias, from, stream));
  }
  loom__trace_mark(plan, "gemm", stream);
  /* the own rows into the caller's a_full, after the exchange (the plan's
   * own buffer is never read there: the own GEMM reads a_shard) */
  if (dst != (char *)st->a_full_own && st->my_len > 0 && a_shard != dst + (size_t)st->my_begin * row)
    LOOM_CUDA(cudaMemcpyAsync(dst + (size_t)st->my_begin * row, a_shard, (size_t)st->my_len * row,
                              cudaMemcpyDeviceToDevice, st->side));
  return LOOM_SUCCESS;
}

/* The end of a call whose GEMMs ran as plain GEMMs (decomposed, the copy
 * engine's shard GEMMs): the side stream joined, even when a step failed
 * to launch (its queued work must finish first), then r, then the
 * activation as a pass over C. */
static loom_result_t ag_join_activate(loom_tp_state_t *st, loom_result_t r, void *c, cudaStream_t stream) {
  const loom_gemm_desc_t *g = &st->gemm;
  const loom_result_t rj = loom__tp_join(st, stream);
  LOOM_TRY(r);
  LOOM_TRY(rj);
  if (st->desc.activation != LOOM_ACT_NONE)
    LOOM_TRY(loom__tp_activation(c, (size_t)g->m * (size_t)g->n, g->c_type, (int)st->desc.activation, stream));
  return LOOM_SUCCESS;
}

static loom_result_t ag_decomposed(loom_plan_t plan, loom_tp_state_t *st, const char *a_shard, char *dst,
                                   const void *b, void *c, const void *bias, cudaStream_t stream) {
  LOOM_TRY(loom__tp_fork(st, stream));
  const loom_result_t r = ag_decomposed_steps(plan, st, a_shard, dst, b, (char *)c, bias, stream);
  st->tune_base_gemm = 0; /* every chunk shape's cuBLASLt algorithm timed (the tuner's warm-up call) */
  return ag_join_activate(st, r, c, stream);
}

/* The copy kernels' arguments: signals, shapes, this rank's shard and every
 * rank's address of the gathered buffer. */
static loom_result_t ag_copy_args(loom_plan_t plan, const loom_tp_state_t *st, const char *a_shard, char *dst,
                                  loom_ag_copy_args_t *ca) {
  const loom_gemm_desc_t *g = &st->gemm;
  const size_t es = loom_dtype_size(g->ab_type), row = (size_t)g->k * es;
  memset(ca, 0, sizeof *ca);
  ca->dc = loom__comm_dev(plan->comm);
  ca->epoch_off = plan->epoch_offset;
  ca->ready_off = st->ready_off;
  ca->chunk_off = st->chunk_off;
  ca->go_off = st->go_off;
  ca->m = g->m;
  ca->k = g->k;
  ca->chunk_rows = st->chunk_rows;
  ca->chunks_per_shard = st->chunks_per_shard;
  ca->esize = (int)es;
  ca->a_shard = a_shard;
  LOOM_TRY(loom__tp_peer_addresses("loom_ag_gemm", "a_full", plan->comm, dst, (size_t)g->m * row, ca->dst));
  ca->copy_local = st->my_len > 0 && a_shard != dst + (size_t)st->my_begin * row;
  return LOOM_SUCCESS;
}

LOOM_PARAM_INT(TP_CE_SIGNAL, "1",
               "AllGather+GEMM's copy-engine pushes: 1 sets each chunk's signal on the peer by a 4-byte copy "
               "behind the chunk's copy (the value the ready wait left: no kernel between copies); 0 by a "
               "one-warp kernel after each chunk")

/* Chunk j's signal on `dest` (side stream, behind the chunk's copy): a
 * 4-byte copy of go[dest] into it, or the signal kernel. */
static loom_result_t ag_signal_chunk(const loom_tp_state_t *st, const loom_ag_copy_args_t *ca, int dest, int64_t j,
                                     cudaStream_t side) {
  if (!loom__param_TP_CE_SIGNAL()) return loom__ag_signal_chunks(ca, dest, j, j + 1, side);
  const uint32_t index = (uint32_t)(st->rank * st->chunks_per_shard + j);
  char *sig = st->peer_ws[dest] + ca->chunk_off + (size_t)index * sizeof(uint32_t);
  const char *go = ca->dc.ws + ca->go_off + (size_t)dest * sizeof(uint32_t);
  LOOM_CUDA(cudaMemcpyAsync(sig, go, sizeof(uint32_t), cudaMemcpyDeviceToDevice, side));
  return LOOM_SUCCESS;
}

/* The copy engine's pushes: each peer in push order (its ready wait first),
 * chunk by chunk, each chunk then its signal (side stream). Trace marks: the
 * first peer's first four chunks. */
static loom_result_t ag_push_copy_engine(loom_plan_t plan, loom_tp_state_t *st, loom_ag_copy_args_t *ca,
                                         const char *a_shard, int64_t nch) {
  const loom_gemm_desc_t *g = &st->gemm;
  const size_t row = (size_t)g->k * loom_dtype_size(g->ab_type);
  const int W = st->world;
  static const char *const chunk_marks[4] = {"side.chunk0", "side.chunk1", "side.chunk2", "side.chunk3"};
  for (int step = 1; step < W; ++step) {
    const int dest = loom__ag_push_dest(st->rank, W, step - 1);
    LOOM_TRY(loom__ag_wait_ready(ca, dest, st->side));
    if (step == 1) loom__trace_mark(plan, "side.ready", st->side);
    for (int64_t j = 0; j < nch; ++j) {
      int64_t r0, r1;
      loom__ag_chunk(g->m, W, st->rank, st->chunk_rows, j, &r0, &r1);
      LOOM_CUDA(cudaMemcpyAsync(ca->dst[dest] + (size_t)r0 * row, a_shard + (size_t)(r0 - st->my_begin) * row,
                                (size_t)(r1 - r0) * row, cudaMemcpyDeviceToDevice, st->side));
      LOOM_TRY(ag_signal_chunk(st, ca, dest, j, st->side));
      if (step == 1 && j < 4) loom__trace_mark(plan, chunk_marks[j], st->side);
    }
  }
  loom__trace_mark(plan, "side.pushed", st->side);
  return LOOM_SUCCESS;
}

/* This rank's shard into every peer (side stream), then into its own
 * gathered buffer on the user's stream, with every SM, before the GEMM (a
 * same-device copy runs as a kernel; the side stream would get only the
 * SMs the GEMM leaves free). */
static loom_result_t ag_push(loom_plan_t plan, loom_tp_state_t *st, loom_ag_copy_args_t *ca, const char *a_shard,
                             char *dst, cudaStream_t stream) {
  const loom_gemm_desc_t *g = &st->gemm;
  const size_t row = (size_t)g->k * loom_dtype_size(g->ab_type);
  const int64_t nch = loom__ag_shard_chunks(g->m, st->world, st->rank, st->chunk_rows);
  if (nch > 0 && st->world > 1) {
    if (st->transfer == LOOM_TP_SM_COPY) {
      ca->first_step = 1;
      LOOM_TRY(loom__ag_copy_launch(ca, st->comm_blocks, st->side));
      loom__trace_mark(plan, "side.pushed", st->side);
    } else {
      LOOM_TRY(ag_push_copy_engine(plan, st, ca, a_shard, nch));
    }
  }
  if (nch > 0) {
    if (ca->copy_local)
      LOOM_CUDA(cudaMemcpyAsync(dst + (size_t)st->my_begin * row, a_shard, (size_t)st->my_len * row,
                                cudaMemcpyDeviceToDevice, stream));
    LOOM_TRY(loom__ag_signal_chunks(ca, st->rank, 0, nch, stream));
    loom__trace_mark(plan, "own", stream);
  }
  return LOOM_SUCCESS;
}

/* The copy engine's pushes on the side stream, and the GEMM shard by shard
 * on the user's: the own rows from a_shard, then each peer's shard in
 * arrival order once its chunks have landed. The own rows go into the
 * caller's a_full on the side stream after the pushes. */
static loom_result_t ag_ce_shard_gemms(loom_plan_t plan, loom_tp_state_t *st, loom_ag_copy_args_t *ca,
                                       const char *a_shard, char *dst, const void *b, char *c, const void *bias,
                                       cudaStream_t stream) {
  const loom_gemm_desc_t *g = &st->gemm;
  const size_t row = (size_t)g->k * loom_dtype_size(g->ab_type);
  const int W = st->world;
  const int64_t nch = loom__ag_shard_chunks(g->m, W, st->rank, st->chunk_rows);
  if (nch > 0 && W > 1) LOOM_TRY(ag_push_copy_engine(plan, st, ca, a_shard, nch));
  if (dst != (char *)st->a_full_own && ca->copy_local)
    LOOM_CUDA(cudaMemcpyAsync(dst + (size_t)st->my_begin * row, a_shard, (size_t)st->my_len * row,
                              cudaMemcpyDeviceToDevice, st->side));
  LOOM_TRY(ag_shard_gemm(st, a_shard, b, c, bias, st->rank, stream));
  loom__trace_mark(plan, "gemm.own", stream);
  for (int i = 0; i < W - 1; ++i) {
    const int from = loom__ag_arrival_src(st->rank, W, i);
    LOOM_TRY(loom__ag_wait_shard(ca, from, stream));
    LOOM_TRY(ag_shard_gemm(st, dst + (size_t)loom__tp_shard_begin(g->m, W, from) * row, b, c, bias, from, stream));
  }
  loom__trace_mark(plan, "gemm", stream);
  return LOOM_SUCCESS;
}

static loom_result_t ag_fused(loom_plan_t plan, loom_tp_state_t *st, const char *a_shard, char *dst, const void *b,
                              void *c, const void *bias, cudaStream_t stream) {
  loom_comm_t comm = plan->comm;
  loom_ag_copy_args_t ca;
  LOOM_TRY(ag_copy_args(plan, st, a_shard, dst, &ca));
  LOOM_TRY(loom__tp_begin(ca.dc, plan->epoch_offset, st->ready_off, (size_t)-1, stream));
  loom__trace_mark(plan, "begin", stream);
  LOOM_TRY(loom__tp_fork(st, stream));
  if (st->ce_shards)
    return ag_join_activate(st, ag_ce_shard_gemms(plan, st, &ca, a_shard, dst, b, (char *)c, bias, stream), c, stream);
  LOOM_TRY(ag_push(plan, st, &ca, a_shard, dst, stream));
  loom_gemm_hooks_t h;
  loom__tp_hooks_base(plan, st, st->rank, ca.dc, &h);
  h.wait_signals = (const uint32_t *)((const char *)comm->ws_ptr + st->chunk_off);
  h.wait_rows_per_signal = st->chunk_rows;
  h.wait_rows_per_shard = st->shard_rows;
  h.wait_split_bands = 1; /* units in the order rows arrive */
  h.epilogue = LOOM_EPI_STORE;
  h.activation = (int)st->desc.activation;
  loom_result_t r = loom__gemm_hooked(&st->gemm, dst, b, c, bias, &st->gemm_cfg, &h, stream);
  loom__trace_mark(plan, "gemm", stream);
  /* join even when the GEMM failed to launch: the side stream's work is queued */
  const loom_result_t rj = loom__tp_join(st, stream);
  LOOM_TRY(r);
  return rj;
}

loom_result_t loom_ag_gemm(loom_plan_t plan, const void *a_shard, const void *b, void *c, void *a_full,
                           const void *bias, cudaStream_t stream) {
  const char *fn = "loom_ag_gemm";
  loom_tp_state_t *st;
  const loom_tp_call_t call = {a_shard, b, c, a_full, bias, NULL};
  LOOM_TRY(loom__tp_enter(plan, fn, LOOM__TP_AG, &call, NULL, stream, &st));
  char *dst = a_full ? (char *)a_full : (char *)st->a_full_own;
  (void)loom__plan_next_epoch(plan);
  if (st->transfer == LOOM_TP_SEQUENTIAL)
    LOOM_TRY(ag_sequential(plan, st, (const char *)a_shard, dst, b, c, bias, stream));
  else if (st->transfer == LOOM_TP_DECOMPOSED)
    LOOM_TRY(ag_decomposed(plan, st, (const char *)a_shard, dst, b, c, bias, stream));
  else
    LOOM_TRY(ag_fused(plan, st, (const char *)a_shard, dst, b, c, bias, stream));
  return loom__call_exit(plan, stream, NULL);
}
