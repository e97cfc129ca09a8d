/*
 * gemm_inputs.c - see gemm_inputs.h.
 */
#include "gemm_inputs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench.h"
#include "testing/bench_api.h"
#include "ref/ref.h"

static uint64_t bench_set_seed(uint64_t seed, int set, int which) {
  return seed + 1000u * (uint64_t)set + (uint64_t)which;
}

void loom_bench_gemm_inputs_free(loom_bench_gemm_inputs_t *in) {
  for (int i = 0; in->sets && i < in->nsets; ++i) {
    if (in->sets[i].a) cudaFree(in->sets[i].a);
    if (in->sets[i].b) cudaFree(in->sets[i].b);
    if (in->sets[i].c) cudaFree(in->sets[i].c);
  }
  free(in->sets);
  in->sets = NULL;
  in->nsets = 0;
}

loom_result_t loom_bench_gemm_inputs_alloc(loom_bench_gemm_inputs_t *in, const loom_gemm_desc_t *d,
                                           size_t budget_cap, uint64_t seed) {
  memset(in, 0, sizeof *in);
  in->d = *d;
  in->seed = seed;
  const size_t na = (size_t)(d->m * d->k), nb = (size_t)(d->k * d->n), nc = (size_t)(d->m * d->n);
  const size_t bytes_a = na * loom_dtype_size(d->ab_type), bytes_b = nb * loom_dtype_size(d->ab_type);
  const size_t bytes_c = nc * loom_dtype_size(d->c_type);
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) free_b = (size_t)8 << 30;
  size_t budget = free_b / 2;
  if (budget > budget_cap) budget = budget_cap;
  in->nsets = loom_bench_rotation(bytes_a + bytes_b + bytes_c, budget);
  in->sets = (loom_bench_gemm_set_t *)calloc((size_t)in->nsets, sizeof *in->sets);
  if (!in->sets) return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "GEMM input sets: host allocation failed");
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < in->nsets && r == LOOM_SUCCESS; ++i) {
    cudaError_t e = cudaMalloc(&in->sets[i].a, bytes_a);
    if (e == cudaSuccess) e = cudaMalloc(&in->sets[i].b, bytes_b);
    if (e == cudaSuccess) e = cudaMalloc(&in->sets[i].c, bytes_c);
    if (e != cudaSuccess) r = loom_bench_cuda_fail((int)e, "cudaMalloc (GEMM inputs)", __FILE__, __LINE__);
    if (r == LOOM_SUCCESS) r = loom_bench_fill_random(in->sets[i].a, d->ab_type, na, bench_set_seed(seed, i, 0), 1.0);
    if (r == LOOM_SUCCESS) r = loom_bench_fill_random(in->sets[i].b, d->ab_type, nb, bench_set_seed(seed, i, 1), 1.0);
  }
  if (r != LOOM_SUCCESS) loom_bench_gemm_inputs_free(in);
  return r;
}

int64_t loom_bench_gemm_check(const loom_bench_gemm_inputs_t *in, const loom_gemm_desc_t *d, int si, int samples) {
  const size_t es_ab = loom_dtype_size(d->ab_type), es_c = loom_dtype_size(d->c_type);
  const size_t pa = loom_bench_fill_period((size_t)(d->m * d->k)), pb = loom_bench_fill_period((size_t)(d->k * d->n));
  char *ha = (char *)malloc(pa * es_ab), *hb = (char *)malloc(pb * es_ab);
  char *arow = (char *)malloc((size_t)d->k * es_ab), *bcol = (char *)malloc((size_t)d->k * es_ab);
  int64_t wrong = -1;
  if (!ha || !hb || !arow || !bcol) goto out;
  loom_ref_fill_random(d->ab_type, ha, pa, bench_set_seed(in->seed, si, 0), 1.0);
  loom_ref_fill_random(d->ab_type, hb, pb, bench_set_seed(in->seed, si, 1), 1.0);
  const double rtol = d->c_type == LOOM_BF16 ? 1.0 / 128 : d->c_type == LOOM_FP16 ? 1.0 / 1024 : 1e-5;
  wrong = 0;
  uint64_t z = 0x9e3779b97f4a7c15ull;
  for (int s = 0; s < samples; ++s) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t row = s == 0 ? 0 : s == 1 ? d->m - 1 : (int64_t)((z >> 33) % (uint64_t)d->m);
    const int64_t col = s == 0 ? 0 : s == 1 ? d->n - 1 : (int64_t)((z >> 13) % (uint64_t)d->n);
    for (int64_t kk = 0; kk < d->k; ++kk) { /* row of A and column of B, from the fill period */
      const size_t ai = (size_t)(row * d->k + kk) % pa;
      const size_t bi = (d->b_layout == LOOM_B_KN ? (size_t)(kk * d->n + col) : (size_t)(col * d->k + kk)) % pb;
      memcpy(arow + (size_t)kk * es_ab, ha + ai * es_ab, es_ab);
      memcpy(bcol + (size_t)kk * es_ab, hb + bi * es_ab, es_ab);
    }
    loom_gemm_desc_t one = *d;
    one.m = 1, one.n = 1, one.has_bias = 0, one.b_layout = LOOM_B_KN; /* b [k, 1] */
    const double ref = loom_ref_gemm_element(&one, arow, bcol, NULL, 0, 0);
    unsigned char got[4];
    if (cudaMemcpy(got, (const char *)in->sets[si].c + (size_t)(row * d->n + col) * es_c, es_c,
                   cudaMemcpyDeviceToHost) != cudaSuccess) {
      wrong = -1;
      goto out;
    }
    const double v = loom_ref_load(d->c_type, got, 0);
    if (!(fabs(v - ref) <= rtol * fabs(ref) + 1e-4 * sqrt((double)d->k))) wrong++;
  }
out:
  free(ha), free(hb), free(arow), free(bcol);
  return wrong;
}
