/*
 * tp_plan.c - the plans of the tensor-parallel ops (loom_plan_ag_gemm,
 * loom_plan_gemm_rs, loom_plan_gemm_ar) through the one door (core/op.h):
 * resolve (the knobs, the transfer, the fused GEMM's configuration, AUTO's
 * demotion where fusing could hide nothing), lay out (signals), fill (the
 * buffers, the peers' tables, the kernels preloaded), release, and the
 * plan's info. The description's checks are in tp_check.c, the tuner in
 * tp_tune.c, the calls in ag_gemm.c, gemm_rs.c and gemm_ar.c, what the
 * calls share in tp_linear.c; the protocol in tp_linear.h.
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

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/op.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/tune.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

/* What a hooked GEMM of these hooks may not run (gemm_heuristic.h): an
 * AllGather's GEMM only waits (plain stores into C): clusters, and split-K
 * / stream-K (at bn 192 / 224 only without an activation: the wait-only
 * kernels built); GEMMs that signal or route their tiles (ReduceScatter,
 * AllReduce) run whole tiles, without clusters, and BULK_REDUCE's adds of
 * 16-bit chunks not at bn 224. Split-K reduced apart (split_reduce.h) only
 * where the GEMM only waits. */
static unsigned hooked_refuse(const loom_gemm_desc_t *g, int wait_only, int bulk, int activation) {
  if (wait_only) return activation != LOOM_ACT_NONE ? LOOM__HOOKED_SPLIT_NARROW : 0u;
  return LOOM__HOOKED_NO_CLUSTER | LOOM__HOOKED_NO_SPLIT | LOOM__HOOKED_NO_APART |
         (bulk && g->c_type != LOOM_FP32 ? LOOM__HOOKED_NO_BN224 : 0u);
}

/* 1 where configuration c runs hooked under `refuse` (sm90). */
static int hooked_runs(const loom_gemm_config_t *c, unsigned refuse) {
  const int split = c->sk_tiles != 0;
  return c->bm != 16 && !((refuse & LOOM__HOOKED_NO_APART) && c->sk_reduce) &&
         !((refuse & LOOM__HOOKED_NO_CLUSTER) && c->cluster == 2) &&
         !((refuse & LOOM__HOOKED_NO_BN224) && c->bn == 224) && !((refuse & LOOM__HOOKED_NO_SPLIT) && split) &&
         !((refuse & LOOM__HOOKED_SPLIT_NARROW) && split && c->bn != 128 && c->bn != 256);
}

/* The fused GEMM's configuration for a GEMM that keeps `sms` SMs:
 * loom_gemm's own for the local GEMM where the hooks can run it (its
 * tuning-cache entry, else the model's pick: tiles, split-K / stream-K,
 * clusters), else the model's pick among what they can run; so the fused
 * path's GEMM is never a slower configuration than loom_gemm's. The band
 * height (group) is always set, so the AG band rule and the RS reduction's
 * tile order see the one the kernel runs. The grid is set by the caller.
 * *bm: the rows of its tiles. */
static loom_result_t fused_gemm_config(const loom_gemm_desc_t *g, int wait_only, int bulk, int activation, int sms,
                                       loom_gemm_config_t *cfg, int *bm) {
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  dev.sms = sms > 0 ? sms : 1;
  loom__gemm_path_t path = LOOM__PATH_BASE;
  LOOM_TRY(loom__gemm_path(g, &path));
  loom_gemm_config_t out;
  memset(&out, 0, sizeof out);
  if (path == LOOM__PATH_SM90) {
    const unsigned refuse = hooked_refuse(g, wait_only, bulk, activation);
    int found = 0;
    LOOM_TRY(loom__gemm_tuned_config(g, "sm90", dev.sms, &out, &found));
    if (!found || !hooked_runs(&out, refuse)) out = loom__gemm_sm90_hooked_config(g, &dev, refuse);
    out.bm = out.bm == 64 ? 64 : 128;
    if (out.group <= 0) out.group = 16; /* the sm90 kernel's default band */
    out.grid = 0;
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

/* What a plan holds (op.h: release; its last call has ended). */
static void tp_release(loom_comm_t comm, void *state) {
  loom_tp_state_t *st = (loom_tp_state_t *)state;
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
  if (st->recv) (void)cudaFree(st->recv);
  if (st->steps) {
    for (int i = 0; i < 2 * st->world; ++i)
      if (st->steps[i]) (void)cudaEventDestroy(st->steps[i]);
    free(st->steps);
  }
  if (st->side) (void)cudaStreamDestroy(st->side);
}

/* DECOMPOSED: an event per chunk's hand-over between the two streams. */
static loom_result_t decomposed_events(loom_tp_state_t *st) {
  st->steps = (cudaEvent_t *)calloc((size_t)(2 * st->world), sizeof(cudaEvent_t));
  if (!st->steps)
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_plan: %d events of the decomposed path", 2 * st->world);
  for (int i = 0; i < 2 * st->world; ++i) LOOM_CUDA(cudaEventCreateWithFlags(&st->steps[i], cudaEventDisableTiming));
  return LOOM_SUCCESS;
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
  if (st->transfer == LOOM_TP_DECOMPOSED) LOOM_TRY(decomposed_events(st));
  if (st->kind == LOOM__TP_AG) {
    const size_t bytes = Wrows * (size_t)g->k * es_ab;
    if (!loom__tp_fused(st->transfer)) {
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
  } else if (!loom__tp_fused(st->transfer)) {
    const size_t bytes = Wrows * (size_t)g->n * es_c;
    LOOM_CUDA(cudaMalloc(&st->partial, bytes));
    st->device_bytes += bytes;
    if (st->transfer == LOOM_TP_DECOMPOSED) { /* the ring's received partial sums */
      LOOM_CUDA(cudaMalloc(&st->recv, bytes));
      st->device_bytes += bytes;
    }
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
  if (kind == LOOM__TP_AG && !loom__tp_ag_pays(st->shard_rows, st->desc.k, st->world)) return 0;
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

/* The sequential path's GEMM engine of the state's knobs and transfer t
 * (in a world, loom's where cuBLASLt would be). */
static loom_tp_gemm_t tp_engine(loom_comm_t comm, const loom_tp_state_t *st, loom_tp_transfer_t t) {
  loom_tp_desc_t e = st->desc;
  e.sequential_gemm = st->knobs.gemm;
  return loom__tp_world_gemm(comm, loom__tp_resolve_gemm(&e, t));
}

/* The state's fields of its resolved transfer t: ranks, shards, engine. */
static void tp_resolve_fields(loom_comm_t comm, loom_tp_state_t *st, loom_tp_transfer_t t) {
  st->transfer = t;
  st->gemm_engine = tp_engine(comm, st, t);
  st->ce_shards = st->kind == LOOM__TP_AG && loom__tp_ce_shard_gemms(t);
  st->rank = comm->rank;
  st->world = comm->size;
  st->shard_rows = loom__tp_shard_rows(st->desc.m, st->world);
  st->my_begin = loom__tp_shard_begin(st->desc.m, st->world, st->rank);
  st->my_len = loom__tp_shard_len(st->desc.m, st->world, st->rank);
}

LOOM_PARAM_INT(TP_CE_CHUNKS, "1",
               "AllGather+GEMM by the copy engine: chunks per shard where desc->chunk_rows is 0 (each at least "
               "a tile row; a chunk is one copy and one signal copy; measured at W = 2: one chunk 1.03-1.07x "
               "faster than four)")

/* AG: the rows of a transfer chunk: the description's, else the plan's
 * default for its transfer (loom__ag_default_chunk_rows), within [1, S]. */
static int64_t ag_chunk_rows(const loom_tp_state_t *st) {
  int64_t cr = st->knobs.chunk_rows;
  if (cr <= 0)
    cr = loom__ag_default_chunk_rows(st->shard_rows, st->gemm_bm, st->comm_blocks, (int32_t)loom__param_TP_CE_CHUNKS());
  if (cr < 1) cr = 1;
  return cr > st->shard_rows ? st->shard_rows : cr;
}

/* AG: the tallest band of the fused GEMM's tile order: the configuration's,
 * and for the copy engine (chunks of whole tile rows) no more than a
 * chunk's tile rows, so that the tiles run in the order their rows arrive. */
static int32_t ag_band_limit(const loom_tp_state_t *st) {
  const int32_t group = st->gemm_cfg.group;
  const int64_t cr = ag_chunk_rows(st);
  if (st->transfer != LOOM_TP_COPY_ENGINE || cr % st->gemm_bm != 0) return group;
  return cr / st->gemm_bm < group ? (int32_t)(cr / st->gemm_bm) : group;
}

/* The fused GEMM's configuration for a GEMM that keeps `sms` SMs, and
 * its tiles. */
static loom_result_t tp_fused_tiles(loom_tp_state_t *st, int bulk, int sms) {
  LOOM_TRY(fused_gemm_config(&st->gemm, st->kind == LOOM__TP_AG, bulk, (int)st->desc.activation, sms, &st->gemm_cfg,
                             &st->gemm_bm));
  if (bulk) LOOM_TRY(bulk_gemm_config(&st->gemm, &st->gemm_cfg));
  if (st->kind == LOOM__TP_AG) /* bands of the tile order inside one shard each (and one chunk) */
    st->gemm_cfg.group = loom__ag_band_rows(
        st->shard_rows % st->gemm_bm == 0 ? st->shard_rows / st->gemm_bm : 0, ag_band_limit(st));
  st->tiles_m = (int)loom__ceil_div(st->desc.m, st->gemm_bm);
  st->tiles_n = (int)loom__ceil_div(st->desc.n, st->gemm_cfg.bn);
  return LOOM_SUCCESS;
}

/* The fused GEMM: its configuration, tiles, and the SMs it leaves to the
 * kernels whose signals its persistent blocks wait for (the copy engine's
 * one-thread ready waits: one SM; SM_COPY: comm_blocks, by default 4..16
 * chosen so that the GEMM needs no extra wave; BULK_REDUCE: none). The
 * configuration is chosen for the SMs the GEMM keeps (a split or a wave
 * fitted to all of them runs a wave longer on fewer). */
static loom_result_t tp_fused_gemm(loom_comm_t comm, loom_tp_state_t *st) {
  if (st->transfer == LOOM_TP_BULK_REDUCE && st->knobs.transfer == LOOM_TP_AUTO && !loom__tp_bulk_gemm_runs(&st->gemm))
    st->transfer = LOOM_TP_SM_COPY; /* AUTO's choice where the sm90 GEMM does not run */
  const loom_tp_transfer_t t = st->transfer;
  const int bulk = t == LOOM_TP_BULK_REDUCE, sm_side = t == LOOM_TP_SM_COPY || t == LOOM_TP_SM_ATOMIC;
  st->comm_blocks = sm_side ? st->knobs.comm_blocks : 0;
  int keep = comm->sm_count - (st->comm_blocks > 0 ? st->comm_blocks : bulk ? 0 : 1);
  LOOM_TRY(tp_fused_tiles(st, bulk, keep));
  if (sm_side && st->comm_blocks == 0) {
    /* the side kernel's blocks from the tiles, then the GEMM for the SMs left */
    st->comm_blocks = loom__tp_comm_sms((int64_t)st->tiles_m * st->tiles_n, comm->sm_count, 4, 16);
    keep = comm->sm_count - st->comm_blocks;
    LOOM_TRY(tp_fused_tiles(st, bulk, keep));
  }
  st->gemm_cfg.grid = keep;
  return LOOM_SUCCESS;
}

/* The shape-dependent half of AUTO: the fused path could hide nothing
 * here, so the plan is sequential. */
static void tp_demote(const char *fn, loom_comm_t comm, loom_tp_state_t *st) {
  const loom__tp_kind_t kind = st->kind;
  LOOM_INFO("%s: m=%lld: the fused path could hide nothing here (%s): sequential", fn, (long long)st->desc.m,
            kind == LOOM__TP_AG   ? "a shard's rows are memory-bound on B, or too few to pay back the fixed cost against "
                                    "the communication hidden"
            : kind == LOOM__TP_RS && st->transfer == LOOM_TP_BULK_REDUCE
                ? "under 1.5 waves of tiles, or a last wave's waste above the communication it would hide"
            : kind == LOOM__TP_RS ? "the GEMM's tiles fit one wave"
                                  : "GEMM + loom_allreduce with the epilogue measured faster");
  st->transfer = LOOM_TP_SEQUENTIAL;
  st->ce_shards = 0;
  st->gemm_engine = tp_engine(comm, st, st->transfer);
  memset(&st->gemm_cfg, 0, sizeof st->gemm_cfg);
  st->gemm_bm = st->tiles_m = st->tiles_n = st->comm_blocks = 0;
}

/* RS / AR: the words at tile_off: a signal per source and tile, or for
 * BULK_REDUCE one "pushed" word per source. */
static size_t tile_signal_words(const loom_tp_state_t *st) {
  return st->transfer == LOOM_TP_BULK_REDUCE ? (size_t)st->world
                                             : (size_t)st->world * (size_t)st->tiles_m * (size_t)st->tiles_n;
}

/* Lay out the fused plan's signal words: AG, ready [W], the chunks'
 * [W x chunks per shard] and go [W] (local: what the copy engine's chunk
 * signals are copied from); RS/AR, tile signals, done, count, and AR's
 * gathered signals. */
static loom_result_t tp_signals(const char *fn, loom_tp_state_t *st, uint32_t *nsig) {
  const loom_tp_desc_t *desc = &st->desc;
  int64_t n64;
  if (st->kind == LOOM__TP_AG) {
    const int64_t cr = ag_chunk_rows(st);
    st->chunk_rows = (int)cr;
    st->chunks_per_shard = loom__ag_chunks_per_shard(desc->m, st->world, cr);
    n64 = 2 * (int64_t)st->world + (int64_t)st->world * st->chunks_per_shard;
    *nsig = (uint32_t)n64;
    if (n64 > (int64_t)UINT32_MAX / 8)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %lld chunk signals are too many: raise desc->chunk_rows=%d",
                        fn, (long long)n64, st->knobs.chunk_rows);
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

/* The byte offsets of the signal words in the plan's slice. */
static void tp_signal_offsets(loom_plan_t plan, loom_tp_state_t *st) {
  if (st->kind == LOOM__TP_AG) {
    st->ready_off = plan->signals_offset;
    st->chunk_off = plan->signals_offset + (size_t)st->world * sizeof(uint32_t);
    st->go_off = st->chunk_off + (size_t)st->world * (size_t)st->chunks_per_shard * sizeof(uint32_t);
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
  if (st->kind == LOOM__TP_AG && loom__tp_fused(st->transfer))
    LOOM_TRY(loom__tp_peer_addresses(plan->op->plan_fn, "workspace", plan->comm, plan->comm->ws_ptr,
                                     plan->comm->ws_bytes, st->peer_ws));
  LOOM_TRY(loom__tp_preload_kernels());
  if (loom__tp_fused(st->transfer) && !st->ce_shards)
    LOOM_TRY(loom__gemm_hooked_preload(&st->gemm, &st->gemm_cfg, (int)st->desc.activation));
  return LOOM_SUCCESS;
}

/* ---- the ops (core/op.h) ---------------------------------------------------- */

const loom_op_family_t loom__tp_family = {"tp", "an ag_gemm, gemm_rs or gemm_ar plan"};

/* 1 where the GEMM engine can carry the fused paths' hooks for the local
 * GEMM g (the device's path for it is not cuBLASLt). */
static int tp_hooks_ok(loom_comm_t comm, const loom_gemm_desc_t *g) {
  loom__gemm_path_t path = LOOM__PATH_BASE;
  return !comm->detached && loom__gemm_path(g, &path) == LOOM_SUCCESS && path != LOOM__PATH_BASE;
}

static loom_result_t tp_check(const loom_op_t *op, loom_comm_t comm, const void *args) {
  const loom_tp_desc_t *d = ((const loom__tp_args_t *)args)->desc;
  int hooks = 0;
  if (d && d->struct_size == sizeof *d) {
    const loom_gemm_desc_t g = loom__tp_gemm_desc(d);
    hooks = tp_hooks_ok(comm, &g);
  }
  loom_tp_transfer_t t;
  LOOM_TRY(loom__tp_check_desc(op->plan_fn, op->kind, comm->size, comm->sm_count, d, &t, comm->ws_all_reachable, hooks));
  /* a world (one GPU, no NCCL) refuses the transfers it cannot run */
  return loom__tp_world_transfer(op->plan_fn, comm, d, op->kind, &t);
}

/* 1 for a description that leaves every knob to loom (the tuning cache's key). */
static int tp_leaves_all_to_loom(const loom_tp_desc_t *d) {
  return d->transfer == LOOM_TP_AUTO && d->chunk_rows == 0 && d->comm_blocks == 0 &&
         d->sequential_gemm == LOOM_TP_GEMM_AUTO;
}

/* The tuning cache's entry for st's description, if it has one that
 * applies here: 1 and *c; else 0 (a malformed or foreign entry is logged). */
static int tp_tuned_choice(const loom_op_t *op, loom_comm_t comm, const loom_tp_state_t *st, int hooks,
                           loom_tp_choice_t *c) {
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  /* (a world's ranks share one GPU: no tuned entry applies there) */
  if (comm->world || !tp_leaves_all_to_loom(&st->desc) ||
      !loom__tp_tune_key(op->kind, &st->desc, comm->sm_count, key, sizeof key) || !loom__tune_get(key, value, sizeof value))
    return 0;
  if (loom__tp_tune_parse(value, c) != LOOM_SUCCESS) {
    LOOM_WARN("%s: %s", op->plan_fn, loom_last_error());
    return 0;
  }
  if (loom__tp_check_choice(op->plan_fn, op->kind, comm->size, comm->sm_count, &st->desc, c, comm->ws_all_reachable,
                            hooks) != LOOM_SUCCESS) {
    LOOM_WARN("%s: tuned entry \"%s\" = \"%s\" does not apply here (%s): the heuristic's choice", op->plan_fn, key,
              value, loom_last_error());
    return 0;
  }
  return 1;
}

static int tp_tune_asked(const loom_op_t *op, loom_comm_t comm, const void *args) {
  const loom_tp_desc_t *d = ((const loom__tp_args_t *)args)->desc;
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  return tp_leaves_all_to_loom(d) && loom__tp_tune_key(op->kind, d, comm->sm_count, key, sizeof key) &&
         !loom__tune_get(key, value, sizeof value);
}

/* The knobs (as asked, or the tuning cache's), the transfer (AUTO's
 * shape-independent half, then its shape-dependent half on the fused
 * GEMM's tiles: sequential where fusing could hide nothing), the GEMM. */
static loom_result_t tp_resolve(const loom_op_t *op, loom_comm_t comm, const void *args, void *state) {
  const loom__tp_args_t *a = (const loom__tp_args_t *)args;
  loom_tp_state_t *st = (loom_tp_state_t *)state;
  if (comm->detached) return loom__plan_detached(op->plan_fn);
  st->kind = (loom__tp_kind_t)op->kind;
  st->desc = *a->desc;
  st->gemm = loom__tp_gemm_desc(&st->desc);
  const loom_tp_desc_t *d = &st->desc;
  st->knobs = (loom_tp_choice_t){d->transfer, d->chunk_rows, d->comm_blocks, d->sequential_gemm};
  const int hooks = tp_hooks_ok(comm, &st->gemm);
  st->tuned = !a->untuned && tp_tuned_choice(op, comm, st, hooks, &st->knobs);
  loom_tp_transfer_t t = st->knobs.transfer;
  if (t == LOOM_TP_AUTO) t = loom__tp_auto_transfer(op->kind, comm->size, d, comm->ws_all_reachable, hooks);
  LOOM_TRY(loom__tp_world_transfer(op->plan_fn, comm, d, op->kind, &t)); /* a world: a transfer without NCCL */
  tp_resolve_fields(comm, st, t);
  if (!loom__tp_fused(t)) return LOOM_SUCCESS;
  LOOM_TRY(tp_fused_gemm(comm, st));
  const int64_t tiles = (int64_t)st->tiles_m * st->tiles_n;
  if (!st->tuned && st->knobs.transfer == LOOM_TP_AUTO && !loom__tp_world_keeps_fused(comm, st->kind) &&
      !auto_keeps_fused(st, st->kind, tiles))
    tp_demote(op->plan_fn, comm, st);
  return LOOM_SUCCESS;
}

static loom_result_t tp_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  loom_tp_state_t *st = (loom_tp_state_t *)state;
  if (loom__tp_fused(st->transfer)) LOOM_TRY(tp_signals(op->plan_fn, st, &lay->nsignals));
  lay->fingerprint = tp_fingerprint(st, lay->nsignals);
  return LOOM_SUCCESS;
}

static loom_result_t tp_fill_op(loom_plan_t plan, void *state) {
  loom_tp_state_t *st = (loom_tp_state_t *)state;
  tp_signal_offsets(plan, st);
  return tp_fill(plan, st);
}

static void tp_describe(loom_plan_t plan, const void *state) {
  const loom_tp_state_t *st = (const loom_tp_state_t *)state;
  const loom_tp_desc_t *d = &st->desc;
  LOOM_INFO("%s: m=%lld n=%lld k=%lld W=%d: %s%s, GEMM %s, S=%lld, chunk_rows=%d, comm_blocks=%d, tile %dx%d",
            plan->op->plan_fn, (long long)d->m, (long long)d->n, (long long)d->k, st->world,
            loom__tp_transfer_name(st->transfer), st->tuned ? " (tuned)" : "", loom__tp_gemm_name(st->gemm_engine),
            (long long)st->shard_rows, st->chunk_rows, st->comm_blocks, st->gemm_bm, st->gemm_cfg.bn);
}

/* The stage traces' label (core/trace.h): the local GEMM and the transfer. */
static void tp_label(const void *state, char *out, size_t cap) {
  const loom_tp_state_t *st = (const loom_tp_state_t *)state;
  snprintf(out, cap, "%lld x %lld x %lld, %s", (long long)st->gemm.m, (long long)st->gemm.n, (long long)st->gemm.k,
           loom__tp_transfer_name(st->transfer));
}

#define TP_OP(kind_, name_)                                                                                          \
  {                                                                                                                  \
    .name = #name_, .plan_fn = "loom_plan_" #name_, .family = &loom__tp_family, .kind = kind_,                       \
    .state_bytes = sizeof(loom_tp_state_t),                                                                          \
    .differ = "every rank must pass the same loom_tp_desc_t (m, n, k, dtypes, layout, bias, activation, world "      \
              "size, transfer and knobs) and see the same tuning cache (LOOM_TUNE_FILE)",                            \
    .check = tp_check, .tune_asked = tp_tune_asked, .tune = loom__tp_tune, .resolve = tp_resolve,                    \
    .lay_out = tp_lay_out, .fill = tp_fill_op, .release = tp_release, .describe = tp_describe, .label = tp_label     \
  }
const loom_op_t loom__tp_ops[3] = {TP_OP(LOOM__TP_AG, ag_gemm), TP_OP(LOOM__TP_RS, gemm_rs),
                                   TP_OP(LOOM__TP_AR, gemm_ar)};

static loom_result_t tp_plan(loom_comm_t comm, const loom_tp_desc_t *desc, int kind, loom_plan_t *out) {
  const loom__tp_args_t a = {desc, 0};
  return loom__plan_make(comm, &loom__tp_ops[kind], &a, out);
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

/* The tuning entries: the description checked once (the door), then the
 * tuner (tp_tune.c). */
static loom_result_t tp_tune_entry(loom_comm_t comm, const loom_tp_desc_t *desc, int kind, cudaStream_t stream) {
  const loom__tp_args_t a = {desc, 1};
  return loom__plan_tune(comm, &loom__tp_ops[kind], loom__tp_tune_fn(kind), &a, stream);
}

loom_result_t loom_ag_gemm_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream) {
  return tp_tune_entry(comm, desc, LOOM__TP_AG, stream);
}

loom_result_t loom_gemm_rs_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream) {
  return tp_tune_entry(comm, desc, LOOM__TP_RS, stream);
}

loom_result_t loom_gemm_ar_tune(loom_comm_t comm, const loom_tp_desc_t *desc, cudaStream_t stream) {
  return tp_tune_entry(comm, desc, LOOM__TP_AR, stream);
}

loom_result_t loom_tp_plan_info(loom_plan_t plan, loom_tp_plan_info_t *info) {
  loom_tp_state_t *st;
  LOOM_TRY(loom__tp_state(plan, "loom_tp_plan_info", -1, &st));
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_tp_plan_info: info=NULL");
  if (info->struct_size != sizeof *info)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_tp_plan_info: info->struct_size=%zu, expected %zu (initialise with LOOM_TP_PLAN_INFO_INIT)",
                      info->struct_size, sizeof *info);
  const int fused = loom__tp_fused(st->transfer), hooked = fused && !st->ce_shards;
  info->transfer = st->transfer;
  info->shard_rows = st->shard_rows;
  info->chunk_rows = st->chunk_rows;
  info->comm_blocks = st->comm_blocks;
  info->gemm_bm = hooked ? st->gemm_bm : 0;
  info->gemm_bn = hooked ? st->gemm_cfg.bn : 0;
  info->gemm_grid = hooked ? st->gemm_cfg.grid : 0;
  /* AG: every element is one product, whatever the transfer; RS: the fused
   * sum runs in rank order, NCCL's order is its own; AR: fused or through
   * loom_allreduce, fp32 sums in rank order */
  /* BULK_REDUCE: W - 1 adds in arrival order (at W = 2 one add, the same bits);
   * DECOMPOSED: the ring's adds in a fixed order */
  info->deterministic = st->kind == LOOM__TP_AG || st->kind == LOOM__TP_AR || st->transfer == LOOM_TP_DECOMPOSED ||
                        (fused && st->transfer != LOOM_TP_SM_ATOMIC &&
                         (st->transfer != LOOM_TP_BULK_REDUCE || st->world <= 2));
  info->symmetric_bytes = st->symmetric_bytes;
  info->device_bytes = st->device_bytes;
  info->workspace_bytes = plan->ws_bytes + (st->ar_plan ? st->ar_plan->ws_bytes : 0);
  info->gemm = st->gemm_engine;
  return LOOM_SUCCESS;
}

