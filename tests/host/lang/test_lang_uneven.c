/*
 * test_lang_uneven.c - slices smaller than the world. A dimension of n
 * elements sliced over W > n ranks leaves ranks with empty slices (the
 * uneven split of loom's collectives: rank q gets n / W, one more when
 * q < n % W); every program and every schedule still runs there, computes
 * what the unscheduled program computes (bit for bit) and what one rank
 * computes (to rounding: the partial sums are split differently). The
 * layout rules refuse the one case no slicing can serve: a Sliced operand
 * broadcast along its sliced dimension of size 1.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"
#include "lang/lang.h"

/* The largest relative difference of p's results at W and at one rank. */
static double against_one_rank(loom_prog_t p, int W, const char *bind) {
  loom__binding_t b;
  loom__results_t one, many;
  double diff = INFINITY;
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_interp(p, 1, &b, 11, &one), LOOM_SUCCESS);
  const loom_result_t r = loom__lang_interp(p, W, &b, 11, &many);
  if (r != LOOM_SUCCESS) loom_test_fail(__FILE__, __LINE__, "W=%d %s: %s", W, bind, loom_last_error());
  if (r == LOOM_SUCCESS) {
    CHECK_RESULT(loom__lang_results_diff(&one, &many, &diff), LOOM_SUCCESS);
    loom__lang_results_free(&many);
  }
  loom__lang_results_free(&one);
  return diff;
}

/* The case: `loom interp --world 9 --bind B=2,S=3,H=8` on Figure 3 (H = 8 < 9: rank 8's slice
 * of `in` and `w` is empty), unscheduled and with every prefix of every schedule. */
LOOM_TEST(lang_interp_model_parallel_with_an_empty_slice) {
  loom_prog_t p = lang_load_example("model_parallel");
  CHECK(p != NULL);
  if (!p) return;
  const double d = against_one_rank(p, 9, "B=2,S=3,H=8");
  CHECK(d < 1e-12);
  int checked = 0;
  for (int s = 0; s < p->nsched; ++s)
    for (int k = 1; k <= p->scheds[s].n; ++k) {
      loom_prog_t q = lang_apply_prefix(p, &p->scheds[s], k);
      double diff = -1;
      if (q) CHECK_RESULT(loom_prog_interp_compare(p, q, 9, "B=2,S=3,H=8", 5, &diff), LOOM_SUCCESS);
      if (q && diff != 0) loom_test_fail(__FILE__, __LINE__, "%s, %d statements: diff %g", p->scheds[s].name, k, diff);
      checked += q != NULL;
      loom_prog_destroy(q);
    }
  CHECK(checked == 8);
  loom_prog_destroy(p);
}

static const struct {
  const char *name, *bind;
  int local; /* a Local input: W = 1 and W ranks sum different numbers of copies */
} k_tiny[] = {{"model_parallel", "B=1,S=2,H=3", 0}, {"llama_tp", "T=2,H=3,F=4", 0}, {"adam", "N=3", 1},
              {"lamb", "N=2", 1},                  {"pipeline", "B=1,S=1,H=2", 1}};

/* Every example at worlds larger than each of its dimensions: its schedules and every schedule the search
 * reaches in three moves agree with it bit for bit, and (no Local inputs) with one rank to rounding. */
LOOM_TEST(lang_every_example_runs_with_slices_smaller_than_the_world) {
  static const int worlds[] = {5, 9, 16};
  int total = 0;
  for (size_t e = 0; e < sizeof k_tiny / sizeof k_tiny[0]; ++e) {
    loom_prog_t p = lang_load_example(k_tiny[e].name);
    CHECK(p != NULL);
    if (!p) continue;
    loom__found_t found;
    CHECK_RESULT(loom__lang_explore(p, 3, 60, &found), LOOM_SUCCESS);
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; ++w) {
      if (!k_tiny[e].local) CHECK(against_one_rank(p, worlds[w], k_tiny[e].bind) < 1e-12);
      for (int s = 0; s < p->nsched + found.n; ++s) {
        const loom__sched_t *sc = s < p->nsched ? &p->scheds[s] : &found.scheds[s - p->nsched];
        loom_prog_t q = lang_apply_prefix(p, sc, sc->n);
        double diff = -1;
        const loom_result_t r = q ? loom_prog_interp_compare(p, q, worlds[w], k_tiny[e].bind, 3, &diff) : LOOM_SUCCESS;
        if (q && (r != LOOM_SUCCESS || diff != 0))
          loom_test_fail(__FILE__, __LINE__, "%s W=%d schedule %d (%s...): %s, diff %g (%s)", k_tiny[e].name, worlds[w], s,
                         sc->n ? sc->stmts[0].fn : "", loom_result_string(r), diff, loom_last_error());
        total += q != NULL;
        loom_prog_destroy(q);
      }
    }
    loom__lang_found_free(&found);
    loom_prog_destroy(p);
  }
  printf("    %d schedules run at W = 5, 9, 16 with slices smaller than the world\n", total);
  CHECK(total > 100);
}

/* A Sliced operand whose sliced dimension is 1 and broadcasts: one rank holds the element, the others'
 * slices of the result need it. Refused by the layout rules, with its place. */
LOOM_TEST(lang_sliced_operand_cannot_broadcast_along_its_slices) {
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse("Tensor a(FP32, [N, H], Sliced(0));\nTensor b(FP32, [1, H], Sliced(0));\n"
                               "Var c = a + b;\nExecute f({a, b}, {c});\n", "bc.loom", &p),
               LOOM_SUCCESS);
  if (!p) return;
  CHECK_RESULT(loom_prog_check(p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "bc.loom:3:11: +: operand `b` is Sliced(0) on a dimension of size 1 that "
                                  "broadcasts to the result's [N, H]") != NULL);
  loom_prog_destroy(p);
  /* size 1 on both sides, or a Replicated [1, H]: fine */
  CHECK_RESULT(loom_prog_parse("Tensor a(FP32, [1, H], Sliced(0));\nTensor b(FP32, [1, H], Sliced(0));\n"
                               "Tensor r(FP32, [1, H], Replicated);\nVar c = a + b + r;\nExecute f({a, b, r}, {c});\n",
                               "ok.loom", &p),
               LOOM_SUCCESS);
  if (p) CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  double v[8];
  size_t n = 0;
  if (p) CHECK_RESULT(loom_prog_interp(p, 3, "H=4", 1, "c", v, 8, &n), LOOM_SUCCESS); /* ranks 1, 2: empty slices */
  CHECK_EQ_INT(n, 4);
  loom_prog_destroy(p);
}
