/*
 * gemm_heuristic.c - the configuration of a GEMM nobody tuned, from a model
 * of each kernel's time. Pure host code (no CUDA call: the device record
 * comes in as an argument), so host tests run it for any GPU size; the
 * launchers, loom_gemm and loom_gemm_tune all call it.
 *
 * The model (loom__gemm_predict_us). A launch runs `units` pieces of work
 * (tiles, or tiles' k ranges under split-K) on `slots` = SMs x blocks per
 * SM, in waves: wave w holds units [w slots, (w + 1) slots) (a persistent
 * grid walks them in that order; a grid of one block per unit gets them from
 * the hardware in that order). A wave costs the larger of
 *   math    the longest unit's k-blocks x FLOPs per k-block / (the tensor
 *           rate of one SM x the kernel's efficiency at that tile), and
 *   memory  the bytes the wave reads from DRAM (every B column and A row
 *           its units touch, once: units running together share them in
 *           L2) / min(peak, active SMs x bytes in flight per SM / latency):
 *           Little's law, so a kernel that keeps too few bytes in flight
 *           cannot reach the peak, and a wave on few SMs moves less;
 * plus the epilogue's stores and, for split units, their partials' round
 * trip through L2; per launch a fixed cost and one latency of pipeline fill.
 * What makes a configuration win is then visible in the terms: tile width
 * against the last wave's idle SMs (wave quantization), split-K against it
 * where k is long (the m = 1000, n = 4608, k = 12288 case: 192 tiles of
 * 128 x 192 on 132 SMs run 1.45 waves; the same tiles cut in two k ranges
 * fill 2.9), bytes in flight against the weight stream at decode sizes.
 *
 * Constants (LOOM__M_*): the tensor rates are the hardware's per clock and
 * SM (wgmma dense bf16/fp16: 4096 FLOP; mma.sync on Hopper: 2400, measured
 * 628 TFLOP/s on 132 SMs, docs/perf/gemm.md, "mma.sync ceiling on Hopper"); the efficiencies, latency and
 * bandwidth fractions are fitted to the measurements of the fitting half of
 * the shape set (gemm_shapes.h; docs/perf/gemm.md, "The model's constants: which runs"), never to
 * the held-out half.
 */
#include <math.h>
#include <string.h>

#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/sm80_layout.h"
#include "gemm/sm90_layout.h"
#include "gemm/small_m_layout.h"

/* ---- constants of the model -------------------------------------------- */

#define LOOM__M_WGMMA_FLOP_CLK 4096.0 /* dense bf16/fp16 FLOPs per clock per SM, wgmma */
#define LOOM__M_MMA_FLOP_CLK 2400.0   /* mma.sync m16n8k16 on Hopper (628 TFLOP/s, 132 SMs, 1.98 GHz) */
#define LOOM__M_EFF_SM90 0.73         /* sm90 128 x 256 main loop: ~780 TFLOP/s on H200 */
#define LOOM__M_EFF_SM80 0.58         /* sm80 kernel: 350-400 TFLOP/s on H200 */
#define LOOM__M_EFF_BM64 0.80         /* decode variant (two m64n(bn/2) warpgroups) vs bm 128 */
#define LOOM__M_EFF_SMALLM 0.50       /* small-m kernel's mma.sync (never binding below m = 64) */
#define LOOM__M_CLUSTER 1.01          /* 2x1 clusters: half the L2->SM traffic of B (neutral to +2%) */
/* Of the peak DRAM bandwidth, what each kernel's weight stream reached:
 * the sm90 decode variant 3.4-3.75 TB/s of H200's 4.8 (docs/perf/gemm.md,
 * "Decode variant: measured"), the sm80 kernel ~2.4 at best; the small-m kernel is built to reach
 * cuBLASLt's 4.1-4.2 (prediction, to be measured). */
#define LOOM__M_BW_SM90 0.75
#define LOOM__M_BW_SM80 0.60
#define LOOM__M_BW_SMALLM 0.86
#define LOOM__M_LATENCY_S 2.2e-6      /* loaded DRAM latency (Little's law; decode variant at 64 SMs) */
#define LOOM__M_LAUNCH_S 1.0e-6       /* launch of one kernel, as seen between two events */
#define LOOM__M_L2_SM_BPS 60.0e9      /* L2 bytes/s one SM moves for split-K partials */
#define LOOM__M_L2_BPS 7.0e12         /* L2 bytes/s of the chip (the small-m kernel's activations) */
#define LOOM__M_STORE_SM_BPS 200.0e9  /* epilogue stores per SM (TMA, mostly under the next tile) */
#define LOOM__M_INFLIGHT_SMALLM 0.6   /* small-m: average fraction of a warp's loads in flight */
/* Split-K reduced apart (split_reduce.h): the second kernel's fixed cost
 * (its launch behind the GEMM and its first wave) and the rate at which it
 * reads the partials and writes C. Fitted, least squares of the log error
 * of the reduced-apart configurations, on the fitting half at m = 128-512
 * (500 configurations, rms 0.073; docs/perf/gemm.md, "Split-K reduced
 * apart"). */
#define LOOM__M_REDUCE_S 5.0e-6
#define LOOM__M_REDUCE_BPS 2.0e12
/* The sm90 kernel's split wave, reduced in the kernel: a fixed end per wave
 * (the fence after the partials, the ticket, the finisher's start) on top
 * of the partials' L2 round trip. Fitted with the two above (the in-kernel
 * split configurations' log error on the same half: rms 0.177 -> 0.143). */
#define LOOM__M_SPLIT_END_S 3.0e-6

/* bn 192 / 224 / 128 against 256: operand bytes per MAC (a 128 x 192 tile
 * reads 11% more A and B per MAC than 128 x 256; 128 x 128 17% more than
 * 192); 0.97 keeps 256 at 8192^3 (97.0% vs 99.7% wave fill). */
static double loom__width_factor(int bn) {
  return bn == 256 ? 1.0 : bn == 224 ? 0.97 : bn == 192 ? 0.96 : 0.92;
}

/* A split-K unit is at least this many 64-wide k-blocks (pipeline fill and
 * the partial's round trip amortised). */
#define LOOM__SK_MIN_KBLOCKS 8

loom__gemm_device_t loom__gemm_device_model(int sms, int sm90) {
  loom__gemm_device_t d;
  memset(&d, 0, sizeof d);
  d.sms = sms > 0 ? sms : 1;
  d.cc_major = sm90 ? 9 : 8, d.cc_minor = 0;
  d.clock_khz = 1980000;
  d.dram_bps = 4.8e12;
  d.smem_optin = 227 * 1024;
  d.sm90 = sm90 ? 1 : 0, d.sm80 = 1;
  d.sm80_blocks_128 = 2;
  d.small_m_blocks[0] = 2, d.small_m_blocks[1] = 2, d.small_m_blocks[2] = 1;
  return d;
}

double loom__gemm_wave_fill(int64_t tiles, int sm_count) {
  if (sm_count < 1) sm_count = 1;
  const int64_t waves = loom__ceil_div(tiles, sm_count);
  return waves > 0 ? (double)tiles / (double)(waves * sm_count) : 0.0;
}

int loom__gemm_split_count(int64_t tiles, int64_t kblocks, int sm_count) {
  if (tiles < 1 || sm_count < 1) return 1;
  int best = 1;
  double best_cost = 1e300;
  for (int s = 1; s <= 16 && (s == 1 || kblocks / s >= LOOM__SK_MIN_KBLOCKS); ++s) {
    const double waves = (double)loom__ceil_div(tiles * s, sm_count);
    const double cost = waves / s * (1.0 + 0.02 * (s - 1));
    if (cost < best_cost - 1e-9) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

/* ---- the waves ----------------------------------------------------------- */

/* What the wave loop needs of a kernel and configuration. */
typedef struct loom__kmodel {
  int64_t m, n, k;
  int bm, bn;              /* tile (small-m: 16 rows per mt, bn 128) */
  int64_t tiles_m, tiles_n;
  int slots_per_sm;        /* blocks resident per SM */
  int persistent;          /* 1: grid of min(units, SMs) walking units */
  double flop_s_sm;        /* sustained tensor FLOP/s of one SM (all its blocks together) */
  double inflight_sm;      /* DRAM bytes in flight per SM */
  int group;               /* band height (tile rows sharing B in L2) */
  int64_t dp_units;        /* whole-k units first */
  int64_t split_tiles;     /* then these tiles' k ranges, split-major */
  int splits;
  int64_t kblocks;         /* of 64 k (small-m: of 32) */
  int kblock_k;            /* k per k-block */
  int es_c;                /* bytes per C element */
  int part_rows;           /* rows of a split unit's fp32 partial */
  int reduce_apart;        /* split units store their partials; a second kernel sums them */
  double split_end_s;      /* a split wave reduced in the kernel: its fixed end */
  double bw_frac;          /* of the peak DRAM bandwidth the kernel's stream reaches */
} loom__kmodel_t;

/* DRAM bytes a wave of `a` units, each over `k_u` of k, reads: every B
 * column and A row of the tiles it touches once (bands of `group` tile
 * rows run together, so a wave covers about a / rows columns of rows rows).
 * Units of one wave at different k ranges (split-K) read different bytes:
 * a split wave's columns are not capped at n. */
static double loom__wave_bytes(const loom__kmodel_t *km, int64_t a, double k_u, int split) {
  int64_t rows = km->group < km->tiles_m ? km->group : km->tiles_m;
  if (rows > a) rows = a;
  if (rows < 1) rows = 1;
  const int64_t cols = loom__ceil_div(a, rows);
  double b_cols = (double)cols * km->bn, a_rows = (double)rows * km->bm;
  if (!split && b_cols > (double)km->n) b_cols = (double)km->n;
  if (a_rows > (double)km->m) a_rows = (double)km->m;
  return (b_cols + a_rows) * k_u * 2.0;
}

static double loom__waves_s(const loom__kmodel_t *km, const loom__gemm_device_t *dev) {
  const int64_t slots = (int64_t)dev->sms * km->slots_per_sm;
  const int64_t split_units = km->split_tiles * (km->splits > 1 ? km->splits : 0);
  const int64_t units = km->dp_units + split_units;
  const double bw = dev->dram_bps * km->bw_frac;
  const double kb_dp = (double)km->kblocks, kb_sp = km->splits > 1 ? (double)km->kblocks / km->splits : kb_dp;
  const double flop_kb = 2.0 * km->bm * km->bn * km->kblock_k;
  double t = LOOM__M_LAUNCH_S + LOOM__M_LATENCY_S;
  for (int64_t u0 = 0; u0 < units; u0 += slots) {
    const int64_t a = units - u0 < slots ? units - u0 : slots;
    const int has_dp = u0 < km->dp_units, has_sp = u0 + a > km->dp_units;
    const double kb = has_dp ? kb_dp : kb_sp; /* the wave lasts as long as its longest unit */
    const int64_t active_sms = a < dev->sms ? a : dev->sms;
    const double per_sm_units = (double)a / (double)active_sms;
    const double math = per_sm_units * kb * flop_kb / km->flop_s_sm;
    double rate = (double)active_sms * km->inflight_sm / LOOM__M_LATENCY_S;
    if (rate > bw) rate = bw;
    const double mem = loom__wave_bytes(km, a, kb * km->kblock_k, has_sp && km->splits > 1) / rate;
    double w = math > mem ? math : mem;
    w += per_sm_units * (double)km->bm * km->bn * km->es_c / LOOM__M_STORE_SM_BPS;
    if (has_sp && km->splits > 1 && km->reduce_apart) /* the fp32 partial out instead of C */
      w += per_sm_units * (double)km->bm * km->bn * (4 - km->es_c) / LOOM__M_STORE_SM_BPS;
    else if (has_sp && km->splits > 1) /* partial out, and the finisher reads every split's */
      w += km->split_end_s + (double)(km->splits + 1) * km->part_rows * km->bn * 4.0 / LOOM__M_L2_SM_BPS;
    t += w;
  }
  if (km->reduce_apart && km->split_tiles > 0 && km->splits > 1) /* the second kernel: partials in, C out */
    t += LOOM__M_REDUCE_S +
         (double)km->split_tiles * km->bm * km->bn * (4.0 * km->splits + km->es_c) / LOOM__M_REDUCE_BPS;
  return t;
}

/* ---- per kernel ------------------------------------------------------------ */

static double loom__clock_hz(const loom__gemm_device_t *dev) {
  return dev->clock_khz > 0 ? dev->clock_khz * 1e3 : 1.98e9;
}

static double loom__sm90_us(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, const loom_gemm_config_t *c) {
  loom__kmodel_t km;
  memset(&km, 0, sizeof km);
  km.m = d->m, km.n = d->n, km.k = d->k;
  km.bm = c->bm == 64 ? 64 : 128;
  km.bn = c->bn;
  km.tiles_m = loom__ceil_div(d->m, km.bm), km.tiles_n = loom__ceil_div(d->n, km.bn);
  const int64_t tiles = km.tiles_m * km.tiles_n;
  km.kblocks = loom__ceil_div(d->k, LOOM_SM90_BK), km.kblock_k = LOOM_SM90_BK;
  km.slots_per_sm = 1, km.persistent = 1;
  km.group = c->group > 0 ? c->group : 16;
  km.es_c = (int)loom_dtype_size(d->c_type);
  int64_t sk = c->sk_tiles < 0 || c->sk_tiles > tiles ? tiles : c->sk_tiles;
  int splits = c->sk_splits;
  if (splits > km.kblocks) splits = (int)km.kblocks;
  if (sk == 0 || splits <= 1) sk = 0, splits = 1;
  km.dp_units = tiles - sk, km.split_tiles = sk, km.splits = splits;
  km.part_rows = km.bm;
  km.reduce_apart = c->sk_reduce && sk > 0 && splits > 1;
  km.split_end_s = LOOM__M_SPLIT_END_S;
  km.bw_frac = LOOM__M_BW_SM90;
  const int cluster = c->cluster == 2 && km.bm == 128 && (km.bn == 128 || km.bn == 256) && sk == 0 && km.tiles_m >= 2;
  km.flop_s_sm = loom__clock_hz(dev) * LOOM__M_WGMMA_FLOP_CLK * LOOM__M_EFF_SM90 * loom__width_factor(km.bn) *
                 (km.bm == 64 ? LOOM__M_EFF_BM64 : 1.0) * (cluster ? LOOM__M_CLUSTER : 1.0);
  /* stages not held by the consumers; A counts only the rows that exist */
  const int stages = LOOM_SM90_STAGES(km.bm, km.bn);
  const double a_rows = d->m < km.bm ? (double)d->m : (double)km.bm;
  const double stage = a_rows * LOOM_SM90_BK * 2 + (double)km.bn * LOOM_SM90_BK * 2;
  km.inflight_sm = (km.bm == 64 ? stages - 0.5 : stages - 1.0) * stage;
  return loom__waves_s(&km, dev) * 1e6;
}

static double loom__sm80_us(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, const loom_gemm_config_t *c) {
  loom__kmodel_t km;
  memset(&km, 0, sizeof km);
  km.m = d->m, km.n = d->n, km.k = d->k;
  km.bm = LOOM_SM80_BM, km.bn = c->bn == 256 ? 256 : 128;
  km.tiles_m = loom__ceil_div(d->m, km.bm), km.tiles_n = loom__ceil_div(d->n, km.bn);
  const int64_t tiles = km.tiles_m * km.tiles_n;
  km.kblocks = loom__ceil_div(d->k, LOOM_SM80_BK), km.kblock_k = LOOM_SM80_BK;
  km.slots_per_sm = km.bn == 128 ? (dev->sm80_blocks_128 > 1 ? 2 : 1) : 1;
  km.group = c->group > 0 ? c->group : 8;
  km.es_c = (int)loom_dtype_size(d->c_type);
  int splits = c->sk_splits > 1 && km.bn == 128 ? c->sk_splits : 1;
  if (splits > km.kblocks) splits = (int)km.kblocks;
  km.dp_units = splits > 1 ? 0 : tiles, km.split_tiles = splits > 1 ? tiles : 0, km.splits = splits;
  km.part_rows = km.bm;
  km.bw_frac = LOOM__M_BW_SM80;
  /* an SM's rate: one 128 x 256 block 1; two 128 x 128 blocks together
   * R128x2 of that, one alone R128x1 (sm80_layout.h) */
  const double r = km.bn == 256 ? 1.0 : km.slots_per_sm == 2 ? LOOM_SM80_R128x2 : LOOM_SM80_R128x1;
  km.flop_s_sm = loom__clock_hz(dev) * LOOM__M_MMA_FLOP_CLK * LOOM__M_EFF_SM80 * r;
  const double a_rows = d->m < km.bm ? (double)d->m : (double)km.bm;
  km.inflight_sm = km.slots_per_sm * (LOOM_SM80_STAGES - 1) * (a_rows + km.bn) * LOOM_SM80_BK * 2.0;
  return loom__waves_s(&km, dev) * 1e6;
}

static double loom__small_m_us(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, const loom_gemm_config_t *c) {
  const int mt = loom__smallm_mt(d->m);
  const loom_smallm_work_t w = loom__smallm_work(d->n, d->k, c->sk_splits, d->b_layout == LOOM_B_KN);
  loom__kmodel_t km;
  memset(&km, 0, sizeof km);
  km.m = d->m, km.n = d->n, km.k = d->k;
  km.bm = 16 * mt, km.bn = LOOM_SMALLM_BN;
  km.tiles_m = 1, km.tiles_n = w.ntiles;
  km.kblocks = w.chunks, km.kblock_k = LOOM_SMALLM_KC;
  const int blocks = dev->small_m_blocks[mt == 1 ? 0 : mt == 2 ? 1 : 2];
  km.slots_per_sm = blocks > 0 ? blocks : 1;
  km.group = 1;
  km.es_c = (int)loom_dtype_size(d->c_type);
  km.dp_units = w.splits > 1 ? 0 : w.ntiles, km.split_tiles = w.splits > 1 ? w.ntiles : 0, km.splits = w.splits;
  km.part_rows = (int)d->m;
  km.bw_frac = LOOM__M_BW_SMALLM;
  km.flop_s_sm = loom__clock_hz(dev) * LOOM__M_MMA_FLOP_CLK * LOOM__M_EFF_SMALLM;
  /* bytes a block keeps on the way: register bursts drain (an average
   * fraction in flight), double-buffered registers do not */
  const double chunk_warp = 2048.0; /* one chunk of one warp: 32 lanes x 4 x 16 bytes */
  km.inflight_sm = LOOM_SMALLM_PIPE_OF(c->stages) == LOOM_SMALLM_PIPE_REGS
                       ? km.slots_per_sm * LOOM_SMALLM_WARPS * LOOM_SMALLM_UNROLL(mt) * chunk_warp * LOOM__M_INFLIGHT_SMALLM
                       : km.slots_per_sm * LOOM_SMALLM_WARPS * 2 * chunk_warp;
  double t = loom__waves_s(&km, dev);
  /* the activations come from L2 once per n-tile */
  t += (double)w.ntiles * d->m * d->k * 2.0 / LOOM__M_L2_BPS;
  return t * 1e6;
}

double loom__gemm_predict_us(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, const loom_gemm_config_t *c,
                             int sm90) {
  if (c->bm == 16) return d->m <= LOOM_SMALLM_MAX_M ? loom__small_m_us(d, dev, c) : 1e30;
  return sm90 ? loom__sm90_us(d, dev, c) : loom__sm80_us(d, dev, c);
}

/* ---- candidates and the choice ----------------------------------------- */

/* The small-m kernel's split count: double it while the units (128-column
 * tiles x k ranges) are fewer than the SMs and each k range keeps at least
 * LOOM__SMALLM_MIN_K; no more than the kernel takes (each warp's share of a
 * unit at least 4 chunks). Measured on H100 (docs/perf/gemm.md, "Small-m split count", the fitting
 * half, m <= 16): within 0.95 of the best measured split (geomean), where
 * the model's argmin of splits reached 0.87 (its latency and overlap terms
 * for many short units were off by up to 3x). */
#define LOOM__SMALLM_MIN_K 256
loom_gemm_config_t loom__gemm_small_m_heuristic(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev) {
  loom_gemm_config_t best;
  memset(&best, 0, sizeof best);
  best.bm = 16;
  const int64_t tiles = loom__ceil_div(d->n, LOOM_SMALLM_BN), chunks = loom__ceil_div(d->k, LOOM_SMALLM_KC);
  const int sms = dev->sms > 0 ? dev->sms : 1;
  int s = 1;
  while (tiles * s < sms && d->k / (2 * s) >= LOOM__SMALLM_MIN_K && 2 * s <= LOOM_SMALLM_MAX_SPLITS &&
         chunks / (2 * s) >= 4 * LOOM_SMALLM_WK)
    s *= 2;
  if (s > 1) best.sk_splits = s, best.sk_tiles = -1;
  return best;
}

/* A list of candidates being built: each configuration once, in the order
 * first pushed, at most max. */
typedef struct gemm_cand_list {
  loom_gemm_config_t *out;
  int n, max;
} gemm_cand_list_t;

static void cand_push(gemm_cand_list_t *l, loom_gemm_config_t c) {
  for (int i = 0; i < l->n; ++i)
    if (!memcmp(&l->out[i], &c, sizeof c)) return;
  if (l->n < l->max) l->out[l->n++] = c;
}

/* Split-K reduced apart (sm90, 128- or 64-row tiles of width bn, t tiles):
 * the twin of every split candidate already listed, and the split counts
 * 2..8 whose units fill half a wave to two waves (without the finisher's
 * serial reads, fewer and longer k ranges can win: fewer partials). */
static void cand_sm90_apart(gemm_cand_list_t *l, int bm, int bn, int64_t tiles, int sms, int64_t kblocks) {
  for (int i = 0, n = l->n; i < n; ++i)
    if (l->out[i].bn == bn && l->out[i].bm == bm && l->out[i].sk_splits > 1 && !l->out[i].sk_reduce) {
      loom_gemm_config_t c = l->out[i];
      c.sk_reduce = 1;
      cand_push(l, c);
    }
  for (int s = 2; s <= 8; ++s)
    if (2 * tiles * s >= sms && tiles * s <= 2 * (int64_t)sms && kblocks / s >= LOOM__SK_MIN_KBLOCKS)
      cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, -1, 0, s, 0, bm, 1});
}

/* The sm80 kernel: both widths, the fitted split-K of 128-wide tiles. */
static void cand_sm80(gemm_cand_list_t *l, const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, int sms) {
  for (int bn = 128; bn <= 256; bn *= 2) cand_push(l, (loom_gemm_config_t){bn, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  const int32_t s = loom__sm80_pick_splits(d->m, d->n, d->k, sms, dev->sm80_blocks_128);
  if (s > 1) cand_push(l, (loom_gemm_config_t){128, 0, 0, 0, -1, 0, s, 0, 0, 0});
}

/* 128-row tiles of width bn: whole tiles (clusters where there are two
 * tile rows and the width is whole boxes), split-K of all tiles where they
 * are under two waves, and of the last partial wave where the k-loop is
 * long. */
static void cand_sm90_tile128(gemm_cand_list_t *l, const loom_gemm_desc_t *d, int bn, int sms, int64_t kblocks) {
  const int64_t tiles_m = loom__ceil_div(d->m, 128);
  const int64_t tiles = tiles_m * loom__ceil_div(d->n, bn);
  const int whole_boxes = tiles_m >= 2 && (bn == 128 || bn == 256);
  cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, 0, 0, 0, whole_boxes ? 2 : 0, 0, 0});
  if (whole_boxes) cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, 0, 0, 0, 0, 0, 0});
  if (tiles < 2 * (int64_t)sms) {
    const int s = loom__gemm_split_count(tiles, kblocks, sms);
    if (s > 1) cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, -1, 0, s, 0, 0, 0});
  }
  const int64_t tail = tiles % sms;
  if (tiles > sms && tail > 0 && kblocks >= 2 * LOOM__SK_MIN_KBLOCKS)
    for (int s = 2; s <= 4; ++s)
      if (tail * s <= sms && kblocks / s >= LOOM__SK_MIN_KBLOCKS)
        cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, (int)tail, 0, s, 0, 0, 0});
  if (tiles >= 2 * (int64_t)sms && kblocks >= 4 * LOOM__SK_MIN_KBLOCKS)
    cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, -1, 0, 2, 0, 0, 0});
  cand_sm90_apart(l, 0, bn, tiles, sms, kblocks);
}

/* The decode variant (64-row tiles, deeper B pipelines). */
static void cand_sm90_decode(gemm_cand_list_t *l, const loom_gemm_desc_t *d, int sms, int64_t kblocks) {
  for (int bn = 256; bn >= 128; bn /= 2) {
    const int64_t tiles = loom__ceil_div(d->m, 64) * loom__ceil_div(d->n, bn);
    cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, 0, 0, 0, 0, 64, 0});
    if (tiles < 2 * (int64_t)sms) {
      const int s = loom__gemm_split_count(tiles, kblocks, sms);
      if (s > 1) cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, -1, 0, s, 0, 64, 0});
    }
    if (d->m <= 64 && tiles < (int64_t)sms) cand_push(l, (loom_gemm_config_t){bn, 0, 16, 0, -1, 0, 0, 0, 64, 0});
    cand_sm90_apart(l, 64, bn, tiles, sms, kblocks);
  }
}

/* The small-m kernel: the heuristic's split count, half and twice it. */
static void cand_small_m(gemm_cand_list_t *l, const loom_gemm_desc_t *d, const loom__gemm_device_t *dev) {
  const loom_gemm_config_t h = loom__gemm_small_m_heuristic(d, dev);
  const int s = h.sk_splits > 1 ? h.sk_splits : 1;
  const int ss[3] = {s, s / 2, 2 * s};
  for (int i = 0; i < 3; ++i)
    if (ss[i] >= 1 && ss[i] <= LOOM_SMALLM_MAX_SPLITS)
      cand_push(l, (loom_gemm_config_t){0, 0, 0, 0, ss[i] > 1 ? -1 : 0, 0, ss[i] > 1 ? ss[i] : 0, 0, 16, 0});
}

int loom__gemm_candidates(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, int sm90, loom_gemm_config_t *out,
                          int max) {
  gemm_cand_list_t l = {out, 0, max};
  const int sms = dev->sms > 0 ? dev->sms : 1;
  const int64_t kblocks = loom__ceil_div(d->k, 64);
  if (!sm90) {
    cand_sm80(&l, d, dev, sms);
  } else {
    static const int bns[4] = {256, 224, 192, 128};
    if (d->m > 64)
      for (int i = 0; i < 4; ++i) cand_sm90_tile128(&l, d, bns[i], sms, kblocks);
    if (d->m <= 128) cand_sm90_decode(&l, d, sms, kblocks);
  }
  if (d->m <= LOOM_SMALLM_MAX_M) cand_small_m(&l, d, dev);
  return l.n;
}

/* Split-K and stream-K of the tile kernels must win by the model by this
 * much: their fixups (partials through L2, tickets, an extra epilogue pass)
 * are the model's least certain terms, and whole tiles measured at 0.98-1.00
 * of cuBLASLt wherever their waves were full. */
#define LOOM__M_SPLIT_MARGIN 0.04

/* The candidate with the least predicted time among those `keep` admits
 * (small-m kernel too, or not), less what `refuse` names (LOOM__HOOKED_*
 * flags: what a hooked GEMM may not run; 0: nothing refused). */
static loom_gemm_config_t loom__argmin(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, int sm90,
                                       int with_small_m, unsigned refuse) {
  loom_gemm_config_t cand[LOOM_GEMM_MAX_CANDIDATES];
  const int n = loom__gemm_candidates(d, dev, sm90, cand, LOOM_GEMM_MAX_CANDIDATES);
  int best = -1;
  double best_us = 1e300;
  for (int i = 0; i < n; ++i) {
    if (cand[i].bm == 16 && !with_small_m) continue;
    if ((refuse & LOOM__HOOKED_NO_CLUSTER) && cand[i].cluster == 2) continue;
    if ((refuse & LOOM__HOOKED_NO_BN224) && cand[i].bn == 224) continue;
    if ((refuse & LOOM__HOOKED_NO_SPLIT) && cand[i].sk_tiles != 0) continue;
    if ((refuse & LOOM__HOOKED_SPLIT_NARROW) && cand[i].sk_tiles != 0 && cand[i].bn != 128 && cand[i].bn != 256)
      continue;
    if ((refuse & LOOM__HOOKED_NO_APART) && cand[i].sk_reduce) continue;
    double us = loom__gemm_predict_us(d, dev, &cand[i], sm90);
    if (cand[i].bm != 16 && cand[i].sk_tiles != 0) us *= 1.0 + LOOM__M_SPLIT_MARGIN;
    if (us < best_us * (1.0 - 1e-9)) best_us = us, best = i;
  }
  if (best >= 0) return cand[best];
  loom_gemm_config_t c;
  memset(&c, 0, sizeof c);
  c.bn = 128;
  return c;
}

loom_gemm_config_t loom__gemm_sm90_heuristic(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev) {
  return loom__argmin(d, dev, 1, 0, 0);
}

loom_gemm_config_t loom__gemm_sm90_hooked_config(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev,
                                                 unsigned refuse) {
  return loom__argmin(d, dev, 1, 0, refuse);
}

loom_gemm_config_t loom__gemm_sm80_heuristic(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev) {
  /* the width and split rules fitted on H200 (sm80_layout.h), with the
   * device's own block count per SM */
  loom_gemm_config_t c;
  memset(&c, 0, sizeof c);
  const int sms = dev->sms > 0 ? dev->sms : 1;
  c.bn = loom__sm80_pick_bn(d->m, d->n, sms, dev->sm80_blocks_128);
  c.stages = LOOM_SM80_STAGES;
  c.group = 8;
  const int32_t s = loom__sm80_pick_splits(d->m, d->n, d->k, sms, dev->sm80_blocks_128);
  if (s > 1) c.bn = 128, c.sk_tiles = -1, c.sk_splits = s;
  return c;
}

/* Where the small-m kernel is the choice: m <= 16 and a weight under
 * LOOM__SMALLM_MAX_WEIGHT bytes. Measured on H100 over the fitting half at
 * m <= 16 (cuBLASLt time / loom time, geomean): small-m with its split rule
 * where the weight is under 128 MB and the tile kernels above, 0.872; the
 * model's argmin over every kernel, 0.730; the tile kernels alone, 0.839.
 * Larger weights stream better through the 64-row decode tiles (0.97 vs
 * 0.91 at >= 256 MB). */
#define LOOM__SMALLM_MAX_WEIGHT ((int64_t)128 << 20)
static int loom__small_m_chosen(const loom_gemm_desc_t *d) {
  return d->m <= 16 && d->n * d->k * (int64_t)loom_dtype_size(d->ab_type) < LOOM__SMALLM_MAX_WEIGHT;
}

loom_gemm_config_t loom__gemm_choose(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, int sm90) {
  if (loom__small_m_chosen(d)) return loom__gemm_small_m_heuristic(d, dev);
  if (sm90) return loom__argmin(d, dev, 1, 0, 0);
  return loom__gemm_sm80_heuristic(d, dev);
}

loom_gemm_config_t loom__grouped_sm90_config(const loom_grouped_gemm_desc_t *d, int sms) {
  loom_gemm_config_t c;
  memset(&c, 0, sizeof c);
  const int64_t rows = d->rows_hint > 0 && d->rows_hint < d->max_rows ? d->rows_hint : d->max_rows;
  const int64_t groups = d->groups < rows ? d->groups : rows; /* at most `rows` groups have rows */
  const int64_t per_group = rows / (groups > 0 ? groups : 1);
  c.bm = per_group <= 64 ? 64 : 128;
  const int64_t tiles256 = (groups > 0 ? groups : 1) * loom__ceil_div(per_group > 0 ? per_group : 1, c.bm) *
                           loom__ceil_div(d->n, 256);
  c.bn = tiles256 >= sms ? 256 : 128;
  c.group = 16;
  return c;
}
