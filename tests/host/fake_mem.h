/*
 * fake_mem.h - "device memory" for host tests of argument checks on a
 * machine without a GPU: host buffers that the pointer checks' oracle
 * (testing/hooks.h) calls device memory, a detached comm whose loom_malloc
 * returns such buffers (every peer "reaches" them), and a set of named
 * buffers the misuse tables refer to (plain, symmetric, short, misaligned,
 * host memory).
 */
#ifndef LOOM_TESTS_HOST_FAKE_MEM_H
#define LOOM_TESTS_HOST_FAKE_MEM_H

#include <stddef.h>
#include "core/comm.h"

/* n bytes of fake device memory (filled with 0x3c, 256-byte aligned). */
char *fake_dev_alloc(size_t n);

/* A detached comm (rank of size) with symmetric memory from fake device
 * memory and the oracle installed; destroy frees every fake buffer. */
loom_comm_t fake_comm_create(int rank, int size);
void fake_comm_destroy(loom_comm_t c);

/* n bytes of loom_malloc memory of c. */
void *fake_sym_alloc(loom_comm_t c, size_t n);

/* Buffers a row names (TP and collectives). */
enum { X_NULL, X_DEV, X_DEV2, X_SYM, X_SYM2, X_SYM_TAIL, X_DEV_TAIL, X_HOST, X_MISALIGNED, X_SYM_MISALIGNED, X_SYM_16,
       X_B, X_SYM_PLUS, X_COUNT };
typedef struct bufs { char *at[X_COUNT]; } bufs_t;

/* The named buffers, each of `big` bytes (X_SYM_PLUS left NULL). */
bufs_t fake_bufs(loom_comm_t c, size_t big);

#endif
