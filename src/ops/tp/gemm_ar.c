/*
 * gemm_ar.c - loom_gemm_ar: out = epilogue(sum over ranks of A [m, k] x B)
 * on every rank: the row-parallel linear layer of plain tensor parallelism
 * (no sequence parallelism) followed by CoCoNet's pointwise work, e.g.
 * dropout(AR(x W) + b) + r, in one call (CoCoNet 5.4: GEMM + AllReduce
 * overlap).
 *
 * Fused (LOOM_TP_SM_COPY; protocol in tp_linear.h): the GEMM+ReduceScatter
 * call (loom__rs_fused, rs_engine.c) with the AllReduce's second half folded
 * into the owners' reduction. Every rank's GEMM computes its partial
 * product of all m rows into its own symmetric partial buffer, peers' rows
 * first, and signals each tile to the owner(s) of its rows. Rank o owns the
 * rows of shard o (loom_tp_shard_*): its reduction kernel (comm_blocks SMs
 * next to the GEMM, then every SM after it) waits for each of its tiles'
 * W signals, sums the W partials in fp32 in rank order (NVLink loads),
 * applies the epilogue (scale, bias, activation, dropout by the global
 * element index row x n + col, residual at out's row and column) and rounds
 * once, storing the result into every rank's `out` (NVLink stores through
 * the peers' addresses of the caller's symmetric `out`); then it sets the
 * tile's gathered signal on every peer. The tail launch ends only after
 * every other owner's gathered signals of the call have arrived, so `out`
 * is complete on this rank when its stream passes the call. The same bits
 * on every rank and every run.
 * Sequential (LOOM_TP_SEQUENTIAL): the GEMM (cuBLASLt or loom_gemm, the
 * plan's gemm engine) into the plan's symmetric
 * partial [m, n], then loom_allreduce of it with the epilogue (the same
 * pointwise code and element index, so the same dropout mask).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/pointwise.h"
#include "core/ptr_check.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

static loom_result_t ar_sequential(loom_tp_state_t *st, const void *a, const void *b, void *out,
                                   const loom_epilogue_t *epi, cudaStream_t stream) {
  LOOM_TRY(loom__tp_seq_gemm(st, &st->gemm, a, b, st->partial, NULL, stream));
  return loom_allreduce(st->ar_plan, st->partial, out, epi, NULL, NULL, stream);
}

/* peer_out: every rank's out as this rank's kernels address it. */
static loom_result_t ar_fused(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b, void *out,
                              char *const *peer_out, const loom_pointwise_t *pw, cudaStream_t stream) {
  loom_rs_reduce_args_t ra;
  memset(&ra, 0, sizeof ra);
  ra.pw = *pw;
  for (int p = 0; p < st->world; ++p) ra.dst[p] = peer_out[p];
  ra.dst[st->rank] = (char *)out; /* its own rows through the caller's address */
  ra.nout = st->world;
  ra.dst_row_base = 0;
  ra.gath_off = st->gath_off;
  return loom__rs_fused(plan, st, a, b, &ra, stream);
}

loom_result_t loom_gemm_ar(loom_plan_t plan, const void *a, const void *b, void *out, const loom_epilogue_t *epi,
                           cudaStream_t stream) {
  const char *fn = "loom_gemm_ar";
  loom_tp_state_t *st;
  loom_pointwise_t pw;
  const loom_tp_call_t call = {a, b, out, NULL, NULL, epi};
  LOOM_TRY(loom__tp_enter(plan, fn, LOOM__TP_AR, &call, &pw, stream, &st));
  const int fused = st->transfer != LOOM_TP_SEQUENTIAL;
  char *peer[LOOM_TP_MAX_PEERS];
  if (fused)
    LOOM_TRY(loom__tp_peer_addresses(fn, "out", plan->comm, out,
                                     (size_t)st->gemm.m * (size_t)st->gemm.n * loom_dtype_size(st->gemm.c_type), peer));
  (void)loom__plan_next_epoch(plan);
  if (fused)
    LOOM_TRY(ar_fused(plan, st, a, b, out, peer, &pw, stream));
  else
    LOOM_TRY(ar_sequential(st, a, b, out, epi, stream));
  return loom__call_exit(plan, stream, NULL);
}
