/*
 * prog_coll.c - a program's plain collective run by a library (a COLL
 * unit, lower.h): the program as loom's ops one after another
 * ("sequential": loom_allreduce / loom_reduce_scatter / loom_all_gather,
 * whose plans prog_plan.c makes) or as NCCL's ("cublaslt+nccl", on the
 * comm's NCCL communicator). The operand is the arena's (loom's
 * collectives load it at the peers); the result is written where its
 * buffer is (the arena or the caller's output) and copied into the
 * caller's other outputs of it. Slices: ReduceScatter's result and
 * AllGather's operand are sliced along dimension 0, so loom's slices of
 * whole rows (cols = the row's elements) and the language's are the same;
 * NCCL's are equal slices (prog_plan.c refuses rows no multiple of W).
 */
#include <cuda_runtime.h>

#include "baseline/baseline.h"
#include "codegen/prog.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/plan.h"

/* Elements of buffer b's whole tensor and of this rank's piece. */
static void counts(const loom_cg_state_t *st, int b, int64_t *whole, int64_t *piece) {
  const loom__lw_buf_t *x = &st->lw.bufs[b];
  *whole = 1;
  for (int j = 0; j < x->geom.rank; ++j) *whole *= x->geom.dims[j];
  *piece = loom__lw_piece_count(&x->geom, st->q);
}

/* NCCL's collective of unit u: in and out as loom__cg_coll_run found them. */
static loom_result_t nccl_run(loom_plan_t plan, const loom_cg_state_t *st, int u, const char *in, char *out,
                              cudaStream_t stream) {
  const loom__lw_unit_t *un = &st->lw.units[u];
  const int op = st->prog->nodes[un->node].op;
  const loom_dtype_t t = (loom_dtype_t)st->lw.bufs[un->gemm_c].dtype;
  int64_t whole, piece;
  counts(st, op == LOOM__OP_ALLGATHER ? un->gemm_c : un->gemm_a, &whole, &piece);
  ncclComm_t nccl = plan->comm->nccl;
  if (op == LOOM__OP_ALLREDUCE) return loom__base_allreduce(nccl, in, out, (size_t)whole, t, stream);
  const size_t per_rank = (size_t)(whole / st->lw.W);
  if (op == LOOM__OP_REDUCESCATTER) return loom__base_reducescatter(nccl, in, out, per_rank, t, stream);
  return loom__base_allgather(nccl, in, out, per_rank, t, stream);
}

loom_result_t loom__cg_coll_run(loom_plan_t plan, loom_cg_state_t *st, int u, const void *const *inputs,
                                void *const *outputs, cudaStream_t stream) {
  const loom__lw_unit_t *un = &st->lw.units[u];
  const int op = st->prog->nodes[un->node].op;
  const char *in = loom__cg_buf_addr(st, un->gemm_a, inputs, outputs);
  char *out = loom__cg_buf_addr(st, un->gemm_c, inputs, outputs);
  if (st->lw.lib == LOOM__LW_LIB_BASE) {
    LOOM_TRY(nccl_run(plan, st, u, in, out, stream));
  } else if (op == LOOM__OP_ALLREDUCE) {
    LOOM_TRY(loom_allreduce(st->units[u].coll, in, out, NULL, NULL, NULL, stream));
  } else if (op == LOOM__OP_REDUCESCATTER) {
    LOOM_TRY(loom_reduce_scatter(st->units[u].coll, in, out, NULL, NULL, NULL, stream));
  } else {
    LOOM_TRY(loom_all_gather(st->units[u].coll, in, out, stream));
  }
  int64_t whole, piece;
  counts(st, un->gemm_c, &whole, &piece);
  const size_t bytes = (size_t)piece * loom_dtype_size((loom_dtype_t)st->lw.bufs[un->gemm_c].dtype);
  return loom__cg_copy_out(st, un->gemm_c, out, bytes, outputs, stream);
}
