/*
 * test_protocol.c - the protocol form and its two checkers
 * (src/core/protocol.h).
 *
 *  - the semantics on small protocols, under both checkers alike: a
 *    deadlock, a read before publish, an overwrite before consumed, the
 *    "first SET >= v" rule of waits, additions, a slot with two writers,
 *    the once property, a malformed protocol refused;
 *  - the two checkers give the same verdict and the same violation kind on
 *    every op of the language's table and every template at W = 2 and 3,
 *    on every single-step mutation of each and every signal dropped, and on
 *    the collectives with two blocks and the MoE forms mixed at W = 2;
 *  - the static check at sizes the exhaustive search cannot take (16
 *    ranks, several blocks), its report naming the step and the actors;
 *  - every family's table of signals names the wait sites the kernels
 *    report in timeout messages, with no clash.
 */
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/protocol.h"
#include "core/signal.h"
#include "lang/lang.h"
#include "lang/lang_proto.h"
#include "ops/coll/coll_protocol.h"
#include "ops/embedding/embedding_protocol.h"
#include "ops/moe/moe_protocol.h"
#include "ops/optim/optim_protocol.h"
#include "ops/tp/tp_protocol.h"

/* p under both checkers over `calls` calls: the verdict (the same, or a
 * failed check); -1 if either refused it. */
static int both(const loom__proto_t *p, int calls, const char *what) {
  static loom__proto_report_t e, s;
  const loom_result_t re = loom__proto_check_exhaustive(p, calls, &e), rs = loom__proto_check_static(p, calls, &s);
  if (re != LOOM_SUCCESS || rs != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "%s (%s): refused: exhaustive %s, static %s", p->name, what,
                   loom_result_string(re), loom_result_string(rs));
    return -1;
  }
  if (e.violation != s.violation)
    loom_test_fail(__FILE__, __LINE__, "%s (%s): the exhaustive search says %s, the static check %s:\n%s%s", p->name,
                   what, loom__proto_violation_str(e.violation), loom__proto_violation_str(s.violation), e.text,
                   s.text);
  CHECK(e.exhaustive == 1 && s.exhaustive == 0);
  return e.violation;
}

/* Rank 0 writes d and sets s; rank 1 waits on s and reads d (and, with
 * consumed, says so, and rank 0 waits for that before its next write). */
static void pair(loom__proto_t *p, int wait, int consumed) {
  loom__proto_init(p, "pair", 2);
  const int d = loom__proto_buf(p, "d"), s = loom__proto_sig(p, "s"), k = loom__proto_sig(p, "consumed");
  if (consumed) loom__proto_wait(p, 0, 0, k, 0, -1);
  loom__proto_write(p, 0, 0, d, 0, 1);
  loom__proto_set(p, 0, 0, s, 0, 0);
  if (wait) loom__proto_wait(p, 1, 0, s, 0, 0);
  loom__proto_read(p, 1, 0, d, 0, 1);
  if (consumed) loom__proto_set(p, 1, 0, k, 0, 0);
}

LOOM_TEST(protocol_checker_semantics) {
  static loom__proto_t p;
  static loom__proto_report_t rep;
  pair(&p, 1, 1);
  CHECK_EQ_INT(both(&p, 2, "handshakes"), LOOM__PV_NONE);
  CHECK_RESULT(loom__proto_check(&p, 2, &rep), LOOM_SUCCESS);
  CHECK(rep.states > 1 && rep.exhaustive);
  loom__proto_free(&p);
  pair(&p, 0, 1);
  CHECK_EQ_INT(both(&p, 2, "no wait"), LOOM__PV_STALE_READ); /* met first: the read runs before any write */
  CHECK_RESULT(loom__proto_check(&p, 2, &rep), LOOM_SUCCESS);
  CHECK(strstr(rep.text, "==> rank 1") != NULL);
  loom__proto_free(&p);
  pair(&p, 1, 0);
  CHECK_EQ_INT(both(&p, 2, "no consumed"), LOOM__PV_OVERWRITE);
  loom__proto_free(&p);
  /* a deadlock: each waits for the other's signal before setting its own */
  loom__proto_init(&p, "cross", 2);
  const int s = loom__proto_sig(&p, "s");
  for (int r = 0; r < 2; ++r) loom__proto_wait(&p, r, 1 - r, s, 0, 0), loom__proto_set(&p, r, r, s, 0, 0);
  CHECK_EQ_INT(both(&p, 2, "cross"), LOOM__PV_DEADLOCK);
  CHECK_RESULT(loom__proto_check_static(&p, 2, &rep), LOOM_SUCCESS);
  CHECK(strstr(rep.text, "blocked: rank 0") != NULL && strstr(rep.text, "blocked: rank 1") != NULL);
  loom__proto_free(&p);
  /* a wait for >= c is ordered after the first SET that reaches c only:
   * the writer sets c, writes, sets c + 1; a read after a wait for c races
   * (one call), a read after a wait for c + 1 does not */
  for (int later = 0; later < 2; ++later) {
    loom__proto_init(&p, "first-set", 2);
    const int d = loom__proto_buf(&p, "d"), f = loom__proto_sig(&p, "f");
    loom__proto_set(&p, 0, 0, f, 0, 0);
    loom__proto_write(&p, 0, 0, d, 0, 1);
    loom__proto_set(&p, 0, 0, f, 0, 1);
    loom__proto_wait(&p, 1, 0, f, 0, later);
    loom__proto_read(&p, 1, 0, d, 0, 1);
    const int v = both(&p, 1, "first set");
    if (later) CHECK_EQ_INT(v, LOOM__PV_NONE);
    else CHECK(v == LOOM__PV_STALE_READ || v == LOOM__PV_RACE_READ);
    loom__proto_free(&p);
  }
  /* additions: two ranks ADD into rank 0's region (unordered between them:
   * they commute), rank 0 reads after rank 1's signal; without that wait
   * the read races the peer's addition; a WRITE instead of rank 1's ADD
   * races rank 0's own ADD */
  for (int variant = 0; variant < 3; ++variant) {
    loom__proto_init(&p, "adds", 2);
    const int d = loom__proto_buf(&p, "d"), f = loom__proto_sig(&p, "f");
    loom__proto_add(&p, 0, 0, d, 0, 1);
    if (variant == 2) loom__proto_write(&p, 1, 0, d, 0, 1);
    else loom__proto_add(&p, 1, 0, d, 0, 1);
    loom__proto_set(&p, 1, 0, f, 0, 0);
    if (variant != 1) loom__proto_wait(&p, 0, 0, f, 0, 0);
    loom__proto_read(&p, 0, 0, d, 0, 1);
    const int v = both(&p, 1, "adds");
    if (variant == 0) CHECK_EQ_INT(v, LOOM__PV_NONE);
    if (variant == 1) CHECK(v == LOOM__PV_RACE_READ || v == LOOM__PV_STALE_READ);
    if (variant == 2) CHECK_EQ_INT(v, LOOM__PV_RACE_WRITE);
    loom__proto_free(&p);
  }
  /* two writers of one slot */
  loom__proto_init(&p, "two-writers", 2);
  const int s2 = loom__proto_sig(&p, "s");
  for (int r = 0; r < 2; ++r) loom__proto_set(&p, r, 0, s2, 0, 0);
  CHECK_EQ_INT(both(&p, 2, "two writers"), LOOM__PV_SIGNAL);
  loom__proto_free(&p);
  /* malformed protocols are refused */
  loom__proto_init(&p, "bad", LOOM__PROTO_MAXW + 1);
  CHECK_RESULT(loom__proto_check(&p, 2, &rep), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom__proto_check_static(&p, 2, &rep), LOOM_ERR_INVALID_ARGUMENT);
  loom__proto_init(&p, "bad slot", 2);
  loom__proto_set(&p, 0, 0, loom__proto_sig(&p, "s"), LOOM__PROTO_MAXSLOT, 0);
  CHECK_RESULT(loom__proto_check(&p, 2, &rep), LOOM_ERR_INVALID_ARGUMENT);
  loom__proto_free(&p);
}

/* The once property: a result read after it is written passes; written
 * twice before a read, or never read in its call, it does not. */
LOOM_TEST(protocol_once_buffer_written_once_and_read) {
  static loom__proto_t p;
  for (int variant = 0; variant < 3; ++variant) {
    loom__proto_init(&p, "once", 2);
    const int out = loom__proto_buf(&p, "out"), s = loom__proto_sig(&p, "s");
    loom__proto_once(&p, out);
    for (int r = 0; r < 2; ++r) {
      loom__proto_write(&p, r, r, out, 0, 2);
      if (variant == 1) loom__proto_write(&p, r, r, out, 1, 2); /* region 1 written twice, the first unread */
      loom__proto_set(&p, r, 1 - r, s, 0, 0);
      loom__proto_wait(&p, r, r, s, 0, 0);
      loom__proto_read(&p, r, r, out, 0, variant == 2 ? 1 : 2); /* variant 2: region 1 never read */
    }
    const int v = both(&p, 2, "once");
    CHECK_EQ_INT(v, variant == 0 ? LOOM__PV_NONE : LOOM__PV_ONCE);
    loom__proto_free(&p);
  }
}

/* Every step of p dropped in turn, then every signal's handshake: both
 * checkers agree on each; the number compared into *n. */
static void agree_on_mutations(const loom__proto_t *p, int *n) {
  static loom__proto_t m;
  char what[64];
  for (int r = 0; r < p->nact; ++r)
    for (int i = 0; i < p->n[r]; ++i) {
      loom__proto_drop_step(p, r, i, &m);
      snprintf(what, sizeof what, "W=%d without actor %d's step %d", p->W, r, i);
      (void)both(&m, 2, what), ++*n;
      loom__proto_free(&m);
    }
  for (int s = 0; s < p->nsig; ++s) {
    loom__proto_drop_sig(p, s, &m);
    snprintf(what, sizeof what, "W=%d without %s", p->W, p->sig[s]);
    (void)both(&m, 2, what), ++*n;
    loom__proto_free(&m);
  }
}

LOOM_TEST(protocol_checkers_agree_on_every_op_and_mutation) {
  static loom__proto_t p;
  const int templates[] = {LOOM__OP_REDUCE, LOOM__OP_BROADCAST, LOOM__OP_ALLTOALL, LOOM__OP_SEND};
  int n = 0;
  for (int op = 0; op < LOOM__PROTO_OPS_COUNT + 4; ++op)
    for (int W = 2; W <= 3; ++W) {
      if (op < LOOM__PROTO_OPS_COUNT) loom__proto_op(op, W, &p);
      else loom__proto_template(templates[op - LOOM__PROTO_OPS_COUNT], W, &p);
      CHECK_EQ_INT(both(&p, 2, "as built"), LOOM__PV_NONE);
      agree_on_mutations(&p, &n);
      loom__proto_free(&p);
    }
  /* the collectives with two blocks and the caller's stream, uneven slices */
  for (int kind = LOOM__CK_ONE_SHOT; kind < LOOM__CK_KINDS; ++kind) {
    const loom__coll_proto_t s = {kind, 2, 2, 3, 1, 1, kind == LOOM__CK_ONE_SHOT, 2, 0};
    loom__coll_protocol(&s, &p);
    CHECK_EQ_INT(both(&p, 2, "two blocks"), LOOM__PV_NONE);
    agree_on_mutations(&p, &n);
    loom__proto_free(&p);
  }
  /* MoE: the three forms mixed over a cycle of one combine and one of two */
  const loom__moe_cycle_t cy[2] = {{1, {LOOM__MOE_FORM_FUSED, LOOM__MOE_FORM_ARRIVAL}},
                                   {2, {LOOM__MOE_FORM_UNFUSED, LOOM__MOE_FORM_UNFUSED}}};
  loom__moe_protocol(2, 2, cy, 0, &p);
  CHECK_EQ_INT(both(&p, 2, "forms"), LOOM__PV_NONE);
  agree_on_mutations(&p, &n);
  loom__proto_free(&p);
  printf("    %d protocols compared: the same verdict from both checkers\n", n);
  CHECK(n > 1000);
}

/* 16 ranks of 3 blocks and the caller (64 actors): the static check proves
 * what the exhaustive search cannot take, and names the step and the
 * actors of a violation (without the arrival waits: a block reads a
 * peer's input before any run has written it). */
LOOM_TEST(protocol_static_check_at_sixteen_ranks) {
  static loom__proto_t p, m;
  static loom__proto_report_t rep;
  const loom__coll_proto_t s = {LOOM__CK_TWO_SHOT, 16, 3, 63, 1, 2, 0, 4, 0};
  loom__coll_protocol(&s, &p);
  CHECK_EQ_INT(p.nact, 64);
  CHECK_RESULT(loom__proto_check_exhaustive(&p, 2, &rep), LOOM_ERR_UNSUPPORTED);
  CHECK_RESULT(loom__proto_check(&p, 2, &rep), LOOM_SUCCESS);
  CHECK(!rep.exhaustive);
  CHECK_EQ_INT(rep.violation, LOOM__PV_NONE);
  loom__proto_drop_waits(&p, loom__proto_sig(&p, "arrived"), &m);
  CHECK_RESULT(loom__proto_check(&m, 2, &rep), LOOM_SUCCESS);
  CHECK(rep.violation == LOOM__PV_STALE_READ || rep.violation == LOOM__PV_RACE_READ);
  CHECK(strstr(rep.text, "==> rank") != NULL && strstr(rep.text, "READ in@") != NULL);
  CHECK(strstr(rep.text, "actor") != NULL); /* a block, not the rank's caller */
  printf("%s", rep.text);
  loom__proto_free(&p), loom__proto_free(&m);
}

/* One family table: every signal named once; every site it names carries
 * the table's text; a site another layer names (the GEMM prologue) is
 * named there. */
static void table_names_sites(const loom__proto_signal_t *t, int n, const char *family) {
  for (int i = 0; i < n; ++i) {
    CHECK(t[i].name != NULL);
    for (int j = 0; j < i; ++j)
      if (!strcmp(t[i].name, t[j].name)) loom_test_fail(__FILE__, __LINE__, "%s: signal %s twice", family, t[i].name);
    if (!t[i].site) continue;
    const char *name = loom__wait_site_name(t[i].site);
    if (t[i].what && strcmp(name, t[i].what) != 0)
      loom_test_fail(__FILE__, __LINE__, "%s: site %u is named \"%s\", its table says \"%s\"", family, t[i].site, name,
                     t[i].what);
    if (!t[i].what && !strcmp(name, "unknown"))
      loom_test_fail(__FILE__, __LINE__, "%s: site %u of %s is named nowhere", family, t[i].site, t[i].name);
  }
}

LOOM_TEST(protocol_signal_tables_name_the_wait_sites) {
  table_names_sites(loom__coll_signals, LOOM__COLL_NSIG, "coll");
  table_names_sites(loom__tp_signals, LOOM__TP_NSIG, "tp");
  table_names_sites(loom__optim_signals, LOOM__OPTIM_NSIG, "optim");
  table_names_sites(loom__emb_signals, LOOM__EMB_NSIG, "embedding");
  table_names_sites(loom__moe_signals, LOOM__MOE_NSIG, "moe");
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_COLL_REDUCED), "reduced chunk") != NULL);
  CHECK_EQ_INT(loom__wait_site_clashes(), 0);
}

/* Every signal of a family's protocol is one of its table's. */
static void signals_from_table(const loom__proto_t *p, const loom__proto_signal_t *t, int n) {
  for (int s = 0; s < p->nsig; ++s) {
    int found = 0;
    for (int i = 0; i < n; ++i) found |= !strcmp(p->sig[s], t[i].name);
    if (!found) loom_test_fail(__FILE__, __LINE__, "%s: signal %s is not in its family's table", p->name, p->sig[s]);
  }
}

LOOM_TEST(protocol_families_name_their_signals_from_their_tables) {
  static loom__proto_t p;
  for (int kind = LOOM__CK_ONE_SHOT; kind < LOOM__CK_KINDS; ++kind)
    for (int G = 1; G <= 2; ++G) {
      const loom__coll_proto_t s = {kind, 3, G, 7, 1, 2, 0, 4, 0};
      loom__coll_protocol(&s, &p);
      CHECK(!p.overflow);
      signals_from_table(&p, loom__coll_signals, LOOM__COLL_NSIG);
      loom__proto_free(&p);
    }
  for (int op = LOOM__TP_PROTO_GEMM_RS; op <= LOOM__TP_PROTO_GEMM_RS_BULK; ++op) {
    loom__tp_protocol(op, 3, &p);
    signals_from_table(&p, loom__tp_signals, LOOM__TP_NSIG);
    loom__proto_free(&p);
  }
  for (int lamb = 0; lamb < 2; ++lamb) {
    loom__optim_protocol(lamb, 3, &p);
    signals_from_table(&p, loom__optim_signals, LOOM__OPTIM_NSIG);
    loom__proto_free(&p);
  }
  for (int op = LOOM__EMB_PROTO_FWD; op <= LOOM__EMB_PROTO_BWD_SORTED + 1; ++op) {
    if (op > LOOM__EMB_PROTO_BWD_SORTED) loom__emb_protocol_gin(3, 0, &p);
    else loom__emb_protocol(op, 3, &p);
    signals_from_table(&p, loom__emb_signals, LOOM__EMB_NSIG);
    loom__proto_free(&p);
  }
  const loom__moe_cycle_t cy = {1, {LOOM__MOE_FORM_ARRIVAL, LOOM__MOE_FORM_FUSED, LOOM__MOE_FORM_UNFUSED}};
  loom__moe_protocol(3, 1, &cy, 0, &p);
  signals_from_table(&p, loom__moe_signals, LOOM__MOE_NSIG);
  loom__proto_free(&p);
}
