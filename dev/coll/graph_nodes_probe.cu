/*
 * graph_nodes_probe.cu - what a loom collective call costs inside a CUDA
 * graph, and how much of it is the event every call records. Each loom call
 * ends by recording the plan's `done` event (loom__call_exit, so that
 * loom_plan_destroy can wait for the last call), and under capture that is
 * an external event-record node after every kernel node. The question: how
 * much of the per-call time of a graph of calls (loom-bench's "/graph" rows)
 * is that node, and how much is the kernel itself.
 *
 *   graph_nodes_probe [W] [reps]     (W ranks, one GPU each; default 1 and 50)
 *
 * Per op (AllReduce, ReduceScatter, AllGather; each AUTO: LL at these sizes)
 * and size (4 KiB, 64 KiB, 256 KiB of bf16), every rank captures 16 calls
 * into graph A as the library makes them, then builds graph B from A's kernel
 * nodes alone, chained in A's order with A's parameters and plain edges (the same kernels: a
 * call's epoch is read from the plan's device counter, so replays of either
 * are new calls). NCCL's 16 calls captured the same way are the reference.
 * Each graph is replayed `reps` times after 5 warm-ups, every rank's replays
 * back to back (the ranks' kernels wait for each other, so they keep in
 * step); a replay's time is cudaEvent-timed on rank 0, the row its median
 * over 16. Rows: op, size, NCCL us/call, A's nodes and us/call, B's nodes and
 * us/call, and A - B per call (the event node's cost). Then eager: an
 * AllReduce of 4 KiB timed call by call, alone and with one or two more
 * event records after each call: what the record each eager call ends with
 * costs the call's latency.
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

#include "../common/check.cuh"

enum { CALLS = 16, OP_AR = 0, OP_RS = 1, OP_AG = 2, OP_NCCL_AR = 3, OP_NCCL_RS = 4, OP_NCCL_AG = 5 };

typedef struct probe_args {
  int reps;
} probe_args_t;

typedef struct probe_call {
  int op;
  loom_plan_t plan;
  ncclComm_t nccl;
  void *in, *out;
  size_t count;
  int W, rank;
} probe_call_t;

/* One call of c on s. */
static int call_once(const probe_call_t *c, cudaStream_t s) {
  switch (c->op) {
    case OP_AR: LK(loom_allreduce(c->plan, c->in, c->out, NULL, NULL, NULL, s)); break;
    case OP_RS: LK(loom_reduce_scatter(c->plan, c->in, c->out, NULL, NULL, NULL, s)); break;
    case OP_AG: LK(loom_all_gather(c->plan, (char *)c->in + c->rank * c->count / c->W * 2, c->out, s)); break;
    case OP_NCCL_AR:
      if (ncclAllReduce(c->in, c->out, c->count, ncclBfloat16, ncclSum, c->nccl, s) != ncclSuccess) return 1;
      break;
    case OP_NCCL_RS:
      if (ncclReduceScatter(c->in, c->out, c->count / c->W, ncclBfloat16, ncclSum, c->nccl, s) != ncclSuccess) return 1;
      break;
    default:
      if (ncclAllGather((char *)c->in + c->rank * c->count / c->W * 2, c->out, c->count / c->W, ncclBfloat16, c->nccl,
                        s) != ncclSuccess)
        return 1;
  }
  return 0;
}

/* Graph B: the kernel nodes of the chain A, in A's order, chained. *nodes_a, *nodes_b: the counts. */
static int kernels_only(cudaGraph_t a, cudaGraph_t *b, int *nodes_a, int *nodes_b) {
  CK(cudaGraphCreate(b, 0));
  size_t nr = 1;
  cudaGraphNode_t node;
  CK(cudaGraphGetRootNodes(a, &node, &nr));
  if (nr != 1) return fprintf(stderr, "graph A has %zu roots, not a chain\n", nr), 1;
  cudaGraphNode_t prev = NULL;
  *nodes_a = *nodes_b = 0;
  for (;;) {
    ++*nodes_a;
    cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(node, &t));
    if (t == cudaGraphNodeTypeKernel) {
      cudaKernelNodeParams p;
      CK(cudaGraphKernelNodeGetParams(node, &p));
      cudaGraphNode_t nn;
      CK(cudaGraphAddKernelNode(&nn, *b, prev ? &prev : NULL, prev ? 1 : 0, &p));
      prev = nn, ++*nodes_b;
    }
    size_t nd = 0;
    cudaGraphEdgeData edge; /* (programmatic edges, with LOOM_COLL_PDL, are read and dropped: B's are plain) */
    CK(cudaGraphNodeGetDependentNodes(node, NULL, NULL, &nd));
    if (nd == 0) break;
    if (nd != 1) return fprintf(stderr, "graph A branches (%zu dependents)\n", nd), 1;
    CK(cudaGraphNodeGetDependentNodes(node, &node, &edge, &nd));
  }
  return 0;
}

/* The median per call of `reps` replays of g (after 5), in us. */
static int time_graph(cudaGraphExec_t g, cudaStream_t s, int reps, double *us) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) CK(cudaGraphLaunch(g, s));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(g, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  *us = 1000.0 * t[t.size() / 2] / CALLS;
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return 0;
}

/* Captures CALLS calls of c; the graph as captured (a) and its kernels alone (b), each timed. */
static int probe_op(const probe_call_t *c, cudaStream_t s, int reps, double us[2], int nodes[2]) {
  cudaGraph_t a = NULL, b = NULL;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  int bad = 0;
  for (int i = 0; i < CALLS && !bad; ++i) bad = call_once(c, s);
  CK(cudaStreamEndCapture(s, &a));
  if (bad) return 1;
  if (kernels_only(a, &b, &nodes[0], &nodes[1])) return 1;
  cudaGraphExec_t ea, eb;
  CK(cudaGraphInstantiate(&ea, a, 0));
  CK(cudaGraphInstantiate(&eb, b, 0));
  if (time_graph(ea, s, reps, &us[0]) || time_graph(eb, s, reps, &us[1])) return 1;
  CK(cudaGraphExecDestroy(ea));
  CK(cudaGraphExecDestroy(eb));
  CK(cudaGraphDestroy(a));
  CK(cudaGraphDestroy(b));
  return 0;
}

/* One op at one size: the plan, the loom graphs and NCCL's; rank 0 prints the row. */
static int probe_row(loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, int op, size_t bytes, int reps, void *in,
                     void *out) {
  const int W = ctx->size;
  probe_call_t c = {op, NULL, ctx->nccl, in, out, bytes / 2, W, ctx->rank};
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = (int64_t)c.count, d.dtype = LOOM_BF16, d.out_type = LOOM_BF16, d.world_size = W;
  LK(op == OP_AR ? loom_plan_allreduce(comm, &d, &c.plan)
     : op == OP_RS ? loom_plan_reduce_scatter(comm, &d, &c.plan)
                   : loom_plan_all_gather(comm, &d, &c.plan));
  loom_coll_plan_info_t info = LOOM_COLL_PLAN_INFO_INIT;
  LK(loom_coll_plan_info(c.plan, &info));
  double us[2], ref[2];
  int nodes[2], rnodes[2];
  if (probe_op(&c, s, reps, us, nodes)) return 1;
  probe_call_t n = c;
  n.op = op + OP_NCCL_AR;
  if (probe_op(&n, s, reps, ref, rnodes)) return 1;
  LK(loom_plan_destroy(c.plan));
  static const char *names[] = {"allreduce", "reduce_scatter", "all_gather"};
  if (ctx->rank == 0)
    printf("%-15s %7zu KiB  W=%d  algo %d  nccl %6.2f us (%2d nodes)  loom as captured %6.2f us (%2d nodes)  "
           "kernels only %6.2f us (%2d nodes)  event node %5.2f us/call\n",
           names[op], bytes >> 10, W, (int)info.algo, ref[0], rnodes[0], us[0], nodes[0], us[1], nodes[1],
           us[0] - us[1]);
  fflush(stdout);
  return 0;
}

/* Eager: the median of `reps` calls of c, each timed alone between two events (after 5), with `extra`
 * more event records after the call (the cost of the record every eager loom call ends with). */
static int time_eager(const probe_call_t *c, cudaStream_t s, int reps, int extra, double *us) {
  cudaEvent_t e0, e1, x;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
  std::vector<float> t;
  for (int i = 0; i < reps + 5; ++i) {
    float ms = 0;
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    if (call_once(c, s)) return 1;
    for (int k = 0; k < extra; ++k) CK(cudaEventRecord(x, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 5) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  *us = 1000.0 * t[t.size() / 2];
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaEventDestroy(x));
  return 0;
}

/* Eager AllReduce at 4 KiB: alone, and with one and two more event records after each call. */
static int probe_eager(loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, int reps, void *in, void *out) {
  probe_call_t c = {OP_AR, NULL, ctx->nccl, in, out, 2048, ctx->size, ctx->rank};
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 2048, d.dtype = LOOM_BF16, d.out_type = LOOM_BF16, d.world_size = ctx->size;
  LK(loom_plan_allreduce(comm, &d, &c.plan));
  double t[3];
  for (int extra = 0; extra < 3; ++extra)
    if (time_eager(&c, s, reps, extra, &t[extra])) return 1;
  LK(loom_plan_destroy(c.plan));
  if (ctx->rank == 0)
    printf("eager allreduce 4 KiB  W=%d  alone %6.2f us  + 1 event record %6.2f us  + 2 %6.2f us: %5.2f us per record\n",
           ctx->size, t[0], t[1], t[2], (t[2] - t[0]) / 2);
  return 0;
}

static int probe_rank(loom_rank_ctx_t *ctx, void *arg) {
  const probe_args_t *a = (const probe_args_t *)arg;
  loom_comm_t comm = NULL;
  LK(loom_launch_comm_create(ctx, NULL, &comm));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t maxb = (size_t)256 << 10;
  void *in = NULL, *out = NULL;
  LK(loom_malloc(comm, maxb, &in));
  CK(cudaMalloc(&out, maxb));
  CK(cudaMemset(in, 0, maxb));
  const size_t sizes[] = {(size_t)4 << 10, (size_t)64 << 10, (size_t)256 << 10};
  for (int op = OP_AR; op <= OP_AG; ++op)
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; ++i)
      if (probe_row(ctx, comm, s, op, sizes[i], a->reps, in, out)) return 1;
  if (probe_eager(ctx, comm, s, a->reps, in, out)) return 1;
  CK(cudaStreamSynchronize(s));
  LK(loom_free(comm, in));
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
  LK(loom_comm_destroy(comm));
  return 0;
}

int main(int argc, char **argv) {
  const int W = argc > 1 ? atoi(argv[1]) : 1;
  probe_args_t a = {argc > 2 ? atoi(argv[2]) : 50};
  if (W < 1 || a.reps < 1) return fprintf(stderr, "usage: graph_nodes_probe [W >= 1] [reps >= 1]\n"), 2;
  return loom_launch(W, 300, probe_rank, &a);
}
