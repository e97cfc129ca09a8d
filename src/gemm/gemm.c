/*
 * gemm.c - loom_gemm: validation, path choice, tuned configurations and the
 * sm90 heuristic.
 *
 * Path: the sm90 kernel (gemm_sm90.cu) on compute capability 9.0 when the
 * library carries its sm_90a code; else the portable sm80 kernel
 * (gemm_sm80.cu: cp.async + ldmatrix + mma.sync) on compute capability >= 8.0
 * (A100/L40/RTX, and Hopper/Blackwell where sm90 does not apply); below 8.0
 * cuBLASLt through loom__base_gemm (logged once at INFO). LOOM_GEMM_PATH=
 * cublas forces cuBLASLt (comparisons, bisecting), =sm80 the sm80 kernel on
 * any GPU >= 8.0 (how it is tested on Hopper). Hooked GEMMs take the same
 * path, never cuBLASLt.
 *
 * Heuristic. Decode batches first (loom__gemm_sm90_decode): the 64-row
 * variant for m <= 64, and for m <= 128 where two rows of 128-wide tiles
 * fit one wave; split along k where its tiles cover <= a quarter of the SMs.
 * Otherwise tiles of 128 rows and bn 256, 224, 192 or 128: the persistent
 * grid runs ceil(tiles / SMs) waves, and the last wave may leave SMs idle.
 * Score each bn by the fraction of SM-waves doing work, times 0.97 for 224,
 * 0.96 for 192 and 0.92 for 128 (narrower tiles re-read A and B more per
 * FLOP); take the best (the odd widths win where 256 leaves a quarter of
 * the SMs idle and they fill them: Flux RS m = 256, 64 tiles of 192 across
 * n = 12288; Llama-3-70B up m = 256..1024, 64 tiles of 224 across 14336).
 * Aligned split-K for two tile rows (m <= 256) whose tiles leave a fifth of
 * the SMs idle and whose k-loops are long (where loom_gemm_tune picked it).
 * 2x1 clusters with B multicast for every other data-parallel GEMM with >= 2
 * tile rows and a width of 128 or 256 (on H200 neutral to +2% where
 * measured; cuBLASLt's kernels use them too). Stream-K (tile_order.h) is
 * never the heuristic's choice: where it measured faster (m <= 64 with few
 * tiles) the decode variant is faster still, and elsewhere data-parallel won
 * by 5-60% (stream-K's staggered k ranges lose the L2 sharing of B and DRAM
 * page locality; bench/NOTES.md). The tuner still times it (sk_tiles).
 *
 * Tuning (gemm_tune.c): an entry in the tuning cache for (path, SM count,
 * shape) replaces the heuristic's configuration in loom_gemm.
 *
 * Stream-K scratch: per (device, stream), like cuBLASLt's workspace in
 * baseline_gemm.c; grown by allocating a larger buffer and keeping the old
 * one until loom__gemm_release (a captured graph may still point at it).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/baseline.h"
#include "core/error.h"
#include "core/param.h"
#include "core/log.h"
#include "gemm/gemm.h"

/* A split-K unit is at least this many 64-wide k-blocks (pipeline fill and
 * the partial's round trip amortised). */
#define LOOM_SK_MIN_KBLOCKS 8

/* bn 192 / 224 against 256 and 128 in the wave score: a 128 x 192 tile
 * reads (128 + 192) / (128 x 192) elements of A and B per MAC, 11% more
 * than 128 x 256 and 17% fewer than 128 x 128 (224: 5% more than 256, and
 * B [k, n] loads 256 columns for it); both run without clusters. 0.97 keeps
 * 256 at 8192^3 (97.0% vs 99.7% wave fill). */
#define LOOM__GEMM_BN192_SCORE 0.96
#define LOOM__GEMM_BN224_SCORE 0.97

double loom__gemm_wave_fill(int64_t tiles, int sm_count) {
  if (sm_count < 1) sm_count = 1;
  const int64_t waves = loom_ceil_div(tiles, sm_count);
  return waves > 0 ? (double)tiles / (double)(waves * sm_count) : 0.0;
}

/* The decode variant (bm 64: 64-row tiles, both consumer warpgroups on one
 * tile's column halves, deeper B pipelines) where it measured faster than
 * the 128-row kernel on H200 (bench/NOTES.md, 2026-11-22 (5), the TP=2
 * families at m = 16, 64, 128); 1 and its configuration in *cfg there, else
 * 0 (*cfg untouched):
 *   m <= 64: bn 256 when its tiles fit one wave and cover at least a third
 *     of the SMs (Flux AG/RS, Llama up: 0.92-0.99 of cuBLASLt, from
 *     0.76-0.93), else bn 128 (Llama down: 0.85-0.98, from 0.68-0.81);
 *     the tiles split along k when they cover at most a quarter of the SMs
 *     (bn 256 with 32 tiles: split 4 beat data-parallel by 7%). Wider n
 *     than one wave of bn 256: bn 256 over several waves (same tiles as the
 *     128-row kernel, deeper pipeline; not measured).
 *   64 < m <= 128: two tile rows of bn 128 when they fit one wave (Llama
 *     down m = 128: 0.97-1.01 vs split-K's 0.90-0.91); wider shapes keep
 *     the 128-row kernel (more tiles than SMs: 0.75-0.95 with bm 64). */
static int loom__gemm_sm90_decode(const loom_gemm_desc_t *d, int sm_count, loom_gemm_config_t *cfg) {
  const int64_t n256 = loom_ceil_div(d->n, 256), n128 = loom_ceil_div(d->n, 128);
  loom_gemm_config_t c = {128, 0, 16, 0, 0, 0, 0, 0, 64};
  if (d->m <= 64) {
    c.bn = n256 * 3 >= sm_count || n128 > sm_count ? 256 : 128;
    const int64_t tiles = loom_ceil_div(d->n, c.bn);
    const int s = tiles * 4 <= sm_count ? loom__gemm_split_count(tiles, loom_ceil_div(d->k, 64), sm_count) : 1;
    if (s > 1) c.sk_tiles = -1, c.sk_splits = s;
  } else if (!(d->m <= 128 && 2 * n128 <= sm_count)) {
    return 0;
  }
  *cfg = c;
  return 1;
}

loom_gemm_config_t loom__gemm_sm90_heuristic(const loom_gemm_desc_t *d, int sm_count) {
  /* band height 16: about sqrt(2 x SMs) tile rows, so a wave shares A and B
   * about equally in L2 */
  loom_gemm_config_t best = {256, 0, 16, 0, 0, 0, 0, 0, 0};
  if (sm_count < 1) sm_count = 1;
  if (loom__gemm_sm90_decode(d, sm_count, &best)) return best;
  const int64_t tiles_m = loom_ceil_div(d->m, 128);
  double best_score = -1.0;
  const int bns[4] = {256, 224, 192, 128};
  const double per_tile[4] = {1.0, LOOM__GEMM_BN224_SCORE, LOOM__GEMM_BN192_SCORE, 0.92};
  for (int i = 0; i < 4; ++i) {
    const double score = per_tile[i] * loom__gemm_wave_fill(tiles_m * loom_ceil_div(d->n, bns[i]), sm_count);
    if (score > best_score + 1e-9) {
      best_score = score;
      best.bn = bns[i];
    }
  }
  /* aligned split-K where loom_gemm_tune picked it on H200 (bench/NOTES.md,
   * 2026-11-22, run 11): two tile rows whose data-parallel tiles leave a
   * fifth of the SMs idle and whose k-loops are long (Flux RS m = 256 before
   * the 192-wide tiles: 96 tiles of 256, 384 k-blocks, bn 128 split 2 won,
   * 0.92 vs 0.82 of cuBLASLt). One tile row: the decode variant or wide n. */
  const int64_t kblocks = loom_ceil_div(d->k, 64);
  if (d->m > 128 && d->m <= 256 && kblocks >= 192 &&
      tiles_m * loom_ceil_div(d->n, best.bn) * 5 < 4 * (int64_t)sm_count) {
    const int s = loom__gemm_split_count(tiles_m * loom_ceil_div(d->n, 128), kblocks, sm_count);
    if (s > 1) {
      best.bn = 128;
      best.sk_tiles = -1;
      best.sk_splits = s;
    }
  }
  /* 2x1 clusters (each block loads half of the pair's B k-block, multicast):
   * data-parallel GEMMs with at least two tile rows */
  if (best.sk_tiles == 0 && tiles_m >= 2 && (best.bn == 128 || best.bn == 256)) best.cluster = 2;
  return best;
}

int loom__gemm_split_count(int64_t tiles, int64_t kblocks, int sm_count) {
  if (tiles < 1 || sm_count < 1) return 1;
  int best = 1;
  double best_cost = 1e300;
  for (int s = 1; s <= 16 && (s == 1 || kblocks / s >= LOOM_SK_MIN_KBLOCKS); ++s) {
    const double waves = (double)loom_ceil_div(tiles * s, sm_count);
    const double cost = waves / s * (1.0 + 0.02 * (s - 1));
    if (cost < best_cost - 1e-9) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

loom_result_t loom__gemm_order(const loom_gemm_desc_t *d, const loom_gemm_hooks_t *hooks, int bm, int bn, int group,
                               loom_tile_order_t *order) {
  memset(order, 0, sizeof *order);
  if (hooks) *order = hooks->order;
  else order->kind = LOOM_TILE_ORDER_GROUPED;
  order->tiles_m = (int32_t)loom_ceil_div(d->m, bm);
  order->tiles_n = (int32_t)loom_ceil_div(d->n, bn);
  order->group = group;
  if (order->kind == LOOM_TILE_ORDER_RANK_SHIFTED && (order->row_shift < 0 || order->row_shift >= order->tiles_m))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: hooks row_shift=%d: must be in [0, %d)",
                      order->row_shift, order->tiles_m);
  if (order->kind == LOOM_TILE_ORDER_SCHEDULE && !order->schedule)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: hooks order SCHEDULE with schedule=NULL");
  if (hooks && hooks->wait_signals && hooks->wait_rows_per_signal < 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: hooks wait_rows_per_signal=%lld: must be >= 1",
                      (long long)hooks->wait_rows_per_signal);
  return LOOM_SUCCESS;
}

__attribute__((constructor)) static void loom__gemm_wait_sites(void) {
  loom__wait_site_register(LOOM_SITE_GEMM_PROLOGUE, "GEMM prologue tile wait");
}

/* ---- stream-K scratch ----------------------------------------------------- */

typedef struct loom__gemm_skws {
  int device;
  cudaStream_t stream;
  void *ptr;
  size_t counter_bytes, partial_bytes;
  int current; /* 0: superseded by a larger buffer, kept until release */
  struct loom__gemm_skws *next;
} loom__gemm_skws_t;

static pthread_mutex_t loom__skws_mu = PTHREAD_MUTEX_INITIALIZER;
static loom__gemm_skws_t *loom__skws;

static loom_result_t loom__gemm_sk_workspace_locked(cudaStream_t stream, size_t counter_bytes, size_t partial_bytes,
                                                    loom__gemm_skws_t **out) {
  int dev;
  LOOM_CUDA(cudaGetDevice(&dev));
  *out = NULL;
  loom__gemm_skws_t *cur = NULL;
  for (loom__gemm_skws_t *w = loom__skws; w; w = w->next)
    if (w->current && w->device == dev && w->stream == stream) cur = w;
  if (cur && cur->counter_bytes >= counter_bytes && cur->partial_bytes >= partial_bytes) {
    *out = cur;
    return LOOM_SUCCESS;
  }
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  LOOM_CUDA(cudaStreamIsCapturing(stream, &cs));
  if (cs != cudaStreamCaptureStatusNone) return LOOM_SUCCESS; /* caller runs without stream-K */
  loom__gemm_skws_t *w = (loom__gemm_skws_t *)calloc(1, sizeof *w);
  if (!w) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_gemm: host allocation failed (stream-K scratch)");
  /* grow geometrically so that a sequence of shapes allocates few buffers */
  w->counter_bytes = (counter_bytes + 255) / 256 * 256;
  w->partial_bytes = partial_bytes;
  if (cur) {
    if (w->counter_bytes < 2 * cur->counter_bytes) w->counter_bytes = 2 * cur->counter_bytes;
    if (w->partial_bytes < cur->partial_bytes + cur->partial_bytes / 2)
      w->partial_bytes = cur->partial_bytes + cur->partial_bytes / 2;
  }
  w->device = dev;
  w->stream = stream;
  cudaError_t e = cudaMalloc(&w->ptr, w->counter_bytes + w->partial_bytes);
  if (e != cudaSuccess) {
    free(w);
    loom_result_t r = loom__cuda_fail((int)e, "cudaMalloc (loom_gemm stream-K scratch)", __FILE__, __LINE__);
    loom__fail_append(" (%zu bytes)", counter_bytes + partial_bytes);
    return r;
  }
  e = cudaMemsetAsync(w->ptr, 0, w->counter_bytes, stream);
  if (e != cudaSuccess) {
    cudaFree(w->ptr);
    free(w);
    return loom__cuda_fail((int)e, "cudaMemsetAsync (loom_gemm stream-K tickets)", __FILE__, __LINE__);
  }
  if (cur) cur->current = 0;
  w->current = 1;
  w->next = loom__skws;
  loom__skws = w;
  *out = w;
  return LOOM_SUCCESS;
}

loom_result_t loom__gemm_sk_workspace(cudaStream_t stream, size_t counter_bytes, size_t partial_bytes,
                                      uint32_t **counters, float **partials) {
  loom__gemm_skws_t *w = NULL;
  *counters = NULL, *partials = NULL;
  pthread_mutex_lock(&loom__skws_mu);
  loom_result_t r = loom__gemm_sk_workspace_locked(stream, counter_bytes, partial_bytes, &w);
  if (r == LOOM_SUCCESS && w) {
    *counters = (uint32_t *)w->ptr;
    *partials = (float *)((char *)w->ptr + w->counter_bytes);
  }
  pthread_mutex_unlock(&loom__skws_mu);
  return r;
}

void loom__gemm_release(void) {
  pthread_mutex_lock(&loom__skws_mu);
  int cur = -1;
  const int have_cur = cudaGetDevice(&cur) == cudaSuccess;
  while (loom__skws) {
    loom__gemm_skws_t *w = loom__skws;
    loom__skws = w->next;
    if (w->ptr && cudaSetDevice(w->device) == cudaSuccess) {
      cudaError_t e = cudaFree(w->ptr); /* synchronizes: GEMMs still using it finish first */
      if (e != cudaSuccess) LOOM_WARN("loom__gemm_release: cudaFree: %s", cudaGetErrorString(e));
    }
    free(w);
  }
  if (have_cur) cudaSetDevice(cur);
  pthread_mutex_unlock(&loom__skws_mu);
}

/* Which path loom_gemm takes on the current device. */
loom_result_t loom__gemm_path(const loom_gemm_desc_t *d, loom__gemm_path_t *path_out) {
  int dev, major, minor;
  LOOM_CUDA(cudaGetDevice(&dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const char *path = loom__param_GEMM_PATH();
  *path_out = LOOM__PATH_BASE;
  if (strcmp(path, "cublas") == 0) return LOOM_SUCCESS;
  if (strcmp(path, "sm80") == 0) {
    if (!loom__gemm_sm80_supported(d, major, minor))
      return loom__fail(LOOM_ERR_UNSUPPORTED,
                        "LOOM_GEMM_PATH=sm80: the sm80 kernel needs compute capability >= 8.0 (and a library built "
                        "with code for it); this GPU is %d.%d",
                        major, minor);
    *path_out = LOOM__PATH_SM80;
    return LOOM_SUCCESS;
  }
  if (strcmp(path, "auto") != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "LOOM_GEMM_PATH=\"%s\": must be auto, sm80 or cublas", path);
  if (loom__gemm_sm90_supported(d, major, minor)) *path_out = LOOM__PATH_SM90;
  else if (loom__gemm_sm80_supported(d, major, minor)) *path_out = LOOM__PATH_SM80;
  return LOOM_SUCCESS;
}

loom_result_t loom_gemm(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                        cudaStream_t stream) {
  LOOM_TRY(loom__gemm_validate("loom_gemm", desc, a, b, c, bias));
  loom__gemm_path_t path = LOOM__PATH_BASE;
  LOOM_TRY(loom__gemm_path(desc, &path));
  if (path != LOOM__PATH_BASE) {
    /* a configuration from the tuning cache (loom_gemm_tune, LOOM_TUNE_FILE)
     * replaces the heuristic's */
    int dev, sms, found = 0;
    loom_gemm_config_t tuned;
    LOOM_CUDA(cudaGetDevice(&dev));
    LOOM_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    LOOM_TRY(loom__gemm_tuned_config(desc, path == LOOM__PATH_SM90 ? "sm90" : "sm80", sms, &tuned, &found));
    if (path == LOOM__PATH_SM90) return loom__gemm_sm90(desc, a, b, c, bias, found ? &tuned : NULL, NULL, stream);
    return loom__gemm_sm80(desc, a, b, c, bias, found ? &tuned : NULL, NULL, stream);
  }
  if (strcmp(loom__param_GEMM_PATH(), "cublas") != 0) {
    static int logged = 0;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      LOOM_INFO("loom_gemm: no loom kernel for this GPU (loom's kernels need compute capability >= 8.0); using cuBLASLt");
  }
  return loom__base_gemm(desc, a, b, c, bias, stream);
}

loom_result_t loom__gemm_hooked(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                const void *bias, const loom_gemm_config_t *cfg, const loom_gemm_hooks_t *hooks,
                                cudaStream_t stream) {
  LOOM_TRY(loom__gemm_validate("loom_gemm", d, a, b, c, bias));
  int dev, major, minor;
  LOOM_CUDA(cudaGetDevice(&dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const int force80 = strcmp(loom__param_GEMM_PATH(), "sm80") == 0;
  if (!force80 && loom__gemm_sm90_supported(d, major, minor))
    return loom__gemm_sm90(d, a, b, c, bias, cfg, hooks, stream);
  if (!loom__gemm_sm80_supported(d, major, minor))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom_gemm: GEMM hooks need a loom kernel (compute capability >= 8.0); this GPU is %d.%d",
                      major, minor);
  /* of an sm90 configuration only the tile width and band height apply */
  loom_gemm_config_t c80 = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (cfg) c80.bn = cfg->bn == 256 ? 256 : 128, c80.group = cfg->group; /* sm80: 128 or 256 */
  return loom__gemm_sm80(d, a, b, c, bias, cfg ? &c80 : NULL, hooks, stream);
}
