/*
 * tune_rule.h - the one tuning rule: how every tuner in loom times its
 * candidates and picks one (loom_gemm_tune, the tensor-parallel ops' tuner,
 * the MoE layer's, the cuBLASLt algorithm pick of the sequential paths).
 *
 *   rounds   LOOM_TUNE_ROUNDS rounds over every candidate in turn, round r
 *            starting at candidate r * n / rounds, so no candidate is always
 *            timed first (one pass favoured the candidates timed first:
 *            docs/perf/moe.md);
 *   a round  per candidate: its open (a plan made, say), LOOM_TUNE_WARM
 *            untimed calls, LOOM_TUNE_REPS calls back to back between two
 *            events (the round's time is their mean), its close; with a
 *            comm, the largest time over the ranks (every rank then picks
 *            the same winner: plans are collective);
 *   median   a candidate's time is the median of its rounds (the best round
 *            picked winners within the run's noise: docs/perf/moe.md);
 *   margin   candidate 0 is the default, the choice loom makes untuned; a
 *            candidate replaces it only when faster by LOOM_TUNE_MARGIN;
 *   refusals a candidate that cannot run here (LOOM_ERR_UNSUPPORTED from its
 *            open or a call) is left out; any other failure on any rank
 *            stops the race on every rank (no rank waits for one that left).
 * docs/perf/core.md, "The tuning rule", records the rule's measured noise.
 */
#ifndef LOOM_CORE_TUNE_RULE_H
#define LOOM_CORE_TUNE_RULE_H

#include <stddef.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_TUNE_ROUNDS 3
#define LOOM_TUNE_WARM 1
#define LOOM_TUNE_REPS 5
#define LOOM_TUNE_MARGIN 0.02f
#define LOOM_TUNE_LEFT_OUT 1e30f /* a candidate's time where it cannot run here */

typedef struct loom_tune_race {
  const char *fn;  /* the tuner's name, for messages */
  int n;           /* candidates 0 .. n-1; 0 is the default */
  void *ctx;
  /* optional: before candidate i's calls in each round; LOOM_ERR_UNSUPPORTED leaves it out */
  loom_result_t (*open)(void *ctx, int i, cudaStream_t stream);
  /* one call of candidate i on stream */
  loom_result_t (*call)(void *ctx, int i, cudaStream_t stream);
  /* optional: after candidate i's calls in each round (also after a failed open) */
  void (*close)(void *ctx, int i);
  loom_comm_t comm; /* the ranks that race together (collective), or NULL: this GPU alone */
} loom_tune_race_t;

/* Races the candidates by the rule; *winner and *ms (its median, ms per
 * call); times[n] (optional) every candidate's median (LOOM_TUNE_LEFT_OUT
 * where it was left out). Synchronizes `stream`; never inside a capture. */
loom_result_t loom__tune_race(const loom_tune_race_t *race, cudaStream_t stream, int *winner, float *ms,
                              float *times);

/* The rule's pick from measured times t[round * n + i] (pure): each
 * candidate's median over its rounds into med[n], and the winner (0 unless
 * another is faster than candidate 0 by the margin; -1 where every
 * candidate was left out). */
int loom__tune_rule_pick(const float *t, int rounds, int n, float *med);

/* The winner's entry into the tuning cache, and into LOOM_TUNE_FILE where
 * one is set and `writer` (rank 0 of a comm; 1 alone). */
loom_result_t loom__tune_record(const char *fn, const char *key, const char *value, float ms, int writer);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_TUNE_RULE_H */
