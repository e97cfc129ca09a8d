/*
 * test_lang_schedules.c - every schedule of the example programs (the
 * paper's Figures 4, 6 and 8, LAMB, a Llama TP block), and every prefix of
 * each (Figure 4's schedules 1 to 5 are the prefixes of `best`), computes
 * the same outputs and states as the unscheduled program, through the CPU
 * interpreter at W = 1, 2, 3, 4, 8 ranks per group. The interpreter sums in
 * rank order, so the comparison is bit-exact. A control shows the
 * comparison sees a changed program.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"
#include "core/pointwise.h"
#include "lang/lang.h"

static const struct {
  const char *name, *bind;
} k_examples[] = {{"model_parallel", "B=4,S=3,H=8"}, {"adam", "N=20"}, {"lamb", "N=20"},
                  {"pipeline", "B=2,S=3,H=5"},      {"llama_tp", "T=6,H=8,F=12"},
                  {"layer_norm", "T=6,H=8"}};
static const int k_worlds[] = {1, 2, 3, 4, 8};

static void same_at_every_world(loom_prog_t p, loom_prog_t q, const char *bind, const char *what) {
  for (size_t w = 0; w < sizeof k_worlds / sizeof k_worlds[0]; ++w) {
    double diff = -1;
    const loom_result_t r = loom_prog_interp_compare(p, q, k_worlds[w], bind, loom_test_seed(), &diff);
    if (r != LOOM_SUCCESS || diff != 0)
      loom_test_fail(__FILE__, __LINE__, "%s at W=%d: %s, max diff %g (%s)", what, k_worlds[w], loom_result_string(r),
                     diff, loom_last_error());
  }
}

LOOM_TEST(lang_every_schedule_prefix_computes_the_unscheduled_results) {
  int checked = 0;
  for (size_t e = 0; e < sizeof k_examples / sizeof k_examples[0]; ++e) {
    loom_prog_t p = lang_load_example(k_examples[e].name);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK(p->nsched >= 1);
    for (int s = 0; s < p->nsched; ++s)
      for (int k = 1; k <= p->scheds[s].n; ++k) {
        loom_prog_t q = lang_apply_prefix(p, &p->scheds[s], k);
        if (!q) continue;
        char what[160];
        snprintf(what, sizeof what, "%s, schedule %s, %d statements", k_examples[e].name, p->scheds[s].name, k);
        same_at_every_world(p, q, k_examples[e].bind, what);
        checked++;
        loom_prog_destroy(q);
      }
    loom_prog_destroy(p);
  }
  CHECK(checked >= 25);
}

LOOM_TEST(lang_schedules_change_layouts_as_the_paper_says) {
  loom_prog_t p = lang_load_example("adam"), q = NULL;
  CHECK(p != NULL);
  if (!p) return;
  CHECK_RESULT(loom_prog_schedule(p, "best", &q), LOOM_SUCCESS);
  if (q) { /* Figure 6b: m and v sliced, their gathers gone, one fused AllReduce */
    CHECK(q->nodes[loom__lang_find(q, "m")].ty.lay.kind == LOOM__LAY_SLICED);
    CHECK(q->nodes[loom__lang_find(q, "v")].ty.lay.kind == LOOM__LAY_SLICED);
    CHECK(q->nodes[loom__lang_find(q, "p")].ty.lay.kind == LOOM__LAY_REPLICATED);
    CHECK(loom__lang_find(q, "agM") < 0 && loom__lang_find(q, "agV") < 0);
    CHECK(q->nodes[loom__lang_find(q, "m_")].ty.lay.kind == LOOM__LAY_SLICED);
    const int g = loom__lang_find_group(q, "fuseAR");
    CHECK(g >= 0 && q->groups[g].kind == LOOM__GK_FUSED_AR);
    CHECK(q->nodes[loom__lang_find(q, "rsG")].coll == g && q->nodes[loom__lang_find(q, "agP")].coll == g);
  }
  loom_prog_destroy(q);
  loom_prog_destroy(p);
  p = lang_load_example("pipeline");
  CHECK(p != NULL);
  if (!p) return;
  CHECK_RESULT(loom_prog_schedule(p, "best", &q), LOOM_SUCCESS);
  if (q) { /* Figure 8b: the Send carries a slice; the gather runs in stage 1 */
    const loom__node_t *recv = &q->nodes[loom__lang_find(q, "recv")];
    CHECK(recv->ty.lay.kind == LOOM__LAY_SLICED && recv->ty.lay.group == 1);
    CHECK(q->nodes[loom__lang_find(q, "agOut")].ty.lay.group == 1);
  }
  loom_prog_destroy(q);
  loom_prog_destroy(p);
}

LOOM_TEST(lang_interp_comparison_sees_a_changed_program) {
  loom_prog_t p = lang_load_example("model_parallel"), q = NULL;
  CHECK(p != NULL);
  if (!p) return;
  char *text = lang_read_file("examples/lang/model_parallel.loom");
  CHECK(text != NULL);
  char *at = text ? strstr(text, "Dropout(sum + b, 0.1)") : NULL;
  CHECK(at != NULL);
  if (at) {
    memcpy(at, "Dropout(sum + b, 0.2)", 21);
    CHECK_RESULT(loom_prog_parse(text, "changed", &q), LOOM_SUCCESS);
    double diff = 0;
    CHECK_RESULT(loom_prog_interp_compare(p, q, 2, "B=4,S=3,H=8", 1, &diff), LOOM_SUCCESS);
    CHECK(diff > 0.01);
  }
  free(text);
  loom_prog_destroy(q);
  loom_prog_destroy(p);
}

/* The dropout mask is loom's kernels' (core/pointwise.h): element i kept iff loom__dropout_keep. */
LOOM_TEST(lang_interp_dropout_uses_the_kernels_philox_mask) {
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse("Tensor x(FP32, [N], Sliced(0));\nVar y = Dropout(x, 0.5, 77) * 0 + Dropout(1 + x * 0, 0.5, 77);\n"
                               "Execute f({x}, {y});", "t", &p), LOOM_SUCCESS);
  if (!p) return;
  double v[64];
  size_t n = 0;
  CHECK_RESULT(loom_prog_interp(p, 3, "N=64", 5, "y", v, 64, &n), LOOM_SUCCESS);
  CHECK_EQ_INT(n, 64);
  int kept = 0;
  for (int i = 0; i < 64; ++i) { /* the index in the whole tensor, whichever rank's slice holds it */
    const int keep = loom__dropout_keep(77, 0, (uint64_t)i, loom__dropout_threshold(0.5f));
    kept += keep;
    CHECK(v[i] == (keep ? 2.0 : 0.0));
  }
  CHECK(kept > 16 && kept < 48);
  loom_prog_destroy(p);
}

/* Every schedule `loom schedules` lists (the search of explore.c, bounded) computes the same results. */
LOOM_TEST(lang_every_explored_schedule_computes_the_unscheduled_results) {
  int total = 0;
  for (size_t e = 0; e < sizeof k_examples / sizeof k_examples[0]; ++e) {
    loom_prog_t p = lang_load_example(k_examples[e].name);
    CHECK(p != NULL);
    if (!p) continue;
    loom__found_t found;
    CHECK_RESULT(loom__lang_explore(p, 6, 150, &found), LOOM_SUCCESS);
    CHECK(found.n >= 10); /* the search reaches schedules */
    for (int s = 0; s < found.n; ++s) {
      loom_prog_t q = lang_apply_prefix(p, &found.scheds[s], found.scheds[s].n);
      if (!q) continue;
      char what[160];
      snprintf(what, sizeof what, "%s, explored schedule %d (%d statements, first %s)", k_examples[e].name, s,
               found.scheds[s].n, found.scheds[s].stmts[0].fn);
      same_at_every_world(p, q, k_examples[e].bind, what);
      total++;
      loom_prog_destroy(q);
    }
    loom__lang_found_free(&found);
    loom_prog_destroy(p);
  }
  printf("    %d explored schedules, each at W = 1, 2, 3, 4, 8\n", total);
}

/* The search merges duplicates and reaches the paper's best schedules' shape. */
LOOM_TEST(lang_explore_reaches_the_fused_allreduce_once) {
  loom_prog_t p = lang_load_example("model_parallel");
  CHECK(p != NULL);
  if (!p) return;
  loom__found_t found;
  CHECK_RESULT(loom__lang_explore(p, 6, 400, &found), LOOM_SUCCESS);
  int fused_ar = 0;
  for (int s = 0; s < found.n; ++s) {
    loom_prog_t q = lang_apply_prefix(p, &found.scheds[s], found.scheds[s].n);
    if (!q) continue;
    int has = 0;
    for (int g = 0; g < q->ngroups; ++g) has |= q->groups[g].kind == LOOM__GK_FUSED_AR;
    for (int t = 0; t < s; ++t) { /* no two listed schedules make the same program */
      loom_prog_t r = lang_apply_prefix(p, &found.scheds[t], found.scheds[t].n);
      int eq = 0;
      if (r) loom_prog_equal(q, r, &eq);
      CHECK(!eq);
      loom_prog_destroy(r);
    }
    fused_ar += has;
    loom_prog_destroy(q);
  }
  CHECK(fused_ar >= 1);
  loom__lang_found_free(&found);
  loom_prog_destroy(p);
}
