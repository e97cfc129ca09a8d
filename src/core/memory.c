/*
 * memory.c - symmetric memory: loom_malloc, loom_free, loom_peer_ptr.
 *
 * loom_malloc = ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)
 * (both collective), then the peer addresses of the window are read once
 * (loom__window_peer_pointers) and kept with the allocation, so that kernels
 * and host code (cudaMemcpyAsync, cuStreamWriteValue32) can address any
 * load/store-reachable peer's copy without asking NCCL again.
 * A one-rank comm has no peer to share with: its memory is cudaMalloc'd and
 * its only "peer address" is its own (win stays NULL).
 */
#include "comm.h"
#include "error.h"
#include "handle.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

loom_alloc_t *loom__find_alloc(loom_comm_t comm, const void *ptr, size_t bytes) {
  const char *p = (const char *)ptr;
  for (size_t i = 0; i < comm->nallocs; ++i) {
    const char *base = (const char *)comm->allocs[i].ptr;
    if (p >= base && p < base + comm->allocs[i].bytes &&
        bytes <= (size_t)(base + comm->allocs[i].bytes - p))
      return &comm->allocs[i];
  }
  return NULL;
}

static loom_result_t loom__check_malloc_args(loom_comm_t comm, size_t bytes, void **ptr) {
  if (!ptr) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_malloc: ptr=NULL");
  *ptr = NULL;
  if (bytes == 0) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_malloc: bytes=0 (must be > 0)");
  if (!comm->mem)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_malloc: comm=%p has no GPU (a test comm)", (void *)comm);
  return LOOM_SUCCESS;
}

/* ---- the real backend: NCCL symmetric windows, or cudaMalloc on one rank -- */

static loom_result_t loom__mem_alloc_gpu(loom_comm_t comm, size_t bytes, loom_alloc_t *a) {
  if (comm->size == 1) {
    cudaError_t e = cudaMalloc(&a->ptr, bytes);
    if (e != cudaSuccess) {
      loom__cuda_fail((int)e, "cudaMalloc", __FILE__, __LINE__);
      return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_malloc: bytes=%zu: %s", bytes, loom_last_error());
    }
    a->peer_ptrs[0] = a->ptr;
    return LOOM_SUCCESS;
  }
  ncclResult_t n = ncclMemAlloc(&a->ptr, bytes);
  if (n != ncclSuccess) {
    loom_result_t r = loom__nccl_fail((int)n, "ncclMemAlloc", __FILE__, __LINE__);
    return loom__fail(n == ncclSystemError || n == ncclUnhandledCudaError ? LOOM_ERR_OUT_OF_MEMORY : r,
                      "loom_malloc: bytes=%zu: %s", bytes, loom_last_error());
  }
  loom_result_t r = LOOM_SUCCESS;
  n = ncclCommWindowRegister(comm->nccl, a->ptr, bytes, &a->win, NCCL_WIN_COLL_SYMMETRIC);
  if (n != ncclSuccess) r = loom__nccl_fail((int)n, "ncclCommWindowRegister", __FILE__, __LINE__);
  if (r == LOOM_SUCCESS) r = loom__window_peer_pointers(comm->nccl, a->win, comm->size, a->peer_ptrs);
  if (r != LOOM_SUCCESS) {
    if (a->win) ncclCommWindowDeregister(comm->nccl, a->win);
    ncclMemFree(a->ptr);
  }
  return r;
}

static loom_result_t loom__mem_release_gpu(loom_comm_t comm, loom_alloc_t *a) {
  if (!a->win) { /* one-rank comm */
    cudaError_t e = cudaFree(a->ptr);
    return e == cudaSuccess ? LOOM_SUCCESS : loom__cuda_fail((int)e, "cudaFree", __FILE__, __LINE__);
  }
  loom_result_t r = LOOM_SUCCESS;
  ncclResult_t n = ncclCommWindowDeregister(comm->nccl, a->win);
  if (n != ncclSuccess) r = loom__nccl_fail((int)n, "ncclCommWindowDeregister", __FILE__, __LINE__);
  n = ncclMemFree(a->ptr);
  if (n != ncclSuccess && r == LOOM_SUCCESS) r = loom__nccl_fail((int)n, "ncclMemFree", __FILE__, __LINE__);
  return r;
}

const loom_mem_backend_t loom__mem_backend_gpu = {loom__mem_alloc_gpu, loom__mem_release_gpu};

/* ---- the allocation table ------------------------------------------------- */

loom_result_t loom__comm_malloc(loom_comm_t comm, size_t bytes, void **ptr) {
  LOOM_TRY(loom__check_malloc_args(comm, bytes, ptr));
  if (comm->nallocs == comm->capallocs) {
    size_t ncap = comm->capallocs ? 2 * comm->capallocs : 8;
    loom_alloc_t *n = (loom_alloc_t *)realloc(comm->allocs, ncap * sizeof *n);
    if (!n) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation for the allocation table failed");
    comm->allocs = n;
    comm->capallocs = ncap;
  }
  loom_alloc_t a;
  memset(&a, 0, sizeof a);
  a.bytes = bytes;
  a.peer_ptrs = (void **)calloc((size_t)comm->size, sizeof(void *));
  if (!a.peer_ptrs) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of peer pointers failed");
  loom_result_t r = comm->mem->alloc(comm, bytes, &a);
  if (r != LOOM_SUCCESS) {
    free(a.peer_ptrs);
    return r;
  }
  comm->allocs[comm->nallocs++] = a;
  LOOM_TRACE("loom_malloc %zu B at %p (rank %d)", bytes, a.ptr, comm->rank);
  *ptr = a.ptr;
  return LOOM_SUCCESS;
}

loom_result_t loom_malloc(loom_comm_t comm, size_t bytes, void **ptr) {
  LOOM_TRY(loom__comm_check(comm, "loom_malloc"));
  return loom__comm_malloc(comm, bytes, ptr);
}

/* The entry leaves the table whether or not the backend's release succeeds
 * (a failed release cannot be retried meaningfully: the error says what
 * leaked), so callers never see it twice. */
loom_result_t loom__comm_free(loom_comm_t comm, void *ptr) {
  size_t i = 0;
  while (i < comm->nallocs && comm->allocs[i].ptr != ptr) ++i;
  if (i == comm->nallocs)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_free: ptr=%p was not returned by loom_malloc on this comm",
                      ptr);
  loom_alloc_t a = comm->allocs[i];
  comm->allocs[i] = comm->allocs[--comm->nallocs];
  loom_result_t r = comm->mem->release(comm, &a);
  free(a.peer_ptrs);
  if (r != LOOM_SUCCESS) loom__fail_append(" (loom_free: %zu bytes at %p are lost)", a.bytes, a.ptr);
  return r;
}

loom_result_t loom_free(loom_comm_t comm, void *ptr) {
  /* A broken comm still frees memory, so the check is the handle only. */
  LOOM_TRY(loom__check_comm(comm, "loom_free"));
  if (!ptr) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_free: ptr=NULL");
  if (ptr == comm->ws_ptr)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_free: ptr=%p is the comm's own workspace", ptr);
  return loom__comm_free(comm, ptr);
}

loom_result_t loom_peer_ptr(loom_comm_t comm, const void *ptr, int peer, void **peer_ptr) {
  LOOM_TRY(loom__check_comm(comm, "loom_peer_ptr"));
  if (!peer_ptr) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_peer_ptr: peer_ptr=NULL");
  *peer_ptr = NULL;
  if (!ptr) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_peer_ptr: ptr=NULL");
  if (peer < 0 || peer >= comm->size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_peer_ptr: peer=%d is not a rank of a comm of size %d",
                      peer, comm->size);
  loom_alloc_t *a = loom__find_alloc(comm, ptr, 1);
  if (!a)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_peer_ptr: ptr=%p is not inside memory from loom_malloc on this comm", ptr);
  if (!a->peer_ptrs[peer])
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom_peer_ptr: rank %d is not load/store reachable from rank %d (another node)",
                      peer, comm->rank);
  *peer_ptr = (char *)a->peer_ptrs[peer] + ((const char *)ptr - (const char *)a->ptr);
  return LOOM_SUCCESS;
}

loom_result_t loom__peer_addresses(const char *fn, const char *what, loom_comm_t comm, const void *p, size_t bytes,
                                   const char *why, char **peer) {
  loom_alloc_t *a = loom__find_alloc(comm, p, bytes);
  if (!a)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p (%zu bytes) is not inside memory from loom_malloc on this comm: %s",
                      fn, what, p, bytes, why);
  const size_t off = (size_t)((const char *)p - (const char *)a->ptr);
  for (int q = 0; q < comm->size; ++q) {
    if (!a->peer_ptrs[q])
      return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: rank %d is not load/store reachable from rank %d", fn, q, comm->rank);
    peer[q] = (char *)a->peer_ptrs[q] + off;
  }
  return LOOM_SUCCESS;
}
