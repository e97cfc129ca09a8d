/*
 * bench_gemm_dev.cu - development benchmark of loom's GEMM against cuBLASLt
 * (best of its heuristic's top 8 algorithms, loom__base_gemm_tune), side by
 * side in one process, until tools/bench/bench.h exists for `loom-bench gemm`.
 *
 *   built by dev/gemm/run_device.sh (nvcc, linked with build/lib/libloom.a)
 *   build/bench_gemm_dev [set] [json]   set: quick | flux | llama | square | all |
 *       decode (the four TP=2 families at m = 16, 64, 128)
 *   build/bench_gemm_dev prof M N K nk|kn   for a profiler (ncu --profile-from-start
 *       off): tunes cuBLASLt, then between cudaProfilerStart/Stop launches loom
 *       (heuristic) once and the tuned cuBLASLt once, and prints both times
 *
 * Per shape and B layout: random inputs (device hash, never zero), loom with
 * the heuristic and with each variant forced: data-parallel bn 128 / 256 (no
 * stream-K), stream-K bn 128 / 256 (every tile shared by all SMs when the
 * tiles are under one wave, else the last wave + remainder), aligned split-K
 * bn 128 / 256 (every tile up to two waves, else the last wave + remainder;
 * splits from loom__gemm_split_count), the heuristic's configuration with
 * the 2x1 cluster toggled (cl-tog), and for m <= 128 the decode variant
 * (config bm = 64: 64-row tiles, deeper B pipelines): data-parallel bn 128
 * (d128) and 256 (d256), split-K bn 256 with loom__gemm_split_count's splits
 * of its tiles (dsp256), stream-K bn 128 over all SMs (dsk128); cuBLASLt
 * tuned; "bestv" names the fastest loom variant;
 * median of `reps` event-timed launches after warm-up; inputs rotated among
 * copies when they would fit in L2; loom's C compared with cuBLASLt's on every
 * element (bad = count out of bound, NaN included). HBM fraction = weight
 * bytes (k n 2) / time / measured copy bandwidth (read + write of a 1 GiB
 * device-to-device copy).
 */
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>

#include "core/baseline.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)
#define LK(call)                                                                          \
  do {                                                                                    \
    loom_result_t r_ = (call);                                                            \
    if (r_ != LOOM_SUCCESS) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, loom_last_error());    \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

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

/* counts elements of x (loom) outside the bound around y (cuBLASLt) */
static __global__ void cmp_kernel(const uint16_t *x, const uint16_t *y, size_t n, float ea,
                                  unsigned long long *bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float a = bf16f(x[i]), c = bf16f(y[i]);
    if (!(fabsf(a - c) <= (2.f / 128) * fabsf(c) + ea)) b++;
  }
  if (b) atomicAdd(bad, b);
}

typedef struct shape {
  const char *family;
  int64_t m, n, k;
} shape_t;

static float median(float *v, int n) {
  std::sort(v, v + n);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

enum { MAXREP = 64 };

/* prof M N K nk|kn: one loom launch and one tuned cuBLASLt launch inside a
 * profiler range (after warm-up and tuning outside it). */
static int profile_one(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: bench_gemm_dev prof M N K nk|kn\n");
    return 2;
  }
  const int64_t m = atoll(argv[2]), n = atoll(argv[3]), k = atoll(argv[4]);
  const int kn = !strcmp(argv[5], "kn");
  loom_gemm_desc_t d = LOOM_GEMM_DESC(m, n, k, LOOM_BF16, LOOM_BF16, kn ? LOOM_B_KN : LOOM_B_NK, 0);
  uint16_t *A, *B, *C;
  CK(cudaMalloc(&A, (size_t)m * k * 2));
  CK(cudaMalloc(&B, (size_t)k * n * 2));
  CK(cudaMalloc(&C, (size_t)m * n * 2));
  fill_kernel<<<4096, 256>>>(A, (size_t)m * k, 1);
  fill_kernel<<<4096, 256>>>(B, (size_t)k * n, 2);
  CK(cudaGetLastError());
  float tune_ms = 0;
  LK(loom__base_gemm_tune(&d, A, B, C, NULL, 8, 3, 0, &tune_ms));
  for (int i = 0; i < 3; ++i) LK(loom__gemm_sm90(&d, A, B, C, NULL, NULL, NULL, 0));
  CK(cudaDeviceSynchronize());
  cudaEvent_t e[4];
  for (int i = 0; i < 4; ++i) CK(cudaEventCreate(&e[i]));
  CK(cudaProfilerStart());
  CK(cudaEventRecord(e[0]));
  LK(loom__gemm_sm90(&d, A, B, C, NULL, NULL, NULL, 0));
  CK(cudaEventRecord(e[1]));
  CK(cudaEventRecord(e[2]));
  LK(loom__base_gemm(&d, A, B, C, NULL, 0));
  CK(cudaEventRecord(e[3]));
  CK(cudaEventSynchronize(e[3]));
  CK(cudaProfilerStop());
  float tl = 0, tc = 0;
  CK(cudaEventElapsedTime(&tl, e[0], e[1]));
  CK(cudaEventElapsedTime(&tc, e[2], e[3]));
  printf("prof %lld x %lld x %lld %s: loom %.3f ms, cuBLASLt %.3f ms\n", (long long)m, (long long)n, (long long)k,
         kn ? "kn" : "nk", tl, tc);
  return 0;
}

int main(int argc, char **argv) {
  const char *set = argc > 1 ? argv[1] : "quick";
  if (!strcmp(set, "none")) return 0; /* does the binary start at all */
  const char *json = argc > 2 ? argv[2] : NULL;
  shape_t shapes[256];
  int ns = 0;
  const int64_t ms[] = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
  const int all = !strcmp(set, "all");
  if (all || !strcmp(set, "flux"))
    for (int i = 0; i < 8; ++i) {
      shapes[ns++] = (shape_t){"flux-ag", ms[i], 24576, 12288};
      shapes[ns++] = (shape_t){"flux-rs", ms[i], 12288, 24576};
    }
  if (all || !strcmp(set, "llama"))
    for (int i = 0; i < 8; ++i) {
      shapes[ns++] = (shape_t){"llama-up", ms[i], 14336, 8192};
      shapes[ns++] = (shape_t){"llama-down", ms[i], 8192, 14336};
    }
  if (all || !strcmp(set, "square")) {
    shapes[ns++] = (shape_t){"square", 4096, 4096, 4096};
    shapes[ns++] = (shape_t){"square", 8192, 8192, 8192};
  }
  if (!strcmp(set, "decode")) {
    const int64_t dms[] = {16, 64, 128};
    for (int i = 0; i < 3; ++i) {
      shapes[ns++] = (shape_t){"flux-ag", dms[i], 24576, 12288};
      shapes[ns++] = (shape_t){"flux-rs", dms[i], 12288, 24576};
      shapes[ns++] = (shape_t){"llama-up", dms[i], 14336, 8192};
      shapes[ns++] = (shape_t){"llama-down", dms[i], 8192, 14336};
    }
  }
  if (!strcmp(set, "quick")) {
    shapes[ns++] = (shape_t){"flux-ag", 64, 24576, 12288};
    shapes[ns++] = (shape_t){"flux-ag", 256, 24576, 12288};
    shapes[ns++] = (shape_t){"flux-ag", 1024, 24576, 12288};
    shapes[ns++] = (shape_t){"flux-ag", 4096, 24576, 12288};
    shapes[ns++] = (shape_t){"flux-rs", 64, 12288, 24576};
    shapes[ns++] = (shape_t){"flux-rs", 2048, 12288, 24576};
    shapes[ns++] = (shape_t){"llama-up", 128, 14336, 8192};
    shapes[ns++] = (shape_t){"llama-up", 2048, 14336, 8192};
    shapes[ns++] = (shape_t){"llama-down", 512, 8192, 14336};
    shapes[ns++] = (shape_t){"llama-down", 8192, 8192, 14336};
    shapes[ns++] = (shape_t){"square", 4096, 4096, 4096};
    shapes[ns++] = (shape_t){"square", 8192, 8192, 8192};
  }
  const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 10;
  if (!strcmp(set, "prof")) return profile_one(argc, argv);

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t capA = (size_t)8192 * 24576, capB = (size_t)12288 * 24576, capC = (size_t)8192 * 24576;
  uint16_t *A, *B, *C, *C2;
  unsigned long long *bad_d;
  CK(cudaMalloc(&A, capA * 2));
  CK(cudaMalloc(&B, capB * 2));
  CK(cudaMalloc(&C, capC * 2));
  CK(cudaMalloc(&C2, capC * 2));
  CK(cudaMalloc(&bad_d, 8));
  fill_kernel<<<4096, 256>>>(A, capA, 1);
  fill_kernel<<<4096, 256>>>(B, capB, 2);
  CK(cudaGetLastError());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  /* copy bandwidth: 1 GiB device to device, read + write */
  float bw_ms = 0;
  {
    const size_t bytes = (size_t)1 << 28;
    float t[5];
    for (int i = 0; i < 6; ++i) {
      CK(cudaEventRecord(e0));
      CK(cudaMemcpyAsync(C, A, bytes, cudaMemcpyDeviceToDevice));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      if (i) CK(cudaEventElapsedTime(&t[i - 1], e0, e1));
    }
    bw_ms = median(t, 5);
  }
  const double hbm = 2.0 * ((size_t)1 << 28) / (bw_ms * 1e-3);
  printf("device %s, %d SMs, L2 %d MiB, copy bandwidth %.0f GB/s (read+write)\n", prop.name,
         prop.multiProcessorCount, prop.l2CacheSize >> 20, hbm / 1e9);

  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "{\"device\": \"%s\", \"copy_gbs\": %.1f, \"results\": [\n", prop.name, hbm / 1e9);
  double logsum = 0, minr = 1e9;
  int nbig = 0, jfirst = 1;
  printf("%-10s %5s %6s %6s %-6s | %8s %7s | %-9s %7s %7s %7s %7s %7s %7s %7s | %7s %7s %7s %7s | %8s %7s | %6s %6s %5s %5s "
         "%-7s %s\n",
         "family", "m", "n", "k", "B", "loom_ms", "TFLOP/s", "h-cfg", "dp128", "dp256", "sk128", "sk256", "sp128", "sp256",
         "cl-tog", "d128", "d256", "dsp256", "dsk128", "cublas", "TFLOP/s", "ratio", "best", "HBM", "HBMb", "bestv", "check");
  for (int si = 0; si < ns; ++si)
    for (int lay = 0; lay < 2; ++lay) {
      const shape_t s = shapes[si];
      loom_gemm_desc_t d = LOOM_GEMM_DESC(s.m, s.n, s.k, LOOM_BF16, LOOM_BF16, lay ? LOOM_B_KN : LOOM_B_NK, 0);
      const size_t sa = (size_t)s.m * s.k, sb = (size_t)s.k * s.n, sc = (size_t)s.m * s.n;
      int nsets = (int)std::min(capA / sa, capB / sb);
      if (nsets > 4) nsets = 4;
      if ((sa + sb) * 2 * 1 > (size_t)prop.l2CacheSize * 3 || nsets < 1) nsets = 1;
      const double flop = 2.0 * s.m * s.n * s.k;
      enum { NV = 12 };
      float t_cfg[NV] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
      const int bns[NV] = {0, 128, 256, 128, 256, 128, 256, 0, 128, 256, 256, 128};
      static const char *vnames[NV] = {"heur", "dp128", "dp256", "sk128", "sk256", "sp128", "sp256",
                                       "cl-tog", "d128", "d256", "dsp256", "dsk128"};
      /* the decode variant (64-row tiles) is timed for m <= 128 */
      const int dec = s.m <= 128;
      const int sms = prop.multiProcessorCount;
      loom__gemm_device_t dv;
      LK(loom__gemm_device(&dv));
      loom_gemm_config_t heur = loom__gemm_sm90_heuristic(&d, &dv);
      loom_gemm_config_t cfgs[NV];
      for (int c = 0; c < NV; ++c) {
        loom_gemm_config_t cfg = heur;
        if (bns[c]) {
          cfg.bn = bns[c];
          cfg.sk_tiles = 0, cfg.sk_blocks = 0;
          const int64_t tiles = ((s.m + 127) / 128) * ((s.n + bns[c] - 1) / bns[c]);
          if (c == 3 || c == 4) { /* stream-K: all tiles under one wave, else the last wave + remainder */
            cfg.sk_tiles = tiles <= sms ? -1 : (int)(sms + tiles % sms);
            cfg.sk_blocks = 0;
          }
          if (c == 5 || c == 6) { /* aligned split-K: all tiles up to two waves, else the tail */
            const int64_t shared = tiles <= 2 * sms ? tiles : sms + tiles % sms;
            cfg.sk_tiles = shared == tiles ? -1 : (int)shared;
            cfg.sk_splits = loom__gemm_split_count(shared, (s.k + 63) / 64, sms);
          }
        }
        if (c == 7) cfg.cluster = cfg.cluster == 2 ? 1 : 2; /* the heuristic's tiles, cluster toggled */
        if (c >= 8) { /* the decode variant: 64-row tiles */
          cfg = heur;
          cfg.bm = 64, cfg.bn = bns[c], cfg.cluster = 0;
          cfg.sk_tiles = 0, cfg.sk_blocks = 0, cfg.sk_splits = 0;
          const int64_t tiles64 = ((s.m + 63) / 64) * ((s.n + bns[c] - 1) / bns[c]);
          if (c == 10) { /* split-K of every tile when under two waves */
            const int sp = tiles64 < 2 * sms ? loom__gemm_split_count(tiles64, (s.k + 63) / 64, sms) : 1;
            if (sp > 1) cfg.sk_tiles = -1, cfg.sk_splits = sp;
          }
          if (c == 11 && tiles64 < sms) cfg.sk_tiles = -1; /* stream-K over all SMs */
        }
        cfgs[c] = cfg;
        if (c >= 8 && !dec) continue;
        float t[MAXREP];
        for (int i = 0; i < reps + 2; ++i) {
          const int set_i = i % nsets;
          CK(cudaEventRecord(e0));
          LK(loom__gemm_sm90(&d, A + set_i * sa, B + set_i * sb, C, NULL, &cfg, NULL, 0));
          CK(cudaEventRecord(e1));
          CK(cudaEventSynchronize(e1));
          if (i >= 2) CK(cudaEventElapsedTime(&t[i - 2], e0, e1));
        }
        t_cfg[c] = median(t, reps);
      }
      /* cuBLASLt: tune on set 0, then time the cached best */
      float tune_ms = 0;
      LK(loom__base_gemm_tune(&d, A, B, C2, NULL, 8, 3, 0, &tune_ms));
      float t[MAXREP];
      for (int i = 0; i < reps + 2; ++i) {
        const int set_i = i % nsets;
        CK(cudaEventRecord(e0));
        LK(loom__base_gemm(&d, A + set_i * sa, B + set_i * sb, C2, NULL, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        if (i >= 2) CK(cudaEventElapsedTime(&t[i - 2], e0, e1));
      }
      const float tc = median(t, reps);
      /* correctness of every variant on set 0 vs cuBLASLt on set 0 (C
       * poisoned first: unwritten elements are NaN and count as bad) */
      LK(loom__base_gemm(&d, A, B, C2, NULL, 0));
      unsigned long long bad = 0;
      for (int c = 0; c < NV; ++c) {
        if (c >= 8 && !dec) continue;
        CK(cudaMemset(C, 0xFF, sc * 2));
        LK(loom__gemm_sm90(&d, A, B, C, NULL, &cfgs[c], NULL, 0));
        CK(cudaMemset(bad_d, 0, 8));
        cmp_kernel<<<2048, 256>>>(C, C2, sc, 2e-5f * sqrtf((float)s.k) + 1e-3f, bad_d);
        CK(cudaGetLastError());
        unsigned long long b1 = 0;
        CK(cudaMemcpy(&b1, bad_d, 8, cudaMemcpyDeviceToHost));
        if (b1)
          printf("    variant %s (bm %d bn %d sk_tiles %d splits %d): %llu bad\n", vnames[c], cfgs[c].bm, cfgs[c].bn,
                 cfgs[c].sk_tiles, cfgs[c].sk_splits, b1);
        bad += b1;
      }
      const float tl = t_cfg[0];
      const double ratio = tc / tl;
      float tbest = tl;
      int vbest = 0;
      for (int c = 1; c < NV; ++c)
        if (t_cfg[c] > 0 && t_cfg[c] < tbest) tbest = t_cfg[c], vbest = c;
      char hname[32];
      snprintf(hname, sizeof hname, "%d%s%s", heur.bn,
               heur.sk_tiles ? (heur.sk_splits ? "/split" : heur.sk_tiles < 0 ? "/sk" : "/skt") : "/dp",
               heur.cluster == 2 ? "c2" : "");
      const double frac = (double)sb * 2 / (tl * 1e-3) / hbm, frac_best = (double)sb * 2 / (tbest * 1e-3) / hbm;
      printf("%-10s %5lld %6lld %6lld %-6s | %8.3f %7.1f | %-9s %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f | %7.3f %7.3f %7.3f "
             "%7.3f | %8.3f %7.1f | %6.3f %6.3f %5.2f %5.2f %-7s %s\n",
             s.family, (long long)s.m, (long long)s.n, (long long)s.k, lay ? "[k,n]" : "[n,k]", tl,
             flop / (tl * 1e-3) / 1e12, hname, t_cfg[1], t_cfg[2], t_cfg[3], t_cfg[4], t_cfg[5], t_cfg[6], t_cfg[7],
             t_cfg[8], t_cfg[9], t_cfg[10], t_cfg[11], tc, flop / (tc * 1e-3) / 1e12, ratio, tc / tbest,
             s.m <= 512 ? frac : 0.0, s.m <= 512 ? frac_best : 0.0, vnames[vbest], bad ? "BAD" : "ok");
      fflush(stdout);
      if (bad) printf("    %llu of %zu elements differ from cuBLASLt\n", bad, sc);
      if (s.m >= 1024) {
        logsum += log(ratio);
        nbig++;
        if (ratio < minr) minr = ratio;
      }
      if (jf) {
        fprintf(jf,
                "%s{\"family\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"b_layout\": \"%s\", \"loom_ms\": %.4f, "
                "\"loom_cfg\": \"%s\", \"dp128_ms\": %.4f, \"dp256_ms\": %.4f, \"sk128_ms\": %.4f, \"sk256_ms\": %.4f, "
                "\"split128_ms\": %.4f, \"split256_ms\": %.4f, \"split128_n\": %d, \"split256_n\": %d, \"cluster_toggled_ms\": %.4f, "
                "\"bm64_dp128_ms\": %.4f, \"bm64_dp256_ms\": %.4f, \"bm64_split256_ms\": %.4f, \"bm64_split256_n\": %d, "
                "\"bm64_sk128_ms\": %.4f, "
                "\"cublas_ms\": %.4f, \"ratio\": %.4f, \"best_ratio\": %.4f, \"best_variant\": \"%s\", "
                "\"hbm_fraction\": %.4f, \"hbm_fraction_best\": %.4f, \"mismatches\": %llu}",
                jfirst ? "" : ",\n", s.family, (long long)s.m, (long long)s.n, (long long)s.k, lay ? "kn" : "nk", tl,
                hname, t_cfg[1], t_cfg[2], t_cfg[3], t_cfg[4], t_cfg[5], t_cfg[6], cfgs[5].sk_splits, cfgs[6].sk_splits, t_cfg[7],
                t_cfg[8], t_cfg[9], t_cfg[10], cfgs[10].sk_splits, t_cfg[11], tc, ratio, tc / tbest, vnames[vbest], frac,
                frac_best, bad);
        jfirst = 0;
      }
    }
  if (nbig) printf("m >= 1024: geometric mean ratio to cuBLASLt %.3f, min %.3f over %d GEMMs\n", exp(logsum / nbig), minr, nbig);
  if (jf) {
    fprintf(jf, "\n]}\n");
    fclose(jf);
  }
  return 0;
}
