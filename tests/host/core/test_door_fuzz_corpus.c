/*
 * test_door_fuzz_corpus.c - the door fuzzer's kept corpus
 * (tests/host/core/door_corpus/: a seed per op and every input a run of
 * dev/door/fuzz.sh found) through the fuzzer's own check (door_fuzz_one.h),
 * plus mutations of each (every prefix, each byte dropped, flipped or
 * doubled): nothing crashes, every property holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/core/door_fuzz_one.h"

static void door_mutations(const char *name, const uint8_t *s, size_t n) {
  uint8_t *m = (uint8_t *)malloc(n + 2);
  if (!m) return;
  for (size_t cut = 0; cut <= n; ++cut) { /* prefixes */
    const int bad = door_fuzz_one(s, cut);
    if (bad) loom_test_fail(__FILE__, __LINE__, "%s cut at %zu: property %d", name, cut, bad);
  }
  for (size_t i = 0; i < n; ++i) { /* a byte dropped, flipped, doubled */
    memcpy(m, s, i), memcpy(m + i, s + i + 1, n - i - 1);
    int bad = door_fuzz_one(m, n - 1);
    memcpy(m, s, n), m[i] ^= 0xa5;
    bad = bad ? bad : door_fuzz_one(m, n);
    memcpy(m, s, i + 1), memcpy(m + i + 1, s + i, n - i);
    bad = bad ? bad : door_fuzz_one(m, n + 1);
    if (bad) loom_test_fail(__FILE__, __LINE__, "%s mutated at %zu: property %d", name, i, bad);
  }
  free(m);
}

static void door_corpus_file(const char *path, const char *data, size_t n, void *ctx) {
  const uint8_t *buf = (const uint8_t *)data;
  const int bad = door_fuzz_one(buf, n);
  if (bad) loom_test_fail(__FILE__, __LINE__, "%s: property %d (%s)", path, bad, loom_last_error());
  door_mutations(path, buf, n);
  if (n > 0) *(int *)ctx |= 1 << (buf[0] % 10);
}

LOOM_TEST(door_fuzz_corpus_holds) {
  int kinds = 0;
  const int files = loom_test_each_file("tests/host/core/door_corpus", door_corpus_file, &kinds);
  CHECK(files >= 10);
  CHECK_EQ_INT(kinds, (1 << 10) - 1); /* a seed for every op */
}
