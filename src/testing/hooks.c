/*
 * hooks.c - see hooks.h.
 */
#include "testing/hooks.h"

#include <stdlib.h>

#include "baseline/baseline.h"
#include "core/error.h"
#include "core/handle.h"
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
