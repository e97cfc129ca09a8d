/*
 * gemm_cases.c - what the GEMM GPU tests of both kernels share
 * (test_gemm.c: the sm90 path; test_gemm_sm80.c: the sm80 path): the run's
 * seeds, a case's host and device buffers (random inputs, C poisoned with
 * 0xFF bytes), the unwritten-element count, the checks against the fp64
 * reference (sampled whole rows and columns) and against cuBLASLt (every
 * element), a stand-in comm for hooks, and the hook cases themselves, which
 * run through loom__gemm_hooked and so test whichever path LOOM_GEMM_PATH
 * and the GPU select.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "tests/gpu/gemm/gemm_cases.h"
#include "baseline/baseline.h"
#include "gemm/gemm.h"
#include "ref/ref.h"

#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* Seeds of this run: the run's seed (printed at start), then one more per draw. */
uint64_t next_seed(void) {
  static uint64_t drawn;
  return loom_test_seed() + ++drawn;
}

double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int gemm_kernel_or_skip(int sm80) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    (void)cudaGetLastError();
    loom_test_skip("no GPU");
    return 0;
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  loom_gemm_desc_t d = LOOM_GEMM_DESC(64, 64, 64, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  if (sm80 ? !loom__gemm_sm80_supported(&d, major, minor) : !loom__gemm_sm90_supported(&d, major, minor)) {
    loom_test_skip(sm80 ? "needs a compute capability >= 8.0 GPU (loom's sm80 kernel)"
                        : "needs a compute capability 9.0 GPU (loom's sm90 kernel)");
    return 0;
  }
  if (sm80) setenv("LOOM_GEMM_PATH", "sm80", 1);
  return 1;
}

double eps_out(loom_dtype_t t) {
  return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_FP16 ? 1.0 / 1024 : 1e-6;
}

/* Accumulation error of a k-long fp32-accumulated dot product, relative to
 * |C|. wgmma's fp32 accumulation is not round-to-nearest per product; an
 * error that grows like k/16 (a bias of up to half an ulp of the partial sum
 * per k16 step) fits what we saw: 1.1e-5 of |C| at k = 6152 (bm 64 kernel,
 * fp32 C, 2026-11-22), over the old sqrt(k)-only bound. Bound: (k/16) 2^-24,
 * about 2x that. A lost k16 step or a wrong element errs by O(1): caught. */
double eps_acc(int64_t k) {
  return ((double)k / 16.0) * 0x1p-24;
}

void gcase_free(gcase_t *g) {
  free(g->ha), free(g->hb), free(g->hbias), free(g->hc), free(g->hc2);
  cudaFree(g->da), cudaFree(g->db), cudaFree(g->dbias), cudaFree(g->dc), cudaFree(g->dc2);
  memset(g, 0, sizeof *g);
}

/* Allocates, fills A, B, bias with fresh random data, poisons C and C2. */
int gcase_init(gcase_t *g, const loom_gemm_desc_t *d) {
  memset(g, 0, sizeof *g);
  g->d = *d;
  const size_t ab = loom_dtype_size(d->ab_type), cs = loom_dtype_size(d->c_type);
  g->a_bytes = (size_t)d->m * (size_t)d->k * ab;
  g->b_bytes = (size_t)d->k * (size_t)d->n * ab;
  g->c_bytes = (size_t)d->m * (size_t)d->n * cs;
  g->bias_bytes = (size_t)d->n * cs;
  g->ha = malloc(g->a_bytes), g->hb = malloc(g->b_bytes), g->hbias = malloc(g->bias_bytes);
  g->hc = malloc(g->c_bytes), g->hc2 = malloc(g->c_bytes);
  if (!g->ha || !g->hb || !g->hbias || !g->hc || !g->hc2) return 0;
  loom_ref_fill_random(d->ab_type, g->ha, (size_t)d->m * (size_t)d->k, next_seed(), 1.0);
  loom_ref_fill_random(d->ab_type, g->hb, (size_t)d->k * (size_t)d->n, next_seed(), 1.0);
  loom_ref_fill_random(d->c_type, g->hbias, (size_t)d->n, next_seed(), 1.0);
  if (cudaMalloc(&g->da, g->a_bytes) || cudaMalloc(&g->db, g->b_bytes) || cudaMalloc(&g->dbias, g->bias_bytes) ||
      cudaMalloc(&g->dc, g->c_bytes) || cudaMalloc(&g->dc2, g->c_bytes))
    return 0;
  if (cudaMemcpy(g->da, g->ha, g->a_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(g->db, g->hb, g->b_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(g->dbias, g->hbias, g->bias_bytes, cudaMemcpyHostToDevice) ||
      cudaMemset(g->dc, 0xFF, g->c_bytes) || cudaMemset(g->dc2, 0xFF, g->c_bytes))
    return 0;
  return 1;
}

/* Elements of host C that are still poison (NaN). */
size_t count_unwritten(loom_dtype_t t, const void *c, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += isnan(loom_ref_load(t, c, i)) ? 1 : 0;
  return bad;
}

/* Compares host C (g->hc, plus `init` added: NULL or a [m, n] c_type buffer
 * that C was reduced into) with the fp64 reference on whole sampled rows and
 * columns. Returns the number of elements out of bound; *rel gets
 * ||x - ref|| / ||ref|| over the samples. */
size_t check_ref(const gcase_t *g, const void *init, double extra_eps, double *rel) {
  const loom_gemm_desc_t *d = &g->d;
  const void *bias = d->has_bias ? g->hbias : NULL;
  int64_t rows[10], cols[10];
  int nr = 0, nc = 0;
  uint64_t s = next_seed();
  rows[nr++] = 0, rows[nr++] = d->m - 1;
  cols[nc++] = 0, cols[nc++] = d->n - 1;
  for (int i = 0; i < 4; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    rows[nr++] = (int64_t)((s >> 33) % (uint64_t)d->m);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    cols[nc++] = (int64_t)((s >> 33) % (uint64_t)d->n);
  }
  const double eo = eps_out(d->c_type) + eps_acc(d->k), ea = 1e-5 * sqrt((double)d->k) + 1e-6;
  double se = 0, sr = 0;
  size_t bad = 0, printed = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const int outer = pass == 0 ? nr : nc;
    for (int o = 0; o < outer; ++o) {
      const int64_t inner = pass == 0 ? d->n : d->m;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t r = pass == 0 ? rows[o] : i, c = pass == 0 ? i : cols[o];
        double ref = loom_ref_gemm_element(d, g->ha, g->hb, bias, r, c), bound = eo * fabs(ref) + ea;
        if (init) {
          /* reduce: the product is rounded to c_type, then the sum */
          const double iv = loom_ref_load(d->c_type, init, (size_t)(r * d->n + c));
          bound = eo * (fabs(ref) + fabs(iv + ref)) + extra_eps * fabs(iv) + ea;
          ref += iv;
        }
        const double x = loom_ref_load(d->c_type, g->hc, (size_t)(r * d->n + c));
        se += (x - ref) * (x - ref), sr += ref * ref;
        if (!(fabs(x - ref) <= bound)) {
          if (printed++ < 4)
            printf("    C[%lld, %lld] = %.6g, reference %.6g\n", (long long)r, (long long)c, x, ref);
          bad++;
        }
      }
    }
  }
  *rel = sqrt(se / (sr > 0 ? sr : 1));
  if (isnan(*rel)) bad++;
  return bad;
}

/* Compares host C with host C2 (cuBLASLt) on every element. */
size_t check_same(const gcase_t *g, double *rel) {
  const loom_gemm_desc_t *d = &g->d;
  const size_t n = (size_t)d->m * (size_t)d->n;
  const double eo = 2 * (eps_out(d->c_type) + eps_acc(d->k)), ea = 2e-5 * sqrt((double)d->k) + 1e-6;
  double se = 0, sr = 0;
  size_t bad = 0, printed = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = loom_ref_load(d->c_type, g->hc, i), y = loom_ref_load(d->c_type, g->hc2, i);
    se += (x - y) * (x - y), sr += y * y;
    if (!(fabs(x - y) <= eo * fabs(y) + ea)) {
      if (printed++ < 4)
        printf("    C[%zu, %zu] = %.6g, cuBLASLt %.6g\n", i / (size_t)d->n, i % (size_t)d->n, x, y);
      bad++;
    }
  }
  *rel = sqrt(se / (sr > 0 ? sr : 1));
  return bad;
}

const char *dt_name(loom_dtype_t t) { return t == LOOM_BF16 ? "bf16" : t == LOOM_FP16 ? "fp16" : "fp32"; }

/* ---- hooks ----------------------------------------------------------- */

int fake_comm_init(fake_comm_t *f, double timeout_s) {
  memset(f, 0, sizeof *f);
  if (cudaHostAlloc((void **)&f->err_h, sizeof *f->err_h, cudaHostAllocMapped) != cudaSuccess) return 0;
  memset(f->err_h, 0, sizeof *f->err_h);
  if (cudaHostGetDevicePointer((void **)&f->err_d, f->err_h, 0) != cudaSuccess) return 0;
  if (cudaMalloc((void **)&f->abort_d, 4) != cudaSuccess || cudaMemset(f->abort_d, 0, 4) != cudaSuccess) return 0;
  f->dc.rank = 0, f->dc.size = 1;
  f->dc.err = f->err_d;
  f->dc.abort_flag = f->abort_d;
  f->dc.timeout_ns = (uint64_t)(timeout_s * 1e9);
  return 1;
}

void fake_comm_free(fake_comm_t *f) {
  if (f->err_h) cudaFreeHost(f->err_h);
  if (f->abort_d) cudaFree(f->abort_d);
  memset(f, 0, sizeof *f);
}

/* order[0..n) a random permutation of 0..n-1 (this run's seed). */
static void random_order(int *order, int n) {
  for (int i = 0; i < n; ++i) order[i] = i;
  uint64_t s = next_seed();
  for (int i = n - 1; i > 0; --i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int j = (int)((s >> 33) % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j], order[j] = t;
  }
}

/* Sets wait_h[order[i]] = epoch one by one (skipping `held`), pausing
 * `pause_s` between; returns how many times the stream had already
 * finished before a release (0 for a GEMM that waits). */
static int release_in_order(uint32_t *wait_h, const int *order, int n, int held, uint32_t epoch, double pause_s,
                            cudaStream_t st) {
  int early = 0;
  for (int i = 0; i < n; ++i) {
    if (order[i] == held) continue;
    early += cudaStreamQuery(st) == cudaSuccess; /* done before every row block was released */
    __atomic_store_n(&wait_h[order[i]], epoch, __ATOMIC_RELEASE);
    const double t0 = now_s();
    while (now_s() - t0 < pause_s) {
    }
  }
  return early;
}

void gemm_hooks_host_schedule_waits_and_tile_signals_case(void) {
  /* 6 tile rows x 4 tile columns (bn 128). The host releases row blocks in a
   * random order; the schedule follows that order (arrival order). After
   * releasing a row block the host waits for every tile of it to signal, and
   * checks no tile of an unreleased row block has signalled. */
  gcase_t g;
  fake_comm_t fc;
  uint32_t *wait_h = NULL, *wait_d = NULL, *sig_h = NULL, *sig_d = NULL;
  int32_t *sched_d = NULL;
  cudaStream_t st = NULL;
  double rel = 0;
  memset(&g, 0, sizeof g);
  memset(&fc, 0, sizeof fc);
  enum { TM = 6, TN = 4 };
  loom_gemm_desc_t d = LOOM_GEMM_DESC(TM * 128 - 37, TN * 128 - 8, 1032, LOOM_BF16, LOOM_FP32, LOOM_B_NK, 1);
  if (!gcase_init(&g, &d) || !fake_comm_init(&fc, 20.0)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaHostAlloc((void **)&wait_h, TM * 4, cudaHostAllocMapped));
  CUDA_OK(cudaHostAlloc((void **)&sig_h, TM * TN * 4, cudaHostAllocMapped));
  memset(wait_h, 0, TM * 4);
  memset(sig_h, 0, TM * TN * 4);
  CUDA_OK(cudaHostGetDevicePointer((void **)&wait_d, wait_h, 0));
  CUDA_OK(cudaHostGetDevicePointer((void **)&sig_d, sig_h, 0));
  int order[TM];
  random_order(order, TM);
  int32_t sched[TM * TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) sched[i * TN + j] = order[i] * TN + j;
  CUDA_OK(cudaMalloc((void **)&sched_d, sizeof sched));
  CUDA_OK(cudaMemcpy(sched_d, sched, sizeof sched, cudaMemcpyHostToDevice));
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  const uint32_t epoch = 7;
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  h.order.kind = LOOM_TILE_ORDER_SCHEDULE;
  h.order.schedule = sched_d;
  h.wait_signals = wait_d;
  h.wait_epoch = epoch;
  h.wait_rows_per_signal = 128;
  h.epilogue = LOOM_EPI_STORE;
  h.tile_signal = sig_d;
  h.signal_epoch = epoch;
  h.comm = fc.dc;
  loom_gemm_config_t cfg = {128, 0, 0, 3, 0, 0, 0, 0, 0, 0};
  LOOM_OK(loom__gemm_hooked(&d, g.da, g.db, g.dc, g.dbias, &cfg, &h, st));
  int premature = 0, late = 0;
  for (int i = 0; i < TM; ++i) {
    const int r = order[i];
    /* nothing of the rows not yet released may have signalled */
    for (int k = i; k < TM; ++k)
      for (int j = 0; j < TN; ++j) premature += __atomic_load_n(&sig_h[order[k] * TN + j], __ATOMIC_ACQUIRE) != 0;
    __atomic_store_n(&wait_h[r], epoch, __ATOMIC_RELEASE);
    const double t0 = now_s();
    for (int j = 0; j < TN; ++j)
      while (__atomic_load_n(&sig_h[r * TN + j], __ATOMIC_ACQUIRE) != epoch) {
        if (now_s() - t0 > 10.0) {
          late++;
          break;
        }
      }
  }
  CUDA_OK(cudaStreamSynchronize(st));
  CHECK_EQ_INT(premature, 0);
  CHECK_EQ_INT(late, 0);
  CHECK_EQ_INT(fc.err_h->valid, 0);
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
  CHECK(check_ref(&g, NULL, 0, &rel) == 0);
  printf("    release order %d %d %d %d %d %d: rel %.2e\n", order[0], order[1], order[2], order[3], order[4],
         order[5], rel);
out:
  if (st) cudaStreamDestroy(st);
  if (wait_h) cudaFreeHost(wait_h);
  if (sig_h) cudaFreeHost(sig_h);
  cudaFree(sched_d);
  fake_comm_free(&fc);
  gcase_free(&g);
}

void gemm_hooks_row_routed_store_and_reduce_case(void) {
  /* STORE: rows split over two destination buffers (as peers' windows
   * would be); REDUCE: atomically added onto random C, for each C dtype. */
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_BF16, LOOM_FP16};
  for (int ci = 0; ci < 3; ++ci)
    for (int mode = 0; mode < 2; ++mode) {
      gcase_t g;
      void *init = NULL, *half_d = NULL, **tab_d = NULL;
      double rel = 0;
      memset(&g, 0, sizeof g);
      loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 776, 1032, LOOM_BF16, cs[ci], ci == 1 ? LOOM_B_KN : LOOM_B_NK, mode);
      if (!gcase_init(&g, &d)) {
        loom_test_fail(__FILE__, __LINE__, "allocation");
        goto next;
      }
      const int64_t rp = 500; /* rows per destination */
      const size_t cs_ = loom_dtype_size(d.c_type);
      loom_gemm_hooks_t h;
      memset(&h, 0, sizeof h);
      h.order.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
      h.order.row_shift = loom__tile_rank_shift(d.m, 128, 2, 1);
      if (mode == 0) {
        /* rows [0, 500) -> dc, rows [500, 1000) -> a separate buffer */
        CUDA_OK(cudaMalloc(&half_d, (size_t)rp * (size_t)d.n * cs_));
        CUDA_OK(cudaMemset(half_d, 0xFF, (size_t)rp * (size_t)d.n * cs_));
        void *tab[2] = {g.dc, half_d};
        CUDA_OK(cudaMalloc((void **)&tab_d, sizeof tab));
        CUDA_OK(cudaMemcpy(tab_d, tab, sizeof tab, cudaMemcpyHostToDevice));
        h.epilogue = LOOM_EPI_STORE;
        h.row_dst = tab_d;
        h.rows_per_dst = rp;
      } else {
        init = malloc(g.c_bytes);
        loom_ref_fill_random(d.c_type, init, (size_t)d.m * (size_t)d.n, next_seed(), 4.0);
        CUDA_OK(cudaMemcpy(g.dc, init, g.c_bytes, cudaMemcpyHostToDevice));
        h.epilogue = LOOM_EPI_REDUCE;
      }
      loom_gemm_config_t cfg = {256, 0, 0, 0, 0, 0, 0, 0, 0, 0};
      LOOM_OK(loom__gemm_hooked(&d, g.da, g.db, g.dc, d.has_bias ? g.dbias : NULL, &cfg, &h, 0));
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
      if (mode == 0) /* the second half of the rows lives in half_d */
        CUDA_OK(cudaMemcpy((char *)g.hc + (size_t)rp * (size_t)d.n * cs_, half_d, (size_t)rp * (size_t)d.n * cs_,
                           cudaMemcpyDeviceToHost));
      {
        const size_t unw = count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n);
        /* reduce rounds twice (the product, then the sum) */
        const size_t bad = check_ref(&g, init, mode ? eps_out(d.c_type) : 0, &rel);
        printf("    %s %s: unwritten %zu, vs fp64 rel %.2e (%zu bad)\n", mode ? "reduce" : "routed store",
               dt_name(d.c_type), unw, rel, bad);
        CHECK(unw == 0);
        CHECK(bad == 0);
      }
    next:
    out:
      free(init);
      cudaFree(half_d);
      cudaFree(tab_d);
      gcase_free(&g);
    }
}

void gemm_hooks_prologue_timeout_case(void) {
  /* a wait that nobody releases expires: the error record names the GEMM
   * prologue and the signal, the kernel returns, C stays untouched */
  gcase_t g;
  fake_comm_t fc;
  uint32_t *wait_d = NULL;
  memset(&g, 0, sizeof g);
  memset(&fc, 0, sizeof fc);
  loom_gemm_desc_t d = LOOM_GEMM_DESC(256, 512, 512, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  if (!gcase_init(&g, &d) || !fake_comm_init(&fc, 0.05)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaMalloc((void **)&wait_d, 8));
  CUDA_OK(cudaMemset(wait_d, 0, 8));
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  h.wait_signals = wait_d;
  h.wait_epoch = 1;
  h.wait_rows_per_signal = 128;
  h.comm = fc.dc;
  const double t0 = now_s();
  LOOM_OK(loom__gemm_hooked(&d, g.da, g.db, g.dc, NULL, NULL, &h, 0));
  CUDA_OK(cudaDeviceSynchronize());
  const double dt = now_s() - t0;
  CHECK(dt < 5.0);
  CHECK_EQ_INT(fc.err_h->valid, 1);
  CHECK_EQ_INT(fc.err_h->site, LOOM_SITE_GEMM_PROLOGUE);
  CHECK(fc.err_h->signal <= 1);
  CHECK_EQ_INT(fc.err_h->expected, 1);
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == (size_t)d.m * (size_t)d.n);
  printf("    timed out after %.3f s on signal %u\n", dt, fc.err_h->signal);
out:
  cudaFree(wait_d);
  fake_comm_free(&fc);
  gcase_free(&g);
}

void gemm_hooks_clusters_wait_and_time_out_case(void) {
  /* A hooked GEMM in 2x1 clusters (AllGather+GEMM's kind: waits, plain
   * stores, no tile signals), rank-shifted order starting at tile row 2,
   * 7 tile rows (the last pair has a block past m). (1) The host releases
   * the row blocks one by one in a random order, checking that the GEMM
   * has not finished before the last release (stream not complete), then
   * C against fp64. (2) One row block is never released: the wait expires
   * (error record: the prologue, that signal), the kernel returns in
   * bounded time (in a pair the aborted block's loads go on, so that its
   * partner is not left without half of B), and none of the never-released
   * rows is written (other tiles may be skipped once the abort is set). */
  enum { TM = 7 };
  gcase_t g;
  fake_comm_t fc;
  uint32_t *wait_h = NULL, *wait_d = NULL;
  cudaStream_t st = NULL;
  double rel = 0;
  memset(&g, 0, sizeof g);
  memset(&fc, 0, sizeof fc);
  loom_gemm_desc_t d = LOOM_GEMM_DESC(TM * 128 - 37, 640, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
  if (!gcase_init(&g, &d) || !fake_comm_init(&fc, 20.0)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaHostAlloc((void **)&wait_h, TM * 4, cudaHostAllocMapped));
  CUDA_OK(cudaHostGetDevicePointer((void **)&wait_d, wait_h, 0));
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int pass = 0; pass < 2; ++pass) {
    const uint32_t epoch = 11 + (uint32_t)pass;
    memset(wait_h, 0, TM * 4);
    CUDA_OK(cudaMemset(g.dc, 0xFF, g.c_bytes));
    CUDA_OK(cudaStreamSynchronize(st));
    if (pass == 1) { /* a short timeout for the expiring pass */
      fake_comm_free(&fc);
      if (!fake_comm_init(&fc, 0.2)) {
        loom_test_fail(__FILE__, __LINE__, "allocation");
        goto out;
      }
    }
    loom_gemm_hooks_t h;
    memset(&h, 0, sizeof h);
    h.order.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
    h.order.row_shift = 2;
    h.wait_signals = wait_d;
    h.wait_epoch = epoch;
    h.wait_rows_per_signal = 128;
    h.epilogue = LOOM_EPI_STORE;
    h.comm = fc.dc;
    loom_gemm_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.bn = 128, cfg.group = 2, cfg.cluster = 2, cfg.bm = 128, cfg.grid = 8;
    LOOM_OK(loom__gemm_hooked(&d, g.da, g.db, g.dc, g.dbias, &cfg, &h, st));
    int order[TM];
    random_order(order, TM);
    const int held = pass == 1 ? order[TM - 1] : -1; /* pass 1: never released */
    const int early = release_in_order(wait_h, order, TM, held, epoch, 0.002, st);
    const double t0 = now_s();
    CUDA_OK(cudaStreamSynchronize(st));
    const double dt = now_s() - t0;
    CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(early, 0);
    if (pass == 0) {
      CHECK_EQ_INT(fc.err_h->valid, 0);
      CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
      CHECK(check_ref(&g, NULL, 0, &rel) == 0);
      printf("    clusters, rank-shifted waits released in order %d %d %d %d %d %d %d: rel %.2e\n", order[0], order[1],
             order[2], order[3], order[4], order[5], order[6], rel);
    } else {
      CHECK(dt < 5.0);
      CHECK_EQ_INT(fc.err_h->valid, 1);
      CHECK_EQ_INT(fc.err_h->site, LOOM_SITE_GEMM_PROLOGUE);
      CHECK_EQ_INT((int)fc.err_h->signal, held);
      const int r0 = held * 128, r1 = held * 128 + 128 < (int)d.m ? held * 128 + 128 : (int)d.m;
      const size_t es = loom_dtype_size(d.c_type);
      size_t unw = count_unwritten(d.c_type, (const char *)g.hc + (size_t)r0 * (size_t)d.n * es,
                                   (size_t)(r1 - r0) * (size_t)d.n);
      CHECK(unw == (size_t)(r1 - r0) * (size_t)d.n);
      printf("    clusters, row block %d never released: expired after %.3f s of waiting, its rows untouched\n", held,
             dt);
    }
  }
out:
  if (st) cudaStreamDestroy(st);
  if (wait_h) cudaFreeHost(wait_h);
  fake_comm_free(&fc);
  gcase_free(&g);
}

int gemm_case_twice_identical(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg, cudaStream_t st,
                              const char *label) {
  return gemm_case_configs_identical(g, launch, cfg, cfg, st, label);
}

int gemm_case_configs_identical(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg,
                                const loom_gemm_config_t *cfg2, cudaStream_t st, const char *label) {
  const loom_gemm_desc_t *d = &g->d;
  const void *bias = d->has_bias ? g->dbias : NULL;
  double rel = 0;
  int ok = 0;
  CUDA_OK(cudaMemset(g->dc, 0xFF, g->c_bytes));
  CUDA_OK(cudaMemset(g->dc2, 0xFF, g->c_bytes));
  LOOM_OK(launch(d, g->da, g->db, g->dc, bias, cfg, NULL, st));
  LOOM_OK(launch(d, g->da, g->db, g->dc2, bias, cfg2, NULL, st));
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(g->hc, g->dc, g->c_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(g->hc2, g->dc2, g->c_bytes, cudaMemcpyDeviceToHost));
  {
    const int same = memcmp(g->hc, g->hc2, g->c_bytes) == 0;
    const size_t unw = count_unwritten(d->c_type, g->hc, (size_t)d->m * (size_t)d->n);
    const size_t bad = check_ref(g, NULL, 0, &rel);
    CHECK(same);
    CHECK(unw == 0);
    CHECK(bad == 0);
    printf("    %s: two runs bit-identical: %s, vs fp64 rel %.2e\n", label, same ? "yes" : "NO", rel);
    ok = same && unw == 0 && bad == 0;
  }
out:
  return ok;
}

int gemm_case_graph_replays(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg, cudaStream_t st,
                            int replays) {
  const loom_gemm_desc_t *d = &g->d;
  const void *bias = d->has_bias ? g->dbias : NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int ok = 0;
  /* the expected bits: one launch outside the graph */
  LOOM_OK(launch(d, g->da, g->db, g->dc2, bias, cfg, NULL, st));
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(g->hc2, g->dc2, g->c_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  {
    const loom_result_t r = launch(d, g->da, g->db, g->dc, bias, cfg, NULL, st);
    const cudaError_t e = cudaStreamEndCapture(st, &graph);
    LOOM_OK(r);
    CUDA_OK(e);
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  ok = 1;
  for (int r = 0; r < replays; ++r) {
    CUDA_OK(cudaMemset(g->dc, 0xFF, g->c_bytes));
    CUDA_OK(cudaGraphLaunch(exec, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(g->hc, g->dc, g->c_bytes, cudaMemcpyDeviceToHost));
    const int same = memcmp(g->hc, g->hc2, g->c_bytes) == 0;
    CHECK(same);
    ok &= same;
  }
  printf("    graph replayed %d times: %s\n", replays, ok ? "same bits as a direct launch" : "MISMATCH");
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return ok;
}

int gemm_capture_check(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg, cudaStream_t st, int replays,
                       const char *label) {
  const loom_gemm_desc_t *d = &g->d;
  const void *bias = d->has_bias ? g->dbias : NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  double rel = 0;
  int ok = 0;
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  {
    const loom_result_t r = cfg ? launch(d, g->da, g->db, g->dc, bias, cfg, NULL, st)
                                : loom_gemm(d, g->da, g->db, g->dc, bias, st);
    const cudaError_t e = cudaStreamEndCapture(st, &graph);
    LOOM_OK(r);
    CUDA_OK(e);
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  ok = 1;
  for (int r = 0; r < replays; ++r) {
    CUDA_OK(cudaMemset(g->dc, 0xFF, g->c_bytes));
    CUDA_OK(cudaGraphLaunch(exec, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(g->hc, g->dc, g->c_bytes, cudaMemcpyDeviceToHost));
    const size_t unw = count_unwritten(d->c_type, g->hc, (size_t)d->m * (size_t)d->n);
    const size_t bad = check_ref(g, NULL, 0, &rel);
    CHECK(unw == 0);
    CHECK(bad == 0);
    ok &= unw == 0 && bad == 0;
  }
  printf("    %s: graph replayed %d times: vs fp64 rel %.2e%s\n", label, replays, rel, ok ? "" : "  MISMATCH");
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return ok;
}

void gemm_graph_capture_case(void) {
  gcase_t g;
  cudaStream_t st = NULL;
  loom_gemm_desc_t d = LOOM_GEMM_DESC(300, 520, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  gemm_capture_check(&g, NULL, NULL, st, 2, "loom_gemm");
out:
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
}

int gemm_run_case(const loom_gemm_desc_t *d, gemm_launch_fn launch, const loom_gemm_config_t *cfg, int vs_cublas) {
  gcase_t g;
  int ok = 0;
  double rel_ref = 0, rel_cub = 0;
  size_t unw = 0, bad_ref = 0, bad_cub = 0;
  if (!gcase_init(&g, d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation for m=%lld n=%lld k=%lld", (long long)d->m, (long long)d->n,
                   (long long)d->k);
    goto out;
  }
  const void *bias = d->has_bias ? g.dbias : NULL;
  if (cfg) LOOM_OK(launch(d, g.da, g.db, g.dc, bias, cfg, NULL, 0));
  else LOOM_OK(loom_gemm(d, g.da, g.db, g.dc, bias, 0));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  unw = count_unwritten(d->c_type, g.hc, (size_t)d->m * (size_t)d->n);
  bad_ref = check_ref(&g, NULL, 0, &rel_ref);
  /* cuBLASLt takes bf16 -> bf16/fp32 and fp16 -> fp16/fp32 */
  if (d->c_type != LOOM_FP32 && d->c_type != d->ab_type) vs_cublas = 0;
  if (vs_cublas) {
    LOOM_OK(loom__base_gemm(d, g.da, g.db, g.dc2, bias, 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(g.hc2, g.dc2, g.c_bytes, cudaMemcpyDeviceToHost));
    bad_cub = check_same(&g, &rel_cub);
  }
  ok = unw == 0 && bad_ref == 0 && bad_cub == 0;
  printf("    %-4s m=%-5lld n=%-5lld k=%-5lld %s->%s %s bias=%d bm=%d bn=%d sk=%d/%d/%d cl=%d grid=%d: unwritten %zu, vs fp64 rel %.2e (%zu bad), vs cuBLASLt rel %.2e (%zu bad)\n",
         ok ? "ok" : "FAIL", (long long)d->m, (long long)d->n, (long long)d->k, dt_name(d->ab_type),
         dt_name(d->c_type), d->b_layout == LOOM_B_NK ? "B[n,k]" : "B[k,n]", d->has_bias, cfg ? cfg->bm : 0,
         cfg ? cfg->bn : 0, cfg ? cfg->sk_tiles : 0, cfg ? cfg->sk_blocks : 0, cfg ? cfg->sk_splits : 0,
         cfg ? cfg->cluster : 0, cfg ? cfg->grid : 0, unw, rel_ref, bad_ref, rel_cub, bad_cub);
  if (!ok)
    loom_test_fail(__FILE__, __LINE__, "GEMM m=%lld n=%lld k=%lld mismatched", (long long)d->m, (long long)d->n,
                   (long long)d->k);
out:
  gcase_free(&g);
  return ok;
}

/* One wait-only hooked launch of cfg (AllGather+GEMM's kind: waits, plain
 * stores) with row blocks of `rpb` rows released by the host in a random
 * order, `held` never (-1: all); returns 0 if the stream finished before the
 * last release or a call failed. */
static int hooks_split_run(gcase_t *g, fake_comm_t *fc, uint32_t *wait_h, uint32_t *wait_d, int blocks, int rpb,
                           const loom_gemm_config_t *cfg, int act, uint32_t epoch, int held, cudaStream_t st) {
  const loom_gemm_desc_t *d = &g->d;
  memset(wait_h, 0, (size_t)blocks * 4);
  CUDA_OK(cudaMemset(g->dc, 0xFF, g->c_bytes));
  CUDA_OK(cudaStreamSynchronize(st));
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  h.order.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
  h.order.row_shift = (cfg->bm == 64 ? 1 : (int32_t)((d->m + 127) / 128)) > 2 ? 2 : 0;
  h.wait_signals = wait_d;
  h.wait_epoch = epoch;
  h.wait_rows_per_signal = rpb;
  h.epilogue = LOOM_EPI_STORE;
  h.activation = act;
  h.comm = fc->dc;
  LOOM_OK(loom__gemm_hooked(d, g->da, g->db, g->dc, d->has_bias ? g->dbias : NULL, cfg, &h, st));
  int order[64];
  random_order(order, blocks);
  const int early = release_in_order(wait_h, order, blocks, held, epoch, 0.001, st);
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(g->hc, g->dc, g->c_bytes, cudaMemcpyDeviceToHost));
  return early == 0;
out: /* a failed call (counted by its check) */
  return 0;
}

void gemm_hooks_split_wait_only_case(void) {
  /* Hooked GEMMs that only wait (AllGather+GEMM's kind) with split-K and
   * stream-K, 128- and 64-row tiles (bn 224: no activation, so its GELU
   * step runs whole tiles), narrow n and long k (a TP = 8 slice):
   * (1) row blocks released in a random order: the GEMM is not done before
   * the last one, every element written, C against fp64; (2) twice with all
   * released: the same bits (the partials are summed in k order); (3) with
   * an activation, against the data-parallel hooked kernel; (4) one row
   * block never released: the wait expires naming it, the launch returns
   * in bounded time, and none of that block's rows is written (reduced
   * apart: no row at all, the reduction sees the comm's abort word). */
  static const struct {
    int bm, bn, splits, grid, m, rpb, apart;
  } cs[7] = {{128, 128, 4, 0, 5 * 128 - 37, 128, 0}, {128, 256, 0, 40, 3 * 128 + 5, 64, 0},
             {64, 128, 6, 0, 64, 32, 0},             {64, 256, 0, 24, 33, 16, 0},
             {128, 224, 3, 0, 2 * 128 + 7, 128, 0},  {128, 128, 4, 0, 5 * 128 - 37, 128, 1},
             {64, 256, 5, 0, 2 * 64 + 9, 32, 1}};
  for (int ci = 0; ci < 7; ++ci) {
    gcase_t g;
    fake_comm_t fc;
    uint32_t *wait_h = NULL, *wait_d = NULL;
    cudaStream_t st = NULL;
    double rel = 0;
    memset(&g, 0, sizeof g);
    memset(&fc, 0, sizeof fc);
    const loom_gemm_desc_t d =
        LOOM_GEMM_DESC(cs[ci].m, cs[ci].bn * 5 - 8, 4096 + 40, LOOM_BF16, LOOM_BF16, ci % 2 ? LOOM_B_KN : LOOM_B_NK, 1);
    const int blocks = (int)((d.m + cs[ci].rpb - 1) / cs[ci].rpb);
    if (!gcase_init(&g, &d) || !fake_comm_init(&fc, 20.0)) {
      loom_test_fail(__FILE__, __LINE__, "allocation");
      goto out;
    }
    CUDA_OK(cudaHostAlloc((void **)&wait_h, 64 * 4, cudaHostAllocMapped));
    CUDA_OK(cudaHostGetDevicePointer((void **)&wait_d, wait_h, 0));
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    loom_gemm_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.bm = cs[ci].bm, cfg.bn = cs[ci].bn, cfg.group = 4, cfg.sk_tiles = -1, cfg.sk_splits = cs[ci].splits;
    cfg.grid = cs[ci].grid, cfg.sk_reduce = cs[ci].apart;
    /* (1) */
    CHECK(hooks_split_run(&g, &fc, wait_h, wait_d, blocks, cs[ci].rpb, &cfg, LOOM_ACT_NONE, 5, -1, st));
    CHECK_EQ_INT(fc.err_h->valid, 0);
    CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
    CHECK(check_ref(&g, NULL, 0, &rel) == 0);
    /* (2) */
    memcpy(g.hc2, g.hc, g.c_bytes);
    CHECK(hooks_split_run(&g, &fc, wait_h, wait_d, blocks, cs[ci].rpb, &cfg, LOOM_ACT_NONE, 6, -1, st));
    const int same = memcmp(g.hc, g.hc2, g.c_bytes) == 0;
    CHECK(same);
    /* (3) GELU: split against whole tiles */
    CHECK(hooks_split_run(&g, &fc, wait_h, wait_d, blocks, cs[ci].rpb, &cfg, LOOM_ACT_GELU_TANH, 7, -1, st));
    memcpy(g.hc2, g.hc, g.c_bytes);
    loom_gemm_config_t dp = cfg;
    dp.sk_tiles = 0, dp.sk_splits = 0, dp.grid = 0;
    CHECK(hooks_split_run(&g, &fc, wait_h, wait_d, blocks, cs[ci].rpb, &dp, LOOM_ACT_GELU_TANH, 8, -1, st));
    double worst = 0;
    for (size_t i = 0; i < (size_t)d.m * (size_t)d.n; ++i) {
      const double x = loom_ref_load(d.c_type, g.hc2, i), y = loom_ref_load(d.c_type, g.hc, i);
      const double e = fabs(x - y) / (fabs(y) + 1.0);
      worst = e > worst ? e : worst;
    }
    CHECK(worst < 2e-2);
    /* (4) */
    fake_comm_free(&fc);
    if (!fake_comm_init(&fc, 0.2)) {
      loom_test_fail(__FILE__, __LINE__, "allocation");
      goto out;
    }
    {
      const int held = blocks - 1 - (int)(next_seed() % (uint64_t)blocks);
      const double t0 = now_s();
      hooks_split_run(&g, &fc, wait_h, wait_d, blocks, cs[ci].rpb, &cfg, LOOM_ACT_NONE, 9, held, st);
      const double dt = now_s() - t0;
      CHECK(dt < 5.0);
      CHECK_EQ_INT(fc.err_h->valid, 1);
      CHECK_EQ_INT(fc.err_h->site, LOOM_SITE_GEMM_PROLOGUE);
      CHECK_EQ_INT((int)fc.err_h->signal, held);
      const int r0 = held * cs[ci].rpb, r1 = r0 + cs[ci].rpb < (int)d.m ? r0 + cs[ci].rpb : (int)d.m;
      const size_t es = loom_dtype_size(d.c_type);
      const size_t unw = count_unwritten(d.c_type, (const char *)g.hc + (size_t)r0 * (size_t)d.n * es,
                                         (size_t)(r1 - r0) * (size_t)d.n);
      CHECK(unw == (size_t)(r1 - r0) * (size_t)d.n);
      printf("    wait-only hooks, bm %d bn %d %s: fp64 rel %.2e, two runs identical %s, GELU vs whole tiles %.1e, "
             "row block %d held: expired after %.2f s, its rows untouched\n",
             cs[ci].bm, cs[ci].bn, cs[ci].apart ? "split-K reduced apart" : cs[ci].splits ? "split-K" : "stream-K", rel,
             same ? "yes" : "NO", worst, held, dt);
    }
  out:
    if (st) cudaStreamDestroy(st);
    if (wait_h) cudaFreeHost(wait_h);
    fake_comm_free(&fc);
    gcase_free(&g);
  }
}
