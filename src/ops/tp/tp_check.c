/*
 * tp_check.c - the argument checks of the tensor-parallel ops: a plan's
 * description (loom_plan_ag_gemm, loom_plan_gemm_rs, loom_plan_gemm_ar:
 * from the description and the comm's facts alone), and one call's
 * (loom_ag_gemm, loom_gemm_rs, loom_gemm_ar: from the plan's description
 * and the call's arguments alone).
 *
 * The checks never see the transfer a plan resolved to: what a call must
 * pass is set by the description the caller wrote (desc.transfer as asked,
 * AUTO included), so the same call is refused or accepted whatever AUTO
 * chose on this machine, shape or tuning cache. Where one transfer needs
 * more of an argument than another (gemm_ar's out: peers store into it when
 * fused), AUTO asks what the most demanding transfer it may take needs.
 * Every pointer goes through loom__check_buf (core/ptr_check.h): NULL,
 * alignment, reachable memory with every byte the call touches inside its
 * allocation, and symmetric memory where peers reach it.
 */
#include <stdint.h>
#include <stdio.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/ptr_check.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

/* ---- the description -------------------------------------------------------- */

/* The description's header and its GEMM. */
static loom_result_t tp_check_gemm(const char *fn, int comm_size, const loom_tp_desc_t *d) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL must point to a loom_tp_desc_t", fn);
  if (d->struct_size != sizeof(loom_tp_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_TP_DESC_INIT; header and "
                      "library differ?)",
                      fn, d->struct_size, sizeof(loom_tp_desc_t));
  if (d->world_size != comm_size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->world_size=%d differs from the comm's size %d", fn,
                      d->world_size, comm_size);
  char gfn[96];
  snprintf(gfn, sizeof gfn, "%s: desc", fn);
  const loom_gemm_desc_t g = loom__tp_gemm_desc(d);
  LOOM_TRY(loom__gemm_validate_desc(gfn, &g));
  return LOOM_SUCCESS;
}

/* The activation and bias each op takes in its description. */
static loom_result_t tp_check_epilogue(const char *fn, int kind, const loom_tp_desc_t *d) {
  if (d->activation < LOOM_ACT_NONE || d->activation > LOOM_ACT_GELU_ERF)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->activation=%d is unknown: must be LOOM_ACT_NONE, _RELU, _GELU_TANH or _GELU_ERF", fn,
                      (int)d->activation);
  if (kind == LOOM__TP_RS && d->activation != LOOM_ACT_NONE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->activation=%d: GEMM+ReduceScatter takes no activation (it would apply to each "
                      "rank's partial sum): must be LOOM_ACT_NONE",
                      fn, (int)d->activation);
  if (kind == LOOM__TP_AR && d->activation != LOOM_ACT_NONE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->activation=%d: GEMM+AllReduce takes its activation from the call's epilogue "
                      "(loom_epilogue_t.activation, applied to the sum over ranks): must be LOOM_ACT_NONE",
                      fn, (int)d->activation);
  if (kind == LOOM__TP_AR && d->has_bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->has_bias=%d: GEMM+AllReduce takes its bias from the call's epilogue "
                      "(loom_epilogue_t.bias, added once to the sum over ranks): must be 0",
                      fn, d->has_bias);
  return LOOM_SUCCESS;
}

/* The transfers each op offers. */
static loom_result_t tp_check_transfer(const char *fn, int kind, const loom_tp_desc_t *d, int all_reachable) {
  if (d->transfer < LOOM_TP_AUTO || d->transfer > LOOM_TP_DECOMPOSED)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=%d is unknown: must be LOOM_TP_AUTO, _SEQUENTIAL, _COPY_ENGINE, _SM_COPY, "
                      "_SM_ATOMIC, _BULK_REDUCE or _DECOMPOSED",
                      fn, (int)d->transfer);
  if (kind == LOOM__TP_AR && d->transfer == LOOM_TP_DECOMPOSED)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_DECOMPOSED is not offered for GEMM+AllReduce (its sequential "
                      "path is already one GEMM and loom_allreduce with the epilogue): use LOOM_TP_SM_COPY, "
                      "LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (kind != LOOM__TP_RS && d->transfer == LOOM_TP_BULK_REDUCE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_BULK_REDUCE is a GEMM+ReduceScatter transfer (bulk reductions "
                      "into the owners' rows): use LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (d->transfer == LOOM_TP_BULK_REDUCE && !loom__tp_bulk_shape_ok(d->m, d->world_size))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: desc->transfer=LOOM_TP_BULK_REDUCE needs m=%lld to be world_size=%d equal shards of a "
                      "multiple of %d rows (the epilogue's chunks each add into one owner): use LOOM_TP_SM_COPY or "
                      "LOOM_TP_SEQUENTIAL",
                      fn, (long long)d->m, d->world_size, LOOM_TP_BULK_ROWS);
  if (kind == LOOM__TP_AG && d->transfer == LOOM_TP_SM_ATOMIC)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_SM_ATOMIC is a GEMM+ReduceScatter reduction: AllGather+GEMM takes "
                      "LOOM_TP_COPY_ENGINE, LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_RS && d->transfer == LOOM_TP_COPY_ENGINE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_COPY_ENGINE is not offered for GEMM+ReduceScatter (the "
                      "partials are reduced by SMs): use LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_AR && d->transfer == LOOM_TP_COPY_ENGINE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_COPY_ENGINE is not offered for GEMM+AllReduce (the partials "
                      "are reduced, and the epilogue applied, by SMs): use LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or "
                      "LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_AR && d->transfer == LOOM_TP_SM_ATOMIC)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_SM_ATOMIC is not offered for GEMM+AllReduce (the epilogue "
                      "needs each sum complete before it runs, and the fused sum is deterministic): use "
                      "LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_AR && !all_reachable)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: not every rank is load/store reachable (GEMM+AllReduce, fused or sequential through "
                      "loom_allreduce, needs one NVLink domain): use loom_gemm and ncclAllReduce across nodes",
                      fn);
  return LOOM_SUCCESS;
}

/* The knobs: the sequential GEMM, chunk rows, communication blocks. */
static loom_result_t tp_check_knobs(const char *fn, int sm_count, const loom_tp_desc_t *d) {
  if (d->sequential_gemm < LOOM_TP_GEMM_AUTO || d->sequential_gemm > LOOM_TP_GEMM_CUBLASLT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->sequential_gemm=%d is unknown: must be LOOM_TP_GEMM_AUTO, _LOOM or _CUBLASLT", fn,
                      (int)d->sequential_gemm);
  if (d->sequential_gemm == LOOM_TP_GEMM_CUBLASLT && !loom__tp_cublaslt_takes(d->ab_type, d->c_type))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: desc->sequential_gemm=LOOM_TP_GEMM_CUBLASLT: cuBLASLt has no GEMM of %s inputs with %s "
                      "output: use LOOM_TP_GEMM_LOOM or LOOM_TP_GEMM_AUTO",
                      fn, loom__dtype_name(d->ab_type), loom__dtype_name(d->c_type));
  if (d->chunk_rows < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->chunk_rows=%d must be >= 0 (0: chosen by the plan)", fn,
                      d->chunk_rows);
  if (d->comm_blocks < 0 || (sm_count > 0 && d->comm_blocks >= sm_count))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->comm_blocks=%d must be in [0, %d) (0: chosen by the plan; the GEMM keeps the "
                      "other SMs)",
                      fn, d->comm_blocks, sm_count);
  return LOOM_SUCCESS;
}

/* The fused paths can run here: every peer load/store reachable, loom's
 * GEMM kernels able to carry hooks, at most LOOM_TP_MAX_PEERS ranks. */
static int tp_fused_possible(int comm_size, int all_reachable, int hooks_ok) {
  return all_reachable && hooks_ok && comm_size <= LOOM_TP_MAX_PEERS;
}

int loom__tp_fused(loom_tp_transfer_t t) {
  return t != LOOM_TP_AUTO && t != LOOM_TP_SEQUENTIAL && t != LOOM_TP_DECOMPOSED;
}

/* A fused transfer asked for where it cannot run. */
static loom_result_t tp_check_fused(const char *fn, int comm_size, loom_tp_transfer_t t, int all_reachable,
                                    int hooks_ok) {
  if (!loom__tp_fused(t) || tp_fused_possible(comm_size, all_reachable, hooks_ok)) return LOOM_SUCCESS;
  return loom__fail(LOOM_ERR_UNSUPPORTED,
                    "%s: desc->transfer=%s needs every peer load/store reachable (%s), loom's GEMM kernels "
                    "(compute capability >= 8.0: %s) and at most %d ranks (%d): use LOOM_TP_SEQUENTIAL or "
                    "LOOM_TP_DECOMPOSED",
                    fn, loom__tp_transfer_name(t), all_reachable ? "yes" : "no", hooks_ok ? "yes" : "no",
                    LOOM_TP_MAX_PEERS, comm_size);
}

loom_tp_transfer_t loom__tp_auto_transfer(int kind, int comm_size, const loom_tp_desc_t *d, int all_reachable,
                                          int hooks_ok) {
  /* AG with shards of fewer rows than the hooked GEMMs' smallest tile:
   * every tile row then holds rows of another rank, so no tile can run
   * before remote data has arrived and the fused path can hide nothing
   * (it only adds its protocol: 0.70-0.82 of NCCL + cuBLASLt at m = 64,
   * W = 2, docs/perf/tp.md, "Shards shorter than a tile"); the sequential
   * path is the baseline itself */
  const int can_overlap = kind != LOOM__TP_AG || loom__tp_shard_rows(d->m, comm_size) >= LOOM_TP_MIN_TILE_ROWS;
  /* RS: the bulk reduction where its shape rule holds (the plan falls
   * back to SM_COPY where the GEMM cannot run it: not sm90) */
  const loom_tp_transfer_t rs =
      kind == LOOM__TP_RS && loom__tp_bulk_shape_ok(d->m, comm_size) ? LOOM_TP_BULK_REDUCE : LOOM_TP_SM_COPY;
  if (comm_size > 1 && tp_fused_possible(comm_size, all_reachable, hooks_ok) && can_overlap)
    return kind == LOOM__TP_AG ? LOOM_TP_COPY_ENGINE : rs;
  return LOOM_TP_SEQUENTIAL;
}

loom_result_t loom__tp_check_desc(const char *fn, int kind, int comm_size, int sm_count, const loom_tp_desc_t *d,
                                  loom_tp_transfer_t *resolved, int all_reachable, int hooks_ok) {
  LOOM_TRY(tp_check_gemm(fn, comm_size, d));
  LOOM_TRY(tp_check_epilogue(fn, kind, d));
  LOOM_TRY(tp_check_transfer(fn, kind, d, all_reachable));
  LOOM_TRY(tp_check_knobs(fn, sm_count, d));
  LOOM_TRY(tp_check_fused(fn, comm_size, d->transfer, all_reachable, hooks_ok));
  *resolved = d->transfer == LOOM_TP_AUTO ? loom__tp_auto_transfer(kind, comm_size, d, all_reachable, hooks_ok)
                                          : d->transfer;
  return LOOM_SUCCESS;
}

loom_result_t loom__tp_check_choice(const char *fn, int kind, int comm_size, int sm_count, const loom_tp_desc_t *d,
                                    const loom_tp_choice_t *c, int all_reachable, int hooks_ok) {
  loom_tp_desc_t e = *d;
  e.transfer = c->transfer, e.chunk_rows = c->chunk_rows, e.comm_blocks = c->comm_blocks, e.sequential_gemm = c->gemm;
  LOOM_TRY(tp_check_transfer(fn, kind, &e, all_reachable));
  LOOM_TRY(tp_check_knobs(fn, sm_count, &e));
  return tp_check_fused(fn, comm_size, e.transfer, all_reachable, hooks_ok);
}

/* ---- a call ------------------------------------------------------------------ */

/* [a, a + an) and [b, b + bn) share a byte. */
static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a && b && an > 0 && bn > 0 && x < y + bn && y < x + an;
}

/* The call's output `out` (named `name`) must not share bytes with what it
 * reads: a fused call writes it while its GEMM still reads the inputs. */
static loom_result_t check_no_alias(const char *fn, const char *name, const void *out, size_t out_bytes,
                                    const loom_buf_t *in, int nin) {
  for (int i = 0; i < nin; ++i)
    if (overlaps(out, out_bytes, in[i].p, in[i].bytes))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p overlaps %s=%p: the output must not alias an input", fn,
                        name, out, in[i].name, in[i].p);
  return LOOM_SUCCESS;
}

static loom_result_t check_bias_given(const char *fn, const loom_tp_desc_t *d, const void *bias) {
  if (d->has_bias && !bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bias=NULL while has_bias=1 (bias [n=%lld] needed)", fn,
                      (long long)d->n);
  if (!d->has_bias && bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bias=%p given while has_bias=0 (set has_bias=1 or pass NULL)",
                      fn, bias);
  return LOOM_SUCCESS;
}

/* AG: a_shard [my rows, k], b, c [m, n], a_full (optional, symmetric), bias. */
static loom_result_t check_ag(const char *fn, loom_comm_t comm, const loom_tp_desc_t *d, const loom_tp_call_t *c) {
  const size_t es_ab = loom_dtype_size(d->ab_type), es_c = loom_dtype_size(d->c_type);
  const int64_t mine = loom__tp_shard_len(d->m, comm->size, comm->rank);
  if (mine > 0 && !c->a)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: a_shard=NULL: this rank owns %lld rows", fn, (long long)mine);
  LOOM_TRY(check_bias_given(fn, d, c->bias));
  const loom_buf_t in[4] = {
      {"a_shard", mine > 0 ? c->a : NULL, (size_t)mine * (size_t)d->k * es_ab, LOOM_BUF_OPTIONAL | LOOM_BUF_ALIGN16, NULL},
      {"b", c->b, (size_t)d->k * (size_t)d->n * es_ab, LOOM_BUF_ALIGN16, NULL},
      {"bias", c->bias, (size_t)d->n * es_c, LOOM_BUF_OPTIONAL | LOOM_BUF_ALIGN16, NULL},
      {"a_full", c->a_full, (size_t)d->m * (size_t)d->k * es_ab,
       LOOM_BUF_OPTIONAL | LOOM_BUF_ALIGN16 | LOOM_BUF_SYMMETRIC,
       "peers store their rows into it, so it must be symmetric memory (or pass NULL to use the plan's own "
       "buffer)"}};
  const loom_buf_t out = {"c", c->c, (size_t)d->m * (size_t)d->n * es_c, LOOM_BUF_ALIGN16, NULL};
  LOOM_TRY(loom__check_bufs(fn, comm, in, 4));
  LOOM_TRY(loom__check_buf(fn, comm, &out));
  return check_no_alias(fn, "c", out.p, out.bytes, in, 4);
}

/* RS: a [m, k], b, c_shard [my rows, n], bias. */
static loom_result_t check_rs(const char *fn, loom_comm_t comm, const loom_tp_desc_t *d, const loom_tp_call_t *c) {
  const size_t es_ab = loom_dtype_size(d->ab_type), es_c = loom_dtype_size(d->c_type);
  const int64_t mine = loom__tp_shard_len(d->m, comm->size, comm->rank);
  if (mine > 0 && !c->c)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: c_shard=NULL: this rank owns %lld rows", fn, (long long)mine);
  LOOM_TRY(check_bias_given(fn, d, c->bias));
  const loom_buf_t in[3] = {{"a", c->a, (size_t)d->m * (size_t)d->k * es_ab, LOOM_BUF_ALIGN16, NULL},
                            {"b", c->b, (size_t)d->k * (size_t)d->n * es_ab, LOOM_BUF_ALIGN16, NULL},
                            {"bias", c->bias, (size_t)d->n * es_c, LOOM_BUF_OPTIONAL | LOOM_BUF_ALIGN16, NULL}};
  const loom_buf_t out = {"c_shard", mine > 0 ? c->c : NULL, (size_t)mine * (size_t)d->n * es_c,
                          LOOM_BUF_OPTIONAL | LOOM_BUF_ALIGN16, NULL};
  LOOM_TRY(loom__check_bufs(fn, comm, in, 3));
  LOOM_TRY(loom__check_buf(fn, comm, &out));
  return check_no_alias(fn, "c_shard", out.p, out.bytes, in, 3);
}

/* AR: a [m, k], b, out [m, n] (symmetric unless the plan asked for the
 * sequential path), the epilogue and its bias [n] and residual [m, n]. */
static loom_result_t check_ar(const char *fn, loom_comm_t comm, const loom_tp_desc_t *d, const loom_tp_call_t *c,
                              loom_pointwise_t *pw) {
  const size_t es_ab = loom_dtype_size(d->ab_type), es_c = loom_dtype_size(d->c_type);
  const size_t out_bytes = (size_t)d->m * (size_t)d->n * es_c;
  const unsigned sym = d->transfer == LOOM_TP_SEQUENTIAL ? 0u : LOOM_BUF_SYMMETRIC;
  const loom_buf_t in[2] = {{"a", c->a, (size_t)d->m * (size_t)d->k * es_ab, LOOM_BUF_ALIGN16, NULL},
                            {"b", c->b, (size_t)d->k * (size_t)d->n * es_ab, LOOM_BUF_ALIGN16, NULL}};
  const loom_buf_t out = {"out", c->c, out_bytes, LOOM_BUF_ALIGN16 | sym,
                          "peers store their reduced rows into it unless the plan was made with LOOM_TP_SEQUENTIAL: "
                          "allocate it with loom_malloc (same offset on every rank)"};
  LOOM_TRY(loom__check_bufs(fn, comm, in, 2));
  LOOM_TRY(loom__check_buf(fn, comm, &out));
  LOOM_TRY(check_no_alias(fn, "out", out.p, out.bytes, in, 2));
  LOOM_TRY(loom__pointwise_make(fn, c->epi, d->c_type, d->n, pw));
  if (pw->flags & LOOM_PW_BIAS) {
    const loom_buf_t bias = {"epilogue->bias", pw->bias, (size_t)d->n * es_c, 0, NULL};
    LOOM_TRY(loom__check_buf(fn, comm, &bias));
  }
  if (pw->flags & LOOM_PW_RESIDUAL) {
    const loom_buf_t res = {"epilogue->residual", pw->residual, out_bytes, 0, NULL};
    LOOM_TRY(loom__check_buf(fn, comm, &res));
  }
  return LOOM_SUCCESS;
}

loom_result_t loom__tp_check_call(const char *fn, int kind, loom_comm_t comm, const loom_tp_desc_t *d,
                                  const loom_tp_call_t *c, loom_pointwise_t *pw) {
  if (kind == LOOM__TP_AG) return check_ag(fn, comm, d, c);
  if (kind == LOOM__TP_RS) return check_rs(fn, comm, d, c);
  return check_ar(fn, comm, d, c, pw);
}
