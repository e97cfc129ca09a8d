/*
 * workspace.h - carving a comm's symmetric workspace into plan slices.
 *
 * Pure bookkeeping of byte ranges [0, capacity): first fit, aligned, released
 * in any order. Every rank creates and destroys plans in the same order, so
 * every rank computes the same offsets: a slice has the same offset in every
 * rank's workspace, which is what makes it symmetric.
 */
#ifndef LOOM_CORE_WORKSPACE_H
#define LOOM_CORE_WORKSPACE_H

#include <stddef.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_ws_range { size_t offset, bytes; } loom_ws_range_t;

typedef struct loom_ws_alloc {
  size_t capacity;
  loom_ws_range_t *used; /* sorted by offset */
  size_t count, cap;
} loom_ws_alloc_t;

void loom__ws_init(loom_ws_alloc_t *a, size_t capacity);
void loom__ws_fini(loom_ws_alloc_t *a);

/* Reserves `bytes` (> 0) aligned to `align` (a power of two). On failure:
 * LOOM_ERR_OUT_OF_MEMORY naming `who`, the bytes needed and what is free. */
loom_result_t loom__ws_reserve(loom_ws_alloc_t *a, size_t bytes, size_t align, const char *who,
                               size_t *offset);

/* Releases the range that starts at `offset`. */
loom_result_t loom__ws_release(loom_ws_alloc_t *a, size_t offset);

size_t loom__ws_free_bytes(const loom_ws_alloc_t *a);
size_t loom__ws_largest_free(const loom_ws_alloc_t *a);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_WORKSPACE_H */
