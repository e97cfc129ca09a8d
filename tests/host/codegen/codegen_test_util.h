/*
 * codegen_test_util.h - what the code generator's host tests share: every
 * schedule of a program that they cover (the unscheduled program, the
 * program's own Schedule sections, every schedule `loom schedules` lists),
 * each as a scheduled copy, and the sizes each example is bound to.
 */
#ifndef LOOM_TESTS_CODEGEN_UTIL_H
#define LOOM_TESTS_CODEGEN_UTIL_H

#include <stdlib.h>

#include "lang/lang.h"
#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"

/* The examples (examples/lang/) and sizes smaller than 3 ranks in places (empty slices at W = 3). */
static const struct { const char *name, *bind; } codegen_examples[] = {
    {"model_parallel", "B=2,S=3,H=8"}, {"adam", "N=10"}, {"lamb", "N=10"},
    {"pipeline", "B=2,S=3,H=8"},       {"llama_tp", "T=5,H=8,F=16"}, {"layer_norm", "T=5,H=8"},
};
#define CODEGEN_NEXAMPLES ((int)(sizeof codegen_examples / sizeof codegen_examples[0]))

/* fn(q, label, ctx) for every schedule of p that `loom schedules` lists at W ranks (the unscheduled
 * program, the program's own and the search's; refused own schedules skipped), q typed; the count. */
typedef void (*codegen_sched_fn)(loom_prog_t q, const char *label, void *ctx);
static inline int codegen_each_schedule(loom_prog_t p, int W, const char *bind, codegen_sched_fn fn, void *ctx) {
  loom__binding_t b;
  loom__listing_t l;
  int n = 0;
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_list(p, W, &b, 6, 200, &l), LOOM_SUCCESS);
  for (int i = 0; i < l.n; ++i) {
    if (l.rows[i].refused) continue;
    loom_prog_t q = lang_apply_prefix(p, l.rows[i].s, l.rows[i].s->n);
    if (!q) continue;
    CHECK_RESULT(loom_prog_check(q), LOOM_SUCCESS);
    char label[160];
    snprintf(label, sizeof label, "%s schedule %s", p->name, l.rows[i].s->name);
    fn(q, label, ctx);
    loom_prog_destroy(q);
    n++;
  }
  loom__lang_listing_free(&l);
  return n;
}

#endif /* LOOM_TESTS_CODEGEN_UTIL_H */
