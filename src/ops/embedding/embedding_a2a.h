/*
 * embedding_a2a.h - internal state of an embedding-bag + All-to-All plan and
 * the interface between its host side (embedding_a2a_plan.c: validation,
 * path choice, plan, calls) and its kernels (embedding_a2a.cu: forward and
 * atomic backward; embedding_a2a_sorted.cu: the sorted backward;
 * embedding_a2a_gin.cu: the GIN path between nodes; device helpers shared by
 * them in embedding_a2a.cuh).
 *
 * Plan workspace slice (symmetric: same offsets and size on every rank, which
 * is why the counters, local-only, come last and are sized for the rank with
 * the most tables; uint32 words, zeroed at plan creation; epochs only grow;
 * counts bounded by LOOM_EMB_MAX_SIGNALS, embedding_schedule.h):
 *   flags     [num_flags]     slice ready flags this rank receives (epoch)
 *   ready     [W]             ready[p] = epoch: rank p's forward call started
 *                             (its output may be written)
 *   gready    [W]             gready[p] = epoch: rank p's backward call
 *                             started (its grad_out may be read)
 *   gdone     [W]             gdone[p] = epoch: rank p finished reading this
 *                             rank's grad_out in a backward call
 *   bcount    [W]             atomic backward: tasks finished per source rank (local)
 *   misc      [4]             forward fetch counter, atomic backward fetch
 *                             counter, blocks done, sorted backward blocks
 *                             done (local; each reset by the last block)
 *   counters  [max_p T_p x W x nsl]  forward slice completion counters (local)
 * Epochs come from the plan's device call counter (loom_dev_epoch_t at
 * plan->epoch_offset, loom__epoch_begin), so calls captured in a CUDA graph
 * get a new epoch on every replay; the counters above are reset to 0 by the
 * last task or block that uses them in a call, never by the host. A call of
 * several kernels (the sorted backward) reads its epoch in each and only its
 * last kernel publishes it.
 */
#ifndef LOOM_OPS_EMBEDDING_A2A_H
#define LOOM_OPS_EMBEDDING_A2A_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "core/signal.h"
#include "ops/embedding/embedding_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wait sites of the embedding op (core/signal.h: ids 64..79). */
#define LOOM_SITE_EMB_SLICE_READY 64 /* a slice's ready flag */
#define LOOM_SITE_EMB_GRAD_READY 65  /* a peer's grad_out readable (its backward started) */
#define LOOM_SITE_EMB_GRAD_DONE 66   /* a peer done reading this rank's grad_out */
#define LOOM_SITE_EMB_OUT_READY 67   /* a peer's output writable (its forward started) */

#define LOOM_EMB_MAX_LSA 72      /* peers whose output addresses travel as kernel arguments */
#define LOOM_EMB_THREADS 256     /* threads per block: 8 warps */
#define LOOM_EMB_DEFAULT_SLICE 128 /* samples per slice; fused time flat within 1.6% for S = 8..512 (docs/perf/embedding.md, "Slice size") */
/* Bags (samples) per task: a warp pools one task of `part` bags at a time,
 * 1..32. Fused time within 0.3% for 4..16, 7% slower at 1 (docs/perf/embedding.md, "Task size (bags per warp task)"). */
#define LOOM_EMB_DEFAULT_PART 4
#define LOOM_EMB_UNROLL 8        /* 16-byte row chunks in flight per lane (16 spills under the register cap) */

/* What the kernels record about bad input (host-mapped, first error wins). */
typedef struct loom_emb_err {
  uint32_t claimed;              /* 0 until an error; the recording thread sets 1 */
  uint32_t valid;                /* 1 once the fields are written */
  uint32_t kind;                 /* 1 index out of range, 2 bad offsets */
  int32_t table;                 /* local table */
  int64_t sample;                /* global sample of the bag */
  int64_t position;              /* index position (kind 1) or offsets position (kind 2) */
  int64_t value;                 /* the index, or offsets[position] */
  int64_t limit;                 /* rows of the table, or num_indices */
} loom_emb_err_t;

/* Everything a kernel needs (by value). */
typedef struct loom_emb_kargs {
  loom_dev_comm_t dc;
  loom_emb_sched_t s;
  int dim, pooling, weighted;
  const void *tables;
  const int64_t *indices, *offsets;
  const float *weights;
  int64_t num_indices;
  const int64_t *row_off;        /* device [T]: first row of local table t in `tables` */
  const int64_t *rows;           /* device [T]: rows of local table t */
  int64_t total_rows;            /* sum of rows over the local tables */
  const int *table_base;         /* device [W+1]: first global table of each rank */
  char *peer[LOOM_EMB_MAX_LSA];  /* forward: each rank's out, as this rank addresses it;
                                    backward: each rank's grad_out; pool: peer[0] = pooled */
  void *table_grad;              /* backward */
  float scale;                   /* backward */
  size_t flags_off, counters_off, ready_off, gready_off, gdone_off, bcount_off, fetch_off;
  size_t epoch_off;              /* the plan's loom_dev_epoch_t in this rank's workspace */
  int pool_only;                 /* 1: no communication, output [B, T*D] in peer[0] (backward:
                                    gradient rows [B, T*D] in peer[0]) */
  loom_emb_err_t *err;
} loom_emb_kargs_t;

/* How a plan's backward adds into table_grad. */
#define LOOM_EMB_BWD_ATOMIC 0    /* fp32 atomics per index (fp32 tables) */
#define LOOM_EMB_BWD_SORTED 1    /* sorted by row, fp32 sums, one rounding (fp16/bf16 tables) */

/* What tests and benchmarks may set beyond the public description
 * (loom__plan_embedding_a2a_opts; loom_plan_embedding_a2a takes the
 * defaults, LOOM__EMB_PLAN_OPTS_INIT). */
typedef struct loom__emb_plan_opts {
  int local_first;               /* 0 (default): remote-first task order; 1: local slices first */
  loom_embedding_path_t path;    /* LOOM_EMB_PATH_AUTO unless forcing one */
} loom__emb_plan_opts_t;
#define LOOM__EMB_PLAN_OPTS_INIT { 0, LOOM_EMB_PATH_AUTO }

typedef struct loom_emb_state {
  loom_embedding_desc_t desc;    /* copy; array fields point at the copies below */
  loom__emb_plan_opts_t opts;    /* as the plan was asked */
  int *tables_per_rank;          /* [W] */
  int64_t *rows;                 /* [T_total] */
  int *table_base;               /* [W+1] */
  int64_t local_rows;            /* rows of this rank's tables */
  loom_emb_sched_t sched;
  int path;                      /* loom_embedding_path_t chosen */
  int grid, blocks_per_sm;
  int part;                      /* bags per task */
  int bwd;                       /* LOOM_EMB_BWD_* */
  uint32_t num_flags, num_counters;
  uint32_t nsig;                 /* the plan's signal words (emb_layout) */
  size_t flags_off, counters_off, ready_off, gready_off, gdone_off, bcount_off, fetch_off;
  int64_t *d_row_off, *d_rows;   /* device [T] */
  int *d_table_base;             /* device [W+1] */
  loom_emb_err_t *err_host, *err_dev;
  void *send_buf, *recv_buf;     /* staged path: [B, T*D] and [sum_p Bl*T_p*D] (out_type) */
  size_t staging_bytes;
  cudaMemPool_t pool;            /* sorted backward: per-call scratch (stream-ordered, kept cached) */
  void *gin_devcomm;             /* GIN path: ncclDevComm with the plan's signals */
} loom_emb_state_t;

/* Pure checks of a description for a comm of `size` ranks, `rank`; the
 * message names fn, the field and its value. No GPU. */
loom_result_t loom__emb_validate_desc(const char *fn, const loom_embedding_desc_t *d, int size, int rank);

/* Pure checks of the options for a comm of `size` ranks (opts may not be
 * NULL); the message names fn, the field and its value. No GPU. */
loom_result_t loom__emb_check_opts(const char *fn, const loom__emb_plan_opts_t *o, int size);

/* loom_plan_embedding_a2a with the options tests and benchmarks set
 * (opts NULL: the defaults). */
loom_result_t loom__plan_embedding_a2a_opts(loom_comm_t comm, const loom_embedding_desc_t *desc,
                                            const loom__emb_plan_opts_t *opts, loom_plan_t *out);

/* Kernel launchers (embedding_a2a.cu). */
loom_result_t loom__emb_launch_forward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot, int grid,
                                       cudaStream_t stream);
/* The atomic backward: one kernel, fp32 atomics per index. */
loom_result_t loom__emb_launch_backward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot, int grid,
                                        cudaStream_t stream);
/* to_out 1: copies the staged receive buffer (blocks per source rank p:
 * [Bl, T_p*D]) into out [Bl, T_total*D]; to_out 0: the other way (the
 * backward's gradient, out -> recv). */
loom_result_t loom__emb_launch_reorder(void *recv, void *out, const int *tables_per_rank,
                                       const int *table_base, int world, int64_t local_batch, int dim,
                                       size_t elem, int to_out, cudaStream_t stream);
/* Resident blocks per SM of the forward kernel for these dtypes and dim. */
loom_result_t loom__emb_occupancy(loom_dtype_t tt, loom_dtype_t ot, int dim, int *blocks_per_sm);
/* Registers per thread and local (spill) bytes of the forward kernel (which
 * = 0) or the backward kernels (which = 1: atomic, 2: sorted, the kernel
 * that sums the runs). */
loom_result_t loom__emb_kernel_regs(loom_dtype_t tt, loom_dtype_t ot, int dim, int which, int *regs,
                                    int *local_bytes);

/* The sorted backward (embedding_a2a_sorted.cu): keys, CUB radix sort, runs,
 * heads; per-call scratch from `pool` (stream-ordered, so the call stays
 * capturable). a->num_indices <= LOOM_EMB_MAX_SORTED_INDICES and
 * a->total_rows <= LOOM_EMB_MAX_SORTED_ROWS (the caller checks). */
loom_result_t loom__emb_launch_backward_sorted(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot, int grid,
                                               cudaMemPool_t pool, cudaStream_t stream);
/* Device scratch bytes of one sorted backward call with n indices. */
size_t loom__emb_sorted_scratch_bytes(int64_t n, int dim);

/* Test and benchmark hooks. Each waits for the plan's last call (its event,
 * not the device) before it changes anything; not collective, but every rank
 * must make the same change before its next call (the counter targets depend
 * on the part). */
loom_result_t loom__emb_set_part(loom_plan_t plan, int part);   /* bags per task, 1..32 */
loom_result_t loom__emb_get_part(loom_plan_t plan, int *part);
/* LOOM_EMB_BWD_SORTED on fp32 tables too (deterministic); LOOM_EMB_BWD_ATOMIC
 * only for fp32 tables. */
loom_result_t loom__emb_set_backward(loom_plan_t plan, int bwd);
/* The plan's device call counter (epochs completed on the GPU), read with a
 * synchronous copy (tests). */
loom_result_t loom__emb_device_epoch(loom_plan_t plan, uint32_t *epoch);

/* GIN (embedding_a2a_gin.cu): 1 if NCCL offers GIN on this comm (creates a
 * device comm with `signals` GIN signals, kept in *devcomm on success).
 * Collective. */
loom_result_t loom__emb_gin_probe(ncclComm_t nccl, int signals, int *supported, void **devcomm);
void loom__emb_gin_release(ncclComm_t nccl, void *devcomm);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_EMBEDDING_A2A_H */
