/*
 * test_lang_protocol.c - the language's protocols (src/lang/lang_proto.h)
 * under the model checker (src/core/protocol.h; the checkers' own tests:
 * tests/host/core/test_protocol.c).
 *
 *  - every hand-written op's protocol in the language's table (coll, tp,
 *    embedding, optim, moe: each built by its family) passes at W = 2 and 3
 *    over two calls;
 *  - the mutation test: every WAIT step of every rank dropped in turn, and
 *    every signal's whole handshake (its SETs and WAITs) dropped in turn,
 *    is caught by the checker (the test fails if one goes unnoticed);
 *  - LL and PUSH need their two parities (folded into one, the checker
 *    finds the next call's write racing a read);
 *  - the embedding's GIN forward fails as its kernel is written (no ready
 *    from network ranks) and passes with ready to and from every rank;
 *  - the language's schedules lowered to protocols pass (proto_lower.c).
 */
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "lang/lang.h"
#include "lang/lang_proto.h"
#include "ops/coll/coll_protocol.h"
#include "ops/embedding/embedding_protocol.h"
#include "tests/host/lang/lang_test_util.h"

static int loom__t_check(const loom__proto_t *p, loom__proto_report_t *rep) {
  if (loom__proto_check(p, 2, rep) != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "%s: the checker refused the protocol", p->name);
    return -1;
  }
  return rep->violation;
}

LOOM_TEST(lang_protocol_hand_written_ops_pass) {
  static loom__proto_t p;
  static loom__proto_report_t rep;
  const int templates[] = {LOOM__OP_REDUCE, LOOM__OP_BROADCAST, LOOM__OP_ALLTOALL, LOOM__OP_SEND};
  for (int op = 0; op < LOOM__PROTO_OPS_COUNT + 4; ++op)
    for (int W = 2; W <= 3; ++W) {
      if (op < LOOM__PROTO_OPS_COUNT)
        loom__proto_op(op, W, &p);
      else
        loom__proto_template(templates[op - LOOM__PROTO_OPS_COUNT], W, &p);
      if (loom__t_check(&p, &rep) != LOOM__PV_NONE)
        loom_test_fail(__FILE__, __LINE__, "%s W=%d:\n%s", p.name, W, rep.text);
      printf("    %-20s W=%d: %lld states, %lld transitions, no violation\n", p.name, W, (long long)rep.states,
             (long long)rep.transitions);
      loom__proto_free(&p);
    }
}

/* Handshakes that the checker proves redundant in an op (no mutation of
 * them breaks anything); the test fails if one of them turns out needed,
 * or if any other mutation goes unnoticed. Epochs [lo, hi): the waits of
 * the slots lo W .. hi W - 1 only (the MoE protocol's slot per epoch and
 * source; hi < 0: every slot, and the whole handshake). */
static const struct { const char *op, *sig; int lo, hi; const char *why; } loom__t_redundant[] = {
    {"gemm_ar", "done", 0, -1,
     "an owner sets a tile's gathered signal after reading the sources' partial rows of it, and every source waits "
     "for every other owner's gathered signals before its call ends, so the next call's GEMM cannot overwrite a "
     "partial still being read without the begin kernel's done wait"},
    {"moe", "comb_ready", 1, 2,
     "a combine right after a dispatch (epoch 1): the dispatch waited for every rank's counts_ready, which each "
     "sets only after its previous combine's reduction, so its combine buffer is free already (the waits of a "
     "combine that follows a combine, epoch 2, are needed; the kernel keeps both: what came before is not known on "
     "the host when calls are replayed from CUDA graphs)"},
};

/* step_slot: the slot of a dropped WAIT, -1 for a whole handshake. */
static int loom__t_is_redundant(const loom__proto_t *p, int sig, int step_slot) {
  for (size_t i = 0; i < sizeof loom__t_redundant / sizeof *loom__t_redundant; ++i) {
    if (strcmp(p->name, loom__t_redundant[i].op) != 0 || strcmp(p->sig[sig], loom__t_redundant[i].sig) != 0) continue;
    const int lo = loom__t_redundant[i].lo, hi = loom__t_redundant[i].hi;
    if (hi < 0 || (step_slot >= lo * p->W && step_slot < hi * p->W)) return 1;
  }
  return 0;
}

/* One mutation m of p, of signal sig's handshake: counted as caught, as a
 * redundant handshake's (then it must go unnoticed), or a failure. */
static void loom__t_mutant(const loom__proto_t *p, const loom__proto_t *m, int sig, int step_slot, const char *what,
                           int *tried, int *caught, int *redundant) {
  static loom__proto_report_t rep;
  const int v = loom__t_check(m, &rep), red = loom__t_is_redundant(p, sig, step_slot);
  if (red) {
    ++*redundant;
    if (v != LOOM__PV_NONE)
      loom_test_fail(__FILE__, __LINE__, "%s W=%d: %s, listed as redundant, is needed:\n%s", p->name, p->W, what,
                     rep.text);
    return;
  }
  ++*tried;
  if (v != LOOM__PV_NONE)
    ++*caught;
  else
    loom_test_fail(__FILE__, __LINE__, "%s W=%d: %s: no violation", p->name, p->W, what);
}

/* Every WAIT of every rank dropped in turn, then every signal's handshake. */
static void loom__t_mutate(const loom__proto_t *p, int *tried, int *caught, int *redundant) {
  static loom__proto_t m;
  char what[160], st[96];
  for (int r = 0; r < p->nact; ++r)
    for (int i = 0; i < p->n[r]; ++i) {
      if (p->steps[r][i].kind != LOOM__PS_WAIT) continue;
      loom__proto_drop_step(p, r, i, &m);
      loom__proto_step_str(p, &p->steps[r][i], 1, st, sizeof st);
      snprintf(what, sizeof what, "without actor %d's (rank %d) step %d (%s)", r, p->rank_of[r], i, st);
      loom__t_mutant(p, &m, p->steps[r][i].obj, p->steps[r][i].lo, what, tried, caught, redundant);
      loom__proto_free(&m);
    }
  for (int s = 0; s < p->nsig; ++s) {
    loom__proto_drop_sig(p, s, &m);
    snprintf(what, sizeof what, "without the %s handshake", p->sig[s]);
    loom__t_mutant(p, &m, s, -1, what, tried, caught, redundant);
    loom__proto_free(&m);
  }
}

LOOM_TEST(lang_protocol_mutations_every_wait_and_handshake_caught) {
  static loom__proto_t p;
  int tried = 0, caught = 0, redundant = 0;
  for (int op = 0; op < LOOM__PROTO_OPS_COUNT; ++op)
    for (int W = 2; W <= 3; ++W) {
      loom__proto_op(op, W, &p);
      int t = 0, c = 0, red = 0;
      loom__t_mutate(&p, &t, &c, &red);
      printf("    %-20s W=%d: %d of %d mutations caught", p.name, W, c, t);
      if (red) printf(" (%d more of a handshake proven redundant)", red);
      printf("\n");
      tried += t, caught += c, redundant += red;
      loom__proto_free(&p);
    }
  const int templates[] = {LOOM__OP_REDUCE, LOOM__OP_BROADCAST, LOOM__OP_ALLTOALL, LOOM__OP_SEND};
  for (size_t i = 0; i < sizeof templates / sizeof *templates; ++i)
    for (int W = 2; W <= 3; ++W) {
      loom__proto_template(templates[i], W, &p);
      int t = 0, c = 0, red = 0;
      loom__t_mutate(&p, &t, &c, &red);
      printf("    %-20s W=%d: %d of %d mutations caught (the language's template)\n", p.name, W, c, t);
      tried += t, caught += c, redundant += red;
      loom__proto_free(&p);
    }
  printf("    all ops: %d of %d mutations caught; %d mutations of redundant handshakes harmless\n", caught, tried,
         redundant);
  CHECK(tried > 0);
  CHECK_EQ_INT(caught, tried);
}

/* LL (AllReduce's and the slices') and PUSH: the two parities are their consumed handshake. Folded into
 * one (every kernel call on parity 0: the same regions and flag slots), a
 * sender's next call overwrites a slot its receiver may still read (the
 * checker reports the write or the read, whichever the shortest run puts
 * second). */
LOOM_TEST(lang_protocol_ll_push_parity_needed) {
  static loom__proto_t p;
  static loom__proto_report_t rep;
  const int kinds[] = {LOOM__CK_LL, LOOM__CK_PUSH, LOOM__CK_LL_RS, LOOM__CK_LL_AG};
  for (int o = 0; o < 4; ++o)
    for (int W = 2; W <= 3; ++W) {
      const loom__coll_proto_t s = {kinds[o], W, 1, W, 1, W, 0, 4, 1};
      loom__coll_protocol(&s, &p);
      const int v = loom__t_check(&p, &rep); /* the next call's write, seen before or after the read */
      CHECK(v == LOOM__PV_OVERWRITE || v == LOOM__PV_RACE_READ);
      if (o == 0 && W == 2) printf("%s", rep.text);
      loom__proto_free(&p);
    }
}

/* The embedding forward's GIN path as its kernel is written: no ready from
 * a network rank, so a put of the next call may land in its out before its
 * caller read this call's. With ready to and from every rank it passes and
 * every wait and handshake matters. */
LOOM_TEST(lang_protocol_embedding_gin) {
  static loom__proto_t p;
  static loom__proto_report_t rep;
  for (int W = 2; W <= 3; ++W) {
    loom__emb_protocol_gin(W, 0, &p);
    const int v = loom__t_check(&p, &rep);
    CHECK(v == LOOM__PV_OVERWRITE || v == LOOM__PV_RACE_READ);
    CHECK(strstr(rep.text, "out@") != NULL);
    if (W == 2) printf("%s", rep.text);
    loom__proto_free(&p);
    loom__emb_protocol_gin(W, 1, &p);
    if (loom__t_check(&p, &rep) != LOOM__PV_NONE)
      loom_test_fail(__FILE__, __LINE__, "%s W=%d:\n%s", p.name, W, rep.text);
    int t = 0, c = 0, red = 0;
    loom__t_mutate(&p, &t, &c, &red);
    printf("    %-20s W=%d: %lld states, %d of %d mutations caught\n", p.name, W, (long long)rep.states, c, t);
    CHECK(t > 0 && c == t && red == 0);
    loom__proto_free(&p);
  }
}

/* One counterexample as the checker prints it (for the docs and for eyes). */
LOOM_TEST(lang_protocol_counterexample_trace) {
  static loom__proto_t p, m;
  static loom__proto_report_t rep;
  loom__proto_op(LOOM__PROTO_RS, 2, &p);
  loom__proto_drop_sig(&p, loom__proto_sig(&p, "done"), &m);
  CHECK_EQ_INT(loom__t_check(&m, &rep), LOOM__PV_OVERWRITE);
  CHECK(strstr(rep.text, "not ordered with:") != NULL);
  printf("%s", rep.text);
  loom__proto_free(&p), loom__proto_free(&m);
}

/* Every example's schedules (and the unscheduled programs, and the
 * schedules the search reaches in two statements) lowered to protocols:
 * each unit passes at W = 2 and 3 over two calls. */
static void loom__t_lower_check(loom_prog_t q, const char *what, int *units) {
  static loom__proto_unit_t u[16];
  static loom__proto_report_t rep;
  for (int W = 2; W <= 3; ++W) {
    int n = 0;
    CHECK_RESULT(loom__lang_lower(q, W, u, 16, &n), LOOM_SUCCESS);
    for (int i = 0; i < n; ++i) {
      *units += 1;
      if (loom__t_check(&u[i].proto, &rep) != LOOM__PV_NONE)
        loom_test_fail(__FILE__, __LINE__, "%s W=%d unit %s:\n%s", what, W, u[i].unit, rep.text);
    }
    loom__proto_units_free(u, n);
  }
}

LOOM_TEST(lang_protocol_schedules_lowered_pass) {
  const char *names[] = {"model_parallel", "adam", "lamb", "pipeline", "llama_tp", "layer_norm"};
  int units = 0, scheds = 0;
  for (size_t e = 0; e < sizeof names / sizeof *names; ++e) {
    loom_prog_t p = lang_load_example(names[e]);
    CHECK(p != NULL);
    if (!p) continue;
    for (int s = -1; s < p->nsched; ++s) {
      loom_prog_t q = NULL;
      CHECK_RESULT(loom_prog_schedule(p, s < 0 ? "" : p->scheds[s].name, &q), LOOM_SUCCESS);
      if (!q) continue;
      char what[128];
      snprintf(what, sizeof what, "%s schedule %s", names[e], s < 0 ? "(none)" : p->scheds[s].name);
      loom__t_lower_check(q, what, &units);
      scheds++;
      loom_prog_destroy(q);
    }
    loom__found_t f;
    memset(&f, 0, sizeof f);
    CHECK_RESULT(loom__lang_explore(p, 2, 64, &f), LOOM_SUCCESS);
    for (int i = 0; i < f.n; ++i) {
      loom__prog_t *q = NULL;
      CHECK_RESULT(loom__lang_clone(p, &q), LOOM_SUCCESS);
      loom_result_t r = LOOM_SUCCESS;
      for (int k = 0; q && k < f.scheds[i].n && r == LOOM_SUCCESS; ++k) r = loom__lang_apply(q, &f.scheds[i].stmts[k]);
      if (q && r == LOOM_SUCCESS && loom__lang_infer(q) == LOOM_SUCCESS) {
        loom__t_lower_check(q, names[e], &units);
        scheds++;
      }
      loom__lang_free(q);
    }
    loom__lang_found_free(&f);
    loom_prog_destroy(p);
  }
  printf("    %d schedules, %d lowered units checked, no violation\n", scheds, units);
  CHECK(units > 0);
}

/* The units the examples' best schedules lower to: the stages take the tp
 * ops' protocols, the fused collectives the collectives'. */
LOOM_TEST(lang_protocol_lowering_units) {
  static loom__proto_unit_t u[16];
  const struct { const char *example, *unit, *proto; } want[] = {
      {"llama_tp", "agGemm", "ag_gemm"},
      {"llama_tp", "gemmRs", "gemm_rs"},
      {"model_parallel", "layerWithAR", "gemm_ar"},
      {"pipeline", "", "Send"},
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; ++i) {
    loom_prog_t p = lang_load_example(want[i].example), q = NULL;
    CHECK(p != NULL);
    if (!p) continue;
    CHECK_RESULT(loom_prog_schedule(p, "best", &q), LOOM_SUCCESS);
    int n = 0, found = 0;
    if (q) CHECK_RESULT(loom__lang_lower(q, 3, u, 16, &n), LOOM_SUCCESS);
    for (int k = 0; k < n; ++k)
      found |= strncmp(u[k].unit, want[i].unit, strlen(want[i].unit)) == 0 && !strcmp(u[k].proto.name, want[i].proto);
    if (!found)
      loom_test_fail(__FILE__, __LINE__, "%s best: no unit %s lowered to %s", want[i].example, want[i].unit,
                     want[i].proto);
    loom__proto_units_free(u, n);
    if (q) loom_prog_destroy(q);
    loom_prog_destroy(p);
  }
}
