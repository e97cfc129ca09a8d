/*
 * launch_probe.cu - what a collective's kernel pays before and after its
 * work, on one GPU, apart from any peer: the kernel argument block's size
 * (loom_coll_args_t is 1256 bytes, most of it two tables of 64 peer
 * pointers), a programmatic dependent launch, and the two ways a grid can
 * advance its call counter (every block counted in by an atomic with the
 * last one fencing and publishing, or a word per block stored with no
 * atomic). Each variant is a grid of 1 block of 512 threads doing nothing
 * else, timed
 *   eager  between two events with the host ahead (a 40 us spin kernel
 *          first, so that the launch is queued before the events; the
 *          benchmark's eager rows are timed this way), median of 300;
 *   graph  per call in a CUDA graph of 16 launches (as loom-bench's /graph
 *          rows), median of 50 replays.
 *
 *   nvcc -O3 -arch=sm_90a dev/coll/launch_probe.cu -o build/dev/coll/launch_probe
 *   build/dev/coll/launch_probe
 */
#include <algorithm>
#include <vector>

#include <string.h>

#include "../world/probe.cuh"
#include "ops/common/coll_device.cuh"

struct small_args {
  unsigned *word;
  int rank;
};

struct big_args { /* loom_coll_args_t's size: 1256 bytes */
  unsigned *word;
  int rank;
  const char *src[64];
  const char *stg[64];
  char pad[1256 - 16 - 1024];
};
static_assert(sizeof(big_args) == 1256, "the collective's argument block");

static __device__ __forceinline__ void pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__global__ void k_small(const __grid_constant__ small_args a) {
  pdl_enter();
  if (threadIdx.x == 0 && a.rank < 0) *a.word = 1;
}

__global__ void k_big(const __grid_constant__ big_args a) {
  pdl_enter();
  if (threadIdx.x == 0 && a.src[a.rank & 63] == nullptr) *a.word = 1;
}

/* the call counter as loom__epoch_block_done: word[0] epoch, word[1] blocks done */
__global__ void k_big_atomic(const __grid_constant__ big_args a) {
  pdl_enter();
  const unsigned e = *(volatile unsigned *)a.word + 1u;
  if (__syncthreads_and(e != 0u) && threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(a.word + 1, 1u) + 1u == gridDim.x) {
      a.word[1] = 0u;
      __threadfence_system();
      *(volatile unsigned *)a.word = e;
    }
  }
}

/* a word per block (word[2 + block]) */
__global__ void k_big_block(const __grid_constant__ big_args a) {
  pdl_enter();
  unsigned *w = a.word + 2 + blockIdx.x;
  const unsigned e = *(volatile unsigned *)w + 1u;
  if (__syncthreads_and(e != 0u) && threadIdx.x == 0) *(volatile unsigned *)w = e;
}

/* the same, after the row-wise norm's block-wide sum (loom__coll_block_sum:
 * warp shuffles, three barriers) of a value read from dynamic shared memory
 * (the row) */
__global__ void k_big_block_sum(const __grid_constant__ big_args a) {
  pdl_enter();
  extern __shared__ float xs[];
  __shared__ float red[33];
  xs[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  const float sum = loom__coll_block_sum(xs[(threadIdx.x + 1) % blockDim.x], red); /* the library's */
  unsigned *w = a.word + 2 + blockIdx.x;
  const unsigned e = *(volatile unsigned *)w + 1u;
  if (__syncthreads_and(sum != 0.5f) && threadIdx.x == 0) *(volatile unsigned *)w = e;
}

__global__ void hold_kernel(unsigned long long ns) {
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < ns) {
  }
}

static size_t g_smem; /* dynamic shared memory of every launch */

template <class A>
static void launch(void (*k)(A), const A &a, int pdl, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  cfg.gridDim = dim3(1), cfg.blockDim = dim3(512), cfg.stream = s, cfg.dynamicSmemBytes = g_smem;
  if (pdl) {
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
  }
  CK(cudaLaunchKernelEx(&cfg, k, a));
}

static double median(std::vector<float> &t) {
  std::sort(t.begin(), t.end());
  return 1000.0 * t[t.size() / 2];
}

template <class A>
static double time_eager(void (*k)(A), const A &a, int pdl, int records, cudaStream_t s) {
  cudaEvent_t e0, e1, x;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
  std::vector<float> t;
  for (int i = 0; i < 320; ++i) {
    hold_kernel<<<1, 1, 0, s>>>(40000ull);
    CK(cudaEventRecord(e0, s));
    launch(k, a, pdl, s);
    for (int r = 0; r < records; ++r) CK(cudaEventRecord(x, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 20) t.push_back(ms);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaEventDestroy(x));
  return median(t);
}

template <class A>
static double time_graph(void (*k)(A), const A &a, int pdl, cudaStream_t s) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 16; ++i) launch(k, a, pdl, s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < 60; ++i) {
    hold_kernel<<<1, 1, 0, s>>>(40000ull);
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 10) t.push_back(ms / 16.f);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return median(t);
}

template <class A>
static void row(const char *name, void (*k)(A), const A &a, cudaStream_t s) {
  const double e = time_eager(k, a, 0, 0, s), ep = time_eager(k, a, 1, 0, s), er = time_eager(k, a, 0, 1, s);
  const double g = time_graph(k, a, 0, s), gp = time_graph(k, a, 1, s);
  printf("%-34s eager %6.2f  eager+pdl %6.2f  eager+1 record %6.2f  graph %6.2f  graph+pdl %6.2f us\n", name, e, ep, er,
         g, gp);
  fflush(stdout);
}

int main(void) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned *word;
  CK(cudaMalloc(&word, 4096));
  CK(cudaMemset(word, 0, 4096));
  small_args sa = {word, 0};
  big_args ba;
  memset(&ba, 0, sizeof ba);
  ba.word = word, ba.rank = 0;
  for (int i = 0; i < 64; ++i) ba.src[i] = ba.stg[i] = (const char *)word + 64;
  printf("1 block x 512 threads per launch; us per call\n");
  row("empty, 16-byte arguments", k_small, sa, s);
  row("empty, 1256-byte arguments", k_big, ba, s);
  row("1256 B + counter: atomic, last fences", k_big_atomic, ba, s);
  row("1256 B + counter: a word per block", k_big_block, ba, s);
  g_smem = 8192;
  row("the same, 8 KiB dynamic shared memory", k_big_block, ba, s);
  row("the same + a block-wide sum", k_big_block_sum, ba, s);
  CK(cudaStreamSynchronize(s));
  CK(cudaGetLastError());
  return 0;
}
