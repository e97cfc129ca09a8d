/*
 * bench_gemm_dev.cu - development benchmark of loom's GEMM configurations:
 * for each shape, every configuration the model considers (gemm_heuristic.c:
 * loom__gemm_candidates, sm90 path) and more small-m split counts, timed
 * side by side with cuBLASLt (best of 8 heuristic candidates) and
 * cublasGemmEx (default algorithm), and the model's prediction for each, so
 * that one device call says which kernel wins where and how far the model's
 * constants are off. Shapes come from the FITTING half of the shape set only
 * (src/gemm/gemm_shapes.h): what this measures may refit the model; the
 * held-out half is loom-bench gemm --held-out's.
 *
 *   bench_gemm_dev [set] [json]      set: decode | mid | large | issue | all (default all)
 *     decode  fitting weights of >= 8 MB at m = 1, 4, 16, 32, 64
 *     mid     fitting weights at m = 128, 256, 512 (every 3rd weight)
 *     large   fitting weights at m = 1000, 3000 (every 2nd weight)
 *     issue   the two shapes of the issue and their neighbours (m = 1..64 at
 *             n = 12288, k = 1536; m = 1000..4096 at n = 4608, k = 12288)
 *   bench_gemm_dev shape M N K nk|kn [json]  one shape, every configuration
 *   bench_gemm_dev none              does the binary start at all
 *   LOOM_DEV_STREAMK=1               also stream-K of 128-row tiles above m = 64
 *                                    (every tile; the last partial wave; it plus a wave)
 *   LOOM_DEV_SKR=1                   also each split-K candidate reduced apart (sk_reduce,
 *                                    named "...r"); =2 also split-K reduced apart of 128 x
 *                                    128/192/256 and 64 x 128/256 tiles, splits 2..8, where
 *                                    the units fill at most two waves
 *
 * Per shape: bf16 in and out, no bias, the set's B layout; random inputs
 * (device hash, never zero) in a pool large enough that consecutive
 * repetitions use different copies of A and B (L2 never holds the next);
 * REPS (default 10) repetitions, each running every configuration and the
 * two baselines back to back with events between; medians. Every
 * configuration's C (poisoned first) is compared with cuBLASLt's on every
 * element (bad = out of bound or NaN).
 *
 * Output: one line per (shape, configuration) in the log; at the end, the
 * summary the decisions need (docs/perf/gemm.md, "What the dev bench decides"): per band, the
 * geomean of cuBLASLt time / loom time for the model's pick, the best
 * small-m split, the best decode-variant configuration, the best of all;
 * the weight stream's fraction of the copy bandwidth; per kernel, how the
 * model's predictions compare with the measurements; the worst shapes.
 * JSON (second argument): every (shape, configuration) with measured and
 * predicted times, for refitting the model's constants.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "baseline/baseline.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_shapes.h"
#include "gemm/small_m_layout.h"

#include "../common/check.cuh"

static __global__ void fill_kernel(uint16_t *p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float f = ((float)(z >> 40) / (float)(1 << 24)) * 2.f - 1.f; /* [-1, 1) */
    if (f == 0.f) f = 0.5f;
    uint32_t u = __float_as_uint(f);
    p[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* bf16, RNE */
  }
}

static __device__ float bf16f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* a stand-in of the sm90 GEMM's block (384 threads, ~200 KiB of shared
 * memory) for the cluster occupancy query below */
static __global__ void cluster_probe_kernel(int *p) {
  if (p) p[blockIdx.x] = 1;
}

/* How many blocks in 2-block clusters can be resident at once: a cluster
 * needs both blocks in one GPC, so this can be below the SM count. */
static int cluster2_blocks(size_t smem) {
  CK(cudaFuncSetAttribute((const void *)cluster_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute at;
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = 2, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
  lc.gridDim = dim3(2, 1, 1), lc.blockDim = dim3(384, 1, 1), lc.dynamicSmemBytes = smem;
  lc.attrs = &at, lc.numAttrs = 1;
  int n = 0;
  CK(cudaOccupancyMaxActiveClusters(&n, (const void *)cluster_probe_kernel, &lc));
  return 2 * n;
}

/* elements of x (loom) outside the bound around y (cuBLASLt), NaN included */
static __global__ void cmp_kernel(const uint16_t *x, const uint16_t *y, size_t n, float ea, unsigned long long *bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float a = bf16f(x[i]), c = bf16f(y[i]);
    if (!(fabsf(a - c) <= (2.f / 128) * fabsf(c) + ea)) b++;
  }
  if (b) atomicAdd(bad, b);
}

typedef struct shape {
  const char *set, *family, *layer;
  int64_t m, n, k;
  int kn;
} shape_t;

typedef struct rec {
  shape_t s;
  loom_gemm_config_t c;
  int pick;          /* 1: the model's pick */
  double us, pred;   /* measured median, model */
  double lt, def;    /* the baselines on this shape */
  unsigned long long bad;
} rec_t;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void cfg_text(const loom_gemm_config_t *c, char *out, size_t size) {
  if (c->bm == 16) {
    static const char *const pipe[LOOM_SMALLM_PIPES] = {"smallm", "smallregs", "smallregs2"};
    snprintf(out, size, "%s/s%d", pipe[c->stages >= 0 && c->stages < LOOM_SMALLM_PIPES ? c->stages : 0],
             c->sk_splits > 1 ? c->sk_splits : 1);
  }
  else if (c->bm == 64) snprintf(out, size, "d%d%s", c->bn, c->sk_splits > 1 ? "/sp" : c->sk_tiles ? "/sk" : "");
  else if (c->sk_tiles != 0 && c->sk_splits <= 1) /* stream-K: of every tile, or of the last sk_tiles */
    snprintf(out, size, "%d%s/sk%s", c->bn, c->cluster == 2 ? "c2" : "", c->sk_tiles < 0 ? "" : "tail");
  else snprintf(out, size, "%d%s%s", c->bn, c->cluster == 2 ? "c2" : "", c->sk_tiles == 0 ? "" : c->sk_tiles < 0 ? "/sp" : "/tail");
  if (c->sk_splits > 1 && c->bm != 16) {
    const size_t l = strlen(out);
    snprintf(out + l, size - l, "%d%s", c->sk_splits, c->sk_reduce ? "r" : "");
  }
}

/* LOOM_DEV_SKR (level 1, 2): split-K reduced apart. Level 1: a copy of
 * each split-K candidate in cand[0, nc) with sk_reduce set; level 2 also
 * 128-row tiles of 128 / 192 / 256 and 64-row tiles of 128 / 256 columns,
 * splits 2..8, where tiles x splits is at most two waves. Each
 * configuration once, at most max in all; returns the new count. */
static int add_split_reduced(const shape_t *s, const loom__gemm_device_t *dev, loom_gemm_config_t *cand, int nc,
                             int max, int level) {
  auto push = [&](loom_gemm_config_t c) {
    for (int i = 0; i < nc; ++i)
      if (!memcmp(&cand[i], &c, sizeof c)) return;
    if (nc < max) cand[nc++] = c;
  };
  const int n0 = nc;
  for (int i = 0; i < n0; ++i)
    if (cand[i].bm != 16 && cand[i].sk_splits > 1) {
      loom_gemm_config_t c = cand[i];
      c.sk_reduce = 1;
      push(c);
    }
  if (level < 2) return nc;
  const int tiles_of[5][2] = {{128, 128}, {128, 192}, {128, 256}, {64, 128}, {64, 256}};
  for (int t = 0; t < 5; ++t)
    for (int sp = 2; sp <= 8; ++sp) {
      const int bm = tiles_of[t][0], bn = tiles_of[t][1];
      const int64_t tiles = ((s->m + bm - 1) / bm) * ((s->n + bn - 1) / bn);
      if (tiles * sp > 2 * (int64_t)dev->sms || sp > s->k / 64) continue;
      push((loom_gemm_config_t){bn, 0, 16, 0, -1, 0, sp, 0, bm == 64 ? 64 : 0, 1});
    }
  return nc;
}

/* The kind a configuration belongs to (summary rows). */
static int cfg_kind(const loom_gemm_config_t *c) {
  if (c->bm == 16) return c->stages == 0 ? 0 : 3 + c->stages; /* 4, 5: each explicit pipe */
  if (c->bm == 64) return 1;
  return c->sk_tiles == 0 ? 2 : 3;
}
static const char *const kind_names[6] = {"small-m", "decode bm64", "128-row whole", "128-row split",
                                          "small-m regs", "small-m regs2"};

int main(int argc, char **argv) {
  const char *set = argc > 1 ? argv[1] : "all";
  if (!strcmp(set, "none")) return 0;
  const char *json = NULL;
  std::vector<shape_t> shapes;
  loom_gemm_weight_t w[256];
  const int nw = loom__gemm_weights(0, w, 256); /* fitting half only */
  const int all = !strcmp(set, "all");
  auto add = [&](const char *st, const loom_gemm_weight_t *x, int64_t m) {
    const loom_gemm_desc_t d = loom__gemm_shape_variant(m, x->n, x->k);
    shapes.push_back({st, loom_gemm_families[x->family].name, x->layer, m, x->n, x->k, d.b_layout == LOOM_B_KN});
  };
  if (!strcmp(set, "shape")) {
    if (argc < 6) {
      fprintf(stderr, "usage: bench_gemm_dev shape M N K nk|kn [json]\n");
      return 2;
    }
    shapes.push_back({"shape", "-", "-", atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), !strcmp(argv[5], "kn")});
    json = argc > 6 ? argv[6] : NULL;
  } else {
    json = argc > 2 ? argv[2] : NULL;
    if (all || !strcmp(set, "issue")) {
      static loom_gemm_weight_t q = {12288, 1536, 0, 0, 8, "o"}, v = {4608, 12288, 0, 0, 8, "qkv"};
      const int64_t dm[] = {1, 8, 16, 32, 64}, lm[] = {1000, 2048, 4096};
      for (int i = 0; i < 5; ++i) add("issue", &q, dm[i]);
      for (int i = 0; i < 3; ++i) add("issue", &v, lm[i]);
    }
    if (all || !strcmp(set, "decode")) {
      const int64_t ms[] = {1, 4, 16, 32, 64};
      for (int i = 0; i < nw; ++i)
        if ((double)w[i].n * w[i].k * 2 >= 8e6)
          for (int j = 0; j < 5; ++j) add("decode", &w[i], ms[j]);
    }
    if (all || !strcmp(set, "mid")) {
      const int64_t ms[] = {128, 256, 512};
      for (int i = 0; i < nw; i += 3)
        for (int j = 0; j < 3; ++j) add("mid", &w[i], ms[j]);
    }
    if (all || !strcmp(set, "large")) {
      const int64_t ms[] = {1000, 3000};
      for (int i = 0; i < nw; i += 2)
        for (int j = 0; j < 2; ++j) add("large", &w[i], ms[j]);
    }
  }
  if (shapes.empty()) {
    fprintf(stderr, "bench_gemm_dev: no shapes for set \"%s\"\n", set);
    return 2;
  }
  const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 10;

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  loom__gemm_device_t dev;
  LK(loom__gemm_device(&dev));
  /* pools: every shape takes consecutive copies of A and B out of them */
  size_t maxa = 0, maxb = 0, maxc = 0;
  for (const shape_t &s : shapes) {
    maxa = std::max(maxa, (size_t)(s.m * s.k)), maxb = std::max(maxb, (size_t)(s.n * s.k));
    maxc = std::max(maxc, (size_t)(s.m * s.n));
  }
  const size_t pool_a = std::max(maxa, (size_t)96 << 20), pool_b = std::max(maxb, (size_t)384 << 20); /* elements */
  uint16_t *A, *B, *C, *C2;
  unsigned long long *bad_d;
  CK(cudaMalloc(&A, pool_a * 2));
  CK(cudaMalloc(&B, pool_b * 2));
  CK(cudaMalloc(&C, maxc * 2));
  CK(cudaMalloc(&C2, maxc * 2));
  CK(cudaMalloc(&bad_d, 8));
  fill_kernel<<<4096, 256>>>(A, pool_a, 1);
  fill_kernel<<<4096, 256>>>(B, pool_b, 2);
  CK(cudaGetLastError());
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t hb;
  if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS || cublasSetStream(hb, st) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  /* copy bandwidth: 512 MiB device to device, read + write, best of 8 */
  double hbm = 0;
  {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    /* half of the B pool (pool_b elements = 2 x pool_b bytes) onto the other half */
    const size_t bytes = std::min((size_t)512 << 20, pool_b);
    float best = 1e30f;
    for (int i = 0; i < 9; ++i) {
      CK(cudaEventRecord(e0, st));
      CK(cudaMemcpyAsync(B, B + bytes / 2, bytes, cudaMemcpyDeviceToDevice, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i && ms < best) best = ms;
    }
    hbm = 2.0 * bytes / (best * 1e-3);
    fill_kernel<<<4096, 256>>>(B, pool_b, 2);
    CK(cudaDeviceSynchronize());
  }
  printf("blocks resident in 2-block clusters (384 threads, 200 KiB shared memory each): %d of %d SMs\n",
         cluster2_blocks((size_t)200 << 10), prop.multiProcessorCount);
  printf("device %s, %d SMs, L2 %d MiB, copy bandwidth %.0f GB/s (read+write), peak (model) %.0f GB/s, "
         "%zu shapes, REPS %d\n",
         prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, hbm / 1e9, dev.dram_bps / 1e9, shapes.size(),
         reps);
  std::vector<rec_t> recs;
  std::vector<cudaEvent_t> ev;
  for (size_t si = 0; si < shapes.size(); ++si) {
    const shape_t s = shapes[si];
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(s.m, s.n, s.k, LOOM_BF16, LOOM_BF16, s.kn ? LOOM_B_KN : LOOM_B_NK, 0);
    /* the configurations: the model's candidates, more small-m split counts */
    loom_gemm_config_t cand[LOOM_GEMM_MAX_CANDIDATES + 48];
    int nc = loom__gemm_candidates(&d, &dev, 1, cand, LOOM_GEMM_MAX_CANDIDATES);
    if (s.m <= 64) {
      const int extra[] = {1, 2, 4, 8, 16, 32};
      for (int v = 0; v < LOOM_SMALLM_PIPES; ++v) /* the default pipe (stages 0) and each other one */
        for (int e = 0; e < 6 && v != LOOM_SMALLM_PIPE_DEFAULT; ++e) {
          loom_gemm_config_t c = {0, v, 0, 0, extra[e] > 1 ? -1 : 0, 0, extra[e] > 1 ? extra[e] : 0, 0, 16, 0};
          int dup = 0;
          for (int i = 0; i < nc; ++i) dup |= !memcmp(&cand[i], &c, sizeof c);
          if (!dup && nc < (int)(sizeof cand / sizeof cand[0])) cand[nc++] = c;
        }
    }
    if (s.m > 64 && getenv("LOOM_DEV_STREAMK")) {
      /* LOOM_DEV_STREAMK=1: stream-K of 128-row tiles too (every tile, and
       * the last partial wave, and it plus one whole wave), which the model
       * does not offer above m = 64 */
      const int widths[] = {128, 192, 224, 256};
      for (int wi = 0; wi < 4; ++wi) {
        const int64_t tiles = ((s.m + 127) / 128) * ((s.n + widths[wi] - 1) / widths[wi]);
        const int64_t rem = tiles % dev.sms;
        const int64_t sk_t[3] = {-1, rem, tiles > dev.sms && rem ? rem + dev.sms : 0};
        for (int v = 0; v < 3; ++v) {
          if (sk_t[v] == 0 || nc >= (int)(sizeof cand / sizeof cand[0])) continue;
          loom_gemm_config_t c = {widths[wi], 0, 0, 0, (int)sk_t[v], 0, 0, 0, 128, 0};
          cand[nc++] = c;
        }
      }
    }
    if (getenv("LOOM_DEV_SKR")) nc = add_split_reduced(&s, &dev, cand, nc, (int)(sizeof cand / sizeof cand[0]), atoi(getenv("LOOM_DEV_SKR")));
    const loom_gemm_config_t pick = loom__gemm_choose(&d, &dev, 1);
    /* copies: as many as keep consecutive repetitions out of L2 */
    const size_t sa = (size_t)(s.m * s.k), sb = (size_t)(s.n * s.k), sc = (size_t)(s.m * s.n);
    const double l2 = (double)prop.l2CacheSize;
    int na = (int)std::min<size_t>(pool_a / sa, 16), nb = (int)std::min<size_t>(pool_b / sb, 16);
    na = std::max(1, std::min(na, (int)ceil(3 * l2 / (sa * 2.0)) + 1));
    nb = std::max(1, std::min(nb, (int)ceil(3 * l2 / (sb * 2.0)) + 1));
    float tune_ms = 0;
    LK(loom__base_gemm_tune(&d, A, B, C2, NULL, 8, st, &tune_ms));
    const int nops = nc + 2; /* configurations, cuBLASLt, cublasGemmEx */
    if (ev.size() < (size_t)(2 * nops))
      for (size_t i = ev.size(); i < (size_t)(2 * nops); ++i) {
        cudaEvent_t e;
        CK(cudaEventCreate(&e));
        ev.push_back(e);
      }
    std::vector<std::vector<double>> t(nops);
    std::vector<char> dead(nops, 0); /* a configuration that failed to launch: reported, then skipped */
    int iter = 0;
    for (int r = -2; r < reps; ++r) {
      for (int o = 0; o < nops; ++o, ++iter) {
        const uint16_t *a = A + (size_t)(iter % na) * sa, *b = B + (size_t)(iter % nb) * sb;
        CK(cudaEventRecord(ev[2 * o], st));
        if (o < nc) {
          if (!dead[o] && loom__gemm_launch(1, &d, a, b, C, NULL, &cand[o], st) != LOOM_SUCCESS) {
            char ct[32];
            cfg_text(&cand[o], ct, sizeof ct);
            printf("    %lldx%lldx%lld %s: configuration %s refused: %s\n", (long long)s.m, (long long)s.n,
                   (long long)s.k, s.kn ? "kn" : "nk", ct, loom_last_error());
            dead[o] = 1;
            CK(cudaStreamSynchronize(st));
          }
        } else if (o == nc) {
          LK(loom__base_gemm(&d, a, b, C2, NULL, st));
        } else {
          const float al = 1.f, be = 0.f;
          if (cublasGemmEx(hb, s.kn ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, (int)s.n, (int)s.m, (int)s.k, &al, b,
                           CUDA_R_16BF, s.kn ? (int)s.n : (int)s.k, a, CUDA_R_16BF, (int)s.k, &be, C2, CUDA_R_16BF,
                           (int)s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublasGemmEx failed\n");
            return 1;
          }
        }
        CK(cudaEventRecord(ev[2 * o + 1], st));
      }
      CK(cudaStreamSynchronize(st));
      if (r < 0) continue;
      for (int o = 0; o < nops; ++o) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[2 * o], ev[2 * o + 1]));
        t[o].push_back(ms * 1e3);
      }
    }
    const double lt = median(t[nc]), def = median(t[nc + 1]);
    /* correctness: every configuration against cuBLASLt on copy 0 */
    LK(loom__base_gemm(&d, A, B, C2, NULL, st));
    for (int o = 0; o < nc; ++o) {
      if (dead[o]) continue;
      CK(cudaMemsetAsync(C, 0xFF, sc * 2, st));
      LK(loom__gemm_launch(1, &d, A, B, C, NULL, &cand[o], st));
      CK(cudaMemsetAsync(bad_d, 0, 8, st));
      cmp_kernel<<<2048, 256, 0, st>>>(C, C2, sc, 2e-5f * sqrtf((float)s.k) + 1e-3f, bad_d);
      CK(cudaGetLastError());
      unsigned long long bad = 0;
      CK(cudaMemcpyAsync(&bad, bad_d, 8, cudaMemcpyDeviceToHost, st));
      CK(cudaStreamSynchronize(st));
      rec_t rc;
      rc.s = s, rc.c = cand[o], rc.pick = !memcmp(&cand[o], &pick, sizeof pick);
      rc.us = median(t[o]), rc.pred = loom__gemm_predict_us(&d, &dev, &cand[o], 1);
      rc.lt = lt, rc.def = def, rc.bad = bad;
      recs.push_back(rc);
      char ct[32];
      cfg_text(&cand[o], ct, sizeof ct);
      const double frac = (double)s.n * s.k * 2 / (rc.us * 1e-6) / hbm;
      printf("%-6s %-14s %-8s %5lld %6lld %6lld %s | %-12s %s %9.1f us  pred %9.1f  x%.3f Lt  x%.3f def  HBM %3.0f%%%s\n",
             s.set, s.family, s.layer, (long long)s.m, (long long)s.n, (long long)s.k, s.kn ? "kn" : "nk", ct,
             rc.pick ? "*" : " ", rc.us, rc.pred, lt / rc.us, def / rc.us, 100 * frac, bad ? "  BAD" : "");
    }
    printf("%-6s %-14s %-8s %5lld %6lld %6lld %s | cuBLASLt %9.1f us  default %9.1f us  HBM %3.0f%% / %3.0f%%\n", s.set,
           s.family, s.layer, (long long)s.m, (long long)s.n, (long long)s.k, s.kn ? "kn" : "nk", lt, def,
           100.0 * s.n * s.k * 2 / (lt * 1e-6) / hbm, 100.0 * s.n * s.k * 2 / (def * 1e-6) / hbm);
    fflush(stdout);
    loom__base_gemm_release();
  }

  /* ---- summary ---- */
  printf("\n== summary (x = cuBLASLt time / loom time; geomean over shapes; HBM = weight / time / copy bandwidth)\n");
  const int64_t bands[4][2] = {{1, 16}, {17, 64}, {65, 512}, {513, 1 << 30}};
  const char *bnames[4] = {"m 1..16", "m 17..64", "m 65..512", "m >= 1000"};
  unsigned long long bad_total = 0;
  for (const rec_t &r : recs) bad_total += r.bad;
  for (int b = 0; b < 4; ++b) {
    double lg[7] = {0}, mn[7] = {9, 9, 9, 9, 9, 9, 9}, hb_small = 0, hb_lt = 0;
    int ns = 0, n85 = 0, cnt[7] = {0}, near = 0;
    size_t i = 0;
    while (i < recs.size()) {
      size_t j = i;
      while (j < recs.size() && !memcmp(&recs[j].s, &recs[i].s, sizeof(shape_t))) ++j;
      const shape_t &s = recs[i].s;
      if (s.m >= bands[b][0] && s.m <= bands[b][1]) {
        /* 0 pick, 1 best small-m (default pipe), 2 best bm64, 3 best 128-row, 4 best of all, 5, 6 best
         * small-m of pipe 1, 2 */
        double best[7] = {0, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
        for (size_t q = i; q < j; ++q) {
          const rec_t &r = recs[q];
          if (r.pick) best[0] = r.us;
          const int k = cfg_kind(&r.c);
          double *slot = k == 0 ? &best[1] : k == 1 ? &best[2] : k >= 4 ? &best[k + 1] : &best[3];
          *slot = std::min(*slot, r.us);
          best[4] = std::min(best[4], r.us);
        }
        for (int x = 0; x < 7; ++x)
          if (best[x] > 0 && best[x] < 1e29) {
            const double v = recs[i].lt / best[x];
            lg[x] += log(v), mn[x] = std::min(mn[x], v), cnt[x]++;
          }
        near += best[0] > 0 && best[0] <= best[4] * 1.03;
        if (best[1] < 1e29) {
          const double f = (double)s.n * s.k * 2 / (best[1] * 1e-6) / hbm;
          hb_small += log(f), n85 += f >= 0.85;
        }
        hb_lt += log((double)s.n * s.k * 2 / (recs[i].lt * 1e-6) / hbm);
        ns++;
      }
      i = j;
    }
    if (!ns) continue;
    printf("%-10s %3d shapes | pick x%.3f (min %.3f, within 3%% of best: %d) | best small-m x%.3f (min %.3f) | best bm64 "
           "x%.3f | best 128-row x%.3f | best x%.3f (min %.3f)",
           bnames[b], ns, cnt[0] ? exp(lg[0] / cnt[0]) : NAN, mn[0], near, cnt[1] ? exp(lg[1] / cnt[1]) : NAN, mn[1],
           cnt[2] ? exp(lg[2] / cnt[2]) : NAN, cnt[3] ? exp(lg[3] / cnt[3]) : NAN, exp(lg[4] / cnt[4]), mn[4]);
    for (int x = 5; x < 7; ++x)
      if (cnt[x]) printf(" | %s x%.3f", kind_names[x - 1], exp(lg[x] / cnt[x]));
    if (b < 2 && cnt[1])
      printf(" | HBM small-m %.0f%% (%d of %d >= 85%%), cuBLASLt %.0f%%", 100 * exp(hb_small / cnt[1]), n85, cnt[1],
             100 * exp(hb_lt / ns));
    printf("\n");
  }
  /* the model against the measurements, per kind of kernel */
  printf("== model: measured / predicted per kind (geomean, min, max over (shape, configuration))\n");
  for (int k = 0; k < 6; ++k) {
    double lg = 0, lo = 1e9, hi = 0;
    int n = 0;
    for (const rec_t &r : recs)
      if (cfg_kind(&r.c) == k) {
        const double q = r.us / r.pred;
        lg += log(q), lo = std::min(lo, q), hi = std::max(hi, q), n++;
      }
    if (n) printf("  %-14s %5d  x%.3f  [%.3f, %.3f]\n", kind_names[k], n, exp(lg / n), lo, hi);
  }
  /* small-m: the model's split count against the best measured one */
  {
    double lg = 0;
    int n = 0, same = 0;
    size_t i = 0;
    while (i < recs.size()) {
      size_t j = i;
      while (j < recs.size() && !memcmp(&recs[j].s, &recs[i].s, sizeof(shape_t))) ++j;
      if (recs[i].s.m <= 64) {
        const loom_gemm_desc_t d = LOOM_GEMM_DESC(recs[i].s.m, recs[i].s.n, recs[i].s.k, LOOM_BF16, LOOM_BF16,
                                                  recs[i].s.kn ? LOOM_B_KN : LOOM_B_NK, 0);
        const loom_gemm_config_t h = loom__gemm_small_m_heuristic(&d, &dev);
        double th = 0, tb = 1e30;
        int sb = 0;
        for (size_t q = i; q < j; ++q)
          if (recs[q].c.bm == 16 && recs[q].c.stages == 0) {
            if (recs[q].c.sk_splits == h.sk_splits) th = recs[q].us;
            if (recs[q].us < tb) tb = recs[q].us, sb = recs[q].c.sk_splits;
          }
        if (th > 0) lg += log(th / tb), n++, same += sb == h.sk_splits;
      }
      i = j;
    }
    if (n) printf("== small-m split count: model's / best measured time x%.3f (geomean), same split on %d of %d\n",
                  exp(lg / n), same, n);
  }
  /* the worst shapes for the model's pick */
  printf("== worst picks (cuBLASLt / pick, best configuration)\n");
  {
    std::vector<std::pair<double, size_t>> w;
    size_t i = 0;
    while (i < recs.size()) {
      size_t j = i, pk = i, bq = i;
      while (j < recs.size() && !memcmp(&recs[j].s, &recs[i].s, sizeof(shape_t))) ++j;
      for (size_t q = i; q < j; ++q) {
        if (recs[q].pick) pk = q;
        if (recs[q].us < recs[bq].us) bq = q;
      }
      w.push_back({recs[pk].lt / recs[pk].us, pk * 100000 + bq});
      i = j;
    }
    std::sort(w.begin(), w.end());
    for (size_t q = 0; q < w.size() && q < 12; ++q) {
      const rec_t &p = recs[w[q].second / 100000], &bb = recs[w[q].second % 100000];
      char c1[32], c2[32];
      cfg_text(&p.c, c1, sizeof c1);
      cfg_text(&bb.c, c2, sizeof c2);
      printf("  %5lld %6lld %6lld %s  pick %-12s x%.3f  best %-12s x%.3f  (Lt %.1f us, default %.1f us)\n",
             (long long)p.s.m, (long long)p.s.n, (long long)p.s.k, p.s.kn ? "kn" : "nk", c1, w[q].first, c2,
             bb.lt / bb.us, p.lt, p.def);
    }
  }
  printf("== %zu (shape, configuration) pairs, %llu elements out of bound against cuBLASLt%s\n", recs.size(), bad_total,
         bad_total ? "  BAD" : "");
  if (json) {
    FILE *jf = fopen(json, "w");
    if (jf) {
      fprintf(jf, "{\"device\": \"%s\", \"sms\": %d, \"copy_gbs\": %.1f, \"reps\": %d, \"results\": [\n", prop.name,
              prop.multiProcessorCount, hbm / 1e9, reps);
      for (size_t i = 0; i < recs.size(); ++i) {
        const rec_t &r = recs[i];
        char v[96];
        loom__gemm_config_format(&r.c, v, sizeof v);
        fprintf(jf,
                "%s{\"set\": \"%s\", \"family\": \"%s\", \"layer\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
                "\"b_layout\": \"%s\", \"config\": \"%s\", \"pick\": %d, \"us\": %.3f, \"predicted_us\": %.3f, "
                "\"cublaslt_us\": %.3f, \"default_us\": %.3f, \"bad\": %llu}",
                i ? ",\n" : "", r.s.set, r.s.family, r.s.layer, (long long)r.s.m, (long long)r.s.n, (long long)r.s.k,
                r.s.kn ? "kn" : "nk", v, r.pick, r.us, r.pred, r.lt, r.def, r.bad);
      }
      fprintf(jf, "\n]}\n");
      fclose(jf);
    }
  }
  cublasDestroy(hb);
  return bad_total ? 1 : 0;
}
