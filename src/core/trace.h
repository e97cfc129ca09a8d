/*
 * trace.h - the stage timelines of a plan's calls, for every op that goes
 * through the door (op.h), kept only at LOOM_DEBUG=TRACE: for finding where
 * a call's time goes on machines where nsys does not run.
 *
 * Two kinds of marks, one line format:
 *  - stages a call's host code issues (a begin kernel, the side stream's
 *    pushes, the GEMM, a reduction's tail): loom__trace_mark records an
 *    event on the stream that runs the stage and the host time at which it
 *    was issued. The door starts every traced call at its entry ("entry")
 *    and ends it at its exit ("end", after the plan's done event). Nothing
 *    waits for a call: a ring of LOOM_TRACE_RING calls' events is logged,
 *    oldest first, once their events have completed (checked at each later
 *    call's entry; the plan's destruction waits for the rest), one line per
 *    call:
 *      ag_gemm rank 0 call 7 [512 x 14336 x 8192, LOOM_TP_COPY_ENGINE]:
 *        host 38.2 us; device/host us: begin 4.1/12.0 side.ready 9.3/15.2 ...
 *    each stage as device time since the entry's event / host time since
 *    the entry, in us (the label in brackets is the op's `label`, op.h).
 *    Events of the user's and a side stream live on one device, so their
 *    distances are comparable. A full ring waits for its oldest call.
 *  - phases inside one kernel: the op asks for rows of LOOM_TRACE_STAMPS
 *    host-mapped words (loom__trace_stamps, at fill), its kernels store
 *    %globaltimer into them (loom__trace_stamp, trace.cuh), and the plan's
 *    destruction logs the last call's phases, row by row, in us from the
 *    row's stamp 0:
 *      moe dispatch rank 1 (last call), us from the start: counted 1.2 ...
 * A call captured into a CUDA graph is not traced (nothing may query or
 * wait for an event while a capture is open). Tracing never fails a call:
 * an event that cannot be made or recorded turns the trace off for it.
 */
#ifndef LOOM_CORE_TRACE_H
#define LOOM_CORE_TRACE_H

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_TRACE_MAX 12    /* stages per call, "entry" and "end" included */
#define LOOM_TRACE_RING 16   /* calls in flight */
#define LOOM_TRACE_STAMPS 12 /* phase stamps per kernel row */

typedef struct loom_trace loom_trace_t;

/* The plan's trace, made when the plan is filled (NULL below
 * LOOM_DEBUG=TRACE, on a test comm, or when its events cannot be made: a
 * trace is never a reason to fail). Destroy (the plan's last call has
 * completed) logs what is left and frees it. */
loom_trace_t *loom__trace_create(loom_plan_t plan);
void loom__trace_destroy(loom_plan_t plan, loom_trace_t *t);

/* A call's entry and exit (the door's loom__call_enter / _exit), and a
 * stage of it on `stream`. No-ops where the plan has no trace. */
void loom__trace_start(loom_plan_t plan, cudaStream_t stream);
void loom__trace_mark(loom_plan_t plan, const char *what, cudaStream_t stream);
void loom__trace_end(loom_plan_t plan, cudaStream_t stream);

/* Phase stamps for the plan's kernels: `rows` rows (<= 4) of
 * LOOM_TRACE_STAMPS words, row r named row_names[r] and its stamps
 * names[r][i] (NULL ends a row; i = 0 is the row's start). *dev: the
 * words as kernels address them ([row * LOOM_TRACE_STAMPS + i]), NULL where
 * the plan has no trace (kernels then stamp nothing). Call from the op's
 * fill. */
loom_result_t loom__trace_stamps(loom_plan_t plan, int rows, const char *const *row_names,
                                 const char *const (*names)[LOOM_TRACE_STAMPS], unsigned long long **dev);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_TRACE_H */
