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
 * plus band heights 8 and 32 for shapes of 8+ tile rows, on the caller's
 * buffers, by the one tuning rule (core/tune_rule.h: rounds, medians, the
 * model's pick the default a candidate must beat by the margin). The
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
#include "core/tune_rule.h"
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
  X(bm, bm)                 \
  X(reduce, sk_reduce)

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

/* The race's candidates: configurations of one GEMM on the caller's
 * buffers; candidate 0 is the model's pick. */
typedef struct {
  int sm90;
  const loom_gemm_desc_t *d;
  const void *a, *b, *bias;
  void *c;
  const loom_gemm_config_t *cand;
} gemm_race_t;

static loom_result_t gemm_race_call(void *ctx, int i, cudaStream_t stream) {
  const gemm_race_t *k = (const gemm_race_t *)ctx;
  return loom__gemm_launch(k->sm90, k->d, k->a, k->b, k->c, k->bias, &k->cand[i], stream);
}

loom_result_t loom__gemm_tune_checked(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c,
                                      const void *bias, int sm90, const loom__gemm_device_t *dev,
                                      cudaStream_t stream) {
  loom_gemm_config_t cand[LOOM_GEMM_MAX_CANDIDATES + 3];
  cand[0] = loom__gemm_choose(desc, dev, sm90); /* the model's pick: the default */
  loom_gemm_config_t list[LOOM_GEMM_MAX_CANDIDATES + 2];
  const int nl = loom__gemm_tune_list(desc, dev, sm90, &cand[0], list, LOOM_GEMM_MAX_CANDIDATES + 2);
  int n = 1;
  for (int i = 0; i < nl; ++i)
    if (memcmp(&list[i], &cand[0], sizeof cand[0])) cand[n++] = list[i];
  const gemm_race_t ctx = {sm90, desc, a, b, bias, c, cand};
  const loom_tune_race_t race = {"loom_gemm_tune", n, (void *)&ctx, NULL, gemm_race_call, NULL, NULL};
  int best = 0;
  float best_ms = 0.f;
  LOOM_TRY(loom__tune_race(&race, stream, &best, &best_ms, NULL));
  /* C as the winner computes it (the last candidate timed may differ in
   * its last bits) */
  LOOM_TRY(loom__gemm_launch(sm90, desc, a, b, c, bias, &cand[best], stream));
  LOOM_CUDA(cudaStreamSynchronize(stream));
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__gemm_tune_key(desc, sm90 ? "sm90" : "sm80", dev->sms, key, sizeof key))
    return loom__fail(LOOM_ERR_INTERNAL, "loom_gemm_tune: tuning key too long");
  loom__gemm_config_format(&cand[best], value, sizeof value);
  return loom__tune_record("loom_gemm_tune", key, value, best_ms, 1);
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
