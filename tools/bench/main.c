/*
 * main.c - the loom-bench command: one CLI for every benchmark suite.
 *
 *   loom-bench list                  the suites and what each measures
 *   loom-bench <suite> [options]     run one suite (loom-bench <suite> --help)
 *   loom-bench all [options]         every suite in name order, each with its
 *                                    defaults plus the common options given
 *
 * Suites register themselves (LOOM_BENCH in bench.h), so adding one never
 * touches this file. This process stays CUDA-free: it counts GPUs in a
 * short-lived child (loom_launch_gpu_count) and every suite runs its GPU
 * work in children of its own, so that forking stays legal. Where the
 * caller left NCCL_NVLS_ENABLE unset, the suites run with it 0 (loom never
 * uses NVLink multicast) and a line on stderr says so; a value the caller
 * set is kept (loom_bench_env_defaults).
 *
 * Files: JSON goes to --results DIR, else $LOOM_BENCH_RESULTS_DIR, else
 * ./loom-results; the PyTorch peers come from $LOOM_BENCH_PEERS, else
 * <prefix>/share/loom/peers beside an installed loom-bench, else
 * ./bench/peers (the source tree).
 *
 * Exit codes: 0 all ran and every check passed; 1 a failure or no GPU;
 * 2 bad usage.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void bench_usage(FILE *f) {
  fprintf(f,
          "usage: loom-bench list\n"
          "       loom-bench <suite> [options]     (loom-bench <suite> --help for its options)\n"
          "       loom-bench all [options]         every suite; common options are passed on\n"
          "\n");
  loom_bench_usage_common(f);
  fprintf(f, "\nsuites:\n");
  for (int i = 0; i < loom_bench_count(); ++i) fprintf(f, "  %-16s %s\n", loom_bench_name(i), loom_bench_help(i));
  fprintf(f,
          "\nResults: a table on stdout and JSON in --results DIR, else $LOOM_BENCH_RESULTS_DIR, else\n"
          "./loom-results (created); LOOM_COMMIT names the commit in the JSON (else git rev-parse --short HEAD).\n"
          "PyTorch peers: from %s ($LOOM_BENCH_PEERS, else <prefix>/share/loom/peers beside an\n"
          "installed loom-bench, else ./bench/peers).\n"
          "NCCL_NVLS_ENABLE: 0 where unset (said on stderr); a value you set is kept.\n",
          loom_bench_peers_dir());
}

static int bench_wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; ++i)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
  return 0;
}

/* `--list`: a suite that takes it prints what it would run, without a GPU. */
static int bench_wants_list(int argc, char **argv) {
  for (int i = 0; i < argc; ++i)
    if (!strcmp(argv[i], "--list")) return 1;
  return 0;
}

/* 1 when at least one GPU is present (or under mpirun: each rank checks its
 * own); prints the one-line reason otherwise. Does not initialise CUDA here. */
static int bench_have_gpu(void) {
  int r, s;
  if (loom_launch_under_mpi(&r, &s)) return 1;
  if (loom_launch_gpu_count() > 0) return 1;
  fprintf(stderr, "loom-bench: no CUDA GPU found; benchmarks need at least one NVIDIA GPU (Hopper or Ampere)\n");
  return 0;
}

static int bench_run_suite(int idx, int argc, char **argv) {
  /* argv[0] becomes the suite's name */
  char **av = (char **)calloc((size_t)argc + 2, sizeof *av);
  if (!av) return 1;
  av[0] = (char *)loom_bench_name(idx);
  for (int i = 1; i < argc; ++i) av[i] = argv[i];
  int rc = loom_bench_suite(idx)(argc, av);
  free(av);
  fflush(stdout);
  fflush(stderr);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    bench_usage(stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "list")) {
    for (int i = 0; i < loom_bench_count(); ++i) printf("%-16s %s\n", loom_bench_name(i), loom_bench_help(i));
    return 0;
  }
  if (!strcmp(cmd, "all")) {
    if (bench_wants_help(argc - 1, argv + 1)) {
      bench_usage(stdout);
      return 0;
    }
    if (!bench_have_gpu()) return 1;
    loom_bench_env_defaults();
    int worst = 0;
    for (int i = 0; i < loom_bench_count(); ++i) {
      printf("\n===== loom-bench %s: %s =====\n", loom_bench_name(i), loom_bench_help(i));
      fflush(stdout);
      int rc = bench_run_suite(i, argc - 1, argv + 1);
      if (rc) fprintf(stderr, "loom-bench: suite %s failed (exit %d)\n", loom_bench_name(i), rc);
      if (rc > worst) worst = rc;
    }
    return worst ? (worst == 2 ? 2 : 1) : 0;
  }
  int idx = loom_bench_find(cmd);
  if (idx < 0) {
    fprintf(stderr, "loom-bench: no suite called \"%s\" (loom-bench list shows them)\n", cmd);
    return 2;
  }
  if (!bench_wants_help(argc - 1, argv + 1) && !bench_wants_list(argc - 1, argv + 1)) {
    if (!bench_have_gpu()) return 1;
    loom_bench_env_defaults();
  }
  return bench_run_suite(idx, argc - 1, argv + 1);
}
