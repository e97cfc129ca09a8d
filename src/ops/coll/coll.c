/*
 * coll.c - loom's collectives with a fused epilogue: plans
 * (loom_plan_allreduce, loom_plan_reduce_scatter, loom_plan_all_gather), their
 * info, and the calls (loom_allreduce, loom_reduce_scatter, loom_all_gather).
 * The protocol is in coll.h, ownership and orders in coll_schedule.h, the
 * kernel in coll_kernels.cu.
 *
 * A call: check the plan, the comm's error state and every pointer (each by
 * name and value: `in` must be loom_malloc memory, the others device memory
 * of this GPU of the sizes the call touches), turn the epilogue into the
 * kernel's loom_pointwise_t, look up every rank's address of `in`, launch
 * the one kernel, record the plan's `done` event.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/util.h"
#include "core/handle.h"
#include "core/log.h"
#include "core/param.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/pointwise.h"
#include "core/ptr_check.h"
#include "ops/coll/coll.h"
#include "ops/coll/coll_protocol.h"
#include "ops/coll/coll_schedule.h"

/* Settings (core/param.h) this file reads, declared where they are used. */
LOOM_PARAM_INT(ALLREDUCE_LL_BYTES, "1M",
               "loom_allreduce with LOOM_COLL_AUTO: the low-latency "
               "one-shot (inputs pushed with flags, one link crossing) up "
               "to this many bytes of input at 2 ranks, this / (W-1) at W "
               "(0: never); loom_reduce_scatter and loom_all_gather: "
               "their LL while (W-1) x slice bytes stay within twice it")
LOOM_PARAM_INT(COLL_PDL, "1",
               "1: loom's collectives launch as programmatic dependents of "
               "the stream's previous kernel on Hopper (the launch hides "
               "under that kernel's tail; never in a one-GPU world, where "
               "early blocks would hold SMs a peer rank needs); 0: plain "
               "launches")
LOOM_PARAM_INT(ALLREDUCE_PUSH_BYTES, "4M",
               "loom_allreduce with LOOM_COLL_AUTO: the one-shot by "
               "stores (a flag per chunk) above LL, up to this many bytes "
               "of input (at W > 2 while its extra traffic over the "
               "two-shot's stays under 2 MiB; 0: never)")
LOOM_PARAM_INT(ALLREDUCE_ONE_SHOT_BYTES, "16M",
               "loom_allreduce with LOOM_COLL_AUTO: one-shot (each "
               "rank reduces the whole vector) up to this many bytes "
               "of input (and, at W > 2, while its extra reads over "
               "the two-shot's stay under 2 MiB), two-shot above")

/* The kernels' wait sites, named from the protocol's table of signals. */
__attribute__((constructor)) static void loom__coll_wait_sites(void) {
  loom__proto_register_sites(loom__coll_signals, LOOM__COLL_NSIG);
}


const char *loom__coll_algo_name(loom_coll_algo_t a) {
  switch (a) {
    case LOOM_COLL_AUTO: return "LOOM_COLL_AUTO";
    case LOOM_COLL_ONE_SHOT: return "LOOM_COLL_ONE_SHOT";
    case LOOM_COLL_TWO_SHOT: return "LOOM_COLL_TWO_SHOT";
    case LOOM_COLL_LL: return "LOOM_COLL_LL";
    case LOOM_COLL_PUSH: return "LOOM_COLL_PUSH";
  }
  return "unknown";
}

/* The description's own fields: size, shape, dtypes. */
static loom_result_t coll_check_shape(const char *fn, int comm_size, const loom_coll_desc_t *d) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL must point to a loom_coll_desc_t", fn);
  if (d->struct_size != sizeof(loom_coll_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_COLL_DESC_INIT; header and "
                      "library differ?)",
                      fn, d->struct_size, sizeof(loom_coll_desc_t));
  if (d->world_size != comm_size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->world_size=%d differs from the comm's size %d", fn,
                      d->world_size, comm_size);
  if (comm_size > LOOM_COLL_MAX_PEERS)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: the comm has %d ranks; loom's collectives take at most %d", fn,
                      comm_size, LOOM_COLL_MAX_PEERS);
  if (d->count < 1) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->count=%lld must be >= 1", fn, (long long)d->count);
  if (!loom__dtype_known(d->dtype))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->dtype=%d is unknown: must be LOOM_FP32, LOOM_FP16 or LOOM_BF16",
                      fn, (int)d->dtype);
  if (!loom__dtype_known(d->out_type))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->out_type=%d is unknown: must be LOOM_FP32, LOOM_FP16 or LOOM_BF16", fn, (int)d->out_type);
  if ((uint64_t)d->count > ((uint64_t)1 << 40))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->count=%lld is above 2^40 elements", fn, (long long)d->count);
  if (d->cols < 0 || (d->cols > 0 && d->count % d->cols != 0))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->cols=%lld must be 0 (a flat vector) or divide desc->count=%lld (rows of cols)", fn,
                      (long long)d->cols, (long long)d->count);
  return LOOM_SUCCESS;
}

/* The row-wise norm epilogue's fields. */
static loom_result_t coll_check_norm(const char *fn, int kind, const loom_coll_desc_t *d) {
  if (d->norm < LOOM_NORM_NONE || d->norm > LOOM_NORM_LAYER)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->norm=%d is unknown: must be LOOM_NORM_NONE, LOOM_NORM_RMS or LOOM_NORM_LAYER", fn,
                      (int)d->norm);
  if (d->norm != LOOM_NORM_NONE) {
    if (kind == LOOM__COLL_AG)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->norm=%d: an AllGather has no epilogue (LOOM_NORM_NONE)",
                        fn, (int)d->norm);
    if (d->cols == 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->norm=%d needs rows: set desc->cols (the row length)", fn,
                        (int)d->norm);
    if (d->cols > LOOM_COLL_MAX_COLS)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->cols=%lld: a row-wise norm takes rows of at most %d", fn,
                        (long long)d->cols, LOOM_COLL_MAX_COLS);
    if (!(d->norm_eps > 0.f) || !isfinite(d->norm_eps))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->norm_eps=%g must be finite and > 0", fn,
                        (double)d->norm_eps);
  }
  return LOOM_SUCCESS;
}

/* LL: a row-wise norm's rows are whole groups of 8 (a block's rows are its own). */
static int coll_ll_ok(const loom_coll_desc_t *d) { return d->norm == LOOM_NORM_NONE || d->cols % LOOM_COLL_VEC == 0; }

/* The algorithm and the grid asked for. */
static loom_result_t coll_check_algo(const char *fn, int kind, int sm_count, const loom_coll_desc_t *d) {
  if (kind == LOOM__COLL_AG && d->out_type != d->dtype)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->out_type=%d differs from desc->dtype=%d: an AllGather copies, it does not convert", fn,
                      (int)d->out_type, (int)d->dtype);
  if (d->algo < LOOM_COLL_AUTO || d->algo > LOOM_COLL_PUSH)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->algo=%d is unknown: must be LOOM_COLL_AUTO, _ONE_SHOT, _TWO_SHOT, _LL or _PUSH", fn,
                      (int)d->algo);
  if (kind != LOOM__COLL_AR && d->algo != LOOM_COLL_AUTO)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->algo=%s applies to loom_plan_allreduce only (use LOOM_COLL_AUTO)",
                      fn, loom__coll_algo_name(d->algo));
  if (d->blocks < 0 || (sm_count > 0 && d->blocks > sm_count))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->blocks=%d must be 0 (chosen by size) or 1 .. %d (the SMs: every block waits on peers, so "
                      "all must be resident)",
                      fn, d->blocks, sm_count);
  if (d->algo == LOOM_COLL_LL && !coll_ll_ok(d))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->algo=LOOM_COLL_LL with desc->norm=%d needs desc->cols a multiple of 8 (cols=%lld); "
                      "use LOOM_COLL_ONE_SHOT or LOOM_COLL_AUTO",
                      fn, (int)d->norm, (long long)d->cols);
  return LOOM_SUCCESS;
}

/* The algorithm a checked description runs: AllReduce's as asked, or
 * AUTO's by size and the thresholds; AUTO for the others. */
static loom_coll_algo_t coll_algo(int kind, int comm_size, const loom_coll_thresholds_t *th,
                                  const loom_coll_desc_t *d) {
  if (kind != LOOM__COLL_AR) return LOOM_COLL_AUTO;
  if (d->algo != LOOM_COLL_AUTO) return d->algo;
  const uint64_t bytes = (uint64_t)d->count * loom_dtype_size(d->dtype);
  const int pick = loom__coll_auto_algo((int64_t)bytes, comm_size, coll_ll_ok(d), th);
  return pick == 1 ? LOOM_COLL_LL : pick == 2 ? LOOM_COLL_PUSH : pick == 3 ? LOOM_COLL_ONE_SHOT : LOOM_COLL_TWO_SHOT;
}

loom_result_t loom__coll_check_desc(const char *fn, int kind, int comm_size, int sm_count,
                                    const loom_coll_thresholds_t *th, const loom_coll_desc_t *d,
                                    loom_coll_algo_t *algo) {
  LOOM_TRY(coll_check_shape(fn, comm_size, d));
  LOOM_TRY(coll_check_norm(fn, kind, d));
  LOOM_TRY(coll_check_algo(fn, kind, sm_count, d));
  *algo = coll_algo(kind, comm_size, th, d);
  return LOOM_SUCCESS;
}

/* The AllReduce thresholds in force. */
static loom_coll_thresholds_t coll_thresholds(void) {
  const loom_coll_thresholds_t th = {loom__param_ALLREDUCE_LL_BYTES(), loom__param_ALLREDUCE_PUSH_BYTES(),
                                     loom__param_ALLREDUCE_ONE_SHOT_BYTES()};
  return th;
}

static const loom_op_family_t coll_family = {"coll", "an allreduce, reduce_scatter or all_gather plan"};
extern const loom_op_t loom__op_allreduce, loom__op_reduce_scatter, loom__op_all_gather;

static const loom_op_t *coll_op(int kind) {
  return kind == LOOM__COLL_AR ? &loom__op_allreduce : kind == LOOM__COLL_RS ? &loom__op_reduce_scatter
                                                                             : &loom__op_all_gather;
}

/* Resolve and lay out: the kernel variant, slices, grid, chunks, shared
 * memory; the signal words it needs. */
static uint32_t coll_layout(loom_comm_t comm, loom_coll_state_t *st) {
  const loom_coll_desc_t *desc = &st->desc;
  const int kind = (int)st->kind;
  const loom_coll_algo_t algo = st->algo;
  const int W = st->world;
  const int64_t count = desc->count;
  const size_t es_in = loom_dtype_size(desc->dtype), es_out = loom_dtype_size(desc->out_type);
  st->unit = loom__coll_unit(desc->cols);
  st->slice = loom__coll_slice_elems(count, W, st->unit);
  /* ReduceScatter and AllGather: the slices' LL where AUTO's rule picks it (no row-wise norm) */
  const loom_coll_thresholds_t th = coll_thresholds();
  const int ll = kind != LOOM__COLL_AR && desc->norm == LOOM_NORM_NONE &&
                 loom__coll_auto_ll_slices(count, (int64_t)es_in, W, st->unit, &th);
  st->kk = kind == LOOM__COLL_RS   ? (ll ? LOOM__CK_LL_RS : LOOM__CK_RS)
           : kind == LOOM__COLL_AG ? (ll ? LOOM__CK_LL_AG : LOOM__CK_AG)
           : algo == LOOM_COLL_ONE_SHOT ? LOOM__CK_ONE_SHOT
           : algo == LOOM_COLL_LL       ? LOOM__CK_LL
           : algo == LOOM_COLL_PUSH     ? LOOM__CK_PUSH
                                        : LOOM__CK_TWO_SHOT;
  loom__coll_slice(count, W, st->rank, st->unit, &st->my_begin, &st->my_len);
  /* the reduction's span per rank: the whole vector (one-shot) or a slice */
  const int64_t span = st->kk == LOOM__CK_ONE_SHOT || st->kk == LOOM__CK_PUSH ? count : st->slice;
  const size_t es_max = es_in > es_out ? es_in : es_out;
  st->blocks = desc->blocks > 0 ? desc->blocks
               : ll ? loom__coll_ll_grid(st->slice, 0, LOOM_COLL_THREADS, comm->sm_count)
               : st->kk == LOOM__CK_LL
                   ? loom__coll_ll_grid(count, desc->norm != LOOM_NORM_NONE ? count / desc->cols : 0, LOOM_COLL_THREADS,
                                       comm->sm_count)
                   : loom__coll_grid((int64_t)((size_t)span * es_max), comm->sm_count);
  st->chunk = loom__coll_chunk_elems(span, st->unit, st->blocks, (int64_t)es_max, LOOM_COLL_CHUNK_BYTES);
  st->nch = loom__coll_chunks(st->slice, st->chunk);
  st->smem = desc->norm != LOOM_NORM_NONE ? (size_t)desc->cols * sizeof(float) : 0;
  /* two-shot: a signal per chunk; LL, the slices' LL and PUSH: a call count per block */
  if (st->kk == LOOM__CK_TWO_SHOT) return LOOM_COLL_SIG_REDUCED + (uint32_t)st->nch;
  if (st->kk == LOOM__CK_LL || st->kk == LOOM__CK_PUSH || ll) return LOOM_COLL_SIG_BLOCKS + (uint32_t)st->blocks;
  return LOOM_COLL_SIG_REDUCED;
}

/* ReduceScatter or AllGather on the slices' LL. */
static int coll_slices_ll(const loom_coll_state_t *st) {
  return st->kk == LOOM__CK_LL_RS || st->kk == LOOM__CK_LL_AG;
}

/* What every rank must have resolved alike (the plan agreement's hash). */
static uint64_t coll_fingerprint(const loom_coll_state_t *st, uint32_t nsig) {
  const loom_coll_desc_t *desc = &st->desc;
  const int64_t f[15] = {st->kind, desc->count, desc->dtype, desc->out_type, desc->cols, desc->norm, st->kk, st->unit,
                         st->slice, st->blocks, st->chunk, st->nch, nsig, desc->world_size, (int64_t)st->smem};
  uint64_t h = loom__fnv64(LOOM_FNV64_INIT, f, sizeof f);
  return loom__fnv64(h, &desc->norm_eps, sizeof desc->norm_eps);
}

/* Allocate the staging: two-shot, each rank's reduced slice (peers fetch
 * it); one-shot, the result of an in-place call until the peers are done
 * reading `in`; LL, the lines the peers push (coll_schedule.h; the slices'
 * LL: slots of one slice). Collective
 * where peers push into it (every rank answers the agreement). */
static loom_result_t coll_staging(loom_comm_t comm, const char *fn, loom_coll_state_t *st) {
  const int W = st->world;
  const int64_t count = st->desc.count;
  const size_t es_in = loom_dtype_size(st->desc.dtype), es_out = loom_dtype_size(st->desc.out_type);
  if (st->kk == LOOM__CK_TWO_SHOT || st->kk == LOOM__CK_ONE_SHOT)
    st->staging_bytes = (size_t)(st->kk == LOOM__CK_TWO_SHOT ? st->slice : count) * es_out;
  const int slices_ll = coll_slices_ll(st);
  if (st->kk == LOOM__CK_LL || slices_ll)
    st->staging_bytes = (size_t)loom__coll_ll_bytes(slices_ll ? st->slice : count, (int64_t)es_in, W);
  if (st->kk == LOOM__CK_PUSH)
    st->staging_bytes = (size_t)loom__coll_push_bytes(count, (int64_t)es_in, W, loom__coll_chunks(count, st->chunk));
  const int pushed = (st->kk == LOOM__CK_LL || st->kk == LOOM__CK_PUSH || slices_ll) && W > 1;
  loom_result_t r = LOOM_SUCCESS;
  if (st->staging_bytes) r = loom__comm_malloc(comm, st->staging_bytes, &st->staging);
  if (pushed) {
    /* the flags are epochs of this plan, which start again at 1: flags left
     * by an earlier plan in the same memory must not pass for them, so
     * every rank zeroes its buffer before any rank's first call pushes (the
     * agreement below is the fence; it also tells every rank if one failed) */
    if (r == LOOM_SUCCESS) {
      cudaError_t e = cudaMemsetAsync(st->staging, 0, st->staging_bytes, comm->stream);
      if (e != cudaSuccess) r = loom__cuda_fail((int)e, "zeroing the LL / PUSH buffer", __FILE__, __LINE__);
    }
    const loom_result_t ra = loom__comm_agree(comm, fn, 0, r != LOOM_SUCCESS, "");
    if (r == LOOM_SUCCESS) r = ra;
  }
  if (r == LOOM_SUCCESS && (st->kk == LOOM__CK_TWO_SHOT || pushed)) {
    char *peer[LOOM_COLL_MAX_PEERS];
    r = loom__peer_addresses(fn, "staging", comm, st->staging, st->staging_bytes, "the plan's own buffer", peer);
    for (int p = 0; r == LOOM_SUCCESS && p < W; ++p) st->stg_peer[p] = peer[p];
  }
  return r;
}

/* ---- the ops (core/op.h) ---------------------------------------------------- */

/* The description, and one NVLink domain. */
static loom_result_t coll_check(const loom_op_t *op, loom_comm_t comm, const void *desc) {
  const loom_coll_thresholds_t th = coll_thresholds();
  loom_coll_algo_t algo;
  LOOM_TRY(loom__coll_check_desc(op->plan_fn, op->kind, comm->size, comm->sm_count, &th,
                                 (const loom_coll_desc_t *)desc, &algo));
  if (!comm->detached && !comm->ws_all_reachable)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: not every rank is load/store reachable from rank %d (loom's collectives need one NVLink "
                      "domain; use NCCL across nodes)",
                      op->plan_fn, comm->rank);
  return LOOM_SUCCESS;
}

/* The algorithm (AUTO by the thresholds), this rank's part. */
static loom_result_t coll_resolve(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state) {
  loom_coll_state_t *st = (loom_coll_state_t *)state;
  const loom_coll_thresholds_t th = coll_thresholds();
  st->kind = (loom__coll_kind_t)op->kind;
  st->desc = *(const loom_coll_desc_t *)desc;
  st->rank = comm->rank;
  st->world = comm->size;
  st->one_shot_max = (size_t)th.one_shot;
  st->algo = coll_algo(op->kind, comm->size, &th, &st->desc);
  return LOOM_SUCCESS;
}

static loom_result_t coll_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  loom_coll_state_t *st = (loom_coll_state_t *)state;
  lay->nsignals = coll_layout(comm, st);
  lay->fingerprint = coll_fingerprint(st, lay->nsignals);
  return LOOM_SUCCESS;
}

static loom_result_t coll_fill(loom_plan_t plan, void *state) {
  loom_coll_state_t *st = (loom_coll_state_t *)state;
  if (plan->comm->detached) return loom__plan_detached(plan->op->plan_fn);
  LOOM_TRY(coll_staging(plan->comm, plan->op->plan_fn, st));
  return loom__coll_prepare((int)st->desc.dtype, (int)st->desc.out_type, (int)st->kk,
                            st->desc.norm != LOOM_NORM_NONE, st->smem);
}

static void coll_release(loom_comm_t comm, void *state) {
  loom_coll_state_t *st = (loom_coll_state_t *)state;
  if (st->staging) (void)loom__comm_free(comm, st->staging);
}

static void coll_describe(loom_plan_t plan, const void *state) {
  const loom_coll_state_t *st = (const loom_coll_state_t *)state;
  LOOM_INFO("%s: count=%lld cols=%lld W=%d: %s, S=%lld, chunk=%lld (%lld per slice), blocks=%d", plan->op->plan_fn,
            (long long)st->desc.count, (long long)st->desc.cols, st->world,
            st->kind == LOOM__COLL_AR ? loom__coll_algo_name(st->algo)
            : coll_slices_ll(st) ? "the slices' LL"
                                       : "the pull kernel",
            (long long)st->slice,
            (long long)st->chunk, (long long)st->nch, st->blocks);
}

#define COLL_OP(kind_, name_)                                                                                        \
  {                                                                                                                  \
    .name = #name_, .plan_fn = "loom_plan_" #name_, .family = &coll_family, .kind = kind_,                           \
    .state_bytes = sizeof(loom_coll_state_t),                                                                        \
    .differ = "every rank must pass the same loom_coll_desc_t (count, dtypes, cols, norm, algo, blocks) and the "    \
              "same LOOM_ALLREDUCE_LL_BYTES, _PUSH_BYTES and _ONE_SHOT_BYTES",                                       \
    .check = coll_check, .resolve = coll_resolve, .lay_out = coll_lay_out, .fill = coll_fill,                        \
    .release = coll_release, .describe = coll_describe                                                               \
  }
const loom_op_t loom__op_allreduce = COLL_OP(LOOM__COLL_AR, allreduce);
const loom_op_t loom__op_reduce_scatter = COLL_OP(LOOM__COLL_RS, reduce_scatter);
const loom_op_t loom__op_all_gather = COLL_OP(LOOM__COLL_AG, all_gather);

loom_result_t loom_plan_allreduce(loom_comm_t comm, const loom_coll_desc_t *desc, loom_plan_t *out) {
  return loom__plan_make(comm, &loom__op_allreduce, desc, out);
}
loom_result_t loom_plan_reduce_scatter(loom_comm_t comm, const loom_coll_desc_t *desc, loom_plan_t *out) {
  return loom__plan_make(comm, &loom__op_reduce_scatter, desc, out);
}
loom_result_t loom_plan_all_gather(loom_comm_t comm, const loom_coll_desc_t *desc, loom_plan_t *out) {
  return loom__plan_make(comm, &loom__op_all_gather, desc, out);
}

loom_result_t loom_coll_plan_info(loom_plan_t plan, loom_coll_plan_info_t *info) {
  const char *fn = "loom_coll_plan_info";
  const loom_coll_state_t *st = NULL;
  LOOM_TRY(loom__plan_state(plan, fn, &coll_family, NULL, (void **)&st));
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: info=NULL", fn);
  if (info->struct_size != sizeof *info)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: info->struct_size=%zu, expected %zu (initialise with LOOM_COLL_PLAN_INFO_INIT)", fn,
                      info->struct_size, sizeof *info);
  info->algo = coll_slices_ll(st) ? LOOM_COLL_LL : st->algo; /* ReduceScatter, AllGather: LL or AUTO */
  info->slice_elems = st->slice;
  info->my_begin = st->my_begin;
  info->my_len = st->my_len;
  info->chunk_elems = st->chunk;
  info->blocks = st->blocks;
  info->one_shot_max_bytes = st->one_shot_max;
  info->deterministic = 1;
  info->symmetric_bytes = st->staging_bytes;
  info->workspace_bytes = plan->ws_bytes;
  return LOOM_SUCCESS;
}

/* [a, a + an) and [b, b + bn) overlap. */
static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

/* The epilogue of an AllReduce / ReduceScatter call: the pointwise part
 * and the row-wise norm, each pointer by name with the bytes it is read. */
static loom_result_t check_epilogue(const char *fn, int kind, const loom_coll_desc_t *d,
                                    int64_t my_begin, size_t out_elems, const loom_epilogue_t *epi,
                                    const void *norm_w, const void *norm_b, loom_pointwise_t *pw) {
  const size_t es_out = loom_dtype_size(d->out_type);
  const int64_t pcols = d->cols > 0 ? d->cols : d->count;
  LOOM_TRY(loom__pointwise_make(fn, epi, d->out_type, pcols, pw));
  if ((pw->flags & LOOM_PW_BIAS) && d->cols == 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: epilogue->bias=%p needs rows: set desc->cols (the bias has cols elements)", fn, epi->bias);
  if (pw->flags & LOOM_PW_BIAS)
    LOOM_TRY(loom__check_device_ptr(fn, "epilogue->bias", epi->bias, (size_t)d->cols * es_out));
  if (pw->flags & LOOM_PW_RESIDUAL) {
    if (out_elems > 0) LOOM_TRY(loom__check_device_ptr(fn, "epilogue->residual", epi->residual, out_elems * es_out));
    /* element i reads residual[i]: rebased for a slice-sized residual */
    if (kind == LOOM__COLL_RS) pw->residual = (const char *)epi->residual - (ptrdiff_t)((size_t)my_begin * es_out);
  }
  if (d->norm == LOOM_NORM_NONE) {
    if (norm_w || norm_b)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: norm_weight=%p / norm_bias=%p given but desc->norm is LOOM_NORM_NONE",
                        fn, norm_w, norm_b);
    return LOOM_SUCCESS;
  }
  if (!norm_w)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: norm_weight=NULL: desc->norm=%d needs [cols=%lld] weights", fn,
                      (int)d->norm, (long long)d->cols);
  LOOM_TRY(loom__check_device_ptr(fn, "norm_weight", norm_w, (size_t)d->cols * es_out));
  if (norm_b && d->norm != LOOM_NORM_LAYER)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: norm_bias=%p: only LOOM_NORM_LAYER takes a bias", fn, norm_b);
  if (norm_b) LOOM_TRY(loom__check_device_ptr(fn, "norm_bias", norm_b, (size_t)d->cols * es_out));
  return LOOM_SUCCESS;
}

/* in and out of a call: NULL, alignment, memory and its size, the symmetric
 * `in`, and the one overlap each op allows (in place). */
static loom_result_t check_in_out(const char *fn, int kind, loom_comm_t comm, const loom_coll_desc_t *d,
                                  int64_t my_begin, int64_t my_len, int64_t slice, const void *in, void *out,
                                  int *in_place) {
  const size_t es_in = loom_dtype_size(d->dtype), es_out = loom_dtype_size(d->out_type);
  const int64_t count = d->count;
  const size_t in_elems = kind == LOOM__COLL_AG ? (size_t)my_len : (size_t)count;
  const size_t out_elems = kind == LOOM__COLL_RS ? (size_t)my_len : (size_t)count;
  const size_t in_bytes = in_elems * es_in, out_bytes = out_elems * es_out;
  /* `in` is needed even where this rank's slice is empty (AllGather): its
   * offset names every peer's `in` */
  if (!in) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: in=NULL must point into loom_malloc memory", fn);
  const char *in_c = (const char *)in, *out_c = (const char *)out;
  const int same_type = d->dtype == d->out_type;
  /* in place, each op its own way; the shifted one's pointer is aligned
   * or not as its slice begin falls (the kernel addresses the other) */
  const int ag_ip = kind == LOOM__COLL_AG && out && in_c == out_c + (size_t)my_begin * es_out;
  const int rs_ip = kind == LOOM__COLL_RS && out && my_len > 0 && out_c == in_c + (size_t)my_begin * es_in && same_type;
  const int ar_ip = kind == LOOM__COLL_AR && in == out && same_type;
  *in_place = ag_ip || rs_ip || ar_ip;
  if (!ag_ip && (uintptr_t)in % 16 != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: in=%p is not 16-byte aligned", fn, in);
  if (out_elems > 0) {
    if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: out=NULL (%zu elements on rank %d)", fn, out_elems, comm->rank);
    const loom_buf_t o = {"out", out, out_bytes, rs_ip ? 0u : LOOM_BUF_ALIGN16, NULL};
    LOOM_TRY(loom__check_buf(fn, comm, &o));
  }
  /* `in`: symmetric (peers load it); AllGather: every rank's slice at the
   * same offset of its `in` (room for the largest slice), or, in place, at
   * its begin in every rank's `out` (then out is symmetric) */
  const loom_buf_t sym = ag_ip ? (loom_buf_t){"out", out, out_bytes, LOOM_BUF_SYMMETRIC,
                                              "an in-place AllGather's peers load from it: allocate it with loom_malloc"}
                               : (loom_buf_t){"in", in,
                                              kind == LOOM__COLL_AG ? (size_t)(slice < count ? slice : count) * es_in
                                                                    : in_bytes,
                                              LOOM_BUF_SYMMETRIC,
                                              "peers load from it: allocate it with loom_malloc (same offset on every "
                                              "rank)"};
  LOOM_TRY(loom__check_buf(fn, comm, &sym));
  if (*in_place || !overlaps(in, in_bytes, out, out_bytes)) return LOOM_SUCCESS;
  if (kind == LOOM__COLL_AR)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: in=%p and out=%p overlap without being equal (in place needs out == in and out_type == dtype)",
                      fn, in, out);
  if (kind == LOOM__COLL_RS)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: in=%p and out=%p overlap; in place needs out == in + this rank's slice begin (%lld elements) "
                      "and out_type == dtype",
                      fn, in, out, (long long)my_begin);
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                    "%s: in=%p and out=%p overlap; in place needs in == out + this rank's slice begin (%lld elements)",
                    fn, in, out, (long long)my_begin);
}

loom_result_t loom__coll_check_call(const char *fn, int kind, loom_comm_t comm, const loom_coll_desc_t *d,
                                    const void *in, void *out, const loom_epilogue_t *epi, const void *norm_w,
                                    const void *norm_b, int *in_place, loom_pointwise_t *pw) {
  const int64_t unit = loom__coll_unit(d->cols), slice = loom__coll_slice_elems(d->count, comm->size, unit);
  int64_t my_begin, my_len;
  loom__coll_slice(d->count, comm->size, comm->rank, unit, &my_begin, &my_len);
  LOOM_TRY(check_in_out(fn, kind, comm, d, my_begin, my_len, slice, in, out, in_place));
  memset(pw, 0, sizeof *pw);
  if (kind == LOOM__COLL_AG) return LOOM_SUCCESS;
  const size_t out_elems = kind == LOOM__COLL_RS ? (size_t)my_len : (size_t)d->count;
  return check_epilogue(fn, kind, d, my_begin, out_elems, epi, norm_w, norm_b, pw);
}

/* The call: checks, the peers' addresses of `in`, the kernel. */
static loom_result_t coll_call(loom_plan_t plan, int kind, const char *fn, const void *in, void *out,
                               const loom_epilogue_t *epi, const void *norm_w, const void *norm_b, cudaStream_t stream) {
  loom_coll_state_t *st = NULL;
  LOOM_TRY(loom__call_enter(plan, fn, NULL, coll_op(kind), stream, (void **)&st));
  loom_comm_t comm = plan->comm;
  const loom_coll_desc_t *d = &st->desc;
  const size_t es_out = loom_dtype_size(d->out_type);
  loom_coll_args_t a;
  memset(&a, 0, sizeof a);
  LOOM_TRY(loom__coll_check_call(fn, kind, comm, d, in, out, epi, norm_w, norm_b, &a.in_place, &a.pw));
  /* every rank's `in` (AllGather in place: its slice of `out`) as this rank's kernel addresses it */
  char *peer[LOOM_COLL_MAX_PEERS];
  const int ag_ip = kind == LOOM__COLL_AG && a.in_place;
  LOOM_TRY(loom__peer_addresses(fn, ag_ip ? "out" : "in", comm, ag_ip ? (const void *)out : in, 1, "", peer));
  for (int p = 0; p < st->world; ++p) {
    int64_t qb = 0, ql;
    if (ag_ip) loom__coll_slice(d->count, st->world, p, st->unit, &qb, &ql);
    a.src[p] = peer[p] + (size_t)qb * es_out;
  }
  a.dc = loom__comm_dev(comm);
  a.epoch_off = plan->epoch_offset;
  a.sig_off = plan->signals_offset;
  a.kind = (int)st->kk;
  a.in_type = (int)d->dtype;
  a.out_type = (int)d->out_type;
  a.count = d->count;
  a.cols = d->cols;
  a.unit = st->unit;
  a.chunk = st->chunk;
  a.nch = st->nch;
  a.norm = (int)d->norm;
  a.eps = d->norm_eps;
  a.norm_w = norm_w;
  a.norm_b = norm_b;
  for (int p = 0; p < st->world; ++p) a.stg[p] = st->stg_peer[p];
  a.stg_own = (char *)st->staging;
  /* ReduceScatter in place: the kernel stores element i at in[i] (out is
   * in + this rank's slice begin, aligned or not) */
  a.out = kind == LOOM__COLL_RS && a.in_place ? (char *)in : (char *)out;
  (void)loom__plan_next_epoch(plan);
  /* Hopper only: there the sm_90a code (which waits, griddepcontrol) runs; any later GPU runs the
   * compute_80 PTX, which has no wait and so must not start before the previous kernel ends */
  const int pdl = loom__param_COLL_PDL() != 0 && !comm->world && comm->cc_major == 9;
  LOOM_TRY(loom__coll_launch(&a, st->blocks, st->smem, pdl, stream));
  return loom__call_exit(plan, stream, NULL);
}

loom_result_t loom_allreduce(loom_plan_t plan, const void *in, void *out, const loom_epilogue_t *epi,
                             const void *norm_weight, const void *norm_bias, cudaStream_t stream) {
  return coll_call(plan, LOOM__COLL_AR, "loom_allreduce", in, out, epi, norm_weight, norm_bias, stream);
}

loom_result_t loom_reduce_scatter(loom_plan_t plan, const void *in, void *out, const loom_epilogue_t *epi,
                                  const void *norm_weight, const void *norm_bias, cudaStream_t stream) {
  return coll_call(plan, LOOM__COLL_RS, "loom_reduce_scatter", in, out, epi, norm_weight, norm_bias, stream);
}

loom_result_t loom_all_gather(loom_plan_t plan, const void *in, void *out, cudaStream_t stream) {
  return coll_call(plan, LOOM__COLL_AG, "loom_all_gather", in, out, NULL, NULL, NULL, stream);
}
