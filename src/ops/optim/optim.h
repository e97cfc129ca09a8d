/*
 * optim.h - internal state of the distributed optimizers (loom_adam_step,
 * loom_lamb_step) and the interface between their host side (optim.c:
 * description checks, plans, info; adam.c, lamb.c: the calls) and their
 * kernels (optim_kernels.cu). Who updates what: optim_schedule.h.
 *
 * A step on rank r, call number e (the plan's device epoch + 1), step
 * number s (the plan's device step counter + 1):
 *   Adam: one kernel. Block 0 stores ready[r] = e into every rank's
 *         workspace ("r's gradients are complete and its parameters free");
 *         every block waits (bounded) for ready[p] >= e of every rank p,
 *         then takes chunks (block b: b, b + grid, ...): sums the chunk's
 *         gradient over the ranks (peer loads through NVLink, fp32, rank
 *         order), updates m, v and the master weights, stores the rounded
 *         parameters into every rank's copy (RS chunk) or its own (AR).
 *         The last block to finish (a counter) stores done[r] = e into
 *         every rank, waits (bounded) for done[p] >= e of every rank p,
 *         then advances the step counter and publishes the epoch.
 *   LAMB: three kernels. (1) ready as above; per chunk the sums, m, v, the
 *         update u and the chunk's partial sums (||w||^2, ||u||^2) stored at
 *         its global index in this rank's partial table (workspace); the
 *         last block stores phase[r] = e into every rank. (2) waits for
 *         phase[p] >= e of every rank; block per tensor: the tensor's norms
 *         from the partials of its global chunks, read from their owners'
 *         tables in global order (the same bits on every rank). (3) per
 *         chunk u again from m, v, w, the trust ratio, the update, the
 *         stores into every rank's parameters; the done handshake as Adam's.
 * Why nothing is overwritten while a peer still reads it: a rank's call
 * returns (on its stream) only after done[p] >= e from every peer p, which
 * each peer stores after its last load of this rank's gradients (and
 * partials) and its last store into this rank's parameters; a peer stores
 * into this rank's parameters only after ready[r] >= e, i.e. after this
 * rank's work before the call (forward and backward) is done.
 * Signals only grow (epochs); the counters are reset by the last block.
 * A non-finite gradient anywhere sets grad_nonfinite on every rank: a block
 * that met one stores e into nonfinite[r] of every rank before the step's
 * handshake that follows it (Adam: done; LAMB: phase), and the last block,
 * once every rank's done[p] >= e, reads nonfinite[p] == e of every rank p
 * (a store of an earlier step is an older epoch: nothing is cleared).
 *
 * Plan workspace slice (uint32 words, zeroed at creation): ready [W] |
 * done [W] | phase [W] | nonfinite [W] | count [2] (finished blocks of the
 * kernel that ends a step and of LAMB's first kernel), then LAMB's partial
 * table (float2 [global chunks]).
 */
#ifndef LOOM_OPS_OPTIM_H
#define LOOM_OPS_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "core/signal.h"
#include "ops/optim/optim_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wait sites of the optimizers (core/signal.h: fused ops 80..127; the
 * tensor-parallel ops take 80..87, the MoE ops 88..95). */
#define LOOM_SITE_OPTIM_READY 112 /* a peer's gradients complete (its step started) */
#define LOOM_SITE_OPTIM_DONE 113  /* a peer still reading this rank's gradients / storing parameters */
#define LOOM_SITE_OPTIM_PHASE 114 /* LAMB: a peer's partial norms */

#define LOOM_OPTIM_THREADS 256
#ifndef LOOM_OPTIM_BLOCKS_PER_SM
#define LOOM_OPTIM_BLOCKS_PER_SM 4 /* the update kernels' occupancy bound and grid cap */
#endif
#ifndef LOOM_OPTIM_VEC_FP32
#define LOOM_OPTIM_VEC_FP32 4 /* elements a thread takes at once where parameters and gradients are fp32: 4 or 8 */
#endif

/* Per tensor, on the device. */
typedef struct loom_optim_tensor_dev {
  float weight_decay;
  int32_t global_first; /* first chunk in the global list */
  int32_t global_count;
  int32_t pad;
} loom_optim_tensor_dev_t;

/* Everything an optimizer kernel needs (a __grid_constant__ argument). */
typedef struct loom_optim_kargs {
  loom_dev_comm_t dc;
  size_t epoch_off, ready_off, done_off, phase_off, nonfinite_off, count_off, partial_off;
  const loom_optim_chunk_t *chunks; /* this rank's [nchunks] */
  int64_t nchunks;
  const loom_optim_tensor_dev_t *tensors; /* [T] */
  int32_t num_tensors;
  char *const *grad_ptrs;   /* [T][nsrc]: gradient t of rank p as this rank addresses it */
  char *const *param_ptrs;  /* [T][npush]: parameter t of rank p (own: [t][self]) */
  int32_t nsrc, npush, self; /* W, W, rank (fused); 1, 1, 0 (local: no communication) */
  int32_t handshake;        /* 1: ready / done signals (fused); 0: local */
  int32_t ptype, gtype;     /* loom_dtype_t */
  float *m, *v, *master;    /* this rank's state; master NULL for fp32 parameters */
  float *norms;             /* LAMB: [T][2] (||w||, ||u||) */
  const int32_t *gowner;    /* LAMB: [global chunks] owner rank (-1: every rank, read locally) */
  float lr, beta1, beta2, eps, grad_div;
  int32_t decoupled, bias_correction, use_nvlamb;
  const float *lr_ptr, *grad_scale, *found_inf;
  int *nonfinite;           /* the caller's grad_nonfinite (or NULL) */
  int32_t *step;            /* device: steps taken */
} loom_optim_kargs_t;

typedef struct loom_optim_state {
  int lamb;                 /* 0 Adam, 1 LAMB */
  int local;                /* 1: no communication (loom__optim_update_plan) */
  loom_optim_desc_t desc;   /* its arrays point at the copies below */
  int rank, world, T, nar;
  int64_t chunk;
  int64_t *numel;           /* [T] */
  int *ar;                  /* [T] 1: AR-Opt */
  void **params, **grads;   /* [T] */
  float *wd;                /* [T] */
  int64_t *state_off;       /* [T] */
  int64_t nchunks, gchunks, state_elems;
  loom_optim_kargs_t k;     /* the kernels' argument, all but the per-call scalars */
  int grid;                 /* blocks of the chunk kernels */
  /* device memory (one cudaMalloc, `dev`) */
  void *dev;
  size_t device_bytes;
  struct optim_host *host;  /* plan creation's host tables (resolve to fill), NULL after */
  uint64_t where;           /* the tensors' places in the comm's allocations (loom__fnv64): ranks agree on it */
} loom_optim_state_t;

/* ---- host (optim.c) ---- */

/* Checks a description without a GPU (host-tested): each field by name and
 * value; fn names the caller. */
loom_result_t loom__optim_check_desc(const char *fn, int comm_size, const loom_optim_desc_t *d);

/* Creates an Adam (lamb 0) or LAMB (lamb 1) plan (loom_plan_adam,
 * loom_plan_lamb). */
loom_result_t loom__optim_plan(loom_comm_t comm, const loom_optim_desc_t *desc, int lamb, loom_plan_t *out);

/* The same plan with no communication (state->local): every tensor AR-Opt
 * from this rank's own gradient (any device memory), no signals; the
 * update kernel alone. No caller in the library: the benchmarks' "NCCL,
 * then update" baseline reaches it through the test-support library
 * (src/testing/bench_api.h, loom_bench_optim_update_plan). */
loom_result_t loom__optim_update_plan(loom_comm_t comm, const loom_optim_desc_t *desc, int lamb, loom_plan_t *out);

/* The state of an optimizer plan; lamb -1: either kind. */
loom_result_t loom__optim_state(loom_plan_t plan, const char *fn, int lamb, loom_optim_state_t **st);

/* One step of an Adam (lamb 0) or LAMB (lamb 1) plan (loom_adam_step,
 * loom_lamb_step): the entry, the call's arguments (args may be NULL), the
 * kernels, the exit. */
loom_result_t loom__optim_step(loom_plan_t plan, const char *fn, int lamb, const loom_optim_args_t *args,
                               cudaStream_t stream);

/* ---- kernels (optim_kernels.cu) ---- */

loom_result_t loom__optim_adam_launch(const loom_optim_kargs_t *k, int grid, cudaStream_t stream);
loom_result_t loom__optim_lamb_launch(const loom_optim_kargs_t *k, int grid, cudaStream_t stream);

/* Copies `n` fp32 master weights from a parameter tensor (dtype pt):
 * master[i] = param[i] (plan creation). */
loom_result_t loom__optim_load_master(float *master, const void *param, int64_t n, int pt, cudaStream_t stream);

/* *step = value (stream-ordered, capturable). */
loom_result_t loom__optim_write_step(int32_t *step, int32_t value, cudaStream_t stream);

/* Loads every kernel of the file (lazy loading) without launching any. */
loom_result_t loom__optim_preload_kernels(void);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_OPTIM_H */
