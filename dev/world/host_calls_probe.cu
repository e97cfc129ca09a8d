/*
 * host_calls_probe.cu - which host-side CUDA calls, made while another
 * thread's kernel spins waiting on the device, hold that wait up. The
 * question it answers for the one-GPU world (docs/world.md, "Rules a
 * program in a world must keep"): W ranks share one device, so a rank's
 * host call that waits for the whole device (or blocks the other threads'
 * launches) while a peer's kernel waits for this rank's next kernel stalls
 * both until a timeout. Which calls do that is not documented call by call;
 * this measures it.
 *
 *   host_calls_probe [limit_ms] [rows]
 *     limit_ms  how long the spinning kernel waits (default 1000)
 *     rows      only the rows whose call names contain this text (default: every row)
 *
 * Two host threads, two streams each, one device. The waiter's kernel spins
 * (bounded by `limit_ms` of the device's global timer) until a flag in
 * device memory reaches a value; the setter's one-thread kernel stores it.
 * Every call X below is timed in two arrangements:
 *   self:  the setter thread makes call X, then launches the setter kernel
 *          (does X, made by the rank that is waited for, wait for the
 *          waiting kernel? The rank's own host step between two calls.)
 *   other: the waiter thread makes call X while its kernel spins; the
 *          setter thread launches the setter kernel 20 ms into X (does X,
 *          made by one thread, block another thread's launch?)
 * "busy:" rows (other only) queue a second spinning kernel, waiting for the
 * same flag, on X's own stream first: X then has to wait for the peer (as a
 * rank's download right after its collective call does), and the row says
 * whether X waits holding up the other thread's launch. "by 3 threads at
 * once" also has two more threads each queue a spinning kernel and a
 * pageable download behind it on streams of their own (as three ranks'
 * downloads queued behind their collective calls, the MoE soak's hang).
 * A row prints how long X took, how long the setter's launch took, and
 * whether the spinning kernel saw the flag (yes: X did not hold the wait up;
 * no: the wait expired after limit_ms, so X, or the launch behind it, waited
 * for the device).
 *
 * "first cublasLtMatmul" runs cuBLASLt's first product of a type pair in the
 * process (bf16 x bf16 -> bf16 for self, -> fp32 for other): does the
 * library's first use of a kernel wait for the device (the sequential
 * GEMM + AllReduce's GEMM engine in a world)?
 *
 * "first launch ... local memory" launches a kernel whose per-thread local
 * memory exceeds every earlier one's (the driver grows the context's local
 * memory at that launch); it runs once per arrangement, the second with a
 * larger frame than the first, so each is a growth.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe.cuh"

/* A frame of N floats per thread, indexed at run time (kept in local memory). */
template <int N>
__global__ void local_kernel(float *out, int i) {
  float a[N];
  for (int q = 0; q < N; ++q) a[q] = (float)(q * threadIdx.x);
  out[threadIdx.x] = a[(i + threadIdx.x) % N];
}

__global__ void smem_kernel(float *out) {
  extern __shared__ float s[];
  s[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

__global__ void coop_kernel(float *out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f; }

static double ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Resources a call may use (its own stream and buffers: never the spinning kernel's). */
typedef struct probe {
  cudaStream_t sx;
  cublasLtHandle_t lt;
  void *lt_work;
  void *dev, *pinned, *pageable, *reg, *to_free, *big;
  void *pinned_to_free;
  float *fout;
  unsigned long long *out2; /* the busy stream's spinning kernel's result */
  cudaStream_t sy[2];       /* two more threads' busy streams (the "3 threads" row) */
  void *pageable_y[2];
  const unsigned *flag;     /* the row's flag, value and limit (for the extra threads' spinning kernels) */
  unsigned want;
  unsigned long long limit_ns, *out_y;
  unsigned long long *started_y;
  cudaGraphExec_t exec;
  int arrangement; /* 0 self, 1 other */
} probe_t;

typedef void (*call_fn)(probe_t *);

static void c_none(probe_t *p) { (void)p; }
static void c_h2d_pageable(probe_t *p) { CK(cudaMemcpyAsync(p->dev, p->pageable, 4096, cudaMemcpyHostToDevice, p->sx)); }
static void c_d2h_pageable(probe_t *p) { CK(cudaMemcpyAsync(p->pageable, p->dev, 4096, cudaMemcpyDeviceToHost, p->sx)); }
static void c_d2h_pinned_sync(probe_t *p) {
  CK(cudaMemcpyAsync(p->pinned, p->dev, 4096, cudaMemcpyDeviceToHost, p->sx));
  CK(cudaStreamSynchronize(p->sx));
}
static void c_h2d_pinned(probe_t *p) { CK(cudaMemcpyAsync(p->dev, p->pinned, 4096, cudaMemcpyHostToDevice, p->sx)); }
static void c_memcpy_sync(probe_t *p) { CK(cudaMemcpy(p->pinned, p->dev, 4096, cudaMemcpyDeviceToHost)); }
static void c_memset_sync(probe_t *p) { CK(cudaMemset(p->dev, 1, 4096)); }
static void c_memset_async(probe_t *p) { CK(cudaMemsetAsync(p->dev, 1, 4096, p->sx)); }
static void c_malloc_small(probe_t *p) {
  void *q = NULL;
  CK(cudaMalloc(&q, 16u << 20));
  p->to_free = q;
}
static void c_free(probe_t *p) {
  CK(cudaFree(p->to_free));
  p->to_free = NULL;
}
static void c_malloc_big(probe_t *p) { CK(cudaMalloc(&p->big, (size_t)4 << 30)); }
static void c_free_big(probe_t *p) {
  CK(cudaFree(p->big));
  p->big = NULL;
}
static void c_malloc_async(probe_t *p) {
  void *q = NULL;
  CK(cudaMallocAsync(&q, 16u << 20, p->sx));
  CK(cudaFreeAsync(q, p->sx));
}
static void c_malloc_host(probe_t *p) { CK(cudaMallocHost(&p->pinned_to_free, 4u << 20)); }
static void c_free_host(probe_t *p) {
  CK(cudaFreeHost(p->pinned_to_free));
  p->pinned_to_free = NULL;
}
static void c_host_register(probe_t *p) { CK(cudaHostRegister(p->reg, 4u << 20, cudaHostRegisterDefault)); }
static void c_host_unregister(probe_t *p) { CK(cudaHostUnregister(p->reg)); }
static void c_stream_create(probe_t *p) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamDestroy(s));
  (void)p;
}
static void c_event(probe_t *p) {
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CK(cudaEventRecord(e, p->sx));
  CK(cudaEventSynchronize(e));
  CK(cudaEventDestroy(e));
}
static void c_capture_instantiate(probe_t *p) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(p->sx, cudaStreamCaptureModeThreadLocal));
  coop_kernel<<<1, 32, 0, p->sx>>>(p->fout);
  CK(cudaStreamEndCapture(p->sx, &g));
  if (p->exec) CK(cudaGraphExecDestroy(p->exec));
  CK(cudaGraphInstantiate(&p->exec, g, 0));
  CK(cudaGraphDestroy(g));
}
/* The same with a device-to-device copy node (the copy-engine transfers' graphs). */
static void c_capture_instantiate_copy(probe_t *p) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(p->sx, cudaStreamCaptureModeThreadLocal));
  CK(cudaMemcpyAsync((char *)p->dev + 65536, p->dev, 65536, cudaMemcpyDeviceToDevice, p->sx));
  coop_kernel<<<1, 32, 0, p->sx>>>(p->fout);
  CK(cudaStreamEndCapture(p->sx, &g));
  if (p->exec) CK(cudaGraphExecDestroy(p->exec));
  CK(cudaGraphInstantiate(&p->exec, g, 0));
  CK(cudaGraphDestroy(g));
}
static void c_graph_first_launch(probe_t *p) { CK(cudaGraphLaunch(p->exec, p->sx)); }
static void c_graph_upload(probe_t *p) { CK(cudaGraphUpload(p->exec, p->sx)); }
static void c_ptr_attrs(probe_t *p) {
  cudaPointerAttributes a;
  CK(cudaPointerGetAttributes(&a, p->dev));
}
static void c_local_first(probe_t *p) {
  if (p->arrangement == 0) local_kernel<2048><<<1, 32, 0, p->sx>>>(p->fout, 3);
  else local_kernel<8192><<<1, 32, 0, p->sx>>>(p->fout, 3);
  CK(cudaGetLastError());
}
static void c_smem_attr_launch(probe_t *p) {
  const int bytes = 200 * 1024;
  CK(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  smem_kernel<<<1, 64, bytes, p->sx>>>(p->fout);
  CK(cudaGetLastError());
}
static void c_coop_launch(probe_t *p) {
  void *args[] = {&p->fout};
  CK(cudaLaunchCooperativeKernel((const void *)coop_kernel, dim3(4), dim3(32), args, 0, p->sx));
}
static void c_stream_query_idle(probe_t *p) { (void)cudaStreamQuery(p->sx); }

#define LT(x)                                                                     \
  do {                                                                            \
    cublasStatus_t s_ = (x);                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
      fprintf(stderr, "%s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* C [256, 256] = A [256, 256] x B [256, 256], bf16 in, C bf16 (self) or fp32 (other): cuBLASLt's first such. */
static void c_cublaslt_first(probe_t *p) {
  const int n = 256;
  const cudaDataType_t ct = p->arrangement == 0 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n));
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n));
  LT(cublasLtMatrixLayoutCreate(&lc, ct, n, n, n));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = 1 << 22;
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t h;
  int got = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(p->lt, op, la, lb, lc, lc, pref, 1, &h, &got));
  const float one = 1.f, zero = 0.f;
  if (got > 0)
    LT(cublasLtMatmul(p->lt, op, &one, p->dev, la, p->dev, lb, &zero, p->fout, lc, p->fout, lc, &h.algo, p->lt_work,
                      ws, p->sx));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
}
static void c_d2h_pageable_64k(probe_t *p) {
  CK(cudaMemcpyAsync(p->pageable, p->dev, 65536, cudaMemcpyDeviceToHost, p->sx));
}
static void c_h2d_pageable_64k(probe_t *p) {
  CK(cudaMemcpyAsync(p->dev, p->pageable, 65536, cudaMemcpyHostToDevice, p->sx));
}
static void c_d2h_pinned_async(probe_t *p) {
  CK(cudaMemcpyAsync(p->pinned, p->dev, 65536, cudaMemcpyDeviceToHost, p->sx));
}
static void c_d2d(probe_t *p) {
  CK(cudaMemcpyAsync((char *)p->dev + 65536, p->dev, 65536, cudaMemcpyDeviceToDevice, p->sx));
}
static void c_stream_sync(probe_t *p) { CK(cudaStreamSynchronize(p->sx)); }

/* One of two more threads of the "3 threads" row: a spinning kernel on its own stream, then a pageable
 * download queued behind it (as three ranks' downloads queued behind their collective calls). */
typedef struct extra {
  probe_t *p;
  int i;
} extra_t;
static void *extra_d2h(void *arg) {
  extra_t *x = (extra_t *)arg;
  probe_t *p = x->p;
  spin_kernel<<<1, 1, 0, p->sy[x->i]>>>(p->flag, p->want, p->limit_ns, p->out_y + 2 * x->i,
                                        (volatile unsigned *)(p->started_y + x->i));
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(p->pageable_y[x->i], p->dev, 65536, cudaMemcpyDeviceToHost, p->sy[x->i]));
  return NULL;
}
static void c_d2h_pageable_3threads(probe_t *p) {
  pthread_t th[2];
  extra_t x[2] = {{p, 0}, {p, 1}};
  for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, extra_d2h, &x[i]);
  CK(cudaMemcpyAsync(p->pageable, p->dev, 65536, cudaMemcpyDeviceToHost, p->sx));
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
}
static void c_device_sync(probe_t *p) {
  (void)p;
  CK(cudaDeviceSynchronize());
}

typedef struct call {
  const char *name;
  call_fn fn;
  int busy; /* 1: X's own stream has a kernel queued that waits for the same flag ("other" only) */
} call_t;

static const call_t calls[] = {
    {"nothing (control)", c_none},
    {"cudaMemcpyAsync H2D, pageable 4 KB", c_h2d_pageable},
    {"cudaMemcpyAsync D2H, pageable 4 KB", c_d2h_pageable},
    {"cudaMemcpyAsync H2D, pinned 4 KB", c_h2d_pinned},
    {"cudaMemcpyAsync D2H, pinned + stream sync", c_d2h_pinned_sync},
    {"cudaMemcpy D2H, pinned 4 KB", c_memcpy_sync},
    {"cudaMemset (sync)", c_memset_sync},
    {"cudaMemsetAsync", c_memset_async},
    {"cudaMalloc 16 MB", c_malloc_small},
    {"cudaFree 16 MB", c_free},
    {"cudaMalloc 4 GB", c_malloc_big},
    {"cudaFree 4 GB", c_free_big},
    {"cudaMallocAsync + cudaFreeAsync", c_malloc_async},
    {"cudaMallocHost 4 MB", c_malloc_host},
    {"cudaFreeHost", c_free_host},
    {"cudaHostRegister 4 MB", c_host_register},
    {"cudaHostUnregister", c_host_unregister},
    {"cudaStreamCreate + Destroy", c_stream_create},
    {"cudaEvent create/record/sync/destroy", c_event},
    {"capture + cudaGraphInstantiate", c_capture_instantiate},
    {"cudaGraphLaunch (first)", c_graph_first_launch},
    {"cudaGraphUpload (re-instantiated)", c_graph_upload},
    {"capture + cudaGraphInstantiate, D2D copy node", c_capture_instantiate_copy},
    {"cudaGraphLaunch (first), D2D copy node", c_graph_first_launch},
    {"cudaMemcpyAsync D2D 64 KB", c_d2d},
    {"cudaPointerGetAttributes", c_ptr_attrs},
    {"first launch, more local memory", c_local_first},
    {"first cublasLtMatmul of a type pair", c_cublaslt_first},
    {"cudaFuncSetAttribute smem + launch", c_smem_attr_launch},
    {"cooperative launch", c_coop_launch},
    {"cudaStreamQuery (idle stream)", c_stream_query_idle},
    {"cudaDeviceSynchronize", c_device_sync},
    {"cudaMemcpyAsync D2H, pageable 64 KB", c_d2h_pageable_64k},
    {"busy: cudaMemcpyAsync D2H, pageable 4 KB", c_d2h_pageable, 1},
    {"busy: cudaMemcpyAsync D2H, pageable 64 KB", c_d2h_pageable_64k, 1},
    {"busy: cudaMemcpyAsync H2D, pageable 4 KB", c_h2d_pageable, 1},
    {"busy: pageable 64 KB D2H by 3 threads at once", c_d2h_pageable_3threads, 1},
    {"busy: cudaMemcpyAsync H2D, pageable 64 KB", c_h2d_pageable_64k, 1},
    {"busy: cudaMemcpyAsync D2H, pinned 64 KB", c_d2h_pinned_async, 1},
    {"busy: cudaMemcpyAsync H2D, pinned 4 KB", c_h2d_pinned, 1},
    {"busy: capture + cudaGraphInstantiate", c_capture_instantiate, 1},
    {"busy: cudaMalloc 16 MB", c_malloc_small, 1},
    {"busy: cudaFree 16 MB", c_free, 1},
    {"busy: cudaStreamSynchronize", c_stream_sync, 1},
    {"busy: cudaEvent create/record/sync/destroy", c_event, 1},
    {"busy: cudaMemsetAsync", c_memset_async, 1},
    {"busy: cudaGraphLaunch", c_graph_first_launch, 1},
};
#define NCALLS ((int)(sizeof calls / sizeof calls[0]))

typedef struct shared {
  unsigned *flag;               /* device */
  unsigned long long *out;      /* device [2] */
  volatile unsigned *started;   /* mapped host */
  unsigned long long *started_d;
  cudaStream_t sw, ss;          /* the waiter's kernel, the setter's kernel */
  unsigned long long limit_ns;
  unsigned want;
  int call;
  probe_t *p;
  double x_ms, launch_ms, x_begin;
  volatile int x_entered;
} shared_t;

static void wait_started(shared_t *s) {
  const double t0 = ms_now();
  while (*s->started != s->want && ms_now() - t0 < 5000) usleep(100);
}

static void *setter_self(void *arg) { /* X, then the setter kernel */
  shared_t *s = (shared_t *)arg;
  wait_started(s);
  usleep(5000);
  const double t0 = ms_now();
  calls[s->call].fn(s->p);
  const double t1 = ms_now();
  set_kernel<<<1, 1, 0, s->ss>>>(s->flag, s->want);
  CK(cudaGetLastError());
  s->x_ms = t1 - t0, s->launch_ms = ms_now() - t1;
  CK(cudaStreamSynchronize(s->ss));
  return NULL;
}

static void *setter_other(void *arg) { /* the setter kernel 20 ms into the waiter thread's X */
  shared_t *s = (shared_t *)arg;
  while (!s->x_entered) usleep(100);
  usleep(20000);
  const double t1 = ms_now();
  set_kernel<<<1, 1, 0, s->ss>>>(s->flag, s->want);
  CK(cudaGetLastError());
  s->launch_ms = ms_now() - t1;
  CK(cudaStreamSynchronize(s->ss));
  return NULL;
}

/* One row: the waiter's kernel, then X in the arrangement's thread. */
static void run_row(shared_t *s, int call, int arrangement) {
  s->call = call, s->p->arrangement = arrangement, s->want++, s->x_entered = 0;
  s->p->flag = s->flag, s->p->want = s->want, s->p->limit_ns = s->limit_ns;
  s->x_ms = s->launch_ms = 0;
  spin_kernel<<<1, 1, 0, s->sw>>>(s->flag, s->want, s->limit_ns, s->out, (volatile unsigned *)s->started_d);
  CK(cudaGetLastError());
  if (calls[call].busy) { /* X's stream waits for the flag too (its started word: a second one) */
    spin_kernel<<<1, 1, 0, s->p->sx>>>(s->flag, s->want, s->limit_ns, s->p->out2,
                                       (volatile unsigned *)(s->started_d + 1));
    CK(cudaGetLastError());
  }
  pthread_t th;
  pthread_create(&th, NULL, arrangement == 0 ? setter_self : setter_other, s);
  if (arrangement == 1) {
    wait_started(s);
    s->x_entered = 1;
    const double t0 = ms_now();
    calls[call].fn(s->p);
    s->x_ms = ms_now() - t0;
  }
  pthread_join(th, NULL);
  unsigned long long out[2];
  CK(cudaMemcpyAsync(out, s->out, sizeof out, cudaMemcpyDeviceToHost, s->sw));
  CK(cudaStreamSynchronize(s->sw));
  CK(cudaStreamSynchronize(s->p->sx));
  for (int i = 0; i < 2; ++i) CK(cudaStreamSynchronize(s->p->sy[i]));
  printf("| %-42s | %-5s | %9.1f | %9.1f | %-3s | %9.1f |\n", calls[call].name, arrangement ? "other" : "self",
         s->x_ms, s->launch_ms, out[0] ? "yes" : "no", out[1] / 1e6);
  fflush(stdout);
}

int main(int argc, char **argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1); /* as a loom world requires */
  const int limit_ms = argc > 1 ? atoi(argv[1]) : 1000;
  const char *only = argc > 2 ? argv[2] : NULL;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    fprintf(stderr, "host_calls_probe: no CUDA device\n");
    return 2;
  }
  CK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  size_t stack = 0;
  CK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  printf("# %s, %d SMs; spin limit %d ms; stack limit %zu B per thread at start\n", prop.name,
         prop.multiProcessorCount, limit_ms, stack);

  shared_t s;
  memset(&s, 0, sizeof s);
  probe_t p;
  memset(&p, 0, sizeof p);
  s.p = &p, s.limit_ns = (unsigned long long)limit_ms * 1000000ull;
  CK(cudaMalloc((void **)&s.flag, 256));
  CK(cudaMemset(s.flag, 0, 256));
  CK(cudaMalloc((void **)&s.out, 256));
  CK(cudaMalloc((void **)&p.out2, 256));
  CK(cudaMalloc((void **)&p.out_y, 256));
  {
    void *h = NULL;
    CK(cudaHostAlloc(&h, 64, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&p.started_y, h, 0));
  }
  for (int i = 0; i < 2; ++i) {
    CK(cudaStreamCreateWithFlags(&p.sy[i], cudaStreamNonBlocking));
    p.pageable_y[i] = malloc(1 << 20);
  }
  CK(cudaHostAlloc((void **)&s.started, 64, cudaHostAllocMapped)); /* [0] the waiter's, [1] the busy stream's */
  *s.started = 0;
  CK(cudaHostGetDevicePointer((void **)&s.started_d, (void *)s.started, 0));
  CK(cudaStreamCreateWithFlags(&s.sw, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s.ss, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&p.sx, cudaStreamNonBlocking));
  CK(cudaMalloc(&p.dev, 1 << 20)); /* also A and B of the cuBLASLt rows (256 x 256 bf16: 128 KB) */
  CK(cudaMalloc(&p.lt_work, 1 << 22));
  LT(cublasLtCreate(&p.lt));
  CK(cudaMalloc((void **)&p.fout, 1 << 20));
  CK(cudaMallocHost(&p.pinned, 1 << 20));
  p.pageable = malloc(1 << 20), p.reg = malloc(4u << 20);
  memset(p.pageable, 1, 1 << 20), memset(p.reg, 1, 4u << 20);
  /* every kernel but the local-memory ones launched once before the rows */
  spin_kernel<<<1, 1, 0, s.sw>>>(s.flag, 0, 0, s.out, (volatile unsigned *)s.started_d);
  set_kernel<<<1, 1, 0, s.ss>>>(s.flag, 0);
  coop_kernel<<<1, 32, 0, s.ss>>>(p.fout);
  CK(cudaDeviceSynchronize());

  printf("| call X | made by | X ms | setter launch ms | waiter saw flag | waiter waited ms |\n");
  printf("|---|---|---|---|---|---|\n");
  for (int arrangement = 0; arrangement < 2; ++arrangement)
    for (int c = 0; c < NCALLS; ++c) {
      if (calls[c].busy && arrangement == 0) continue; /* X would wait for its own setter by construction */
      if (only && !strstr(calls[c].name, only)) continue;
      /* a fresh graph before each of these two: its first launch, its upload */
      if (calls[c].fn == c_graph_first_launch || calls[c].fn == c_graph_upload) {
        if (strstr(calls[c].name, "copy node")) c_capture_instantiate_copy(&p);
        else c_capture_instantiate(&p);
        CK(cudaStreamSynchronize(p.sx));
      }
      run_row(&s, c, arrangement);
    }
  CK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  printf("# stack limit %zu B per thread at the end\n", stack);
  return 0;
}
