/*
 * comm.h - the loom communicator (internal view).
 *
 * A loom comm wraps the caller's NCCL communicator and owns:
 *  - the table of symmetric allocations (loom_malloc), each an NCCL window
 *    with the address of every load/store-reachable peer's copy, evaluated at
 *    allocation time by a one-thread kernel (NCCL 2.28 has no host getter);
 *  - the symmetric workspace (one such allocation), whose first bytes hold
 *    the comm's own signals (the barrier slots) and the rest is carved into
 *    plan slices by a loom_ws_alloc_t;
 *  - the host-mapped error record and device abort flag that bound waits;
 *  - the sticky async error.
 * A "detached" comm (tests only) has all the host bookkeeping and no GPU,
 * NCCL or memory behind it, so that argument checks and workspace accounting
 * can be tested on a machine without a GPU.
 * A comm of a world (world.h: W ranks in one process on one GPU) has no
 * NCCL comm: its symmetric memory and its collective steps go through the
 * world's in-process exchange instead (the two backends below).
 */
#ifndef LOOM_CORE_COMM_H
#define LOOM_CORE_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "signal.h"
#include "workspace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_MIN_NCCL_VERSION 22800 /* 2.28.0 */

typedef struct loom_alloc {
  void *ptr;          /* this rank's address (from ncclMemAlloc) */
  size_t bytes;
  ncclWindow_t win;
  void **peer_ptrs;   /* host array [size]: where this rank's kernels reach each rank's copy */
} loom_alloc_t;

/* Where a comm's symmetric memory comes from: the GPU backend (NCCL windows,
 * or cudaMalloc on one rank), or a test's (memory.c; tests replace it on
 * detached comms to exercise the allocation table and its failures). alloc
 * fills a->ptr, a->win and a->peer_ptrs[size] (peer_ptrs is allocated by the
 * caller); release undoes alloc, and the caller drops the entry either way. */
typedef struct loom_mem_backend {
  loom_result_t (*alloc)(loom_comm_t comm, size_t bytes, loom_alloc_t *a);
  loom_result_t (*release)(loom_comm_t comm, loom_alloc_t *a);
} loom_mem_backend_t;
extern const loom_mem_backend_t loom__mem_backend_gpu;

/* How a comm's ranks agree and wait for each other on the host: NCCL
 * all-reduces on the comm's stream (comm.c), or a world's in-process
 * exchange (world.c). A comm without one (a detached test comm, unless a
 * test put it in a world) makes no collective step. Each call is
 * collective; `what` names the step in messages. */
typedef struct loom_coll_backend {
  /* every rank's words[n] (1 <= n <= 3) reduced with max, into words on every rank */
  loom_result_t (*max_words)(loom_comm_t comm, uint64_t *words, int n, const char *what);
  /* returns once every rank has called it, the work queued on the comm's stream before it done */
  loom_result_t (*fence)(loom_comm_t comm);
  /* the tuners' maximum (loom__comm_max_ms) */
  loom_result_t (*max_ms)(loom_comm_t comm, float ms, float *dev_word, cudaStream_t stream, float *out);
} loom_coll_backend_t;
extern const loom_coll_backend_t loom__coll_backend_nccl;

struct loom_comm {
  ncclComm_t nccl;    /* NULL in a world */
  struct loom_world *world; /* the world this comm is a rank of; NULL: an NCCL (or detached) comm */
  int detached;       /* 1: test comm without GPU or NCCL */
  int rank, size, lsa_rank, lsa_size;
  int device, sm_count, cc_major, cc_minor;
  size_t l2_bytes;
  int nccl_version;
  int timeout_ms;

  void *devcomm;      /* ncclDevComm_t (opaque here: a C++ type) */
  cudaStream_t stream; /* the comm's own stream (setup copies, the fence): waiting
                        * for it never waits for the user's work */
  uint64_t *fence_words; /* device words the fence and the agreement all-reduce (3) */

  const loom_mem_backend_t *mem; /* NULL on a detached comm until a test sets one */
  const loom_coll_backend_t *coll; /* NULL: no collective steps (a detached comm) */
  loom_alloc_t *allocs;
  size_t nallocs, capallocs;

  /* symmetric workspace */
  void *ws_ptr;               /* (its entry in allocs may move as allocs grows) */
  int ws_all_reachable;       /* every rank's workspace is load/store reachable */
  size_t ws_bytes;
  loom_ws_alloc_t ws_alloc;
  char **ws_peer_dev;         /* device array [size] of workspace bases */
  size_t barrier_offset;      /* comm barrier: loom_dev_epoch_t, then slots [size] uint32 */

  loom_error_record_t *err_host, *err_dev; /* mapped pinned */
  uint32_t *abort_flag;                    /* device */

  loom_result_t async_err;
  char async_msg[512];
  int nplans;
};

/* NCCL version check, separate so a host test can feed it old versions. */
loom_result_t loom__check_nccl_version(int version_code);

/* Handle check, then the sticky async error (reading the error record). */
loom_result_t loom__comm_check(loom_comm_t comm, const char *fn);

/* The LOOM_ERR_TIMEOUT message for an error record. */
void loom__format_timeout(const loom_error_record_t *rec, int timeout_ms, char *buf, size_t size);

/* Reserves the comm's own signals (the barrier) at the front of its
 * workspace accounting (creation; the test-support library's detached
 * comms). */
loom_result_t loom__comm_reserve_own(loom_comm_t c);

/* loom_malloc / loom_free without the handle check (creation, teardown). */
loom_result_t loom__comm_malloc(loom_comm_t comm, size_t bytes, void **ptr);
loom_result_t loom__comm_free(loom_comm_t comm, void *ptr);

/* Host-side fence across ranks: returns once every rank has called it, the
 * work queued on the comm's own stream before it (e.g. zeroing signals)
 * done (the comm's collective backend: an NCCL all-reduce of one word on
 * that stream, which it then synchronizes; or the world's exchange after
 * synchronizing it). Nothing on a comm without a backend. Collective. */
loom_result_t loom__comm_fence(loom_comm_t comm);

/* Plan agreement, before anything else collective in a plan's creation:
 * every rank passes the fingerprint of what it resolved (description and
 * choices, loom__fnv64) and whether its own checks failed; one NCCL
 * all-reduce (max of [hash, ~hash, failed]) on the comm's own stream, which
 * it then synchronizes, tells every rank whether any rank failed and
 * whether all fingerprints are equal. So a rank whose arguments are refused
 * never leaves the others waiting in a later collective step, and ranks
 * given different descriptions (or different tuning caches) get an error
 * instead of a hang or wrong data. Returns LOOM_SUCCESS when all agree;
 * LOOM_ERR_INVALID_ARGUMENT when this rank failed (its message is left as
 * it was), when another rank failed (saying so) or when the fingerprints
 * differ (`differ` says what must match); a CUDA/NCCL failure as such
 * (in a world, the exchange's LOOM_ERR_TIMEOUT where a rank never came). No
 * collective on a comm without a collective backend or at W = 1.
 * Collective. */
loom_result_t loom__comm_agree(loom_comm_t comm, const char *fn, uint64_t hash, int failed, const char *differ);

/* The agreement's protocol as pure functions (host-tested at any W): a
 * rank's words, and its verdict from the words all-reduced with max. */
enum { LOOM_AGREE_OK = 0, LOOM_AGREE_SELF_FAILED = 1, LOOM_AGREE_OTHER_FAILED = 2, LOOM_AGREE_DIFFER = 3 };
void loom__agree_words(uint64_t hash, int failed, uint64_t w[3]);
int loom__agree_verdict(uint64_t hash, int failed, const uint64_t max_words[3]);

/* A rank-local refusal r (its message set) before the agreement of a
 * collective creation: the other ranks wait in loom__comm_agree for this
 * rank's answer, so it is given (failed) before r is returned with its own
 * message. Without a collective backend or at W = 1: r as it is. */
loom_result_t loom__comm_refuse(loom_comm_t comm, const char *fn, loom_result_t r);

/* FNV-1a over n bytes, continuing from h (start: LOOM_FNV64_INIT). Hash
 * fields, not whole structs (padding bytes are not defined). */
#define LOOM_FNV64_INIT 1469598103934665603ull
uint64_t loom__fnv64(uint64_t h, const void *p, size_t n);

/* The allocation that contains [ptr, ptr+bytes), or NULL. */
loom_alloc_t *loom__find_alloc(loom_comm_t comm, const void *ptr, size_t bytes);

/* Each rank's copy of the symmetric buffer at p ([p, p + bytes) inside one
 * loom_malloc allocation on `comm`), as this rank's kernels address it, in
 * peer[comm->size]. Not inside one: LOOM_ERR_INVALID_ARGUMENT "<fn>: <what>=<p>
 * (<bytes> bytes) is not inside memory from loom_malloc on this comm:
 * <why>"; a rank not load/store reachable: LOOM_ERR_UNSUPPORTED. */
loom_result_t loom__peer_addresses(const char *fn, const char *what, loom_comm_t comm, const void *p, size_t bytes,
                                   const char *why, char **peer);

/* Collective (tuners): *out = the largest of every rank's `ms` (>= 0; a
 * failed rank passes 1e30f: every rank enters, failed or not, so none
 * waits for it), through the comm's collective backend: an NCCL
 * all-reduce of dev_word (a device float) on `stream`, which it
 * synchronizes, or the world's exchange. */
loom_result_t loom__comm_max_ms(loom_comm_t comm, float ms, float *dev_word, cudaStream_t stream, float *out);

/* LOOM_ERR_INVALID_ARGUMENT naming fn where `stream` is capturing a graph
 * (a tuner launches and synchronizes). */
loom_result_t loom__stream_not_capturing(const char *fn, cudaStream_t stream);

/* Kernel argument describing this comm. */
loom_dev_comm_t loom__comm_dev(loom_comm_t comm);

/* Collective, stream-ordered: every rank's work before it on `stream` is
 * done (and its stores visible) before any rank's work after it starts.
 * Bounded by the comm's timeout. Needs every peer load/store reachable. */
loom_result_t loom__comm_barrier(loom_comm_t comm, cudaStream_t stream);

/* Stream-ordered bounded wait: work after it on `stream` starts once *addr
 * (a word in this rank's symmetric memory) reaches `expected`. */
loom_result_t loom__stream_wait(loom_comm_t comm, const uint32_t *addr, uint32_t expected, int peer,
                                uint32_t signal, uint32_t site, cudaStream_t stream);

/* Stream-ordered signal set by the copy engine (cuStreamWriteValue32) on a
 * word of this or a peer's symmetric memory (an address from loom_peer_ptr).
 * Work before it on `stream` (copies included) is visible first. */
loom_result_t loom__signal_write_ce(loom_comm_t comm, uint32_t *addr, uint32_t value,
                                    cudaStream_t stream);

/* Defined in nccl_device.cu (needs NCCL's C++ device headers). */
loom_result_t loom__devcomm_create(ncclComm_t nccl, void **devcomm);
loom_result_t loom__devcomm_destroy(ncclComm_t nccl, void *devcomm);
loom_result_t loom__lsa_team(ncclComm_t nccl, int *lsa_rank, int *lsa_size);
loom_result_t loom__window_peer_pointers(ncclComm_t nccl, ncclWindow_t win, int size,
                                         void **peer_ptrs);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_COMM_H */
