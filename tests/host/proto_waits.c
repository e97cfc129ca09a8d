/*
 * proto_waits.c - the shared "every wait is needed" mutation test of the
 * families' protocols (proto_waits.h says what one wait is and why).
 */
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/proto_waits.h"

int proto_sig_id(const loom__proto_t *p, const loom__proto_signal_t *s) {
  for (int i = 0; i < p->nsig; ++i)
    if (!strcmp(p->sig[i], s->name)) return i;
  return -1;
}

/* 1 when WAIT w is a kernel's: its signal has a device wait site in f's table. */
static int kernel_wait(const loom__proto_t *p, const loom__pstep_t *w, const proto_family_waits_t *f) {
  if (w->kind != LOOM__PS_WAIT) return 0;
  for (int k = 0; k < f->nsig; ++k)
    if (f->table[k].site && !strcmp(p->sig[w->obj], f->table[k].name)) return 1;
  return 0;
}

/* 1 when steps x and w (w a kernel wait) are the same line of a kernel:
 * a WAIT of the same signal, owner, word and value. */
static int same_wait(const loom__proto_t *p, const loom__pstep_t *x, const loom__pstep_t *w,
                     const proto_family_waits_t *f) {
  if (x->kind != LOOM__PS_WAIT || x->obj != w->obj || x->owner != w->owner || x->delta != w->delta) return 0;
  return f->word ? f->word(f->ctx, p, x) == f->word(f->ctx, p, w) : x->lo == w->lo;
}

/* 1 when an actor of a's rank runs wait w before step i of actor a (it
 * was dropped with that one already). */
static int seen_before(const loom__proto_t *p, int a, int i, const proto_family_waits_t *f) {
  for (int b = 0; b <= a; ++b)
    for (int k = 0; p->rank_of[b] == p->rank_of[a] && k < (b == a ? i : p->n[b]); ++k)
      if (same_wait(p, &p->steps[b][k], &p->steps[a][i], f)) return 1;
  return 0;
}

/* out = p without wait w on every actor of rank r (out's memory taken as fresh). */
static void drop_from_rank(const loom__proto_t *p, int r, const loom__pstep_t *w, const proto_family_waits_t *f,
                           loom__proto_t *out) {
  loom__proto_copy(p, out);
  for (int b = 0; b < out->nact; ++b) {
    if (out->rank_of[b] != r || !out->steps[b]) continue;
    int n = 0;
    for (int k = 0; k < out->n[b]; ++k)
      if (!same_wait(p, &out->steps[b][k], w, f)) out->steps[b][n++] = out->steps[b][k];
    out->n[b] = n;
  }
}

/* Drops wait i of actor a from its rank and compares the verdict with the expected one. */
static void drop_one(const loom__proto_t *p, int a, int i, const proto_family_waits_t *f, proto_waits_tally_t *t) {
  static loom__proto_t m;
  static loom__proto_report_t rep;
  const loom__pstep_t w = p->steps[a][i];
  char what[96];
  loom__proto_step_str(p, &w, 1, what, sizeof what);
  drop_from_rank(p, p->rank_of[a], &w, f, &m);
  CHECK_RESULT(loom__proto_check_static(&m, 2, &rep), LOOM_SUCCESS);
  if (f->covered(f->ctx, p, a, &w)) {
    t->covered++;
    if (rep.violation)
      loom_test_fail(__FILE__, __LINE__, "%s: actor %d's %s dropped: expected covered, found %s\n%s", p->name, a,
                     what, loom__proto_violation_str(rep.violation), rep.text);
  } else {
    t->tried++, t->caught += rep.violation != LOOM__PV_NONE;
    if (!rep.violation) loom_test_fail(__FILE__, __LINE__, "%s: actor %d's %s dropped: no violation", p->name, a, what);
  }
  loom__proto_free(&m);
}

void proto_every_kernel_wait(const loom__proto_t *p, const proto_family_waits_t *f, proto_waits_tally_t *t) {
  CHECK(!p->overflow);
  for (int a = 0; a < p->nact; ++a)
    for (int i = 0; i < p->n[a]; ++i)
      if (kernel_wait(p, &p->steps[a][i], f) && !seen_before(p, a, i, f)) drop_one(p, a, i, f, t);
}
