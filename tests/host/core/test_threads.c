/*
 * test_threads.c - loom's thread contract (loom.h), hammered from several
 * threads at once on a machine without a GPU: settings, the tuning cache
 * (including the first lookup's load of LOOM_TUNE_FILE, which no thread may
 * see half done), wait-site names, thread-local error messages, and comms
 * with their handles and allocation tables, one comm per thread.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/test.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "core/signal.h"
#include "core/tune.h"
#include "testing/hooks.h"

#define NTHREADS 8
#define NFILE 400

static pthread_barrier_t g_start;
static int g_live;

static loom_result_t thr_alloc(loom_comm_t comm, size_t bytes, loom_alloc_t *a) {
  a->ptr = malloc(bytes);
  if (!a->ptr) return LOOM_ERR_OUT_OF_MEMORY;
  a->peer_ptrs[comm->rank] = a->ptr;
  __atomic_add_fetch(&g_live, 1, __ATOMIC_RELAXED);
  return LOOM_SUCCESS;
}
static loom_result_t thr_release(loom_comm_t comm, loom_alloc_t *a) {
  (void)comm;
  free(a->ptr);
  __atomic_sub_fetch(&g_live, 1, __ATOMIC_RELAXED);
  return LOOM_SUCCESS;
}
static const loom_mem_backend_t g_backend = {thr_alloc, thr_release};

typedef struct { int id, failures; char why[160]; } thr_t;

static void thr_fail(thr_t *t, const char *why) {
  if (!t->failures++) snprintf(t->why, sizeof t->why, "%s", why);
}

static void *hammer(void *arg) {
  thr_t *t = (thr_t *)arg;
  char key[64], want[64], got[LOOM_TUNE_TEXT_BYTES];
  pthread_barrier_wait(&g_start);
  /* every thread's first lookups race with the file's load */
  for (int i = 0; i < NFILE; ++i) {
    snprintf(key, sizeof key, "file.%d", (i * 7 + t->id * 13) % NFILE);
    snprintf(want, sizeof want, "v%d", (i * 7 + t->id * 13) % NFILE);
    if (!loom__tune_get(key, got, sizeof got) || strcmp(got, want) != 0) thr_fail(t, "an entry of LOOM_TUNE_FILE was missed");
  }
  for (int round = 0; round < 50; ++round) {
    snprintf(key, sizeof key, "thread.%d.%d", t->id, round);
    snprintf(want, sizeof want, "r%d", round);
    if (loom__tune_put(key, want) != LOOM_SUCCESS) thr_fail(t, "loom__tune_put failed");
    if (!loom__tune_get(key, got, sizeof got) || strcmp(got, want) != 0) thr_fail(t, "own tuning entry lost");
    if (loom__param_TIMEOUT_MS() != loom__param_TIMEOUT_MS()) thr_fail(t, "a setting changed");
    if (loom__wait_site_register(LOOM_SITE_BARRIER, "comm barrier") != LOOM_SUCCESS) thr_fail(t, "wait site clash");
    /* the error message is this thread's */
    loom__fail(LOOM_ERR_INVALID_ARGUMENT, "thread %d round %d", t->id, round);
    char mine[64];
    snprintf(mine, sizeof mine, "thread %d round %d", t->id, round);
    if (strcmp(loom_last_error(), mine) != 0) thr_fail(t, "another thread's error message");
    /* a comm of its own: handles, allocation table */
    loom_comm_t c = NULL;
    if (loom__comm_create_detached(t->id % 4, 4, 1 << 20, &c) != LOOM_SUCCESS) {
      thr_fail(t, "detached comm");
      continue;
    }
    loom__comm_set_mem_backend(c, &g_backend);
    void *p[12];
    for (int j = 0; j < 12; ++j)
      if (loom_malloc(c, 64 + (size_t)j, &p[j]) != LOOM_SUCCESS) thr_fail(t, "loom_malloc");
    for (int j = 0; j < 12; ++j)
      if (loom_free(c, p[j]) != LOOM_SUCCESS) thr_fail(t, "loom_free");
    if (loom_comm_destroy(c) != LOOM_SUCCESS) thr_fail(t, "loom_comm_destroy");
    if (loom_comm_destroy(c) != LOOM_ERR_INVALID_ARGUMENT) thr_fail(t, "destroyed comm still alive");
  }
  return NULL;
}

LOOM_TEST(thread_contract_hammered_from_eight_threads) {
  char path[] = "/tmp/loom-tune-threads-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    loom_test_fail(__FILE__, __LINE__, "mkstemp");
    return;
  }
  FILE *f = fdopen(fd, "w");
  for (int i = 0; i < NFILE; ++i) fprintf(f, "file.%d = v%d\n", i, i);
  fclose(f);
  setenv("LOOM_TUNE_FILE", path, 1);
  loom__tune_clear();
  loom__tune_forget_file();
  const int clashes = loom__wait_site_clashes();
  pthread_barrier_init(&g_start, NULL, NTHREADS);
  pthread_t th[NTHREADS];
  thr_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; ++i) {
    memset(&t[i], 0, sizeof t[i]);
    t[i].id = i;
    pthread_create(&th[i], NULL, hammer, &t[i]);
  }
  for (int i = 0; i < NTHREADS; ++i) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g_start);
  for (int i = 0; i < NTHREADS; ++i)
    if (t[i].failures) loom_test_fail(__FILE__, __LINE__, "thread %d: %d failure(s), first: %s", i, t[i].failures, t[i].why);
  CHECK_EQ_INT(__atomic_load_n(&g_live, __ATOMIC_RELAXED), 0);
  CHECK_EQ_INT(loom__wait_site_clashes(), clashes);
  unsetenv("LOOM_TUNE_FILE");
  loom__tune_clear();
  loom__tune_forget_file();
  unlink(path);
}
