/*
 * trace.c - the stage timelines of a plan's calls (see trace.h): a ring of
 * calls' events and host times, logged as they complete, and the phase
 * stamps of the plan's kernels, logged when the plan is destroyed.
 */
#define _POSIX_C_SOURCE 200809L
#include "trace.h"
#include "comm.h"
#include "error.h"
#include "log.h"
#include "op.h"
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct trace_call {
  int n;
  cudaEvent_t ev[LOOM_TRACE_MAX];
  const char *what[LOOM_TRACE_MAX];
  double host_us[LOOM_TRACE_MAX]; /* when the mark was issued, from the call's entry */
  double t0;                      /* the call's entry (host clock, us) */
  int64_t call;                   /* the plan's call number (its epoch) */
} trace_call_t;

struct loom_trace {
  int on;                /* the call being made is traced */
  int64_t calls, logged; /* calls traced, lines logged */
  trace_call_t ring[LOOM_TRACE_RING];
  char label[160];       /* the op's label of the plan (op.h), or "" */
  /* phase stamps (loom__trace_stamps) */
  unsigned long long *stamps; /* host-mapped [rows][LOOM_TRACE_STAMPS], or NULL */
  int rows;
  const char *const *row_names;
  const char *const (*names)[LOOM_TRACE_STAMPS];
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* One call's line: the stages' device and host times from the entry. */
static void log_call(loom_plan_t plan, const loom_trace_t *t, const trace_call_t *c) {
  char line[1024];
  int len = snprintf(line, sizeof line, "%s rank %d call %lld%s%s%s: host %.1f us; device/host us:", plan->op->name,
                     plan->comm->rank, (long long)c->call, t->label[0] ? " [" : "", t->label, t->label[0] ? "]" : "",
                     c->host_us[c->n - 1]);
  for (int i = 1; i < c->n && len > 0 && (size_t)len < sizeof line; ++i) {
    float ms = -1.f;
    if (cudaEventElapsedTime(&ms, c->ev[0], c->ev[i]) != cudaSuccess) (void)cudaGetLastError();
    len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1f/%.1f", c->what[i], (double)ms * 1e3, c->host_us[i]);
  }
  LOOM_TRACE("%s", line);
}

/* Logs the traced calls whose last event has completed, oldest first,
 * waiting for those before traced call `wait_below`. */
static void log_ready(loom_plan_t plan, loom_trace_t *t, int64_t wait_below) {
  while (t->logged < t->calls) {
    const trace_call_t *c = &t->ring[t->logged % LOOM_TRACE_RING];
    const cudaEvent_t last = c->ev[c->n - 1];
    const cudaError_t e = t->logged < wait_below ? cudaEventSynchronize(last) : cudaEventQuery(last);
    if (e == cudaErrorNotReady) break;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      LOOM_TRACE("%s rank %d call %lld: trace lost (%s)", plan->op->name, plan->comm->rank, (long long)c->call,
                 cudaGetErrorString(e));
    } else {
      log_call(plan, t, c);
    }
    t->logged++;
  }
}

/* The last call's phases, a line per stamped row. */
static void log_stamps(loom_plan_t plan, const loom_trace_t *t) {
  const volatile unsigned long long *s = t->stamps;
  for (int r = 0; r < t->rows; ++r) {
    const volatile unsigned long long *row = s + (size_t)r * LOOM_TRACE_STAMPS;
    char line[640];
    int len = snprintf(line, sizeof line, "%s %s rank %d (last call), us from the start:", plan->op->name,
                       t->row_names[r], plan->comm->rank);
    for (int i = 1; i < LOOM_TRACE_STAMPS && t->names[r][i] && len > 0 && (size_t)len < sizeof line; ++i)
      len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1f", t->names[r][i],
                      row[i] && row[0] ? (double)(long long)(row[i] - row[0]) * 1e-3 : -1.0);
    LOOM_TRACE("%s", line);
  }
}

loom_trace_t *loom__trace_create(loom_plan_t plan) {
  if (loom__log_level() < LOOM_LOG_TRACE || plan->comm->detached) return NULL;
  loom_trace_t *t = (loom_trace_t *)calloc(1, sizeof *t);
  if (!t) return NULL;
  for (int k = 0; k < LOOM_TRACE_RING; ++k)
    for (int i = 0; i < LOOM_TRACE_MAX; ++i)
      if (cudaEventCreate(&t->ring[k].ev[i]) != cudaSuccess) {
        (void)cudaGetLastError();
        loom__trace_destroy(plan, t);
        return NULL;
      }
  if (plan->op->label) plan->op->label(plan->op_state, t->label, sizeof t->label);
  return t;
}

void loom__trace_destroy(loom_plan_t plan, loom_trace_t *t) {
  if (!t) return;
  log_ready(plan, t, t->calls);
  if (t->stamps) {
    log_stamps(plan, t);
    (void)cudaFreeHost(t->stamps);
  }
  for (int k = 0; k < LOOM_TRACE_RING; ++k)
    for (int i = 0; i < LOOM_TRACE_MAX; ++i)
      if (t->ring[k].ev[i]) (void)cudaEventDestroy(t->ring[k].ev[i]);
  free(t);
}

void loom__trace_start(loom_plan_t plan, cudaStream_t stream) {
  loom_trace_t *t = plan->trace;
  if (!t) return;
  t->on = 0;
  /* a captured call is not traced, and nothing here may query or wait for
   * events while a capture is open (that would invalidate the capture) */
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return;
  }
  /* the ring's slot for this call must be free: wait for its old call */
  log_ready(plan, t, t->calls - LOOM_TRACE_RING + 1);
  trace_call_t *c = &t->ring[t->calls % LOOM_TRACE_RING];
  c->n = 0;
  c->t0 = now_us();
  c->call = (int64_t)plan->epoch + 1;
  t->on = 1;
  loom__trace_mark(plan, "entry", stream);
}

void loom__trace_mark(loom_plan_t plan, const char *what, cudaStream_t stream) {
  loom_trace_t *t = plan->trace;
  if (!t || !t->on) return;
  trace_call_t *c = &t->ring[t->calls % LOOM_TRACE_RING];
  if (c->n >= LOOM_TRACE_MAX) return;
  if (cudaEventRecord(c->ev[c->n], stream) != cudaSuccess) {
    (void)cudaGetLastError();
    t->on = 0;
    return;
  }
  c->what[c->n] = what;
  c->host_us[c->n] = now_us() - c->t0;
  c->n++;
}

void loom__trace_end(loom_plan_t plan, cudaStream_t stream) {
  loom_trace_t *t = plan->trace;
  if (!t || !t->on) return;
  trace_call_t *c = &t->ring[t->calls % LOOM_TRACE_RING];
  if (c->n >= LOOM_TRACE_MAX) c->n = LOOM_TRACE_MAX - 1; /* room for "end" */
  loom__trace_mark(plan, "end", stream);
  if (t->on) t->calls++;
  t->on = 0;
}

loom_result_t loom__trace_stamps(loom_plan_t plan, int rows, const char *const *row_names,
                                 const char *const (*names)[LOOM_TRACE_STAMPS], unsigned long long **dev) {
  *dev = NULL;
  loom_trace_t *t = plan->trace;
  if (!t) return LOOM_SUCCESS;
  if (rows < 1 || rows > 4 || t->stamps)
    return loom__fail(LOOM_ERR_INTERNAL, "loom__trace_stamps (%s): rows=%d (1..4, once per plan)", plan->op->name,
                      rows);
  const size_t n = (size_t)rows * LOOM_TRACE_STAMPS * sizeof(unsigned long long);
  LOOM_CUDA(cudaHostAlloc((void **)&t->stamps, n, cudaHostAllocMapped));
  memset(t->stamps, 0, n);
  t->rows = rows, t->row_names = row_names, t->names = names;
  LOOM_CUDA(cudaHostGetDevicePointer((void **)dev, t->stamps, 0));
  return LOOM_SUCCESS;
}
