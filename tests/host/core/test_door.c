/*
 * test_door.c - the one door (core/op.h) on detached comms: a counting op
 * whose every step is recorded shows the sequence (check once, resolve, lay
 * out, agree, fill; release exactly once whatever step failed), the state
 * found by the op's table, the call entry's refusals; and the tuning rule's
 * pick (core/tune_rule.h) from measured times.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/trace.h"
#include "core/log.h"
#include "core/tune_rule.h"
#include "testing/hooks.h"

/* ---- a counting op ----------------------------------------------------------- */

typedef struct {
  int nsignals;     /* < 0: check refuses */
  int fail_at;      /* 1 resolve, 2 lay out, 3 fill: that step fails */
} count_desc_t;

typedef struct {
  count_desc_t d;
  int *owned;       /* taken in resolve, freed in release */
} count_state_t;

static int n_check, n_resolve, n_lay_out, n_fill, n_release, n_tune;

static loom_result_t count_check(const loom_op_t *op, loom_comm_t comm, const void *desc) {
  n_check++;
  const count_desc_t *d = (const count_desc_t *)desc;
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL", op->plan_fn);
  if (d->nsignals < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->nsignals=%d must be >= 0", op->plan_fn, d->nsignals);
  return LOOM_SUCCESS;
}

static loom_result_t count_resolve(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state) {
  n_resolve++;
  count_state_t *st = (count_state_t *)state;
  st->d = *(const count_desc_t *)desc;
  st->owned = (int *)malloc(64);
  if (st->d.fail_at == 1) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: resolve failed", op->plan_fn);
  return LOOM_SUCCESS;
}

static loom_result_t count_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  n_lay_out++;
  const count_state_t *st = (const count_state_t *)state;
  if (st->d.fail_at == 2) return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: lay out failed", op->plan_fn);
  lay->nsignals = (uint32_t)st->d.nsignals;
  lay->staging_bytes = 1024;
  lay->fingerprint = loom__fnv64(LOOM_FNV64_INIT, &st->d, sizeof st->d);
  return LOOM_SUCCESS;
}

static loom_result_t count_fill(loom_plan_t plan, void *state) {
  n_fill++;
  const count_state_t *st = (const count_state_t *)state;
  if (st->d.fail_at == 3) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: fill failed", plan->op->plan_fn);
  return LOOM_SUCCESS;
}

static void count_release(loom_comm_t comm, void *state) {
  n_release++;
  free(((count_state_t *)state)->owned);
}

static int count_tune_asked(const loom_op_t *op, loom_comm_t comm, const void *desc) { return 1; }

static loom_result_t count_tune(const loom_op_t *op, loom_comm_t comm, const void *desc, cudaStream_t stream) {
  n_tune++;
  return LOOM_SUCCESS;
}

static const loom_op_family_t count_family = {"count", "a count or other_count plan"};

static const loom_op_t count_op = {
    .name = "count", .plan_fn = "loom_plan_count", .family = &count_family, .kind = 0,
    .state_bytes = sizeof(count_state_t), .differ = "the same count_desc_t",
    .check = count_check, .tune_asked = count_tune_asked, .tune = count_tune, .resolve = count_resolve,
    .lay_out = count_lay_out, .fill = count_fill, .release = count_release,
};
static const loom_op_t other_op = {
    .name = "other_count", .plan_fn = "loom_plan_other_count", .family = &count_family, .kind = 1,
    .state_bytes = sizeof(count_state_t), .check = count_check, .resolve = count_resolve,
    .lay_out = count_lay_out, .fill = count_fill, .release = count_release,
};

static void counts_zero(void) { n_check = n_resolve = n_lay_out = n_fill = n_release = n_tune = 0; }

LOOM_TEST(door_checks_once_and_builds) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 1, 1 << 20, &c), LOOM_SUCCESS);
  counts_zero();
  const count_desc_t d = {8, 0};
  loom_plan_t p = NULL;
  CHECK_RESULT(loom__plan_make(c, &count_op, &d, &p), LOOM_SUCCESS);
  CHECK(p != NULL && p->op == &count_op && p->nsignals == 8);
  CHECK(n_check == 1 && n_resolve == 1 && n_lay_out == 1 && n_fill == 1 && n_release == 0);
  CHECK(n_tune == 0); /* LOOM_TUNE is not 1 in the host suite */
  /* the lower half: no check */
  loom_plan_t q = NULL;
  CHECK_RESULT(loom__plan_build(c, &count_op, &d, &q), LOOM_SUCCESS);
  CHECK(n_check == 1 && n_resolve == 2);
  CHECK_RESULT(loom_plan_destroy(q), LOOM_SUCCESS);
  CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  CHECK(n_release == 2);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

LOOM_TEST(door_refuses_and_releases_at_every_step) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 2, 1 << 20, &c), LOOM_SUCCESS);
  counts_zero();
  loom_plan_t p = (loom_plan_t)1;
  const count_desc_t bad = {-1, 0};
  CHECK_RESULT(loom__plan_make(c, &count_op, &bad, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_plan_count: desc->nsignals=-1 must be >= 0");
  CHECK(p == NULL && n_resolve == 0);
  CHECK_RESULT(loom__plan_make(c, &count_op, &bad, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("out=NULL");
  CHECK(n_check == 1); /* out is checked before the description */
  loom_comm_info_t before = LOOM_COMM_INFO_INIT, after = LOOM_COMM_INFO_INIT;
  CHECK_RESULT(loom_comm_get_info(c, &before), LOOM_SUCCESS);
  const loom_result_t want[4] = {LOOM_SUCCESS, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_UNSUPPORTED,
                                 LOOM_ERR_OUT_OF_MEMORY};
  static const char *const msg[4] = {"", "resolve failed", "lay out failed", "fill failed"};
  for (int at = 1; at <= 3; ++at) {
    counts_zero();
    const count_desc_t d = {4, at};
    CHECK_RESULT(loom__plan_make(c, &count_op, &d, &p), want[at]);
    CHECK_MSG(msg[at]);
    CHECK(p == NULL);
    CHECK_EQ_INT(n_release, 1); /* the state's resources freed once, whichever step failed */
  }
  CHECK_RESULT(loom_comm_get_info(c, &after), LOOM_SUCCESS);
  CHECK(after.workspace_free == before.workspace_free); /* the failed fill's slice released too */
  CHECK_EQ_INT(c->nplans, 0);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS); /* no plan left behind */
}

LOOM_TEST(door_finds_state_by_table) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 1, 1 << 20, &c), LOOM_SUCCESS);
  const count_desc_t d = {2, 0};
  loom_plan_t p = NULL, t = NULL;
  CHECK_RESULT(loom__plan_make(c, &other_op, &d, &p), LOOM_SUCCESS);
  CHECK_RESULT(loom__test_plan(c, 1, 0, &t), LOOM_SUCCESS);
  void *st = NULL;
  CHECK_RESULT(loom__plan_state(p, "f", NULL, &other_op, &st), LOOM_SUCCESS);
  CHECK(st == p->op_state);
  CHECK_RESULT(loom__plan_state(p, "f", &count_family, NULL, &st), LOOM_SUCCESS);
  CHECK_RESULT(loom__plan_state(p, "f", NULL, &count_op, &st), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("f: plan=");
  CHECK_MSG("is an other_count plan, not a count plan");
  CHECK_RESULT(loom__plan_state(t, "f", &count_family, NULL, &st), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("is a test plan, not a count or other_count plan");
  CHECK_RESULT(loom__call_enter(NULL, "g", NULL, &count_op, NULL, &st), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("g: plan=NULL");
  /* a detached comm's plan has no done event: the exit records nothing */
  int capturing = 1;
  CHECK_RESULT(loom__call_exit(p, NULL, &capturing), LOOM_SUCCESS);
  CHECK_EQ_INT(capturing, 0);
  CHECK_RESULT(loom_plan_destroy(t), LOOM_SUCCESS);
  CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  CHECK_RESULT(loom__plan_state(p, "f", NULL, &other_op, &st), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("is not a live loom plan");
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* At LOOM_DEBUG=TRACE a plan traces its calls (core/trace.h), except on a
 * test comm: no events there, so no trace, and calls run as without one. */
LOOM_TEST(door_traces_no_calls_on_a_test_comm) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 1, 1 << 20, &c), LOOM_SUCCESS);
  const loom_log_level_t was = loom__log_level();
  loom__log_set_level(LOOM_LOG_TRACE);
  const count_desc_t d = {2, 0};
  loom_plan_t p = NULL;
  void *st = NULL;
  CHECK_RESULT(loom__plan_make(c, &count_op, &d, &p), LOOM_SUCCESS);
  CHECK(p != NULL && p->trace == NULL);
  CHECK_RESULT(loom__call_enter(p, "f", NULL, &count_op, NULL, &st), LOOM_SUCCESS);
  loom__trace_mark(p, "stage", NULL);
  CHECK_RESULT(loom__call_exit(p, NULL, NULL), LOOM_SUCCESS);
  CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  loom__log_set_level(was);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

LOOM_TEST(door_tuning_entry_checks_then_refuses_without_gpu) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 1, 1 << 20, &c), LOOM_SUCCESS);
  counts_zero();
  const count_desc_t bad = {-3, 0}, good = {1, 0};
  CHECK_RESULT(loom__plan_tune(c, &count_op, "loom_count_tune", &bad, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->nsignals=-3");
  CHECK_RESULT(loom__plan_tune(c, &count_op, "loom_count_tune", &good, NULL), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("loom_count_tune: a test comm without a GPU cannot time");
  CHECK(n_check == 2 && n_tune == 0);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* ---- the tuning rule's pick ------------------------------------------------------ */

LOOM_TEST(tune_rule_pick_median_margin_left_out) {
  const float L = LOOM_TUNE_LEFT_OUT;
  float med[4];
  /* rows are rounds; candidate 1's median 0.95 beats the default's 1.0 by 5% */
  const float a[3 * 3] = {1.0f, 0.95f, 1.2f, 1.1f, 0.90f, 1.2f, 0.9f, 0.99f, 1.2f};
  CHECK_EQ_INT(loom__tune_rule_pick(a, 3, 3, med), 1);
  CHECK(fabsf(med[0] - 1.0f) < 1e-6f && fabsf(med[1] - 0.95f) < 1e-6f);
  /* within the margin: the default stays */
  const float b[3 * 2] = {1.0f, 0.99f, 1.0f, 0.985f, 1.0f, 0.99f};
  CHECK_EQ_INT(loom__tune_rule_pick(b, 3, 2, med), 0);
  /* one round's outlier does not win (the best round would have) */
  const float c[3 * 2] = {1.0f, 0.5f, 1.0f, 1.1f, 1.0f, 1.1f};
  CHECK_EQ_INT(loom__tune_rule_pick(c, 3, 2, med), 0);
  /* beyond the margin, the fastest of those wins, not the first */
  const float d[3 * 3] = {1.0f, 0.9f, 0.8f, 1.0f, 0.9f, 0.8f, 1.0f, 0.9f, 0.8f};
  CHECK_EQ_INT(loom__tune_rule_pick(d, 3, 3, med), 2);
  /* left out anywhere: left out; the default left out: the fastest runnable */
  const float e[3 * 3] = {L, 0.9f, 0.8f, L, 0.9f, L, L, 0.9f, 0.8f};
  CHECK_EQ_INT(loom__tune_rule_pick(e, 3, 3, med), 1);
  CHECK(med[0] >= L && med[2] >= L);
  const float f[2 * 2] = {L, L, L, L};
  CHECK_EQ_INT(loom__tune_rule_pick(f, 2, 2, med), -1);
  /* an even count of rounds: the mean of the middle two */
  const float g[4 * 1] = {1.0f, 3.0f, 2.0f, 10.0f};
  CHECK_EQ_INT(loom__tune_rule_pick(g, 4, 1, med), 0);
  CHECK(fabsf(med[0] - 2.5f) < 1e-6f);
}
