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
  return loom__optim_step(plan, "loom_adam_step", 0, args, stream);
}
