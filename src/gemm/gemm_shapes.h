/*
 * gemm_shapes.h - the GEMM shape set loom is measured on: the linear layers
 * of 23 public model families (dense and MoE; hidden 2048..16384;
 * attention and FFN projections; tensor-parallel splits TP = 1, 2, 4, 8)
 * crossed with batch sizes m = 1 .. 8192. Header only (static data and
 * inline functions): used by loom-bench gemm, the dev benchmark, and the
 * host and GPU tests; nothing of it is compiled into libloom.
 *
 * Two halves, split by family: whatever chooses kernel configurations (the
 * model in gemm_heuristic.c and its constants) is fitted on the FITTING
 * half only; the HELD-OUT half checks that the choice generalises
 * (`loom-bench gemm --held-out`). A held-out (n, k) that some fitting family
 * also has belongs to the fitting half (it is not held out).
 *
 * A third group after the halves, NEW FAMILIES (held_out = 2): eleven more
 * public families, never named by anything loom fitted and added after the
 * model was fitted (`loom-bench gemm --new-families`): a check on shapes
 * nobody looked at while choosing the model's constants or these halves.
 * The same rule: a weight an earlier family has stays in that family's
 * group, so adding the group changed neither half. Only what names group 2
 * reads it: loom__gemm_weights(-1) is the two halves, as before.
 *
 * A family's layers, as C [m, n] = A [m, k] x W^T with W a Linear weight
 * [n, k] (out x in), h = hidden, H / KV query / key-value heads of hd:
 *   qkv       n = (H/TP + 2 max(1, KV/TP)) hd, k = h  (fused Q, K, V;
 *             key-value heads are replicated where TP > KV, as vLLM and
 *             Megatron do)
 *   o         n = h, k = H hd / TP
 *   ffn_up    n = (gated ? 2 : 1) inter / TP, k = h   (gate and up fused)
 *   ffn_down  n = h, k = inter / TP
 *   exp_up / exp_down: the same for one MoE expert (moe_inter)
 *   MLA (DeepSeek): q_a n = q_lora, kv_a n = kv_lora + rope (both k = h, not
 *             split by TP), q_b n = H (nope + rope) / TP, k = q_lora;
 *             kv_b n = H (nope + v) / TP, k = kv_lora; o k = H v / TP.
 * Attention splits only where TP divides H and KV divides by TP or TP by KV
 * (vLLM's rule: Phi-3-medium's 10 KV heads do not split 4 or 8 ways); the
 * FFN only where TP divides its size.
 * Every n and k is a multiple of 8 (loom_gemm's contract); a split that is
 * not (none in this table) would be left out.
 *
 * Batch sizes (tokens per GEMM; for an MoE expert, tokens routed to it):
 * LOOM_GEMM_SHAPE_MS. Not every (m, n, k) runs with every layout, dtype and
 * bias: per GEMM the variant is drawn deterministically from a hash
 * (splitmix64) of the shape: ab_type (bf16 or fp16, C of the same type) from
 * (n, k), so every m of one weight shares its inputs; B layout and bias from
 * (m, n, k). loom__gemm_shape_variant says which.
 */
#ifndef LOOM_GEMM_SHAPES_H
#define LOOM_GEMM_SHAPES_H

#include <stdint.h>
#include <string.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_gemm_family {
  const char *name;
  const char *source;  /* where the sizes come from */
  int held_out;        /* its group: 0 fitting half, 1 held-out half, 2 new families (never named by
                          anything loom fitted: added after the model was fitted) */
  int moe;             /* 1: mixture of experts */
  int hidden, heads, kv_heads, head_dim;
  int inter;           /* dense FFN intermediate size (0: no dense FFN) */
  int gated;           /* 1: gated FFN (SwiGLU / GeGLU: gate and up fused) */
  int moe_inter;       /* expert FFN intermediate size (0: not MoE) */
  int q_lora, kv_lora, qk_nope, qk_rope, v_head; /* MLA (0: none) */
} loom_gemm_family_t;

/* The table: the fitting half, the held-out half, then the new families. */
static const loom_gemm_family_t loom_gemm_families[] = {
    /* ---- fitting half ---- */
    {"GPT-3-175B", "Brown et al. 2020, Table 2.1 (d_model 12288, 96 heads of 128, d_ff = 4 d_model); Flux's shapes",
     0, 0, 12288, 96, 96, 128, 49152, 0, 0, 0, 0, 0, 0, 0},
    {"Llama-3-70B", "meta-llama/Meta-Llama-3-70B config.json", 0, 0, 8192, 64, 8, 128, 28672, 1, 0, 0, 0, 0, 0, 0},
    {"DeepSeek-V3", "deepseek-ai/DeepSeek-V3 config.json (MLA, 256 experts)", 0, 1, 7168, 128, 128, 128, 18432, 1, 2048,
     1536, 512, 128, 64, 128},
    {"Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B config.json (128 experts)", 0, 1, 2048, 32, 4, 128, 0, 1, 768, 0, 0, 0, 0, 0},
    {"Mixtral-8x22B", "mistralai/Mixtral-8x22B-v0.1 config.json (8 experts)", 0, 1, 6144, 48, 8, 128, 0, 1, 16384, 0, 0,
     0, 0, 0},
    {"Gemma-2-27B", "google/gemma-2-27b config.json", 0, 0, 4608, 32, 16, 128, 36864, 1, 0, 0, 0, 0, 0, 0},
    /* ---- held-out half ---- */
    {"Llama-3-8B", "meta-llama/Meta-Llama-3-8B config.json", 1, 0, 4096, 32, 8, 128, 14336, 1, 0, 0, 0, 0, 0, 0},
    {"Llama-3.1-405B", "meta-llama/Llama-3.1-405B config.json", 1, 0, 16384, 128, 8, 128, 53248, 1, 0, 0, 0, 0, 0, 0},
    {"Qwen2.5-72B", "Qwen/Qwen2.5-72B config.json", 1, 0, 8192, 64, 8, 128, 29568, 1, 0, 0, 0, 0, 0, 0},
    {"Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B config.json (128 experts)", 1, 1, 4096, 64, 4, 128, 0, 1, 1536, 0, 0, 0,
     0, 0},
    {"DBRX", "databricks/dbrx-base config.json (16 experts)", 1, 1, 6144, 48, 8, 128, 0, 1, 10752, 0, 0, 0, 0, 0},
    {"Falcon-180B", "tiiuae/falcon-180B config.json (232 heads of 64, 8 KV heads, d_ff = 4 hidden)", 1, 0, 14848, 232,
     8, 64, 59392, 0, 0, 0, 0, 0, 0, 0},
    /* ---- new families (held_out = 2): added after the model was fitted, never fitted on ---- */
    {"Mistral-Large-2407", "mistralai/Mistral-Large-Instruct-2407 config.json", 2, 0, 12288, 96, 8, 128, 28672, 1, 0,
     0, 0, 0, 0, 0},
    {"Command-R-Plus", "CohereForAI/c4ai-command-r-plus config.json", 2, 0, 12288, 96, 8, 128, 33792, 1, 0, 0, 0, 0, 0,
     0},
    {"Yi-1.5-34B", "01-ai/Yi-1.5-34B config.json", 2, 0, 7168, 56, 8, 128, 20480, 1, 0, 0, 0, 0, 0, 0},
    {"Phi-3-medium", "microsoft/Phi-3-medium-4k-instruct config.json (10 KV heads; gate and up fused)", 2, 0, 5120, 40,
     10, 128, 17920, 1, 0, 0, 0, 0, 0, 0},
    {"Mistral-Nemo-12B", "mistralai/Mistral-Nemo-Base-2407 config.json (head_dim 128: 32 x 128 = 4096 < hidden)", 2, 0,
     5120, 32, 8, 128, 14336, 1, 0, 0, 0, 0, 0, 0},
    {"Gemma-3-27B", "google/gemma-3-27b-pt config.json (text_config)", 2, 0, 5376, 32, 16, 128, 21504, 1, 0, 0, 0, 0, 0,
     0},
    {"OLMo-2-13B", "allenai/OLMo-2-1124-13B config.json", 2, 0, 5120, 40, 40, 128, 13824, 1, 0, 0, 0, 0, 0, 0},
    {"Granite-3.0-8B", "ibm-granite/granite-3.0-8b-base config.json", 2, 0, 4096, 32, 8, 128, 12800, 1, 0, 0, 0, 0, 0,
     0},
    {"Mixtral-8x7B", "mistralai/Mixtral-8x7B-v0.1 config.json (8 experts)", 2, 1, 4096, 32, 8, 128, 0, 1, 14336, 0, 0,
     0, 0, 0},
    {"Qwen1.5-MoE-A2.7B", "Qwen/Qwen1.5-MoE-A2.7B config.json (60 experts of 1408; the shared expert, 5632, as the FFN)",
     2, 1, 2048, 16, 16, 128, 5632, 1, 1408, 0, 0, 0, 0, 0},
    {"OLMoE-1B-7B", "allenai/OLMoE-1B-7B-0924 config.json (64 experts)", 2, 1, 2048, 16, 16, 128, 0, 1, 1024, 0, 0, 0, 0,
     0},
};
#define LOOM_GEMM_NFAMILIES ((int)(sizeof loom_gemm_families / sizeof loom_gemm_families[0]))

/* Batch sizes of the set (odd ones included: 1000 and 3000 are not
 * multiples of any tile height). */
static const int64_t loom_gemm_shape_ms[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2048, 3000, 4096, 8192};
#define LOOM_GEMM_SHAPE_NMS ((int)(sizeof loom_gemm_shape_ms / sizeof loom_gemm_shape_ms[0]))

/* One weight of the set: C [m, n] = A [m, k] x W (every m of the set). */
typedef struct loom_gemm_weight {
  int64_t n, k;
  int family;       /* index into loom_gemm_families (the first that has it) */
  int held_out;     /* the family's group: 0 fitting, 1 held out, 2 new families */
  int tp;           /* the first TP split that gives it */
  const char *layer;
} loom_gemm_weight_t;

/* The layers of family f at tensor-parallel size tp: up to `max` weights
 * into out (n and k multiples of 8 only); returns how many. */
static inline int loom__gemm_family_layers(int f, int tp, loom_gemm_weight_t *out, int max) {
  const loom_gemm_family_t *F = &loom_gemm_families[f];
  int c = 0;
#define LOOM__W(name, nn, kk)                                                                            \
  do {                                                                                                   \
    const int64_t n_ = (nn), k_ = (kk);                                                                  \
    if (c < max && n_ > 0 && k_ > 0 && n_ % 8 == 0 && k_ % 8 == 0) {                                     \
      out[c].n = n_, out[c].k = k_, out[c].family = f, out[c].held_out = F->held_out, out[c].tp = tp;    \
      out[c].layer = name;                                                                               \
      ++c;                                                                                               \
    }                                                                                                    \
  } while (0)
  if (F->heads % tp == 0 && (F->kv_heads % tp == 0 || tp % F->kv_heads == 0)) {
    if (F->q_lora) { /* MLA: low-rank Q and KV (q_a, kv_a replicated, not split) */
      LOOM__W("q_a", F->q_lora, F->hidden);
      LOOM__W("kv_a", F->kv_lora + F->qk_rope, F->hidden);
      LOOM__W("q_b", (int64_t)F->heads * (F->qk_nope + F->qk_rope) / tp, F->q_lora);
      LOOM__W("kv_b", (int64_t)F->heads * (F->qk_nope + F->v_head) / tp, F->kv_lora);
      LOOM__W("o", F->hidden, (int64_t)F->heads * F->v_head / tp);
    } else {
      const int kv = F->kv_heads / tp > 0 ? F->kv_heads / tp : 1;
      LOOM__W("qkv", (int64_t)(F->heads / tp + 2 * kv) * F->head_dim, F->hidden);
      LOOM__W("o", F->hidden, (int64_t)F->heads * F->head_dim / tp);
    }
  }
  if (F->inter && F->inter % tp == 0) {
    LOOM__W("ffn_up", (int64_t)(F->gated ? 2 : 1) * F->inter / tp, F->hidden);
    LOOM__W("ffn_down", F->hidden, (int64_t)F->inter / tp);
  }
  if (F->moe_inter && F->moe_inter % tp == 0) {
    LOOM__W("exp_up", (int64_t)(F->gated ? 2 : 1) * F->moe_inter / tp, F->hidden);
    LOOM__W("exp_down", F->hidden, (int64_t)F->moe_inter / tp);
  }
#undef LOOM__W
  return c;
}

/* Tensor-parallel sizes of the set. */
static const int loom_gemm_shape_tps[] = {1, 2, 4, 8};

/* Every distinct weight (n, k) of the set, in table order (families, then
 * TP 1, 2, 4, 8, then layers), each once: the first family that has it
 * names it and gives its group. half: 0 the fitting half, 1 the held-out
 * half, -1 both halves (not the new families), 2 the new families. Up to
 * `max` into out (NULL: count only); returns how many there are. */
static inline int loom__gemm_weights(int half, loom_gemm_weight_t *out, int max) {
  loom_gemm_weight_t all[LOOM_GEMM_NFAMILIES * 4 * 12];
  int na = 0, nout = 0;
  for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f)
    for (int t = 0; t < 4; ++t) {
      loom_gemm_weight_t w[12];
      const int nw = loom__gemm_family_layers(f, loom_gemm_shape_tps[t], w, 12);
      for (int i = 0; i < nw; ++i) {
        int dup = 0;
        for (int j = 0; j < na && !dup; ++j) dup = all[j].n == w[i].n && all[j].k == w[i].k;
        if (dup) continue;
        all[na++] = w[i];
        if (half >= 0 ? w[i].held_out != half : w[i].held_out > 1) continue;
        if (out && nout < max) out[nout] = w[i];
        ++nout;
      }
    }
  return nout;
}

/* splitmix64: the hash behind every deterministic draw of the set. */
static inline uint64_t loom__gemm_shape_hash(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The variant of GEMM (m, n, k) that the set runs: the description (C of
 * the input type). */
static inline loom_gemm_desc_t loom__gemm_shape_variant(int64_t m, int64_t n, int64_t k) {
  const uint64_t hw = loom__gemm_shape_hash(((uint64_t)n << 32) ^ (uint64_t)k);
  const uint64_t hm = loom__gemm_shape_hash(hw ^ (uint64_t)m * 0x2545f4914f6cdd1dull);
  const loom_dtype_t t = (hw >> 17) & 1 ? LOOM_FP16 : LOOM_BF16;
  const loom_gemm_desc_t d =
      LOOM_GEMM_DESC(m, n, k, t, t, (hm >> 11) & 1 ? LOOM_B_KN : LOOM_B_NK, (int)((hm >> 23) & 1));
  return d;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_GEMM_SHAPES_H */
