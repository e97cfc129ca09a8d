/*
 * test_optim_plan_checks.c - what an optimizer plan accepts follows the
 * form asked for, and AUTO's per-tensor rule is a function of the tensor's
 * size alone (tests/host/fake_mem.h: a detached comm, fake device memory).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/fake_mem.h"
#include "ops/optim/optim_schedule.h"

#define BAD LOOM_ERR_INVALID_ARGUMENT
/* ---- optimizer plans: the form --------------------------------------------- */

/* Gradients must be symmetric under every form; parameters of RS-Opt-AG
 * tensors must be, AR-Opt ones need not be; AUTO is the documented rule of
 * the tensor's size (arguments alone), nothing resolved elsewhere. A valid
 * description on a detached comm ends in LOOM_ERR_UNSUPPORTED ("cannot
 * hold a plan"): every check passed. */
static loom_result_t optim_plan(loom_comm_t c, loom_optim_form_t form, void *param, void *grad, int64_t n) {
  void *params[1] = {param}, *grads[1] = {grad};
  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  d.world_size = c->size, d.num_tensors = 1, d.params = params, d.grads = grads, d.numels = &n;
  d.form = form;
  loom_plan_t plan = NULL;
  return loom_plan_adam(c, &d, &plan);
}

LOOM_TEST(optim_plan_checks_follow_the_form_and_auto_follows_its_rule) {
  loom_comm_t c = fake_comm_create(1, 2);
  bufs_t x = fake_bufs(c, 1 << 16);
  const int64_t sizes[2] = {1000, 10000}; /* AUTO: AR-Opt, RS-Opt-AG */
  const loom_result_t valid = LOOM_ERR_UNSUPPORTED;
  for (int s = 0; s < 2; ++s) {
    const int64_t n = sizes[s];
    const loom_optim_form_t forms[3] = {LOOM_OPTIM_AUTO, LOOM_OPTIM_RS_OPT_AG, LOOM_OPTIM_AR_OPT};
    for (int f = 0; f < 3; ++f) {
      /* symmetric both: valid under every form */
      CHECK_RESULT(optim_plan(c, forms[f], x.at[X_SYM], x.at[X_SYM2], n), valid);
      /* plain gradients: refused under every form */
      CHECK_RESULT(optim_plan(c, forms[f], x.at[X_SYM], x.at[X_DEV], n), BAD);
      /* plain parameters: as the form that applies to this tensor says */
      const int ar = loom__optim_tensor_is_ar((int)forms[f], n);
      CHECK_RESULT(optim_plan(c, forms[f], x.at[X_DEV], x.at[X_SYM2], n), ar ? valid : BAD);
    }
  }
  fake_comm_destroy(c);
}
