/*
 * workspace.c - see workspace.h.
 */
#include "workspace.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

void loom__ws_init(loom_ws_alloc_t *a, size_t capacity) {
  memset(a, 0, sizeof *a);
  a->capacity = capacity;
}

void loom__ws_fini(loom_ws_alloc_t *a) {
  free(a->used);
  memset(a, 0, sizeof *a);
}

static size_t loom__align_up(size_t x, size_t align) { return (x + align - 1) & ~(align - 1); }

size_t loom__ws_free_bytes(const loom_ws_alloc_t *a) {
  size_t used = 0;
  for (size_t i = 0; i < a->count; ++i) used += a->used[i].bytes;
  return a->capacity - used;
}

size_t loom__ws_largest_free(const loom_ws_alloc_t *a) {
  size_t best = 0, at = 0;
  for (size_t i = 0; i <= a->count; ++i) {
    size_t end = (i < a->count) ? a->used[i].offset : a->capacity;
    if (end - at > best) best = end - at;
    if (i < a->count) at = a->used[i].offset + a->used[i].bytes;
  }
  return best;
}

loom_result_t loom__ws_reserve(loom_ws_alloc_t *a, size_t bytes, size_t align, const char *who,
                               size_t *offset) {
  if (bytes == 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: workspace request of 0 bytes", who);
  if (align == 0 || (align & (align - 1)))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: workspace alignment %zu is not a power of two",
                      who, align);
  size_t at = 0;
  for (size_t i = 0; i <= a->count; ++i) {
    size_t start = loom__align_up(at, align);
    size_t end = (i < a->count) ? a->used[i].offset : a->capacity;
    if (start <= end && end - start >= bytes) {
      if (a->count == a->cap) {
        size_t ncap = a->cap ? 2 * a->cap : 8;
        loom_ws_range_t *n = (loom_ws_range_t *)realloc(a->used, ncap * sizeof *n);
        if (!n) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation failed", who);
        a->used = n;
        a->cap = ncap;
      }
      memmove(a->used + i + 1, a->used + i, (a->count - i) * sizeof *a->used);
      a->used[i].offset = start;
      a->used[i].bytes = bytes;
      a->count++;
      *offset = start;
      return LOOM_SUCCESS;
    }
    if (i < a->count) at = a->used[i].offset + a->used[i].bytes;
  }
  return loom__fail(LOOM_ERR_OUT_OF_MEMORY,
                    "%s needs %zu bytes of symmetric workspace but only %zu of %zu are free "
                    "(largest free run %zu); raise LOOM_WORKSPACE_BYTES or "
                    "loom_config_t.workspace_bytes",
                    who, bytes, loom__ws_free_bytes(a), a->capacity, loom__ws_largest_free(a));
}

loom_result_t loom__ws_release(loom_ws_alloc_t *a, size_t offset) {
  for (size_t i = 0; i < a->count; ++i) {
    if (a->used[i].offset == offset) {
      memmove(a->used + i, a->used + i + 1, (a->count - i - 1) * sizeof *a->used);
      a->count--;
      return LOOM_SUCCESS;
    }
  }
  return loom__fail(LOOM_ERR_INTERNAL, "workspace release of offset %zu that is not reserved", offset);
}
