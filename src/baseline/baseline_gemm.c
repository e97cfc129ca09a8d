/*
 * baseline_gemm.c - the cuBLASLt GEMM that every fused op is measured
 * against and falls back to (see baseline.h). Its callers check the
 * arguments first (src/gemm/gemm_validate.c); it keeps a minimal check.
 *
 * Row-major mapping. loom's C [m, n] = A [m, k] x B is, read as column-major
 * memory, C^T [n, m] = B^T A^T. So cuBLASLt's "A" operand is loom's B and its
 * "B" operand is loom's A, and nothing is transposed in memory:
 *   loom A [m, k] row-major  = column-major [k, m], ld k        -> Lt B, op N
 *   loom B [k, n] (B_KN)     = column-major [n, k], ld n  = B^T -> Lt A, op N
 *   loom B [n, k] (B_NK)     = column-major [k, n], ld k  = B   -> Lt A, op T
 *   loom C [m, n] row-major  = column-major [n, m], ld n        -> Lt C and D
 * The bias [n] is then a vector along the rows of Lt's D, which is exactly
 * what CUBLASLT_EPILOGUE_BIAS broadcasts (bias type = D's type, i.e. loom's
 * c_type, set explicitly). Compute in fp32 (CUBLAS_COMPUTE_32F, fp32 alpha
 * and beta). Where no algorithm takes the bias epilogue for a shape, the bias
 * is broadcast into C by stream-ordered copies (row 0 from the bias, then
 * doubling row blocks) and the GEMM runs with beta = 1 in place (C == D);
 * where cuBLASLt has no algorithm at all (e.g. bf16 inputs with fp16 output)
 * the call returns LOOM_ERR_UNSUPPORTED saying which combination.
 *
 * State (one process): a cuBLASLt handle per device; a workspace of
 * LOOM_CUBLAS_WORKSPACE_BYTES per launch from core/scratch.h (per (device,
 * stream), so GEMMs on two streams never share it; graph-owned inside a
 * capture, so replays never share it either); a cache of entries
 * keyed by (device, desc, pointer alignment class), each holding the matmul
 * descriptor, the three matrix layouts and the chosen algorithm. The
 * heuristic's pick is used until loom__base_gemm_tune replaces it (or a
 * choice that tuning recorded is found: below). Pointer
 * alignment (16..256 bytes) is part of the key because cuBLASLt's heuristic
 * assumes 256-byte operands unless told otherwise.
 *
 * Recorded choices: loom__base_gemm_tune puts the algorithm it picked into
 * the tuning cache (core/tune.h; saved to LOOM_TUNE_FILE by the tuners that
 * save), keyed by the cuBLASLt version, the GPU (compute capability, SM
 * count), the shape, types, layout, bias handling and alignment classes; the
 * value is the algorithm's words ("algo=<8 x 16 hex digits>": cuBLASLt
 * documents cublasLtMatmulAlgo_t as serialisable for the same library
 * version). An entry created later for the same key, in this process or one
 * that loaded the same file, takes that algorithm once cublasLtMatmulAlgoCheck
 * accepts it with this descriptor and workspace; a stale or refused one is
 * ignored with a log line (the heuristic's pick stands).
 *
 * Thread safety: one mutex guards everything, held for the whole call
 * (lookup, bias pointer attribute, the asynchronous cublasLtMatmul launch).
 * A launch costs microseconds of host time, so this serialises launches, not
 * GPU work. Nothing here exits: every CUDA/cuBLAS call is checked and turned
 * into a loom_result_t with a message.
 */
#define _GNU_SOURCE
#include "baseline/baseline.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/scratch.h"
#include "core/tune.h"
#include "core/tune_rule.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

/* Settings (core/param.h) this file reads, declared where they are used. */
LOOM_PARAM_INT(CUBLAS_WORKSPACE_BYTES, "32M",
               "cuBLASLt workspace for the baseline GEMM")

/* ---- argument check ---------------------------------------------------------
 * The GEMM engine checks every public GEMM's arguments (src/gemm/
 * gemm_validate.c) before it calls here; the baseline keeps only what it
 * needs not to hand cuBLASLt a description it would misread. */

static loom_result_t loom__base_check(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                      const void *c, const void *bias) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL must point to a loom_gemm_desc_t", fn);
  if (d->struct_size != sizeof(loom_gemm_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->struct_size=%zu, expected %zu", fn, d->struct_size,
                      sizeof(loom_gemm_desc_t));
  if (d->m < 1 || d->n < 1 || d->k < 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: m=%lld n=%lld k=%lld: every dimension must be >= 1", fn,
                      (long long)d->m, (long long)d->n, (long long)d->k);
  if ((d->ab_type != LOOM_BF16 && d->ab_type != LOOM_FP16) ||
      (d->c_type != LOOM_BF16 && d->c_type != LOOM_FP16 && d->c_type != LOOM_FP32) ||
      (d->b_layout != LOOM_B_KN && d->b_layout != LOOM_B_NK))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: ab_type=%d c_type=%d b_layout=%d: unknown type or layout", fn,
                      (int)d->ab_type, (int)d->c_type, (int)d->b_layout);
  if (!a || !b || !c || (d->has_bias && !bias))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: a=%p b=%p c=%p bias=%p (has_bias=%d): a NULL pointer", fn, a, b,
                      c, bias, d->has_bias);
  return LOOM_SUCCESS;
}

/* ---- cuBLASLt state ------------------------------------------------------ */

#define BASE_GEMM_MAX_DEVICES 64

static loom_result_t loom__cublas_fail(cublasStatus_t st, const char *what, const char *file, int line) {
  loom_result_t code = LOOM_ERR_CUDA;
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH) code = LOOM_ERR_UNSUPPORTED;
  else if (st == CUBLAS_STATUS_ALLOC_FAILED) code = LOOM_ERR_OUT_OF_MEMORY;
  return loom__fail(code, "%s failed: %s (%s, cublasStatus %d) at %s:%d", what,
                    cublasLtGetStatusName(st), cublasLtGetStatusString(st), (int)st, file, line);
}

/* Like LOOM_CUDA for cuBLAS(Lt) calls: return the failure with its text. */
#define LOOM_CUBLAS(call)                                                         \
  do {                                                                            \
    cublasStatus_t loom__s = (call);                                              \
    if (loom__s != CUBLAS_STATUS_SUCCESS)                                         \
      return loom__cublas_fail(loom__s, #call, __FILE__, __LINE__);               \
  } while (0)

/* cuBLASLt's workspace for one launch (core/scratch.h: per (device, stream),
 * graph-owned inside a capture). */
typedef struct base_gemm_ws {
  void *ptr;
  size_t bytes;
  loom_scratch_t s;
} base_gemm_ws_t;

typedef struct base_gemm_entry {
  int device;
  loom_gemm_desc_t d;
  uint32_t align[4];           /* alignment class (16..256 bytes) of a, b, c, bias */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lay_a; /* Lt's A = loom B */
  cublasLtMatrixLayout_t lay_b; /* Lt's B = loom A */
  cublasLtMatrixLayout_t lay_c; /* C and D */
  cublasLtMatmulAlgo_t algo;
  size_t algo_ws;              /* workspace the algorithm needs */
  int bias_epilogue;           /* 1: bias in the epilogue; 0 (with has_bias): broadcast + beta = 1 */
  int tuned;                   /* 1: algo chosen by loom__base_gemm_tune */
  int forced_fallback;         /* made while the test hook forbade the bias epilogue */
  struct base_gemm_entry *next;
} base_gemm_entry_t;

static pthread_mutex_t base_gemm_mu = PTHREAD_MUTEX_INITIALIZER;
static cublasLtHandle_t base_gemm_handle[BASE_GEMM_MAX_DEVICES];
static base_gemm_entry_t *base_gemm_entries;
/* Set only by the test-support library (loom__base_gemm_force_bias_fallback):
 * never use the bias epilogue. Read under base_gemm_mu. */
int loom__base_gemm_no_bias_epilogue;
int loom__base_gemm_recorded_taken;

static uint32_t loom__align_class(const void *p) {
  uintptr_t v = (uintptr_t)p;
  if (!v) return 256;
  uint32_t a = 16;
  while (a < 256 && v % (2u * a) == 0) a *= 2;
  return a;
}

static cudaDataType_t loom__cuda_type(loom_dtype_t t) {
  switch (t) {
    case LOOM_FP32: return CUDA_R_32F;
    case LOOM_FP16: return CUDA_R_16F;
    case LOOM_BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

/* Handle of `device` (created on first use). Lock held. */
static loom_result_t base_gemm_get_handle(int device, cublasLtHandle_t *out) {
  if (device < 0 || device >= BASE_GEMM_MAX_DEVICES)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom baseline GEMM: device %d: at most %d devices", device,
                      BASE_GEMM_MAX_DEVICES);
  if (!base_gemm_handle[device]) LOOM_CUBLAS(cublasLtCreate(&base_gemm_handle[device]));
  *out = base_gemm_handle[device];
  return LOOM_SUCCESS;
}

/* Workspace for a launch on `stream`. Lock held. */
static loom_result_t base_gemm_get_ws(cudaStream_t stream, base_gemm_ws_t *w) {
  const int64_t want = loom__param_CUBLAS_WORKSPACE_BYTES();
  w->ptr = NULL, w->bytes = 0;
  memset(&w->s, 0, sizeof w->s);
  if (want <= 0) return LOOM_SUCCESS;
  loom_result_t r = loom__scratch_get(LOOM_SCRATCH_CUBLAS, stream, 0, (size_t)want, &w->s);
  if (r != LOOM_SUCCESS) {
    loom__fail_append(" (cuBLASLt workspace, LOOM_CUBLAS_WORKSPACE_BYTES=%lld)", (long long)want);
    return r;
  }
  w->ptr = w->s.rest, w->bytes = (size_t)want;
  return LOOM_SUCCESS;
}

static void base_gemm_entry_free(base_gemm_entry_t *e) {
  if (!e) return;
  if (e->lay_c) cublasLtMatrixLayoutDestroy(e->lay_c);
  if (e->lay_b) cublasLtMatrixLayoutDestroy(e->lay_b);
  if (e->lay_a) cublasLtMatrixLayoutDestroy(e->lay_a);
  if (e->op) cublasLtMatmulDescDestroy(e->op);
  free(e);
}

/* The three matrix layouts of e->d (once per entry). */
static loom_result_t base_gemm_layouts(base_gemm_entry_t *e) {
  const loom_gemm_desc_t *d = &e->d;
  cudaDataType_t ab = loom__cuda_type(d->ab_type), ct = loom__cuda_type(d->c_type);
  if (d->b_layout == LOOM_B_KN) /* B [k, n] row-major = column-major [n, k], ld n */
    LOOM_CUBLAS(cublasLtMatrixLayoutCreate(&e->lay_a, ab, (uint64_t)d->n, (uint64_t)d->k, d->n));
  else /* B [n, k] row-major = column-major [k, n], ld k; used transposed */
    LOOM_CUBLAS(cublasLtMatrixLayoutCreate(&e->lay_a, ab, (uint64_t)d->k, (uint64_t)d->n, d->k));
  LOOM_CUBLAS(cublasLtMatrixLayoutCreate(&e->lay_b, ab, (uint64_t)d->k, (uint64_t)d->m, d->k));
  LOOM_CUBLAS(cublasLtMatrixLayoutCreate(&e->lay_c, ct, (uint64_t)d->n, (uint64_t)d->m, d->n));
  return LOOM_SUCCESS;
}

/* (Re)creates the matmul descriptor of e->d, epilogue BIAS iff `bias_epilogue`. */
static loom_result_t base_gemm_build_op(base_gemm_entry_t *e, int bias_epilogue) {
  const loom_gemm_desc_t *d = &e->d;
  if (e->op) cublasLtMatmulDescDestroy(e->op), e->op = NULL;
  LOOM_CUBLAS(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = d->b_layout == LOOM_B_NK ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  LOOM_CUBLAS(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LOOM_CUBLAS(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (bias_epilogue) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    int32_t bt = (int32_t)loom__cuda_type(d->c_type); /* bias has loom's c_type = D's type */
    LOOM_CUBLAS(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LOOM_CUBLAS(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  return LOOM_SUCCESS;
}

/* Status of the last heuristic query that found nothing (for messages). */
static cublasStatus_t base_gemm_last_refusal = CUBLAS_STATUS_SUCCESS;

/* Up to `want` heuristic results for e (as built), filtered to successes.
 * *got = 0 when cuBLASLt has none: NOT_SUPPORTED, and INVALID_VALUE (what
 * some versions answer for a type combination they lack), are not errors
 * here; the caller decides (fallback or LOOM_ERR_UNSUPPORTED). */
static loom_result_t base_gemm_heuristic(base_gemm_entry_t *e, cublasLtHandle_t h, size_t ws_bytes, int want,
                                          cublasLtMatmulHeuristicResult_t *res, int *got) {
  *got = 0;
  cublasLtMatmulPreference_t pref = NULL;
  LOOM_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &ws_bytes, sizeof ws_bytes);
  const cublasLtMatmulPreferenceAttributes_t al[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, /* Lt's B = loom A */
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, /* Lt's A = loom B */
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t av[4] = {e->align[0], e->align[1], e->align[2], e->align[2]};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, al[i], &av[i], sizeof av[i]);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreferenceDestroy(pref);
    return loom__cublas_fail(st, "cublasLtMatmulPreferenceSetAttribute", __FILE__, __LINE__);
  }
  int n = 0;
  st = cublasLtMatmulAlgoGetHeuristic(h, e->op, e->lay_a, e->lay_b, e->lay_c, e->lay_c, pref, want, res, &n);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    base_gemm_last_refusal = st;
    return LOOM_SUCCESS;
  }
  base_gemm_last_refusal = CUBLAS_STATUS_SUCCESS;
  if (st != CUBLAS_STATUS_SUCCESS)
    return loom__cublas_fail(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  int k = 0;
  for (int i = 0; i < n; ++i)
    if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws_bytes) res[k++] = res[i];
  *got = k;
  return LOOM_SUCCESS;
}

static void base_gemm_describe(const loom_gemm_desc_t *d, char *buf, size_t cap) {
  snprintf(buf, cap, "m=%lld n=%lld k=%lld ab_type=%s c_type=%s b_layout=%s has_bias=%d",
           (long long)d->m, (long long)d->n, (long long)d->k, loom__dtype_name(d->ab_type),
           loom__dtype_name(d->c_type), d->b_layout == LOOM_B_KN ? "KN" : "NK", d->has_bias);
}

/* Tuning-cache key of e's recorded choice; 1 if it fit. */
static int base_gemm_choice_key(const base_gemm_entry_t *e, char *key, size_t size) {
  int sms = 0, major = 0, minor = 0;
  (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, e->device);
  (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, e->device);
  (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, e->device);
  const loom_gemm_desc_t *d = &e->d;
  const int n = snprintf(key, size, "cublaslt v%zu sm%d%d %dsm m%lld n%lld k%lld %s->%s %s bias%d al%u,%u,%u,%u",
                         cublasLtGetVersion(), major, minor, sms, (long long)d->m, (long long)d->n, (long long)d->k,
                         loom__dtype_name(d->ab_type), loom__dtype_name(d->c_type),
                         d->b_layout == LOOM_B_NK ? "nk" : "kn", d->has_bias ? (e->bias_epilogue ? 1 : 2) : 0,
                         e->align[0], e->align[1], e->align[2], e->align[3]);
  return n > 0 && (size_t)n < size;
}

/* e takes the recorded choice for its key, if there is one that cuBLASLt
 * accepts. Lock held. */
static void base_gemm_take_recorded(base_gemm_entry_t *e, cublasLtHandle_t h, size_t ws_bytes) {
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (e->forced_fallback || !base_gemm_choice_key(e, key, sizeof key) || !loom__tune_get(key, value, sizeof value))
    return;
  cublasLtMatmulAlgo_t algo;
  if (!loom__tune_parse_words(value, "algo", algo.data, 8)) {
    LOOM_INFO("baseline GEMM: tuning entry \"%s\" = \"%s\" is not \"algo=<128 hex digits>\"; ignored", key, value);
    return;
  }
  cublasLtMatmulHeuristicResult_t chk;
  memset(&chk, 0, sizeof chk);
  const cublasStatus_t st = cublasLtMatmulAlgoCheck(h, e->op, e->lay_a, e->lay_b, e->lay_c, e->lay_c, &algo, &chk);
  if (st != CUBLAS_STATUS_SUCCESS || chk.state != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > ws_bytes) {
    LOOM_INFO("baseline GEMM: the recorded algorithm for \"%s\" is refused (%s, workspace %zu of %zu bytes); "
              "the heuristic's pick stands",
              key, cublasLtGetStatusName(st != CUBLAS_STATUS_SUCCESS ? st : chk.state), chk.workspaceSize, ws_bytes);
    return;
  }
  e->algo = algo;
  e->algo_ws = chk.workspaceSize;
  e->tuned = 1;
  ++loom__base_gemm_recorded_taken;
}

/* The cache entry for (device, d, alignments), created with the recorded
 * choice for its key or else the heuristic's first algorithm. Lock held. */
static loom_result_t base_gemm_lookup(int device, const loom_gemm_desc_t *d, const uint32_t align[4],
                                       cublasLtHandle_t h, size_t ws_bytes, base_gemm_entry_t **out) {
  for (base_gemm_entry_t *e = base_gemm_entries; e; e = e->next)
    if (e->device == device && e->d.m == d->m && e->d.n == d->n && e->d.k == d->k &&
        e->d.ab_type == d->ab_type && e->d.c_type == d->c_type && e->d.b_layout == d->b_layout &&
        e->d.has_bias == d->has_bias && !memcmp(e->align, align, sizeof e->align) &&
        e->forced_fallback == __atomic_load_n(&loom__base_gemm_no_bias_epilogue, __ATOMIC_RELAXED)) {
      *out = e;
      return LOOM_SUCCESS;
    }
  base_gemm_entry_t *e = (base_gemm_entry_t *)calloc(1, sizeof *e);
  if (!e) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom baseline GEMM: host allocation failed");
  e->device = device;
  e->d = *d;
  memcpy(e->align, align, sizeof e->align);

  cublasLtMatmulHeuristicResult_t res[1];
  int got = 0;
  loom_result_t r = base_gemm_layouts(e);
  e->forced_fallback = __atomic_load_n(&loom__base_gemm_no_bias_epilogue, __ATOMIC_RELAXED);
  e->bias_epilogue = d->has_bias && !__atomic_load_n(&loom__base_gemm_no_bias_epilogue, __ATOMIC_RELAXED);
  if (r == LOOM_SUCCESS && e->bias_epilogue) {
    r = base_gemm_build_op(e, 1);
    if (r == LOOM_SUCCESS) r = base_gemm_heuristic(e, h, ws_bytes, 1, res, &got);
    if (r == LOOM_ERR_UNSUPPORTED) r = LOOM_SUCCESS; /* the epilogue attribute itself refused */
    if (r == LOOM_SUCCESS && got == 0) {
      char what[160];
      base_gemm_describe(d, what, sizeof what);
      LOOM_INFO("baseline GEMM %s: no cuBLASLt algorithm with the bias epilogue; adding the bias "
                "through C with beta=1", what);
      e->bias_epilogue = 0;
    }
  }
  if (r == LOOM_SUCCESS && !e->bias_epilogue) {
    r = base_gemm_build_op(e, 0);
    if (r == LOOM_SUCCESS) r = base_gemm_heuristic(e, h, ws_bytes, 1, res, &got);
  }
  if (r == LOOM_SUCCESS && got == 0) {
    char what[160];
    base_gemm_describe(d, what, sizeof what);
    r = loom__fail(LOOM_ERR_UNSUPPORTED,
                   "loom baseline GEMM: cuBLASLt has no algorithm for %s on device %d (heuristic: %s; "
                   "cuBLASLt takes bf16 inputs with bf16/fp32 output and fp16 inputs with fp16/fp32 "
                   "output)",
                   what, device,
                   base_gemm_last_refusal == CUBLAS_STATUS_SUCCESS ? "no candidate"
                                                                     : cublasLtGetStatusName(base_gemm_last_refusal));
  }
  if (r != LOOM_SUCCESS) {
    base_gemm_entry_free(e);
    return r;
  }
  e->algo = res[0].algo;
  e->algo_ws = res[0].workspaceSize;
  base_gemm_take_recorded(e, h, ws_bytes);
  e->next = base_gemm_entries;
  base_gemm_entries = e;
  *out = e;
  return LOOM_SUCCESS;
}

/* Stream-ordered: every row of C becomes the bias (for beta = 1). */
static loom_result_t base_gemm_broadcast_bias(const loom_gemm_desc_t *d, void *c, const void *bias,
                                               cudaStream_t stream) {
  const size_t row = (size_t)d->n * loom_dtype_size(d->c_type);
  char *base = (char *)c;
  LOOM_CUDA(cudaMemcpyAsync(base, bias, row, cudaMemcpyDeviceToDevice, stream));
  for (int64_t done = 1; done < d->m;) {
    int64_t cnt = done < d->m - done ? done : d->m - done;
    LOOM_CUDA(cudaMemcpyAsync(base + (size_t)done * row, base, (size_t)cnt * row, cudaMemcpyDeviceToDevice,
                              stream));
    done += cnt;
  }
  return LOOM_SUCCESS;
}

/* Enqueues one GEMM of entry e with `algo`. Lock held. */
static loom_result_t base_gemm_launch(base_gemm_entry_t *e, cublasLtHandle_t h, const cublasLtMatmulAlgo_t *algo,
                                       base_gemm_ws_t *ws, const void *a, const void *b, void *c,
                                       const void *bias, cudaStream_t stream) {
  float alpha = 1.0f, beta = 0.0f;
  if (e->d.has_bias) {
    if (e->bias_epilogue) {
      LOOM_CUBLAS(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    } else {
      LOOM_TRY(base_gemm_broadcast_bias(&e->d, c, bias, stream));
      beta = 1.0f;
    }
  }
  LOOM_CUBLAS(cublasLtMatmul(h, e->op, &alpha, b, e->lay_a, a, e->lay_b, &beta, c, e->lay_c, c, e->lay_c,
                             algo, ws->ptr, ws->bytes, stream));
  return LOOM_SUCCESS;
}

/* Current device, its handle, the stream's workspace and the entry. Lock held. */
static loom_result_t base_gemm_prepare(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                        const void *bias, cudaStream_t stream, cublasLtHandle_t *h,
                                        base_gemm_ws_t *ws, base_gemm_entry_t **e) {
  int device = -1;
  LOOM_CUDA(cudaGetDevice(&device));
  LOOM_TRY(base_gemm_get_handle(device, h));
  LOOM_TRY(base_gemm_get_ws(stream, ws));
  uint32_t align[4] = {loom__align_class(a), loom__align_class(b), loom__align_class(c),
                       loom__align_class(bias)};
  return base_gemm_lookup(device, d, align, *h, ws->bytes, e);
}

loom_result_t loom__base_gemm(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                              const void *bias, cudaStream_t stream) {
  LOOM_TRY(loom__base_check("loom__base_gemm", d, a, b, c, bias));
  pthread_mutex_lock(&base_gemm_mu);
  cublasLtHandle_t h = NULL;
  base_gemm_ws_t ws;
  memset(&ws, 0, sizeof ws);
  base_gemm_entry_t *e = NULL;
  loom_result_t r = base_gemm_prepare(d, a, b, c, bias, stream, &h, &ws, &e);
  if (r == LOOM_SUCCESS) r = base_gemm_launch(e, h, &e->algo, &ws, a, b, c, bias, stream);
  if (r == LOOM_SUCCESS) r = loom__scratch_done(stream, &ws.s);
  pthread_mutex_unlock(&base_gemm_mu);
  return r;
}

/* The race's candidates: cuBLASLt's heuristic algorithms on the given
 * buffers (lock held); candidate 0, the heuristic's first, is the default. */
typedef struct {
  base_gemm_entry_t *e;
  cublasLtHandle_t h;
  base_gemm_ws_t *ws;
  const cublasLtMatmulHeuristicResult_t *res;
  const void *a, *b, *bias;
  void *c;
} base_race_t;

/* One run of candidate i; an algorithm cuBLASLt refuses to launch is left
 * out (LOOM_ERR_UNSUPPORTED) unless the stream itself failed. */
static loom_result_t base_race_call(void *ctx, int i, cudaStream_t stream) {
  const base_race_t *k = (const base_race_t *)ctx;
  const loom_result_t r = base_gemm_launch(k->e, k->h, &k->res[i].algo, k->ws, k->a, k->b, k->c, k->bias, stream);
  if (r == LOOM_SUCCESS) return r;
  const cudaError_t se = cudaStreamSynchronize(stream);
  if (se != cudaSuccess)
    return loom__cuda_fail((int)se, "cudaStreamSynchronize (tuning the baseline GEMM)", __FILE__, __LINE__);
  return loom__fail(LOOM_ERR_UNSUPPORTED, "cuBLASLt candidate %d refused: %s", i, loom_last_error());
}

#define LOOM_GEMM_MAX_CANDIDATES 64

/* Lock held. */
static loom_result_t base_gemm_tune_locked(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                            const void *bias, int candidates, cudaStream_t stream, float *best_ms) {
  cublasLtHandle_t h = NULL;
  base_gemm_ws_t wsv, *ws = &wsv;
  base_gemm_entry_t *e = NULL;
  LOOM_TRY(base_gemm_prepare(d, a, b, c, bias, stream, &h, ws, &e));
  cublasLtMatmulHeuristicResult_t res[LOOM_GEMM_MAX_CANDIDATES];
  int got = 0;
  LOOM_TRY(base_gemm_heuristic(e, h, ws->bytes, candidates, res, &got));
  if (got == 0) { /* cannot happen after a successful lookup, unless cuBLASLt changed its mind */
    res[0].algo = e->algo;
    res[0].workspaceSize = e->algo_ws;
    got = 1;
  }
  base_race_t ctx = {e, h, ws, res, a, b, bias, c};
  const loom_tune_race_t race = {"loom__base_gemm_tune", got, &ctx, NULL, base_race_call, NULL, NULL};
  int best = 0;
  float best_t = 0.f;
  LOOM_TRY(loom__tune_race(&race, stream, &best, &best_t, NULL));
  /* C as the winner computes it */
  LOOM_TRY(base_gemm_launch(e, h, &res[best].algo, ws, a, b, c, bias, stream));
  e->algo = res[best].algo;
  e->algo_ws = res[best].workspaceSize;
  e->tuned = 1;
  if (best_ms) *best_ms = best_t;
  /* recorded for entries made later (and for the tuning file) */
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!e->forced_fallback && base_gemm_choice_key(e, key, sizeof key) &&
      loom__tune_format_words("algo", e->algo.data, 8, value, sizeof value))
    LOOM_TRY(loom__tune_put(key, value));
  return LOOM_SUCCESS;
}

loom_result_t loom__base_gemm_tune(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                   const void *bias, int candidates, cudaStream_t stream, float *best_ms) {
  LOOM_TRY(loom__base_check("loom__base_gemm_tune", d, a, b, c, bias));
  if (candidates < 1 || candidates > LOOM_GEMM_MAX_CANDIDATES)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom__base_gemm_tune: candidates=%d must be in [1, %d]",
                      candidates, LOOM_GEMM_MAX_CANDIDATES);
  pthread_mutex_lock(&base_gemm_mu);
  loom_result_t r = base_gemm_tune_locked(d, a, b, c, bias, candidates, stream, best_ms);
  pthread_mutex_unlock(&base_gemm_mu);
  return r;
}

void loom__base_gemm_release(void) {
  pthread_mutex_lock(&base_gemm_mu);
  while (base_gemm_entries) {
    base_gemm_entry_t *e = base_gemm_entries;
    base_gemm_entries = e->next;
    base_gemm_entry_free(e);
  }
  for (int i = 0; i < BASE_GEMM_MAX_DEVICES; ++i)
    if (base_gemm_handle[i]) {
      cublasLtDestroy(base_gemm_handle[i]);
      base_gemm_handle[i] = NULL;
    }
  pthread_mutex_unlock(&base_gemm_mu);
}
