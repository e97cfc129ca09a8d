/*
 * rs_engine.c - the fused GEMM + reduce-scatter engine (loom__rs_fused) of
 * loom_gemm_rs (gemm_rs.c) and loom_gemm_ar (gemm_ar.c): begin kernel (it
 * waits for the peers' done of the previous call), the side launch of the
 * reduction, the hooked GEMM into the plan's partial buffer with a signal
 * per tile to the owners of its rows, the tail launch of the reduction on
 * every SM, the join. The caller gives the reduction its outputs: c_shard
 * and the bias (RS), or every rank's out, the call's epilogue and the
 * gathered signals (AR). Protocol: tp_linear.h. BULK_REDUCE (RS) runs on
 * the caller's stream alone: begin, the GEMM adding into the owners, the
 * owner's pass (rs_bulk).
 */
#include <stddef.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/trace.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

/* Settings (core/param.h) this file reads, declared where they are used. */
LOOM_PARAM_STR(TP_BULK_ORDER, "striped",
               "loom_gemm_rs with LOOM_TP_BULK_REDUCE: the GEMM's tile "
               "order, striped (the owners' tiles interleaved) or shifted "
               "(every peer's rows, then this rank's)")

/* The reduction kernel's arguments: its sources (SM_ATOMIC, this rank's
 * fp32 accumulator; else every rank's partial), signals and tiles. */
static loom_result_t rs_reduce_args(loom_plan_t plan, loom_tp_state_t *st, loom_dev_comm_t dc,
                                    loom_rs_reduce_args_t *ra) {
  loom_comm_t comm = plan->comm;
  const loom_gemm_desc_t *g = &st->gemm;
  const char *fn = st->kind == LOOM__TP_AR ? "loom_gemm_ar" : "loom_gemm_rs";
  if (st->transfer == LOOM_TP_SM_ATOMIC || st->transfer == LOOM_TP_BULK_REDUCE) {
    ra->src[0] = (const char *)st->partial;
    ra->nsrc = 1, ra->src_row_base = st->my_begin, ra->zero_src = 1;
    ra->src_type = st->transfer == LOOM_TP_SM_ATOMIC ? LOOM_FP32 : (int)g->c_type;
  } else {
    LOOM_TRY(loom__tp_peer_addresses(fn, "partial", comm, st->partial,
                                     (size_t)g->m * (size_t)g->n * loom_dtype_size(g->c_type), (char **)ra->src));
    ra->nsrc = st->world, ra->src_type = (int)g->c_type, ra->src_row_base = 0, ra->zero_src = 0;
  }
  ra->dc = dc;
  ra->epoch_off = plan->epoch_offset;
  ra->tile_off = st->tile_off;
  ra->done_off = st->done_off;
  ra->count_off = st->count_off;
  /* the side launch and the tail (BULK_REDUCE: the owner pass alone) */
  ra->total_blocks = (st->transfer == LOOM_TP_BULK_REDUCE ? 0 : st->comm_blocks) + comm->sm_count;
  ra->m = g->m;
  ra->n = g->n;
  ra->row0 = st->my_begin;
  ra->rows = st->my_len;
  ra->bm = st->gemm_bm;
  ra->bn = st->gemm_cfg.bn;
  ra->tiles_m = st->tiles_m;
  ra->tiles_n = st->tiles_n;
  ra->group = st->gemm_cfg.group; /* the GEMM's band (fused_gemm_config always sets it) */
  ra->c_type = (int)g->c_type;
  ra->wait_gathered = 0; /* the side launch: only the tail waits */
  return LOOM_SUCCESS;
}

/* BULK_REDUCE on one stream: the begin kernel, the GEMM whose epilogue adds
 * each output chunk into its owner's sum buffer (bulk reductions, peers'
 * rows first), then every SM tells the peers, waits for theirs, and rounds
 * this rank's sum (+ bias) into its outputs, zeroing the sum buffer. */
static loom_result_t rs_bulk(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b,
                             loom_rs_reduce_args_t *ra, loom_dev_comm_t dc, cudaStream_t stream) {
  loom_gemm_desc_t g = st->gemm;
  LOOM_TRY(loom__tp_begin(dc, plan->epoch_offset, (size_t)-1, st->done_off, stream));
  loom__trace_mark(plan, "begin", stream);
  loom_gemm_hooks_t h;
  loom__tp_hooks_base(plan, st, st->rank + 1, dc, &h);
  h.epilogue = LOOM_EPI_BULK_ADD;
  h.rows_per_dst = st->shard_rows;
  h.dst_maps = st->d_maps;
  if (strcmp(loom__param_TP_BULK_ORDER(), "shifted") != 0) /* striped: the owners interleaved */
    h.order.kind = LOOM_TILE_ORDER_SCHEDULE, h.order.schedule = st->d_schedule;
  g.has_bias = 0; /* added once, by the owner */
  LOOM_TRY(loom__gemm_hooked(&g, a, b, st->partial, NULL, &st->gemm_cfg, &h, stream));
  loom__trace_mark(plan, "gemm", stream);
  LOOM_TRY(loom__rs_bulk_pass_launch(ra, plan->comm->sm_count, stream));
  loom__trace_mark(plan, "tail", stream);
  return LOOM_SUCCESS;
}

loom_result_t loom__rs_fused(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b,
                             loom_rs_reduce_args_t *ra, cudaStream_t stream) {
  loom_comm_t comm = plan->comm;
  loom_gemm_desc_t g = st->gemm;
  const loom_dev_comm_t dc = loom__comm_dev(comm);
  const int atomic = st->transfer == LOOM_TP_SM_ATOMIC;
  LOOM_TRY(rs_reduce_args(plan, st, dc, ra));
  if (st->transfer == LOOM_TP_BULK_REDUCE) return rs_bulk(plan, st, a, b, ra, dc, stream);

  LOOM_TRY(loom__tp_begin(dc, plan->epoch_offset, (size_t)-1, st->done_off, stream));
  loom__trace_mark(plan, "begin", stream);
  LOOM_TRY(loom__tp_fork(st, stream));
  /* launched even with no rows of its own: its last block tells the sources */
  LOOM_TRY(loom__rs_reduce_launch(ra, st->comm_blocks, st->side));
  loom__trace_mark(plan, "side.reduce", st->side);

  loom_gemm_hooks_t h;
  loom__tp_hooks_base(plan, st, st->rank + 1, dc, &h);
  h.epilogue = atomic ? LOOM_EPI_REDUCE : LOOM_EPI_STORE;
  h.rows_per_dst = st->shard_rows;
  h.dst_signal = st->d_dst_signal;
  if (atomic) h.row_dst = st->d_row_dst, h.dst_fp32 = 1; /* red.global.add.f32 into the owners */
  g.has_bias = 0; /* added once, by the owner's reduction */
  loom_result_t r = loom__gemm_hooked(&g, a, b, st->partial, NULL, &st->gemm_cfg, &h, stream);
  loom__trace_mark(plan, "gemm", stream);
  /* the tail: every SM sums what is left once the GEMM is done (AR: then
   * waits for the other owners' tiles of this rank's out) */
  ra->wait_gathered = ra->gath_off != (size_t)-1;
  if (r == LOOM_SUCCESS) r = loom__rs_reduce_launch(ra, comm->sm_count, stream);
  loom__trace_mark(plan, "tail", stream);
  const loom_result_t rj = loom__tp_join(st, stream);
  LOOM_TRY(r);
  return rj;
}
