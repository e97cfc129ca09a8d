/*
 * test_lang_paper.c - the language as a new user from the paper meets it:
 * the programs in tests/host/lang/paper/ are written from the paper (Figure
 * 3 with each of Figure 4's schedules, Figure 6 verbatim with its `sqrt`,
 * Figure 8 verbatim, LAMB with anonymous norms in its trust ratio) and for
 * layers the paper motivates (GEMM + ReduceScatter + GeLU, AllReduce +
 * RMSNorm, an AllToAll exchange), not from examples/lang. Each parses and
 * types; every prefix of every schedule applies and computes the
 * unscheduled results bit for bit at W = 1, 2, 3 and 9 (9: slices smaller
 * than the world); every schedule's protocols pass the checker at W = 2.
 */
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"
#include "lang/lang.h"
#include "lang/lang_proto.h"

static const struct {
  const char *file, *bind;
  int scheds; /* Schedule sections the file holds */
} k_paper[] = {{"fig4_schedules", "B=2,S=3,H=8", 5}, {"fig6_adam", "N=11", 1},       {"fig8_pipeline", "B=2,S=3,H=5", 1},
               {"lamb", "N=7", 1},                   {"gemm_rs_gelu", "M=4,K=6,N=5", 1}, {"ar_rmsnorm", "T=4,H=6", 2},
               {"alltoall_moe", "E=3,C=4,H=5,F=2", 1}};

static loom_prog_t load_paper(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "tests/host/lang/paper/%s.loom", name);
  char *text = lang_read_file(path);
  loom_prog_t p = NULL;
  if (!text) loom_test_fail(__FILE__, __LINE__, "cannot read %s (run the suite from the repository root)", path);
  if (text && loom_prog_parse(text, path, &p) != LOOM_SUCCESS) loom_test_fail(__FILE__, __LINE__, "%s", loom_last_error());
  if (p && loom_prog_check(p) != LOOM_SUCCESS) loom_test_fail(__FILE__, __LINE__, "%s", loom_last_error());
  free(text);
  return p;
}

static void protocols_pass(loom_prog_t q, const char *what) {
  static loom__proto_unit_t u[32];
  static loom__proto_report_t rep;
  int n = 0;
  CHECK_RESULT(loom__lang_lower(q, 2, u, 32, &n), LOOM_SUCCESS);
  for (int i = 0; i < n; ++i) {
    CHECK_RESULT(loom__proto_check(&u[i].proto, 2, &rep), LOOM_SUCCESS);
    if (rep.violation) loom_test_fail(__FILE__, __LINE__, "%s: unit %s:\n%s", what, u[i].unit, rep.text);
  }
  loom__proto_units_free(u, n);
}

LOOM_TEST(lang_programs_written_from_the_paper_run_with_every_schedule) {
  static const int worlds[] = {1, 2, 3, 9};
  int prefixes = 0;
  for (size_t e = 0; e < sizeof k_paper / sizeof k_paper[0]; ++e) {
    loom_prog_t p = load_paper(k_paper[e].file);
    if (!p) continue;
    CHECK_EQ_INT(p->nsched, k_paper[e].scheds);
    for (int s = 0; s < p->nsched; ++s)
      for (int k = 1; k <= p->scheds[s].n; ++k) {
        loom_prog_t q = lang_apply_prefix(p, &p->scheds[s], k);
        char what[160];
        snprintf(what, sizeof what, "%s, schedule %s, %d statements", k_paper[e].file, p->scheds[s].name, k);
        for (size_t w = 0; q && w < sizeof worlds / sizeof worlds[0]; ++w) {
          double diff = -1;
          const loom_result_t c = loom_prog_interp_compare(p, q, worlds[w], k_paper[e].bind, 9, &diff);
          if (c != LOOM_SUCCESS || diff != 0)
            loom_test_fail(__FILE__, __LINE__, "%s at W=%d: %s, diff %g (%s)", what, worlds[w], loom_result_string(c), diff,
                           loom_last_error());
        }
        if (q && k == p->scheds[s].n) protocols_pass(q, what);
        prefixes += q != NULL;
        loom_prog_destroy(q);
      }
    loom_prog_destroy(p);
  }
  CHECK_EQ_INT(prefixes, 15 + 8 + 4 + 9 + 3 + 6 + 1);
}

/* What a new user met, one by one: the paper's lowercase `sqrt`; a fuse whose named operations have
 * anonymous non-pointwise operands (LAMB's `Norm(p) / Norm(u)`: they stay outside the kernel); a fused
 * collective of the wrong policy says which one the parts make. */
LOOM_TEST(lang_paper_spellings_and_anonymous_operands) {
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse("Tensor x(FP32, [N], Replicated);\nVar y = sqrt(x) + exp(x) + ReLU(x);\n"
                               "Execute f({x}, {y});\n", "s.loom", &p),
               LOOM_SUCCESS);
  if (p) CHECK(p->nodes[p->nodes[p->nodes[loom__lang_find(p, "y")].in[0]].in[0]].op == LOOM__OP_SQRT);
  loom_prog_destroy(p);
  CHECK_RESULT(loom_prog_parse("Tensor x(FP32, [N], Replicated);\nVar y = sqrtt(x);\nExecute f({x}, {y});\n", "s.loom", &p),
               LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "s.loom:2:9: found identifier `sqrtt`; expected an operation") != NULL);
  p = load_paper("lamb");
  if (!p) return;
  CHECK_RESULT(loom_prog_transform(p, "k = fuse(m_, v_, u)"), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_transform(p, "step = fuse(ratio, p_)"), LOOM_SUCCESS);
  int norms = 0;
  for (int i = 0; i < p->n; ++i)
    if (!p->nodes[i].removed && p->nodes[i].op == LOOM__OP_NORM) {
      norms += 1;
      CHECK(p->nodes[i].kern < 0);
    }
  CHECK_EQ_INT(norms, 2);
  CHECK(p->nodes[loom__lang_find(p, "ratio")].kern == p->nodes[loom__lang_find(p, "p_")].kern);
  CHECK_RESULT(loom_prog_transform(p, "f = fuseComm(avg, k, FusedAllReduce)"), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "fuseComm: the parts given (an AllReduce, a kernel, 0 AllGathers) make a "
                                  "FusedAllReduceEpilogue, not a FusedAllReduce: write FusedAllReduceEpilogue") != NULL);
  loom_prog_destroy(p);
}
