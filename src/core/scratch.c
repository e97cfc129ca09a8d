/*
 * scratch.c - see scratch.h.
 */
#include "scratch.h"
#include "error.h"
#include "log.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct loom__scratch_buf {
  int kind, device;
  cudaStream_t stream;
  void *ptr;
  size_t zero_bytes, rest_bytes;
  int current; /* 0: superseded by a larger buffer, kept until release */
  struct loom__scratch_buf *next;
} loom__scratch_buf_t;

static pthread_mutex_t loom__scratch_mu = PTHREAD_MUTEX_INITIALIZER;
static loom__scratch_buf_t *loom__scratch_bufs;

static size_t loom__round256(size_t b) { return (b + 255) / 256 * 256; }

static loom_result_t loom__scratch_get_locked(int kind, int dev, cudaStream_t stream, size_t zero_bytes,
                                              size_t rest_bytes, loom_scratch_t *s) {
  loom__scratch_buf_t *cur = NULL;
  for (loom__scratch_buf_t *w = loom__scratch_bufs; w; w = w->next)
    if (w->current && w->kind == kind && w->device == dev && w->stream == stream) cur = w;
  if (cur && cur->zero_bytes >= zero_bytes && cur->rest_bytes >= rest_bytes) {
    s->ptr = cur->ptr, s->zero_bytes = cur->zero_bytes, s->rest = (char *)cur->ptr + cur->zero_bytes;
    return LOOM_SUCCESS;
  }
  loom__scratch_buf_t *w = (loom__scratch_buf_t *)calloc(1, sizeof *w);
  if (!w) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation failed (scratch bookkeeping)");
  /* grow geometrically so that a sequence of shapes allocates few buffers */
  w->zero_bytes = loom__round256(zero_bytes);
  w->rest_bytes = loom__round256(rest_bytes);
  if (cur) {
    if (w->zero_bytes < cur->zero_bytes) w->zero_bytes = cur->zero_bytes;
    if (w->zero_bytes > cur->zero_bytes && w->zero_bytes < 2 * cur->zero_bytes) w->zero_bytes = 2 * cur->zero_bytes;
    if (w->rest_bytes < cur->rest_bytes + cur->rest_bytes / 2)
      w->rest_bytes = loom__round256(cur->rest_bytes + cur->rest_bytes / 2);
  }
  w->kind = kind, w->device = dev, w->stream = stream;
  const size_t total = w->zero_bytes + w->rest_bytes;
  cudaError_t e = cudaMalloc(&w->ptr, total > 0 ? total : 256);
  if (e == cudaSuccess && w->zero_bytes) e = cudaMemsetAsync(w->ptr, 0, w->zero_bytes, stream);
  if (e != cudaSuccess) {
    if (w->ptr) cudaFree(w->ptr);
    free(w);
    loom_result_t r = loom__cuda_fail((int)e, "allocating scratch memory", __FILE__, __LINE__);
    loom__fail_append(" (%zu bytes)", total);
    return r;
  }
  if (cur) cur->current = 0;
  w->current = 1;
  w->next = loom__scratch_bufs;
  loom__scratch_bufs = w;
  s->ptr = w->ptr, s->zero_bytes = w->zero_bytes, s->rest = (char *)w->ptr + w->zero_bytes;
  return LOOM_SUCCESS;
}

loom_result_t loom__scratch_get(loom_scratch_kind_t kind, cudaStream_t stream, size_t zero_bytes, size_t rest_bytes,
                                loom_scratch_t *s) {
  s->ptr = s->rest = NULL, s->zero_bytes = 0, s->graph_owned = 0;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  LOOM_CUDA(cudaStreamIsCapturing(stream, &cs));
  if (cs == cudaStreamCaptureStatusActive) {
    const size_t zb = loom__round256(zero_bytes), total = zb + loom__round256(rest_bytes);
    void *p = NULL;
    LOOM_CUDA(cudaMallocAsync(&p, total > 0 ? total : 256, stream));
    if (zb) {
      cudaError_t e = cudaMemsetAsync(p, 0, zb, stream);
      if (e != cudaSuccess) {
        cudaFreeAsync(p, stream);
        return loom__cuda_fail((int)e, "cudaMemsetAsync (scratch in a capture)", __FILE__, __LINE__);
      }
    }
    s->ptr = p, s->zero_bytes = zb, s->rest = (char *)p + zb, s->graph_owned = 1;
    return LOOM_SUCCESS;
  }
  if (cs != cudaStreamCaptureStatusNone)
    return loom__fail(LOOM_ERR_CUDA, "scratch memory: stream %p is in an invalidated capture", (void *)stream);
  int dev = -1;
  LOOM_CUDA(cudaGetDevice(&dev));
  pthread_mutex_lock(&loom__scratch_mu);
  loom_result_t r = loom__scratch_get_locked((int)kind, dev, stream, zero_bytes, rest_bytes, s);
  pthread_mutex_unlock(&loom__scratch_mu);
  return r;
}

loom_result_t loom__scratch_done(cudaStream_t stream, const loom_scratch_t *s) {
  if (s->graph_owned && s->ptr) LOOM_CUDA(cudaFreeAsync(s->ptr, stream));
  return LOOM_SUCCESS;
}

void loom__scratch_release_all(void) {
  pthread_mutex_lock(&loom__scratch_mu);
  int cur = -1;
  const int have_cur = cudaGetDevice(&cur) == cudaSuccess;
  while (loom__scratch_bufs) {
    loom__scratch_buf_t *w = loom__scratch_bufs;
    loom__scratch_bufs = w->next;
    if (w->ptr && cudaSetDevice(w->device) == cudaSuccess) {
      cudaError_t e = cudaFree(w->ptr); /* synchronizes: work still using it finishes first */
      if (e != cudaSuccess) LOOM_WARN("releasing scratch memory: cudaFree: %s", cudaGetErrorString(e));
    }
    free(w);
  }
  if (have_cur) cudaSetDevice(cur);
  pthread_mutex_unlock(&loom__scratch_mu);
}
