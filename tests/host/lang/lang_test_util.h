/*
 * lang_test_util.h - what the language's host tests share: reading the
 * example programs (examples/lang/, from the repository root, where make
 * test runs the suite) and applying a schedule's first statements.
 */
#ifndef LOOM_TESTS_LANG_UTIL_H
#define LOOM_TESTS_LANG_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "loom.h"
#include "lang/lang.h"
#include "tests/common/test.h"

/* The file's text (malloc'ed), NULL if it cannot be read. */
static inline char *lang_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

/* examples/lang/<name>.loom parsed, NULL on failure (the caller CHECKs). */
static inline loom_prog_t lang_load_example(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "examples/lang/%s.loom", name);
  char *text = lang_read_file(path);
  if (!text) {
    fprintf(stderr, "cannot read %s (run the suite from the repository root)\n", path);
    return NULL;
  }
  loom_prog_t p = NULL;
  if (loom_prog_parse(text, path, &p) != LOOM_SUCCESS) fprintf(stderr, "%s\n", loom_last_error());
  free(text);
  return p;
}

/* A copy of p with the first k statements of schedule s applied; NULL (the test failed, saying which
 * statement) when one is refused. */
static inline loom_prog_t lang_apply_prefix(loom_prog_t p, const loom__sched_t *s, int k) {
  loom_prog_t q = NULL;
  if (loom_prog_schedule(p, NULL, &q) != LOOM_SUCCESS) return NULL;
  for (int i = 0; i < k; ++i)
    if (loom__lang_apply(q, &s->stmts[i]) != LOOM_SUCCESS) {
      loom_test_fail(__FILE__, __LINE__, "schedule %s, statement %d: %s", s->name, i + 1, loom_last_error());
      loom_prog_destroy(q);
      return NULL;
    }
  return q;
}

#endif /* LOOM_TESTS_LANG_UTIL_H */
