/*
 * gemm_sm80.cuh - the kernel of loom's portable GEMM for compute capability >= 8.0 (A100,
 * L40, RTX 30xx/40xx; Hopper and Blackwell where the sm90 kernel does not
 * apply): C [m, n] = A [m, k] x B (+ bias [n]), the contract of loom_gemm.
 *
 * One block per output tile of 128 x BN (BN 128 or 256), 256 threads in 8
 * warps laid out 2 (m) x 4 (n): a warp owns 64 rows x BN/4 columns, i.e.
 * 4 x (BN/32) mma tiles of m16n8, fp32 accumulators in registers (64 or 128
 * per thread). The grid has one block per tile; block b computes the tile of
 * step b of the order (tile_order.h: GROUPED bands of `group` tile rows by
 * default, so blocks resident at once share A rows and B columns in L2).
 *
 * Main loop, per 32-wide k-block: a 4-stage cp.async pipeline (cp.async.cg,
 * 16-byte chunks, L2 only) fills shared memory with the A tile [128 x 32] and
 * the B tile (B [n, k]: [BN x 32] K-major; B [k, n]: [32 x BN] N-major).
 * Chunks outside the matrix (rows >= m, columns >= n, k >= k) are zero-filled
 * by cp.async's src-size 0 (n and k are multiples of 8, so a chunk is all in
 * or all out): partial tiles run the same uniform pipeline. Per k16 step a
 * warp loads its A fragments with ldmatrix.x4 and its B fragments with
 * ldmatrix.x4 (B [n, k]) or ldmatrix.x4.trans (B [k, n]), then issues the
 * mma.sync.aligned.m16n8k16 (bf16 or fp16 in, fp32 accumulate). The chunk
 * swizzles of sm80_layout.h make every ldmatrix phase bank-conflict-free.
 * Barrier discipline (one __syncthreads per k-block), fragments double-
 * buffered in registers: at k-block kb's first k16 step, refill the stage
 * of k-block kb-1 (every warp read its last fragments of it before the
 * previous barrier) with k-block kb+STAGES-1; at its last k16 step, wait
 * until k-block kb+1 has landed (cp.async.wait_group STAGES-2), barrier,
 * and load kb+1's first fragments before issuing this step's mma, so the
 * shared-memory loads of the next step overlap the tensor-core work.
 *
 * Epilogue straight from registers: + bias, rounded once to c_type, 4/8-byte
 * stores of adjacent column pairs, rows >= m and columns >= n masked.
 *
 * Split-K (SPLIT = true, a third instantiation, BN 128; tile_order.h's loom_work_t
 * with dp_tiles 0 and `splits` aligned k ranges): one block per unit (tile,
 * k range), units numbered split-major so blocks resident together work on
 * the same k range of neighbouring tiles. A unit stores its fp32
 * accumulators to its own workspace slot (16-byte stores, L2), fences, and
 * thread 0 takes the tile's ticket (atom.acq_rel.gpu); the last unit to
 * arrive sums the tile's slots in k order (deterministic), resets the ticket
 * to 0 for the next launch and runs the epilogue (bias added once). Nothing
 * waits on another block. The heuristic splits only where the tiles fill
 * at most half the block slots (decode-sized m: the weight stream needs
 * every SM; sm80_layout.h).
 *
 * Hooks (gemm.h) live in a second instantiation (HOOKS = true): thread 0
 * waits on the tile row's prologue signals (acquire, bounded by the comm's
 * timeout; on expiry the block returns without storing), the epilogue routes
 * rows through row_dst and stores or reduces (red.global.add: f32, bf16x2,
 * f16x2), and after a __threadfence_system and a barrier thread 0 sets the
 * tile's signal (st.release.sys). No co-residency is assumed: a block waits
 * only for signals set outside this kernel.
 *
 * Compiled for every target of LOOM_ARCH >= 8.0 (the sm_90a SASS and the
 * compute_80 PTX of the default build); loom__gemm_sm80_supported checks the
 * device and that the loaded binary carries the kernel.
 *
 * Instantiations (tile width, A/B type, B layout, plain / hooked / split-K)
 * are grouped by A/B type; each group is instantiated in a translation unit
 * of its own, gemm_sm80_<type>.cu (LOOM_SM80_GROUP, at the end of this
 * file), so that a parallel build compiles them side by side; the launcher
 * (gemm_sm80.cu) finds a configuration's kernel through its table.
 */
#ifndef LOOM_GEMM_SM80_CUH
#define LOOM_GEMM_SM80_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "core/signal.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/gemm.h"
#include "gemm/sm80_layout.h"
#include "gemm/tile_order.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define LOOM_SM80_DEVICE 1
#endif

/* Kernel argument (by value). */
typedef struct loom_sm80_args {
  const void *a;            /* [m, k] row-major */
  const void *b;            /* [n, k] (TB 0) or [k, n] (TB 1) row-major */
  void *c;                  /* [m, n] row-major, c_type */
  const void *bias;         /* [n] of c_type, or NULL */
  int32_t m, n, k;
  int32_t c_type;           /* loom_dtype_t */
  int32_t kblocks;          /* ceil(k / 32) */
  loom_tile_order_t order;
  loom_work_t work;         /* SPLIT: units of (tile, k range), one per block (tile_order.h) */
  float *sk_ws;             /* SPLIT: partials, a slot of 128 x BN fp32 per unit */
  uint32_t *sk_count;       /* SPLIT: tickets [tiles], 0 between launches */
  loom_gemm_hooks_t hooks;  /* read only by the HOOKS instantiation */
} loom_sm80_args_t;

#ifdef LOOM_SM80_DEVICE

static __device__ __forceinline__ uint32_t loom__sm80_smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte global -> shared copy; zero-fills the chunk when !pred. */
static __device__ __forceinline__ void loom__cp_async16(uint32_t dst, const void *src, bool pred) {
  const int bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void loom__cp_async_commit(void) {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void loom__cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void loom__ldmatrix_x4(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
static __device__ __forceinline__ void loom__ldmatrix_x4_trans(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* d += a (m16 x k16, row) x b (k16 x n8, col), fp32 accumulate. */
template <int TYPE>
static __device__ __forceinline__ void loom__mma16816(float *d, const uint32_t *a, const uint32_t *b) {
  if (TYPE == LOOM_BF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Issues the cp.async copies of k-block kb into stage buffers sa (A) and sb
 * (B), zero-filling everything outside the matrices. */
template <int BN, int TB>
static __device__ __forceinline__ void loom__sm80_load_stage(const loom_sm80_args_t &p, uint32_t sa, uint32_t sb,
                                                            int row0, int col0, int kb) {
  const int tid = threadIdx.x;
  const int k0 = kb * LOOM_SM80_BK;
  const uint16_t *A = (const uint16_t *)p.a, *B = (const uint16_t *)p.b;
  /* A: 128 rows x 4 chunks = 512 chunks, 2 per thread */
#pragma unroll
  for (int i = 0; i < (LOOM_SM80_BM * 4) / LOOM_SM80_THREADS; ++i) {
    const int id = tid + i * LOOM_SM80_THREADS, r = id >> 2, c = id & 3;
    const int row = row0 + r, kc = k0 + c * 8;
    const bool ok = row < p.m && kc < p.k;
    const uint16_t *src = ok ? A + (int64_t)row * p.k + kc : A;
    loom__cp_async16(sa + loom__sm80_off_kmajor(r, c), src, ok);
  }
  if (TB == 0) {
    /* B [n, k]: BN rows x 4 chunks */
#pragma unroll
    for (int i = 0; i < (BN * 4) / LOOM_SM80_THREADS; ++i) {
      const int id = tid + i * LOOM_SM80_THREADS, r = id >> 2, c = id & 3;
      const int col = col0 + r, kc = k0 + c * 8;
      const bool ok = col < p.n && kc < p.k;
      const uint16_t *src = ok ? B + (int64_t)col * p.k + kc : B;
      loom__cp_async16(sb + loom__sm80_off_kmajor(r, c), src, ok);
    }
  } else {
    /* B [k, n]: 32 k rows x BN/8 chunks */
    constexpr int CPR = BN / 8;
#pragma unroll
    for (int i = 0; i < (LOOM_SM80_BK * CPR) / LOOM_SM80_THREADS; ++i) {
      const int id = tid + i * LOOM_SM80_THREADS, r = id / CPR, c = id % CPR;
      const int kr = k0 + r, col = col0 + c * 8;
      const bool ok = kr < p.k && col < p.n;
      const uint16_t *src = ok ? B + (int64_t)kr * p.n + col : B;
      loom__cp_async16(sb + loom__sm80_off_nmajor(r, c, BN), src, ok);
    }
  }
}

/* The fragments of k16 step kk of the stage at sa (A tile, then the B tile
 * A_BYTES on): MI ldmatrix.x4 for A, NI/2 for B (.trans for B [k, n]).
 * oa, ob: the lane's offsets of its first block at kk = 0 (A; B [n, k] or
 * B [k, n]). sm80_layout.h's identities: kk = 1 is oa ^ 32 (K-major), a
 * further m16 / n16 block of a K-major tile is + 1024; for B [k, n] n16 pair
 * j is ob ^ (32 j) and kk adds 32 BN. */
template <int MI, int NI, int BN, int TB>
static __device__ __forceinline__ void loom__sm80_load_frags(uint32_t (*af)[4], uint32_t (*bf)[2], uint32_t sa,
                                                            uint32_t oa, uint32_t ob, int kk) {
  const uint32_t sb = sa + LOOM_SM80_BM * LOOM_SM80_BK * 2;
  const uint32_t oak = oa ^ (uint32_t)(kk << 5);
#pragma unroll
  for (int i = 0; i < MI; ++i) loom__ldmatrix_x4(af[i], sa + oak + i * 1024);
#pragma unroll
  for (int j = 0; j < NI / 2; ++j) {
    uint32_t r[4];
    if (TB == 0) loom__ldmatrix_x4(r, sb + (ob ^ (uint32_t)(kk << 5)) + j * 1024);
    else loom__ldmatrix_x4_trans(r, sb + (ob ^ (uint32_t)(j << 5)) + kk * 32 * BN);
    bf[2 * j][0] = r[0], bf[2 * j][1] = r[1], bf[2 * j + 1][0] = r[2], bf[2 * j + 1][1] = r[3];
  }
}

#endif /* LOOM_SM80_DEVICE */

/* TYPE: loom_dtype_t of A and B; TB: 0 B [n, k], 1 B [k, n]. */
/* The hooks' bias and activation ACT applied to the accumulators in place
 * (columns at or past n keep theirs: they are never stored), so that the
 * tile has one store epilogue whatever the activation (loom__sm80_epi with
 * DONE): one unrolled store loop per activation made each hooked kernel's
 * code, and ptxas's time on it, five times larger. The same fp32 operations
 * in the same order as the store loop's: the stored values are unchanged. */
template <int MI, int NI, int ACT>
static __device__ __forceinline__ void loom__sm80_bias_act(float (&acc)[MI][NI][4], const loom_sm80_args_t &args,
                                                          int32_t wcol0, int lane) {
  const int cbase = wcol0 + (lane % 4) * 2;
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int col = cbase + j * 8;
    float b0, b1;
    loom__gemm_bias2(col < args.n ? args.bias : NULL, col, args.c_type, &b0, &b1);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v0 = acc[i][j][2 * h] + b0, v1 = acc[i][j][2 * h + 1] + b1;
        loom__gemm_act2<ACT>(&v0, &v1);
        acc[i][j][2 * h] = v0, acc[i][j][2 * h + 1] = v1;
      }
  }
}

/* The epilogue: each thread's MI x NI fragments (+ bias, unless DONE:
 * loom__sm80_bias_act added it and the activation already), rounded to the
 * store type, masked at m and n, to the row's destination
 * (loom_gemm_row_dst, found once per row: the thread's 2 MI rows, not at
 * every store); wrow0 / wcol0: the warp's first row and column. */
template <int MI, int NI, bool HOOKS, bool DONE>
static __device__ __forceinline__ void loom__sm80_epi(const float (&acc)[MI][NI][4], const loom_sm80_args_t &args,
                                                     int32_t wrow0, int32_t wcol0, int lane) {
  const int ct = args.c_type;
  int reduce = 0;
  if (HOOKS) reduce = args.hooks.epilogue == LOOM_EPI_REDUCE;
  const int st = loom__gemm_store_type<HOOKS>(args.hooks, ct);
  const int64_t poff = loom__gemm_parity_off<HOOKS>(args.hooks);
  const int rbase = wrow0 + lane / 4;
  const int cbase = wcol0 + (lane % 4) * 2;
  void *base[MI][2];
  int64_t roff[MI][2]; /* the row's first element in its destination */
  unsigned live = 0;   /* bit 2 i + h: row i, h is inside m */
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = rbase + i * 16 + h * 8;
      int64_t r = 0;
      base[i][h] = args.c;
      if (row < args.m) {
        base[i][h] = loom_gemm_row_dst<HOOKS>(args.c, args.hooks, args.m, row, &r, poff);
        live |= 1u << (2 * i + h);
      }
      roff[i][h] = r * args.n;
    }
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int col = cbase + j * 8;
    if (col < args.n) {
      float b0 = 0.f, b1 = 0.f;
      if (!DONE) loom__gemm_bias2(args.bias, col, ct, &b0, &b1);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (live & (1u << (2 * i + h))) {
            float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
            if (!DONE) v0 += b0, v1 += b1;
            loom__gemm_store2(base[i][h], roff[i][h] + col, st, v0, v1, reduce);
          }
        }
    }
  }
}

template <int BN, int TYPE, int TB, bool HOOKS, bool SPLIT>
__global__ void __launch_bounds__(LOOM_SM80_THREADS, BN == 128 ? 2 : 1)
    loom__gemm_sm80_kernel(const __grid_constant__ loom_sm80_args_t args) {
#ifdef LOOM_SM80_DEVICE
  constexpr int A_BYTES = LOOM_SM80_BM * LOOM_SM80_BK * 2;
  constexpr int STAGE = A_BYTES + BN * LOOM_SM80_BK * 2;
  constexpr int WN = BN / 4;   /* columns per warp */
  constexpr int MI = 4;        /* m16 tiles per warp (64 rows) */
  constexpr int NI = WN / 8;   /* n8 tiles per warp */
  extern __shared__ __align__(128) uint8_t loom_sm80_smem[];
  __shared__ int abort_block;
  __shared__ uint32_t ticket;
  const uint32_t s0 = loom__sm80_smem_u32(loom_sm80_smem);

  /* this block's step and k-blocks [kbeg, kend): the whole tile, or (SPLIT)
   * unit blockIdx.x of the split-K decomposition */
  int step = (int)blockIdx.x, kbeg = 0, kend = args.kblocks;
  loom_segment_t sg;
  if (SPLIT) {
    /* read again after the main loop, so its fields hold no registers there */
    loom__work_segment(&args.work, (int32_t)blockIdx.x, 0, &sg);
    step = sg.step, kbeg = sg.k0, kend = sg.k1;
  }
  const int t = loom__tile_at(&args.order, step);
  int tm, tn;
  loom__tile_coords(&args.order, t, &tm, &tn);
  const int row0 = tm * LOOM_SM80_BM, col0 = tn * BN;

  if (HOOKS && args.hooks.wait_signals) {
    if (threadIdx.x == 0) {
      abort_block = !loom__gemm_hook_wait(args.hooks, args.m, tm, LOOM_SM80_BM);
    }
    __syncthreads();
    if (abort_block) return; /* expired: nothing stored, no signal */
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4; /* rows [64 wm, +64), columns [WN wn, +WN) of the tile */

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

  const int kblocks = kend - kbeg; /* k-blocks of this block, loaded as kbeg + x */
#pragma unroll
  for (int s = 0; s < LOOM_SM80_STAGES - 1; ++s) {
    if (s < kblocks)
      loom__sm80_load_stage<BN, TB>(args, s0 + s * STAGE, s0 + s * STAGE + A_BYTES, row0, col0, kbeg + s);
    loom__cp_async_commit();
  }

  /* per-lane ldmatrix offsets at kk = 0 (sm80_layout.h), hoisted out of
   * the loop; the rest follow by the identities the host tests check */
  const uint32_t oa = loom__sm80_frag_a(lane, wm * 64, 0);
  const uint32_t ob = TB ? loom__sm80_frag_bkn(lane, wn * WN, 0, BN) : loom__sm80_frag_bnk(lane, wn * WN, 0);

  /* fragments, double-buffered: those of the next k16 step (the next
   * k-block's first, across the barrier) load while this step's mma run */
  uint32_t af[2][MI][4], bf[2][NI][2];
  loom__cp_async_wait<LOOM_SM80_STAGES - 2>(); /* k-block 0 landed */
  __syncthreads();
  loom__sm80_load_frags<MI, NI, BN, TB>(af[0], bf[0], s0, oa, ob, 0);
  for (int kb = 0; kb < kblocks; ++kb) {
    const uint32_t sa = s0 + (kb % LOOM_SM80_STAGES) * STAGE;
#pragma unroll
    for (int kk = 0; kk < LOOM_SM80_BK / 16; ++kk) {
      if (kk == 0) {
        /* refill the stage every warp finished reading before the last
         * barrier (k-block kb-1's) with k-block kb + STAGES - 1 */
        const int nk = kb + LOOM_SM80_STAGES - 1;
        const int ns = nk % LOOM_SM80_STAGES;
        if (nk < kblocks)
          loom__sm80_load_stage<BN, TB>(args, s0 + ns * STAGE, s0 + ns * STAGE + A_BYTES, row0, col0, kbeg + nk);
        loom__cp_async_commit();
      }
      if (kk + 1 < LOOM_SM80_BK / 16) {
        loom__sm80_load_frags<MI, NI, BN, TB>(af[(kk + 1) & 1], bf[(kk + 1) & 1], sa, oa, ob, kk + 1);
      } else if (kb + 1 < kblocks) {
        /* k-block kb+1 landed, and every warp is past its last read of
         * k-block kb's stage (its fragments are in registers) */
        loom__cp_async_wait<LOOM_SM80_STAGES - 2>();
        __syncthreads();
        loom__sm80_load_frags<MI, NI, BN, TB>(af[(kk + 1) & 1], bf[(kk + 1) & 1],
                                             s0 + ((kb + 1) % LOOM_SM80_STAGES) * STAGE, oa, ob, 0);
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) loom__mma16816<TYPE>(acc[i][j], af[kk & 1][i], bf[kk & 1][j]);
    }
  }
  loom__cp_async_wait<0>();

  /* ---- split-K: a tile's units write fp32 partials; the last to arrive
   * sums them in k order (the same bits whoever is last) and stores ---- */
  if (SPLIT) loom__work_segment(&args.work, (int32_t)blockIdx.x, 0, &sg);
  /* a warp whose 64 rows all lie beyond m has nothing to keep */
  const bool wactive = row0 + wm * 64 < args.m;
  if (SPLIT && sg.sk) {
    const size_t slab = (size_t)LOOM_SM80_BM * BN; /* floats per slot */
    /* each thread its own fragments: float4 q of thread tid at q * 256 + tid */
    if (wactive) {
      float4 *mine = (float4 *)(args.sk_ws + (size_t)sg.slot * slab);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
          __stcg(mine + (i * NI + j) * LOOM_SM80_THREADS + threadIdx.x,
                 make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]));
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t old;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(args.sk_count + sg.sk_tile) : "memory");
      ticket = old;
    }
    __syncthreads();
    if (ticket != (uint32_t)(sg.nseg - 1)) return; /* not the last: done */
    __threadfence();
    if (wactive) {
      for (int c = 0; c < sg.nseg; ++c) {
        const float4 *src = (const float4 *)(args.sk_ws + (size_t)(sg.slot0 + c * sg.slot_step) * slab);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NI; ++j) {
            const float4 v = __ldcg(src + (i * NI + j) * LOOM_SM80_THREADS + threadIdx.x);
            acc[i][j][0] = c ? acc[i][j][0] + v.x : v.x;
            acc[i][j][1] = c ? acc[i][j][1] + v.y : v.y;
            acc[i][j][2] = c ? acc[i][j][2] + v.z : v.z;
            acc[i][j][3] = c ? acc[i][j][3] + v.w : v.w;
          }
      }
    }
    if (threadIdx.x == 0) args.sk_count[sg.sk_tile] = 0; /* ready for the next launch */
  }

  /* ---- epilogue: registers -> global; a hooked tile's activation (a
   * compile-time constant in each unrolled pass: epilogue.cuh says why)
   * applied in place first, then the one store loop ---- */
  if (!HOOKS || args.hooks.activation == LOOM_ACT_NONE) {
    loom__sm80_epi<MI, NI, HOOKS, false>(acc, args, row0 + wm * 64, col0 + wn * WN, lane);
  } else {
    LOOM_GEMM_ACT_DISPATCH(args.hooks.activation, (loom__sm80_bias_act<MI, NI, A>(acc, args, col0 + wn * WN, lane)));
    loom__sm80_epi<MI, NI, HOOKS, true>(acc, args, row0 + wm * 64, col0 + wn * WN, lane);
  }
  if (HOOKS && (args.hooks.tile_signal || args.hooks.dst_signal)) {
    /* every thread's stores of this tile, then one release */
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) loom__gemm_hook_signal(args.hooks, args.m, tm, LOOM_SM80_BM, t);
  }
#endif /* LOOM_SM80_DEVICE */
}

/* ---- instantiation ---------------------------------------------------- */

typedef void (*loom__sm80_kernel_t)(const loom_sm80_args_t);

template <int BN, int TYPE, bool HOOKS, bool SPLIT>
static loom__sm80_kernel_t loom__sm80_pick2(int tb) {
  return tb ? loom__gemm_sm80_kernel<BN, TYPE, 1, HOOKS, SPLIT> : loom__gemm_sm80_kernel<BN, TYPE, 0, HOOKS, SPLIT>;
}

/* The kernel of a configuration of group TYPE (bn 256, else 128; tb 1 for
 * B [k, n]). HOOKS and SPLIT never together (hooked GEMMs run whole tiles);
 * SPLIT only with BN 128 (the launcher refuses bn 256 with splits). */
template <int TYPE>
static loom__sm80_kernel_t loom__sm80_group(int bn, int tb, int hooks, int split) {
  if (bn == 256) return hooks ? loom__sm80_pick2<256, TYPE, true, false>(tb) : loom__sm80_pick2<256, TYPE, false, false>(tb);
  return hooks ? loom__sm80_pick2<128, TYPE, true, false>(tb)
               : split ? loom__sm80_pick2<128, TYPE, false, true>(tb) : loom__sm80_pick2<128, TYPE, false, false>(tb);
}

/* A group's function, loom__sm80_kernels_<T> (T: bf16 or fp16):
 * LOOM_SM80_GROUP_DECL declares it (the launcher's table), LOOM_SM80_GROUP
 * defines it, instantiating the group's kernels in that translation unit
 * (exactly one per group). */
#define LOOM_SM80_GROUP_FN(T) loom__sm80_kernels_##T
#define LOOM_SM80_GROUP_DECL(T) loom__sm80_kernel_t LOOM_SM80_GROUP_FN(T)(int bn, int tb, int hooks, int split)
#define LOOM_SM80_TYPE_bf16 LOOM_BF16
#define LOOM_SM80_TYPE_fp16 LOOM_FP16
#define LOOM_SM80_GROUP(T)                                                 \
  LOOM_SM80_GROUP_DECL(T) {                                                \
    return loom__sm80_group<LOOM_SM80_TYPE_##T>(bn, tb, hooks, split);     \
  }

#endif /* LOOM_GEMM_SM80_CUH */
