/*
 * optim_kernels.cu - the kernels of the distributed optimizers (protocol in
 * optim.h, who updates what in optim_schedule.h):
 *
 *   loom__optim_adam_kernel<PT, GT>   the whole Adam step (RS-Opt-AG and
 *                                    AR-Opt chunks alike): ready handshake,
 *                                    per chunk: sum over ranks, update,
 *                                    stores into every rank's parameters;
 *                                    the done handshake in the last block
 *   loom__optim_lamb1_kernel<PT, GT>  LAMB (1): sums, moments, the chunk's
 *                                    partial norms
 *   loom__optim_lamb_norms_kernel     LAMB (2): per-tensor norms from every
 *                                    rank's partials, in global order
 *   loom__optim_lamb2_kernel<PT>      LAMB (3): trust ratio, update, stores,
 *                                    done handshake
 * PT, GT: the parameter and gradient dtypes (loom_dtype_t), compile-time.
 * Chunks of 16-byte-aligned tensors move vectors of 8 elements a thread, 4
 * where parameters and gradients are fp32 (loom__optim_vw: one 16-byte load
 * a lane, so a warp's load is 512 contiguous bytes; 8 fp32 would split each
 * lane's 32 bytes over two half-used warp loads, which cost 2x on the peer's
 * NVLink loads: docs/perf/optim.md); a chunk ends with up to N - 1 single
 * elements; other tensors go element by element. All arithmetic is fp32. Any architecture >= sm_80.
 *
 * The sum over ranks is one small device function,
 * loom__optim_sum_ranksv / loom__optim_sum_ranks1: "this slice of the
 * gradient summed over the ranks in rank order in fp32", so that it can be
 * replaced by the collectives' shared building block.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "core/error.h"
#include "core/signal.cuh"
#include "core/vec8.cuh"
#include "ops/optim/optim.h"

/* ---- vectors ---------------------------------------------------------------- */

/* N elements a thread takes at once from 16-byte-aligned chunks: 8 (16 bytes
 * of a 16-bit type, 32 of fp32) or, where parameters and gradients are both
 * fp32, LOOM_OPTIM_VEC_FP32 (optim.h). */
template <int PT, int GT>
struct loom__optim_vw {
  enum { n = PT == LOOM_FP32 && GT == LOOM_FP32 ? LOOM_OPTIM_VEC_FP32 : 8 };
};

/* The fp32 state (moments, master weights): N elements at p. */
template <int N>
static __device__ __forceinline__ void loom__optim_ldf(const float *p, float *v) {
#pragma unroll
  for (int q = 0; q < N; q += 4) {
    const float4 a = *(const float4 *)(p + q);
    v[q] = a.x, v[q + 1] = a.y, v[q + 2] = a.z, v[q + 3] = a.w;
  }
}

template <int N>
static __device__ __forceinline__ void loom__optim_stf(float *p, const float *v) {
#pragma unroll
  for (int q = 0; q < N; q += 4) *(float4 *)(p + q) = make_float4(v[q], v[q + 1], v[q + 2], v[q + 3]);
}

/* ---- the reduction over ranks (the piece the collectives will replace) -- */

/* v[i] = sum over p = 0 .. nsrc-1, in rank order, of src[p][e + i], in fp32,
 * i < N (src[p]: rank p's gradient as this rank addresses it). */
template <int GT, int N>
static __device__ __forceinline__ void loom__optim_sum_ranksv(char *const *src, int nsrc, int64_t e, float *v) {
  loom__loadv<GT, N>(src[0], e, v);
#pragma unroll 4
  for (int p = 1; p < nsrc; ++p) {
    float x[N];
    loom__loadv<GT, N>(src[p], e, x);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += x[i];
  }
}

template <int GT>
static __device__ __forceinline__ float loom__optim_sum_ranks1(char *const *src, int nsrc, int64_t e) {
  float v = loom__load1<GT>(src[0], e);
#pragma unroll 4
  for (int p = 1; p < nsrc; ++p) v += loom__load1<GT>(src[p], e);
  return v;
}

/* ---- per-call scalars ---------------------------------------------------- */

typedef struct loom_optim_hyper {
  float lr, inv;          /* inv: 1 / (grad_div * grad_scale) */
  float bc1, bc2, step_size, bc2_sqrt;
  int32_t step;           /* this call's step number (steps taken + 1) */
  int skip;               /* found_inf: change nothing */
} loom_optim_hyper_t;

/* Thread 0 reads the device scalars; the block waits at a barrier after it. */
static __device__ void loom__optim_hyper_make(const loom_optim_kargs_t &k, loom_optim_hyper_t *h) {
  const int32_t s = *(const volatile int32_t *)k.step + 1;
  const float lr = k.lr_ptr ? *k.lr_ptr : k.lr;
  const double scale = k.grad_scale ? (double)*k.grad_scale : 1.0;
  const double bc1 = k.bias_correction ? 1.0 - pow((double)k.beta1, (double)s) : 1.0;
  const double bc2 = k.bias_correction ? 1.0 - pow((double)k.beta2, (double)s) : 1.0;
  h->lr = lr;
  h->inv = (float)(1.0 / ((double)k.grad_div * scale));
  h->bc1 = (float)bc1;
  h->bc2 = (float)bc2;
  h->step_size = (float)((double)lr / bc1);
  h->bc2_sqrt = (float)sqrt(bc2);
  h->step = s;
  h->skip = k.found_inf != NULL && *k.found_inf != 0.0f;
}

/* ---- handshakes ------------------------------------------------------------ */

/* Block 0 tells every rank that this rank's step has started; every block
 * waits until every rank's has. 0: a wait expired (the block must return).
 * Ends with a barrier of the block either way. */
static __device__ int loom__optim_begin(const loom_optim_kargs_t &k, uint32_t e) {
  if (!k.handshake) return __syncthreads_and(1);
  const loom_dev_comm_t &dc = k.dc;
  if (blockIdx.x == 0)
    for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
      loom__signal_store_release(loom_signal_addr(&dc, p, k.ready_off, (uint32_t)dc.rank), e);
  int ok = 1;
  for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
    ok &= loom__signal_wait(&dc, (const uint32_t *)(dc.ws + k.ready_off) + p, e, p, (uint32_t)p, LOOM_SITE_OPTIM_READY);
  return __syncthreads_and(ok);
}

/* 1 in every thread of the last block of the grid to get here (counter
 * count_off[which], reset by that block). Blocks' stores before it are
 * visible system-wide first. */
static __device__ int loom__optim_last_block(const loom_optim_kargs_t &k, int which) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    uint32_t *count = (uint32_t *)(k.dc.ws + k.count_off) + which;
    last = loom__last_arrival(count, gridDim.x); /* what the other blocks stored: before this block's signals */
  }
  __syncthreads();
  return last;
}

/* A block that met a non-finite gradient element (bad != 0) says so to
 * every rank: nonfinite[rank] = e in each rank's workspace, before the
 * step's next handshake (the last block's fence orders it first). Local
 * plans (no handshake) set the caller's flag directly. */
static __device__ void loom__optim_nonfinite_publish(const loom_optim_kargs_t &k, uint32_t e, int bad) {
  if (!__syncthreads_or(bad) || !k.nonfinite) return;
  if (!k.handshake) {
    if (threadIdx.x == 0) atomicExch(k.nonfinite, 1);
    return;
  }
  for (int p = (int)threadIdx.x; p < k.dc.size; p += (int)blockDim.x)
    loom__signal_store_release(loom_signal_addr(&k.dc, p, k.nonfinite_off, (uint32_t)k.dc.rank), e);
}

/* After every rank's done of step e (last block): any rank's nonfinite[p]
 * == e sets the caller's flag, so it means the same on every rank. */
static __device__ void loom__optim_nonfinite_gather(const loom_optim_kargs_t &k, uint32_t e) {
  if (!k.handshake || !k.nonfinite) return;
  int any = 0;
  for (int p = (int)threadIdx.x; p < k.dc.size; p += (int)blockDim.x)
    any |= loom__signal_load_acquire((const uint32_t *)(k.dc.ws + k.nonfinite_off) + p) == e;
  if (__syncthreads_or(any) && threadIdx.x == 0) atomicExch(k.nonfinite, 1);
}

/* The end of a step, in the last block: done[rank] = e into every rank,
 * wait for every rank's, then the step counter (unless skipped) and the
 * epoch. */
static __device__ void loom__optim_end(const loom_optim_kargs_t &k, uint32_t e, const loom_optim_hyper_t &h) {
  if (!loom__optim_last_block(k, 0)) return;
  const loom_dev_comm_t &dc = k.dc;
  int ok = 1;
  if (k.handshake) {
    for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
      loom__signal_store_release(loom_signal_addr(&dc, p, k.done_off, (uint32_t)dc.rank), e);
    for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
      ok &= loom__signal_wait(&dc, (const uint32_t *)(dc.ws + k.done_off) + p, e, p, (uint32_t)(dc.size + p),
                             LOOM_SITE_OPTIM_DONE);
    ok = __syncthreads_and(ok);
  }
  if (ok) loom__optim_nonfinite_gather(k, e);
  if (threadIdx.x == 0 && ok) {
    if (!h.skip) *(volatile int32_t *)k.step = h.step;
    __threadfence();
    loom_dev_epoch_t *ep = (loom_dev_epoch_t *)(dc.ws + k.epoch_off);
    *(volatile uint32_t *)&ep->epoch = e;
  }
}

/* The chunk's pointer tables into shared memory: src[nsrc] (every rank's
 * gradient) and dst[npush] (every rank's parameter). */
static __device__ __forceinline__ void loom__optim_chunk_ptrs(const loom_optim_kargs_t &k, int32_t t, char **sh) {
  __syncthreads(); /* the previous chunk is done with them */
  for (int i = (int)threadIdx.x; i < k.nsrc + k.npush; i += (int)blockDim.x)
    sh[i] = i < k.nsrc ? k.grad_ptrs[(size_t)t * k.nsrc + i] : k.param_ptrs[(size_t)t * k.npush + (i - k.nsrc)];
  __syncthreads();
}

/* Stores the new parameters of one vector / element into every rank's copy
 * (RS chunk) or this rank's (AR chunk). */
template <int PT, int N>
static __device__ __forceinline__ void loom__optim_putv(char *const *dst, int npush, int self, int push, int64_t e,
                                                       const float *p) {
  if (!push) {
    loom__storev<PT, N>(dst[self], e, p);
    return;
  }
  for (int d = 0; d < npush; ++d) loom__storev<PT, N>(dst[d], e, p);
}

template <int PT>
static __device__ __forceinline__ void loom__optim_put1(char *const *dst, int npush, int self, int push, int64_t e,
                                                       float p) {
  if (!push) {
    loom__store1<PT>(dst[self], e, p);
    return;
  }
  for (int d = 0; d < npush; ++d) loom__store1<PT>(dst[d], e, p);
}

/* ---- Adam ------------------------------------------------------------------- */

/* The scaled gradients of elements e .. e + N - 1: summed over the sources,
 * times h.inv. Returns 1 where one is not finite. */
template <int GT, int N>
static __device__ __forceinline__ int loom__optim_gradv(const loom_optim_kargs_t &k, const loom_optim_hyper_t &h,
                                                       char *const *src, int64_t e, float *g) {
  loom__optim_sum_ranksv<GT, N>(src, k.nsrc, e, g);
  int bad = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    g[j] *= h.inv;
    bad |= !isfinite(g[j]);
  }
  return bad;
}

/* The state of the chunk's i-th vector (elements e .. e + N - 1): the
 * parameters (the fp32 master copy ms where there is one, else the PT
 * parameters own) and the moments. Callers load it before the gradients
 * (loom__optim_gradv): the gradients' finiteness check depends on their
 * remote loads, and loads written after it wait for them (measured: +8% at
 * 2^24 fp32 elements, RS-Opt-AG, W = 2). */
template <int PT, int N>
static __device__ __forceinline__ void loom__optim_statev(const float *ms, const char *own, const float *m,
                                                         const float *v, int i, int64_t e, float *p, float *mm,
                                                         float *vv) {
  if (ms) loom__optim_ldf<N>(ms + i * N, p);
  else loom__loadv<PT, N>(own, e, p);
  loom__optim_ldf<N>(m + i * N, mm);
  loom__optim_ldf<N>(v + i * N, vv);
}

/* One element (PyTorch's fused AdamW / Adam math, fp32). */
static __device__ __forceinline__ void loom__optim_adam1(const loom_optim_kargs_t &k, const loom_optim_hyper_t &h,
                                                        float wd, float g, float &p, float &m, float &v) {
  if (wd != 0.0f) {
    if (k.decoupled) p -= h.lr * wd * p;
    else g += wd * p;
  }
  m = k.beta1 * m + (1.0f - k.beta1) * g;
  v = k.beta2 * v + (1.0f - k.beta2) * g * g;
  const float denom = sqrtf(v) / h.bc2_sqrt + k.eps;
  p -= h.step_size * m / denom;
}

/* One chunk's update; returns 1 where a gradient was not finite (a local
 * flag, not a store through a pointer: a store the compiler cannot prove
 * apart from the moments would hold their loads behind the gradients'). */
template <int PT, int GT>
static __device__ int loom__optim_adam_chunk(const loom_optim_kargs_t &k, const loom_optim_hyper_t &h,
                                            const loom_optim_chunk_t &c, char *const *src, char *const *dst) {
  int bad = 0;
  const float wd = k.tensors[c.tensor].weight_decay;
  const int push = (c.flags & LOOM_OPTIM_CHUNK_PUSH) != 0;
  float *m = k.m + c.state, *v = k.v + c.state, *ms = k.master ? k.master + c.state : (float *)0;
  const char *own = dst[k.self];
  constexpr int N = loom__optim_vw<PT, GT>::n;
  const int nvec = (c.flags & LOOM_OPTIM_CHUNK_VEC) ? c.len / N : 0;
  for (int i = (int)threadIdx.x; i < nvec; i += (int)blockDim.x) {
    const int64_t e = c.offset + (int64_t)i * N;
    float g[N], p[N], mm[N], vv[N];
    loom__optim_statev<PT, N>(ms, own, m, v, i, e, p, mm, vv);
    bad |= loom__optim_gradv<GT, N>(k, h, src, e, g);
#pragma unroll
    for (int j = 0; j < N; ++j) loom__optim_adam1(k, h, wd, g[j], p[j], mm[j], vv[j]);
    loom__optim_stf<N>(m + i * N, mm);
    loom__optim_stf<N>(v + i * N, vv);
    if (ms) loom__optim_stf<N>(ms + i * N, p);
    loom__optim_putv<PT, N>(dst, k.npush, k.self, push, e, p);
  }
  for (int i = nvec * N + (int)threadIdx.x; i < c.len; i += (int)blockDim.x) {
    const int64_t e = c.offset + i;
    float g = loom__optim_sum_ranks1<GT>(src, k.nsrc, e) * h.inv;
    bad |= !isfinite(g);
    float p = ms ? ms[i] : loom__load1<PT>(own, e), mm = m[i], vv = v[i];
    loom__optim_adam1(k, h, wd, g, p, mm, vv);
    m[i] = mm, v[i] = vv;
    if (ms) ms[i] = p;
    loom__optim_put1<PT>(dst, k.npush, k.self, push, e, p);
  }
  return bad;
}

template <int PT, int GT>
__global__ void __launch_bounds__(LOOM_OPTIM_THREADS, LOOM_OPTIM_BLOCKS_PER_SM) loom__optim_adam_kernel(const __grid_constant__ loom_optim_kargs_t k) {
  extern __shared__ char *loom_optim_sh[];
  __shared__ loom_optim_hyper_t h;
  const uint32_t e = loom__epoch_begin((const loom_dev_epoch_t *)(k.dc.ws + k.epoch_off));
  if (threadIdx.x == 0) loom__optim_hyper_make(k, &h);
  if (!loom__optim_begin(k, e)) return; /* (its barrier publishes h) */
  int bad = 0;
  for (int64_t q = blockIdx.x; q < k.nchunks; q += gridDim.x) {
    const loom_optim_chunk_t c = k.chunks[q];
    loom__optim_chunk_ptrs(k, c.tensor, loom_optim_sh);
    if (!h.skip) bad |= loom__optim_adam_chunk<PT, GT>(k, h, c, loom_optim_sh, loom_optim_sh + k.nsrc);
  }
  loom__optim_nonfinite_publish(k, e, bad);
  loom__optim_end(k, e, h);
}

/* ---- LAMB ------------------------------------------------------------------- */

/* u of one element from the updated moments (apex FusedLAMB stage 1). */
static __device__ __forceinline__ float loom__optim_lamb_u(const loom_optim_kargs_t &k, const loom_optim_hyper_t &h,
                                                          float wd, float p, float m, float v) {
  float u = (m / h.bc1) / (sqrtf(v / h.bc2) + k.eps);
  if (k.decoupled) u += wd * p;
  return u;
}

static __device__ __forceinline__ void loom__optim_lamb_moments(const loom_optim_kargs_t &k, float wd, float g, float p,
                                                               float &m, float &v) {
  if (!k.decoupled) g += wd * p;
  m = k.beta1 * m + (1.0f - k.beta1) * g;
  v = k.beta2 * v + (1.0f - k.beta2) * g * g;
}

/* Sum of x over the block, in a fixed order (the same bits every run);
 * every thread gets it. */
static __device__ float loom__optim_block_sum(float x) {
  __shared__ float part[LOOM_OPTIM_THREADS / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  __syncthreads(); /* a previous call's readers are done */
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = x;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < (int)(blockDim.x / 32); ++w) s += part[w];
  return s;
}

template <int PT, int GT>
__global__ void __launch_bounds__(LOOM_OPTIM_THREADS, LOOM_OPTIM_BLOCKS_PER_SM) loom__optim_lamb1_kernel(const __grid_constant__ loom_optim_kargs_t k) {
  extern __shared__ char *loom_optim_sh[];
  __shared__ loom_optim_hyper_t h;
  const uint32_t e = loom__epoch_begin((const loom_dev_epoch_t *)(k.dc.ws + k.epoch_off));
  if (threadIdx.x == 0) loom__optim_hyper_make(k, &h);
  if (!loom__optim_begin(k, e)) return;
  int bad = 0;
  float2 *partial = (float2 *)(k.dc.ws + k.partial_off);
  for (int64_t q = blockIdx.x; q < k.nchunks; q += gridDim.x) {
    const loom_optim_chunk_t c = k.chunks[q];
    loom__optim_chunk_ptrs(k, c.tensor, loom_optim_sh);
    if (h.skip) continue;
    char *const *src = loom_optim_sh;
    const char *own = loom_optim_sh[k.nsrc + k.self];
    const float wd = k.tensors[c.tensor].weight_decay;
    float *m = k.m + c.state, *v = k.v + c.state, *ms = k.master ? k.master + c.state : (float *)0;
    float w2 = 0.0f, u2 = 0.0f;
    constexpr int N = loom__optim_vw<PT, GT>::n;
    const int nvec = (c.flags & LOOM_OPTIM_CHUNK_VEC) ? c.len / N : 0;
    for (int i = (int)threadIdx.x; i < nvec; i += (int)blockDim.x) {
      const int64_t el = c.offset + (int64_t)i * N;
      float g[N], p[N], mm[N], vv[N];
      loom__optim_statev<PT, N>(ms, own, m, v, i, el, p, mm, vv);
      bad |= loom__optim_gradv<GT, N>(k, h, src, el, g);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        loom__optim_lamb_moments(k, wd, g[j], p[j], mm[j], vv[j]);
        const float u = loom__optim_lamb_u(k, h, wd, p[j], mm[j], vv[j]);
        w2 += p[j] * p[j];
        u2 += u * u;
      }
      loom__optim_stf<N>(m + i * N, mm);
      loom__optim_stf<N>(v + i * N, vv);
    }
    for (int i = nvec * N + (int)threadIdx.x; i < c.len; i += (int)blockDim.x) {
      const int64_t el = c.offset + i;
      const float g = loom__optim_sum_ranks1<GT>(src, k.nsrc, el) * h.inv;
      bad |= !isfinite(g);
      const float p = ms ? ms[i] : loom__load1<PT>(own, el);
      float mm = m[i], vv = v[i];
      loom__optim_lamb_moments(k, wd, g, p, mm, vv);
      const float u = loom__optim_lamb_u(k, h, wd, p, mm, vv);
      w2 += p * p;
      u2 += u * u;
      m[i] = mm, v[i] = vv;
    }
    w2 = loom__optim_block_sum(w2);
    u2 = loom__optim_block_sum(u2);
    if (threadIdx.x == 0) partial[c.global] = make_float2(w2, u2);
  }
  loom__optim_nonfinite_publish(k, e, bad);
  /* the last block tells every rank that this rank's partials are complete */
  if (loom__optim_last_block(k, 1) && k.handshake)
    for (int p = (int)threadIdx.x; p < k.dc.size; p += (int)blockDim.x)
      loom__signal_store_release(loom_signal_addr(&k.dc, p, k.phase_off, (uint32_t)k.dc.rank), e);
}

__global__ void __launch_bounds__(LOOM_OPTIM_THREADS) loom__optim_lamb_norms_kernel(const __grid_constant__ loom_optim_kargs_t k) {
  const loom_dev_comm_t &dc = k.dc;
  const uint32_t e = loom__epoch_begin((const loom_dev_epoch_t *)(dc.ws + k.epoch_off));
  if (k.handshake) {
    int ok = 1;
    for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
      ok &= loom__signal_wait(&dc, (const uint32_t *)(dc.ws + k.phase_off) + p, e, p, (uint32_t)(2 * dc.size + p),
                             LOOM_SITE_OPTIM_PHASE);
    if (!__syncthreads_and(ok)) return;
  }
  for (int t = blockIdx.x; t < k.num_tensors; t += gridDim.x) {
    const loom_optim_tensor_dev_t td = k.tensors[t];
    float w2 = 0.0f, u2 = 0.0f;
    for (int i = (int)threadIdx.x; i < td.global_count; i += (int)blockDim.x) {
      const int32_t g = td.global_first + i, owner = k.gowner[g];
      const char *base = owner < 0 || !k.handshake ? dc.ws : dc.peer_ws[owner];
      const float2 x = __ldcg((const float2 *)(base + k.partial_off) + g);
      w2 += x.x;
      u2 += x.y;
    }
    w2 = loom__optim_block_sum(w2);
    u2 = loom__optim_block_sum(u2);
    if (threadIdx.x == 0) {
      k.norms[2 * t] = sqrtf(w2);
      k.norms[2 * t + 1] = sqrtf(u2);
    }
  }
}

template <int PT>
__global__ void __launch_bounds__(LOOM_OPTIM_THREADS, LOOM_OPTIM_BLOCKS_PER_SM) loom__optim_lamb2_kernel(const __grid_constant__ loom_optim_kargs_t k) {
  extern __shared__ char *loom_optim_sh[];
  __shared__ loom_optim_hyper_t h;
  const uint32_t e = loom__epoch_begin((const loom_dev_epoch_t *)(k.dc.ws + k.epoch_off));
  if (threadIdx.x == 0) {
    loom__optim_hyper_make(k, &h);
    /* a wait of (1) or (2) expired: the norms are not there, update nothing */
    if (*(volatile uint32_t *)k.dc.abort_flag) h.skip = 1;
  }
  __syncthreads();
  for (int64_t q = blockIdx.x; q < k.nchunks; q += gridDim.x) {
    const loom_optim_chunk_t c = k.chunks[q];
    loom__optim_chunk_ptrs(k, c.tensor, loom_optim_sh);
    if (h.skip) continue;
    char *const *dst = loom_optim_sh + k.nsrc;
    const char *own = dst[k.self];
    const int push = (c.flags & LOOM_OPTIM_CHUNK_PUSH) != 0;
    const float wd = k.tensors[c.tensor].weight_decay;
    const float pn = k.norms[2 * c.tensor], un = k.norms[2 * c.tensor + 1];
    const float ratio = (k.use_nvlamb || wd != 0.0f) && pn != 0.0f && un != 0.0f ? h.lr * (pn / un) : h.lr;
    const float *m = k.m + c.state, *v = k.v + c.state;
    float *ms = k.master ? k.master + c.state : (float *)0;
    constexpr int N = loom__optim_vw<PT, PT>::n;
    const int nvec = (c.flags & LOOM_OPTIM_CHUNK_VEC) ? c.len / N : 0;
    for (int i = (int)threadIdx.x; i < nvec; i += (int)blockDim.x) {
      const int64_t el = c.offset + (int64_t)i * N;
      float p[N], mm[N], vv[N];
      loom__optim_statev<PT, N>(ms, own, m, v, i, el, p, mm, vv);
#pragma unroll
      for (int j = 0; j < N; ++j) p[j] -= ratio * loom__optim_lamb_u(k, h, wd, p[j], mm[j], vv[j]);
      if (ms) loom__optim_stf<N>(ms + i * N, p);
      loom__optim_putv<PT, N>(dst, k.npush, k.self, push, el, p);
    }
    for (int i = nvec * N + (int)threadIdx.x; i < c.len; i += (int)blockDim.x) {
      const int64_t el = c.offset + i;
      float p = ms ? ms[i] : loom__load1<PT>(own, el);
      p -= ratio * loom__optim_lamb_u(k, h, wd, p, m[i], v[i]);
      if (ms) ms[i] = p;
      loom__optim_put1<PT>(dst, k.npush, k.self, push, el, p);
    }
  }
  loom__optim_end(k, e, h);
}

/* ---- launchers ---------------------------------------------------------------- */

#define LOOM_OPTIM_DISPATCH(KERNEL, PT, GT, ...)                                              \
  do {                                                                                        \
    if (PT == LOOM_FP32 && GT == LOOM_FP32) KERNEL<LOOM_FP32, LOOM_FP32><<<__VA_ARGS__>>>(*k); \
    else if (PT == LOOM_FP32 && GT == LOOM_BF16) KERNEL<LOOM_FP32, LOOM_BF16><<<__VA_ARGS__>>>(*k); \
    else if (PT == LOOM_FP32 && GT == LOOM_FP16) KERNEL<LOOM_FP32, LOOM_FP16><<<__VA_ARGS__>>>(*k); \
    else if (PT == LOOM_BF16 && GT == LOOM_FP32) KERNEL<LOOM_BF16, LOOM_FP32><<<__VA_ARGS__>>>(*k); \
    else if (PT == LOOM_BF16 && GT == LOOM_BF16) KERNEL<LOOM_BF16, LOOM_BF16><<<__VA_ARGS__>>>(*k); \
    else if (PT == LOOM_BF16 && GT == LOOM_FP16) KERNEL<LOOM_BF16, LOOM_FP16><<<__VA_ARGS__>>>(*k); \
    else if (PT == LOOM_FP16 && GT == LOOM_FP32) KERNEL<LOOM_FP16, LOOM_FP32><<<__VA_ARGS__>>>(*k); \
    else if (PT == LOOM_FP16 && GT == LOOM_BF16) KERNEL<LOOM_FP16, LOOM_BF16><<<__VA_ARGS__>>>(*k); \
    else KERNEL<LOOM_FP16, LOOM_FP16><<<__VA_ARGS__>>>(*k);                                   \
  } while (0)

static size_t loom__optim_smem(const loom_optim_kargs_t *k) { return (size_t)(k->nsrc + k->npush) * sizeof(char *); }

extern "C" loom_result_t loom__optim_adam_launch(const loom_optim_kargs_t *k, int grid, cudaStream_t stream) {
  LOOM_OPTIM_DISPATCH(loom__optim_adam_kernel, k->ptype, k->gtype, grid, LOOM_OPTIM_THREADS, loom__optim_smem(k), stream);
  LOOM_CUDA_LAUNCHED("loom__optim_adam_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__optim_lamb_launch(const loom_optim_kargs_t *k, int grid, cudaStream_t stream) {
  LOOM_OPTIM_DISPATCH(loom__optim_lamb1_kernel, k->ptype, k->gtype, grid, LOOM_OPTIM_THREADS, loom__optim_smem(k), stream);
  LOOM_CUDA_LAUNCHED("loom__optim_lamb1_kernel");
  /* its blocks wait for the peers' partials: no more of them than the
   * update's grid, which the comm's SMs bound (all resident at once) */
  int tgrid = k->num_tensors < 1024 ? k->num_tensors : 1024;
  if (tgrid > grid) tgrid = grid;
  loom__optim_lamb_norms_kernel<<<tgrid, LOOM_OPTIM_THREADS, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__optim_lamb_norms_kernel");
  const size_t sm = loom__optim_smem(k);
  if (k->ptype == LOOM_FP32) loom__optim_lamb2_kernel<LOOM_FP32><<<grid, LOOM_OPTIM_THREADS, sm, stream>>>(*k);
  else if (k->ptype == LOOM_BF16) loom__optim_lamb2_kernel<LOOM_BF16><<<grid, LOOM_OPTIM_THREADS, sm, stream>>>(*k);
  else loom__optim_lamb2_kernel<LOOM_FP16><<<grid, LOOM_OPTIM_THREADS, sm, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__optim_lamb2_kernel");
  return LOOM_SUCCESS;
}

template <int PT>
__global__ void loom__optim_load_master_kernel(float *master, const char *param, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    master[i] = loom__load1<PT>(param, i);
}

extern "C" loom_result_t loom__optim_load_master(float *master, const void *param, int64_t n, int pt,
                                                 cudaStream_t stream) {
  if (n <= 0) return LOOM_SUCCESS;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  if (pt == LOOM_BF16) loom__optim_load_master_kernel<LOOM_BF16><<<(unsigned)blocks, 256, 0, stream>>>(master, (const char *)param, n);
  else if (pt == LOOM_FP16) loom__optim_load_master_kernel<LOOM_FP16><<<(unsigned)blocks, 256, 0, stream>>>(master, (const char *)param, n);
  else loom__optim_load_master_kernel<LOOM_FP32><<<(unsigned)blocks, 256, 0, stream>>>(master, (const char *)param, n);
  LOOM_CUDA_LAUNCHED("loom__optim_load_master_kernel");
  return LOOM_SUCCESS;
}

__global__ void loom__optim_write_step_kernel(int32_t *step, int32_t value) { *step = value; }

extern "C" loom_result_t loom__optim_write_step(int32_t *step, int32_t value, cudaStream_t stream) {
  loom__optim_write_step_kernel<<<1, 1, 0, stream>>>(step, value);
  LOOM_CUDA_LAUNCHED("loom__optim_write_step_kernel");
  return LOOM_SUCCESS;
}

#define LOOM_OPTIM_FNS(KERNEL)                                                                                   \
  (const void *)KERNEL<LOOM_FP32, LOOM_FP32>, (const void *)KERNEL<LOOM_FP32, LOOM_BF16>,                        \
      (const void *)KERNEL<LOOM_FP32, LOOM_FP16>, (const void *)KERNEL<LOOM_BF16, LOOM_FP32>,                    \
      (const void *)KERNEL<LOOM_BF16, LOOM_BF16>, (const void *)KERNEL<LOOM_BF16, LOOM_FP16>,                    \
      (const void *)KERNEL<LOOM_FP16, LOOM_FP32>, (const void *)KERNEL<LOOM_FP16, LOOM_BF16>,                    \
      (const void *)KERNEL<LOOM_FP16, LOOM_FP16>

extern "C" loom_result_t loom__optim_preload_kernels(void) {
  const void *fns[] = {LOOM_OPTIM_FNS(loom__optim_adam_kernel),
                       LOOM_OPTIM_FNS(loom__optim_lamb1_kernel),
                       (const void *)loom__optim_lamb_norms_kernel,
                       (const void *)loom__optim_lamb2_kernel<LOOM_FP32>,
                       (const void *)loom__optim_lamb2_kernel<LOOM_BF16>,
                       (const void *)loom__optim_lamb2_kernel<LOOM_FP16>,
                       (const void *)loom__optim_write_step_kernel};
  for (size_t i = 0; i < sizeof fns / sizeof *fns; ++i) {
    cudaFuncAttributes fa;
    LOOM_CUDA(cudaFuncGetAttributes(&fa, fns[i]));
  }
  return LOOM_SUCCESS;
}
