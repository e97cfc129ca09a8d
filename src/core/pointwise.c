/*
 * pointwise.c - loom__pointwise_make: a loom_epilogue_t checked and turned
 * into the kernel argument (see pointwise.h).
 */
#include "pointwise.h"
#include "error.h"

#include <string.h>

loom_result_t loom__pointwise_make(const char *fn, const loom_epilogue_t *epi, loom_dtype_t out_type, int64_t cols,
                                   loom_pointwise_t *pw) {
  memset(pw, 0, sizeof *pw);
  pw->act = LOOM_ACT_NONE;
  pw->type = (int32_t)out_type;
  pw->scale = 1.f;
  pw->keep_scale = 1.f;
  pw->cols = cols;
  if (!epi) return LOOM_SUCCESS;
  if (epi->struct_size != sizeof(loom_epilogue_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: epilogue->struct_size=%zu, expected %zu (initialise with LOOM_EPILOGUE_INIT; header and "
                      "library differ?)",
                      fn, epi->struct_size, sizeof(loom_epilogue_t));
  if (!isfinite(epi->scale))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: epilogue->scale=%g must be finite", fn, (double)epi->scale);
  if (epi->activation < LOOM_ACT_NONE || epi->activation > LOOM_ACT_GELU_ERF)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: epilogue->activation=%d is unknown (LOOM_ACT_NONE, _RELU, _GELU_TANH or _GELU_ERF)", fn,
                      (int)epi->activation);
  if (!(epi->dropout_p >= 0.f && epi->dropout_p < 1.f))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: epilogue->dropout_p=%g must be in [0, 1)", fn,
                      (double)epi->dropout_p);
  if (epi->scale != 1.f) pw->flags |= LOOM_PW_SCALE, pw->scale = epi->scale;
  if (epi->bias) pw->flags |= LOOM_PW_BIAS, pw->bias = epi->bias;
  if (epi->activation != LOOM_ACT_NONE) pw->flags |= LOOM_PW_ACT, pw->act = (int32_t)epi->activation;
  if (epi->dropout_p > 0.f) {
    pw->flags |= LOOM_PW_DROPOUT;
    pw->keep_scale = 1.f / (1.f - epi->dropout_p);
    pw->drop_threshold = loom__dropout_threshold(epi->dropout_p);
    pw->seed = epi->dropout_seed;
    pw->offset = epi->dropout_offset;
  }
  if (epi->residual) pw->flags |= LOOM_PW_RESIDUAL, pw->residual = epi->residual;
  return LOOM_SUCCESS;
}
