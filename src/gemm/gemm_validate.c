/*
 * gemm_validate.c - the argument checks of every public GEMM entry point
 * (loom_gemm, loom_gemm_tune, and the fused ops through loom__gemm_hooked):
 * the description and the pointers' values (loom__gemm_validate, pure host
 * code, host-tested with fake pointers), then whether the GPU can reach each
 * buffer over the bytes the GEMM touches (loom__gemm_check_args, through
 * core/ptr_check.h), so that a host pointer, a freed pointer or another
 * GPU's pointer is LOOM_ERR_INVALID_ARGUMENT naming the argument instead of
 * an illegal-address fault that kills the process's CUDA context.
 */
#include <stdint.h>

#include "core/error.h"
#include "core/ptr_check.h"
#include "core/util.h"
#include "gemm/gemm.h"

static const char *loom__dtype_enum_name(loom_dtype_t t) {
  switch (t) {
    case LOOM_FP32: return "LOOM_FP32";
    case LOOM_FP16: return "LOOM_FP16";
    case LOOM_BF16: return "LOOM_BF16";
  }
  return "unknown";
}

/* Upper bound on one GEMM dimension (kernels index with 32-bit ints). */
#define LOOM_GEMM_MAX_DIM INT64_C(2147483647)

loom_result_t loom__gemm_validate_desc(const char *fn, const loom_gemm_desc_t *d) {
  if (!fn) fn = "loom_gemm";
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL must point to a loom_gemm_desc_t", fn);
  if (d->struct_size != sizeof(loom_gemm_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_GEMM_DESC or "
                      "LOOM_GEMM_DESC_INIT; header and library differ?)",
                      fn, d->struct_size, sizeof(loom_gemm_desc_t));
  const struct { const char *name; int64_t v; int mult8; } dims[3] = {
      {"m", d->m, 0}, {"n", d->n, 1}, {"k", d->k, 1}};
  for (int i = 0; i < 3; ++i) {
    if (dims[i].v < 1)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%lld must be >= 1", fn, dims[i].name,
                        (long long)dims[i].v);
    if (dims[i].v > LOOM_GEMM_MAX_DIM)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%lld must be <= %lld", fn, dims[i].name,
                        (long long)dims[i].v, (long long)LOOM_GEMM_MAX_DIM);
    if (dims[i].mult8 && dims[i].v % 8 != 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%lld must be a multiple of 8", fn,
                        dims[i].name, (long long)dims[i].v);
  }
  if (d->ab_type != LOOM_BF16 && d->ab_type != LOOM_FP16)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: ab_type=%d (%s) must be LOOM_BF16 or LOOM_FP16",
                      fn, (int)d->ab_type, loom__dtype_enum_name(d->ab_type));
  if (d->c_type != LOOM_BF16 && d->c_type != LOOM_FP16 && d->c_type != LOOM_FP32)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: c_type=%d (%s) must be LOOM_BF16, LOOM_FP16 or LOOM_FP32", fn,
                      (int)d->c_type, loom__dtype_enum_name(d->c_type));
  if (d->b_layout != LOOM_B_KN && d->b_layout != LOOM_B_NK)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: b_layout=%d is unknown: must be LOOM_B_KN (0) or LOOM_B_NK (1)", fn,
                      (int)d->b_layout);
  if (d->has_bias != 0 && d->has_bias != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: has_bias=%d must be 0 or 1", fn, d->has_bias);

  /* Byte sizes: every product below 2^62 (dims are < 2^31, elements <= 4 bytes). */
  const int64_t es_ab = (int64_t)loom_dtype_size(d->ab_type), es_c = (int64_t)loom_dtype_size(d->c_type);
  const int64_t lim = INT64_C(1) << 62;
  if (d->m > lim / es_ab / d->k)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: m=%lld x k=%lld: A is too large", fn,
                      (long long)d->m, (long long)d->k);
  if (d->n > lim / es_ab / d->k)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: k=%lld x n=%lld: B is too large", fn,
                      (long long)d->k, (long long)d->n);
  if (d->m > lim / es_c / d->n)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: m=%lld x n=%lld: C is too large", fn,
                      (long long)d->m, (long long)d->n);
  return LOOM_SUCCESS;
}

/* The description, a, b and the bias (everything but C). */
static loom_result_t validate_inputs(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                     const void *bias) {
  LOOM_TRY(loom__gemm_validate_desc(fn, d));
  const struct { const char *name; const void *p; } ptrs[2] = {{"a", a}, {"b", b}};
  for (int i = 0; i < 2; ++i) {
    if (!ptrs[i].p)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=NULL must be a device pointer", fn,
                        ptrs[i].name);
    if ((uintptr_t)ptrs[i].p % 16 != 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p is not 16-byte aligned", fn,
                        ptrs[i].name, ptrs[i].p);
  }
  if (d->has_bias && !bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bias=NULL while has_bias=1 (bias [n=%lld] needed)",
                      fn, (long long)d->n);
  if (!d->has_bias && bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: bias=%p given while has_bias=0 (set has_bias=1 or pass NULL)", fn, bias);
  if (bias && (uintptr_t)bias % 16 != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bias=%p is not 16-byte aligned", fn, bias);
  return LOOM_SUCCESS;
}

loom_result_t loom__gemm_validate_no_c(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                       const void *bias) {
  return validate_inputs(fn ? fn : "loom_gemm", d, a, b, bias);
}

loom_result_t loom__gemm_validate_hooked(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                         const void *c, const void *bias, const loom_gemm_hooks_t *hooks) {
  if (hooks && (hooks->epilogue == LOOM_EPI_BULK_ADD || hooks->row_dst))
    return loom__gemm_validate_no_c(fn, d, a, b, bias);
  return loom__gemm_validate(fn, d, a, b, c, bias);
}

loom_result_t loom__gemm_validate(const char *fn, const loom_gemm_desc_t *d, const void *a,
                                  const void *b, const void *c, const void *bias) {
  if (!fn) fn = "loom_gemm";
  LOOM_TRY(validate_inputs(fn, d, a, b, bias));
  if (!c) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: c=NULL must be a device pointer", fn);
  if ((uintptr_t)c % 16 != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: c=%p is not 16-byte aligned", fn, c);

  const int64_t es_ab = (int64_t)loom_dtype_size(d->ab_type), es_c = (int64_t)loom_dtype_size(d->c_type);
  const size_t a_bytes = (size_t)(d->m * d->k * es_ab), b_bytes = (size_t)(d->k * d->n * es_ab);
  const size_t c_bytes = (size_t)(d->m * d->n * es_c), bias_bytes = (size_t)(d->n * es_c);
  if (loom__ranges_overlap(c, c_bytes, a, a_bytes))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: c=%p overlaps a=%p: C must not alias A", fn, c, a);
  if (loom__ranges_overlap(c, c_bytes, b, b_bytes))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: c=%p overlaps b=%p: C must not alias B", fn, c, b);
  if (bias && loom__ranges_overlap(c, c_bytes, bias, bias_bytes))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: c=%p overlaps bias=%p: C must not alias the bias",
                      fn, c, bias);
  return LOOM_SUCCESS;
}

loom_result_t loom__gemm_check_args(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                    const void *c, const void *bias) {
  LOOM_TRY(loom__gemm_validate(fn, d, a, b, c, bias));
  if (!fn) fn = "loom_gemm";
  /* validated: every product below 2^62 */
  const size_t es_ab = loom_dtype_size(d->ab_type), es_c = loom_dtype_size(d->c_type);
  LOOM_TRY(loom__check_device_ptr(fn, "a", a, (size_t)d->m * (size_t)d->k * es_ab));
  LOOM_TRY(loom__check_device_ptr(fn, "b", b, (size_t)d->k * (size_t)d->n * es_ab));
  LOOM_TRY(loom__check_device_ptr(fn, "c", c, (size_t)d->m * (size_t)d->n * es_c));
  if (bias) LOOM_TRY(loom__check_device_ptr(fn, "bias", bias, (size_t)d->n * es_c));
  return LOOM_SUCCESS;
}
