/*
 * prog_tune.c - loom_prog_tune: every schedule of a program timed on this
 * comm by the one tuning rule (core/tune_rule.h), and the fastest that
 * takes the program's inputs and outputs as written recorded in the tuning
 * cache, which an untuned loom_prog_compile of the program then runs
 * (prog_plan.c; the key and value: prog_tune.h).
 *
 * Steps, collective (every rank makes the same list and the same calls):
 *   prepare    the arguments (a test comm without a GPU cannot time; a
 *              capturing stream is refused); the candidates
 *              (prog_tune_cands.c): the program as written first (candidate
 *              0, the default to beat), every schedule `loom schedules`
 *              lists, cheapest by the cost model first, then the program as
 *              written as loom's ops one after another ("sequential") and
 *              as cuBLASLt + NCCL; the buffers: each input and output at its
 *              whole size (every candidate's piece fits), the inputs drawn
 *              as the interpreter draws them (uniform in [0.25, 1.25), never
 *              zero); the ranks agree
 *   compile    each candidate once through the door (its run name: the
 *              runner, the knob), the tuning cache left alone
 *              (loom__cg_compile): one that does not compile here is left
 *              out with the reason (cublaslt+nccl without an NCCL
 *              communicator); its kernels go into the caches
 *   race       loom__tune_race over the rest: each round a candidate's plan
 *              is built (kernels from the memory cache), its calls timed,
 *              the plan destroyed; the slowest rank's time; medians
 *   pick       the race's winner where it is eligible, else the rule's pick
 *              (loom__tune_rule_pick: the margin over candidate 0) among
 *              the eligible candidates' medians
 *   knob       the TUNE_KNOB_TOP fastest eligible candidates with generated
 *              kernels, each at fewer blocks per SM (a generated kernel's
 *              grid: as many as are resident, up to LOOM_CG_BLOCKS_PER_SM;
 *              the knob halves it), compiled and raced against the pick
 *              (the default of this race); the pick of this race wins
 *   record     loom__tune_record (rank 0 writes LOOM_TUNE_FILE)
 *   report     every candidate's prediction, median and note, and
 *              Spearman's rank correlation of predicted and measured over
 *              the schedules (not the runners and knobs: the cost model
 *              predicts neither)
 * A GEMM unit's tiles: the tuner's plans tune each GEMM shape the tuning
 * cache lacks at their first call (a warm-up call of the race; loom_gemm's
 * own tuner, recorded in the tuning cache, which later plans take), so the
 * schedules race at their GEMMs' tuned tiles. loom's collectives (the
 * sequential runner) keep their own AUTO choice.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "codegen/prog.h"
#include "codegen/prog_tune.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tune.h"
#include "core/tune_rule.h"
#include "lang/interp_ops.h"

#define TUNE_FILL_PERIOD ((size_t)1 << 20) /* elements drawn on the host, then repeated */
#define TUNE_SEED 0x70726f67ull
#define TUNE_KNOB_TOP 3 /* candidates whose knob the second round times */
_Static_assert(TUNE_KNOB_TOP == 3 && LOOM_CG_BLOCKS_PER_SM == 4, "LOOM_PROG_TUNE_ROWS counts 3 candidates x 2 knob values");

/* Every input and output at its largest whole size over the candidates. */
typedef struct tune_bufs {
  int ni, no;
  void *in[LOOM_CG_MAX_PTRS], *out[LOOM_CG_MAX_PTRS];
  size_t in_bytes[LOOM_CG_MAX_PTRS], out_bytes[LOOM_CG_MAX_PTRS];
} tune_bufs_t;

/* One tuning: what it made, freed by tune_free. */
typedef struct tune {
  loom__prog_t *p;           /* the program, typed */
  loom__binding_t b;
  int W, G, depth, max;
  loom_cg_tune_shape_t shape;
  loom_cg_cands_t cs;
  tune_bufs_t t;
  float *med;                /* [cs.n]: each candidate's median (ms), LOOM_TUNE_LEFT_OUT where it did not run */
  char key[LOOM_TUNE_TEXT_BYTES];
} tune_t;

/* Element i of a fill: uniform in [0.25, 1.25), rounded to t, stored as t's bits (exact: the value is t's). */
static void store_elem(int t, void *h, size_t i, double v) {
  v = loom__interp_round(v, t);
  if (t == LOOM_FP32) {
    ((float *)h)[i] = (float)v;
  } else if (t == LOOM_BF16) {
    const float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    ((uint16_t *)h)[i] = (uint16_t)(u >> 16);
  } else { /* fp16, a normal number: v = (1 + m / 1024) 2^(E - 15) */
    int e;
    const double m = frexp(v, &e); /* v = m 2^e, m in [0.5, 1) */
    ((uint16_t *)h)[i] = (uint16_t)((e - 1 + 15) << 10 | (int)((2.0 * m - 1.0) * 1024.0));
  }
}

/* bytes of dtype t at dev: a period of up to 2^20 elements drawn on the host (stream s), then repeated by
 * device copies of what is filled already. */
static loom_result_t fill_random(void *dev, int t, size_t bytes, uint64_t seed, int rank, cudaStream_t s) {
  const size_t es = loom_dtype_size((loom_dtype_t)t), n = bytes / es, period = n < TUNE_FILL_PERIOD ? n : TUNE_FILL_PERIOD;
  if (!n) return LOOM_SUCCESS;
  void *h = malloc(period * es);
  if (!h) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_prog_tune: host memory for the inputs' values");
  for (size_t i = 0; i < period; ++i) store_elem(t, h, i, loom__interp_input_elem("loom_prog_tune", seed, rank, (int64_t)i));
  cudaError_t e = cudaMemcpyAsync(dev, h, period * es, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  free(h);
  for (size_t done = period; e == cudaSuccess && done < n;) {
    const size_t k = done < n - done ? done : n - done;
    e = cudaMemcpyAsync((char *)dev + done * es, dev, k * es, cudaMemcpyDeviceToDevice, s);
    done += k;
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? LOOM_SUCCESS : loom__cuda_fail((int)e, "filling the tuner's inputs", __FILE__, __LINE__);
}

static void bufs_free(tune_bufs_t *t) {
  for (int i = 0; i < t->ni; ++i)
    if (t->in[i]) (void)cudaFree(t->in[i]);
  for (int j = 0; j < t->no; ++j)
    if (t->out[j]) (void)cudaFree(t->out[j]);
  memset(t, 0, sizeof *t);
}

/* The buffers every candidate runs on (schedules keep the inputs' dtypes: input i's is any candidate's). */
static loom_result_t bufs_make(const loom_cg_cands_t *cs, int rank, cudaStream_t s, tune_bufs_t *t) {
  int dtype[LOOM_CG_MAX_PTRS];
  memset(t, 0, sizeof *t);
  for (int c = 0; c < cs->n; ++c) {
    const loom_cg_cand_t *x = &cs->c[c];
    if (!x->q) continue;
    for (int i = 0; i < x->ni; ++i) {
      if (i >= t->ni) dtype[i] = x->in_dtype[i];
      if (x->in_bytes[i] > t->in_bytes[i]) t->in_bytes[i] = x->in_bytes[i];
    }
    for (int j = 0; j < x->no; ++j)
      if (x->out_bytes[j] > t->out_bytes[j]) t->out_bytes[j] = x->out_bytes[j];
    if (x->ni > t->ni) t->ni = x->ni;
    if (x->no > t->no) t->no = x->no;
  }
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < t->ni && r == LOOM_SUCCESS; ++i) {
    const cudaError_t e = cudaMalloc(&t->in[i], t->in_bytes[i] + 16);
    r = e != cudaSuccess ? loom__cuda_fail((int)e, "cudaMalloc (the tuner's inputs)", __FILE__, __LINE__)
                         : fill_random(t->in[i], dtype[i], t->in_bytes[i], TUNE_SEED + (uint64_t)i, rank, s);
  }
  for (int j = 0; j < t->no && r == LOOM_SUCCESS; ++j) {
    const cudaError_t e = cudaMalloc(&t->out[j], t->out_bytes[j] + 16);
    if (e != cudaSuccess) r = loom__cuda_fail((int)e, "cudaMalloc (the tuner's outputs)", __FILE__, __LINE__);
  }
  return r;
}

/* The arguments, rank-local. */
static loom_result_t tune_args(loom_comm_t comm, loom_prog_t prog, const char *bind, cudaStream_t stream,
                               const loom_prog_tune_result_t *res, tune_t *k) {
  const char *fn = "loom_prog_tune";
  if (!prog) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: prog=NULL", fn);
  if (res && res->struct_size != sizeof *res)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: result->struct_size=%zu, expected %zu (initialise with "
                      "LOOM_PROG_TUNE_RESULT_INIT)", fn, res->struct_size, sizeof *res);
  if (res && (res->cap < 0 || (res->cap > 0 && !res->rows)))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: result->cap=%d with rows=%p", fn, res->cap, (void *)res->rows);
  k->depth = res ? res->depth : LOOM_CG_TUNE_DEPTH;
  k->max = res ? res->max : LOOM_CG_TUNE_MAX;
  if (k->depth < 0 || k->depth > 32 || k->max < 1 || k->max > 4000)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: result->depth=%d, max=%d: the search takes 0..32 moves and "
                      "1..4000 programs", fn, k->depth, k->max);
  LOOM_TRY(loom__lang_parse_bind(bind ? bind : "", &k->b));
  LOOM_TRY(loom_prog_schedule(prog, NULL, &k->p));
  k->G = loom__lang_ngroups(k->p);
  if (comm->size % k->G != 0 || comm->size > LOOM_CG_MAX_RANKS)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: the program has %d pipeline groups; the comm's %d ranks are no "
                      "multiple of them (or more than %d)", fn, k->G, comm->size, LOOM_CG_MAX_RANKS);
  if (comm->detached) return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: a test comm without a GPU cannot time", fn);
  LOOM_TRY(loom__stream_not_capturing(fn, stream));
  k->W = comm->size / k->G;
  loom__cg_tune_shape(comm, k->W, k->G, &k->shape);
  return LOOM_SUCCESS;
}

/* The arguments, the candidates and the buffers (rank-local), then the ranks' agreement. */
static loom_result_t tune_prepare(loom_comm_t comm, loom_prog_t prog, const char *bind, cudaStream_t stream,
                                  const loom_prog_tune_result_t *res, tune_t *k) {
  const char *fn = "loom_prog_tune";
  loom_result_t r = tune_args(comm, prog, bind, stream, res, k);
  if (r == LOOM_SUCCESS) r = loom__cg_tune_candidates(k->p, k->W, &k->b, k->depth, k->max, &k->cs);
  const loom_cg_cand_t *c0 = k->cs.n ? &k->cs.c[0] : NULL;
  if (r == LOOM_SUCCESS && c0 && c0->refused)
    r = loom__fail(c0->code, "%s: the program as written does not run here: %s", fn, c0->note);
  if (r == LOOM_SUCCESS && !loom__cg_tune_key(k->p, &k->b, &k->shape, k->key, sizeof k->key))
    r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: out of host memory printing the program", fn);
  char old[LOOM_TUNE_TEXT_BYTES];
  if (r == LOOM_SUCCESS && loom__tune_get(k->key, old, sizeof old)) /* (LOOM_TUNE_FILE is read before a put) */
    LOOM_INFO("%s: %s = %s: tuning it again", fn, k->key, old);
  if (r == LOOM_SUCCESS && !(k->med = malloc(sizeof(float) * (size_t)k->cs.n)))
    r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  if (r == LOOM_SUCCESS) r = bufs_make(&k->cs, comm->rank, stream, &k->t);
  if (r != LOOM_SUCCESS) return loom__comm_refuse(comm, fn, r);
  loom_cg_tune_shape_t same = k->shape; /* what every rank must share: the key without this rank's SMs */
  same.sms = 0;
  char agreed[LOOM_TUNE_TEXT_BYTES];
  (void)loom__cg_tune_key(k->p, &k->b, &same, agreed, sizeof agreed);
  const int f[3] = {k->depth, k->max, k->cs.n};
  const uint64_t h = loom__fnv64(loom__fnv64(LOOM_FNV64_INIT, agreed, strlen(agreed)), f, sizeof f);
  return loom__comm_agree(comm, fn, h, 0, "every rank must tune the same program, sizes and search bounds");
}

/* The run name candidate c's (scheduled) program compiles with: its runner and knob ("unscheduled/b2",
 * "sequential"); NULL where it has neither (the program as given). */
static const char *compile_name(const loom_cg_cand_t *c, char *buf, size_t cap) {
  if (!c->run.lib && !c->run.bps) return NULL;
  loom_cg_run_t run = c->run;
  if (!run.lib) snprintf(run.schedule, sizeof run.schedule, "unscheduled");
  loom__cg_run_name(&run, buf, cap);
  return buf;
}

/* Each candidate not refused compiled once (collective; a compile fails on every rank or none): one that does
 * not compile here is left out with why, unless the comm itself failed. */
static loom_result_t compile_all(loom_comm_t comm, tune_t *k, const char *bind, int from) {
  for (int i = from; i < k->cs.n; ++i) {
    loom_cg_cand_t *c = &k->cs.c[i];
    if (!c->q) continue;
    loom_plan_t plan = NULL;
    char name[LOOM__LANG_NAME];
    const loom_result_t r = loom__cg_compile(comm, c->q, compile_name(c, name, sizeof name), bind, 0, 0, &plan);
    if (r == LOOM_SUCCESS) {
      LOOM_TRY(loom_plan_destroy(plan));
      continue;
    }
    c->refused = 1, c->code = r;
    snprintf(c->note, sizeof c->note, "does not compile here: %s", loom_last_error());
    LOOM_TRY(loom__comm_check(comm, "loom_prog_tune"));
    if (i == 0) return loom__fail(r, "loom_prog_tune: the program as written does not compile here: %s", c->note);
  }
  return LOOM_SUCCESS;
}

/* ---- the race -------------------------------------------------------------------------------- */

typedef struct prog_race {
  loom_comm_t comm;
  const char *bind;
  const tune_t *k;
  const int *idx; /* race index -> candidate */
  loom_plan_t plan;
} prog_race_t;

/* LOOM_ERR_INTERNAL where a plan's input or output is larger than the tuner's buffer for it. */
static loom_result_t plan_fits(loom_plan_t plan, const tune_bufs_t *t) {
  loom_prog_plan_info_t info = LOOM_PROG_PLAN_INFO_INIT;
  LOOM_TRY(loom_prog_plan_info(plan, &info));
  if (info.ninputs > t->ni || info.noutputs > t->no)
    return loom__fail(LOOM_ERR_INTERNAL, "loom_prog_tune: a plan of %d inputs and %d outputs; the tuner has %d and %d",
                      info.ninputs, info.noutputs, t->ni, t->no);
  for (int side = 0; side < 2; ++side)
    for (int i = 0; i < (side ? info.noutputs : info.ninputs); ++i) {
      loom_prog_io_t io = LOOM_PROG_IO_INIT;
      LOOM_TRY(loom_prog_plan_io(plan, side, i, &io));
      const size_t bytes = (size_t)io.count * loom_dtype_size(io.dtype);
      if (bytes > (side ? t->out_bytes[i] : t->in_bytes[i]))
        return loom__fail(LOOM_ERR_INTERNAL, "loom_prog_tune: %s %d takes %zu bytes; the tuner's buffer has %zu",
                          side ? "output" : "input", i, bytes, side ? t->out_bytes[i] : t->in_bytes[i]);
    }
  return LOOM_SUCCESS;
}

static loom_result_t race_open(void *ctx, int i, cudaStream_t stream) {
  prog_race_t *x = (prog_race_t *)ctx;
  (void)stream;
  const loom_cg_cand_t *c = &x->k->cs.c[x->idx[i]];
  char name[LOOM__LANG_NAME];
  LOOM_TRY(loom__cg_compile(x->comm, c->q, compile_name(c, name, sizeof name), x->bind, 0, 1, &x->plan));
  return plan_fits(x->plan, &x->k->t);
}

static loom_result_t race_call(void *ctx, int i, cudaStream_t stream) {
  const prog_race_t *x = (const prog_race_t *)ctx;
  (void)i;
  return loom_prog_run(x->plan, (const void *const *)x->k->t.in, x->k->t.out, stream);
}

static void race_close(void *ctx, int i) {
  prog_race_t *x = (prog_race_t *)ctx;
  (void)i;
  if (x->plan) (void)loom_plan_destroy(x->plan);
  x->plan = NULL;
}

/* The race's winner where it is eligible, else the rule's pick among the eligible candidates' medians. */
static int pick_eligible(const tune_t *k, const int *idx, int n, const float *med, int won) {
  if (k->cs.c[idx[won]].eligible) return won;
  float *m = malloc(sizeof(float) * 2 * (size_t)n);
  int *map = malloc(sizeof(int) * (size_t)n), e = 0, best = 0;
  if (!m || !map) { /* the default, which is eligible */
    free(m), free(map);
    return 0;
  }
  for (int i = 0; i < n; ++i)
    if (k->cs.c[idx[i]].eligible) m[e] = med[i], map[e++] = i;
  const int b = loom__tune_rule_pick(m, 1, e, m + n);
  if (b >= 0) best = map[b];
  free(m), free(map);
  return best;
}

/* The race over candidates idx[0..n) (idx[0] the default to beat); *won: the candidate picked, med[candidate]:
 * its median (ms; LOOM_TUNE_LEFT_OUT where it did not run). */
static loom_result_t race_of(loom_comm_t comm, const tune_t *k, const char *bind, cudaStream_t stream, const int *idx,
                             int n, int *won, float *med) {
  float *t = malloc(sizeof(float) * (size_t)(n + 1));
  if (!t) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_prog_tune: out of host memory");
  prog_race_t ctx = {comm, bind, k, idx, NULL};
  const loom_tune_race_t rc = {"loom_prog_tune", n, &ctx, race_open, race_call, race_close, comm};
  int best = 0;
  float best_ms = 0;
  const loom_result_t r = loom__tune_race(&rc, stream, &best, &best_ms, t);
  if (r == LOOM_SUCCESS) {
    for (int i = 0; i < n; ++i) med[idx[i]] = t[i];
    *won = idx[pick_eligible(k, idx, n, t, best)];
  }
  free(t);
  return r;
}

/* The race over every candidate that compiled (the default first). */
static loom_result_t race(loom_comm_t comm, const tune_t *k, const char *bind, cudaStream_t stream, int *won,
                          float *med) {
  int *idx = malloc(sizeof(int) * (size_t)k->cs.n), n = 0;
  if (!idx) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_prog_tune: out of host memory");
  for (int i = 0; i < k->cs.n; ++i) {
    med[i] = LOOM_TUNE_LEFT_OUT;
    if (k->cs.c[i].q && !k->cs.c[i].refused) idx[n++] = i; /* idx[0] = 0: the default */
  }
  const loom_result_t r = race_of(comm, k, bind, stream, idx, n, won, med);
  free(idx);
  return r;
}

/* The knob's round: the TUNE_KNOB_TOP fastest eligible candidates with generated kernels, each with its
 * knob's variants, raced against the first race's winner (the default to beat); *won the pick. */
static loom_result_t knob_round(loom_comm_t comm, tune_t *k, const char *bind, cudaStream_t stream, int *won) {
  int top[TUNE_KNOB_TOP], ntop = 0;
  for (int pass = 0; pass < TUNE_KNOB_TOP; ++pass) { /* the fastest not taken yet */
    int b = -1;
    for (int i = 0; i < k->cs.n; ++i) {
      const loom_cg_cand_t *c = &k->cs.c[i];
      int taken = 0;
      for (int j = 0; j < ntop; ++j) taken |= top[j] == i;
      if (taken || !c->eligible || c->run.lib || !c->kernels || k->med[i] >= LOOM_TUNE_LEFT_OUT) continue;
      if (b < 0 || k->med[i] < k->med[b]) b = i;
    }
    if (b >= 0) top[ntop++] = b;
  }
  const int first = k->cs.n;
  for (int j = 0; j < ntop; ++j) {
    int added;
    LOOM_TRY(loom__cg_tune_knobs(&k->cs, top[j], &added));
  }
  float *med = realloc(k->med, sizeof(float) * (size_t)(k->cs.n + 1));
  int *idx = malloc(sizeof(int) * (size_t)(k->cs.n - first + 1));
  if (med) k->med = med;
  if (!med || !idx) return free(idx), loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_prog_tune: out of host memory");
  for (int i = first; i < k->cs.n; ++i) {
    k->med[i] = LOOM_TUNE_LEFT_OUT;
    snprintf(k->cs.c[i].note, sizeof k->cs.c[i].note, "knob round: raced against %s", k->cs.c[*won].name);
  }
  loom_result_t r = compile_all(comm, k, bind, first);
  int n = 0;
  idx[n++] = *won;
  for (int i = first; i < k->cs.n; ++i)
    if (!k->cs.c[i].refused) idx[n++] = i;
  float was = k->med[*won];
  if (r == LOOM_SUCCESS && n > 1) r = race_of(comm, k, bind, stream, idx, n, won, k->med);
  if (r == LOOM_SUCCESS && n > 1) {
    /* the knob's rows name the default's time in their own race (two races differ by more than noise
     * under load); the first race's median stays the default's row */
    for (int i = first; i < k->cs.n; ++i)
      snprintf(k->cs.c[i].note, sizeof k->cs.c[i].note, "knob round: raced against %s (%.2f us there)",
               k->cs.c[idx[0]].name, 1e3 * (double)k->med[idx[0]]);
    k->med[idx[0]] = was;
  }
  free(idx);
  return r;
}

/* ---- record and report ----------------------------------------------------------------------- */

static loom_result_t record(loom_comm_t comm, const tune_t *k, int won, float ms, loom_prog_tune_result_t *res) {
  char value[LOOM_TUNE_TEXT_BYTES];
  const loom_cg_cand_t *c = &k->cs.c[won];
  loom__cg_tune_value(c->name, k->depth, k->max, c->text, value, sizeof value);
  if (comm->world)
    LOOM_INFO("loom_prog_tune: a one-GPU world's ranks share the GPU: its times are not %d GPUs' (the entry is keyed "
              "to the world)", comm->size);
  if (res) snprintf(res->key, sizeof res->key, "%s", k->key), snprintf(res->value, sizeof res->value, "%s", value);
  return loom__tune_record("loom_prog_tune", k->key, value, ms, comm->rank == 0);
}

static void report(const tune_t *k, const float *med, int won, loom_prog_tune_result_t *res) {
  double *x = malloc(sizeof(double) * 2 * (size_t)k->cs.n);
  int m = 0;
  res->n = k->cs.n, res->winner = won;
  for (int i = 0; i < k->cs.n; ++i) {
    const loom_cg_cand_t *c = &k->cs.c[i];
    const int ran = med[i] < LOOM_TUNE_LEFT_OUT;
    if (ran && x && !c->run.lib && !c->run.bps) /* the cost model predicts schedules, not runners or knobs */
      x[m] = c->predicted_us, x[k->cs.n + m++] = 1e3 * (double)med[i];
    LOOM_INFO("loom_prog_tune: %-14s predicted %10.2f us, measured %10.2f us%s %s", c->name, c->predicted_us,
              ran ? 1e3 * (double)med[i] : -1.0, c->eligible ? "" : " (not eligible)", c->note);
    if (i >= res->cap) continue;
    loom_prog_tune_row_t *row = &res->rows[i];
    memset(row, 0, sizeof *row);
    snprintf(row->schedule, sizeof row->schedule, "%s", c->name);
    row->own = c->own, row->predicted_us = c->predicted_us, row->eligible = c->eligible;
    row->measured_us = ran ? 1e3 * (double)med[i] : -1.0;
    snprintf(row->note, sizeof row->note, "%s", !ran && !c->note[0] ? "left out: it cannot run here" : c->note);
  }
  res->rank_correlation = x ? loom__rank_correlation(x, x + k->cs.n, m) : NAN;
  free(x);
}

static void tune_free(tune_t *k) {
  free(k->med);
  bufs_free(&k->t);
  loom__cg_tune_candidates_free(&k->cs);
  loom__lang_free(k->p);
}

loom_result_t loom_prog_tune(loom_comm_t comm, loom_prog_t prog, const char *bind, cudaStream_t stream,
                             loom_prog_tune_result_t *result) {
  LOOM_TRY(loom__comm_check(comm, "loom_prog_tune"));
  tune_t k;
  memset(&k, 0, sizeof k);
  loom_result_t r = tune_prepare(comm, prog, bind, stream, result, &k);
  /* from here on every rank fails alike: the compiles and the race are collective */
  if (r == LOOM_SUCCESS) r = compile_all(comm, &k, bind, 0);
  int won = 0;
  if (r == LOOM_SUCCESS) r = race(comm, &k, bind, stream, &won, k.med);
  if (r == LOOM_SUCCESS) r = knob_round(comm, &k, bind, stream, &won);
  if (r == LOOM_SUCCESS) r = record(comm, &k, won, k.med[won], result);
  if (r == LOOM_SUCCESS && result) report(&k, k.med, won, result);
  tune_free(&k);
  return r;
}
