/*
 * bench.c - the loom-bench harness (see bench.h): suite registry, common
 * options, CUDA-event timing (single GPU and max over ranks), input rotation,
 * random fills, the table and the JSON writer.
 *
 * Timing: warm-up repetitions, then `reps` repetitions enqueued back to back
 * with an event between consecutive ones (reps + 1 events), one
 * synchronisation at the end; repetition i's time is event i to event i+1.
 * The median is the figure reported; min, max and mean are kept. Multi-rank:
 * every rank times its own stream, then an NCCL max all-reduce of the
 * per-repetition times gives, for each repetition, the slowest rank's time.
 *
 * Host tool code: it may exit, but the harness functions return errors and
 * leave exiting to the suites.
 */
#define _GNU_SOURCE
#include "support/tool_param.h"
#include "bench.h"
#include "testing/bench_api.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ref/ref.h"

/* ---- registry ------------------------------------------------------------- */

#define LOOM_BENCH_MAX_SUITES 64
static struct { const char *name, *help; loom_bench_fn fn; } bench_suites[LOOM_BENCH_MAX_SUITES];
static int bench_nsuites, bench_suites_sorted;

void loom_bench_register(const char *name, const char *help, loom_bench_fn fn) {
  if (bench_nsuites == LOOM_BENCH_MAX_SUITES) {
    fprintf(stderr, "loom-bench: too many suites (at most %d); raise LOOM_BENCH_MAX_SUITES\n",
            LOOM_BENCH_MAX_SUITES);
    exit(2);
  }
  bench_suites[bench_nsuites].name = name;
  bench_suites[bench_nsuites].help = help;
  bench_suites[bench_nsuites].fn = fn;
  bench_nsuites++;
  bench_suites_sorted = 0;
}

static int bench_suite_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void bench_sort_suites(void) {
  if (bench_suites_sorted) return;
  qsort(bench_suites, (size_t)bench_nsuites, sizeof bench_suites[0], bench_suite_cmp);
  bench_suites_sorted = 1;
}

int loom_bench_count(void) { return bench_nsuites; }
const char *loom_bench_name(int i) { bench_sort_suites(); return bench_suites[i].name; }
const char *loom_bench_help(int i) { bench_sort_suites(); return bench_suites[i].help; }
loom_bench_fn loom_bench_suite(int i) { bench_sort_suites(); return bench_suites[i].fn; }

int loom_bench_find(const char *name) {
  bench_sort_suites();
  for (int i = 0; i < bench_nsuites; ++i)
    if (!strcmp(bench_suites[i].name, name)) return i;
  return -1;
}

/* ---- options -------------------------------------------------------------- */

void loom_bench_opts_default(loom_bench_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->warmup = 5;
  o->reps = 20;
  o->timeout_s = 1800;
  o->json = 1;
  o->check = 1;
}

static int bench_opt_int(const char *opt, const char *text, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = text ? strtol(text, &end, 10) : 0;
  if (!text || errno || end == text || *end || v < lo || v > hi) {
    fprintf(stderr, "loom-bench: %s needs an integer in [%d, %d], got \"%s\"\n", opt, lo, hi,
            text ? text : "(nothing)");
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* --results DIR of this process (NULL: not given). */
static const char *bench_results_opt;

int loom_bench_parse_common(loom_bench_opts_t *o, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(a, "--quick")) {
    o->quick = 1;
    if (!o->warmup_set) o->warmup = 2;
    if (!o->reps_set) o->reps = 5;
    return 1;
  }
  if (!strcmp(a, "--no-json")) return o->json = 0, 1;
  if (!strcmp(a, "--no-check")) return o->check = 0, 1;
  if (!strcmp(a, "--results")) {
    if (!val || !*val) {
      fprintf(stderr, "loom-bench: --results needs a directory\n");
      return -1;
    }
    bench_results_opt = val;
    *i += 1;
    return 1;
  }
  struct { const char *name; int lo, hi; int *dst, *set; } ints[] = {
      {"--warmup", 0, 100000, &o->warmup, &o->warmup_set},
      {"--reps", 1, 100000, &o->reps, &o->reps_set},
      {"--world", 1, 4096, &o->world, NULL},
      {"--timeout", 1, 7 * 24 * 3600, &o->timeout_s, NULL}};
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; ++k)
    if (!strcmp(a, ints[k].name)) {
      if (bench_opt_int(a, val, ints[k].lo, ints[k].hi, ints[k].dst)) return -1;
      if (ints[k].set) *ints[k].set = 1;
      *i += 1;
      return 1;
    }
  return 0;
}

void loom_bench_usage_common(FILE *f) {
  fprintf(f,
          "common options:\n"
          "  --quick        fewer sizes and repetitions (warm-up 2, reps 5)\n"
          "  --warmup N     untimed repetitions before timing (default 5)\n"
          "  --reps N       timed repetitions; the median is reported (default 20)\n"
          "  --world N      ranks (one process per GPU; default: every GPU present)\n"
          "  --timeout S    kill every rank after S seconds (default 1800)\n"
          "  --no-check     skip the result checks (#wrong shows \"-\")\n"
          "  --results DIR  where the JSON (this run's and its PyTorch peers') goes (default\n"
          "                 $LOOM_BENCH_RESULTS_DIR, else ./loom-results, created when needed)\n"
          "  --no-json      print the table only (the peers still write theirs)\n");
}

int loom_bench_parse(loom_bench_opts_t *o, int argc, char **argv, loom_bench_opt_fn own, void *ctx) {
  loom_bench_opts_default(o);
  const char *suite = argc > 0 ? argv[0] : "suite";
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: loom-bench %s [options]\n", suite);
      loom_bench_usage_common(stdout);
      if (own) {
        char help[] = "--help";
        char *hv[2] = {help, NULL};
        int j = 0;
        printf("options of %s:\n", suite);
        own(ctx, 1, hv, &j);
      }
      return 0;
    }
    int r = loom_bench_parse_common(o, argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    r = own ? own(ctx, argc, argv, &i) : 0;
    if (r < 0) return 2;
    if (r == 0) {
      fprintf(stderr, "loom-bench %s: unknown option \"%s\" (try loom-bench %s --help)\n", suite, argv[i],
              suite);
      return 2;
    }
  }
  return LOOM_BENCH_RUN;
}

/* ---- launching ------------------------------------------------------------ */

int loom_bench_world(const loom_bench_opts_t *o, int want) {
  int mrank = 0, msize = 0;
  if (loom_launch_under_mpi(&mrank, &msize)) {
    int w = o->world ? o->world : msize;
    if (w != msize) {
      if (mrank == 0)
        fprintf(stderr, "loom-bench: --world %d but mpirun started %d ranks\n", w, msize);
      return 0;
    }
    return w;
  }
  int gpus = loom_launch_gpu_count();
  if (gpus < 1) {
    fprintf(stderr, "loom-bench: no CUDA GPU found; benchmarks need at least one NVIDIA GPU (Hopper or Ampere)\n");
    return 0;
  }
  int w = o->world ? o->world : (want > 0 ? want : gpus);
  if (w > gpus) {
    fprintf(stderr, "loom-bench: %d ranks need %d GPUs (one process per GPU); %d present\n", w, w, gpus);
    return 0;
  }
  return w;
}

void loom_bench_env_defaults(void) {
  static int done;
  if (done) return;
  done = 1;
  if (!getenv("NCCL_NVLS_ENABLE")) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    fprintf(stderr, "loom-bench: NCCL_NVLS_ENABLE is unset: setting it to 0 for this run (loom never uses NVLink "
                    "multicast; set it yourself to choose)\n");
  }
}

int loom_bench_launch(const loom_bench_opts_t *o, int world, loom_rank_fn fn, void *arg) {
  loom_bench_env_defaults();
  fflush(stdout);
  fflush(stderr);
  int rc = loom_launch(world, o->timeout_s, fn, arg);
  fflush(stdout);
  return rc;
}

/* ---- timing --------------------------------------------------------------- */

static int bench_dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void bench_stats(const double *us, int n, loom_bench_time_t *out) {
  double *s = (double *)malloc((size_t)n * sizeof *s);
  double sum = 0.0;
  memset(out, 0, sizeof *out);
  out->reps = n;
  if (!s || n < 1) {
    free(s);
    out->median_us = out->min_us = out->max_us = out->mean_us = NAN;
    return;
  }
  for (int i = 0; i < n; ++i) s[i] = us[i], sum += us[i];
  qsort(s, (size_t)n, sizeof *s, bench_dcmp);
  out->min_us = s[0];
  out->max_us = s[n - 1];
  out->median_us = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  out->mean_us = sum / n;
  free(s);
}

/* bench_stats of the device times, and the median host issue time. */
static void bench_stats_with_host(const double *us, const double *host, int n, loom_bench_time_t *out) {
  loom_bench_time_t h;
  bench_stats(host, n, &h);
  bench_stats(us, n, out);
  out->host_us = h.median_us;
}

/* Per-repetition times in us: us[j * reps + i] is repetition i of ops[j].
 * Each repetition runs ops 0 .. nops-1 back to back, one event between
 * consecutive runs; `iter` counts runs over all ops (input rotation). */
/* Times reps x nops ops, each repetition running every op once in order.
 * nccl == NULL: back to back on the stream, an event between ops. nccl set
 * (several ranks): a barrier (a 1-element all-reduce, untimed) before each
 * timed op and a start and a stop event around it, so that no op's time
 * holds the wait for a rank that is behind (a local GEMM that ran longer
 * on one GPU would otherwise show up in the next collective op's time). */
static loom_result_t bench_barrier_enqueue(ncclComm_t nccl, cudaStream_t stream);
static double bench_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* us[j reps + i]: device time of rep i of op j; host[j reps + i]: the host
 * time its call took to return (to issue the op). The GPU is held before
 * each timed op (before its barrier with several ranks: bench.h,
 * loom_bench_time_ranks) for the first BENCH_HOLD_OPS ops of a side-by-side
 * set, and each op sits between its own two events, so an op shorter than
 * its issue time is timed on the GPU, not as the host's issue time (one
 * process timed eagerly back to back did that before). */
#define BENCH_HOLD_OPS 64
static loom_result_t bench_time_raw(ncclComm_t nccl, cudaStream_t stream, int warmup, int reps, int nops,
                                     loom_bench_op_fn *ops, void **args, double *us, double *host) {
  loom_result_t r = LOOM_SUCCESS;
  const int per = 2; /* events per timed op: its start and its end */
  const int nev = reps * nops * per + 1;
  cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)nev, sizeof *ev);
  if (!ev) return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "loom_bench_time: host allocation failed");
  int made = 0;
  for (; made < nev; ++made) {
    cudaError_t e = cudaEventCreate(&ev[made]);
    if (e != cudaSuccess) {
      r = loom_bench_cuda_fail((int)e, "cudaEventCreate", __FILE__, __LINE__);
      goto out;
    }
  }
  int iter = 0;
  /* each op's hold (before its barrier with several ranks), from its host time in the warm-up */
  double hold[BENCH_HOLD_OPS] = {0};
  for (int i = 0; i < warmup && r == LOOM_SUCCESS; ++i)
    for (int j = 0; j < nops && r == LOOM_SUCCESS; ++j) {
      const double h0 = bench_now_us();
      r = ops[j](args[j], iter++, stream);
      if (j < BENCH_HOLD_OPS) {
        const double h = bench_now_us() - h0;
        if (h > hold[j]) hold[j] = h; /* the warm-up's slowest issue */
      }
    }
  if (r != LOOM_SUCCESS) goto out;
  const int holding = strcmp(loom_tool_param("BENCH_HOLD"), "0") != 0;
  for (int j = 0; j < nops && j < BENCH_HOLD_OPS; ++j) {
    hold[j] = holding ? 1.5 * hold[j] + 10.0 : 0.0;
    if (hold[j] > 2000.0) hold[j] = 2000.0;
  }
  for (int i = 0; i < reps * nops; ++i) {
    const int j = i % nops;
    if (warmup > 0 && j < BENCH_HOLD_OPS) r = loom_bench_hold(stream, hold[j]);
    if (r == LOOM_SUCCESS && nccl) r = bench_barrier_enqueue(nccl, stream);
    if (r != LOOM_SUCCESS) goto out;
    cudaError_t e = cudaEventRecord(ev[i * per], stream);
    if (e != cudaSuccess) {
      r = loom_bench_cuda_fail((int)e, "cudaEventRecord", __FILE__, __LINE__);
      goto out;
    }
    const double h0 = bench_now_us();
    r = ops[i % nops](args[i % nops], iter++, stream);
    host[(i % nops) * reps + i / nops] = bench_now_us() - h0;
    if (r != LOOM_SUCCESS) goto out;
    if ((e = cudaEventRecord(ev[i * per + 1], stream)) != cudaSuccess) {
      r = loom_bench_cuda_fail((int)e, "cudaEventRecord", __FILE__, __LINE__);
      goto out;
    }
  }
  {
    cudaError_t e = cudaEventRecord(ev[nev - 1], stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(ev[nev - 1]);
    if (e != cudaSuccess) {
      r = loom_bench_cuda_fail((int)e, "cudaEventSynchronize (after the timed repetitions)", __FILE__, __LINE__);
      goto out;
    }
  }
  for (int i = 0; i < reps * nops; ++i) {
    float ms = 0.0f;
    cudaError_t e = cudaEventElapsedTime(&ms, ev[i * per], ev[i * per + 1]);
    if (e != cudaSuccess) {
      r = loom_bench_cuda_fail((int)e, "cudaEventElapsedTime", __FILE__, __LINE__);
      goto out;
    }
    us[(i % nops) * reps + i / nops] = 1e3 * (double)ms;
  }
out:
  for (int i = 0; i < made; ++i) cudaEventDestroy(ev[i]);
  free(ev);
  return r;
}

loom_result_t loom_bench_time_side_by_side(cudaStream_t stream, int warmup, int reps, int nops,
                                           loom_bench_op_fn *ops, void **args, loom_bench_time_t *out) {
  if (reps < 1 || warmup < 0 || nops < 1 || !ops || !args || !out)
    return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "loom_bench_time: reps=%d warmup=%d nops=%d ops=%p out=%p", reps,
                           warmup, nops, (void *)ops, (void *)out);
  for (int j = 0; j < nops; ++j)
    if (!ops[j]) return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "loom_bench_time: ops[%d]=NULL", j);
  const size_t nt = (size_t)reps * (size_t)nops;
  double *us = (double *)calloc(2 * nt, sizeof *us), *host = us + nt; /* device times, then host times */
  if (!us) return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "loom_bench_time: host allocation failed");
  loom_result_t r = bench_time_raw(NULL, stream, warmup, reps, nops, ops, args, us, host);
  if (r == LOOM_SUCCESS)
    for (int j = 0; j < nops; ++j) bench_stats_with_host(us + (size_t)j * reps, host + (size_t)j * reps, reps, &out[j]);
  free(us);
  return r;
}

loom_result_t loom_bench_time(cudaStream_t stream, int warmup, int reps, loom_bench_op_fn op, void *arg,
                              loom_bench_time_t *out) {
  return loom_bench_time_side_by_side(stream, warmup, reps, 1, &op, &arg, out);
}

/* A small device scratch buffer of this process (one device per rank). */
static void *bench_scratch;
static loom_result_t bench_get_scratch(void **p) {
  if (!bench_scratch) LOOM_BENCH_CUDA(cudaMalloc(&bench_scratch, 256));
  *p = bench_scratch;
  return LOOM_SUCCESS;
}

/* Waits for `stream` without spinning a core. */
static loom_result_t bench_poll_stream(cudaStream_t stream, const char *what) {
  for (;;) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return LOOM_SUCCESS;
    if (e != cudaErrorNotReady) return loom_bench_cuda_fail((int)e, what, __FILE__, __LINE__);
    usleep(200);
  }
}

/* A barrier on the stream (not waited for by the host). */
static loom_result_t bench_barrier_enqueue(ncclComm_t nccl, cudaStream_t stream) {
  void *s = NULL;
  LOOM_BENCH_TRY(bench_get_scratch(&s));
  LOOM_BENCH_NCCL(ncclAllReduce(s, s, 1, ncclFloat32, ncclSum, nccl, stream));
  return LOOM_SUCCESS;
}

loom_result_t loom_bench_barrier(ncclComm_t nccl, cudaStream_t stream) {
  LOOM_BENCH_TRY(bench_barrier_enqueue(nccl, stream));
  return bench_poll_stream(stream, "cudaStreamQuery (loom_bench_barrier)");
}

loom_result_t loom_bench_reduce_ranks(ncclComm_t nccl, cudaStream_t stream, int64_t *value, ncclRedOp_t op) {
  void *s = NULL;
  LOOM_BENCH_TRY(bench_get_scratch(&s));
  LOOM_BENCH_CUDA(cudaMemcpyAsync(s, value, sizeof *value, cudaMemcpyHostToDevice, stream));
  LOOM_BENCH_NCCL(ncclAllReduce(s, s, 1, ncclInt64, op, nccl, stream));
  LOOM_BENCH_CUDA(cudaMemcpyAsync(value, s, sizeof *value, cudaMemcpyDeviceToHost, stream));
  return bench_poll_stream(stream, "cudaStreamQuery (loom_bench_reduce_ranks)");
}

loom_result_t loom_bench_sum_ranks(ncclComm_t nccl, cudaStream_t stream, int64_t *value) {
  return loom_bench_reduce_ranks(nccl, stream, value, ncclSum);
}

loom_result_t loom_bench_time_ranks_side_by_side(ncclComm_t nccl, cudaStream_t stream, int warmup, int reps, int nops,
                                                 loom_bench_op_fn *ops, void **args, loom_bench_time_t *out) {
  if (reps < 1 || warmup < 0 || nops < 1 || !ops || !args || !out)
    return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "loom_bench_time_ranks: reps=%d warmup=%d nops=%d", reps, warmup,
                           nops);
  for (int j = 0; j < nops; ++j)
    if (!ops[j]) return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "loom_bench_time_ranks: ops[%d]=NULL", j);
  const size_t nt = (size_t)reps * (size_t)nops;
  double *us = (double *)calloc(2 * nt, sizeof *us), *host = us ? us + nt : NULL; /* device, then host times */
  float *f = (float *)calloc(nt, sizeof *f);
  void *dev = NULL;
  loom_result_t r = LOOM_SUCCESS;
  if (!us || !f) {
    r = loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "loom_bench_time_ranks: host allocation failed");
    goto out;
  }
  r = loom_bench_barrier(nccl, stream);
  if (r == LOOM_SUCCESS) r = bench_time_raw(nccl, stream, warmup, reps, nops, ops, args, us, host);
  /* Every rank must reach the reduction, even one whose op failed: it
   * contributes +inf, so a failure anywhere shows on rank 0. */
  for (size_t i = 0; i < nt; ++i) f[i] = r == LOOM_SUCCESS ? (float)us[i] : INFINITY;
  {
    loom_result_t r2 = LOOM_SUCCESS;
    cudaError_t e = cudaMalloc(&dev, nt * sizeof *f);
    if (e != cudaSuccess) r2 = loom_bench_cuda_fail((int)e, "cudaMalloc (loom_bench_time_ranks)", __FILE__, __LINE__);
    if (r2 == LOOM_SUCCESS) {
      e = cudaMemcpyAsync(dev, f, nt * sizeof *f, cudaMemcpyHostToDevice, stream);
      if (e != cudaSuccess) r2 = loom_bench_cuda_fail((int)e, "cudaMemcpyAsync", __FILE__, __LINE__);
    }
    if (r2 == LOOM_SUCCESS) {
      ncclResult_t n = ncclAllReduce(dev, dev, nt, ncclFloat32, ncclMax, nccl, stream);
      if (n != ncclSuccess) r2 = loom_bench_nccl_fail((int)n, "ncclAllReduce (max of the times)", __FILE__, __LINE__);
    }
    if (r2 == LOOM_SUCCESS) {
      e = cudaMemcpyAsync(f, dev, nt * sizeof *f, cudaMemcpyDeviceToHost, stream);
      if (e != cudaSuccess) r2 = loom_bench_cuda_fail((int)e, "cudaMemcpyAsync", __FILE__, __LINE__);
    }
    if (r2 == LOOM_SUCCESS) r2 = bench_poll_stream(stream, "cudaStreamQuery (loom_bench_time_ranks)");
    if (r == LOOM_SUCCESS) r = r2;
  }
  if (r == LOOM_SUCCESS) {
    for (size_t i = 0; i < nt; ++i) us[i] = f[i];
    if (isinf(us[0]))
      r = loom_bench_fail(LOOM_ERR_INTERNAL, "loom_bench_time_ranks: the operation failed on another rank");
    else
      for (int j = 0; j < nops; ++j)
        bench_stats_with_host(us + (size_t)j * reps, host + (size_t)j * reps, reps, &out[j]);
  }
out:
  if (dev) cudaFree(dev);
  free(us);
  free(f);
  return r;
}

loom_result_t loom_bench_time_ranks(ncclComm_t nccl, cudaStream_t stream, int warmup, int reps,
                                    loom_bench_op_fn op, void *arg, loom_bench_time_t *out) {
  return loom_bench_time_ranks_side_by_side(nccl, stream, warmup, reps, 1, &op, &arg, out);
}

double loom_bench_copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = (size_t)256 << 20;
  void *x = NULL, *y = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  double bps = NAN;
  float best = INFINITY;
  int ok = cudaMalloc(&x, bytes) == cudaSuccess && cudaMalloc(&y, bytes) == cudaSuccess &&
           cudaMemset(x, 1, bytes) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
           cudaEventCreate(&e1) == cudaSuccess;
  for (int i = 0; ok && i < 9; ++i) { /* the first is a warm-up */
    float ms = 0.f;
    ok = cudaEventRecord(e0, stream) == cudaSuccess &&
         cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess &&
         cudaEventRecord(e1, stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
         cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
    if (ok && i > 0 && ms > 0.f && ms < best) best = ms;
  }
  if (ok && isfinite(best)) bps = 2.0 * (double)bytes / ((double)best * 1e-3);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaFree(x);
  cudaFree(y);
  (void)cudaGetLastError();
  return bps;
}

/* ---- inputs --------------------------------------------------------------- */

int loom_bench_rotation(size_t bytes_per_set, size_t budget_bytes) {
  int dev = 0, l2 = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess)
    l2 = 64 << 20;
  if (bytes_per_set == 0) return 1;
  size_t want = (4 * (size_t)l2 + bytes_per_set - 1) / bytes_per_set;
  if (want > 32) want = 32;
  if (want * bytes_per_set > budget_bytes) want = budget_bytes / bytes_per_set;
  return want < 1 ? 1 : (int)want;
}

loom_result_t loom_bench_fill_random(void *dev, loom_dtype_t t, size_t n, uint64_t seed, double scale) {
  size_t es = loom_dtype_size(t);
  if (!es) return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "loom_bench_fill_random: dtype=%d is unknown", (int)t);
  if (n == 0) return LOOM_SUCCESS;
  size_t period = loom_bench_fill_period(n);
  void *host = malloc(period * es);
  if (!host)
    return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "loom_bench_fill_random: host allocation of %zu bytes", period * es);
  loom_ref_fill_random(t, host, period, seed, scale);
  cudaError_t e = cudaMemcpy(dev, host, period * es, cudaMemcpyHostToDevice);
  free(host);
  if (e != cudaSuccess) return loom_bench_cuda_fail((int)e, "cudaMemcpy (loom_bench_fill_random)", __FILE__, __LINE__);
  char *base = (char *)dev;
  for (size_t done = period; done < n;) { /* done stays a multiple of period */
    size_t cnt = done < n - done ? done : n - done;
    LOOM_BENCH_CUDA(cudaMemcpy(base + done * es, base, cnt * es, cudaMemcpyDeviceToDevice));
    done += cnt;
  }
  /* Device-to-device cudaMemcpy (and the last DMA of a pageable upload) may
   * still run when the call returns, and a non-blocking stream would not wait
   * for them: finish here, so the data is in place for any stream. */
  LOOM_BENCH_CUDA(cudaDeviceSynchronize());
  return LOOM_SUCCESS;
}

/* ---- rows and table ------------------------------------------------------- */

loom_bench_row_t *loom_bench_add(loom_bench_table_t *t) {
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 32;
    loom_bench_row_t **p = (loom_bench_row_t **)realloc(t->rows, (size_t)cap * sizeof *p);
    if (!p) return NULL;
    t->rows = p;
    t->cap = cap;
  }
  loom_bench_row_t *r = (loom_bench_row_t *)malloc(sizeof *r);
  if (!r) return NULL;
  t->rows[t->n++] = r;
  memset(r, 0, sizeof *r);
  r->world = 1;
  r->fused_us = r->gemm_us = r->comm_us = r->seq_us = r->auto_us = NAN;
  r->min_us = r->max_us = r->host_us = NAN;
  r->busbw_factor = NAN;
  r->ect_us = r->seq_ect_us = r->overlap = r->tflops = r->algbw = r->busbw = NAN;
  r->before_us = r->peer_us = r->vs_before = r->vs_peer = NAN;
  for (int c = 0; c < LOOM_BENCH_OWN_COLS; ++c) r->own[c] = NAN;
  r->wrong = -1;
  return r;
}

int loom_bench_own_col(loom_bench_table_t *t, const char *head, const char *key, int digits) {
  if (t->nown >= LOOM_BENCH_OWN_COLS) return -1;
  snprintf(t->own_head[t->nown], sizeof t->own_head[0], "%s", head);
  snprintf(t->own_key[t->nown], sizeof t->own_key[0], "%s", key);
  t->own_digits[t->nown] = digits;
  return t->nown++;
}

void loom_bench_row_finish(loom_bench_row_t *r) {
  const double loom_us = !isnan(r->fused_us) ? r->fused_us : r->auto_us;
  const double main_us = !isnan(loom_us) ? loom_us
                         : !isnan(r->seq_us) ? r->seq_us
                         : !isnan(r->comm_us) ? r->comm_us
                                              : r->gemm_us;
  r->ect_us = r->seq_ect_us = r->overlap = r->tflops = r->algbw = r->busbw = NAN;
  if (!isnan(r->gemm_us)) {
    if (!isnan(loom_us)) r->ect_us = loom_us - r->gemm_us;
    if (!isnan(r->seq_us)) r->seq_ect_us = r->seq_us - r->gemm_us;
    if (!isnan(r->ect_us) && !isnan(r->seq_ect_us) && r->seq_ect_us > 0.0)
      r->overlap = 1.0 - r->ect_us / r->seq_ect_us;
  }
  r->vs_before = r->vs_peer = NAN;
  if (!isnan(main_us) && main_us > 0.0) {
    r->vs_before = r->before_us / main_us; /* NAN stays NAN */
    r->vs_peer = r->peer_us / main_us;
    if (r->flops > 0.0) r->tflops = r->flops / (main_us * 1e-6) / 1e12;
    if (r->bytes > 0 && !isnan(r->busbw_factor)) {
      r->algbw = (double)r->bytes / (main_us * 1e-6) / 1e9;
      r->busbw = r->algbw * r->busbw_factor;
    }
  }
}

void loom_bench_note(loom_bench_table_t *t, const char *fmt, ...) {
  if (t->nnotes >= (int)(sizeof t->notes / sizeof t->notes[0])) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->notes[t->nnotes++], sizeof t->notes[0], fmt, ap);
  va_end(ap);
}

void loom_bench_table_free(loom_bench_table_t *t) {
  for (int i = 0; i < t->n; ++i) free(t->rows[i]);
  free(t->rows);
  memset(t, 0, sizeof *t);
}

void loom_bench_format_bytes(int64_t b, char *buf, size_t cap) {
  if (b >= (INT64_C(1) << 30) && b % (INT64_C(1) << 30) == 0) snprintf(buf, cap, "%lld GiB", (long long)(b >> 30));
  else if (b >= (INT64_C(1) << 20) && b % (INT64_C(1) << 20) == 0) snprintf(buf, cap, "%lld MiB", (long long)(b >> 20));
  else if (b >= (INT64_C(1) << 10) && b % (INT64_C(1) << 10) == 0) snprintf(buf, cap, "%lld KiB", (long long)(b >> 10));
  else snprintf(buf, cap, "%lld B", (long long)b);
}

const char *loom_bench_dtype_name(loom_dtype_t t) {
  switch (t) {
    case LOOM_FP32: return "fp32";
    case LOOM_FP16: return "fp16";
    case LOOM_BF16: return "bf16";
  }
  return "?";
}

/* Table columns: numeric ones are shown only if some row has a value. */
enum { COL_FUSED, COL_AUTO, COL_GEMM, COL_COMM, COL_SEQ, COL_ECT, COL_SEQECT, COL_OVERLAP, COL_TFLOPS, COL_ALGBW,
       COL_BUSBW, COL_BEFORE, COL_VS_BEFORE, COL_PEER, COL_VS_PEER, COL_NUM };
static const char *const bench_col_head[COL_NUM] = {"fused(us)", "auto(us)", "gemm(us)", "comm(us)", "seq(us)",
                                                    "ECT(us)", "seqECT(us)", "overlap", "TFLOP/s", "algbw GB/s",
                                                    "busbw GB/s", "before(us)", "before/now", "peer(us)",
                                                    "peer/now"};

static double bench_col_value(const loom_bench_row_t *r, int c) {
  switch (c) {
    case COL_FUSED: return r->fused_us;
    case COL_AUTO: return r->auto_us;
    case COL_GEMM: return r->gemm_us;
    case COL_COMM: return r->comm_us;
    case COL_SEQ: return r->seq_us;
    case COL_ECT: return r->ect_us;
    case COL_SEQECT: return r->seq_ect_us;
    case COL_OVERLAP: return r->overlap;
    case COL_TFLOPS: return r->tflops;
    case COL_ALGBW: return r->algbw;
    case COL_BUSBW: return r->busbw;
    case COL_BEFORE: return r->before_us;
    case COL_VS_BEFORE: return r->vs_before;
    case COL_PEER: return r->peer_us;
    case COL_VS_PEER: return r->vs_peer;
  }
  return NAN;
}

static int bench_maxlen(const loom_bench_table_t *t, size_t off, int minw) {
  int w = minw;
  for (int i = 0; i < t->n; ++i) {
    int l = (int)strlen((const char *)t->rows[i] + off);
    if (l > w) w = l;
  }
  return w;
}

void loom_bench_print(FILE *f, loom_bench_table_t *t, const char *title) {
  int show[COL_NUM] = {0}, show_own[LOOM_BENCH_OWN_COLS] = {0}, show_wrong = 0, show_note = 0;
  for (int i = 0; i < t->n; ++i) {
    loom_bench_row_finish(t->rows[i]);
    for (int c = 0; c < COL_NUM; ++c)
      if (!isnan(bench_col_value(t->rows[i], c))) show[c] = 1;
    for (int c = 0; c < t->nown; ++c)
      if (!isnan(t->rows[i]->own[c])) show_own[c] = 1;
    if (t->rows[i]->wrong >= 0) show_wrong = 1;
    if (t->rows[i]->note[0] || t->rows[i]->peer_note[0]) show_note = 1;
  }
  int wop = bench_maxlen(t, offsetof(loom_bench_row_t, op), 2);
  int wimpl = bench_maxlen(t, offsetof(loom_bench_row_t, impl), 4);
  int wshape = bench_maxlen(t, offsetof(loom_bench_row_t, shape), 5);
  int wdt = bench_maxlen(t, offsetof(loom_bench_row_t, dtype), 5);
  if (title) fprintf(f, "#\n# %s\n#\n", title);
  fprintf(f, "# %-*s  %-*s  %-*s  %-*s", wop, "op", wimpl, "impl", wshape, "shape", wdt, "dtype");
  for (int c = 0; c < COL_NUM; ++c)
    if (show[c]) fprintf(f, "  %10s", bench_col_head[c]);
  for (int c = 0; c < t->nown; ++c)
    if (show_own[c]) fprintf(f, "  %11s", t->own_head[c]);
  if (show_wrong) fprintf(f, "  %7s", "#wrong");
  if (show_note) fprintf(f, "  note");
  fprintf(f, "\n");
  for (int i = 0; i < t->n; ++i) {
    const loom_bench_row_t *r = t->rows[i];
    fprintf(f, "  %-*s  %-*s  %-*s  %-*s", wop, r->op, wimpl, r->impl, wshape, r->shape, wdt, r->dtype);
    for (int c = 0; c < COL_NUM; ++c) {
      if (!show[c]) continue;
      double v = bench_col_value(r, c);
      if (isnan(v)) fprintf(f, "  %10s", "-");
      else if (c == COL_OVERLAP) fprintf(f, "  %9.1f%%", 100.0 * v);
      else if (c == COL_VS_BEFORE || c == COL_VS_PEER) fprintf(f, "  %9.3fx", v);
      else if (c == COL_TFLOPS || c == COL_ALGBW || c == COL_BUSBW) fprintf(f, "  %10.1f", v);
      else fprintf(f, "  %10.1f", v);
    }
    for (int c = 0; c < t->nown; ++c) {
      if (!show_own[c]) continue;
      if (isnan(r->own[c])) fprintf(f, "  %11s", "-");
      else fprintf(f, "  %11.*f", t->own_digits[c], r->own[c]);
    }
    if (show_wrong) {
      if (r->wrong >= 0) fprintf(f, "  %7lld", (long long)r->wrong);
      else fprintf(f, "  %7s", "-");
    }
    if (show_note && (r->note[0] || r->peer_note[0]))
      fprintf(f, "  %s%s%s", r->note, r->note[0] && r->peer_note[0] ? "; " : "", r->peer_note);
    fprintf(f, "\n");
  }
  for (int i = 0; i < t->nnotes; ++i) fprintf(f, "# %s\n", t->notes[i]);
  fflush(f);
}

/* ---- JSON ----------------------------------------------------------------- */

static void bench_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch == '\n') fputs("\\n", f);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static void bench_json_num(FILE *f, double v) {
  if (isnan(v) || isinf(v)) fputs("null", f);
  else fprintf(f, "%.6g", v);
}

static int bench_mkdir_p(const char *path) {
  char buf[1024];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *p = buf + 1; *p; ++p)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0775) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  if (mkdir(buf, 0775) != 0 && errno != EEXIST) return -1;
  return 0;
}

/* First line of a command's output into buf ("" if it failed). */
static void bench_command_line(const char *cmd, char *buf, size_t cap) {
  buf[0] = 0;
  FILE *p = popen(cmd, "r");
  if (!p) return;
  if (!fgets(buf, (int)cap, p)) buf[0] = 0;
  int st = pclose(p);
  if (st != 0) buf[0] = 0;
  buf[strcspn(buf, "\r\n")] = 0;
}

const char *loom_bench_results_dir(void) {
  if (bench_results_opt) return bench_results_opt;
  const char *dir = loom_tool_param("BENCH_RESULTS_DIR");
  return dir && *dir ? dir : "loom-results";
}

int loom_bench_write_json(const char *suite, loom_bench_table_t *t, const loom_bench_opts_t *o, int world,
                          char *path_out, size_t path_cap) {
  const char *dir = loom_bench_results_dir();
  if (bench_mkdir_p(dir) != 0) {
    fprintf(stderr, "loom-bench: cannot create %s: %s\n", dir, strerror(errno));
    return -1;
  }
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  char stamp[32], date[40], path[1200];
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", &tm);
  snprintf(path, sizeof path, "%s/%s-%s.json", dir, suite, stamp);
  for (int k = 2; access(path, F_OK) == 0 && k < 100; ++k) /* two runs in one second */
    snprintf(path, sizeof path, "%s/%s-%s-%d.json", dir, suite, stamp, k);

  char commit[128], dirty[8] = "";
  const char *env_commit = loom_tool_param("COMMIT");
  if (env_commit && *env_commit) snprintf(commit, sizeof commit, "%s", env_commit);
  else {
    bench_command_line("git rev-parse --short HEAD 2>/dev/null", commit, sizeof commit);
    if (!commit[0]) snprintf(commit, sizeof commit, "unknown");
    else {
      char st[8];
      bench_command_line("git status --porcelain --untracked-files=no 2>/dev/null | head -n 1", st, sizeof st);
      snprintf(dirty, sizeof dirty, "%s", st[0] ? "true" : "false");
    }
  }
  char devname[256] = "unknown";
  int dev = -1, gpus = 0, rt = 0, drv = 0, nccl = 0, sms = 0, ccmaj = 0, ccmin = 0;
  struct cudaDeviceProp prop;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
    snprintf(devname, sizeof devname, "%s", prop.name);
    sms = prop.multiProcessorCount;
    ccmaj = prop.major, ccmin = prop.minor;
  }
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  ncclGetVersion(&nccl);

  char tmp[1300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "loom-bench: cannot write %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"suite\": ");
  bench_json_str(f, suite);
  fprintf(f, ",\n  \"device\": ");
  bench_json_str(f, devname);
  fprintf(f, ",\n  \"compute_capability\": \"%d.%d\",\n  \"sm_count\": %d,\n  \"gpus\": %d,\n  \"world\": %d,\n",
          ccmaj, ccmin, sms, gpus, world);
  fprintf(f, "  \"date\": ");
  bench_json_str(f, date);
  fprintf(f, ",\n  \"commit\": ");
  bench_json_str(f, commit);
  if (dirty[0]) fprintf(f, ",\n  \"dirty\": %s", dirty);
  fprintf(f, ",\n  \"nccl_version\": \"%d.%d.%d\",\n  \"cuda_runtime\": %d,\n  \"cuda_driver\": %d,\n",
          nccl / 10000, (nccl / 100) % 100, nccl % 100, rt, drv);
  fprintf(f, "  \"loom_version\": \"%d.%d.%d\",\n", LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR, LOOM_VERSION_PATCH);
  if (o)
    fprintf(f, "  \"options\": {\"quick\": %d, \"warmup\": %d, \"reps\": %d, \"check\": %d},\n", o->quick,
            o->warmup, o->reps, o->check);
  fprintf(f, "  \"time_unit\": \"us\",\n  \"notes\": [");
  for (int i = 0; i < t->nnotes; ++i) {
    fprintf(f, "%s\n    ", i ? "," : "");
    bench_json_str(f, t->notes[i]);
  }
  fprintf(f, "%s],\n  \"rows\": [", t->nnotes ? "\n  " : "");
  for (int i = 0; i < t->n; ++i) {
    loom_bench_row_t *r = t->rows[i];
    loom_bench_row_finish(r);
    fprintf(f, "%s\n    {\"op\": ", i ? "," : "");
    bench_json_str(f, r->op);
    fprintf(f, ", \"impl\": ");
    bench_json_str(f, r->impl);
    fprintf(f, ", \"shape\": ");
    bench_json_str(f, r->shape);
    fprintf(f, ", \"dtype\": ");
    bench_json_str(f, r->dtype);
    fprintf(f, ", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"bytes\": %lld, \"world\": %d", (long long)r->m,
            (long long)r->n, (long long)r->k, (long long)r->bytes, r->world);
    const struct { const char *k; double v; } nums[] = {
        {"fused_us", r->fused_us},   {"auto_us", r->auto_us},   {"gemm_us", r->gemm_us},
        {"comm_us", r->comm_us},     {"seq_us", r->seq_us},     {"min_us", r->min_us},
        {"max_us", r->max_us},       {"host_us", r->host_us},   {"ect_us", r->ect_us},
        {"seq_ect_us", r->seq_ect_us}, {"overlap", r->overlap}, {"tflops", r->tflops},
        {"algbw_gbs", r->algbw},     {"busbw_gbs", r->busbw},   {"before_us", r->before_us},
        {"before_over_now", r->vs_before}, {"peer_us", r->peer_us}, {"peer_over_now", r->vs_peer}};
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; ++k) {
      fprintf(f, ", \"%s\": ", nums[k].k);
      bench_json_num(f, nums[k].v);
    }
    for (int c = 0; c < t->nown; ++c) {
      fprintf(f, ", \"%s\": ", t->own_key[c]);
      bench_json_num(f, r->own[c]);
    }
    if (r->wrong >= 0) fprintf(f, ", \"wrong\": %lld", (long long)r->wrong);
    else fprintf(f, ", \"wrong\": null");
    const struct { const char *k, *v; } strs[] = {
        {"auto_path", r->auto_path}, {"peer_timing", r->peer_timing}, {"peer_note", r->peer_note}};
    for (size_t k = 0; k < sizeof strs / sizeof strs[0]; ++k)
      if (strs[k].v[0]) {
        fprintf(f, ", \"%s\": ", strs[k].k);
        bench_json_str(f, strs[k].v);
      }
    fprintf(f, ", \"note\": ");
    bench_json_str(f, r->note);
    fputc('}', f);
  }
  fprintf(f, "%s]\n}\n", t->n ? "\n  " : "");
  int bad = ferror(f);
  if (fclose(f) != 0) bad = 1;
  if (bad || rename(tmp, path) != 0) {
    fprintf(stderr, "loom-bench: writing %s failed: %s\n", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  if (path_out && path_cap) snprintf(path_out, path_cap, "%s", path);
  return 0;
}

/* ---- outside baselines ---------------------------------------------------- */

/* A directory that exists. */
static int bench_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *loom_bench_peers_dir(void) {
  static char dir[PATH_MAX];
  if (dir[0]) return dir;
  const char *env = loom_tool_param("BENCH_PEERS");
  if (env && *env) {
    snprintf(dir, sizeof dir, "%s", env);
    return dir;
  }
  /* installed: <prefix>/bin/loom-bench next to <prefix>/share/loom/peers */
  char exe[1024];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      char cand[PATH_MAX], real[PATH_MAX];
      if (snprintf(cand, sizeof cand, "%s/../share/loom/peers", exe) < (int)sizeof cand && bench_is_dir(cand)) {
        snprintf(dir, sizeof dir, "%s", realpath(cand, real) ? real : cand);
        return dir;
      }
    }
  }
  snprintf(dir, sizeof dir, "bench/peers"); /* the source tree, from its root */
  return dir;
}

int loom_bench_run_peer(const char *peer, const char *args, const char *name, char *json_path, size_t json_cap,
                        char *note, size_t note_cap) {
  json_path[0] = 0;
  char script[PATH_MAX];
  if (strchr(peer, '/')) snprintf(script, sizeof script, "%s", peer);
  else snprintf(script, sizeof script, "%s/%s", loom_bench_peers_dir(), peer);
  int mrank = 0, msize = 0;
  if (loom_launch_under_mpi(&mrank, &msize)) {
    snprintf(note, note_cap, "peer not run under mpirun: run %s separately", script);
    return 1;
  }
  if (access(script, R_OK) != 0) {
    snprintf(note, note_cap, "peer not run: %.100s not found (set LOOM_BENCH_PEERS, or run from the source tree's root)",
             script);
    return 1;
  }
  const char *dir = loom_bench_results_dir();
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  char mk[1300], cmd[8192], path[1200];
  snprintf(mk, sizeof mk, "mkdir -p '%s'", dir);
  if (system(mk) != 0) {
    snprintf(note, note_cap, "peer not run: cannot create %s", dir);
    return 1;
  }
  snprintf(path, sizeof path, "%s/%s-%s.json", dir, name, stamp);
  const int len = snprintf(cmd, sizeof cmd, "%s python3 '%s' %s --json '%s'",
                           system("command -v timeout >/dev/null 2>&1") == 0 ? "timeout 900" : "", script, args, path);
  if (len < 0 || len >= (int)sizeof cmd) {
    snprintf(note, note_cap, "peer not run: its command line is over %zu bytes", sizeof cmd);
    return 1;
  }
  printf("# peer: %s\n", cmd);
  fflush(stdout);
  const int st = system(cmd);
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (code == 0 && access(path, R_OK) == 0) {
    snprintf(json_path, json_cap, "%s", path);
    return 0;
  }
  snprintf(note, note_cap, "peer %s failed or absent (exit %d%s): no peer column", script, code,
           code == 2 ? ": no PyTorch or no GPU" : code == 124 ? ": timed out" : "");
  return 1;
}

int loom_bench_appendf(char *buf, size_t cap, const char *fmt, ...) {
  const size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  const int n = len < cap ? vsnprintf(buf + len, cap - len, fmt, ap) : -1;
  va_end(ap);
  if (n < 0 || (size_t)n >= cap - len) {
    if (len < cap) buf[len] = 0;
    return -1;
  }
  return 0;
}

int loom_bench_row_pair(loom_bench_row_t *r, const char *path, const char *variant, const loom_bench_shape_t *shape,
                        int host_excluded) {
  if (!path || !path[0]) return 0;
  loom_bench_pair_t p;
  loom_bench_pair_file(path, variant, shape, host_excluded, &p);
  r->peer_us = p.us; /* NAN unless paired */
  snprintf(r->peer_timing, sizeof r->peer_timing, "%s", p.paired ? p.timing : "");
  if (p.paired) snprintf(r->peer_note, sizeof r->peer_note, "peer %.24s: %s", variant, p.timing);
  else snprintf(r->peer_note, sizeof r->peer_note, "no peer %.24s: %.160s", variant, p.why);
  return p.paired;
}

void loom_bench_row_auto(loom_bench_row_t *r, const char *path) {
  snprintf(r->auto_path, sizeof r->auto_path, "%s", path);
  const size_t len = strlen(r->impl);
  snprintf(r->impl + len, sizeof r->impl - len, ":%s", path);
}

const char *loom_bench_tp_path(loom_tp_transfer_t t) {
  switch (t) {
    case LOOM_TP_SEQUENTIAL: return "sequential";
    case LOOM_TP_COPY_ENGINE: return "copy-engine";
    case LOOM_TP_SM_COPY: return "sm-copy";
    case LOOM_TP_SM_ATOMIC: return "sm-atomic";
    case LOOM_TP_BULK_REDUCE: return "bulk-reduce";
    case LOOM_TP_DECOMPOSED: return "decomposed";
    default: return "unresolved";
  }
}

const char *loom_bench_coll_path(loom_coll_algo_t a) {
  switch (a) {
    case LOOM_COLL_ONE_SHOT: return "one-shot";
    case LOOM_COLL_TWO_SHOT: return "two-shot";
    case LOOM_COLL_LL: return "ll";
    case LOOM_COLL_PUSH: return "push";
    default: return "unresolved";
  }
}

const char *loom_bench_emb_path(loom_embedding_path_t p) {
  switch (p) {
    case LOOM_EMB_PATH_ZERO_COPY: return "zero-copy";
    case LOOM_EMB_PATH_GIN: return "gin";
    case LOOM_EMB_PATH_STAGED: return "staged";
    default: return "unresolved";
  }
}

int loom_bench_opt_peer(int argc, char **argv, int *i, int *peer) {
  if (strcmp(argv[*i], "--peer")) return 0;
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!v || strcmp(v, "none")) {
    fprintf(stderr, "loom-bench: --peer takes only \"none\", got \"%s\"\n", v ? v : "(nothing)");
    return -1;
  }
  *peer = 0;
  *i += 1;
  return 1;
}

int loom_bench_finish(const char *suite, loom_bench_table_t *t, const loom_bench_opts_t *o, int world,
                      const char *title, int failures) {
  if (o->json) {
    char path[1200];
    if (loom_bench_write_json(suite, t, o, world, path, sizeof path) == 0) loom_bench_note(t, "JSON: %s", path);
    else failures++;
  }
  loom_bench_print(stdout, t, title);
  if (failures) printf("# %d failure(s): see the messages above, the #wrong and note columns\n", failures);
  return failures;
}

int loom_bench_rank_open(const loom_rank_ctx_t *ctx, cudaStream_t *s, loom_comm_t *comm) {
  *s = NULL, *comm = NULL;
  if (cudaStreamCreate(s) != cudaSuccess) {
    fprintf(stderr, "rank %d: setup failed: cudaStreamCreate: %s\n", ctx->rank, cudaGetErrorString(cudaGetLastError()));
    *s = NULL;
    return 1;
  }
  if (loom_comm_create(ctx->nccl, NULL, comm) != LOOM_SUCCESS) {
    fprintf(stderr, "rank %d: setup failed: %s\n", ctx->rank, loom_last_error());
    cudaStreamDestroy(*s);
    *s = NULL, *comm = NULL;
    return 1;
  }
  return 0;
}

void loom_bench_rank_close(cudaStream_t s, loom_comm_t comm) {
  if (comm) (void)loom_comm_destroy(comm);
  if (s) cudaStreamDestroy(s);
}
