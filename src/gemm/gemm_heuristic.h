/*
 * gemm_heuristic.h - how loom_gemm chooses a kernel configuration for a
 * shape nobody tuned: the properties of the device it runs on (read once
 * per device, gemm_device.c) and a model of each kernel's time
 * (gemm_heuristic.c, pure host code: host tests call it for any GPU size).
 * loom_gemm, the launchers and loom_gemm_tune all take their configurations
 * from here.
 */
#ifndef LOOM_GEMM_HEURISTIC_H
#define LOOM_GEMM_HEURISTIC_H

#include <stdint.h>
#include "loom.h"
#include "gemm/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the configuration choice needs to know about a GPU. */
typedef struct loom__gemm_device {
  int index;             /* CUDA device ordinal */
  int sms;               /* multiprocessors */
  int cc_major, cc_minor;
  int clock_khz;         /* SM clock (cudaDevAttrClockRate) */
  double dram_bps;       /* peak memory bandwidth, bytes/s (memory clock x bus width x 2) */
  int smem_optin;        /* shared memory a block may opt into */
  int sm90;              /* 1: loom's sm90 kernels run here (cc 9.0, sm_90a code loaded) */
  int sm80;              /* 1: loom's sm80 and small-m kernels run here (cc >= 8.0, code loaded) */
  int sm80_blocks_128;   /* 128 x 128 sm80 blocks that fit on one SM (1 or 2) */
  int small_m_blocks[3]; /* small-m kernel blocks per SM for 16, 32, 64 rows (occupancy) */
} loom__gemm_device_t;

/* The current device's properties, read on its first use and cached
 * (thread-safe: every thread sees one complete record per device). */
loom_result_t loom__gemm_device(loom__gemm_device_t *out);

/* A device record for host tests and tools: an H100/H200-like sm90 GPU
 * with `sms` SMs (sm90 = 1, sm80 = 1, 2 sm80 blocks and 2/2/1 small-m
 * blocks per SM, 1.98 GHz, 4.8 TB/s). */
loom__gemm_device_t loom__gemm_device_model(int sms, int sm90);

/* ---- the model --------------------------------------------------------
 * loom__gemm_predict_us estimates one launch of configuration c on dev, in
 * microseconds, from waves of units over the SMs and, per wave, the larger
 * of the tensor-core time and the memory time, where memory moves at
 * min(peak, active SMs x bytes in flight per SM / latency). bm = 16 is the
 * small-m kernel (gemm_small_m.cu), bm = 64 the sm90 decode variant, bm 0 or
 * 128 the sm90 128-row kernel; on the sm80 path (sm90 = 0) bm 0 is the sm80
 * kernel. gemm_heuristic.c describes each term and its constants. */
double loom__gemm_predict_us(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, const loom_gemm_config_t *c,
                             int sm90);

/* The configurations worth considering for d on dev (sm90: 1 for the sm90
 * path, 0 for the sm80 path): every tile width, split-K of all tiles or of
 * the last partial wave, each also reduced apart (sm90), clusters, the
 * decode variant (m <= 128) and the small-m kernel (m <= 64). Up to max
 * into out; returns how many. The heuristic takes the fastest by the model;
 * loom_gemm_tune times them. */
int loom__gemm_candidates(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, int sm90, loom_gemm_config_t *out,
                          int max);
/* Enough room for every candidate of any description. */
#define LOOM_GEMM_MAX_CANDIDATES 96

/* The configuration loom_gemm runs for an untuned d on the sm90 (sm90 = 1)
 * or sm80 (0) path: the candidate with the least predicted time. May be the
 * small-m kernel (bm 16), which gemm.c launches instead of the path's. */
loom_gemm_config_t loom__gemm_choose(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev, int sm90);

/* The path's own kernel only (never bm 16): what its launcher runs when
 * called without a configuration. */
loom_gemm_config_t loom__gemm_sm90_heuristic(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev);

/* A hooked GEMM's configuration (the fused ops'): the model's pick among
 * the sm90 kernel's candidates (never the small-m kernel), less what the
 * hooks may not run: `refuse`, LOOM__HOOKED_* flags. dev->sms: the SMs the
 * GEMM keeps (the fused op's side kernels hold the others). */
#define LOOM__HOOKED_NO_CLUSTER 1u /* 2-block clusters (GEMMs that signal or route their tiles) */
#define LOOM__HOOKED_NO_BN224 2u   /* bn 224 (bulk adds of 16-bit C: its last columns leave from registers) */
#define LOOM__HOOKED_NO_SPLIT 4u   /* split-K / stream-K (hooks that route, reduce or signal per tile) */
#define LOOM__HOOKED_SPLIT_NARROW 8u /* split-K / stream-K only at bn 128 / 256 (the wait-only kernels with an
                                        activation are built at those widths only) */
#define LOOM__HOOKED_NO_APART 16u  /* split-K reduced apart (split_reduce.h: wait-only hooks, where a
                                      * wait that expired makes the reduction store nothing) */
loom_gemm_config_t loom__gemm_sm90_hooked_config(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev,
                                                 unsigned refuse);

/* The tile of a grouped GEMM on the sm90 kernel (pure; host-tested): bm 64
 * where the groups average at most 64 rows (rows_hint, else max_rows, over
 * the groups), else 128; bn 256 where that still gives every one of `sms`
 * SMs a tile, else 128. */
loom_gemm_config_t loom__grouped_sm90_config(const loom_grouped_gemm_desc_t *d, int sms);

loom_gemm_config_t loom__gemm_sm80_heuristic(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev);

/* The small-m kernel's configuration for d (bm 16; its split count). */
loom_gemm_config_t loom__gemm_small_m_heuristic(const loom_gemm_desc_t *d, const loom__gemm_device_t *dev);

/* The fraction of SM-waves doing work when `tiles` tiles run in waves of
 * sm_count (1.0: the last wave is full). */
double loom__gemm_wave_fill(int64_t tiles, int sm_count);

/* Split-K: the number of aligned k ranges (1..16, each at least 8 k-blocks)
 * that best fills whole waves of sm_count blocks with tiles x splits units,
 * a 2% charge per extra split for the partials' round trip. */
int loom__gemm_split_count(int64_t tiles, int64_t kblocks, int sm_count);

/* ---- launching a configuration ---------------------------------------- */

/* The small-m kernel (gemm_small_m.cu): C = A x B (+ bias) for m <= 64 on
 * any GPU >= 8.0. cfg NULL: loom__gemm_small_m_heuristic; else bm must be
 * 16 and the split count is cfg->sk_splits (0 or 1: none). hooks must be
 * NULL. Arguments are assumed validated. */
loom_result_t loom__gemm_small_m(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                 const loom_gemm_config_t *cfg, const loom_gemm_hooks_t *hooks, cudaStream_t stream);

/* 1 if the library carries code for the small-m kernel that this process
 * can load; its blocks per SM for mt tiles of 16 rows on the current device
 * (occupancy). The device-record reader asks once per device. */
int loom__gemm_small_m_has_code(void);

/* The PTX and machine-code versions (x10: 90 for 9.0) of kernel fn as this
 * process loaded it (*ptx, *bin), read once into *cache (a static int of the
 * caller's, -1 at first); every thread that asks first computes the same
 * answer (atomics: no torn or unordered reads). 0 where the query fails (no
 * code for this GPU; not cached), else 1. */
int loom__gemm_code_versions(int *cache, const void *fn, int *ptx, int *bin);
loom_result_t loom__gemm_small_m_occupancy(int mt, int *blocks);

/* loom_gemm_tune on checked arguments (loom_gemm with LOOM_TUNE=1 calls it
 * at a shape's first use): path sm90 (1) or sm80 (0) of device dev; times
 * the model's pick and every candidate (loom__gemm_candidates, and band
 * heights 8 and 32 for 8+ tile rows) on the caller's buffers, records the
 * fastest in the tuning cache (and LOOM_TUNE_FILE), and leaves C as that
 * configuration computes it. Synchronizes `stream`; not while it captures. */
loom_result_t loom__gemm_tune_checked(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                      const void *bias, int sm90, const loom__gemm_device_t *dev, cudaStream_t stream);

/* Launches configuration cfg on path sm90 (1) or sm80 (0): the small-m
 * kernel for bm 16, else the path's kernel. */
loom_result_t loom__gemm_launch(int sm90, const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                const void *bias, const loom_gemm_config_t *cfg, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_HEURISTIC_H */
