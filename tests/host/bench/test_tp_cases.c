/*
 * test_tp_cases.c - the shapes of loom-bench ag_gemm / gemm_rs
 * (support/tp_cases.h): the reference models' local GEMMs for the TP
 * split; the shape set's families split into the fitting and the held-out
 * half with no family in both; column-parallel layers for AllGather + GEMM,
 * row-parallel ones for GEMM + ReduceScatter (n the family's hidden size);
 * the set's new families (group 2) in no selection;
 * every (m, n, k, tp) once; a sample of N spread over the list; at least 60
 * held-out shapes for each op (what a check of a fitted model needs); bad
 * selections refused. No GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "support/tp_cases.h"
#include "testing/bench_api.h"

#define MAXC 4096

static loom_tp_case_t g_c[MAXC], g_d[MAXC];

static loom_tp_case_sel_t sel_of(int ag, loom_tp_set_t set) {
  loom_tp_case_sel_t s;
  memset(&s, 0, sizeof s);
  s.ag = ag, s.set = set, s.model = -1, s.world = 2;
  return s;
}

/* The family of a "<family>/<layer>" case (-1: none). */
static int family_of(const loom_tp_case_t *c) {
  for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f) {
    const size_t l = strlen(loom_gemm_families[f].name);
    if (!strncmp(c->model, loom_gemm_families[f].name, l) && c->model[l] == '/') return f;
  }
  return -1;
}

LOOM_TEST(tp_cases_reference_models_split_by_tp) {
  loom_tp_case_sel_t s = sel_of(1, LOOM_TP_SET_MODELS);
  s.quick = 1;
  CHECK_EQ_INT(loom_tp_cases(&s, g_c, MAXC), 8); /* 2 models x m 64, 512, 2048, 8192 */
  CHECK(!strcmp(g_c[4].model, "llama3-70b"));
  CHECK(g_c[4].n == 28672 / 2 && g_c[4].k == 8192 && g_c[4].tp == 2 && g_c[4].held_out == -1 && g_c[4].m == 64);
  s.tp = 8, s.ag = 0, s.model = 1;
  CHECK_EQ_INT(loom_tp_cases(&s, g_c, MAXC), 4);
  CHECK(g_c[0].n == 8192 && g_c[0].k == 28672 / 8 && g_c[0].tp == 8);
  s.only_m = 1000;
  CHECK_EQ_INT(loom_tp_cases(&s, g_c, MAXC), 1);
  CHECK(g_c[0].m == 1000);
}

LOOM_TEST(tp_cases_halves_layers_and_uniqueness) {
  for (int ag = 0; ag < 2; ++ag) {
    loom_tp_case_sel_t s = sel_of(ag, LOOM_TP_SET_FITTING);
    const int nf = loom_tp_cases(&s, g_c, MAXC);
    s.set = LOOM_TP_SET_HELD_OUT;
    const int nh = loom_tp_cases(&s, g_d, MAXC);
    s.set = LOOM_TP_SET_ALL;
    const int na = loom_tp_cases(&s, NULL, 0);
    CHECK(nf > 0 && nh > 0);
    CHECK(na <= nf + nh); /* a shape in both halves is listed once */
    CHECK(nh >= 60);      /* enough held-out shapes to check a fitted model on */
    for (int i = 0; i < nf; ++i) {
      const int f = family_of(&g_c[i]);
      CHECK(f >= 0 && !loom_gemm_families[f].held_out && g_c[i].held_out == 0);
      const char *layer = strchr(g_c[i].model, '/') + 1;
      if (ag) CHECK(!strcmp(layer, "qkv") || !strcmp(layer, "q_b") || !strcmp(layer, "kv_b") || !strcmp(layer, "ffn_up"));
      else CHECK((!strcmp(layer, "o") || !strcmp(layer, "ffn_down")) && g_c[i].n == loom_gemm_families[f].hidden);
      CHECK(g_c[i].tp == 2 || g_c[i].tp == 4 || g_c[i].tp == 8);
      for (int j = 0; j < i; ++j)
        CHECK(!(g_c[j].m == g_c[i].m && g_c[j].n == g_c[i].n && g_c[j].k == g_c[i].k && g_c[j].tp == g_c[i].tp));
    }
    for (int i = 0; i < nh; ++i) {
      const int f = family_of(&g_d[i]);
      CHECK(f >= 0 && loom_gemm_families[f].held_out == 1 && g_d[i].held_out == 1);
    }
    /* all: both halves, never the shape set's new families (group 2) */
    const int nall = loom_tp_cases(&s, g_c, MAXC);
    CHECK_EQ_INT(nall, na);
    for (int i = 0; i < nall; ++i) CHECK(g_c[i].held_out == 0 || g_c[i].held_out == 1);
  }
}

LOOM_TEST(tp_cases_sample_spreads_over_the_list) {
  loom_tp_case_sel_t s = sel_of(0, LOOM_TP_SET_HELD_OUT);
  const int n = loom_tp_cases(&s, g_c, MAXC);
  s.sample = 60;
  CHECK_EQ_INT(loom_tp_cases(&s, g_d, MAXC), 60);
  CHECK(!memcmp(&g_d[0], &g_c[0], sizeof g_d[0]));                   /* the first */
  CHECK(!memcmp(&g_d[59], &g_c[(int)(59LL * n / 60)], sizeof g_d[0])); /* ... evenly to near the last */
  for (int i = 0; i < 60; ++i) /* each one of the list, in its order */
    CHECK(!memcmp(&g_d[i], &g_c[(int)((long long)i * n / 60)], sizeof g_d[0]));
  s.sample = n + 5;
  CHECK_EQ_INT(loom_tp_cases(&s, g_d, MAXC), n); /* a sample larger than the list: the whole list */
  CHECK_EQ_INT(loom_tp_cases(&s, g_d, 3), n);    /* the count even where out holds fewer */
}

LOOM_TEST(tp_cases_bad_selections_are_refused) {
  loom_tp_case_sel_t s = sel_of(1, LOOM_TP_SET_ALL);
  s.world = 0;
  CHECK_EQ_INT(loom_tp_cases(&s, g_c, MAXC), -1);
  s = sel_of(1, (loom_tp_set_t)7);
  CHECK_EQ_INT(loom_tp_cases(&s, g_c, MAXC), -1);
  s = sel_of(1, LOOM_TP_SET_ALL);
  s.tp = -2;
  CHECK_EQ_INT(loom_tp_cases(&s, g_c, MAXC), -1);
  CHECK_EQ_INT(loom_tp_cases(NULL, g_c, MAXC), -1);
  CHECK_EQ_INT(loom_tp_set_parse("held-out"), LOOM_TP_SET_HELD_OUT);
  CHECK_EQ_INT(loom_tp_set_parse("heldout"), -1);
  CHECK_EQ_INT(loom_tp_set_parse(NULL), -1);
}

LOOM_TEST(tp_cases_layer_filter_keeps_only_its_layers) {
  loom_tp_case_sel_t s = sel_of(0, LOOM_TP_SET_ALL);
  snprintf(s.layer, sizeof s.layer, "%s", "Falcon-180B/o");
  const int n = loom_tp_cases(&s, g_c, MAXC);
  CHECK(n > 0);
  for (int i = 0; i < n; ++i) CHECK(!strncmp(g_c[i].model, "Falcon-180B/o", 13));
  snprintf(s.layer, sizeof s.layer, "%s", "Falcon-180B"); /* a family: its o and ffn_down */
  const int nf = loom_tp_cases(&s, g_d, MAXC);
  CHECK(nf > n);
  int down = 0;
  for (int i = 0; i < nf; ++i) down += !strcmp(g_d[i].model, "Falcon-180B/ffn_down");
  CHECK(down > 0);
  snprintf(s.layer, sizeof s.layer, "%s", "No-such-model");
  CHECK_EQ_INT(loom_tp_cases(&s, g_c, MAXC), 0);
}
