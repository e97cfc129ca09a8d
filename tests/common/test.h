/*
 * test.h - the test framework shared by the host and GPU suites.
 *
 *   LOOM_TEST(name) { ... CHECK(cond); CHECK_EQ_INT(a, b); CHECK_RESULT(call, code); ... }
 *
 * Tests register themselves (a constructor); loom_test_main runs those whose
 * name contains the first command-line argument ("!text": does not contain
 * it; all without one), prints one
 * line per test and closes with "N passed, N failed, N skipped" (a line CI's runner
 * recognises); a filter that matches no test fails the run. A test fails if any CHECK in it fails; a CHECK prints file,
 * line, the expression and loom_last_error(). Tests exit non-zero on failure.
 */
#ifndef LOOM_TEST_H
#define LOOM_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*loom_test_fn)(void);
void loom_test_register(const char *name, loom_test_fn fn);
int loom_test_main(int argc, char **argv);
/* isolate=1: each test in its own forked process, bounded by
 * LOOM_TEST_TIMEOUT_S (see test.c). */
int loom_test_main_opts(int argc, char **argv, int isolate);
/* Whether a test name passes a runner filter ("text", "=name", "!text",
 * comma-separated: test.c says how they combine). */
int loom_test_filter_match(const char *filter, const char *name);
/* Counts a failed check of the running test and prints why (from any
 * thread: a world's ranks share the running test's count). */
void loom_test_fail(const char *file, int line, const char *fmt, ...);
extern int loom_test_failures; /* of the running test */
/* This run's random seed: LOOM_TEST_SEED if set, else fresh (time, pid).
 * Chosen once when the program starts, before any fork, so every rank and
 * every test process of a run sees the same value; printed at start. */
uint64_t loom_test_seed(void);

/* A fuzzer's kept corpus: fn(path, data, n, ctx) for every file of `dir`
 * (names not starting with '.'), its bytes with a NUL after them; returns
 * how many files, -1 if dir cannot be read (a file that cannot is a failed
 * check). */
typedef void (*loom_test_file_fn)(const char *path, const char *data, size_t n, void *ctx);
int loom_test_each_file(const char *dir, loom_test_file_fn fn, void *ctx);

/* Marks the running test skipped (say why); its checks still count. */
void loom_test_skip(const char *why);

/* 1 if at least `need` GPUs are present, else the running test is marked
 * skipped ("needs N GPUs, found M") and 0. Counts in a child process, so
 * the caller can still fork ranks afterwards. */
int loom_test_gpus(int need);

#ifdef __cplusplus
}
#endif

#define LOOM_TEST(name)                                                        \
  static void loom_test_##name(void);                                          \
  __attribute__((constructor)) static void loom_test_reg_##name(void) {        \
    loom_test_register(#name, loom_test_##name);                               \
  }                                                                            \
  static void loom_test_##name(void)

#define CHECK(cond)                                                            \
  do { if (!(cond)) loom_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
  do {                                                                         \
    long long loom__a = (long long)(a), loom__b = (long long)(b);              \
    if (loom__a != loom__b)                                                    \
      loom_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, loom__a, loom__b); \
  } while (0)

/* The call returns `code`; prints the message either way on mismatch. */
#define CHECK_RESULT(call, code)                                               \
  do {                                                                         \
    loom_result_t loom__r = (call);                                            \
    if (loom__r != (code))                                                     \
      loom_test_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)", #call, \
                     loom_result_string(loom__r), loom_result_string(code), loom_last_error()); \
  } while (0)

/* A failed CUDA or loom call counts as a failed check naming the call and
 * what went wrong, then runs `on_fail` (`goto out`, `return loom_test_failures`). */
#define CHECK_CUDA_OR(call, on_fail)                                           \
  do {                                                                         \
    cudaError_t loom__e = (call);                                              \
    if (loom__e != cudaSuccess) {                                              \
      loom_test_fail(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(loom__e)); \
      on_fail;                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_LOOM_OR(call, on_fail)                                           \
  do {                                                                         \
    loom_result_t loom__r = (call);                                            \
    if (loom__r != LOOM_SUCCESS) {                                             \
      loom_test_fail(__FILE__, __LINE__, "%s: %s: %s", #call, loom_result_string(loom__r), \
                     loom_last_error());                                       \
      on_fail;                                                                 \
    }                                                                          \
  } while (0)

/* The last error message contains `text`. */
#define CHECK_MSG(text)                                                        \
  do {                                                                         \
    if (!strstr(loom_last_error(), (text)))                                    \
      loom_test_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", loom_last_error(), (text)); \
  } while (0)

#endif /* LOOM_TEST_H */
