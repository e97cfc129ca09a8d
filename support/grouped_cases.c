/*
 * grouped_cases.c - the shapes of loom-bench grouped (grouped_cases.h).
 */
#include "support/grouped_cases.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/moe_routing.h"

#define GROUPED_ZIPF_S 1.2 /* loom-bench moe's exponent (moe_models.c) */

const loom_grouped_model_t loom_grouped_models[] = {
    {"Mixtral-8x7B", 4096, 8, 2, 14336, 1, "mistralai/Mixtral-8x7B-v0.1 config.json"},
    {"Qwen3-30B-A3B", 2048, 128, 8, 768, 1, "Qwen/Qwen3-30B-A3B config.json (moe_intermediate_size)"},
    {"DeepSeek-V3", 7168, 256, 8, 2048, 1, "deepseek-ai/DeepSeek-V3 config.json (routed experts)"},
    {"Qwen1.5-MoE-A2.7B", 2048, 60, 4, 1408, 0,
     "Qwen/Qwen1.5-MoE-A2.7B config.json (moe_intermediate_size; shared expert left out)"},
    {"OLMoE-1B-7B", 2048, 64, 8, 1024, 0, "allenai/OLMoE-1B-7B-0924 config.json"},
    {"Llama-4-Scout", 5120, 16, 1, 8192, 0,
     "meta-llama/Llama-4-Scout-17B-16E config.json (routed experts; shared expert left out)"},
    {"gpt-oss-120b", 2880, 128, 4, 2880, 0, "openai/gpt-oss-120b config.json (biases left out)"},
};
const int loom_grouped_model_count = (int)(sizeof loom_grouped_models / sizeof loom_grouped_models[0]);

static const int64_t grouped_tokens_full[] = {1, 8, 64, 512, 1024, 2048, 8192};
static const int64_t grouped_tokens_quick[] = {1, 64, 1024, 8192};

int loom_grouped_model_find(const char *name) {
  for (int m = 0; name && m < loom_grouped_model_count; ++m)
    if (!strcmp(name, loom_grouped_models[m].name)) return m;
  return -1;
}

const char *loom_grouped_gemm_name(int gemm) { return gemm == LOOM_GROUPED_DOWN ? "down" : "gate_up"; }

void loom_grouped_sel_init(loom_grouped_sel_t *s) {
  memset(s, 0, sizeof *s);
  s->model = -1, s->gemm = -1, s->route = -1;
}

int loom_grouped_token_list(const loom_grouped_sel_t *s, const int64_t **tokens) {
  if (s->tokens > 0) return *tokens = &s->tokens, 1;
  if (s->quick) return *tokens = grouped_tokens_quick, (int)(sizeof grouped_tokens_quick / sizeof grouped_tokens_quick[0]);
  return *tokens = grouped_tokens_full, (int)(sizeof grouped_tokens_full / sizeof grouped_tokens_full[0]);
}

/* The selection makes sense. */
static int grouped_sel_ok(const loom_grouped_sel_t *s) {
  return s && s->model >= -1 && s->model < loom_grouped_model_count && s->gemm >= -1 && s->gemm <= 1 &&
         s->route >= -1 && s->route <= 1 && s->tokens >= 0;
}

int loom_grouped_cases(const loom_grouped_sel_t *s, loom_grouped_case_t *out, int max) {
  if (!grouped_sel_ok(s)) return -1;
  const int64_t *tokens = NULL;
  const int nt = loom_grouped_token_list(s, &tokens);
  int n = 0;
  for (int m = 0; m < loom_grouped_model_count; ++m) {
    if (s->model >= 0 && s->model != m) continue;
    const loom_grouped_model_t *mm = &loom_grouped_models[m];
    for (int g = 0; g < 2; ++g) {
      if (s->gemm >= 0 && s->gemm != g) continue;
      for (int t = 0; t < nt; ++t)
        for (int r = 0; r < 2; ++r) {
          if (s->route >= 0 && s->route != r) continue;
          if (out && n < max) {
            loom_grouped_case_t *c = &out[n];
            c->model = m, c->gemm = g, c->tokens = tokens[t], c->route = r;
            c->rows = tokens[t] * mm->topk;
            c->n = g == LOOM_GROUPED_GATE_UP ? 2 * (int64_t)mm->ffn : mm->hidden;
            c->k = g == LOOM_GROUPED_GATE_UP ? mm->hidden : mm->ffn;
          }
          ++n;
        }
    }
  }
  return n;
}

int loom_grouped_offsets(const loom_grouped_case_t *c, uint64_t seed, int64_t *offsets, int *active, int64_t *hot) {
  const loom_grouped_model_t *mm = &loom_grouped_models[c->model];
  const int E = mm->experts, K = mm->topk;
  int32_t *ids = (int32_t *)malloc((size_t)c->tokens * (size_t)K * sizeof(int32_t) + 4);
  if (!ids) return -1;
  const loom_route_kind_t kind = c->route == 1 ? LOOM_ROUTE_ZIPF : LOOM_ROUTE_UNIFORM;
  if (loom_route_make(kind, seed, 0, 0, c->tokens, E, K, GROUPED_ZIPF_S, ids, NULL) != 0) {
    free(ids);
    return -1;
  }
  for (int e = 0; e <= E; ++e) offsets[e] = 0;
  for (int64_t i = 0; i < c->tokens * K; ++i) offsets[ids[i] + 1]++;
  free(ids);
  int act = 0;
  int64_t most = 0;
  for (int e = 0; e < E; ++e) {
    act += offsets[e + 1] > 0;
    if (offsets[e + 1] > most) most = offsets[e + 1];
    offsets[e + 1] += offsets[e];
  }
  if (active) *active = act;
  if (hot) *hot = most;
  return 0;
}

double loom_grouped_touched_bytes(const loom_grouped_case_t *c, int active) {
  return 2.0 * ((double)c->rows * (double)c->k + (double)c->rows * (double)c->n + (double)active * (double)c->n * (double)c->k);
}

double loom_grouped_set_bytes(const loom_grouped_case_t *c) {
  const double E = loom_grouped_models[c->model].experts;
  return 2.0 * ((double)c->rows * (double)c->k + E * (double)c->n * (double)c->k);
}

int loom_grouped_sets(double touched, double set_bytes, double l2_bytes, double budget_bytes) {
  int sets = 1;
  while (sets < LOOM_GROUPED_GRAPH_CALLS && sets * touched < 4.0 * l2_bytes) ++sets;
  while (sets > 1 && sets * set_bytes > budget_bytes) --sets;
  return sets;
}

void loom_grouped_pair_shape(const loom_grouped_case_t *c, int64_t hot, loom_bench_shape_t *s) {
  const loom_grouped_model_t *mm = &loom_grouped_models[c->model];
  loom_bench_shape_init(s);
  loom_bench_shape_str(s, "op", "grouped_gemm");
  loom_bench_shape_str(s, "model", mm->name);
  loom_bench_shape_str(s, "gemm", loom_grouped_gemm_name(c->gemm));
  loom_bench_shape_int(s, "tokens", c->tokens);
  loom_bench_shape_str(s, "routing", c->route == 1 ? "zipf" : "uniform");
  loom_bench_shape_int(s, "experts", mm->experts);
  loom_bench_shape_int(s, "topk", mm->topk);
  loom_bench_shape_int(s, "rows", c->rows);
  loom_bench_shape_int(s, "n", c->n);
  loom_bench_shape_int(s, "k", c->k);
  loom_bench_shape_int(s, "hot", hot);
  loom_bench_shape_str(s, "dtype", "bf16");
}

/* Appends to buf (NUL-terminated, cap bytes); -1 where it does not fit. */
static int grouped_appendf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int grouped_appendf(char *buf, size_t cap, const char *fmt, ...) {
  const size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  const int n = len < cap ? vsnprintf(buf + len, cap - len, fmt, ap) : -1;
  va_end(ap);
  return n < 0 || (size_t)n >= cap - len ? -1 : 0;
}

int loom_grouped_peer_args(const loom_grouped_sel_t *s, char *buf, size_t cap) {
  if (!buf || cap == 0) return -1;
  buf[0] = 0;
  if (!grouped_sel_ok(s)) return -1;
  int bad = grouped_appendf(buf, cap, "--models ");
  for (int m = 0, first = 1; m < loom_grouped_model_count; ++m) {
    if (s->model >= 0 && s->model != m) continue;
    const loom_grouped_model_t *mm = &loom_grouped_models[m];
    bad |= grouped_appendf(buf, cap, "%s%s:%d:%d:%d:%d", first ? "" : ",", mm->name, mm->hidden, mm->experts,
                           mm->topk, mm->ffn);
    first = 0;
  }
  bad |= grouped_appendf(buf, cap, " --gemms %s", s->gemm < 0 ? "gate_up,down" : loom_grouped_gemm_name(s->gemm));
  const int64_t *tokens = NULL;
  const int nt = loom_grouped_token_list(s, &tokens);
  bad |= grouped_appendf(buf, cap, " --tokens ");
  for (int t = 0; t < nt; ++t) bad |= grouped_appendf(buf, cap, "%s%lld", t ? "," : "", (long long)tokens[t]);
  bad |= grouped_appendf(buf, cap, " --routings %s",
                         s->route < 0 ? "uniform,zipf" : s->route == 1 ? "zipf" : "uniform");
  if (bad) buf[0] = 0;
  return bad ? -1 : 0;
}

double loom_grouped_est_call_s(const loom_grouped_case_t *c, int active) {
  const double flops = 2.0 * (double)c->rows * (double)c->n * (double)c->k;
  const double compute = flops / 700e12, memory = loom_grouped_touched_bytes(c, active) / 3.5e12;
  return (compute > memory ? compute : memory) + 5e-6;
}
