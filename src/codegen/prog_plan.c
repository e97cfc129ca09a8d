/*
 * prog_plan.c - loom_prog_compile: a program's plan made through the door
 * (core/op.h), and what a plan tells about its inputs and outputs.
 *
 *   check    the program, schedule and sizes: the schedule applies, every
 *            size is bound, the comm's size is a multiple of the program's
 *            pipeline groups, every rank is load/store reachable, and the
 *            lowering succeeds (its kernels' protocols pass the checker)
 *   resolve  the run named (prog_tune.h: a schedule and its knob, or a
 *            library runner); where none is named, the one the tuning
 *            cache holds for this program, sizes and comm (loom_prog_tune),
 *            else the cost model's cheapest schedule that takes the
 *            program's inputs and outputs as written; the lowering at
 *            W = size / groups, each kernel unit's
 *            CUDA C compiled for this GPU (the kernel cache), each unit's
 *            grid and workspace words, the GEMM units' shapes, the arena's
 *            size
 *   lay out  the units' words; the fingerprint of the images and the arena
 *   fill     the arena (loom_malloc, zeroed), every rank's address of it,
 *            the kernels loaded, loom's plans of the COLL units; then
 *            every rank waits for the others, so that none runs a kernel
 *            while another still loads one
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit.h"
#include "codegen/prog.h"
#include "codegen/prog_tune.h"
#include "codegen/rtc.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/plan.h"
#include "core/signal.h"

/* The wait sites of generated kernels (cg_args.h), named in timeout messages. */
__attribute__((constructor)) static void loom__cg_wait_sites(void) {
  loom__wait_site_register(LOOM_SITE_CG_ARRIVED, "generated kernel: a rank's inputs of the stage readable (arrived)");
  loom__wait_site_register(LOOM_SITE_CG_READY, "generated kernel: a rank's step of the stage finished (ready)");
  loom__wait_site_register(LOOM_SITE_CG_DONE, "generated kernel: a rank done reading this rank's buffers (done)");
  loom__wait_site_register(LOOM_SITE_CG_BLOCKS, "generated kernel: this rank's blocks finishing the step before");
}

typedef struct loom_cg_desc {
  loom_prog_t prog;
  const char *schedule, *bind;
  int tuned; /* a NULL or "" schedule: the tuning cache's entry, else the cost model's first (loom_prog_compile);
                0: the program as given (the tuner, which passes scheduled programs) */
} loom_cg_desc_t;

/* The description's sizes, run and program (typed; *q NULL where the run names no schedule of it: why in the
 * error, *q left for resolve where no schedule is named and d->tuned). */
static loom_result_t desc_program(const char *fn, const loom_cg_desc_t *d, loom_prog_t *q, loom__binding_t *b,
                                  loom_cg_run_t *run) {
  *q = NULL;
  if (!d->prog) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: prog=NULL", fn);
  LOOM_TRY(loom__lang_parse_bind(d->bind ? d->bind : "", b));
  if (!loom__cg_run_parse(d->schedule, run))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: schedule=\"%s\": expected a schedule's name, optionally with "
                      "/b1../b%d (blocks per SM), or \"" LOOM_CG_RUN_SEQUENTIAL "\" or \"" LOOM_CG_RUN_BASELINE "\"",
                      fn, d->schedule, LOOM_CG_BLOCKS_PER_SM);
  if (d->tuned && !run->schedule[0]) return LOOM_SUCCESS;
  loom_prog_t typed; /* the program as written, typed (the caller's is only read) */
  LOOM_TRY(loom_prog_schedule(d->prog, NULL, &typed));
  const loom_result_t r = loom__cg_named_program(typed, run->schedule, LOOM_CG_TUNE_DEPTH, LOOM_CG_TUNE_MAX, q);
  loom_prog_destroy(typed);
  LOOM_TRY(r);
  if (!*q)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: schedule=\"%s\": the program has no Schedule `%s` and `loom "
                      "schedules` lists none of that name (search depth %d, at most %d programs)", fn, d->schedule,
                      run->schedule, LOOM_CG_TUNE_DEPTH, LOOM_CG_TUNE_MAX);
  return LOOM_SUCCESS;
}

/* LOOM_ERR_UNSUPPORTED where lw's library runner cannot run here: NCCL's collectives need the comm's NCCL
 * communicator and equal slices (rows a multiple of W). */
static loom_result_t lib_fits(const char *fn, loom_comm_t comm, const loom__lw_prog_t *lw) {
  if (lw->lib != LOOM__LW_LIB_BASE) return LOOM_SUCCESS;
  if (!comm->nccl)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: " LOOM_CG_RUN_BASELINE " needs the comm's NCCL communicator (a "
                      "one-GPU world or a test comm has none)", fn);
  for (int u = 0; u < lw->nunit; ++u) {
    const loom__lw_unit_t *x = &lw->units[u];
    if (x->kind != LOOM__LU_COLL || lw->p->nodes[x->node].op == LOOM__OP_ALLREDUCE) continue;
    const loom__lw_geom_t *g = &lw->bufs[lw->p->nodes[x->node].op == LOOM__OP_ALLGATHER ? x->gemm_a : x->gemm_c].geom;
    if (g->dims[0] % lw->W)
      return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: " LOOM_CG_RUN_BASELINE ": %s slices %lld rows over %d ranks; "
                        "NCCL's slices are equal", fn, x->name, (long long)g->dims[0], lw->W);
  }
  return LOOM_SUCCESS;
}

static loom_result_t prog_check(const loom_op_t *op, loom_comm_t comm, const void *desc) {
  loom_prog_t q;
  loom__binding_t b;
  loom_cg_run_t run;
  const loom_cg_desc_t *d = (const loom_cg_desc_t *)desc;
  LOOM_TRY(desc_program(op->plan_fn, d, &q, &b, &run));
  if (!q) LOOM_TRY(loom_prog_schedule(d->prog, NULL, &q)); /* none named: the program as written, checked here */
  const loom_prog_t p = q;
  const int G = loom__lang_ngroups(p);
  loom_result_t r = LOOM_SUCCESS;
  if (comm->size % G != 0)
    r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: the program has %d pipeline groups; the comm's %d ranks are no "
                   "multiple of them", op->plan_fn, G, comm->size);
  else if (comm->size > LOOM_CG_MAX_RANKS)
    r = loom__fail(LOOM_ERR_UNSUPPORTED, "%s: %d ranks; generated code takes at most %d", op->plan_fn, comm->size,
                   LOOM_CG_MAX_RANKS);
  else if (!comm->detached && !comm->ws_all_reachable)
    r = loom__fail(LOOM_ERR_UNSUPPORTED, "%s: not every rank is load/store reachable from rank %d (generated kernels "
                   "reach their peers through peer pointers: one NVLink domain)", op->plan_fn, comm->rank);
  loom__lw_prog_t lw;
  if (r == LOOM_SUCCESS) r = loom__lw_lower_lib(p, comm->size / G, &b, run.lib, &lw);
  if (r == LOOM_SUCCESS) {
    r = lib_fits(op->plan_fn, comm, &lw);
    loom__lw_free(&lw);
  } else {
    loom__fail_append(" (%s)", op->plan_fn);
  }
  loom_prog_destroy(q);
  return r;
}

/* Kernel unit u on this rank: its image (compiled or cached), its grid. */
static loom_result_t resolve_kernel(loom_comm_t comm, loom_cg_state_t *st, int u) {
  const loom__lw_prog_t *lw = &st->lw;
  loom_cg_unit_rt_t *x = &st->units[u];
  char *src = NULL;
  loom__rtc_image_t im;
  LOOM_TRY(loom__cg_emit_unit(lw, u, &src));
  loom_result_t r = loom__rtc_compile(lw->units[u].name, src, st->arch, &im);
  free(src);
  LOOM_TRY(r);
  st->compile_ms += im.ms, st->compiled += im.from == LOOM__RTC_COMPILED, st->kernels++;
  x->key = im.key, x->func = im.data; /* the image until fill loads it */
  int64_t work = 1;
  const loom__lw_unit_t *un = &lw->units[u];
  for (int l = un->loop0; l < un->loop0 + un->nloops; ++l) {
    const loom__lw_loop_t *lp = &lw->loops[l];
    if (!loom__lw_runs_loop(lw, lp, st->rank)) continue;
    const int64_t cnt = loom__lw_piece_count(&lp->space, st->q);
    const int64_t last = lp->space.rank ? lp->space.dims[lp->space.rank - 1] : 1;
    const int64_t w = lp->kind == LOOM__LL_SUMSQ ? LOOM__LW_NPART
                    : lp->kind == LOOM__LL_ROW   ? (last ? cnt / last : 0)
                                                 : (cnt / loom__cg_loop_width(lw, lp) + LOOM_CG_THREADS - 1) /
                                                       LOOM_CG_THREADS;
    if (w > work) work = w;
  }
  x->work = work;
  return LOOM_SUCCESS;
}

/* Kernel unit u's grid, its kernel loaded: every block may wait for a peer or for the unit's other blocks,
 * so all are resident at once: at most as many per SM of this rank's share as the kernel's registers allow
 * (and the run's knob, else LOOM_CG_BLOCKS_PER_SM), and no more than its loops have work for. */
static loom_result_t unit_grid(loom_comm_t comm, int bps, loom_cg_unit_rt_t *x) {
  int per_sm = 0;
  LOOM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, x->func, LOOM_CG_THREADS, 0));
  if (per_sm < 1) return loom__fail(LOOM_ERR_INTERNAL, "a generated kernel fits no block of %d threads on an SM",
                                    LOOM_CG_THREADS);
  const int most = bps > 0 ? bps : LOOM_CG_BLOCKS_PER_SM; /* the run's knob, else the most */
  if (per_sm > most) per_sm = most;
  const int64_t cap = (int64_t)(comm->sm_count > 0 ? comm->sm_count : 1) * per_sm;
  x->blocks = (int)(x->work < cap ? x->work : cap);
  return LOOM_SUCCESS;
}

/* Where no schedule is named: the program the tuning cache names for this program, sizes and comm (prog_tune.h)
 * and its run; else the cost model's first eligible schedule (loom__cg_default_program); lowered into st->lw. A
 * stale entry, or a tuned schedule that no longer lowers, is warned about and the cost model's runs. */
static loom_result_t take_default(const loom_op_t *op, loom_comm_t comm, loom_cg_state_t *st, const loom__binding_t *b,
                                  int W, int G, loom_cg_run_t *run) {
  loom_cg_tune_shape_t sh;
  loom__cg_tune_shape(comm, W, G, &sh);
  loom__prog_t *q = NULL;
  LOOM_TRY(loom__cg_tuned_lookup(st->prog, b, &sh, op->plan_fn, &q, run, st->tuned));
  if (q && (loom__lw_lower_lib(q, W, b, run->lib, &st->lw) != LOOM_SUCCESS ||
            lib_fits(op->plan_fn, comm, &st->lw) != LOOM_SUCCESS)) {
    LOOM_WARN("%s: the tuned schedule %s of %s does not run here (%s); the cost model's schedule runs", op->plan_fn,
              st->tuned, st->prog->name, loom_last_error());
    if (st->lw.units) loom__lw_free(&st->lw);
    st->tuned[0] = 0;
    loom__lang_free(q), q = NULL;
  }
  if (q) {
    snprintf(st->run, sizeof st->run, "%s", st->tuned);
  } else {
    memset(run, 0, sizeof *run);
    LOOM_TRY(loom__cg_default_program(st->prog, W, b, LOOM_CG_TUNE_DEPTH, LOOM_CG_TUNE_MAX, &q, st->run));
    if (!q) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: out of host memory", op->plan_fn);
    const loom_result_t r = loom__lw_lower(q, W, b, &st->lw);
    if (r != LOOM_SUCCESS) return loom__lang_free(q), r;
  }
  loom_prog_destroy(st->prog);
  st->prog = q;
  return LOOM_SUCCESS;
}

/* Unit u's library collective (a COLL unit): loom's plan for it (LOOM__LW_LIB_LOOM), made in fill; NCCL's
 * needs none. */
static loom_result_t coll_plan(loom_comm_t comm, loom_cg_state_t *st, int u) {
  const loom__lw_unit_t *un = &st->lw.units[u];
  const int op = st->prog->nodes[un->node].op;
  const loom__lw_buf_t *whole = &st->lw.bufs[op == LOOM__OP_ALLGATHER ? un->gemm_c : un->gemm_a];
  loom_coll_desc_t cd = LOOM_COLL_DESC_INIT;
  cd.count = 1;
  for (int j = 0; j < whole->geom.rank; ++j) cd.count *= whole->geom.dims[j];
  cd.cols = op == LOOM__OP_ALLREDUCE ? 0 : cd.count / (whole->geom.dims[0] ? whole->geom.dims[0] : 1);
  cd.dtype = cd.out_type = (loom_dtype_t)whole->dtype;
  cd.world_size = comm->size;
  loom_plan_t *pl = &st->units[u].coll;
  return op == LOOM__OP_ALLREDUCE       ? loom_plan_allreduce(comm, &cd, pl)
       : op == LOOM__OP_REDUCESCATTER   ? loom_plan_reduce_scatter(comm, &cd, pl)
                                        : loom_plan_all_gather(comm, &cd, pl);
}

static loom_result_t prog_resolve(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state) {
  loom_cg_state_t *st = (loom_cg_state_t *)state;
  const loom_cg_desc_t *d = (const loom_cg_desc_t *)desc;
  loom__binding_t b;
  loom_cg_run_t run;
  LOOM_TRY(desc_program(op->plan_fn, d, &st->prog, &b, &run));
  const int named = st->prog != NULL;
  if (!named) LOOM_TRY(loom_prog_schedule(d->prog, NULL, &st->prog)); /* as written, until the default replaces it */
  const int G = loom__lang_ngroups(st->prog), W = comm->size / G;
  loom_cg_tune_shape_t sh;
  loom__cg_tune_shape(comm, W, G, &sh);
  snprintf(st->arch, sizeof st->arch, "%s", sh.arch);
  if (named) {
    loom__cg_run_name(&run, st->run, sizeof st->run);
    LOOM_TRY(loom__lw_lower_lib(st->prog, W, &b, run.lib, &st->lw));
  } else {
    LOOM_TRY(take_default(op, comm, st, &b, W, G, &run));
  }
  st->bps = run.bps;
  st->tune_gemms = !d->tuned;
  st->rank = comm->rank, st->q = comm->rank % st->lw.W;
  st->units = calloc((size_t)st->lw.nunit + 1, sizeof *st->units);
  if (!st->units) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: out of host memory", op->plan_fn);
  st->arena_bytes = st->lw.arena_bytes;
  uint32_t word = 0;
  for (int u = 0; u < st->lw.nunit; ++u) {
    loom_cg_unit_rt_t *x = &st->units[u];
    x->runs = loom__lw_runs_unit(&st->lw, &st->lw.units[u], st->rank);
    if (st->lw.units[u].kind == LOOM__LU_GEMM) {
      LOOM_TRY(loom__cg_gemm_resolve(st, u));
      continue;
    }
    if (st->lw.units[u].kind == LOOM__LU_COLL) continue;
    x->word0 = word, x->words = loom__cg_unit_words(&st->lw.units[u]);
    word += x->words;
    LOOM_TRY(resolve_kernel(comm, st, u));
  }
  if (st->arena_bytes == 0) st->arena_bytes = 256;
  return LOOM_SUCCESS;
}

static loom_result_t prog_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  loom_cg_state_t *st = (loom_cg_state_t *)state;
  uint64_t h = loom__fnv64(LOOM_FNV64_INIT, &st->arena_bytes, sizeof st->arena_bytes);
  uint32_t words = 0;
  for (int u = 0; u < st->lw.nunit; ++u) {
    h = loom__fnv64(h, &st->units[u].key, sizeof st->units[u].key);
    words += st->units[u].words;
  }
  st->fingerprint = h;
  lay->nsignals = words;
  lay->staging_bytes = 0;
  lay->fingerprint = h;
  return LOOM_SUCCESS;
}

static loom_result_t fill_arena(loom_plan_t plan, loom_cg_state_t *st) {
  loom_comm_t comm = plan->comm;
  LOOM_TRY(loom__comm_malloc(comm, (size_t)st->arena_bytes, &st->arena));
  LOOM_CUDA(cudaMemsetAsync(st->arena, 0, (size_t)st->arena_bytes, comm->stream)); /* the pads stay zero */
  LOOM_CUDA(cudaStreamSynchronize(comm->stream));
  return loom__peer_addresses(plan->op->plan_fn, "the arena", comm, st->arena, (size_t)st->arena_bytes,
                              "the plan's own buffer", st->arena_peer);
}

static loom_result_t prog_fill(loom_plan_t plan, void *state) {
  loom_cg_state_t *st = (loom_cg_state_t *)state;
  if (plan->comm->detached) return loom__plan_detached(plan->op->plan_fn);
  loom_result_t r = fill_arena(plan, st);
  for (int u = 0; u < st->lw.nunit && r == LOOM_SUCCESS; ++u)
    if (st->lw.units[u].kind == LOOM__LU_KERNEL) {
      r = loom__cg_module_kernel(st->units[u].func, st->units[u].key, &st->units[u].func);
      if (r == LOOM_SUCCESS) r = unit_grid(plan->comm, st->bps, &st->units[u]);
    } else if (st->lw.units[u].kind == LOOM__LU_COLL && st->lw.lib == LOOM__LW_LIB_LOOM) {
      r = coll_plan(plan->comm, st, u); /* collective: every rank runs every COLL unit (one group) */
    }
  /* every rank has loaded its kernels before any runs one (loading may wait for the device) */
  const loom_result_t ra = loom__comm_agree(plan->comm, plan->op->plan_fn, 0, r != LOOM_SUCCESS, "");
  return r == LOOM_SUCCESS ? ra : r;
}

static void prog_release(loom_comm_t comm, void *state) {
  loom_cg_state_t *st = (loom_cg_state_t *)state;
  for (int u = 0; st->units && u < st->lw.nunit; ++u)
    if (st->units[u].coll) (void)loom_plan_destroy(st->units[u].coll);
  if (st->arena) (void)loom__comm_free(comm, st->arena);
  loom__lw_free(&st->lw);
  loom_prog_destroy(st->prog);
  free(st->units);
}

static void prog_describe(loom_plan_t plan, const void *state) {
  const loom_cg_state_t *st = (const loom_cg_state_t *)state;
  LOOM_INFO("%s: %s, %s%s at W = %d (%d groups): %d units, %d kernels (%d compiled, %.1f ms), arena %lld bytes",
            plan->op->plan_fn, st->prog->name, st->run, st->tuned[0] ? " (tuning cache)" : "", st->lw.W,
            st->lw.G, st->lw.nunit, st->kernels, st->compiled, st->compile_ms, (long long)st->arena_bytes);
}

const loom_op_t loom__op_prog = {
    .name = "prog", .plan_fn = "loom_prog_compile", .family = NULL, .kind = 0,
    .state_bytes = sizeof(loom_cg_state_t),
    .differ = "every rank must pass the same program, schedule and sizes (and, with no schedule named, hold the same "
              "tuning-cache entry for them)",
    .check = prog_check, .resolve = prog_resolve, .lay_out = prog_lay_out, .fill = prog_fill,
    .release = prog_release, .describe = prog_describe,
};

loom_result_t loom_prog_compile(loom_comm_t comm, loom_prog_t prog, const char *schedule, const char *bind,
                                loom_plan_t *out) {
  const loom_cg_desc_t d = {prog, schedule, bind, 1};
  return loom__plan_make(comm, &loom__op_prog, &d, out);
}

loom_result_t loom__cg_compile(loom_comm_t comm, loom_prog_t prog, const char *schedule, const char *bind, int tuned,
                               int checked, loom_plan_t *out) {
  const loom_cg_desc_t d = {prog, schedule, bind, tuned};
  return checked ? loom__plan_build(comm, &loom__op_prog, &d, out) : loom__plan_make(comm, &loom__op_prog, &d, out);
}

/* ---- inputs and outputs ---------------------------------------------------------------- */

/* The state of a program's plan for an info call whose struct (arg, its struct_size) must be `want` bytes. */
static loom_result_t info_state(loom_plan_t plan, const char *fn, const char *arg, const size_t *struct_size,
                                size_t want, const char *init, const loom_cg_state_t **st) {
  LOOM_TRY(loom__plan_state(plan, fn, NULL, &loom__op_prog, (void **)st));
  if (!struct_size) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=NULL", fn, arg);
  if (*struct_size != want)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s->struct_size=%zu, expected %zu (initialise with %s)", fn,
                      arg, *struct_size, want, init);
  return LOOM_SUCCESS;
}

loom_result_t loom_prog_plan_io(loom_plan_t plan, int output, int i, loom_prog_io_t *io) {
  const char *fn = "loom_prog_plan_io";
  const loom_cg_state_t *st = NULL;
  LOOM_TRY(info_state(plan, fn, "io", io ? &io->struct_size : NULL, sizeof *io, "LOOM_PROG_IO_INIT", &st));
  const loom__lw_prog_t *lw = &st->lw;
  const int n = output ? lw->noutputs : lw->ninputs;
  if (i < 0 || i >= n)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: i=%d; the program has %d %s", fn, i, n,
                      output ? "outputs (Execute's, then the states)" : "inputs");
  const int node = output ? lw->out_node[i] : lw->in_node[i];
  const loom__lw_buf_t *b = &lw->bufs[lw->buf_of[node]];
  const loom__type_t *t = &st->prog->nodes[node].ty;
  memset(io, 0, sizeof *io);
  io->struct_size = sizeof *io;
  snprintf(io->name, sizeof io->name, "%s", output ? lw->out_name[i] : st->prog->nodes[node].name);
  io->dtype = (loom_dtype_t)b->dtype;
  io->rank = b->geom.rank;
  io->layout = (loom_prog_layout_t)t->lay.kind;
  io->arg = t->lay.arg;
  io->group = b->geom.group;
  io->held = loom__lw_holds(lw, b, st->rank);
  loom__lw_piece(&b->geom, st->q, io->dims, &io->offset);
  io->count = io->held ? loom__lw_piece_count(&b->geom, st->q) : 0;
  for (int j = 0; j < b->geom.rank; ++j) io->whole[j] = b->geom.dims[j];
  if (!io->held)
    for (int j = 0; j < b->geom.rank; ++j) io->dims[j] = 0;
  return LOOM_SUCCESS;
}

loom_result_t loom_prog_plan_info(loom_plan_t plan, loom_prog_plan_info_t *info) {
  const char *fn = "loom_prog_plan_info";
  const loom_cg_state_t *st = NULL;
  LOOM_TRY(info_state(plan, fn, "info", info ? &info->struct_size : NULL, sizeof *info, "LOOM_PROG_PLAN_INFO_INIT",
                      &st));
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  info->ninputs = st->lw.ninputs, info->noutputs = st->lw.noutputs;
  info->world = st->lw.W, info->groups = st->lw.G;
  info->units = st->lw.nunit, info->kernels = st->kernels, info->compiled = st->compiled;
  info->compile_ms = st->compile_ms;
  info->arena_bytes = (size_t)st->arena_bytes;
  snprintf(info->schedule, sizeof info->schedule, "%s", st->run);
  info->workspace_bytes = plan->ws_bytes;
  return LOOM_SUCCESS;
}
