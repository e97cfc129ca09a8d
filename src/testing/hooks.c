/*
 * hooks.c - see hooks.h.
 */
#include "testing/hooks.h"

#include <stdlib.h>

#include "baseline/baseline.h"
#include "core/error.h"
#include "core/handle.h"
#include "core/op.h"
#include "core/param.h"
#include "core/world.h"

loom_result_t loom__comm_create_detached(int rank, int size, size_t workspace_bytes, loom_comm_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "out=NULL");
  if (size < 1 || rank < 0 || rank >= size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "rank=%d size=%d", rank, size);
  loom_comm_t c = (loom_comm_t)calloc(1, sizeof *c);
  if (!c) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of a comm failed");
  c->detached = 1;
  c->rank = c->lsa_rank = rank;
  c->size = c->lsa_size = size;
  c->device = -1;
  c->ws_bytes = workspace_bytes;
  c->timeout_ms = (int)loom__param_TIMEOUT_MS();
  c->nccl_version = LOOM_MIN_NCCL_VERSION;
  loom_result_t r = loom__comm_reserve_own(c);
  if (r == LOOM_SUCCESS) r = loom__handle_add(c, LOOM_HANDLE_COMM);
  if (r != LOOM_SUCCESS) {
    loom__ws_fini(&c->ws_alloc);
    free(c);
    return r;
  }
  *out = c;
  return LOOM_SUCCESS;
}

loom_result_t loom__world_create_detached(int size, int sms, loom_world_t *out) {
  return loom__world_create(size, -1, sms, 1, out);
}

void loom__comm_set_mem_backend(loom_comm_t comm, const loom_mem_backend_t *backend) { comm->mem = backend; }

void loom__base_gemm_force_bias_fallback(int on) {
  __atomic_store_n(&loom__base_gemm_no_bias_epilogue, on ? 1 : 0, __ATOMIC_RELAXED);
}

void loom__ptr_check_set_oracle(loom_ptr_oracle_fn oracle) { loom__ptr_oracle = oracle; }

/* ---- the bare test op ------------------------------------------------------- */

typedef struct {
  uint32_t nsignals;
  size_t staging;
} test_op_desc_t;

static loom_result_t test_op_check(const loom_op_t *op, loom_comm_t comm, const void *desc) {
  (void)comm;
  if (!desc) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL", op->plan_fn);
  return LOOM_SUCCESS;
}

static loom_result_t test_op_resolve(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state) {
  (void)op, (void)comm;
  *(test_op_desc_t *)state = *(const test_op_desc_t *)desc;
  return LOOM_SUCCESS;
}

static loom_result_t test_op_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  (void)op, (void)comm;
  const test_op_desc_t *d = (const test_op_desc_t *)state;
  lay->nsignals = d->nsignals;
  lay->staging_bytes = d->staging;
  lay->fingerprint = loom__fnv64(LOOM_FNV64_INIT, d, sizeof *d);
  return LOOM_SUCCESS;
}

static loom_result_t test_op_fill(loom_plan_t plan, void *state) {
  (void)plan, (void)state;
  return LOOM_SUCCESS;
}

static void test_op_release(loom_comm_t comm, void *state) { (void)comm, (void)state; }

static const loom_op_t test_op = {
    .name = "test",
    .plan_fn = "loom__test_plan",
    .state_bytes = sizeof(test_op_desc_t),
    .differ = "the same nsignals and staging on every rank",
    .check = test_op_check,
    .resolve = test_op_resolve,
    .lay_out = test_op_lay_out,
    .fill = test_op_fill,
    .release = test_op_release,
};

loom_result_t loom__test_plan(loom_comm_t comm, uint32_t nsignals, size_t staging, loom_plan_t *out) {
  const test_op_desc_t d = {nsignals, staging};
  return loom__plan_make(comm, &test_op, &d, out);
}
