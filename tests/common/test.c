/*
 * test.c - registry and runner for test.h.
 *
 * With isolation on (the GPU suite), every test runs in its own forked
 * process: a test that initialises CUDA cannot spoil the fork of a later
 * test's ranks, a crash fails only that test, and a test that outlives
 * LOOM_TEST_TIMEOUT_S (default 900 s) is killed and fails. The child sends
 * its failure count and skip reason back through a pipe. Each test's wall
 * time is printed ("    took S s") just before its result line.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "support/launch.h"
#include "support/tool_param.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LOOM_MAX_TESTS 512
static struct { const char *name; loom_test_fn fn; } loom__tests[LOOM_MAX_TESTS];
static int loom__ntests;
int loom_test_failures;
static const char *loom__skip_reason;

void loom_test_skip(const char *why) { loom__skip_reason = why; }

static uint64_t loom__seed;

__attribute__((constructor)) static void loom__pick_seed(void) {
  const char *s = loom_tool_param("TEST_SEED");
  loom__seed = *s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
}

uint64_t loom_test_seed(void) { return loom__seed; }

void loom_test_register(const char *name, loom_test_fn fn) {
  if (loom__ntests == LOOM_MAX_TESTS) {
    fprintf(stderr, "too many tests\n");
    exit(2);
  }
  loom__tests[loom__ntests].name = name;
  loom__tests[loom__ntests].fn = fn;
  loom__ntests++;
}

/* Thread-safe: a world's ranks are threads of one test (the count is the
 * test's, whichever rank failed; each message is one unbroken line). */
void loom_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  flockfile(stdout);
  fprintf(stdout, "    FAIL %s:%d: ", file, line);
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  fflush(stdout);
  funlockfile(stdout);
  va_end(ap);
  __atomic_add_fetch(&loom_test_failures, 1, __ATOMIC_RELAXED);
}

static int loom__by_name(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  return strcmp(x, y);
}

typedef struct { int failures; int skipped; char why[200]; } loom__outcome_t;

/* Runs test i in a child; fills *o. */
static void loom__run_isolated(int i, loom__outcome_t *o) {
  memset(o, 0, sizeof *o);
  int fd[2];
  if (pipe(fd) != 0) {
    o->failures = 1;
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    setpgid(0, 0);
    loom__tests[i].fn();
    loom__outcome_t mine;
    memset(&mine, 0, sizeof mine);
    mine.failures = loom_test_failures;
    mine.skipped = loom__skip_reason != NULL;
    if (loom__skip_reason) snprintf(mine.why, sizeof mine.why, "%s", loom__skip_reason);
    fflush(stdout);
    if (write(fd[1], &mine, sizeof mine) != (ssize_t)sizeof mine) _exit(3);
    _exit(0);
  }
  close(fd[1]);
  if (pid < 0) {
    close(fd[0]);
    o->failures = 1;
    return;
  }
  double limit = atof(loom_tool_param("TEST_TIMEOUT_S")), waited = 0.0;
  int st = 0;
  for (;;) {
    pid_t done = waitpid(pid, &st, WNOHANG);
    if (done == pid) break;
    if (waited > limit) {
      printf("    FAIL: test exceeded LOOM_TEST_TIMEOUT_S=%.0f s; killed\n", limit);
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      close(fd[0]);
      o->failures = 1;
      return;
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    waited += 0.02;
  }
  ssize_t got = read(fd[0], o, sizeof *o);
  close(fd[0]);
  if (got != (ssize_t)sizeof *o || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    if (WIFSIGNALED(st)) printf("    FAIL: test process died of signal %d\n", WTERMSIG(st));
    else if (got != (ssize_t)sizeof *o) printf("    FAIL: test process ended without a result\n");
    if (o->failures == 0) o->failures = 1;
  }
}

/* Whether `name` passes the filter: comma-separated items, "text" (names
 * containing it), "=name" (that name exactly) and "!text" (names not
 * containing it); a name runs when it matches some "text" or "=name" item
 * (or there is none of those) and contains no "!text" item. */
int loom_test_filter_match(const char *filter, const char *name) {
  int positives = 0, hit = 0;
  for (const char *p = filter; *p;) {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    const int neg = len > 0 && p[0] == '!', exact = len > 0 && p[0] == '=';
    char item[256];
    const size_t skip = (size_t)(neg || exact);
    const size_t n = len - skip < sizeof item - 1 ? len - skip : sizeof item - 1;
    memcpy(item, p + skip, n);
    item[n] = 0;
    if (n > 0) {
      const int in = exact ? strcmp(name, item) == 0 : strstr(name, item) != NULL;
      if (neg && in) return 0;
      if (!neg) positives++, hit |= in;
    }
    p += len + (end ? 1 : 0);
  }
  return positives == 0 || hit;
}

int loom_test_main(int argc, char **argv) { return loom_test_main_opts(argc, argv, 0); }

/* `--list [filter]`: the names that pass, one a line, in name order; 2 when none does. */
static int loom__list(const char *filter) {
  int n = 0;
  for (int i = 0; i < loom__ntests; ++i)
    if (!filter || loom_test_filter_match(filter, loom__tests[i].name)) printf("%s\n", loom__tests[i].name), n++;
  return n ? 0 : 2;
}

int loom_test_main_opts(int argc, char **argv, int isolate) {
  /* registration order depends on link order: run in name order */
  qsort(loom__tests, (size_t)loom__ntests, sizeof loom__tests[0], loom__by_name);
  if (argc > 1 && !strcmp(argv[1], "--list")) return loom__list(argc > 2 ? argv[2] : NULL);
  const char *filter = argc > 1 ? argv[1] : NULL;
  int passed = 0, failed = 0, skipped = 0;
  printf("seed %llu (LOOM_TEST_SEED=%llu repeats this run's inputs)\n", (unsigned long long)loom__seed,
         (unsigned long long)loom__seed);
  for (int i = 0; i < loom__ntests; ++i) {
    if (filter && !loom_test_filter_match(filter, loom__tests[i].name)) continue;
    loom_test_failures = 0;
    loom__skip_reason = NULL;
    printf("[ RUN  ] %s\n", loom__tests[i].name);
    fflush(stdout);
    const char *why = NULL;
    loom__outcome_t o;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (isolate) {
      loom__run_isolated(i, &o);
      loom_test_failures = o.failures;
      if (o.skipped) why = o.why;
    } else {
      loom__tests[i].fn();
      why = loom__skip_reason;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("    took %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    if (loom_test_failures) failed++, printf("[ FAIL ] %s\n", loom__tests[i].name);
    else if (why) skipped++, printf("[ SKIP ] %s: %s\n", loom__tests[i].name, why);
    else passed++, printf("[  OK  ] %s\n", loom__tests[i].name);
    fflush(stdout);
  }
  if (filter && passed + failed + skipped == 0) {
    printf("no test name passes the filter \"%s\": nothing ran\n", filter);
    printf("0 passed, 1 failed, 0 skipped\n");
    return 2;
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}

int loom_test_gpus(int need) {
  const int n = loom_launch_gpu_count();
  if (n >= need) return 1;
  static char why[64];
  snprintf(why, sizeof why, "needs %d GPUs, found %d", need, n);
  loom_test_skip(why);
  return 0;
}

int loom_test_each_file(const char *dir, loom_test_file_fn fn, void *ctx) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int files = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    char *data = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
      data = (char *)malloc((size_t)n + 1);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) free(data), data = NULL;
    if (f) fclose(f);
    if (!data) {
      loom_test_fail(__FILE__, __LINE__, "cannot read %s", path);
      continue;
    }
    data[n] = 0;
    fn(path, data, (size_t)n, ctx);
    free(data);
    files++;
  }
  closedir(d);
  return files;
}
