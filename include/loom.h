/*
 * loom.h - the public C API of loom.
 *
 * loom fuses the communication of multi-GPU deep-learning layers into the
 * kernels that compute them. It stands on the caller's NCCL communicator
 * (NCCL >= 2.28): memory that every peer's kernels can load and store comes
 * from NCCL symmetric windows, and loom adds signals with timeouts, plans and
 * fused operations on top.
 *
 * Conventions (as NCCL's own header):
 *  - every function returns loom_result_t; nothing in the library exits;
 *  - on failure loom_last_error() says what went wrong, naming the argument
 *    and its value; the message is thread-local;
 *  - handles are opaque; functions marked "collective" must be called by
 *    every rank of the communicator, in the same order;
 *  - operations are stream-ordered and may be captured in CUDA graphs.
 *
 * Plain C11: this header compiles with gcc -std=c11 -Wall -Werror.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0
#define LOOM_VERSION_CODE (LOOM_VERSION_MAJOR * 10000 + LOOM_VERSION_MINOR * 100 + LOOM_VERSION_PATCH)

/* ---- results ----------------------------------------------------------- */

typedef enum loom_result {
  LOOM_SUCCESS = 0,
  LOOM_ERR_INVALID_ARGUMENT = 1, /* a bad argument: the message names it and its value */
  LOOM_ERR_UNSUPPORTED = 2,      /* this GPU, NCCL or configuration cannot run the request */
  LOOM_ERR_CUDA = 3,             /* a CUDA runtime/driver call failed */
  LOOM_ERR_NCCL = 4,             /* an NCCL call failed */
  LOOM_ERR_OUT_OF_MEMORY = 5,    /* device memory or the comm's workspace is exhausted */
  LOOM_ERR_TIMEOUT = 6,          /* a device-side wait expired (a peer died or misbehaved) */
  LOOM_ERR_INTERNAL = 7          /* a bug in loom: please report it */
} loom_result_t;

/* Name of a result code ("LOOM_ERR_TIMEOUT"); never NULL. */
const char *loom_result_string(loom_result_t r);

/* What went wrong in this thread's last failed loom call; "" if nothing. */
const char *loom_last_error(void);

/* Version of the loaded library as LOOM_VERSION_CODE. */
loom_result_t loom_get_version(int *version);

/* ---- types -------------------------------------------------------------- */

typedef enum loom_dtype {
  LOOM_FP32 = 0,
  LOOM_FP16 = 1,
  LOOM_BF16 = 2
} loom_dtype_t;

/* Size of one element in bytes, 0 for an unknown dtype. */
size_t loom_dtype_size(loom_dtype_t t);

typedef struct loom_comm *loom_comm_t;
typedef struct loom_plan *loom_plan_t;

/* Settings of one comm. Zero fields take the environment's LOOM_* value
 * (listed by `loom env`). Initialise with LOOM_CONFIG_INIT. */
typedef struct loom_config {
  size_t struct_size;     /* sizeof(loom_config_t): guards against a stale header */
  size_t workspace_bytes; /* symmetric workspace per rank (LOOM_WORKSPACE_BYTES) */
  int timeout_ms;         /* bound on every device-side wait (LOOM_TIMEOUT_MS) */
} loom_config_t;
#define LOOM_CONFIG_INIT { sizeof(loom_config_t), 0, 0 }

/* What loom read about its rank and GPU at loom_comm_create. */
typedef struct loom_comm_info {
  int rank, size;          /* in the NCCL communicator */
  int lsa_rank, lsa_size;  /* in the load/store-accessible team (the NVLink domain) */
  int device;              /* CUDA device ordinal */
  int sm_count;            /* multiprocessors */
  int cc_major, cc_minor;  /* compute capability */
  size_t l2_bytes;         /* L2 cache size */
  size_t workspace_bytes;  /* symmetric workspace of this comm */
  size_t workspace_free;   /* of which not reserved by plans */
  int timeout_ms;          /* device-side wait bound */
  int nccl_version;        /* NCCL_VERSION_CODE of the loaded NCCL */
} loom_comm_info_t;

/* ---- communicator ------------------------------------------------------- */

/* Collective. Wraps the caller's NCCL communicator (which must outlive the
 * loom comm) and the current CUDA device, which must be the one the NCCL
 * comm was created on. Checks that NCCL is >= 2.28 and that its symmetric
 * memory and device API work here (else LOOM_ERR_UNSUPPORTED saying why),
 * allocates the symmetric workspace. cfg may be NULL (all defaults). */
loom_result_t loom_comm_create(ncclComm_t nccl, const loom_config_t *cfg, loom_comm_t *out);

/* Collective. Frees the workspace and all memory still allocated through
 * loom_malloc on this comm. Plans of this comm must be destroyed first.
 * Works on a comm that has reported LOOM_ERR_TIMEOUT. */
loom_result_t loom_comm_destroy(loom_comm_t comm);

/* Fills *info. */
loom_result_t loom_comm_get_info(loom_comm_t comm, loom_comm_info_t *info);

/* LOOM_SUCCESS, or the error a kernel of this comm recorded (today:
 * LOOM_ERR_TIMEOUT, with rank, peer, signal and values in loom_last_error()).
 * Once a device-side wait has expired the comm stays in error: every later
 * call on it returns that error; destroy it and create a new one. */
loom_result_t loom_comm_get_async_error(loom_comm_t comm);

/* ---- symmetric memory --------------------------------------------------- */

/* Collective. Allocates `bytes` on every rank (same size on all) as an NCCL
 * symmetric window, so that kernels of every rank in the NVLink domain can
 * load and store it. *ptr is this rank's address; 256-byte aligned. */
loom_result_t loom_malloc(loom_comm_t comm, size_t bytes, void **ptr);

/* Collective. Frees memory from loom_malloc on this comm. */
loom_result_t loom_free(loom_comm_t comm, void *ptr);

/* Address under which this rank's kernels reach peer `peer`'s copy of the
 * symmetric buffer that contains `ptr` (which may point inside a buffer from
 * loom_malloc). LOOM_ERR_UNSUPPORTED if the peer is not load/store
 * accessible (another node). Usable in kernels and in cudaMemcpyAsync. */
loom_result_t loom_peer_ptr(loom_comm_t comm, const void *ptr, int peer, void **peer_ptr);

/* ---- plans -------------------------------------------------------------- */

/* Collective. Releases a plan of any operation and its workspace. */
loom_result_t loom_plan_destroy(loom_plan_t plan);

/* ---- GEMM description (shared by the GEMM engine and the fused ops) ----- */

typedef enum loom_layout {
  LOOM_B_KN = 0, /* B is [k, n] row-major: C = A B */
  LOOM_B_NK = 1  /* B is [n, k] row-major (a PyTorch Linear weight): C = A B^T */
} loom_layout_t;

/* C [m, n] = A [m, k] x B (+ bias [n]); A row-major, C row-major. */
typedef struct loom_gemm_desc {
  int64_t m, n, k;
  loom_dtype_t ab_type;   /* A and B: LOOM_BF16 or LOOM_FP16 */
  loom_dtype_t c_type;    /* C (and bias): LOOM_BF16, LOOM_FP16 or LOOM_FP32 */
  loom_layout_t b_layout;
  int has_bias;           /* 1: add bias [n] (of c_type) in the epilogue */
} loom_gemm_desc_t;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_H */
