/*
 * lamb.c - loom_plan_lamb and loom_lamb_step: one LAMB step (NVIDIA apex
 * FusedLAMB's math) over a list of tensors with the gradients' all-reduce
 * fused in; the per-tensor norms of the parameters and of the update span
 * every rank's slices (three kernels; protocol in optim.h, plans in
 * optim.c).
 */
#include "core/comm.h"
#include "core/error.h"
#include "core/plan.h"
#include "ops/optim/optim.h"

loom_result_t loom_plan_lamb(loom_comm_t comm, const loom_optim_desc_t *desc, loom_plan_t *out) {
  return loom__optim_plan(comm, desc, 1, out);
}

loom_result_t loom_lamb_step(loom_plan_t plan, const loom_optim_args_t *args, cudaStream_t stream) {
  const char *fn = "loom_lamb_step";
  loom_optim_state_t *st;
  LOOM_TRY(loom__optim_state(plan, fn, 1, &st));
  LOOM_TRY(loom__comm_check(plan->comm, fn));
  loom_optim_kargs_t k;
  LOOM_TRY(loom__optim_call_args(st, fn, args, &k));
  (void)loom__plan_next_epoch(plan);
  LOOM_TRY(loom__optim_lamb_launch(&k, st->grid, stream));
  return loom__optim_done(st, stream);
}
