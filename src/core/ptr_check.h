/*
 * ptr_check.h - is a pointer argument memory the current GPU can reach?
 *
 * Every public op that takes device pointers checks them before it launches
 * anything, so that a host pointer, a freed pointer or another GPU's pointer
 * is LOOM_ERR_INVALID_ARGUMENT naming the argument, not an illegal-address
 * fault that kills the process's CUDA context.
 *
 * Accepted: device memory of the current device (cudaMalloc, cudaMallocAsync
 * pools, ncclMemAlloc / cuMem* mappings such as loom_malloc memory), managed
 * memory, and pinned host memory mapped for the device. Refused: pageable
 * host memory and freed memory (the runtime reports them unregistered), and
 * memory of another device. Where the driver reports the allocation's range,
 * [p, p + bytes) must lie inside it.
 *
 * Cost: one cuPointerGetAttributes per pointer (type, device and range in
 * one driver call; no cache: a cache could not see a free). Inside a stream
 * capture the checks run the same (it enqueues no work).
 */
#ifndef LOOM_CORE_PTR_CHECK_H
#define LOOM_CORE_PTR_CHECK_H

#include <stddef.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LOOM_SUCCESS if [p, p + bytes) is reachable from the current device
 * (bytes 0: only p), else LOOM_ERR_INVALID_ARGUMENT: "<fn>: <arg>=<p> is
 * ... " saying what the memory is. p NULL is refused too. */
loom_result_t loom__check_device_ptr(const char *fn, const char *arg, const void *p, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_PTR_CHECK_H */
