/*
 * gemm_grouped.c - loom_gemm_grouped: the argument checks (pure host code,
 * host-tested with fake pointers), then whether the GPU can reach each
 * buffer, then the sm90 launcher (gemm_grouped_sm90.cu). The contract is
 * loom.h's; the schedule (which tile of which group a block computes, and
 * how a malformed offsets table is clamped) is gemm/grouped_schedule.h.
 */
#include <stdint.h>

#include "core/error.h"
#include "core/ptr_check.h"
#include "core/util.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"

/* Bytes of A, B (all groups), C and the bias (all groups); validated
 * descriptions only (every product below 2^62). */
typedef struct { size_t a, b, c, bias, offsets; } loom__grouped_bytes_t;
static loom__grouped_bytes_t loom__grouped_bytes(const loom_grouped_gemm_desc_t *d) {
  const size_t es_ab = loom_dtype_size(d->ab_type), es_c = loom_dtype_size(d->c_type), G = (size_t)d->groups;
  loom__grouped_bytes_t s;
  s.a = (size_t)d->max_rows * (size_t)d->k * es_ab;
  s.b = G * (size_t)d->n * (size_t)d->k * es_ab;
  s.c = (size_t)d->max_rows * (size_t)d->n * es_c;
  s.bias = d->has_bias ? G * (size_t)d->n * es_c : 0;
  s.offsets = (G + 1) * sizeof(int64_t);
  return s;
}

/* The description: the plain GEMM's checks of (max_rows, n, k, types,
 * layout, bias flag), then the groups. */
loom_result_t loom__grouped_validate_desc(const char *fn, const loom_grouped_gemm_desc_t *d) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL must point to a loom_grouped_gemm_desc_t", fn);
  if (d->struct_size != sizeof(loom_grouped_gemm_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_GROUPED_GEMM_DESC_INIT; header "
                      "and library differ?)",
                      fn, d->struct_size, sizeof(loom_grouped_gemm_desc_t));
  if (d->groups < 1 || d->groups > LOOM_GROUPED_GEMM_MAX_GROUPS)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: groups=%d must be in [1, %d]", fn, d->groups,
                      LOOM_GROUPED_GEMM_MAX_GROUPS);
  if (d->max_rows < 1 || d->max_rows > INT32_MAX / 2)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: max_rows=%lld must be in [1, %d]", fn, (long long)d->max_rows,
                      INT32_MAX / 2);
  if (d->rows_hint < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: rows_hint=%lld must be >= 0 (0: unknown)", fn,
                      (long long)d->rows_hint);
  const loom_gemm_desc_t e = LOOM_GEMM_DESC(d->max_rows, d->n, d->k, d->ab_type, d->c_type, d->b_layout, d->has_bias);
  LOOM_TRY(loom__gemm_validate_desc(fn, &e));
  if (d->n > INT32_MAX / 2 || d->k > INT32_MAX / 2)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: n=%lld, k=%lld: each must be <= %d", fn, (long long)d->n,
                      (long long)d->k, INT32_MAX / 2);
  const int64_t lim = INT64_C(1) << 62;
  if ((int64_t)d->groups > lim / 4 / d->n / d->k)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: groups=%d x n=%lld x k=%lld: B is too large", fn, d->groups,
                      (long long)d->n, (long long)d->k);
  /* the kernel's int32 tile prefix: every group clamped to all rows, 64-row
   * tiles of 128 columns (grouped_schedule.h) */
  const int64_t worst = (int64_t)d->groups * ((d->max_rows + 63) / 64) * ((d->n + 127) / 128);
  if (worst > INT32_MAX)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: groups=%d, max_rows=%lld, n=%lld: up to %lld tiles, more than the kernel counts (2^31 - 1)",
                      fn, d->groups, (long long)d->max_rows, (long long)d->n, (long long)worst);
  return LOOM_SUCCESS;
}

loom_result_t loom__grouped_validate(const char *fn, const loom_grouped_gemm_desc_t *d, const void *a, const void *b,
                                     const void *c, const void *bias, const int64_t *offsets) {
  if (!fn) fn = "loom_gemm_grouped";
  LOOM_TRY(loom__grouped_validate_desc(fn, d));
  const struct { const char *name; const void *p; unsigned align; } ptrs[4] = {
      {"a", a, 16}, {"b", b, 16}, {"c", c, 16}, {"offsets", offsets, 8}};
  for (int i = 0; i < 4; ++i) {
    if (!ptrs[i].p)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=NULL must be a device pointer", fn, ptrs[i].name);
    if ((uintptr_t)ptrs[i].p % ptrs[i].align != 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p is not %u-byte aligned", fn, ptrs[i].name, ptrs[i].p,
                        ptrs[i].align);
  }
  if (d->has_bias && !bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bias=NULL while has_bias=1 (bias [groups=%d, n=%lld] needed)",
                      fn, d->groups, (long long)d->n);
  if (!d->has_bias && bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bias=%p given while has_bias=0 (set has_bias=1 or pass NULL)",
                      fn, bias);
  if (bias && (uintptr_t)bias % 16 != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bias=%p is not 16-byte aligned", fn, bias);
  const loom__grouped_bytes_t s = loom__grouped_bytes(d);
  const struct { const char *name; const void *p; size_t bytes; } other[3] = {
      {"a", a, s.a}, {"b", b, s.b}, {"bias", bias, s.bias}};
  for (int i = 0; i < 3; ++i)
    if (other[i].p && loom__ranges_overlap(c, s.c, other[i].p, other[i].bytes))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: c=%p overlaps %s=%p: C must not alias it", fn, c,
                        other[i].name, other[i].p);
  return LOOM_SUCCESS;
}

loom_result_t loom_gemm_grouped(const loom_grouped_gemm_desc_t *desc, const void *a, const void *b, void *c,
                                const void *bias, const int64_t *offsets, cudaStream_t stream) {
  static const char fn[] = "loom_gemm_grouped";
  LOOM_TRY(loom__grouped_validate(fn, desc, a, b, c, bias, offsets));
  const loom__grouped_bytes_t s = loom__grouped_bytes(desc);
  LOOM_TRY(loom__check_device_ptr(fn, "a", a, s.a));
  LOOM_TRY(loom__check_device_ptr(fn, "b", b, s.b));
  LOOM_TRY(loom__check_device_ptr(fn, "c", c, s.c));
  LOOM_TRY(loom__check_device_ptr(fn, "offsets", offsets, s.offsets));
  if (bias) LOOM_TRY(loom__check_device_ptr(fn, "bias", bias, s.bias));
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  const loom_gemm_desc_t e =
      LOOM_GEMM_DESC(desc->max_rows, desc->n, desc->k, desc->ab_type, desc->c_type, desc->b_layout, desc->has_bias);
  if (!dev.sm90 || !loom__gemm_sm90_supported(&e, dev.cc_major, dev.cc_minor))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: the grouped GEMM runs loom's Hopper kernel (compute capability 9.0, library built with "
                      "sm_90a code); this GPU is %d.%d",
                      fn, dev.cc_major, dev.cc_minor);
  return loom__gemm_grouped_sm90(desc, a, b, c, bias, offsets, NULL, 0, stream);
}
