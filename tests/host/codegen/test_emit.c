/*
 * test_emit.c - the generated CUDA C compiles: every kernel of every
 * schedule `loom schedules` lists for every example (examples/lang/), at
 * W = 4 and W = 3 (sizes that leave empty slices), compiled by NVRTC for
 * sm_90a without a GPU; any error fails the test (CI's check). Equal
 * kernels of different schedules are one source (the memory cache compiles
 * each once), on average in under 2 s each (the target for a cold
 * compile). Also: the kernel the paper's Figure 4 schedule generates has
 * the waits its exchange list has, and leaving one out of the list leaves
 * it out of the code too (what the checker sees is what runs).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit.h"
#include "codegen/rtc.h"
#include "lang/lower.h"
#include "tests/common/test.h"
#include "tests/host/codegen/codegen_test_util.h"

typedef struct compile_tally {
  int W;
  const char *bind;
  int schedules, kernels, compiled;
  double ms, slowest; /* of the compiles (memory hits aside); the slowest one */
} compile_tally_t;

static void compile_schedule(loom_prog_t q, const char *label, void *ctx) {
  compile_tally_t *t = ctx;
  loom__binding_t b;
  loom__lw_prog_t lw;
  CHECK_RESULT(loom__lang_parse_bind(t->bind, &b), LOOM_SUCCESS);
  if (loom__lw_lower(q, t->W, &b, &lw) != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "%s at W = %d: %s", label, t->W, loom_last_error());
    return;
  }
  t->schedules++;
  for (int u = 0; u < lw.nunit; ++u) {
    if (lw.units[u].kind != LOOM__LU_KERNEL) continue;
    char *src = NULL;
    loom__rtc_image_t im;
    if (loom__cg_emit_unit(&lw, u, &src) != LOOM_SUCCESS ||
        loom__rtc_compile(lw.units[u].name, src, "sm_90a", &im) != LOOM_SUCCESS) {
      loom_test_fail(__FILE__, __LINE__, "%s at W = %d, unit %s: %s", label, t->W, lw.units[u].name, loom_last_error());
    } else {
      t->kernels++;
      if (im.from == LOOM__RTC_COMPILED) {
        t->compiled++, t->ms += im.ms;
        if (im.ms > t->slowest) t->slowest = im.ms;
      }
    }
    free(src);
  }
  loom__lw_free(&lw);
}

/* Jobs (a world size and an example) taken in turn by the compiling threads. */
typedef struct compile_jobs {
  pthread_mutex_t lock;
  int next;
  compile_tally_t done;
} compile_jobs_t;

static void *compile_worker(void *arg) {
  compile_jobs_t *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    const int job = j->next++;
    pthread_mutex_unlock(&j->lock);
    if (job >= 2 * CODEGEN_NEXAMPLES) return NULL;
    const int e = job % CODEGEN_NEXAMPLES, W = job < CODEGEN_NEXAMPLES ? 4 : 3;
    loom_prog_t p = lang_load_example(codegen_examples[e].name);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
    compile_tally_t t = {W, codegen_examples[e].bind, 0, 0, 0, 0, 0};
    codegen_each_schedule(p, W, codegen_examples[e].bind, compile_schedule, &t);
    loom_prog_destroy(p);
    pthread_mutex_lock(&j->lock);
    j->done.schedules += t.schedules, j->done.kernels += t.kernels, j->done.compiled += t.compiled;
    j->done.ms += t.ms;
    if (t.slowest > j->done.slowest) j->done.slowest = t.slowest;
    pthread_mutex_unlock(&j->lock);
  }
}

LOOM_TEST(codegen_every_generated_kernel_of_every_example_compiles_for_sm90a) {
  setenv("LOOM_CACHE_DIR", "off", 1); /* the memory cache only: this run's equal kernels compile once */
  loom__rtc_cache_clear();
  compile_jobs_t j;
  memset(&j, 0, sizeof j);
  pthread_mutex_init(&j.lock, NULL);
  pthread_t th[2]; /* CI's two cores; NVRTC compiles different sources at once */
  for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, compile_worker, &j);
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&j.lock);
  printf("    %d schedules, %d kernels, %d distinct sources compiled by NVRTC: %.0f ms each on average, the slowest "
         "%.0f ms (two compiles at a time)\n", j.done.schedules, j.done.kernels, j.done.compiled,
         j.done.ms / (j.done.compiled ? j.done.compiled : 1), j.done.slowest);
  CHECK(j.done.ms / (j.done.compiled ? j.done.compiled : 1) < 2000.0); /* the target: a cold compile under 2 s */
  CHECK(j.done.schedules > 1000);
  CHECK(j.done.compiled > 500);
  unsetenv("LOOM_CACHE_DIR");
  loom__rtc_cache_clear();
}

/* The number of occurrences of `what` in s. */
static int count_of(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

LOOM_TEST(codegen_the_code_waits_exactly_where_the_exchange_list_does) {
  loom_prog_t p = lang_load_example("model_parallel"), q = NULL;
  CHECK(p != NULL);
  if (!p) return;
  CHECK_RESULT(loom_prog_schedule(p, "best", &q), LOOM_SUCCESS);
  loom__binding_t b;
  loom__lw_prog_t lw;
  CHECK_RESULT(loom__lang_parse_bind("B=2,S=3,H=8", &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lw_lower(q, 4, &b, &lw), LOOM_SUCCESS);
  const int u = 1; /* the fused collective's kernel (unit 0 is the GEMM) */
  char *src = NULL;
  CHECK_RESULT(loom__cg_emit_unit(&lw, u, &src), LOOM_SUCCESS);
  CHECK(src && count_of(src, "LOOM_SITE_CG_ARRIVED") == 1 && count_of(src, "LOOM_SITE_CG_READY") == 1);
  CHECK(src && count_of(src, "LOOM_SITE_CG_DONE") == 0); /* the checker proved the hand-back unneeded */
  free(src);
  for (int i = lw.units[u].ex0; i < lw.units[u].ex0 + lw.units[u].nex; ++i)
    if (lw.ex[i].kind == LOOM__LX_WAIT && lw.ex[i].slot >= LOOM__LWS_READY && !lw.ex[i].off) lw.ex[i].off = 1;
  CHECK_RESULT(loom__cg_emit_unit(&lw, u, &src), LOOM_SUCCESS); /* the ready wait left out of the list ... */
  CHECK(src && count_of(src, "LOOM_SITE_CG_READY") == 0);      /* ... is out of the code */
  free(src);
  CHECK_RESULT(loom__lw_check(&lw), LOOM_ERR_INTERNAL);        /* and the checker refuses it */
  CHECK(strstr(loom_last_error(), "fails the model checker") != NULL);
  loom__lw_free(&lw);
  loom_prog_destroy(q);
  loom_prog_destroy(p);
}

/* The norm kernels of examples `name` (schedule `sched`) at `bind`: each ROW loop's unit emitted and
 * compiled by NVRTC; *cached: how many keep the row in registers (xr[]), *kernels: how many there are. */
static void norm_kernels(const char *name, const char *sched, const char *bind, int W, int *cached, int *kernels) {
  *cached = *kernels = 0;
  loom_prog_t p = lang_load_example(name), q = NULL;
  CHECK(p != NULL);
  if (!p) return;
  CHECK_RESULT(loom_prog_schedule(p, sched, &q), LOOM_SUCCESS);
  loom__binding_t b;
  loom__lw_prog_t lw;
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lw_lower(q, W, &b, &lw), LOOM_SUCCESS);
  for (int u = 0; u < lw.nunit; ++u) {
    int row = 0;
    for (int l = lw.units[u].loop0; l < lw.units[u].loop0 + lw.units[u].nloops; ++l)
      row |= lw.loops[l].kind == LOOM__LL_ROW;
    if (!row) continue;
    char *src = NULL;
    loom__rtc_image_t im;
    CHECK_RESULT(loom__cg_emit_unit(&lw, u, &src), LOOM_SUCCESS);
    CHECK_RESULT(loom__rtc_compile(lw.units[u].name, src, "sm_90a", &im), LOOM_SUCCESS);
    *kernels += 1;
    *cached += src && strstr(src, "xr[") != NULL;
    free(src);
  }
  loom__lw_free(&lw);
  loom_prog_destroy(q);
  loom_prog_destroy(p);
}

/* A row of RMSNorm or LayerNorm whose body values fit in 64 floats a thread (256 threads a block) is
 * computed once and kept in registers; a longer row is computed again in each pass. Both forms compile,
 * on rows that are and are not a multiple of the block (the GPU suite runs both against the interpreter:
 * layer_norm's small and large sizes). */
LOOM_TEST(codegen_row_norms_keep_a_short_row_in_registers_and_recompute_a_long_one) {
  setenv("LOOM_CACHE_DIR", "off", 1);
  static const struct {
    const char *name, *sched, *bind;
    int cached;
  } k[] = {
      {"layer_norm", "fused", "T=4,H=300", 1},   /* 2 a thread, the second partly past the row's end */
      {"layer_norm", "fused", "T=4,H=5376", 1},  /* 21 a thread x (x, w, b) = 63 */
      {"layer_norm", "fused", "T=4,H=5377", 0},  /* 22 x 3 = 66: recomputed */
      {"llama_tp", "best", "T=4,H=8192,F=16", 1}, /* RMSNorm: 32 x (x, w) = 64 */
      {"llama_tp", "best", "T=4,H=8200,F=16", 0},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    int cached = -1, kernels = 0;
    norm_kernels(k[i].name, k[i].sched, k[i].bind, 2, &cached, &kernels);
    if (kernels != 1 || cached != k[i].cached)
      loom_test_fail(__FILE__, __LINE__, "%s %s at %s: %d norm kernels, %d of them cached; expected 1, %d",
                     k[i].name, k[i].sched, k[i].bind, kernels, cached, k[i].cached);
  }
  unsetenv("LOOM_CACHE_DIR");
  loom__rtc_cache_clear();
}

/* Lines of src that access the caller's buffers (a.ptr[]) in vectors outside a `if (a.vec) {` branch: the
 * vector loops may touch them only where the call's buffers are 16-byte aligned. */
static int unguarded_vector_accesses(const char *src) {
  int inside = 0, bad = 0;
  for (const char *line = src; line && *line;) {
    const char *end = strchr(line, '\n');
    const size_t n = end ? (size_t)(end - line) : strlen(line);
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf - 1 ? n : sizeof buf - 1), line);
    if (strstr(buf, "if (a.vec) {")) inside = 1;
    else if (strstr(buf, "} else {") && inside) inside = 0;
    else if ((strstr(buf, "loom__cg_loadv<") || strstr(buf, "loom__cg_storev<")) && strstr(buf, "a.ptr[") && !inside)
      bad++;
    line = end ? end + 1 : NULL;
  }
  return bad;
}

/* Kernel units of example `name` at `bind`, W ranks, over its own schedules and the unscheduled program:
 * each emitted and compiled by NVRTC; *vec: how many run vector loops (loom__cg_loadv / _storev), *guarded:
 * how many of those keep the element-at-a-time loop for unaligned caller buffers (a.vec). */
static void vector_kernels(const char *name, const char *bind, int W, int *kernels, int *vec, int *guarded) {
  *kernels = *vec = *guarded = 0;
  loom_prog_t p = lang_load_example(name);
  CHECK(p != NULL && loom_prog_check(p) == LOOM_SUCCESS);
  if (!p) return;
  loom__binding_t b;
  loom__listing_t l;
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_list(p, W, &b, 6, 200, &l), LOOM_SUCCESS);
  for (int i = 0; i < l.n; ++i) {
    if (l.rows[i].refused || !(l.rows[i].own || !strcmp(l.rows[i].s->name, "unscheduled"))) continue;
    loom_prog_t q = lang_apply_prefix(p, l.rows[i].s, l.rows[i].s->n);
    loom__lw_prog_t lw;
    if (!q || loom_prog_check(q) != LOOM_SUCCESS || loom__lw_lower(q, W, &b, &lw) != LOOM_SUCCESS) {
      loom_test_fail(__FILE__, __LINE__, "%s %s at W = %d: %s", name, l.rows[i].s->name, W, loom_last_error());
      loom_prog_destroy(q);
      continue;
    }
    for (int u = 0; u < lw.nunit; ++u) {
      if (lw.units[u].kind != LOOM__LU_KERNEL) continue;
      char *src = NULL;
      loom__rtc_image_t im;
      CHECK_RESULT(loom__cg_emit_unit(&lw, u, &src), LOOM_SUCCESS);
      CHECK_RESULT(loom__rtc_compile(lw.units[u].name, src, "sm_90a", &im), LOOM_SUCCESS);
      *kernels += 1;
      const int v = src && (strstr(src, "loom__cg_loadv<") || strstr(src, "loom__cg_storev<"));
      *vec += v;
      *guarded += v && strstr(src, "if (a.vec)") != NULL;
      if (src && unguarded_vector_accesses(src))
        loom_test_fail(__FILE__, __LINE__, "%s %s at W = %d, unit %s: %d vector accesses of the caller's buffers "
                       "outside `if (a.vec)`", name, l.rows[i].s->name, W, lw.units[u].name,
                       unguarded_vector_accesses(src));
      free(src);
    }
    loom__lw_free(&lw);
    loom_prog_destroy(q);
  }
  loom__lang_listing_free(&l);
  loom_prog_destroy(p);
}

/* Element, norm-row and sum-of-squares loops run 16 bytes of consecutive elements a body instance (8 of a 16-bit
 * type, 4 of FP32) where every access allows (each sliced dimension's slices whole vectors): sizes that divide
 * at W = 3 give vector kernels in every example, and they compile; sizes that do not (N = 10, H = 300 of BF16)
 * give none. Vector accesses of the caller's buffers sit only in the branch a call with 16-byte aligned
 * buffers takes (at W = 1 too, where every input is read in place). */
LOOM_TEST(codegen_element_loops_run_vectors_where_every_access_allows) {
  setenv("LOOM_CACHE_DIR", "off", 1);
  static const struct {
    const char *name, *vec_bind, *odd_bind;
  } k[] = {
      {"adam", "N=960", "N=10"},
      {"lamb", "N=960", "N=10"},
      {"model_parallel", "B=2,S=8,H=960", NULL},
      {"llama_tp", "T=24,H=64,F=960", NULL},
      {"layer_norm", "T=24,H=2048", "T=24,H=300"},
      {"pipeline", "B=2,S=8,H=960", NULL},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    int kernels, vec, guarded;
    vector_kernels(k[i].name, k[i].vec_bind, 1, &kernels, &vec, &guarded); /* a group of one: inputs in place */
    if (!vec) loom_test_fail(__FILE__, __LINE__, "%s at %s, W = 1: no vector loop", k[i].name, k[i].vec_bind);
    vector_kernels(k[i].name, k[i].vec_bind, 3, &kernels, &vec, &guarded);
    printf("    %s at %s, W = 3: %d kernels, %d with vector loops (%d keeping the unaligned loop too)\n", k[i].name,
           k[i].vec_bind, kernels, vec, guarded);
    if (!kernels || !vec) loom_test_fail(__FILE__, __LINE__, "%s at %s: no vector loop", k[i].name, k[i].vec_bind);
    if (!k[i].odd_bind) continue;
    vector_kernels(k[i].name, k[i].odd_bind, 3, &kernels, &vec, &guarded);
    if (vec) loom_test_fail(__FILE__, __LINE__, "%s at %s: %d vector kernels", k[i].name, k[i].odd_bind, vec);
  }
  unsetenv("LOOM_CACHE_DIR");
  loom__rtc_cache_clear();
}
