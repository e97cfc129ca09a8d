/*
 * tp_linear.c - plans of the tensor-parallel ops (loom_plan_ag_gemm,
 * loom_plan_gemm_rs, loom_plan_gemm_ar), their info, teardown, and what the
 * calls share: the state lookup, the fork/join around the side stream, the
 * peers' addresses of a symmetric buffer. The calls are in ag_gemm.c,
 * gemm_rs.c and gemm_ar.c; the protocol in tp_linear.h.
 *
 * A GEMM+AllReduce plan is a GEMM+ReduceScatter plan (the same partial
 * buffer, tile and done signals, GEMM configuration) plus W x tiles
 * "gathered" signals in its workspace slice; sequential, it holds a
 * loom_malloc partial [m, n] and a loom_allreduce plan of it instead.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baseline/baseline.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/handle.h"
#include "core/log.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/tune.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

__attribute__((constructor)) static void loom__tp_wait_sites(void) {
  loom__wait_site_register(LOOM_SITE_AG_READY, "AllGather+GEMM: peer's gathered buffer writable (its call started)");
  loom__wait_site_register(LOOM_SITE_RS_TILE, "GEMM+ReduceScatter: a peer's partial tile");
  loom__wait_site_register(LOOM_SITE_RS_DONE, "GEMM+ReduceScatter: a peer still reading this rank's previous partial");
  loom__wait_site_register(LOOM_SITE_AR_GATHERED, "GEMM+AllReduce: a peer's reduced tile of this rank's out");
  loom__wait_site_register(LOOM_SITE_RS_PUSHED,
                           "GEMM+ReduceScatter (bulk reduce): a peer's partial tiles added into this rank's sum");
}

const char *loom__tp_kind_op(int k) { return k == LOOM__TP_AG ? "ag_gemm" : k == LOOM__TP_RS ? "gemm_rs" : "gemm_ar"; }

static const char *kind_op(loom__tp_kind_t k) { return loom__tp_kind_op((int)k); }

const char *loom__tp_gemm_name(loom_tp_gemm_t g) {
  return g == LOOM_TP_GEMM_LOOM ? "loom" : g == LOOM_TP_GEMM_CUBLASLT ? "cuBLASLt" : "auto";
}

int loom__tp_cublaslt_takes(loom_dtype_t ab, loom_dtype_t c) { return c == ab || c == LOOM_FP32; }

loom_tp_gemm_t loom__tp_resolve_gemm(const loom_tp_desc_t *d, loom_tp_transfer_t t) {
  if (t != LOOM_TP_SEQUENTIAL) return LOOM_TP_GEMM_LOOM;
  if (d->sequential_gemm != LOOM_TP_GEMM_AUTO) return d->sequential_gemm;
  return loom__tp_cublaslt_takes(d->ab_type, d->c_type) ? LOOM_TP_GEMM_CUBLASLT : LOOM_TP_GEMM_LOOM;
}

loom_result_t loom__tp_seq_gemm(loom_tp_state_t *st, const loom_gemm_desc_t *g, const void *a, const void *b,
                                void *c, const void *bias, cudaStream_t stream) {
  if (st->gemm_engine == LOOM_TP_GEMM_CUBLASLT && st->tune_base_gemm) {
    st->tune_base_gemm = 0; /* the winner is recorded for this shape and these alignments; C is computed */
    return loom__base_gemm_tune(g, a, b, c, bias, LOOM_TP_TUNE_CUBLASLT_CANDIDATES, 3, stream, NULL);
  }
  if (st->gemm_engine == LOOM_TP_GEMM_CUBLASLT) return loom__base_gemm(g, a, b, c, bias, stream);
  return loom_gemm(g, a, b, c, bias, stream);
}

const char *loom__tp_transfer_name(loom_tp_transfer_t t) {
  switch (t) {
    case LOOM_TP_AUTO: return "LOOM_TP_AUTO";
    case LOOM_TP_SEQUENTIAL: return "LOOM_TP_SEQUENTIAL";
    case LOOM_TP_COPY_ENGINE: return "LOOM_TP_COPY_ENGINE";
    case LOOM_TP_SM_COPY: return "LOOM_TP_SM_COPY";
    case LOOM_TP_SM_ATOMIC: return "LOOM_TP_SM_ATOMIC";
    case LOOM_TP_BULK_REDUCE: return "LOOM_TP_BULK_REDUCE";
  }
  return "unknown";
}

loom_gemm_desc_t loom__tp_gemm_desc(const loom_tp_desc_t *d) {
  loom_gemm_desc_t g = LOOM_GEMM_DESC(d->m, d->n, d->k, d->ab_type, d->c_type, d->b_layout, d->has_bias);
  return g;
}

loom_result_t loom__tp_state(loom_plan_t plan, const char *fn, int kind, loom_tp_state_t **st) {
  LOOM_TRY(loom__check_plan(plan, fn));
  const int is_ag = plan->op && strcmp(plan->op, "ag_gemm") == 0, is_rs = plan->op && strcmp(plan->op, "gemm_rs") == 0,
            is_ar = plan->op && strcmp(plan->op, "gemm_ar") == 0;
  const int have = is_ag ? LOOM__TP_AG : is_rs ? LOOM__TP_RS : LOOM__TP_AR;
  if (!plan->op_state || !(is_ag || is_rs || is_ar) || (kind >= 0 && kind != have))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: plan=%p is a %s plan, not a%s plan", fn, (void *)plan,
                      plan->op ? plan->op : "(unknown)",
                      kind < 0                ? "n ag_gemm, gemm_rs or gemm_ar"
                      : kind == LOOM__TP_AG   ? "n ag_gemm"
                      : kind == LOOM__TP_RS   ? " gemm_rs"
                                              : " gemm_ar");
  *st = (loom_tp_state_t *)plan->op_state;
  return LOOM_SUCCESS;
}

/* The description's header and its GEMM. */
static loom_result_t tp_check_gemm(const char *fn, int comm_size, const loom_tp_desc_t *d) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL must point to a loom_tp_desc_t", fn);
  if (d->struct_size != sizeof(loom_tp_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_TP_DESC_INIT; header and "
                      "library differ?)",
                      fn, d->struct_size, sizeof(loom_tp_desc_t));
  if (d->world_size != comm_size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->world_size=%d differs from the comm's size %d", fn,
                      d->world_size, comm_size);
  char gfn[96];
  snprintf(gfn, sizeof gfn, "%s: desc", fn);
  const loom_gemm_desc_t g = loom__tp_gemm_desc(d);
  LOOM_TRY(loom__gemm_validate_desc(gfn, &g));
  return LOOM_SUCCESS;
}

/* The activation and bias each op takes in its description. */
static loom_result_t tp_check_epilogue(const char *fn, int kind, const loom_tp_desc_t *d) {
  if (d->activation < LOOM_ACT_NONE || d->activation > LOOM_ACT_GELU_ERF)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->activation=%d is unknown: must be LOOM_ACT_NONE, _RELU, _GELU_TANH or _GELU_ERF", fn,
                      (int)d->activation);
  if (kind == LOOM__TP_RS && d->activation != LOOM_ACT_NONE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->activation=%d: GEMM+ReduceScatter takes no activation (it would apply to each "
                      "rank's partial sum): must be LOOM_ACT_NONE",
                      fn, (int)d->activation);
  if (kind == LOOM__TP_AR && d->activation != LOOM_ACT_NONE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->activation=%d: GEMM+AllReduce takes its activation from the call's epilogue "
                      "(loom_epilogue_t.activation, applied to the sum over ranks): must be LOOM_ACT_NONE",
                      fn, (int)d->activation);
  if (kind == LOOM__TP_AR && d->has_bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->has_bias=%d: GEMM+AllReduce takes its bias from the call's epilogue "
                      "(loom_epilogue_t.bias, added once to the sum over ranks): must be 0",
                      fn, d->has_bias);
  return LOOM_SUCCESS;
}

/* The transfers each op offers. */
static loom_result_t tp_check_transfer(const char *fn, int kind, const loom_tp_desc_t *d, int all_reachable) {
  if (d->transfer < LOOM_TP_AUTO || d->transfer > LOOM_TP_BULK_REDUCE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=%d is unknown: must be LOOM_TP_AUTO, _SEQUENTIAL, _COPY_ENGINE, _SM_COPY, "
                      "_SM_ATOMIC or _BULK_REDUCE",
                      fn, (int)d->transfer);
  if (kind != LOOM__TP_RS && d->transfer == LOOM_TP_BULK_REDUCE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_BULK_REDUCE is a GEMM+ReduceScatter transfer (bulk reductions "
                      "into the owners' rows): use LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (d->transfer == LOOM_TP_BULK_REDUCE && !loom__tp_bulk_shape_ok(d->m, d->world_size))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: desc->transfer=LOOM_TP_BULK_REDUCE needs m=%lld to be world_size=%d equal shards of a "
                      "multiple of %d rows (the epilogue's chunks each add into one owner): use LOOM_TP_SM_COPY or "
                      "LOOM_TP_SEQUENTIAL",
                      fn, (long long)d->m, d->world_size, LOOM_TP_BULK_ROWS);
  if (kind == LOOM__TP_AG && d->transfer == LOOM_TP_SM_ATOMIC)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_SM_ATOMIC is a GEMM+ReduceScatter reduction: AllGather+GEMM takes "
                      "LOOM_TP_COPY_ENGINE, LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_RS && d->transfer == LOOM_TP_COPY_ENGINE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_COPY_ENGINE is not offered for GEMM+ReduceScatter (the "
                      "partials are reduced by SMs): use LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_AR && d->transfer == LOOM_TP_COPY_ENGINE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_COPY_ENGINE is not offered for GEMM+AllReduce (the partials "
                      "are reduced, and the epilogue applied, by SMs): use LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or "
                      "LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_AR && d->transfer == LOOM_TP_SM_ATOMIC)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->transfer=LOOM_TP_SM_ATOMIC is not offered for GEMM+AllReduce (the epilogue "
                      "needs each sum complete before it runs, and the fused sum is deterministic): use "
                      "LOOM_TP_SM_COPY, LOOM_TP_SEQUENTIAL or LOOM_TP_AUTO",
                      fn);
  if (kind == LOOM__TP_AR && !all_reachable)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: not every rank is load/store reachable (GEMM+AllReduce, fused or sequential through "
                      "loom_allreduce, needs one NVLink domain): use loom_gemm and ncclAllReduce across nodes",
                      fn);
  return LOOM_SUCCESS;
}

/* The knobs: the sequential GEMM, chunk rows, communication blocks. */
static loom_result_t tp_check_knobs(const char *fn, int sm_count, const loom_tp_desc_t *d) {
  if (d->sequential_gemm < LOOM_TP_GEMM_AUTO || d->sequential_gemm > LOOM_TP_GEMM_CUBLASLT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->sequential_gemm=%d is unknown: must be LOOM_TP_GEMM_AUTO, _LOOM or _CUBLASLT", fn,
                      (int)d->sequential_gemm);
  if (d->sequential_gemm == LOOM_TP_GEMM_CUBLASLT && !loom__tp_cublaslt_takes(d->ab_type, d->c_type))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: desc->sequential_gemm=LOOM_TP_GEMM_CUBLASLT: cuBLASLt has no GEMM of %s inputs with %s "
                      "output: use LOOM_TP_GEMM_LOOM or LOOM_TP_GEMM_AUTO",
                      fn, loom__dtype_name(d->ab_type), loom__dtype_name(d->c_type));
  if (d->chunk_rows < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->chunk_rows=%d must be >= 0 (0: chosen by the plan)", fn,
                      d->chunk_rows);
  if (d->comm_blocks < 0 || (sm_count > 0 && d->comm_blocks >= sm_count))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->comm_blocks=%d must be in [0, %d) (0: chosen by the plan; the GEMM keeps the "
                      "other SMs)",
                      fn, d->comm_blocks, sm_count);
  return LOOM_SUCCESS;
}

/* Resolves AUTO's shape-independent half, and refuses a fused transfer
 * this comm and GEMM cannot carry. */
static loom_result_t tp_resolve_transfer(const char *fn, int kind, int comm_size, const loom_tp_desc_t *d,
                                         loom_tp_transfer_t *resolved, int all_reachable, int hooks_ok) {
  loom_tp_transfer_t t = d->transfer;
  const int fused_possible = all_reachable && hooks_ok && comm_size <= LOOM_TP_MAX_PEERS;
  if (t == LOOM_TP_AUTO) {
    /* AG with shards of fewer rows than the hooked GEMMs' smallest tile:
     * every tile row then holds rows of another rank, so no tile can run
     * before remote data has arrived and the fused path can hide nothing
     * (it only adds its protocol: 0.70-0.82 of NCCL + cuBLASLt at m = 64,
     * W = 2, docs/perf/tp.md, "Shards shorter than a tile"); the sequential path is the baseline itself */
    const int can_overlap = kind != LOOM__TP_AG || loom__tp_shard_rows(d->m, comm_size) >= LOOM_TP_MIN_TILE_ROWS;
    /* RS: the bulk reduction where its shape rule holds (the plan falls
     * back to SM_COPY where the GEMM cannot run it: not sm90) */
    const loom_tp_transfer_t rs = kind == LOOM__TP_RS && loom__tp_bulk_shape_ok(d->m, comm_size) ? LOOM_TP_BULK_REDUCE
                                                                                                 : LOOM_TP_SM_COPY;
    t = comm_size > 1 && fused_possible && can_overlap ? (kind == LOOM__TP_AG ? LOOM_TP_COPY_ENGINE : rs)
                                                       : LOOM_TP_SEQUENTIAL;
  }
  if (t != LOOM_TP_SEQUENTIAL && !fused_possible)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: desc->transfer=%s needs every peer load/store reachable (%s), loom's GEMM kernels "
                      "(compute capability >= 8.0: %s) and at most %d ranks (%d): use LOOM_TP_SEQUENTIAL",
                      fn, loom__tp_transfer_name(t), all_reachable ? "yes" : "no", hooks_ok ? "yes" : "no",
                      LOOM_TP_MAX_PEERS, comm_size);
  *resolved = t;
  return LOOM_SUCCESS;
}


loom_result_t loom__tp_check_desc(const char *fn, int kind, int comm_size, int sm_count, const loom_tp_desc_t *d,
                                  loom_tp_transfer_t *resolved, int all_reachable, int hooks_ok) {
  LOOM_TRY(tp_check_gemm(fn, comm_size, d));
  LOOM_TRY(tp_check_epilogue(fn, kind, d));
  LOOM_TRY(tp_check_transfer(fn, kind, d, all_reachable));
  LOOM_TRY(tp_check_knobs(fn, sm_count, d));
  return tp_resolve_transfer(fn, kind, comm_size, d, resolved, all_reachable, hooks_ok);
}

/* The plan's fused GEMM configuration: the path's heuristic for the local
 * GEMM, as a data-parallel GEMM (what hooked kernels run): on sm90 128-row
 * tiles, or the 64-row decode tiles where the heuristic picks 64-row or
 * small-m tiles (m <= 64); sm80 runs 128-row tiles. *bm: the rows of its
 * tiles. The grid is set by the caller. */
/* The fused GEMM's configuration: the plain heuristic's tile, bounded to
 * what hooked kernels run. `clusters`: the GEMM only waits (AllGather: it
 * stores plainly into C), so it may take the heuristic's 2x1 clusters (the
 * launcher keeps them where the tile order allows; GEMM+ReduceScatter's
 * routed stores and per-tile signals run without). The band height (group)
 * is always set, so the AG band rule and the RS reduction's tile order see
 * the one the kernel runs. */
static loom_result_t fused_gemm_config(const loom_gemm_desc_t *g, int clusters, loom_gemm_config_t *cfg, int *bm) {
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  loom__gemm_path_t path = LOOM__PATH_BASE;
  LOOM_TRY(loom__gemm_path(g, &path));
  loom_gemm_config_t out;
  memset(&out, 0, sizeof out);
  if (path == LOOM__PATH_SM90) {
    const loom_gemm_config_t c = loom__gemm_choose(g, &dev, 1);
    const loom_gemm_config_t h = loom__gemm_sm90_heuristic(g, &dev);
    out.group = h.group > 0 ? h.group : 16; /* the sm90 kernel's default band */
    if (c.bm == 16 || c.bm == 64 || h.bm == 64) {
      out.bm = 64;
      out.bn = h.bm == 64 && h.bn == 256 ? 256 : 128;
    } else {
      out.bm = 128;
      out.bn = h.bn == 128 || h.bn == 192 || h.bn == 224 || h.bn == 256 ? h.bn : 128;
      out.cluster = clusters && h.cluster == 2 && (out.bn == 128 || out.bn == 256) ? 2 : 0;
    }
  } else {
    const loom_gemm_config_t h = loom__gemm_sm80_heuristic(g, &dev);
    out.bm = 128;
    out.bn = h.bn == 256 ? 256 : 128;
    out.group = h.group > 0 ? h.group : 8; /* the sm80 kernel's default band */
  }
  *cfg = out;
  *bm = out.bm;
  return LOOM_SUCCESS;
}

/* BULK_REDUCE's GEMM: the sm90 kernels (the tensor memory accelerator adds
 * the epilogue's chunks), tiles whose every column leaves through it (bn
 * 224 stores its last 32 16-bit columns from registers: 192 instead). */
int loom__tp_bulk_gemm_runs(const loom_gemm_desc_t *g) {
  loom__gemm_path_t path = LOOM__PATH_BASE;
  return loom__gemm_path(g, &path) == LOOM_SUCCESS && path == LOOM__PATH_SM90;
}

static loom_result_t bulk_gemm_config(const loom_gemm_desc_t *g, loom_gemm_config_t *cfg) {
  if (!loom__tp_bulk_gemm_runs(g))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom_plan_gemm_rs: desc->transfer=LOOM_TP_BULK_REDUCE needs loom's sm90 GEMM kernels (compute "
                      "capability 9.0, sm_90a code, LOOM_GEMM_PATH unset): use LOOM_TP_SM_COPY or LOOM_TP_SEQUENTIAL");
  if (cfg->bn == 224 && g->c_type != LOOM_FP32) cfg->bn = 192;
  return LOOM_SUCCESS;
}

static void tp_destroy(loom_plan_t plan) {
  loom_tp_state_t *st = (loom_tp_state_t *)plan->op_state;
  if (!st) return;
  loom_comm_t comm = plan->comm;
  loom__plan_done_release(st->done, plan->op); /* the last call's kernels may still use what follows */
  if (st->a_full_own) {
    if (st->a_full_own_sym) (void)loom__comm_free(comm, st->a_full_own);
    else (void)cudaFree(st->a_full_own);
  }
  if (st->partial) {
    if (st->partial_sym) (void)loom__comm_free(comm, st->partial);
    else (void)cudaFree(st->partial);
  }
  if (st->ar_plan) (void)loom_plan_destroy(st->ar_plan);
  if (st->d_dst_signal) (void)cudaFree(st->d_dst_signal);
  if (st->d_row_dst) (void)cudaFree(st->d_row_dst);
  if (st->d_maps) (void)cudaFree(st->d_maps);
  if (st->d_schedule) (void)cudaFree(st->d_schedule);
  if (st->fork) (void)cudaEventDestroy(st->fork);
  if (st->join) (void)cudaEventDestroy(st->join);
  if (st->side) (void)cudaStreamDestroy(st->side);
  loom__tp_trace_destroy(st);
  free(st);
  plan->op_state = NULL;
}

void loom__tp_hooks_base(loom_plan_t plan, const loom_tp_state_t *st, int shift_rank, loom_dev_comm_t dc,
                         loom_gemm_hooks_t *h) {
  memset(h, 0, sizeof *h);
  h->order.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
  h->order.row_shift = loom__tp_row_shift(st->gemm.m, st->world, shift_rank, st->gemm_bm);
  h->epoch_word = (const uint32_t *)((const char *)plan->comm->ws_ptr + plan->epoch_offset);
  h->comm = dc;
}

loom_result_t loom__tp_peer_addresses(const char *fn, const char *what, loom_comm_t comm, const void *p, size_t bytes,
                                      char **peer) {
  return loom__peer_addresses(fn, what, comm, p, bytes,
                              "peers store into it, so it must be symmetric memory (or pass NULL to use the plan's "
                              "own buffer)",
                              peer);
}

/* BULK_REDUCE: the GEMM's striped tile order, in device memory. */
static loom_result_t bulk_schedule(loom_tp_state_t *st) {
  const size_t tiles = (size_t)st->tiles_m * (size_t)st->tiles_n;
  int32_t *order = (int32_t *)malloc(tiles * sizeof(int32_t));
  if (!order) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_plan_gemm_rs: a tile order of %zu tiles", tiles);
  loom__rs_striped_order(st->gemm.m, st->world, st->rank, st->gemm_bm, st->tiles_n, st->gemm_cfg.group, order);
  cudaError_t e = cudaMalloc((void **)&st->d_schedule, tiles * sizeof(int32_t));
  if (e == cudaSuccess) {
    st->device_bytes += tiles * sizeof(int32_t);
    e = cudaMemcpy(st->d_schedule, order, tiles * sizeof(int32_t), cudaMemcpyHostToDevice);
  }
  free(order);
  LOOM_CUDA(e);
  return LOOM_SUCCESS;
}

/* BULK_REDUCE: the tensor maps of every owner's sum buffer [S, n] (as this
 * rank addresses it), in a device table the GEMM's epilogue reads. */
static loom_result_t bulk_maps(loom_plan_t plan, loom_tp_state_t *st) {
  loom_comm_t comm = plan->comm;
  const int W = st->world;
  const loom_gemm_desc_t *g = &st->gemm;
  char *sum[LOOM_TP_MAX_PEERS];
  LOOM_TRY(loom__tp_peer_addresses("loom_plan_gemm_rs", "sum buffer", comm, st->partial,
                                   (size_t)st->shard_rows * (size_t)g->n * loom_dtype_size(g->c_type), sum));
  uint8_t *maps = (uint8_t *)malloc((size_t)W * LOOM_GEMM_EPI_MAP_BYTES);
  if (!maps) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_plan_gemm_rs: %d tensor maps", W);
  loom_result_t r = LOOM_SUCCESS;
  for (int p = 0; p < W && r == LOOM_SUCCESS; ++p)
    r = loom__gemm_epi_map(maps + (size_t)p * LOOM_GEMM_EPI_MAP_BYTES, sum[p], g->c_type, st->shard_rows, g->n);
  cudaError_t e = r == LOOM_SUCCESS ? cudaMalloc(&st->d_maps, (size_t)W * LOOM_GEMM_EPI_MAP_BYTES) : cudaSuccess;
  if (r == LOOM_SUCCESS && e == cudaSuccess) {
    st->device_bytes += (size_t)W * LOOM_GEMM_EPI_MAP_BYTES;
    e = cudaMemcpy(st->d_maps, maps, (size_t)W * LOOM_GEMM_EPI_MAP_BYTES, cudaMemcpyHostToDevice);
  }
  free(maps);
  LOOM_TRY(r);
  LOOM_CUDA(e);
  return LOOM_SUCCESS;
}

/* RS fused: the owners' signal arrays for this source's tiles, as this
 * rank addresses them, in a device array the GEMM's hooks read. */
static loom_result_t rs_tables(loom_plan_t plan, loom_tp_state_t *st) {
  loom_comm_t comm = plan->comm;
  const int W = st->world;
  char *ws[LOOM_TP_MAX_PEERS];
  LOOM_TRY(loom__tp_peer_addresses("loom_plan_gemm_rs", "workspace", comm, comm->ws_ptr, comm->ws_bytes, ws));
  uint32_t *sigs[LOOM_TP_MAX_PEERS];
  const size_t tiles = (size_t)st->tiles_m * (size_t)st->tiles_n;
  for (int p = 0; p < W; ++p) sigs[p] = (uint32_t *)(ws[p] + st->tile_off) + (size_t)st->rank * tiles;
  if (st->transfer == LOOM_TP_SM_ATOMIC) {
    /* every source adds into the owners' accumulators */
    char *acc[LOOM_TP_MAX_PEERS];
    LOOM_TRY(loom__tp_peer_addresses("loom_plan_gemm_rs", "accumulator", comm, st->partial,
                                     (size_t)st->shard_rows * (size_t)st->gemm.n * sizeof(float), acc));
    LOOM_CUDA(cudaMalloc((void **)&st->d_row_dst, (size_t)W * sizeof(void *)));
    st->device_bytes += (size_t)W * sizeof(void *);
    LOOM_CUDA(cudaMemcpyAsync(st->d_row_dst, acc, (size_t)W * sizeof(void *), cudaMemcpyHostToDevice, comm->stream));
  }
  if (st->transfer == LOOM_TP_BULK_REDUCE) {
    LOOM_TRY(bulk_maps(plan, st));
    LOOM_TRY(bulk_schedule(st));
  }
  LOOM_CUDA(cudaMalloc((void **)&st->d_dst_signal, (size_t)W * sizeof(uint32_t *)));
  st->device_bytes += (size_t)W * sizeof(uint32_t *);
  LOOM_CUDA(cudaMemcpyAsync(st->d_dst_signal, sigs, (size_t)W * sizeof(uint32_t *), cudaMemcpyHostToDevice, comm->stream));
  LOOM_CUDA(cudaStreamSynchronize(comm->stream));
  return LOOM_SUCCESS;
}

/* Everything a plan holds beyond its slice, for its resolved transfer. */
static loom_result_t tp_alloc(loom_plan_t plan, loom_tp_state_t *st) {
  loom_comm_t comm = plan->comm;
  const loom_gemm_desc_t *g = &st->gemm;
  const size_t es_ab = loom_dtype_size(g->ab_type), es_c = loom_dtype_size(g->c_type);
  const size_t Wrows = (size_t)st->world * (size_t)st->shard_rows; /* >= m: room for W equal shards */
  LOOM_CUDA(cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking));
  LOOM_CUDA(cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming));
  LOOM_CUDA(cudaEventCreateWithFlags(&st->join, cudaEventDisableTiming));
  LOOM_CUDA(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
  if (st->kind == LOOM__TP_AG) {
    const size_t bytes = Wrows * (size_t)g->k * es_ab;
    if (st->transfer == LOOM_TP_SEQUENTIAL) {
      LOOM_CUDA(cudaMalloc(&st->a_full_own, bytes));
      st->device_bytes += bytes;
    } else {
      LOOM_TRY(loom__comm_malloc(comm, bytes, &st->a_full_own));
      st->a_full_own_sym = 1;
      st->symmetric_bytes += bytes;
    }
  } else if (st->kind == LOOM__TP_AR && st->transfer == LOOM_TP_SEQUENTIAL) {
    /* loom_gemm's product, loom_allreduce's input (symmetric: peers load it) */
    const size_t bytes = (size_t)g->m * (size_t)g->n * es_c;
    LOOM_TRY(loom__comm_malloc(comm, bytes, &st->partial));
    st->partial_sym = 1;
    st->symmetric_bytes += bytes;
    loom_coll_desc_t cd = LOOM_COLL_DESC_INIT;
    cd.count = g->m * g->n;
    cd.cols = g->n; /* element row x n + col: the fused path's epilogue index */
    cd.dtype = cd.out_type = g->c_type;
    cd.world_size = st->world;
    LOOM_TRY(loom_plan_allreduce(comm, &cd, &st->ar_plan));
    loom_coll_plan_info_t ci = LOOM_COLL_PLAN_INFO_INIT;
    LOOM_TRY(loom_coll_plan_info(st->ar_plan, &ci));
    st->symmetric_bytes += ci.symmetric_bytes;
  } else if (st->transfer == LOOM_TP_SEQUENTIAL) {
    const size_t bytes = Wrows * (size_t)g->n * es_c;
    LOOM_CUDA(cudaMalloc(&st->partial, bytes));
    st->device_bytes += bytes;
  } else if (st->transfer == LOOM_TP_SM_ATOMIC || st->transfer == LOOM_TP_BULK_REDUCE) {
    /* the owner's accumulator of its S rows (SM_ATOMIC fp32, BULK_REDUCE
     * the output dtype), zero between calls (the owner zeroes what it has
     * read) */
    const size_t bytes = (size_t)st->shard_rows * (size_t)g->n *
                         (st->transfer == LOOM_TP_SM_ATOMIC ? sizeof(float) : es_c);
    LOOM_TRY(loom__comm_malloc(comm, bytes, &st->partial));
    st->partial_sym = 1;
    st->symmetric_bytes += bytes;
    LOOM_CUDA(cudaMemsetAsync(st->partial, 0, bytes, comm->stream));
    LOOM_CUDA(cudaStreamSynchronize(comm->stream));
    LOOM_TRY(rs_tables(plan, st));
    LOOM_TRY(loom__comm_fence(comm)); /* every accumulator is zero before any peer adds */
  } else {
    const size_t bytes = Wrows * (size_t)g->n * es_c;
    LOOM_TRY(loom__comm_malloc(comm, bytes, &st->partial));
    st->partial_sym = 1;
    st->symmetric_bytes += bytes;
    LOOM_TRY(rs_tables(plan, st));
  }
  return LOOM_SUCCESS;
}

/* What every rank's plan must have resolved alike (the agreement's hash). */
/* The shape-dependent half of LOOM_TP_AUTO (loom__tp_auto_fused), for a
 * fused plan whose GEMM configuration st holds: AG needs the GPU's ridge
 * point, RS the GEMM's tiles against its grid; AR never keeps the fused
 * path untuned (loom__tp_auto_fused says why). 1 (keep it) where the GPU's
 * properties cannot be read. */
static int auto_keeps_fused(const loom_tp_state_t *st, int kind, int64_t tiles) {
  loom__gemm_device_t dev;
  if (kind == LOOM__TP_AR) return loom__tp_auto_fused(kind, st->shard_rows, tiles, st->gemm_cfg.grid, 0.0);
  if (loom__gemm_device(&dev) != LOOM_SUCCESS) return 1;
  const double clock_hz = (double)dev.clock_khz * 1e3;
  if (st->transfer == LOOM_TP_BULK_REDUCE)
    return loom__tp_bulk_pays(tiles, st->gemm_cfg.grid, st->desc.k, st->world, (int32_t)loom_dtype_size(st->gemm.c_type),
                              loom__tp_flop_per_link_byte(dev.sms, clock_hz, dev.cc_major));
  if (kind == LOOM__TP_AG && !loom__tp_ag_pays(st->shard_rows, st->desc.m, st->desc.n, st->desc.k, st->world,
                                               loom__tp_tensor_flops(dev.sms, clock_hz, dev.cc_major)))
    return 0;
  const double ridge = loom__tp_ridge_rows(dev.sms, clock_hz, dev.cc_major, dev.dram_bps);
  return loom__tp_auto_fused(kind, st->shard_rows, tiles, st->gemm_cfg.grid, ridge);
}

static uint64_t tp_fingerprint(const loom_tp_state_t *st, uint32_t nsig) {
  const loom_tp_desc_t *d = &st->desc;
  const int64_t f[20] = {st->kind, d->m, d->n, d->k, d->ab_type, d->c_type, d->b_layout, d->has_bias,
                         d->activation, d->world_size, st->transfer, st->gemm_engine, st->chunk_rows,
                         st->comm_blocks, st->gemm_bm, st->gemm_cfg.bn, st->tiles_m, st->tiles_n,
                         st->chunks_per_shard, nsig};
  return loom__fnv64(LOOM_FNV64_INIT, f, sizeof f);
}

/* Resolve: the state of a checked description with its resolved transfer. */
static void tp_resolve(loom_comm_t comm, loom_tp_state_t *st, const loom_tp_desc_t *desc, loom__tp_kind_t kind,
                       loom_tp_transfer_t t) {
  st->kind = kind;
  st->desc = *desc;
  st->gemm = loom__tp_gemm_desc(desc);
  st->transfer = t;
  st->gemm_engine = loom__tp_resolve_gemm(desc, t);
  st->rank = comm->rank;
  st->world = comm->size;
  st->shard_rows = loom__tp_shard_rows(desc->m, st->world);
  st->my_begin = loom__tp_shard_begin(desc->m, st->world, st->rank);
  st->my_len = loom__tp_shard_len(desc->m, st->world, st->rank);
}

/* The fused GEMM: its configuration, tiles, and the SMs it leaves to the
 * kernels whose signals its persistent blocks wait for (the copy engine's
 * one-thread signal kernels: one SM; SM_COPY: comm_blocks, by default 4..16
 * chosen so that the GEMM needs no extra wave). */
static loom_result_t tp_fused_gemm(loom_comm_t comm, loom_tp_state_t *st) {
  if (st->transfer == LOOM_TP_BULK_REDUCE && st->desc.transfer == LOOM_TP_AUTO && !loom__tp_bulk_gemm_runs(&st->gemm))
    st->transfer = LOOM_TP_SM_COPY; /* AUTO's choice where the sm90 GEMM does not run */
  const int bulk = st->transfer == LOOM_TP_BULK_REDUCE;
  LOOM_TRY(fused_gemm_config(&st->gemm, st->kind == LOOM__TP_AG || bulk, &st->gemm_cfg, &st->gemm_bm));
  if (bulk) LOOM_TRY(bulk_gemm_config(&st->gemm, &st->gemm_cfg));
  if (st->kind == LOOM__TP_AG) /* bands of the tile order inside one shard each */
    st->gemm_cfg.group = loom__ag_band_rows(
        st->shard_rows % st->gemm_bm == 0 ? st->shard_rows / st->gemm_bm : 0, st->gemm_cfg.group);
  st->tiles_m = (int)loom__ceil_div(st->desc.m, st->gemm_bm);
  st->tiles_n = (int)loom__ceil_div(st->desc.n, st->gemm_cfg.bn);
  const int64_t tiles = (int64_t)st->tiles_m * st->tiles_n;
  const loom_tp_transfer_t t = st->transfer;
  st->comm_blocks = t != LOOM_TP_SM_COPY && t != LOOM_TP_SM_ATOMIC ? 0
                    : st->desc.comm_blocks > 0 ? st->desc.comm_blocks
                                               : loom__tp_comm_sms(tiles, comm->sm_count, 4, 16);
  /* BULK_REDUCE waits for nothing: the GEMM keeps every SM */
  st->gemm_cfg.grid = comm->sm_count - (st->comm_blocks > 0 ? st->comm_blocks : bulk ? 0 : 1);
  return LOOM_SUCCESS;
}

/* The shape-dependent half of AUTO: the fused path could hide nothing
 * here, so the plan is sequential. */
static void tp_demote(const char *fn, loom_tp_state_t *st) {
  const loom__tp_kind_t kind = st->kind;
  LOOM_INFO("%s: m=%lld: the fused path could hide nothing here (%s): sequential", fn, (long long)st->desc.m,
            kind == LOOM__TP_AG   ? "a shard's rows are memory-bound on B, or too few to pay back the fixed cost against "
                                    "the communication hidden"
            : kind == LOOM__TP_RS && st->transfer == LOOM_TP_BULK_REDUCE
                ? "under 1.5 waves of tiles, or a last wave's waste above the communication it would hide"
            : kind == LOOM__TP_RS ? "the GEMM's tiles fit one wave"
                                  : "GEMM + loom_allreduce with the epilogue measured faster");
  st->transfer = LOOM_TP_SEQUENTIAL;
  st->gemm_engine = loom__tp_resolve_gemm(&st->desc, st->transfer);
  memset(&st->gemm_cfg, 0, sizeof st->gemm_cfg);
  st->gemm_bm = st->tiles_m = st->tiles_n = st->comm_blocks = 0;
}

/* RS / AR: the words at tile_off: a signal per source and tile, or for
 * BULK_REDUCE one "pushed" word per source. */
static size_t tile_signal_words(const loom_tp_state_t *st) {
  return st->transfer == LOOM_TP_BULK_REDUCE ? (size_t)st->world
                                             : (size_t)st->world * (size_t)st->tiles_m * (size_t)st->tiles_n;
}

/* Lay out the fused plan's signal words: AG, ready [W] and the chunks'
 * [W x chunks per shard]; RS/AR, tile signals, done, count, and AR's
 * gathered signals. */
static loom_result_t tp_signals(const char *fn, loom_tp_state_t *st, uint32_t *nsig) {
  const loom_tp_desc_t *desc = &st->desc;
  int64_t n64;
  if (st->kind == LOOM__TP_AG) {
    int64_t cr = desc->chunk_rows;
    if (cr <= 0) cr = loom__ag_default_chunk_rows(st->shard_rows, st->gemm_bm, st->comm_blocks);
    if (cr < 1) cr = 1;
    if (cr > st->shard_rows) cr = st->shard_rows;
    st->chunk_rows = (int)cr;
    st->chunks_per_shard = loom__ag_chunks_per_shard(desc->m, st->world, cr);
    n64 = (int64_t)st->world + (int64_t)st->world * st->chunks_per_shard;
    *nsig = (uint32_t)n64;
    if (n64 > (int64_t)UINT32_MAX / 8)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %lld chunk signals are too many: raise desc->chunk_rows=%d",
                        fn, (long long)n64, desc->chunk_rows);
    return LOOM_SUCCESS;
  }
  const int64_t per = (int64_t)tile_signal_words(st);
  n64 = per + st->world + 2 + (st->kind == LOOM__TP_AR ? per : 0);
  *nsig = (uint32_t)n64;
  if (n64 > (int64_t)UINT32_MAX / 8)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %lld tile signals are too many (m=%lld, n=%lld)", fn,
                      (long long)n64, (long long)desc->m, (long long)desc->n);
  return LOOM_SUCCESS;
}

/* Resolve the fused path's GEMM (or fall back to sequential: AUTO,
 * untuned, where fusing could hide nothing) and lay out its signals. */
static loom_result_t tp_fused_layout(const char *fn, loom_comm_t comm, loom_tp_state_t *st, int tuned,
                                     uint32_t *nsig) {
  *nsig = 0;
  if (st->transfer == LOOM_TP_SEQUENTIAL) return LOOM_SUCCESS;
  LOOM_TRY(tp_fused_gemm(comm, st));
  const int64_t tiles = (int64_t)st->tiles_m * st->tiles_n;
  if (!tuned && st->desc.transfer == LOOM_TP_AUTO && !loom__tp_world_keeps_fused(comm, st->kind) &&
      !auto_keeps_fused(st, st->kind, tiles)) {
    tp_demote(fn, st);
    return LOOM_SUCCESS;
  }
  return tp_signals(fn, st, nsig);
}

/* The byte offsets of the signal words in the plan's slice. */
static void tp_signal_offsets(loom_plan_t plan, loom_tp_state_t *st) {
  if (st->kind == LOOM__TP_AG) {
    st->ready_off = plan->signals_offset;
    st->chunk_off = plan->signals_offset + (size_t)st->world * sizeof(uint32_t);
    return;
  }
  st->tile_off = plan->signals_offset;
  st->done_off = st->tile_off + tile_signal_words(st) * sizeof(uint32_t);
  st->count_off = st->done_off + (size_t)st->world * sizeof(uint32_t);
  st->gath_off = st->kind == LOOM__TP_AR ? st->count_off + 2 * sizeof(uint32_t) : (size_t)-1;
}

/* Allocate and preload: everything beyond the slice, then every kernel a
 * call launches, loaded now, not at its first launch next to a running
 * kernel that waits for it (lazy loading). */
static loom_result_t tp_fill(loom_plan_t plan, loom_tp_state_t *st) {
  LOOM_TRY(tp_alloc(plan, st));
  LOOM_TRY(loom__tp_preload_kernels());
  if (st->transfer != LOOM_TP_SEQUENTIAL)
    LOOM_TRY(loom__gemm_hooked_preload(&st->gemm, &st->gemm_cfg, (int)st->desc.activation));
  return LOOM_SUCCESS;
}

/* The plan of a checked description with its resolved transfer t: state,
 * agreement, workspace, memory, kernels. */
static loom_result_t tp_make(const char *fn, loom_comm_t comm, const loom_tp_desc_t *desc, loom__tp_kind_t kind,
                             loom_tp_transfer_t t, int tuned, loom_plan_t *out) {
  loom_result_t r = loom__tp_world_transfer(fn, comm, desc, kind, &t);
  if (r != LOOM_SUCCESS) return loom__comm_refuse(comm, fn, r);
  if (comm->detached) return loom__plan_detached(fn);
  loom_tp_state_t *st = (loom_tp_state_t *)loom__plan_state_alloc(comm, fn, sizeof *st, &r);
  if (!st) return r;
  tp_resolve(comm, st, desc, kind, t);
  uint32_t nsig = 0;
  r = tp_fused_layout(fn, comm, st, tuned, &nsig);
  if (r != LOOM_SUCCESS) {
    free(st);
    return loom__comm_refuse(comm, fn, r);
  }
  loom_plan_t plan = NULL;
  /* every rank resolved the same plan, before anything else collective */
  r = loom__plan_create(comm, fn, kind_op(kind), nsig, 0, tp_fingerprint(st, nsig),
                        "every rank must pass the same loom_tp_desc_t (m, n, k, dtypes, layout, bias, activation, "
                        "world size, transfer and knobs) and see the same tuning cache (LOOM_TUNE_FILE)",
                        &plan);
  if (r != LOOM_SUCCESS) {
    free(st);
    return r;
  }
  plan->op_state = st;
  plan->destroy_op = tp_destroy;
  tp_signal_offsets(plan, st);
  r = tp_fill(plan, st);
  if (r != LOOM_SUCCESS) return loom__plan_abandon(plan, r);
  LOOM_INFO("%s: m=%lld n=%lld k=%lld W=%d: %s%s, GEMM %s, S=%lld, chunk_rows=%d, comm_blocks=%d, tile %dx%d", fn,
            (long long)desc->m, (long long)desc->n, (long long)desc->k, st->world,
            loom__tp_transfer_name(st->transfer), tuned ? " (tuned)" : "", loom__tp_gemm_name(st->gemm_engine),
            (long long)st->shard_rows, st->chunk_rows, st->comm_blocks, st->gemm_bm, st->gemm_cfg.bn);
  *out = plan;
  return LOOM_SUCCESS;
}

static const char *tp_plan_fn(int kind) {
  return kind == LOOM__TP_AG ? "loom_plan_ag_gemm" : kind == LOOM__TP_RS ? "loom_plan_gemm_rs" : "loom_plan_gemm_ar";
}

/* 1 where the GEMM engine can carry the fused paths' hooks for desc's GEMM. */
static int tp_hooks_ok(const char *fn, loom_comm_t comm, const loom_tp_desc_t *desc) {
  if (comm->detached || !desc || desc->struct_size != sizeof *desc) return 0;
  loom__gemm_path_t path = LOOM__PATH_BASE;
  const loom_gemm_desc_t g = loom__tp_gemm_desc(desc);
  return loom__gemm_validate_desc(fn, &g) == LOOM_SUCCESS && loom__gemm_path(&g, &path) == LOOM_SUCCESS &&
         path != LOOM__PATH_BASE;
}

/* 1 for a description that leaves every knob to loom (the tuning cache's key). */
static int tp_leaves_all_to_loom(const loom_tp_desc_t *d) {
  return d->transfer == LOOM_TP_AUTO && d->chunk_rows == 0 && d->comm_blocks == 0 &&
         d->sequential_gemm == LOOM_TP_GEMM_AUTO;
}

/* What a checked description runs: *eff = desc with the tuning cache's
 * choice where it has one for a description that leaves every knob to loom
 * (*tuned = 1), and *t its resolved transfer. Never tunes. */
static void tp_take_tuned(const char *fn, loom_comm_t comm, loom__tp_kind_t kind, int hooks_ok, loom_tp_desc_t *eff,
                          loom_tp_transfer_t *t, int *tuned) {
  char key[LOOM_TUNE_KEY_BYTES], value[LOOM_TUNE_KEY_BYTES];
  *tuned = 0;
  if (comm->world || !tp_leaves_all_to_loom(eff) || !loom__tp_tune_key(kind, eff, comm->sm_count, key, sizeof key) ||
      !loom__tune_get(key, value, sizeof value))
    return;
  loom_tp_choice_t ch;
  if (loom__tp_tune_parse(value, &ch) != LOOM_SUCCESS) {
    LOOM_WARN("%s: %s", fn, loom_last_error());
    return;
  }
  loom_tp_desc_t e = *eff;
  e.transfer = ch.transfer, e.chunk_rows = ch.chunk_rows, e.comm_blocks = ch.comm_blocks, e.sequential_gemm = ch.gemm;
  loom_tp_transfer_t t2 = LOOM_TP_SEQUENTIAL;
  if (loom__tp_check_desc(fn, kind, comm->size, comm->sm_count, &e, &t2, comm->ws_all_reachable, hooks_ok) !=
      LOOM_SUCCESS) {
    LOOM_WARN("%s: tuned entry \"%s\" = \"%s\" does not apply here (%s): the heuristic's choice", fn, key, value,
              loom_last_error());
    return;
  }
  *eff = e, *t = t2, *tuned = 1;
}

/* The public entry points: check, tune first where LOOM_TUNE=1 asks for a
 * description the cache lacks (collective: every rank's cache lacks it
 * alike, or the tuner's agreement fails on every rank; the tuner makes
 * plans of named transfers through loom__tp_plan_make, never through here),
 * resolve, make. */
static loom_result_t tp_plan(loom_comm_t comm, const loom_tp_desc_t *desc, loom__tp_kind_t kind, loom_plan_t *out) {
  const char *fn = tp_plan_fn(kind);
  LOOM_TRY(loom__plan_begin(comm, fn, out));
  const int hooks_ok = tp_hooks_ok(fn, comm, desc);
  loom_tp_transfer_t t = LOOM_TP_SEQUENTIAL;
  const loom_result_t rc =
      loom__tp_check_desc(fn, kind, comm->size, comm->sm_count, desc, &t, comm->ws_all_reachable, hooks_ok);
  if (rc != LOOM_SUCCESS) return loom__comm_refuse(comm, fn, rc);
  char key[LOOM_TUNE_KEY_BYTES], value[LOOM_TUNE_KEY_BYTES];
  if (tp_leaves_all_to_loom(desc) && !comm->detached && !comm->world && loom__param_TUNE() == 1 &&
      loom__tp_tune_key(kind, desc, comm->sm_count, key, sizeof key) && !loom__tune_get(key, value, sizeof value)) {
    LOOM_INFO("%s: LOOM_TUNE=1 and no tuned entry for \"%s\": tuning it now", fn, key);
    LOOM_TRY(loom__tp_tune(comm, desc, kind, comm->stream));
  }
  loom_tp_desc_t eff = *desc;
  int tuned = 0;
  tp_take_tuned(fn, comm, kind, hooks_ok, &eff, &t, &tuned);
  return tp_make(fn, comm, &eff, kind, t, tuned, out);
}

loom_result_t loom__tp_plan_make(loom_comm_t comm, const loom_tp_desc_t *desc, int kind, loom_plan_t *out) {
  const char *fn = tp_plan_fn(kind);
  LOOM_TRY(loom__plan_begin(comm, fn, out));
  loom_tp_transfer_t t = LOOM_TP_SEQUENTIAL;
  const loom_result_t rc = loom__tp_check_desc(fn, kind, comm->size, comm->sm_count, desc, &t, comm->ws_all_reachable,
                                               tp_hooks_ok(fn, comm, desc));
  if (rc != LOOM_SUCCESS) return loom__comm_refuse(comm, fn, rc);
  return tp_make(fn, comm, desc, (loom__tp_kind_t)kind, t, 0, out);
}

loom_result_t loom_plan_ag_gemm(loom_comm_t comm, const loom_tp_desc_t *desc, loom_plan_t *out) {
  return tp_plan(comm, desc, LOOM__TP_AG, out);
}

loom_result_t loom_plan_gemm_rs(loom_comm_t comm, const loom_tp_desc_t *desc, loom_plan_t *out) {
  return tp_plan(comm, desc, LOOM__TP_RS, out);
}

loom_result_t loom_plan_gemm_ar(loom_comm_t comm, const loom_tp_desc_t *desc, loom_plan_t *out) {
  return tp_plan(comm, desc, LOOM__TP_AR, out);
}

loom_result_t loom_tp_plan_info(loom_plan_t plan, loom_tp_plan_info_t *info) {
  loom_tp_state_t *st;
  LOOM_TRY(loom__tp_state(plan, "loom_tp_plan_info", -1, &st));
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_tp_plan_info: info=NULL");
  if (info->struct_size != sizeof *info)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_tp_plan_info: info->struct_size=%zu, expected %zu (initialise with LOOM_TP_PLAN_INFO_INIT)",
                      info->struct_size, sizeof *info);
  const int fused = st->transfer != LOOM_TP_SEQUENTIAL;
  info->transfer = st->transfer;
  info->shard_rows = st->shard_rows;
  info->chunk_rows = st->chunk_rows;
  info->comm_blocks = st->comm_blocks;
  info->gemm_bm = fused ? st->gemm_bm : 0;
  info->gemm_bn = fused ? st->gemm_cfg.bn : 0;
  info->gemm_grid = fused ? st->gemm_cfg.grid : 0;
  /* AG: every element is one product, whatever the transfer; RS: the fused
   * sum runs in rank order, NCCL's order is its own; AR: fused or through
   * loom_allreduce, fp32 sums in rank order */
  /* BULK_REDUCE: W - 1 adds in arrival order (at W = 2 one add, the same bits) */
  info->deterministic = st->kind == LOOM__TP_AG || st->kind == LOOM__TP_AR ||
                        (fused && st->transfer != LOOM_TP_SM_ATOMIC &&
                         (st->transfer != LOOM_TP_BULK_REDUCE || st->world <= 2));
  info->symmetric_bytes = st->symmetric_bytes;
  info->device_bytes = st->device_bytes;
  info->workspace_bytes = plan->ws_bytes + (st->ar_plan ? st->ar_plan->ws_bytes : 0);
  info->gemm = st->gemm_engine;
  return LOOM_SUCCESS;
}

loom_result_t loom__tp_fork(loom_tp_state_t *st, cudaStream_t stream) {
  LOOM_CUDA(cudaEventRecord(st->fork, stream));
  LOOM_CUDA(cudaStreamWaitEvent(st->side, st->fork, 0));
  return LOOM_SUCCESS;
}

loom_result_t loom__tp_join(loom_tp_state_t *st, cudaStream_t stream) {
  LOOM_CUDA(cudaEventRecord(st->join, st->side));
  LOOM_CUDA(cudaStreamWaitEvent(stream, st->join, 0));
  return LOOM_SUCCESS;
}

loom_result_t loom__tp_done(loom_tp_state_t *st, cudaStream_t stream) {
  LOOM_TRY(loom__plan_done_record(st->done, stream, NULL));
  loom__tp_trace_end(st, stream);
  return LOOM_SUCCESS;
}

ncclDataType_t loom__tp_nccl_type(loom_dtype_t t) {
  return t == LOOM_FP32 ? ncclFloat32 : t == LOOM_BF16 ? ncclBfloat16 : ncclFloat16;
}
