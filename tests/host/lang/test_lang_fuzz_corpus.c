/*
 * test_lang_fuzz_corpus.c - the fuzzer's kept corpus (tests/host/lang/
 * fuzz_corpus/: seeds and every input a run of dev/lang/fuzz.sh found)
 * through the fuzzer's own check (lang_fuzz_one.h), plus mutations of each
 * (every prefix, each byte dropped or doubled): nothing crashes, every
 * property holds.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_fuzz_one.h"
#include "tests/host/lang/lang_test_util.h"

static void mutations(const char *name, const char *s, size_t n) {
  char *m = malloc(n + 2);
  if (!m) return;
  for (size_t cut = 0; cut <= n; cut += 1 + cut / 8) { /* prefixes */
    const int bad = lang_fuzz_one(s, cut);
    if (bad) loom_test_fail(__FILE__, __LINE__, "%s cut at %zu: property %d", name, cut, bad);
  }
  for (size_t i = 0; i < n; i += 1 + i / 16) { /* a byte dropped, a byte doubled */
    memcpy(m, s, i), memcpy(m + i, s + i + 1, n - i - 1);
    int bad = lang_fuzz_one(m, n - 1);
    memcpy(m, s, i + 1), memcpy(m + i + 1, s + i, n - i);
    bad = bad ? bad : lang_fuzz_one(m, n + 1);
    if (bad) loom_test_fail(__FILE__, __LINE__, "%s mutated at %zu: property %d", name, i, bad);
  }
  free(m);
}

static void lang_corpus_file(const char *path, const char *s, size_t n, void *ctx) {
  (void)ctx;
  const int bad = lang_fuzz_one(s, n);
  if (bad) loom_test_fail(__FILE__, __LINE__, "%s: property %d (%s)", path, bad, loom_last_error());
  mutations(path, s, n);
}

LOOM_TEST(lang_fuzz_corpus_holds) {
  CHECK(loom_test_each_file("tests/host/lang/fuzz_corpus", lang_corpus_file, NULL) >= 6);
}

/* The seeds are not trivially refused: each parses and checks. */
LOOM_TEST(lang_fuzz_seed_ops_is_a_valid_program) {
  char *s = lang_read_file("tests/host/lang/fuzz_corpus/ops.loom");
  CHECK(s != NULL);
  loom_prog_t p = NULL, q = NULL;
  if (s) CHECK_RESULT(loom_prog_parse(s, "ops.loom", &p), LOOM_SUCCESS);
  if (p) CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  if (p) CHECK_RESULT(loom_prog_schedule(p, "one", &q), LOOM_SUCCESS);
  double diff = 1;
  if (q) CHECK_RESULT(loom_prog_interp_compare(p, q, 3, "N=5,K=4", 2, &diff), LOOM_SUCCESS);
  CHECK(diff == 0);
  loom_prog_destroy(q);
  loom_prog_destroy(p);
  free(s);
}
