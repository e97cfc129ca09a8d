/*
 * world.c - W ranks in one process on one GPU: the world object, its
 * in-process exchange, and the memory and collective backends of its
 * comms. See world.h for the protocol; comm.c makes the comms.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_condattr_setclock */
#include "world.h"
#include "comm.h"
#include "error.h"
#include "handle.h"
#include "log.h"
#include "param.h"

#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WHAT_BYTES 96

/* The slots of one exchange step. */
typedef struct world_round {
  uint64_t step; /* the exchange step these slots hold (0: none yet) */
  int arrived;   /* ranks that have deposited */
  int kind[LOOM_WORLD_MAX_RANKS];
  char what[LOOM_WORLD_MAX_RANKS][WHAT_BYTES];
  uint64_t words[LOOM_WORLD_MAX_RANKS][LOOM_WORLD_WORDS];
} world_round_t;

struct loom_world {
  int size, device, sms, budget, detached;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t steps[LOOM_WORLD_MAX_RANKS];       /* exchange steps each rank has entered */
  char last[LOOM_WORLD_MAX_RANKS][WHAT_BYTES]; /* the step each rank entered last */
  world_round_t round[2];                      /* step s uses round[s & 1] */
  loom_result_t broken;                        /* LOOM_SUCCESS until an exchange failed for every rank */
  char broken_msg[640];
  loom_comm_t live[LOOM_WORLD_MAX_RANKS];      /* each rank's comm, NULL where it has none */
  int comms;
};

/* The share of the device's SMs the world's ranks divide among them. Below
 * 100 the ranks leave SMs unclaimed: grids of different kernels (a rank's
 * GEMM beside another's reduction, a cooperative dispatch beside a combine)
 * do not pack the SMs as tightly as grids of one kernel, and a rank whose
 * waiting blocks do not all fit can stall every rank until a wait expires. */
LOOM_PARAM_INT(WORLD_SM_PERCENT, "50",
               "a world (W ranks on one GPU): the percent of the device's SMs its ranks' grids are sized "
               "to together (each rank: SMs x percent / 100 / W, at least 1); 1-100")

LOOM_PARAM_INT(WORLD_SKEW_US, "0",
               "a world (W ranks on one GPU), for tests: every call of rank r starts after a kernel that waits "
               "r x this many microseconds, so that the ranks' kernels start staggered and a missing wait shows "
               "(0: no delay)")

uint64_t loom__world_skew_ns(int rank) {
  const int64_t us = loom__param_WORLD_SKEW_US();
  return us > 0 && rank > 0 ? (uint64_t)rank * (uint64_t)us * 1000u : 0u;
}

int loom__world_queues_verdict(int size, const char *env, char *why, size_t why_bytes) {
  char *end = NULL;
  const long v = env ? strtol(env, &end, 10) : 0;
  const int queues = env && end != env && *end == '\0' && v >= 1 && v <= 32 ? (int)v : 8;
  const int verdict = queues > 2 * size ? 2 : queues > size ? 1 : 0;
  if (why && why_bytes)
    snprintf(why, why_bytes,
             verdict == 2 ? "%d hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) for %d ranks"
             : verdict == 1
                 ? "%d hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) for %d ranks: a rank waiting for a peer holds one "
                   "queue per stream with work behind the wait, so plans with a side stream (AllGather+GEMM, "
                   "GEMM+ReduceScatter, GEMM+AllReduce) on every rank can hold them all and stall until a timeout; "
                   "set CUDA_DEVICE_MAX_CONNECTIONS=32 before the process's first CUDA call"
                 : "%d hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) for %d ranks: a rank waiting for a peer holds at "
                   "least one queue, and once every queue is held no launch starts, a peer's awaited kernel "
                   "included; set CUDA_DEVICE_MAX_CONNECTIONS=32 (at most 32) before the process's first CUDA call, "
                   "and at most 31 ranks",
             queues, size);
  return verdict;
}

int loom__world_budget(int sms, int size, int percent) {
  if (percent < 1 || percent > 100) percent = 100;
  const int b = size > 0 ? (int)((int64_t)sms * percent / 100 / size) : sms;
  return b > 0 ? b : 1;
}

/* ---- creation -------------------------------------------------------------- */

loom_result_t loom__world_create(int size, int device, int sms, int detached, loom_world_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_world_create: out=NULL");
  *out = NULL;
  if (size < 1 || size > LOOM_WORLD_MAX_RANKS)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_world_create: size=%d must be in [1, %d]", size,
                      LOOM_WORLD_MAX_RANKS);
  if (sms < 1) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_world_create: the device reports %d SMs", sms);
  loom_world_t w = (loom_world_t)calloc(1, sizeof *w);
  if (!w) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_world_create: host allocation of a world failed");
  w->size = size, w->device = device, w->sms = sms, w->detached = detached;
  w->budget = loom__world_budget(sms, size, (int)loom__param_WORLD_SM_PERCENT());
  pthread_condattr_t ca;
  int e = pthread_condattr_init(&ca);
  if (e == 0) e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (e == 0) e = pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (e == 0 && (e = pthread_mutex_init(&w->mu, NULL)) != 0) pthread_cond_destroy(&w->cv);
  if (e != 0) {
    free(w);
    return loom__fail(LOOM_ERR_INTERNAL, "loom_world_create: initialising its mutex and condition failed (%d)", e);
  }
  const loom_result_t r = loom__handle_add(w, LOOM_HANDLE_WORLD);
  if (r != LOOM_SUCCESS) {
    pthread_mutex_destroy(&w->mu), pthread_cond_destroy(&w->cv), free(w);
    return r;
  }
  LOOM_INFO("world of %d ranks on device %d: %d SMs, %d per rank", size, device, sms, w->budget);
  *out = w;
  return LOOM_SUCCESS;
}

typedef CUresult (*world_loading_mode_fn)(CUmoduleLoadingMode *);

/* LOOM_ERR_UNSUPPORTED where CUDA loads kernels lazily in this process. */
static loom_result_t world_check_eager(void) {
  void *p = NULL;
  enum cudaDriverEntryPointQueryResult q;
  LOOM_CUDA(cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &p, 11070, cudaEnableDefault, &q));
  CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
  if (q != cudaDriverEntryPointSuccess || !p || ((world_loading_mode_fn)p)(&mode) != CUDA_SUCCESS)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_world_create: the CUDA driver cannot say how it loads kernels");
  if (mode == CU_MODULE_LAZY_LOADING)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom_world_create: CUDA loads kernels lazily in this process (CUDA_MODULE_LOADING=LAZY, the "
                      "default): a kernel loaded at its first launch waits for every running kernel, another rank's "
                      "kernel waiting for this rank included; set CUDA_MODULE_LOADING=EAGER before the process's "
                      "first CUDA call");
  return LOOM_SUCCESS;
}

loom_result_t loom_world_create(int size, int device, loom_world_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_world_create: out=NULL");
  *out = NULL;
  if (size < 1 || size > LOOM_WORLD_MAX_RANKS)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_world_create: size=%d must be in [1, %d]", size,
                      LOOM_WORLD_MAX_RANKS);
  int n = 0, sms = 0;
  LOOM_CUDA(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_world_create: device=%d: this process sees %d CUDA device(s)",
                      device, n);
  LOOM_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  LOOM_TRY(world_check_eager());
  char why[640];
  const int queues = loom__world_queues_verdict(size, getenv("CUDA_DEVICE_MAX_CONNECTIONS"), why, sizeof why);
  if (queues == 0) return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_world_create: size=%d: %s", size, why);
  if (queues == 1) LOOM_WARN("loom_world_create: %s", why);
  return loom__world_create(size, device, sms, 0, out);
}

loom_result_t loom__world_check(loom_world_t w, const char *fn) {
  if (!w) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: world=NULL", fn);
  if (!loom__handle_alive(w, LOOM_HANDLE_WORLD))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: world=%p is not a live loom world (destroyed already, or never "
                      "created)", fn, (void *)w);
  return LOOM_SUCCESS;
}

loom_result_t loom_world_destroy(loom_world_t w) {
  LOOM_TRY(loom__world_check(w, "loom_world_destroy"));
  pthread_mutex_lock(&w->mu);
  const int comms = w->comms;
  pthread_mutex_unlock(&w->mu);
  if (comms > 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_world_destroy: world=%p still has %d comm(s); destroy them first", (void *)w, comms);
  loom__handle_remove(w, LOOM_HANDLE_WORLD);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
  return LOOM_SUCCESS;
}

int loom__world_device(loom_world_t w) { return w->device; }
int loom__world_sm_budget(loom_world_t w) { return w->budget; }

/* ---- the exchange ------------------------------------------------------------ */

static struct timespec world_deadline(int timeout_ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += timeout_ms / 1000;
  t.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) t.tv_sec += 1, t.tv_nsec -= 1000000000L;
  return t;
}

/* Breaks the world (under its mutex) with `code` and the message, unless
 * it is broken already. */
static void world_break(loom_world_t w, loom_result_t code, const char *msg) {
  if (w->broken != LOOM_SUCCESS) return;
  w->broken = code;
  snprintf(w->broken_msg, sizeof w->broken_msg, "%s", msg);
  pthread_cond_broadcast(&w->cv);
}

/* The timeout of rank `rank` at step s (under the mutex): names the ranks
 * that never came and the step each entered last, and breaks the world. */
static void world_break_timeout(loom_world_t w, int rank, uint64_t s, const char *what, int timeout_ms) {
  char absent[400] = "";
  size_t len = 0;
  for (int q = 0; q < w->size && len + 1 < sizeof absent; ++q)
    if (w->steps[q] < s) {
      const int n = snprintf(absent + len, sizeof absent - len, "%s%d (last in %s)", len ? ", " : "", q,
                             w->steps[q] ? w->last[q] : "nothing yet");
      len += n > 0 ? (size_t)n : 0;
    }
  char msg[640];
  snprintf(msg, sizeof msg,
           "rank %d waited %d ms in the world's in-process exchange at %s (exchange step %llu) for rank(s) %s, which "
           "never came; the world is unusable now: destroy its comms, then the world",
           rank, timeout_ms, what, (unsigned long long)s, absent);
  world_break(w, LOOM_ERR_TIMEOUT, msg);
}

/* Waits (under the mutex) until round rd of step s is complete. */
static loom_result_t world_wait_round(loom_world_t w, world_round_t *rd, int rank, uint64_t s, const char *what,
                                      int timeout_ms) {
  const struct timespec deadline = world_deadline(timeout_ms);
  while (rd->arrived < w->size && w->broken == LOOM_SUCCESS) {
    const int e = pthread_cond_timedwait(&w->cv, &w->mu, &deadline);
    if (e == ETIMEDOUT && rd->arrived < w->size) world_break_timeout(w, rank, s, what, timeout_ms);
  }
  if (rd->arrived == w->size) return LOOM_SUCCESS;
  return loom__fail(w->broken, "%s: %s", what, w->broken_msg);
}

/* Every rank made the same kind of step (read under the mutex). */
static loom_result_t world_check_kinds(loom_world_t w, const world_round_t *rd, const char *what) {
  for (int q = 1; q < w->size; ++q)
    if (rd->kind[q] != rd->kind[0]) {
      char msg[640];
      snprintf(msg, sizeof msg,
               "the ranks made different collective calls at exchange step %llu: rank 0 is in %s, rank %d in %s "
               "(every rank must make the same collective calls in the same order); the world is unusable now",
               (unsigned long long)rd->step, rd->what[0], q, rd->what[q]);
      world_break(w, LOOM_ERR_INVALID_ARGUMENT, msg);
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s", what, msg);
    }
  return LOOM_SUCCESS;
}

/* Deposits rank's words in step s's round (under the mutex). */
static world_round_t *world_deposit(loom_world_t w, int rank, int kind, const char *what, const uint64_t *mine, int n,
                                    uint64_t *s) {
  *s = ++w->steps[rank];
  snprintf(w->last[rank], WHAT_BYTES, "%s", what);
  world_round_t *rd = &w->round[*s & 1];
  if (rd->step != *s) rd->step = *s, rd->arrived = 0; /* the first rank in: the slots of step s - 2 are free */
  rd->kind[rank] = kind;
  snprintf(rd->what[rank], WHAT_BYTES, "%s", what);
  memset(rd->words[rank], 0, sizeof rd->words[rank]);
  if (n > 0) memcpy(rd->words[rank], mine, (size_t)n * sizeof *mine);
  if (++rd->arrived == w->size) pthread_cond_broadcast(&w->cv);
  return rd;
}

loom_result_t loom__world_exchange(loom_world_t w, int rank, int kind, const char *what, int timeout_ms,
                                   const uint64_t *mine, int n, uint64_t *all) {
  if (rank < 0 || rank >= w->size || n < 0 || n > LOOM_WORLD_WORDS || timeout_ms <= 0)
    return loom__fail(LOOM_ERR_INTERNAL, "%s: world exchange with rank=%d of %d, %d words, timeout %d ms", what, rank,
                      w->size, n, timeout_ms);
  pthread_mutex_lock(&w->mu);
  loom_result_t r = LOOM_SUCCESS;
  if (w->broken != LOOM_SUCCESS) {
    r = loom__fail(w->broken, "%s: rank %d: the world is unusable: %s", what, rank, w->broken_msg);
  } else {
    uint64_t s = 0;
    world_round_t *rd = world_deposit(w, rank, kind, what, mine, n, &s);
    r = world_wait_round(w, rd, rank, s, what, timeout_ms);
    if (r == LOOM_SUCCESS) r = world_check_kinds(w, rd, what);
    if (r == LOOM_SUCCESS)
      for (int q = 0; q < w->size; ++q)
        for (int i = 0; i < n; ++i) all[(size_t)q * (size_t)n + (size_t)i] = rd->words[q][i];
  }
  pthread_mutex_unlock(&w->mu);
  return r;
}

/* ---- ranks -------------------------------------------------------------------- */

loom_result_t loom__world_enter(loom_world_t w, int rank, loom_comm_t c) {
  if (rank < 0 || rank >= w->size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_comm_create_in_world: rank=%d is not a rank of a world of %d",
                      rank, w->size);
  pthread_mutex_lock(&w->mu);
  loom_comm_t had = w->live[rank];
  if (!had) w->live[rank] = c, w->comms++;
  pthread_mutex_unlock(&w->mu);
  if (had)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_comm_create_in_world: rank=%d of world %p has a live comm already (%p): one comm per rank",
                      rank, (void *)w, (void *)had);
  c->world = w;
  c->rank = c->lsa_rank = rank;
  c->size = c->lsa_size = w->size;
  c->device = w->device;
  c->detached = w->detached;
  c->mem = &loom__mem_backend_world;
  c->coll = &loom__coll_backend_world;
  return LOOM_SUCCESS;
}

void loom__world_leave(loom_world_t w, int rank) {
  pthread_mutex_lock(&w->mu);
  if (w->live[rank]) w->live[rank] = NULL, w->comms--;
  pthread_mutex_unlock(&w->mu);
}

/* "1, 4, 7": the ranks whose word `i` of all[size][n] is nonzero. */
static int world_ranks_with(const uint64_t *all, int size, int n, int i, char *buf, size_t cap) {
  size_t len = 0;
  int count = 0;
  buf[0] = '\0';
  for (int q = 0; q < size; ++q)
    if (all[(size_t)q * (size_t)n + (size_t)i] && len + 1 < cap) {
      const int k = snprintf(buf + len, cap - len, "%s%d", count ? ", " : "", q);
      len += k > 0 ? (size_t)k : 0;
      ++count;
    }
  return count;
}

loom_result_t loom__world_join(loom_comm_t c, loom_result_t r) {
  char own[768] = "";
  if (r != LOOM_SUCCESS) snprintf(own, sizeof own, "%s", loom_last_error());
  const uint64_t mine = r != LOOM_SUCCESS;
  uint64_t all[LOOM_WORLD_MAX_RANKS];
  const loom_result_t rx = loom__world_exchange(c->world, c->rank, LOOM_WORLD_JOIN, "loom_comm_create_in_world",
                                                c->timeout_ms, &mine, 1, all);
  if (r != LOOM_SUCCESS) return loom__fail(r, "%s", own);
  LOOM_TRY(rx);
  char failed[256];
  if (world_ranks_with(all, c->size, 1, 0, failed, sizeof failed) > 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_comm_create_in_world: rank(s) %s failed to create their comm (their own errors say why)",
                      failed);
  return LOOM_SUCCESS;
}

loom_result_t loom__world_unsupported(loom_comm_t comm, const char *fn, const char *what, const char *why) {
  return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: %s cannot run in a world of %d ranks on one GPU "
                    "(loom_comm_create_in_world): %s", fn, what, comm->size, why);
}

/* ---- the collective backend ---------------------------------------------------- */

static loom_result_t world_max_words(loom_comm_t c, uint64_t *words, int n, const char *what) {
  uint64_t all[LOOM_WORLD_MAX_RANKS * LOOM_WORLD_WORDS];
  LOOM_TRY(loom__world_exchange(c->world, c->rank, LOOM_WORLD_AGREE, what, c->timeout_ms, words, n, all));
  for (int i = 0; i < n; ++i)
    for (int q = 0; q < c->size; ++q) {
      const uint64_t v = all[(size_t)q * (size_t)n + (size_t)i];
      if (v > words[i]) words[i] = v;
    }
  return LOOM_SUCCESS;
}

static loom_result_t world_fence(loom_comm_t c) {
  if (!c->detached) LOOM_CUDA(cudaStreamSynchronize(c->stream));
  return loom__world_exchange(c->world, c->rank, LOOM_WORLD_FENCE, "the fence", c->timeout_ms, NULL, 0, NULL);
}

static loom_result_t world_max_ms(loom_comm_t c, float ms, float *dev_word, cudaStream_t stream, float *out) {
  (void)dev_word, (void)stream;
  uint32_t bits;
  memcpy(&bits, &ms, sizeof bits);
  const uint64_t mine = bits;
  uint64_t all[LOOM_WORLD_MAX_RANKS];
  LOOM_TRY(loom__world_exchange(c->world, c->rank, LOOM_WORLD_MAX_MS, "the tuners' maximum", c->timeout_ms, &mine, 1,
                                all));
  *out = ms;
  for (int q = 0; q < c->size; ++q) {
    const uint32_t b = (uint32_t)all[q];
    float v;
    memcpy(&v, &b, sizeof v);
    if (v > *out) *out = v;
  }
  return LOOM_SUCCESS;
}

const loom_coll_backend_t loom__coll_backend_world = {world_max_words, world_fence, world_max_ms};

/* ---- the memory backend ---------------------------------------------------------- */

/* This rank's copy: device memory, or 256-aligned host memory in a test world. */
static loom_result_t world_alloc_local(loom_comm_t c, size_t bytes, void **p) {
  *p = NULL;
  if (c->detached) {
    *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!*p) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_malloc: bytes=%zu: host allocation failed", bytes);
    return LOOM_SUCCESS;
  }
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) return LOOM_SUCCESS;
  *p = NULL;
  loom__cuda_fail((int)e, "cudaMalloc", __FILE__, __LINE__);
  return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_malloc: bytes=%zu: %s", bytes, loom_last_error());
}

static loom_result_t world_free_local(loom_comm_t c, void *p) {
  if (c->detached) {
    free(p);
    return LOOM_SUCCESS;
  }
  const cudaError_t e = cudaFree(p);
  return e == cudaSuccess ? LOOM_SUCCESS : loom__cuda_fail((int)e, "cudaFree", __FILE__, __LINE__);
}

/* What every rank's words say about an allocation: a rank that failed
 * (word 2), or sizes (word 1) that differ. */
static loom_result_t world_alloc_verdict(loom_comm_t c, size_t bytes, const uint64_t *all) {
  char failed[256];
  if (world_ranks_with(all, c->size, 3, 2, failed, sizeof failed) > 0)
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_malloc: bytes=%zu: rank(s) %s could not allocate theirs (their own "
                      "errors say why)", bytes, failed);
  for (int q = 0; q < c->size; ++q)
    if (all[(size_t)q * 3 + 1] != (uint64_t)bytes)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_malloc: bytes=%zu on rank %d but %llu on rank %d: every rank "
                        "must allocate the same size", bytes, c->rank, (unsigned long long)all[(size_t)q * 3 + 1], q);
  return LOOM_SUCCESS;
}

static loom_result_t world_alloc(loom_comm_t c, size_t bytes, loom_alloc_t *a) {
  void *p = NULL;
  const loom_result_t rl = world_alloc_local(c, bytes, &p);
  char own[768] = "";
  if (rl != LOOM_SUCCESS) snprintf(own, sizeof own, "%s", loom_last_error());
  const uint64_t mine[3] = {(uint64_t)(uintptr_t)p, (uint64_t)bytes, rl != LOOM_SUCCESS};
  uint64_t all[LOOM_WORLD_MAX_RANKS * 3];
  loom_result_t r =
      loom__world_exchange(c->world, c->rank, LOOM_WORLD_MALLOC, "loom_malloc", c->timeout_ms, mine, 3, all);
  if (rl != LOOM_SUCCESS) return loom__fail(rl, "%s", own);
  if (r == LOOM_SUCCESS) r = world_alloc_verdict(c, bytes, all);
  if (r != LOOM_SUCCESS) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", loom_last_error());
    (void)world_free_local(c, p);
    return loom__fail(r, "%s", msg);
  }
  for (int q = 0; q < c->size; ++q) a->peer_ptrs[q] = (void *)(uintptr_t)all[(size_t)q * 3];
  a->ptr = p;
  a->win = NULL;
  return LOOM_SUCCESS;
}

/* Every rank reaches the free before any frees its copy (as NCCL's window
 * deregistration); a world that is broken frees without waiting. */
static loom_result_t world_release(loom_comm_t c, loom_alloc_t *a) {
  const uint64_t mine = (uint64_t)(uintptr_t)a->ptr;
  uint64_t all[LOOM_WORLD_MAX_RANKS];
  if (loom__world_exchange(c->world, c->rank, LOOM_WORLD_FREE, "loom_free", c->timeout_ms, &mine, 1, all) !=
      LOOM_SUCCESS)
    LOOM_WARN("loom_free (rank %d): freeing %zu bytes at %p without its peers: %s", c->rank, a->bytes, a->ptr,
              loom_last_error());
  return world_free_local(c, a->ptr);
}

const loom_mem_backend_t loom__mem_backend_world = {world_alloc, world_release};
