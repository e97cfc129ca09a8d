/*
 * hooks.h - the test-support library's ways into loom's internals
 * (libloom_testsupport.a; never part of libloom.so).
 *
 *   loom__comm_create_detached   a comm with every piece of host bookkeeping
 *                                (rank, size, workspace accounting, handle)
 *                                and no GPU, NCCL or memory behind it, so that
 *                                argument checks and accounting run on a
 *                                machine without a GPU
 *   loom__comm_set_mem_backend   where a comm's symmetric memory comes from
 *                                (a detached comm has none until a test gives
 *                                it one: host memory, failures injected)
 *   loom__ptr_check_set_oracle   what pointer checks call device memory on a
 *                                machine without a GPU (NULL: the driver)
 *   loom__world_create_detached  a world of ranks (core/world.h) with no GPU
 *                                behind it: its comms (loom_comm_create_in_world)
 *                                are detached, their symmetric memory host
 *                                memory, so that the in-process exchange, the
 *                                plan agreement over it and its refusals run on
 *                                a machine without a GPU
 *   loom__base_gemm_force_bias_fallback
 *                                the cuBLASLt baseline adds the bias through C
 *                                instead of its bias epilogue
 *   loom__test_plan              a plan of a bare op ("test": a slice of
 *                                signals and staging, no state), made
 *                                through the one door (core/op.h)
 */
#ifndef LOOM_TESTING_HOOKS_H
#define LOOM_TESTING_HOOKS_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"
#include "core/comm.h"
#include "core/ptr_check.h"

#ifdef __cplusplus
extern "C" {
#endif

loom_result_t loom__comm_create_detached(int rank, int size, size_t workspace_bytes, loom_comm_t *out);

/* backend NULL: the comm has no memory (loom_malloc: LOOM_ERR_UNSUPPORTED). */
void loom__comm_set_mem_backend(loom_comm_t comm, const loom_mem_backend_t *backend);

/* A test world of `size` ranks sharing `sms` SMs (loom_world_destroy frees it). */
loom_result_t loom__world_create_detached(int size, int sms, loom_world_t *out);

void loom__base_gemm_force_bias_fallback(int on);

/* A plan of the bare op "test": `nsignals` signal words and `staging`
 * bytes in its slice, nothing else; collective, made through the door
 * (its agreement, its slice, its done event). */
loom_result_t loom__test_plan(loom_comm_t comm, uint32_t nsignals, size_t staging, loom_plan_t *out);

/* oracle(p, &base, &size): 1 and the allocation holding p if p is device
 * memory, 0 if not (core/ptr_check.h); NULL restores the driver. */
void loom__ptr_check_set_oracle(loom_ptr_oracle_fn oracle);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_TESTING_HOOKS_H */
