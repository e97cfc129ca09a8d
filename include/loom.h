/*
 * loom.h - the public C API of loom.
 *
 * loom fuses the communication of multi-GPU deep-learning layers into the
 * kernels that compute them. It stands on the caller's NCCL communicator
 * (NCCL >= 2.28): memory that every peer's kernels can load and store comes
 * from NCCL symmetric windows, and loom adds signals with timeouts, plans and
 * fused operations on top.
 *
 * Conventions:
 *  - every function returns loom_result_t; nothing in the library exits;
 *  - on failure loom_last_error() says what went wrong, naming the argument
 *    and its value; the message is thread-local;
 *  - calls check their arguments before they launch anything: a pointer
 *    must be device memory the current GPU can reach over every byte the
 *    call touches (not host, freed or another GPU's memory), else
 *    LOOM_ERR_INVALID_ARGUMENT naming it;
 *  - handles are opaque; functions marked "collective" must be called by
 *    every rank of the communicator, in the same order;
 *  - arithmetic is fp32 (the compiler may fuse a multiply and an add into
 *    one rounding); fp16 / bf16 results are rounded to nearest even.
 *
 * Threads. A comm and the plans made on it are used by one thread at a time
 * (as an NCCL communicator): calls on one comm from two threads at once must
 * be serialised by the caller. Different comms may be used from different
 * threads at once. loom_gemm, loom_gemm_tune, the tuning cache
 * (LOOM_TUNE_FILE), loom_finalize and everything that takes no comm may be
 * called from any thread at any time. Settings (LOOM_*) are read once per
 * process, except the paths and names re-read where noted.
 *
 * Streams and graphs. Every op queues its work on the stream it is given
 * and returns without waiting for the GPU (setup calls such as
 * loom_comm_create, loom_malloc and plan creation wait only for loom's own
 * stream, never for the device). Any op may be captured in a CUDA graph:
 *  - signal epochs advance on the device, so every replay of a captured
 *    fused op is a new call (its peers must replay their graphs as often);
 *  - scratch memory that a captured call needs (split-K partials and
 *    tickets, cuBLASLt's workspace) belongs to the graph, so graphs captured
 *    on one stream may be replayed concurrently on different streams;
 *  - calls of one plan must still run in stream order (one plan, one stream
 *    at a time, captured or not): a plan's signals and buffers are reused
 *    from call to call;
 *  - destroy a plan or comm only after the work of its calls has completed
 *    (synchronise the streams you used) and once no graph that captured its
 *    calls will be launched again.
 *
 * Symmetric buffers. An argument documented as "loom_malloc memory" is read
 * or written by peers: it must come from loom_malloc on the plan's comm, at
 * the same offset on every rank (else LOOM_ERR_INVALID_ARGUMENT naming it).
 * Peers access it from the time this rank's call starts on its stream (work
 * queued before the call on that stream is done first) until the call
 * completes on that stream; do not touch it on other streams in between.
 * Every device-side wait is bounded by the comm's timeout: a peer that never
 * calls makes the call give up, never hang (LOOM_ERR_TIMEOUT naming the
 * wait, from loom_comm_get_async_error or the next call).
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
/* Everything this header declares is the library's interface (exported from
 * libloom.so); the library is built with hidden visibility otherwise. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
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

/* Which NCCL library this libloom calls. A process may hold two files named
 * libnccl.so.2 (the system's and, say, PyTorch's); the dynamic loader picks
 * the one libloom's calls reach. loom's kernels are compiled against one
 * NCCL's device headers, so that library must be of the same major.minor
 * version as header_version: callers that may load two NCCLs compare them.
 * Initialise with LOOM_NCCL_INFO_INIT. Needs no GPU. */
typedef struct loom_nccl_info {
  size_t struct_size;  /* sizeof(loom_nccl_info_t) */
  int header_version;  /* NCCL_VERSION_CODE of the nccl.h libloom was compiled with */
  int loaded_version;  /* ncclGetVersion() of the library libloom's calls reach */
  int consistent;      /* 1: every NCCL function libloom calls resolves into that one file */
  char path[1024];     /* that file, as the dynamic loader names it ("" if unknown) */
} loom_nccl_info_t;
#define LOOM_NCCL_INFO_INIT { sizeof(loom_nccl_info_t), 0, 0, 0, "" }
loom_result_t loom_get_nccl_info(loom_nccl_info_t *info);

/* Frees what loom keeps between calls for the whole process: GEMM scratch
 * per (device, stream), cuBLASLt handles and cached algorithms. Call it when
 * no loom work queued outside a CUDA graph is still in flight (graphs that
 * captured loom calls own their scratch and stay valid); loom stays usable
 * after it and re-creates what it needs. Comms and plans are not touched
 * (destroy them yourself). Any thread; synchronizes the devices that held
 * scratch (cudaFree). */
loom_result_t loom_finalize(void);

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
typedef struct loom_world *loom_world_t;

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
  size_t struct_size;      /* sizeof(loom_comm_info_t) */
  int rank, size;          /* in the NCCL communicator */
  int lsa_rank, lsa_size;  /* in the load/store-accessible team (the NVLink domain) */
  int device;              /* CUDA device ordinal */
  int sm_count;            /* multiprocessors (in a world: this rank's share) */
  int cc_major, cc_minor;  /* compute capability */
  size_t l2_bytes;         /* L2 cache size */
  size_t workspace_bytes;  /* symmetric workspace of this comm */
  size_t workspace_free;   /* of which not reserved by plans */
  int timeout_ms;          /* device-side wait bound */
  int nccl_version;        /* NCCL_VERSION_CODE of the loaded NCCL */
} loom_comm_info_t;
#define LOOM_COMM_INFO_INIT { sizeof(loom_comm_info_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* ---- communicator ------------------------------------------------------- */

/* Collective. Wraps the caller's NCCL communicator (which must outlive the
 * loom comm) and the current CUDA device, which must be the one the NCCL
 * comm was created on. Checks that NCCL is >= 2.28 and that its symmetric
 * memory and device API work here (else LOOM_ERR_UNSUPPORTED saying why),
 * allocates the symmetric workspace. cfg may be NULL (all defaults). */
loom_result_t loom_comm_create(ncclComm_t nccl, const loom_config_t *cfg, loom_comm_t *out);

/* Collective. Frees the workspace and all memory still allocated through
 * loom_malloc on this comm. Plans of this comm must be destroyed first, and
 * no kernel may still use its memory (synchronise the streams of its calls
 * and of your own kernels on loom_malloc memory: loom does not wait for the
 * whole device). Works on a comm that has reported LOOM_ERR_TIMEOUT. */
loom_result_t loom_comm_destroy(loom_comm_t comm);

/* Fills *info (initialise it with LOOM_COMM_INFO_INIT: a struct_size that
 * is not sizeof(loom_comm_info_t) is LOOM_ERR_INVALID_ARGUMENT). */
loom_result_t loom_comm_get_info(loom_comm_t comm, loom_comm_info_t *info);

/* LOOM_SUCCESS, or the error a kernel of this comm recorded (LOOM_ERR_TIMEOUT,
 * with rank, peer, signal and values in loom_last_error()). Once a
 * device-side wait has expired the comm stays in error: every later call on
 * it returns that error; destroy it and create a new one. */
loom_result_t loom_comm_get_async_error(loom_comm_t comm);

/* ---- a world of W ranks on one GPU (protocol tests) -------------------- */

/* A world runs W ranks in one process on one GPU, so that loom's protocols
 * execute at W > 2 on a machine with a single GPU. It is for correctness,
 * never speed: timings in it are not W-rank performance (docs/world.md).
 * Each rank is a host thread with its own comm (loom_comm_create_in_world),
 * streams, symmetric allocations (cudaMalloc'd per rank on the one device;
 * a peer's buffer at the same offset is that rank's allocation), signals,
 * error record and timeout, and a share of the SMs: its comm's sm_count
 * (loom_comm_info_t) is the device's SM count / W (at least 1), and every
 * grid whose blocks wait for peers is sized from it, so all ranks' waiting
 * blocks fit on the device at once. Collective setup (plan agreement,
 * fences, loom_malloc / loom_free) goes through an in-process exchange
 * bounded by each comm's timeout: a rank that never arrives makes the
 * others fail with LOOM_ERR_TIMEOUT naming the step, and the world is
 * unusable afterwards (destroy its comms, then it). Kernels are the same
 * as on one GPU per rank. Paths that need NCCL itself (the sequential
 * AllGather+GEMM and GEMM+ReduceScatter, the embedding's staged and GIN
 * paths) and the tuners (they time calls) are refused with
 * LOOM_ERR_UNSUPPORTED naming them; LOOM_*_AUTO resolves to a fused path.
 * CUDA must load kernels eagerly (CUDA_MODULE_LOADING=EAGER, set before
 * the process's first CUDA call): a kernel loaded lazily at its first
 * launch waits for every running kernel, other ranks' waiting ones too.
 * And the device needs more hardware work queues than the ranks' streams
 * that can wait at once: set CUDA_DEVICE_MAX_CONNECTIONS=32 (CUDA's
 * default is 8) before the first CUDA call; a world of W ranks is refused
 * with W or more queues, and warned about with 2 W or more (a plan's side
 * stream on every rank). */

/* Creates a world of `size` ranks (1..64; 31 at most with CUDA's 32
 * hardware queues, see above) on CUDA device `device`. Not collective (one
 * thread calls it, then starts the ranks' threads).
 * LOOM_ERR_UNSUPPORTED where kernels load lazily or too few hardware queues
 * are configured (see above). */
loom_result_t loom_world_create(int size, int device, loom_world_t *out);

/* Collective over the world's ranks: rank `rank`'s thread calls it once,
 * with `device` current (cudaSetDevice), as NCCL's one thread per rank.
 * Makes that rank's comm as loom_comm_create does (cfg may be NULL);
 * a rank already holding a live comm of this world is refused. */
loom_result_t loom_comm_create_in_world(loom_world_t world, int rank, const loom_config_t *cfg, loom_comm_t *out);

/* Destroys the world once the comms made in it are destroyed (else
 * LOOM_ERR_INVALID_ARGUMENT naming how many are left). */
loom_result_t loom_world_destroy(loom_world_t world);

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

/* A loom_plan_* call (collective, the same description on every rank but
 * its pointers) checks a description, each field by name and value, chooses
 * how the calls run and reserves what they need (signals in the comm's
 * workspace, buffers). The ranks then compare what they resolved: ranks
 * given different descriptions or settings, or creating plans in different
 * orders, all get LOOM_ERR_INVALID_ARGUMENT ("the ranks' descriptions
 * differ"), never mismatched protocols. */

/* Collective. Releases a plan of any operation and its workspace, after
 * waiting for its last call made on a stream (not for the device). Calls
 * captured into a CUDA graph are the graph's: finish its replays (and
 * launch no more) before destroying a plan they use, as for any memory a
 * graph uses. */
loom_result_t loom_plan_destroy(loom_plan_t plan);

/* ---- pointwise epilogue (GEMM + AllReduce and the collectives) ---------- */

typedef enum loom_activation {
  LOOM_ACT_NONE = 0,
  LOOM_ACT_RELU = 1,      /* max(v, 0) */
  LOOM_ACT_GELU_TANH = 2, /* 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) (PyTorch approximate="tanh") */
  LOOM_ACT_GELU_ERF = 3   /* 0.5 v (1 + erf(v / sqrt(2))) (PyTorch's default GeLU) */
} loom_activation_t;

/* Pointwise work applied once to each element of an operation's output,
 * element i = row * cols + col of an output of cols columns, x its fp32
 * result (accumulator or sum over ranks), in this order, in fp32:
 *   v = scale * x
 *   v = v + bias[col]                     bias: [cols] of the output dtype, or NULL
 *   v = activation(v)
 *   v = keep(i) ? v * (1 / (1 - p)) : 0   p = dropout_p in [0, 1); 1 / (1 - p) in fp32;
 *                                         no mask at all when p = 0
 *   v = v + residual[i]                   residual: like the output, or NULL
 *   y = v rounded once to the output dtype
 * scale must be finite (LOOM_ERR_INVALID_ARGUMENT otherwise, as for an
 * unknown activation or p outside [0, 1)).
 * Dropout mask: with Philox4x32-10 (Salmon et al., SC'11; Random123's
 * rounds: multipliers 0xD2511F53, 0xCD9E8D57, key bumps 0x9E3779B9,
 * 0xBB67AE85, ten rounds),
 *   q       = dropout_offset + floor(i / 4)                     (mod 2^64)
 *   w[0..3] = Philox4x32-10(counter = {q mod 2^32, q >> 32, 0, 0},
 *                           key = {seed mod 2^32, seed >> 32})
 *   keep(i) = w[i mod 4] >= floor(p * 2^32)    (unsigned 32-bit compare)
 * so 4 consecutive elements share one counter, P(keep) = 1 - p up to 2^-32,
 * and the mask depends on (seed, offset, i) alone: every op, algorithm,
 * rank count and tile order draws the same mask. A call over N elements
 * uses counters [offset, offset + ceil(N / 4)): advance dropout_offset by
 * at least that between calls for an independent mask.
 * Initialise with LOOM_EPILOGUE_INIT (the identity). */
typedef struct loom_epilogue {
  size_t struct_size;          /* sizeof(loom_epilogue_t) */
  float scale;
  const void *bias;
  loom_activation_t activation;
  float dropout_p;
  uint64_t dropout_seed;
  uint64_t dropout_offset;     /* Philox counter base (see above) */
  const void *residual;
} loom_epilogue_t;
#define LOOM_EPILOGUE_INIT { sizeof(loom_epilogue_t), 1.0f, NULL, LOOM_ACT_NONE, 0.0f, 0, 0, NULL }

/* ---- GEMM description (shared by the GEMM engine and the fused ops) ----- */

typedef enum loom_layout {
  LOOM_B_KN = 0, /* B is [k, n] row-major: C = A B */
  LOOM_B_NK = 1  /* B is [n, k] row-major (a PyTorch Linear weight): C = A B^T */
} loom_layout_t;

/* C [m, n] = A [m, k] x B (+ bias [n]); A row-major, C row-major.
 * Initialise with LOOM_GEMM_DESC(...) or LOOM_GEMM_DESC_INIT. */
typedef struct loom_gemm_desc {
  size_t struct_size;     /* sizeof(loom_gemm_desc_t): guards against a stale header */
  int64_t m, n, k;
  loom_dtype_t ab_type;   /* A and B: LOOM_BF16 or LOOM_FP16 */
  loom_dtype_t c_type;    /* C (and bias): LOOM_BF16, LOOM_FP16 or LOOM_FP32 */
  loom_layout_t b_layout;
  int has_bias;           /* 1: add bias [n] (of c_type) in the epilogue */
} loom_gemm_desc_t;
/* A whole description in one initializer. */
#define LOOM_GEMM_DESC(m, n, k, ab_type, c_type, b_layout, has_bias) \
  { sizeof(loom_gemm_desc_t), (m), (n), (k), (ab_type), (c_type), (b_layout), (has_bias) }
#define LOOM_GEMM_DESC_INIT LOOM_GEMM_DESC(0, 0, 0, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0)

/* ---- GEMM ------------------------------------------------------------- */

/* C [m, n] = A [m, k] x B (+ bias [n]) as *desc describes, on `stream`
 * (current device): fp32 accumulation, rounded once to c_type. bias: [n] of
 * c_type when has_bias, else NULL. m, n, k in [1, 2^31 - 1]; n and k
 * multiples of 8; a, b, c, bias 16-byte aligned; c must not overlap a, b or
 * bias (LOOM_ERR_INVALID_ARGUMENT otherwise). No comm needed; any thread.
 * Runs loom's own kernels on compute capability >= 8.0 and cuBLASLt below
 * (LOOM_GEMM_PATH overrides). A shape's kernel configuration comes from the
 * tuning cache (loom_gemm_tune), else from a model of the kernels; with
 * LOOM_TUNE=1 the first call of a shape the cache lacks tunes it
 * (synchronizing `stream`; inside a graph capture the model is used). */
loom_result_t loom_gemm(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c,
                        const void *bias, cudaStream_t stream);

/* Tunes loom_gemm for this description on the current GPU: times loom's
 * candidate kernel configurations on the given buffers (C is overwritten)
 * and records the fastest in the tuning cache, which later loom_gemm calls
 * with the same description on the same kind of GPU use; when
 * LOOM_TUNE_FILE is set the cache is written back to that file (and read
 * from it at the next start). Same arguments and checks as loom_gemm.
 * Synchronizes `stream`; not allowed while `stream` captures a graph
 * (LOOM_ERR_INVALID_ARGUMENT). Where loom_gemm runs cuBLASLt there is
 * nothing to tune: LOOM_SUCCESS, no entry. */
loom_result_t loom_gemm_tune(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c,
                             const void *bias, cudaStream_t stream);

/* ---- grouped GEMM ----------------------------------------------------- */
/*
 * G GEMMs over one stacked A and C whose split into groups is known only on
 * the device (a mixture-of-experts layer: the rows a dispatch delivered,
 * grouped by local expert; loom_moe_plan_info's expert_offsets):
 *   for g in [0, G):  C[off[g] : off[g+1]] = A[off[g] : off[g+1]] x B_g (+ bias_g)
 * fp32 accumulation, rounded once to c_type. A [max_rows, k] ab_type, C
 * [max_rows, n] c_type, B stacked [G, n, k] (LOOM_B_NK) or [G, k, n]
 * (LOOM_B_KN), bias [G, n] c_type when has_bias. offsets: device int64
 * [G + 1], non-decreasing, within [0, max_rows]; read by the kernel only (no
 * host synchronisation: graph-capturable, the row counts may change from
 * call to call); a group without rows costs nothing. C's rows outside
 * [off[0], off[G]) are not written. An offsets table that is not
 * non-decreasing or leaves [0, max_rows] is clamped into it (nothing is
 * read or written outside A and C; rows of overlapping groups get
 * unspecified values). rows_hint: the rows expected in total (0: unknown,
 * max_rows assumed): it picks the tile shape, nothing else. G in [1,
 * LOOM_GROUPED_GEMM_MAX_GROUPS]; n and k multiples of 8; a, b, c, bias
 * 16-byte aligned, offsets 8-byte aligned; c must not overlap a, b or bias
 * (LOOM_ERR_INVALID_ARGUMENT naming the argument). Runs loom's Hopper
 * kernel (compute capability 9.0 with the library's sm_90a code;
 * LOOM_ERR_UNSUPPORTED elsewhere). No comm needed; any thread.
 */
#define LOOM_GROUPED_GEMM_MAX_GROUPS 256
typedef struct loom_grouped_gemm_desc {
  size_t struct_size;     /* sizeof(loom_grouped_gemm_desc_t) */
  int groups;             /* G */
  int64_t max_rows;       /* rows of A and C */
  int64_t n, k;
  int64_t rows_hint;      /* expected off[G] - off[0]; 0 unknown */
  loom_dtype_t ab_type;   /* A and B: LOOM_BF16 or LOOM_FP16 */
  loom_dtype_t c_type;    /* C (and bias): LOOM_BF16, LOOM_FP16 or LOOM_FP32 */
  loom_layout_t b_layout; /* LOOM_B_NK: B [G, n, k]; LOOM_B_KN: B [G, k, n] */
  int has_bias;           /* 1: add bias [G, n] row g to group g */
} loom_grouped_gemm_desc_t;
#define LOOM_GROUPED_GEMM_DESC_INIT { sizeof(loom_grouped_gemm_desc_t), 0, 0, 0, 0, 0, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0 }

loom_result_t loom_gemm_grouped(const loom_grouped_gemm_desc_t *desc, const void *a, const void *b, void *c,
                                const void *bias, const int64_t *offsets, cudaStream_t stream);

/* ==== Embedding-bag + All-to-All (DLRM) ================================== */
/*
 * Tables sharded table-wise over the ranks are pooled and the pooled vectors
 * shuffled so that each rank holds its share of the batch for every table,
 * in one kernel: each pooled vector is stored straight into the destination
 * rank's output, slice by slice, with a ready flag per slice.
 *
 * Shapes (W ranks, T_p tables on rank p, T_total = sum T_p, global batch B,
 * local batch Bl = B / W, dim D; rank r's T = T_r):
 *   tables   [sum over r's tables of rows_t, D]  table_type: rank r's tables
 *            stacked in order (table t starts at row sum_{u<t} rows_u)
 *   offsets  [T*B + 1] int64: bag (t, b) = indices[offsets[t*B+b] ..
 *            offsets[t*B+b+1]) (PyTorch EmbeddingBag's CSR, table-major, over
 *            the GLOBAL batch b in [0, B)); empty bags pool to zero
 *   indices  [num_indices] int64, row numbers within their own table
 *   weights  [num_indices] fp32, optional per-sample weights (sum only)
 *   out      [Bl, T_total*D] out_type on every rank: row i is global sample
 *            rank*Bl + i; columns [g*D, (g+1)*D) hold global table g, tables
 *            numbered rank-major (rank 0's tables first).
 * Pooling: out(b, t) = sum over i in bag (t, b) of w_i * tables[row i]
 * (w_i = 1 without weights; / bag length for LOOM_POOL_MEAN), in fp32,
 * rounded once to out_type.
 * Alignment: tables, table_grad, out, pooled, grad_out 16 bytes; offsets,
 * indices 8; weights 4 (LOOM_ERR_INVALID_ARGUMENT otherwise).
 */

typedef enum loom_pooling {
  LOOM_POOL_SUM = 0,
  LOOM_POOL_MEAN = 1 /* sum / bag length; an empty bag gives zeros */
} loom_pooling_t;

/* The path a plan chose (loom_embedding_plan_info_t.path): ZERO_COPY where
 * every rank is load/store reachable, else STAGED. GIN (other nodes by
 * ncclGin puts) is not enabled in this version. */
typedef enum loom_embedding_path {
  LOOM_EMB_PATH_AUTO = 0,      /* ZERO_COPY where every rank is load/store reachable, else STAGED */
  LOOM_EMB_PATH_ZERO_COPY = 1, /* fused: pooled rows stored into peers' outputs (one NVLink domain) */
  LOOM_EMB_PATH_GIN = 2,
  LOOM_EMB_PATH_STAGED = 3     /* pooling into staging, NCCL send/recv, local reorder (any topology) */
} loom_embedding_path_t;

typedef struct loom_embedding_desc {
  size_t struct_size;           /* sizeof(loom_embedding_desc_t) */
  int world_size;               /* W: must equal the comm's size */
  const int *tables_per_rank;   /* [W]: T_p >= 0 tables owned by rank p; T_total in 1..2^20 */
  const int64_t *rows;          /* [T_total]: rows of each table (>= 1), rank-major order */
  int dim;                      /* D: multiple of 8, 8..1024 */
  int64_t global_batch;         /* B: multiple of W, at most 2^31 */
  loom_pooling_t pooling;
  int per_sample_weights;       /* 1: calls pass weights (LOOM_POOL_SUM only, as PyTorch) */
  loom_dtype_t table_type;      /* fp32, fp16 or bf16 */
  loom_dtype_t out_type;        /* fp32, fp16 or bf16 (accumulation is fp32) */
  int slice_samples;            /* S: samples per slice (the unit of a ready flag), 1..2^24; 0: 128 */
  int grid_blocks;              /* persistent blocks; 0: SM count x resident blocks per SM */
  int check_indices_sync;       /* 1: every call synchronizes its stream and reports an index
                                   error at once (debugging) */
} loom_embedding_desc_t;
#define LOOM_EMBEDDING_DESC_INIT                                                           \
  { sizeof(loom_embedding_desc_t), 0, NULL, NULL, 0, 0, LOOM_POOL_SUM, 0, LOOM_FP32,       \
    LOOM_FP32, 0, 0, 0 }

/* What a plan chose and what it holds. */
typedef struct loom_embedding_plan_info {
  size_t struct_size;           /* sizeof(loom_embedding_plan_info_t) */
  loom_embedding_path_t path;   /* the path calls take */
  int slice_samples;            /* S */
  int slices_per_rank;          /* ceil(Bl / S): slices of one table for one destination */
  int64_t tasks;                /* logical tasks of a forward call on this rank */
  int grid_blocks;              /* persistent blocks launched */
  uint32_t num_flags;           /* slice ready flags this rank receives (T_total x slices) */
  uint32_t num_counters;        /* slice completion counters on this rank */
  size_t workspace_bytes;       /* symmetric workspace (flags, counters) of the plan */
  size_t staging_bytes;         /* other device memory (0 on the zero-copy path) */
} loom_embedding_plan_info_t;
#define LOOM_EMBEDDING_PLAN_INFO_INIT \
  { sizeof(loom_embedding_plan_info_t), LOOM_EMB_PATH_AUTO, 0, 0, 0, 0, 0, 0, 0, 0 }

/* Collective. Chooses the path and reserves the flags and counters in the
 * comm's workspace; a plan whose 32-bit signal counts would overflow is
 * refused, naming the count, its value and the limit. A rank that refuses
 * its description makes the others fail ("another rank refused its
 * arguments"). loom_plan_destroy waits for the plan's last call (not a
 * graph's replays: finish those first), not for the device. */
loom_result_t loom_plan_embedding_a2a(loom_comm_t comm, const loom_embedding_desc_t *desc,
                                      loom_plan_t *out);

/* Fills *info (plan of loom_plan_embedding_a2a only; initialise it with
 * LOOM_EMBEDDING_PLAN_INFO_INIT: a struct_size that is not
 * sizeof(loom_embedding_plan_info_t) is LOOM_ERR_INVALID_ARGUMENT). */
loom_result_t loom_embedding_a2a_plan_info(loom_plan_t plan, loom_embedding_plan_info_t *info);

/* Collective, stream-ordered. Pools this rank's tables over the global batch
 * and delivers the pooled vectors into every rank's `out` (shapes above;
 * loom_malloc memory on every path, the staged one included). When the call
 * completes on `stream`, this rank's `out` is complete.
 * Index errors: an index outside [0, rows) or a bad offset is skipped (it
 * contributes nothing; no wild read) and recorded on the device; the next
 * loom_embedding_a2a / _backward / _pool on this plan, or
 * loom_embedding_a2a_check, returns LOOM_ERR_INVALID_ARGUMENT naming the
 * table, position and value (at once when desc.check_indices_sync is set). */
loom_result_t loom_embedding_a2a(loom_plan_t plan, const void *tables, const int64_t *indices,
                                 const int64_t *offsets, int64_t num_indices, const float *weights,
                                 void *out, cudaStream_t stream);

/* Collective, stream-ordered: the backward op. grad_out: shape and dtype of
 * `out` (loom_malloc memory); table_grad: shape and dtype of `tables` (a
 * gradient buffer, or the tables with scale = -lr for plain SGD). For every
 * bag (t, b) of this rank and every index i in it:
 *   table_grad[row of i] += scale * w_i * grad_out(b, t)   (/ length for mean)
 * fp32 tables: fp32 atomic adds, in no fixed order. fp16/bf16 tables: each
 * row's contributions summed in fp32 in a fixed order and added once
 * (within one rounding of the exact sum, the same on every run); per call
 * this takes 32 bytes of device memory per index, 8 D bytes per 256 indices
 * and a radix sort's temporary storage from the plan's own stream-ordered
 * pool (kept until the plan is destroyed), and allows at most 2^32 - 1
 * indices (else LOOM_ERR_UNSUPPORTED) and 2^32 - 2 rows per rank (else
 * LOOM_ERR_UNSUPPORTED at plan creation). */
loom_result_t loom_embedding_a2a_backward(loom_plan_t plan, const void *grad_out,
                                          const int64_t *indices, const int64_t *offsets,
                                          int64_t num_indices, const float *weights, float scale,
                                          void *table_grad, cudaStream_t stream);

/* Pooling alone, no communication: pooled [B, T*D] (out_type) with row b =
 * global sample b and columns [t*D, (t+1)*D) = this rank's table t, i.e. the
 * send buffer of a sequential All-to-All ([W][Bl][T*D]). Any device memory. */
loom_result_t loom_embedding_pool(loom_plan_t plan, const void *tables, const int64_t *indices,
                                  const int64_t *offsets, int64_t num_indices, const float *weights,
                                  void *pooled, cudaStream_t stream);

/* Reports (and clears) an index or offset error recorded by this plan's
 * kernels. Synchronize the stream of the calls first; checks nothing still
 * running. */
loom_result_t loom_embedding_a2a_check(loom_plan_t plan);

/* ==== Tensor-parallel linear layers ===================================== */
/*
 * Linear layers on W ranks with the communication fused into the GEMM:
 *   loom_ag_gemm  (column-parallel)  C [m, n] = AllGather(A shards) [m, k] x B
 *   loom_gemm_rs  (row-parallel)     C shard = ReduceScatter over ranks of A [m, k] x B
 *   loom_gemm_ar  (row-parallel)     out [m, n] = epilogue(AllReduce over ranks of A [m, k] x B)
 * m is global (the tokens of all ranks); n and k are this rank's (AG: n =
 * N / W; RS, AR: k = K / W), as in loom_gemm_desc_t, with its checks.
 *
 * Shards: W shards of S = ceil(m / W) rows; rank p owns rows
 * [min(m, p S), min(m, (p+1) S)), so the last shards may be short or empty
 * (m = 5, W = 4: 2, 2, 1, 0 rows; not 2, 1, 1, 1). The collectives and the
 * optimizers split the same way, in units of their own. A rank whose shard
 * is empty passes any pointer (NULL included) for its shard argument.
 *
 * Transfers (desc.transfer; loom_tp_plan_info says what a plan chose):
 *   SEQUENTIAL   the NCCL collective, then the GEMM (desc.sequential_gemm)
 *   COPY_ENGINE  AG: each rank's shard pushed into the peers' gathered A by
 *                cudaMemcpyAsync on a second stream, a signal per chunk;
 *                the rows computed shard by shard by the sequential path's
 *                GEMM (desc.sequential_gemm): the own shard's at once, each
 *                peer's once it has landed (a one-warp wait before it; PyTorch
 *                async-TP's way). With LOOM_TP_CE_SHARD_GEMMS=0, one fused
 *                GEMM instead whose tiles wait for the rows they need
 *   SM_COPY      AG: the same pushes by comm_blocks blocks of a concurrent
 *                kernel; RS: the owner of each output tile reads the W
 *                ranks' partial tiles through NVLink as they are signalled
 *                and sums them in fp32 in rank order (deterministic)
 *   SM_ATOMIC    RS only: each rank adds its partial tiles into the owner's
 *                fp32 accumulator (red.global.add.f32); the owner rounds each
 *                finished tile once into c_shard (not deterministic)
 *   BULK_REDUCE  RS only: each rank's GEMM epilogue adds its output tiles,
 *                rounded to the output dtype, into the owner's sum buffer
 *                with the tensor memory accelerator (bulk reductions over
 *                NVLink, no kernel beside the GEMM, every SM computing);
 *                the owner then adds the bias and rounds into c_shard.
 *                Rounds once per add (deterministic at W = 2, not above);
 *                needs compute capability 9.0 (loom's sm90 kernels) and m
 *                = W equal shards of a multiple of 64 rows
 *   DECOMPOSED   AG, RS: the GEMM cut into W chunks of rows (one per shard),
 *                each run by the sequential path's GEMM engine, beside NCCL
 *                on a second stream (TransformerEngine's way). AG: the own
 *                shard's GEMM first while the peers' shards arrive by
 *                ncclSend / ncclRecv, a shard per step in ring order, each
 *                shard's GEMM once it is in; RS: a ring, step s computing
 *                this rank's partial of owner rank - 1 - s's chunk, adding
 *                the sum rank - 1 sent (ncclSend / ncclRecv) and passing it
 *                on while the next chunk is computed, the own chunk last.
 *                Runs where NCCL does (no peer memory); not GEMM+AllReduce
 *                (LOOM_ERR_INVALID_ARGUMENT); a chunk re-reads B, so it pays
 *                where each shard's GEMM is compute-bound
 *   AUTO         SM_COPY for RS (BULK_REDUCE where its shape and GPU
 *                rules hold) and COPY_ENGINE for AG where the fused
 *                transfers can run, else SEQUENTIAL; AG also SEQUENTIAL when
 *                a shard (ceil(m / W) rows) is shorter than 64 rows (the
 *                smallest GEMM tile) or than the GPU's ridge point (dense
 *                fp16/bf16 tensor FLOP/s over DRAM bytes/s, from its SM
 *                count, clock and memory bandwidth), and where the
 *                communication it would hide cannot pay back its fixed
 *                cost (k < 2048, or shards under 1024 rows); RS also
 *                SEQUENTIAL when
 *                the GEMM's tiles fit one wave of its grid, and from
 *                BULK_REDUCE under 1.5 waves of tiles or where the last
 *                wave's waste outweighs the communication it would hide
 *                (a model of FLOP/s over NVLink bytes/s). A tuned
 *                description (loom_*_tune) takes the tuner's choice.
 * The fused transfers need every rank load/store reachable (one NVLink
 * domain), loom's own GEMM kernels for the description (where loom_gemm
 * would not run cuBLASLt) and at most 72 ranks (LOOM_ERR_UNSUPPORTED
 * otherwise); SEQUENTIAL and DECOMPOSED run anywhere (outside a world of
 * ranks on one GPU, which has no NCCL). What a call must pass follows from the
 * description as written (its transfer as asked, AUTO included) and the
 * arguments, never from the transfer AUTO resolved to: the same call is
 * accepted or refused, and computes the same values up to the rounding
 * each transfer states, whatever AUTO chose.
 *
 * Memory. AG: the gathered A lives in symmetric memory (peers store into
 * it): pass a_full (loom_malloc memory, [m, k], this rank's copy) to
 * receive it, or NULL to use the plan's own buffer. a_shard may be any
 * device memory; when it is a_full's own rows (a_full + rank's first row x
 * k), nothing is copied for the local shard. RS: a, b, c_shard and bias may
 * be any device memory (the plan holds, in symmetric memory, the partial
 * product that peers read: W x S x n elements of the output dtype
 * (SM_COPY), or the accumulator peers add into: S x n fp32 (SM_ATOMIC) or
 * of the output dtype (BULK_REDUCE)).
 * SMs: a fused call's GEMM leaves SMs to the kernels it waits for (one for
 * the copy engine's ready waits, comm_blocks for SM_COPY / SM_ATOMIC);
 * kernels of other streams that occupy those SMs for longer than the comm's
 * timeout make the call give up with LOOM_ERR_TIMEOUT, never hang.
 */

typedef enum loom_tp_transfer {
  LOOM_TP_AUTO = 0,
  LOOM_TP_SEQUENTIAL = 1,
  LOOM_TP_COPY_ENGINE = 2,
  LOOM_TP_SM_COPY = 3,
  LOOM_TP_SM_ATOMIC = 4,
  LOOM_TP_BULK_REDUCE = 5,
  LOOM_TP_DECOMPOSED = 6
} loom_tp_transfer_t;

/* The GEMM of the sequential path (transfer LOOM_TP_SEQUENTIAL), of the
 * decomposed one and of the copy engine's shards (the other fused transfers
 * always run loom's own kernels).
 *   AUTO      a tuned entry's choice where the description leaves every
 *             knob to loom and the cache has one; else cuBLASLt where it
 *             takes the dtypes (C of A's type or fp32), loom_gemm otherwise
 *   LOOM      loom_gemm (its own tuning cache and LOOM_GEMM_PATH apply)
 *   CUBLASLT  cuBLASLt (LOOM_ERR_UNSUPPORTED for bf16 -> fp16 and
 *             fp16 -> bf16, which it does not take) */
typedef enum loom_tp_gemm {
  LOOM_TP_GEMM_AUTO = 0,
  LOOM_TP_GEMM_LOOM = 1,
  LOOM_TP_GEMM_CUBLASLT = 2
} loom_tp_gemm_t;

typedef struct loom_tp_desc {
  size_t struct_size;        /* sizeof(loom_tp_desc_t) */
  /* the local GEMM, as loom_gemm_desc_t: m (global rows), this rank's n and k */
  int64_t m, n, k;
  loom_dtype_t ab_type;      /* A and B: LOOM_BF16 or LOOM_FP16 */
  loom_dtype_t c_type;       /* C (and bias): LOOM_BF16, LOOM_FP16 or LOOM_FP32 */
  loom_layout_t b_layout;
  int has_bias;
  loom_activation_t activation; /* AG: applied to C after the bias, in the GEMM's epilogue;
                                   RS: LOOM_ACT_NONE */
  int world_size;            /* W: must equal the comm's size */
  loom_tp_transfer_t transfer;
  int chunk_rows;            /* AG: rows per transfer chunk (one signal each), >= 0; 0: chosen by
                                the plan */
  int comm_blocks;           /* SM_COPY / SM_ATOMIC: blocks given to the copies (AG) or the
                                reduction (RS) next to the GEMM, < SM count; 0: chosen by the plan
                                (the most blocks, 4..16, that leave the GEMM's number of waves
                                unchanged) */
  loom_tp_gemm_t sequential_gemm; /* the sequential path's GEMM (see loom_tp_gemm_t) */
} loom_tp_desc_t;
#define LOOM_TP_DESC_INIT \
  { sizeof(loom_tp_desc_t), 0, 0, 0, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0, LOOM_ACT_NONE, 0, LOOM_TP_AUTO, 0, 0, \
    LOOM_TP_GEMM_AUTO }

/* What a plan chose and what it holds. */
typedef struct loom_tp_plan_info {
  size_t struct_size;        /* sizeof(loom_tp_plan_info_t) */
  loom_tp_transfer_t transfer; /* the transfer calls take */
  int64_t shard_rows;        /* S */
  int chunk_rows;            /* AG: rows per chunk signal */
  int comm_blocks;           /* blocks of the copy (AG) or reduction (RS) kernel; 0: none */
  int gemm_bm, gemm_bn;      /* the fused GEMM's tile: gemm_bm x gemm_bn (0: none, as on the sequential,
                                decomposed and copy-engine shard paths) */
  int gemm_grid;             /* its persistent blocks (0: none) */
  int deterministic;         /* 1: the same bits on every run */
  size_t symmetric_bytes;    /* loom_malloc memory the plan holds on this rank */
  size_t device_bytes;       /* other device memory it holds */
  size_t workspace_bytes;    /* of the comm's symmetric workspace (signals) */
  loom_tp_gemm_t gemm;       /* the GEMM the calls run: LOOM_TP_GEMM_LOOM (loom_gemm, or the
                                fused transfers' own kernel) or LOOM_TP_GEMM_CUBLASLT */
} loom_tp_plan_info_t;
#define LOOM_TP_PLAN_INFO_INIT \
  { sizeof(loom_tp_plan_info_t), LOOM_TP_AUTO, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, LOOM_TP_GEMM_AUTO }

/* Collective. Checks the description (the GEMM fields as loom_gemm does),
 * chooses the transfer, allocates what the plan holds. Ranks seeing
 * different tuning caches count as differing; a rank that refuses its
 * description makes the others fail ("another rank refused its
 * arguments"). */
loom_result_t loom_plan_ag_gemm(loom_comm_t comm, const loom_tp_desc_t *desc, loom_plan_t *out);
loom_result_t loom_plan_gemm_rs(loom_comm_t comm, const loom_tp_desc_t *desc, loom_plan_t *out);
/* GEMM + AllReduce (loom_gemm_ar), as above, with: desc.has_bias 0 and
 * desc.activation LOOM_ACT_NONE (the bias and the activation come through
 * the call's epilogue, applied to the sum; LOOM_ERR_INVALID_ARGUMENT naming
 * the field otherwise); transfer SEQUENTIAL, SM_COPY or AUTO (COPY_ENGINE
 * and SM_ATOMIC are refused by name). Every rank must be load/store
 * reachable (LOOM_ERR_UNSUPPORTED otherwise; across nodes use loom_gemm +
 * ncclAllReduce). */
loom_result_t loom_plan_gemm_ar(loom_comm_t comm, const loom_tp_desc_t *desc, loom_plan_t *out);

/* Collective (same desc on every rank); synchronizes `stream` (not while it
 * captures a graph). Times the op's transfers and knobs for this
 * description on this comm with inputs of its own (the sequential path
 * with cuBLASLt and with loom_gemm among them, and DECOMPOSED where NCCL
 * runs) and records the fastest (max
 * over ranks, so every rank picks the same) in the tuning cache (written to
 * LOOM_TUNE_FILE by rank 0 when set). Plans made afterwards from a
 * description with transfer LOOM_TP_AUTO, chunk_rows = comm_blocks = 0 and
 * sequential_gemm LOOM_TP_GEMM_AUTO take the recorded choice. With
 * LOOM_TUNE=1, creating such a plan for a description the cache lacks runs
 * this first. */
loom_result_t loom_ag_gemm_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream);
loom_result_t loom_gemm_rs_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream);
/* The same for loom_gemm_ar (timed without an epilogue). */
loom_result_t loom_gemm_ar_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream);

/* Fills *info (plans of loom_plan_ag_gemm, loom_plan_gemm_rs and
 * loom_plan_gemm_ar). */
loom_result_t loom_tp_plan_info(loom_plan_t plan, loom_tp_plan_info_t *info);

/* Collective, stream-ordered. C [m, n] = act(A_full [m, k] x B (+ bias [n])),
 * where A_full is the row-wise concatenation of every rank's a_shard
 * ([shard rows, k], ab_type); fp32 accumulation. The fused transfers add
 * the bias and apply the activation in fp32 and round once to c_type;
 * SEQUENTIAL and DECOMPOSED round the GEMM's result to c_type and apply
 * the activation to that (a second rounding). c: [m, n] c_type, any device memory. a_full:
 * NULL, or loom_malloc memory [m, k] that receives the gathered A (on every
 * transfer, the sequential one included). bias: [n] of c_type iff
 * desc.has_bias. c must not overlap a_shard, b, bias or a_full. */
loom_result_t loom_ag_gemm(loom_plan_t plan, const void *a_shard, const void *b, void *c, void *a_full,
                           const void *bias, cudaStream_t stream);

/* Collective, stream-ordered. c_shard [shard rows, n] (c_type) = this rank's
 * shard of the rows of sum over ranks of (A [m, k] x B) (+ bias [n], added
 * once). SM_COPY rounds each rank's partial to c_type once and sums the
 * partials in fp32 in rank order (deterministic); SM_ATOMIC adds the fp32
 * partials in whatever order they arrive and rounds once (not
 * deterministic); SEQUENTIAL is NCCL's reduce-scatter in c_type; DECOMPOSED
 * adds the partials, each rounded to c_type, along a ring (ranks owner + 1,
 * owner + 2, .., owner; an fp32 add and one rounding per hop: the same
 * bits on every run). */
loom_result_t loom_gemm_rs(loom_plan_t plan, const void *a, const void *b, void *c_shard, const void *bias,
                           cudaStream_t stream);

/* Collective, stream-ordered.
 *   out [m, n] (c_type) = epi(sum over ranks of A [m, k] x B), on every rank
 * with the same bits: A this rank's [m, k] (all m rows, its K slice), B its
 * [k, n] / [n, k] slice. epi: NULL (none) or a loom_epilogue_t applied once
 * to each fp32 sum at element row x n + col (cols = n: the same dropout mask
 * as loom_allreduce's with cols = n), bias [n] and residual [m, n] of c_type,
 * any device memory of this GPU, read on the rank that reduces the row (pass
 * the same values on every rank). E.g. dropout(AR(x W) + b) + r in one call.
 * Accumulation: each rank's partial rounded once to c_type, the partials
 * summed in fp32 in rank order 0..W-1, the epilogue in fp32, one rounding:
 * deterministic for every transfer (loom_tp_plan_info.deterministic = 1).
 * Transfers:
 *   SM_COPY     fused: the GEMM + ReduceScatter call (rows owned in shards
 *               as above); each owner applies the epilogue to its rows and
 *               stores them into every rank's out, tile by tile as the
 *               partials arrive; the call completes on each rank once every
 *               row of its out has arrived
 *   SEQUENTIAL  the GEMM (desc.sequential_gemm) into the plan's partial,
 *               then loom_allreduce with the epilogue
 *   AUTO        loom_gemm_ar_tune's choice where tuned, else SEQUENTIAL
 * Memory: a, b, bias and residual any device memory. out 16-byte aligned,
 * not overlapping a or b; loom_malloc memory unless the plan was made with
 * desc.transfer = LOOM_TP_SEQUENTIAL (AUTO included, whatever it resolves
 * to: LOOM_ERR_INVALID_ARGUMENT naming `out`). The plan holds in symmetric
 * memory the partial product (fused: W x S x n, sequential: m x n elements
 * of c_type, plus its loom_allreduce plan's staging) and its signals. */
loom_result_t loom_gemm_ar(loom_plan_t plan, const void *a, const void *b, void *out, const loom_epilogue_t *epi,
                           cudaStream_t stream);

/* ==== Distributed optimizers: Adam and LAMB ============================= */
/*
 * One data-parallel optimizer step over a list of tensors (any sizes, each
 * its own buffer), the gradient's all-reduce fused into the update. Each
 * tensor takes one of two forms:
 *   RS-Opt-AG  each rank sums its slice of the gradient over the ranks,
 *              updates it with the state it alone holds (1/W of the state)
 *              and stores the new parameters of the slice into every rank
 *   AR-Opt     each rank sums the whole gradient and updates the whole
 *              tensor (replicated state, no stores into peers)
 * Slices: tensor t of n elements is cut into W slices of
 * S = roundup(ceil(n / W), 8) elements; rank p owns [min(n, p S),
 * min(n, (p+1) S)) (the tensor-parallel shards' rule in units of 8
 * elements), so tensors of fewer than 8 W elements live on the first ranks.
 *
 * Precision: parameters and gradients fp32, bf16 or fp16 (any pair). With
 * bf16/fp16 parameters the plan keeps fp32 master weights (read from the
 * parameters when the plan is created) and the parameters are their
 * rounding; fp32 parameters are their own master. exp_avg (m) and
 * exp_avg_sq (v) are fp32.
 *
 * The step, per element, in fp32 (s = steps taken + 1; wd the tensor's
 * weight decay; p the fp32 master or fp32 parameter; lr = *args->lr or
 * desc.lr):
 *   g   = (sum over ranks r = 0..W-1, in that order, of grad_r) * c,
 *         c = fp32(1 / (D * grad_scale)), D = W if average_grads else 1,
 *         grad_scale = *args->grad_scale or 1
 *   bc1 = 1 - beta1^s, bc2 = 1 - beta2^s   (both 1 if bias_correction = 0;
 *         in double, as are lr / bc1 and sqrt(bc2), each rounded to fp32)
 *   Adam:  if wd != 0: p = p - lr wd p (decoupled) or g = g + wd p (L2)
 *          m = beta1 m + (1 - beta1) g
 *          v = beta2 v + (1 - beta2) g^2
 *          p = p - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
 *   LAMB:  if L2: g = g + wd p
 *          m, v as Adam
 *          u = (m / bc1) / (sqrt(v / bc2) + eps)    (+ wd p if decoupled)
 *          p = p - r u,  r = lr (||p|| / ||u||) if (use_nvlamb or wd != 0)
 *                        and ||p|| != 0 and ||u|| != 0, else r = lr
 *          ||p||, ||u||: L2 norms over the whole tensor (every rank's slice),
 *          of p before the step (the fp32 master, or the fp32 parameter)
 *          and of u, summed in a fixed order (the same on every run)
 * then every rank's parameter = p rounded to param_type. No gradient
 * clipping, no trust-ratio clipping.
 *
 * Memory (checked at plan creation, LOOM_ERR_INVALID_ARGUMENT naming the
 * tensor): gradients of every tensor and parameters of RS-Opt-AG tensors
 * are loom_malloc memory (peers load the gradients and store the
 * parameters), at the same offset of the same allocation on every rank
 * (allocate in the same order everywhere); AR-Opt parameters may be any
 * device memory. Any alignment. The plan records the pointers: every step
 * updates those tensors. Every rank must be load/store reachable
 * (LOOM_ERR_UNSUPPORTED otherwise).
 *
 * A step completes on `stream` only once every peer has finished reading
 * this rank's gradients and storing into its parameters: overwrite the
 * gradients and read the parameters after it on that stream. A captured
 * step is replayed as a new step (the step counter lives on the device);
 * lr, grad scale and found_inf may be device scalars changed between
 * replays.
 */

typedef enum loom_optim_form {
  LOOM_OPTIM_AUTO = 0,      /* AR-Opt for tensors of <= 4096 elements, RS-Opt-AG for the rest */
  LOOM_OPTIM_RS_OPT_AG = 1, /* every tensor sliced (sharded state) */
  LOOM_OPTIM_AR_OPT = 2     /* every tensor replicated */
} loom_optim_form_t;

/* A plan's tensors and hyperparameters (the same on every rank, except the
 * pointers, which are each rank's own). Initialise with LOOM_OPTIM_DESC_INIT
 * (PyTorch's AdamW defaults without weight decay). */
typedef struct loom_optim_desc {
  size_t struct_size;         /* sizeof(loom_optim_desc_t) */
  int world_size;             /* W: must equal the comm's size */
  int num_tensors;            /* T >= 1 */
  void *const *params;        /* host array [T] of device pointers: parameter t [numels[t]] of param_type */
  void *const *grads;         /* host array [T]: gradient t [numels[t]] of grad_type (loom_malloc memory) */
  const int64_t *numels;      /* host array [T], each >= 1 */
  loom_dtype_t param_type;    /* LOOM_FP32, LOOM_BF16 or LOOM_FP16 */
  loom_dtype_t grad_type;     /* LOOM_FP32, LOOM_BF16 or LOOM_FP16 */
  loom_optim_form_t form;
  float lr;                   /* used when a call passes no device lr */
  float beta1, beta2, eps;
  float weight_decay;         /* >= 0, for every tensor, unless weight_decays is given */
  const float *weight_decays; /* host array [T] (each >= 0) or NULL */
  int decoupled_weight_decay; /* 1: AdamW (p -= lr wd p) / LAMB adam_w_mode (u += wd p);
                                 0: L2 (g += wd p) */
  int bias_correction;        /* 1: bc1, bc2 as above; 0: bc1 = bc2 = 1 */
  int average_grads;          /* 1: the gradient is the mean over ranks (DDP); 0: the sum */
  int use_nvlamb;             /* LAMB: the trust ratio also for tensors with weight decay 0 */
  int64_t chunk_elems;        /* elements per work chunk, a multiple of 8 up to 2^24; 0: 4096 */
} loom_optim_desc_t;
#define LOOM_OPTIM_DESC_INIT                                                                            \
  { sizeof(loom_optim_desc_t), 0, 0, NULL, NULL, NULL, LOOM_FP32, LOOM_FP32, LOOM_OPTIM_AUTO, 1e-3f, 0.9f, \
    0.999f, 1e-8f, 0.0f, NULL, 1, 1, 1, 0, 0 }

/* Per-call inputs, all optional (NULL args: all defaults). Device scalars,
 * read by the kernels when they run (so a captured graph sees new values). */
typedef struct loom_optim_args {
  size_t struct_size;         /* sizeof(loom_optim_args_t) */
  const float *lr;            /* device float, or NULL: desc.lr */
  const float *grad_scale;    /* device float, or NULL (1): the loss scale the gradients are divided by */
  const float *found_inf;     /* device float, or NULL: when nonzero the step is skipped: parameters,
                                 state and step counter stay as they are (torch._fused_adam_'s
                                 found_inf) */
  int *grad_nonfinite;        /* device int, or NULL: set to 1 on every rank when any g of the step
                                 (the summed, unscaled gradient before weight decay), on any rank's
                                 slice, is inf or NaN; left as it is otherwise (loom never clears it).
                                 It only reports: the step is applied all the same. A step skipped
                                 by found_inf sets nothing. */
} loom_optim_args_t;
#define LOOM_OPTIM_ARGS_INIT { sizeof(loom_optim_args_t), NULL, NULL, NULL, NULL }

/* What a plan holds. The state arrays are this rank's, laid out tensor by
 * tensor (loom_optim_tensor_state says where each tensor's part is). */
typedef struct loom_optim_plan_info {
  size_t struct_size;         /* sizeof(loom_optim_plan_info_t) */
  int num_tensors;
  int num_ar_tensors;         /* of which AR-Opt */
  int64_t chunk_elems;
  int64_t chunks;             /* this rank's chunks per step */
  int64_t global_chunks;      /* all ranks' */
  int64_t state_elems;        /* fp32 elements of each state array on this rank */
  float *exp_avg;             /* device [state_elems] */
  float *exp_avg_sq;          /* device [state_elems] */
  float *master;              /* device [state_elems]; NULL for fp32 parameters (their own master) */
  int32_t *step;              /* device int32: steps taken */
  int kernels_per_step;
  size_t device_bytes;        /* device memory the plan holds */
  size_t workspace_bytes;     /* of the comm's symmetric workspace (signals, LAMB's partial norms) */
} loom_optim_plan_info_t;
#define LOOM_OPTIM_PLAN_INFO_INIT { sizeof(loom_optim_plan_info_t), 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 0, 0, 0 }

/* Collective. Checks the description and every tensor's memory, builds the
 * chunk table, allocates the state (zero moments, step 0, the master
 * weights read from the parameters at this call). */
loom_result_t loom_plan_adam(loom_comm_t comm, const loom_optim_desc_t *desc, loom_plan_t *out);
loom_result_t loom_plan_lamb(loom_comm_t comm, const loom_optim_desc_t *desc, loom_plan_t *out);

/* Collective, stream-ordered: one step of the plan's optimizer over all its
 * tensors (adam on an Adam plan, lamb on a LAMB plan). args may be NULL. */
loom_result_t loom_adam_step(loom_plan_t plan, const loom_optim_args_t *args, cudaStream_t stream);
loom_result_t loom_lamb_step(loom_plan_t plan, const loom_optim_args_t *args, cudaStream_t stream);

/* Fills *info (plans of loom_plan_adam / loom_plan_lamb). */
loom_result_t loom_optim_plan_info(loom_plan_t plan, loom_optim_plan_info_t *info);

/* Where tensor `tensor`'s state is on this rank: it covers elements
 * [*lo, *hi) of the tensor (its slice, or all of an AR-Opt tensor), at
 * index *state_offset of the state arrays (for checkpoints). */
loom_result_t loom_optim_tensor_state(loom_plan_t plan, int tensor, int64_t *lo, int64_t *hi,
                                      int64_t *state_offset);

/* Stream-ordered: sets the device step counter (steps taken) to `step` >= 0
 * (resuming from a checkpoint). */
loom_result_t loom_optim_set_step(loom_plan_t plan, int32_t step, cudaStream_t stream);

/* ==== Mixture of experts: dispatch and combine ========================== */
/*
 * Expert parallelism: E experts split over the W ranks (rank p owns the
 * experts [begin(p), begin(p) + n(p)), n(p) = floor(E/W) + (p < E mod W),
 * the first E mod W ranks one more). Each rank's router picked, for each of
 * its tokens, k distinct experts (ids [tokens, k] int32) and k weights.
 *   dispatch  every (token, j) row goes straight into the receive buffer of
 *             its expert's rank (symmetric memory owned by the plan),
 *             grouped by local expert, inside an expert by source rank,
 *             inside a source in token order; the counts travel on the
 *             device (no host synchronisation: graph-capturable), and
 *             info.expert_offsets [n + 1] (device int64) says where each
 *             local expert's rows are after the call
 *   combine   the experts' outputs (any device buffer in the receive
 *             layout of the last dispatch) go back to their tokens' ranks,
 *             which compute out[t] = sum over j of w[t][j] y_j in increasing
 *             j, fp32, each product rounded once, then rounded to the dtype
 *             (the same bits on every run)
 * Dropless by default (the receive buffer holds the worst case: W T_max
 * min(k, ceil(E/W)) rows); with capacity C > 0 each expert keeps the C rows
 * of lowest global token index (ranks in order, then tokens) and the
 * dropped (t, j) are left out of the combine (no renormalisation).
 * A routing entry outside [0, E) or repeated within its token is left out
 * like a dropped row and reported by the next call of the plan
 * (LOOM_ERR_INVALID_ARGUMENT naming the entry). Rows of H elements of
 * `dtype` (bf16, fp16, fp32), H x element size a multiple of 16 bytes; x and
 * y 16-byte aligned. Every rank must be load/store reachable. Every rank
 * calls a plan's dispatches and combines in the same order; a combine
 * returns the rows of the plan's last dispatch (combine may follow it more
 * than once: each is a fresh combine of new expert outputs).
 */
typedef struct loom_moe_desc {
  size_t struct_size;     /* sizeof(loom_moe_desc_t) */
  int hidden;             /* H, elements per row */
  int experts;            /* E (1..65536) */
  int topk;               /* k (1..min(8, E)) */
  int64_t max_tokens;     /* T_max: the most tokens one rank passes to a dispatch */
  int64_t capacity;       /* rows kept per expert; 0 dropless */
  loom_dtype_t dtype;     /* rows: LOOM_BF16, LOOM_FP16 or LOOM_FP32 */
  int ffn;                /* F, the experts' hidden size, for loom_moe_mlp (0: dispatch and
                           * combine only); > 0 needs dtype bf16 or fp16, H and F multiples
                           * of 8, and loom's Hopper GEMM (compute capability 9.0) */
  int mlp_path;           /* loom_moe_mlp_path_t: how loom_moe_mlp runs (may differ per rank) */
} loom_moe_desc_t;
#define LOOM_MOE_DESC_INIT { sizeof(loom_moe_desc_t), 0, 0, 0, 0, 0, LOOM_BF16, 0, 0 }

/* How loom_moe_mlp runs its dispatch and combine. Every form computes the
 * same bits; ranks may differ (each call's choice is its rank's own). */
typedef enum loom_moe_mlp_path {
  LOOM_MOE_MLP_AUTO = 0,     /* per call: the tuned form and tiles for the call's tokens (loom_moe_mlp_tune),
                              * else the model's tiles, fused-all from 512 tokens on and fused below */
  LOOM_MOE_MLP_FUSED = 1,    /* the down GEMM's epilogue stores each row into its token's rank; the
                              * combine kernel only signals and reduces */
  LOOM_MOE_MLP_UNFUSED = 2,  /* the down GEMM into the receive buffer, then loom_moe_combine */
  LOOM_MOE_MLP_FUSED_ALL = 3 /* FUSED, and the dispatch in the gate/up GEMM's prologue: the GEMM starts
                              * beside the dispatch (on the SMs it leaves, then on all) and each tile
                              * waits for the sources of its rows, which send expert by expert (sm_90) */
} loom_moe_mlp_path_t;

typedef struct loom_moe_plan_info {
  size_t struct_size;      /* sizeof(loom_moe_plan_info_t) */
  int local_experts;       /* n(rank) */
  int first_expert;        /* begin(rank) */
  int64_t max_recv_rows;   /* R: rows the receive buffer holds */
  void *recv;              /* [R, H] the receive buffer (after a dispatch: rows [0, expert_offsets[n])) */
  const int64_t *expert_offsets; /* device [n + 1]: local expert l's rows are [off[l], off[l+1]) */
  size_t symmetric_bytes;  /* loom_malloc'd by the plan */
  size_t device_bytes;     /* cudaMalloc'd by the plan */
} loom_moe_plan_info_t;
#define LOOM_MOE_PLAN_INFO_INIT { sizeof(loom_moe_plan_info_t), 0, 0, 0, NULL, NULL, 0, 0 }

/* Collective: a dispatch / combine plan for this description. */
loom_result_t loom_plan_moe(loom_comm_t comm, const loom_moe_desc_t *desc, loom_plan_t *out);

/* The plan's buffers and layout (host call, no synchronisation). */
loom_result_t loom_moe_plan_info(loom_plan_t plan, loom_moe_plan_info_t *info);

/* Collective, stream-ordered: x [tokens, H], ids [tokens, k] (device),
 * 0 <= tokens <= max_tokens (may differ per rank). Complete on `stream`
 * once every rank's rows for this rank's experts are in its receive
 * buffer. */
loom_result_t loom_moe_dispatch(loom_plan_t plan, const void *x, const int32_t *ids, int64_t tokens,
                                cudaStream_t stream);

/* Collective, stream-ordered: y [expert_offsets[n], H] in the receive
 * layout (may be info.recv), weights [tokens, k] fp32 of the last
 * dispatch's tokens, out [tokens, H] (any device memory; it may overlap y:
 * y is read into the sources' buffers before out is written). */
loom_result_t loom_moe_combine(loom_plan_t plan, const void *y, const float *weights, void *out,
                               cudaStream_t stream);

/* Collective, stream-ordered: the whole expert MLP layer of a plan made
 * with desc->ffn = F > 0, as one call:
 *   dispatch  loom_moe_dispatch(x, ids, tokens)
 *   gate/up   h [rows, F] = silu(recv_l Wgate_l^T) x (recv_l Wup_l^T) per
 *             local expert l: a grouped GEMM over expert_offsets whose
 *             epilogue applies SwiGLU (fp32, rounded once)
 *   down      y [rows, H] = h_l x down_l^T, into the receive buffer
 *   combine   loom_moe_combine(y, weights, out)
 * or fused (loom_moe_mlp_path): the down GEMM's epilogue stores each row
 * of y straight into its token's rank, and the combine only reduces.
 * gate_up [n, 2F, H] and down [n, H, F] (dtype, n = local_experts, the
 * rank's experts first_expert.. in order, each as nn.Linear stores its
 * weight: [out, in]); rows [0, F) of gate_up_l are the gate's, [F, 2F) the
 * up projection's. h and y are rounded to dtype. out [tokens, H]. A rank
 * without experts passes NULL weights. The plan holds h (worst-case rows:
 * loom_moe_plan_info's device_bytes). */
loom_result_t loom_moe_mlp(loom_plan_t plan, const void *x, const int32_t *ids, const float *weights, int64_t tokens,
                           const void *gate_up, const void *down, void *out, cudaStream_t stream);

/* The form (FUSED, UNFUSED or FUSED_ALL) a loom_moe_mlp
 * call of `tokens` runs on this rank: desc->mlp_path, or where that is
 * AUTO, the tuning cache's entry for this plan's shape and the tokens'
 * bucket (the next power of two), else fused-all from 512 tokens on and
 * fused below. Host call. */
loom_result_t loom_moe_mlp_path(loom_plan_t plan, int64_t tokens, loom_moe_mlp_path_t *path);

/* Collective, synchronizes `stream` (not while it captures a graph): times
 * loom_moe_mlp on these arguments in its three forms with tiles of its two
 * grouped GEMMs and, for fused-all, the dispatch's share of the SMs (the
 * untuned default and 22 candidates; 3 rounds over them
 * of 1 warm-up and 4 timed calls each; a candidate's time is its median
 * round, each the largest over the ranks, so every rank picks the same; a
 * candidate replaces the default only when 2% faster), and
 * records the fastest for this shape and the tokens' bucket in the tuning
 * cache, which AUTO calls then run (LOOM_TUNE_FILE: written back by rank
 * 0). Same arguments and checks as loom_moe_mlp; out holds the layer's
 * output afterwards. */
loom_result_t loom_moe_mlp_tune(loom_plan_t plan, const void *x, const int32_t *ids, const float *weights,
                                int64_t tokens, const void *gate_up, const void *down, void *out,
                                cudaStream_t stream);

/* ==== Collectives with a fused epilogue ================================= */
/*
 * AllReduce, ReduceScatter and AllGather over symmetric memory, with the
 * pointwise epilogue and a row-wise norm applied between the reduction and
 * the gather: out = LayerNorm(dropout(AllReduce(x) + bias) + residual) in
 * one call.
 *
 *   loom_allreduce       out [count] = epilogue(sum over ranks of in [count])
 *   loom_reduce_scatter  out [my slice] = epilogue(sum over ranks of in [count]),
 *                        this rank's slice
 *   loom_all_gather      out [count] = the ranks' slices in [slice] side by side
 *
 * Slices: the vector is cut in units of 8 elements (flat, desc.cols = 0) or
 * of whole rows (desc.cols > 0: count = rows x cols), and rank p owns
 * elements [min(count, p S), min(count, (p+1) S)) with S = ceil(ceil(count
 * / unit) / W) x unit elements (loom_coll_plan_info gives this rank's:
 * my_begin, my_len): the tensor-parallel shards' rule in units. Any count
 * works: the last slices are shorter or empty (count = 1, W = 2: rank 1
 * owns nothing; count = 40 flat, W = 4: 16, 16, 8, 0).
 *
 * Arithmetic: every element is summed over the ranks in fp32 in rank order
 * 0..W-1 (the same bits on every rank, run and algorithm), the epilogue
 * and the norm run in fp32, and the result is rounded once to
 * desc.out_type.
 *
 * Epilogue (loom_allreduce, loom_reduce_scatter; NULL: none): as
 * loom_epilogue_t says, at element i = row x cols + col of the full vector
 * (flat: i is the position; bias [cols] needs desc.cols > 0); residual has
 * out's shape: [count] for loom_allreduce, this rank's slice for
 * loom_reduce_scatter. bias and residual are of out_type. With desc.norm
 * each row x of the pointwise result (fp32, not rounded; n = cols) is then
 * normalised:
 *   LOOM_NORM_RMS    y = x * rsqrt(sum(x^2) / n + eps) * w
 *   LOOM_NORM_LAYER  mean = sum(x) / n,  var = sum((x - mean)^2) / n (biased)
 *                    y = (x - mean) * rsqrt(var + eps) * w (+ b)
 * (/ n as a multiplication by fp32(1 / n); rsqrt the GPU's rsqrtf; w, b =
 * norm_weight, norm_bias [cols] of out_type; eps = desc.norm_eps), and y is
 * rounded once to out_type. The slices are whole rows, so each rank
 * normalises its own rows before the gather.
 *
 * Algorithms (loom_allreduce; loom_coll_plan_info says which):
 *   ONE_SHOT  each rank loads every rank's whole input and reduces all of it
 *   TWO_SHOT  each rank reduces its slice and applies the epilogue to it,
 *             then the ranks load each other's results (one kernel)
 *   LL        each rank stores its whole input into every peer's buffer,
 *             each 4-byte word with a 4-byte flag (the call's epoch) in one
 *             8-byte store, and reduces the words as their flags arrive;
 *             with desc.norm, cols must be a multiple of 8
 *   PUSH      each rank stores its whole input into every peer's buffer in
 *             chunks, a flag after each, and reduces each chunk from its own
 *             memory once every peer's flag is set
 *   AUTO      LL where it applies, up to LOOM_ALLREDUCE_LL_BYTES / (W-1)
 *             bytes of input (count x dtype size; default 1 MiB), else PUSH
 *             up to LOOM_ALLREDUCE_PUSH_BYTES (default 4 MiB), else
 *             ONE_SHOT up to LOOM_ALLREDUCE_ONE_SHOT_BYTES (default 16 MiB),
 *             these two only while (W-1)(W-2)/W x bytes stays at most 2 MiB,
 *             else TWO_SHOT.
 *             LL, PUSH and ONE_SHOT apply the epilogue to every element on
 *             every rank, TWO_SHOT to the rank's slice only.
 *
 * Memory: `in` is loom_malloc memory (peers load from it); `out` may be any
 * device memory of this GPU (peers never touch it). in and out 16-byte
 * aligned, except where in place says otherwise. loom_all_gather: every
 * rank's `in` with room for the largest slice (S elements), passed even
 * where this rank's slice is empty (its offset names the peers').
 * In place (any count and row width the out-of-place call takes):
 *   loom_allreduce       out == in, out_type == dtype
 *   loom_reduce_scatter  out == in + my_begin (elements), out_type == dtype,
 *                        my_len > 0; out needs no alignment
 *   loom_all_gather      in == out + my_begin on every rank (my_len may be
 *                        0); in needs no alignment; out is then loom_malloc
 *                        memory at the same offset on every rank
 * Any other overlap of in and out is refused. A ReduceScatter rank whose
 * slice is empty (my_len = 0) has no output: its `out` is neither checked
 * nor touched (NULL or any pointer).
 * A two-shot plan holds a symmetric staging buffer of S elements, a
 * one-shot plan one of count elements (for in place), an LL plan one of
 * 4 (W-1) x count x dtype size bytes (two of W-1 slots of twice the input),
 * a PUSH plan one of 2 (W-1) x count x dtype size bytes and a flag per
 * chunk; ReduceScatter and AllGather plans none.
 *
 * After the call completes on `stream`, `in` and `out` may be reused as
 * after an NCCL call. Every rank of the comm must be load/store reachable
 * (one NVLink domain), at most 64 ranks (else LOOM_ERR_UNSUPPORTED at plan
 * creation).
 */

typedef enum loom_coll_algo {
  LOOM_COLL_AUTO = 0,
  LOOM_COLL_ONE_SHOT = 1,
  LOOM_COLL_TWO_SHOT = 2,
  LOOM_COLL_LL = 3,
  LOOM_COLL_PUSH = 4
} loom_coll_algo_t;

typedef enum loom_norm {
  LOOM_NORM_NONE = 0,
  LOOM_NORM_RMS = 1,
  LOOM_NORM_LAYER = 2
} loom_norm_t;

typedef struct loom_coll_desc {
  size_t struct_size;     /* sizeof(loom_coll_desc_t) */
  int64_t count;          /* elements of the full vector, 1..2^40 */
  loom_dtype_t dtype;     /* in */
  loom_dtype_t out_type;  /* out (and bias, residual, norm weight/bias); loom_all_gather: = dtype */
  int64_t cols;           /* 0: a flat vector; > 0: rows of cols (count a multiple): slices are whole
                             rows; needed for a bias and for desc.norm */
  loom_norm_t norm;       /* row-wise norm after the pointwise epilogue (not loom_all_gather);
                             cols <= 32768 */
  float norm_eps;         /* finite and > 0 */
  loom_coll_algo_t algo;  /* loom_allreduce only (others: LOOM_COLL_AUTO) */
  int world_size;         /* must equal the comm's size */
  int blocks;             /* blocks of the kernel (1 .. SMs); 0: chosen by size */
} loom_coll_desc_t;
#define LOOM_COLL_DESC_INIT \
  { sizeof(loom_coll_desc_t), 0, LOOM_BF16, LOOM_BF16, 0, LOOM_NORM_NONE, 1e-5f, LOOM_COLL_AUTO, 0, 0 }

/* What a plan chose. */
typedef struct loom_coll_plan_info {
  size_t struct_size;       /* sizeof(loom_coll_plan_info_t) */
  loom_coll_algo_t algo;    /* loom_allreduce: LL, PUSH, ONE_SHOT or TWO_SHOT; others AUTO */
  int64_t slice_elems;      /* S: the largest slice */
  int64_t my_begin, my_len; /* this rank's slice */
  int64_t chunk_elems;      /* elements per chunk signal */
  int blocks;               /* the kernel's blocks */
  size_t one_shot_max_bytes;/* the AUTO threshold in force */
  int deterministic;        /* 1: the same bits on every run (always) */
  size_t symmetric_bytes;   /* loom_malloc memory the plan holds on this rank */
  size_t workspace_bytes;   /* of the comm's symmetric workspace (signals) */
} loom_coll_plan_info_t;
#define LOOM_COLL_PLAN_INFO_INIT { sizeof(loom_coll_plan_info_t), LOOM_COLL_AUTO, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* Collective. Chooses the algorithm, allocates the staging buffer and
 * signals. Ranks whose LOOM_ALLREDUCE_* settings resolve different
 * algorithms count as differing; a rank that refuses its description makes
 * the others fail ("another rank refused its arguments"). loom_plan_destroy
 * waits for the plan's last call made on a stream. */
loom_result_t loom_plan_allreduce(loom_comm_t comm, const loom_coll_desc_t *desc, loom_plan_t *out);
loom_result_t loom_plan_reduce_scatter(loom_comm_t comm, const loom_coll_desc_t *desc, loom_plan_t *out);
loom_result_t loom_plan_all_gather(loom_comm_t comm, const loom_coll_desc_t *desc, loom_plan_t *out);

/* Fills *info (plans of the three above). */
loom_result_t loom_coll_plan_info(loom_plan_t plan, loom_coll_plan_info_t *info);

/* Collective, stream-ordered. in [count] dtype (loom_malloc memory), out
 * [count] out_type; epi NULL or a loom_epilogue_t; norm_weight [cols] iff
 * desc.norm, norm_bias [cols] or NULL (LOOM_NORM_LAYER only). */
loom_result_t loom_allreduce(loom_plan_t plan, const void *in, void *out, const loom_epilogue_t *epi,
                             const void *norm_weight, const void *norm_bias, cudaStream_t stream);

/* Collective, stream-ordered. in [count] dtype (loom_malloc memory), out
 * this rank's slice [my_len] out_type (any pointer, NULL included, when
 * my_len = 0); epilogue and norm as loom_allreduce (residual: [my_len]). */
loom_result_t loom_reduce_scatter(loom_plan_t plan, const void *in, void *out, const loom_epilogue_t *epi,
                                  const void *norm_weight, const void *norm_bias, cudaStream_t stream);

/* Collective, stream-ordered. in this rank's slice [my_len] dtype
 * (loom_malloc memory, room for S elements; never NULL), out [count] dtype. */
loom_result_t loom_all_gather(loom_plan_t plan, const void *in, void *out, cudaStream_t stream);

/* ==== The loom language: programs over distributed tensors ============== */
/*
 * A program (CoCoNet's language, docs/language.md) says what a distributed
 * layer computes: tensors with a dtype, a symbolic shape and a layout
 * (Sliced(d), Replicated, Local, Root(r)) in WORLD or in a pipeline group,
 * and operations on them (MatMul, collectives, Send, pointwise functions,
 * norms, Update of state). Transformations (split, reorder, fuse, fuseComm,
 * overlap, asSlice, dead) turn it into schedules that compute the same
 * results. Programs come from .loom text (loom_prog_parse) or from the
 * builder calls below; both make the same graph. Everything here runs on
 * the host: no GPU, no comm. A program is used by one thread at a time.
 */
typedef struct loom_prog *loom_prog_t;

/* A tensor's layout (loom_prog_tensor). */
typedef enum loom_prog_layout {
  LOOM_PROG_SLICED = 0,     /* equal slices along dimension `arg`, rank q holds slice q */
  LOOM_PROG_REPLICATED = 1, /* the same value on every rank of the group */
  LOOM_PROG_LOCAL = 2,      /* the same shape, a different value on every rank */
  LOOM_PROG_ROOT = 3        /* on rank `arg` of the group only (a Reduce's result) */
} loom_prog_layout_t;
#define LOOM_PROG_WORLD (-1) /* group: every rank; i >= 0: pipeline stage GROUP(i) */

/* An operation's attributes; each op reads the ones it takes (docs/language.md). */
typedef struct loom_prog_attr {
  size_t struct_size; /* sizeof(loom_prog_attr_t) */
  double value;       /* Dropout: p in [0, 1); RMSNorm / LayerNorm: eps (0: the default) */
  uint64_t seed;      /* Dropout */
  int dim;            /* AllToAll, Slice: the dimension of the result's slices */
  int root;           /* Reduce, Broadcast */
  int reduce;         /* AllReduce, ReduceScatter, Reduce: 0 "+", 1 "max", 2 "min" */
  loom_dtype_t dtype; /* Cast: the dtype to cast to */
  int group_offset;   /* Send: GROUP + group_offset (>= 1) */
} loom_prog_attr_t;
#define LOOM_PROG_ATTR_INIT { sizeof(loom_prog_attr_t), 0.0, 0, 0, 0, 0, LOOM_FP32, 1 }

/* Parses .loom text (`file` names it in messages; NULL: "<text>") into a
 * new program. A parse error is LOOM_ERR_INVALID_ARGUMENT with
 * "file:line:column: found X; expected Y". Types are not checked here
 * (loom_prog_check). Destroy *out with loom_prog_destroy. */
loom_result_t loom_prog_parse(const char *text, const char *file, loom_prog_t *out);

/* An empty program for the builder calls below. */
loom_result_t loom_prog_create(loom_prog_t *out);

/* Frees a program (NULL: nothing). */
loom_result_t loom_prog_destroy(loom_prog_t prog);

/* Declares an input tensor: shape as text ("B, S, H": symbols and positive
 * integers, "" for a scalar), layout and arg (the dimension of Sliced, the
 * rank of Root), group LOOM_PROG_WORLD or a stage i >= 0. *id: its value id. */
loom_result_t loom_prog_tensor(loom_prog_t prog, const char *name, loom_dtype_t dtype, const char *shape,
                               loom_prog_layout_t layout, int arg, int group, int *id);

/* A constant (Replicated, fits any group). */
loom_result_t loom_prog_const(loom_prog_t prog, double value, int *id);

/* Appends operation `op` (the .loom spelling: "MatMul", "AllReduce", "+",
 * "<", "Dropout", "Update", "Send", ...) on the values `inputs`; attr NULL:
 * LOOM_PROG_ATTR_INIT. *id: the result's value id (anonymous until named).
 * An unknown op, a wrong operand count or id is LOOM_ERR_INVALID_ARGUMENT. */
loom_result_t loom_prog_op(loom_prog_t prog, const char *op, const int *inputs, int ninputs, const loom_prog_attr_t *attr,
                           int *id);

/* Names value id (a Var); a name already used is LOOM_ERR_INVALID_ARGUMENT. */
loom_result_t loom_prog_name(loom_prog_t prog, int id, const char *name);

/* The program's Execute: its name, its input tensors and its outputs. */
loom_result_t loom_prog_execute(loom_prog_t prog, const char *name, const int *inputs, int ninputs, const int *outputs,
                                int noutputs);

/* Infers every value's dtype, shape and layout; the first error names its
 * place and what was expected ("AllGather: operand `x` is Replicated;
 * AllGather needs Sliced(d)"). */
loom_result_t loom_prog_check(loom_prog_t prog);

/* The program as .loom text (typed: with each Var's type as a comment) into
 * buf (cap bytes, NUL-terminated; *len: the length without the NUL, also
 * when it does not fit: then LOOM_ERR_INVALID_ARGUMENT and buf holds as
 * much as fits). buf may be NULL with cap 0 to ask for the length. */
loom_result_t loom_prog_print(loom_prog_t prog, int typed, char *buf, size_t cap, size_t *len);

/* *equal = 1 if the two programs are the same graph (names, operations,
 * attributes, layouts, Execute, states, kernels), else 0. */
loom_result_t loom_prog_equal(loom_prog_t a, loom_prog_t b, int *equal);

/* Applies one transformation statement ("(rs, ag) = split(sum,
 * AllReduceSplitRSAG)") to prog. One that does not apply is
 * LOOM_ERR_INVALID_ARGUMENT saying why, and prog is unchanged. */
loom_result_t loom_prog_transform(loom_prog_t prog, const char *statement);

/* A copy of prog with its `Schedule name { ... }` section applied (NULL or
 * "": none, a plain copy). */
loom_result_t loom_prog_schedule(loom_prog_t prog, const char *name, loom_prog_t *out);

/* Runs prog on the CPU with `world` simulated ranks per group (1..64),
 * sizes bound by `bind` ("B=8,S=16"), inputs drawn from `seed`, and copies
 * the logical value of output `output` (Execute's name for it, "#i" for its
 * i-th output, or a state tensor's name) into values (cap elements; Local
 * values: `world` copies back to back); *count: its element count. */
loom_result_t loom_prog_interp(loom_prog_t prog, int world, const char *bind, uint64_t seed, const char *output,
                               double *values, size_t cap, size_t *count);

/* Runs both programs as loom_prog_interp does and sets *max_diff to the
 * largest |x - y| / max(1, |x|) over their outputs and states (0: bit-exact).
 * Programs whose results differ in number or shape are LOOM_ERR_INVALID_ARGUMENT. */
loom_result_t loom_prog_interp_compare(loom_prog_t a, loom_prog_t b, int world, const char *bind, uint64_t seed,
                                       double *max_diff);

/* ---- loom programs on GPUs (code generation) ---------------------------- */
/*
 * A program compiled for the ranks of a comm runs as a plan: each unit of
 * its schedule (docs/language.md, "Code generation") is a loom_gemm or a
 * kernel generated from the program, compiled at run time by NVRTC for this
 * GPU (cached in memory and in LOOM_CACHE_DIR) after the model checker has
 * proven its protocol. Generated kernels reach peers through peer pointers
 * and loom's signals only (one NVLink domain, or a world of W ranks on one
 * GPU); every device-side wait is bounded.
 */

/* Compiles prog for comm's ranks, sizes bound by `bind` ("B=8,S=1024"):
 * a program of G pipeline groups runs on G x W ranks (W = comm size / G).
 * schedule names what runs:
 *   NULL or ""       the program's entry in the tuning cache (loom_prog_tune)
 *                    for these sizes and a comm of this shape; without one,
 *                    the cost model's cheapest schedule (`loom schedules` at
 *                    depth 6, at most 200 programs) that takes the program's
 *                    inputs and outputs as written
 *   "unscheduled"    the program as written
 *   "NAME"           its `Schedule NAME { ... }`, or the schedule `loom
 *                    schedules` lists as NAME ("s41")
 *   "NAME/bN"        the same, its generated kernels at most N blocks per SM
 *                    (1..4; the tuner's knob)
 *   "sequential"     the program as written as loom's ops one after another:
 *                    each plain AllReduce / ReduceScatter / AllGather (sums,
 *                    slices along dimension 0) as loom_allreduce /
 *                    loom_reduce_scatter / loom_all_gather, MatMuls as
 *                    loom_gemm, the rest generated
 *   "cublaslt+nccl"  the same through NCCL's collectives and cuBLASLt (a comm
 *                    with an NCCL communicator; equal slices)
 * loom_prog_plan_info names what it chose. Collective: every rank passes the
 * same program, schedule and bind (prog is only read: the threads of a
 * world's ranks may share it). Refused (LOOM_ERR_INVALID_ARGUMENT /
 * _UNSUPPORTED, saying why): an unknown or refused schedule, an unbound
 * size, a comm size that is no multiple of G, ranks that cannot load/store
 * each other's memory, what the code generator does not take (an FP32
 * MatMul). *out is loom_plan_destroy'ed. */
loom_result_t loom_prog_compile(loom_comm_t comm, loom_prog_t prog, const char *schedule, const char *bind,
                                loom_plan_t *out);

/* Runs a compiled program (loom_prog_execute is the builder's Execute
 * statement): inputs[i] is this rank's piece of input i,
 * outputs[j] receives this rank's piece of output j (Execute's outputs,
 * then each state's new value, states by tensor name), each as
 * loom_prog_plan_io describes it: device memory, dense, row-major; NULL
 * where this rank holds none. Outputs may not overlap inputs or each other.
 * Collective, stream-ordered, CUDA-graph capturable (each replay is a new
 * call). A peer that never calls makes the waits of the others expire: the
 * plan's next call returns LOOM_ERR_TIMEOUT naming the stage that waited. */
loom_result_t loom_prog_run(loom_plan_t plan, const void *const *inputs, void *const *outputs, cudaStream_t stream);

/* One input or output of a compiled program on this rank. */
typedef struct loom_prog_io {
  size_t struct_size;         /* sizeof(loom_prog_io_t) */
  char name[48];              /* the tensor's name (an output: Execute's name for it, or the state's) */
  loom_dtype_t dtype;
  int rank;                   /* dimensions */
  int64_t dims[6];            /* this rank's piece (zeros where it holds none) */
  int64_t count;              /* its elements */
  int64_t whole[6];           /* the whole tensor */
  loom_prog_layout_t layout;
  int arg;                    /* Sliced: the dimension; Root: the rank in the group */
  int group;                  /* LOOM_PROG_WORLD or the pipeline group */
  int64_t offset;             /* Sliced: where this rank's piece starts along dimension arg */
  int held;                   /* 1 if this rank holds a piece (its group; the root of a Root value) */
} loom_prog_io_t;
#define LOOM_PROG_IO_INIT { sizeof(loom_prog_io_t), "", LOOM_FP32, 0, {0}, 0, {0}, LOOM_PROG_SLICED, 0, 0, 0, 0 }

/* A compiled program. */
typedef struct loom_prog_plan_info {
  size_t struct_size;         /* sizeof(loom_prog_plan_info_t) */
  int ninputs, noutputs;      /* loom_prog_execute's arrays */
  int world, groups;          /* ranks per group, pipeline groups */
  int units, kernels;         /* the launches of a call (GEMMs and generated kernels); the generated kernels */
  int compiled;               /* kernels NVRTC compiled for this plan (the others came from the caches) */
  double compile_ms;          /* this rank's time getting them (NVRTC or the caches) */
  size_t arena_bytes;         /* the plan's symmetric memory (loom_malloc) */
  size_t workspace_bytes;     /* of the comm's workspace (signals) */
  char schedule[48];          /* what it runs, by name (loom_prog_compile's schedule): the one named, the tuning
                                 cache's, or the cost model's ("unscheduled", "best", "s19/b2", "sequential") */
} loom_prog_plan_info_t;
#define LOOM_PROG_PLAN_INFO_INIT { sizeof(loom_prog_plan_info_t), 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0, "" }

/* Input (output = 0) or output (1) number i of a compiled program on this rank. */
loom_result_t loom_prog_plan_io(loom_plan_t plan, int output, int i, loom_prog_io_t *io);
loom_result_t loom_prog_plan_info(loom_plan_t plan, loom_prog_plan_info_t *info);

/* One schedule loom_prog_tune listed. */
typedef struct loom_prog_tune_row {
  char schedule[48];    /* "unscheduled" (the program as written), a Schedule section, or the search's ("s41") */
  int own;              /* 1: a Schedule section of the program */
  double predicted_us;  /* the cost model's time (`loom schedules`) */
  double measured_us;   /* the median of its rounds' time per call (the slowest rank's); < 0: not run */
  int eligible;         /* 1: takes the program's inputs and outputs as written (may replace it) */
  char note[160];       /* why it was left out or is not eligible ("" otherwise) */
} loom_prog_tune_row_t;

/* What loom_prog_tune did; depth, max, rows and cap are read. */
typedef struct loom_prog_tune_result {
  size_t struct_size;          /* sizeof(loom_prog_tune_result_t) */
  int depth, max;              /* the search's moves (0..32) and programs (1..4000): `loom schedules`' 6, 200 */
  loom_prog_tune_row_t *rows;  /* room for cap rows, or NULL (cap 0) */
  int cap;
  int n;                       /* rows listed (min(n, cap) filled); row 0 is the default */
  int winner;                  /* the row recorded */
  double rank_correlation;     /* Spearman's, predicted against measured, over the rows run (NaN: < 2) */
  char key[160], value[160];   /* the tuning-cache entry recorded */
} loom_prog_tune_result_t;
#define LOOM_PROG_TUNE_RESULT_INIT { sizeof(loom_prog_tune_result_t), 6, 200, NULL, 0, 0, 0, 0.0, "", "" }

/* Collective (every rank the same prog and bind); synchronizes stream (not
 * while it captures). Compiles, as plans of their own, the program as
 * written ("unscheduled": the default to beat), every schedule `loom
 * schedules` lists at this comm's W and bind (one the code generator
 * refuses is left out, saying why) and the program as written run as
 * "sequential" and "cublaslt+nccl" (loom_prog_compile's run names; each
 * where it has a plain collective or a MatMul, the second left out without
 * an NCCL communicator), times their calls on inputs of its own (random,
 * never zero) by loom's tuning rule (the slowest rank's median over
 * rounds; another must beat the default by 2%); then races the three
 * fastest eligible candidates with generated kernels at fewer blocks per
 * SM ("NAME/b2", "NAME/b1": the knob's round, noted so) against the first
 * race's winner (every plan of the tuner tunes each GEMM shape the tuning
 * cache lacks at its first call, as loom_gemm_tune, so schedules race at
 * their GEMMs' tuned tiles), and records the fastest that takes the
 * program's inputs and outputs as written in the tuning cache (rank 0 writes LOOM_TUNE_FILE
 * where set): a later loom_prog_compile of the program with these sizes on
 * a comm of this shape and a NULL or "" schedule runs it; a named schedule
 * is never replaced. result: NULL (the search's defaults), or read and
 * filled; rows: at most LOOM_PROG_TUNE_ROWS(nsched, max) (nsched: the
 * program's Schedule sections). In a one-GPU world the times are not W
 * GPUs' and the entry is keyed to the world. */
#define LOOM_PROG_TUNE_ROWS(nsched, max) (1 + (nsched) + (max) + 2 + 3 * 2)
loom_result_t loom_prog_tune(loom_comm_t comm, loom_prog_t prog, const char *bind, cudaStream_t stream,
                             loom_prog_tune_result_t *result);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* LOOM_H */
