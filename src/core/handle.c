/*
 * handle.c - see handle.h.
 */
#include "handle.h"
#include "error.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct { const void *h; loom_handle_kind_t kind; } loom_handle_entry_t;

static pthread_mutex_t loom__handles_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_handle_entry_t *loom__handles;
static size_t loom__nhandles, loom__caphandles;

loom_result_t loom__handle_add(const void *h, loom_handle_kind_t kind) {
  loom_result_t r = LOOM_SUCCESS;
  pthread_mutex_lock(&loom__handles_lock);
  if (loom__nhandles == loom__caphandles) {
    size_t ncap = loom__caphandles ? 2 * loom__caphandles : 16;
    loom_handle_entry_t *n = (loom_handle_entry_t *)realloc(loom__handles, ncap * sizeof *n);
    if (!n) r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation for the handle registry failed");
    else loom__handles = n, loom__caphandles = ncap;
  }
  if (r == LOOM_SUCCESS) {
    loom__handles[loom__nhandles].h = h;
    loom__handles[loom__nhandles].kind = kind;
    loom__nhandles++;
  }
  pthread_mutex_unlock(&loom__handles_lock);
  return r;
}

int loom__handle_alive(const void *h, loom_handle_kind_t kind) {
  int found = 0;
  pthread_mutex_lock(&loom__handles_lock);
  for (size_t i = 0; i < loom__nhandles && !found; ++i)
    found = loom__handles[i].h == h && loom__handles[i].kind == kind;
  pthread_mutex_unlock(&loom__handles_lock);
  return found;
}

int loom__handle_remove(const void *h, loom_handle_kind_t kind) {
  int found = 0;
  pthread_mutex_lock(&loom__handles_lock);
  for (size_t i = 0; i < loom__nhandles; ++i) {
    if (loom__handles[i].h == h && loom__handles[i].kind == kind) {
      loom__handles[i] = loom__handles[--loom__nhandles];
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&loom__handles_lock);
  return found;
}

loom_result_t loom__check_comm(loom_comm_t comm, const char *fn) {
  if (!comm) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: comm=NULL", fn);
  if (!loom__handle_alive(comm, LOOM_HANDLE_COMM))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: comm=%p is not a live loom comm (destroyed already, or never created)",
                      fn, (const void *)comm);
  return LOOM_SUCCESS;
}

loom_result_t loom__check_plan(loom_plan_t plan, const char *fn) {
  if (!plan) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: plan=NULL", fn);
  if (!loom__handle_alive(plan, LOOM_HANDLE_PLAN))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: plan=%p is not a live loom plan (destroyed already, or never created)",
                      fn, (const void *)plan);
  return LOOM_SUCCESS;
}
