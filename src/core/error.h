/*
 * error.h - how loom code reports failure.
 *
 * Every library function returns loom_result_t. A failure sets the thread's
 * message (loom_last_error) through loom__fail, which names the argument or
 * call and the value, and returns the code, so the idiom is
 *     if (m < 1) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "m=%lld: must be >= 1", m);
 * LOOM_TRY propagates a failure already described; LOOM_CUDA / LOOM_NCCL
 * turn a CUDA or NCCL error into LOOM_ERR_CUDA / LOOM_ERR_NCCL with the call's
 * text, file and line. Nothing here exits or aborts.
 */
#ifndef LOOM_CORE_ERROR_H
#define LOOM_CORE_ERROR_H

#include "loom.h"
#include "core/check_macros.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the thread's last-error message (printf format) and returns code. */
loom_result_t loom__fail(loom_result_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Appends to the thread's message (for context added by a caller). */
void loom__fail_append(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

loom_result_t loom__cuda_fail(int err, const char *what, const char *file, int line);
loom_result_t loom__nccl_fail(int err, const char *what, const char *file, int line);

/* "bf16", "fp16", "fp32" ("?" for anything else): messages and tuning keys. */
const char *loom__dtype_name(loom_dtype_t t);

#ifdef __cplusplus
}
#endif

#define LOOM_TRY(call) LOOM_CHECK_RESULT(call)
#define LOOM_CUDA(call) LOOM_CHECK_CUDA_WITH(loom__cuda_fail, call)
#define LOOM_NCCL(call) LOOM_CHECK_NCCL_WITH(loom__nccl_fail, call)

/* After a kernel launch: launch-configuration errors and earlier faults. */
#define LOOM_CUDA_LAUNCHED(what) LOOM_CUDA(cudaGetLastError())

#endif /* LOOM_CORE_ERROR_H */
