/*
 * moe_plan.c - the host side of the mixture-of-experts dispatch and combine
 * (loom_plan_moe, loom_moe_dispatch, loom_moe_combine): the description's
 * checks, the plan's buffers, the calls. The steps and signals: moe.h; the
 * layout: moe_schedule.h; the kernels: moe_kernels.cu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/handle.h"
#include "core/error.h"
#include "core/log.h"
#include "core/op.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/ptr_check.h"
#include "core/trace.h"
#include "core/util.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "ops/moe/moe.h"
#include "ops/moe/moe_protocol.h"

/* The kernels' wait sites, named from the protocol's table of signals. */
__attribute__((constructor)) static void loom__moe_wait_sites(void) {
  loom__proto_register_sites(loom__moe_signals, LOOM__MOE_NSIG);
}

loom_result_t loom__moe_check_desc(const char *fn, int comm_size, const loom_moe_desc_t *d) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL", fn);
  if (d->struct_size != sizeof *d)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_MOE_DESC_INIT)",
                      fn, d->struct_size, sizeof *d);
  if (d->dtype != LOOM_BF16 && d->dtype != LOOM_FP16 && d->dtype != LOOM_FP32)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->dtype=%d must be LOOM_BF16, LOOM_FP16 or LOOM_FP32", fn,
                      (int)d->dtype);
  const int64_t es = (int64_t)loom_dtype_size(d->dtype);
  if (d->hidden < 1 || ((int64_t)d->hidden * es) % 16 != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->hidden=%d must be positive with rows of a multiple of 16 bytes (%lld-byte elements)",
                      fn, d->hidden, (long long)es);
  const char *what = "";
  int64_t value = 0;
  const int bad = loom__moe_desc_check(comm_size, d->experts, d->topk, d->max_tokens, d->capacity, &what, &value);
  if (d->ffn < 0 || (d->ffn > 0 && (d->ffn % 8 != 0 || d->hidden % 8 != 0 || d->dtype == LOOM_FP32)))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->ffn=%d: 0 (no MLP) or a positive multiple of 8 with desc->hidden=%d a multiple of 8 "
                      "and dtype bf16 or fp16 (the experts' GEMMs)",
                      fn, d->ffn, d->hidden);
  if (d->mlp_path < LOOM_MOE_MLP_AUTO || d->mlp_path > LOOM_MOE_MLP_FUSED_ALL)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->mlp_path=%d must be LOOM_MOE_MLP_AUTO (0), LOOM_MOE_MLP_FUSED (1), "
                      "LOOM_MOE_MLP_UNFUSED (2) or LOOM_MOE_MLP_FUSED_ALL (3)",
                      fn, d->mlp_path);
  if (bad) {
    static const char *const field[7] = {"", "comm size", "desc->experts", "desc->topk", "desc->max_tokens",
                                         "desc->capacity", "desc->max_tokens"};
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%lld is outside the %s", fn, field[bad], (long long)value,
                      what);
  }
  return LOOM_SUCCESS;
}

/* ---- plan state ---------------------------------------------------------- */

/* The most signal words a plan takes (arrived [W, E]: 64 ranks of 256
 * experts take 16k). */
#define MOE_MAX_SIGNALS (1 << 24)

/* LOOM_DEBUG=TRACE: the phases the kernels stamp (moe_kernels.cu,
 * moe_stamp), in us from each kernel's start (block 0's, except the last
 * block's stamps); the plan's trace logs the last call's (core/trace.h). */
static const char *const moe_stamp_rows[2] = {"dispatch", "combine"};
static const char *const moe_stamp_names[2][LOOM_TRACE_STAMPS] = {
    {"start", "counted", "barrier1", "published", "counts-in+layout", "barrier2", "slots+barrier3", "sent(block0)",
     "sent(last)", "delivered"},
    {"start", "ready", "sent(block0)", "sent(last)", "done-in", "reduced(block0)"}};

/* What the plan holds (op.h: release; the plan's last call has ended). */
static void moe_release(loom_comm_t comm, void *state) {
  loom_moe_state_t *st = (loom_moe_state_t *)state;
  if (st->recv) (void)loom__comm_free(comm, st->recv);
  if (st->origin) (void)loom__comm_free(comm, st->origin);
  if (st->combine) (void)loom__comm_free(comm, st->combine);
  if (st->counts) (void)loom__comm_free(comm, st->counts);
  if (st->dev) (void)cudaFree(st->dev);
  if (st->h) (void)cudaFree(st->h);
  if (st->err) (void)cudaFreeHost(st->err);
}

/* In a world the ranks share the GPU: a combine of 4 blocks per SM of its
 * share, every block waiting for a slow rank's outputs, leaves W - 1 ranks'
 * blocks on every SM at W = 8 (7 x 32 > 132), and the slow rank's grouped
 * GEMM, whose blocks each need an SM of their own, then waits for them
 * until the timeout. One block per SM of the share leaves SMs free. */
LOOM_PARAM_INT(MOE_WORLD_COMB_PER_SM, "1",
               "MoE in a one-GPU world: the most combine blocks per SM of a rank's share (they wait for peers; "
               "more can hold every SM while a rank's grouped GEMM needs whole ones, docs/world.md); 0: the "
               "kernel's own (2 to send, 4 to reduce)");

/* The four symmetric buffers and every rank's address of each. */
static loom_result_t moe_symmetric(loom_comm_t comm, const char *fn, loom_moe_state_t *st, char **peers) {
  const loom_moe_desc_t *d = &st->desc;
  const int W = st->world;
  const size_t es = loom_dtype_size(d->dtype);
  const size_t bytes[4] = {(size_t)st->max_recv * (size_t)d->hidden * es, (size_t)st->max_recv * sizeof(int32_t) * 2,
                           (size_t)d->max_tokens * (size_t)d->topk * (size_t)d->hidden * es,
                           (size_t)W * (size_t)d->experts * sizeof(unsigned long long)};
  void **bufs[4] = {&st->recv, &st->origin, &st->combine, &st->counts};
  static const char *const names[4] = {"receive buffer", "origins", "combine buffer", "counts table"};
  for (int b = 0; b < 4; ++b) {
    const size_t n = bytes[b] > 0 ? bytes[b] : 256;
    LOOM_TRY(loom__comm_malloc(comm, n, bufs[b]));
    st->symmetric_bytes += n;
    /* epoch 0 in every word: no call has counted yet (on the comm's stream: the fence after orders it) */
    if (b == 3) LOOM_CUDA(cudaMemsetAsync(*bufs[b], 0, n, comm->stream));
    LOOM_TRY(loom__peer_addresses(fn, names[b], comm, *bufs[b], n, "the plan's own buffer", peers + (size_t)b * W));
  }
  return LOOM_SUCCESS;
}

/* Sizes of the local device arrays, in the order they are carved. */
enum { MOE_HIST, MOE_KEPT, MOE_BASE, MOE_SLOT, MOE_OFF, MOE_SCAN, MOE_PEERS, MOE_COUNT, MOE_ORDER, MOE_SBASE, MOE_SSCAN,
       MOE_SENT, MOE_PARTS };

static loom_result_t moe_device(loom_comm_t comm, loom_moe_state_t *st, char *const *peers) {
  const loom_moe_desc_t *d = &st->desc;
  const int W = st->world;
  const size_t sizes[MOE_PARTS] = {(size_t)LOOM_MOE_CHUNKS_MAX * (size_t)d->experts * sizeof(int32_t),
                                   (size_t)W * (size_t)d->experts * sizeof(int32_t),
                                   (size_t)d->experts * sizeof(int64_t),
                                   (size_t)(d->max_tokens * d->topk + 1) * sizeof(int64_t),
                                   (size_t)(st->n_local + 1) * sizeof(int64_t),
                                   (size_t)(d->experts + 1) * sizeof(int64_t),
                                   4 * (size_t)W * sizeof(char *),
                                   6 * sizeof(uint32_t),
                                   (size_t)(d->max_tokens * d->topk + 1) * sizeof(int32_t),
                                   (size_t)d->experts * sizeof(int64_t),
                                   ((size_t)W * (size_t)((d->experts + W - 1) / W) + 1) * sizeof(int64_t),
                                   (size_t)d->experts * sizeof(int32_t)};
  size_t off[MOE_PARTS], total = 0;
  for (int p = 0; p < MOE_PARTS; ++p) off[p] = total, total += (sizes[p] + 255) / 256 * 256;
  LOOM_CUDA(cudaMalloc(&st->dev, total));
  st->device_bytes = total;
  LOOM_CUDA(cudaMemsetAsync(st->dev, 0, total, comm->stream)); /* before the plan's fence (its stream) */
  char *base = (char *)st->dev;
  LOOM_CUDA(cudaMemcpyAsync(base + off[MOE_PEERS], peers, sizes[MOE_PEERS], cudaMemcpyHostToDevice, comm->stream));
  loom_moe_kargs_t *k = &st->k;
  k->hist = (int32_t *)(base + off[MOE_HIST]);
  k->kept = (int32_t *)(base + off[MOE_KEPT]);
  k->base = (int64_t *)(base + off[MOE_BASE]);
  k->slot = (int64_t *)(base + off[MOE_SLOT]);
  k->expert_off = (int64_t *)(base + off[MOE_OFF]);
  k->scan = (int64_t *)(base + off[MOE_SCAN]);
  char **pt = (char **)(base + off[MOE_PEERS]);
  k->recv = pt, k->origin = (int2 *const *)(pt + W), k->combine = pt + 2 * W, k->counts = (unsigned long long *const *)(pt + 3 * W);
  k->count = (uint32_t *)(base + off[MOE_COUNT]);
  k->bar = k->count + 1;
  k->ready = k->count + 3, k->arrivals = k->count + 4, k->gemm_next = k->count + 5;
  k->order = (int32_t *)(base + off[MOE_ORDER]);
  k->sbase = (int64_t *)(base + off[MOE_SBASE]);
  k->sscan = (int64_t *)(base + off[MOE_SSCAN]);
  k->sent_rows = (int32_t *)(base + off[MOE_SENT]);
  LOOM_CUDA(cudaHostAlloc((void **)&st->err, sizeof *st->err, cudaHostAllocMapped));
  memset(st->err, 0, sizeof *st->err);
  LOOM_CUDA(cudaHostGetDevicePointer((void **)&k->err, st->err, 0));
  return LOOM_SUCCESS;
}

static void moe_kargs(loom_plan_t plan, loom_moe_state_t *st) {
  const loom_moe_desc_t *d = &st->desc;
  loom_moe_kargs_t *k = &st->k;
  k->dc = loom__comm_dev(plan->comm);
  k->epoch_off = plan->epoch_offset;
  const size_t w = (size_t)st->world * sizeof(uint32_t);
  k->delivered_off = plan->signals_offset;
  k->comb_ready_off = plan->signals_offset + w;
  k->comb_done_off = plan->signals_offset + 2 * w;
  k->arrived_off = plan->signals_offset + 3 * w;
  k->world = st->world, k->experts = d->experts, k->topk = d->topk, k->hidden = d->hidden;
  k->es = (int)loom_dtype_size(d->dtype), k->dtype = (int)d->dtype;
  k->capacity = d->capacity;
}

/* The grouped GEMM of one expert projection over the plan's receive layout:
 * C [R, n] = A [R, k] x B_l^T for each local expert l. */
loom_grouped_gemm_desc_t loom__moe_gemm_desc(const loom_moe_state_t *st, int64_t n, int64_t k, int64_t rows_hint) {
  loom_grouped_gemm_desc_t g = LOOM_GROUPED_GEMM_DESC_INIT;
  g.groups = st->n_local, g.max_rows = st->max_recv, g.n = n, g.k = k, g.rows_hint = rows_hint;
  g.ab_type = g.c_type = st->desc.dtype, g.b_layout = LOOM_B_NK;
  return g;
}

/* loom_moe_mlp's h [R, F] (desc.ffn > 0, local experts > 0), after the
 * checks that the grouped GEMMs can run here. */
static loom_result_t moe_mlp_buffers(const char *fn, loom_moe_state_t *st) {
  const loom_moe_desc_t *d = &st->desc;
  const int64_t F = d->ffn, H = d->hidden;
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  const loom_gemm_desc_t e = LOOM_GEMM_DESC(st->max_recv, 2 * F, H, d->dtype, d->dtype, LOOM_B_NK, 0);
  if (!dev.sm90 || !loom__gemm_sm90_supported(&e, dev.cc_major, dev.cc_minor))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: desc->ffn=%d: the experts' grouped GEMMs run loom's Hopper kernel (compute capability 9.0 "
                      "with the library's sm_90a code); this GPU is %d.%d",
                      fn, d->ffn, dev.cc_major, dev.cc_minor);
  /* the shapes the calls will run, checked once */
  const loom_grouped_gemm_desc_t g1 = loom__moe_gemm_desc(st, 2 * F, H, 0), g2 = loom__moe_gemm_desc(st, H, F, 0);
  LOOM_TRY(loom__grouped_validate_desc(fn, &g1));
  LOOM_TRY(loom__grouped_validate_desc(fn, &g2));
  /* loaded now, not at a first launch behind a dispatch that waits for
   * the peers (CUDA's lazy loading waits for running kernels) */
  for (int bm = 64; bm <= 128; bm += 64)
    for (int bn = 128; bn <= 256; bn += 128) {
      struct cudaFuncAttributes fa;
      LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__gemm_grouped_kernel_for(bm, bn, (int)d->dtype, 0)));
    }
  const size_t h = (size_t)st->max_recv * (size_t)F * loom_dtype_size(d->dtype);
  LOOM_CUDA(cudaMalloc(&st->h, h > 0 ? h : 256));
  st->device_bytes += h;
  return LOOM_SUCCESS;
}

/* ---- the op (core/op.h) ---------------------------------------------------- */

/* The description, the NVLink domain, the signal words it needs. */
static loom_result_t moe_check(const loom_op_t *op, loom_comm_t comm, const void *desc) {
  const loom_moe_desc_t *d = (const loom_moe_desc_t *)desc;
  LOOM_TRY(loom__moe_check_desc(op->plan_fn, comm->size, d));
  if (!comm->detached && !comm->ws_all_reachable)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: every rank must be load/store reachable (one NVLink domain): rows are stored into the "
                      "experts' ranks through NVLink",
                      op->plan_fn);
  /* delivered, comb_ready, comb_done [W] each, arrived [W, E] */
  const int64_t nsignals = (int64_t)comm->size * (3 + (int64_t)d->experts);
  if (nsignals > MOE_MAX_SIGNALS)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "%s: %d ranks x desc->experts=%d need %lld signal words, more than %d",
                      op->plan_fn, comm->size, d->experts, (long long)nsignals, MOE_MAX_SIGNALS);
  return LOOM_SUCCESS;
}

static loom_result_t moe_resolve(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state) {
  loom_moe_state_t *st = (loom_moe_state_t *)state;
  const loom_moe_desc_t *d = (const loom_moe_desc_t *)desc;
  st->desc = *d, st->rank = comm->rank, st->world = comm->size;
  st->n_local = loom__moe_experts_on(d->experts, comm->size, comm->rank);
  st->first_local = loom__moe_expert_begin(d->experts, comm->size, comm->rank);
  st->max_recv = loom__moe_worst_recv_rows(comm->size, d->experts, d->topk, d->max_tokens, d->capacity);
  return LOOM_SUCCESS;
}

static loom_result_t moe_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  const loom_moe_desc_t *d = &((const loom_moe_state_t *)state)->desc;
  lay->nsignals = (uint32_t)((int64_t)comm->size * (3 + (int64_t)d->experts));
  const int64_t fields[7] = {d->hidden, d->experts, d->topk, d->max_tokens, d->capacity, d->dtype, d->ffn};
  lay->fingerprint = loom__fnv64(LOOM_FNV64_INIT, fields, sizeof fields);
  return LOOM_SUCCESS;
}

/* The plan's buffers, arrays and kernels (every rank, after the agreement). */
static loom_result_t moe_fill(loom_plan_t plan, void *state) {
  loom_moe_state_t *st = (loom_moe_state_t *)state;
  loom_comm_t comm = plan->comm;
  const char *fn = plan->op->plan_fn;
  if (comm->detached) return loom__plan_detached(fn);
  char **peers = (char **)calloc((size_t)4 * st->world, sizeof(char *));
  if (!peers) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: a table of %d peer addresses", fn, 4 * st->world);
  loom_result_t r = moe_symmetric(comm, fn, st, peers);
  if (r == LOOM_SUCCESS) r = moe_device(comm, st, peers);
  free(peers);
  LOOM_TRY(r);
  if (st->desc.ffn > 0 && st->n_local > 0) LOOM_TRY(moe_mlp_buffers(fn, st));
  moe_kargs(plan, st);
  LOOM_TRY(loom__trace_stamps(plan, 2, moe_stamp_rows, moe_stamp_names, &st->k.stamps));
  LOOM_TRY(loom__moe_grid_limits(comm->sm_count, comm->world ? (int)loom__param_MOE_WORLD_COMB_PER_SM() : 0,
                                 &st->grid));
  return loom__comm_fence(comm); /* every rank's buffers exist before any peer stores into them */
}

static void moe_describe(loom_plan_t plan, const void *state) {
  const loom_moe_state_t *st = (const loom_moe_state_t *)state;
  const loom_moe_desc_t *d = &st->desc;
  LOOM_INFO("%s: W=%d, %d experts (%d here, from %d), top-%d, H=%d, T_max=%lld, capacity %lld: receive buffer of %lld "
            "rows, %zu symmetric bytes",
            plan->op->plan_fn, st->world, d->experts, st->n_local, st->first_local, d->topk, d->hidden,
            (long long)d->max_tokens, (long long)d->capacity, (long long)st->max_recv, st->symmetric_bytes);
}

const loom_op_t loom__op_moe = {
    .name = "moe",
    .plan_fn = "loom_plan_moe",
    .state_bytes = sizeof(loom_moe_state_t),
    .differ = "hidden, experts, topk, max_tokens, capacity, dtype and ffn",
    .check = moe_check,
    .resolve = moe_resolve,
    .lay_out = moe_lay_out,
    .fill = moe_fill,
    .release = moe_release,
    .describe = moe_describe,
};

loom_result_t loom_plan_moe(loom_comm_t comm, const loom_moe_desc_t *desc, loom_plan_t *out) {
  return loom__plan_make(comm, &loom__op_moe, desc, out);
}

loom_result_t loom_moe_plan_info(loom_plan_t plan, loom_moe_plan_info_t *info) {
  const char *fn = "loom_moe_plan_info";
  loom_moe_state_t *st;
  LOOM_TRY(loom__plan_state(plan, fn, NULL, &loom__op_moe, (void **)&st));
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: info=NULL", fn);
  if (info->struct_size != sizeof *info)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: info->struct_size=%zu, expected %zu (initialise with LOOM_MOE_PLAN_INFO_INIT)", fn,
                      info->struct_size, sizeof *info);
  info->local_experts = st->n_local;
  info->first_expert = st->first_local;
  info->max_recv_rows = st->max_recv;
  info->recv = st->recv;
  info->expert_offsets = st->k.expert_off;
  info->symmetric_bytes = st->symmetric_bytes;
  info->device_bytes = st->device_bytes;
  return LOOM_SUCCESS;
}

/* A bad routing entry a kernel recorded: the error of this call (the
 * record is cleared, so the next one can be told). */
static loom_result_t moe_reported(loom_moe_state_t *st, const char *fn) {
  volatile loom_moe_err_t *rec = st->err;
  if (!rec->valid) return LOOM_SUCCESS;
  const loom_moe_err_t e = *(const loom_moe_err_t *)st->err;
  memset(st->err, 0, sizeof *st->err);
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                    "%s: an earlier dispatch's ids[%lld] (token %lld, j %lld) = %d %s: that row was left out", fn,
                    (long long)e.entry, (long long)(e.entry / st->desc.topk), (long long)(e.entry % st->desc.topk),
                    (int)e.value,
                    e.kind == 1 ? "is not an expert (outside [0, experts))" : "repeats an earlier expert of its token");
}

loom_result_t loom__moe_state(loom_plan_t plan, const char *fn, loom_moe_state_t **st) {
  LOOM_TRY(loom__plan_state(plan, fn, NULL, &loom__op_moe, (void **)st));
  LOOM_TRY(loom__comm_check(plan->comm, fn));
  return moe_reported(*st, fn);
}

loom_result_t loom__moe_enter(loom_plan_t plan, const char *fn, cudaStream_t stream, loom_moe_state_t **st) {
  LOOM_TRY(loom__call_enter(plan, fn, NULL, &loom__op_moe, stream, (void **)st));
  return moe_reported(*st, fn);
}

loom_result_t loom_moe_dispatch(loom_plan_t plan, const void *x, const int32_t *ids, int64_t tokens,
                                cudaStream_t stream) {
  const char *fn = "loom_moe_dispatch";
  loom_moe_state_t *st;
  LOOM_TRY(loom__moe_enter(plan, fn, stream, &st));
  LOOM_TRY(loom__moe_dispatch_body(plan, st, fn, x, ids, tokens, 0, 0, stream));
  return loom__call_exit(plan, stream, NULL);
}

loom_result_t loom__moe_dispatch_body(loom_plan_t plan, loom_moe_state_t *st, const char *fn, const void *x,
                                      const int32_t *ids, int64_t tokens, int prologue, int max_blocks,
                                      cudaStream_t stream) {
  const loom_moe_desc_t *d = &st->desc;
  if (tokens < 0 || tokens > d->max_tokens)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: tokens=%lld is outside [0, desc->max_tokens=%lld]", fn,
                      (long long)tokens, (long long)d->max_tokens);
  const size_t row = (size_t)d->hidden * loom_dtype_size(d->dtype);
  if (tokens > 0) {
    const loom_buf_t in[2] = {{"x", x, (size_t)tokens * row, LOOM_BUF_ALIGN16, NULL},
                              {"ids", ids, (size_t)tokens * (size_t)d->topk * sizeof(int32_t), 0, NULL}};
    LOOM_TRY(loom__check_bufs(fn, plan->comm, in, 2));
  }
  loom_moe_kargs_t k = st->k;
  k.x = (const char *)x, k.ids = ids, k.tokens = tokens, k.prologue = prologue && st->n_local > 0;
  const int64_t n = tokens * d->topk;
  int64_t nch = (n + 63) / 64; /* chunks of >= 64 entries: 2 warp steps each at decode sizes */
  if (nch > LOOM_MOE_CHUNKS_MAX) nch = LOOM_MOE_CHUNKS_MAX;
  if (nch < 1) nch = 1;
  k.nchunks = (int)nch;
  k.chunk = n > 0 ? (n + nch - 1) / nch : 1;
  (void)loom__plan_next_epoch(plan);
  LOOM_TRY(loom__moe_dispatch_launch(&k, &st->grid, max_blocks, stream));
  st->tokens = tokens, st->dispatched = 1;
  return LOOM_SUCCESS;
}

loom_result_t loom_moe_combine(loom_plan_t plan, const void *y, const float *weights, void *out,
                               cudaStream_t stream) {
  const char *fn = "loom_moe_combine";
  loom_moe_state_t *st;
  LOOM_TRY(loom__moe_enter(plan, fn, stream, &st));
  LOOM_TRY(loom__moe_combine_body(plan, st, fn, y, weights, out, 0, stream));
  return loom__call_exit(plan, stream, NULL);
}

loom_result_t loom__moe_combine_body(loom_plan_t plan, loom_moe_state_t *st, const char *fn, const void *y,
                                     const float *weights, void *out, int sent, cudaStream_t stream) {
  if (!st->dispatched)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: plan=%p has not dispatched yet: a combine returns the rows of "
                      "the last dispatch", fn, (void *)plan);
  const loom_moe_desc_t *d = &st->desc;
  const size_t row = (size_t)d->hidden * loom_dtype_size(d->dtype);
  /* y's rows are as many as this rank received, known on the device only:
   * its first row is checked here, the rest is the caller's (the
   * receive buffer's size bounds it) */
  const loom_buf_t bufs[3] = {{"y", y, row, LOOM_BUF_ALIGN16, NULL},
                              {"weights", weights, (size_t)st->tokens * (size_t)d->topk * sizeof(float),
                               st->tokens > 0 ? 0 : LOOM_BUF_OPTIONAL, NULL},
                              {"out", out, (size_t)st->tokens * row, st->tokens > 0 ? LOOM_BUF_ALIGN16 : LOOM_BUF_OPTIONAL,
                               NULL}};
  LOOM_TRY(loom__check_bufs(fn, plan->comm, bufs, 3));
  loom_moe_kargs_t k = st->k;
  k.y = (const char *)y, k.weights = weights, k.out = (char *)out, k.tokens = st->tokens, k.sent = sent;
  (void)loom__plan_next_epoch(plan);
  return loom__moe_combine_launch(&k, st->max_recv, &st->grid, stream);
}
