/*
 * bulk_reduce_probe.cu - how fast, and how correctly, one GPU adds bf16
 * tiles into another GPU's memory from shared memory with the tensor memory
 * accelerator (cp.reduce.async.bulk ... add.noftz.bf16), against the two
 * ways loom writes peers today (16-byte register stores; the bulk copy
 * cp.async.bulk without the add). The question it answers for GEMM +
 * ReduceScatter (docs/perf/tp.md, "GEMM + ReduceScatter: bytes per path"):
 * can an epilogue push its tiles into the owner's output, adding, at NVLink
 * speed from few SMs, with one rounding per add?
 *
 *   bulk_reduce_probe [MiB] [reps]     (default 64 MiB per pass, 20 reps)
 *   bulk_reduce_probe none             does the binary start at all
 *
 * Needs 2 GPUs with peer access (GPU 0 writes GPU 1's buffer; GPU 0's own
 * buffer is the local reference). Each block generates its data in
 * registers (an integer hash of the element index: no input reads, as an
 * epilogue holds its tile in registers), stages 16 KiB tiles in shared
 * memory (two, so one is written while the other is read by the bulk
 * operation) and issues one bulk operation per tile; the register-store
 * variant stores the same values from registers. Blocks: 1, 2, 4, 8, 16,
 * 32, 66, 132 (more than the SMs present are capped); median of reps of
 * events on GPU 0; GB/s = bytes of data / time.
 *
 * Checks (one pass each, the destination poisoned or set first): copy and
 * store leave dst == y word for word; the add leaves dst == bf16(x + y),
 * the exact sum rounded once to nearest even (counted: exact, off by one
 * unit in the last place, worse).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.cuh"

#define TILE_BYTES 16384
#define TILE_ELEMS (TILE_BYTES / 2)
#define THREADS 256

enum { V_STORE = 0, V_COPY = 1, V_ADD = 2, NV = 3 };
static const char *const v_name[NV] = {"st.global", "bulk copy", "bulk add"};

/* The value of element i of source s (0: x, 1: y) in [-1, 1), not zero. */
static __host__ __device__ float probe_value(uint64_t i, int s) {
  uint64_t h = i * 0x9E3779B97F4A7C15ull + (uint64_t)(s + 1) * 0xD1B54A32D192ED03ull;
  h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
  return ((float)(h >> 40) + 0.5f) / (float)(1ull << 23) - 1.0f;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* bulk operations: sm_90 */
static __device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* Tile j of the buffer (TILE_ELEMS elements of y) into shared memory, from registers. */
static __device__ __forceinline__ void fill_tile(__nv_bfloat16 *t, int64_t j) {
  for (int e = threadIdx.x * 8; e < TILE_ELEMS; e += THREADS * 8) {
    __align__(16) __nv_bfloat16 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = __float2bfloat16_rn(probe_value((uint64_t)(j * TILE_ELEMS + e + u), 1));
    *(uint4 *)(t + e) = *(const uint4 *)v;
  }
}

#endif

__global__ void __launch_bounds__(THREADS) probe_kernel(__nv_bfloat16 *dst, int64_t tiles, int variant) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(128) __nv_bfloat16 tile[2][TILE_ELEMS];
#endif
  int k = 0;
  for (int64_t j = blockIdx.x; j < tiles; j += gridDim.x, ++k) {
    if (variant == V_STORE) {
      for (int e = threadIdx.x * 8; e < TILE_ELEMS; e += THREADS * 8) {
        __align__(16) __nv_bfloat16 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = __float2bfloat16_rn(probe_value((uint64_t)(j * TILE_ELEMS + e + u), 1));
        *(uint4 *)(dst + j * TILE_ELEMS + e) = *(const uint4 *)v;
      }
      continue;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __nv_bfloat16 *t = tile[k & 1];
    /* the bulk operation that read this buffer two tiles ago is done reading it */
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
    __syncthreads();
    fill_tile(t, j);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* the stores, visible to the bulk unit */
    __syncthreads();
    if (threadIdx.x == 0) {
      void *g = dst + j * TILE_ELEMS;
      if (variant == V_COPY)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g), "r"(smem_u32(t)),
                     "r"(TILE_BYTES)
                     : "memory");
      else
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;" ::"l"(g),
                     "r"(smem_u32(t)), "r"(TILE_BYTES)
                     : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
#else
    __trap(); /* the host runs the bulk variants on sm_90 only */
#endif
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

/* bf16 (its bits) of a double, rounded once to nearest even: the 8
 * significant bits of d's binary mantissa (finite, normal values). */
static uint16_t bf16_rne(double d) {
  if (d == 0.0) return signbit(d) ? 0x8000u : 0u;
  int e = 0;
  const double m = frexp(d, &e);                 /* d = m 2^e, 0.5 <= |m| < 1 */
  const float f = (float)ldexp(nearbyint(m * 256.0), e - 8); /* exact: 8 (or 9 after a carry) bits */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static double bf16_to_double(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* One pass of variant v into dst (on dev_dst) from GPU 0 with `blocks`; checked. */
static void check_pass(__nv_bfloat16 *dst, int dev_dst, int64_t n, int v, int blocks, const char *where) {
  uint16_t *h = (uint16_t *)malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; ++i) h[i] = v == V_ADD ? bf16_rne(probe_value((uint64_t)i, 0)) : 0xFFFFu; /* x, or NaN */
  CK(cudaSetDevice(dev_dst));
  CK(cudaMemcpy(dst, h, (size_t)n * 2, cudaMemcpyHostToDevice));
  CK(cudaSetDevice(0));
  probe_kernel<<<blocks, THREADS>>>(dst, n / TILE_ELEMS, v);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(dev_dst));
  CK(cudaMemcpy(h, dst, (size_t)n * 2, cudaMemcpyDeviceToHost));
  CK(cudaSetDevice(0));
  int64_t exact = 0, ulp = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double y = bf16_to_double(bf16_rne(probe_value((uint64_t)i, 1)));
    const double x = bf16_to_double(bf16_rne(probe_value((uint64_t)i, 0)));
    const uint16_t want = v == V_ADD ? bf16_rne(x + y) : bf16_rne(y);
    /* same sign: the bit patterns of neighbouring values differ by one */
    const int d = (h[i] >> 15) == (want >> 15) ? abs((int)h[i] - (int)want) : 2;
    if (d == 0) ++exact;
    else if (d == 1) ++ulp;
    else ++bad;
  }
  printf("# check %-9s into %-6s: %lld exact, %lld off by one ulp, %lld wrong of %lld\n", v_name[v], where,
         (long long)exact, (long long)ulp, (long long)bad, (long long)n);
  free(h);
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median time (ms) of reps passes of variant v into dst with `blocks`. */
static float time_pass(__nv_bfloat16 *dst, int64_t n, int v, int blocks, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  float *ms = (float *)malloc(sizeof(float) * (size_t)reps);
  for (int r = -2; r < reps; ++r) {
    CK(cudaEventRecord(a));
    probe_kernel<<<blocks, THREADS>>>(dst, n / TILE_ELEMS, v);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    if (r >= 0) CK(cudaEventElapsedTime(&ms[r], a, b));
  }
  CK(cudaGetLastError());
  qsort(ms, (size_t)reps, sizeof(float), cmp_float);
  const float med = ms[reps / 2];
  free(ms);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return med;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "none")) return 0;
  const int64_t mib = argc > 1 ? atoll(argv[1]) : 64;
  const int reps = argc > 2 ? atoi(argv[2]) : 20;
  int ndev = 0, can = 0, sms = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (ndev < 2 || mib < 1 || reps < 1) {
    fprintf(stderr, "bulk_reduce_probe: needs 2 GPUs (found %d), MiB >= 1, reps >= 1\n", ndev);
    return 2;
  }
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (!can) {
    fprintf(stderr, "bulk_reduce_probe: GPU 0 cannot access GPU 1's memory\n");
    return 2;
  }
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int major = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 9) {
    fprintf(stderr, "bulk_reduce_probe: the bulk operations need compute capability >= 9.0 (GPU 0: %d.x)\n", major);
    return 2;
  }
  const int64_t n = mib * 1024 * 1024 / 2 / TILE_ELEMS * TILE_ELEMS;
  __nv_bfloat16 *peer = NULL, *local = NULL;
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&peer, (size_t)n * 2));
  CK(cudaSetDevice(0));
  CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&local, (size_t)n * 2));
  for (int v = 0; v < NV; ++v) {
    check_pass(peer, 1, n, v, sms, "peer");
    check_pass(local, 0, n, v, sms, "local");
  }
  printf("%-10s %6s %12s %12s   (GB/s: %lld MiB of bf16 per pass, median of %d)\n", "variant", "blocks", "peer",
         "local", (long long)mib, reps);
  static const int blocks[] = {1, 2, 4, 8, 16, 32, 66, 132};
  for (int v = 0; v < NV; ++v)
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; ++i) {
      const int nb = blocks[i] < sms ? blocks[i] : sms;
      const double bytes = (double)n * 2;
      const float tp = time_pass(peer, n, v, nb, reps), tl = time_pass(local, n, v, nb, reps);
      printf("%-10s %6d %12.1f %12.1f\n", v_name[v], nb, bytes / (tp * 1e6), bytes / (tl * 1e6));
    }
  CK(cudaFree(local));
  CK(cudaSetDevice(1));
  CK(cudaFree(peer));
  return 0;
}
