/*
 * comm.c - loom_comm_create / loom_comm_create_in_world / destroy / info,
 * and the NCCL collective backend (agreement, fence, tuners' maximum). The
 * comm's asynchronous error is comm_error.c's.
 *
 * Creation order (every step collective where NCCL's is): check the NCCL
 * version; read rank, size and the GPU's properties at run time; create the
 * NCCL device communicator (the capability check for symmetric memory);
 * allocate the host-mapped error record and the device abort flag; allocate
 * and zero the symmetric workspace and reserve the comm's barrier slots in
 * it. Any failure undoes the steps before it.
 * In a world (world.h) the same steps run without NCCL: the rank's local
 * steps first, then one exchange in which every rank learns whether all
 * succeeded (so a rank that failed never leaves the others waiting in the
 * workspace's allocation), then the workspace and the fence through the
 * world's backends. The comm's SM count is the rank's share of the device.
 */
#include "comm.h"
#include "error.h"
#include "handle.h"
#include "log.h"
#include "param.h"
#include "world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOOM_WS_ALIGN 256

loom_result_t loom__check_nccl_version(int v) {
  if (v < LOOM_MIN_NCCL_VERSION)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "NCCL %d.%d.%d is too old: loom needs NCCL >= 2.28.0 (symmetric windows and "
                      "the device API)",
                      v / 10000, (v / 100) % 100, v % 100);
  return LOOM_SUCCESS;
}

loom_result_t loom_get_version(int *version) {
  if (!version) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_get_version: version=NULL");
  *version = LOOM_VERSION_CODE;
  return LOOM_SUCCESS;
}

size_t loom_dtype_size(loom_dtype_t t) {
  switch (t) {
    case LOOM_FP32: return 4;
    case LOOM_FP16: return 2;
    case LOOM_BF16: return 2;
  }
  return 0;
}

static loom_result_t loom__resolve_config(const char *fn, const loom_config_t *cfg, size_t *ws_bytes, int *timeout_ms) {
  *ws_bytes = (size_t)loom__param_WORKSPACE_BYTES();
  *timeout_ms = (int)loom__param_TIMEOUT_MS();
  if (cfg) {
    if (cfg->struct_size != sizeof(loom_config_t))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "%s: cfg->struct_size=%zu, expected %zu (initialise with "
                        "LOOM_CONFIG_INIT; header and library differ?)",
                        fn, cfg->struct_size, sizeof(loom_config_t));
    if (cfg->timeout_ms < 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: cfg->timeout_ms=%d must be >= 0", fn, cfg->timeout_ms);
    if (cfg->workspace_bytes) *ws_bytes = cfg->workspace_bytes;
    if (cfg->timeout_ms) *timeout_ms = cfg->timeout_ms;
  }
  if (*timeout_ms <= 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "LOOM_TIMEOUT_MS=%d must be > 0", *timeout_ms);
  if (*ws_bytes < 4096)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "workspace_bytes=%zu must be >= 4096", *ws_bytes);
  return LOOM_SUCCESS;
}

/* Reserves the comm's own signals at the front of the workspace. */
loom_result_t loom__comm_reserve_own(loom_comm_t c) {
  loom__ws_init(&c->ws_alloc, c->ws_bytes);
  return loom__ws_reserve(&c->ws_alloc, sizeof(loom_dev_epoch_t) + (size_t)c->size * sizeof(uint32_t), LOOM_WS_ALIGN,
                          "the comm's barrier slots", &c->barrier_offset);
}

/* Undoes whatever part of creation succeeded (fields are zero otherwise).
 * Frees on the device synchronise as cudaFree does; nothing here waits for
 * the whole device otherwise. */
static void loom__comm_teardown(loom_comm_t c) {
  if (c->mem) {
    if (c->ws_ptr && loom__comm_free(c, c->ws_ptr) != LOOM_SUCCESS)
      LOOM_WARN("freeing the workspace: %s", loom_last_error());
    while (c->nallocs > 0) { /* memory the user did not free; loom__comm_free drops the entry either way */
      LOOM_WARN("loom_comm_destroy: freeing %zu bytes at %p that were never loom_free'd",
                c->allocs[c->nallocs - 1].bytes, c->allocs[c->nallocs - 1].ptr);
      if (loom__comm_free(c, c->allocs[c->nallocs - 1].ptr) != LOOM_SUCCESS) LOOM_WARN("%s", loom_last_error());
    }
  }
  if (c->world) loom__world_leave(c->world, c->rank);
  if (!c->detached) {
    if (c->ws_peer_dev) cudaFree(c->ws_peer_dev);
    if (c->abort_flag) cudaFree(c->abort_flag);
    if (c->fence_words) cudaFree(c->fence_words);
    if (c->err_host) cudaFreeHost(c->err_host);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->devcomm && loom__devcomm_destroy(c->nccl, c->devcomm) != LOOM_SUCCESS)
      LOOM_WARN("%s", loom_last_error());
  }
  free(c->allocs);
  loom__ws_fini(&c->ws_alloc);
  free(c);
}

/* Rank, size and device of the NCCL comm; the current device must be its. */
static loom_result_t comm_identify(loom_comm_t c, ncclComm_t nccl) {
  int nccl_dev = -1;
  ncclResult_t n = ncclCommCount(nccl, &c->size);
  if (n == ncclSuccess) n = ncclCommUserRank(nccl, &c->rank);
  if (n == ncclSuccess) n = ncclCommCuDevice(nccl, &nccl_dev);
  if (n != ncclSuccess) return loom__nccl_fail((int)n, "reading rank, size and device of the NCCL comm", __FILE__, __LINE__);
  cudaError_t e = cudaGetDevice(&c->device);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "cudaGetDevice", __FILE__, __LINE__);
  if (c->device != nccl_dev)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_comm_create: the current CUDA device is %d but the NCCL comm is on "
                      "device %d; call cudaSetDevice(%d) first",
                      c->device, nccl_dev, nccl_dev);
  return LOOM_SUCCESS;
}

/* The GPU's properties loom reads (compute capability >= 8.0). */
static loom_result_t comm_device_props(loom_comm_t c) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, c->device);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "cudaGetDeviceProperties", __FILE__, __LINE__);
  c->sm_count = prop.multiProcessorCount;
  c->cc_major = prop.major;
  c->cc_minor = prop.minor;
  c->l2_bytes = (size_t)prop.l2CacheSize;
  if (prop.major < 8)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "GPU %d (%s) has compute capability %d.%d; loom needs >= 8.0",
                      c->device, prop.name, prop.major, prop.minor);
  return LOOM_SUCCESS;
}

/* The host-mapped error record, the abort flag, the comm's stream and its
 * fence words. */
static loom_result_t comm_error_record(loom_comm_t c) {
  cudaError_t e = cudaHostAlloc((void **)&c->err_host, sizeof(loom_error_record_t), cudaHostAllocMapped);
  if (e == cudaSuccess) {
    memset(c->err_host, 0, sizeof *c->err_host);
    e = cudaHostGetDevicePointer((void **)&c->err_dev, c->err_host, 0);
  }
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->abort_flag, sizeof(uint32_t));
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->fence_words, 3 * sizeof(uint64_t));
  if (e == cudaSuccess) e = cudaMemsetAsync(c->abort_flag, 0, sizeof(uint32_t), c->stream);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "allocating the error record", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

/* The symmetric workspace (collective): allocated, zeroed, every peer's
 * address copied to the device; whether every peer is reachable. */
static loom_result_t comm_workspace(loom_comm_t c) {
  void *ws = NULL;
  LOOM_TRY(loom__comm_malloc(c, c->ws_bytes, &ws));
  c->ws_ptr = ws;
  /* (the allocation table may move later: copy what is needed now) */
  void *const *peers = loom__find_alloc(c, ws, 1)->peer_ptrs;
  c->ws_all_reachable = 1;
  for (int p = 0; p < c->size; ++p) c->ws_all_reachable &= peers[p] != NULL;
  if (c->detached) { /* a test world's comm: host memory, no kernels */
    memset(ws, 0, c->ws_bytes);
    return LOOM_SUCCESS;
  }
  cudaError_t e = cudaMemsetAsync(ws, 0, c->ws_bytes, c->stream);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c->ws_peer_dev, (size_t)c->size * sizeof(char *));
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(c->ws_peer_dev, peers, (size_t)c->size * sizeof(char *), cudaMemcpyHostToDevice, c->stream);
  /* (peers is host memory that outlives this call only until the table
   * grows: wait here, on the comm's own stream only) */
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "initialising the workspace", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

/* Every step after the comm's fields are set, in order; the first failure
 * skips the rest (the collective ones included, on every rank that fails
 * at the same step). */
static loom_result_t comm_init(loom_comm_t c, ncclComm_t nccl) {
  LOOM_TRY(comm_identify(c, nccl));
  LOOM_TRY(comm_device_props(c));
  LOOM_TRY(loom__lsa_team(nccl, &c->lsa_rank, &c->lsa_size));
  /* A one-rank comm has no peers: it needs neither NCCL's device comm nor
   * windows (NCCL 2.28 refuses ncclDevCommCreate on one rank), and its
   * symmetric memory is plain device memory (memory.c). */
  if (c->size > 1) LOOM_TRY(loom__devcomm_create(nccl, &c->devcomm));
  LOOM_TRY(comm_error_record(c));
  LOOM_TRY(loom__comm_reserve_own(c));
  LOOM_TRY(comm_workspace(c));
  /* Every rank's workspace is zeroed before any rank's kernel signals into
   * it: an NCCL all-reduce after the (synchronized) memset is the fence. */
  LOOM_TRY(loom__comm_fence(c));
  return loom__handle_add(c, LOOM_HANDLE_COMM);
}

/* A comm's fields before its creation steps (config resolved by the caller). */
static loom_comm_t comm_new(size_t ws_bytes, int timeout_ms) {
  loom_comm_t c = (loom_comm_t)calloc(1, sizeof *c);
  if (!c) {
    loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of a comm failed");
    return NULL;
  }
  c->timeout_ms = timeout_ms;
  c->ws_bytes = (ws_bytes + LOOM_WS_ALIGN - 1) / LOOM_WS_ALIGN * LOOM_WS_ALIGN;
  return c;
}

/* Undoes a creation that failed with r, keeping its message. */
static loom_result_t comm_abandon(loom_comm_t c, loom_result_t r) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", loom_last_error());
  loom__comm_teardown(c);
  return loom__fail(r, "%s", msg);
}

static void comm_log_created(const loom_comm_t c) {
  LOOM_INFO("comm rank %d/%d (lsa %d/%d) device %d: %d SMs%s, cc %d.%d, L2 %zu B, workspace %zu B, timeout %d ms, "
            "NCCL %d",
            c->rank, c->size, c->lsa_rank, c->lsa_size, c->device, c->sm_count, c->world ? " (its share, a world)" : "",
            c->cc_major, c->cc_minor, c->l2_bytes, c->ws_bytes, c->timeout_ms, c->nccl_version);
}

/* A world rank's steps on its own: the device (the world's, current), its
 * properties and SM share, the error record, the barrier slots. */
static loom_result_t comm_world_local(loom_comm_t c) {
  if (!c->detached) {
    LOOM_CUDA(cudaGetDevice(&c->device));
    if (c->device != loom__world_device(c->world))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "loom_comm_create_in_world: the current CUDA device is %d but the world is on device %d; call "
                        "cudaSetDevice(%d) first in this rank's thread",
                        c->device, loom__world_device(c->world), loom__world_device(c->world));
    LOOM_TRY(comm_device_props(c));
    LOOM_TRY(comm_error_record(c));
  }
  c->sm_count = loom__world_sm_budget(c->world);
  return loom__comm_reserve_own(c);
}

/* The world's creation steps (see the top of the file). */
static loom_result_t comm_init_world(loom_comm_t c) {
  LOOM_TRY(loom__world_join(c, comm_world_local(c)));
  LOOM_TRY(comm_workspace(c));
  LOOM_TRY(loom__comm_fence(c));
  return loom__handle_add(c, LOOM_HANDLE_COMM);
}

loom_result_t loom_comm_create_in_world(loom_world_t world, int rank, const loom_config_t *cfg, loom_comm_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_comm_create_in_world: out=NULL");
  *out = NULL;
  LOOM_TRY(loom__world_check(world, "loom_comm_create_in_world"));
  size_t ws_bytes;
  int timeout_ms;
  LOOM_TRY(loom__resolve_config("loom_comm_create_in_world", cfg, &ws_bytes, &timeout_ms));
  loom_comm_t c = comm_new(ws_bytes, timeout_ms);
  if (!c) return LOOM_ERR_OUT_OF_MEMORY;
  const loom_result_t re = loom__world_enter(world, rank, c);
  if (re != LOOM_SUCCESS) {
    free(c);
    return re;
  }
  int version = 0;
  c->nccl_version = ncclGetVersion(&version) == ncclSuccess ? version : 0; /* the NCCL loaded, for info only */
  const loom_result_t r = comm_init_world(c);
  if (r != LOOM_SUCCESS) return comm_abandon(c, r);
  comm_log_created(c);
  *out = c;
  return LOOM_SUCCESS;
}

loom_result_t loom_comm_create(ncclComm_t nccl, const loom_config_t *cfg, loom_comm_t *out) {
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_comm_create: out=NULL");
  *out = NULL;
  if (!nccl) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_comm_create: nccl=NULL");
  size_t ws_bytes;
  int timeout_ms;
  LOOM_TRY(loom__resolve_config("loom_comm_create", cfg, &ws_bytes, &timeout_ms));
  int version = 0;
  LOOM_NCCL(ncclGetVersion(&version));
  LOOM_TRY(loom__check_nccl_version(version));
  loom_comm_t c = comm_new(ws_bytes, timeout_ms);
  if (!c) return LOOM_ERR_OUT_OF_MEMORY;
  c->nccl = nccl;
  c->mem = &loom__mem_backend_gpu;
  c->coll = &loom__coll_backend_nccl;
  c->nccl_version = version;
  const loom_result_t r = comm_init(c, nccl);
  if (r != LOOM_SUCCESS) return comm_abandon(c, r);
  comm_log_created(c);
  *out = c;
  return LOOM_SUCCESS;
}

loom_result_t loom_comm_destroy(loom_comm_t comm) {
  LOOM_TRY(loom__check_comm(comm, "loom_comm_destroy"));
  if (comm->nplans > 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_comm_destroy: comm=%p still has %d plan(s); destroy them first",
                      (void *)comm, comm->nplans);
  loom__handle_remove(comm, LOOM_HANDLE_COMM);
  loom__comm_teardown(comm);
  return LOOM_SUCCESS;
}

loom_result_t loom_comm_get_info(loom_comm_t comm, loom_comm_info_t *info) {
  LOOM_TRY(loom__check_comm(comm, "loom_comm_get_info"));
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_comm_get_info: info=NULL");
  if (info->struct_size != sizeof *info)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_comm_get_info: info->struct_size=%zu, expected %zu (initialise with LOOM_COMM_INFO_INIT)",
                      info->struct_size, sizeof *info);
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  info->rank = comm->rank;
  info->size = comm->size;
  info->lsa_rank = comm->lsa_rank;
  info->lsa_size = comm->lsa_size;
  info->device = comm->device;
  info->sm_count = comm->sm_count;
  info->cc_major = comm->cc_major;
  info->cc_minor = comm->cc_minor;
  info->l2_bytes = comm->l2_bytes;
  info->workspace_bytes = comm->ws_bytes;
  info->workspace_free = loom__ws_free_bytes(&comm->ws_alloc);
  info->timeout_ms = comm->timeout_ms;
  info->nccl_version = comm->nccl_version;
  return LOOM_SUCCESS;
}

/* ---- the NCCL collective backend ------------------------------------------ */

static loom_result_t nccl_fence(loom_comm_t c) {
  ncclResult_t n = ncclAllReduce(c->fence_words, c->fence_words, 1, ncclUint64, ncclMax, c->nccl, c->stream);
  if (n != ncclSuccess) return loom__nccl_fail((int)n, "ncclAllReduce (fence)", __FILE__, __LINE__);
  LOOM_CUDA(cudaStreamSynchronize(c->stream));
  return LOOM_SUCCESS;
}

/* words[n] (n <= 3: the comm's fence words) all-reduced with max on the
 * comm's stream, which it synchronizes. */
static loom_result_t nccl_max_words(loom_comm_t c, uint64_t *words, int n, const char *what_step) {
  char what[200];
  snprintf(what, sizeof what, "%s (ncclAllReduce)", what_step);
  const size_t bytes = (size_t)n * sizeof *words;
  cudaError_t e = cudaMemcpyAsync(c->fence_words, words, bytes, cudaMemcpyHostToDevice, c->stream);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, what, __FILE__, __LINE__);
  const ncclResult_t r =
      ncclAllReduce(c->fence_words, c->fence_words, (size_t)n, ncclUint64, ncclMax, c->nccl, c->stream);
  if (r != ncclSuccess) return loom__nccl_fail((int)r, what, __FILE__, __LINE__);
  e = cudaMemcpyAsync(words, c->fence_words, bytes, cudaMemcpyDeviceToHost, c->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, what, __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

static loom_result_t nccl_max_ms(loom_comm_t comm, float ms, float *dev_word, cudaStream_t stream, float *out) {
  cudaError_t ce = cudaMemcpyAsync(dev_word, &ms, sizeof ms, cudaMemcpyHostToDevice, stream);
  if (ce != cudaSuccess) return loom__cuda_fail((int)ce, "cudaMemcpyAsync (tuning)", __FILE__, __LINE__);
  const ncclResult_t nr = ncclAllReduce(dev_word, dev_word, 1, ncclFloat32, ncclMax, comm->nccl, stream);
  if (nr != ncclSuccess) return loom__nccl_fail((int)nr, "ncclAllReduce (tuning)", __FILE__, __LINE__);
  if ((ce = cudaMemcpyAsync(out, dev_word, sizeof *out, cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
    return loom__cuda_fail((int)ce, "cudaMemcpyAsync (tuning)", __FILE__, __LINE__);
  if ((ce = cudaStreamSynchronize(stream)) != cudaSuccess)
    return loom__cuda_fail((int)ce, "cudaStreamSynchronize (tuning)", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

const loom_coll_backend_t loom__coll_backend_nccl = {nccl_max_words, nccl_fence, nccl_max_ms};

loom_result_t loom__comm_fence(loom_comm_t c) { return c->coll ? c->coll->fence(c) : LOOM_SUCCESS; }

uint64_t loom__fnv64(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void loom__agree_words(uint64_t hash, int failed, uint64_t w[3]) {
  w[0] = hash, w[1] = ~hash, w[2] = (uint64_t)(failed != 0);
}

int loom__agree_verdict(uint64_t hash, int failed, const uint64_t m[3]) {
  if (failed) return LOOM_AGREE_SELF_FAILED;
  if (m[2]) return LOOM_AGREE_OTHER_FAILED;
  /* max(h) == h and max(~h) == ~h (i.e. min(h) == h) on this rank iff every rank's h is h */
  if (m[0] != hash || ~m[1] != hash) return LOOM_AGREE_DIFFER;
  return LOOM_AGREE_OK;
}

loom_result_t loom__comm_agree(loom_comm_t c, const char *fn, uint64_t hash, int failed, const char *differ) {
  if (!c->coll || c->size == 1) return failed ? LOOM_ERR_INVALID_ARGUMENT : LOOM_SUCCESS;
  uint64_t h[3];
  loom__agree_words(hash, failed, h);
  char what[160];
  snprintf(what, sizeof what, "the plan agreement of %s", fn);
  LOOM_TRY(c->coll->max_words(c, h, 3, what));
  switch (loom__agree_verdict(hash, failed, h)) {
    case LOOM_AGREE_SELF_FAILED: return LOOM_ERR_INVALID_ARGUMENT; /* this rank's own message stands */
    case LOOM_AGREE_OTHER_FAILED:
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: another rank refused its arguments (see its error)", fn);
    case LOOM_AGREE_DIFFER:
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: the ranks' descriptions differ: %s", fn, differ);
    default: return LOOM_SUCCESS;
  }
}

loom_dev_comm_t loom__comm_dev(loom_comm_t comm) {
  loom_dev_comm_t d;
  d.rank = comm->rank;
  d.size = comm->size;
  d.peer_ws = comm->ws_peer_dev;
  d.ws = (char *)comm->ws_ptr;
  d.err = comm->err_dev;
  d.abort_flag = comm->abort_flag;
  d.timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
  return d;
}

loom_result_t loom__comm_refuse(loom_comm_t c, const char *fn, loom_result_t r) {
  if (!c->coll || c->size == 1) return r;
  char msg[768];
  snprintf(msg, sizeof msg, "%s", loom_last_error());
  (void)loom__comm_agree(c, fn, 0, 1, "");
  return loom__fail(r, "%s", msg);
}

loom_result_t loom__comm_max_ms(loom_comm_t comm, float ms, float *dev_word, cudaStream_t stream, float *out) {
  if (!comm->coll) {
    *out = ms;
    return LOOM_SUCCESS;
  }
  return comm->coll->max_ms(comm, ms, dev_word, stream, out);
}

loom_result_t loom__stream_not_capturing(const char *fn, cudaStream_t stream) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  const cudaError_t ce = cudaStreamIsCapturing(stream, &cs);
  if (ce != cudaSuccess) return loom__cuda_fail((int)ce, "cudaStreamIsCapturing", __FILE__, __LINE__);
  if (cs != cudaStreamCaptureStatusNone)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: stream %p is capturing a graph; tuning launches and synchronizes",
                      fn, (void *)stream);
  return LOOM_SUCCESS;
}

