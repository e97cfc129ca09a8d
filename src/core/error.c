/*
 * error.c - thread-local error messages and result names.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define LOOM_ERRMSG_BYTES 1024
static _Thread_local char loom__msg[LOOM_ERRMSG_BYTES];

const char *loom_last_error(void) { return loom__msg; }

const char *loom_result_string(loom_result_t r) {
  switch (r) {
    case LOOM_SUCCESS: return "LOOM_SUCCESS";
    case LOOM_ERR_INVALID_ARGUMENT: return "LOOM_ERR_INVALID_ARGUMENT";
    case LOOM_ERR_UNSUPPORTED: return "LOOM_ERR_UNSUPPORTED";
    case LOOM_ERR_CUDA: return "LOOM_ERR_CUDA";
    case LOOM_ERR_NCCL: return "LOOM_ERR_NCCL";
    case LOOM_ERR_OUT_OF_MEMORY: return "LOOM_ERR_OUT_OF_MEMORY";
    case LOOM_ERR_TIMEOUT: return "LOOM_ERR_TIMEOUT";
    case LOOM_ERR_INTERNAL: return "LOOM_ERR_INTERNAL";
  }
  return "LOOM_ERR_UNKNOWN";
}

loom_result_t loom__fail(loom_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(loom__msg, sizeof loom__msg, fmt, ap);
  va_end(ap);
  return code;
}

void loom__fail_append(const char *fmt, ...) {
  size_t used = strlen(loom__msg);
  if (used + 1 >= sizeof loom__msg) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(loom__msg + used, sizeof loom__msg - used, fmt, ap);
  va_end(ap);
}

loom_result_t loom__cuda_fail(int err, const char *what, const char *file, int line) {
  cudaError_t e = (cudaError_t)err;
  loom_result_t code = (e == cudaErrorMemoryAllocation) ? LOOM_ERR_OUT_OF_MEMORY : LOOM_ERR_CUDA;
  return loom__fail(code, "%s failed: %s (%s, cudaError %d) at %s:%d", what,
                    cudaGetErrorString(e), cudaGetErrorName(e), err, file, line);
}

loom_result_t loom__nccl_fail(int err, const char *what, const char *file, int line) {
  return loom__fail(LOOM_ERR_NCCL, "%s failed: %s (ncclResult %d) at %s:%d", what,
                    ncclGetErrorString((ncclResult_t)err), err, file, line);
}

const char *loom__dtype_name(loom_dtype_t t) {
  switch (t) {
    case LOOM_FP32: return "fp32";
    case LOOM_FP16: return "fp16";
    case LOOM_BF16: return "bf16";
  }
  return "?";
}
