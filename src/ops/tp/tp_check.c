/*
 * tp_check.c - the argument checks of one tensor-parallel call
 * (loom_ag_gemm, loom_gemm_rs, loom_gemm_ar), from the plan's description
 * and the call's arguments alone.
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

#include "core/comm.h"
#include "core/error.h"
#include "core/ptr_check.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

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
