/*
 * optim_ref.c - see optim_ref.h: the optimizers' CPU references in double.
 */
#include "ref/optim_ref.h"
#include "ref/ref.h"

#include <math.h>
#include <stdlib.h>

void loom_ref_optim_reduce(loom_dtype_t gt, int world, const void *const *grads, int64_t n, double divisor,
                           double scale, double *g) {
  for (int64_t i = 0; i < n; ++i) {
    float s = 0.0f;
    for (int p = 0; p < world; ++p) s += (float)loom_ref_load(gt, grads[p], (size_t)i);
    g[i] = (double)s / divisor / scale;
  }
}

static void corrections(const loom_ref_optim_hp_t *hp, int step, double *bc1, double *bc2) {
  *bc1 = hp->bias_correction ? 1.0 - pow(hp->beta1, step) : 1.0;
  *bc2 = hp->bias_correction ? 1.0 - pow(hp->beta2, step) : 1.0;
}

void loom_ref_adam_step(const loom_ref_optim_hp_t *hp, int step, int64_t n, double *p, double *m, double *v,
                        const double *g) {
  double bc1, bc2;
  corrections(hp, step, &bc1, &bc2);
  const double step_size = hp->lr / bc1, bc2_sqrt = sqrt(bc2);
  for (int64_t i = 0; i < n; ++i) {
    double gi = g[i];
    if (hp->weight_decay != 0) {
      if (hp->decoupled) p[i] -= hp->lr * hp->weight_decay * p[i];
      else gi += hp->weight_decay * p[i];
    }
    m[i] = hp->beta1 * m[i] + (1 - hp->beta1) * gi;
    v[i] = hp->beta2 * v[i] + (1 - hp->beta2) * gi * gi;
    p[i] -= step_size * m[i] / (sqrt(v[i]) / bc2_sqrt + hp->eps);
  }
}

void loom_ref_lamb_step(const loom_ref_optim_hp_t *hp, int step, int64_t n, double *p, double *m, double *v,
                        const double *g, double *ratio_out) {
  double bc1, bc2;
  corrections(hp, step, &bc1, &bc2);
  double *u = (double *)malloc((size_t)n * sizeof(double));
  double pn = 0, un = 0;
  for (int64_t i = 0; i < n; ++i) {
    double gi = g[i];
    if (!hp->decoupled) gi += hp->weight_decay * p[i];
    m[i] = hp->beta1 * m[i] + (1 - hp->beta1) * gi;
    v[i] = hp->beta2 * v[i] + (1 - hp->beta2) * gi * gi;
    double ui = (m[i] / bc1) / (sqrt(v[i] / bc2) + hp->eps);
    if (hp->decoupled) ui += hp->weight_decay * p[i];
    u[i] = ui;
    pn += p[i] * p[i];
    un += ui * ui;
  }
  pn = sqrt(pn);
  un = sqrt(un);
  double ratio = hp->lr;
  if ((hp->use_nvlamb || hp->weight_decay != 0) && pn != 0 && un != 0) ratio = hp->lr * (pn / un);
  for (int64_t i = 0; i < n; ++i) p[i] -= ratio * u[i];
  if (ratio_out) *ratio_out = ratio;
  free(u);
}
