/*
 * test.c - registry and runner for test.h.
 */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>

#define LOOM_MAX_TESTS 512
static struct { const char *name; loom_test_fn fn; } loom__tests[LOOM_MAX_TESTS];
static int loom__ntests;
int loom_test_failures;
static const char *loom__skip_reason;

void loom_test_skip(const char *why) { loom__skip_reason = why; }

void loom_test_register(const char *name, loom_test_fn fn) {
  if (loom__ntests == LOOM_MAX_TESTS) {
    fprintf(stderr, "too many tests\n");
    exit(2);
  }
  loom__tests[loom__ntests].name = name;
  loom__tests[loom__ntests].fn = fn;
  loom__ntests++;
}

void loom_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "    FAIL %s:%d: ", file, line);
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  loom_test_failures++;
}

static int loom__by_name(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  return strcmp(x, y);
}

int loom_test_main(int argc, char **argv) {
  const char *filter = argc > 1 ? argv[1] : NULL;
  /* registration order depends on link order: run in name order */
  qsort(loom__tests, (size_t)loom__ntests, sizeof loom__tests[0], loom__by_name);
  int passed = 0, failed = 0, skipped = 0;
  for (int i = 0; i < loom__ntests; ++i) {
    if (filter && !strstr(loom__tests[i].name, filter)) continue;
    loom_test_failures = 0;
    loom__skip_reason = NULL;
    printf("[ RUN  ] %s\n", loom__tests[i].name);
    fflush(stdout);
    loom__tests[i].fn();
    if (loom_test_failures) failed++, printf("[ FAIL ] %s\n", loom__tests[i].name);
    else if (loom__skip_reason) skipped++, printf("[ SKIP ] %s: %s\n", loom__tests[i].name, loom__skip_reason);
    else passed++, printf("[  OK  ] %s\n", loom__tests[i].name);
    fflush(stdout);
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
