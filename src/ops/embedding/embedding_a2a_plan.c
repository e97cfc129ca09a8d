/*
 * embedding_a2a_plan.c - host side of the fused embedding-bag + All-to-All:
 * description checks, path choice, plan creation (workspace for flags and
 * counters, device copies of the table shapes, the host-mapped index-error
 * record, the sorted backward's memory pool), and the calls (forward,
 * backward, pooling alone, check).
 *
 * Paths (see loom.h): zero-copy (every rank load/store reachable: one fused
 * kernel stores pooled rows into the peers' outputs), GIN (compile-only so
 * far: other nodes through ncclGin puts; embedding_a2a_gin.cu), staged
 * (pooling kernel into a send buffer, NCCL send/recv in a group, a reorder
 * into the output; the fallback, logged once).
 *
 * Backward: fp32 tables add with fp32 atomics (one kernel); fp16/bf16 tables
 * take the sorted backward (embedding_a2a_sorted.cu: fp32 sums per row, one
 * rounding), whose per-call scratch comes stream-ordered from the plan's own
 * memory pool (kept cached between calls, released with the plan).
 *
 * Synchronisation: nothing here waits for the device as a whole. Every call
 * records the plan's event on its stream (inside a capture, as an event node,
 * so graph replays record it too); destroying the plan or re-cutting its work
 * (test hooks) waits for that event only.
 *
 * Epochs: kernels take theirs from the plan's device call counter (graph
 * replays advance it); the host's plan->epoch is advanced too, unused here.
 */
#include "ops/embedding/embedding_a2a.h"
#include "ops/embedding/embedding_protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/util.h"
#include "core/handle.h"
#include "core/log.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/ptr_check.h"
#include "core/world.h"

/* The kernels' wait sites, named from the protocol's table of signals. */
__attribute__((constructor)) static void loom__emb_wait_sites(void) {
  loom__proto_register_sites(loom__emb_signals, LOOM__EMB_NSIG);
}

static const char *pool_name(int p) { return p == LOOM_POOL_SUM ? "sum" : p == LOOM_POOL_MEAN ? "mean" : "?"; }

/* The description's header and its tables. */
static loom_result_t emb_check_tables(const char *fn, const loom_embedding_desc_t *d, int size) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL", fn);
  if (d->struct_size != sizeof(loom_embedding_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_EMBEDDING_DESC_INIT)",
                      fn, d->struct_size, sizeof(loom_embedding_desc_t));
  if (d->world_size != size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->world_size=%d but the comm has %d ranks", fn,
                      d->world_size, size);
  if (!d->tables_per_rank) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->tables_per_rank=NULL", fn);
  if (!d->rows) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->rows=NULL", fn);
  int64_t total = 0;
  for (int p = 0; p < size; ++p) {
    if (d->tables_per_rank[p] < 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->tables_per_rank[%d]=%d must be >= 0", fn, p,
                        d->tables_per_rank[p]);
    total += d->tables_per_rank[p];
  }
  if (total < 1 || total > (1 << 20))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: the ranks own %lld tables in all; must be 1..%d", fn,
                      (long long)total, 1 << 20);
  for (int64_t g = 0; g < total; ++g)
    if (d->rows[g] < 1)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->rows[%lld]=%lld must be >= 1", fn, (long long)g,
                        (long long)d->rows[g]);
  return LOOM_SUCCESS;
}

/* The batch, pooling, dtypes, slicing and grid, and the tables' bytes. */
static loom_result_t emb_check_batch(const char *fn, const loom_embedding_desc_t *d, int size) {
  if (d->dim < 8 || d->dim > 1024 || d->dim % 8 != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->dim=%d must be a multiple of 8 in 8..1024", fn,
                      d->dim);
  if (d->global_batch < size || d->global_batch % size != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->global_batch=%lld must be a positive multiple of the world size %d", fn,
                      (long long)d->global_batch, size);
  if (d->global_batch > ((int64_t)1 << 31))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->global_batch=%lld exceeds 2^31", fn,
                      (long long)d->global_batch);
  if (d->pooling != LOOM_POOL_SUM && d->pooling != LOOM_POOL_MEAN)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->pooling=%d (LOOM_POOL_SUM or LOOM_POOL_MEAN)", fn,
                      (int)d->pooling);
  if (d->per_sample_weights != 0 && d->per_sample_weights != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->per_sample_weights=%d must be 0 or 1", fn,
                      d->per_sample_weights);
  if (d->per_sample_weights && d->pooling != LOOM_POOL_SUM)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->per_sample_weights=1 with pooling=%s: weights need LOOM_POOL_SUM (as in "
                      "PyTorch's EmbeddingBag)", fn, pool_name(d->pooling));
  if (!loom__dtype_known(d->table_type))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->table_type=%d (LOOM_FP32, LOOM_FP16 or LOOM_BF16)",
                      fn, (int)d->table_type);
  if (!loom__dtype_known(d->out_type))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->out_type=%d (LOOM_FP32, LOOM_FP16 or LOOM_BF16)", fn,
                      (int)d->out_type);
  if (d->slice_samples < 0 || d->slice_samples > (1 << 24))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->slice_samples=%d must be 0 (default) or 1..2^24",
                      fn, d->slice_samples);
  if (d->grid_blocks < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->grid_blocks=%d must be >= 0", fn, d->grid_blocks);
  const int64_t max_rows = ((int64_t)1 << 62) / ((int64_t)d->dim * 4);
  for (int p = 0, g = 0; p < size; ++p) {
    int64_t sum = 0;
    for (int t = 0; t < d->tables_per_rank[p]; ++t, ++g) sum = loom__emb_add_sat(sum, d->rows[g]);
    if (sum > max_rows)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "%s: desc->rows: rank %d's tables hold %lld rows of dim %d, more than %lld (2^62 bytes of "
                        "fp32)", fn, p, (long long)sum, d->dim, (long long)max_rows);
  }
  if (d->check_indices_sync != 0 && d->check_indices_sync != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->check_indices_sync=%d must be 0 or 1", fn,
                      d->check_indices_sync);
  return LOOM_SUCCESS;
}


loom_result_t loom__emb_validate_desc(const char *fn, const loom_embedding_desc_t *d, int size, int rank) {
  (void)rank;
  LOOM_TRY(emb_check_tables(fn, d, size));
  return emb_check_batch(fn, d, size);
}

loom_result_t loom__emb_check_opts(const char *fn, const loom__emb_plan_opts_t *o, int size) {
  if (o->local_first != 0 && o->local_first != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: opts->local_first=%d must be 0 or 1", fn, o->local_first);
  if ((int)o->path < 0 || (int)o->path > 3)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: opts->path=%d is not a loom_embedding_path_t", fn,
                      (int)o->path);
  if (size > LOOM_EMB_MAX_LSA && (o->path == LOOM_EMB_PATH_ZERO_COPY))
    return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: the zero-copy path handles at most %d ranks, the comm has %d",
                      fn, LOOM_EMB_MAX_LSA, size);
  return LOOM_SUCCESS;
}

/* Frees what the plan holds (op.h: release; its last call has ended); a
 * failure is logged (destroy goes on). */
static void emb_release(loom_comm_t comm, void *state) {
  loom_emb_state_t *st = (loom_emb_state_t *)state;
  if (!comm->detached) {
    void *dev[5] = {st->d_row_off, st->d_rows, st->d_table_base, st->send_buf, st->recv_buf};
    for (int i = 0; i < 5; ++i) {
      if (!dev[i]) continue;
      cudaError_t e = cudaFree(dev[i]);
      if (e != cudaSuccess) LOOM_WARN("loom_plan_destroy (embedding): cudaFree: %s", cudaGetErrorString(e));
    }
    if (st->err_host) {
      cudaError_t e = cudaFreeHost(st->err_host);
      if (e != cudaSuccess) LOOM_WARN("loom_plan_destroy (embedding): cudaFreeHost: %s", cudaGetErrorString(e));
    }
    if (st->pool) { /* released once allocations still in flight are freed */
      cudaError_t e = cudaMemPoolDestroy(st->pool);
      if (e != cudaSuccess) LOOM_WARN("loom_plan_destroy (embedding): cudaMemPoolDestroy: %s", cudaGetErrorString(e));
    }
    if (st->gin_devcomm) loom__emb_gin_release(comm->nccl, st->gin_devcomm);
  }
  free(st->tables_per_rank);
  free(st->rows);
  free(st->table_base);
}

/* Grid from the SM count and the forward kernel's residency. All blocks
 * need not be resident for progress (waits come after the last task), but a
 * grid past residency only queues blocks. */
static loom_result_t size_grid(loom_plan_t plan, loom_emb_state_t *st) {
  loom_comm_t comm = plan->comm;
  LOOM_TRY(loom__emb_occupancy(st->desc.table_type, st->desc.out_type, st->desc.dim, &st->blocks_per_sm));
  int bps = st->blocks_per_sm > 4 ? 4 : st->blocks_per_sm;
  st->grid = st->desc.grid_blocks ? st->desc.grid_blocks : comm->sm_count * bps;
  if (st->grid > comm->sm_count * st->blocks_per_sm) st->grid = comm->sm_count * st->blocks_per_sm;
  return LOOM_SUCCESS;
}

static const char *path_name(int p) {
  switch (p) {
    case LOOM_EMB_PATH_ZERO_COPY: return "zero-copy";
    case LOOM_EMB_PATH_GIN: return "GIN";
    case LOOM_EMB_PATH_STAGED: return "staged (pooling + NCCL send/recv)";
  }
  return "auto";
}


/* The sorted backward's memory pool: device memory of the comm's device,
 * kept (release threshold: never) so that calls after the first reuse it. */
static loom_result_t make_pool(loom_comm_t comm, loom_emb_state_t *st) {
  if (st->pool) return LOOM_SUCCESS;
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = comm->device;
  LOOM_CUDA(cudaMemPoolCreate(&st->pool, &props));
  uint64_t keep = UINT64_MAX;
  LOOM_CUDA(cudaMemPoolSetAttribute(st->pool, cudaMemPoolAttrReleaseThreshold, &keep));
  return LOOM_SUCCESS;
}

/* Resolve: the state's own copies of the tables, this rank's tables and
 * rows, the slice size, the bags per task and the backward. */
static loom_result_t emb_resolve(const char *fn, loom_emb_state_t *st, int W, int r) {
  const loom_embedding_desc_t *desc = &st->desc;
  st->tables_per_rank = (int *)malloc((size_t)W * sizeof(int));
  st->table_base = (int *)malloc((size_t)(W + 1) * sizeof(int));
  int t_total = 0;
  for (int p = 0; p < W; ++p) t_total += desc->tables_per_rank[p];
  st->rows = (int64_t *)malloc((size_t)t_total * sizeof(int64_t));
  if (!st->tables_per_rank || !st->table_base || !st->rows)
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation failed", fn);
  memcpy(st->tables_per_rank, desc->tables_per_rank, (size_t)W * sizeof(int));
  memcpy(st->rows, desc->rows, (size_t)t_total * sizeof(int64_t));
  st->desc.tables_per_rank = st->tables_per_rank;
  st->desc.rows = st->rows;
  st->table_base[0] = 0;
  for (int p = 0; p < W; ++p) st->table_base[p + 1] = st->table_base[p] + st->tables_per_rank[p];
  const int T = st->tables_per_rank[r];
  for (int t = 0; t < T; ++t) st->local_rows += st->rows[st->table_base[r] + t];
  int S = desc->slice_samples ? desc->slice_samples : LOOM_EMB_DEFAULT_SLICE;
  const int64_t Bl = desc->global_batch / W;
  if (S > Bl) S = (int)Bl;
  st->desc.slice_samples = S;
  st->part = LOOM_EMB_DEFAULT_PART;
  st->bwd = desc->table_type == LOOM_FP32 ? LOOM_EMB_BWD_ATOMIC : LOOM_EMB_BWD_SORTED;
  return LOOM_SUCCESS;
}

/* Every signal word is indexed with 32 bits: the counts bounded, the
 * sorted backward's rows bounded, then this rank's schedule. */
static loom_result_t emb_schedule(const char *fn, loom_emb_state_t *st, int W, int r, loom_emb_counts_t *counts) {
  const loom_embedding_desc_t *desc = &st->desc;
  const int t_total = st->table_base[W], T = st->tables_per_rank[r], S = desc->slice_samples;
  int t_max = 0;
  for (int p = 0; p < W; ++p) t_max = st->tables_per_rank[p] > t_max ? st->tables_per_rank[p] : t_max;
  *counts = loom__emb_plan_counts(W, t_total, t_max, desc->global_batch / W, S);
  const char *what = NULL;
  int64_t value = 0;
  if (loom__emb_counts_check(counts, &what, &value))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: %s = %lld exceeds the limit %lld (32-bit signal indices) for W=%d, T_total=%d, "
                      "global_batch=%lld, slice_samples=%d: use larger slices or fewer tables per plan",
                      fn, what, (long long)value, (long long)LOOM_EMB_MAX_SIGNALS, W, t_total,
                      (long long)desc->global_batch, S);
  if (st->bwd == LOOM_EMB_BWD_SORTED && st->local_rows > LOOM_EMB_MAX_SORTED_ROWS)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: rank %d's %s tables hold %lld rows; the backward of fp16/bf16 tables sorts 32-bit row "
                      "numbers and takes at most %lld rows per rank",
                      fn, r, loom__dtype_name(desc->table_type), (long long)st->local_rows,
                      (long long)LOOM_EMB_MAX_SORTED_ROWS);
  if (loom__emb_sched_init(&st->sched, W, r, T, t_total, st->table_base[r], desc->global_batch, S, st->part,
                          st->opts.local_first) != 0)
    return loom__fail(LOOM_ERR_INTERNAL, "%s: schedule rejected W=%d T=%d B=%lld S=%d", fn, W, T,
                      (long long)desc->global_batch, S);
  return LOOM_SUCCESS;
}

/* The GIN path compiles and its bookkeeping is host-tested, but it has
 * never run (no multi-node machine): only an explicit request gets it
 * refused; auto falls back to the staged path, which is correct. */
static loom_result_t emb_gin_fallback(const char *fn, int asked, int *path) {
  if (asked == LOOM_EMB_PATH_GIN)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: NCCL offers GIN here but loom's GIN embedding path is not enabled yet (compiled, "
                      "never run on a multi-node machine); use LOOM_EMB_PATH_AUTO or LOOM_EMB_PATH_STAGED", fn);
  LOOM_WARN_ONCE("loom_embedding_a2a: NCCL offers GIN but loom's GIN path is not enabled yet: using "
                 "pooling into staging + NCCL send/recv (correct, not fused)");
  *path = LOOM_EMB_PATH_STAGED;
  return LOOM_SUCCESS;
}

/* Resolve the path: zero-copy where every rank is load/store reachable,
 * GIN where NCCL offers it (not enabled yet), else staged. */
static loom_result_t emb_choose(loom_comm_t comm, const char *fn, loom_emb_state_t *st, const loom_emb_counts_t *counts) {
  const int W = comm->size, asked = (int)st->opts.path;
  const int all_lsa = comm->lsa_size == W;
  int gin = 0;
  if (comm->world && (asked == LOOM_EMB_PATH_STAGED || asked == LOOM_EMB_PATH_GIN))
    return loom__world_unsupported(comm, fn,
                                   asked == LOOM_EMB_PATH_GIN ? "the GIN path (ncclGin puts)"
                                                              : "the staged path (pooling, NCCL send/recv)",
                                   "it moves the rows through NCCL, which a world has not; the zero-copy path runs "
                                   "there (LOOM_EMB_PATH_AUTO or LOOM_EMB_PATH_ZERO_COPY)");
  st->num_flags = (uint32_t)counts->flags;
  st->num_counters = loom__emb_num_counters(&st->sched);
  if (!all_lsa && asked != LOOM_EMB_PATH_STAGED && !comm->detached)
    LOOM_TRY(loom__emb_gin_probe(comm->nccl, (int)counts->flags, &gin, &st->gin_devcomm));
  int path = loom__emb_choose_path(asked, all_lsa, gin);
  if (path < 0)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: path %s cannot run here: %d of %d ranks are load/store reachable and NCCL "
                      "%s GIN", fn, path_name(asked), comm->lsa_size, W, gin ? "offers" : "does not offer");
  if (path == LOOM_EMB_PATH_GIN) LOOM_TRY(emb_gin_fallback(fn, asked, &path));
  if (path == LOOM_EMB_PATH_STAGED && asked != LOOM_EMB_PATH_STAGED)
    LOOM_WARN_ONCE("loom_embedding_a2a: %d of %d ranks are load/store reachable and NCCL offers no GIN: "
                   "falling back to pooling into staging + NCCL send/recv (correct, not fused)",
                   comm->lsa_size, W);
  st->path = path;
  return LOOM_SUCCESS;
}

/* Lay out the signal words (identical on every rank, so words that peers
 * address come first and the counters, local use only, are sized for the
 * rank with the most tables: counts.words <= LOOM_EMB_MAX_SIGNALS); word
 * indices until the plan's slice exists. */
static uint32_t emb_layout(loom_emb_state_t *st, int W, const loom_emb_counts_t *counts) {
  uint32_t nsig = 0;
  st->flags_off = 0; nsig += st->num_flags;
  st->ready_off = nsig; nsig += (uint32_t)W;
  st->gready_off = nsig; nsig += (uint32_t)W;
  st->gdone_off = nsig; nsig += (uint32_t)W;
  st->bcount_off = nsig; nsig += (uint32_t)W;
  st->fetch_off = nsig; nsig += 4;
  st->counters_off = nsig; nsig += (uint32_t)counts->counters;
  return nsig;
}

/* What every rank must have alike: the tables of every rank, the batch,
 * the dtypes, the slicing and the path (not the local grid). */
static uint64_t emb_fingerprint(const loom_emb_state_t *st, int W) {
  const loom_embedding_desc_t *desc = &st->desc;
  const int64_t f[10] = {W, desc->dim, desc->global_batch, desc->pooling, desc->per_sample_weights,
                         desc->table_type, desc->out_type, desc->slice_samples, st->opts.local_first, st->path};
  uint64_t h = loom__fnv64(LOOM_FNV64_INIT, f, sizeof f);
  h = loom__fnv64(h, st->tables_per_rank, (size_t)W * sizeof(int));
  return loom__fnv64(h, st->rows, (size_t)st->table_base[W] * sizeof(int64_t));
}

/* The signal words' byte offsets in the comm workspace. */
static void emb_attach(loom_plan_t plan, loom_emb_state_t *st) {
  const size_t base = plan->signals_offset;
  st->flags_off = base + st->flags_off * 4;
  st->counters_off = base + st->counters_off * 4;
  st->ready_off = base + st->ready_off * 4;
  st->gready_off = base + st->gready_off * 4;
  st->gdone_off = base + st->gdone_off * 4;
  st->bcount_off = base + st->bcount_off * 4;
  st->fetch_off = base + st->fetch_off * 4;
}

/* Allocate: the device copies of this rank's table shapes, the host-mapped
 * index-error record, the done event. */
static loom_result_t emb_device_tables(const char *fn, loom_emb_state_t *st, int W, int r) {
  const int T = st->tables_per_rank[r];
  int64_t *h_off = (int64_t *)malloc((size_t)(T ? T : 1) * sizeof(int64_t));
  if (!h_off) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation failed", fn);
  int64_t acc = 0;
  for (int t = 0; t < T; ++t) { h_off[t] = acc; acc += st->rows[st->table_base[r] + t]; }
  const size_t n = (size_t)(T ? T : 1) * sizeof(int64_t);
  cudaError_t e = cudaMalloc((void **)&st->d_row_off, n);
  if (e == cudaSuccess) e = cudaMalloc((void **)&st->d_rows, n);
  if (e == cudaSuccess) e = cudaMalloc((void **)&st->d_table_base, (size_t)(W + 1) * sizeof(int));
  if (e == cudaSuccess && T) e = cudaMemcpy(st->d_row_off, h_off, (size_t)T * sizeof(int64_t), cudaMemcpyHostToDevice);
  if (e == cudaSuccess && T)
    e = cudaMemcpy(st->d_rows, st->rows + st->table_base[r], (size_t)T * sizeof(int64_t), cudaMemcpyHostToDevice);
  if (e == cudaSuccess)
    e = cudaMemcpy(st->d_table_base, st->table_base, (size_t)(W + 1) * sizeof(int), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaHostAlloc((void **)&st->err_host, sizeof(loom_emb_err_t), cudaHostAllocMapped);
  if (e == cudaSuccess) {
    memset(st->err_host, 0, sizeof *st->err_host);
    e = cudaHostGetDevicePointer((void **)&st->err_dev, st->err_host, 0);
  }
  free(h_off);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "embedding plan: device tables", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

/* Allocate the staged path's send and receive buffers. */
static loom_result_t emb_staging(loom_emb_state_t *st, int W, int r) {
  const loom_embedding_desc_t *desc = &st->desc;
  const size_t osz = loom_dtype_size(desc->out_type), T = (size_t)st->tables_per_rank[r];
  const size_t send = (size_t)desc->global_batch * T * (size_t)desc->dim * osz;
  const size_t recv = (size_t)(desc->global_batch / W) * (size_t)st->table_base[W] * (size_t)desc->dim * osz;
  cudaError_t e = cudaMalloc(&st->send_buf, send ? send : 16);
  if (e == cudaSuccess) e = cudaMalloc(&st->recv_buf, recv);
  st->staging_bytes = send + recv;
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "embedding plan: staging buffers", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

/* Everything beyond the slice: the signal words' offsets, device tables,
 * the sorted backward's pool, the grid, the staging (a test comm without a
 * GPU holds none of it). */
static loom_result_t emb_fill(loom_plan_t plan, void *state) {
  loom_emb_state_t *st = (loom_emb_state_t *)state;
  loom_comm_t comm = plan->comm;
  emb_attach(plan, st);
  if (comm->detached) {
    st->grid = st->desc.grid_blocks ? st->desc.grid_blocks : 132;
    st->blocks_per_sm = 1;
    return LOOM_SUCCESS;
  }
  LOOM_TRY(emb_device_tables(plan->op->plan_fn, st, comm->size, comm->rank));
  if (st->bwd == LOOM_EMB_BWD_SORTED) LOOM_TRY(make_pool(comm, st));
  LOOM_TRY(size_grid(plan, st));
  if (st->path == LOOM_EMB_PATH_STAGED) LOOM_TRY(emb_staging(st, comm->size, comm->rank));
  return LOOM_SUCCESS;
}

/* ---- the op (core/op.h) ---------------------------------------------------- */

/* The door's description: the public one and the options tests may set. */
typedef struct {
  const loom_embedding_desc_t *desc;
  const loom__emb_plan_opts_t *opts;
} emb_args_t;

static loom_result_t emb_check(const loom_op_t *op, loom_comm_t comm, const void *args) {
  const emb_args_t *a = (const emb_args_t *)args;
  LOOM_TRY(loom__emb_validate_desc(op->plan_fn, a->desc, comm->size, comm->rank));
  return loom__emb_check_opts(op->plan_fn, a->opts, comm->size);
}

/* The state's copies, this rank's schedule, the path. */
static loom_result_t emb_resolve_op(const loom_op_t *op, loom_comm_t comm, const void *args, void *state) {
  const emb_args_t *a = (const emb_args_t *)args;
  loom_emb_state_t *st = (loom_emb_state_t *)state;
  st->desc = *a->desc;
  st->opts = *a->opts;
  loom_emb_counts_t counts;
  LOOM_TRY(emb_resolve(op->plan_fn, st, comm->size, comm->rank));
  LOOM_TRY(emb_schedule(op->plan_fn, st, comm->size, comm->rank, &counts));
  LOOM_TRY(emb_choose(comm, op->plan_fn, st, &counts));
  st->nsig = emb_layout(st, comm->size, &counts);
  return LOOM_SUCCESS;
}

static loom_result_t emb_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  loom_emb_state_t *st = (loom_emb_state_t *)state;
  lay->nsignals = st->nsig;
  lay->fingerprint = emb_fingerprint(st, comm->size);
  return LOOM_SUCCESS;
}

static void emb_describe(loom_plan_t plan, const void *state) {
  const loom_emb_state_t *st = (const loom_emb_state_t *)state;
  const loom_comm_t comm = plan->comm;
  LOOM_INFO("embedding_a2a plan rank %d: path %s, T %d/%d, D %d, B %lld, S %d, P %d, %u flags, %u counters, grid %d "
            "(%d/SM), backward %s, workspace %zu B, staging %zu B", comm->rank, path_name(st->path),
            st->tables_per_rank[comm->rank], st->table_base[comm->size], st->desc.dim,
            (long long)st->desc.global_batch, st->desc.slice_samples, st->part, st->num_flags, st->num_counters,
            st->grid, st->blocks_per_sm, st->bwd == LOOM_EMB_BWD_SORTED ? "sorted" : "atomic", plan->ws_bytes,
            st->staging_bytes);
}

static const loom_op_t emb_op = {
    .name = "embedding_a2a",
    .plan_fn = "loom_plan_embedding_a2a",
    .state_bytes = sizeof(loom_emb_state_t),
    .differ = "every rank must pass the same loom_embedding_desc_t (tables, dims, batch, dtypes, path)",
    .check = emb_check,
    .resolve = emb_resolve_op,
    .lay_out = emb_lay_out,
    .fill = emb_fill,
    .release = emb_release,
    .describe = emb_describe,
};

loom_result_t loom__plan_embedding_a2a_opts(loom_comm_t comm, const loom_embedding_desc_t *desc,
                                            const loom__emb_plan_opts_t *opts, loom_plan_t *out) {
  const loom__emb_plan_opts_t defaults = LOOM__EMB_PLAN_OPTS_INIT;
  const emb_args_t a = {desc, opts ? opts : &defaults};
  return loom__plan_make(comm, &emb_op, &a, out);
}

loom_result_t loom_plan_embedding_a2a(loom_comm_t comm, const loom_embedding_desc_t *desc, loom_plan_t *out) {
  return loom__plan_embedding_a2a_opts(comm, desc, NULL, out);
}

static loom_result_t get_state(loom_plan_t plan, const char *fn, loom_emb_state_t **st) {
  return loom__plan_state(plan, fn, NULL, &emb_op, (void **)st);
}

loom_result_t loom_embedding_a2a_plan_info(loom_plan_t plan, loom_embedding_plan_info_t *info) {
  loom_emb_state_t *st;
  LOOM_TRY(get_state(plan, "loom_embedding_a2a_plan_info", &st));
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_embedding_a2a_plan_info: info=NULL");
  if (info->struct_size != sizeof *info)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_embedding_a2a_plan_info: info->struct_size=%zu, expected %zu (initialise with "
                      "LOOM_EMBEDDING_PLAN_INFO_INIT)",
                      info->struct_size, sizeof *info);
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  info->path = (loom_embedding_path_t)st->path;
  info->slice_samples = st->sched.slice;
  info->slices_per_rank = st->sched.nsl;
  info->tasks = loom__emb_num_tasks(&st->sched);
  info->grid_blocks = st->grid;
  info->num_flags = st->num_flags;
  info->num_counters = st->num_counters;
  info->workspace_bytes = plan->ws_bytes;
  info->staging_bytes = st->staging_bytes;
  return LOOM_SUCCESS;
}

loom_result_t loom_embedding_a2a_check(loom_plan_t plan) {
  loom_emb_state_t *st;
  LOOM_TRY(get_state(plan, "loom_embedding_a2a_check", &st));
  if (!st->err_host) return LOOM_SUCCESS;
  volatile loom_emb_err_t *rec = st->err_host;
  if (!rec->valid) return LOOM_SUCCESS;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  loom_emb_err_t e = *(const loom_emb_err_t *)st->err_host;
  memset(st->err_host, 0, sizeof *st->err_host);
  int g = st->table_base[plan->comm->rank] + e.table;
  if (e.kind == 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_embedding_a2a: rank %d: indices[%lld]=%lld is out of range [0, %lld) for local table "
                      "%d (global table %d), bag of sample %lld; the row was skipped",
                      plan->comm->rank, (long long)e.position, (long long)e.value, (long long)e.limit, e.table, g,
                      (long long)e.sample);
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                    "loom_embedding_a2a: rank %d: offsets[%lld]=%lld is not a valid bag bound (decreasing, "
                    "negative or past num_indices=%lld) for local table %d (global table %d), sample %lld; the "
                    "bag was treated as empty",
                    plan->comm->rank, (long long)e.position, (long long)e.value, (long long)e.limit, e.table, g,
                    (long long)e.sample);
}

/* Host checks common to the calls (no GPU): `tab_name` is "tables" or
 * "table_grad". */
static loom_result_t check_inputs(const char *fn, loom_emb_state_t *st, const char *tab_name, const void *tables,
                                  const int64_t *indices, const int64_t *offsets, int64_t num_indices,
                                  const float *weights) {
  int T = st->sched.t_local;
  if (T > 0 && !tables)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=NULL (this rank owns %d tables)", fn, tab_name, T);
  if (tables && ((uintptr_t)tables & 15))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p must be 16-byte aligned", fn, tab_name, tables);
  if (T > 0 && !offsets) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: offsets=NULL", fn);
  if (offsets && ((uintptr_t)offsets & 7))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: offsets=%p must be 8-byte aligned (int64)", fn, (const void *)offsets);
  if (num_indices < 0) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: num_indices=%lld must be >= 0", fn, (long long)num_indices);
  if (num_indices > 0 && !indices) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: indices=NULL with num_indices=%lld", fn, (long long)num_indices);
  if (indices && ((uintptr_t)indices & 7))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: indices=%p must be 8-byte aligned (int64)", fn, (const void *)indices);
  if (st->desc.per_sample_weights && num_indices > 0 && !weights)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: weights=NULL but the plan has per_sample_weights=1", fn);
  if (!st->desc.per_sample_weights && weights)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: weights=%p but the plan has per_sample_weights=0", fn, (const void *)weights);
  if (weights && ((uintptr_t)weights & 3))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: weights=%p must be 4-byte aligned (fp32)", fn, (const void *)weights);
  return LOOM_SUCCESS;
}

/* Device checks of the inputs common to the calls: each pointer the call
 * reads is device memory of this GPU with the bytes the call reaches. */
static loom_result_t check_input_ptrs(const char *fn, loom_plan_t plan, loom_emb_state_t *st, const char *tab_name,
                                      const void *tables, size_t tab_elem, const int64_t *indices,
                                      const int64_t *offsets, int64_t num_indices, const float *weights) {
  const int T = st->sched.t_local;
  if (T > 0) {
    /* the tables (or table_grad, which the backward writes) through the one
     * bounds check: inside its allocation, and inside its loom_malloc
     * allocation where it lies in one */
    const loom_buf_t b[2] = {
        {tab_name, tables, (size_t)st->local_rows * (size_t)st->desc.dim * tab_elem, 0, NULL},
        {"offsets", offsets, ((size_t)T * (size_t)st->sched.batch + 1) * sizeof(int64_t), 0, NULL}};
    LOOM_TRY(loom__check_bufs(fn, plan->comm, b, 2));
  }
  if (num_indices > 0) {
    LOOM_TRY(loom__check_device_ptr(fn, "indices", indices, (size_t)num_indices * sizeof(int64_t)));
    if (weights) LOOM_TRY(loom__check_device_ptr(fn, "weights", weights, (size_t)num_indices * sizeof(float)));
  }
  return LOOM_SUCCESS;
}

static void fill_common(loom_emb_kargs_t *a, loom_plan_t plan, loom_emb_state_t *st, const void *tables,
                        const int64_t *indices, const int64_t *offsets, int64_t num_indices, const float *weights) {
  memset(a, 0, sizeof *a);
  a->dc = loom__comm_dev(plan->comm);
  a->s = st->sched;
  a->dim = st->desc.dim;
  a->pooling = (int)st->desc.pooling;
  a->weighted = st->desc.per_sample_weights;
  a->tables = tables;
  a->indices = indices;
  a->offsets = offsets;
  a->weights = weights;
  a->num_indices = num_indices;
  a->row_off = st->d_row_off;
  a->rows = st->d_rows;
  a->total_rows = st->local_rows;
  a->table_base = st->d_table_base;
  a->flags_off = st->flags_off;
  a->counters_off = st->counters_off;
  a->ready_off = st->ready_off;
  a->gready_off = st->gready_off;
  a->gdone_off = st->gdone_off;
  a->bcount_off = st->bcount_off;
  a->fetch_off = st->fetch_off;
  a->epoch_off = plan->epoch_offset;
  a->err = st->err_dev;
}

/* Address of each rank's copy of the symmetric buffer at `p` (`bytes` long). */
static loom_result_t peer_addresses(const char *fn, const char *what, loom_comm_t comm, const void *p, size_t bytes,
                                    char **peer) {
  return loom__peer_addresses(fn, what, comm, p, bytes,
                              strcmp(what, "out") == 0
                                  ? "peers store into it directly, so it must be symmetric memory "
                                    "(loom_malloc)"
                                  : "peers load from it directly, so it must be symmetric memory "
                                    "(loom_malloc)",
                              peer);
}

/* A call's entry (the door's: a live plan, the comm's sticky error, the
 * stage trace), then the index error an earlier call's kernels recorded. */
static loom_result_t emb_enter(loom_plan_t plan, const char *fn, cudaStream_t stream, loom_emb_state_t **st) {
  LOOM_TRY(loom__call_enter(plan, fn, NULL, &emb_op, stream, (void **)st));
  return loom_embedding_a2a_check(plan);
}

/* After a call's launches: the plan's event (recorded as a graph node when
 * the stream is being captured, so that replays record it too), then the
 * optional synchronous index check. */
static loom_result_t after_call(const char *fn, loom_plan_t plan, loom_emb_state_t *st, cudaStream_t stream) {
  int capturing = 0;
  LOOM_TRY(loom__call_exit(plan, stream, &capturing));
  if (!st->desc.check_indices_sync || capturing) return LOOM_SUCCESS;
  LOOM_CUDA(cudaStreamSynchronize(stream));
  LOOM_TRY(loom__comm_check(plan->comm, fn));
  return loom_embedding_a2a_check(plan);
}

/* The staged path's NCCL exchange. Buffers: send_buf [W][Bl][T*D] (this
 * rank's tables, grouped by the rank whose samples they are), recv_buf
 * [sum_p Bl*T_p*D] (rank p's tables for this rank's samples). Forward: each
 * rank p gets send_buf[p] into its recv_buf; backward (the gradient goes the
 * other way): recv_buf's block p goes to p, into p's send_buf[this rank]. */
static loom_result_t staged_exchange(loom_plan_t plan, loom_emb_state_t *st, int backward, cudaStream_t stream) {
  loom_comm_t comm = plan->comm;
  const int W = comm->size, T = st->sched.t_local, D = st->desc.dim;
  const size_t osz = loom_dtype_size(st->desc.out_type), Bl = (size_t)st->sched.local_batch;
  LOOM_NCCL(ncclGroupStart());
  size_t roff = 0;
  ncclResult_t n = ncclSuccess;
  for (int p = 0; p < W && n == ncclSuccess; ++p) {
    size_t mbytes = Bl * (size_t)T * (size_t)D * osz;
    size_t tbytes = Bl * (size_t)st->tables_per_rank[p] * (size_t)D * osz;
    char *mine = (char *)st->send_buf + (size_t)p * mbytes, *theirs = (char *)st->recv_buf + roff;
    if (!backward) {
      if (mbytes) n = ncclSend(mine, mbytes, ncclChar, p, comm->nccl, stream);
      if (n == ncclSuccess && tbytes) n = ncclRecv(theirs, tbytes, ncclChar, p, comm->nccl, stream);
    } else {
      if (tbytes) n = ncclSend(theirs, tbytes, ncclChar, p, comm->nccl, stream);
      if (n == ncclSuccess && mbytes) n = ncclRecv(mine, mbytes, ncclChar, p, comm->nccl, stream);
    }
    roff += tbytes;
  }
  ncclResult_t n2 = ncclGroupEnd();
  if (n != ncclSuccess) return loom__nccl_fail((int)n, "ncclSend/ncclRecv (embedding staged path)", __FILE__, __LINE__);
  if (n2 != ncclSuccess) return loom__nccl_fail((int)n2, "ncclGroupEnd (embedding staged path)", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

loom_result_t loom_embedding_pool(loom_plan_t plan, const void *tables, const int64_t *indices, const int64_t *offsets,
                                  int64_t num_indices, const float *weights, void *pooled, cudaStream_t stream) {
  const char *fn = "loom_embedding_pool";
  loom_emb_state_t *st;
  LOOM_TRY(emb_enter(plan, fn, stream, &st));
  LOOM_TRY(check_inputs(fn, st, "tables", tables, indices, offsets, num_indices, weights));
  if (!pooled) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: pooled=NULL", fn);
  if ((uintptr_t)pooled & 15) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: pooled=%p must be 16-byte aligned", fn, pooled);
  if (plan->comm->detached) return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: test comm without a GPU", fn);
  const size_t tsz = loom_dtype_size(st->desc.table_type), osz = loom_dtype_size(st->desc.out_type);
  LOOM_TRY(check_input_ptrs(fn, plan, st, "tables", tables, tsz, indices, offsets, num_indices, weights));
  const loom_buf_t pb = {"pooled", pooled,
                         (size_t)st->sched.batch * (size_t)st->sched.t_local * (size_t)st->desc.dim * osz, 0, NULL};
  LOOM_TRY(loom__check_buf(fn, plan->comm, &pb));
  if (st->sched.t_local == 0) return LOOM_SUCCESS;
  loom_emb_kargs_t a;
  fill_common(&a, plan, st, tables, indices, offsets, num_indices, weights);
  a.pool_only = 1;
  a.peer[0] = (char *)pooled;
  LOOM_TRY(loom__emb_launch_forward(&a, st->desc.table_type, st->desc.out_type, st->grid, stream));
  return after_call(fn, plan, st, stream);
}

loom_result_t loom_embedding_a2a(loom_plan_t plan, const void *tables, const int64_t *indices, const int64_t *offsets,
                                 int64_t num_indices, const float *weights, void *out, cudaStream_t stream) {
  const char *fn = "loom_embedding_a2a";
  loom_emb_state_t *st;
  LOOM_TRY(emb_enter(plan, fn, stream, &st));
  loom_comm_t comm = plan->comm;
  LOOM_TRY(check_inputs(fn, st, "tables", tables, indices, offsets, num_indices, weights));
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: out=NULL", fn);
  if ((uintptr_t)out & 15) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: out=%p must be 16-byte aligned", fn, out);
  if (comm->detached) return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: test comm without a GPU", fn);
  const size_t tsz = loom_dtype_size(st->desc.table_type), osz = loom_dtype_size(st->desc.out_type);
  const size_t out_bytes = (size_t)st->sched.local_batch * (size_t)st->sched.t_total * (size_t)st->desc.dim * osz;
  LOOM_TRY(check_input_ptrs(fn, plan, st, "tables", tables, tsz, indices, offsets, num_indices, weights));
  /* symmetric on every path, staged included: what a call may pass never
   * depends on the path the plan resolved to */
  const loom_buf_t ob = {"out", out, out_bytes, LOOM_BUF_SYMMETRIC,
                         "peers store into it on the fused paths, so it must be symmetric memory on every path"};
  LOOM_TRY(loom__check_buf(fn, comm, &ob));

  if (st->path == LOOM_EMB_PATH_STAGED) {
    /* pool -> send [W][Bl][T*D]; send/recv; reorder into out */
    const int W = comm->size, T = st->sched.t_local, D = st->desc.dim;
    const int64_t Bl = st->sched.local_batch;
    (void)loom__plan_next_epoch(plan);
    if (T > 0) {
      loom_emb_kargs_t a;
      fill_common(&a, plan, st, tables, indices, offsets, num_indices, weights);
      a.pool_only = 1;
      a.peer[0] = (char *)(W == 1 ? out : st->send_buf);
      LOOM_TRY(loom__emb_launch_forward(&a, st->desc.table_type, st->desc.out_type, st->grid, stream));
    }
    if (W > 1) {
      LOOM_TRY(staged_exchange(plan, st, 0, stream));
      LOOM_TRY(loom__emb_launch_reorder(st->recv_buf, out, st->tables_per_rank, st->table_base, W, Bl, D, osz, 1,
                                        stream));
    }
    return after_call(fn, plan, st, stream);
  }

  loom_emb_kargs_t a;
  fill_common(&a, plan, st, tables, indices, offsets, num_indices, weights);
  LOOM_TRY(peer_addresses(fn, "out", comm, out, out_bytes, a.peer));
  (void)loom__plan_next_epoch(plan);
  LOOM_TRY(loom__emb_launch_forward(&a, st->desc.table_type, st->desc.out_type, st->grid, stream));
  return after_call(fn, plan, st, stream);
}

/* The backward kernels of the plan's accumulation (atomic or sorted). */
static loom_result_t launch_backward(loom_emb_state_t *st, const loom_emb_kargs_t *a, cudaStream_t stream) {
  if (st->bwd == LOOM_EMB_BWD_SORTED)
    return loom__emb_launch_backward_sorted(a, st->desc.table_type, st->desc.out_type, st->grid, st->pool, stream);
  return loom__emb_launch_backward(a, st->desc.table_type, st->desc.out_type, st->grid, stream);
}

loom_result_t loom_embedding_a2a_backward(loom_plan_t plan, const void *grad_out, const int64_t *indices,
                                          const int64_t *offsets, int64_t num_indices, const float *weights,
                                          float scale, void *table_grad, cudaStream_t stream) {
  const char *fn = "loom_embedding_a2a_backward";
  loom_emb_state_t *st;
  LOOM_TRY(emb_enter(plan, fn, stream, &st));
  loom_comm_t comm = plan->comm;
  LOOM_TRY(check_inputs(fn, st, "table_grad", table_grad, indices, offsets, num_indices, weights));
  if (!grad_out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: grad_out=NULL", fn);
  if ((uintptr_t)grad_out & 15) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: grad_out=%p must be 16-byte aligned", fn, grad_out);
  if (st->bwd == LOOM_EMB_BWD_SORTED && num_indices > LOOM_EMB_MAX_SORTED_INDICES)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: num_indices=%lld: the backward of %s tables sorts 32-bit positions and takes at most %lld "
                      "indices per call", fn, (long long)num_indices, loom__dtype_name(st->desc.table_type),
                      (long long)LOOM_EMB_MAX_SORTED_INDICES);
  if (comm->detached) return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: test comm without a GPU", fn);
  const size_t tsz = loom_dtype_size(st->desc.table_type), osz = loom_dtype_size(st->desc.out_type);
  const size_t g_bytes = (size_t)st->sched.local_batch * (size_t)st->sched.t_total * (size_t)st->desc.dim * osz;
  LOOM_TRY(check_input_ptrs(fn, plan, st, "table_grad", table_grad, tsz, indices, offsets, num_indices, weights));
  const loom_buf_t gb = {"grad_out", grad_out, g_bytes, LOOM_BUF_SYMMETRIC,
                         "peers load from it on the fused paths, so it must be symmetric memory on every path"};
  LOOM_TRY(loom__check_buf(fn, comm, &gb));
  loom_emb_kargs_t a;
  fill_common(&a, plan, st, NULL, indices, offsets, num_indices, weights);
  a.table_grad = table_grad;
  a.scale = scale;
  if (st->path == LOOM_EMB_PATH_STAGED) {
    /* grad_out [Bl, T_total*D] -> recv_buf blocks per owner; NCCL send/recv
     * (the forward's exchange reversed) -> send_buf [B, T*D]; the backward
     * locally. W = 1: straight from grad_out. */
    const int W = comm->size, T = st->sched.t_local, D = st->desc.dim;
    (void)loom__plan_next_epoch(plan);
    if (W > 1) {
      LOOM_TRY(loom__emb_launch_reorder(st->recv_buf, (void *)grad_out, st->tables_per_rank, st->table_base, W,
                                        st->sched.local_batch, D, osz, 0, stream));
      LOOM_TRY(staged_exchange(plan, st, 1, stream));
    }
    if (T > 0) {
      a.pool_only = 1;
      a.peer[0] = (char *)(W == 1 ? grad_out : st->send_buf);
      LOOM_TRY(launch_backward(st, &a, stream));
    }
    return after_call(fn, plan, st, stream);
  }
  LOOM_TRY(peer_addresses(fn, "grad_out", comm, grad_out, g_bytes, a.peer));
  (void)loom__plan_next_epoch(plan);
  LOOM_TRY(launch_backward(st, &a, stream));
  return after_call(fn, plan, st, stream);
}

/* ---- test and benchmark hooks ----------------------------------------------- */

loom_result_t loom__emb_set_part(loom_plan_t plan, int part) {
  const char *fn = "loom__emb_set_part";
  loom_emb_state_t *st;
  LOOM_TRY(get_state(plan, fn, &st));
  if (part < 1 || part > 32)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: part=%d must be in 1..32 (bags a warp pools per task)", fn, part);
  loom_emb_sched_t s = st->sched;
  if (loom__emb_sched_init(&s, s.world, s.rank, s.t_local, s.t_total, s.table_base, s.batch, s.slice, part,
                          s.local_first) != 0)
    return loom__fail(LOOM_ERR_INTERNAL, "%s: schedule rejected part=%d", fn, part);
  /* the previous call's counters and fetch words are back at 0 once it ended */
  LOOM_TRY(loom__plan_wait_last_call(plan, fn));
  st->part = part;
  st->sched = s;
  return LOOM_SUCCESS;
}

loom_result_t loom__emb_get_part(loom_plan_t plan, int *part) {
  loom_emb_state_t *st;
  LOOM_TRY(get_state(plan, "loom__emb_get_part", &st));
  if (!part) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom__emb_get_part: part=NULL");
  *part = st->part;
  return LOOM_SUCCESS;
}

loom_result_t loom__emb_set_backward(loom_plan_t plan, int bwd) {
  const char *fn = "loom__emb_set_backward";
  loom_emb_state_t *st;
  LOOM_TRY(get_state(plan, fn, &st));
  if (bwd != LOOM_EMB_BWD_ATOMIC && bwd != LOOM_EMB_BWD_SORTED)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: bwd=%d (LOOM_EMB_BWD_ATOMIC or LOOM_EMB_BWD_SORTED)", fn, bwd);
  if (bwd == LOOM_EMB_BWD_ATOMIC && st->desc.table_type != LOOM_FP32)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: bwd=LOOM_EMB_BWD_ATOMIC with %s tables: atomics in the table's dtype round at every "
                      "addition; only fp32 tables take it", fn, loom__dtype_name(st->desc.table_type));
  if (bwd == LOOM_EMB_BWD_SORTED && st->local_rows > LOOM_EMB_MAX_SORTED_ROWS)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: this rank's tables hold %lld rows, more than %lld for the sorted "
                      "backward", fn, (long long)st->local_rows, (long long)LOOM_EMB_MAX_SORTED_ROWS);
  if (!plan->comm->detached) {
    LOOM_TRY(loom__plan_wait_last_call(plan, fn));
    if (bwd == LOOM_EMB_BWD_SORTED) LOOM_TRY(make_pool(plan->comm, st));
  }
  st->bwd = bwd;
  return LOOM_SUCCESS;
}

loom_result_t loom__emb_device_epoch(loom_plan_t plan, uint32_t *epoch) {
  loom_emb_state_t *st;
  LOOM_TRY(get_state(plan, "loom__emb_device_epoch", &st));
  if (!epoch) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom__emb_device_epoch: epoch=NULL");
  if (plan->comm->detached) return loom__fail(LOOM_ERR_UNSUPPORTED, "loom__emb_device_epoch: test comm without a GPU");
  loom_dev_epoch_t e;
  LOOM_CUDA(cudaMemcpy(&e, (const char *)plan->comm->ws_ptr + plan->epoch_offset, sizeof e, cudaMemcpyDeviceToHost));
  *epoch = e.epoch;
  return LOOM_SUCCESS;
}
