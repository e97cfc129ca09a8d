/*
 * fake_mem.c - see fake_mem.h.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/fake_mem.h"
#include "testing/hooks.h"

#define FAKE_MAX 32
static struct { char *p; size_t n; } g_dev[FAKE_MAX];
static int g_ndev;

static int oracle(const void *p, uintptr_t *base, size_t *size) {
  for (int i = 0; i < g_ndev; ++i)
    if ((const char *)p >= g_dev[i].p && (const char *)p < g_dev[i].p + g_dev[i].n) {
      *base = (uintptr_t)g_dev[i].p;
      *size = g_dev[i].n;
      return 1;
    }
  return 0;
}

char *fake_dev_alloc(size_t n) {
  char *p = (char *)aligned_alloc(256, (n + 255) / 256 * 256);
  if (!p || g_ndev == FAKE_MAX) abort();
  memset(p, 0x3c, n);
  g_dev[g_ndev].p = p, g_dev[g_ndev].n = n, ++g_ndev;
  return p;
}

static void dev_free_all(void) {
  for (int i = 0; i < g_ndev; ++i) free(g_dev[i].p);
  g_ndev = 0;
}

/* symmetric memory: fake device memory every peer "reaches" */
static loom_result_t sym_alloc(loom_comm_t comm, size_t bytes, loom_alloc_t *a) {
  a->ptr = fake_dev_alloc(bytes);
  for (int p = 0; p < comm->size; ++p) a->peer_ptrs[p] = a->ptr;
  return LOOM_SUCCESS;
}
static loom_result_t sym_release(loom_comm_t comm, loom_alloc_t *a) {
  (void)comm, (void)a; /* freed with the fake device memory */
  return LOOM_SUCCESS;
}
static const loom_mem_backend_t g_sym_backend = {sym_alloc, sym_release};

loom_comm_t fake_comm_create(int rank, int size) {
  loom_comm_t c = NULL;
  if (loom__comm_create_detached(rank, size, 1 << 20, &c) != LOOM_SUCCESS) abort();
  loom__comm_set_mem_backend(c, &g_sym_backend);
  loom__ptr_check_set_oracle(oracle);
  return c;
}

void fake_comm_destroy(loom_comm_t c) {
  while (c->nallocs > 0 && c->allocs[c->nallocs - 1].ptr != c->ws_ptr)
    CHECK_RESULT(loom_free(c, c->allocs[c->nallocs - 1].ptr), LOOM_SUCCESS);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  loom__ptr_check_set_oracle(NULL);
  dev_free_all();
}

void *fake_sym_alloc(loom_comm_t c, size_t n) {
  void *p = NULL;
  if (loom_malloc(c, n, &p) != LOOM_SUCCESS) abort();
  return p;
}

bufs_t fake_bufs(loom_comm_t c, size_t big) {
  static char host[64];
  bufs_t b;
  memset(&b, 0, sizeof b);
  b.at[X_DEV] = fake_dev_alloc(big);
  b.at[X_DEV2] = fake_dev_alloc(big);
  b.at[X_SYM] = (char *)fake_sym_alloc(c, big);
  b.at[X_SYM2] = (char *)fake_sym_alloc(c, big);
  b.at[X_SYM_TAIL] = b.at[X_SYM2] + big - 1024;
  b.at[X_DEV_TAIL] = b.at[X_DEV2] + big - 1024;
  b.at[X_HOST] = host;
  b.at[X_MISALIGNED] = b.at[X_DEV2] + 8;
  b.at[X_SYM_MISALIGNED] = b.at[X_SYM2] + 8;
  b.at[X_SYM_16] = b.at[X_SYM2] + 16;
  b.at[X_B] = fake_dev_alloc(big);
  b.at[X_SYM_PLUS] = NULL; /* collectives fill it (a slice begin) */
  return b;
}

