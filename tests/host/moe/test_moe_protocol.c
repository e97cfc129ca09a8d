/*
 * test_moe_protocol.c - the MoE dispatch / combine protocol (moe.h), as
 * its family builds it (moe_protocol.c: each rank's dispatch, its experts
 * writing the outputs into the receive buffer as loom_moe_mlp's down GEMM
 * does, or storing them into the sources' combine buffers in the fused
 * form, the arrival form's gate/up GEMM as a second actor beside its
 * dispatch, and the combines), proven by the model checker (core/protocol.h:
 * the static check, every interleaving's verdict) over two calls of a list
 * of cycles. A cycle has no combine, one or two (a combine returns the last
 * dispatch's rows: a caller may combine again); a cycle of one combine may
 * run loom_moe_mlp's fused form on some ranks or all (the expert step
 * stores its outputs straight into the sources' combine buffers: no ready
 * wait, no send; moe.h says why none is needed there, and a mutation that
 * fuses a second combine, where it would be, is caught), or the arrival
 * form (the dispatch in the gate/up GEMM's prologue: every source of the
 * cycle also signals arrived, that rank's GEMM waits for it per source and
 * its dispatch skips the delivered wait). The checker proves
 *  - the layout reads this call's counts from every source;
 *  - the expert step reads this cycle's rows from every source, the
 *    combine's send this cycle's outputs, the reduce this cycle's rows
 *    from every owner (nobody overwrote a buffer still in use), every row
 *    of a combine buffer and of out written once and read;
 *  - nothing deadlocks.
 * W = 1, 2, 3, 4, 8, 16; a mutation test shows the checker catches each
 * dropped or weakened wait.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "ops/moe/moe_protocol.h"
#include "tests/host/proto_waits.h"

/* The forms of the single-combine cycles: every rank unfused, fused or
 * arrival; fused on odd rank + cycle; unfused / fused / arrival by (rank +
 * cycle) % 3. */
enum { FUSE_NONE, FUSE_ALL, FUSE_MIXED, FUSE_ARRIVAL, FUSE_MIXED3, FUSE_MODES };

static int form_of(int fuse, int r, int c) {
  switch (fuse) {
    case FUSE_ALL: return LOOM__MOE_FORM_FUSED;
    case FUSE_MIXED: return (r + c) % 2 == 1 ? LOOM__MOE_FORM_FUSED : LOOM__MOE_FORM_UNFUSED;
    case FUSE_ARRIVAL: return LOOM__MOE_FORM_ARRIVAL;
    case FUSE_MIXED3: return (r + c) % 3;
    default: return LOOM__MOE_FORM_UNFUSED;
  }
}

/* Cycles c = 1 .. n: no combine (c % 3 == 0), two (c % 3 == 1) or one, in
 * the forms of `fuse` (single-combine cycles only). */
static void cycles(int W, int n, int fuse, loom__moe_cycle_t *cy) {
  for (int c = 1; c <= n; ++c) {
    loom__moe_cycle_t *y = &cy[c - 1];
    memset(y, 0, sizeof *y);
    y->combines = c % 3 == 0 ? 0 : c % 3 == 1 ? 2 : 1;
    for (int r = 0; r < W; ++r) y->form[r] = y->combines == 1 ? form_of(fuse, r, c) : LOOM__MOE_FORM_UNFUSED;
  }
}

LOOM_TEST(moe_protocol_no_stale_read_no_deadlock_w1_to_16) {
  static const int worlds[] = {1, 2, 3, 4, 8, 16};
  static const char *const fuses[] = {"unfused", "fused", "mixed", "arrival", "three forms mixed"};
  static loom__proto_t p;
  static loom__proto_report_t rep;
  loom__moe_cycle_t cy[6];
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (int fuse = FUSE_NONE; fuse < FUSE_MODES; ++fuse) {
      const int W = worlds[wi];
      cycles(W, 6, fuse, cy);
      loom__moe_protocol(W, 6, cy, 0, &p);
      CHECK_RESULT(loom__proto_check_static(&p, 2, &rep), LOOM_SUCCESS);
      if (rep.violation)
        loom_test_fail(__FILE__, __LINE__, "W=%d %s: %s\n%s", W, fuses[fuse], loom__proto_violation_str(rep.violation),
                       rep.text);
      loom__proto_free(&p);
    }
}

/* The model can fail: without the counts wait a source's count is read
 * before it is stored; a wait that takes any stored word reads the last
 * call's; without the ready wait an owner's second combine stores into a
 * source's combine buffer while that source still reduces the first (and
 * so does a fused second combine: the fused form relies on the dispatch
 * just before it); without the delivered wait the experts read rows not
 * yet there, and so does the arrival form's GEMM without its wait for
 * arrived. The checker shows each, at W = 2, 3, 4 and 8, in every mix of
 * forms (the arrival wait where some rank runs the arrival form). */
LOOM_TEST(moe_protocol_model_catches_a_missing_wait) {
  static const struct { const char *name; int sig, mutation; } muts[] = {
      {"no counts wait", LOOM__MOE_PS_COUNTS, 0},
      {"no ready wait", LOOM__MOE_PS_COMB_READY, 0},
      {"any counts word", -1, LOOM__MOE_MUT_COUNTS_BEHIND},
      {"no delivered wait", LOOM__MOE_PS_DELIVERED, 0},
      {"a fused second combine", -1, LOOM__MOE_MUT_FUSE_LATER},
      {"no arrival wait", LOOM__MOE_PS_ARRIVED, 0},
  };
  static loom__proto_t p, m;
  static loom__proto_report_t rep;
  loom__moe_cycle_t cy[6];
  int tried = 0;
  for (size_t k = 0; k < sizeof muts / sizeof *muts; ++k)
    for (int fuse = FUSE_NONE; fuse < FUSE_MODES; ++fuse)
      for (int W = 2; W <= 8; W = W < 4 ? W + 1 : 2 * W) {
        if (muts[k].sig == LOOM__MOE_PS_ARRIVED && fuse != FUSE_ARRIVAL && fuse != FUSE_MIXED3) continue;
        cycles(W, 6, fuse, cy);
        loom__moe_protocol(W, 6, cy, muts[k].mutation, &p);
        if (muts[k].sig >= 0) loom__proto_drop_waits(&p, proto_sig_id(&p, &loom__moe_signals[muts[k].sig]), &m);
        else loom__proto_copy(&p, &m);
        CHECK_RESULT(loom__proto_check(&m, 2, &rep), LOOM_SUCCESS);
        if (rep.violation < LOOM__PV_STALE_READ || rep.violation > LOOM__PV_RACE_WRITE)
          loom_test_fail(__FILE__, __LINE__, "W=%d fuse mode %d: mutation \"%s\" went unnoticed (%s)", W, fuse,
                         muts[k].name, loom__proto_violation_str(rep.violation));
        tried++;
        loom__proto_free(&p), loom__proto_free(&m);
      }
  CHECK(tried > 0);
}

/* The cycles of a protocol, for the rule below. */
typedef struct moe_waits_ctx {
  int W, n;
  const loom__moe_cycle_t *cy;
} moe_waits_ctx_t;

/* The cycle of epoch e and the combine it is (0: the first; -1: the
 * dispatch); the cycle's index, -1 past the end. */
static int epoch_cycle(const moe_waits_ctx_t *c, int e, int *combine) {
  for (int k = 0, e0 = 0; k < c->n; e0 += 1 + c->cy[k].combines, ++k)
    if (e < e0 + 1 + c->cy[k].combines) {
      *combine = e - e0 - 1;
      return k;
    }
  return -1;
}

/* Which dropped wait the rest covers:
 *  - a first combine's comb_ready: the dispatch just before it waited for
 *    every source's counts, which each stored after its last reduction
 *    (tests/host/lang/test_lang_protocol.c; the kernel keeps the wait);
 *  - comb_done of a source that runs a fused form, in a single-combine
 *    cycle where some rank u runs unfused: the source stores comb_ready
 *    after its scatter, u waits for it before u's send (u the waiter: that
 *    is its ready wait), and the waiter waits for u's comb_done. */
static int moe_covered(const void *ctx, const loom__proto_t *p, int a, const loom__pstep_t *w) {
  const moe_waits_ctx_t *c = (const moe_waits_ctx_t *)ctx;
  int j = -1;
  const int k = epoch_cycle(c, w->lo / c->W, &j), src = w->lo % c->W;
  if (k < 0) return 0;
  if (w->obj == proto_sig_id(p, &loom__moe_signals[LOOM__MOE_PS_COMB_READY])) return j == 0;
  if (w->obj != proto_sig_id(p, &loom__moe_signals[LOOM__MOE_PS_COMB_DONE]) || c->cy[k].combines != 1) return 0;
  int unfused = 0;
  for (int r = 0; r < c->W; ++r) unfused |= c->cy[k].form[r] == LOOM__MOE_FORM_UNFUSED;
  return unfused && c->cy[k].form[src] != LOOM__MOE_FORM_UNFUSED;
}

/* Every wait of the kernels of three ranks dropped in turn, in every mix
 * of forms: caught, but the covered ones. */
LOOM_TEST(moe_protocol_every_wait_needed) {
  static loom__proto_t p;
  loom__moe_cycle_t cy[3];
  const moe_waits_ctx_t c = {3, 3, cy};
  const proto_family_waits_t f = {loom__moe_signals, LOOM__MOE_NSIG, &c, NULL, moe_covered};
  proto_waits_tally_t t = {0, 0, 0};
  for (int fuse = FUSE_NONE; fuse < FUSE_MODES; ++fuse) {
    cycles(3, 3, fuse, cy);
    loom__moe_protocol(3, 3, cy, 0, &p);
    proto_every_kernel_wait(&p, &f, &t);
    loom__proto_free(&p);
  }
  printf("    %d of %d kernel waits caught; %d covered (a first combine's ready; a fused source's done)\n", t.caught,
         t.tried, t.covered);
  CHECK(t.tried > 0 && t.covered > 0);
}
