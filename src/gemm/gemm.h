/*
 * gemm.h - the GEMM engine (internal view): kernel configurations, the hooks
 * the fused operations plug into, and the launchers.
 *
 * loom_gemm (gemm.c) validates (gemm_validate.c), picks a path and a
 * configuration (a tuned one, or the model's: gemm_heuristic.h), and calls a
 * launcher. Paths:
 *   sm90   gemm_sm90.cuh: TMA -> mbarrier pipeline -> wgmma, one producer
 *          warpgroup and two consumer warpgroups (setmaxnreg), persistent
 *          grid sized from the SM count, tile order from tile_order.h.
 *   sm80   gemm_sm80.cuh: cp.async pipeline -> ldmatrix -> mma.sync m16n8k16,
 *          one block per 128 x bn tile, tile order from tile_order.h; on
 *          compute capability 8.x, and on 9.x/10.x+ where sm90 does not apply.
 *   base   cuBLASLt (src/baseline/baseline_gemm.c) below compute capability 8.0
 *          or when LOOM_GEMM_PATH=cublas.
 * The sm90 and sm80 kernel templates are instantiated in several translation
 * units each (gemm_sm90_<bm>x<bn>_<type>.cu, gemm_sm80_<type>.cu: a group of
 * configurations each, so that a parallel build compiles them side by side);
 * the path's launcher (gemm_sm90.cu, gemm_sm80.cu) finds a configuration's
 * kernel in its table of groups.
 * On either loom path, decode batches (m <= 64) may run the small-m kernel
 * (gemm_small_m.cu, config bm = 16), which streams the weight over every SM.
 * LOOM_GEMM_PATH=sm80 forces the sm80 path on any GPU >= 8.0 (tests,
 * comparisons); the launchers below can also be called directly.
 *
 * Hooks (loom_gemm_hooks_t) are compiled into a second instantiation of the
 * kernel (both paths), so a plain GEMM pays nothing for them:
 *   order      which tile a block takes next (tile_order.h)
 *   wait       before loading the A rows of tile row tm, the producer polls
 *              the signals of those rows (loom__tile_wait_chunk: chunks of
 *              rows, restarting at every shard) until each reaches the wait
 *              epoch (acquire, bounded by comm.timeout_ns;
 *              expiry records the wait in comm.err, the kernel stops
 *              storing and returns)
 *   epilogue   STORE without row_dst: the plain kernel's TMA-store epilogue
 *              into c (sm90); with row_dst, stores from registers: C rows go
 *              to row_dst[row / rows_per_dst] at row
 *              (row % rows_per_dst) (NULL table: the c argument), which may
 *              be a peer's LSA pointer; REDUCE: the same addresses, atomically
 *              added (red.global.add: f32, bf16x2, f16x2)
 *   signal     after a tile's stores are visible system-wide, tile_signal
 *              [tile id] (or dst_signal[d][tile id] for each destination d
 *              of its rows) is set to the signal epoch (st.release.sys) by
 *              one thread
 * Epochs come from the device (epoch_word) so that captured calls replay.
 */
#ifndef LOOM_GEMM_GEMM_H
#define LOOM_GEMM_GEMM_H

#include <stdint.h>
#include "loom.h"
#include "core/scratch.h"
#include "core/signal.h"
#include "gemm/tile_order.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wait sites of the GEMM engine (core/signal.h: ids 16..31). */
#define LOOM_SITE_GEMM_PROLOGUE 16 /* a hooked GEMM's prologue tile wait */

/* Kernel configuration (tuner-overridable). A config with only the first
 * four fields set ({bn, 0, 0, 0}) is a data-parallel GEMM. */
typedef struct loom_gemm_config {
  int bn;        /* tile columns: sm90 128, 192, 224 or 256 (bm 64: 128 or
                  * 256); sm80 128 or 256; bm 16: 0 (the kernel's own) */
  int stages;    /* pipeline depth; 0 = the most that fits for bn. bm=16 (the small-m kernel):
                    0 = the cp.async ring, 1 = register loads (small_m_layout.h) */
  int group;     /* GROUPED band height in tile rows; 0 = heuristic */
  int grid;      /* persistent blocks; 0 = SM count */
  int sk_tiles;  /* stream-K: the last sk_tiles steps of the order have their
                  * k-blocks shared by sk_blocks blocks (tile_order.h);
                  * 0 none, -1 all tiles */
  int sk_blocks; /* stream-K: blocks sharing them; 0 = the grid */
  int sk_splits; /* 0: stream-K (contiguous k ranges over sk_blocks blocks);
                  * >= 1: split-K instead, each shared tile cut into this many
                  * aligned k ranges, units round-robin over the grid
                  * (loom__gemm_split_count suggests one) */
  int cluster;   /* blocks per thread-block cluster along m: 0 or 1 none; 2:
                  * the pair computes two tiles stacked along m and each
                  * block loads half of their shared B k-block, multicast
                  * to both (plain data-parallel GEMMs with >= 2 tile rows;
                  * ignored elsewhere and with bm 64) */
  int bm;        /* tile rows: 0 or 128 (default), or 64: the decode variant
                  * (sm90_layout.h), whose two consumer warpgroups split the
                  * tile's columns and whose smaller A stage buys deeper B
                  * pipelines; any m, with stream-K / split-K (plain GEMMs),
                  * no clusters; hooked GEMMs take it too (data-parallel);
                  * the sm80 kernel ignores it. 16: the
                  * small-m kernel (gemm_small_m.cu, m <= 64, split-K of
                  * sk_splits, either path; loom__gemm_launch routes it) */
  int sk_reduce; /* split-K (sk_splits >= 2) of the sm90 kernel, plain or with hooks
                  * that only wait: 0 the tile's last unit sums the partials; 1
                  * every unit stores its partial and a second kernel sums them
                  * (split_reduce.h). Ignored elsewhere */
} loom_gemm_config_t;

typedef enum loom_gemm_epilogue {
  LOOM_EPI_STORE = 0,
  LOOM_EPI_REDUCE = 1,
  LOOM_EPI_BULK_ADD = 2 /* sm90: the TMA epilogue's chunks added (cp.reduce.async.bulk.tensor .add,
                         * in c_type) into dst_maps[row / rows_per_dst] at row % rows_per_dst */
} loom_gemm_epilogue_t;

/* Bytes of one tensor map of dst_maps (CUtensorMap: 128 bytes, 64-byte aligned). */
#define LOOM_GEMM_EPI_MAP_BYTES 128

typedef struct loom_gemm_hooks {
  /* tile order: kind, row_shift, schedule (tiles_m/n, group filled by the launcher) */
  loom_tile_order_t order;
  /* epochs: the values waited for and set are *epoch_word + wait_epoch and
   * *epoch_word + signal_epoch (epoch_word NULL: the host values alone); a
   * fused op points epoch_word at its plan's device call counter, so that a
   * captured call waits for and sets the epoch of each replay */
  const uint32_t *epoch_word;
  /* prologue wait (wait_signals NULL: none) */
  const uint32_t *wait_signals;  /* device array of signal words */
  uint32_t wait_epoch;
  int64_t wait_rows_per_signal;  /* rows of A each signal covers */
  int64_t wait_rows_per_shard;   /* signals restart at every shard of this many rows
                                  * (loom__tile_wait_chunk); 0: one shard */
  int wait_split_bands;          /* 1: split-K units go band by band of the order (group tile rows
                                  * x tiles_n tiles: loom_work_t.split_band), the order rows
                                  * arrive in, so that no unit waits behind one of a later band */
  /* epilogue */
  int epilogue;                  /* loom_gemm_epilogue_t */
  int activation;                /* loom_activation_t applied after the bias, before the store */
  void *const *row_dst;          /* device array [ndst] of C bases (may be LSA pointers); NULL: c */
  int64_t rows_per_dst;          /* rows per entry of row_dst (0: all rows in entry 0) */
  int64_t dst_parity_bytes;      /* double-buffered destinations: calls of odd epoch (the signal
                                  * epoch) store at row_dst[d] + dst_parity_bytes (0: one buffer) */
  int dst_fp32;                  /* 1: rows routed through row_dst are stored (or added) as fp32
                                  * partials whatever c_type (REDUCE: red.global.add.f32) */
  const void *dst_maps;          /* BULK_ADD: device array [ndst] of LOOM_GEMM_EPI_MAP_BYTES tensor
                                  * maps (loom__gemm_epi_map), each over [rows_per_dst, n] c_type;
                                  * rows_per_dst a multiple of 64 (a 64-row epilogue chunk then has
                                  * one destination) */
  /* per-tile signal after the tile is visible (both NULL: none) */
  uint32_t *tile_signal;         /* device array [tiles] (may be a peer's LSA pointer) */
  uint32_t *const *dst_signal;   /* device array [ndst] of signal arrays [tiles], one per
                                  * destination of rows_per_dst rows: a tile signals every
                                  * destination its rows belong to (loom__tile_dst_range), whether
                                  * or not row_dst routes them; replaces tile_signal when set */
  uint32_t signal_epoch;
  /* bounds the prologue wait and receives its expiry record */
  loom_dev_comm_t comm;
} loom_gemm_hooks_t;

/* Checks a GEMM description and its pointers' values (shapes > 0, n and k
 * multiples of 8, dtypes, 16-byte aligned A/B/C/bias, bias present iff
 * has_bias, C not overlapping A, B or the bias): LOOM_ERR_INVALID_ARGUMENT
 * naming `fn`, the argument and the value. No GPU (gemm_validate.c). */
loom_result_t loom__gemm_validate(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                  const void *c, const void *bias);
/* As loom__gemm_validate for a GEMM that writes no C of its own (the
 * BULK_ADD hooks: its outputs are the destinations' maps): the
 * description, a, b and the bias. */
loom_result_t loom__gemm_validate_no_c(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                       const void *bias);

/* The check of a hooked launch (loom__gemm_hooked): loom__gemm_validate_no_c
 * where the hooks write no C of the c argument's (BULK_ADD, or a row_dst
 * table that routes every row elsewhere: c is then neither written nor read,
 * and may be any buffer), else loom__gemm_validate. */
loom_result_t loom__gemm_validate_hooked(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                         const void *c, const void *bias, const loom_gemm_hooks_t *hooks);

/* The description part of loom__gemm_validate alone (plans of fused ops
 * check their GEMM before they have pointers). */
loom_result_t loom__gemm_validate_desc(const char *fn, const loom_gemm_desc_t *d);

/* loom__gemm_validate, then each of a, b, c and bias is memory the current
 * GPU can reach over the bytes the GEMM touches (core/ptr_check.h): what
 * every public GEMM entry point calls before it launches anything. */
loom_result_t loom__gemm_check_args(const char *fn, const loom_gemm_desc_t *d, const void *a, const void *b,
                                    const void *c, const void *bias);

/* Which kernel loom_gemm runs on the current device (LOOM_GEMM_PATH and the
 * compute capability decide). */
typedef enum { LOOM__PATH_BASE = 0, LOOM__PATH_SM90 = 1, LOOM__PATH_SM80 = 2 } loom__gemm_path_t;
loom_result_t loom__gemm_path(const loom_gemm_desc_t *d, loom__gemm_path_t *path_out);

/* The tile order of a launch: the hooks' order (kind, row shift, schedule)
 * or grouped, over tiles of bm x bn, band height `group`; checks the hooks'
 * order and wait arguments (LOOM_ERR_INVALID_ARGUMENT naming the field). */
loom_result_t loom__gemm_order(const loom_gemm_desc_t *d, const loom_gemm_hooks_t *hooks, int bm, int bn, int group,
                               loom_tile_order_t *order);

/* ---- tuning (gemm_tune.c) ---- */

/* The tuning-cache key of d on `path` ("sm90"/"sm80") with `sms` SMs; 0 if
 * it does not fit in size. */
int loom__gemm_tune_key(const loom_gemm_desc_t *d, const char *path, int sms, char *key, size_t size);

/* A configuration as a tuning value ("bn=256 group=16 cluster=2"; fields
 * at 0 left out) and back. Parsing rejects unknown fields and non-integers
 * with LOOM_ERR_INVALID_ARGUMENT naming the token; absent fields are 0. */
void loom__gemm_config_format(const loom_gemm_config_t *c, char *out, size_t size);
loom_result_t loom__gemm_config_parse(const char *text, loom_gemm_config_t *c);

/* The cache's configuration for (d, path, sms): *found 1 and *cfg set, or
 * *found 0. A malformed entry is an error naming the entry. */
loom_result_t loom__gemm_tuned_config(const loom_gemm_desc_t *d, const char *path, int sms, loom_gemm_config_t *cfg,
                                      int *found);

/* 1 if the sm90 kernel can run this description on the current device
 * (compute capability 9.0 and the library built with sm_90a code). */
int loom__gemm_sm90_supported(const loom_gemm_desc_t *d, int cc_major, int cc_minor);

/* Stream-K / split-K scratch for a launch on `stream` (core/scratch.h):
 * at least `counter_bytes` of tickets, zero when the launch starts (the
 * kernels leave them zero), and at least `partial_bytes` of partials. Call
 * loom__scratch_done(stream, s) after the launch (frees it in the graph when
 * `stream` is capturing). */
loom_result_t loom__gemm_sk_workspace(cudaStream_t stream, size_t counter_bytes, size_t partial_bytes,
                                      uint32_t **counters, float **partials, loom_scratch_t *s);

/* Launches C = A x B (+ bias) with the sm90 kernel on `stream` (current
 * device). cfg NULL: heuristic; hooks NULL: plain GEMM. Arguments are
 * assumed validated (loom__gemm_validate). */
loom_result_t loom__gemm_sm90(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                              const void *bias, const loom_gemm_config_t *cfg,
                              const loom_gemm_hooks_t *hooks, cudaStream_t stream);

/* 1 if the sm80 kernel can run this description on the current device
 * (compute capability >= 8.0 and the library built with code for it). */
int loom__gemm_sm80_supported(const loom_gemm_desc_t *d, int cc_major, int cc_minor);

/* Launches C [m, n] = A [m, k] x B ([n, k] or [k, n]) (+ bias [n]) with the
 * sm80 kernel on `stream` (current device, compute capability >= 8.0).
 * cfg NULL: heuristic (bn only; stages 0 or 4; sk_* must be 0); hooks NULL:
 * plain GEMM. Arguments are assumed validated (loom__gemm_validate). */
loom_result_t loom__gemm_sm80(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                              const void *bias, const loom_gemm_config_t *cfg,
                              const loom_gemm_hooks_t *hooks, cudaStream_t stream);

/* The path loom_gemm takes with hooks: sm90 when supported, else sm80 on
 * compute capability >= 8.0 (LOOM_GEMM_PATH=sm80: always sm80; of a cfg only
 * bn and group carry over to sm80, the sm90-only fields are dropped), else
 * LOOM_ERR_UNSUPPORTED (hooks need a loom kernel). */
loom_result_t loom__gemm_hooked(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                const void *bias, const loom_gemm_config_t *cfg,
                                const loom_gemm_hooks_t *hooks, cudaStream_t stream);

/* Loads the kernel that loom__gemm_hooked would launch for (d, cfg) with
 * hooks whose activation is `activation` (and sets its shared-memory
 * limit), without launching it. Fused ops
 * call it when they make a plan: under CUDA's lazy loading (the default
 * since CUDA 12.2) a kernel is loaded at its first launch, and loading waits
 * for the kernels already running, so a hooked GEMM launched next to a
 * running kernel that waits for it (GEMM+RS's reduction) would deadlock
 * until the timeout on its first call. */
loom_result_t loom__gemm_hooked_preload(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg, int activation);
loom_result_t loom__gemm_sm90_preload(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg, int activation);
loom_result_t loom__gemm_sm80_preload(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg);

/* The tensor map (LOOM_GEMM_EPI_MAP_BYTES at map) of a destination of the
 * BULK_ADD epilogue: [rows, n] row-major c_type at base (any address this
 * GPU can write, a peer's LSA pointer included), boxes of the epilogue's
 * chunks (64 rows x 128 bytes, 128-byte swizzle). */
loom_result_t loom__gemm_epi_map(void *map, const void *base, loom_dtype_t c_type, int64_t rows, int64_t n);

/* A TMA tensor map (a CUtensorMap at out) of a row-major [depth, outer,
 * inner] tensor of dtype t (depth 0: 2-D [outer, inner]) with boxes of [1,
 * box_outer, box_inner], 128-byte swizzle, zero fill out of bounds. */
loom_result_t loom__gemm_tensor_map(void *out, const void *ptr, loom_dtype_t t, uint64_t inner, uint64_t outer,
                                    uint64_t depth, uint32_t box_inner, uint32_t box_outer, const char *what);

/* ---- grouped GEMM (gemm_grouped.c, gemm_grouped_sm90.cu) ---- */

/* A grouped GEMM whose A rows arrive while it runs (a mixture of experts'
 * dispatch in its gate/up GEMM's prologue). Group g's rows are the
 * segments of sources 0..S-1 in source order, rows_from[s stride + first +
 * g] rows each; source s's segment is all in A once arrived[s stride +
 * first + g] has reached the call's epoch e = epoch->epoch + 1. The kernel
 * waits for *ready >= e before it reads the offsets and rows_from (both
 * written by the sender's kernel before it), for each tile's sources
 * before the tile's first load (grouped_schedule.h,
 * loom__grouped_arrival_next), and its last block publishes e: the call is
 * complete when the GEMM is, so the sender must not publish it. It is
 * launched as a programmatic dependent of the sender (which should trigger
 * its dependents early) and waits for the sender's grid before it exits,
 * so the stream's next work follows both. Waits bounded by comm's timeout
 * (an expired one leaves C unspecified, the comm's error set). */
typedef struct loom_grouped_arrival {
  loom_dev_epoch_t *epoch;    /* NULL: none (every row is there at launch) */
  uint32_t *next;             /* device word, 0 between launches: the tiles taken so far (the blocks
                               * take tiles in turn as they start: some start only when the sender's
                               * blocks leave; the last block resets it) */
  const uint32_t *ready;      /* local word */
  const uint32_t *arrived;    /* [sources, stride] signal words */
  const int32_t *rows_from;   /* [sources, stride] rows per (source, group column) */
  int32_t sources, stride, first;
  uint32_t site_ready, site_arrived; /* wait sites of the two waits (peer: the source; signal: the column) */
  loom_dev_comm_t comm;
} loom_grouped_arrival_t;

/* Checks a grouped GEMM's description and pointers' values (no GPU;
 * host-tested): LOOM_ERR_INVALID_ARGUMENT naming `fn`, the argument and the
 * value. */
loom_result_t loom__grouped_validate(const char *fn, const loom_grouped_gemm_desc_t *d, const void *a, const void *b,
                                     const void *c, const void *bias, const int64_t *offsets);
/* The description part alone (callers that check their shapes before they
 * have pointers). */
loom_result_t loom__grouped_validate_desc(const char *fn, const loom_grouped_gemm_desc_t *d);

/* Launches a validated grouped GEMM with the sm90 kernel (cfg NULL: the
 * model's; the device must run it: loom__gemm_sm90_supported). glu 1: the
 * SwiGLU epilogue (an expert's gate and up projections in one GEMM): B_g
 * [n, k] holds the gate's rows then the up projection's, C is [max_rows,
 * n / 2] = silu(A Bgate^T) x (A Bup^T), rounded once; needs B [G, n, k],
 * no bias, C of A's type, n / 2 a multiple of 8; the tile is bm x 256
 * (LOOM_ERR_INVALID_ARGUMENT otherwise). */
loom_result_t loom__gemm_grouped_sm90(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, void *c,
                                      const void *bias, const int64_t *offsets, const loom_gemm_config_t *cfg,
                                      int glu, cudaStream_t stream);

/* loom__gemm_grouped_sm90 (no SwiGLU, no bias) whose epilogue scatters the
 * product's rows instead of storing them into c: row r goes to row o.y of
 * dst[o.x], o = origin[r], a device int2 {source, row} per row of A
 * (written before the launch, e.g. by the peers during a dispatch); dst a
 * device array of row bases (may be peers' LSA pointers), each holding rows
 * of n c_type elements. The rows are plain stores, complete when the
 * kernel is: a reader on another GPU needs a signal sent after it (a
 * release in a later kernel of the stream). c: the C map's base (not
 * written). LOOM_ERR_INVALID_ARGUMENT without the tables or with a bias. */
loom_result_t loom__gemm_grouped_sm90_scatter(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, void *c,
                                              const int64_t *offsets, const loom_gemm_config_t *cfg,
                                              const void *origin, char *const *dst, cudaStream_t stream);

/* loom__gemm_grouped_sm90 (glu as there, no bias) on rows that arrive
 * while it runs (arrive, above): launched with programmatic stream
 * serialisation after the kernel that sends them. */
loom_result_t loom__gemm_grouped_sm90_arrival(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, void *c,
                                              const int64_t *offsets, const loom_gemm_config_t *cfg, int glu,
                                              const loom_grouped_arrival_t *arrive, cudaStream_t stream);

/* The grouped kernel of a configuration (bm 64 / 128, bn 128 / 256, type, tb
 * 1 for B [k, n]); NULL for one that is not built. No GPU needed. */
const void *loom__gemm_grouped_kernel_for(int bm, int bn, int type, int tb);

/* The kernel (its host-side function) that the sm90 launcher runs for a
 * configuration: bm 64 or 128, bn (bm 64: 128 or 256; else 128, 192, 224
 * or 256), A/B type, tb 1 for B [k, n], hooks, sk any stream-K / split-K
 * tiles (plain GEMMs), cl blocks per cluster, act the hooks' activation;
 * likewise the sm80 launcher's (split: split-K). Through the launchers'
 * tables of instantiation groups; no GPU needed (host tests). */
const void *loom__gemm_sm90_kernel_for(int bm, int bn, int type, int tb, int hooks, int sk, int cl, int act);
const void *loom__gemm_sm80_kernel_for(int bn, int type, int tb, int hooks, int split);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_GEMM_H */
