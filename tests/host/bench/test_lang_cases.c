/*
 * test_lang_cases.c - the cases of loom-bench lang (support/lang_cases.h),
 * on the host (no GPU): every case's program parses and checks, its
 * schedule applies, and the scheduled program lowers (its protocols
 * checked) at W = 1 and 2 with each of its sizes (timed, --quick, check);
 * scheduled and as written, it computes the same in the interpreter at the
 * check sizes; the kernels the suite runs by default (W = 1, the timed
 * sizes) compile with NVRTC for sm_90a; the example programs' texts are
 * examples/lang's files as they are; the case lookup, a bind's sizes and
 * the sizes the interpreter checks at.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit.h"
#include "codegen/rtc.h"
#include "lang/lower.h"
#include "support/lang_cases.h"
#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"

/* Case c's program scheduled as the suite runs it (typed), NULL on failure (the test failed). */
static loom_prog_t case_scheduled(const lang_case_t *c, loom_prog_t *asis) {
  loom_prog_t p = NULL, q = NULL;
  *asis = NULL;
  if (loom_prog_parse(c->text, c->name, &p) != LOOM_SUCCESS || loom_prog_check(p) != LOOM_SUCCESS ||
      loom_prog_schedule(p, c->schedule[0] ? c->schedule : NULL, &q) != LOOM_SUCCESS ||
      loom_prog_check(q) != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "case %s: %s", c->name, loom_last_error());
    loom_prog_destroy(p);
    return NULL;
  }
  *asis = p;
  return q;
}

/* q lowered at W ranks with sizes bind; with rtc, each kernel unit compiled by NVRTC for sm_90a. */
static void lower_at(const lang_case_t *c, loom_prog_t q, int W, const char *bind, int rtc) {
  loom__binding_t b;
  loom__lw_prog_t lw;
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  if (loom__lw_lower(q, W, &b, &lw) != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "case %s at W = %d, %s: %s", c->name, W, bind, loom_last_error());
    return;
  }
  for (int u = 0; rtc && u < lw.nunit; ++u) {
    if (lw.units[u].kind != LOOM__LU_KERNEL) continue;
    char *src = NULL;
    loom__rtc_image_t im;
    if (loom__cg_emit_unit(&lw, u, &src) != LOOM_SUCCESS ||
        loom__rtc_compile(lw.units[u].name, src, "sm_90a", &im) != LOOM_SUCCESS)
      loom_test_fail(__FILE__, __LINE__, "case %s, %s, unit %s: %s", c->name, bind, lw.units[u].name,
                     loom_last_error());
    free(src);
  }
  loom__lw_free(&lw);
}

LOOM_TEST(lang_cases_programs_check_lower_and_compile_at_their_sizes) {
  setenv("LOOM_CACHE_DIR", "off", 1);
  CHECK(lang_case_count() == 4);
  for (int i = 0; i < lang_case_count(); ++i) {
    const lang_case_t *c = lang_case(i);
    loom_prog_t p, q = case_scheduled(c, &p);
    if (!q) continue;
    const char *binds[3] = {c->bind, c->quick_bind, c->check_bind};
    for (int k = 0; k < 3; ++k)
      for (int W = 1; W <= 2; ++W) lower_at(c, q, W, binds[k], k == 0 && W == 1);
    for (int W = 1; W <= 2; ++W) { /* the schedule computes what the program as written does */
      double d = 1;
      CHECK_RESULT(loom_prog_interp_compare(p, q, W, c->check_bind, 7, &d), LOOM_SUCCESS);
      if (d > 1e-6) loom_test_fail(__FILE__, __LINE__, "case %s at W = %d: scheduled differs by %g", c->name, W, d);
    }
    loom_prog_destroy(q), loom_prog_destroy(p);
  }
  unsetenv("LOOM_CACHE_DIR");
}

LOOM_TEST(lang_cases_example_texts_are_the_files) {
  int examples = 0;
  for (int i = 0; i < lang_case_count(); ++i) {
    const lang_case_t *c = lang_case(i);
    if (!c->example[0]) continue;
    char path[128];
    snprintf(path, sizeof path, "examples/lang/%s.loom", c->example);
    char *text = lang_read_file(path);
    CHECK(text != NULL);
    if (text && strcmp(text, c->text))
      loom_test_fail(__FILE__, __LINE__, "case %s: its text is no longer %s (copy the file into lang_cases.c)",
                     c->name, path);
    free(text);
    examples++;
  }
  CHECK_EQ_INT(examples, 2);
}

LOOM_TEST(lang_cases_lookup_sizes_and_check_sizes) {
  CHECK(lang_case_find("adam") == lang_case(1));
  CHECK(lang_case_find("gemm") == NULL);
  CHECK(lang_case(-1) == NULL && lang_case(lang_case_count()) == NULL);
  CHECK(lang_bind_size("R=8192,C=4096", "R") == 8192);
  CHECK(lang_bind_size("R=8192,C=4096", "C") == 4096);
  CHECK(lang_bind_size("RR=3,R=2", "R") == 2); /* a name is matched whole */
  CHECK(lang_bind_size("R=8192,C=4096", "N") == -1);
  CHECK(lang_bind_size("", "N") == -1);
  const lang_case_t *adam = lang_case_find("adam"), *gemm = lang_case_find("gemm_bias");
  CHECK(adam && gemm);
  if (!adam || !gemm) return;
  CHECK(lang_case_check_bind(adam, adam->bind) == adam->check_bind);   /* 2^24 elements: too many */
  CHECK(lang_case_check_bind(adam, adam->quick_bind) == adam->quick_bind); /* 2^20: the timed sizes */
  CHECK(lang_case_check_bind(gemm, "M=256,N=128,K=128") == gemm->check_bind); /* the product counts */
  CHECK(strcmp(lang_case_check_bind(gemm, "M=128,N=128,K=64"), "M=128,N=128,K=64") == 0);
  for (int i = 0; i < lang_case_count(); ++i) { /* the check sizes are what the interpreter takes */
    const lang_case_t *c = lang_case(i);
    CHECK(lang_case_check_bind(c, c->check_bind) == c->check_bind);
  }
}
