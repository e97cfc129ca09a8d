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
#include <stdint.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LOOM_SUCCESS if [p, p + bytes) is reachable from the current device
 * (bytes 0: only p), else LOOM_ERR_INVALID_ARGUMENT: "<fn>: <arg>=<p> is
 * ... " saying what the memory is. p NULL is refused too. */
loom_result_t loom__check_device_ptr(const char *fn, const char *arg, const void *p, size_t bytes);

/* One pointer argument of an op and what the op needs of it. */
typedef struct loom_buf {
  const char *name;    /* the argument as messages name it ("a_full", "epilogue->bias") */
  const void *p;
  size_t bytes;        /* bytes the op reads or writes from p on this rank (0: p only) */
  unsigned flags;      /* LOOM_BUF_* */
  const char *why;     /* LOOM_BUF_SYMMETRIC: why it must be (peers load / store it) */
} loom_buf_t;
#define LOOM_BUF_OPTIONAL 1u  /* NULL is accepted (and nothing else checked) */
#define LOOM_BUF_ALIGN16 2u   /* 16-byte aligned */
#define LOOM_BUF_SYMMETRIC 4u /* inside one loom_malloc allocation of the comm, all `bytes` of it */

/* The one check of an op's pointer argument, on every path the op may take:
 * NULL (unless optional), alignment, memory this GPU reaches with `bytes`
 * inside its allocation (loom__check_device_ptr), and for symmetric buffers
 * `bytes` inside one loom_malloc allocation of comm. LOOM_SUCCESS or
 * LOOM_ERR_INVALID_ARGUMENT naming b->name, its value and what was wrong. */
loom_result_t loom__check_buf(const char *fn, loom_comm_t comm, const loom_buf_t *b);

/* loom__check_buf over n buffers in order; the first refusal is returned. */
loom_result_t loom__check_bufs(const char *fn, loom_comm_t comm, const loom_buf_t *b, int n);

/* Tests on machines without a GPU answer for the driver (NULL in use; the
 * test-support library sets it, src/testing/hooks.h): 1 and the allocation
 * [*base, *base + *size) for device memory of the current device, 0 for
 * memory the GPU cannot reach. */
typedef int (*loom_ptr_oracle_fn)(const void *p, uintptr_t *base, size_t *size);
extern loom_ptr_oracle_fn loom__ptr_oracle;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_PTR_CHECK_H */
