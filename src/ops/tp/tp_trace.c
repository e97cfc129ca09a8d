/*
 * tp_trace.c - the stage timelines of tensor-parallel calls, for finding
 * where a fused call's time goes (nsys does not run on every machine loom
 * is measured on). Kept only at LOOM_DEBUG=TRACE.
 *
 * Each stage of a call (begin handshake, the side stream's pushes, the own
 * shard's copy, the GEMM, the reduction's tail) records an event on the
 * stream that runs it and the host time at which it was issued. Nothing
 * waits for a call: a ring of LOOM_TP_TRACE_RING calls' events is logged,
 * oldest first, as their events complete (checked at each later call's
 * entry; the plan's destruction waits for the rest), one line per call:
 *   ag_gemm rank 0 call 7 [512 x 14336 x 8192, LOOM_TP_COPY_ENGINE]:
 *     host 38.2 us; device/host us: begin 4.1/12.0 side.ready 9.3/15.2 ...
 * each stage as device time since the call's entry event / host time since
 * the call's entry, in us; "end" is the call's last event (after the join).
 * Events of the user's and the side stream live on one device, so their
 * distances are comparable. A full ring waits for its oldest call.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "ops/tp/tp_linear.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void log_call(const loom_tp_state_t *st, int64_t call, const loom_tp_trace_call_t *c) {
  char line[1024];
  int len = snprintf(line, sizeof line, "%s rank %d call %lld [%lld x %lld x %lld, %s]: host %.1f us; device/host us:",
                     loom__tp_kind_op((int)st->kind), st->rank, (long long)call, (long long)st->gemm.m,
                     (long long)st->gemm.n, (long long)st->gemm.k, loom__tp_transfer_name(st->transfer),
                     c->host_us[c->n - 1]);
  for (int i = 1; i < c->n && len > 0 && (size_t)len < sizeof line; ++i) {
    float ms = -1.f;
    if (cudaEventElapsedTime(&ms, c->ev[0], c->ev[i]) != cudaSuccess) (void)cudaGetLastError();
    len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1f/%.1f", c->what[i], (double)ms * 1e3, c->host_us[i]);
  }
  LOOM_TRACE("%s", line);
}

/* Logs the traced calls whose last event has completed, oldest first,
 * waiting for those before call `wait_below`. */
static void log_ready(loom_tp_state_t *st, int64_t wait_below) {
  loom_tp_trace_t *t = &st->trace;
  while (t->logged < t->calls) {
    const loom_tp_trace_call_t *c = &t->ring[t->logged % LOOM_TP_TRACE_RING];
    const cudaEvent_t last = c->ev[c->n - 1];
    const cudaError_t e = t->logged < wait_below ? cudaEventSynchronize(last) : cudaEventQuery(last);
    if (e == cudaErrorNotReady) break;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      LOOM_TRACE("%s rank %d call %lld: trace lost (%s)", loom__tp_kind_op((int)st->kind), st->rank,
                 (long long)t->logged, cudaGetErrorString(e));
    } else {
      log_call(st, t->logged, c);
    }
    t->logged++;
  }
}

void loom__tp_trace_start(loom_tp_state_t *st, cudaStream_t stream) {
  loom_tp_trace_t *t = &st->trace;
  t->on = 0;
  if (loom__log_level() < LOOM_LOG_TRACE) return;
  /* a captured call is not traced, and nothing here may query or wait for
   * events while a capture is open (that would invalidate the capture) */
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return;
  }
  /* the ring's slot for this call must be free: wait for its old call */
  log_ready(st, t->calls - LOOM_TP_TRACE_RING + 1);
  loom_tp_trace_call_t *c = &t->ring[t->calls % LOOM_TP_TRACE_RING];
  for (int i = 0; i < LOOM_TP_TRACE_MAX; ++i)
    if (!c->ev[i] && cudaEventCreate(&c->ev[i]) != cudaSuccess) {
      (void)cudaGetLastError();
      c->ev[i] = NULL;
      return;
    }
  c->n = 0;
  c->t0 = now_us();
  t->on = 1;
  loom__tp_trace_mark(st, "entry", stream);
}

void loom__tp_trace_mark(loom_tp_state_t *st, const char *what, cudaStream_t stream) {
  loom_tp_trace_t *t = &st->trace;
  loom_tp_trace_call_t *c = &t->ring[t->calls % LOOM_TP_TRACE_RING];
  if (!t->on || c->n >= LOOM_TP_TRACE_MAX) return;
  if (cudaEventRecord(c->ev[c->n], stream) != cudaSuccess) {
    (void)cudaGetLastError();
    t->on = 0;
    return;
  }
  c->what[c->n] = what;
  c->host_us[c->n] = now_us() - c->t0;
  c->n++;
}

void loom__tp_trace_end(loom_tp_state_t *st, cudaStream_t stream) {
  loom_tp_trace_t *t = &st->trace;
  if (!t->on) return;
  loom_tp_trace_call_t *c = &t->ring[t->calls % LOOM_TP_TRACE_RING];
  if (c->n >= LOOM_TP_TRACE_MAX) c->n = LOOM_TP_TRACE_MAX - 1; /* room for "end" */
  loom__tp_trace_mark(st, "end", stream);
  if (t->on) t->calls++;
  t->on = 0;
}

void loom__tp_trace_destroy(loom_tp_state_t *st) {
  log_ready(st, st->trace.calls);
  for (int k = 0; k < LOOM_TP_TRACE_RING; ++k)
    for (int i = 0; i < LOOM_TP_TRACE_MAX; ++i)
      if (st->trace.ring[k].ev[i]) (void)cudaEventDestroy(st->trace.ring[k].ev[i]);
  memset(&st->trace, 0, sizeof st->trace);
}
