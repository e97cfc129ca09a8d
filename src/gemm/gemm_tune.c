/*
 * gemm_tune.c - loom_gemm's tuning: configurations recorded per shape and
 * GPU in the tuning cache (core/tune.h), and the tuner that measures them.
 *
 * Key:   "gemm <path> <SMs>sm m<m> n<n> k<k> <ab>-><c> <kn|nk> bias<0|1>"
 *        e.g. "gemm sm90 132sm m4096 n24576 k12288 bf16->bf16 nk bias0";
 *        path is the kernel that runs (sm90 or sm80), so one file can hold
 *        entries for several GPUs.
 * Value: "bn=256 group=16 grid=0 sk_tiles=0 sk_blocks=0 splits=0 cluster=2 bm=64"
 *        (loom_gemm_config_t; fields left out stay 0, i.e. "default", so
 *        entries written before a field existed keep their meaning).
 *
 * loom_gemm looks its key up on every call (a hash lookup under a mutex, far
 * below a launch); a hit replaces the heuristic's configuration. The tuner
 * (loom_gemm_tune) times the candidates a user would otherwise pick by hand:
 *   sm90: tile width 128 / 256 x cluster 1 / 2 (where there are >= 2 tile
 *         rows), 192 and 224 (no cluster) where their tiles fill the last
 *         wave better than 256 and as well as 128, aligned split-K where the tiles fill less than two waves,
 *         stream-K over all SMs for m <= 64, and the heuristic's own choice;
 *         for m <= 128 also the 64-row decode tiles (bm=64) at both widths,
 *         data-parallel and split-K, and stream-K for m <= 64; for 8+ tile
 *         rows the heuristic's configuration with band heights 8 and 32;
 *   sm80: tile width 128 / 256, with and without its heuristic's split-K;
 * each warmed up once and timed `reps` times (CUDA events, median), on the
 * caller's buffers; the fastest is put in the cache and, when LOOM_TUNE_FILE
 * is set, the cache is written back to that file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/baseline.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/tune.h"
#include "gemm/gemm.h"

/* The tuner times the 64-row decode tiles up to this m (two tile rows). */
#define LOOM__GEMM_DECODE_MAX_M 128

static const char *loom__dt_short(loom_dtype_t t) {
  return t == LOOM_BF16 ? "bf16" : t == LOOM_FP16 ? "fp16" : t == LOOM_FP32 ? "fp32" : "?";
}

int loom__gemm_tune_key(const loom_gemm_desc_t *d, const char *path, int sms, char *key, size_t size) {
  const int n = snprintf(key, size, "gemm %s %dsm m%lld n%lld k%lld %s->%s %s bias%d", path, sms, (long long)d->m,
                         (long long)d->n, (long long)d->k, loom__dt_short(d->ab_type), loom__dt_short(d->c_type),
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

int loom__gemm_tune_candidates(const loom_gemm_desc_t *d, int sm90, int sms, loom_gemm_config_t *out, int max) {
  int n = 0;
  const int64_t tiles_m = loom_ceil_div(d->m, 128), kblocks = loom_ceil_div(d->k, 64);
#define PUSH(...)                                    \
  do {                                               \
    const loom_gemm_config_t c_ = {__VA_ARGS__};     \
    if (n < max) out[n++] = c_;                      \
  } while (0)
  for (int bn = 128; bn <= 256; bn *= 2) {
    const int64_t tiles = tiles_m * loom_ceil_div(d->n, bn);
    if (sm90) {
      PUSH(bn, 0, 16, 0, 0, 0, 0, 1, 0);
      if (tiles_m >= 2) PUSH(bn, 0, 16, 0, 0, 0, 0, 2, 0);
      if (tiles < 2 * (int64_t)sms) {
        const int s = loom__gemm_split_count(tiles, kblocks, sms);
        if (s > 1) PUSH(bn, 0, 16, 0, -1, 0, s, 0, 0);
      }
      if (d->m <= 64 && bn == 128) PUSH(128, 0, 16, 0, -1, 0, 0, 0, 0);
    } else {
      PUSH(bn, 0, 0, 0, 0, 0, 0, 0, 0);
      const loom_gemm_config_t h = loom__gemm_sm80_heuristic(d, sms, 2);
      if (h.sk_splits > 1) PUSH(bn, 0, 0, 0, -1, 0, h.sk_splits, 0, 0);
    }
  }
  /* the decode variant (64-row tiles, deeper B pipelines): data-parallel,
   * split-K where its tiles fill less than two waves, stream-K over all SMs
   * for m <= 64 where the tiles leave SMs idle */
  if (sm90 && d->m <= LOOM__GEMM_DECODE_MAX_M)
    for (int bn = 128; bn <= 256; bn *= 2) {
      const int64_t tiles = loom_ceil_div(d->m, 64) * loom_ceil_div(d->n, bn);
      PUSH(bn, 0, 16, 0, 0, 0, 0, 0, 64);
      if (tiles < 2 * (int64_t)sms) {
        const int s = loom__gemm_split_count(tiles, kblocks, sms);
        if (s > 1) PUSH(bn, 0, 16, 0, -1, 0, s, 0, 64);
      }
      if (d->m <= 64 && tiles < (int64_t)sms) PUSH(bn, 0, 16, 0, -1, 0, 0, 0, 64);
    }
  /* the 192- and 224-wide tiles (no clusters) where they fill more of the
   * last wave than 256 and at least as much as 128 */
  if (sm90) {
    const double f128 = loom__gemm_wave_fill(tiles_m * loom_ceil_div(d->n, 128), sms);
    const double f256 = loom__gemm_wave_fill(tiles_m * loom_ceil_div(d->n, 256), sms);
    for (int odd = 192; odd <= 224; odd += 32) {
      const double f = loom__gemm_wave_fill(tiles_m * loom_ceil_div(d->n, odd), sms);
      if (f >= f128 - 1e-9 && f > f256 + 1e-9) PUSH(odd, 0, 16, 0, 0, 0, 0, 1, 0);
    }
  }
  /* band height (how many tile rows a wave spans, i.e. the L2 reuse of A
   * against B) for shapes of 8 or more tile rows: the heuristic's
   * configuration with bands of 8 and 32 instead of 16 */
  if (sm90 && tiles_m >= 8) {
    loom_gemm_config_t h = loom__gemm_sm90_heuristic(d, sms);
    for (int g = 8; g <= 32; g *= 4) {
      h.group = g;
      if (n < max) out[n++] = h;
    }
  }
#undef PUSH
  return n;
}

typedef loom_result_t (*loom__gemm_launch_t)(const loom_gemm_desc_t *, const void *, const void *, void *,
                                              const void *, const loom_gemm_config_t *, const loom_gemm_hooks_t *,
                                              cudaStream_t);

static int loom__fcmp(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median time of `reps` launches of one configuration (after one untimed). */
static loom_result_t loom__gemm_time(loom__gemm_launch_t launch, const loom_gemm_desc_t *d, const void *a,
                                     const void *b, void *c, const void *bias, const loom_gemm_config_t *cfg,
                                     int reps, cudaStream_t stream, cudaEvent_t *ev, float *ms) {
  float t[16];
  LOOM_TRY(launch(d, a, b, c, bias, cfg, NULL, stream));
  for (int i = 0; i < reps; ++i) {
    LOOM_CUDA(cudaEventRecord(ev[0], stream));
    LOOM_TRY(launch(d, a, b, c, bias, cfg, NULL, stream));
    LOOM_CUDA(cudaEventRecord(ev[1], stream));
    LOOM_CUDA(cudaEventSynchronize(ev[1]));
    LOOM_CUDA(cudaEventElapsedTime(&t[i], ev[0], ev[1]));
  }
  qsort(t, (size_t)reps, sizeof t[0], loom__fcmp);
  *ms = t[reps / 2];
  return LOOM_SUCCESS;
}

loom_result_t loom_gemm_tune(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                             cudaStream_t stream) {
  LOOM_TRY(loom__gemm_validate("loom_gemm_tune", desc, a, b, c, bias));
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
  const int sm90 = path == LOOM__PATH_SM90;
  int dev, sms;
  LOOM_CUDA(cudaGetDevice(&dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  loom_gemm_config_t cand[24];
  int n = loom__gemm_tune_candidates(desc, sm90, sms, cand, 24);
  const loom__gemm_launch_t launch = sm90 ? loom__gemm_sm90 : loom__gemm_sm80;
  cudaEvent_t ev[2] = {NULL, NULL};
  LOOM_CUDA(cudaEventCreate(&ev[0]));
  loom_result_t r = LOOM_SUCCESS;
  const cudaError_t ee = cudaEventCreate(&ev[1]);
  if (ee != cudaSuccess) r = loom__cuda_fail((int)ee, "cudaEventCreate", __FILE__, __LINE__);
  /* the heuristic's choice (NULL config) first: a candidate must beat it */
  float best_ms = 0.0f;
  int best = -1;
  if (r == LOOM_SUCCESS) r = loom__gemm_time(launch, desc, a, b, c, bias, NULL, 5, stream, ev, &best_ms);
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i) {
    float ms = 0.0f;
    r = loom__gemm_time(launch, desc, a, b, c, bias, &cand[i], 5, stream, ev, &ms);
    if (r == LOOM_ERR_UNSUPPORTED) { /* a candidate this GPU or path cannot run (e.g. no room for a cluster) */
      LOOM_INFO("loom_gemm_tune: candidate %d skipped: %s", i, loom_last_error());
      r = LOOM_SUCCESS;
      continue;
    }
    if (r == LOOM_SUCCESS && ms < best_ms * 0.99f) best_ms = ms, best = i;
  }
  if (ev[0]) cudaEventDestroy(ev[0]);
  if (ev[1]) cudaEventDestroy(ev[1]);
  LOOM_TRY(r);
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__gemm_tune_key(desc, sm90 ? "sm90" : "sm80", sms, key, sizeof key))
    return loom__fail(LOOM_ERR_INTERNAL, "loom_gemm_tune: tuning key too long");
  if (best < 0) {
    /* the heuristic won: record it as such (an entry stops nothing) */
    const loom_gemm_config_t h = sm90 ? loom__gemm_sm90_heuristic(desc, sms) : loom__gemm_sm80_heuristic(desc, sms, 2);
    loom__gemm_config_format(&h, value, sizeof value);
  } else {
    loom__gemm_config_format(&cand[best], value, sizeof value);
  }
  LOOM_TRY(loom__tune_put(key, value));
  LOOM_INFO("loom_gemm_tune: %s = %s (%.3f ms)", key, value, best_ms);
  const char *file = loom__param_TUNE_FILE();
  if (file && *file) LOOM_TRY(loom__tune_save(file));
  return LOOM_SUCCESS;
}
