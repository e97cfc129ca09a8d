/*
 * loom_lang.c - the language's subcommands of the loom command:
 *
 *   loom check PROG.loom [--schedule NAME] [--protocols [--world W]]
 *       parse, infer, print the typed program (scheduled by NAME if given);
 *       --protocols: instead, lower its communication to protocols and
 *       model-check each at W = 2 and 3 ranks (or W) over two calls
 *       (src/core/protocol.h), printing a counterexample if one fails;
 *       --lowered / --emit (with --world W --bind ...): the form code
 *       generation emits from (src/lang/lower.h) / the generated CUDA C
 *   loom schedules PROG.loom [--world W] [--bind B=8,...] [--depth D] [--max N]
 *       the unscheduled program, the program's own Schedule sections and
 *       every schedule the search reaches in D moves (duplicates merged),
 *       each with its statements, its units and a cost estimate, cheapest
 *       first (src/lang/listing.c); an own schedule that a statement refuses
 *       is listed last with the refusal, and the header counts what is listed
 *   loom interp PROG.loom --world W --bind B=8,... [--schedule NAME] [--seed S]
 *       run on the CPU with W simulated ranks per group; print each output
 *       and state (count, sum, first values); with --schedule, also the
 *       largest difference from the unscheduled program
 *   loom run PROG.loom --bind B=8,... [--schedule NAME] [--check] [--world W] [--iters N]
 *       compile the program for GPUs (code generation, NVRTC) and run it: on
 *       one process per GPU (or the ranks of mpirun), or with --world W as W
 *       ranks per group on one GPU (a loom world: correctness, never speed);
 *       print each stage's median time over N calls, and with --check compare
 *       every output with the interpreter (exit 1 beyond the stated bound).
 *       NAME: loom_prog_compile's schedule (a Schedule section, a schedule
 *       `loom schedules` lists, NAME/bN, sequential, cublaslt+nccl);
 *       without it, the tuning cache's entry, else the cost model's
 *       cheapest schedule that takes the program's inputs and outputs
 *   loom tune PROG.loom --bind B=8,... [--world W] [--depth D] [--max N] [--file PATH] [--list]
 *       on the same ranks as loom run: loom_prog_tune, which compiles the
 *       program as written (the default), every schedule `loom schedules`
 *       lists and the program as loom's ops and as cuBLASLt + NCCL, times
 *       them by loom's tuning rule (then the knob of the fastest), records the
 *       fastest that takes the program's inputs and outputs as written in
 *       the tuning cache (LOOM_TUNE_FILE, or --file PATH, keeps it for
 *       later processes: `loom run` without --schedule then runs it); prints
 *       every candidate's predicted and measured time, its ratio to the
 *       default, the winner, where the entry went, and Spearman's rank
 *       correlation of predicted and measured; --list: the candidates only
 *       (no GPU)
 *
 * Errors (parse, type, refused transformation) print loom's message and exit 1;
 * bad usage exits 2.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "lang/lang.h"
#include "codegen/emit.h"
#include "codegen/prog.h"
#include "codegen/prog_tune.h"
#include "core/plan.h"
#include "lang/lower.h"
#include "lang/lang_proto.h"
#include "support/launch.h"
#include "support/prog_io.h"
#include "tools/loom_lang.h"

typedef struct opts {
  const char *file, *schedule, *bind, *tune_file;
  int world, depth, max;
  int world_given, protocols, lowered, emit, check, iters, list;
  unsigned long long seed;
} opts_t;

static int usage(const char *cmd, int code) {
  FILE *f = code ? stderr : stdout;
  if (!strcmp(cmd, "check"))
    fprintf(f, "usage: loom check PROG.loom [--schedule NAME] [--protocols [--world W]]\n"
               "       loom check PROG.loom [--schedule NAME] --lowered|--emit --world W --bind S=N,...\n"
               "  parse the program, infer every value's dtype, shape and layout, print it typed;\n"
               "  with --schedule, apply the program's `Schedule NAME { ... }` first; with --protocols,\n"
               "  lower its communication to protocols and prove each free of deadlocks, reads before\n"
               "  publish and overwrites before consumed over every interleaving of W = 2 and 3 ranks\n"
               "  (or W, 2..4) and two calls; a violation prints its run and exits 1; with --lowered,\n"
               "  print what code generation makes of it at W ranks per group (units, steps, loops,\n"
               "  exchanges; its generated protocols checked first), with --emit its generated CUDA C\n");
  else if (!strcmp(cmd, "schedules"))
    fprintf(f, "usage: loom schedules PROG.loom [--world W] [--bind S=N,...] [--depth D] [--max N]\n"
               "  list the program's Schedule sections and every schedule split, reorder, fuse, fuseComm,\n"
               "  overlap, asSlice and dead reach in D moves (default 6, at most N = 200 programs), duplicates\n"
               "  merged, cheapest first by a cost model of H200 rates (docs/language.md; W ranks, default 8;\n"
               "  unbound sizes: 1024); a Schedule section that is refused is listed last with why\n");
  else if (!strcmp(cmd, "tune"))
    fprintf(f,
            "usage: loom tune PROG.loom --bind S=N,... [--world W] [--depth D] [--max N] [--file PATH] [--list]\n"
            "  time the program as written (the default to beat), every schedule `loom schedules` lists (D moves,\n"
            "  default 6, at most N = 200 programs), the program as loom's ops one after another (sequential) and as\n"
            "  cuBLASLt + NCCL, each compiled as its own plan, then the three fastest with fewer blocks per SM\n"
            "  (NAME/b2, NAME/b1),\n"
            "  on the ranks loom run takes (one process per GPU, mpirun's ranks, or --world W on one GPU: times of no\n"
            "  use beyond the world), by loom's tuning rule; record the fastest that takes the program's inputs and\n"
            "  outputs as written in the tuning cache, which LOOM_TUNE_FILE (or --file PATH) keeps for later runs;\n"
            "  print each schedule's predicted and measured time, its ratio to the default, the winner, the entry,\n"
            "  and Spearman's rank correlation of predicted and measured. --list: the candidates only (no GPU;\n"
            "  W from --world, default 8)\n");
  else if (!strcmp(cmd, "run"))
    fprintf(f,
            "usage: loom run PROG.loom --bind S=N,... [--schedule NAME] [--check] [--world W] [--iters N] [--seed S]\n"
            "  compile the program for the GPUs (generated kernels, NVRTC, cached in LOOM_CACHE_DIR) and run it\n"
            "  on one process per GPU (or the ranks of mpirun), or with --world W as W ranks per group on one GPU\n"
            "  (correctness, not speed); print each stage's median time over N calls (default 20); with --check,\n"
            "  compare every output with the CPU interpreter. NAME: a Schedule section, a schedule `loom schedules`\n"
            "  lists (s41), NAME/b1../b4 (blocks per SM), unscheduled, sequential (loom's ops one after another) or\n"
            "  cublaslt+nccl; without --schedule: the tuning cache's entry, else the cost model's cheapest schedule\n");
  else
    fprintf(f, "usage: loom interp PROG.loom --world W --bind S=N,... [--schedule NAME] [--seed S]\n"
               "  run the program on the CPU with W simulated ranks per group, sizes bound by --bind;\n"
               "  print every output and state; with --schedule, run the schedule too and print the\n"
               "  largest difference from the unscheduled program\n");
  return code;
}

static int parse_opts(int argc, char **argv, opts_t *o) {
  memset(o, 0, sizeof *o);
  o->world = 8, o->depth = 6, o->max = 200, o->seed = 1, o->bind = "", o->iters = 20;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
    if (a[0] != '-') {
      if (o->file) return -1;
      o->file = a;
      continue;
    }
    const struct { const char *name; int *flag; } flags[] = {{"--protocols", &o->protocols}, {"--lowered", &o->lowered},
                                                             {"--emit", &o->emit}, {"--check", &o->check},
                                                             {"--list", &o->list}};
    int flag = 0;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0] && !flag; ++k)
      if (!strcmp(a, flags[k].name)) *flags[k].flag = flag = 1;
    if (flag) continue;
    if (!v) return -1;
    if (!strcmp(a, "--schedule")) o->schedule = v;
    else if (!strcmp(a, "--bind")) o->bind = v;
    else if (!strcmp(a, "--world")) o->world = atoi(v), o->world_given = 1;
    else if (!strcmp(a, "--depth")) o->depth = atoi(v);
    else if (!strcmp(a, "--max")) o->max = atoi(v);
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--iters")) o->iters = atoi(v);
    else if (!strcmp(a, "--file")) o->tune_file = v;
    else return -1;
    i++;
  }
  return o->file && o->world >= 1 && o->depth >= 0 && o->max >= 1 && o->iters >= 1 ? 0 : -1;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t n = 0, cap = 4096;
  char *s = malloc(cap);
  for (size_t got; s && (got = fread(s + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (n + 1 == cap) {
      char *q = realloc(s, cap *= 2);
      if (!q) free(s);
      s = q;
    }
  }
  fclose(f);
  if (s) s[n] = 0;
  return s;
}

static int fail(void) {
  fprintf(stderr, "loom: %s\n", loom_last_error());
  return 1;
}

static loom_comm_t plan_comm(loom_plan_t plan) { return plan->comm; }

/* The program of o->file, scheduled by o->schedule if given (NULL on error, message printed). */
static loom_prog_t load(const opts_t *o, loom_prog_t *plain) {
  char *text = read_file(o->file);
  if (!text) {
    fprintf(stderr, "loom: cannot read %s\n", o->file);
    return NULL;
  }
  loom_prog_t p = NULL, q = NULL;
  loom_cg_run_t run;
  if (loom_prog_parse(text, o->file, &p) != LOOM_SUCCESS || loom_prog_check(p) != LOOM_SUCCESS) {
    fail();
  } else if (!loom__cg_run_parse(o->schedule, &run)) {
    fprintf(stderr, "loom: --schedule %s is no schedule's name\n", o->schedule);
  } else if (loom__cg_named_program(p, run.schedule, LOOM_CG_TUNE_DEPTH, LOOM_CG_TUNE_MAX, &q) != LOOM_SUCCESS) {
    fail();
  } else if (!q) { /* a Schedule section, or a schedule `loom schedules` lists at its default bounds */
    fprintf(stderr, "loom: no schedule `%s`: neither a Schedule section nor listed by loom schedules (depth %d, at "
                    "most %d programs)\n", run.schedule, LOOM_CG_TUNE_DEPTH, LOOM_CG_TUNE_MAX);
  }
  free(text);
  if (plain) *plain = p; else loom_prog_destroy(p);
  return q;
}

/* Checks the protocols of q's units at world size W; 0 if all pass. */
static int check_protocols_at(loom_prog_t q, int W) {
  static loom__proto_unit_t u[32];
  static loom__proto_report_t rep;
  int n = 0, bad = 0;
  if (loom__lang_lower(q, W, u, 32, &n) != LOOM_SUCCESS) {
    loom__proto_units_free(u, n);
    fprintf(stderr, "loom: cannot lower the program's communication at W = %d (more than 32 units?)\n", W);
    return 1;
  }
  if (n == 0) printf("W = %d: no communication\n", W);
  for (int i = 0; i < n; ++i) {
    if (loom__proto_check(&u[i].proto, 2, &rep) != LOOM_SUCCESS) {
      fprintf(stderr, "loom: %s: the protocol %s is too large to check\n", u[i].unit, u[i].proto.name);
      bad = 1;
      continue;
    }
    printf("W = %d  %-24s %-22s %8lld states  %s\n", W, u[i].unit, u[i].proto.name, (long long)rep.states,
           rep.violation ? loom__proto_violation_str(rep.violation) : "no deadlock, no race");
    if (rep.violation) fputs(rep.text, stdout), bad = 1;
  }
  loom__proto_units_free(u, n);
  return bad;
}

/* The lowered form of q at o->world ranks per group (what code generation emits from). */
static int print_lowered(loom_prog_t q, const opts_t *o) {
  loom__binding_t b;
  loom__lw_prog_t lw;
  if (loom__lang_parse_bind(o->bind, &b) != LOOM_SUCCESS || loom__lw_lower(q, o->world, &b, &lw) != LOOM_SUCCESS)
    return fail();
  loom__buf_t t = {0};
  loom__lw_print(&lw, &t);
  if (t.s && o->lowered) fputs(t.s, stdout);
  free(t.s);
  int rc = 0;
  for (int u = 0; u < lw.nunit && o->emit && !rc; ++u) {
    if (lw.units[u].kind != LOOM__LU_KERNEL) continue;
    char *src;
    if (loom__cg_emit_unit(&lw, u, &src) != LOOM_SUCCESS) {
      rc = fail();
      break;
    }
    printf("// ---- unit %s\n%s", lw.units[u].name, src);
    free(src);
  }
  loom__lw_free(&lw);
  return rc;
}

static int cmd_check(const opts_t *o) {
  loom_prog_t q = load(o, NULL);
  if (!q) return 1;
  if (o->lowered || o->emit) {
    const int rc = print_lowered(q, o);
    loom_prog_destroy(q);
    return rc;
  }
  if (o->protocols) {
    const int lo = o->world_given ? o->world : 2, hi = o->world_given ? o->world : 3;
    int bad = lo < 2 || hi > LOOM__PROTO_MAXW;
    if (bad) fprintf(stderr, "loom: --protocols checks W = 2..%d\n", LOOM__PROTO_MAXW);
    for (int W = lo; W <= hi && !bad; ++W) bad |= check_protocols_at(q, W);
    loom_prog_destroy(q);
    return bad;
  }
  loom__buf_t b = {0};
  const loom_result_t r = loom__lang_print(q, 1, &b);
  if (r == LOOM_SUCCESS) fputs(b.s, stdout);
  free(b.s);
  loom_prog_destroy(q);
  return r == LOOM_SUCCESS ? 0 : fail();
}

static void print_value(const loom__value_t *v) {
  double sum = 0;
  const int64_t n = v->count * v->ranks;
  for (int64_t i = 0; i < n; ++i) sum += v->v[i];
  printf("%-12s %s%lld elements%s  sum %.10g  first:", v->name, v->is_state ? "state, " : "", (long long)v->count,
         v->local ? " per rank (Local)" : "", sum);
  for (int64_t i = 0; i < n && i < 4; ++i) printf(" %.6g", v->v[i]);
  printf("\n");
}

static int cmd_interp(const opts_t *o) {
  loom_prog_t plain = NULL, q = load(o, &plain);
  if (!q) return loom_prog_destroy(plain), 1;
  loom__binding_t b;
  loom__results_t res;
  int rc = 0;
  if (loom__lang_parse_bind(o->bind, &b) != LOOM_SUCCESS ||
      loom__lang_interp(q, o->world, &b, o->seed, &res) != LOOM_SUCCESS) {
    rc = fail();
  } else {
    printf("%s at %d ranks per group%s%s\n", q->name, o->world, o->schedule ? ", schedule " : "",
           o->schedule ? o->schedule : "");
    for (int i = 0; i < res.n; ++i) print_value(&res.vals[i]);
    loom__lang_results_free(&res);
    double diff = 0;
    if (o->schedule && loom_prog_interp_compare(plain, q, o->world, o->bind, o->seed, &diff) != LOOM_SUCCESS)
      rc = fail();
    else if (o->schedule)
      printf("largest difference from the unscheduled program: %g%s\n", diff, diff == 0 ? " (bit-exact)" : "");
  }
  loom_prog_destroy(q);
  loom_prog_destroy(plain);
  return rc;
}

static void print_row(const loom__listed_t *r, int rank) {
  if (r->refused) {
    printf("#%d %s (the program's): refused: %s\n", rank, r->s->name, r->refused);
    return;
  }
  printf("#%d %s%s: %.2f us  (%.3g FLOP, %.3g HBM bytes, %.3g link bytes, %d units)\n", rank, r->s->name,
         r->own ? " (the program's)" : "", r->cost.time_us, r->cost.flops, r->cost.hbm_bytes, r->cost.link_bytes,
         r->cost.kernels);
  for (int i = 0; i < r->s->n; ++i) {
    const loom__stmt_t *st = &r->s->stmts[i];
    printf("    ");
    if (st->nlhs) {
      printf(st->nlhs > 1 ? "(" : "");
      for (int k = 0; k < st->nlhs; ++k) printf("%s%s", k ? ", " : "", st->lhs[k]);
      printf(st->nlhs > 1 ? ") = " : " = ");
    }
    printf("%s(", st->fn);
    for (int k = 0; k < st->nargs; ++k) printf("%s%s", k ? ", " : "", st->args[k]);
    printf(");\n");
  }
  printf("    runs: %s\n", r->units ? r->units : "");
}

static int cmd_schedules(const opts_t *o) {
  loom_prog_t p = load(o, NULL);
  if (!p) return 1;
  loom__binding_t bind;
  loom__listing_t l;
  if (loom__lang_parse_bind(o->bind, &bind) != LOOM_SUCCESS ||
      loom__lang_list(p, o->world, &bind, o->depth, o->max, &l) != LOOM_SUCCESS) {
    loom_prog_destroy(p);
    return fail();
  }
  char own[64] = "";
  if (l.refused) snprintf(own, sizeof own, ", %d of them refused (listed last)", l.refused);
  printf("%s: %d schedules (the unscheduled program, %d of the program's own%s, %d reached in %d steps), W = %d, "
         "cheapest first\n", o->file, l.n, p->nsched, own, l.found.n, o->depth, o->world);
  for (int i = 0; i < l.n; ++i) print_row(&l.rows[i], i + 1);
  loom__lang_listing_free(&l);
  loom_prog_destroy(p);
  return 0;
}

/* ---- loom run ------------------------------------------------------------------------------ */

typedef struct run_arg {
  const opts_t *o;
  loom_prog_t p; /* as loaded: loom_prog_compile schedules it as --schedule names, or by its default */
  int G;
} run_arg_t;

/* The program plan runs (scheduled, typed), or NULL. */
static loom_prog_t plan_program(loom_plan_t plan) {
  loom_cg_state_t *st = NULL;
  return loom__plan_state(plan, "loom run", NULL, &loom__op_prog, (void **)&st) == LOOM_SUCCESS ? st->prog : NULL;
}

static int by_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Rank 0: each unit's median time over the timed calls (ms[it * n + u]). */
static void print_times(loom_plan_t plan, const run_arg_t *ra, float *ms, int iters) {
  loom_cg_state_t *st = NULL;
  loom_prog_plan_info_t info = LOOM_PROG_PLAN_INFO_INIT;
  if (loom__plan_state(plan, "loom run", NULL, &loom__op_prog, (void **)&st) != LOOM_SUCCESS ||
      loom_prog_plan_info(plan, &info) != LOOM_SUCCESS)
    return;
  const int n = st->lw.nunit;
  printf(
      "%s, %s%s: W = %d ranks per group, %d groups; %d kernels (%d compiled by NVRTC, %.1f ms getting them), arena "
      "%zu bytes\n",
      ra->p->name, info.schedule, st->tuned[0] ? " (the tuning cache's)" : ra->o->schedule ? "" : " (the cost model's)",
      info.world, info.groups, info.kernels, info.compiled, info.compile_ms, info.arena_bytes);
  float *col = malloc(sizeof(float) * (size_t)iters), total = 0;
  for (int u = 0; u < n && col; ++u) {
    for (int it = 0; it < iters; ++it) col[it] = ms[(size_t)it * (size_t)n + (size_t)u];
    qsort(col, (size_t)iters, sizeof *col, by_float);
    total += col[iters / 2];
    printf("  %-40s %-7s %10.2f us  (median of %d calls, rank 0)\n", st->lw.units[u].name,
           st->lw.units[u].kind == LOOM__LU_GEMM ? "GEMM" : st->lw.units[u].kind == LOOM__LU_COLL ? "library" : "kernel",
           col[iters / 2] * 1e3, iters);
  }
  printf("  %-40s %-7s %10.2f us\n", "total", "", total * 1e3);
  free(col);
}

/* --check: new inputs, a call, every output against the interpreter. 0 when within the bound. */
static int run_check(loom_plan_t plan, const run_arg_t *ra, prog_io_t *b, int rank, int W, cudaStream_t s) {
  double d = 0;
  int bad = 0;
  const uint64_t seed = ra->o->seed + 1;
  const loom_prog_t q = plan_program(plan); /* its interpreter is the reference (a schedule's pieces are its own) */
  if (!q) return fail();
  const double bound = prog_io_bound(q);
  if (prog_io_fill(b, rank % W, seed, s) ||
      loom_prog_run(plan, (const void *const *)b->din, b->dout, s) != LOOM_SUCCESS ||
      cudaStreamSynchronize(s) != cudaSuccess || loom_comm_get_async_error(plan_comm(plan)) != LOOM_SUCCESS ||
      prog_io_check(b, q, W, ra->o->bind, seed, rank, bound, "loom run --check", &d, &bad) != LOOM_SUCCESS)
    return fail();
  if (rank == 0 || bad)
    printf("rank %d: every output against the interpreter: largest difference %.3g (bound %.3g): %s\n", rank, d, bound,
           bad ? "FAILED" : "ok");
  return bad != 0;
}

static int rank_run(loom_rank_ctx_t *ctx, void *arg) {
  const run_arg_t *ra = arg;
  const int W = ctx->size / ra->G, iters = ra->o->iters;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  prog_io_t b;
  memset(&b, 0, sizeof b);
  float *ms = NULL;
  int rc = 1;
  if (loom_launch_comm_create(ctx, NULL, &comm) != LOOM_SUCCESS || loom_prog_compile(comm, ra->p, ra->o->schedule,
                                                                                     ra->o->bind, &plan) != LOOM_SUCCESS ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || prog_io_make(plan, &b) != LOOM_SUCCESS ||
      prog_io_fill(&b, ctx->rank % W, ra->o->seed, s)) {
    fail();
    goto out;
  }
  loom_prog_plan_info_t info = LOOM_PROG_PLAN_INFO_INIT;
  loom_prog_plan_info(plan, &info);
  ms = calloc((size_t)iters * (size_t)info.units + 1, sizeof *ms);
  rc = ms && loom_prog_run(plan, (const void *const *)b.din, b.dout, s) == LOOM_SUCCESS ? 0 : fail(); /* warm-up */
  for (int it = 0; it < iters && !rc; ++it)
    if (loom__cg_execute_timed(plan, (const void *const *)b.din, b.dout, s, ms + (size_t)it * (size_t)info.units,
                               info.units) != LOOM_SUCCESS)
      rc = fail();
  if (!rc && ctx->rank == 0) print_times(plan, ra, ms, iters);
  if (!rc && ra->o->check) rc = run_check(plan, ra, &b, ctx->rank, W, s);
out:
  if (s) cudaStreamSynchronize(s), cudaStreamDestroy(s);
  prog_io_free(&b);
  free(ms);
  if (plan) loom_plan_destroy(plan);
  if (comm) loom_comm_destroy(comm);
  return rc;
}

/* The ranks a program of G groups runs on: W x G in a one-GPU world (--world W), mpirun's, or one per GPU; 0
 * (said) where they are no multiple of G. */
static int launch_ranks(const opts_t *o, int G) {
  int mpi_rank, mpi_size, R = o->world * G;
  if (!o->world_given) R = loom_launch_under_mpi(&mpi_rank, &mpi_size) ? mpi_size : loom_launch_gpu_count();
  if (R >= G && R % G == 0) return R;
  fprintf(stderr, "loom: %d ranks for a program of %d pipeline groups (give --world W, or run on a multiple of %d GPUs)\n",
          R, G, G);
  return 0;
}

/* fn on R ranks: a one-GPU world with --world, else one process per GPU (or mpirun's ranks). */
static int launch_on(const opts_t *o, int R, loom_rank_fn fn, void *arg) {
  return o->world_given ? loom_launch_world(R, 3600, fn, arg) : loom_launch(R, 3600, fn, arg);
}

static int loom_lang_run(const opts_t *o) {
  loom_prog_t p = load(&(opts_t){.file = o->file}, NULL);
  if (!p) return 1;
  const int G = loom__lang_ngroups(p), R = launch_ranks(o, G);
  run_arg_t ra = {o, p, G};
  const int rc = R ? launch_on(o, R, rank_run, &ra) : 1;
  loom_prog_destroy(p);
  return rc != 0;
}

/* ---- loom tune ----------------------------------------------------------------------------- */

typedef struct tune_arg {
  const opts_t *o;
  loom_prog_t p;
  int G, cap;
} tune_arg_t;

/* Rank 0: every candidate's predicted and measured time and its ratio to the default's, the winner, the entry. */
static void print_tune(const tune_arg_t *ta, const loom_prog_tune_result_t *res, int W, int world) {
  const loom_prog_tune_row_t *rows = res->rows, *won = &rows[res->winner];
  const int n = res->n < res->cap ? res->n : res->cap;
  const double base = rows[0].measured_us;
  int ran = 0;
  printf("%s: %d schedules at W = %d ranks per group, %d groups%s (--bind %s); the default: the program as written\n",
         ta->p->name, res->n, W, ta->G, world ? ", a one-GPU world (its times are not W GPUs')" : "", ta->o->bind);
  printf("  %-4s %-18s %13s %13s %10s  %s\n", "#", "schedule", "predicted us", "median us", "/default", "note");
  for (int i = 0; i < n; ++i) {
    const loom_prog_tune_row_t *r = &rows[i];
    char m[32] = "-", ratio[32] = "-", name[64];
    const int schedule = !strchr(r->schedule, '/') && strcmp(r->schedule, "sequential") &&
                         strcmp(r->schedule, "cublaslt+nccl"); /* not a runner's or the knob's row */
    if (r->measured_us >= 0) snprintf(m, sizeof m, "%.2f", r->measured_us), ran += schedule;
    if (r->measured_us >= 0 && base > 0) snprintf(ratio, sizeof ratio, "%.3f", r->measured_us / base);
    snprintf(name, sizeof name, "%s%s", r->schedule, i == res->winner ? " *" : "");
    printf("  %-4d %-18s %13.2f %13s %10s  %s%s\n", i, name, r->predicted_us, m, ratio, r->own ? "(the program's) " : "",
           r->note);
  }
  printf("winner (*): %s, %.2f us, %.3f x the default's %.2f us\n", won->schedule, won->measured_us,
         base > 0 ? won->measured_us / base : 0.0, base);
  const char *file = getenv("LOOM_TUNE_FILE");
  printf("recorded in the tuning cache: %s = %s\n%s%s%s\n", res->key, res->value,
         file && *file ? "written to " : "LOOM_TUNE_FILE is not set: the entry lived in this run only (--file PATH keeps it)",
         file && *file ? file : "", file && *file ? " (LOOM_TUNE_FILE): loom run without --schedule runs it" : "");
  if (isnan(res->rank_correlation))
    printf("the cost model against the measurements: fewer than 2 schedules ran, or all tied\n");
  else
    printf("the cost model against the measurements: Spearman's rank correlation %.3f over the %d schedules run (not "
           "the runners' and knob's rows)\n", res->rank_correlation, ran);
}

static int rank_tune(loom_rank_ctx_t *ctx, void *arg) {
  const tune_arg_t *ta = arg;
  loom_comm_t comm = NULL;
  cudaStream_t s = NULL;
  loom_prog_tune_result_t res = LOOM_PROG_TUNE_RESULT_INIT;
  res.depth = ta->o->depth, res.max = ta->o->max, res.cap = ta->cap;
  res.rows = calloc((size_t)ta->cap, sizeof *res.rows);
  int rc = 1;
  if (!res.rows || loom_launch_comm_create(ctx, NULL, &comm) != LOOM_SUCCESS ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      loom_prog_tune(comm, ta->p, ta->o->bind, s, &res) != LOOM_SUCCESS)
    fail();
  else
    rc = 0;
  if (!rc && ctx->rank == 0) print_tune(ta, &res, ctx->size / ta->G, ctx->world != NULL);
  if (s) cudaStreamDestroy(s);
  if (comm) loom_comm_destroy(comm);
  free(res.rows);
  return rc;
}

/* --list: the candidates at W = --world (no GPU). */
static int tune_list(const opts_t *o, loom_prog_t p) {
  loom__binding_t b;
  loom_cg_cands_t cs;
  if (loom__lang_parse_bind(o->bind, &b) != LOOM_SUCCESS ||
      loom__cg_tune_candidates(p, o->world, &b, o->depth, o->max, &cs) != LOOM_SUCCESS)
    return fail();
  int left = 0, eligible = 0;
  for (int i = 0; i < cs.n; ++i) left += cs.c[i].refused, eligible += cs.c[i].eligible;
  printf("%s: %d candidates at W = %d (%d left out, %d eligible); the default first, then the cost model's order\n",
         o->file, cs.n, o->world, left, eligible);
  for (int i = 0; i < cs.n; ++i)
    printf("  %-4d %-16s %12.2f us  %s%s\n", i, cs.c[i].name, cs.c[i].predicted_us,
           cs.c[i].own ? "(the program's) " : "", cs.c[i].note);
  loom__cg_tune_candidates_free(&cs);
  return 0;
}

/* --file PATH: LOOM_TUNE_FILE for this run (created where missing, so that the first lookup reads it). */
static int tune_file(const char *path) {
  FILE *f = fopen(path, "a");
  if (!f || fclose(f) != 0 || setenv("LOOM_TUNE_FILE", path, 1) != 0) {
    fprintf(stderr, "loom: cannot write the tuning file %s\n", path);
    return 1;
  }
  return 0;
}

static int loom_lang_tune(const opts_t *o) {
  loom_prog_t p = load(&(opts_t){.file = o->file}, NULL);
  if (!p) return 1;
  int rc = 1;
  if (o->list) {
    rc = tune_list(o, p);
  } else if (!o->tune_file || !tune_file(o->tune_file)) {
    tune_arg_t ta = {o, p, loom__lang_ngroups(p), LOOM_PROG_TUNE_ROWS(p->nsched, o->max)};
    const int R = launch_ranks(o, ta.G);
    rc = R ? launch_on(o, R, rank_tune, &ta) != 0 : 1;
  }
  loom_prog_destroy(p);
  return rc;
}

int loom_lang_main(int argc, char **argv) {
  const char *cmd = argv[0];
  opts_t o;
  const int r = parse_opts(argc, argv, &o);
  if (r == 1) return usage(cmd, 0);
  if (r < 0) return usage(cmd, 2);
  if (!strcmp(cmd, "check")) return cmd_check(&o);
  if (!strcmp(cmd, "schedules")) return cmd_schedules(&o);
  if (!strcmp(cmd, "run")) return loom_lang_run(&o);
  if (!strcmp(cmd, "tune")) return loom_lang_tune(&o);
  return cmd_interp(&o);
}
