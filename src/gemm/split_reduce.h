/*
 * split_reduce.h - the second kernel of split-K "reduced apart"
 * (loom_gemm_config_t.sk_reduce = 1, sm90 kernel): the GEMM kernel's
 * split units each store their fp32 partial tile to their own workspace
 * slot and end there (no ticket, no fence, no finisher); this kernel,
 * launched right behind it as a programmatic dependent, sums every shared
 * tile's partials in split order, adds the bias, applies the activation,
 * converts and stores C. cuBLASLt does the same on narrow shapes (its
 * splitKreduce_kernel). Why: in the GEMM kernel the tile's last unit reads
 * every other unit's partial alone (~90 GB/s per SM) while the SMs around it
 * idle, and every unit pays a fence and a ticket; here all SMs read the
 * partials at once and the GEMM kernel's units end at their stores.
 *
 * Workspace (tile_order.h, split-K): unit u = split x sk_tiles + j, for
 * shared tile j (step dp_tiles + j of the order), writes slot u: two slabs
 * (consumer warpgroup cw = 0, 1) of 64 x WN fp32 in the wgmma fragment
 * layout, WN = bn for 128-row tiles (warpgroup cw: rows [64 cw, 64 cw + 64))
 * and bn / 2 for 64-row tiles (warpgroup cw: columns [cw bn/2, (cw+1) bn/2)),
 * sm90_layout.h's loom__sm90_wg_part. Inside a slab, thread t (0..127) of
 * the warpgroup stored its accumulators acc[4 q .. 4 q + 3] as float4
 * number q x 128 + t; acc[4 q + 2 h + e] is row 16 (t / 32) + (t % 32) / 4
 * + 8 h, column 8 q + 2 (t % 4) + e of the warpgroup's part.
 *
 * Hooked GEMMs that only wait (AllGather+GEMM: prologue waits, plain
 * stores into C) take it too: their partials are stored whatever the
 * waits gave, and the reduction stores nothing once the comm's abort word
 * is set (a prologue wait expired), so an expired call writes no C.
 *
 * The sum runs in split order 0, 1, ..., the same additions as the GEMM
 * kernel's finisher, then (sum + bias), the activation and one rounding as
 * its epilogue: both ways give the same bits.
 */
#ifndef LOOM_GEMM_SPLIT_REDUCE_H
#define LOOM_GEMM_SPLIT_REDUCE_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "loom.h"
#include "gemm/tile_order.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_split_reduce_args {
  const float *ws;          /* [sk_tiles x splits] slots of 2 x 64 x WN fp32 (above) */
  loom_tile_order_t order;  /* the GEMM's tile order (no clusters) */
  int32_t dp_tiles;         /* steps [0, dp_tiles) were whole tiles (not touched here) */
  int32_t sk_tiles, splits; /* shared tiles (steps dp_tiles ..), k ranges of each (>= 2) */
  int32_t bm, bn;           /* tile: 128 x 128..256 or 64 x 128/256 */
  int32_t m, n;             /* C [m, n] row-major */
  int32_t c_type;           /* loom_dtype_t of C and bias */
  int32_t activation;       /* loom_activation_t after the bias */
  void *c;
  const void *bias;         /* [n] or NULL */
  const uint32_t *abort_word; /* a hooked GEMM's comm abort word (nonzero once a wait of the comm
                               * expired: nothing is stored, as the GEMM kernel stores nothing
                               * after one); NULL for plain GEMMs */
} loom_split_reduce_args_t;

/* float4s of partials one split holds: sk_tiles x 2 slabs x 64 x WN / 4
 * (also the distance from one split's slots to the next split's). */
LOOM_HD int64_t loom__split_reduce_float4s(const loom_split_reduce_args_t *r) {
  return (int64_t)r->sk_tiles * 2 * 16 * (r->bm == 128 ? r->bn : r->bn / 2);
}

/* Launches the reduction of r on `stream` as a programmatic dependent of
 * the stream's previous kernel (the GEMM that wrote r.ws), grid sized to
 * the partials and capped at `sms` x 8 blocks. Launch errors only. */
loom_result_t loom__gemm_split_reduce(const loom_split_reduce_args_t *r, int sms, cudaStream_t stream);

/* Loads the reduction kernel's code now (once per device and process), so
 * that its first launch never loads a module while a hooked GEMM before it
 * waits for a peer (lazy loading would stall the launching thread until
 * the GPU is idle: a hooked GEMM released by that thread would time out). */
loom_result_t loom__gemm_split_reduce_preload(void);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_SPLIT_REDUCE_H */
