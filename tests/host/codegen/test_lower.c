/*
 * test_lower.c - the lowered form (src/lang/lower.h) on the host:
 *  - slices are loom's shards: the interpreter's pieces, the lowered
 *    geometry and loom__coll_slice (unit 1) agree for every size and world
 *    (the interpreter split n / W with the remainder on the first ranks
 *    before; 10 over 4 was 3, 3, 2, 2 and is 3, 3, 3, 1 now);
 *  - what the lowering makes of the paper's schedules: Figure 4's best is a
 *    GEMM and one kernel of two steps (the fused collective's two-shot: a
 *    reduction of the peers' partial sums with the epilogue, then a gather
 *    of the owners' slices), with no done hand-back (the checker proves it
 *    unneeded); Figure 6b's Adam one kernel of two steps: the moments and
 *    the update on slices (stored once, never reloaded), then the gather;
 *  - every kernel unit of every schedule `loom schedules` lists for every
 *    example passes the model checker at 2 and 3 ranks (pipeline: 1 and 2
 *    per group) before code may be generated for it;
 *  - mutations: each wait of each generated exchange list dropped in turn
 *    is caught by the checker.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/interp_ops.h"
#include "lang/lower.h"
#include "ops/coll/coll_schedule.h"
#include "tests/common/test.h"
#include "tests/host/codegen/codegen_test_util.h"
#include "support/prog_io.h"
#include "tests/host/codegen/lower_exec.h"

LOOM_TEST(codegen_slices_are_loom_shards_in_the_interpreter_and_the_lowering) {
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse("Tensor x(FP32, [N, 3], Sliced(0), WORLD);\nVar y = AllGather(x);\n"
                               "Execute t({x}, {y});\n", "shards.loom", &p),
               LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  const int x = loom__lang_find(p, "x");
  int bad = 0;
  for (int64_t n = 1; n <= 40; ++n)
    for (int W = 1; W <= 17; ++W) {
      char bind[32];
      snprintf(bind, sizeof bind, "N=%lld", (long long)n);
      loom__binding_t b;
      CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
      loom__lw_geom_t g;
      CHECK_RESULT(loom__lw_geom_of(p, x, W, &b, &g), LOOM_SUCCESS);
      loom__shape_t shape = {2, {n, 3}, 3 * n};
      loom__interp_t in;
      memset(&in, 0, sizeof in);
      in.p = p, in.W = W, in.G = 1, in.R = W, in.shapes = calloc((size_t)p->n, sizeof *in.shapes);
      in.shapes[x] = shape;
      for (int q = 0; q < W; ++q) {
        int64_t begin, len, dims[LOOM__LANG_RANK], off;
        loom__coll_slice(n, W, q, 1, &begin, &len);
        loom__lw_piece(&g, q, dims, &off);
        loom__local_t loc;
        loom__interp_local(&in, x, q, &loc);
        if (off != begin || dims[0] != len || loc.off[0] != begin || loc.dims[0] != len || dims[1] != 3)
          bad++;
      }
      free(in.shapes);
    }
  CHECK_EQ_INT(bad, 0);
  loom_prog_destroy(p);
}

/* The example's schedule lowered at W ranks with sizes bind (the caller frees it). */
static int lowered(const char *example, const char *sched, int W, const char *bind, loom__lw_prog_t *lw) {
  loom_prog_t p = lang_load_example(example), q = NULL;
  loom__binding_t b;
  int ok = p && loom_prog_schedule(p, sched, &q) == LOOM_SUCCESS && loom__lang_parse_bind(bind, &b) == LOOM_SUCCESS &&
           loom__lw_lower(q, W, &b, lw) == LOOM_SUCCESS;
  if (!ok) loom_test_fail(__FILE__, __LINE__, "%s %s: %s", example, sched, loom_last_error());
  /* lw keeps a pointer to q: the tests read lw->p's names only until they free both */
  if (!ok) loom_prog_destroy(q);
  loom_prog_destroy(p);
  return ok;
}

static int count_entries(const loom__lw_prog_t *lw, int u, int kind, int slot, int on) {
  int n = 0;
  const loom__lw_unit_t *x = &lw->units[u];
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i)
    n += lw->ex[i].kind == kind && lw->ex[i].slot == slot && lw->ex[i].off == !on;
  return n;
}

LOOM_TEST(codegen_lowering_of_the_papers_schedules) {
  loom__lw_prog_t lw;
  if (lowered("model_parallel", "best", 4, "B=2,S=3,H=8", &lw)) {
    CHECK_EQ_INT(lw.nunit, 2);
    CHECK_EQ_INT(lw.units[0].kind, LOOM__LU_GEMM);
    CHECK_EQ_INT(lw.units[1].kind, LOOM__LU_KERNEL);
    CHECK_EQ_INT(lw.units[1].nsteps, 2);
    CHECK_EQ_INT(count_entries(&lw, 1, LOOM__LX_WAIT, LOOM__LWS_ARRIVED, 1), 1);
    CHECK_EQ_INT(count_entries(&lw, 1, LOOM__LX_WAIT, LOOM__LWS_READY, 1), 1);
    CHECK_EQ_INT(count_entries(&lw, 1, LOOM__LX_WAIT, LOOM__LWS_DONE, 1), 0);
    const loom__lw_loop_t *l = &lw.loops[lw.units[1].loop0];
    CHECK_EQ_INT(lw.ins[l->ins0].kind, LOOM__LI_REDUCE);
    CHECK_EQ_INT(l->space.sliced, 0); /* the reduction with the epilogue on slices, as the reorder made it */
    loom_prog_destroy((loom_prog_t)lw.p);
    loom__lw_free(&lw);
  }
  if (lowered("adam", "best", 3, "N=10", &lw)) {
    CHECK_EQ_INT(lw.nunit, 1);
    /* the moments and the update that reads them in one step (FP32 values of one space: the update
     * computes them itself rather than wait a step to load them), then the gather of p */
    CHECK_EQ_INT(lw.units[0].nsteps, 2);
    int sliced_outputs = 0, sliced_in_arena = 0;
    for (int b = 0; b < lw.nbuf; ++b) {
      const int sliced_out = (lw.bufs[b].store & LOOM__LWB_OUTPUT) && lw.bufs[b].geom.sliced == 0;
      sliced_outputs += sliced_out;
      sliced_in_arena += sliced_out && (lw.bufs[b].store & LOOM__LWB_ARENA);
    }
    CHECK_EQ_INT(sliced_outputs, 2);  /* m and v stay on their slices */
    CHECK_EQ_INT(sliced_in_arena, 0); /* and are stored once: into the caller's outputs */
    loom_prog_destroy((loom_prog_t)lw.p);
    loom__lw_free(&lw);
  }
  if (lowered("adam", NULL, 3, "N=10", &lw)) { /* unscheduled: AllReduce alone needs its done hand-back */
    int ar = -1;
    for (int u = 0; u < lw.nunit; ++u)
      if (count_entries(&lw, u, LOOM__LX_WAIT, LOOM__LWS_ARRIVED, 1)) ar = u;
    CHECK(ar >= 0);
    if (ar >= 0) CHECK_EQ_INT(count_entries(&lw, ar, LOOM__LX_WAIT, LOOM__LWS_DONE, 1), 1);
    loom_prog_destroy((loom_prog_t)lw.p);
    loom__lw_free(&lw);
  }
}

typedef struct proto_tally { int schedules, units, waits, caught; } proto_tally_t;

/* caught[i] |= whether dropping wait i (SELF aside) of lw's kernel units makes the checker fail. */
static void mutate(const loom__lw_prog_t *lw, char *caught) {
  static loom__proto_t pr;
  static loom__proto_report_t rep;
  for (int u = 0; u < lw->nunit; ++u) {
    const loom__lw_unit_t *x = &lw->units[u];
    if (x->kind != LOOM__LU_KERNEL) continue;
    for (int i = x->ex0; i < x->ex0 + x->nex; ++i) {
      const loom__lw_ex_t *e = &lw->ex[i];
      if (e->kind != LOOM__LX_WAIT || e->off || e->pattern == LOOM__LWP_SELF) continue;
      CHECK_RESULT(loom__lw_protocol(lw, u, i, &pr), LOOM_SUCCESS);
      CHECK_RESULT(loom__proto_check(&pr, 2, &rep), LOOM_SUCCESS);
      caught[i] |= rep.violation != LOOM__PV_NONE;
      loom__proto_free(&pr);
    }
  }
}

/* q lowered (settled and checked) at every check world, and every wait dropped in turn at each. */
static void check_and_mutate(loom_prog_t q, const char *label, void *ctx) {
  proto_tally_t *t = ctx;
  int W[4], n;
  loom__lw_check_worlds(q, W, &n);
  loom__binding_t b;
  CHECK_RESULT(loom__lang_parse_bind("B=2,S=3,H=8,N=10,T=5,F=16", &b), LOOM_SUCCESS);
  char *caught = NULL;
  loom__lw_prog_t lw;
  for (int k = 0; k < n; ++k) {
    if (loom__lw_lower(q, W[k], &b, &lw) != LOOM_SUCCESS) {
      loom_test_fail(__FILE__, __LINE__, "%s at W = %d: %s", label, W[k], loom_last_error());
      free(caught);
      return;
    }
    if (!caught) caught = calloc((size_t)lw.nex + 1, 1);
    mutate(&lw, caught);
    if (k + 1 < n) loom__lw_free(&lw);
  }
  t->schedules++;
  for (int u = 0; u < lw.nunit; ++u) {
    const loom__lw_unit_t *x = &lw.units[u];
    if (x->kind == LOOM__LU_KERNEL && x->nex) t->units++;
    for (int i = x->ex0; i < x->ex0 + x->nex; ++i) {
      const loom__lw_ex_t *e = &lw.ex[i];
      if (e->kind != LOOM__LX_WAIT || e->off || e->pattern == LOOM__LWP_SELF) continue;
      t->waits++, t->caught += caught[i];
      if (!caught[i]) loom_test_fail(__FILE__, __LINE__, "%s, unit %s: wait %d dropped, not caught", label, x->name,
                                     i - x->ex0);
    }
  }
  free(caught);
  loom__lw_free(&lw);
}

LOOM_TEST(codegen_every_listed_schedule_passes_the_checker_and_its_mutations_are_caught) {
  proto_tally_t t = {0, 0, 0, 0};
  for (int e = 0; e < CODEGEN_NEXAMPLES; ++e) {
    loom_prog_t p = lang_load_example(codegen_examples[e].name);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
    codegen_each_schedule(p, 4, codegen_examples[e].bind, check_and_mutate, &t);
    loom_prog_destroy(p);
  }
  printf("    %d schedules, %d kernel units with exchanges, %d of %d dropped waits caught\n", t.schedules, t.units,
         t.caught, t.waits);
  CHECK(t.schedules > 100);
  CHECK(t.waits > 100);
  CHECK_EQ_INT(t.caught, t.waits);
}

/* ---- the lowered form run on the CPU against the interpreter ------------------------------------------ */

typedef struct exec_tally { int runs; double worst; const char *bind; } exec_tally_t;

static void exec_at_every_world(loom_prog_t q, const char *label, void *ctx) {
  exec_tally_t *t = ctx;
  static const int worlds[] = {1, 2, 3, 4, 8};
  loom__binding_t b;
  CHECK_RESULT(loom__lang_parse_bind(t->bind, &b), LOOM_SUCCESS);
  for (int k = 0; k < 5; ++k) {
    loom__lw_prog_t lw;
    double d = INFINITY;
    if (loom__lw_lower(q, worlds[k], &b, &lw) != LOOM_SUCCESS) {
      loom_test_fail(__FILE__, __LINE__, "%s at W = %d: %s", label, worlds[k], loom_last_error());
      continue;
    }
    CHECK_RESULT(lower_exec_compare(&lw, 17 + (uint64_t)k, &d), LOOM_SUCCESS);
    if (!(d <= prog_io_bound(q))) loom_test_fail(__FILE__, __LINE__, "%s at W = %d: differs from the interpreter by %g",
                                            label, worlds[k], d);
    if (d > t->worst) t->worst = d;
    t->runs++;
    loom__lw_free(&lw);
  }
}

LOOM_TEST(codegen_lowered_schedules_run_on_the_cpu_equal_the_interpreter_at_every_world) {
  for (int e = 0; e < CODEGEN_NEXAMPLES; ++e) {
    loom_prog_t p = lang_load_example(codegen_examples[e].name);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
    exec_tally_t t = {0, 0, codegen_examples[e].bind};
    const int n = codegen_each_schedule(p, 4, codegen_examples[e].bind, exec_at_every_world, &t);
    printf("    %s: %d schedules at W = 1, 2, 3, 4, 8: largest difference %.3g\n", codegen_examples[e].name, n,
           t.worst);
    loom_prog_destroy(p);
  }
}

/* The program as written run by the libraries (loom's collectives, or NCCL's and cuBLASLt): each plain
 * AllReduce / ReduceScatter / AllGather of the examples is a COLL unit, the rest as before, and the lowered
 * program run on the CPU equals the interpreter at W = 1, 2, 3, 4, 8; a fused collective, a max-reduction and
 * a pipeline program's collectives stay generated. */
LOOM_TEST(codegen_lowered_for_the_libraries_runs_plain_collectives_as_coll_units) {
  static const int worlds[] = {1, 2, 3, 4, 8};
  int colls = 0;
  for (int e = 0; e < CODEGEN_NEXAMPLES; ++e) {
    loom_prog_t p = lang_load_example(codegen_examples[e].name), best = NULL;
    CHECK(p != NULL && loom_prog_check(p) == LOOM_SUCCESS);
    if (!p) continue;
    loom__binding_t b;
    CHECK_RESULT(loom__lang_parse_bind(codegen_examples[e].bind, &b), LOOM_SUCCESS);
    for (int lib = LOOM__LW_LIB_LOOM; lib <= LOOM__LW_LIB_BASE; ++lib)
      for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; ++w) {
        loom__lw_prog_t lw, gen;
        if (loom__lw_lower_lib(p, worlds[w], &b, lib, &lw) != LOOM_SUCCESS) {
          loom_test_fail(__FILE__, __LINE__, "%s lib %d at W = %d: %s", codegen_examples[e].name, lib, worlds[w],
                         loom_last_error());
          continue;
        }
        CHECK_RESULT(loom__lw_lower(p, worlds[w], &b, &gen), LOOM_SUCCESS);
        int coll = 0, kernels = 0;
        for (int u = 0; u < lw.nunit; ++u) {
          const loom__lw_unit_t *x = &lw.units[u];
          coll += x->kind == LOOM__LU_COLL;
          kernels += x->kind == LOOM__LU_KERNEL;
          if (x->kind == LOOM__LU_COLL) CHECK(loom__lw_coll_unit_op(&lw, x->node) && lw.G == 1);
        }
        int gen_kernels = 0;
        for (int u = 0; u < gen.nunit; ++u) gen_kernels += gen.units[u].kind == LOOM__LU_KERNEL;
        CHECK_EQ_INT(lw.nunit, gen.nunit);
        CHECK_EQ_INT(kernels + coll, gen_kernels);
        colls += coll;
        double d = INFINITY;
        CHECK_RESULT(lower_exec_compare(&lw, 41 + (uint64_t)w, &d), LOOM_SUCCESS);
        if (!(d <= prog_io_bound(p)))
          loom_test_fail(__FILE__, __LINE__, "%s lib %d at W = %d: differs from the interpreter by %g",
                         codegen_examples[e].name, lib, worlds[w], d);
        loom__lw_free(&lw), loom__lw_free(&gen);
      }
    if (loom_prog_schedule(p, "best", &best) == LOOM_SUCCESS) { /* fused: nothing plain left */
      loom__lw_prog_t lw;
      if (loom__lw_lower_lib(best, 2, &b, LOOM__LW_LIB_LOOM, &lw) == LOOM_SUCCESS) {
        int coll = 0;
        for (int u = 0; u < lw.nunit; ++u) coll += lw.units[u].kind == LOOM__LU_COLL;
        if (!strcmp(codegen_examples[e].name, "model_parallel")) CHECK_EQ_INT(coll, 0);
        loom__lw_free(&lw);
      }
      loom_prog_destroy(best);
    }
    loom_prog_destroy(p);
  }
  printf("    %d COLL units over the examples, both libraries, W = 1, 2, 3, 4, 8\n", colls);
  CHECK(colls >= 20);
  /* what stays generated: a max-reduction, a collective of another dimension's slices */
  static const char *kept[] = {
      "Tensor x(FP32, [N, M], Local, WORLD);\nVar y = AllReduce(\"max\", x);\nExecute e({x}, {y});\n",
      "Tensor x(FP32, [N, M], Sliced(1), WORLD);\nVar y = AllGather(x);\nExecute e({x}, {y});\n",
  };
  for (int i = 0; i < 2; ++i) {
    loom_prog_t p = NULL;
    CHECK_RESULT(loom_prog_parse(kept[i], "kept.loom", &p), LOOM_SUCCESS);
    if (!p) continue;
    CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
    loom__binding_t b;
    CHECK_RESULT(loom__lang_parse_bind("N=6,M=8", &b), LOOM_SUCCESS);
    loom__lw_prog_t lw;
    CHECK_RESULT(loom__lw_lower_lib(p, 2, &b, LOOM__LW_LIB_LOOM, &lw), LOOM_SUCCESS);
    for (int u = 0; u < lw.nunit; ++u) CHECK(lw.units[u].kind != LOOM__LU_COLL);
    loom__lw_free(&lw);
    loom_prog_destroy(p);
  }
}

/* ---- a bias folded into the GEMM's epilogue --------------------------------------------------------------- */

/* Program text: `y = MatMul(x, w) + b` with x, w, b of the given layouts (and extra lines). */
static loom_prog_t linear_prog(const char *x, const char *w, const char *b, const char *extra, const char *outs) {
  char text[1024];
  snprintf(text, sizeof text,
           "Tensor x(BF16, [T, H], %s, WORLD);\nTensor w(BF16, [H, F], %s, WORLD);\nTensor b(BF16, [F], %s, WORLD);\n"
           "Var c = MatMul(x, w);\n%sVar y = c + %s;\nExecute linear({x, w, b}, {%s});\n",
           x, w, b, extra, *extra ? "b2" : "b", outs);
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse(text, "linear.loom", &p), LOOM_SUCCESS);
  if (p) CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  return p;
}

/* `MatMul(x, w) + b` is one GEMM unit with loom_gemm's bias epilogue where the MatMul is read by the sum alone,
 * the bias is an input vector whole on every rank and k and n are whole multiples of 8 (the same choice at
 * every world size); otherwise a GEMM and a kernel as before. Either way the lowered program run on the CPU
 * equals the interpreter at W = 1, 2, 3, 4, 8. */
LOOM_TEST(codegen_a_matmul_plus_bias_is_one_gemm_with_its_bias_epilogue) {
  static const struct {
    const char *x, *w, *b, *extra, *outs, *bind;
    int folded;
  } k[] = {
      {"Replicated", "Replicated", "Replicated", "", "y", "T=5,H=16,F=24", 1},
      {"Sliced(0)", "Replicated", "Replicated", "", "y", "T=13,H=16,F=24", 1},   /* tokens sliced: m pieces */
      {"Replicated", "Sliced(1)", "Sliced(0)", "", "y", "T=5,H=16,F=24", 0},     /* n pieces differ with W */
      {"Replicated", "Replicated", "Replicated", "", "y", "T=5,H=16,F=20", 0},   /* n not a multiple of 8 */
      {"Replicated", "Replicated", "Replicated", "", "y", "T=5,H=12,F=24", 0},   /* k not a multiple of 8 */
      {"Replicated", "Replicated", "Replicated", "", "y, c", "T=5,H=16,F=24", 0}, /* the MatMul is a result too */
      {"Replicated", "Replicated", "Replicated", "Var b2 = b * 2;\n", "y", "T=5,H=16,F=24", 0}, /* not an input */
  };
  static const int worlds[] = {1, 2, 3, 4, 8};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    loom_prog_t p = linear_prog(k[i].x, k[i].w, k[i].b, k[i].extra, k[i].outs);
    if (!p) continue;
    loom__binding_t bd;
    CHECK_RESULT(loom__lang_parse_bind(k[i].bind, &bd), LOOM_SUCCESS);
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; ++w) {
      loom__lw_prog_t lw;
      if (loom__lw_lower(p, worlds[w], &bd, &lw) != LOOM_SUCCESS) {
        loom_test_fail(__FILE__, __LINE__, "case %zu at W = %d: %s", i, worlds[w], loom_last_error());
        continue;
      }
      int folded = 0, kernels = 0;
      for (int u = 0; u < lw.nunit; ++u) {
        folded += lw.units[u].kind == LOOM__LU_GEMM && lw.units[u].gemm_bias >= 0;
        kernels += lw.units[u].kind == LOOM__LU_KERNEL;
      }
      const int want = !k[i].folded + (*k[i].extra != 0); /* the sum's kernel, b2's */
      if (folded != k[i].folded || kernels != want)
        loom_test_fail(__FILE__, __LINE__, "case %zu at W = %d: %d folded GEMMs and %d kernels; expected %d and %d", i,
                       worlds[w], folded, kernels, k[i].folded, want);
      double d = INFINITY;
      CHECK_RESULT(lower_exec_compare(&lw, 29 + (uint64_t)w, &d), LOOM_SUCCESS);
      if (!(d <= prog_io_bound(p)))
        loom_test_fail(__FILE__, __LINE__, "case %zu at W = %d: differs from the interpreter by %g", i, worlds[w], d);
      loom__lw_free(&lw);
    }
    loom_prog_destroy(p);
  }
}
