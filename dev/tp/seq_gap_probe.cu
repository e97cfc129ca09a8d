/*
 * seq_gap_probe.cu - where loom's sequential tensor-parallel path loses the
 * 1-5 us it measures against the same NCCL + cuBLASLt calls made directly
 * (loom-bench ag_gemm / gemm_rs: the loom-auto:sequential rows against the
 * seq column). Both issue the same two things: NCCL's all-gather (AG) or
 * reduce-scatter (RS) on the same communicator and loom__base_gemm on the
 * same cuBLASLt cache entry (its algorithm timed first, for the whole shape
 * and for a shard's rows). The question is whether the gap is on the device
 * or is host time showing through.
 *
 *   seq_gap_probe [reps]      (one rank per GPU, every GPU present; default 30)
 *
 * Per shape, each variant is timed three ways, CALLS calls at a time, the
 * median over `reps` of the time per call:
 *   graph   CALLS calls captured into one CUDA graph, replayed (no host time)
 *   batch   CALLS calls issued back to back between two events (host time
 *           shows where issuing a call takes longer than running it)
 *   single  one call between two events, the stream drained between calls
 * Variants: "bare" (loom_bench_base_* calls, as loom-bench's seq column),
 * "loom-seq" (loom_ag_gemm / loom_gemm_rs, LOOM_TP_SEQUENTIAL), "loom-dec"
 * (LOOM_TP_DECOMPOSED). Rank 0 prints one row per shape and way.
 */
#include <algorithm>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "loom.h"
#include "support/launch.h"
#include "testing/bench_api.h"

#include "../common/check.cuh"

enum { CALLS = 8, V_BARE = 0, V_SEQ = 1, V_DEC = 2, NV = 3 };
static const char *const vname[NV] = {"bare", "loom-seq", "loom-dec"};

typedef struct shape {
  const char *name;
  int ag;
  int64_t m, n, k;
} shape_t;

/* Shapes where loom-bench saw the gap (2x H200, W = 2). */
static const shape_t g_shapes[] = {
    {"Qwen3-30B-A3B/o tp2 m=64 RS", 0, 64, 2048, 2048},
    {"Qwen3-235B-A22B/o tp8 m=512 RS", 0, 512, 4096, 1024},
    {"Qwen3-235B-A22B/qkv tp4 m=512 AG", 1, 512, 2304, 4096},
    {"DeepSeek-V3/kv_b tp2 m=512 AG", 1, 512, 16384, 512},
    {"Llama-3-8B/ffn_up tp8 m=64 AG", 1, 64, 3584, 4096},
};

typedef struct bufs {
  const shape_t *sh;
  int W, rank;
  int64_t S;
  ncclComm_t nccl;
  loom_plan_t plan[NV];
  void *a, *a_full, *b, *c, *partial;
} bufs_t;

static int call_once(const bufs_t *x, int v, cudaStream_t s) {
  const shape_t *sh = x->sh;
  if (v != V_BARE) {
    LK(sh->ag ? loom_ag_gemm(x->plan[v], x->a, x->b, x->c, NULL, NULL, s)
              : loom_gemm_rs(x->plan[v], x->a, x->b, x->c, NULL, s));
    return 0;
  }
  loom_gemm_desc_t d = LOOM_GEMM_DESC(sh->m, sh->n, sh->k, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  if (sh->ag) {
    LK(loom_bench_base_allgather(x->nccl, x->a, x->a_full, (size_t)(x->S * sh->k), LOOM_BF16, s));
    LK(loom_bench_base_gemm(&d, x->a_full, x->b, x->c, NULL, s));
  } else {
    LK(loom_bench_base_gemm(&d, x->a, x->b, x->partial, NULL, s));
    LK(loom_bench_base_reducescatter(x->nccl, x->partial, x->c, (size_t)(x->S * sh->n), LOOM_BF16, s));
  }
  return 0;
}

static double median(std::vector<float> &t) {
  std::sort(t.begin(), t.end());
  return 1000.0 * t[t.size() / 2];
}

/* way 0 graph, 1 batch, 2 single: the median us per call. */
static int time_way(const bufs_t *x, int v, int way, cudaStream_t s, int reps, double *us) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  cudaGraphExec_t g = NULL;
  if (way == 0) {
    cudaGraph_t gr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int bad = 0;
    for (int i = 0; i < CALLS && !bad; ++i) bad = call_once(x, v, s);
    CK(cudaStreamEndCapture(s, &gr));
    if (bad) return 1;
    CK(cudaGraphInstantiate(&g, gr, 0));
    CK(cudaGraphDestroy(gr));
  }
  for (int r = 0; r < reps + 3; ++r) {
    float ms = 0;
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    if (way == 0) CK(cudaGraphLaunch(g, s));
    for (int i = 0; way != 0 && i < (way == 1 ? CALLS : 1); ++i)
      if (call_once(x, v, s)) return 1;
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) t.push_back(ms / (way == 2 ? 1 : CALLS));
  }
  *us = median(t);
  if (g) CK(cudaGraphExecDestroy(g));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return 0;
}

static int probe_shape(loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, const shape_t *sh, int reps) {
  bufs_t x;
  memset(&x, 0, sizeof x);
  x.sh = sh, x.W = ctx->size, x.rank = ctx->rank, x.nccl = ctx->nccl;
  x.S = (sh->m + x.W - 1) / x.W;
  const size_t Wrows = (size_t)(x.S * x.W);
  CK(cudaMalloc(&x.a, (size_t)(sh->ag ? x.S : sh->m) * (size_t)sh->k * 2));
  CK(cudaMalloc(&x.a_full, Wrows * (size_t)sh->k * 2));
  CK(cudaMalloc(&x.b, (size_t)(sh->n * sh->k) * 2));
  CK(cudaMalloc(&x.c, (size_t)(sh->ag ? sh->m : x.S) * (size_t)sh->n * 2));
  CK(cudaMalloc(&x.partial, Wrows * (size_t)sh->n * 2));
  CK(cudaMemset(x.a, 0x3c, (size_t)(sh->ag ? x.S : sh->m) * (size_t)sh->k * 2));
  CK(cudaMemset(x.b, 0x3c, (size_t)(sh->n * sh->k) * 2));
  for (int v = V_SEQ; v < NV; ++v) {
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = sh->m, d.n = sh->n, d.k = sh->k, d.b_layout = LOOM_B_NK, d.world_size = x.W;
    d.transfer = v == V_SEQ ? LOOM_TP_SEQUENTIAL : LOOM_TP_DECOMPOSED;
    LK(sh->ag ? loom_plan_ag_gemm(comm, &d, &x.plan[v]) : loom_plan_gemm_rs(comm, &d, &x.plan[v]));
  }
  /* cuBLASLt's algorithms timed once for the whole shape and a shard's rows
   * (the entries every variant's GEMMs then take) */
  float ms = 0;
  loom_gemm_desc_t d = LOOM_GEMM_DESC(sh->m, sh->n, sh->k, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  LK(loom_bench_base_gemm_tune(&d, sh->ag ? x.a_full : x.a, x.b, sh->ag ? x.c : x.partial, NULL, 8, s, &ms));
  d.m = x.S;
  LK(loom_bench_base_gemm_tune(&d, x.a, x.b, sh->ag ? x.c : x.partial, NULL, 8, s, &ms));
  double us[3][NV];
  for (int way = 0; way < 3; ++way)
    for (int v = 0; v < NV; ++v)
      if (time_way(&x, v, way, s, reps, &us[way][v])) return 1;
  static const char *const ways[3] = {"graph", "batch", "single"};
  if (ctx->rank == 0)
    for (int way = 0; way < 3; ++way)
      printf("%-34s W=%d %-6s  %s %7.2f  %s %7.2f (%+5.2f)  %s %7.2f (%+6.2f) us/call\n", sh->name, x.W, ways[way],
             vname[V_BARE], us[way][V_BARE], vname[V_SEQ], us[way][V_SEQ], us[way][V_SEQ] - us[way][V_BARE],
             vname[V_DEC], us[way][V_DEC], us[way][V_DEC] - us[way][V_BARE]);
  fflush(stdout);
  for (int v = V_SEQ; v < NV; ++v) LK(loom_plan_destroy(x.plan[v]));
  cudaFree(x.a), cudaFree(x.a_full), cudaFree(x.b), cudaFree(x.c), cudaFree(x.partial);
  return 0;
}

static int rank_main(loom_rank_ctx_t *ctx, void *arg) {
  const int reps = *(const int *)arg;
  loom_comm_t comm = NULL;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  LK(loom_launch_comm_create(ctx, NULL, &comm));
  int bad = 0;
  for (size_t i = 0; i < sizeof g_shapes / sizeof *g_shapes && !bad; ++i)
    bad = probe_shape(ctx, comm, s, &g_shapes[i], reps);
  CK(cudaStreamSynchronize(s));
  LK(loom_comm_destroy(comm));
  CK(cudaStreamDestroy(s));
  return bad;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 30;
  if (reps < 1) reps = 30;
  const int W = loom_launch_gpu_count();
  if (W < 1) return fprintf(stderr, "seq_gap_probe: no GPU\n"), 2;
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  return loom_launch(W, 600, rank_main, &reps) == 0 ? 0 : 1;
}
