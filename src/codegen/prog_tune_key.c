/*
 * prog_tune_key.c - a loom program's entry in the tuning cache
 * (prog_tune.h): its key and value, the names of what a plan runs (a
 * schedule, a runner, a knob) parsed and found again (the program as
 * written, a Schedule section, or the search's schedule of that name at the
 * value's bounds, each accepted only where its printed text hashes as the
 * value says), and the rank correlation the tuner
 * reports between the cost model's predictions and the measured times.
 * Host only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/prog_tune.h"
#include "codegen/rtc.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tune.h"

static uint64_t hash_str(uint64_t h, const char *s) { return loom__fnv64(h, s, strlen(s) + 1); }

uint64_t loom__cg_prog_hash(const loom__prog_t *p, int text_only) {
  loom__buf_t b = {0};
  if (loom__lang_print(p, 0, &b) != LOOM_SUCCESS || !b.s) {
    free(b.s);
    return 0;
  }
  uint64_t h = loom__fnv64(LOOM_FNV64_INIT, b.s, b.len);
  free(b.s);
  for (int i = 0; !text_only && i < p->nsched; ++i) {
    const loom__sched_t *s = &p->scheds[i];
    h = hash_str(h, s->name);
    for (int k = 0; k < s->n; ++k) {
      const loom__stmt_t *st = &s->stmts[k];
      h = hash_str(h, st->fn);
      for (int j = 0; j < st->nlhs; ++j) h = hash_str(h, st->lhs[j]);
      h = hash_str(h, "=");
      for (int j = 0; j < st->nargs; ++j) h = hash_str(h, st->args[j]);
    }
  }
  return h ? h : 1;
}

/* "B:8,H:3072,S:1024": the bound sizes of the symbols p's tensors are declared with, sorted by name. */
static void bind_text(const loom__prog_t *p, const loom__binding_t *b, char *out, size_t cap) {
  int pick[16], n = 0;
  for (int i = 0; i < p->n; ++i) {
    const loom__node_t *nd = &p->nodes[i];
    if (nd->removed || nd->op != LOOM__OP_INPUT) continue;
    for (int d = 0; d < nd->decl.rank; ++d) {
      int k = -1; /* the first binding of the symbol, as the sizes are looked up */
      for (int j = 0; j < b->n && k < 0 && nd->decl.dims[d].sym[0]; ++j)
        if (!strcmp(b->sym[j], nd->decl.dims[d].sym)) k = j;
      int seen = k < 0;
      for (int j = 0; j < n && !seen; ++j) seen = pick[j] == k;
      if (seen) continue;
      int at = n++; /* insertion by name */
      while (at > 0 && strcmp(b->sym[pick[at - 1]], b->sym[k]) > 0) pick[at] = pick[at - 1], at--;
      pick[at] = k;
    }
  }
  size_t used = 0;
  out[0] = 0;
  for (int j = 0; j < n && used < cap; ++j) {
    const int w = snprintf(out + used, cap - used, "%s%s:%lld", j ? "," : "", b->sym[pick[j]],
                           (long long)b->val[pick[j]]);
    if (w > 0) used += (size_t)w;
  }
  if (!n) snprintf(out, cap, "-");
}

int loom__cg_tune_key(const loom__prog_t *p, const loom__binding_t *b, const loom_cg_tune_shape_t *s, char *key,
                      size_t cap) {
  const uint64_t h = loom__cg_prog_hash(p, 0);
  if (!h) return 0;
  char bind[600];
  bind_text(p, b, bind, sizeof bind);
  char head[160];
  snprintf(head, sizeof head, "prog %s %016llx W%d G%d %dsm %s%s", p->name[0] ? p->name : "-", (unsigned long long)h,
           s->W, s->G, s->sms, s->arch, s->world ? " world" : "");
  int n = snprintf(key, cap, "%s %s", head, bind);
  if (n < 0 || (size_t)n >= cap) /* the sizes by their hash */
    n = snprintf(key, cap, "%s bind#%016llx", head, (unsigned long long)loom__fnv64(LOOM_FNV64_INIT, bind, strlen(bind)));
  return n > 0 && (size_t)n < cap;
}

void loom__cg_tune_value(const char *schedule, int depth, int max, uint64_t text, char *out, size_t cap) {
  snprintf(out, cap, "schedule=%s depth=%d max=%d text=%016llx", schedule, depth, max, (unsigned long long)text);
}

loom_result_t loom__cg_tune_parse_value(const char *value, char schedule[LOOM__LANG_NAME], int *depth, int *max,
                                        uint64_t *text) {
  unsigned long long t = 0;
  int used = -1;
  const int got = value ? sscanf(value, "schedule=%47s depth=%d max=%d text=%16llx%n", schedule, depth, max, &t, &used)
                        : 0;
  if (got != 4 || used < 0 || value[used] != 0 || *depth < 0 || *depth > 32 || *max < 1 || *max > 10000)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "tuning value \"%s\": expected \"schedule=NAME depth=D max=N text=HASH\" (D 0..32, N 1..10000)",
                      value ? value : "(null)");
  *text = (uint64_t)t;
  return LOOM_SUCCESS;
}

/* q (owned) when its printed text hashes to `text`, else NULL (q freed). */
static loom__prog_t *if_text(loom__prog_t *q, uint64_t text) {
  if (q && loom__cg_prog_hash(q, 1) == text) return q;
  loom__lang_free(q);
  return NULL;
}

/* A copy of p with statements s applied, typed; NULL where one is refused. */
static loom__prog_t *applied(const loom__prog_t *p, const loom__sched_t *s) {
  loom__prog_t *q = NULL;
  if (loom__lang_clone(p, &q) != LOOM_SUCCESS) return NULL;
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; s && i < s->n && r == LOOM_SUCCESS; ++i) r = loom__lang_apply(q, &s->stmts[i]);
  if (r == LOOM_SUCCESS) r = loom__lang_infer(q);
  if (r != LOOM_SUCCESS) loom__lang_free(q), q = NULL;
  return q;
}

int loom__cg_run_parse(const char *name, loom_cg_run_t *run) {
  memset(run, 0, sizeof *run);
  if (!name || !*name) return 1;
  const char *slash = strchr(name, '/');
  const size_t n = slash ? (size_t)(slash - name) : strlen(name);
  if (n == 0 || n >= sizeof run->schedule) return 0;
  memcpy(run->schedule, name, n);
  run->schedule[n] = 0;
  if (slash) {
    char *end = NULL;
    const long b = slash[1] == 'b' ? strtol(slash + 2, &end, 10) : 0;
    if (!end || *end || end == slash + 2 || b < 1 || b > LOOM_CG_BLOCKS_PER_SM) return 0;
    run->bps = (int)b;
  }
  if (!strcmp(run->schedule, LOOM_CG_RUN_SEQUENTIAL)) run->lib = LOOM__LW_LIB_LOOM;
  if (!strcmp(run->schedule, LOOM_CG_RUN_BASELINE)) run->lib = LOOM__LW_LIB_BASE;
  return !(run->lib && run->bps); /* a library runner has no generated kernel to size */
}

void loom__cg_run_name(const loom_cg_run_t *run, char *out, size_t cap) {
  if (run->bps) snprintf(out, cap, "%s/b%d", run->schedule[0] ? run->schedule : "unscheduled", run->bps);
  else snprintf(out, cap, "%s", run->schedule[0] ? run->schedule : "unscheduled");
}

loom_result_t loom__cg_named_program(const loom__prog_t *p, const char *schedule, int depth, int max,
                                     loom__prog_t **out) {
  *out = NULL;
  if (!schedule[0] || !strcmp(schedule, "unscheduled") || !strcmp(schedule, LOOM_CG_RUN_SEQUENTIAL) ||
      !strcmp(schedule, LOOM_CG_RUN_BASELINE))
    return (*out = applied(p, NULL)) ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int i = 0; i < p->nsched; ++i)
    if (!strcmp(p->scheds[i].name, schedule)) {
      *out = applied(p, &p->scheds[i]);
      return LOOM_SUCCESS;
    }
  loom__found_t f; /* the search's schedule of that name */
  LOOM_TRY(loom__lang_explore(p, depth, max, &f));
  for (int i = 0; !*out && i < f.n; ++i)
    if (!strcmp(f.scheds[i].name, schedule)) *out = applied(p, &f.scheds[i]);
  loom__lang_found_free(&f);
  return LOOM_SUCCESS;
}

loom_result_t loom__cg_tuned_program(const loom__prog_t *p, const char *value, loom__prog_t **out,
                                     loom_cg_run_t *run, char *why, size_t cap) {
  char name[LOOM__LANG_NAME];
  int depth = 0, max = 0;
  uint64_t text = 0;
  *out = NULL;
  LOOM_TRY(loom__cg_tune_parse_value(value, name, &depth, &max, &text));
  if (!loom__cg_run_parse(name, run))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "tuning value \"%s\": `%s` is no schedule name", value, name);
  loom__prog_t *q = NULL;
  LOOM_TRY(loom__cg_named_program(p, run->schedule, depth, max, &q));
  q = if_text(q, text);
  if (!q)
    snprintf(why, cap, "it names schedule `%s` (search depth %d, at most %d programs) of text %016llx, which the "
             "program no longer has", name, depth, max, (unsigned long long)text);
  *out = q;
  return LOOM_SUCCESS;
}

void loom__cg_tune_shape(loom_comm_t comm, int W, int G, loom_cg_tune_shape_t *s) {
  memset(s, 0, sizeof *s);
  s->W = W, s->G = G, s->sms = comm->sm_count, s->world = comm->world != NULL;
  /* a test comm without a GPU compiles for Hopper, as CI does */
  loom__rtc_arch(comm->cc_major ? comm->cc_major : 9, comm->cc_major ? comm->cc_minor : 0, s->arch);
}

loom_result_t loom__cg_tuned_lookup(const loom__prog_t *p, const loom__binding_t *b, const loom_cg_tune_shape_t *s,
                                    const char *fn, loom__prog_t **out, loom_cg_run_t *run, char name[LOOM__LANG_NAME]) {
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES], why[320] = "";
  *out = NULL, name[0] = 0;
  if (!loom__cg_tune_key(p, b, s, key, sizeof key) || !loom__tune_get(key, value, sizeof value)) return LOOM_SUCCESS;
  loom_result_t r = loom__cg_tuned_program(p, value, out, run, why, sizeof why);
  if (r == LOOM_ERR_OUT_OF_MEMORY) return r;
  if (r != LOOM_SUCCESS) snprintf(why, sizeof why, "%s", loom_last_error());
  if (!*out) {
    LOOM_WARN("%s: tuning entry \"%s = %s\" ignored: %s; the cost model's schedule runs", fn, key, value, why);
    return LOOM_SUCCESS;
  }
  int depth, max;
  uint64_t text;
  (void)loom__cg_tune_parse_value(value, name, &depth, &max, &text);
  LOOM_INFO("%s: %s runs schedule %s (tuning cache: %s)", fn, p->name, name, key);
  return LOOM_SUCCESS;
}

/* ---- rank correlation ---------------------------------------------------------------------- */

typedef struct ranked { double v; int i; } ranked_t;

static int by_value(const void *a, const void *b) {
  const ranked_t *x = a, *y = b;
  return x->v < y->v ? -1 : x->v > y->v ? 1 : x->i - y->i;
}

/* r[i]: the rank of x[i] among x[0..n) (1-based; ties their mean rank). */
static int ranks_of(const double *x, int n, double *r) {
  ranked_t *s = malloc(sizeof *s * (size_t)n);
  if (!s) return 0;
  for (int i = 0; i < n; ++i) s[i].v = x[i], s[i].i = i;
  qsort(s, (size_t)n, sizeof *s, by_value);
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && s[j + 1].v == s[i].v) ++j;
    for (int k = i; k <= j; ++k) r[s[k].i] = 0.5 * (double)(i + j) + 1.0;
    i = j + 1;
  }
  free(s);
  return 1;
}

double loom__rank_correlation(const double *x, const double *y, int n) {
  if (n < 2) return NAN;
  for (int i = 0; i < n; ++i)
    if (isnan(x[i]) || isnan(y[i])) return NAN;
  double *r = malloc(sizeof *r * 2 * (size_t)n), out = NAN;
  if (!r || !ranks_of(x, n, r) || !ranks_of(y, n, r + n)) {
    free(r);
    return NAN;
  }
  const double mean = 0.5 * (double)(n + 1); /* of 1..n, ties included */
  double sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < n; ++i) {
    const double a = r[i] - mean, b = r[n + i] - mean;
    sxy += a * b, sxx += a * a, syy += b * b;
  }
  if (sxx > 0 && syy > 0) out = sxy / sqrt(sxx * syy);
  free(r);
  return out;
}
