/*
 * test_lang_run.c - loom programs compiled and run on a GPU (loom_prog_compile,
 * loom_prog_run) in the one-GPU world of W ranks, against the CPU
 * interpreter (src/lang/interp.c):
 *  - every schedule `loom schedules` lists for every example
 *    (examples/lang/), at W = 1, 2, 3, 4 and 8 ranks per group (the
 *    pipeline example on 2 W ranks), with sizes that leave ranks empty
 *    slices and pieces whose k or n is no multiple of 8 (the padded GEMM);
 *    the program's own schedules and the unscheduled program also at a
 *    larger size (several blocks per loop);
 *  - inputs drawn as the interpreter draws them (each rank's piece of each
 *    tensor), outputs poisoned (NaN) before every call, every element of
 *    every output and state this rank holds checked;
 *  - three calls in a row with new inputs (the epochs advance), and the
 *    program's own schedules captured in a CUDA graph and replayed with
 *    new inputs;
 *  - the program as loom's ops one after another ("sequential": its plain
 *    collectives as loom's), as cuBLASLt + NCCL (one process per GPU; at
 *    the vector sizes, whose slices are equal), and untuned (the cost
 *    model's schedule), at the three sizes;
 *  - a rank that never calls: the others' next call returns LOOM_ERR_TIMEOUT
 *    naming the stage that waited;
 *  - argument errors named (a NULL input, a host pointer, an output
 *    overlapping an input);
 *  - the examples' suites and the absent rank also on one process per GPU
 *    (gpu_lang_*_w2: two GPUs, the pipeline as two one-rank stages).
 * The bound: the interpreter computes in double and rounds nothing but Cast;
 * the kernels compute in fp32, inputs and every stored value are rounded to
 * their dtype. An element passes when |gpu - ref| <= tol max(1, |ref|), tol
 * by the narrowest dtype of the program: 2e-4 (FP32), 1.5e-2 (FP16), 6e-2
 * (BF16). Dropout's mask is the same function of the element's index on
 * both sides.
 *
 *   build/tests/loom-test-gpu world_lang     (the one-GPU world's tests)
 *   build/tests/loom-test-gpu gpu_lang_      (two GPUs)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "lang/interp_ops.h"
#include "lang/lang.h"
#include "ref/ref.h"
#include "support/launch.h"
#include "support/prog_io.h"
#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "tests/host/lang/lang_test_util.h"

#define LAUNCH_TIMEOUT_S 1800
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

typedef struct lang_case {
  const char *example;
  const char *small, *large; /* sizes: every listed schedule at `small`, the program's own at `large` */
  const char *vec;           /* and at `vec`: every slice a multiple of 8 at W = 1, 2, 3, 4, 8 (vector loops) */
  int groups;                /* pipeline groups (the world has groups x W ranks) */
} lang_case_t;

static const lang_case_t g_cases[] = {
    {"model_parallel", "B=2,S=3,H=12", "B=4,S=33,H=200", "B=2,S=9,H=960", 1},
    {"adam", "N=13", "N=20011", "N=23040", 1},
    {"lamb", "N=13", "N=20011", "N=23040", 1},
    {"llama_tp", "T=7,H=12,F=20", "T=130,H=96,F=264", "T=24,H=2048,F=960", 1},
    {"pipeline", "B=2,S=3,H=12", "B=4,S=33,H=200", "B=2,S=9,H=960", 2},
    /* the norm's row kept in registers (H = 300, 2 a thread, the second past the row's end in part; H = 2048
     * in vectors of 8) and recomputed in each pass (H = 6000: 24 a thread x (x, w, b) is more than the 64
     * kept) */
    {"layer_norm", "T=7,H=300", "T=33,H=6000", "T=24,H=2048", 1},
};

/* Every element of this rank's outputs against the interpreter (prog_io_bound's bound). */
static void check_outputs(const prog_io_t *b, loom_prog_t q, int W, const char *bind, uint64_t seed, int rank,
                          const char *label) {
  double d;
  int bad;
  CHECK_RESULT(prog_io_check(b, q, W, bind, seed, rank, prog_io_bound(q), label, &d, &bad), LOOM_SUCCESS);
  if (bad) loom_test_fail(__FILE__, __LINE__, "%s, rank %d: %d elements beyond %g (largest difference %g)", label,
                          rank, bad, prog_io_bound(q), d);
}

/* One schedule (q) at this rank: compiled, run `calls` times with new inputs (and, graph, captured and replayed),
 * checked each time. */
static int run_schedule(loom_rank_ctx_t *ctx, loom_comm_t comm, loom_prog_t q, const char *run, int W,
                        const char *bind, int graph, const char *label) {
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  prog_io_t b;
  memset(&b, 0, sizeof b);
  const int before = loom_test_failures, qi = ctx->rank % W;
  LOOM_OK(loom_prog_compile(comm, q, run, bind, &plan));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  LOOM_OK(prog_io_make(plan, &b));
  for (int call = 0; call < 3; ++call) {
    const uint64_t seed = loom_test_seed() + (uint64_t)call * 7919u;
    CHECK(prog_io_fill(&b, qi, seed, s) == 0);
    CHECK(loom_launch_world_sync(ctx)); /* every rank's (pageable) uploads done before any runs */
    LOOM_OK(loom_prog_run(plan, (const void *const *)b.din, b.dout, s));
    CUDA_OK(cudaStreamSynchronize(s));
    LOOM_OK(loom_comm_get_async_error(comm));
    check_outputs(&b, q, W, bind, seed, ctx->rank, label);
  }
  if (graph) {
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    LOOM_OK(loom_prog_run(plan, (const void *const *)b.din, b.dout, s));
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 3; ++rep) {
      const uint64_t seed = loom_test_seed() + 1000003u * (uint64_t)(rep + 1);
      CHECK(prog_io_fill(&b, qi, seed, s) == 0);
      CHECK(loom_launch_world_sync(ctx));
      CUDA_OK(cudaGraphLaunch(ge, s));
      CUDA_OK(cudaStreamSynchronize(s));
      LOOM_OK(loom_comm_get_async_error(comm));
      check_outputs(&b, q, W, bind, seed, ctx->rank, label);
    }
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  prog_io_free(&b);
  if (s) cudaStreamDestroy(s);
  return loom_test_failures != before;
}

/* Every schedule listed for the case's program at its small size, then its own and the unscheduled one at
 * its large and its vector sizes (the own ones also captured in a graph). */
static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *arg) {
  const lang_case_t *c = arg;
  const int W = ctx->size / c->groups;
  loom_prog_t p = lang_load_example(c->example);
  if (!p || loom_prog_check(p) != LOOM_SUCCESS) return 1;
  loom__binding_t bd;
  loom__listing_t l;
  int failed = 0;
  CHECK_RESULT(loom__lang_parse_bind(c->small, &bd), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_list(p, W, &bd, 6, 200, &l), LOOM_SUCCESS);
  for (int i = 0; i < l.n && !failed; ++i) {
    if (l.rows[i].refused) continue;
    loom_prog_t q = lang_apply_prefix(p, l.rows[i].s, l.rows[i].s->n);
    if (q) CHECK_RESULT(loom_prog_check(q), LOOM_SUCCESS);
    char label[200];
    snprintf(label, sizeof label, "%s, schedule %s, W = %d, %s", c->example, l.rows[i].s->name, W, c->small);
    failed = !q || run_schedule(ctx, comm, q, "unscheduled", W, c->small, 0, label);
    loom_prog_destroy(q);
    const int big = l.rows[i].own || !strcmp(l.rows[i].s->name, "unscheduled");
    if (big && !failed) {
      q = lang_apply_prefix(p, l.rows[i].s, l.rows[i].s->n);
      if (q) CHECK_RESULT(loom_prog_check(q), LOOM_SUCCESS);
      snprintf(label, sizeof label, "%s, schedule %s, W = %d, %s", c->example, l.rows[i].s->name, W, c->large);
      failed = !q || run_schedule(ctx, comm, q, "unscheduled", W, c->large, l.rows[i].own, label);
      loom_prog_destroy(q);
    }
    if (big && !failed) {
      q = lang_apply_prefix(p, l.rows[i].s, l.rows[i].s->n);
      snprintf(label, sizeof label, "%s, schedule %s, W = %d, %s", c->example, l.rows[i].s->name, W, c->vec);
      failed = !q || run_schedule(ctx, comm, q, "unscheduled", W, c->vec, l.rows[i].own, label);
      loom_prog_destroy(q);
    }
  }
  /* the program as loom's ops one after another, and (NCCL's ranks) as cuBLASLt + NCCL; untuned, the cost
   * model's schedule: at each size, the large one in a graph */
  const char *runs[3] = {"sequential", ctx->nccl ? "cublaslt+nccl" : NULL, NULL};
  const char *sizes[3] = {c->small, c->large, c->vec};
  for (int k = 0; k < 3 && !failed; ++k)
    for (int z = 0; z < 3 && !failed; ++z) {
      if (k == 1 && !runs[1]) continue;
      char label[200];
      snprintf(label, sizeof label, "%s, %s, W = %d, %s", c->example, runs[k] ? runs[k] : "untuned (cost model)", W,
               sizes[z]);
      /* NCCL's slices are equal: sizes whose rows divide over W */
      const int nccl_ok = k != 1 || z == 2;
      if (nccl_ok) failed = run_schedule(ctx, comm, p, runs[k], W, sizes[z], z == 1, label);
    }
  if (ctx->rank == 0) printf("    %s at W = %d: %d schedules, sequential%s, untuned\n", c->example, W, l.n,
                             ctx->nccl ? ", cublaslt+nccl" : "");
  loom__lang_listing_free(&l);
  loom_prog_destroy(p);
  return failed || loom_test_failures;
}

static void run_world(int W, int which) {
  if (!loom_test_gpus(1)) return;
  const lang_case_t *c = &g_cases[which];
  const loom_case_suite_t su = {c, sizeof *c, 1, 20000, run_case, NULL};
  loom_case_suite_run_world(W * c->groups, LAUNCH_TIMEOUT_S, &su);
}

/* The same on one process per GPU (W x groups GPUs; skipped where fewer are present): the peers'
 * buffers in other GPUs' memory, reached over the link. */
static void run_gpus(int W, int which) {
  const lang_case_t *c = &g_cases[which];
  if (!loom_test_gpus(W * c->groups)) return;
  const loom_case_suite_t su = {c, sizeof *c, 1, 20000, run_case, NULL};
  loom_case_suite_run(W * c->groups, LAUNCH_TIMEOUT_S, &su);
}

/* `MatMul(x, w) + b` folded into the GEMM's bias epilogue (the lowering's choice: k and n whole multiples of
 * 8), tokens sliced so that some ranks hold no rows at W = 8; against the interpreter, three calls, a graph. */
static const char k_linear_bias[] =
    "Tensor x(BF16, [T, H], Sliced(0), WORLD);\n"
    "Tensor w(BF16, [H, F], Replicated, WORLD);\n"
    "Tensor b(BF16, [F], Replicated, WORLD);\n"
    "Var y = MatMul(x, w) + b;\n"
    "Execute linear_bias({x, w, b}, {y});\n";

static int run_linear_bias(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *arg) {
  (void)arg;
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse(k_linear_bias, "linear_bias.loom", &p), LOOM_SUCCESS);
  if (!p || loom_prog_check(p) != LOOM_SUCCESS) return 1;
  const int failed = run_schedule(ctx, comm, p, "unscheduled", ctx->size, "T=13,H=64,F=96", 1,
                                  "MatMul + bias (folded), T = 13");
  loom_prog_destroy(p);
  return failed || loom_test_failures;
}

static void run_linear_bias_world(int W, int unused) {
  (void)unused;
  if (!loom_test_gpus(1)) return;
  const int one = 1;
  const loom_case_suite_t su = {&one, sizeof one, 1, 20000, run_linear_bias, NULL};
  loom_case_suite_run_world(W, LAUNCH_TIMEOUT_S, &su);
}
LOOM_TEST(gpu_world_lang_linear_bias_w1) { run_linear_bias_world(1, 0); }
LOOM_WORLD_TESTS(gpu_world_lang_linear_bias, run_linear_bias_world, 0)

#define LANG_WORLD_TESTS(name, which)                       \
  LOOM_TEST(gpu_world_lang_##name##_w1) { run_world(1, which); } \
  LOOM_WORLD_TESTS(gpu_world_lang_##name, run_world, which)
LANG_WORLD_TESTS(model_parallel, 0)
LANG_WORLD_TESTS(adam, 1)
LANG_WORLD_TESTS(lamb, 2)
LANG_WORLD_TESTS(llama_tp, 3)
LANG_WORLD_TESTS(pipeline, 4)
LANG_WORLD_TESTS(layer_norm, 5)
LOOM_TEST(gpu_lang_model_parallel_w2) { run_gpus(2, 0); }
LOOM_TEST(gpu_lang_adam_w2) { run_gpus(2, 1); }
LOOM_TEST(gpu_lang_lamb_w2) { run_gpus(2, 2); }
LOOM_TEST(gpu_lang_llama_tp_w2) { run_gpus(2, 3); }
LOOM_TEST(gpu_lang_layer_norm_w2) { run_gpus(2, 5); }
LOOM_TEST(gpu_lang_pipeline_two_stages_w2) { run_gpus(1, 4); } /* one rank per stage: the Send crosses GPUs */

/* ---- a rank that never calls; bad arguments ---------------------------------------------------- */

/* A rank of Figure 4's best schedule (B=2,S=3,H=12), compiled, its buffers made and filled. */
typedef struct mp_rank {
  loom_prog_t p;
  loom_comm_t comm;
  loom_plan_t plan;
  cudaStream_t s;
  prog_io_t b;
} mp_rank_t;

static int mp_open(loom_rank_ctx_t *ctx, int timeout_ms, mp_rank_t *m) {
  memset(m, 0, sizeof *m);
  loom_config_t cfg = LOOM_CONFIG_INIT;
  if (timeout_ms) cfg.timeout_ms = timeout_ms;
  m->p = lang_load_example("model_parallel");
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &m->comm), return 1);
  CHECK_LOOM_OR(loom_prog_compile(m->comm, m->p, "best", "B=2,S=3,H=12", &m->plan), return 1);
  CHECK_CUDA_OR(cudaStreamCreateWithFlags(&m->s, cudaStreamNonBlocking), return 1);
  CHECK_LOOM_OR(prog_io_make(m->plan, &m->b), return 1);
  CHECK(prog_io_fill(&m->b, ctx->rank, 5, m->s) == 0);
  return 0;
}

static int mp_close(mp_rank_t *m) {
  if (m->s) cudaStreamSynchronize(m->s);
  if (m->plan) CHECK_RESULT(loom_plan_destroy(m->plan), LOOM_SUCCESS);
  prog_io_free(&m->b);
  if (m->s) cudaStreamDestroy(m->s);
  if (m->comm) CHECK_RESULT(loom_comm_destroy(m->comm), LOOM_SUCCESS);
  loom_prog_destroy(m->p);
  return loom_test_failures;
}

static int run_mp(mp_rank_t *m) {
  return loom_prog_run(m->plan, (const void *const *)m->b.din, m->b.dout, m->s);
}

/* The last rank never calls: the others' waits expire, and their next call names the stage. */
static int rank_absent(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  mp_rank_t m;
  if (mp_open(ctx, 500, &m)) return mp_close(&m) + 1;
  if (ctx->rank != ctx->size - 1) {
    CHECK_RESULT(run_mp(&m), LOOM_SUCCESS);
    CHECK_CUDA_OR(cudaStreamSynchronize(m.s), return mp_close(&m) + 1); /* returns: every wait is bounded */
    CHECK_RESULT(run_mp(&m), LOOM_ERR_TIMEOUT);
    CHECK_MSG("in stage `layerWithAR`");
    if (ctx->rank == 0) printf("  rank 0: %s\n", loom_last_error());
  } else {
    sleep(2);
  }
  return mp_close(&m);
}

LOOM_TEST(gpu_world_lang_absent_rank_times_out_naming_the_stage_w3) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(3, LAUNCH_TIMEOUT_S, rank_absent, NULL), 0);
}

/* A NULL input, a host pointer, an output onto an input, no inputs, an unbound size: each named. */
static int rank_bad_args(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  mp_rank_t m;
  if (mp_open(ctx, 0, &m)) return mp_close(&m) + 1;
  void *keep = m.b.din[1];
  m.b.din[1] = NULL; /* `in`: this rank's slice */
  CHECK_RESULT(run_mp(&m), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("inputs[1] (`in`)");
  m.b.din[1] = m.b.host; /* pageable host memory */
  CHECK_RESULT(run_mp(&m), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("inputs[1]");
  m.b.din[1] = keep;
  void *out0 = m.b.dout[0];
  m.b.dout[0] = m.b.din[3]; /* the output onto the residual `r` */
  CHECK_RESULT(run_mp(&m), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("overlaps inputs[3]");
  m.b.dout[0] = out0;
  CHECK_RESULT(loom_prog_run(m.plan, NULL, m.b.dout, m.s), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("inputs=NULL");
  loom_plan_t none = NULL;
  CHECK_RESULT(loom_prog_compile(m.comm, m.p, "best", "B=2,S=3", &none), LOOM_ERR_INVALID_ARGUMENT); /* H unbound */
  CHECK_MSG("`H` is not bound");
  return mp_close(&m);
}

LOOM_TEST(gpu_lang_absent_rank_times_out_naming_the_stage_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent, NULL), 0);
}

LOOM_TEST(gpu_world_lang_bad_arguments_are_named_w2) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(2, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}
