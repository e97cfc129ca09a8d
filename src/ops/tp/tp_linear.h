/*
 * tp_linear.h - internal state of the tensor-parallel ops (loom_ag_gemm,
 * loom_gemm_rs, loom_gemm_ar) and the interface between their host side
 * (tp_linear.c: validation, plans, sequential path; ag_gemm.c, gemm_rs.c,
 * gemm_ar.c: the calls) and their kernels (tp_linear_kernels.cu).
 *
 * A fused call on the user's stream S, with the plan's side stream X:
 *   S: begin kernel   epoch e = call counter + 1, published in the plan's
 *                     loom_dev_epoch_t; AG: ready[r] = e stored into every
 *                     peer's workspace ("rank r's a_full may be written")
 *   S -> X            event (fork)
 *   X: transfer       AG: pushes of this rank's shard (copy engine or copy
 *                     kernel), each chunk then its signal (= e); RS: the
 *                     reduction kernel (waits for each owned tile's W
 *                     signals, pulls the W partials of its rows from the
 *                     sources' buffers through NVLink, sums them; its last
 *                     block then tells every source done[rank] = e)
 *   S: hooked GEMM    AG: tiles wait for their rows' chunk signals; RS:
 *                     the partial product stored into this rank's own
 *                     partial buffer (TMA-store epilogue), each tile then
 *                     signalled to the owner(s) of its rows
 *   S: RS tail        the reduction again, on every SM, after the GEMM: it
 *                     claims the tiles the side launch has not reached (a
 *                     tile counter shared by both launches)
 *   X -> S            event (join); S records the plan's `done` event
 * GEMM + AllReduce (gemm_ar.c) is the RS call with two changes in the
 * reduction: the pointwise epilogue (loom_pointwise_t: scale, bias,
 * activation, dropout, residual) runs on each fp32 sum before its one
 * rounding, and the result goes to every rank's `out` (NVLink stores through
 * the peers' addresses of the caller's symmetric `out`), after which the
 * block sets gathered[rank x tiles + t] = e on every peer. The tail
 * launch's blocks, once they have claimed everything, wait for the gathered
 * signals of every other owner's tiles (loom__ar_tile_owners), so `out` is
 * complete on this rank when its stream passes the call.
 * Every kernel of the call reads e from the device counter, so a call
 * captured in a CUDA graph gets a new epoch on every replay.
 *
 * Why no rank overwrites what a peer still reads (the invariants):
 *  - AG: rank p pushes into d's a_full only after ready[p] on d reached e,
 *    i.e. after d's call e started, so d's GEMM of call e-1 (the last reader
 *    of a_full) has finished.
 *  - RS: a source's GEMM of call e+1 overwrites its partial buffer only
 *    after its begin kernel saw done[p] >= e from every peer p (their
 *    reductions of call e finished reading it); its own reduction of call e
 *    finished before (stream order).
 *  - AR: owner o stores tile t of call e+1 into rank d's `out` only after
 *    d's signal of its partial tile t of call e+1, which d's GEMM of call
 *    e+1 sets: d's stream has passed call e and everything queued between
 *    the calls (the user's reads of `out`). d's call e, in turn, ends only
 *    after every owner's tiles of call e are in d's `out` (gathered waits),
 *    so no store of call e lands after d's stream moved on.
 * Signals only grow (epochs), so nothing is reset between calls.
 *
 * Plan workspace slice (uint32 words, zeroed at plan creation):
 *   AG: ready [W] | chunk [W x chunks_per_shard]
 *   RS: tile  [W sources x tiles_m x tiles_n] (owner side: signal of source
 *       s's tile t is tile[s tiles + t]) | done [W] (done[p] = e: owner p
 *       finished reading this rank's partial of call e) | count [2] (the
 *       reduction's finished blocks and its next tile to claim, both reset
 *       by the last block)
 *   AR: RS's | gathered [W owners x tiles_m x tiles_n] (gathered[o tiles + t]
 *       = e: owner o's rows of tile t of call e are in this rank's out)
 */
#ifndef LOOM_OPS_TP_LINEAR_H
#define LOOM_OPS_TP_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "core/op.h"
#include "core/pointwise.h"
#include "core/signal.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_schedule.h" /* loom__tp_kind_t */

#ifdef __cplusplus
extern "C" {
#endif

/* Wait sites of the tensor-parallel ops (core/signal.h: ids 80..87; the MoE ops take 88..95). */
#define LOOM_SITE_AG_READY 80   /* a peer's a_full writable (its call started) */
#define LOOM_SITE_RS_TILE 81    /* a partial tile from a peer (reduction) */
#define LOOM_SITE_RS_DONE 82    /* a peer still reading this rank's previous partial */
#define LOOM_SITE_AR_GATHERED 83 /* a peer's reduced tile delivered into this rank's out */
#define LOOM_SITE_RS_PUSHED 84  /* BULK_REDUCE: a peer's adds into this rank's sum buffer complete */
#define LOOM_SITE_AG_SHARD 85   /* a peer's shard landed, before its rows' GEMM (LOOM_TP_CE_SHARD_GEMMS) */

#define LOOM_TP_MAX_PEERS 72    /* peers whose addresses travel as kernel arguments */
#define LOOM_TP_THREADS 256     /* copy kernel */
#define LOOM_TP_RS_THREADS 512  /* reduction kernel */
#define LOOM_TP_MIN_TILE_ROWS 64 /* rows of the smallest hooked GEMM tile (sm90's 64-row tiles) */
#define LOOM_TP_TUNE_CUBLASLT_CANDIDATES 8 /* cuBLASLt algorithms the tuner times for the sequential path */


/* The op's name ("ag_gemm", "gemm_rs", "gemm_ar"): plans' op, tuning keys. */
const char *loom__tp_kind_op(int kind);

/* The knobs of a plan: the transfer, chunk rows, communication blocks and
 * the sequential path's GEMM (a description's, or a tuned entry's). */
typedef struct loom_tp_choice {
  loom_tp_transfer_t transfer;
  int chunk_rows, comm_blocks;
  loom_tp_gemm_t gemm;
} loom_tp_choice_t;

typedef struct loom_tp_state {
  loom__tp_kind_t kind;
  loom_tp_desc_t desc;
  loom_gemm_desc_t gemm;        /* the local GEMM of desc */
  loom_tp_choice_t knobs;       /* the knobs the plan runs: desc's, or the tuning cache's (tuned) */
  int tuned;
  loom_tp_transfer_t transfer;  /* resolved (never AUTO) */
  loom_tp_gemm_t gemm_engine;   /* resolved (never AUTO): the GEMM of the sequential and decomposed
                                   paths and of the copy engine's shard GEMMs; LOOM when fused */
  int ce_shards;                /* 1: the copy engine's rows computed shard by shard by gemm_engine
                                   as they land (loom__tp_ce_shard_gemms), not by the hooked GEMM */
  int tune_base_gemm;           /* set by the tuner: the next sequential or decomposed call times
                                   cuBLASLt's candidates on its buffers (loom__base_gemm_tune, which
                                   records the winner) instead of running the heuristic's pick: the
                                   sequential GEMM, or every chunk's GEMM of the decomposed call */
  int rank, world;
  int64_t shard_rows;           /* S */
  int64_t my_begin, my_len;     /* this rank's shard */
  int chunk_rows;               /* AG */
  int64_t chunks_per_shard;     /* AG */
  int comm_blocks;
  loom_gemm_config_t gemm_cfg;  /* fused GEMM's config */
  int gemm_bm;                  /* its tile rows as the kernel runs them (64 or 128) */
  int tiles_m, tiles_n;
  /* workspace offsets (bytes from the comm workspace base) */
  size_t ready_off, chunk_off, go_off, tile_off, done_off, count_off, gath_off;
  char *peer_ws[LOOM_TP_MAX_PEERS]; /* AG fused: each rank's workspace base as this rank addresses
                                       it (the copy engine's signal copies) */
  /* memory */
  void *a_full_own;             /* AG: the plan's gathered A [W S, k] (loom_malloc when fused,
                                   cudaMalloc when sequential), used when a call passes no a_full */
  int a_full_own_sym;           /* 1: a_full_own is loom_malloc memory */
  void *partial;                /* RS, AR: this rank's partial product [W S, n] c_type (loom_malloc
                                   when fused: owners read it; RS sequential: cudaMalloc; AR
                                   sequential: loom_malloc, loom_allreduce's input) */
  int partial_sym;
  uint32_t **d_dst_signal;      /* RS fused: device [W] owner signal arrays for this source */
  void **d_row_dst;             /* RS SM_ATOMIC: device [W] the owners' fp32 accumulators [S, n]
                                   (partial holds this rank's) */
  void *d_maps;                 /* RS BULK_REDUCE: device [W] tensor maps of the owners' sum
                                   buffers [S, n] c_type (partial holds this rank's) */
  int32_t *d_schedule;          /* RS BULK_REDUCE: device [tiles] the GEMM's striped tile order
                                   (loom__rs_striped_order) */
  loom_plan_t ar_plan;           /* AR sequential: the loom_allreduce plan of [m x n] c_type (cols n) */
  size_t symmetric_bytes, device_bytes;
  cudaStream_t side;
  cudaEvent_t fork, join;
  cudaEvent_t *steps;           /* DECOMPOSED: [2 W] events, the chunks' hand-overs between the
                                   streams (AG: [i] side -> stream after shard step i arrived;
                                   RS: [s] stream -> side after step s's sum, [W + s] side ->
                                   stream after step s's exchange) */
  void *recv;                   /* RS DECOMPOSED: the partial sums received [W S, n] c_type */
} loom_tp_state_t;

/* ---- host side shared by the two ops (tp_linear.c) ---- */

/* The ops (tp_plan.c; core/op.h), indexed by kind, and their family. */
extern const loom_op_family_t loom__tp_family;
extern const loom_op_t loom__tp_ops[3];

/* The door's description of a tensor-parallel plan: the caller's, and
 * whether the tuning cache may choose its knobs (the tuner's default
 * candidate, the untuned choice, may not). */
typedef struct loom__tp_args {
  const loom_tp_desc_t *desc;
  int untuned;
} loom__tp_args_t;

/* The plan's state; kind LOOM__TP_AG / _RS / _AR, or -1 for any. */
loom_result_t loom__tp_state(loom_plan_t plan, const char *fn, int kind, loom_tp_state_t **st);

/* Checks a description (no GPU: host-tested) and resolves its transfer:
 * AUTO becomes a fused transfer where W > 1, every peer is load/store
 * reachable (all_reachable), loom's kernels can carry hooks (hooks_ok) and
 * W <= LOOM_TP_MAX_PEERS, else SEQUENTIAL; a fused transfer asked for where
 * it cannot run is LOOM_ERR_UNSUPPORTED. AR: has_bias and an activation are
 * refused (both come through the call's epilogue), and so are COPY_ENGINE
 * and SM_ATOMIC. */
loom_result_t loom__tp_check_desc(const char *fn, int kind, int comm_size, int sm_count, const loom_tp_desc_t *d,
                                  loom_tp_transfer_t *resolved, int all_reachable, int hooks_ok);

/* In a world of ranks on one GPU (tp_world.c), the transfer t a checked
 * description resolved to, made one without NCCL: an asked SEQUENTIAL AG
 * or RS is LOOM_ERR_UNSUPPORTED, AUTO's becomes the fused default; a fused
 * AG on the sm80 GEMM path is refused, and so is GEMM+AllReduce's
 * sequential GEMM asked as cuBLASLt. Elsewhere t stays. */
loom_result_t loom__tp_world_transfer(const char *fn, loom_comm_t comm, const loom_tp_desc_t *desc, int kind,
                                      loom_tp_transfer_t *t);
/* 1 where AUTO keeps its fused transfer whatever the shape (a world: AG, RS). */
int loom__tp_world_keeps_fused(loom_comm_t comm, int kind);
/* The sequential GEMM engine g resolved to, in a world loom's instead of
 * cuBLASLt (its first use waits for every running kernel); elsewhere g. */
loom_tp_gemm_t loom__tp_world_gemm(loom_comm_t comm, loom_tp_gemm_t g);

/* AUTO's shape-independent half for a checked description (pure,
 * host-tested through loom__tp_check_desc). */
loom_tp_transfer_t loom__tp_auto_transfer(int kind, int comm_size, const loom_tp_desc_t *d, int all_reachable,
                                          int hooks_ok);

/* 1 for the fused transfers (loom's hooked GEMM, peer memory, signals);
 * 0 for AUTO, SEQUENTIAL and DECOMPOSED (NCCL and the sequential path's
 * GEMM engine). */
int loom__tp_fused(loom_tp_transfer_t t);

/* Whether a tuned choice applies to checked description d here: its
 * transfer offered by the op and able to run, its knobs in range. */
loom_result_t loom__tp_check_choice(const char *fn, int kind, int comm_size, int sm_count, const loom_tp_desc_t *d,
                                    const loom_tp_choice_t *c, int all_reachable, int hooks_ok);

const char *loom__tp_transfer_name(loom_tp_transfer_t t);
const char *loom__tp_gemm_name(loom_tp_gemm_t g);

/* 1: cuBLASLt takes A/B of ab and C of c (c == ab or fp32). */
int loom__tp_cublaslt_takes(loom_dtype_t ab, loom_dtype_t c);

/* The GEMM a plan of (checked) description d with resolved transfer t runs
 * (no GPU: host-tested): LOOM for the fused transfers but the copy engine's
 * shard GEMMs; for those, SEQUENTIAL and DECOMPOSED the asked engine, and
 * for AUTO cuBLASLt where it takes the dtypes, else LOOM. */
loom_tp_gemm_t loom__tp_resolve_gemm(const loom_tp_desc_t *d, loom_tp_transfer_t t);

/* 1 where a plan of resolved transfer t computes AllGather+GEMM's rows
 * shard by shard with the sequential path's engine as each shard lands (the
 * copy engine, LOOM_TP_CE_SHARD_GEMMS on): loom__tp_resolve_gemm then
 * names that engine. */
int loom__tp_ce_shard_gemms(loom_tp_transfer_t t);

/* The sequential path's GEMM: C = A x B (+ bias) through the plan's engine
 * (arguments checked by the caller); with st->tune_base_gemm set, cuBLASLt's
 * algorithm is timed first (synchronises the stream; the flag is cleared
 * here on the sequential path, by the decomposed call at its end). */
loom_result_t loom__tp_seq_gemm(loom_tp_state_t *st, const loom_gemm_desc_t *g, const void *a, const void *b,
                                void *c, const void *bias, cudaStream_t stream);

/* One call's arguments (NULL where the op takes none). */
typedef struct loom_tp_call {
  const void *a;              /* AG: a_shard [shard rows, k]; RS, AR: a [m, k] */
  const void *b;              /* [k, n] or [n, k] */
  void *c;                    /* AG: c [m, n]; RS: c_shard [shard rows, n]; AR: out [m, n] */
  void *a_full;               /* AG: NULL or loom_malloc [m, k] */
  const void *bias;           /* AG, RS: [n] of c_type iff desc.has_bias */
  const loom_epilogue_t *epi; /* AR: NULL or the call's epilogue */
} loom_tp_call_t;

/* Checks one call of a plan of (checked) description d on comm from d and
 * the arguments alone, never from the transfer the plan resolved to
 * (tp_check.c): every pointer with the bytes the call touches, symmetric
 * memory where a transfer d allows (AUTO: any) has peers reach it, outputs
 * that alias inputs. AR: *pw is the call's epilogue. Host-tested on
 * detached comms under every transfer. */
loom_result_t loom__tp_check_call(const char *fn, int kind, loom_comm_t comm, const loom_tp_desc_t *d,
                                  const loom_tp_call_t *c, loom_pointwise_t *pw);

/* The local GEMM of a description. */
loom_gemm_desc_t loom__tp_gemm_desc(const loom_tp_desc_t *d);

/* Each rank's copy of the symmetric buffer at p ([p, p + bytes) inside one
 * loom_malloc allocation), as this rank addresses it; `what` names the
 * argument in the error. */
/* The hooks every fused call's GEMM starts from: tiles in rank-shifted
 * order starting at shift_rank's rows, the plan's epoch word, the comm. */
void loom__tp_hooks_base(loom_plan_t plan, const loom_tp_state_t *st, int shift_rank, loom_dev_comm_t dc,
                         loom_gemm_hooks_t *h);

loom_result_t loom__tp_peer_addresses(const char *fn, const char *what, loom_comm_t comm, const void *p,
                                      size_t bytes, char **peer);

/* A call's entry (the door's, core/op.h, which starts the stage trace;
 * then the call's arguments checked: loom__tp_check_call). Its exit is the
 * door's loom__call_exit. Stages are marked with loom__trace_mark
 * (core/trace.h). */
loom_result_t loom__tp_enter(loom_plan_t plan, const char *fn, int kind, const loom_tp_call_t *call,
                             loom_pointwise_t *pw, cudaStream_t stream, loom_tp_state_t **st);

/* The side stream: fork (it waits for `stream`), join (`stream` waits for
 * it). */
loom_result_t loom__tp_fork(loom_tp_state_t *st, cudaStream_t stream);
loom_result_t loom__tp_join(loom_tp_state_t *st, cudaStream_t stream);

ncclDataType_t loom__tp_nccl_type(loom_dtype_t t);

/* One step of the decomposed paths on the side stream, in one NCCL group:
 * send_count elements of type t from send to rank `to`, recv_count into
 * recv from rank `from` (a count of 0 leaves that half out; its peer's
 * matching half is 0 too). fn names the op in errors. */
loom_result_t loom__tp_sendrecv(loom_comm_t comm, cudaStream_t side, const void *send, size_t send_count, int to,
                                void *recv, size_t recv_count, int from, loom_dtype_t t, const char *fn);

/* ---- tuning (tp_tune.c) ---- */

/* The ops' tuner (op.h's tune; args a loom__tp_args_t of a checked
 * description): loom_ag_gemm_tune / loom_gemm_rs_tune / loom_gemm_ar_tune,
 * and what a plan runs with LOOM_TUNE=1 for an AUTO description the cache
 * lacks. Collective; synchronizes `stream`. */
loom_result_t loom__tp_tune(const loom_op_t *op, loom_comm_t comm, const void *args, cudaStream_t stream);

/* The tuning entry's name of op kind `kind` ("loom_ag_gemm_tune", ...). */
const char *loom__tp_tune_fn(int kind);

/* The tuning-cache key of (kind, desc) on GPUs of `sms` SMs; 0 if it does
 * not fit in size. */
int loom__tp_tune_key(int kind, const loom_tp_desc_t *d, int sms, char *key, size_t size);

/* A tuned choice as a cache value ("transfer=2 chunk=128 blocks=0 gemm=1")
 * and back (loom_tp_choice_t above); parsing takes entries without "gemm="
 * (older files: AUTO) and refuses anything else (LOOM_ERR_INVALID_ARGUMENT
 * quoting it). */
void loom__tp_tune_format(const loom_tp_choice_t *c, char *out, size_t size);
loom_result_t loom__tp_tune_parse(const char *text, loom_tp_choice_t *c);

/* ---- kernels (tp_linear_kernels.cu) ---- */

/* Begin kernel: publishes epoch e (call counter + 1) in the plan's device
 * counter; with ready_off != (size_t)-1 stores e into ready[rank] of every
 * peer's workspace (AG); with done_off != (size_t)-1 first waits (bounded)
 * until done[p] >= e - 1 for every peer p (RS). */
loom_result_t loom__tp_begin(loom_dev_comm_t dc, size_t epoch_off, size_t ready_off, size_t done_off,
                             cudaStream_t stream);

/* What the AG copy kernel, the ready wait and the chunk-signal kernel need. */
typedef struct loom_ag_copy_args {
  loom_dev_comm_t dc;
  size_t epoch_off, ready_off, chunk_off, go_off;
  int64_t m, k;                 /* gathered A [m, k] */
  int64_t chunk_rows, chunks_per_shard;
  int esize;                    /* bytes per element */
  const char *a_shard;          /* this rank's rows [my_len, k] */
  char *dst[LOOM_TP_MAX_PEERS]; /* each rank's a_full as this rank addresses it (dst[rank]: local) */
  int copy_local;               /* 1: a_shard is not already a_full's own rows */
  int first_step;               /* copy kernel: first push step (0: own rows too; 1: peers only) */
} loom_ag_copy_args_t;

/* SM copy engine: `blocks` blocks push this rank's shard chunk by chunk in
 * the push order (steps first_step .. W-1; step 0 is the own rows), each
 * chunk then its signal. */
loom_result_t loom__ag_copy_launch(const loom_ag_copy_args_t *a, int blocks, cudaStream_t stream);

/* Copy engine: waits (bounded) for peer `dest`'s ready word (dest != rank),
 * as a stream-ordered one-thread kernel, then sets this rank's go[dest]
 * word (go_off) to the call's epoch, or to epoch - 1 where a wait of the
 * comm expired: the value the chunk signals to `dest` are copied from. */
loom_result_t loom__ag_wait_ready(const loom_ag_copy_args_t *a, int dest, cudaStream_t stream);

/* Sets chunk signals [j0, j1) of this rank's shard on rank `dest` to the
 * call's epoch (a one-warp kernel after the copies; the own rank's signals,
 * and the copy engine's pushes under LOOM_TP_CE_SIGNAL=0). */
loom_result_t loom__ag_signal_chunks(const loom_ag_copy_args_t *a, int dest, int64_t j0, int64_t j1,
                                     cudaStream_t stream);

/* Waits (bounded; a one-warp kernel on `stream`) until every chunk signal
 * of shard `src` on this rank holds the call's epoch: the shard's rows
 * have landed in this rank's a_full. On expiry the comm is in error and
 * the stream goes on (what follows computes on rows that may be stale). */
loom_result_t loom__ag_wait_shard(const loom_ag_copy_args_t *a, int src, cudaStream_t stream);

/* What the RS reduction kernel needs. */
typedef struct loom_rs_reduce_args {
  loom_dev_comm_t dc;
  size_t epoch_off, tile_off, done_off, count_off;
  int64_t m, n;
  int64_t row0, rows;           /* this rank's shard (rows 0: nothing to sum, done still told) */
  int bm, bn, tiles_m, tiles_n;
  int group;                    /* the GEMM's band height in tile rows (its tile order) */
  int c_type;
  const char *src[LOOM_TP_MAX_PEERS]; /* SM_COPY: each rank's partial [m, n] as this rank addresses it;
                                         SM_ATOMIC: src[0] this rank's fp32 accumulator [S, n] */
  int nsrc;                     /* buffers summed: W (SM_COPY) or 1 (SM_ATOMIC) */
  int src_type;                 /* their dtype: c_type, or LOOM_FP32 */
  int64_t src_row_base;         /* row r of the output is row r - src_row_base of a source */
  int zero_src;                 /* 1: each source vector is zeroed after it is read (SM_ATOMIC) */
  int total_blocks;             /* blocks of both launches of a call (side + tail): the last one
                                   to finish resets the counters and tells the sources */
  loom_pointwise_t pw;          /* the epilogue on each fp32 sum (RS: its bias alone; AR: the
                                   call's), element index row x n + col */
  char *dst[LOOM_TP_MAX_PEERS]; /* the outputs each sum is stored into (rounded to c_type): RS
                                   dst[0] = c_shard; AR every rank's out as this rank addresses it */
  int nout;                     /* RS 1, AR W */
  int64_t dst_row_base;         /* row r of the output is row r - dst_row_base of a dst */
  size_t gath_off;              /* AR: gathered signals (set on every peer after each tile's
                                   stores); (size_t)-1: none (RS) */
  int wait_gathered;            /* AR tail launch: its blocks end after every other owner's
                                   gathered signals of the call */
} loom_rs_reduce_args_t;

loom_result_t loom__rs_reduce_launch(const loom_rs_reduce_args_t *a, int blocks, cudaStream_t stream);

/* 1 where g runs on loom's sm90 kernels, whose TMA epilogue BULK_REDUCE's
 * adds need (plans fall back or refuse elsewhere; the tuner skips it). */
int loom__tp_bulk_gemm_runs(const loom_gemm_desc_t *g);
/* BULK_REDUCE's owner pass (a's src[0] the sum buffer, dst[0], rows,
 * row0, pw, done words; tile_off holds the W "pushed" words instead of tile
 * signals: each block first tells every peer this rank's adds are
 * complete, then waits once for every peer's): blocks = a->total_blocks. */
loom_result_t loom__rs_bulk_pass_launch(const loom_rs_reduce_args_t *a, int blocks, cudaStream_t stream);

/* The fused GEMM + reduction of loom_gemm_rs and loom_gemm_ar (rs_engine.c):
 * begin kernel (waits for the peers' done of the previous call), the side
 * launch of the reduction, the hooked GEMM into the plan's partial buffer,
 * the tail launch, the join. `ra` carries the caller's outputs (dst, nout,
 * dst_row_base, pw, gath_off); the rest is filled here. */
loom_result_t loom__rs_fused(loom_plan_t plan, loom_tp_state_t *st, const void *a, const void *b,
                             loom_rs_reduce_args_t *ra, cudaStream_t stream);

/* Loads every kernel of this file (lazy loading: see
 * loom__gemm_hooked_preload) without launching any. */
loom_result_t loom__tp_preload_kernels(void);

/* x = act(x) over n elements of dtype t in place (the sequential path's
 * activation after loom_gemm). */
loom_result_t loom__tp_activation(void *x, size_t n, loom_dtype_t t, int act, cudaStream_t stream);

/* out = x + y over n elements of dtype t, summed in fp32 and rounded once
 * (out may be x; the decomposed GEMM+ReduceScatter's accumulation). */
loom_result_t loom__tp_add(void *out, const void *x, const void *y, size_t n, loom_dtype_t t, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_TP_LINEAR_H */
