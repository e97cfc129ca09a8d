/*
 * gemm_sm90.cuh - the kernel of loom's Hopper GEMM: C [m, n] = A [m, k] x B (+ bias [n]).
 *
 * One persistent block per SM (grid = min(tiles, SM count read at run time)),
 * 384 threads in three warpgroups:
 *   warpgroup 0  producer: one thread walks the block's tiles (tile_order.h)
 *                and, per 64-wide k-block, waits for a free stage ("empty"
 *                mbarrier), then issues TMA loads of the A tile [BM x 64]
 *                and the B tile (BN x 64) that complete on the stage's "full"
 *                mbarrier (expect_tx bytes). setmaxnreg.dec to 40 registers.
 *   warpgroups 1, 2  consumers: each owns 64 rows of the 128-row tile, waits
 *                on "full", issues 4 wgmma m64nBNk16 (fp32 accumulators in
 *                registers, A and B read from 128B-swizzled shared memory
 *                through matrix descriptors), keeps one wgmma group in flight
 *                and frees the previous stage when it completes; after the
 *                last k-block, the epilogue adds bias, converts, writes
 *                64 x 128-byte chunks into shared memory (two 8 KiB buffers
 *                per warpgroup, 128B swizzle) and one thread stores each
 *                chunk with TMA (clipped at m and n), so the global writes
 *                drain during the next tile's main loop (loom__epi_tma).
 *                The hooked kernels store from registers instead (masked).
 *                setmaxnreg.inc to 232 registers.
 * Shared memory: STAGES x (A 16 KiB + B BN*128 B), 1024-aligned (the 128B
 * swizzle pattern repeats every 1024 bytes), the epilogue's 4 x 8 KiB (plain
 * kernels), then 2 x STAGES mbarriers: 225 KiB of the 227 available
 * (sm90_layout.h computes it).
 *
 * Decode variant (BM = 64, config bm = 64; plain GEMMs, no clusters): tiles
 * of 64 x BN, the A box 64 rows (8 KiB a stage, none of it out of bounds at
 * m = 64), and the consumer warpgroups split the tile's columns instead of
 * its rows: warpgroup cw issues wgmma m64n(BN/2)k16 on B columns [cw BN/2,
 * (cw + 1) BN/2) of the stage and stores those columns. With 128-row tiles
 * at m <= 64 one consumer warpgroup idles and the A stage is half zeros;
 * here the freed shared memory holds more B stages (BN 256: 5 instead of 4;
 * BN 128: 8 instead of 6), so each SM keeps more of the weight stream in
 * flight, and a consumer frees a stage as soon as its own wgmma completes
 * (wait_group 0) instead of one k-block later. Stream-K / split-K work the
 * same (a partial slot is 2 warpgroups x 64 x BN/2 fp32).
 *
 * Layouts. A [m, k] row-major is K-major: TMA box {64 k, 128 rows}, 128 bytes
 * per row, 8-row groups 1024 bytes apart (descriptor SBO = 1024), and the
 * k16 slices of a k-block are 32 bytes apart inside the swizzled row.
 * B [n, k] (LOOM_B_NK) is K-major the same way, box {64 k, BN rows}.
 * B [k, n] (LOOM_B_KN) is MN-major: BN/64 boxes {64 n, 64 k} of 8 KiB, the
 * wgmma transpose bit set, LBO = 8192 (next 64 columns), SBO = 1024 (next 8
 * k rows), k16 slices 2048 bytes apart.
 * Out-of-bounds rows, columns and k (partial tiles) are zero-filled by TMA
 * and still counted in the transaction bytes, so the pipeline is uniform.
 *
 * Stream-K (SK = true, a third instantiation; tile_order.h says who does
 * what): a block walks segments (step, k-blocks [k0, k1)) instead of whole
 * tiles. After a segment of a shared tile, each consumer warpgroup stores its
 * 64 x BN fp32 partial to the block's workspace slot (16-byte stores, L2),
 * fences, and one thread takes the tile's ticket (atom.acq_rel.gpu) after a
 * consumer-wide named barrier; the block that draws the last ticket sums
 * the slots of the tile's contributors in k order (so the result does not
 * depend on who finished last), resets the ticket to 0 for the next launch,
 * and runs the ordinary epilogue: the bias is added once, by that block.
 * Nothing waits for another block, so no co-residency is assumed. Split-K
 * (work.splits >= 1, tile_order.h) runs through the same fixup: only the
 * segments and slots differ, or it is reduced apart (args.sk_reduce,
 * split_reduce.h): each unit stores its partial and moves on, and the
 * launcher runs the reduction behind the kernel as a programmatic
 * dependent (the kernel lets it launch from its start; wait-only hooked
 * GEMMs too). Hooked GEMMs that only wait (AllGather+GEMM:
 * prologue waits, plain TMA stores into C, no tile signals) run stream-K
 * and split-K too (HOOKS + SK; at bn 192 and 224 without an activation
 * only, to keep the build's kernel count down): each segment's loads
 * wait for the tile's rows as a whole tile's would, and the tile's last
 * contributor stores it. That instantiation holds neither the register
 * epilogue nor the tile signals: with either one ptxas serialises the
 * wgmma (C7518), as it did when every hooked GEMM ran stream-K; hooks that
 * route, reduce or signal run data-parallel (the launcher).
 *
 * Hooks (gemm.h) live in a second instantiation (HOOKS = true): prologue
 * waits in the producer (acquire, bounded, then fence.proxy.async so the TMA
 * sees the peer's data), row-routed store or atomic reduce in the epilogue,
 * or the TMA epilogue's chunks added into other buffers (bulk reductions
 * through a table of tensor maps, LOOM_EPI_BULK_ADD: GEMM+ReduceScatter's
 * pushes into the owners, with no register stores and no side kernel),
 * and a per-tile release signal once both consumer warpgroups' stores are
 * visible (__threadfence_system, named barrier, st.release.sys). The hooks'
 * activation is a template argument too (ACT: one hooked kernel per
 * activation): chosen per tile at run time, every hooked kernel carried all
 * of the activations' unrolled epilogues (the 128x224 one 156,000 SASS lines
 * against 13,000 now), and the file built in ~9 minutes instead of ~5. (That
 * kernel's 4% gap to the plain one with the hooks idle was measured before
 * and after: it did not come from its size; docs/perf/gemm.md, "Hooked kernel: the 128x224 gap".)
 *
 * sm_90a only: the kernel bodies compile under LOOM_SM90A; the sm_80 PTX of
 * the library holds empty kernels that the host never launches
 * (loom__gemm_sm90_supported checks the device and the loaded binary).
 *
 * Instantiations: one kernel per configuration the launcher can run (tile
 * bm x bn, A/B type, B layout, plain or hooked, stream-K, cluster, the
 * hooks' activation), grouped by (bm, bn, type); each group is instantiated
 * in one translation unit of its own, gemm_sm90_<bm>x<bn>_<type>.cu
 * (LOOM_SM90_GROUP, at the end of this file), so that a parallel build
 * compiles them side by side (in one file, ptxas took most of a 25-minute
 * build on 2 cores). The launcher (gemm_sm90.cu) finds a configuration's
 * kernel through its table of groups.
 */
#ifndef LOOM_GEMM_SM90_CUH
#define LOOM_GEMM_SM90_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "core/signal.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/gemm.h"
#include "gemm/grouped_schedule.h"
#include "gemm/sm90_layout.h"
#include "gemm/tile_order.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LOOM_SM90A 1
#include "gemm/sm90_wgmma.cuh"
#endif

/* stream-K fixup: float4 loads in flight per thread while summing partials */
#ifndef LOOM_SK_LOADS
#define LOOM_SK_LOADS 8
#endif

/* Everything but the tensor maps (kernel argument, by value). */
typedef struct loom_sm90_args {
  int32_t m, n, k;
  int32_t c_type;           /* loom_dtype_t of C and bias */
  void *c;                  /* [m, n] row-major */
  const void *bias;         /* [n] or NULL */
  loom_tile_order_t order;
  loom_work_t work;         /* data-parallel and stream-K segments (tile_order.h) */
  float *sk_ws;             /* stream-K partials: slots of 2 x 64 x BN fp32 */
  uint32_t *sk_count;       /* stream-K tickets [sk tiles], 0 between launches */
  int32_t sk_reduce;        /* split-K reduced apart (split_reduce.h): a shared tile's units
                             * store their partials and stop; the next kernel sums them */
  loom_gemm_hooks_t hooks;  /* read only by the HOOKS instantiation */
  int32_t epi_tma;          /* HOOKS: 1 = the TMA-store epilogue into c (no row routing, no
                             * reduction), tile signals after the stores complete; 2 = the same
                             * chunks added into hooks.dst_maps (LOOM_EPI_BULK_ADD); 0 = stores
                             * from registers. Plain kernels always store with TMA. */
  /* grouped GEMMs (the GR instantiation; m is R, the rows of A and C):
   * group g multiplies rows [off[g], off[g + 1]) of A by B_g (the third
   * coordinate of B's map) into the same rows of C, + bias [G, n] row g
   * (grouped_schedule.h: bounds, tile steps; order.tiles_n is the tile
   * columns) */
  const int64_t *group_off; /* device [groups + 1] */
  int32_t groups;
  int32_t group_band;       /* GROUPED band height inside a group, tile rows */
  int32_t glu;              /* GR, bn 256, B [G, n, k]: the SwiGLU epilogue. B_g's rows [0, n/2) are the
                             * gate's, [n/2, n) the up projection's; C [m, n/2] = silu(A Bgate^T) x
                             * (A Bup^T), fp32, rounded once (loom__glu_pairs) */
  /* GR, the scatter epilogue (a mixture of experts' combine in its down
   * GEMM): row r of the product goes to row o.y of scatter_dst[o.x], o =
   * scatter_origin[r] = {source, row}, instead of row r of c; rows of n
   * c_type elements there too (loom__epi_scatter). NULL: none. */
  const int2 *scatter_origin;     /* [m] */
  char *const *scatter_dst;       /* [sources] row bases (may be peers' LSA pointers) */
  /* GR, rows that arrive while the kernel runs (gemm.h; arrive.epoch NULL:
   * none): the prefix waits for arrive.ready, the producer for each tile's
   * sources, the last block publishes the epoch */
  loom_grouped_arrival_t arrive;
} loom_sm90_args_t;

/* The fields every launch sets (the rest zero): C [m, n] of c_type at c,
 * bias [n] (or NULL), k. */
static inline void loom__sm90_args_base(loom_sm90_args_t *a, int64_t m, int64_t n, int64_t k, int c_type, void *c,
                                        const void *bias) {
  memset(a, 0, sizeof *a);
  a->m = (int32_t)m, a->n = (int32_t)n, a->k = (int32_t)k;
  a->c_type = (int32_t)c_type, a->c = c, a->bias = bias;
}

/* ---- device helpers (sm_90a) ------------------------------------------- */
#ifdef LOOM_SM90A

static __device__ __forceinline__ uint32_t loom__smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void loom__mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void loom__mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

static __device__ __forceinline__ void loom__mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* Waits until the barrier's phase with this parity has completed. */
static __device__ __forceinline__ void loom__mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

/* This block's rank in its thread-block cluster. */
static __device__ __forceinline__ uint32_t loom__cluster_rank(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

/* Every thread of every block of the cluster (release / acquire); called
 * by whole warps (.aligned: the compiler then knows they are converged). */
static __device__ __forceinline__ void loom__cluster_sync(void) {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* The shared::cluster address of offset `addr` in block `rank`'s shared
 * memory. */
static __device__ __forceinline__ uint32_t loom__cluster_addr(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}

/* Arrives on an mbarrier of another block of the cluster (a
 * loom__cluster_addr address). Default semantics (release at CTA scope): the
 * arrival only says "my wgmma reads of this stage are complete", which
 * wgmma.wait_group already ordered; .release.cluster made every consumer
 * warp wait on a memory barrier per k-block (ncu, 4096^3: 423k cycles vs
 * 290k). */
static __device__ __forceinline__ void loom__mbar_arrive_remote(uint32_t remote) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

/* 2-D TMA load multicast to the blocks of `mask` in the cluster: the box
 * lands at offset dst of each one's shared memory and completes its bytes on
 * each one's barrier at offset bar. */
static __device__ __forceinline__ void loom__tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                           int32_t c0, int32_t c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

/* 2-D TMA load of one box at coordinates (c0 innermost, c1) into dst,
 * completing `bytes` on barrier bar. */
static __device__ __forceinline__ void loom__tma_load_2d(uint32_t dst, const CUtensorMap *map,
                                                        uint32_t bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

/* 3-D TMA load (c2: the group of a grouped GEMM's stacked B; a box one deep
 * lands as the 2-D box would). */
static __device__ __forceinline__ void loom__tma_load_3d(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                        int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
      ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

/* 2-D TMA store of one box from shared memory at coordinates (c0, c1), in
 * this thread's bulk group (rows/columns outside the tensor are not written). */
static __device__ __forceinline__ void loom__tma_store_2d(const CUtensorMap *map, uint32_t src, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"((uint64_t)map), "r"(src), "r"(c0), "r"(c1)
               : "memory");
}
/* The same box added element-wise into the tensor (bulk reduction in the
 * map's dtype, one rounding per add; rows/columns outside it untouched).
 * The map may sit in global memory (a table of destinations). */
static __device__ __forceinline__ void loom__tma_add_2d(const CUtensorMap *map, uint32_t src, int32_t c0, int32_t c1) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"((uint64_t)map), "r"(src), "r"(c0), "r"(c1)
               : "memory");
}
static __device__ __forceinline__ void loom__bulk_commit(void) {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/* Until at most N of this thread's bulk groups still read shared memory. */
template <int N>
static __device__ __forceinline__ void loom__bulk_wait_read(void) {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/* Until all of this thread's bulk groups have completed (writes done). */
static __device__ __forceinline__ void loom__bulk_wait_all(void) {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* Shared-memory matrix descriptor, 128-byte swizzle. */
static __device__ __forceinline__ uint64_t loom__wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

static __device__ __forceinline__ void loom__wgmma_fence(void) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void loom__wgmma_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void loom__wgmma_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator reads across a wgmma wait. */
template <int NR>
static __device__ __forceinline__ void loom__fence_regs(float *d) {
#pragma unroll
  for (int i = 0; i < NR; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* One k16 step of the warpgroup's 64 x N tile (N: 64, 128, 256). */
template <int N, int TYPE, int TB>
static __device__ __forceinline__ void loom__wgmma_step(float *acc, uint64_t da, uint64_t db, int scale_d) {
  if (N == 256) {
    if (TYPE == LOOM_BF16) loom__wgmma_m64n256k16_bf16<TB>(acc, da, db, scale_d);
    else loom__wgmma_m64n256k16_f16<TB>(acc, da, db, scale_d);
  } else if (N == 224) {
    if (TYPE == LOOM_BF16) loom__wgmma_m64n224k16_bf16<TB>(acc, da, db, scale_d);
    else loom__wgmma_m64n224k16_f16<TB>(acc, da, db, scale_d);
  } else if (N == 192) {
    if (TYPE == LOOM_BF16) loom__wgmma_m64n192k16_bf16<TB>(acc, da, db, scale_d);
    else loom__wgmma_m64n192k16_f16<TB>(acc, da, db, scale_d);
  } else if (N == 64) {
    if (TYPE == LOOM_BF16) loom__wgmma_m64n64k16_bf16<TB>(acc, da, db, scale_d);
    else loom__wgmma_m64n64k16_f16<TB>(acc, da, db, scale_d);
  } else {
    if (TYPE == LOOM_BF16) loom__wgmma_m64n128k16_bf16<TB>(acc, da, db, scale_d);
    else loom__wgmma_m64n128k16_f16<TB>(acc, da, db, scale_d);
  }
}

/* Named barrier of one consumer warpgroup (ids 3, 4; 1 and 2 are the
 * 256-thread consumer barriers). */
static __device__ __forceinline__ void loom__wg_sync(int cw) {
  asm volatile("bar.sync %0, 128;" ::"r"(3 + cw) : "memory");
}

/* Chunk ch of a warpgroup's accumulators (+ bias, activation, converted to
 * the chunk's ES-byte elements) into the 8 KiB epilogue buffer `buf`: 64
 * rows x 128 bytes, 16-byte unit u of row r at unit u ^ (r % 8) (the TMA's
 * 128-byte swizzle). r0: this thread's first fragment row (16 warp + lane
 * / 4); JPC: 8-column fragment groups per chunk. */
template <int ES, int JPC, int ACT>
static __device__ __forceinline__ void loom__epi_chunk(const float *acc, uint32_t buf, int ch, int32_t col0, int ct,
                                                      const void *bias, int32_t n, int lane, int r0) {
#pragma unroll
  for (int jj = 0; jj < JPC; ++jj) {
    const int j = ch * JPC + jj;
    const int col = col0 + j * 8 + (lane % 4) * 2;
    float b0, b1;
    loom__gemm_bias2(col < n ? bias : NULL, col, ct, &b0, &b1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + h * 8;
      float v0 = acc[j * 4 + h * 2] + b0, v1 = acc[j * 4 + h * 2 + 1] + b1;
      loom__gemm_act2<ACT>(&v0, &v1);
      if (ES == 4) {
        const uint32_t u = (uint32_t)(jj * 2 + (lane % 4) / 2);
        const uint32_t addr = buf + r * 128 + ((u ^ (uint32_t)(r & 7)) << 4) + (lane % 2) * 8;
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(v0), "f"(v1) : "memory");
      } else {
        uint32_t bits;
        if (ct == LOOM_BF16) {
          const __nv_bfloat162 p = __floats2bfloat162_rn(v0, v1);
          bits = *(const uint32_t *)&p;
        } else {
          const __half2 p = __floats2half2_rn(v0, v1);
          bits = *(const uint32_t *)&p;
        }
        const uint32_t addr = buf + r * 128 + (((uint32_t)jj ^ (uint32_t)(r & 7)) << 4) + (lane % 4) * 4;
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(bits) : "memory");
      }
    }
  }
}

/* Epilogue through shared memory (plain stores): the warpgroup's 64 x WN
 * accumulators (+ bias) go out in chunks of 64 rows x 128 bytes (64 bf16/fp16
 * or 32 fp32 columns). Each chunk is written into one of the warpgroup's
 * NBUF (2, or 1 where shared memory went to the pipeline) 8 KiB buffers with
 * the TMA's 128-byte swizzle (16-byte unit u of row r at unit u ^ (r % 8),
 * so the 8 rows a warp writes at once hit different banks), then one thread
 * stores it with TMA (clipped at m and n) and moves on; the stores drain
 * while the next tile's main loop runs. Before a buffer is reused, its
 * previous store must have finished reading it (wait_group.read NBUF - 1:
 * only the other buffer's store may be pending). ES: bytes per C element.
 * A warpgroup width that is not whole chunks (224 bf16/fp16 columns: 3
 * chunks and 32 columns) stores the tail columns from registers (masked at
 * m and n): a whole chunk there would overwrite the next tile's columns.
 * Fragment layout (wgmma m64nWN): acc[4 j + 2 h + e] is row
 * 16 warp + lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e.
 * adds (the BULK_ADD hooks: a table of maps, rpd rows each): each chunk is
 * added into adds[row0 / rpd] at row row0 % rpd instead of stored through
 * map (rpd a multiple of 64, so a chunk has one destination; the launcher
 * refuses the register-stored tail columns there). */
template <int WN, int ES, int NBUF, int ACT>
static __device__ __forceinline__ void loom__epi_tma(const float *acc, const CUtensorMap *map, uint32_t bufs,
                                                    uint32_t &seq, int32_t row0, int32_t col0, int ct,
                                                    const void *bias, void *c, int32_t m, int32_t n, int warp,
                                                    int lane, int tid, int cw, const CUtensorMap *adds,
                                                    int32_t rpd) {
  constexpr int CPC = 128 / ES; /* columns per chunk */
  constexpr int NCH = WN / CPC;
  constexpr int JPC = CPC / 8;  /* 8-column fragment groups per chunk */
  static_assert(NCH >= 1 && (WN % CPC) % 8 == 0, "whole chunks, then whole 8-column fragment groups");
  const int r0 = warp * 16 + lane / 4;
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
    const uint32_t buf = bufs + (NBUF == 2 ? (seq & 1u) * (uint32_t)LOOM_SM90_EPI_BUF : 0u);
    if (tid == 0) loom__bulk_wait_read<NBUF - 1>();
    loom__wg_sync(cw);
    loom__epi_chunk<ES, JPC, ACT>(acc, buf, ch, col0, ct, bias, n, lane, r0);
    /* the generic-proxy writes above are read next by the TMA (async proxy) */
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    loom__wg_sync(cw);
    if (tid == 0) {
      if (adds) {
        const int32_t d = row0 / rpd;
        loom__tma_add_2d(adds + d, buf, col0 + ch * CPC, row0 - d * rpd);
      } else {
        loom__tma_store_2d(map, buf, col0 + ch * CPC, row0);
      }
      loom__bulk_commit();
    }
    ++seq;
  }
  if constexpr (WN % CPC != 0) {
#pragma unroll
    for (int j = NCH * JPC; j < WN / 8; ++j) {
      const int col = col0 + j * 8 + (lane % 4) * 2;
      if (col < n) {
        float b0, b1;
        loom__gemm_bias2(bias, col, ct, &b0, &b1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + r0 + h * 8;
          if (row < m) {
            float v0 = acc[j * 4 + h * 2] + b0, v1 = acc[j * 4 + h * 2 + 1] + b1;
            loom__gemm_act2<ACT>(&v0, &v1);
            loom__gemm_store2(c, (int64_t)row * n + col, ct, v0, v1, 0);
          }
        }
      }
    }
  }
}

/* The scatter epilogue (GR, args.scatter_origin): as loom__epi_tma, chunk by
 * chunk through the same buffers, but each of the chunk's 64 rows goes to
 * its own place: row r of the tile to row o.y of dst[o.x], o = origin[r]
 * (a mixture of experts' combine: the expert's output row straight into
 * its token's rank). The warpgroup reads the chunk back from shared memory
 * as 16-byte units, 8 per row (a warp: 4 rows of 128 contiguous bytes),
 * and stores them, masked at m (the group's end) and n; the rows are
 * written by plain stores, done when the kernel is (whoever reads them
 * waits for a signal sent after it). The origins are read through L2
 * (written by the peers in an earlier kernel). Whole chunks only (the
 * grouped tiles: 128 or 256 columns). */
template <int WN, int ES, int NBUF>
static __device__ __forceinline__ void loom__epi_scatter(const float *acc, uint32_t bufs, uint32_t &seq, int32_t row0,
                                                        int32_t col0, int ct, const void *bias, int32_t m, int32_t n,
                                                        const int2 *origin, char *const *dst, int warp, int lane,
                                                        int tid, int cw) {
  constexpr int CPC = 128 / ES; /* columns per chunk */
  constexpr int NCH = WN / CPC;
  constexpr int JPC = CPC / 8;
  static_assert(NCH >= 1 && WN % CPC == 0, "whole chunks");
  const int r0 = warp * 16 + lane / 4;
  const int64_t row_bytes = (int64_t)n * ES;
  /* unrolled: a chunk index known at compile time keeps acc in registers */
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
    const uint32_t buf = bufs + (NBUF == 2 ? (seq & 1u) * (uint32_t)LOOM_SM90_EPI_BUF : 0u);
    loom__wg_sync(cw); /* every thread is done reading this buffer's previous chunk */
    loom__epi_chunk<ES, JPC, LOOM_ACT_NONE>(acc, buf, ch, col0, ct, bias, n, lane, r0);
    loom__wg_sync(cw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int q = tid + 128 * i, r = q / 8, u = q % 8;
      const int32_t row = row0 + r, col = col0 + ch * CPC + u * (16 / ES);
      if (row < m && col < n) {
        const int2 o = __ldcg(origin + row);
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(buf + r * 128 + (((uint32_t)u ^ (uint32_t)(r & 7)) << 4)));
        *(uint4 *)(dst[o.x] + (int64_t)o.y * row_bytes + (int64_t)col * ES) = v;
      }
    }
    ++seq;
  }
}

/* The epilogue from registers (hooked kernels that route rows, reduce, or
 * cannot store with TMA): each thread stores its bf16x2 / half2 / float2
 * pairs, masked at m_end (m, or a grouped GEMM's group end) and n (args.n,
 * or the SwiGLU epilogue's n / 2: also C's row length), to the row's
 * destination (loom_gemm_row_dst); bias: args.bias or its group's row.
 * ACT: the activation, a compile-time constant (epilogue.cuh). */
template <bool HOOKS, int WN, int ACT>
static __device__ __forceinline__ void loom__epi_regs(const float *acc, const loom_sm90_args_t &args, int32_t row0,
                                                     int32_t col0, int32_t m_end, int32_t n, const void *bias,
                                                     int warp, int lane) {
  const int ct = args.c_type;
  const int rbase = row0 + warp * 16 + lane / 4;
  const int cbase = col0 + (lane % 4) * 2;
  int reduce = 0;
  if (HOOKS) reduce = args.hooks.epilogue == LOOM_EPI_REDUCE;
  const int st = loom__gemm_store_type<HOOKS>(args.hooks, ct);
  const int64_t poff = loom__gemm_parity_off<HOOKS>(args.hooks);
#pragma unroll
  for (int j = 0; j < WN / 8; ++j) {
    const int col = cbase + j * 8;
    if (col < n) {
      float b0, b1;
      loom__gemm_bias2(bias, col, ct, &b0, &b1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = rbase + h * 8;
        if (row < m_end) {
          int64_t r;
          void *base = loom_gemm_row_dst<HOOKS>(args.c, args.hooks, args.m, row, &r, poff);
          float v0 = acc[j * 4 + h * 2] + b0, v1 = acc[j * 4 + h * 2 + 1] + b1;
          loom__gemm_act2<ACT>(&v0, &v1);
          loom__gemm_store2(base, r * n + col, st, v0, v1, reduce);
        }
      }
    }
  }
}

/* A consumer warp is done with stage s: tell this block's producer and, in a
 * pair, the peer's producer (it multicasts into this block's stage too).
 * empty_peer: the peer's empty barriers (loom__cluster_addr, computed once:
 * mapa inside the main loop makes ptxas serialise the wgmma, C7518). */
template <int CL>
static __device__ __forceinline__ void loom__sm90_release(uint32_t empty, uint32_t empty_peer, int s) {
  loom__mbar_arrive(empty + 8 * s);
  if (CL > 1) loom__mbar_arrive_remote(empty_peer + 8 * s);
}

/* Segment i of this block (tile_order.h). Without stream-K (SK false) the
 * plain persistent walk over whole tiles (or, with clusters of CL blocks,
 * over steps of CL tiles stacked along m), which the compiler sees whole. */
template <bool SK, int CL>
static __device__ __forceinline__ int loom__sm90_segment(const loom_work_t *w, int i, loom_segment_t *sg,
                                                        int32_t tiles) {
  if (SK) return loom__work_segment(w, (int32_t)blockIdx.x, i, sg);
  /* clusters of CL blocks walk the steps together (a step = CL tiles) */
  sg->step = (int32_t)blockIdx.x / CL + i * ((int32_t)gridDim.x / CL);
  sg->k0 = 0, sg->k1 = w->kblocks;
  sg->sk = 0, sg->sk_tile = -1, sg->first = sg->last = (int32_t)blockIdx.x;
  return sg->step < tiles;
}

/* The dynamic schedule (a grouped GEMM on arriving rows): the producer
 * takes the next step from the launch's counter (steps go to the blocks
 * that are running, not to ones that start late) and hands it to the
 * consumers through a ring of LOOM_SM90_RING entries (full: the producer's
 * arrival; empty: the 8 consumer warps'). Past the last tile it hands -1
 * and both sides stop. Returns 1 with *sg set, 0 at the end. */
static __device__ __forceinline__ int loom__ring_put(const loom_work_t *w, uint32_t *next, int32_t tiles,
                                                    volatile int32_t *steps, uint32_t full, uint32_t empty, int *slot,
                                                    uint32_t *phase, loom_segment_t *sg) {
  loom__mbar_wait(empty + 8 * *slot, *phase ^ 1);
  int32_t step = (int32_t)atomicAdd(next, 1u);
  if (step >= tiles) step = -1;
  steps[*slot] = step;
  loom__mbar_arrive(full + 8 * *slot); /* (release at CTA scope: the step is visible to the waiters) */
  if (++*slot == LOOM_SM90_RING) *slot = 0, *phase ^= 1;
  sg->step = step, sg->k0 = 0, sg->k1 = w->kblocks;
  sg->sk = 0, sg->sk_tile = -1, sg->first = sg->last = (int32_t)blockIdx.x;
  return step >= 0;
}

/* A consumer warp's side of the ring: the step (warp-uniform: a shuffle,
 * ptxas C7518), then lane 0 frees the entry. */
static __device__ __forceinline__ int loom__ring_get(const loom_work_t *w, volatile int32_t *steps, uint32_t full,
                                                    uint32_t empty, int lane, int *slot, uint32_t *phase,
                                                    loom_segment_t *sg) {
  loom__mbar_wait(full + 8 * *slot, *phase);
  const int32_t step = __shfl_sync(0xffffffffu, steps[*slot], 0);
  __syncwarp();
  if (lane == 0) loom__mbar_arrive(empty + 8 * *slot);
  if (++*slot == LOOM_SM90_RING) *slot = 0, *phase ^= 1;
  sg->step = step, sg->k0 = 0, sg->k1 = w->kblocks;
  sg->sk = 0, sg->sk_tile = -1, sg->first = sg->last = (int32_t)blockIdx.x;
  return step >= 0;
}

/* Where step `step` puts a block (or, with clusters, this block of the
 * pair): tile row tm and column tn, tile id t (hooks' signals), its first
 * row `row` and the end of its rows `end` (m; a grouped GEMM's tile: its
 * group's end) and the group g (0 without GR). */
typedef struct loom__sm90_tile {
  int32_t t, tm, tn, row, end, g;
} loom__sm90_tile_t;

/* UNIFORM: the caller is a whole warp (consumers): the grouped tile's
 * fields go through a shuffle so that ptxas sees them warp-uniform (C7518:
 * it serialises the wgmma otherwise); the producer's single thread must not
 * shuffle. */
template <bool GR, int BM, int CL, bool UNIFORM>
static __device__ __forceinline__ loom__sm90_tile_t loom__sm90_tile(const loom_sm90_args_t &args, int32_t step,
                                                                     uint32_t crank, const int32_t *prefix) {
  loom__sm90_tile_t tl;
  if constexpr (GR) {
    int g, tn;
    int64_t row0, rows;
    loom__grouped_tile_at(args.group_off, prefix, args.groups, args.m, BM, args.order.tiles_n, args.group_band, step,
                          &g, &row0, &rows, &tn);
    tl.t = step, tl.tm = 0, tl.tn = tn, tl.g = g;
    tl.row = (int32_t)row0, tl.end = (int32_t)(row0 + rows);
    if (UNIFORM) {
      tl.tn = __shfl_sync(0xffffffffu, tl.tn, 0);
      tl.g = __shfl_sync(0xffffffffu, tl.g, 0);
      tl.row = __shfl_sync(0xffffffffu, tl.row, 0);
      tl.end = __shfl_sync(0xffffffffu, tl.end, 0);
    }
  } else {
    tl.t = loom__tile_at(&args.order, step);
    loom__cluster_coords(&args.order, tl.t, (int32_t)crank, CL, &tl.tm, &tl.tn);
    tl.row = tl.tm * BM, tl.end = args.m, tl.g = 0;
  }
  return tl;
}

/* A grouped GEMM's tile prefix (grouped_schedule.h, loom__grouped_prefix)
 * into prefix[0..G] (shared memory), by one warp: 32 groups at a time, a
 * shuffle scan of their tile counts. */
static __device__ __forceinline__ void loom__grouped_prefix_warp(const loom_sm90_args_t &args, int bm,
                                                                 int32_t *prefix, int lane) {
  int32_t carry = 0;
  for (int base = 0; base < args.groups; base += 32) {
    const int g = base + lane;
    int32_t v = 0;
    if (g < args.groups) {
      int64_t lo, hi;
      loom__grouped_bounds(args.group_off, g, args.m, &lo, &hi);
      v = loom__grouped_tiles(hi - lo, bm, args.order.tiles_n);
    }
    int32_t x = v; /* inclusive scan over the warp */
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int32_t y = __shfl_up_sync(0xffffffffu, x, d);
      if (lane >= d) x += y;
    }
    if (g < args.groups) prefix[g] = carry + x - v;
    carry += __shfl_sync(0xffffffffu, x, 31);
  }
  if (lane == 0) prefix[args.groups] = carry;
}

/* The epoch a grouped GEMM on arriving rows runs for (its own last block
 * publishes it, so every read before that gives the same value). */
static __device__ __forceinline__ uint32_t loom__arrival_epoch(const loom_grouped_arrival_t &w) {
  return loom__epoch_begin(w.epoch);
}

/* The producer's wait for the rows of a grouped tile (group g, rows [r0,
 * r1)): every source whose segment of the group overlaps them has sent all
 * of it. 0 when a wait expired (recorded: the source, the group's column). */
static __device__ __forceinline__ int loom__arrival_wait(const loom_sm90_args_t &args, uint32_t e, int g, int64_t r0,
                                                         int64_t r1) {
  const loom_grouped_arrival_t &w = args.arrive;
  int64_t lo, hi;
  loom__grouped_bounds(args.group_off, g, args.m, &lo, &hi);
  const int64_t col = (int64_t)w.first + g;
  int64_t at = lo;
  for (int s = loom__grouped_arrival_next(w.rows_from + col, w.stride, w.sources, 0, &at, r0, r1); s < w.sources;
       s = loom__grouped_arrival_next(w.rows_from + col, w.stride, w.sources, s + 1, &at, r0, r1))
    if (!loom__signal_wait(&w.comm, w.arrived + (int64_t)s * w.stride + col, e, s, (uint32_t)col, w.site_arrived))
      return 0;
  return 1;
}

/* Takes a stream-K ticket: the number of contributors before this one
 * (acq_rel at gpu scope, after this block's partial stores and fence). */
static __device__ __forceinline__ uint32_t loom__ticket(uint32_t *p) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
}

/* The SwiGLU epilogue's pairing, in place: a warpgroup's WN columns hold,
 * per 128, 64 gate columns then the 64 up columns of the same outputs
 * (the producer loads B_g's rows so: loom__glu_load_b), i.e. fragment
 * groups j in [16q, 16q + 8) gate and j + 8 up. Output group 8q + jj =
 * silu(gate) x up: acc's first WN/4 floats (the first WN/16 groups of 4)
 * then hold a WN/2-wide tile in the same fragment layout (output column
 * 64q + 8jj + 2 (lane % 4) + e). Each write lands on an entry already read
 * (8q + jj <= 16q + jj). */
template <int WN>
static __device__ __forceinline__ void loom__glu_pairs(float *acc) {
#pragma unroll
  for (int q = 0; q < WN / 128; ++q)
#pragma unroll
    for (int jj = 0; jj < 8; ++jj)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float g = acc[(16 * q + jj) * 4 + r], u = acc[(16 * q + 8 + jj) * 4 + r];
        acc[(8 * q + jj) * 4 + r] = g / (1.0f + __expf(-g)) * u;
      }
}

/* The SwiGLU epilogue's B stage (bn 256, B [G, n, k]): four boxes of 64
 * rows, gate rows [128 tn + 64 b, +64) at stage rows 128 b and up rows
 * n/2 + the same at 128 b + 64, for b = 0, 1: each consumer's 128-column
 * halves then pair gate and up of the same outputs (loom__glu_pairs). */
static __device__ __forceinline__ void loom__glu_load_b(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                        int32_t kb, int32_t tn, int32_t half, int32_t g) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    loom__tma_load_3d(dst + (2 * b) * 8192, map, bar, kb * LOOM_SM90_BK, tn * 128 + 64 * b, g);
    loom__tma_load_3d(dst + (2 * b + 1) * 8192, map, bar, kb * LOOM_SM90_BK, half + tn * 128 + 64 * b, g);
  }
}

#endif /* LOOM_SM90A */

/* ---- the kernel ------------------------------------------------------- */

/* BM: tile rows, 128 (the consumer warpgroups split the rows) or 64 (the
 * decode variant: they split the columns, sm90_layout.h); TYPE:
 * loom_dtype_t of A and B; TB: 0 B [n,k] (K-major), 1 B [k,n] (MN-major).
 * The plain kernels store C through shared memory and TMA (loom__epi_tma);
 * the hooked ones from registers (row routing, atomics, per-tile signals).
 * CL: blocks per cluster along m (1, or 2: the pair shares each B k-block,
 * each block loading half of it multicast to both). */
template <int BM, int BN, int STAGES, int TYPE, int TB, bool HOOKS, bool SK, int CL, int ACT, bool GR = false>
__global__ void __launch_bounds__(LOOM_SM90_THREADS, 1)
    loom__gemm_sm90_kernel(const __grid_constant__ CUtensorMap tma_a,
                          const __grid_constant__ CUtensorMap tma_b,
                          const __grid_constant__ CUtensorMap tma_c,
                          const __grid_constant__ loom_sm90_args_t args) {
#ifdef LOOM_SM90A
  static_assert(BM == 128 || (BM == 64 && CL == 1), "64-row tiles: no clusters");
  static_assert(HOOKS || ACT == LOOM_ACT_NONE, "only hooked kernels apply an activation");
  static_assert(!GR || (!HOOKS && !SK && CL == 1), "grouped GEMMs: plain, data-parallel, no clusters");
  constexpr int A_BYTES = LOOM_SM90_A_BYTES(BM);
  constexpr int B_BYTES = LOOM_SM90_B_BYTES(BN);
  constexpr int WN = BM == 128 ? BN : BN / 2; /* columns of a consumer warpgroup */
  /* bytes the TMA delivers per stage: B [n, k] loads bn rows; B [k, n]
   * whole boxes of 64 columns (bn 224: 4 boxes, the last one half past the
   * tile, so the stage is sized for 256) */
  constexpr uint32_t B_TX = LOOM_SM90_B_TX(BN, TB);
  constexpr uint32_t STAGE_TX = A_BYTES + B_TX;
  const bool tma_epi = !HOOKS || args.epi_tma != 0;
  /* hooked stream-K: waits and the TMA epilogue into C only (above) */
  constexpr bool WAIT_ONLY = HOOKS && SK;
  constexpr int EPI_BUFS = LOOM_SM90_EPI_BUFS(BM, BN);
  constexpr int EPI_BYTES = LOOM_SM90_EPI_BYTES(BM, BN, 0); /* hooked kernels may store with TMA too */
  /* 64-row tiles: a consumer waits for each k-block's wgmma before freeing
   * its stage (instead of keeping one group in flight): the math of a
   * k-block is a quarter of its memory time there, and a stage freed one
   * k-block earlier is one more stage of B on its way from memory */
  constexpr bool DRAIN = BM == 64;
  extern __shared__ uint8_t loom_smem_raw[];
  /* 1024-aligned by pointer arithmetic on the __shared__ array (not through
   * an integer cast of its generic address), so that the pointers derived
   * from it (the abort flag, the stream-K ticket) stay in the shared state
   * space: ld/st.shared instead of generic strong loads */
  uint8_t *smem = loom_smem_raw + ((1024u - (loom__smem_u32(loom_smem_raw) & 1023u)) & 1023u);
  const uint32_t sa = loom__smem_u32(smem);
  const uint32_t sb = sa + STAGES * A_BYTES;
  const uint32_t sepi = sb + STAGES * B_BYTES;   /* 1024-aligned: 2 x EPI_BUFS buffers of 8 KiB */
  const uint32_t full = sepi + EPI_BYTES;        /* STAGES mbarriers of 8 bytes */
  const uint32_t empty = full + STAGES * 8;
  volatile int *abort_flag = (volatile int *)(smem + STAGES * (A_BYTES + B_BYTES) + EPI_BYTES + STAGES * 16);
  volatile uint32_t *ticket = (volatile uint32_t *)(abort_flag + 1); /* stream-K ticket, broadcast */
  int32_t *gprefix = (int32_t *)(smem + STAGES * (A_BYTES + B_BYTES) + EPI_BYTES + STAGES * 16 + 8); /* GR: [G + 1] */
  /* GR on arriving rows: the dynamic schedule's ring (steps, then a full
   * and an empty mbarrier per entry) after the prefix */
  const bool dyn = GR && args.arrive.epoch != NULL;
  uint8_t *ring = (uint8_t *)gprefix + (GR ? LOOM_SM90_GROUPED_PREFIX_BYTES(args.groups) : 0);
  volatile int32_t *ring_step = (volatile int32_t *)(ring + 2 * 8 * LOOM_SM90_RING);
  const uint32_t ring_full = loom__smem_u32(ring), ring_empty = ring_full + 8 * LOOM_SM90_RING;

  /* warp-uniform in the compiler's eyes (a shuffle), so that branches on it
   * do not serialize the wgmma (ptxas C7518) */
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  const int tid = threadIdx.x % 128;
  /* warp-uniform in the compiler's eyes too (tm and `active` depend on it;
   * ptxas C7518 otherwise) */
  const uint32_t crank = CL > 1 ? __shfl_sync(0xffffffffu, loom__cluster_rank(), 0) : 0;
  /* split-K reduced apart: the reduction, launched behind this kernel as a
   * programmatic dependent, may be scheduled once every block has started
   * (on SMs this grid leaves free; it waits for the whole grid first).
   * Not where tiles wait for signals: the SMs this grid leaves free are the
   * ones the kernels that set those signals run on (the copy engine's
   * signal kernels, a peer's too), and reduction blocks parked there until
   * this grid ends would hold them off for good (two H200s, AllGather+GEMM:
   * every rank's wait expired). There the reduction starts when the grid
   * has ended. */
  if (SK && args.sk_reduce && !(HOOKS && args.hooks.wait_signals))
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      loom__mbar_init(full + 8 * s, 1);
      /* lane 0 of each of the 8 consumer warps of every block of the
       * cluster: a stage is refilled (partly by the peer's multicast) only
       * when all of them are done with it */
      loom__mbar_init(empty + 8 * s, 8 * CL);
    }
    if (dyn)
      for (int s = 0; s < LOOM_SM90_RING; ++s) loom__mbar_init(ring_full + 8 * s, 1), loom__mbar_init(ring_empty + 8 * s, 8);
    *abort_flag = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (GR && threadIdx.x >= 32 && threadIdx.x < 64) {
    /* rows that arrive: the offsets exist once the sender's layout is out
     * (a wait that expired: no tiles, the comm's error set) */
    int ok = 1;
    if (args.arrive.epoch && threadIdx.x == 32)
      ok = loom__signal_wait(&args.arrive.comm, args.arrive.ready, loom__arrival_epoch(args.arrive), -1, 0u,
                             args.arrive.site_ready);
    ok = __shfl_sync(0xffffffffu, ok, 0);
    if (ok) loom__grouped_prefix_warp(args, BM, gprefix, (int)threadIdx.x - 32);
    else if (threadIdx.x == 32) gprefix[args.groups] = 0;
  }
  if (CL > 1) loom__cluster_sync(); /* the peer's barriers exist before anything targets them */
  __syncthreads();                  /* (and tells the compiler the block is converged; GR: the prefix is written) */
  const int32_t tiles = GR ? gprefix[args.groups] : args.work.tiles;

  if (wg == 0) {
    /* ---- producer ---- */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&tma_a) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&tma_b) : "memory");
      int stage = 0;
      uint32_t phase = 0;
      int aborted = 0;
      const uint32_t arrive_e = GR && args.arrive.epoch ? loom__arrival_epoch(args.arrive) : 0u;
      loom_segment_t sg;
      int rslot = 0;
      uint32_t rphase = 0;
      for (int i = 0; dyn ? loom__ring_put(&args.work, args.arrive.next, tiles, ring_step, ring_full, ring_empty,
                                           &rslot, &rphase, &sg)
                          : loom__sm90_segment<SK, CL>(&args.work, i, &sg, tiles);
           ++i) {
        const loom__sm90_tile_t tl = loom__sm90_tile<GR, BM, CL, false>(args, sg.step, crank, gprefix);
        const int tn = tl.tn;
        /* a cluster's last tile row may lie past m (odd tile rows): no A */
        const bool has_a = CL == 1 || tl.row < args.m;
        if (HOOKS && args.hooks.wait_signals && !aborted) {
          if (!loom__gemm_hook_wait(args.hooks, args.m, tl.tm, BM)) {
            aborted = 1;
            *abort_flag = 1;
          }
          /* the acquired data is read next by the TMA (async proxy) */
          asm volatile("fence.proxy.async.global;" ::: "memory");
        }
        if (GR && args.arrive.epoch && !aborted) {
          /* (an expired wait: the loads go on over stale rows, in bounds; C
           * is unspecified and the comm's error tells) */
          aborted = !loom__arrival_wait(args, arrive_e, tl.g, tl.row, tl.row + BM < tl.end ? tl.row + BM : tl.end);
          asm volatile("fence.proxy.async.global;" ::: "memory");
        }
        for (int kb = sg.k0; kb < sg.k1; ++kb) {
          const uint32_t fb = full + 8 * stage;
          loom__mbar_wait(empty + 8 * stage, phase ^ 1);
          if (HOOKS && aborted && CL == 1) {
            /* no data: consumers run on and skip their stores. (In a pair
             * the loads go on, stale A and all: the peer's stage needs this
             * block's half of B, and the stores are skipped anyway.) */
            loom__mbar_arrive(fb);
          } else {
            loom__mbar_expect_tx(fb, has_a ? STAGE_TX : B_TX);
            if (has_a)
              loom__tma_load_2d(sa + stage * A_BYTES, &tma_a, fb, kb * LOOM_SM90_BK, tl.row);
            const uint32_t dst = sb + stage * B_BYTES;
            if (GR && TB == 0 && BN == 256 && args.glu) {
              loom__glu_load_b(dst, &tma_b, fb, kb, tn, args.n / 2, tl.g);
            } else if (GR) {
              /* B_g: the group is B's third coordinate */
              if (TB == 0) {
                loom__tma_load_3d(dst, &tma_b, fb, kb * LOOM_SM90_BK, tn * BN, tl.g);
              } else {
#pragma unroll
                for (int j = 0; j < (BN + 63) / 64; ++j)
                  loom__tma_load_3d(dst + j * 8192, &tma_b, fb, tn * BN + j * 64, kb * LOOM_SM90_BK, tl.g);
              }
            } else if (CL == 1) {
              if (TB == 0) {
                loom__tma_load_2d(dst, &tma_b, fb, kb * LOOM_SM90_BK, tn * BN);
              } else {
#pragma unroll
                for (int j = 0; j < (BN + 63) / 64; ++j)
                  loom__tma_load_2d(dst + j * 8192, &tma_b, fb, tn * BN + j * 64, kb * LOOM_SM90_BK);
              }
            } else {
              /* this block's half of B, to both blocks of the pair */
              const uint16_t mask = (uint16_t)((1u << CL) - 1u);
              if (TB == 0) {
                loom__tma_load_2d_mc(dst + crank * (BN / 2) * 128, &tma_b, fb, kb * LOOM_SM90_BK,
                                    tn * BN + (int)crank * (BN / 2), mask);
              } else {
#pragma unroll
                for (int j = 0; j < BN / 128; ++j) {
                  const int jj = (int)crank * (BN / 128) + j;
                  loom__tma_load_2d_mc(dst + jj * 8192, &tma_b, fb, tn * BN + jj * 64, kb * LOOM_SM90_BK, mask);
                }
              }
            }
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1;
    /* this warpgroup's rows / columns of the tile and where they sit in a
     * stage (BM 128: rows [64 cw, 64 cw + 64); BM 64: columns [cw WN,
     * (cw + 1) WN)); compile-time but for cw */
    const loom_sm90_wg_part_t part = loom__sm90_wg_part(BM, BN, TB, cw);
    const int warp = __shfl_sync(0xffffffffu, tid / 32, 0), lane = tid % 32;
    float acc[WN / 2];
    int stage = 0;
    uint32_t phase = 0;
    uint32_t epi_seq = 0; /* chunks stored so far (TMA epilogue buffer parity) */
    const uint32_t empty_peer = CL > 1 ? loom__cluster_addr(empty, crank ^ 1u) : 0;
    if (tma_epi && tid == 0) asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&tma_c) : "memory");
    loom_segment_t sg;
    int rslot = 0;
    uint32_t rphase = 0;
    for (int i = 0; dyn ? loom__ring_get(&args.work, ring_step, ring_full, ring_empty, lane, &rslot, &rphase, &sg)
                        : loom__sm90_segment<SK, CL>(&args.work, i, &sg, tiles);
         ++i) {
      const loom__sm90_tile_t tl = loom__sm90_tile<GR, BM, CL, true>(args, sg.step, crank, gprefix);
      const int row0 = tl.row + part.row;
      const int col0 = tl.tn * BN + part.col;
      const bool active = row0 < tl.end; /* all 64 rows out of range: skip the math */
      int prev = 0;
      for (int kb = sg.k0; kb < sg.k1; ++kb) {
        loom__mbar_wait(full + 8 * stage, phase);
        if (active) {
          loom__wgmma_fence();
          const uint32_t a0 = sa + stage * A_BYTES + part.a_off;
          const uint32_t b0 = sb + stage * B_BYTES + part.b_off;
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const uint64_t da = loom__wgmma_desc(a0 + kk * 32, 16, 1024);
            const uint64_t db = TB == 0 ? loom__wgmma_desc(b0 + kk * 32, 16, 1024)
                                        : loom__wgmma_desc(b0 + kk * 2048, 8192, 1024);
            loom__wgmma_step<WN, TYPE, TB>(acc, da, db, (kb != sg.k0) | (kk != 0));
          }
          loom__wgmma_commit();
          if (DRAIN) {
            loom__wgmma_wait<0>();
            if (lane == 0) loom__sm90_release<CL>(empty, empty_peer, stage);
          } else {
            loom__wgmma_wait<1>();
            if (kb > sg.k0 && lane == 0) loom__sm90_release<CL>(empty, empty_peer, prev);
          }
        } else if (lane == 0) {
          loom__sm90_release<CL>(empty, empty_peer, stage);
        }
        prev = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      if (active) {
        if (!DRAIN) loom__wgmma_wait<0>();
        loom__fence_regs<WN / 2>(acc);
        if (!DRAIN && lane == 0) loom__sm90_release<CL>(empty, empty_peer, prev);
      }

      /* ---- stream-K: a shared tile is finished by its last contributor ---- */
      bool finish = true;
      /* the segment again, so that its fields need no registers across the
       * main loop (register pressure next to 128 accumulators) */
      if (SK) loom__sm90_segment<SK, CL>(&args.work, i, &sg, tiles);
      if (SK && sg.sk) {
        /* this block's partial -> its slot (each thread its own fragment,
         * 16-byte stores, 2 KiB contiguous per warpgroup and store; a slot
         * is 2 warpgroups x 64 x WN fp32 = BM x BN) */
        const size_t slab = (size_t)64 * WN;
        float4 *mine = (float4 *)(args.sk_ws + ((size_t)sg.slot * 2 + cw) * slab);
        if (active) {
#pragma unroll
          for (int q = 0; q < WN / 8; ++q)
            __stcg(mine + q * 128 + tid, make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]));
        }
        if (args.sk_reduce) {
          /* reduced apart: the partial is this unit's whole output (the
           * kernel's end makes it visible to the reduction) */
          continue;
        }
        __threadfence();
        asm volatile("bar.sync 2, 256;" ::: "memory");
        if (threadIdx.x == 128) *ticket = loom__ticket(args.sk_count + sg.sk_tile);
        asm volatile("bar.sync 2, 256;" ::: "memory");
        /* warp-uniform in the compiler's eyes (ptxas C7518, as for wg) */
        finish = __shfl_sync(0xffffffffu, (int)(*ticket == (uint32_t)(sg.nseg - 1)), 0) != 0;
        if (finish) {
          __threadfence();
          if (active) {
            /* sum of the contributors' partials in k order (own one too,
             * read back): the same bits whichever block arrives last */
            for (int c = 0; c < sg.nseg; ++c) {
              const float4 *src =
                  (const float4 *)(args.sk_ws + ((size_t)(sg.slot0 + c * sg.slot_step) * 2 + cw) * slab);
              const bool first = c == 0;
              /* LOOM_SK_LOADS loads in flight at a time: a whole slot at once
               * would need WN/2 more registers next to the accumulators */
              constexpr int SKL = (WN / 8) % LOOM_SK_LOADS == 0 ? LOOM_SK_LOADS : LOOM_SK_LOADS / 2;
              static_assert((WN / 8) % SKL == 0, "whole groups of loads");
#pragma unroll
              for (int q0 = 0; q0 < WN / 8; q0 += SKL) {
                float4 v[SKL];
#pragma unroll
                for (int q = 0; q < SKL; ++q) v[q] = __ldcg(src + (q0 + q) * 128 + tid);
#pragma unroll
                for (int q = 0; q < SKL; ++q) {
                  float *a = acc + 4 * (q0 + q);
                  a[0] = first ? v[q].x : a[0] + v[q].x;
                  a[1] = first ? v[q].y : a[1] + v[q].y;
                  a[2] = first ? v[q].z : a[2] + v[q].z;
                  a[3] = first ? v[q].w : a[3] + v[q].w;
                }
                asm volatile("" ::: "memory"); /* keeps the next loads after these adds */
              }
            }
          }
          if (threadIdx.x == 128) args.sk_count[sg.sk_tile] = 0; /* ready for the next launch */
        }
      }

      /* ---- epilogue: registers -> global ---- */
      const bool skip = HOOKS && __shfl_sync(0xffffffffu, *abort_flag, 0) != 0; /* warp-uniform (C7518) */
      /* a grouped GEMM's short last tile row stores from registers, masked
       * at its group's end: a TMA box would overwrite the next group's rows */
      const bool whole = !GR || row0 + 64 <= tl.end;
      const void *bias = GR && args.bias ? (const void *)((const char *)args.bias +
                                                          (size_t)tl.g * (size_t)args.n * (args.c_type == LOOM_FP32 ? 4u : 2u))
                                         : args.bias;
      if constexpr (GR) {
        if (args.scatter_origin) {
          /* the rows to their origins (a combine in the epilogue), whole and short tiles alike */
          const uint32_t bufs = sepi + (uint32_t)(cw * EPI_BUFS * LOOM_SM90_EPI_BUF);
          if (active && args.c_type == LOOM_FP32)
            loom__epi_scatter<WN, 4, EPI_BUFS>(acc, bufs, epi_seq, row0, col0, args.c_type, bias, tl.end, args.n,
                                               args.scatter_origin, args.scatter_dst, warp, lane, tid, cw);
          else if (active)
            loom__epi_scatter<WN, 2, EPI_BUFS>(acc, bufs, epi_seq, row0, col0, args.c_type, bias, tl.end, args.n,
                                               args.scatter_origin, args.scatter_dst, warp, lane, tid, cw);
          continue;
        }
      }
      if constexpr (GR && TB == 0 && BN == 256) {
        if (args.glu) {
          /* SwiGLU: a tile of bn/2 output columns, C [m, n/2] */
          loom__glu_pairs<WN>(acc);
          const int32_t ocol = tl.tn * (BN / 2) + part.col / 2, on = args.n / 2;
          const uint32_t bufs = sepi + (uint32_t)(cw * EPI_BUFS * LOOM_SM90_EPI_BUF);
          if (active && whole)
            loom__epi_tma<WN / 2, 2, EPI_BUFS, ACT>(acc, &tma_c, bufs, epi_seq, row0, ocol, args.c_type, NULL,
                                                   args.c, tl.end, on, warp, lane, tid, cw, NULL, 0);
          else if (active)
            loom__epi_regs<false, WN / 2, ACT>(acc, args, row0, ocol, tl.end, on, NULL, warp, lane);
          continue;
        }
      }
      if (tma_epi && finish && active && !skip && whole) {
        const uint32_t bufs = sepi + (uint32_t)(cw * EPI_BUFS * LOOM_SM90_EPI_BUF);
        const CUtensorMap *adds =
            HOOKS && !WAIT_ONLY && args.epi_tma == 2 ? (const CUtensorMap *)args.hooks.dst_maps : NULL;
        const int32_t rpd = HOOKS ? (int32_t)args.hooks.rows_per_dst : 0;
        /* the activation is the kernel's template argument (one instantiation
         * per activation: the kernel holds only its own epilogue; the
         * launcher says why) */
        if (args.c_type == LOOM_FP32)
          loom__epi_tma<WN, 4, EPI_BUFS, ACT>(acc, &tma_c, bufs, epi_seq, row0, col0, args.c_type, bias, args.c,
                                             tl.end, args.n, warp, lane, tid, cw, adds, rpd);
        else
          loom__epi_tma<WN, 2, EPI_BUFS, ACT>(acc, &tma_c, bufs, epi_seq, row0, col0, args.c_type, bias, args.c,
                                             tl.end, args.n, warp, lane, tid, cw, adds, rpd);
      } else if (!WAIT_ONLY && (!tma_epi || !whole) && finish && active && !skip) {
        loom__epi_regs<HOOKS, WN, ACT>(acc, args, row0, col0, tl.end, args.n, bias, warp, lane);
      }
      if (HOOKS && !WAIT_ONLY && (args.hooks.tile_signal || args.hooks.dst_signal) && finish) {
        /* both consumer warpgroups' stores of this tile (TMA stores: complete,
         * then ordered with the generic proxy), then one release */
        if (tma_epi && tid == 0) {
          loom__bulk_wait_all();
          asm volatile("fence.proxy.async.global;" ::: "memory");
        }
        __threadfence_system();
        asm volatile("bar.sync 1, 256;" ::: "memory");
        if (threadIdx.x == 128 && !(*abort_flag)) loom__gemm_hook_signal(args.hooks, args.m, tl.tm, BM, tl.t);
      }
    }
    /* the shared-memory buffers must outlive the TMA stores that read them */
    if (tma_epi && tid == 0) loom__bulk_wait_all();
  }
  /* no block leaves while its peer may still arrive on its barriers */
  if (CL > 1) loom__cluster_sync();
  if (GR && args.arrive.epoch) {
    /* the sender's grid complete before this one is (the stream's next
     * work follows both), then the call's epoch published by the last block */
    __syncthreads();
    if (threadIdx.x == 0) {
      const uint32_t e = loom__arrival_epoch(args.arrive);
      asm volatile("griddepcontrol.wait;" ::: "memory");
      if (loom__last_arrival(&args.arrive.epoch->blocks_done, gridDim.x)) {
        *args.arrive.next = 0u; /* the next launch takes its tiles from 0 */
        *(volatile uint32_t *)&args.arrive.epoch->epoch = e;
      }
    }
  }
#endif /* LOOM_SM90A */
}

/* ---- instantiation ---------------------------------------------------- */

typedef void (*loom__sm90_kernel_t)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const loom_sm90_args_t);

/* The instantiation of one (tile, types, schedule) for the hooks' activation
 * `act` (plain kernels: none). */
template <int BM, int BN, int S, int TYPE, int TB, bool HOOKS, bool SK, int CL>
static loom__sm90_kernel_t loom__sm90_act(int act) {
  if constexpr (HOOKS) {
    switch (act) {
      case LOOM_ACT_RELU: return loom__gemm_sm90_kernel<BM, BN, S, TYPE, TB, true, SK, CL, LOOM_ACT_RELU>;
      case LOOM_ACT_GELU_TANH: return loom__gemm_sm90_kernel<BM, BN, S, TYPE, TB, true, SK, CL, LOOM_ACT_GELU_TANH>;
      case LOOM_ACT_GELU_ERF: return loom__gemm_sm90_kernel<BM, BN, S, TYPE, TB, true, SK, CL, LOOM_ACT_GELU_ERF>;
      default: break;
    }
  }
  return loom__gemm_sm90_kernel<BM, BN, S, TYPE, TB, HOOKS, SK, CL, LOOM_ACT_NONE>;
}

template <int BM, int BN, int TYPE, int TB, bool HOOKS>
static loom__sm90_kernel_t loom__sm90_pick3(int sk, int cl, int act) {
  constexpr int S = LOOM_SM90_STAGES(BM, BN);
  /* stream-K / split-K: plain GEMMs, and hooked ones that only wait (at
   * bn 192 / 224 without an activation; NULL otherwise: the launcher never
   * asks) */
  if (sk) {
    if constexpr (!HOOKS || BN == 128 || BN == 256) return loom__sm90_act<BM, BN, S, TYPE, TB, HOOKS, true, 1>(act);
    /* bn 192 / 224: without an activation only (fewer kernels to build) */
    if (act == LOOM_ACT_NONE) return loom__gemm_sm90_kernel<BM, BN, S, TYPE, TB, true, true, 1, LOOM_ACT_NONE>;
    return NULL;
  }
  /* 64-row tiles: no clusters */
  if constexpr (BM == 64) {
    return loom__sm90_act<64, BN, S, TYPE, TB, HOOKS, false, 1>(act);
  } else {
    /* clusters for data-parallel GEMMs (hooked ones that only wait: the
     * launcher); bn 192 / 224: none (half of B is not whole boxes of [k, n]) */
    if constexpr (BN == 128 || BN == 256)
      if (cl == 2) return loom__sm90_act<128, BN, S, TYPE, TB, HOOKS, false, 2>(act);
    return loom__sm90_act<128, BN, S, TYPE, TB, HOOKS, false, 1>(act);
  }
}

/* The kernel of a configuration of group (BM, BN, TYPE): tb 1 for B [k, n];
 * hooks; sk: any stream-K / split-K tiles (hooked: wait-only hooks; at bn
 * 192 / 224 without an activation, else NULL); cl: blocks per cluster; act:
 * the hooks' activation (0 without hooks). */
template <int BM, int BN, int TYPE>
static loom__sm90_kernel_t loom__sm90_group(int tb, int hooks, int sk, int cl, int act) {
  /* 64-row tiles and bn 192 / 224: no clusters (half of B is not whole boxes of [k, n]) */
  if (BM == 64 || BN == 192 || BN == 224) cl = 1;
  if (hooks)
    return tb ? loom__sm90_pick3<BM, BN, TYPE, 1, true>(sk, cl, act) : loom__sm90_pick3<BM, BN, TYPE, 0, true>(sk, cl, act);
  return tb ? loom__sm90_pick3<BM, BN, TYPE, 1, false>(sk, cl, 0) : loom__sm90_pick3<BM, BN, TYPE, 0, false>(sk, cl, 0);
}

/* A group's function, loom__sm90_kernels_<BM>x<BN>_<T> (T: bf16 or fp16):
 * LOOM_SM90_GROUP_DECL declares it (the launcher's table), LOOM_SM90_GROUP
 * defines it, instantiating the group's kernels in that translation unit
 * (exactly one per group). */
#define LOOM_SM90_GROUP_FN(BM, BN, T) loom__sm90_kernels_##BM##x##BN##_##T
#define LOOM_SM90_GROUP_DECL(BM, BN, T) \
  loom__sm90_kernel_t LOOM_SM90_GROUP_FN(BM, BN, T)(int tb, int hooks, int sk, int cl, int act)
#define LOOM_SM90_TYPE_bf16 LOOM_BF16
#define LOOM_SM90_TYPE_fp16 LOOM_FP16
#define LOOM_SM90_GROUP(BM, BN, T)                                              \
  LOOM_SM90_GROUP_DECL(BM, BN, T) {                                             \
    return loom__sm90_group<BM, BN, LOOM_SM90_TYPE_##T>(tb, hooks, sk, cl, act); \
  }

/* The grouped GEMMs (GR: plain, data-parallel, no clusters): tiles 64 or
 * 128 x 128 or 256, B [G, n, k] or [G, k, n]; one translation unit per A/B
 * type, gemm_sm90_grouped_<type>.cu (LOOM_SM90_GROUPED), whose function the
 * grouped launcher (gemm_grouped_sm90.cu) asks for a configuration's kernel. */
template <int BM, int BN, int TYPE>
static loom__sm90_kernel_t loom__sm90_grouped_tb(int tb) {
  constexpr int S = LOOM_SM90_STAGES(BM, BN);
  if (tb) return loom__gemm_sm90_kernel<BM, BN, S, TYPE, 1, false, false, 1, LOOM_ACT_NONE, true>;
  return loom__gemm_sm90_kernel<BM, BN, S, TYPE, 0, false, false, 1, LOOM_ACT_NONE, true>;
}
template <int TYPE>
static loom__sm90_kernel_t loom__sm90_grouped(int bm, int bn, int tb) {
  if (bm == 64) return bn == 256 ? loom__sm90_grouped_tb<64, 256, TYPE>(tb) : loom__sm90_grouped_tb<64, 128, TYPE>(tb);
  return bn == 256 ? loom__sm90_grouped_tb<128, 256, TYPE>(tb) : loom__sm90_grouped_tb<128, 128, TYPE>(tb);
}
#define LOOM_SM90_GROUPED_FN(T) loom__sm90_grouped_kernels_##T
#define LOOM_SM90_GROUPED_DECL(T) loom__sm90_kernel_t LOOM_SM90_GROUPED_FN(T)(int bm, int bn, int tb)
#define LOOM_SM90_GROUPED(T) \
  LOOM_SM90_GROUPED_DECL(T) { return loom__sm90_grouped<LOOM_SM90_TYPE_##T>(bm, bn, tb); }

#endif /* LOOM_GEMM_SM90_CUH */
