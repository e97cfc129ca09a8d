/*
 * test_optim.c - GPU tests of the distributed optimizers (loom_adam_step,
 * loom_lamb_step) on W ranks (one process per GPU), against the CPU
 * references in double precision (src/ref/optim_ref.c):
 *  - every parameter/gradient dtype pair, both forms and AUTO, odd sizes,
 *    1-element tensors, tensors smaller than W, unaligned tensors (the
 *    element-by-element path), AdamW / L2 / no weight decay / per-tensor
 *    weight decay, bias correction on and off, mean and sum of the
 *    gradients, gradient scaling, a device lr changed between steps, LAMB
 *    with and without nvlamb;
 *  - fresh random gradients on every rank at every step (every rank draws
 *    every rank's gradients from the run's seed, to compute the reference),
 *    the same random initial parameters on every rank; after the steps
 *    every element of the parameters, the master weights and both moments
 *    of this rank's state is checked;
 *  - 1000 steps (mixed precision, both optimizers) within tolerance;
 *  - a BERT-large-like list of 360 tensors (the shapes scaled down 8x);
 *  - CUDA-graph capture of one step, replayed with new gradients and lr;
 *  - found_inf skips a step (nothing changes, the step counter stays);
 *    grad_nonfinite reports an inf gradient on every rank;
 *  - argument errors (plain cudaMalloc gradients, host pointers, the wrong
 *    plan kind, descriptions that differ between ranks) each named;
 *  - a peer that never calls: LOOM_ERR_TIMEOUT naming the wait.
 * W = 1 runs the whole protocol (signals to itself); the _w2 tests skip
 * cleanly on one GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "core/comm.h"
#include "core/plan.h"
#include "ops/optim/optim.h"
#include "ops/optim/optim_schedule.h"
#include "ref/optim_ref.h"
#include "ref/ref.h"
#include "support/launch.h"

#define LAUNCH_TIMEOUT_S 600
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)
#define MAXT 400

#define F32 LOOM_FP32
#define BF LOOM_BF16
#define FH LOOM_FP16
#define AUTO LOOM_OPTIM_AUTO
#define RS LOOM_OPTIM_RS_OPT_AG
#define AR LOOM_OPTIM_AR_OPT

typedef enum { LIST_SMALL = 0, LIST_ODD = 1, LIST_BERT = 2, LIST_ONE = 3 } list_t;

typedef struct optim_case {
  int lamb;
  loom_dtype_t pt, gt;
  loom_optim_form_t form;
  list_t list;
  int steps;
  float wd;              /* weight decay (all tensors) */
  int per_tensor_wd;     /* 1: weight_decays[t] = 0 for every third tensor, wd otherwise */
  int decoupled, bias_correction, average, nvlamb;
  int grad_scale;        /* 1: a device loss scale of 1024, gradients drawn 1024x larger */
  int lr_dev;            /* 1: a device lr, changed at every step */
  int graph;             /* 1: capture one step, replay it */
  int misalign;          /* 1: tensors at odd element offsets (no vector path) */
  int64_t chunk;         /* desc.chunk_elems */
} optim_case_t;

static const char *dt(loom_dtype_t t) { return t == F32 ? "fp32" : t == FH ? "fp16" : "bf16"; }

/* The tensor list of a case (sizes into n[], returns the count). */
static int make_list(list_t l, int64_t *n) {
  int T = 0;
  if (l == LIST_SMALL) {
    static const int64_t s[] = {1, 7, 300, 4097, 10000};
    for (size_t i = 0; i < sizeof s / sizeof *s; ++i) n[T++] = s[i];
  } else if (l == LIST_ODD) {
    static const int64_t s[] = {1, 2, 3, 8, 9, 15, 17, 1023, 4096, 4097, 5000, 12345, 65537, 3, 100003};
    for (size_t i = 0; i < sizeof s / sizeof *s; ++i) n[T++] = s[i];
  } else if (l == LIST_ONE) {
    n[T++] = 1;
  } else {
    /* BERT-large's 360 tensors per 24 layers of 15, hidden 1024 -> 128 */
    const int64_t H = 128;
    for (int layer = 0; layer < 24; ++layer) {
      const int64_t s[15] = {H * H, H, H * H, H, H * H, H, H * H, H, H, H, 4 * H * H, 4 * H, 4 * H * H, H, H};
      for (int i = 0; i < 15; ++i) n[T++] = s[i];
    }
  }
  return T;
}

static uint64_t seed_for(int step, int rank, int t) {
  return loom_test_seed() * 1000003ull + (uint64_t)step * 7919ull + (uint64_t)rank * 104729ull + (uint64_t)t * 31ull + 17;
}

static float lr_at(int step) { return 1e-3f * (1.0f + 0.5f * sinf((float)step)); }

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

typedef struct ref_state {
  double *p[MAXT], *m[MAXT], *v[MAXT];
} ref_state_t;

static size_t check_close(const char *what, int rank, int t, const double *got, const double *ref, int64_t n,
                          double rel, double abs_tol) {
  size_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!(fabs(got[i] - ref[i]) <= rel * fabs(ref[i]) + abs_tol)) {
      if (bad < 3)
        fprintf(stderr, "  rank %d %s tensor %d elem %lld: got %.9g, expected %.9g (tol %.3g)\n", rank, what, t,
                (long long)i, got[i], ref[i], rel * fabs(ref[i]) + abs_tol);
      ++bad;
    }
  return bad;
}

/* After a failed step (its waits expired, its kernels returned): this
 * rank's view of the plan's signal words, read through its own kernels'
 * peer table (every rank's ready, done, phase, nonfinite and the count), beside
 * its own workspace base, so that a lost or misdirected signal shows which. */
static void dump_signals(loom_comm_t comm, loom_plan_t plan) {
  if (!plan || comm->size < 2 || !comm->ws_peer_dev) return;
  const int W = comm->size;
  char *peers[64];
  if (cudaMemcpy(peers, comm->ws_peer_dev, (size_t)W * sizeof(char *), cudaMemcpyDeviceToHost) != cudaSuccess) return;
  uint32_t ep[2] = {0, 0};
  cudaMemcpy(ep, (char *)comm->ws_ptr + plan->epoch_offset, sizeof ep, cudaMemcpyDeviceToHost);
  fprintf(stderr, "  rank %d: ws %p, epoch %u blocks_done %u, peer table:", comm->rank, comm->ws_ptr, ep[0], ep[1]);
  for (int p = 0; p < W; ++p) fprintf(stderr, " %p", (void *)peers[p]);
  fprintf(stderr, "\n");
  for (int p = 0; p < W; ++p) {
    uint32_t w[5 * 64 + 4];
    const size_t nw = (size_t)(5 * W) < sizeof w / sizeof *w ? (size_t)(5 * W) : sizeof w / sizeof *w;
    if (!peers[p] || cudaMemcpy(w, peers[p] + plan->signals_offset, nw * sizeof *w, cudaMemcpyDeviceToHost) !=
                         cudaSuccess)
      continue;
    fprintf(stderr, "  rank %d sees rank %d's words [ready|done|phase|nonfinite|count]:", comm->rank, p);
    for (size_t i = 0; i < nw; ++i) fprintf(stderr, "%s%u", i % (size_t)W == 0 ? " |" : " ", w[i]);
    fprintf(stderr, "\n");
  }
}

static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const optim_case_t *k) {
  const int W = ctx->size, rank = ctx->rank;
  const int fails0 = loom_test_failures;
  int64_t n[MAXT];
  const int T = make_list(k->list, n);
  const size_t ps = loom_dtype_size(k->pt), gs = loom_dtype_size(k->gt);
  size_t poff[MAXT], goff[MAXT], pbytes = 0, gbytes = 0;
  for (int t = 0; t < T; ++t) {
    poff[t] = align_up(pbytes, 256) + (k->misalign ? ps : 0);
    pbytes = poff[t] + (size_t)n[t] * ps;
    goff[t] = align_up(gbytes, 256) + (k->misalign ? gs : 0);
    gbytes = goff[t] + (size_t)n[t] * gs;
  }
  char *d_params = NULL, *d_grads = NULL;
  int params_sym = k->form != AR || (k->list % 2 == 0); /* AR-Opt: parameters may be plain device memory */
  float *d_scalars = NULL; /* lr, grad_scale */
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  void *hbuf = NULL;
  void *hg[64] = {0};
  float *h_sc = NULL; /* the step's lr and grad_scale, pinned */
  double *g = NULL, *got = NULL;
  float *hstate = NULL;
  ref_state_t ref;
  memset(&ref, 0, sizeof ref);
  void *params[MAXT], *grads[MAXT];
  float wds[MAXT];
  loom_ref_optim_hp_t hp;
  memset(&hp, 0, sizeof hp);

  LOOM_OK(loom_malloc(comm, gbytes, (void **)&d_grads)); /* collective */
  if (params_sym) LOOM_OK(loom_malloc(comm, pbytes, (void **)&d_params));
  else CUDA_OK(cudaMalloc((void **)&d_params, pbytes));
  CUDA_OK(cudaMalloc((void **)&d_scalars, 2 * sizeof(float)));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  /* the same initial parameters on every rank */
  hbuf = malloc(pbytes > gbytes ? pbytes : gbytes);
  int64_t maxn = 1;
  for (int t = 0; t < T; ++t) {
    loom_ref_fill_random(k->pt, (char *)hbuf + poff[t], (size_t)n[t], seed_for(-1, 0, t), 1.0);
    ref.p[t] = (double *)malloc((size_t)n[t] * sizeof(double));
    ref.m[t] = (double *)calloc((size_t)n[t], sizeof(double));
    ref.v[t] = (double *)calloc((size_t)n[t], sizeof(double));
    for (int64_t i = 0; i < n[t]; ++i) ref.p[t][i] = loom_ref_load(k->pt, (char *)hbuf + poff[t], (size_t)i);
    params[t] = d_params + poff[t];
    grads[t] = d_grads + goff[t];
    wds[t] = k->per_tensor_wd && t % 3 == 0 ? 0.0f : k->wd;
    if (n[t] > maxn) maxn = n[t];
  }
  CUDA_OK(cudaMemcpy(d_params, hbuf, pbytes, cudaMemcpyHostToDevice));
  /* pinned, allocated before the plan (a collective): a pageable upload
   * waits for every kernel on the device, and in a one-GPU world the
   * peers' kernels of this step wait for this rank's (it would never come) */
  for (int q = 0; q < W; ++q) CUDA_OK(cudaMallocHost(&hg[q], gbytes));
  CUDA_OK(cudaMallocHost((void **)&h_sc, 2 * sizeof(float)));
  g = (double *)malloc((size_t)maxn * sizeof(double));
  got = (double *)malloc((size_t)maxn * sizeof(double));

  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  d.world_size = W;
  d.num_tensors = T;
  d.params = params;
  d.grads = grads;
  d.numels = n;
  d.param_type = k->pt;
  d.grad_type = k->gt;
  d.form = k->form;
  d.lr = 1e-3f;
  d.weight_decay = k->wd;
  d.weight_decays = k->per_tensor_wd ? wds : NULL;
  d.decoupled_weight_decay = k->decoupled;
  d.bias_correction = k->bias_correction;
  d.average_grads = k->average;
  d.use_nvlamb = k->nvlamb;
  d.chunk_elems = k->chunk;
  LOOM_OK(k->lamb ? loom_plan_lamb(comm, &d, &plan) : loom_plan_adam(comm, &d, &plan));
  loom_optim_plan_info_t info = LOOM_OPTIM_PLAN_INFO_INIT;
  LOOM_OK(loom_optim_plan_info(plan, &info));
  if (rank == 0)
    printf("  %s %s/%s form %d list %d (%d tensors, %d AR) steps %d wd %g%s%s%s%s%s%s%s%s chunk %lld: %lld chunks, "
           "%lld state\n",
           k->lamb ? "lamb" : "adam", dt(k->pt), dt(k->gt), (int)k->form, (int)k->list, T, info.num_ar_tensors,
           k->steps, (double)k->wd, k->per_tensor_wd ? " per-tensor" : "", k->decoupled ? " decoupled" : " L2",
           k->bias_correction ? "" : " no-bc", k->average ? " mean" : " sum", k->grad_scale ? " scaled" : "",
           k->lr_dev ? " lr-dev" : "", k->graph ? " graph" : "", k->misalign ? " misaligned" : "",
           (long long)info.chunk_elems, (long long)info.chunks, (long long)info.state_elems);
  CHECK_EQ_INT(info.kernels_per_step, k->lamb ? 3 : 1);
  CHECK_EQ_INT(info.master != NULL, k->pt != F32);

  hp.lr = 1e-3, hp.beta1 = d.beta1, hp.beta2 = d.beta2, hp.eps = d.eps;
  hp.decoupled = k->decoupled, hp.bias_correction = k->bias_correction, hp.use_nvlamb = k->nvlamb;

  loom_optim_args_t args = LOOM_OPTIM_ARGS_INIT;
  if (k->lr_dev) args.lr = d_scalars;
  if (k->grad_scale) args.grad_scale = d_scalars + 1;
  const float scale = k->grad_scale ? 1024.0f : 1.0f;
  for (int step = 1; step <= k->steps; ++step) {
    /* every rank's gradients (this rank uploads its own) */
    for (int q = 0; q < W; ++q)
      for (int t = 0; t < T; ++t)
        loom_ref_fill_random(k->gt, (char *)hg[q] + goff[t], (size_t)n[t], seed_for(step, q, t), scale);
    const float lr = k->lr_dev ? lr_at(step) : 1e-3f;
    h_sc[0] = lr, h_sc[1] = scale;
    loom_launch_step_time(rank, step, "filled");
    CUDA_OK(cudaMemcpyAsync(d_grads, hg[rank], gbytes, cudaMemcpyHostToDevice, s));
    loom_launch_step_time(rank, step, "grads copy");
    CUDA_OK(cudaMemcpyAsync(d_scalars, h_sc, 2 * sizeof(float), cudaMemcpyHostToDevice, s));
    loom_launch_step_time(rank, step, "scalar copy");
    CUDA_OK(cudaStreamSynchronize(s)); /* hg and h_sc are rewritten at the next step */
    loom_launch_step_time(rank, step, "synced");
    if (k->graph && !exec) {
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      loom_result_t r = k->lamb ? loom_lamb_step(plan, &args, s) : loom_adam_step(plan, &args, s);
      cudaError_t ce = cudaStreamEndCapture(s, &graph);
      CHECK_RESULT(r, LOOM_SUCCESS);
      CUDA_OK(ce);
      CHECK(loom_launch_graph_ready(ctx, graph, &exec, s) == 0); /* every rank's, before any launches */
    }
    if (k->graph) CUDA_OK(cudaGraphLaunch(exec, s));
    else LOOM_OK(k->lamb ? loom_lamb_step(plan, &args, s) : loom_adam_step(plan, &args, s));
    loom_launch_step_time(rank, step, "launched");
    /* the reference step */
    hp.lr = lr;
    for (int t = 0; t < T; ++t) {
      const void *gq[64];
      for (int q = 0; q < W; ++q) gq[q] = (const char *)hg[q] + goff[t];
      loom_ref_optim_reduce(k->gt, W, gq, n[t], k->average ? (double)W : 1.0, scale, g);
      hp.weight_decay = wds[t];
      if (k->lamb) loom_ref_lamb_step(&hp, step, n[t], ref.p[t], ref.m[t], ref.v[t], g, NULL);
      else loom_ref_adam_step(&hp, step, n[t], ref.p[t], ref.m[t], ref.v[t], g);
    }
  }
  CUDA_OK(cudaStreamSynchronize(s));
  LOOM_OK(loom_comm_get_async_error(comm));

  /* the parameters (every element), the state of this rank (its slices) */
  {
    int32_t step_dev = -1;
    CUDA_OK(cudaMemcpy(&step_dev, info.step, sizeof step_dev, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(step_dev, k->steps);
    CUDA_OK(cudaMemcpy(hbuf, d_params, pbytes, cudaMemcpyDeviceToHost));
    hstate = (float *)malloc((size_t)(info.state_elems > 0 ? info.state_elems : 1) * sizeof(float) * 3);
    float *hm = hstate, *hv = hstate + info.state_elems, *hms = hstate + 2 * info.state_elems;
    CUDA_OK(cudaMemcpy(hm, info.exp_avg, (size_t)info.state_elems * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hv, info.exp_avg_sq, (size_t)info.state_elems * sizeof(float), cudaMemcpyDeviceToHost));
    if (info.master)
      CUDA_OK(cudaMemcpy(hms, info.master, (size_t)info.state_elems * sizeof(float), cudaMemcpyDeviceToHost));
    /* fp32 drift over the steps: each step's update (about lr) is exact to
     * ~1e-6 relative and the master rounds to fp32 */
    const double mtol = 2e-6 + (double)k->steps * 2e-8 * (k->lamb ? 10 : 1);
    const double prel = k->pt == BF ? 1.0 / 256 : k->pt == FH ? 1.0 / 1024 : 2e-6;
    size_t bad = 0;
    for (int t = 0; t < T; ++t) {
      for (int64_t i = 0; i < n[t]; ++i) got[i] = loom_ref_load(k->pt, (char *)hbuf + poff[t], (size_t)i);
      bad += check_close("param", rank, t, got, ref.p[t], n[t], prel, mtol);
      int64_t lo, hi, so;
      LOOM_OK(loom_optim_tensor_state(plan, t, &lo, &hi, &so));
      int64_t elo, ehi;
      loom__optim_rank_range(n[t], W, rank, loom__optim_tensor_is_ar((int)k->form, n[t]), &elo, &ehi);
      CHECK_EQ_INT(lo, elo);
      CHECK_EQ_INT(hi, ehi);
      for (int64_t i = lo; i < hi; ++i) got[i - lo] = hm[so + i - lo];
      bad += check_close("exp_avg", rank, t, got, ref.m[t] + lo, hi - lo, 1e-4, 1e-5);
      for (int64_t i = lo; i < hi; ++i) got[i - lo] = hv[so + i - lo];
      bad += check_close("exp_avg_sq", rank, t, got, ref.v[t] + lo, hi - lo, 1e-4, 1e-6);
      if (info.master) {
        for (int64_t i = lo; i < hi; ++i) got[i - lo] = hms[so + i - lo];
        bad += check_close("master", rank, t, got, ref.p[t] + lo, hi - lo, 2e-6, mtol);
      }
    }
    if (bad) loom_test_fail(__FILE__, __LINE__, "rank %d: %zu elements out of tolerance", rank, bad);
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (s) cudaStreamSynchronize(s);
  if (loom_test_failures != fails0) dump_signals(comm, plan);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (d_grads) CHECK_RESULT(loom_free(comm, d_grads), LOOM_SUCCESS);
  if (d_params) {
    if (params_sym) CHECK_RESULT(loom_free(comm, d_params), LOOM_SUCCESS);
    else cudaFree(d_params);
  }
  cudaFree(d_scalars);
  if (s) cudaStreamDestroy(s);
  for (int t = 0; t < T; ++t) free(ref.p[t]), free(ref.m[t]), free(ref.v[t]);
  for (int q = 0; q < 64; ++q) cudaFreeHost(hg[q]);
  cudaFreeHost(h_sc);
  free(hbuf), free(g), free(got), free(hstate);
  return loom_test_failures != fails0;
}

static int run_case_v(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *k) {
  return run_case(ctx, comm, (const optim_case_t *)k);
}

static void run_suite(int W, const optim_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 30000, run_case_v, NULL};
  loom_case_suite_run(W, LAUNCH_TIMEOUT_S, &su);
}

/* The suite as W ranks on one GPU (a loom world: every form runs there). */
static void run_world(int W, const optim_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 30000, run_case_v, NULL};
  if (loom_test_gpus(1)) loom_case_suite_run_world(W, LAUNCH_TIMEOUT_S, &su);
}

#define N(a) ((int)(sizeof a / sizeof *a))

/* lamb, pt, gt, form, list, steps, wd, per_tensor_wd, decoupled, bc, average, nvlamb, scale, lr_dev, graph,
 * misalign, chunk */
static const optim_case_t g_adam[] = {
    /* every dtype pair, AUTO, AdamW */
    {0, F32, F32, AUTO, LIST_ODD, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, F32, BF, AUTO, LIST_SMALL, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, F32, FH, AUTO, LIST_SMALL, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, BF, F32, AUTO, LIST_SMALL, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, BF, BF, AUTO, LIST_ODD, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, BF, FH, AUTO, LIST_SMALL, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, FH, F32, AUTO, LIST_SMALL, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, FH, BF, AUTO, LIST_SMALL, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, FH, FH, AUTO, LIST_ODD, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    /* both forms everywhere, small chunks, options */
    {0, BF, BF, RS, LIST_ODD, 3, 0.0f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 64},
    {0, BF, BF, AR, LIST_ODD, 3, 0.1f, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},     /* L2, sum of the gradients */
    {0, F32, F32, RS, LIST_SMALL, 3, 0.1f, 1, 1, 0, 1, 0, 1, 1, 0, 0, 8}, /* no bias correction, scale, device lr */
    {0, F32, BF, RS, LIST_ODD, 2, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 1, 0},   /* misaligned: element by element */
    {0, BF, FH, AR, LIST_ONE, 4, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},    /* one element */
    {0, F32, F32, RS, LIST_ONE, 4, 0.01f, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0},
    /* graph replays with a device lr */
    {0, BF, BF, AUTO, LIST_SMALL, 4, 0.01f, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0},
    {0, F32, F32, RS, LIST_ODD, 3, 0.01f, 0, 1, 1, 1, 0, 0, 1, 1, 0, 256},
    /* a BERT-large-like list */
    {0, BF, BF, AUTO, LIST_BERT, 2, 0.01f, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},
};

static const optim_case_t g_lamb[] = {
    {1, F32, F32, AUTO, LIST_ODD, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {1, BF, BF, AUTO, LIST_ODD, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {1, FH, BF, RS, LIST_SMALL, 3, 0.01f, 1, 1, 1, 1, 0, 0, 0, 0, 0, 64}, /* per-tensor wd: ratio lr where 0 */
    {1, BF, F32, RS, LIST_ODD, 3, 0.0f, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0},    /* nvlamb */
    {1, F32, FH, AR, LIST_SMALL, 3, 0.1f, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0},  /* L2, no bias correction, sum, scaled */
    {1, F32, BF, RS, LIST_ODD, 2, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 1, 8},   /* misaligned, tiny chunks */
    {1, BF, BF, RS, LIST_ONE, 3, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {1, BF, BF, AUTO, LIST_SMALL, 4, 0.01f, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0}, /* graph */
    {1, BF, BF, AUTO, LIST_BERT, 2, 0.01f, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},
};

static const optim_case_t g_long[] = {
    {0, BF, BF, AUTO, LIST_SMALL, 1000, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {1, BF, BF, AUTO, LIST_SMALL, 1000, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
    {0, F32, F32, RS, LIST_SMALL, 1000, 0.01f, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0},
};

LOOM_TEST(gpu_optim_adam_matches_reference_w1) {
  if (loom_test_gpus(1)) run_suite(1, g_adam, N(g_adam));
}
LOOM_TEST(gpu_optim_adam_matches_reference_w2) {
  if (loom_test_gpus(2)) run_suite(2, g_adam, N(g_adam));
}
LOOM_TEST(gpu_optim_lamb_matches_reference_w1) {
  if (loom_test_gpus(1)) run_suite(1, g_lamb, N(g_lamb));
}
LOOM_TEST(gpu_optim_lamb_matches_reference_w2) {
  if (loom_test_gpus(2)) run_suite(2, g_lamb, N(g_lamb));
}
LOOM_TEST(gpu_optim_thousand_steps_w1) {
  if (loom_test_gpus(1)) run_suite(1, g_long, N(g_long));
}
LOOM_TEST(gpu_optim_thousand_steps_w2) {
  if (loom_test_gpus(2)) run_suite(2, g_long, N(g_long));
}
LOOM_WORLD_TESTS(gpu_world_optim_adam_matches_reference, run_world, g_adam, N(g_adam))
LOOM_WORLD_TESTS(gpu_world_optim_lamb_matches_reference, run_world, g_lamb, N(g_lamb))
/* the 1000-step soak as 4 ranks on one GPU */
LOOM_TEST(gpu_world_optim_thousand_steps_w4) { run_world(4, g_long, N(g_long)); }

/* found_inf skips a step; grad_nonfinite reports an inf gradient. */
static int rank_skip(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  char *dp = NULL, *dg = NULL;
  float *dsc = NULL;
  int *dflag = NULL;
  const int64_t n[2] = {1000, 5};
  void *params[2], *grads[2];
  float hp0[1005], hp1[1005];
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  LOOM_OK(loom_malloc(comm, 1024 * 4 * 2, (void **)&dp));
  LOOM_OK(loom_malloc(comm, 1024 * 4 * 2, (void **)&dg));
  CUDA_OK(cudaMalloc((void **)&dsc, sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&dflag, sizeof(int)));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  params[0] = dp, params[1] = dp + 4096, grads[0] = dg, grads[1] = dg + 4096;
  for (int lamb = 0; lamb <= 1; ++lamb) {
    /* fresh parameters (the same on every rank) and gradients */
    float h[1024];
    loom_ref_fill_random(F32, h, 1024, seed_for(0, 0, 0), 1.0);
    CUDA_OK(cudaMemcpy(dp, h, 4000, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dp + 4096, h, 20, cudaMemcpyHostToDevice));
    loom_ref_fill_random(F32, h, 1024, seed_for(1, ctx->rank, 0), 1.0);
    CUDA_OK(cudaMemcpy(dg, h, 4000, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dg + 4096, h, 20, cudaMemcpyHostToDevice));
    loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
    d.world_size = W, d.num_tensors = 2, d.params = params, d.grads = grads, d.numels = n;
    d.form = RS;
    LOOM_OK(lamb ? loom_plan_lamb(comm, &d, &plan) : loom_plan_adam(comm, &d, &plan));
    loom_optim_plan_info_t info = LOOM_OPTIM_PLAN_INFO_INIT;
    LOOM_OK(loom_optim_plan_info(plan, &info));
    loom_optim_args_t a = LOOM_OPTIM_ARGS_INIT;
    a.found_inf = dsc;
    a.grad_nonfinite = dflag;
    const float one = 1.0f, zero = 0.0f;
    CUDA_OK(cudaMemset(dflag, 0, sizeof(int)));
    CUDA_OK(cudaMemcpy(hp0, dp, 4000, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(dsc, &one, 4, cudaMemcpyHostToDevice));
    LOOM_OK(lamb ? loom_lamb_step(plan, &a, s) : loom_adam_step(plan, &a, s));
    CUDA_OK(cudaStreamSynchronize(s));
    LOOM_OK(loom_comm_get_async_error(comm));
    CUDA_OK(cudaMemcpy(hp1, dp, 4000, cudaMemcpyDeviceToHost));
    CHECK(memcmp(hp0, hp1, 4000) == 0); /* skipped: nothing changed */
    int32_t st = -1;
    CUDA_OK(cudaMemcpy(&st, info.step, 4, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(st, 0);
    /* a real step: the parameters move, the step counter advances, no flag */
    CUDA_OK(cudaMemcpy(dsc, &zero, 4, cudaMemcpyHostToDevice));
    LOOM_OK(lamb ? loom_lamb_step(plan, &a, s) : loom_adam_step(plan, &a, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(hp1, dp, 4000, cudaMemcpyDeviceToHost));
    CHECK(memcmp(hp0, hp1, 4000) != 0);
    CUDA_OK(cudaMemcpy(&st, info.step, 4, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(st, 1);
    int flag = -1;
    CUDA_OK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(flag, 0);
    /* loom_optim_set_step, then an inf gradient on rank 0: the flag on every rank */
    LOOM_OK(loom_optim_set_step(plan, 41, s));
    if (ctx->rank == 0) {
      const float inf = INFINITY;
      CUDA_OK(cudaMemcpy(dg + 4 * 999, &inf, 4, cudaMemcpyHostToDevice));
    }
    LOOM_OK(lamb ? loom_lamb_step(plan, &a, s) : loom_adam_step(plan, &a, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(&st, info.step, 4, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(st, 42);
    CUDA_OK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
    /* every rank sees it, not only the owner of element 999's slice (a
     * training loop that skips the step on the flag stays in step) */
    CHECK_EQ_INT(flag, 1);
    /* a finite step after it: no flag (the earlier step's mark is an older epoch) */
    CUDA_OK(cudaMemset(dflag, 0, sizeof(int)));
    if (ctx->rank == 0) {
      const float fin = 0.5f;
      CUDA_OK(cudaMemcpy(dg + 4 * 999, &fin, 4, cudaMemcpyHostToDevice));
    }
    LOOM_OK(lamb ? loom_lamb_step(plan, &a, s) : loom_adam_step(plan, &a, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(flag, 0);
    LOOM_OK(loom_plan_destroy(plan));
    plan = NULL;
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (dp) CHECK_RESULT(loom_free(comm, dp), LOOM_SUCCESS);
  if (dg) CHECK_RESULT(loom_free(comm, dg), LOOM_SUCCESS);
  cudaFree(dsc), cudaFree(dflag);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_optim_found_inf_skips_and_nonfinite_is_reported_w1) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_skip, NULL), 0);
}
LOOM_TEST(gpu_optim_found_inf_skips_and_nonfinite_is_reported_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_skip, NULL), 0);
}

/* Argument errors are named before anything is launched. */
static int rank_bad_args(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size, rank = ctx->rank;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  char *sym = NULL, *plain = NULL;
  const int64_t n[2] = {100, 30};
  void *params[2], *grads[2];
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  LOOM_OK(loom_malloc(comm, 4096, (void **)&sym));
  CUDA_OK(cudaMalloc((void **)&plain, 4096));
  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  d.world_size = W, d.num_tensors = 2, d.params = params, d.grads = grads, d.numels = n;
  d.form = RS;
  /* plain cudaMalloc gradients */
  params[0] = sym, params[1] = sym + 512, grads[0] = plain, grads[1] = sym + 1024;
  CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->grads[0]=");
  CHECK_MSG("loom_malloc");
  /* plain RS parameters */
  params[0] = sym, params[1] = plain, grads[0] = sym + 1024, grads[1] = sym + 2048;
  CHECK_RESULT(loom_plan_lamb(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->params[1]=");
  /* ... which AR-Opt takes */
  d.form = AR;
  LOOM_OK(loom_plan_adam(comm, &d, &plan));
  LOOM_OK(loom_plan_destroy(plan));
  plan = NULL;
  d.form = RS;
  /* a host pointer */
  {
    static float host[128];
    params[0] = host, params[1] = sym, grads[0] = sym + 1024, grads[1] = sym + 2048;
    CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("desc->params[0]=");
  }
  /* a gradient running past its allocation */
  params[0] = sym, params[1] = sym + 512, grads[0] = sym + 1024, grads[1] = sym + 4000;
  CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->grads[1]=");
  /* a bad description field */
  grads[1] = sym + 2048;
  d.beta2 = 1.5f;
  CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->beta2=1.5");
  d.beta2 = 0.999f;
  /* the wrong plan kind, bad call arguments */
  LOOM_OK(loom_plan_adam(comm, &d, &plan));
  CHECK_RESULT(loom_lamb_step(plan, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not a lamb plan");
  {
    loom_optim_args_t a = LOOM_OPTIM_ARGS_INIT;
    a.struct_size = 3;
    CHECK_RESULT(loom_adam_step(plan, &a, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("args->struct_size=3");
    static float host_lr = 1e-3f;
    a = (loom_optim_args_t)LOOM_OPTIM_ARGS_INIT;
    a.lr = &host_lr;
    CHECK_RESULT(loom_adam_step(plan, &a, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("args->lr=");
  }
  {
    int64_t lo, hi, so;
    CHECK_RESULT(loom_optim_tensor_state(plan, 2, &lo, &hi, &so), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("tensor=2");
    CHECK_RESULT(loom_optim_set_step(plan, -1, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("step=-1");
  }
  LOOM_OK(loom_plan_destroy(plan));
  plan = NULL;
  if (W > 1) {
    /* one rank's tensors refused: every rank fails, none hangs */
    grads[0] = rank == 1 ? plain : sym + 1024;
    CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(rank == 1 ? "desc->grads[0]=" : "another rank refused");
    grads[0] = sym + 1024;
    /* descriptions that differ between ranks */
    const int64_t n1[2] = {100, rank == 1 ? 31 : 30};
    d.numels = n1;
    CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("descriptions differ");
    d.numels = n;
    /* another offset on one rank */
    grads[1] = sym + (rank == 1 ? 2048 + 256 : 2048);
    CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("descriptions differ");
    grads[1] = sym + 2048;
    /* a description only one rank refuses (its own check, before the
     * agreement): every rank fails, none waits for the refusing one */
    d.beta1 = rank == 1 ? 1.5f : 0.9f;
    CHECK_RESULT(loom_plan_adam(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(rank == 1 ? "beta1" : "another rank refused");
    CHECK_RESULT(loom_plan_lamb(comm, &d, &plan), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(rank == 1 ? "beta1" : "another rank refused");
    d.beta1 = 0.9f;
  }
out:
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (sym) CHECK_RESULT(loom_free(comm, sym), LOOM_SUCCESS);
  cudaFree(plain);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_optim_bad_arguments_are_named_w1) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}
LOOM_TEST(gpu_optim_bad_arguments_are_named_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}

/* Rank 1 never steps: rank 0's step gives up after the timeout, names the
 * wait, and the next call reports it. */
static int rank_absent_peer(loom_rank_ctx_t *ctx, void *arg) {
  const int lamb = arg != NULL;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  char *buf = NULL;
  const int64_t n[1] = {5000};
  void *params[1], *grads[1];
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  LOOM_OK(loom_malloc(comm, 2 * 5000 * 4, (void **)&buf));
  CUDA_OK(cudaMemset(buf, 0, 2 * 5000 * 4));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  params[0] = buf, grads[0] = buf + 5000 * 4;
  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  d.world_size = ctx->size, d.num_tensors = 1, d.params = params, d.grads = grads, d.numels = n;
  LOOM_OK(lamb ? loom_plan_lamb(comm, &d, &plan) : loom_plan_adam(comm, &d, &plan));
  if (ctx->rank == 0) {
    LOOM_OK(lamb ? loom_lamb_step(plan, NULL, s) : loom_adam_step(plan, NULL, s));
    CUDA_OK(cudaStreamSynchronize(s)); /* returns: every wait is bounded */
    CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_ERR_TIMEOUT);
    CHECK_MSG("optimizer step");
    printf("  rank 0: %s\n", loom_last_error());
    CHECK_RESULT(lamb ? loom_lamb_step(plan, NULL, s) : loom_adam_step(plan, NULL, s), LOOM_ERR_TIMEOUT);
  } else {
    sleep(2);
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (buf) CHECK_RESULT(loom_free(comm, buf), LOOM_SUCCESS);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_optim_adam_absent_peer_times_out_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}
LOOM_TEST(gpu_optim_lamb_absent_peer_times_out_w2) {
  static int one = 1;
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, &one), 0);
}
/* both as 3 ranks on one GPU, ranks 1 and 2 absent (a world each) */
LOOM_TEST(gpu_world_optim_absent_peer_times_out_w3) {
  static int one = 1;
  if (!loom_test_gpus(1)) return;
  CHECK_EQ_INT(loom_launch_world(3, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
  CHECK_EQ_INT(loom_launch_world(3, LAUNCH_TIMEOUT_S, rank_absent_peer, &one), 0);
}

/* ---- update-only plans ------------------------------------------------------------------------ */

/* The update without communication (loom__optim_update_plan: the benchmarks' "NCCL, then update"
 * baseline) on each rank's own cudaMalloc memory, at an offset of `rank` elements (rank 1's is not
 * 16-byte aligned; in a world, every rank's memory lies elsewhere): the plan is made on every rank
 * (nothing of a rank's own memory is agreed on), and one Adam and one LAMB step each equal the
 * reference on this rank's gradient, averaged over W. */
static int rank_update_only(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size, rank = ctx->rank;
  const int64_t n = 5003;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  float *dbuf = NULL, *hp0 = NULL, *hg = NULL, *hout = NULL;
  double *p = NULL, *m = NULL, *v = NULL, *g = NULL, *got = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&dbuf, (size_t)(2 * n + 16) * sizeof(float)));
  hp0 = (float *)malloc((size_t)n * sizeof(float)), hg = (float *)malloc((size_t)n * sizeof(float));
  hout = (float *)malloc((size_t)n * sizeof(float));
  p = (double *)malloc((size_t)n * sizeof(double)), m = (double *)calloc((size_t)n, sizeof(double));
  v = (double *)calloc((size_t)n, sizeof(double)), g = (double *)malloc((size_t)n * sizeof(double));
  got = (double *)malloc((size_t)n * sizeof(double));
  if (!hp0 || !hg || !hout || !p || !m || !v || !g || !got) goto out;
  float *dp = dbuf + rank, *dg = dbuf + 8 + n + rank;
  void *params[1] = {dp}, *grads[1] = {dg};
  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  d.world_size = W, d.num_tensors = 1, d.params = params, d.grads = grads, d.numels = &n;
  d.form = AR, d.weight_decay = 0.01f;
  loom_ref_optim_hp_t hp = {1e-3, d.beta1, d.beta2, d.eps, 0.01, 1, 1, 0};
  for (int lamb = 0; lamb < 2; ++lamb) {
    loom_ref_fill_random(F32, hp0, (size_t)n, seed_for(-1, 0, lamb), 1.0);
    loom_ref_fill_random(F32, hg, (size_t)n, seed_for(1, rank, lamb), 1e-2);
    CUDA_OK(cudaMemcpy(dp, hp0, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dg, hg, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    LOOM_OK(loom__optim_update_plan(comm, &d, lamb, &plan));
    LOOM_OK(lamb ? loom_lamb_step(plan, NULL, s) : loom_adam_step(plan, NULL, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(hout, dp, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    LOOM_OK(loom_plan_destroy(plan));
    plan = NULL;
    const void *gq[1] = {hg};
    loom_ref_optim_reduce(F32, 1, gq, n, (double)W, 1.0, g);
    for (int64_t i = 0; i < n; ++i) p[i] = hp0[i], m[i] = v[i] = 0, got[i] = hout[i];
    if (lamb) loom_ref_lamb_step(&hp, 1, n, p, m, v, g, NULL);
    else loom_ref_adam_step(&hp, 1, n, p, m, v, g);
    CHECK_EQ_INT((int)check_close(lamb ? "lamb update-only p" : "adam update-only p", rank, 0, got, p, n, 1e-5, 1e-6),
                 0);
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (dbuf) cudaFree(dbuf);
  if (s) cudaStreamDestroy(s);
  free(hp0), free(hg), free(hout), free(p), free(m), free(v), free(g), free(got);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_optim_update_only_plans_on_each_ranks_own_memory_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_update_only, NULL), 0);
}
static void run_update_only_world(int W, int unused) {
  (void)unused;
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(W, LAUNCH_TIMEOUT_S, rank_update_only, NULL), 0);
}
LOOM_WORLD_TESTS(gpu_world_optim_update_only_plans_on_each_ranks_own_memory, run_update_only_world, 0)
