/*
 * gemm_tune.c - loom_gemm's tuning: configurations recorded per shape and
 * GPU in the tuning cache (core/tune.h), and the tuner that measures them.
 *
 * Key:   "gemm <path> <SMs>sm m<m> n<n> k<k> <ab>-><c> <kn|nk> bias<0|1>"
 *        e.g. "gemm sm90 132sm m4096 n24576 k12288 bf16->bf16 nk bias0";
 *        path is the kernel path that runs (sm90 or sm80), so one file can
 *        hold entries for several GPUs.
 * Value: "bn=256 group=16 grid=0 sk_tiles=0 sk_blocks=0 splits=0 cluster=2 bm=64"
 *        (loom_gemm_config_t; fields left out stay 0, i.e. "default", so
 *        entries written before a field existed keep their meaning; bm=16
 *        names the small-m kernel).
 *
 * loom_gemm looks its key up on every call (core/tune.h: a hash lookup); a
 * hit replaces the model's configuration. The tuner (loom_gemm_tune, and
 * loom_gemm at a shape's first call with LOOM_TUNE=1) times the model's
 * pick and then every candidate the model considered
 * (loom__gemm_candidates: tile widths, clusters, split-K of all tiles or of
 * the last wave, the decode variant, the small-m kernel's split counts),
 * plus band heights 8 and 32 for shapes of 8+ tile rows, each warmed up
 * once and timed `reps` times (CUDA events, median), on the caller's
 * buffers; a candidate must beat the model's pick by 1% to replace it. The
 * winner goes into the cache and, when LOOM_TUNE_FILE is set, the file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baseline/baseline.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/tune.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"

int loom__gemm_tune_key(const loom_gemm_desc_t *d, const char *path, int sms, char *key, size_t size) {
  const int n = snprintf(key, size, "gemm %s %dsm m%lld n%lld k%lld %s->%s %s bias%d", path, sms, (long long)d->m,
                         (long long)d->n, (long long)d->k, loom__dtype_name(d->ab_type), loom__dtype_name(d->c_type),
                         d->b_layout == LOOM_B_NK ? "nk" : "kn", d->has_bias ? 1 : 0);
  return n > 0 && (size_t)n < size;
}

/* The value's fields, in the order they are written. */
#define LOOM__CFG_FIELDS(X) \
  X(bn, bn)                 \
  X(stages, stages)         \
  X(group, group)           \
  X(grid, grid)             \
  X(sk_tiles, sk_tiles)     \
  X(sk_blocks, sk_blocks)   \
  X(splits, sk_splits)      \
  X(cluster, cluster)       \
  X(bm, bm)

void loom__gemm_config_format(const loom_gemm_config_t *c, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
#define X(name, field)                                                                             \
  if (c->field != 0 && used < size) {                                                              \
    const int w = snprintf(out + used, size - used, "%s" #name "=%d", used ? " " : "", c->field); \
    if (w > 0) used += (size_t)w;                                                                  \
  }
  LOOM__CFG_FIELDS(X)
#undef X
  if (used == 0) snprintf(out, size, "bn=0"); /* all defaults */
}

loom_result_t loom__gemm_config_parse(const char *text, loom_gemm_config_t *c) {
  memset(c, 0, sizeof *c);
  const char *p = text;
  for (;;) {
    while (*p == ' ' || *p == '\t') ++p;
    if (!*p) break;
    const char *tok = p;
    while (*p && *p != ' ' && *p != '\t') ++p;
    const size_t len = (size_t)(p - tok);
    const char *eq = memchr(tok, '=', len);
    char *end = NULL;
    long v = 0;
    if (eq) v = strtol(eq + 1, &end, 10);
    if (!eq || eq == tok || end == eq + 1 || end != p || v < -1 || v > 1 << 20)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: tuning value \"%s\": token \"%.*s\" is not name=integer",
                        text, (int)len, tok);
    const size_t nlen = (size_t)(eq - tok);
    int known = 0;
#define X(name, field)                                              \
  if (!known && nlen == strlen(#name) && !strncmp(tok, #name, nlen)) { \
    c->field = (int)v;                                              \
    known = 1;                                                      \
  }
    LOOM__CFG_FIELDS(X)
#undef X
    if (!known)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "loom_gemm: tuning value \"%s\": unknown field \"%.*s\" (bn, stages, group, grid, sk_tiles, "
                        "sk_blocks, splits, cluster, bm)",
                        text, (int)nlen, tok);
  }
  return LOOM_SUCCESS;
}

loom_result_t loom__gemm_tuned_config(const loom_gemm_desc_t *d, const char *path, int sms, loom_gemm_config_t *cfg,
                                      int *found) {
  *found = 0;
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__gemm_tune_key(d, path, sms, key, sizeof key)) return LOOM_SUCCESS;
  if (!loom__tune_get(key, value, sizeof value)) return LOOM_SUCCESS;
  loom_result_t r = loom__gemm_config_parse(value, cfg);
  if (r != LOOM_SUCCESS) {
    loom__fail_append(" (tuning entry \"%s\")", key);
    return r;
  }
  *found = 1;
  return LOOM_SUCCESS;
}

/* The configurations the tuner times (after the model's pick): the
 * model's candidates and, for 8+ tile rows, the model's pick with bands of
 * 8 and 32 tile rows. Up to max; returns how many. */
static int loom__gemm_tune_list(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, int sm90,
                                const loom_gemm_config_t *pick, loom_gemm_config_t *out, int max) {
  int n = loom__gemm_candidates(d, dev, sm90, out, max);
  if (sm90 && pick->bm != 16 && loom__ceil_div(d->m, pick->bm == 64 ? 64 : 128) >= 8)
    for (int g = 8; g <= 32 && n < max; g *= 4) {
      out[n] = *pick;
      out[n++].group = g;
    }
  return n;
}

static int loom__fcmp(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median time of `reps` launches of one configuration (after one untimed). */
static loom_result_t loom__gemm_time(int sm90, const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                     const void *bias, const loom_gemm_config_t *cfg, int reps, cudaStream_t stream,
                                     cudaEvent_t *ev, float *ms) {
  float t[16];
  LOOM_TRY(loom__gemm_launch(sm90, d, a, b, c, bias, cfg, stream));
  for (int i = 0; i < reps; ++i) {
    LOOM_CUDA(cudaEventRecord(ev[0], stream));
    LOOM_TRY(loom__gemm_launch(sm90, d, a, b, c, bias, cfg, stream));
    LOOM_CUDA(cudaEventRecord(ev[1], stream));
    LOOM_CUDA(cudaEventSynchronize(ev[1]));
    LOOM_CUDA(cudaEventElapsedTime(&t[i], ev[0], ev[1]));
  }
  qsort(t, (size_t)reps, sizeof t[0], loom__fcmp);
  *ms = t[reps / 2];
  return LOOM_SUCCESS;
}

loom_result_t loom__gemm_tune_checked(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c,
                                      const void *bias, int sm90, const loom__gemm_device_t *dev,
                                      cudaStream_t stream) {
  const loom_gemm_config_t pick = loom__gemm_choose(desc, dev, sm90);
  loom_gemm_config_t cand[64];
  const int n = loom__gemm_tune_list(desc, dev, sm90, &pick, cand, 64);
  cudaEvent_t ev[2] = {NULL, NULL};
  LOOM_CUDA(cudaEventCreate(&ev[0]));
  loom_result_t r = LOOM_SUCCESS;
  const cudaError_t ee = cudaEventCreate(&ev[1]);
  if (ee != cudaSuccess) r = loom__cuda_fail((int)ee, "cudaEventCreate", __FILE__, __LINE__);
  /* the model's pick first: a candidate must beat it by 1% */
  float best_ms = 0.0f;
  loom_gemm_config_t best = pick;
  if (r == LOOM_SUCCESS) r = loom__gemm_time(sm90, desc, a, b, c, bias, &pick, 5, stream, ev, &best_ms);
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i) {
    if (!memcmp(&cand[i], &pick, sizeof pick)) continue;
    float ms = 0.0f;
    r = loom__gemm_time(sm90, desc, a, b, c, bias, &cand[i], 5, stream, ev, &ms);
    if (r == LOOM_ERR_UNSUPPORTED) { /* a candidate this GPU or path cannot run (e.g. no room for a cluster) */
      LOOM_INFO("loom_gemm_tune: candidate %d skipped: %s", i, loom_last_error());
      r = LOOM_SUCCESS;
      continue;
    }
    if (r == LOOM_SUCCESS && ms < best_ms * 0.99f) best_ms = ms, best = cand[i];
  }
  /* C as the winner computes it (the last candidate timed may differ in
   * its last bits) */
  if (r == LOOM_SUCCESS) r = loom__gemm_launch(sm90, desc, a, b, c, bias, &best, stream);
  if (r == LOOM_SUCCESS) {
    const cudaError_t se = cudaStreamSynchronize(stream);
    if (se != cudaSuccess) r = loom__cuda_fail((int)se, "cudaStreamSynchronize (loom_gemm_tune)", __FILE__, __LINE__);
  }
  if (ev[0]) cudaEventDestroy(ev[0]);
  if (ev[1]) cudaEventDestroy(ev[1]);
  LOOM_TRY(r);
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__gemm_tune_key(desc, sm90 ? "sm90" : "sm80", dev->sms, key, sizeof key))
    return loom__fail(LOOM_ERR_INTERNAL, "loom_gemm_tune: tuning key too long");
  loom__gemm_config_format(&best, value, sizeof value);
  LOOM_TRY(loom__tune_put(key, value));
  LOOM_INFO("loom_gemm_tune: %s = %s (%.3f ms)", key, value, best_ms);
  const char *file = loom__param_TUNE_FILE();
  if (file && *file) LOOM_TRY(loom__tune_save(file));
  return LOOM_SUCCESS;
}

loom_result_t loom_gemm_tune(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                             cudaStream_t stream) {
  LOOM_TRY(loom__gemm_check_args("loom_gemm_tune", desc, a, b, c, bias));
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  LOOM_CUDA(cudaStreamIsCapturing(stream, &cs));
  if (cs != cudaStreamCaptureStatusNone)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm_tune: stream %p is capturing a graph; tuning launches "
                      "and synchronizes, run it before the capture", (void *)stream);
  loom__gemm_path_t path = LOOM__PATH_BASE;
  LOOM_TRY(loom__gemm_path(desc, &path));
  if (path == LOOM__PATH_BASE) {
    LOOM_INFO("loom_gemm_tune: no loom kernel on this path (cuBLASLt): nothing to tune");
    return LOOM_SUCCESS;
  }
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  return loom__gemm_tune_checked(desc, a, b, c, bias, path == LOOM__PATH_SM90, &dev, stream);
}
