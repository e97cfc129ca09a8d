/*
 * scratch.h - device scratch memory that loom's kernels need between calls
 * (stream-K / split-K tickets and partials of the GEMM engine, cuBLASLt's
 * workspace), kept per (kind, device, stream).
 *
 * Outside a stream capture, work on one stream runs in order, so one buffer
 * per (kind, device, stream) serves every call on it. It is allocated on
 * first need and grown by allocating a larger one; a superseded buffer is
 * kept until loom__scratch_release_all (loom_finalize), since a graph
 * captured earlier may not point at it but work queued earlier may.
 *
 * Inside a stream capture the scratch belongs to the graph: allocated with
 * cudaMallocAsync on the capturing stream (a memory node), its leading
 * zero_bytes zeroed by a memset node, and freed by loom__scratch_done after
 * the work (a free node). So two graphs that captured GEMMs on one stream
 * can be replayed concurrently on different streams without sharing tickets,
 * and replays never touch the per-stream buffers.
 *
 * Thread-safe (one mutex; host bookkeeping only while it is held).
 */
#ifndef LOOM_CORE_SCRATCH_H
#define LOOM_CORE_SCRATCH_H

#include <stddef.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_scratch_kind {
  LOOM_SCRATCH_GEMM = 0,   /* GEMM engine: tickets then partials */
  LOOM_SCRATCH_CUBLAS = 1, /* cuBLASLt workspace of the baseline GEMM */
  LOOM_SCRATCH_KINDS
} loom_scratch_kind_t;

typedef struct loom_scratch {
  void *ptr;         /* the zeroed part: zero_bytes (>= asked), then */
  void *rest;        /* = ptr + zero_bytes: at least the other bytes asked for */
  size_t zero_bytes; /* 256-aligned */
  int graph_owned;   /* 1: allocated in a capture; loom__scratch_done frees it */
} loom_scratch_t;

/* Device memory of the current device for work about to be queued on
 * `stream`: a part of at least zero_bytes that reads as zero when the work
 * starts, and after it at least rest_bytes of anything. Fresh buffers are
 * zeroed (stream-ordered); a buffer handed out again is as the last work on
 * the stream left it, so work must leave the zeroed part zero (stream-K
 * tickets reset themselves) and write only `rest` otherwise. */
loom_result_t loom__scratch_get(loom_scratch_kind_t kind, cudaStream_t stream, size_t zero_bytes, size_t rest_bytes,
                                loom_scratch_t *s);

/* Once the work using *s is queued on `stream`: frees graph-owned scratch in
 * the graph (a no-op for the per-stream buffers). */
loom_result_t loom__scratch_done(cudaStream_t stream, const loom_scratch_t *s);

/* Frees every per-stream buffer of every kind and device. No work using them
 * may be in flight, and no graph that captured work using them will run
 * again (graph-owned scratch is not affected). */
void loom__scratch_release_all(void);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_SCRATCH_H */
