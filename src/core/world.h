/*
 * world.h - W ranks in one process on one GPU (internal view; the public
 * API is loom_world_* and loom_comm_create_in_world in loom.h).
 *
 * A world holds what its ranks share: the device, each rank's share of its
 * SMs (the comm's sm_count: every grid whose blocks wait for peers is sized
 * from it, so that every rank's waiting blocks are resident at once), and
 * the in-process exchange that replaces NCCL for the collective setup steps:
 *
 *   loom__world_exchange   every rank deposits a few words in its slot of a
 *                          round, waits (bounded by its comm's timeout) until
 *                          every rank has deposited, and reads them all.
 *
 * Rounds alternate between two sets of slots, so a rank that has left round
 * s may enter round s + 1 while a slower one still reads round s; it cannot
 * reach round s + 2 (which reuses round s's slots) before every rank has
 * entered s + 1, i.e. has finished reading s. Each deposit carries the kind
 * of step: ranks that make different collective calls (one in loom_malloc,
 * another in a plan's agreement) all get LOOM_ERR_INVALID_ARGUMENT naming
 * both, instead of mixing each other's words. A wait that expires names the
 * step and the ranks that never came (and the step each of them entered
 * last), and breaks the world: every later exchange fails at once with
 * LOOM_ERR_TIMEOUT, so comms can still be destroyed without waiting again.
 *
 * On top of the exchange, the two backends of a world's comms (comm.h):
 * symmetric memory (each rank cudaMallocs its own copy; the exchange hands
 * every rank every copy's address, and refuses sizes that differ or a rank
 * whose allocation failed, on every rank) and collective steps (agreement:
 * the maximum of the words; fence: the comm's stream synchronized, then an
 * exchange; the tuners' maximum).
 *
 * A test world (testing/hooks.h) has no GPU: a given SM count, host memory
 * for the symmetric allocations, detached comms (no kernels), so that the
 * exchange, the backends and the agreement run on a machine without a GPU.
 */
#ifndef LOOM_CORE_WORLD_H
#define LOOM_CORE_WORLD_H

#include <stdint.h>

#include "loom.h"
#include "comm.h"
#include "param.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_WORLD_MAX_RANKS 64
#define LOOM_WORLD_WORDS 4 /* words one rank deposits per exchange, at most */

/* The kinds of step an exchange serves (compared across ranks). */
typedef enum loom_world_step {
  LOOM_WORLD_JOIN = 1,   /* comm creation: whether every rank's local steps succeeded */
  LOOM_WORLD_AGREE = 2,  /* loom__comm_agree (max of words) */
  LOOM_WORLD_FENCE = 3,  /* loom__comm_fence */
  LOOM_WORLD_MALLOC = 4, /* loom_malloc: every rank's address */
  LOOM_WORLD_FREE = 5,   /* loom_free */
  LOOM_WORLD_MAX_MS = 6  /* the tuners' maximum */
} loom_world_step_t;

/* The rank's share of the device's SMs: sms x percent / 100 / size, at least 1
 * (percent outside 1..100: 100). */
int loom__world_budget(int sms, int size, int percent);

/* Whether CUDA_DEVICE_MAX_CONNECTIONS's value `env` (NULL or not a number
 * in 1..32: CUDA's default, 8) gives a world of `size` ranks the hardware
 * work queues it needs. CUDA feeds the device through that many queues; a
 * stream whose head kernel waits for a peer, with work queued behind it,
 * holds its queue, and once every queue is held no other launch starts
 * (dev/world/queues_probe.cu). A rank holds one queue (its stream) or two
 * (a plan's side stream too). 2: more than 2 x size queues; 1: more than
 * size only (a plan with a side stream on every rank can stall: `why` says
 * so); 0: size or fewer (every rank waiting holds every queue; `why` says
 * what to set). Pure. */
int loom__world_queues_verdict(int size, const char *env, char *why, size_t why_bytes);
/* LOOM_WORLD_SM_PERCENT (world.c): the percent the worlds created now use. */
LOOM_PARAM_DECL_INT(WORLD_SM_PERCENT)

/* The delay before a call of rank `rank` of a world (nanoseconds): rank x
 * LOOM_WORLD_SKEW_US x 1000, 0 where the setting is 0 (the default). */
uint64_t loom__world_skew_ns(int rank);

/* Every op's call entry (loom__call_enter) in a world: where
 * LOOM_WORLD_SKEW_US is set, a one-thread kernel on `stream` that waits
 * loom__world_skew_ns(rank) before the call's own work, so that the ranks'
 * kernels start staggered and a missing wait shows as a wrong result
 * instead of hiding behind ranks that start together (captured too: graph
 * replays are skewed the same). Nothing otherwise. */
loom_result_t loom__world_skew(loom_comm_t comm, cudaStream_t stream);

/* Every rank's mine[n] (n <= LOOM_WORLD_WORDS) into all[size][n] (rank q's
 * words at all + q * n), once every rank of the world has called it for
 * this step. `rank` is the caller's; `kind` the step's kind (the same on
 * every rank, else LOOM_ERR_INVALID_ARGUMENT on every rank, naming them);
 * `what` names the step in messages. Waits at most timeout_ms: then
 * LOOM_ERR_TIMEOUT naming the step and the ranks that did not come, and
 * the world is broken (every later exchange fails at once). */
loom_result_t loom__world_exchange(loom_world_t w, int rank, int kind, const char *what, int timeout_ms,
                                   const uint64_t *mine, int n, uint64_t *all);

/* The world handle check: NULL or not live gives LOOM_ERR_INVALID_ARGUMENT naming fn. */
loom_result_t loom__world_check(loom_world_t w, const char *fn);

/* Creation of rank `rank`'s comm c (not yet joined): checks the rank
 * (0..size-1, no live comm of its own in the world), records it and fills
 * c's world fields (world, rank, size, lsa team, backends, detached for a
 * test world). */
loom_result_t loom__world_enter(loom_world_t w, int rank, loom_comm_t c);

/* Undoes loom__world_enter (comm teardown). */
void loom__world_leave(loom_world_t w, int rank);

/* The join exchange of comm creation: every rank passes its local steps'
 * result r (its message set where it failed); LOOM_SUCCESS when every rank
 * succeeded, r (its message kept) where this rank failed, else
 * LOOM_ERR_INVALID_ARGUMENT naming the ranks that failed. */
loom_result_t loom__world_join(loom_comm_t c, loom_result_t r);

int loom__world_device(loom_world_t w);
int loom__world_sm_budget(loom_world_t w);

/* Creation shared by loom_world_create and the test hook: `sms` SMs on
 * `device` (-1 and detached = 1: a test world without a GPU). */
loom_result_t loom__world_create(int size, int device, int sms, int detached, loom_world_t *out);

/* LOOM_ERR_UNSUPPORTED: "<fn>: <what> cannot run in a world of W ranks on
 * one GPU: <why>", for the paths a world refuses. */
loom_result_t loom__world_unsupported(loom_comm_t comm, const char *fn, const char *what, const char *why);

/* Why the tuners are refused in a world (their `why`). */
#define LOOM_WORLD_NO_TIMING                                                                                  \
  "its ranks share one GPU, so its timings are not W-rank performance and would mislead the tuning cache; " \
  "tune with one GPU per rank"


extern const loom_mem_backend_t loom__mem_backend_world;
extern const loom_coll_backend_t loom__coll_backend_world;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_WORLD_H */
