/*
 * gemm_small_m.cu - loom's GEMM for decode batches: C [m, n] = A [m, k] x B
 * (+ bias [n]) for m <= 64, where the time is the weight B streaming from
 * memory (k n 2 bytes) and the FLOPs are nearly free.
 *
 * Every SM streams its share of the whole weight, whatever n is: the weight
 * is cut into units of (n-tile, k range) (small_m_layout.h), one block of
 * 256 threads per unit, two or more blocks per SM, as many units as it
 * takes to fill the SMs several times over (split-K where the n-tiles alone
 * are too few). A warp loads its chunks of 32 k with 16-byte loads that
 * bypass L1 (ld.global.nc.L1::no_allocate), 4 per chunk, in bursts of 2
 * chunks, the next burst's loads issued before the math of this one
 * (double-buffered registers: 4 KiB per warp, 64 KiB per SM always on
 * their way; small_m_layout.h says which other ways were measured); the
 * activations (m x k, small, read by every n-tile) come through L1. The math is mma.sync m16n8k16 with fp32 accumulators:
 * A as the mma's A operand (rows padded to 16, zero-filled), B as its B
 * operand, the physical k of a logical k permuted so that each thread's
 * operands are 16-byte loads (small_m_layout.h); B [k, n] goes through one
 * movmatrix transpose per register. The tensor cores have ~30x the needed
 * rate at m = 16, so nothing but the loads matters.
 *
 * Reduction, deterministic: a block's wk warps (which split the unit's
 * chunks) leave their fp32 tiles in shared memory and the block sums them in
 * warp order. One split per n-tile: that block adds the bias, rounds to
 * c_type and stores C (16-byte stores). Several: each unit stores its m x bn
 * fp32 partial to its slot in the workspace (the stream-K scratch of the
 * stream, gemm.c), fences, and takes its n-tile's ticket (atom.acq_rel.gpu);
 * the last one sums the n-tile's slots in split order (its own read back
 * too), resets the ticket to 0 for the next launch and stores. No block
 * waits on another. Inside a graph capture without scratch the launcher
 * runs one split.
 *
 * Portable: mma.sync, movmatrix and ld.global.nc run on every GPU >= 8.0, so
 * this kernel serves the sm90 and the sm80 path alike (compiled into the
 * sm_90a SASS and the compute_80 PTX of the default build).
 *
 * Templates: MT tiles of 16 rows (1: m <= 16, 2: m <= 32, 4: m <= 64),
 * TB the B layout (0 [n, k], 1 [k, n]), TYPE bf16 or fp16, PIPE how the
 * weight is loaded (small_m_layout.h). Resources (-Xptxas -v): PIPE_REGS2
 * 120-124 / 128 / 216-220 registers at MT 1 / 2 / 4 (8-28 bytes of spill
 * stores at MT 2, where loom_gemm takes the decode tiles instead), PIPE_REGS
 * 124-128 / 122-126 / 184-192, no local memory.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "gemm/epilogue.cuh"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/small_m_layout.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define LOOM_SMALLM_DEVICE 1
#endif

typedef struct loom_smallm_args {
  const void *a;        /* [m, k] row-major */
  const void *b;        /* [n, k] (TB 0) or [k, n] (TB 1) */
  void *c;              /* [m, n] row-major, c_type */
  const void *bias;     /* [n] of c_type, or NULL */
  int32_t m, n, k;
  int32_t c_type;
  loom_smallm_work_t work;
  float *ws;            /* splits > 1: partial slots [units][m][bn] fp32 */
  uint32_t *tickets;    /* splits > 1: [ntiles], 0 between launches */
} loom_smallm_args_t;

#ifdef LOOM_SMALLM_DEVICE

/* 16 bytes, zero where pred is 0 (outside the matrix). STREAM: the
 * weight, read once, not kept in L1; else the activations, which every
 * n-tile reads again (through L1). */
#define LOOM__LD16(insn, v, p, pred)                                            \
  asm("{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\n"                                 \
      "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"          \
      "@q " insn " {%0, %1, %2, %3}, [%4];\n}\n"                                   \
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                \
      : "l"(p), "r"((int)(pred)))
template <bool STREAM>
static __device__ __forceinline__ uint4 loom_ld16(const void *p, bool pred) {
  uint4 v;
  if (STREAM) LOOM__LD16("ld.global.nc.L1::no_allocate.v4.u32", v, p, pred);
  else LOOM__LD16("ld.global.nc.v4.u32", v, p, pred);
  return v;
}

static __device__ __forceinline__ uint32_t loom__u4(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* Transposes an 8 x 8 matrix of 16-bit elements held one 4-byte pair per
 * lane (lane 4 g + t: row g, columns 2 t, 2 t + 1). */
static __device__ __forceinline__ uint32_t loom__movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

/* d += A (16 x 16) B (16 x 8), fp32 accumulate. */
template <int TYPE>
static __device__ __forceinline__ void loom__mma16816(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                     uint32_t b0, uint32_t b1) {
  if (TYPE == LOOM_BF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Adds 8 bias values (c_type) to v. */
static __device__ __forceinline__ void loom__smallm_bias8(const void *bias, int64_t col, int ct, float *v) {
  if (!bias) return;
  if (ct == LOOM_FP32) {
    const float4 b0 = ((const float4 *)((const float *)bias + col))[0];
    const float4 b1 = ((const float4 *)((const float *)bias + col))[1];
    v[0] += b0.x, v[1] += b0.y, v[2] += b0.z, v[3] += b0.w;
    v[4] += b1.x, v[5] += b1.y, v[6] += b1.z, v[7] += b1.w;
  } else {
    const uint4 raw = *(const uint4 *)((const uint16_t *)bias + col);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = loom__u4(raw, i);
      float lo, hi;
      if (ct == LOOM_BF16) {
        lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
      } else {
        const __half2 h = *(const __half2 *)&w;
        lo = __low2float(h), hi = __high2float(h);
      }
      v[2 * i] += lo, v[2 * i + 1] += hi;
    }
  }
}

/* Where lane (g, t) of the warp whose first column is nb loads group x of
 * chunk c of the weight (16 bytes); *ok = 0 outside the matrix or when the
 * chunk is not live (the pointer is then B itself, never dereferenced). */
template <int TB>
static __device__ __forceinline__ const uint16_t *loom_smallm_b_src(const uint16_t *B, int N, int K, int nb, int g,
                                                                    int t, int c, int x, bool live, bool *ok) {
  const int k0 = c * LOOM_SMALLM_KC;
  if (TB == 0) { /* x: 8-column group; row n = nb + 8 x + g, k = k0 + 8 t .. + 7 */
    const int n = nb + 8 * x + g, kk = k0 + 8 * t;
    *ok = live && n < N && kk < K;
    return B + (*ok ? (int64_t)n * K + kk : 0);
  }
  /* x = 2 s + h: row k0 + kn_row(g, s, h), columns nb + 8 t .. + 7 */
  const int kk = k0 + loom__smallm_kn_row(g, x >> 1, x & 1), n = nb + 8 * t;
  *ok = live && kk < K && n < N;
  return B + (*ok ? (int64_t)kk * N + n : 0);
}

/* acc += the warp's A rows x chunk c of its weight columns (bv: this lane's
 * 4 x 16 bytes of the chunk, as loom_smallm_b_src placed them). */
template <int MT, int TB, int TYPE>
static __device__ __forceinline__ void loom__smallm_chunk_math(float (&acc)[MT][4][4], const uint4 (&bv)[4],
                                                              const uint16_t *A, int M, int K, int c, int g, int t) {
  const int k0 = c * LOOM_SMALLM_KC + 8 * t;
  /* B [k, n]: transposes, so that lane (g, t) holds column g's pairs of
   * physical k (8 t + 4 s + 2 h + {0, 1}); register q of load (s, h)
   * becomes the mma B fragment half h of step s for column group q */
  uint32_t bt[4][4];
  if (TB == 1) {
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int q = 0; q < 4; ++q) bt[x][q] = loom__movmatrix_trans(loom__u4(bv[x], q));
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r0 = 16 * mt + g, r1 = r0 + 8;
    const bool kin = k0 < K;
    const uint4 a0 = loom_ld16<false>(A + (r0 < M && kin ? (int64_t)r0 * K + k0 : 0), r0 < M && kin);
    const uint4 a1 = loom_ld16<false>(A + (r1 < M && kin ? (int64_t)r1 * K + k0 : 0), r1 < M && kin);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const uint32_t fa0 = loom__u4(a0, 2 * s), fa1 = loom__u4(a1, 2 * s);
      const uint32_t fa2 = loom__u4(a0, 2 * s + 1), fa3 = loom__u4(a1, 2 * s + 1);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        if (TB == 0)
          loom__mma16816<TYPE>(acc[mt][x], fa0, fa1, fa2, fa3, loom__u4(bv[x], 2 * s), loom__u4(bv[x], 2 * s + 1));
        else
          loom__mma16816<TYPE>(acc[mt][x], fa0, fa1, fa2, fa3, bt[2 * s][x], bt[2 * s + 1][x]);
      }
    }
  }
}

#endif /* LOOM_SMALLM_DEVICE */

template <int MT, int TB, int TYPE, int PIPE>
__global__ void __launch_bounds__(LOOM_SMALLM_THREADS, MT == 4 ? 1 : 2)
    loom__gemm_small_m_kernel(const __grid_constant__ loom_smallm_args_t args) {
#ifdef LOOM_SMALLM_DEVICE
  constexpr int WN = LOOM_SMALLM_WN, WK = LOOM_SMALLM_WK, BN = LOOM_SMALLM_BN;
  constexpr int ROWS = 16 * MT;
  /* [WK][ROWS][BN] fp32 partials, then the ticket */
  extern __shared__ __align__(16) unsigned char loom_smallm_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int wn = warp % WN, wk = warp / WN;
  const loom_smallm_work_t &w = args.work;
  int32_t ntile, split;
  loom__smallm_unit(&w, blockIdx.x, &ntile, &split);
  int32_t s0, s1, c0, c1;
  loom__smallm_range(0, w.chunks, split, w.splits, &s0, &s1);
  loom__smallm_range(s0, s1, wk, WK, &c0, &c1);
  const int M = args.m, N = args.n, K = args.k;
  const int nb = ntile * BN + wn * 32; /* the warp's first column */
  const uint16_t *A = (const uint16_t *)args.a;
  const uint16_t *B = (const uint16_t *)args.b;

  float acc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][x][i] = 0.f;

  if (PIPE == LOOM_SMALLM_PIPE_REGS2) {
    /* bursts of 2 chunks; the next burst's loads go out before this one's math */
    uint4 cur[2][4], nxt[2][4];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        bool ok;
        const uint16_t *src = loom_smallm_b_src<TB>(B, N, K, nb, g, t, c0 + u, x, c0 + u < c1, &ok);
        cur[u][x] = loom_ld16<true>(src, ok);
      }
    for (int c = c0; c < c1; c += 2) {
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          bool ok;
          const uint16_t *src = loom_smallm_b_src<TB>(B, N, K, nb, g, t, c + 2 + u, x, c + 2 + u < c1, &ok);
          nxt[u][x] = loom_ld16<true>(src, ok);
        }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (c + u >= c1) break; /* warp-uniform */
        loom__smallm_chunk_math<MT, TB, TYPE>(acc, cur[u], A, M, K, c + u, g, t);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int x = 0; x < 4; ++x) cur[u][x] = nxt[u][x];
    }
  } else {
    constexpr int U = LOOM_SMALLM_UNROLL(MT);
    for (int c = c0; c < c1; c += U) {
      /* ---- the weight: U chunks of 4 x 16 bytes per thread, all in flight ---- */
      uint4 bv[U][4];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          bool ok;
          const uint16_t *src = loom_smallm_b_src<TB>(B, N, K, nb, g, t, c + u, x, c + u < c1, &ok);
          bv[u][x] = loom_ld16<true>(src, ok);
        }
      /* ---- the math ---- */
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (c + u >= c1) break; /* warp-uniform */
        loom__smallm_chunk_math<MT, TB, TYPE>(acc, bv[u], A, M, K, c + u, g, t);
      }
    }
  }

  /* ---- the block's partial: the wk warps' tiles summed in warp order ---- */
  float *red = (float *)loom_smallm_smem;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * mt + g + 8 * h;
        const int col = wn * 32 + loom__smallm_col(TB, x, t, 0);
        *(float2 *)&red[((size_t)wk * ROWS + row) * BN + col] = make_float2(acc[mt][x][2 * h], acc[mt][x][2 * h + 1]);
      }
  __syncthreads();
  const int rows = M < ROWS ? M : ROWS;
  constexpr int GROUPS = BN / 8; /* 8-column groups of a row */
  const int64_t unit = blockIdx.x;
  /* each thread owns 8 consecutive columns of some rows: (row, group) = idx */
  float v[8];
  bool last = w.splits == 1;
  if (w.splits > 1) {
    float *slot = args.ws + (size_t)unit * (size_t)M * BN;
    for (int idx = threadIdx.x; idx < rows * GROUPS; idx += LOOM_SMALLM_THREADS) {
      const int row = idx / GROUPS, col = (idx % GROUPS) * 8;
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0.f;
      for (int q = 0; q < WK; ++q)
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] += red[((size_t)q * ROWS + row) * BN + col + i];
      __stcg((float4 *)(slot + (size_t)row * BN + col), make_float4(v[0], v[1], v[2], v[3]));
      __stcg((float4 *)(slot + (size_t)row * BN + col + 4), make_float4(v[4], v[5], v[6], v[7]));
    }
    __threadfence();
    __syncthreads();
    volatile uint32_t *ticket = (volatile uint32_t *)(red + (size_t)WK * ROWS * BN);
    if (threadIdx.x == 0) {
      uint32_t old;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(args.tickets + ntile) : "memory");
      *ticket = old;
    }
    __syncthreads();
    last = *ticket == (uint32_t)(w.splits - 1);
    if (!last) return;
    __threadfence();
  }
  for (int idx = threadIdx.x; idx < rows * GROUPS; idx += LOOM_SMALLM_THREADS) {
    const int row = idx / GROUPS, col = (idx % GROUPS) * 8;
    const int n = ntile * BN + col;
    if (n >= N) continue;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = 0.f;
    if (w.splits == 1) {
      for (int q = 0; q < WK; ++q)
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] += red[((size_t)q * ROWS + row) * BN + col + i];
    } else {
      /* the n-tile's units in split order (the same bits whoever is last) */
      for (int sp = 0; sp < w.splits; ++sp) {
        const int64_t u = w.tb ? (int64_t)sp * w.ntiles + ntile : (int64_t)ntile * w.splits + sp;
        const float *slot = args.ws + (size_t)u * (size_t)M * BN + (size_t)row * BN + col;
        const float4 p0 = __ldcg((const float4 *)slot), p1 = __ldcg((const float4 *)(slot + 4));
        v[0] += p0.x, v[1] += p0.y, v[2] += p0.z, v[3] += p0.w;
        v[4] += p1.x, v[5] += p1.y, v[6] += p1.z, v[7] += p1.w;
      }
    }
    loom__smallm_bias8(args.bias, n, args.c_type, v);
    loom__store8_as(args.c, (int64_t)row * N + n, args.c_type, v);
  }
  if (w.splits > 1 && threadIdx.x == 0) args.tickets[ntile] = 0; /* ready for the next launch */
#endif /* LOOM_SMALLM_DEVICE */
}

/* ---- host side -------------------------------------------------------- */

typedef void (*loom__smallm_kernel_t)(const loom_smallm_args_t);

template <int MT, int PIPE>
static loom__smallm_kernel_t loom__smallm_pick3(int tb, int type) {
  if (type == LOOM_BF16)
    return tb ? loom__gemm_small_m_kernel<MT, 1, LOOM_BF16, PIPE> : loom__gemm_small_m_kernel<MT, 0, LOOM_BF16, PIPE>;
  return tb ? loom__gemm_small_m_kernel<MT, 1, LOOM_FP16, PIPE> : loom__gemm_small_m_kernel<MT, 0, LOOM_FP16, PIPE>;
}

template <int MT>
static loom__smallm_kernel_t loom__smallm_pick2(int tb, int type, int pipe) {
  switch (pipe) {
    case LOOM_SMALLM_PIPE_REGS: return loom__smallm_pick3<MT, LOOM_SMALLM_PIPE_REGS>(tb, type);
    case LOOM_SMALLM_PIPE_REGS2: return loom__smallm_pick3<MT, LOOM_SMALLM_PIPE_REGS2>(tb, type);
    default: return NULL;
  }
}

static loom__smallm_kernel_t loom__smallm_pick(int mt, int tb, int type, int pipe) {
  if (mt == 1) return loom__smallm_pick2<1>(tb, type, pipe);
  if (mt == 2) return loom__smallm_pick2<2>(tb, type, pipe);
  return loom__smallm_pick2<4>(tb, type, pipe);
}

extern "C" int loom__gemm_small_m_has_code(void) {
  static int cache = -1;
  int ptx = 0, bin = 0;
  const void *fn = (const void *)loom__smallm_pick(1, 0, LOOM_BF16, LOOM_SMALLM_PIPE_DEFAULT);
  if (!loom__gemm_code_versions(&cache, fn, &ptx, &bin)) return 0;
  return ptx >= 80 || bin >= 80;
}

extern "C" loom_result_t loom__gemm_small_m_occupancy(int mt, int *blocks) {
  const loom__smallm_kernel_t kern = loom__smallm_pick(mt, 0, LOOM_BF16, LOOM_SMALLM_PIPE_DEFAULT);
  const size_t smem = loom__smallm_smem_bytes(mt);
  if (smem > 48 * 1024)
    LOOM_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int n = 0;
  LOOM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void *)kern, LOOM_SMALLM_THREADS, smem));
  *blocks = n > 0 ? n : 1;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__gemm_small_m(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                            const void *bias, const loom_gemm_config_t *cfg,
                                            const loom_gemm_hooks_t *hooks, cudaStream_t stream) {
  if (hooks)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm: the small-m kernel (config bm=16) takes no hooks");
  if (d->m > LOOM_SMALLM_MAX_M)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm: config bm=16 (the small-m kernel) with m=%lld: it takes m <= %d",
                      (long long)d->m, LOOM_SMALLM_MAX_M);
  const int tb = d->b_layout == LOOM_B_KN;
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  loom_gemm_config_t conf = cfg ? *cfg : loom__gemm_small_m_heuristic(d, &dev);
  if (conf.bm != 16)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config bm=%d: the small-m kernel is bm=16", conf.bm);
  if (conf.bn != 0 && conf.bn != LOOM_SMALLM_BN)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config bm=16 bn=%d: the small-m kernel's n-tile is %d "
                      "columns (bn=0 or %d)", conf.bn, LOOM_SMALLM_BN, LOOM_SMALLM_BN);
  if (conf.stages < 0 || conf.stages >= LOOM_SMALLM_PIPES || conf.cluster > 1 ||
      conf.sk_blocks != 0 || conf.sk_splits < 0 || conf.sk_splits > LOOM_SMALLM_MAX_SPLITS)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_gemm: config bm=16 stages=%d cluster=%d sk_blocks=%d splits=%d: the small-m kernel takes "
                      "stages 0..2 (how the weight is loaded, 0 the default: small_m_layout.h), splits 0..%d (cluster, "
                      "sk_blocks 0)",
                      conf.stages, conf.cluster, conf.sk_blocks, conf.sk_splits, LOOM_SMALLM_MAX_SPLITS);
  const int mt = loom__smallm_mt(d->m);
  loom_smallm_args_t args;
  memset(&args, 0, sizeof args);
  args.a = a, args.b = b, args.c = c;
  args.bias = d->has_bias ? bias : NULL;
  args.m = (int32_t)d->m, args.n = (int32_t)d->n, args.k = (int32_t)d->k;
  args.c_type = (int32_t)d->c_type;
  args.work = loom__smallm_work(d->n, d->k, conf.sk_splits, tb);
  loom_scratch_t scratch = {NULL, NULL, 0, 0};
  if (args.work.splits > 1) {
    const size_t slots = (size_t)loom__smallm_units(&args.work);
    LOOM_TRY(loom__gemm_sk_workspace(stream, (size_t)args.work.ntiles * 4,
                                     slots * (size_t)d->m * (size_t)LOOM_SMALLM_BN * 4, &args.tickets, &args.ws, &scratch));
  }
  const int pipe = LOOM_SMALLM_PIPE_OF(conf.stages);
  const loom__smallm_kernel_t kern = loom__smallm_pick(mt, tb, (int)d->ab_type, pipe);
  const size_t smem = loom__smallm_smem_bytes(mt);
  if (smem > 48 * 1024)
    LOOM_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int64_t units = loom__smallm_units(&args.work);
  kern<<<(unsigned)units, LOOM_SMALLM_THREADS, smem, stream>>>(args);
  LOOM_CUDA_LAUNCHED("loom__gemm_small_m_kernel");
  return loom__scratch_done(stream, &scratch);
}
