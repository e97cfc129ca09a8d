/*
 * test_grouped_cases.c - the shapes of loom-bench grouped
 * (support/grouped_cases.h): the model table (loom-bench moe's three and
 * families no GEMM benchmark names, shapes the grouped GEMM takes), the
 * cases in run order with their n, k and rows, selections and refusals,
 * the routing's rows per expert (the generator's counts, every row once),
 * the input-set rule, the complete shape a row pairs on, and the peer's
 * argument list. bench/peers/grouped_torch.py's side of the same rules is
 * tests/python/test_bench_peers.py. No GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "support/grouped_cases.h"
#include "support/moe_routing.h"
#include "testing/bench_api.h"

#define SEED 0x6d6f65ull /* loom-bench moe's MOE_SEED */

static loom_grouped_case_t g_c[512];

LOOM_TEST(grouped_models_fit_the_grouped_gemm_and_are_new_where_said) {
  CHECK(loom_grouped_model_count >= 6);
  int in_moe = 0, fresh = 0;
  for (int m = 0; m < loom_grouped_model_count; ++m) {
    const loom_grouped_model_t *x = &loom_grouped_models[m];
    CHECK(x->hidden % 8 == 0 && x->ffn % 8 == 0); /* n and k multiples of 8 */
    CHECK(x->experts >= 1 && x->experts <= LOOM_GROUPED_GEMM_MAX_GROUPS);
    CHECK(x->topk >= 1 && x->topk <= x->experts);
    CHECK_EQ_INT(loom_grouped_model_find(x->name), m);
    in_moe += x->in_moe;
    if (x->in_moe) continue;
    fresh++;
    /* never in what the GEMM model was fitted or checked on (the shape set's
     * two halves); loom-bench gemm's new-families group may name it */
    for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f)
      CHECK(loom_gemm_families[f].held_out == 2 || strcmp(loom_gemm_families[f].name, x->name) != 0);
  }
  CHECK_EQ_INT(in_moe, 3);
  CHECK(fresh >= 3);
  CHECK_EQ_INT(loom_grouped_model_find("DBRX"), -1);
  CHECK_EQ_INT(loom_grouped_model_find(NULL), -1);
}

LOOM_TEST(grouped_cases_in_run_order_with_their_shapes) {
  loom_grouped_sel_t s;
  loom_grouped_sel_init(&s);
  const int n = loom_grouped_cases(&s, g_c, 512);
  CHECK_EQ_INT(n, loom_grouped_model_count * 2 * 7 * 2);
  CHECK_EQ_INT(loom_grouped_cases(&s, NULL, 0), n);
  const loom_grouped_model_t *mx = &loom_grouped_models[0];
  CHECK(!strcmp(mx->name, "Mixtral-8x7B"));
  CHECK(g_c[0].model == 0 && g_c[0].gemm == LOOM_GROUPED_GATE_UP && g_c[0].tokens == 1 && g_c[0].route == 0);
  CHECK(g_c[1].tokens == 1 && g_c[1].route == 1);
  CHECK(g_c[2].tokens == 8 && g_c[2].route == 0);
  CHECK(g_c[0].n == 2 * 14336 && g_c[0].k == 4096 && g_c[0].rows == 2);
  CHECK(g_c[14].gemm == LOOM_GROUPED_DOWN && g_c[14].n == 4096 && g_c[14].k == 14336);
  CHECK(g_c[27].tokens == 8192 && g_c[27].rows == 8192 * 2 && g_c[28].model == 1);
  for (int i = 0; i < n; ++i) {
    const loom_grouped_model_t *mm = &loom_grouped_models[g_c[i].model];
    CHECK(g_c[i].rows == g_c[i].tokens * mm->topk);
    if (i) CHECK(g_c[i].model > g_c[i - 1].model || (g_c[i].model == g_c[i - 1].model && g_c[i].gemm >= g_c[i - 1].gemm));
  }
  s.quick = 1;
  CHECK_EQ_INT(loom_grouped_cases(&s, g_c, 512), loom_grouped_model_count * 2 * 4 * 2);
  CHECK_EQ_INT(loom_grouped_cases(&s, g_c, 3), loom_grouped_model_count * 2 * 4 * 2); /* the count, 3 written */
  loom_grouped_sel_init(&s);
  s.model = loom_grouped_model_find("OLMoE-1B-7B"), s.gemm = LOOM_GROUPED_DOWN, s.tokens = 64, s.route = 1;
  CHECK_EQ_INT(loom_grouped_cases(&s, g_c, 512), 1);
  CHECK(g_c[0].n == 2048 && g_c[0].k == 1024 && g_c[0].rows == 512 && g_c[0].route == 1);
  const int bad[4][4] = {{99, -1, -1, 0}, {-1, 2, -1, 0}, {-1, -1, 5, 0}, {-1, -1, -1, -1}};
  for (int b = 0; b < 4; ++b) {
    loom_grouped_sel_init(&s);
    s.model = bad[b][0], s.gemm = bad[b][1], s.route = bad[b][2], s.tokens = bad[b][3];
    CHECK_EQ_INT(loom_grouped_cases(&s, g_c, 512), -1);
  }
  CHECK_EQ_INT(loom_grouped_cases(NULL, g_c, 512), -1);
}

LOOM_TEST(grouped_offsets_are_the_routings_counts) {
  loom_grouped_sel_t s;
  loom_grouped_sel_init(&s);
  const int n = loom_grouped_cases(&s, g_c, 512);
  int64_t off[LOOM_GROUPED_GEMM_MAX_GROUPS + 1];
  for (int i = 0; i < n; ++i) {
    const loom_grouped_case_t *c = &g_c[i];
    if (c->tokens > 1024) continue; /* the generator's cost; 1..1024 cover the logic */
    const loom_grouped_model_t *mm = &loom_grouped_models[c->model];
    int active = -1;
    int64_t hot = -1;
    CHECK_EQ_INT(loom_grouped_offsets(c, SEED, off, &active, &hot), 0);
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)c->rows);
    CHECK(ids != NULL);
    if (!ids) return;
    CHECK_EQ_INT(loom_route_make(c->route ? LOOM_ROUTE_ZIPF : LOOM_ROUTE_UNIFORM, SEED, 0, 0, c->tokens, mm->experts,
                                 mm->topk, 1.2, ids, NULL), 0);
    int64_t cnt[LOOM_GROUPED_GEMM_MAX_GROUPS] = {0}, most = 0;
    int act = 0;
    for (int64_t r = 0; r < c->rows; ++r) cnt[ids[r]]++;
    free(ids);
    CHECK(off[0] == 0 && off[mm->experts] == c->rows);
    for (int e = 0; e < mm->experts; ++e) {
      CHECK(off[e + 1] - off[e] == cnt[e]);
      act += cnt[e] > 0;
      if (cnt[e] > most) most = cnt[e];
    }
    CHECK(active == act && hot == most);
    if (c->tokens == 1) CHECK(active == mm->topk && hot == 1);
  }
  /* Zipf piles rows on the hot experts */
  loom_grouped_case_t u = g_c[0], z = g_c[0];
  u.model = z.model = 1, u.tokens = z.tokens = 512, u.rows = z.rows = 512 * 8, z.route = 1;
  int64_t hu = 0, hz = 0;
  CHECK_EQ_INT(loom_grouped_offsets(&u, SEED, off, NULL, &hu), 0);
  CHECK_EQ_INT(loom_grouped_offsets(&z, SEED, off, NULL, &hz), 0);
  CHECK(hz > 4 * hu);
}

LOOM_TEST(grouped_sets_rule) {
  const double l2 = 50.0 * (1 << 20), big = 1e12;
  CHECK_EQ_INT(loom_grouped_sets(4 * l2, 1e9, l2, big), 1);
  CHECK_EQ_INT(loom_grouped_sets(l2, 1e9, l2, big), 4);
  CHECK_EQ_INT(loom_grouped_sets(l2 * 0.99, 1e9, l2, big), 5);
  CHECK_EQ_INT(loom_grouped_sets(1000, 1e3, l2, big), LOOM_GROUPED_GRAPH_CALLS);
  CHECK_EQ_INT(loom_grouped_sets(l2, 1e9, l2, 2.5e9), 2); /* the budget bounds it */
  CHECK_EQ_INT(loom_grouped_sets(l2, 1e9, l2, 1e3), 1);   /* at least one */
  loom_grouped_sel_t s;
  loom_grouped_sel_init(&s);
  (void)loom_grouped_cases(&s, g_c, 512);
  const loom_grouped_case_t *c = &g_c[0]; /* Mixtral gate_up T=1: 2 rows, 2 experts' weights */
  CHECK(loom_grouped_touched_bytes(c, 2) == 2.0 * (2 * 4096 + 2 * 28672 + 2.0 * 28672 * 4096));
  CHECK(loom_grouped_set_bytes(c) == 2.0 * (2 * 4096 + 8.0 * 28672 * 4096));
  CHECK(loom_grouped_est_call_s(c, 2) > loom_grouped_touched_bytes(c, 2) / 3.5e12);
}

LOOM_TEST(grouped_pair_shape_and_peer_args) {
  loom_grouped_sel_t s;
  loom_grouped_sel_init(&s);
  s.model = loom_grouped_model_find("gpt-oss-120b"), s.gemm = LOOM_GROUPED_DOWN, s.tokens = 64, s.route = 1;
  CHECK_EQ_INT(loom_grouped_cases(&s, g_c, 512), 1);
  loom_bench_shape_t p;
  loom_grouped_pair_shape(&g_c[0], 17, &p);
  static const char *const keys[] = {"op", "model", "gemm", "tokens", "routing", "experts", "topk", "rows", "n", "k",
                                     "hot", "dtype"};
  static const char *const vals[] = {"grouped_gemm", "gpt-oss-120b", "down", "64", "zipf", "128", "4", "256", "2880",
                                     "2880", "17", "bf16"};
  CHECK_EQ_INT(p.n, 12);
  CHECK(!p.overflow);
  for (int i = 0; i < 12 && i < p.n; ++i) CHECK(!strcmp(p.key[i], keys[i]) && !strcmp(p.val[i], vals[i]));
  char buf[1024];
  CHECK_EQ_INT(loom_grouped_peer_args(&s, buf, sizeof buf), 0);
  CHECK(!strcmp(buf, "--models gpt-oss-120b:2880:128:4:2880 --gemms down --tokens 64 --routings zipf"));
  loom_grouped_sel_init(&s);
  s.quick = 1;
  CHECK_EQ_INT(loom_grouped_peer_args(&s, buf, sizeof buf), 0);
  CHECK(!strncmp(buf, "--models Mixtral-8x7B:4096:8:2:14336,Qwen3-30B-A3B:2048:128:8:768,", 66));
  CHECK(strstr(buf, " --gemms gate_up,down --tokens 1,64,1024,8192 --routings uniform,zipf") != NULL);
  CHECK(strlen(buf) < 900); /* what bench_grouped.c leaves for it */
  CHECK_EQ_INT(loom_grouped_peer_args(&s, buf, 40), -1);
  CHECK(buf[0] == 0);
  s.gemm = 3;
  CHECK_EQ_INT(loom_grouped_peer_args(&s, buf, sizeof buf), -1);
}
