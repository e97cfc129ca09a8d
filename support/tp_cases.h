/*
 * tp_cases.h - the shapes `loom-bench ag_gemm` and `loom-bench gemm_rs`
 * time: the two reference models (GPT-3 175B and Llama-3-70B, Flux's
 * shapes) or the tensor-parallel layers of the GEMM shape set's model
 * families (src/gemm/gemm_shapes.h), split into the half a model of the
 * fused paths is fitted on and the held-out half it is checked on.
 *
 * A case is one local GEMM of one rank, C [m, n] = A [m, k] x B:
 *   AllGather + GEMM (column-parallel layers: qkv, MLA q_b / kv_b, ffn_up):
 *     A is the whole input gathered from the ranks' row shards, B the
 *     rank's column slice of the weight, n = the layer's output / TP;
 *   GEMM + ReduceScatter (row-parallel layers: o, ffn_down): A the rank's
 *     slice of the input's columns, k = the layer's input / TP, C the
 *     partial sums the ranks reduce and scatter by rows.
 * TP (the weight split) may differ from the ranks that run: `--tp 8` at 2
 * ranks times each rank's GEMM of a TP = 8 model with the communication of
 * 2 ranks (the regime where communication is a large share of the layer).
 * Mixture-of-experts layers (exp_up, exp_down) are not here: their
 * communication is an all-to-all (the MoE ops).
 *
 * Plain C, no CUDA: linked into loom-bench and the host tests.
 */
#ifndef LOOM_SUPPORT_TP_CASES_H
#define LOOM_SUPPORT_TP_CASES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_tp_set {
  LOOM_TP_SET_MODELS = 0,   /* GPT-3 175B and Llama-3-70B (hidden, 4 x hidden or Llama's FFN) */
  LOOM_TP_SET_FITTING = 1,  /* the shape set's fitting families */
  LOOM_TP_SET_HELD_OUT = 2, /* its held-out families */
  LOOM_TP_SET_ALL = 3       /* both halves (not the shape set's new families) */
} loom_tp_set_t;

typedef struct loom_tp_case {
  char model[48];   /* "llama3-70b", or "<family>/<layer>" */
  int64_t m, n, k;  /* the local GEMM (above) */
  int tp;           /* the weight split */
  int held_out;     /* 1: a held-out family; 0: fitting; -1: a reference model */
} loom_tp_case_t;

typedef struct loom_tp_case_sel {
  int ag;           /* 1: AllGather + GEMM layers; 0: GEMM + ReduceScatter layers */
  loom_tp_set_t set;
  int model;        /* LOOM_TP_SET_MODELS only: -1 both, 0 GPT-3, 1 Llama */
  int tp;           /* the weight split: 0 = world (models) or each of 2, 4, 8 (families) */
  int world;        /* ranks that run (>= 1) */
  int quick;        /* m in {64, 512, 2048, 8192}; else 64 .. 8192 by powers of 2 */
  int64_t only_m;   /* > 0: this m only */
  int sample;       /* > 0: at most this many cases, spread evenly over the selection, in its order */
  char layer[48];   /* families only: "" every layer, else the layers whose "<family>/<layer>" starts
                     * with it ("Falcon-180B/o", "Qwen3-30B-A3B") */
} loom_tp_case_sel_t;

/* The selection's cases in run order (families in table order, then TP,
 * then layers, then m), each (m, n, k, tp) once, into out[max]; returns how
 * many the selection has (more than max: only max written), or -1 for a
 * selection that makes no sense (world < 1, tp < 0, an unknown set). */
int loom_tp_cases(const loom_tp_case_sel_t *sel, loom_tp_case_t *out, int max);

/* "models", "fitting", "held-out", "all" -> the set; -1 for anything else. */
int loom_tp_set_parse(const char *s);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_SUPPORT_TP_CASES_H */
