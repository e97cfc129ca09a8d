/*
 * test_core.cu - GPU tests of src/core: comm creation, symmetric memory,
 * peer loads and stores through LSA pointers, signals between GPUs (kernel
 * and copy engine), the bounded barrier, and the timeout path.
 *
 * Each test launches W ranks (one process per GPU, support/launch.h)
 * and fails if any rank fails, crashes or hangs past the launch deadline.
 * Tests that need 2 GPUs skip on a machine with fewer. Inputs are random
 * with a fresh seed per run (printed), outputs are poisoned beforehand.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "tests/common/test.h"
#include "core/comm.h"
#include "core/plan.h"
#include "testing/hooks.h"
#include "core/signal.cuh"
#include "ref/ref.h"
#include "support/launch.h"

#define LAUNCH_TIMEOUT_S 240

#define CUDA_OK(call) CHECK_CUDA_OR(call, return loom_test_failures)
#define LOOM_OK(call) CHECK_LOOM_OR(call, return loom_test_failures)


/* Wait sites of these tests (core/signal.h: tests take ids 192..255). */
#define LOOM_SITE_TEST_PINGPONG 192
__attribute__((constructor)) static void test_core_wait_sites(void) {
  loom__wait_site_register(LOOM_SITE_TEST_PINGPONG, "ping-pong");
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int gpus_or_skip(int need) {
  int n = loom_launch_gpu_count();
  if (n < need) {
    static char why[96];
    snprintf(why, sizeof why, "needs %d GPUs, found %d", need, n);
    loom_test_skip(why);
    return 0;
  }
  return n;
}

static void run_ranks(int w, loom_rank_fn fn) {
  CHECK_EQ_INT(loom_launch(w, LAUNCH_TIMEOUT_S, fn, NULL), 0);
}

/* On one rank (a comm without peers) and on every GPU. */
static void run_one_and_all(int n, loom_rank_fn fn) {
  run_ranks(1, fn);
  if (n > 1) run_ranks(n, fn);
}

/* ---- kernels ----------------------------------------------------------- */

/* dst[i] = src[i] for n 16-byte words; either side may be a peer address. */
__global__ void copy_kernel(uint4 *dst, const uint4 *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

/* Counts words of a that differ from b. */
__global__ void count_diff_kernel(const uint32_t *a, const uint32_t *b, size_t n, unsigned long long *wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    local += a[i] != b[i];
  if (local) atomicAdd(wrong, local);
}

/* One thread: `iters` round trips. The initiator sets the peer's word to i
 * and waits for its own to reach i; the responder does the reverse. */
__global__ void pingpong_kernel(loom_dev_comm_t dc, size_t sig_offset, int peer, int initiator,
                                uint32_t base, int iters, int *ok) {
  uint32_t *mine = (uint32_t *)(dc.ws + sig_offset);
  uint32_t *theirs = loom_signal_addr(&dc, peer, sig_offset, 0);
  for (int i = 1; i <= iters; ++i) {
    uint32_t e = base + (uint32_t)i;
    if (initiator) {
      loom__signal_store_release(theirs, e);
      if (!loom__signal_wait(&dc, mine, e, peer, 0, LOOM_SITE_TEST_PINGPONG)) return;
    } else {
      if (!loom__signal_wait(&dc, mine, e, peer, 0, LOOM_SITE_TEST_PINGPONG)) return;
      loom__signal_store_release(theirs, e);
    }
  }
  *ok = 1;
}

/* Waits for a signal set by the copy engine, then checks the data it
 * guarded: wrong = number of words that differ from `expect`. */
__global__ void wait_then_check_kernel(loom_dev_comm_t dc, const uint32_t *sig, uint32_t epoch, int peer,
                                       const uint32_t *data, const uint32_t *expect, size_t n,
                                       unsigned long long *wrong, int *ok) {
  __shared__ int reached;
  if (threadIdx.x == 0) reached = loom__signal_wait(&dc, sig, epoch, peer, 0, LOOM_SITE_TEST);
  __syncthreads();
  if (!reached) return;
  unsigned long long local = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    uint32_t v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(data + i));
    local += v != expect[i];
  }
  if (local) atomicAdd(wrong, local);
  if (threadIdx.x == 0) *ok = 1;
}

/* Every block's thread 0 waits on a word nobody sets. */
__global__ void wait_forever_kernel(loom_dev_comm_t dc, const uint32_t *sig) {
  if (threadIdx.x == 0) loom__signal_wait(&dc, sig, 1, -1, blockIdx.x, LOOM_SITE_TEST);
}

/* ---- helpers ----------------------------------------------------------- */

static loom_comm_t make_comm(loom_rank_ctx_t *ctx, int timeout_ms, size_t ws_bytes) {
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  cfg.workspace_bytes = ws_bytes;
  loom_comm_t c = NULL;
  loom_result_t r = loom_launch_comm_create(ctx, &cfg, &c);
  if (r != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "rank %d: loom_comm_create: %s: %s", ctx->rank, loom_result_string(r),
                   loom_last_error());
    return NULL;
  }
  return c;
}

/* Random words for rank `rank` (same on every process for the same seed). */
static uint32_t *random_words(size_t n, int rank) {
  uint32_t *h = (uint32_t *)malloc(n * 4);
  loom_ref_fill_random(LOOM_FP32, h, n, loom_test_seed() + 1000003ull * (uint64_t)rank, 1.0);
  return h;
}

/* ---- tests ------------------------------------------------------------- */

static int rank_comm_info(loom_rank_ctx_t *ctx, void *arg) {
  loom_comm_t c = make_comm(ctx, 0, 0);
  if (!c) return 1;
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  LOOM_OK(loom_comm_get_info(c, &info));
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, ctx->device));
  CHECK_EQ_INT(info.rank, ctx->rank);
  CHECK_EQ_INT(info.size, ctx->size);
  CHECK_EQ_INT(info.device, ctx->device);
  CHECK_EQ_INT(info.sm_count, prop.multiProcessorCount);
  CHECK_EQ_INT(info.cc_major, prop.major);
  CHECK_EQ_INT(info.l2_bytes, prop.l2CacheSize);
  CHECK(info.nccl_version >= 22800);
  CHECK_EQ_INT(info.lsa_size, ctx->size);
  CHECK(info.workspace_free < info.workspace_bytes);
  if (ctx->rank == 0)
    printf("    rank 0: %s, %d SMs, cc %d.%d, L2 %zu MiB, NCCL %d, lsa %d/%d, workspace %zu MiB, timeout %d ms\n",
           prop.name, info.sm_count, info.cc_major, info.cc_minor, info.l2_bytes >> 20, info.nccl_version,
           info.lsa_rank, info.lsa_size, info.workspace_bytes >> 20, info.timeout_ms);
  LOOM_OK(loom_comm_destroy(c));
  return loom_test_failures;
}

LOOM_TEST(gpu_comm_create_reads_the_device) {
  int n = gpus_or_skip(1);
  if (n) run_one_and_all(n, rank_comm_info);
}

/* 1000 collective alloc/free cycles of varying size: device memory in use
 * and the comm's allocation table end where they started. */
static int rank_alloc_cycles(loom_rank_ctx_t *ctx, void *arg) {
  loom_comm_t c = make_comm(ctx, 0, 0);
  if (!c) return 1;
  size_t free0, free1, total;
  void *warm = NULL;
  LOOM_OK(loom_malloc(c, 1 << 20, &warm)); /* first window registration sets up NCCL state */
  LOOM_OK(loom_free(c, warm));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemGetInfo(&free0, &total));
  size_t nallocs0 = c->nallocs;
  double t0 = now_s();
  srand((unsigned)loom_test_seed());
  for (int i = 0; i < 1000; ++i) {
    size_t bytes = (size_t)1024 << (rand() % 16); /* 1 KiB .. 32 MiB (same sequence on every rank) */
    void *p = NULL, *q = NULL;
    LOOM_OK(loom_malloc(c, bytes, &p));
    CHECK(((uintptr_t)p & 255) == 0);
    if (i % 10 == 0) { /* two live at once, freed in the other order */
      LOOM_OK(loom_malloc(c, 4096, &q));
      LOOM_OK(loom_free(c, p));
      LOOM_OK(loom_free(c, q));
    } else {
      LOOM_OK(loom_free(c, p));
    }
  }
  double dt = now_s() - t0;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemGetInfo(&free1, &total));
  CHECK_EQ_INT(c->nallocs, nallocs0);
  long long leaked = (long long)free0 - (long long)free1;
  CHECK(leaked < (4ll << 20)); /* allocator granularity noise at most */
  if (ctx->rank == 0)
    printf("    1000 alloc/free cycles (1 KiB..32 MiB): %.2f ms per cycle, device memory change %lld bytes\n",
           dt, leaked);
  LOOM_OK(loom_comm_destroy(c));
  return loom_test_failures;
}

LOOM_TEST(gpu_symmetric_alloc_free_1000_cycles_no_leak) {
  int n = gpus_or_skip(1);
  if (n) run_one_and_all(n, rank_alloc_cycles);
}

/* Rank r pushes random data into rank (r+1)%W's buffer with plain kernel
 * stores through the peer address, then pulls rank (r-1)%W's... every rank
 * checks both round trips bit for bit, then times each direction. */
static int rank_peer_store_load(loom_rank_ctx_t *ctx, void *arg) {
  const size_t bytes = (size_t)256 << 20, words = bytes / 4;
  loom_comm_t c = make_comm(ctx, 0, 0);
  if (!c) return 1;
  int next = (ctx->rank + 1) % ctx->size, prev = (ctx->rank + ctx->size - 1) % ctx->size;
  void *sym = NULL, *peer_sym = NULL, *prev_sym = NULL;
  uint32_t *src = NULL, *back = NULL, *expect_prev = NULL;
  unsigned long long *wrong = NULL, h_wrong = 0;
  LOOM_OK(loom_malloc(c, bytes, &sym));
  LOOM_OK(loom_peer_ptr(c, sym, next, &peer_sym));
  LOOM_OK(loom_peer_ptr(c, sym, prev, &prev_sym));
  CUDA_OK(cudaMalloc((void **)&src, bytes));
  CUDA_OK(cudaMalloc((void **)&back, bytes));
  CUDA_OK(cudaMalloc((void **)&expect_prev, bytes));
  CUDA_OK(cudaMalloc((void **)&wrong, sizeof *wrong));
  uint32_t *mine = random_words(words, ctx->rank), *theirs = random_words(words, prev);
  CUDA_OK(cudaMemcpy(src, mine, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(expect_prev, theirs, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(sym, 0xff, bytes)); /* poison */
  CUDA_OK(cudaMemset(back, 0xff, bytes));
  LOOM_OK(loom__comm_barrier(c, 0)); /* everyone poisoned before anyone pushes */
  int grid = c->sm_count * 4;
  copy_kernel<<<grid, 512>>>((uint4 *)peer_sym, (const uint4 *)src, bytes / 16); /* push to next */
  CUDA_OK(cudaGetLastError());
  LOOM_OK(loom__comm_barrier(c, 0)); /* pushes done and visible */
  CUDA_OK(cudaMemset(wrong, 0, sizeof *wrong));
  count_diff_kernel<<<grid, 512>>>((const uint32_t *)sym, expect_prev, words, wrong); /* prev pushed into me */
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(&h_wrong, wrong, sizeof h_wrong, cudaMemcpyDeviceToHost));
  CHECK_EQ_INT(h_wrong, 0);
  /* load round trip: pull what I pushed to next back from next's buffer */
  copy_kernel<<<grid, 512>>>((uint4 *)back, (const uint4 *)peer_sym, bytes / 16);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemset(wrong, 0, sizeof *wrong));
  count_diff_kernel<<<grid, 512>>>(back, src, words, wrong);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(&h_wrong, wrong, sizeof h_wrong, cudaMemcpyDeviceToHost));
  CHECK_EQ_INT(h_wrong, 0);
  LOOM_OK(loom__comm_barrier(c, 0));
  CUDA_OK(cudaDeviceSynchronize());
  LOOM_OK(loom_comm_get_async_error(c));

  /* bandwidth: both ranks push (or pull) at once, as in a fused op */
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  float push_ms = 0, pull_ms = 0;
  const int reps = 10;
  for (int dir = 0; dir < 2; ++dir) {
    for (int warm = 0; warm < 2; ++warm) {
      if (dir == 0) copy_kernel<<<grid, 512>>>((uint4 *)peer_sym, (const uint4 *)src, bytes / 16);
      else copy_kernel<<<grid, 512>>>((uint4 *)back, (const uint4 *)peer_sym, bytes / 16);
    }
    LOOM_OK(loom__comm_barrier(c, 0));
    CUDA_OK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) {
      if (dir == 0) copy_kernel<<<grid, 512>>>((uint4 *)peer_sym, (const uint4 *)src, bytes / 16);
      else copy_kernel<<<grid, 512>>>((uint4 *)back, (const uint4 *)peer_sym, bytes / 16);
    }
    CUDA_OK(cudaEventRecord(e1));
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaEventSynchronize(e1));
    CUDA_OK(cudaEventElapsedTime(dir == 0 ? &push_ms : &pull_ms, e0, e1));
    LOOM_OK(loom__comm_barrier(c, 0));
  }
  double push_gbs = (double)bytes * reps / (push_ms * 1e-3) / 1e9, pull_gbs = (double)bytes * reps / (pull_ms * 1e-3) / 1e9;
  printf("    rank %d: 256 MiB through LSA pointers: store to rank %d %.1f GB/s, load from rank %d %.1f GB/s (one way)\n",
         ctx->rank, next, push_gbs, next, pull_gbs);
  if (ctx->size > 1 && push_gbs < 300.0)
    printf("    rank %d: NOTE store bandwidth %.1f GB/s is under the expected 300 GB/s\n", ctx->rank, push_gbs);
  LOOM_OK(loom__comm_barrier(c, 0));
  CUDA_OK(cudaDeviceSynchronize());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  free(mine);
  free(theirs);
  cudaFree(src);
  cudaFree(back);
  cudaFree(expect_prev);
  cudaFree(wrong);
  LOOM_OK(loom_free(c, sym));
  LOOM_OK(loom_comm_destroy(c));
  return loom_test_failures;
}

LOOM_TEST(gpu_peer_store_load_round_trip_2gpu) {
  if (gpus_or_skip(2)) run_ranks(2, rank_peer_store_load);
}

/* Kernel-to-kernel ping-pong between rank 0 and rank 1 on a plan's signal
 * word; latency = time / round trips / 2. Runs twice on one plan to check
 * that epochs continue across calls. */
static int rank_pingpong(loom_rank_ctx_t *ctx, void *arg) {
  loom_comm_t c = make_comm(ctx, 10000, 0);
  if (!c) return 1;
  loom_plan_t plan = NULL;
  LOOM_OK(loom__test_plan(c, 1, 0, &plan));
  int *ok = NULL, h_ok = 0;
  CUDA_OK(cudaMalloc((void **)&ok, sizeof(int)));
  int peer = 1 - ctx->rank;
  const int iters = 10000;
  double us = 0;
  for (int round = 0; round < 2; ++round) {
    CUDA_OK(cudaMemset(ok, 0, sizeof(int)));
    uint32_t base = plan->epoch;
    plan->epoch += iters;
    LOOM_OK(loom__comm_barrier(c, 0));
    CUDA_OK(cudaDeviceSynchronize());
    double t0 = now_s();
    pingpong_kernel<<<1, 1>>>(loom__comm_dev(c), plan->signals_offset, peer, ctx->rank == 0, base, iters, ok);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    us = (now_s() - t0) * 1e6;
    CUDA_OK(cudaMemcpy(&h_ok, ok, sizeof h_ok, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(h_ok, 1);
    LOOM_OK(loom_comm_get_async_error(c));
  }
  if (ctx->rank == 0)
    printf("    kernel-to-kernel ping-pong GPU0<->GPU1: %d round trips, %.2f us per round trip, %.2f us one way\n",
           iters, us / iters, us / iters / 2);
  LOOM_OK(loom_plan_destroy(plan));
  cudaFree(ok);
  LOOM_OK(loom_comm_destroy(c));
  return loom_test_failures;
}

LOOM_TEST(gpu_signal_pingpong_2gpu) {
  if (gpus_or_skip(2)) run_ranks(2, rank_pingpong);
}

/* Rank 0 copies data into rank 1's buffer with the copy engine and then
 * signals with cuStreamWriteValue32 on rank 1's word; rank 1's kernel waits
 * on it and checks the data. Three rounds with fresh data. */
static int rank_ce_signal(loom_rank_ctx_t *ctx, void *arg) {
  const size_t bytes = (size_t)16 << 20, words = bytes / 4;
  loom_comm_t c = make_comm(ctx, 10000, 0);
  if (!c) return 1;
  loom_plan_t plan = NULL;
  LOOM_OK(loom__test_plan(c, 1, 0, &plan));
  void *sym = NULL, *peer_sym = NULL;
  LOOM_OK(loom_malloc(c, bytes, &sym));
  LOOM_OK(loom_peer_ptr(c, sym, 1 - ctx->rank, &peer_sym));
  uint32_t *src = NULL, *expect = NULL;
  unsigned long long *wrong = NULL, h_wrong = 0;
  int *ok = NULL, h_ok = 0;
  CUDA_OK(cudaMalloc((void **)&src, bytes));
  CUDA_OK(cudaMalloc((void **)&expect, bytes));
  CUDA_OK(cudaMalloc((void **)&wrong, sizeof *wrong));
  CUDA_OK(cudaMalloc((void **)&ok, sizeof *ok));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *peer_sig = NULL;
  LOOM_OK(loom_peer_ptr(c, (char *)c->ws_ptr + plan->signals_offset, 1 - ctx->rank, &peer_sig));
  for (int round = 0; round < 3; ++round) {
    uint32_t epoch = loom__plan_next_epoch(plan);
    uint32_t *h = random_words(words, 100 * round);
    if (ctx->rank == 0) CUDA_OK(cudaMemcpy(src, h, bytes, cudaMemcpyHostToDevice));
    else {
      CUDA_OK(cudaMemcpy(expect, h, bytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(sym, 0xff, bytes));
      CUDA_OK(cudaMemset(wrong, 0, sizeof *wrong));
      CUDA_OK(cudaMemset(ok, 0, sizeof *ok));
      CUDA_OK(cudaDeviceSynchronize());
    }
    free(h);
    LOOM_OK(loom__comm_fence(c)); /* rank 1 poisoned before rank 0 copies */
    if (ctx->rank == 0) {
      CUDA_OK(cudaMemcpyAsync(peer_sym, src, bytes, cudaMemcpyDeviceToDevice, s));
      LOOM_OK(loom__signal_write_ce(c, (uint32_t *)peer_sig, epoch, s));
      CUDA_OK(cudaStreamSynchronize(s));
    } else {
      wait_then_check_kernel<<<1, 1024, 0, s>>>(loom__comm_dev(c), (const uint32_t *)((char *)c->ws_ptr + plan->signals_offset),
                                                epoch, 0, (const uint32_t *)sym, expect, words, wrong, ok);
      CUDA_OK(cudaGetLastError());
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaMemcpy(&h_ok, ok, sizeof h_ok, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(&h_wrong, wrong, sizeof h_wrong, cudaMemcpyDeviceToHost));
      CHECK_EQ_INT(h_ok, 1);
      CHECK_EQ_INT(h_wrong, 0);
    }
    LOOM_OK(loom_comm_get_async_error(c));
  }
  /* a stream wait on the same kind of signal, set by the peer's copy engine */
  uint32_t epoch = loom__plan_next_epoch(plan);
  LOOM_OK(loom__comm_fence(c));
  if (ctx->rank == 0) LOOM_OK(loom__signal_write_ce(c, (uint32_t *)peer_sig, epoch, s));
  else LOOM_OK(loom__stream_wait(c, (const uint32_t *)((char *)c->ws_ptr + plan->signals_offset), epoch, 0, 0,
                                 LOOM_SITE_STREAM_WAIT, s));
  CUDA_OK(cudaStreamSynchronize(s));
  LOOM_OK(loom_comm_get_async_error(c));
  if (ctx->rank == 1) printf("    copy engine -> kernel signal: 3 rounds of 16 MiB checked, stream wait reached\n");
  cudaStreamDestroy(s);
  cudaFree(src);
  cudaFree(expect);
  cudaFree(wrong);
  cudaFree(ok);
  LOOM_OK(loom_free(c, sym));
  LOOM_OK(loom_plan_destroy(plan));
  LOOM_OK(loom_comm_destroy(c));
  return loom_test_failures;
}

LOOM_TEST(gpu_copy_engine_signal_to_kernel_wait_2gpu) {
  if (gpus_or_skip(2)) run_ranks(2, rank_ce_signal);
}

/* 1000 barriers, each guarding a value written into the next rank's buffer:
 * after barrier i every rank must see i from its predecessor. */
__global__ void put_value_kernel(uint32_t *peer_word, uint32_t v) { *peer_word = v; }
__global__ void check_value_kernel(const uint32_t *word, uint32_t v, int *bad) {
  uint32_t seen;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(word));
  if (seen != v) atomicAdd(bad, 1);
}

static int rank_barrier(loom_rank_ctx_t *ctx, void *arg) {
  loom_comm_t c = make_comm(ctx, 10000, 0);
  if (!c) return 1;
  void *sym = NULL, *next_sym = NULL;
  int *bad = NULL, h_bad = 0;
  /* enough live allocations that the comm's allocation table grows and
   * moves (the barrier must not hold pointers into it) */
  void *extra[20];
  for (int i = 0; i < 20; ++i) LOOM_OK(loom_malloc(c, 4096, &extra[i]));
  LOOM_OK(loom_malloc(c, 4096, &sym));
  LOOM_OK(loom_peer_ptr(c, sym, (ctx->rank + 1) % ctx->size, &next_sym));
  CUDA_OK(cudaMalloc((void **)&bad, sizeof(int)));
  CUDA_OK(cudaMemset(bad, 0, sizeof(int)));
  double t0 = now_s();
  for (uint32_t i = 1; i <= 1000; ++i) {
    put_value_kernel<<<1, 1>>>((uint32_t *)next_sym + (i & 1), i);
    LOOM_OK(loom__comm_barrier(c, 0));
    check_value_kernel<<<1, 1>>>((const uint32_t *)sym + (i & 1), i, bad);
    /* the slot written in round i+2 is the one checked now: fence it */
    LOOM_OK(loom__comm_barrier(c, 0));
  }
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  double dt = now_s() - t0;
  CUDA_OK(cudaMemcpy(&h_bad, bad, sizeof h_bad, cudaMemcpyDeviceToHost));
  CHECK_EQ_INT(h_bad, 0);
  LOOM_OK(loom_comm_get_async_error(c));
  if (ctx->rank == 0) printf("    2000 device barriers over %d ranks: %.1f us each (with launches)\n", ctx->size, dt / 2000 * 1e6);
  cudaFree(bad);
  for (int i = 0; i < 20; ++i) LOOM_OK(loom_free(c, extra[i]));
  LOOM_OK(loom_free(c, sym));
  LOOM_OK(loom_comm_destroy(c));
  return loom_test_failures;
}

LOOM_TEST(gpu_device_barrier_orders_peer_stores) {
  int n = gpus_or_skip(1);
  if (n) run_one_and_all(n, rank_barrier);
}

/* The barrier inside a CUDA graph: each replay must be a real barrier (the
 * epoch comes from the device counter, not from the capture). Per round,
 * rank r bumps its round counter, the last rank first spins ~50 us, then
 * writes the round into the next rank's word; after the barrier every rank
 * must see its predecessor's current round. A barrier with a stale epoch
 * would let the check run before the slow rank's write. */
__global__ void round_put_kernel(uint32_t *round, uint32_t *peer_word, int slow) {
  uint32_t r = ++*round;
  if (slow) {
    uint64_t t0 = loom__globaltimer_ns();
    while (loom__globaltimer_ns() - t0 < 50000) {
    }
  }
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(peer_word), "r"(r) : "memory");
}
__global__ void round_check_kernel(const uint32_t *round, const uint32_t *word, int *bad) {
  uint32_t seen;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(word));
  if (seen != *round) atomicAdd(bad, 1);
}

static int rank_graph_barrier(loom_rank_ctx_t *ctx, void *arg) {
  loom_comm_t c = make_comm(ctx, 10000, 0);
  if (!c) return 1;
  void *sym = NULL, *next_sym = NULL;
  uint32_t *round = NULL;
  int *bad = NULL, h_bad = 0;
  LOOM_OK(loom_malloc(c, 4096, &sym));
  LOOM_OK(loom_peer_ptr(c, sym, (ctx->rank + 1) % ctx->size, &next_sym));
  CUDA_OK(cudaMalloc((void **)&round, sizeof(uint32_t)));
  CUDA_OK(cudaMalloc((void **)&bad, sizeof(int)));
  CUDA_OK(cudaMemset(round, 0, sizeof(uint32_t)));
  CUDA_OK(cudaMemset(bad, 0, sizeof(int)));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaDeviceSynchronize());
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  round_put_kernel<<<1, 1, 0, s>>>(round, (uint32_t *)next_sym, ctx->rank == ctx->size - 1);
  loom_result_t r1 = loom__comm_barrier(c, s);
  round_check_kernel<<<1, 1, 0, s>>>(round, (const uint32_t *)sym, bad);
  loom_result_t r2 = loom__comm_barrier(c, s);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  LOOM_OK(r1);
  LOOM_OK(r2);
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 200; ++i) CUDA_OK(cudaGraphLaunch(ge, s));
  LOOM_OK(loom__comm_barrier(c, s)); /* an uncaptured call continues the same epochs */
  CUDA_OK(cudaStreamSynchronize(s));
  LOOM_OK(loom_comm_get_async_error(c));
  CUDA_OK(cudaMemcpy(&h_bad, bad, sizeof h_bad, cudaMemcpyDeviceToHost));
  CHECK_EQ_INT(h_bad, 0);
  uint32_t h_round = 0;
  CUDA_OK(cudaMemcpy(&h_round, round, sizeof h_round, cudaMemcpyDeviceToHost));
  CHECK_EQ_INT(h_round, 200);
  if (ctx->rank == 0) printf("    200 graph replays of put/barrier/check/barrier over %d ranks: %d stale reads\n", ctx->size, h_bad);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(round);
  cudaFree(bad);
  LOOM_OK(loom_free(c, sym));
  LOOM_OK(loom_comm_destroy(c));
  return loom_test_failures;
}

LOOM_TEST(gpu_barrier_in_cuda_graph_advances_epochs) {
  int n = gpus_or_skip(1);
  if (n) run_one_and_all(n, rank_graph_barrier);
}

/* A wait that nobody signals: with a 1 s timeout the stream is free again
 * within 2 s, the comm reports LOOM_ERR_TIMEOUT with rank, signal, expected
 * and seen values, stays in error, and the process can destroy it, create a
 * new comm and work normally. 132+ blocks wait at once: all give up. */
static int rank_timeout(loom_rank_ctx_t *ctx, void *arg) {
  loom_comm_t c = make_comm(ctx, 1000, 0);
  if (!c) return 1;
  loom_plan_t plan = NULL;
  LOOM_OK(loom__test_plan(c, 1, 0, &plan));
  const uint32_t *sig = (const uint32_t *)((char *)c->ws_ptr + plan->signals_offset);
  double t0 = now_s();
  wait_forever_kernel<<<c->sm_count * 2, 32>>>(loom__comm_dev(c), sig);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  double waited = now_s() - t0;
  CHECK(waited >= 0.9 && waited < 2.0);
  CHECK_RESULT(loom_comm_get_async_error(c), LOOM_ERR_TIMEOUT);
  CHECK_MSG("expected >= 1, saw 0");
  CHECK_MSG("test wait");
  char want[64];
  snprintf(want, sizeof want, "rank %d:", ctx->rank);
  CHECK_MSG(want);
  printf("    rank %d: unsignalled wait returned after %.3f s (timeout 1 s): %s\n", ctx->rank, waited, loom_last_error());
  /* sticky: later calls on this comm say so */
  void *p = NULL;
  CHECK_RESULT(loom_malloc(c, 4096, &p), LOOM_ERR_TIMEOUT);
  /* a stream wait also gives up at once now (abort flag) */
  t0 = now_s();
  LOOM_OK(loom__stream_wait(c, sig, 5, -1, 0, LOOM_SITE_STREAM_WAIT, 0));
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(now_s() - t0 < 0.5);
  LOOM_OK(loom_plan_destroy(plan));
  LOOM_OK(loom_comm_destroy(c));
  /* the process is still usable: a new comm works */
  loom_comm_t c2 = make_comm(ctx, 5000, 0);
  if (!c2) return 1;
  LOOM_OK(loom__comm_barrier(c2, 0));
  CUDA_OK(cudaDeviceSynchronize());
  LOOM_OK(loom_comm_get_async_error(c2));
  void *q = NULL;
  LOOM_OK(loom_malloc(c2, 1 << 20, &q));
  LOOM_OK(loom_free(c2, q));
  LOOM_OK(loom_comm_destroy(c2));
  return loom_test_failures;
}

LOOM_TEST(gpu_unsignalled_wait_times_out_and_process_survives) {
  int n = gpus_or_skip(1);
  if (n) run_one_and_all(n, rank_timeout);
}

/* Bad input that needs a real comm: a workspace request over the configured
 * size, loom_free of a foreign device pointer, double free. */
static int rank_bad_input(loom_rank_ctx_t *ctx, void *arg) {
  loom_comm_t c = make_comm(ctx, 0, 1 << 20);
  if (!c) return 1;
  loom_plan_t plan = NULL;
  CHECK_RESULT(loom__test_plan(c, 0, 2 << 20, &plan), LOOM_ERR_OUT_OF_MEMORY);
  CHECK_MSG("needs 2097408 bytes"); /* 2 MiB of staging + the 256-byte epoch/signal block */
  void *dev = NULL, *sym = NULL;
  CUDA_OK(cudaMalloc(&dev, 4096));
  CHECK_RESULT(loom_free(c, dev), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("was not returned by loom_malloc");
  LOOM_OK(loom_malloc(c, 4096, &sym));
  LOOM_OK(loom_free(c, sym));
  CHECK_RESULT(loom_free(c, sym), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_free(c, c->ws_ptr), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("workspace");
  cudaFree(dev);
  LOOM_OK(loom_comm_destroy(c));
  CHECK_RESULT(loom_comm_destroy(c), LOOM_ERR_INVALID_ARGUMENT);
  /* a comm on the wrong device is refused */
  int ndev = 0;
  CUDA_OK(cudaGetDeviceCount(&ndev));
  if (ndev > 1) {
    CUDA_OK(cudaSetDevice((ctx->device + 1) % ndev));
    loom_comm_t w = NULL;
    CHECK_RESULT(loom_launch_comm_create(ctx, NULL, &w), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("call cudaSetDevice");
    CUDA_OK(cudaSetDevice(ctx->device));
  }
  return loom_test_failures;
}

LOOM_TEST(gpu_bad_input_with_a_real_comm) {
  int n = gpus_or_skip(1);
  if (n) run_one_and_all(n, rank_bad_input);
}
