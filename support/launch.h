/*
 * launch.h - run a function on W ranks: one process per GPU, or W threads
 * of one process on one GPU (a loom world).
 *
 * Used by the GPU tests and loom-bench. Three modes:
 *  - fork (default): the parent forks W children before any CUDA call; child
 *    r selects GPU r, rank 0 creates the NCCL unique id and hands it to the
 *    others through shared memory; the parent waits for all of them with a
 *    deadline. A child that crashes, fails or outlives the deadline makes the
 *    launch fail, and the remaining children are killed: a hung or crashed
 *    rank fails the test within a bounded time instead of hanging the suite.
 *  - mpirun -np W: every process is one rank (OMPI_COMM_WORLD_RANK/SIZE,
 *    PMI_RANK/SIZE or SLURM_PROCID/NTASKS); rank 0 publishes the unique id in
 *    a file in /tmp named by the job (PMIX_NAMESPACE, SLURM_JOB_ID or
 *    LOOM_LAUNCH_JOB) and the launch's sequence number, which the others
 *    poll (so all ranks must be on one host, or share /tmp); the deadline is
 *    an alarm in each process. A launch for another number of ranks than the
 *    job has fails, saying so. (Not yet run under a real mpirun.)
 *  - world (loom_launch_world): W threads of this process on GPU 0, the
 *    ranks of one loom world (loom_world_create): each thread has the
 *    device current and its rank, no NCCL comm. For correctness at W > 2 on
 *    one GPU, never timing. A rank that outlives the deadline ends the
 *    process (a thread cannot be killed), so a test's own process runs it.
 * The function gets the rank, the size and an initialised NCCL comm on the
 * rank's GPU (or the world), and returns 0 for success; it makes its loom
 * comm with loom_launch_comm_create, which works in every mode. Host tools
 * only: this exits.
 */
#ifndef LOOM_TOOLS_LAUNCH_H
#define LOOM_TOOLS_LAUNCH_H

#include <stdint.h>

#include <nccl.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_rank_ctx {
  int rank, size;
  int device;          /* CUDA device of this rank */
  ncclComm_t nccl;     /* NULL in a world */
  loom_world_t world;  /* the world of loom_launch_world; NULL otherwise */
} loom_rank_ctx_t;

typedef int (*loom_rank_fn)(loom_rank_ctx_t *ctx, void *arg);

/* Number of CUDA devices, counted in a short-lived child so that the parent
 * stays CUDA-free and can still fork. 0 where there is none (or no driver). */
int loom_launch_gpu_count(void);

/* Device 0's compute capability as major * 10 + minor (90: Hopper), read
 * the same way (a short-lived child); 0 where there is no GPU. */
int loom_launch_gpu_cc(void);

/* 1 when this process was started by mpirun/srun (and so is one rank). */
int loom_launch_under_mpi(int *rank, int *size);

/* mpirun mode's id exchange through a file: rank 0 publishes *id at `path`
 * (atomically, by rename); other ranks poll for it up to timeout_s and fill
 * *id. 0 on success. */
int loom_launch_share_id(int rank, const char *path, ncclUniqueId *id, double timeout_s);

/* Runs fn on `size` ranks; 0 when every rank returned 0 within timeout_s.
 * Under mpirun, `size` must match the job's size. */
int loom_launch(int size, int timeout_s, loom_rank_fn fn, void *arg);

/* Runs fn on `size` ranks (1..64) as threads of this process, a loom world
 * on GPU 0. Sets CUDA_MODULE_LOADING=EAGER and CUDA_DEVICE_MAX_CONNECTIONS=32
 * first (a world needs both: call
 * this before the process's first CUDA call). 0 when the world was made,
 * every rank returned 0 within timeout_s and the world was destroyed (each
 * rank destroys its comm); a rank still running at the deadline ends the
 * process with exit status 1, naming it. LOOM_TEST_POISON_DEVICE=B fills
 * most free device memory with byte B (then frees it) before the ranks
 * start: a read of never-written memory shows. */
int loom_launch_world(int size, int timeout_s, loom_rank_fn fn, void *arg);

/* This rank's loom comm: loom_comm_create on ctx->nccl, or
 * loom_comm_create_in_world in a world (collective either way). */
loom_result_t loom_launch_comm_create(const loom_rank_ctx_t *ctx, const loom_config_t *cfg, loom_comm_t *out);

/* Collective over the launch's ranks (tests' own checks, beside loom's):
 * 1 when every rank passed the same h, 0 when not or when the exchange
 * failed (an NCCL all-reduce; in a world, the launcher's host barrier). */
int loom_launch_same_u64(const loom_rank_ctx_t *ctx, uint64_t h);

/* In a one-GPU world (ctx->world): the legacy stream's work (every rank's
 * cudaMemcpy / cudaMemset, which may still be landing when they return) is
 * waited for, then every rank's host thread reaches this point before any
 * goes on; nothing (1) where each rank has a GPU of its own. Tests put it
 * between a call's uploads and the call, so that no rank's upload is
 * queued behind its previous call, or still landing, while a peer's kernel
 * of the new call already runs (docs/world.md, "Rules a program in a world
 * must keep"). 0 when the wait or the exchange failed. */
int loom_launch_world_sync(const loom_rank_ctx_t *ctx);

/* A rank's captured graph made ready to launch: instantiated into *exec,
 * uploaded on `stream` and synchronized; in a one-GPU world, then every
 * rank's thread past this point before any goes on (the launcher's host
 * barrier). Instantiation can wait for the device: in a world of 8 ranks
 * an AllGather+GEMM graph's cudaGraphInstantiate returned only when the
 * peers' already launched graphs, waiting for this rank, timed out
 * (bench/results/h200-20261129-world-queues/). Collective in a world.
 * 0 on success; else a line on stderr naming the failed step, and 1. */
int loom_launch_graph_ready(const loom_rank_ctx_t *ctx, cudaGraph_t graph, cudaGraphExec_t *exec,
                            cudaStream_t stream);

/* Copies `bytes` from device memory at src to host memory at dst (pageable
 * or pinned) after every piece of work queued on `stream`: the stream is
 * synchronised first, then the copy made. In a one-GPU world, three ranks'
 * pageable downloads queued behind their collective calls held back the
 * fourth rank's call until the waits expired (the MoE soak; the two-thread
 * probe, dev/world/host_calls_probe.cu, did not reproduce it; docs/world.md);
 * waiting in cudaStreamSynchronize first holds nothing. The first error of
 * either step. */
cudaError_t loom_launch_download(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* LOOM_TEST_STEP_TIMES=1: one line on stderr, "[times] rank r step s
 * stage  ms", the milliseconds since the process's first such call, so
 * that a rank whose thread is held before a call (a host call that waits
 * for the device, in a world) shows where. Nothing otherwise. */
void loom_launch_step_time(int rank, int step, const char *stage);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_TOOLS_LAUNCH_H */
