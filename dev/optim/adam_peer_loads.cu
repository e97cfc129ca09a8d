/*
 * adam_peer_loads.cu - why the generated Adam (the code generator's s33: a
 * one-shot sum of the peer's gradient, then the whole update on each rank)
 * runs 1.67x faster at W = 2 than the hand-written AR-Opt step
 * (loom__optim_adam_kernel) of the same form and bytes (docs/perf/optim.md,
 * "What the generated Adam does faster"). One process, two GPUs with peer
 * access, no loom signals: each GPU updates the whole fp32 tensor of N
 * elements from its own gradient and the peer's (loaded over NVLink through
 * L2, __ldcg, as both kernels do), with four loops that differ in one thing
 * each:
 *   chunk8    the hand-written structure: chunks of 4096 elements taken by
 *             blocks in turn, the chunk's pointer table reloaded into shared
 *             memory between barriers, 8 elements a thread (ten 16-byte
 *             loads), the state loaded before the gradients, every gradient
 *             checked for finiteness
 *   chunk4    the same, 4 elements a thread
 *   stripe8   grid-stride over the whole tensor, no barrier, 8 a thread,
 *             the finiteness check
 *   stripe4   the generated structure: grid-stride, 4 a thread, no check
 * Both GPUs run the same loop at once (as the ranks do); the time of a
 * repetition is the slower GPU's (events); median of 20 after 5 warm-ups.
 * Every variant is checked first at sizes up to 2^24 (the host draws every
 * element): one step from fresh random state (never zero), a sample of 4096
 * elements of each GPU's parameters and moments against a double-precision
 * CPU step (|x - ref| <= 1e-5 max(1, |ref|)).
 *
 *   build/dev/optim/adam_peer_loads [log2 N ...]     (default 20 24 27; two GPUs)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/common/check.cuh"

#define THREADS 256
#define CHUNK 4096
#define LR 1e-3f
#define B1 0.9f
#define B2 0.999f
#define EPS 1e-8f

typedef struct arrays {
  float *g_own, *g_peer; /* this GPU's gradient, the peer's (a peer pointer) */
  float *m, *v, *p;      /* [N] */
  const float *const *table; /* the chunk variants' pointer table: {g_own, g_peer} */
  int64_t n;
  int *bad;              /* any non-finite gradient */
} arrays_t;

static __device__ __forceinline__ void adam1(float g, float &p, float &m, float &v) {
  m = B1 * m + (1.0f - B1) * g;
  v = B2 * v + (1.0f - B2) * g * g;
  p -= LR * m / (sqrtf(v) + EPS);
}

/* W elements (4 or 8) at e: state first, then the two gradients, the update, the stores. */
template <int W, int CHECK>
static __device__ __forceinline__ int step_vec(const float *g0, const float *g1, float *m, float *v, float *p,
                                               int64_t e) {
  float pp[W], mm[W], vv[W], a[W], b[W];
#pragma unroll
  for (int q = 0; q < W; q += 4) {
    *(float4 *)(pp + q) = __ldcg((const float4 *)(p + e + q));
    *(float4 *)(mm + q) = __ldcg((const float4 *)(m + e + q));
    *(float4 *)(vv + q) = __ldcg((const float4 *)(v + e + q));
  }
#pragma unroll
  for (int q = 0; q < W; q += 4) {
    *(float4 *)(a + q) = __ldcg((const float4 *)(g0 + e + q));
    *(float4 *)(b + q) = __ldcg((const float4 *)(g1 + e + q));
  }
  int bad = 0;
#pragma unroll
  for (int j = 0; j < W; ++j) {
    const float g = (a[j] + b[j]) * 0.5f;
    if (CHECK) bad |= !isfinite(g);
    adam1(g, pp[j], mm[j], vv[j]);
  }
#pragma unroll
  for (int q = 0; q < W; q += 4) {
    *(float4 *)(p + e + q) = *(float4 *)(pp + q);
    *(float4 *)(m + e + q) = *(float4 *)(mm + q);
    *(float4 *)(v + e + q) = *(float4 *)(vv + q);
  }
  return bad;
}

/* Chunks of CHUNK elements taken by blocks in turn, the pointer table reloaded between barriers. */
template <int W>
__global__ void __launch_bounds__(THREADS, 4) chunked(const __grid_constant__ arrays_t x) {
  __shared__ const float *sh[2];
  int bad = 0;
  const int64_t nchunks = x.n / CHUNK;
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    __syncthreads();
    if (threadIdx.x < 2) sh[threadIdx.x] = x.table[threadIdx.x];
    __syncthreads();
    for (int i = (int)threadIdx.x; i < CHUNK / W; i += THREADS)
      bad |= step_vec<W, 1>(sh[0], sh[1], x.m, x.v, x.p, c * CHUNK + (int64_t)i * W);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(x.bad, 1);
}

/* One grid-stride stripe over the whole tensor, no barrier. */
template <int W, int CHECK>
__global__ void __launch_bounds__(THREADS, 4) striped(const __grid_constant__ arrays_t x) {
  int bad = 0;
  const int64_t stride = (int64_t)gridDim.x * THREADS * W;
  for (int64_t e = ((int64_t)blockIdx.x * THREADS + threadIdx.x) * W; e < x.n; e += stride)
    bad |= step_vec<W, CHECK>(x.g_own, x.g_peer, x.m, x.v, x.p, e);
  if (CHECK && bad) atomicExch(x.bad, 1);
}

typedef void (*kernel_t)(arrays_t);
static const struct { const char *name; kernel_t k; } g_variants[] = {
    {"chunk8", chunked<8>}, {"chunk4", chunked<4>}, {"stripe8", striped<8, 1>}, {"stripe4", striped<4, 0>}};
#define NVAR ((int)(sizeof g_variants / sizeof *g_variants))

typedef struct gpu {
  arrays_t a;          /* the timed repetitions keep stepping this state */
  cudaStream_t s;
  cudaEvent_t e0, e1;
  int grid;
} gpu_t;

/* Element i of gradient / state d of GPU r: uniform in [0.25, 1.25) (never zero), a fixed hash. */
static float draw(uint64_t r, uint64_t d, uint64_t i) {
  uint64_t z = (r * 0x9E3779B97F4A7C15ull) ^ (d * 0xBF58476D1CE4E5B9ull) ^ (i + 0x94D049BB133111EBull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return 0.25f + (float)(z >> 40) / (float)(1ull << 24);
}

/* GPU r's arrays filled (gradient 0, moments 1 and 2 scaled small, parameters 3). */
static void fill(gpu_t *G, int r, int64_t n) {
  float *h = (float *)malloc((size_t)n * sizeof(float));
  float *dst[4] = {G->a.g_own, G->a.m, G->a.v, G->a.p};
  const float scale[4] = {1.0f, 0.01f, 0.001f, 1.0f};
  for (int d = 0; d < 4; ++d) {
    for (int64_t i = 0; i < n; ++i) h[i] = scale[d] * draw((uint64_t)r, (uint64_t)d, (uint64_t)i);
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(dst[d], h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
  }
  free(h);
}

static void run_both(gpu_t *G, int v) {
  for (int r = 0; r < 2; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaEventRecord(G[r].e0, G[r].s));
    g_variants[v].k<<<G[r].grid, THREADS, 0, G[r].s>>>(G[r].a);
    CK(cudaGetLastError());
    CK(cudaEventRecord(G[r].e1, G[r].s));
  }
}

/* One step of variant v from fresh state, a sample of each GPU's results against the CPU's. */
static int check(gpu_t *G, int64_t n, int v) {
  for (int r = 0; r < 2; ++r) fill(&G[r], r, n);
  run_both(G, v);
  int bad = 0;
  for (int r = 0; r < 2; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(G[r].s));
    for (int k = 0; k < 4096; ++k) {
      const int64_t i = (int64_t)((uint64_t)k * 2654435761ull % (uint64_t)n);
      float got[3];
      CK(cudaMemcpy(&got[0], G[r].a.p + i, 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(&got[1], G[r].a.m + i, 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(&got[2], G[r].a.v + i, 4, cudaMemcpyDeviceToHost));
      const double g = ((double)draw(0, 0, i) + (double)draw(1, 0, i)) * 0.5;
      double m = 0.01 * draw((uint64_t)r, 1, i), vv = 0.001 * draw((uint64_t)r, 2, i), p = draw((uint64_t)r, 3, i);
      m = 0.9 * m + 0.1 * g;
      vv = 0.999 * vv + 0.001 * g * g;
      p -= 1e-3 * m / (sqrt(vv) + 1e-8);
      const double want[3] = {p, m, vv};
      for (int j = 0; j < 3; ++j)
        if (!(fabs(got[j] - want[j]) <= 1e-5 * fmax(1.0, fabs(want[j])))) bad++;
    }
  }
  if (bad) fprintf(stderr, "%s at 2^%d: %d sampled values beyond 1e-5\n", g_variants[v].name, (int)log2((double)n), bad);
  return bad;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median over 20 repetitions (after 5) of the slower GPU's time, us. */
static float time_variant(gpu_t *G, int v) {
  float t[20];
  for (int rep = 0; rep < 25; ++rep) {
    run_both(G, v);
    float worst = 0;
    for (int r = 0; r < 2; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaEventSynchronize(G[r].e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, G[r].e0, G[r].e1));
      worst = ms > worst ? ms : worst;
    }
    if (rep >= 5) t[rep - 5] = worst * 1e3f;
  }
  qsort(t, 20, sizeof *t, cmp_float);
  return t[10];
}

int main(int argc, char **argv) {
  int ngpu = 0, can01 = 0, can10 = 0;
  CK(cudaGetDeviceCount(&ngpu));
  if (ngpu < 2) {
    fprintf(stderr, "adam_peer_loads: needs two GPUs with peer access (found %d GPUs)\n", ngpu);
    return 1;
  }
  CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
  CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
  if (!can01 || !can10) {
    fprintf(stderr, "adam_peer_loads: GPUs 0 and 1 cannot access each other's memory\n");
    return 1;
  }
  int logs[8] = {20, 24, 27}, nlog = 3;
  if (argc > 1) nlog = 0;
  for (int i = 1; i < argc && nlog < 8; ++i) logs[nlog++] = atoi(argv[i]);
  printf("%-8s %6s %10s %10s %8s\n", "variant", "N", "us", "GB/s", "/chunk8");
  int failed = 0;
  for (int li = 0; li < nlog; ++li) {
    const int64_t n = (int64_t)1 << logs[li];
    if (logs[li] < 13 || logs[li] > 30) {
      fprintf(stderr, "adam_peer_loads: log2 N = %d: expected 13..30\n", logs[li]);
      return 1;
    }
    gpu_t G[2];
    memset(G, 0, sizeof G);
    for (int r = 0; r < 2; ++r) {
      CK(cudaSetDevice(r));
      cudaError_t pe = cudaDeviceEnablePeerAccess(1 - r, 0);
      if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) CK(pe);
      (void)cudaGetLastError();
      const size_t bytes = (size_t)n * sizeof(float);
      CK(cudaMalloc(&G[r].a.g_own, bytes));
      CK(cudaMalloc(&G[r].a.m, bytes));
      CK(cudaMalloc(&G[r].a.v, bytes));
      CK(cudaMalloc(&G[r].a.p, bytes));
      CK(cudaMalloc((void **)&G[r].a.bad, sizeof(int)));
      CK(cudaMemset(G[r].a.bad, 0, sizeof(int)));
      CK(cudaMalloc((void **)&G[r].a.table, 2 * sizeof(float *)));
      CK(cudaStreamCreateWithFlags(&G[r].s, cudaStreamNonBlocking));
      CK(cudaEventCreate(&G[r].e0));
      CK(cudaEventCreate(&G[r].e1));
      int sms = 0;
      CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r));
      G[r].grid = sms * 4;
      G[r].a.n = n;
    }
    for (int r = 0; r < 2; ++r) {
      G[r].a.g_peer = G[1 - r].a.g_own;
      const float *tab[2] = {G[r].a.g_own, G[r].a.g_peer};
      CK(cudaSetDevice(r));
      CK(cudaMemcpy((void *)G[r].a.table, tab, sizeof tab, cudaMemcpyHostToDevice));
    }
    float base = 0;
    for (int v = 0; v < NVAR; ++v) {
      if (logs[li] <= 24) failed |= check(G, n, v);
      const float us = time_variant(G, v);
      if (v == 0) base = us;
      /* bytes a GPU moves: p, m, v read and written, both gradients read */
      const double gbs = (double)n * 4.0 * 8.0 / (us * 1e3);
      printf("%-8s   2^%-2d %10.1f %10.0f %8.3f\n", g_variants[v].name, logs[li], us, gbs, base / us);
    }
    for (int r = 0; r < 2; ++r) {
      CK(cudaSetDevice(r));
      CK(cudaStreamSynchronize(G[r].s));
      void *bufs[6] = {G[r].a.g_own, G[r].a.m, G[r].a.v, G[r].a.p, G[r].a.bad, (void *)G[r].a.table};
      for (int b = 0; b < 6; ++b) CK(cudaFree(bufs[b]));
      CK(cudaStreamDestroy(G[r].s));
      CK(cudaEventDestroy(G[r].e0));
      CK(cudaEventDestroy(G[r].e1));
    }
  }
  if (failed) fprintf(stderr, "adam_peer_loads: a variant's results differ from the CPU's\n");
  return failed ? 1 : 0;
}
