/*
 * launch.c - see launch.h.
 */
#define _GNU_SOURCE
#include "support/tool_param.h"
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

typedef struct {
  volatile int id_ready; /* 1: rank 0 wrote id; -1: rank 0 failed */
  ncclUniqueId id;
} loom_launch_shared_t;

static double loom__now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* f() evaluated in a short-lived child (the parent stays CUDA-free); 0 if
 * the child could not tell. */
static int loom__in_child(int (*f)(void)) {
  int fd[2];
  if (pipe(fd) != 0) return 0;
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    close(fd[0]);
    const int n = f();
    if (write(fd[1], &n, sizeof n) != (ssize_t)sizeof n) _exit(1);
    _exit(0);
  }
  close(fd[1]);
  int n = 0;
  if (read(fd[0], &n, sizeof n) != (ssize_t)sizeof n) n = 0;
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  return n;
}

static int loom__count(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

static int loom__cc(void) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess)
    return 0;
  return major * 10 + minor;
}

int loom_launch_gpu_count(void) { return loom__in_child(loom__count); }
int loom_launch_gpu_cc(void) { return loom__in_child(loom__cc); }

int loom_launch_under_mpi(int *rank, int *size) {
  static const char *pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   {"PMI_RANK", "PMI_SIZE"},
                                   {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
    const char *r = getenv(pairs[i][0]), *s = getenv(pairs[i][1]);
    if (r && s) {
      *rank = atoi(r);
      *size = atoi(s);
      return 1;
    }
  }
  return 0;
}

/* One rank: device, NCCL comm, fn, teardown. Returns fn's result (or 1). */
static int loom__run_rank(int rank, int size, int device, const ncclUniqueId *id, loom_rank_fn fn, void *arg) {
  loom_rank_ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.rank = rank;
  ctx.size = size;
  ctx.device = device;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaSetDevice(%d): %s\n", rank, device, cudaGetErrorString(e));
    return 1;
  }
  ncclResult_t n = ncclCommInitRank(&ctx.nccl, size, *id, rank);
  if (n != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", rank, ncclGetErrorString(n));
    return 1;
  }
  int rc = fn(&ctx, arg);
  ncclCommFinalize(ctx.nccl);
  ncclCommDestroy(ctx.nccl);
  return rc;
}

int loom_launch_share_id(int rank, const char *path, ncclUniqueId *id, double timeout_s) {
  if (rank == 0) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return 1;
    int bad = fwrite(id, sizeof *id, 1, f) != 1;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) return 1; /* readers never see a partial id */
    return 0;
  }
  double deadline = loom__now_s() + timeout_s;
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got == 1) return 0;
    }
    if (loom__now_s() > deadline) return 1;
    usleep(10000);
  }
}

static int loom__launch_mpi(int rank, int size, int want, int timeout_s, loom_rank_fn fn, void *arg) {
  if (want != size) {
    fprintf(stderr, "launch: the test wants %d ranks but mpirun started %d\n", want, size);
    return 1;
  }
  alarm((unsigned)timeout_s); /* a hung rank dies and mpirun ends the job */
  /* One file per job and per launch: every rank makes the same sequence of
   * launches, so the counter agrees; the job id keeps jobs apart. */
  static int launches;
  const char *job = loom_tool_param("LAUNCH_JOB");
  if (!job) job = getenv("PMIX_NAMESPACE");
  if (!job) job = getenv("OMPI_MCA_ess_base_jobid");
  if (!job) job = getenv("SLURM_JOB_ID");
  if (!job) {
    fprintf(stderr, "launch: under mpirun but no job id (PMIX_NAMESPACE, SLURM_JOB_ID); set LOOM_LAUNCH_JOB "
                    "to the same value on every rank\n");
    return 1;
  }
  char path[512];
  snprintf(path, sizeof path, "/tmp/loom-ncclid-%s-%d", job, launches++);
  for (char *c = path + 5; *c; ++c)
    if (*c == '/') *c = '_';
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (loom_launch_share_id(rank, path, &id, (double)timeout_s) != 0) {
    fprintf(stderr, "rank %d: no NCCL id from rank 0 at %s\n", rank, path);
    return 1;
  }
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!lr) lr = getenv("SLURM_LOCALID");
  int local = lr ? atoi(lr) : rank;
  int rc = loom__run_rank(rank, size, ndev ? local % ndev : 0, &id, fn, arg);
  if (rank == 0) unlink(path); /* every rank read it: the comm was created */
  return rc;
}

int loom_launch(int size, int timeout_s, loom_rank_fn fn, void *arg) {
  int mrank, msize;
  if (loom_launch_under_mpi(&mrank, &msize)) return loom__launch_mpi(mrank, msize, size, timeout_s, fn, arg);
  if (size < 1) return 1;
  loom_launch_shared_t *sh = (loom_launch_shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                                                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  memset((void *)sh, 0, sizeof *sh);
  fflush(stdout);
  fflush(stderr);
  pid_t *pids = (pid_t *)calloc((size_t)size, sizeof(pid_t));
  if (!pids) {
    fprintf(stderr, "launch: host allocation of %d process ids failed\n", size);
    munmap((void *)sh, sizeof *sh);
    return 1;
  }
  for (int r = 0; r < size; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      for (int q = 0; q < r; ++q) kill(pids[q], SIGKILL);
      free(pids);
      munmap((void *)sh, sizeof *sh);
      return 1;
    }
    if (pid == 0) {
      setpgid(0, 0);
      int rc = 1;
      if (r == 0) {
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) == ncclSuccess) {
          sh->id = id;
          __atomic_store_n(&sh->id_ready, 1, __ATOMIC_RELEASE);
        } else {
          __atomic_store_n(&sh->id_ready, -1, __ATOMIC_RELEASE);
          _exit(1);
        }
      } else {
        while (__atomic_load_n(&sh->id_ready, __ATOMIC_ACQUIRE) == 0) usleep(1000);
        if (sh->id_ready < 0) _exit(1);
      }
      ncclUniqueId id = sh->id;
      rc = loom__run_rank(r, size, r, &id, fn, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(rc == 0 ? 0 : 1);
    }
    pids[r] = pid;
  }
  double deadline = loom__now_s() + timeout_s;
  int remaining = size, failed = 0;
  while (remaining > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      int r = 0;
      while (r < size && pids[r] != pid) ++r;
      if (r == size) continue;
      pids[r] = 0;
      remaining--;
      int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (bad) {
        if (WIFSIGNALED(st)) fprintf(stderr, "launch: rank %d died of signal %d\n", r, WTERMSIG(st));
        else fprintf(stderr, "launch: rank %d failed (exit %d)\n", r, WEXITSTATUS(st));
        if (!failed) /* the others may now wait for it forever: give them a moment, then end them */
          deadline = loom__now_s() + 5.0 < deadline ? loom__now_s() + 5.0 : deadline;
        failed = 1;
      }
      continue;
    }
    if (loom__now_s() > deadline) {
      for (int r = 0; r < size; ++r)
        if (pids[r]) {
          fprintf(stderr, "launch: rank %d %s; killing it\n", r,
                  failed ? "still running after another rank failed" : "exceeded the time limit");
          kill(-pids[r], SIGKILL);
          kill(pids[r], SIGKILL);
        }
      while (remaining > 0 && waitpid(-1, &st, 0) > 0) remaining--;
      failed = 1;
      break;
    }
    usleep(2000);
  }
  free(pids);
  munmap((void *)sh, sizeof *sh);
  return failed;
}

/* ---- world mode: W threads of this process on one GPU ----------------------- */

typedef struct loom_launch_thread {
  loom_rank_ctx_t ctx;
  loom_rank_fn fn;
  void *arg;
  int rc, done; /* done: 1 once fn returned (atomic) */
} loom_launch_thread_t;

/* What the ranks of the running world launch share (one at a time). */
static struct {
  pthread_barrier_t bar;
  uint64_t word[2][64]; /* loom_launch_same_u64: each rank's h and ~h */
} loom__world_shared;

static void *loom__world_rank(void *p) {
  loom_launch_thread_t *t = (loom_launch_thread_t *)p;
  const cudaError_t e = cudaSetDevice(t->ctx.device);
  if (e != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaSetDevice(%d): %s\n", t->ctx.rank, t->ctx.device, cudaGetErrorString(e));
    t->rc = 1;
  } else {
    t->rc = t->fn(&t->ctx, t->arg);
  }
  fflush(stdout);
  __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Waits for the ranks' threads until the deadline; past it, names the
 * ranks still running and ends the process. */
static void loom__world_wait(loom_launch_thread_t *t, int size, int timeout_s) {
  const double deadline = loom__now_s() + timeout_s;
  for (;;) {
    int running = 0;
    for (int r = 0; r < size; ++r) running += !__atomic_load_n(&t[r].done, __ATOMIC_ACQUIRE);
    if (!running) return;
    if (loom__now_s() > deadline) {
      for (int r = 0; r < size; ++r)
        if (!__atomic_load_n(&t[r].done, __ATOMIC_ACQUIRE))
          fprintf(stderr, "launch: world rank %d exceeded the time limit of %d s; ending the process\n", r, timeout_s);
      fflush(stdout);
      fflush(stderr);
      _exit(1);
    }
    usleep(2000);
  }
}

/* Starts the ranks' threads and waits for them; 0 when every rank
 * returned 0. */
static int loom__world_run(loom_world_t w, int size, int timeout_s, loom_rank_fn fn, void *arg) {
  loom_launch_thread_t *t = (loom_launch_thread_t *)calloc((size_t)size, sizeof *t);
  pthread_t *th = (pthread_t *)calloc((size_t)size, sizeof *th);
  int failed = !t || !th, started = 0;
  for (int r = 0; r < size && !failed; ++r, ++started) {
    t[r].ctx.rank = r, t[r].ctx.size = size, t[r].ctx.device = 0, t[r].ctx.world = w;
    t[r].fn = fn, t[r].arg = arg;
    if (pthread_create(&th[r], NULL, loom__world_rank, &t[r]) != 0) {
      fprintf(stderr, "launch: starting world rank %d's thread failed\n", r);
      failed = 1;
      break;
    }
  }
  /* (ranks that started wait for the others in the world's exchange until their timeout) */
  if (failed && t)
    for (int r = started; r < size; ++r) t[r].done = 1;
  if (t && th) loom__world_wait(t, size, timeout_s);
  for (int r = 0; r < started; ++r) {
    pthread_join(th[r], NULL);
    if (t[r].rc != 0) {
      fprintf(stderr, "launch: world rank %d failed (%d)\n", r, t[r].rc);
      failed = 1;
    }
  }
  free(t), free(th);
  return failed;
}

/* LOOM_TEST_POISON_DEVICE=B (a byte, e.g. 255): most of the device's free
 * memory is allocated, filled with B and freed before the ranks start, so
 * that the allocations after it are likely to hold B rather than the zeros
 * a process's first allocations get: a read of memory that nothing wrote
 * shows. Nothing when unset. */
static void loom__poison_free_memory(void) {
  const char *v = loom_tool_param("TEST_POISON_DEVICE");
  if (!v || !*v) return;
  const int byte = atoi(v) & 0xff;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return;
  enum { CHUNK = 1 << 30, MAXCH = 256 };
  void *p[MAXCH];
  int n = 0;
  for (size_t got = 0; n < MAXCH && got + 4ull * CHUNK < free_b; got += CHUNK) {
    if (cudaMalloc(&p[n], CHUNK) != cudaSuccess) break;
    if (cudaMemset(p[n++], byte, CHUNK) != cudaSuccess) break; /* (p[n - 1] is still freed below) */
  }
  (void)cudaDeviceSynchronize();
  for (int i = 0; i < n; ++i) (void)cudaFree(p[i]);
  (void)cudaGetLastError();
  fprintf(stderr, "launch: %d GiB of device memory filled with %d and freed (LOOM_TEST_POISON_DEVICE)\n", n, byte);
}

int loom_launch_world(int size, int timeout_s, loom_rank_fn fn, void *arg) {
  if (size < 1 || size > 64) {
    fprintf(stderr, "launch: a world of %d ranks: 1..64\n", size);
    return 1;
  }
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1); /* the most hardware queues (loom_world_create says why) */
  fflush(stdout);
  loom_world_t w = NULL;
  if (loom_world_create(size, 0, &w) != LOOM_SUCCESS) {
    fprintf(stderr, "launch: loom_world_create(%d, 0): %s\n", size, loom_last_error());
    return 1;
  }
  loom__poison_free_memory();
  if (pthread_barrier_init(&loom__world_shared.bar, NULL, (unsigned)size) != 0) {
    (void)loom_world_destroy(w);
    return 1;
  }
  int failed = loom__world_run(w, size, timeout_s, fn, arg);
  pthread_barrier_destroy(&loom__world_shared.bar);
  if (loom_world_destroy(w) != LOOM_SUCCESS) {
    fprintf(stderr, "launch: loom_world_destroy: %s\n", loom_last_error());
    failed = 1;
  }
  return failed;
}

loom_result_t loom_launch_comm_create(const loom_rank_ctx_t *ctx, const loom_config_t *cfg, loom_comm_t *out) {
  if (ctx->world) return loom_comm_create_in_world(ctx->world, ctx->rank, cfg, out);
  return loom_comm_create(ctx->nccl, cfg, out);
}

/* max over ranks of {h, ~h} (NCCL: one all-reduce on a stream of its own). */
static int loom__max_pair(const loom_rank_ctx_t *ctx, uint64_t v[2]) {
  if (ctx->world) {
    loom__world_shared.word[0][ctx->rank] = v[0], loom__world_shared.word[1][ctx->rank] = v[1];
    pthread_barrier_wait(&loom__world_shared.bar);
    for (int q = 0; q < ctx->size; ++q)
      for (int i = 0; i < 2; ++i)
        if (loom__world_shared.word[i][q] > v[i]) v[i] = loom__world_shared.word[i][q];
    pthread_barrier_wait(&loom__world_shared.bar); /* every rank has read before the slots are reused */
    return 1;
  }
  uint64_t *dev = NULL;
  cudaStream_t s = NULL;
  int ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
           cudaMalloc((void **)&dev, 2 * sizeof *dev) == cudaSuccess &&
           cudaMemcpyAsync(dev, v, 2 * sizeof *v, cudaMemcpyHostToDevice, s) == cudaSuccess &&
           ncclAllReduce(dev, dev, 2, ncclUint64, ncclMax, ctx->nccl, s) == ncclSuccess &&
           cudaMemcpyAsync(v, dev, 2 * sizeof *v, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
           cudaStreamSynchronize(s) == cudaSuccess;
  if (dev) cudaFree(dev);
  if (s) cudaStreamDestroy(s);
  return ok;
}

int loom_launch_world_sync(const loom_rank_ctx_t *ctx) {
  if (!ctx->world) return 1;
  /* (the ranks' own streams are non-blocking: the legacy stream holds only their uploads and fills) */
  return cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess && loom_launch_same_u64(ctx, 1);
}

int loom_launch_graph_ready(const loom_rank_ctx_t *ctx, cudaGraph_t graph, cudaGraphExec_t *exec,
                            cudaStream_t stream) {
  cudaError_t e = cudaGraphInstantiate(exec, graph, 0);
  const char *step = "cudaGraphInstantiate";
  if (e == cudaSuccess) e = cudaGraphUpload(*exec, stream), step = "cudaGraphUpload";
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream), step = "cudaStreamSynchronize";
  if (e != cudaSuccess) {
    fprintf(stderr, "launch: rank %d: %s: %s\n", ctx->rank, step, cudaGetErrorString(e));
    return 1;
  }
  if (!loom_launch_world_sync(ctx)) {
    fprintf(stderr, "launch: rank %d: the world's host barrier after instantiating a graph failed\n", ctx->rank);
    return 1;
  }
  return 0;
}

cudaError_t loom_launch_download(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess && bytes > 0) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  return e;
}

static double launch_ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double launch_t0;
static void launch_t0_set(void) { launch_t0 = launch_ms_now(); }

void loom_launch_step_time(int rank, int step, const char *stage) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (!*loom_tool_param("TEST_STEP_TIMES")) return;
  pthread_once(&once, launch_t0_set);
  fprintf(stderr, "  [times] rank %d step %d %-16s %10.1f ms\n", rank, step, stage, launch_ms_now() - launch_t0);
}

int loom_launch_same_u64(const loom_rank_ctx_t *ctx, uint64_t h) {
  uint64_t v[2] = {h, ~h};
  /* max(h) == h and max(~h) == ~h (min(h) == h): every rank's h is h */
  return loom__max_pair(ctx, v) && v[0] == h && v[1] == ~h;
}
