/*
 * adam.c - loom_plan_adam and loom_adam_step: one Adam/AdamW step over a
 * list of tensors with the gradients' all-reduce fused in (RS-Opt-AG and
 * AR-Opt chunks in one kernel; protocol in optim.h, plans in optim.c).
 */
#include "core/comm.h"
#include "core/error.h"
#include "core/plan.h"
#include "ops/optim/optim.h"

loom_result_t loom_plan_adam(loom_comm_t comm, const loom_optim_desc_t *desc, loom_plan_t *out) {
  return loom__optim_plan(comm, desc, 0, out);
}

loom_result_t loom_adam_step(loom_plan_t plan, const loom_optim_args_t *args, cudaStream_t stream) {
  const char *fn = "loom_adam_step";
  loom_optim_state_t *st;
  LOOM_TRY(loom__optim_state(plan, fn, 0, &st));
  LOOM_TRY(loom__comm_check(plan->comm, fn));
  loom_optim_kargs_t k;
  LOOM_TRY(loom__optim_call_args(st, fn, args, &k));
  (void)loom__plan_next_epoch(plan);
  LOOM_TRY(loom__optim_adam_launch(&k, st->grid, stream));
  return loom__optim_done(st, stream);
}
