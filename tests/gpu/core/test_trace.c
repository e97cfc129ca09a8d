/*
 * test_trace.c - the stage traces (src/core/trace.h) on one GPU: at
 * LOOM_DEBUG=TRACE, calls of three families through the door (an
 * AllReduce, an AllGather+GEMM, an MoE dispatch and combine) each log a
 * line per call with their stages, in order, device times that do not go
 * backwards, and the op's label; the MoE plan's destruction logs its
 * kernels' phase stamps. stderr is captured into a file for the case and
 * read back. Outputs are not checked here (the families' suites do that);
 * inputs are random all the same.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "core/log.h"
#include "ref/ref.h"
#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"

#define LAUNCH_TIMEOUT_S 300
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* A device buffer of `n` random elements of `t`. */
static void *random_device(loom_dtype_t t, size_t n, uint64_t seed) {
  const size_t bytes = n * loom_dtype_size(t);
  void *h = malloc(bytes), *d = NULL;
  loom_ref_fill_random(t, h, n, seed, 1.0f);
  if (cudaMalloc(&d, bytes) == cudaSuccess) (void)cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  free(h);
  return d;
}

/* Two AllReduce calls of 4096 bf16 elements. */
static int allreduce_calls(loom_comm_t comm, cudaStream_t s) {
  const int fails0 = loom_test_failures;
  loom_plan_t plan = NULL;
  void *in = NULL, *out = NULL;
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 4096, d.dtype = LOOM_BF16, d.out_type = LOOM_BF16, d.world_size = 1;
  LOOM_OK(loom_plan_allreduce(comm, &d, &plan));
  LOOM_OK(loom_malloc(comm, 4096 * 2, &in));
  CUDA_OK(cudaMalloc(&out, 4096 * 2));
  {
    void *r = random_device(LOOM_BF16, 4096, 7);
    CUDA_OK(cudaMemcpy(in, r, 4096 * 2, cudaMemcpyDeviceToDevice));
    cudaFree(r);
  }
  for (int i = 0; i < 2; ++i) LOOM_OK(loom_allreduce(plan, in, out, NULL, NULL, NULL, s));
  CUDA_OK(cudaStreamSynchronize(s));
out:
  if (plan) (void)loom_plan_destroy(plan);
  if (in) (void)loom_free(comm, in);
  cudaFree(out);
  return loom_test_failures != fails0;
}

/* Two AllGather+GEMM calls, 256 x 512 x 256 bf16 (W = 1: the whole A). */
static int ag_gemm_calls(loom_comm_t comm, cudaStream_t s) {
  const int fails0 = loom_test_failures;
  loom_plan_t plan = NULL;
  void *a = random_device(LOOM_BF16, 256 * 256, 11), *b = random_device(LOOM_BF16, 512 * 256, 12), *c = NULL;
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 256, d.n = 512, d.k = 256, d.b_layout = LOOM_B_NK, d.world_size = 1;
  LOOM_OK(loom_plan_ag_gemm(comm, &d, &plan));
  CUDA_OK(cudaMalloc(&c, 256 * 512 * 2));
  for (int i = 0; i < 2; ++i) LOOM_OK(loom_ag_gemm(plan, a, b, c, NULL, NULL, s));
  CUDA_OK(cudaStreamSynchronize(s));
out:
  if (plan) (void)loom_plan_destroy(plan);
  cudaFree(a), cudaFree(b), cudaFree(c);
  return loom_test_failures != fails0;
}

/* A dispatch and a combine of 16 tokens, 4 experts, top 2. */
static int moe_calls(loom_comm_t comm, cudaStream_t s) {
  const int fails0 = loom_test_failures;
  loom_plan_t plan = NULL;
  void *x = random_device(LOOM_BF16, 16 * 64, 21), *y = random_device(LOOM_BF16, 32 * 64, 22), *out = NULL;
  float *w = (float *)random_device(LOOM_FP32, 32, 23);
  int32_t ids[32], *dids = NULL;
  for (int i = 0; i < 32; ++i) ids[i] = (i / 2 + (i % 2) * 3) % 4; /* two distinct experts per token */
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = 64, d.experts = 4, d.topk = 2, d.max_tokens = 16;
  LOOM_OK(loom_plan_moe(comm, &d, &plan));
  CUDA_OK(cudaMalloc((void **)&dids, sizeof ids));
  CUDA_OK(cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMalloc(&out, 16 * 64 * 2));
  LOOM_OK(loom_moe_dispatch(plan, x, dids, 16, s));
  LOOM_OK(loom_moe_combine(plan, y, w, out, s));
  CUDA_OK(cudaStreamSynchronize(s));
out:
  if (plan) (void)loom_plan_destroy(plan); /* logs the phase stamps */
  cudaFree(x), cudaFree(y), cudaFree(w), cudaFree(out), cudaFree(dids);
  return loom_test_failures != fails0;
}

/* The line of `op`'s call `call` in text (NULL: none). */
static const char *find_call(const char *text, const char *op, int call) {
  char key[96];
  snprintf(key, sizeof key, "TRACE: %s rank 0 call %d", op, call);
  return strstr(text, key);
}

/* The stages of one call line in order ("end" last, at least min_stages of
 * them: a one-kernel op's line holds "end" alone), each "name d/h" with
 * device times that never go backwards. */
static void check_call_line(const char *line, const char *label, const char *stage, int min_stages) {
  char buf[1024];
  const char *nl = strchr(line, '\n');
  const size_t n = nl ? (size_t)(nl - line) : strlen(line);
  snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), line);
  printf("  %s\n", buf);
  if (label) CHECK(strstr(buf, label) != NULL);
  CHECK(strstr(buf, stage) != NULL);
  const char *p = strstr(buf, "device/host us:");
  CHECK(p != NULL);
  if (!p) return;
  p += strlen("device/host us:");
  double last = -1.0;
  int stages = 0;
  char name[64], endname[64] = "";
  double dev, host;
  int used = 0;
  while (sscanf(p, " %63s %lf/%lf%n", name, &dev, &host, &used) == 3) {
    CHECK(dev >= last - 0.5); /* events of one stream; a side stream's may tie */
    CHECK(host >= 0.0);
    if (dev > last) last = dev;
    snprintf(endname, sizeof endname, "%s", name);
    stages++;
    p += used;
  }
  CHECK(stages >= min_stages);
  CHECK(strcmp(endname, "end") == 0);
}

static int run_trace(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *unused) {
  (void)ctx, (void)unused;
  const int fails0 = loom_test_failures;
  char path[] = "/tmp/loom-trace-XXXXXX";
  const int fd = mkstemp(path), saved = dup(2);
  cudaStream_t s = NULL;
  CHECK(fd >= 0 && saved >= 0);
  if (fd < 0 || saved < 0) return 1;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  loom__log_set_level(LOOM_LOG_TRACE);
  fflush(stderr);
  dup2(fd, 2);
  const int bad = allreduce_calls(comm, s) | ag_gemm_calls(comm, s) | moe_calls(comm, s);
  fflush(stderr);
  dup2(saved, 2);
  loom__log_set_level(LOOM_LOG_WARN);
  CHECK(!bad);
  {
    FILE *f = fopen(path, "r");
    char *text = (char *)calloc(1 << 20, 1);
    const size_t got = f && text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    if (f) fclose(f);
    CHECK(got > 0);
    for (int call = 1; call <= 2; ++call) {
      const char *ar = find_call(text, "allreduce", call), *ag = find_call(text, "ag_gemm", call);
      CHECK(ar != NULL);
      CHECK(ag != NULL);
      if (ar) check_call_line(ar, NULL, " end ", 1);
      if (ag) check_call_line(ag, "[256 x 512 x 256, LOOM_TP_", " end ", 2); /* a stage before "end" */
    }
    const char *disp = strstr(text, "TRACE: moe dispatch rank 0 (last call), us from the start: counted ");
    const char *comb = strstr(text, "TRACE: moe combine rank 0 (last call), us from the start: ready ");
    CHECK(disp != NULL);
    CHECK(comb != NULL);
    CHECK(strstr(text, "TRACE: moe rank 0 call 1") != NULL); /* the dispatch's call line */
    CHECK(strstr(text, "TRACE: moe rank 0 call 2") != NULL); /* the combine's */
    if (disp) {
      double t = -1.0;
      CHECK(sscanf(disp + strlen("TRACE: moe dispatch rank 0 (last call), us from the start: counted "), "%lf", &t) ==
            1);
      CHECK(t >= 0.0); /* stamped (an unstamped phase logs -1) */
    }
    free(text);
  }
out:
  if (s) cudaStreamDestroy(s);
  unlink(path);
  close(fd), close(saved);
  return loom_test_failures != fails0;
}

LOOM_TEST(gpu_trace_lines_of_three_families_w1) {
  static const int one = 0;
  const loom_case_suite_t su = {&one, sizeof one, 1, 30000, run_trace, NULL};
  if (loom_test_gpus(1)) loom_case_suite_run(1, LAUNCH_TIMEOUT_S, &su);
}
