/*
 * test_lang_cases.c - the cases of loom-bench lang (support/lang_cases.h),
 * on the host (no GPU): every case's program parses and checks, the
 * schedule of each of its generated rows applies (a prefix of its Schedule
 * where the case names prefixes: lang_case_schedule), and the scheduled
 * program lowers (its protocols checked) at W = 1, 2 and 4 with each of
 * its sizes (timed, --quick, check); scheduled and as written, it computes
 * the same in the interpreter at the check sizes; the kernels the suite
 * runs by default (W = 1, the timed sizes) compile with NVRTC for sm_90a;
 * the example programs' texts are examples/lang's files as they are (with
 * the case's dtype for FP16 where it names one); Figure 11's prefixes are
 * 1, 3, 4 and all 5 statements of model_parallel's `best`, each a new
 * schedule; a prefix beyond the Schedule is refused by name; the Dropout
 * the suite reads from a program; the case lookup, a bind's sizes and the
 * sizes the interpreter checks at.
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

/* Row j of case c's program scheduled as the suite runs it (typed), NULL on failure (the test failed). */
static loom_prog_t case_scheduled(const lang_case_t *c, int j, loom_prog_t *asis) {
  loom_prog_t p = NULL, q = NULL;
  *asis = NULL;
  if (loom_prog_parse(c->text, c->name, &p) != LOOM_SUCCESS || loom_prog_check(p) != LOOM_SUCCESS ||
      lang_case_schedule(c, j, p, &q) != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "case %s, row %d: %s", c->name, j, loom_last_error());
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

/* Row j of case c: lowered at W = 1, 2, 4 with each of its sizes (NVRTC at W = 1, the timed sizes), and
 * computing what the program as written does at the check sizes. */
static void check_row(const lang_case_t *c, int j) {
  static const int worlds[3] = {1, 2, 4};
  loom_prog_t p, q = case_scheduled(c, j, &p);
  if (!q) return;
  const char *binds[3] = {c->bind, c->quick_bind, c->check_bind};
  for (int k = 0; k < 3; ++k)
    for (int w = 0; w < 3; ++w) lower_at(c, q, worlds[w], binds[k], k == 0 && w == 0);
  for (int w = 0; w < 3; ++w) {
    double d = 1;
    CHECK_RESULT(loom_prog_interp_compare(p, q, worlds[w], c->check_bind, 7, &d), LOOM_SUCCESS);
    if (d > 1e-6)
      loom_test_fail(__FILE__, __LINE__, "case %s, row %s at W = %d: scheduled differs by %g", c->name,
                     lang_case_row_label(c, j), worlds[w], d);
  }
  loom_prog_destroy(q), loom_prog_destroy(p);
}

LOOM_TEST(lang_cases_programs_check_lower_and_compile_at_their_sizes) {
  setenv("LOOM_CACHE_DIR", "off", 1);
  CHECK(lang_case_count() == 7);
  for (int i = 0; i < lang_case_count(); ++i) {
    const lang_case_t *c = lang_case(i);
    CHECK(lang_case_rows(c) >= 1 && lang_case_rows(c) <= LANG_ROWS_MAX);
    for (int j = 0; j < lang_case_rows(c); ++j) check_row(c, j);
  }
  unsetenv("LOOM_CACHE_DIR");
}

/* text with every "FP16" written as dtype (malloc'd; NULL if out of memory). */
static char *retyped(const char *text, const char *dtype) {
  const size_t n = strlen(text), dn = strlen(dtype);
  char *out = malloc(n * (dn > 4 ? dn : 4) / 4 + 1), *o = out;
  for (const char *s = text; out && *s;) {
    if (!strncmp(s, "FP16", 4)) memcpy(o, dtype, dn), o += dn, s += 4;
    else *o++ = *s++;
  }
  if (out) *o = 0;
  return out;
}

LOOM_TEST(lang_cases_example_texts_are_the_files) {
  int examples = 0;
  for (int i = 0; i < lang_case_count(); ++i) {
    const lang_case_t *c = lang_case(i);
    if (!c->example[0]) continue;
    char path[128];
    snprintf(path, sizeof path, "examples/lang/%s.loom", c->example);
    char *file = lang_read_file(path), *text = file && c->as_dtype[0] ? retyped(file, c->as_dtype) : file;
    CHECK(text != NULL);
    if (text && strcmp(text, c->text))
      loom_test_fail(__FILE__, __LINE__, "case %s: its text is no longer %s%s%s (copy the file into lang_cases.c)",
                     c->name, path, c->as_dtype[0] ? " with FP16 written " : "", c->as_dtype);
    if (text != file) free(text);
    free(file);
    examples++;
  }
  CHECK_EQ_INT(examples, 5);
}

LOOM_TEST(lang_cases_figure11_rows_are_prefixes_of_best) {
  const lang_case_t *c = lang_case_find("mp_layer_bf16");
  CHECK(c && lang_case_rows(c) == 4);
  if (!c) return;
  static const int steps[4] = {1, 3, 4, 5};
  loom_prog_t p = NULL, q[4] = {NULL, NULL, NULL, NULL}, best = NULL;
  CHECK_RESULT(loom_prog_parse(c->text, c->name, &p), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_schedule(p, "best", &best), LOOM_SUCCESS);
  for (int j = 0; j < 4; ++j) {
    CHECK_EQ_INT(lang_case_row_steps(c, j), steps[j]);
    CHECK_RESULT(lang_case_schedule(c, j, p, &q[j]), LOOM_SUCCESS);
    for (int i = 0; i < j && q[i] && q[j]; ++i) { /* each row a schedule of its own */
      int eq = 1;
      CHECK_RESULT(loom_prog_equal(q[i], q[j], &eq), LOOM_SUCCESS);
      CHECK_EQ_INT(eq, 0);
    }
  }
  int eq = 0; /* the last row is all of best */
  if (q[3] && best) CHECK_RESULT(loom_prog_equal(q[3], best, &eq), LOOM_SUCCESS);
  CHECK_EQ_INT(eq, 1);
  char buf[32];
  lang_case_row_schedule(c, 1, buf, sizeof buf);
  CHECK(!strcmp(buf, "best[:3]") && !strcmp(lang_case_row_label(c, 1), "mm_rs_c_ag"));
  CHECK(lang_case_row_label(c, 4) == NULL);
  loom_prog_t none = NULL; /* a row beyond the case, refused by name */
  CHECK_RESULT(lang_case_schedule(c, 4, p, &none), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(none == NULL && strstr(loom_last_error(), "mp_layer_bf16") != NULL);
  for (int j = 0; j < 4; ++j) loom_prog_destroy(q[j]);
  loom_prog_destroy(best), loom_prog_destroy(p);
}

/* The Dropout of case `name`'s program (its text parsed): 0, or -1 (lang_prog_dropout's). */
static int case_dropout(const char *name, float *prob, uint64_t *seed) {
  const lang_case_t *c = lang_case_find(name);
  loom_prog_t p = NULL;
  if (!c || loom_prog_parse(c->text, c->name, &p) != LOOM_SUCCESS) return -2;
  const int r = lang_prog_dropout(p, prob, seed);
  loom_prog_destroy(p);
  return r;
}

LOOM_TEST(lang_cases_dropout_read_from_the_program) {
  float prob = 0;
  uint64_t seed = 7;
  CHECK_EQ_INT(case_dropout("mp_layer", &prob, &seed), 0);
  CHECK(prob == 0.1f && seed == 0); /* Dropout(sum + b, 0.1): the default seed */
  CHECK_EQ_INT(case_dropout("ar_norm", &prob, &seed), 0);
  CHECK(prob == 0.1f && seed == 1234);
  CHECK_EQ_INT(case_dropout("gemm_bias", &prob, &seed), -1);
}

LOOM_TEST(lang_cases_lookup_sizes_and_check_sizes) {
  CHECK(lang_case_find("adam") == lang_case(1));
  CHECK(lang_case_find("gemm") == NULL);
  CHECK(lang_case_find("mp_layer_b16") == lang_case(5));
  CHECK(lang_bind_size("B=16,S=1024,H=3072", "H") == 3072);
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
