/*
 * coll.h - internal state of loom's collectives (loom_allreduce,
 * loom_reduce_scatter, loom_all_gather) and the interface between their host
 * side (coll.c: checks, plans, calls) and their kernel (coll_kernels.cu, built
 * from the blocks in coll_device.cuh; ownership and orders in
 * coll_schedule.h).
 *
 * One call is one kernel on the caller's stream, of G blocks (G <= SMs: its
 * blocks wait on peers, so all of them must be resident), call epoch e read
 * from the plan's device counter (so CUDA-graph replays are new calls).
 * Plan signals, uint32 words in the plan's workspace slice, each written only
 * by its own rank (plain local release stores) and polled by the peers
 * through their LSA addresses (acquire loads, bounded by the comm's timeout):
 *   arrived      = e: this rank's call e started: its `in` is readable
 *   done         = e: this rank's call e finished reading every peer's
 *                  buffers (set by the call's last block; waited for by
 *                  one-shot, ReduceScatter and AllGather)
 *   reduced[j]   = e: AllReduce two-shot: chunk j of this rank's slice is
 *                  reduced (with the epilogue) in its staging buffer
 *
 * The kernel, rank r, call e:
 *  1. every block: arrived = e (after a system fence: the caller's writes
 *     to `in` are visible first)
 *  2. reduction (AllReduce, ReduceScatter): wait arrived[p] >= e for every p;
 *     one-shot: every chunk of the whole vector (rank-shifted start);
 *     two-shot / ReduceScatter: the chunks of r's slice; each element
 *     summed over the W inputs in rank order in fp32, epilogue (pointwise,
 *     or row-wise with the norm), rounded once; two-shot stores into `out`
 *     and the staging buffer and sets reduced[j]
 *  3. gather (AllReduce two-shot, AllGather): per item (peer q in
 *     loom__coll_peer_at's order, chunk j): wait reduced[j] of q (two-shot)
 *     or arrived of q (AllGather), copy q's chunk from its staging / its
 *     `in` into r's `out` (NVLink loads)
 *  4. the last block: done = e, and the device epoch counter = e
 *  5. one-shot, ReduceScatter, AllGather: every block waits done[p] >= e
 *     for every p before the kernel ends (peers read r's `in` until then, and
 *     the call's completion hands `in` back to the caller); one-shot in place
 *     then copies its result from the staging buffer into `out`.
 * Why nothing is overwritten while a peer reads it:
 *  - `in`: read by peers during call e only; r's call e completes after
 *    every peer's done = e (step 5) or, two-shot, after r fetched every
 *    owner's reduced chunks, each set after the owner read every rank's
 *    inputs of that chunk.
 *  - staging (two-shot): call e+1 writes it only after every peer's
 *    arrived = e+1 (step 2), i.e. after every peer's call e, the last reader
 *    of call e's staging, has completed (stream order: a call's kernel starts
 *    after the previous one ended).
 *  - in place: two-shot writes r's out[chunk of q] (= r's in) only after q
 *    reduced that chunk; one-shot writes `out` only after step 5.
 * ReduceScatter and AllGather up to twice LOOM_ALLREDUCE_LL_BYTES of pushed words
 * (loom__coll_auto_ll_slices) run the slices' LL instead (LOOM__CK_LL_RS,
 * LOOM__CK_LL_AG; coll_schedule.h): no arrival, no done, one crossing; the
 * AllReduce LL's parities protect the slots.
 * tests/host/coll/test_coll_protocol.c plays these steps for many world sizes,
 * block counts and interleavings and checks every read.
 */
#ifndef LOOM_OPS_COLL_H
#define LOOM_OPS_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "core/pointwise.h"
#include "core/signal.h"
#include "ops/coll/coll_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wait sites of the collectives (core/signal.h: ids 96..111). */
#define LOOM_SITE_COLL_ARRIVED 96 /* a peer's input readable (its call started) */
#define LOOM_SITE_COLL_REDUCED 97 /* a peer's reduced chunk (AllReduce two-shot) */
#define LOOM_SITE_COLL_DONE 98    /* a peer still reading this rank's buffers */
#define LOOM_SITE_COLL_LL 99      /* AllReduce LL: a peer's pushed words (flag = this call's epoch) */
#define LOOM_SITE_COLL_PUSH 100   /* AllReduce PUSH: a peer's chunk stored into this rank (its flag) */

#define LOOM_COLL_MAX_PEERS 64    /* peers whose addresses travel as kernel arguments */
#define LOOM_COLL_THREADS 512
#define LOOM_COLL_CHUNK_BYTES ((int64_t)256 << 10) /* largest chunk (one signal each) */
#define LOOM_COLL_MAX_COLS 32768  /* row-wise epilogues: a row in shared memory (fp32) */
#define LOOM_COLL_LL_ROW_GROUPS 1  /* LL with a row-wise norm: rows of up to this many groups of 8 per thread
                                     stay in registers (cols <= 4096 at LOOM_COLL_THREADS; two spilled
                                     400 bytes a thread at the 128 registers of 512 threads) */

/* Signal words of a plan. */
#define LOOM_COLL_SIG_ARRIVED 0u
#define LOOM_COLL_SIG_DONE 1u
#define LOOM_COLL_SIG_REDUCED 2u  /* + chunk index */
#define LOOM_COLL_SIG_BLOCKS 2u   /* LL, the slices' LL, PUSH: + block index: the calls that block of the
                                     plan's grid completed (coll_kernels.cu, loom__coll_block_epoch) */

typedef enum { LOOM__COLL_AR = 0, LOOM__COLL_RS = 1, LOOM__COLL_AG = 2 } loom__coll_kind_t;

/* What a call's kernel runs. */
typedef enum {
  LOOM__CK_ONE_SHOT = 0, /* AllReduce: every rank reduces the whole vector */
  LOOM__CK_TWO_SHOT = 1, /* AllReduce: reduce own slice, gather the others' */
  LOOM__CK_RS = 2,       /* ReduceScatter: reduce own slice */
  LOOM__CK_AG = 3,       /* AllGather */
  LOOM__CK_LL = 4,       /* AllReduce LL: push with flags, reduce what arrives (coll_schedule.h) */
  LOOM__CK_PUSH = 5,     /* AllReduce PUSH: store chunks into the peers, a flag each (coll_schedule.h) */
  LOOM__CK_LL_RS = 6,    /* ReduceScatter LL: push the peers' slices with flags, reduce the own slice */
  LOOM__CK_LL_AG = 7,    /* AllGather LL: push the own slice with flags, store every sender's */
  LOOM__CK_KINDS = 8
} loom__coll_kernel_kind_t;

typedef struct loom_coll_args {
  loom_dev_comm_t dc;
  size_t epoch_off, sig_off;     /* the plan's device counter and signal words */
  int kind;                      /* loom__coll_kernel_kind_t */
  int in_type, out_type;         /* loom_dtype_t (AllGather: equal) */
  int64_t count;                 /* elements of the full vector */
  int64_t cols;                  /* row length (0: flat) */
  int64_t unit, chunk, nch;      /* slicing unit, chunk elements, chunks per slice (max) */
  int in_place;                  /* one-shot: out == in (result goes through the staging buffer);
                                    AllGather: in is out's own slice (nothing to copy);
                                    ReduceScatter: out is in's own slice (out is `in`) */
  int norm;                      /* loom_norm_t: row-wise epilogue (rows of cols, in shared memory) */
  float eps;
  const void *norm_w, *norm_b;   /* [cols] of out_type; norm_b may be NULL */
  loom_pointwise_t pw;           /* element i's epilogue; pw.cols is the row length (count when
                                    flat); residual rebased so that element i reads residual[i] */
  const char *src[LOOM_COLL_MAX_PEERS]; /* each rank's `in` as this rank addresses it (AR, RS:
                                    [count]; AG: the rank's slice) */
  const char *stg[LOOM_COLL_MAX_PEERS]; /* two-shot: each rank's staging [S] (out_type); LL, PUSH:
                                    each rank's buffer (coll_schedule.h) */
  char *stg_own;                 /* this rank's staging (two-shot: its slice; one-shot in place: [count];
                                    LL, PUSH: its buffer) */
  char *out;                     /* AR, AG: [count]; RS: this rank's slice (element i at i - begin),
                                    in place: `in` itself (element i at i) */
} loom_coll_args_t;

/* The plan's state. */
typedef struct loom_coll_state {
  loom__coll_kind_t kind;
  loom_coll_desc_t desc;
  loom_coll_algo_t algo;         /* resolved (AllReduce; ReduceScatter / AllGather: AUTO) */
  loom__coll_kernel_kind_t kk;
  int rank, world;
  int64_t unit, slice, chunk, nch; /* S, C, chunks per slice */
  int64_t my_begin, my_len;
  int blocks;
  size_t smem;                   /* dynamic shared memory of the kernel (row-wise epilogue) */
  size_t one_shot_max;           /* the threshold in force */
  void *staging;                 /* loom_malloc memory (two-shot: peers read it) or NULL */
  size_t staging_bytes;
  const char *stg_peer[LOOM_COLL_MAX_PEERS];
} loom_coll_state_t;

/* Checks a description for an op of kind `kind` on a comm of comm_size ranks
 * (no GPU: host-tested) and resolves the AllReduce algorithm: AUTO as
 * loom__coll_auto_algo says with the thresholds th (LL applies with no norm,
 * or rows of a multiple of 8). LOOM_ERR_INVALID_ARGUMENT naming the field
 * and its value. */
loom_result_t loom__coll_check_desc(const char *fn, int kind, int comm_size, int sm_count,
                                    const loom_coll_thresholds_t *th, const loom_coll_desc_t *d,
                                    loom_coll_algo_t *algo);

const char *loom__coll_algo_name(loom_coll_algo_t a);

/* Checks one call of a plan of (checked) description d on comm from d and
 * the arguments alone, never from the algorithm the plan resolved to, so
 * the same call is refused or accepted whatever AUTO chose: in (symmetric),
 * out (with the bytes written; the one overlap each op allows: in place),
 * the epilogue's and the norm's pointers. *in_place: AllReduce out == in,
 * ReduceScatter out == in + this rank's slice begin (aligned or not),
 * AllGather in == out + its slice begin; *pw the epilogue with a
 * ReduceScatter's residual rebased (element i reads residual[i]).
 * Host-tested on detached comms under every algorithm. */
loom_result_t loom__coll_check_call(const char *fn, int kind, loom_comm_t comm, const loom_coll_desc_t *d,
                                    const void *in, void *out, const loom_epilogue_t *epi, const void *norm_w,
                                    const void *norm_b, int *in_place, loom_pointwise_t *pw);

/* Launches the kernel for (a->in_type, a->out_type); pdl: as a programmatic
 * dependent of the stream's previous kernel (sm_90 on; the kernel waits
 * for that kernel's completion before anything else). */
loom_result_t loom__coll_launch(const loom_coll_args_t *a, int blocks, size_t smem, int pdl, cudaStream_t stream);

/* Loads the kernel of (in_type, out_type) for kernel kind `kind`
 * (loom__coll_kernel_kind_t; norm: with a row-wise norm) (lazy loading)
 * and allows it `smem` bytes of dynamic shared memory. */
loom_result_t loom__coll_prepare(int in_type, int out_type, int kind, int norm, size_t smem);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_COLL_H */
