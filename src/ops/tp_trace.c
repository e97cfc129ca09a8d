/*
 * tp_trace.c - the stage timeline of one tensor-parallel call, for finding
 * where a fused call's time goes (nsys does not run on every machine loom
 * is measured on). Kept only at LOOM_DEBUG=TRACE.
 *
 * Each stage of a call (begin handshake, the side stream's pushes, the own
 * shard's copy, the GEMM, the reduction's tail) records an event on the
 * stream that runs it and the host time at which it was issued. After the
 * call (loom__tp_trace_end) the host waits for the call to finish and logs
 * one line per call:
 *   loom_ag_gemm rank 0 [512 x 14336 x 8192, copy_engine]: host 38.2 us;
 *     begin 4.1/12.0 side.ready 9.3/15.2 ... gemm 301.0/35.9
 * each stage as device time since the call's first event / host time since
 * the call's entry, in us. Events of the user's and the side stream live on
 * one device, so their distances are comparable. Waiting after every call
 * takes away the overlap between consecutive calls: a traced call shows its
 * own timeline, not the throughput of back-to-back calls.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "ops/tp_linear.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

void loom__tp_trace_start(loom_tp_state_t *st, cudaStream_t stream) {
  loom_tp_trace_t *t = &st->trace;
  t->on = 0;
  t->n = 0;
  if (loom__log_level() < LOOM_LOG_TRACE) return;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return;
  }
  for (int i = 0; i < LOOM_TP_TRACE_MAX; ++i)
    if (!t->ev[i] && cudaEventCreate(&t->ev[i]) != cudaSuccess) {
      (void)cudaGetLastError();
      t->ev[i] = NULL;
      return;
    }
  t->on = 1;
  t->t0 = now_us();
  loom__tp_trace_mark(st, "entry", stream);
}

void loom__tp_trace_mark(loom_tp_state_t *st, const char *what, cudaStream_t stream) {
  loom_tp_trace_t *t = &st->trace;
  if (!t->on || t->n >= LOOM_TP_TRACE_MAX) return;
  if (cudaEventRecord(t->ev[t->n], stream) != cudaSuccess) {
    (void)cudaGetLastError();
    t->on = 0;
    return;
  }
  t->what[t->n] = what;
  t->host_us[t->n] = now_us() - t->t0;
  t->n++;
}

void loom__tp_trace_end(loom_tp_state_t *st, const char *fn) {
  loom_tp_trace_t *t = &st->trace;
  if (!t->on) return;
  t->on = 0;
  const double host = now_us() - t->t0;
  if (t->n < 1 || cudaEventSynchronize(t->ev[t->n - 1]) != cudaSuccess || cudaEventSynchronize(st->done) != cudaSuccess) {
    (void)cudaGetLastError();
    LOOM_TRACE("%s rank %d: trace lost (an event failed)", fn, st->rank);
    return;
  }
  char line[1024];
  int len = snprintf(line, sizeof line, "%s rank %d [%lld x %lld x %lld, %s]: host %.1f us; device/host us:", fn,
                     st->rank, (long long)st->gemm.m, (long long)st->gemm.n, (long long)st->gemm.k,
                     loom__tp_transfer_name(st->transfer), host);
  for (int i = 1; i < t->n && len > 0 && (size_t)len < sizeof line; ++i) {
    float ms = -1.f;
    if (cudaEventElapsedTime(&ms, t->ev[0], t->ev[i]) != cudaSuccess) (void)cudaGetLastError();
    len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1f/%.1f", t->what[i], (double)ms * 1e3,
                    t->host_us[i]);
  }
  float all = -1.f;
  if (len > 0 && (size_t)len < sizeof line && cudaEventElapsedTime(&all, t->ev[0], st->done) == cudaSuccess)
    snprintf(line + len, sizeof line - (size_t)len, " done %.1f", (double)all * 1e3);
  (void)cudaGetLastError();
  LOOM_TRACE("%s", line);
}

void loom__tp_trace_destroy(loom_tp_state_t *st) {
  for (int i = 0; i < LOOM_TP_TRACE_MAX; ++i)
    if (st->trace.ev[i]) (void)cudaEventDestroy(st->trace.ev[i]);
  memset(&st->trace, 0, sizeof st->trace);
}
