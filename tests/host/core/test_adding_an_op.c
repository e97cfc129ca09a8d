/*
 * test_adding_an_op.c - the worked example of docs/adding-an-op.md: a small
 * op family written by following that page, built and run by the host
 * suite so the page stays true.
 *
 * The family "stamp" has one op, `stamp`: every rank writes its rank into
 * element r of every peer's `out` [W] (int32, symmetric memory), then waits
 * until every peer's stamp of this call has arrived. On a GPU its call
 * would launch one kernel; here, on a detached comm, the door, the checks
 * and the call's entry and exit run, and the launch step says it needs a
 * GPU (as every family does on a test comm).
 */
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/fake_mem.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/ptr_check.h"
#include "testing/hooks.h"

/* ---- what would be the family's header (src/ops/stamp/stamp.h) ------------- */

/* The description (public, in include/loom.h, with a LOOM_..._INIT). */
typedef struct stamp_desc {
  size_t struct_size;
  int world_size;
  int rounds;        /* stamps per call, 1..16 */
} stamp_desc_t;
#define STAMP_DESC_INIT {sizeof(stamp_desc_t), 0, 1}

/* The plan's state: a copy of the description, what the plan resolved, the
 * signal words' offsets. */
typedef struct stamp_state {
  stamp_desc_t desc;
  int rank, world;
  size_t arrived_off; /* [W] signals: arrived[p] = e once p's stamps of call e are here */
  int *order;         /* [W] the peers in push order (rank + 1 first): host memory the plan owns */
} stamp_state_t;

/* ---- what would be stamp_plan.c -------------------------------------------- */

/* check: each field by name and value, from the arguments and the comm's
 * facts alone. */
static loom_result_t stamp_check(const loom_op_t *op, loom_comm_t comm, const void *desc) {
  const stamp_desc_t *d = (const stamp_desc_t *)desc;
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL", op->plan_fn);
  if (d->struct_size != sizeof *d)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->struct_size=%zu, expected %zu", op->plan_fn,
                      d->struct_size, sizeof *d);
  if (d->world_size != comm->size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->world_size=%d differs from the comm's size %d",
                      op->plan_fn, d->world_size, comm->size);
  if (d->rounds < 1 || d->rounds > 16)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->rounds=%d must be in 1..16", op->plan_fn, d->rounds);
  return LOOM_SUCCESS;
}

/* resolve: the state's own copy, this rank's part, host tables. */
static loom_result_t stamp_resolve(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state) {
  stamp_state_t *st = (stamp_state_t *)state;
  st->desc = *(const stamp_desc_t *)desc;
  st->rank = comm->rank, st->world = comm->size;
  st->order = (int *)malloc((size_t)st->world * sizeof(int));
  if (!st->order) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation failed", op->plan_fn);
  for (int i = 0; i < st->world; ++i) st->order[i] = (st->rank + 1 + i) % st->world;
  return LOOM_SUCCESS;
}

/* lay out: the signal words, and what every rank must have alike. */
static loom_result_t stamp_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  const stamp_state_t *st = (const stamp_state_t *)state;
  lay->nsignals = (uint32_t)st->world;
  lay->fingerprint = loom__fnv64(LOOM_FNV64_INIT, &st->desc.rounds, sizeof st->desc.rounds);
  return LOOM_SUCCESS;
}

/* fill: after the agreement; a GPU plan would allocate and preload here. */
static loom_result_t stamp_fill(loom_plan_t plan, void *state) {
  stamp_state_t *st = (stamp_state_t *)state;
  st->arrived_off = plan->signals_offset;
  return LOOM_SUCCESS;
}

/* release: whatever resolve..fill took, at whichever step the plan stopped. */
static void stamp_release(loom_comm_t comm, void *state) { free(((stamp_state_t *)state)->order); }

static const loom_op_t stamp_op = {
    .name = "stamp",
    .plan_fn = "stamp_plan",
    .state_bytes = sizeof(stamp_state_t),
    .differ = "every rank must pass the same stamp_desc_t (rounds)",
    .check = stamp_check,
    .resolve = stamp_resolve,
    .lay_out = stamp_lay_out,
    .fill = stamp_fill,
    .release = stamp_release,
};

/* The public plan entry: one line. */
static loom_result_t stamp_plan(loom_comm_t comm, const stamp_desc_t *desc, loom_plan_t *out) {
  return loom__plan_make(comm, &stamp_op, desc, out);
}

/* ---- what would be stamp.c (one file per public call) ------------------------ */

static loom_result_t stamp(loom_plan_t plan, int32_t *out, cudaStream_t stream) {
  const char *fn = "stamp";
  stamp_state_t *st;
  LOOM_TRY(loom__call_enter(plan, fn, NULL, &stamp_op, stream, (void **)&st));
  const loom_buf_t o = {"out", out, (size_t)st->world * sizeof(int32_t), LOOM_BUF_SYMMETRIC,
                        "peers store their stamps into it: allocate it with loom_malloc"};
  LOOM_TRY(loom__check_buf(fn, plan->comm, &o));
  if (plan->comm->detached) return loom__plan_detached(fn); /* the launch needs a GPU */
  (void)loom__plan_next_epoch(plan);
  /* ... the kernel's launch here ... */
  return loom__call_exit(plan, stream, NULL);
}

/* ---- the family's host tests ----------------------------------------------------- */

LOOM_TEST(adding_an_op_worked_example) {
  for (int W = 1; W <= 8; W *= 2) {
    loom_comm_t c = fake_comm_create(W - 1, W);
    CHECK(c != NULL);
    stamp_desc_t d = STAMP_DESC_INIT;
    d.world_size = W;
    loom_plan_t p = NULL;
    d.rounds = 17;
    CHECK_RESULT(stamp_plan(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("stamp_plan: desc->rounds=17 must be in 1..16");
    d.rounds = 2;
    CHECK_RESULT(stamp_plan(c, &d, &p), LOOM_SUCCESS);
    const stamp_state_t *st = (const stamp_state_t *)p->op_state;
    CHECK(st->order[0] == 0 % W && st->order[W - 1] == W - 1 && p->nsignals == (uint32_t)W);
    CHECK(st->arrived_off == p->signals_offset);
    /* the call: its entry refuses another op's plan and bad pointers by name */
    loom_plan_t other = NULL;
    CHECK_RESULT(loom__test_plan(c, 1, 0, &other), LOOM_SUCCESS);
    CHECK_RESULT(stamp(other, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("is a test plan, not a stamp plan");
    CHECK_RESULT(stamp(p, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("stamp: out=");
    CHECK_RESULT(stamp(p, (int32_t *)fake_dev_alloc(64), NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("is not inside memory from loom_malloc on this comm: peers store their stamps");
    CHECK_RESULT(stamp(p, (int32_t *)fake_sym_alloc(c, 64), NULL), LOOM_ERR_UNSUPPORTED); /* checks passed */
    CHECK_MSG("stamp: the description is valid; a test comm without a GPU");
    CHECK_RESULT(loom_plan_destroy(other), LOOM_SUCCESS);
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
    fake_comm_destroy(c);
  }
}
