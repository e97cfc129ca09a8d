/*
 * signal.h - signals between ranks, and what kernels of a comm receive.
 *
 * A signal is a 32-bit word in the comm's symmetric workspace that only ever
 * grows: call number e of a plan waits until the word reaches e ("epoch"),
 * compared wrap-safe ((int32_t)(seen - expected) >= 0, the same cyclic test
 * as cuStreamWaitValue32's GEQ). Nothing is reset between calls.
 *
 * Setters: a kernel (data stores, then st.release.sys of the epoch, see
 * signal.cuh) or the copy engine (cuStreamWriteValue32 on the peer's word,
 * loom__signal_write_ce). Waiters: a kernel (ld.acquire.sys polls, bounded by
 * the comm's timeout) or a stream (loom__stream_wait: a one-thread kernel with
 * the same bounded poll, since cuStreamWaitValue32 cannot time out).
 *
 * When a wait expires, the first expiring wait fills the host-mapped error
 * record (rank, peer, signal index, expected and seen value, the wait site),
 * raises the comm's device abort flag so every other wait of the comm gives
 * up at once, and its kernel returns. The host turns the record into
 * LOOM_ERR_TIMEOUT on the next call (loom__comm_check).
 *
 * This header is plain C and is included by host C files and by .cu files.
 */
#ifndef LOOM_CORE_SIGNAL_H
#define LOOM_CORE_SIGNAL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a wait happened: named in the timeout message. Core's own sites
 * are below; the layers above core declare theirs in their own headers, each
 * layer in its own range of ids, and name them with loom__wait_site_register
 * (a constructor in the layer's host file):
 *     1..15   core                 64..79   embedding op (ops/)
 *     16..31  GEMM engine (gemm/)  80..127  other fused ops (ops/), 16 each
 *     128..191 the language (lang/)  192..255 tests and tools
 * Core knows the ranges, not what is in them. */
typedef enum loom_wait_site {
  LOOM_SITE_TEST = 0,        /* a wait with no site of its own */
  LOOM_SITE_BARRIER = 1,     /* loom__comm_barrier */
  LOOM_SITE_STREAM_WAIT = 2, /* loom__stream_wait */
  LOOM_SITE_CONSUMED = 5,    /* waiting for a peer to release a buffer */
  LOOM_SITE_MAX = 256        /* ids are below this */
} loom_wait_site_t;

/* Names wait site `site` (< LOOM_SITE_MAX) in timeout messages; `name` is a
 * static string. Registering the same name again is a no-op; another name
 * for a registered site is a clash: LOOM_ERR_INTERNAL (the first name stays)
 * and it is counted by loom__wait_site_clashes. Thread-safe. */
int loom__wait_site_register(uint32_t site, const char *name);

/* The site's name, "unknown" if none was registered. */
const char *loom__wait_site_name(uint32_t site);

/* Registrations refused so far (clashes, out-of-range ids): 0 in a correct
 * build (a host test checks it). */
int loom__wait_site_clashes(void);

/* Filled by the first wait of a comm that expires. Lives in host-mapped
 * pinned memory; written by the device, read by the host. */
typedef struct loom_error_record {
  uint32_t claimed;   /* 0 until a wait expires; the expiring wait sets 1 */
  uint32_t valid;     /* 1 once the fields below are written */
  int32_t rank;       /* the rank whose kernel waited */
  int32_t peer;       /* the rank expected to set the signal (-1: unknown) */
  uint32_t signal;    /* signal index within the plan's or comm's signal array */
  uint32_t expected;  /* epoch the wait needed */
  uint32_t seen;      /* value last read */
  uint32_t site;      /* loom_wait_site_t */
  uint64_t waited_ns; /* how long it waited */
} loom_error_record_t;

/* What every loom kernel gets about its comm (by value, a kernel argument). */
typedef struct loom_dev_comm {
  int rank, size;
  char *const *peer_ws;        /* device array [size]: base of each rank's workspace as this
                                  rank's kernels address it (NULL: not load/store reachable) */
  char *ws;                    /* this rank's workspace */
  loom_error_record_t *err;    /* host-mapped error record */
  uint32_t *abort_flag;        /* device word: nonzero once any wait of the comm expired */
  uint64_t timeout_ns;
} loom_dev_comm_t;

/* The call counter of a plan (or of the comm's barrier) in device memory,
 * so that epochs advance on the GPU and a CUDA graph that captured a call
 * gets a new epoch on every replay. A kernel reads epoch+1 when it starts
 * (loom__epoch_begin); every block reports when it is done with it
 * (loom__epoch_block_done) and the last block publishes the new epoch and
 * resets the block count, before the next kernel on the stream starts. */
typedef struct loom_dev_epoch {
  uint32_t epoch;       /* calls completed */
  uint32_t blocks_done; /* blocks of the running call that are done with it */
  uint32_t pad[2];
} loom_dev_epoch_t;

/* Wrap-safe "seen has reached expected". */
static inline
#ifdef __CUDACC__
__host__ __device__
#endif
int loom__epoch_reached(uint32_t seen, uint32_t expected) {
  return (int32_t)(seen - expected) >= 0;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_SIGNAL_H */
