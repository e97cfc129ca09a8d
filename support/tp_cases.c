/*
 * tp_cases.c - the shapes of the tensor-parallel benchmarks (tp_cases.h).
 */
#include "support/tp_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testing/bench_api.h"

#define TP_CASES_MAX 4096 /* more than the whole set: 12 families x 3 TP x 4 layers x 8 m */

static const int64_t tp_ms_full[] = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
static const int64_t tp_ms_quick[] = {64, 512, 2048, 8192};

/* The m list of a selection: its count, the values in *ms. */
static int tp_m_list(const loom_tp_case_sel_t *s, const int64_t **ms) {
  if (s->only_m > 0) return *ms = &s->only_m, 1;
  if (s->quick) return *ms = tp_ms_quick, (int)(sizeof tp_ms_quick / sizeof tp_ms_quick[0]);
  return *ms = tp_ms_full, (int)(sizeof tp_ms_full / sizeof tp_ms_full[0]);
}

/* Whether layer `name` belongs to the op: column-parallel for AllGather +
 * GEMM, row-parallel for GEMM + ReduceScatter. */
static int tp_layer_of_op(const char *name, int ag) {
  static const char *const col[] = {"qkv", "q_b", "kv_b", "ffn_up"};
  static const char *const row[] = {"o", "ffn_down"};
  const char *const *l = ag ? col : row;
  const int n = ag ? 4 : 2;
  for (int i = 0; i < n; ++i)
    if (!strcmp(name, l[i])) return 1;
  return 0;
}

/* 1 if "<family>/<layer>" starts with the selection's layer ("": every layer). */
static int tp_layer_selected(const loom_tp_case_sel_t *s, const char *model) {
  size_t len = 0;
  while (len < sizeof s->layer && s->layer[len]) ++len;
  return strncmp(model, s->layer, len) == 0;
}

/* Appends (model, m, n, k, tp, held_out) unless an equal (m, n, k, tp) is there. */
static void tp_add(loom_tp_case_t *all, int *n_all, const char *model, int64_t m, int64_t n, int64_t k, int tp,
                   int held_out) {
  for (int i = 0; i < *n_all; ++i)
    if (all[i].m == m && all[i].n == n && all[i].k == k && all[i].tp == tp) return;
  if (*n_all >= TP_CASES_MAX) return;
  loom_tp_case_t *c = &all[(*n_all)++];
  snprintf(c->model, sizeof c->model, "%s", model);
  c->m = m, c->n = n, c->k = k, c->tp = tp, c->held_out = held_out;
}

/* GPT-3 175B and Llama-3-70B: AG [m, hidden] x [hidden, ffn / T], RS
 * [m, ffn / T] x [ffn / T, hidden]. */
static void tp_models(const loom_tp_case_sel_t *s, loom_tp_case_t *all, int *n_all) {
  static const struct { const char *name; int64_t hidden, ffn; } models[2] = {{"gpt3-175b", 12288, 49152},
                                                                              {"llama3-70b", 8192, 28672}};
  const int T = s->tp > 0 ? s->tp : s->world;
  const int64_t *ms = NULL;
  const int nm = tp_m_list(s, &ms);
  for (int mo = 0; mo < 2; ++mo) {
    if (s->model >= 0 && s->model != mo) continue;
    const int64_t n = s->ag ? models[mo].ffn / T : models[mo].hidden;
    const int64_t k = s->ag ? models[mo].hidden : models[mo].ffn / T;
    for (int i = 0; i < nm; ++i) tp_add(all, n_all, models[mo].name, ms[i], n, k, T, -1);
  }
}

/* The shape set's families of the selected half(s), TP 2, 4, 8 (or s->tp);
 * never the new families (group 2: gemm_shapes.h), which no set here names. */
static void tp_families(const loom_tp_case_sel_t *s, loom_tp_case_t *all, int *n_all) {
  static const int tps[] = {2, 4, 8};
  const int64_t *ms = NULL;
  const int nm = tp_m_list(s, &ms);
  for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f) {
    const int ho = loom_gemm_families[f].held_out;
    if (ho > 1 || (s->set == LOOM_TP_SET_FITTING && ho != 0) || (s->set == LOOM_TP_SET_HELD_OUT && ho != 1)) continue;
    for (int t = 0; t < 3; ++t) {
      const int T = s->tp > 0 ? s->tp : tps[t];
      if (s->tp > 0 && t > 0) break;
      loom_gemm_weight_t w[16];
      const int nw = loom_bench_gemm_family_layers(f, T, w, 16);
      for (int l = 0; l < nw; ++l) {
        if (!tp_layer_of_op(w[l].layer, s->ag)) continue;
        char model[48];
        snprintf(model, sizeof model, "%s/%s", loom_gemm_families[f].name, w[l].layer);
        if (!tp_layer_selected(s, model)) continue;
        for (int i = 0; i < nm; ++i) tp_add(all, n_all, model, ms[i], w[l].n, w[l].k, T, ho);
      }
    }
  }
}

int loom_tp_cases(const loom_tp_case_sel_t *s, loom_tp_case_t *out, int max) {
  if (!s || s->world < 1 || s->tp < 0 || s->sample < 0 || s->set < LOOM_TP_SET_MODELS || s->set > LOOM_TP_SET_ALL)
    return -1;
  loom_tp_case_t *all = (loom_tp_case_t *)malloc(sizeof *all * TP_CASES_MAX);
  if (!all) return -1;
  int n_all = 0;
  if (s->set == LOOM_TP_SET_MODELS) tp_models(s, all, &n_all);
  else tp_families(s, all, &n_all);
  /* an even spread: case i of the sample is case floor(i n_all / sample) */
  const int n = s->sample > 0 && s->sample < n_all ? s->sample : n_all;
  for (int i = 0; i < n && i < max; ++i) out[i] = all[n == n_all ? i : (int)((int64_t)i * n_all / n)];
  free(all);
  return n;
}

int loom_tp_set_parse(const char *s) {
  if (!s) return -1;
  if (!strcmp(s, "models")) return LOOM_TP_SET_MODELS;
  if (!strcmp(s, "fitting")) return LOOM_TP_SET_FITTING;
  if (!strcmp(s, "held-out")) return LOOM_TP_SET_HELD_OUT;
  if (!strcmp(s, "all")) return LOOM_TP_SET_ALL;
  return -1;
}
