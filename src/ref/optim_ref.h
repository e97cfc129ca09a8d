/*
 * optim_ref.h - CPU references of the distributed optimizers
 * (loom_adam_step, loom_lamb_step), in double precision, on one tensor at a
 * time; the tests feed them the same bytes the kernels read.
 *
 * Gradient (both):  g = (sum over ranks p = 0..W-1 of grad_p) / divisor / scale
 *                   (divisor W when gradients are averaged, else 1; scale the
 *                   loss scale, 1 when none).
 * Adam (PyTorch's torch._fused_adam_ / torch.optim.AdamW(fused=True) on the
 * reduced gradient), step s = 1, 2, ...:
 *   L2 (decoupled = 0):      g += wd p
 *   AdamW (decoupled = 1):   p -= lr wd p
 *   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
 *   bc1 = 1 - b1^s, bc2 = 1 - b2^s   (1 and 1 without bias correction)
 *   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
 * LAMB (NVIDIA apex FusedLAMB, grad_averaging = True, max_grad_norm = 0):
 *   L2 (decoupled = 0):      g += wd p
 *   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
 *   u = (m / bc1) / (sqrt(v / bc2) + eps)   (+ wd p when decoupled)
 *   ratio = lr (||p|| / ||u||) if (use_nvlamb or wd != 0) and both norms
 *           are nonzero, else lr  (norms over the whole tensor, p before
 *           the update)
 *   p -= ratio u
 */
#ifndef LOOM_REF_OPTIM_REF_H
#define LOOM_REF_OPTIM_REF_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_ref_optim_hp {
  double lr, beta1, beta2, eps, weight_decay;
  int decoupled;        /* 1: AdamW / LAMB's adam_w_mode; 0: L2 on the gradient */
  int bias_correction;  /* 1: divide by 1 - beta^step */
  int use_nvlamb;       /* LAMB: the trust ratio also where weight_decay == 0 */
} loom_ref_optim_hp_t;

/* g[i] = (sum over p < world, in rank order, of grads[p][i] (dtype gt)) /
 * divisor / scale, for i < n. The sum is taken in fp32, as the kernels'
 * contract says (rank order, fp32): where the ranks' gradients cancel, the
 * fp32 sum keeps only their rounding, and a double sum would be a different
 * gradient (seen: three fp32 gradients of ~400 summing to -0.00142 in double,
 * -0.00143 in fp32). The rest of the step stays in double. */
void loom_ref_optim_reduce(loom_dtype_t gt, int world, const void *const *grads, int64_t n, double divisor,
                           double scale, double *g);

/* One Adam step (number `step` >= 1) of a tensor of n elements: p, m, v
 * updated in place from the reduced gradient g. */
void loom_ref_adam_step(const loom_ref_optim_hp_t *hp, int step, int64_t n, double *p, double *m, double *v,
                        const double *g);

/* One LAMB step of a whole tensor (the norms span all n elements).
 * *ratio_out (or NULL) receives the ratio applied (lr times the trust
 * ratio). */
void loom_ref_lamb_step(const loom_ref_optim_hp_t *hp, int step, int64_t n, double *p, double *m, double *v,
                        const double *g, double *ratio_out);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_REF_OPTIM_REF_H */
