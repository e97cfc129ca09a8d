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
  return loom__optim_step(plan, "loom_lamb_step", 1, args, stream);
}
