/*
 * tune_rule.c - see tune_rule.h.
 */
#include "tune_rule.h"
#include "comm.h"
#include "error.h"
#include "log.h"
#include "param.h"
#include "tune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_FAILED INFINITY /* a rank's time after a failure: every rank stops */

static int fcmp(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

int loom__tune_rule_pick(const float *t, int rounds, int n, float *med) {
  float r[64];
  for (int i = 0; i < n; ++i) {
    int k = 0;
    for (int j = 0; j < rounds && k < 64; ++j) r[k++] = t[(size_t)j * (size_t)n + (size_t)i];
    qsort(r, (size_t)k, sizeof r[0], fcmp);
    /* left out in any round: left out (a candidate runs everywhere or nowhere) */
    med[i] = r[k - 1] >= LOOM_TUNE_LEFT_OUT ? LOOM_TUNE_LEFT_OUT : k % 2 ? r[k / 2] : 0.5f * (r[k / 2 - 1] + r[k / 2]);
  }
  int best = -1; /* the fastest that runs here */
  for (int i = 0; i < n; ++i)
    if (med[i] < LOOM_TUNE_LEFT_OUT && (best < 0 || med[i] < med[best])) best = i;
  /* the default stays unless the fastest beats it by the margin */
  if (best > 0 && med[0] < LOOM_TUNE_LEFT_OUT && !(med[best] < med[0] * (1.0f - LOOM_TUNE_MARGIN))) best = 0;
  return best;
}

/* Candidate i's calls of one round: warm-up, then the timed ones; ms per
 * call. */
static loom_result_t race_time(const loom_tune_race_t *race, int i, cudaStream_t stream, cudaEvent_t ev[2],
                               float *ms) {
  for (int w = 0; w < LOOM_TUNE_WARM; ++w) LOOM_TRY(race->call(race->ctx, i, stream));
  LOOM_CUDA(cudaEventRecord(ev[0], stream));
  for (int k = 0; k < LOOM_TUNE_REPS; ++k) LOOM_TRY(race->call(race->ctx, i, stream));
  LOOM_CUDA(cudaEventRecord(ev[1], stream));
  LOOM_CUDA(cudaEventSynchronize(ev[1]));
  float t = 0.f;
  LOOM_CUDA(cudaEventElapsedTime(&t, ev[0], ev[1]));
  *ms = t / (float)LOOM_TUNE_REPS;
  return LOOM_SUCCESS;
}

/* One candidate in one round: open, time, close; a candidate that cannot
 * run here is left out, any other failure is TUNE_FAILED (r says why). */
static loom_result_t race_one(const loom_tune_race_t *race, int i, cudaStream_t stream, cudaEvent_t ev[2],
                              float *ms) {
  loom_result_t r = race->open ? race->open(race->ctx, i, stream) : LOOM_SUCCESS;
  if (r == LOOM_SUCCESS) r = race_time(race, i, stream, ev, ms);
  if (race->close) race->close(race->ctx, i);
  if (r == LOOM_ERR_UNSUPPORTED) {
    LOOM_INFO("%s: candidate %d left out: %s", race->fn, i, loom_last_error());
    *ms = LOOM_TUNE_LEFT_OUT;
    return LOOM_SUCCESS;
  }
  if (r != LOOM_SUCCESS) *ms = TUNE_FAILED;
  return r;
}

/* The time every rank agrees on: the largest (a failed rank's infinity
 * stops every rank). */
static loom_result_t race_agree(const loom_tune_race_t *race, float *dev_word, cudaStream_t stream, float *ms,
                                loom_result_t mine) {
  if (race->comm) {
    const loom_result_t rr = loom__comm_max_ms(race->comm, *ms, dev_word, stream, ms);
    if (mine == LOOM_SUCCESS && rr != LOOM_SUCCESS) return rr;
  }
  if (mine == LOOM_SUCCESS && isinf(*ms))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: another rank failed while timing a candidate (see its error)",
                      race->fn);
  return mine;
}

/* Every round over every candidate; t[round * n + i]. */
static loom_result_t race_rounds(const loom_tune_race_t *race, cudaStream_t stream, cudaEvent_t ev[2],
                                 float *dev_word, float *t) {
  const int n = race->n;
  for (int j = 0; j < LOOM_TUNE_ROUNDS; ++j)
    for (int s = 0; s < n; ++s) {
      const int i = (s + j * n / LOOM_TUNE_ROUNDS) % n;
      float *ms = &t[(size_t)j * (size_t)n + (size_t)i];
      const loom_result_t r = race_one(race, i, stream, ev, ms);
      LOOM_TRY(race_agree(race, dev_word, stream, ms, r));
      LOOM_TRACE("%s: round %d candidate %d: %.4f ms", race->fn, j, i, (double)*ms);
    }
  return LOOM_SUCCESS;
}

loom_result_t loom__tune_race(const loom_tune_race_t *race, cudaStream_t stream, int *winner, float *ms,
                              float *times) {
  const int n = race->n;
  if (n < 1 || n > 4096) return loom__fail(LOOM_ERR_INTERNAL, "%s: %d candidates", race->fn, n);
  float *t = (float *)calloc((size_t)(LOOM_TUNE_ROUNDS + 1) * (size_t)n, sizeof(float));
  if (!t) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: a table of %d candidates' times", race->fn, n);
  cudaEvent_t ev[2] = {NULL, NULL};
  float *dev_word = NULL;
  cudaError_t ce = cudaEventCreate(&ev[0]);
  if (ce == cudaSuccess) ce = cudaEventCreate(&ev[1]);
  if (ce == cudaSuccess && race->comm) ce = cudaMalloc((void **)&dev_word, sizeof(float));
  loom_result_t r = ce == cudaSuccess ? LOOM_SUCCESS : loom__cuda_fail((int)ce, "tuning events", __FILE__, __LINE__);
  /* every rank learns whether every rank is ready before the first
   * candidate's (maybe collective) open */
  float ready = r == LOOM_SUCCESS ? 0.f : TUNE_FAILED;
  r = race_agree(race, dev_word, stream, &ready, r);
  if (r == LOOM_SUCCESS) r = race_rounds(race, stream, ev, dev_word, t);
  float *med = t + (size_t)LOOM_TUNE_ROUNDS * (size_t)n;
  const int best = r == LOOM_SUCCESS ? loom__tune_rule_pick(t, LOOM_TUNE_ROUNDS, n, med) : -1;
  if (r == LOOM_SUCCESS && best < 0) r = loom__fail(LOOM_ERR_UNSUPPORTED, "%s: no candidate runs here", race->fn);
  if (r == LOOM_SUCCESS) {
    *winner = best, *ms = med[best];
    if (times) memcpy(times, med, (size_t)n * sizeof(float));
  }
  for (int k = 0; k < 2; ++k)
    if (ev[k]) (void)cudaEventDestroy(ev[k]);
  if (dev_word) (void)cudaFree(dev_word);
  free(t);
  return r;
}

loom_result_t loom__tune_record(const char *fn, const char *key, const char *value, float ms, int writer) {
  LOOM_TRY(loom__tune_put(key, value));
  LOOM_INFO("%s: %s = %s (%.4f ms)", fn, key, value, (double)ms);
  const char *file = loom__param_TUNE_FILE();
  if (file && *file && writer) LOOM_TRY(loom__tune_save(file));
  return LOOM_SUCCESS;
}
