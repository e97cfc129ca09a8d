/*
 * pool_loops.cu - the embedding pooling's row loops, measured side by side
 * (one GPU, pooling alone). The production kernels use one loop, FLAT
 * (src/ops/embedding/embedding_a2a.cuh); the others live here, with the benchmark and
 * the CPU check that chose it (docs/perf/embedding.md, "Row loops"):
 *   FLAT     per group of U rows every slot loads (a dead slot reads row 0 of
 *            its table), the FMAs of live slots are kept: one wave of U x NV
 *            loads per group (production)
 *   SELECT   a slot loads only if it is live (`live ? load : 0`): ptxas
 *            issues a group's loads in 3-4 dependent waves
 *   PIPE     FLAT with two groups in flight (the next group's loads before
 *            the current group's FMAs)
 *   BAGWISE  per bag: its offsets, then a chunk of indices, then SELECT rows;
 *            nothing of the next bag in flight (the first fused kernel's loop)
 * each at 8 or 16 row chunks of 16 bytes in flight per lane, with the
 * 128-register cap of the production kernels (2 blocks per SM) or without.
 * Every loop adds a bag's rows in index order with one fmaf each, so their
 * outputs are bit-identical; each is checked against the double-precision
 * CPU reference (src/ref/embedding_ref.h) and compared word for word with
 * FLAT. Timing: each repetition runs every variant once, in turn (CUDA
 * events), median; GB/s counts rows + indices + pooled output.
 *
 *   build/dev/embedding/pool_loops [--B 4096] [--T 16] [--D 256] [--L 32]
 *       [--rows 100000] [--zipf A] [--bf16] [--reps 20] [--warmup 3]
 * Exit status 1 if any variant's output is wrong.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>

#include "support/dlrm_gen.h"
#include "ops/embedding/embedding_a2a.cuh"
#include "ref/embedding_ref.h"
#include "ref/ref.h"

#include "../common/check.cuh"

/* ---- the row loops that are not the production one ------------------------ */

/* SELECT: a slot that is not live loads nothing (`live ? load : 0`); the
 * sums are FLAT's. */
struct DEV_ROWS_SELECT {
  template <typename TT, int NV, int U>
  static __device__ __forceinline__ void add(const TT *tab, int64_t rows_t, int D, int nvec, int lane, int n,
                                             int64_t my, float mw, float (&acc)[NV][emb_ty<TT>::VE]) {
    (void)rows_t;
    for (int u0 = 0; u0 < n; u0 += U) {
      uint4 v[U][NV];
      float w[U];
      bool live[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int src = u0 + u;
        const int64_t ix = __shfl_sync(EMB_FULL_MASK, my, src & 31);
        w[u] = __shfl_sync(EMB_FULL_MASK, mw, src & 31);
        live[u] = src < n && ix >= 0;
        const uint4 *row = reinterpret_cast<const uint4 *>(tab + (live[u] ? ix : 0) * (int64_t)D);
#pragma unroll
        for (int m = 0; m < NV; ++m) {
          const int c = lane + 32 * m;
          v[u][m] = (live[u] && c < nvec) ? __ldg(row + c) : make_uint4(0u, 0u, 0u, 0u);
        }
      }
      emb_group_sum<TT, NV, U>(v, w, live, acc);
    }
  }
};

/* PIPE: two groups in turn; group k+1's loads go out before group k is added. */
struct DEV_ROWS_PIPE {
  template <typename TT, int NV, int U>
  static __device__ __forceinline__ void add(const TT *tab, int64_t rows_t, int D, int nvec, int lane, int n,
                                             int64_t my, float mw, float (&acc)[NV][emb_ty<TT>::VE]) {
    if (n <= 0 || rows_t <= 0) return;
    uint4 va[U][NV], vb[U][NV];
    float wa[U], wb[U];
    bool la[U], lb[U];
    emb_group_issue<TT, NV, U>(tab, D, nvec, lane, 0, n, my, mw, va, wa, la);
    for (int u0 = 0;; u0 += 2 * U) {
      const bool more_b = u0 + U < n;
      if (more_b) emb_group_issue<TT, NV, U>(tab, D, nvec, lane, u0 + U, n, my, mw, vb, wb, lb);
      emb_group_sum<TT, NV, U>(va, wa, la, acc);
      if (!more_b) break;
      const bool more_a = u0 + 2 * U < n;
      if (more_a) emb_group_issue<TT, NV, U>(tab, D, nvec, lane, u0 + 2 * U, n, my, mw, va, wa, la);
      emb_group_sum<TT, NV, U>(vb, wb, lb, acc);
      if (!more_a) break;
    }
  }
};

/* BAGWISE: per bag, every lane loads the bag's offsets, then a chunk's
 * indices (and weights), then SELECT rows; the same sums and stores as
 * emb_pool_bags. */
template <typename TT, int NV, int UR>
__device__ __forceinline__ void dev_pool_bagwise(const loom_emb_kargs_t &a, const loom_emb_task_t &tk, int lane,
                                                 float *dst0, int64_t stride) {
  constexpr int VE = emb_ty<TT>::VE;
  constexpr int U = UR / NV >= 1 ? UR / NV : 1;
  const int D = a.dim, nvec = D / VE, t = tk.table;
  const int64_t rows_t = a.rows[t];
  const TT *__restrict__ tab = reinterpret_cast<const TT *>(a.tables) + a.row_off[t] * (int64_t)D;
  for (int i = 0; i < tk.count; ++i) {
    const int64_t b = tk.sample0 + i;
    float acc[NV][VE];
#pragma unroll
    for (int m = 0; m < NV; ++m)
#pragma unroll
      for (int e = 0; e < VE; ++e) acc[m][e] = 0.f;
    int64_t start, end;
    emb_bag_range(a, t, b, start, end);
    for (int64_t base = start; base < end; base += 32) {
      const int n = end - base < 32 ? (int)(end - base) : 32;
      int64_t raw, my;
      float w, mw;
      emb_chunk_issue(a, base, n, lane, raw, w);
      emb_chunk_check(a, t, rows_t, b, base, n, lane, raw, w, my, mw);
      DEV_ROWS_SELECT::add<TT, NV, U>(tab, rows_t, D, nvec, lane, n, my, mw, acc);
    }
    emb_store_bag<float, NV, VE>(acc, 0, dst0 + b * stride, lane, nvec);
  }
}

/* Pooling alone, one warp per task (static stride), output [B, T*D] fp32. */
template <typename TT, int NV, int UR, typename ROWS, int BAGWISE, int MINB>
__global__ void __launch_bounds__(LOOM_EMB_THREADS, MINB) dev_pool_kernel(const __grid_constant__ loom_emb_kargs_t a) {
  const int lane = threadIdx.x & 31, D = a.dim;
  const int64_t ntasks = loom__emb_num_tasks(&a.s), stride = (int64_t)a.s.t_local * D;
  const int64_t nwarps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t k = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); k < ntasks; k += nwarps) {
    const loom_emb_task_t tk = loom__emb_task_decode(&a.s, k);
    float *dst0 = reinterpret_cast<float *>(a.peer[0]) + (int64_t)tk.table * D;
    if (BAGWISE) dev_pool_bagwise<TT, NV, UR>(a, tk, lane, dst0, stride);
    else emb_pool_bags<TT, float, NV, UR, ROWS>(a, tk, lane, dst0, 0, stride);
  }
}

/* ---- variants ------------------------------------------------------------- */

typedef void (*dev_kernel_t)(loom_emb_kargs_t);

typedef struct dev_variant {
  const char *name;
  dev_kernel_t k[2][4]; /* [fp32, bf16][NV 1, 2, 4, 8] */
} dev_variant_t;

#define DEV_NVS(TT, UR, ROWS, BW, MINB)                                                                  \
  {dev_pool_kernel<TT, 1, UR, ROWS, BW, MINB>, dev_pool_kernel<TT, 2, UR, ROWS, BW, MINB>,              \
   dev_pool_kernel<TT, 4, UR, ROWS, BW, MINB>, dev_pool_kernel<TT, 8, UR, ROWS, BW, MINB>}
#define DEV_VARIANT(name, UR, ROWS, BW, MINB) \
  {name, {DEV_NVS(float, UR, ROWS, BW, MINB), DEV_NVS(__nv_bfloat16, UR, ROWS, BW, MINB)}}

static const dev_variant_t g_variants[] = {
    DEV_VARIANT("FLAT u8 (production)", 8, EMB_ROWS_FLAT, 0, 2),
    DEV_VARIANT("FLAT u16", 16, EMB_ROWS_FLAT, 0, 2),
    DEV_VARIANT("SELECT u8", 8, DEV_ROWS_SELECT, 0, 2),
    DEV_VARIANT("SELECT u16", 16, DEV_ROWS_SELECT, 0, 2),
    DEV_VARIANT("SELECT u8 no reg cap", 8, DEV_ROWS_SELECT, 0, 1),
    DEV_VARIANT("PIPE u8", 8, DEV_ROWS_PIPE, 0, 2),
    DEV_VARIANT("BAGWISE u8 no reg cap", 8, DEV_ROWS_SELECT, 1, 1),
};
#define NVAR ((int)(sizeof g_variants / sizeof *g_variants))

static double median(double *v, int n) {
  std::sort(v, v + n);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  int64_t B = 4096, rows = 100000;
  int T = 16, D = 256, L = 32, reps = 20, warmup = 3, bf16 = 0;
  double zipf = 0.0;
  for (int i = 1; i < argc; ++i) {
    const char *s = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(s, "--B")) B = atoll(v), ++i;
    else if (!strcmp(s, "--T")) T = atoi(v), ++i;
    else if (!strcmp(s, "--D")) D = atoi(v), ++i;
    else if (!strcmp(s, "--L")) L = atoi(v), ++i;
    else if (!strcmp(s, "--rows")) rows = atoll(v), ++i;
    else if (!strcmp(s, "--zipf")) zipf = atof(v), ++i;
    else if (!strcmp(s, "--reps")) reps = atoi(v), ++i;
    else if (!strcmp(s, "--warmup")) warmup = atoi(v), ++i;
    else if (!strcmp(s, "--bf16")) bf16 = 1;
    else {
      fprintf(stderr, "usage: pool_loops [--B N] [--T N] [--D N] [--L N] [--rows N] [--zipf A] [--bf16] [--reps N] "
                      "[--warmup N]\n");
      return 2;
    }
  }
  if (B < 1 || T < 1 || D < 8 || D > 1024 || D % 8 || L < 1 || rows < 1 || reps < 1 || warmup < 0) {
    fprintf(stderr, "pool_loops: B=%lld T=%d D=%d L=%d rows=%lld reps=%d: out of range\n", (long long)B, T, D, L,
            (long long)rows, reps);
    return 2;
  }
  const loom_dtype_t tt = bf16 ? LOOM_BF16 : LOOM_FP32;
  const size_t ts = loom_dtype_size(tt), tab = (size_t)T * (size_t)rows * (size_t)D, outn = (size_t)B * T * D;
  const int nv = emb_chunks_per_lane(tt, D), nvi = nv == 1 ? 0 : nv == 2 ? 1 : nv == 4 ? 2 : 3;

  /* inputs (host, then device) */
  int64_t *h_rows = (int64_t *)malloc((size_t)T * sizeof(int64_t)), *h_roff = (int64_t *)malloc((size_t)T * 8);
  for (int t = 0; t < T; ++t) h_rows[t] = rows, h_roff[t] = (int64_t)t * rows;
  int64_t *h_off = (int64_t *)malloc(((size_t)T * B + 1) * sizeof(int64_t));
  loom_dlrm_gen_t g = {T, B, h_rows, L, 0, 0.0, zipf, 2024};
  const int64_t n = loom_dlrm_gen_offsets(&g, h_off);
  int64_t *h_idx = (int64_t *)malloc((size_t)n * sizeof(int64_t));
  void *h_tab = malloc(tab * ts);
  if (!h_rows || !h_roff || !h_off || !h_idx || !h_tab || loom_dlrm_gen_indices(&g, h_off, h_idx) != 0) {
    fprintf(stderr, "pool_loops: host memory\n");
    return 1;
  }
  loom_ref_fill_random(tt, h_tab, tab, 7, 1.0);
  void *d_tab, *d_out;
  int64_t *d_off, *d_idx, *d_rows, *d_roff;
  loom_emb_err_t *d_err;
  CK(cudaMalloc(&d_tab, tab * ts));
  CK(cudaMalloc(&d_out, outn * 4));
  CK(cudaMalloc((void **)&d_off, ((size_t)T * B + 1) * 8));
  CK(cudaMalloc((void **)&d_idx, (size_t)n * 8));
  CK(cudaMalloc((void **)&d_rows, (size_t)T * 8));
  CK(cudaMalloc((void **)&d_roff, (size_t)T * 8));
  CK(cudaMalloc((void **)&d_err, sizeof(loom_emb_err_t)));
  CK(cudaMemcpy(d_tab, h_tab, tab * ts, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_off, h_off, ((size_t)T * B + 1) * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_idx, h_idx, (size_t)n * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_rows, h_rows, (size_t)T * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_roff, h_roff, (size_t)T * 8, cudaMemcpyHostToDevice));
  CK(cudaMemset(d_err, 0, sizeof(loom_emb_err_t)));

  /* pooling alone on one rank: W = 1, one slice of the whole batch, 4 bags per task */
  loom_emb_kargs_t a;
  memset(&a, 0, sizeof a);
  if (loom__emb_sched_init(&a.s, 1, 0, T, T, 0, B, B > 0x7fffffff ? 0x7fffffff : (int)B, LOOM_EMB_DEFAULT_PART, 0)) {
    fprintf(stderr, "pool_loops: schedule rejected\n");
    return 2;
  }
  a.dim = D;
  a.pooling = LOOM_POOL_SUM;
  a.tables = d_tab;
  a.indices = d_idx;
  a.offsets = d_off;
  a.num_indices = n;
  a.row_off = d_roff;
  a.rows = d_rows;
  a.total_rows = (int64_t)T * rows;
  a.pool_only = 1;
  a.peer[0] = (char *)d_out;
  a.err = d_err;

  /* the double-precision reference and its error scale */
  double *ref = (double *)malloc(outn * sizeof(double)), *mag = (double *)malloc(outn * sizeof(double));
  float *got = (float *)malloc(outn * 4), *flat = (float *)malloc(outn * 4);
  if (!ref || !mag || !got || !flat) {
    fprintf(stderr, "pool_loops: host memory for the reference\n");
    return 1;
  }
  loom_ref_embedding_pool(h_tab, tt, h_rows, T, D, B, h_off, h_idx, NULL, 0, ref, mag);

  int dev = 0;
  cudaDeviceProp prop;
  CK(cudaGetDevice(&dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  int grid[NVAR], regs[NVAR], spill[NVAR];
  int64_t wrong[NVAR], diff[NVAR];
  int failures = 0;
  for (int v = 0; v < NVAR; ++v) {
    dev_kernel_t k = g_variants[v].k[bf16][nvi];
    int bps = 1;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k, LOOM_EMB_THREADS, 0));
    grid[v] = prop.multiProcessorCount * std::max(1, std::min(bps, 4));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, k));
    regs[v] = fa.numRegs;
    spill[v] = (int)fa.localSizeBytes;
    /* checked: every element against the reference, every word against FLAT */
    CK(cudaMemset(d_out, 0xff, outn * 4));
    k<<<grid[v], LOOM_EMB_THREADS>>>(a);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, d_out, outn * 4, cudaMemcpyDeviceToHost));
    if (v == 0) memcpy(flat, got, outn * 4);
    wrong[v] = diff[v] = 0;
    for (size_t i = 0; i < outn; ++i) {
      const double e = fabs((double)got[i] - ref[i]);
      if (!(e <= 1e-6 * fabs(ref[i]) + 2e-6 * mag[i])) {
        if (wrong[v] < 3)
          fprintf(stderr, "pool_loops: %s: out[%zu] = %.9g, expected %.9g\n", g_variants[v].name, i, got[i], ref[i]);
        ++wrong[v];
      }
      diff[v] += memcmp(&got[i], &flat[i], 4) != 0;
    }
    failures += wrong[v] != 0;
  }
  loom_emb_err_t err;
  CK(cudaMemcpy(&err, d_err, sizeof err, cudaMemcpyDeviceToHost));
  if (err.valid) {
    fprintf(stderr, "pool_loops: the kernels recorded an input error (kind %u)\n", err.kind);
    ++failures;
  }

  /* timing, interleaved: each repetition runs every variant once */
  cudaEvent_t ev[NVAR + 1];
  for (int i = 0; i <= NVAR; ++i) CK(cudaEventCreate(&ev[i]));
  double *us = (double *)malloc((size_t)NVAR * reps * sizeof(double));
  for (int r = -warmup; r < reps; ++r) {
    for (int v = 0; v < NVAR; ++v) {
      CK(cudaEventRecord(ev[v]));
      g_variants[v].k[bf16][nvi]<<<grid[v], LOOM_EMB_THREADS>>>(a);
    }
    CK(cudaEventRecord(ev[NVAR]));
    CK(cudaEventSynchronize(ev[NVAR]));
    CK(cudaGetLastError());
    if (r < 0) continue;
    for (int v = 0; v < NVAR; ++v) {
      float ms = 0.f;
      CK(cudaEventElapsedTime(&ms, ev[v], ev[v + 1]));
      us[(size_t)v * reps + r] = 1e3 * ms;
    }
  }
  const double bytes = (double)n * D * ts + (double)n * 8 + (double)outn * 4;
  printf("# pool_loops on %s: B=%lld T=%d D=%d L=%d rows=%lld %s tables, %s indices, %lld lookups; median of %d "
         "interleaved reps\n",
         prop.name, (long long)B, T, D, L, (long long)rows, bf16 ? "bf16" : "fp32", zipf > 0 ? "zipf" : "uniform",
         (long long)n, reps);
  printf("# %-24s %10s %9s %8s %5s %6s %5s %7s %7s\n", "loop", "us", "GB/s", "vs FLAT", "regs", "spill", "grid",
         "wrong", "!=FLAT");
  double flat_us = 0;
  for (int v = 0; v < NVAR; ++v) {
    const double m = median(us + (size_t)v * reps, reps);
    if (v == 0) flat_us = m;
    printf("  %-24s %10.1f %9.0f %7.3fx %5d %6d %5d %7lld %7lld\n", g_variants[v].name, m, bytes / (m * 1e-6) / 1e9,
           m / flat_us, regs[v], spill[v], grid[v], (long long)wrong[v], (long long)diff[v]);
  }
  printf("# GB/s counts rows (lookups x D x %zu B) + indices (8 B) + pooled output (B x T x D x 4 B); wrong: elements "
         "off the fp64 reference; !=FLAT: words that differ from the production loop's\n", ts);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
