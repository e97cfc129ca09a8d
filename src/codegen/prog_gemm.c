/*
 * prog_gemm.c - a program's MatMul on this rank's pieces through loom's
 * GEMM engine (cuBLASLt's where the run is cublaslt+nccl):
 * C [m, n] = A [m, k] B [k, n] (loom_gemm, B as [k, n],
 * fp32 accumulation, rounded once to C's dtype), A's leading dimensions
 * flattened into m. loom_gemm takes k and n multiples of 8 and 16-byte
 * aligned operands: where a piece's k or n is not (uneven slices, small
 * sizes), the operands go through zero-padded copies in the arena
 * (cudaMemcpy2DAsync into [m, k8] and [k8, n8], whose padding stays zero:
 * the arena is zeroed once and the copies never touch it), the GEMM runs
 * on them and C is copied out of [m, n8]: the padding adds zeros to every
 * sum, so the result is the same. Empty pieces: nothing (m or n = 0) or a
 * zero C (k = 0). A bias the lowering folded into the unit (`MatMul + bias`)
 * is loom_gemm's bias epilogue (only where no piece is padded). The GEMM runs
 * alone, before the kernel that consumes it (no other epilogue fused into
 * it, no overlap with a collective yet).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "baseline/baseline.h"
#include "codegen/prog.h"
#include "core/error.h"
#include "gemm/gemm_tuning.h"

static int64_t up8(int64_t x) { return (x + 7) / 8 * 8; }
static int64_t align256(int64_t x) { return (x + 255) / 256 * 256; }

char *loom__cg_buf_addr(const loom_cg_state_t *st, int b, const void *const *inputs, void *const *outputs) {
  const loom__lw_buf_t *x = &st->lw.bufs[b];
  if (x->store & LOOM__LWB_ARENA) return (char *)st->arena + x->arena_off;
  if (x->store & LOOM__LWB_INPUT) return (char *)inputs[x->input];
  return x->noutput ? (char *)outputs[x->output[0]] : NULL;
}

loom_result_t loom__cg_copy_out(const loom_cg_state_t *st, int b, const char *c, size_t bytes, void *const *outputs,
                                cudaStream_t stream) {
  const loom__lw_buf_t *x = &st->lw.bufs[b];
  for (int k = (x->store & LOOM__LWB_ARENA) ? 0 : 1; k < x->noutput; ++k)
    if (bytes) LOOM_CUDA(cudaMemcpyAsync(outputs[x->output[k]], c, bytes, cudaMemcpyDeviceToDevice, stream));
  return LOOM_SUCCESS;
}

/* The GEMM of the run: loom_gemm (a plan of the tuner's: its shape tuned first where the tuning cache lacks it,
 * so that the tuner races schedules at their GEMMs' tuned tiles), or cuBLASLt's (cublaslt+nccl). */
static loom_result_t gemm(const loom_cg_state_t *st, const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                          const void *bias, cudaStream_t stream) {
  if (st->lw.lib == LOOM__LW_LIB_BASE) return loom__base_gemm(d, a, b, c, bias, stream);
  if (st->tune_gemms) return loom__gemm_tuning(d, a, b, c, bias, stream);
  return loom_gemm(d, a, b, c, bias, stream);
}

/* m, k of buffer b's piece of index q (its leading dimensions flattened). */
static void mk(const loom__lw_buf_t *b, int q, int64_t *m, int64_t *k) {
  int64_t d[LOOM__LANG_RANK], off;
  loom__lw_piece(&b->geom, q, d, &off);
  *m = 1;
  for (int j = 0; j + 1 < b->geom.rank; ++j) *m *= d[j];
  *k = b->geom.rank ? d[b->geom.rank - 1] : 1;
}

loom_result_t loom__cg_gemm_resolve(loom_cg_state_t *st, int u) {
  const loom__lw_prog_t *lw = &st->lw;
  const loom__lw_unit_t *un = &lw->units[u];
  loom_cg_unit_rt_t *x = &st->units[u];
  const loom__lw_buf_t *A = &lw->bufs[un->gemm_a], *B = &lw->bufs[un->gemm_b], *C = &lw->bufs[un->gemm_c];
  const int64_t es = C->dtype == LOOM_FP32 ? 4 : 2;
  int64_t pa = 0, pb = 0, pc = 0; /* the padded operands' bytes: the largest over the group's ranks (symmetric) */
  for (int q = 0; q < lw->W; ++q) {
    int64_t m, k, k2, n, m2, n2;
    mk(A, q, &m, &k), mk(B, q, &k2, &n), mk(C, q, &m2, &n2);
    if (k != k2 || m != m2 || n != n2)
      return loom__fail(LOOM_ERR_INTERNAL,
                        "MatMul %s: pieces [%lld x %lld] x [%lld x %lld] -> [%lld x %lld] at index %d", un->name,
                        (long long)m, (long long)k, (long long)k2, (long long)n, (long long)m2, (long long)n2, q);
    if (q == st->q) x->m = m, x->n = n, x->k = k, x->k8 = up8(k), x->n8 = up8(n);
    if ((k % 8 || n % 8) && m && n && k) {
      pa = pa > align256(m * up8(k) * es) ? pa : align256(m * up8(k) * es);
      pb = pb > align256(up8(k) * up8(n) * es) ? pb : align256(up8(k) * up8(n) * es);
      pc = pc > align256(m * up8(n) * es) ? pc : align256(m * up8(n) * es);
    }
  }
  x->pad = (x->k % 8 || x->n % 8) && x->m && x->n && x->k;
  if (un->gemm_bias >= 0 && x->m && x->n && (x->pad || !x->k))
    return loom__fail(LOOM_ERR_INTERNAL, "MatMul %s: a folded bias on a padded or empty GEMM (k %lld, n %lld)",
                      un->name, (long long)x->k, (long long)x->n);
  if (pa) {
    x->pad_a = st->arena_bytes, x->pad_b = x->pad_a + pa, x->pad_c = x->pad_b + pb;
    st->arena_bytes = x->pad_c + pc;
  }
  return LOOM_SUCCESS;
}

/* The operands and C of unit u on this rank; LOOM_ERR_INVALID_ARGUMENT where the caller's buffer the GEMM reads
 * or writes directly is not 16-byte aligned. */
static loom_result_t operands(const loom_cg_state_t *st, int u, const void *const *inputs, void *const *outputs,
                              char **a, char **b, char **c, char **bias) {
  const loom__lw_unit_t *un = &st->lw.units[u];
  const int bufs[4] = {un->gemm_a, un->gemm_b, un->gemm_c, un->gemm_bias};
  char **p[4] = {a, b, c, bias};
  *bias = NULL;
  for (int i = 0; i < 4; ++i) {
    if (bufs[i] < 0) continue;
    const loom__lw_buf_t *x = &st->lw.bufs[bufs[i]];
    *p[i] = loom__cg_buf_addr(st, bufs[i], inputs, outputs);
    if (st->units[u].pad || ((uintptr_t)*p[i] % 16) == 0) continue;
    const int in = !(x->store & LOOM__LWB_OUTPUT);
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_prog_run: %s[%d] (`%s`)=%p is not 16-byte aligned: %s reads "
                      "it with loom's GEMM", in ? "inputs" : "outputs", in ? x->input : x->output[0],
                      st->prog->nodes[x->node].name, (void *)*p[i], un->name);
  }
  return LOOM_SUCCESS;
}

/* The GEMM through the padded operands: copies in, loom_gemm on [m, k8] x [k8, n8], C copied out. */
static loom_result_t padded(const loom_cg_state_t *st, const loom_cg_unit_rt_t *x, loom_dtype_t t, const char *a,
                            const char *b, char *c, cudaStream_t stream) {
  const size_t es = loom_dtype_size(t);
  char *pa = (char *)st->arena + x->pad_a, *pb = (char *)st->arena + x->pad_b, *pc = (char *)st->arena + x->pad_c;
  LOOM_CUDA(cudaMemcpy2DAsync(pa, (size_t)x->k8 * es, a, (size_t)x->k * es, (size_t)x->k * es, (size_t)x->m,
                              cudaMemcpyDeviceToDevice, stream));
  LOOM_CUDA(cudaMemcpy2DAsync(pb, (size_t)x->n8 * es, b, (size_t)x->n * es, (size_t)x->n * es, (size_t)x->k,
                              cudaMemcpyDeviceToDevice, stream));
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(x->m, x->n8, x->k8, t, t, LOOM_B_KN, 0);
  LOOM_TRY(gemm(st, &d, pa, pb, pc, NULL, stream));
  LOOM_CUDA(cudaMemcpy2DAsync(c, (size_t)x->n * es, pc, (size_t)x->n8 * es, (size_t)x->n * es, (size_t)x->m,
                              cudaMemcpyDeviceToDevice, stream));
  return LOOM_SUCCESS;
}

loom_result_t loom__cg_gemm_run(loom_plan_t plan, loom_cg_state_t *st, int u, const void *const *inputs,
                                void *const *outputs, cudaStream_t stream) {
  const loom_cg_unit_rt_t *x = &st->units[u];
  const loom__lw_buf_t *C = &st->lw.bufs[st->lw.units[u].gemm_c];
  if (!x->runs || x->m == 0 || x->n == 0) return LOOM_SUCCESS;
  const loom_dtype_t t = (loom_dtype_t)C->dtype;
  const size_t bytes = (size_t)(x->m * x->n) * loom_dtype_size(t);
  char *a, *b, *c, *bias;
  LOOM_TRY(operands(st, u, inputs, outputs, &a, &b, &c, &bias));
  if (x->k == 0) { /* never with a bias: the lowering folds one only where every k is a multiple of 8 above 0 */
    LOOM_CUDA(cudaMemsetAsync(c, 0, bytes, stream)); /* a sum over nothing */
  } else if (x->pad) {
    LOOM_TRY(padded(st, x, t, a, b, c, stream));
  } else {
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(x->m, x->n, x->k, t, t, LOOM_B_KN, bias != NULL);
    LOOM_TRY(gemm(st, &d, a, b, c, bias, stream));
  }
  (void)plan;
  return loom__cg_copy_out(st, st->lw.units[u].gemm_c, c, bytes, outputs, stream); /* the caller's copies of C */
}
