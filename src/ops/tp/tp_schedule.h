/*
 * tp_schedule.h - who owns which rows, who sends what to whom and in which
 * order, for the tensor-parallel ops (AllGather + GEMM, GEMM +
 * ReduceScatter): the pure functions, usable from host C (host tests at any
 * world size) and device code. Nothing here allocates or fails.
 *
 * Rows. The m rows of the gathered activation (AG) or of the output (RS) are
 * cut into W shards of S = ceil(m / W) rows: shard p is rows
 * [min(m, p S), min(m, (p+1) S)). When W divides m the shards are equal; when
 * not, the last shards are shorter (and may be empty: m = 5, W = 4 gives
 * 2, 2, 1, 0 rows).
 *
 * AllGather (push). Each rank stores its shard into every peer's gathered
 * buffer. At step i = 0 .. W-2 rank r pushes to rank (r - 1 - i) mod W, so
 * at step i rank d receives the shard of (d + 1 + i) mod W: every step is a
 * permutation (each rank sends to one rank and receives from one), and rank
 * d's shards arrive in ring order starting after d, its own shard being in
 * place first. Each shard is cut into chunks of c rows (ceil(S / c) per
 * shard, the last one shorter), one signal per chunk:
 * signal(p, j) = p ceil(S / c) + j, which is loom__tile_wait_chunk's
 * numbering (gemm/tile_order.h) with rows_per_shard S, rows_per_signal c.
 * The GEMM's tile rows run in the same order (RANK_SHIFTED, starting at the
 * tile row of d's shard), so no tile waits on rows that arrive last while
 * earlier rows sit unused.
 *
 * ReduceScatter. Every rank computes all m rows of its partial product;
 * rows of shard p are sent to rank p (its owner), which sums the W partials.
 * The GEMM's tile rows start at the shard of r + 1 (RANK_SHIFTED): peers'
 * rows first, so that their transfer hides behind the rest of the GEMM, and
 * ranks start on different owners. A tile's rows may span two or more
 * shards (S not a multiple of the tile height): such a tile goes to, and
 * signals, every owner of its rows.
 *
 * AllReduce (GEMM + AllReduce). The ReduceScatter above, then each owner
 * stores its reduced rows of a tile into every rank's output (its own and
 * the peers', NVLink stores) and sets the tile's "gathered" signal on every
 * peer: signal o x tiles + t on rank d says "owner o's rows of tile t are in
 * d's output". The owners of a tile row are the destinations the GEMM
 * signals its partial to (loom__ar_tile_owners = loom__tile_dst_range), each
 * delivering its own rows of the tile (loom__rs_tile_rows), so every output
 * row arrives on every rank exactly once; rank d waits, for every tile, for
 * the gathered signal of each owner but itself.
 */
#ifndef LOOM_OPS_TP_SCHEDULE_H
#define LOOM_OPS_TP_SCHEDULE_H

#include <stdint.h>
#include "gemm/tile_order.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The three tensor-parallel ops. */
typedef enum { LOOM__TP_AG = 0, LOOM__TP_RS = 1, LOOM__TP_AR = 2 } loom__tp_kind_t;

/* S: rows per shard (>= 1 when m >= 1). */
LOOM_HD int64_t loom__tp_shard_rows(int64_t m, int32_t world) { return loom__ceil_div(m, world < 1 ? 1 : world); }

/* BULK_REDUCE's shapes: W equal shards of a multiple of LOOM_TP_BULK_ROWS
 * rows (the GEMM epilogue's chunks are 64 rows, each added into one owner). */
#define LOOM_TP_BULK_ROWS 64
LOOM_HD int loom__tp_bulk_shape_ok(int64_t m, int32_t world) {
  const int64_t s = loom__tp_shard_rows(m, world);
  return world >= 1 && m > 0 && s * world == m && s % LOOM_TP_BULK_ROWS == 0;
}

/* First row of shard p. */
LOOM_HD int64_t loom__tp_shard_begin(int64_t m, int32_t world, int32_t p) {
  const int64_t b = (int64_t)p * loom__tp_shard_rows(m, world);
  return b < m ? b : m;
}

/* Rows of shard p (0 for an empty shard). */
LOOM_HD int64_t loom__tp_shard_len(int64_t m, int32_t world, int32_t p) {
  const int64_t S = loom__tp_shard_rows(m, world);
  int64_t e = (int64_t)(p + 1) * S;
  if (e > m) e = m;
  const int64_t b = loom__tp_shard_begin(m, world, p);
  return e > b ? e - b : 0;
}

/* AG: the rank that rank r pushes its shard to at step i (0 <= i < W-1). */
LOOM_HD int32_t loom__ag_push_dest(int32_t r, int32_t world, int32_t i) {
  int32_t d = (r - 1 - i) % world;
  return d < 0 ? d + world : d;
}

/* AG: whose shard rank d receives at step i (0 <= i < W-1). */
LOOM_HD int32_t loom__ag_arrival_src(int32_t d, int32_t world, int32_t i) { return (d + 1 + i) % world; }

/* AG: chunks per shard for chunks of c rows (>= 1). */
LOOM_HD int64_t loom__ag_chunks_per_shard(int64_t m, int32_t world, int64_t chunk_rows) {
  const int64_t S = loom__tp_shard_rows(m, world);
  const int64_t c = chunk_rows > 0 ? chunk_rows : S;
  return loom__ceil_div(S, c);
}

/* AG: the plan's chunk rows when the caller leaves them to it (chunk_rows
 * 0), for shards of S rows and GEMM tiles of bm rows. SM copy (comm_blocks
 * > 0): 2 chunks per copy block, all chunks in one launch. Copy engine:
 * ce_chunks (>= 1) chunks a shard, but never less than a tile row (capped
 * at the shard): each chunk costs a copy and a signal copy, and a chunk
 * shorter than bm lets no tile start earlier, since a tile waits for all of
 * its bm rows. */
LOOM_HD int64_t loom__ag_default_chunk_rows(int64_t S, int32_t bm, int32_t comm_blocks, int32_t ce_chunks) {
  if (ce_chunks < 1) ce_chunks = 1;
  int64_t c = comm_blocks > 0 ? loom__ceil_div(S, 2 * (int64_t)comm_blocks) : loom__ceil_div(S, ce_chunks);
  if (comm_blocks <= 0 && c < bm) c = bm;
  if (c > S) c = S;
  return c < 1 ? 1 : c;
}

/* AG: the band height of the fused GEMM's tile order (GROUPED: the blocks
 * run down a band of `group` tile rows, column by column) for shards of
 * shard_tile_rows tile rows: the largest divisor of shard_tile_rows that is
 * <= group, so that no band holds rows of two shards. A band mixing the own
 * rows (ready at once) with rows that arrive later makes part of the first
 * wave wait, and those blocks stay behind the blocks that share their B
 * columns, which then read B from DRAM again (Llama AG m = 1024, W = 2:
 * 8 tile rows in one band of 16, fused 0.87 of NCCL + cuBLASLt; docs/perf/tp.md, "Tile bands inside one shard").
 * shard_tile_rows < 1 (shards not a whole number of tile rows): group. */
LOOM_HD int32_t loom__ag_band_rows(int64_t shard_tile_rows, int32_t group) {
  if (group < 1) group = 1;
  if (shard_tile_rows < 1) return group;
  for (int32_t g = group; g > 1; --g)
    if (shard_tile_rows % g == 0) return g;
  return 1;
}

/* AG: chunks of shard p that hold rows (the signals its sender sets). */
LOOM_HD int64_t loom__ag_shard_chunks(int64_t m, int32_t world, int32_t p, int64_t chunk_rows) {
  const int64_t len = loom__tp_shard_len(m, world, p);
  const int64_t c = chunk_rows > 0 ? chunk_rows : loom__tp_shard_rows(m, world);
  return loom__ceil_div(len, c);
}

/* AG copy kernel: item q (0 <= q < (W - first_step) x nch) is push step
 * *step = first_step + q / nch (step 0: the own rows, step i >= 1: the push
 * to loom__ag_push_dest(r, W, i - 1)) and chunk *j = q mod nch of this rank's
 * shard: step-major, so that every block finishes one destination before
 * the next. Every (step, chunk) pair is exactly one item. */
LOOM_HD void loom__ag_copy_item(int64_t q, int64_t nch, int32_t first_step, int32_t *step, int64_t *j) {
  *step = first_step + (int32_t)(q / nch);
  *j = q % nch;
}

/* AG: rows [*r0, *r1) of chunk j of shard p (empty past the shard's end). */
LOOM_HD void loom__ag_chunk(int64_t m, int32_t world, int32_t p, int64_t chunk_rows, int64_t j, int64_t *r0,
                           int64_t *r1) {
  const int64_t b = loom__tp_shard_begin(m, world, p), len = loom__tp_shard_len(m, world, p);
  const int64_t c = chunk_rows > 0 ? chunk_rows : loom__tp_shard_rows(m, world);
  int64_t s = j * c, e = s + c;
  if (s > len) s = len;
  if (e > len) e = len;
  *r0 = b + s;
  *r1 = b + e;
}

/* The tile row at which the rows of shard p start, for tiles of bm rows (0
 * for an empty shard at the end). RANK_SHIFTED's row_shift: AG uses p = r
 * (own shard first), RS uses p = r + 1 (peers first). */
LOOM_HD int32_t loom__tp_row_shift(int64_t m, int32_t world, int32_t p, int32_t bm) {
  p %= world;
  if (p < 0) p += world;
  const int64_t tiles_m = loom__ceil_div(m, bm);
  int64_t tm = loom__tp_shard_begin(m, world, p) / bm;
  return (int32_t)(tm < tiles_m ? tm : 0);
}

/* RS: the tile rows [*t0, *t1] (inclusive) that hold rows of shard p, for
 * tiles of bm rows; *t1 < *t0 when the shard is empty. */
LOOM_HD void loom__rs_owner_tile_rows(int64_t m, int32_t world, int32_t p, int32_t bm, int32_t *t0, int32_t *t1) {
  const int64_t b = loom__tp_shard_begin(m, world, p), len = loom__tp_shard_len(m, world, p);
  if (len <= 0) {
    *t0 = 0, *t1 = -1;
    return;
  }
  *t0 = (int32_t)(b / bm);
  *t1 = (int32_t)((b + len - 1) / bm);
}

/* BULK_REDUCE's tile order (a SCHEDULE table, out[tiles_m x tiles_n]):
 * the owners' tiles interleaved one by one, rank + 1, rank + 2, ..., rank
 * (its own last in each round), each owner's own in the grouped order over
 * its tile rows (a tile row belongs to the owner of its first row). Blocks
 * running at once then add into every owner, W - 1 of W tiles over the
 * links, instead of all of a wave into one peer (the rank-shifted order at
 * W = 2 sent every byte in the GEMM's first half); the same columns come
 * round for every owner, so B stays shared in L2. A permutation of
 * [0, tiles) (host-tested). */
LOOM_HD void loom__rs_striped_order(int64_t m, int32_t world, int32_t rank, int32_t bm, int32_t tiles_n, int32_t group,
                                   int32_t *out) {
  const int32_t tiles_m = (int32_t)loom__ceil_div(m, bm);
  const int64_t S = loom__tp_shard_rows(m, world);
  int32_t s = 0;
  for (int32_t round = 0;; ++round) {
    int any = 0;
    for (int32_t j = 1; j <= world; ++j) {
      const int32_t o = (rank + j) % world;
      /* owner o's tile rows [a, b): those whose first row is in its shard */
      const int32_t a = (int32_t)loom__ceil_div(o * S, bm);
      int32_t b = (int32_t)loom__ceil_div((int64_t)(o + 1) * S, bm);
      if (o == world - 1 || b > tiles_m) b = tiles_m;
      const int32_t rows = b > a ? b - a : 0;
      if (round >= rows * tiles_n) continue;
      const int32_t tg = loom__tile_grouped(round, rows, tiles_n, group);
      out[s++] = (a + tg / tiles_n) * tiles_n + tg % tiles_n;
      any = 1;
    }
    if (!any) return;
  }
}

/* RS / AR: the rows [*r0, *r1) of tile row tm that owner p sums (its shard's
 * rows of the tile; empty, *r1 <= *r0, when it owns none of them). */
LOOM_HD void loom__rs_tile_rows(int64_t m, int32_t world, int32_t p, int32_t bm, int32_t tm, int64_t *r0,
                               int64_t *r1) {
  const int64_t b = loom__tp_shard_begin(m, world, p), e = b + loom__tp_shard_len(m, world, p);
  int64_t s = (int64_t)tm * bm, t = s + bm;
  if (s < b) s = b;
  if (t > e) t = e;
  *r0 = s;
  *r1 = t;
}

/* AR: the owners [*p0, *p1] (inclusive) of the rows of tile row tm, for
 * tiles of bm rows (every one owns at least one of them): whose gathered
 * signal of each tile of that row a rank waits for (its own excepted). */
LOOM_HD void loom__ar_tile_owners(int64_t m, int32_t world, int32_t bm, int32_t tm, int32_t *p0, int32_t *p1) {
  loom__tile_dst_range(tm, bm, m, loom__tp_shard_rows(m, world), p0, p1);
}

/* AR: the index of owner o's gathered signal of tile t (of `tiles`) in a
 * rank's signal array. */
LOOM_HD uint32_t loom__ar_gathered_signal(int32_t o, int64_t tiles, int64_t t) {
  return (uint32_t)((int64_t)o * tiles + t);
}

/* LOOM_TP_AUTO beyond what the description alone decides: whether the fused
 * path can hide any communication for this shape (else the plan takes the
 * sequential path, which is the baseline itself). Measured mechanisms
 * (docs/perf/tp.md, "AUTO: when the fused path is taken"; 2x H100, 2026-11-25):
 *  AG: the own shard's tile rows run first and the other ranks' tile rows
 *      of the same B columns later; where a shard's band of S rows is
 *      memory-bound on B (its arithmetic intensity, S FLOP per byte of B,
 *      below the GPU's ridge `ridge_rows` = peak tensor FLOP/s / DRAM
 *      bytes/s), the later rows read B from DRAM again, costing as much as
 *      the transfer they hide (m = 256, W = 2: +1 B pass, 0.66-0.79 of the
 *      sequential path). Fused only where S >= ridge_rows.
 *  RS: the owners reduce tiles as they finish; where the GEMM's tiles fit
 *      one wave of its grid, they all finish at the end and the whole
 *      reduction runs after the GEMM (a tail launch plus the peer reads,
 *      ~22 us at m = 64), hiding nothing. Fused only where tiles > grid.
 *  AR: the fused GEMM + AllReduce (the RS call with the reduced rows
 *      stored into every rank's out) lost to the sequential GEMM +
 *      loom_allreduce with the epilogue on every shape measured (CoCoNet's
 *      four at W = 2: 0.86-0.91 of cuBLASLt + NCCL + pointwise where the
 *      sequential path made 1.12-1.18; the held-out shapes in docs/perf/tp.md, "GEMM+AllReduce at W = 2"), so it
 *      is never the untuned choice; loom_gemm_ar_tune times both.
 */
LOOM_HD int loom__tp_auto_fused(loom__tp_kind_t kind, int64_t shard_rows, int64_t tiles, int64_t grid,
                               double ridge_rows) {
  if (kind == LOOM__TP_AR) return 0;
  if (kind == LOOM__TP_AG) return (double)shard_rows >= ridge_rows;
  return tiles > grid;
}

/* The shape-dependent half of AUTO for BULK_REDUCE: 1 where the bulk
 * reduction is predicted to beat the sequential path. Its hooked GEMM runs
 * data-parallel waves of `tiles` tiles over `grid` blocks, w = tiles / grid
 * (the baseline's GEMM evens its last wave: stream-K); what fusing saves
 * is a share of the communication time, which over the GEMM time is
 * c = (FLOP/s over link bytes/s) x (W - 1) / W x es / k (es: bytes per
 * output element). Fused where w >= 1.5 (below, every shape measured lost:
 * a wave's tiles finish together and their adds then wait on the link)
 * and the last wave's waste q = ceil(w) / w - 1 stays under c / 3.5. The
 * two constants were fitted on the fitting half of the TP shape set at
 * W = 2 on H200 and checked on the held-out half (docs/perf/tp.md,
 * "AUTO for the bulk reduction"). */
LOOM_HD int loom__tp_bulk_pays(int64_t tiles, int64_t grid, int64_t k, int32_t world, int32_t es,
                              double flop_per_link_byte) {
  if (grid < 1 || k < 1 || world < 2) return 0;
  const double w = (double)tiles / (double)grid;
  if (w < 1.5) return 0;
  const double q = (double)loom__ceil_div(tiles, grid) / w - 1.0;
  const double c = flop_per_link_byte * (double)(world - 1) / (double)world * (double)es / (double)k;
  return 3.5 * q <= c;
}

/* The shape-dependent half of AUTO for AllGather + GEMM's fused path (the
 * copy engine), on top of the ridge rule: 1 where it is predicted to beat
 * the sequential path: k >= 2048 and shards of >= 1024 rows. Refitted on the
 * fitting half of the TP shape set (W = 2, H200) once the copy engine's
 * chunk signals became copies and a shard one chunk: every fitting row of
 * that kind won (28 of 28, seq / copy engine >= 1.035), the held-out half
 * too (86 of 86, >= 1.007), short GEMMs included; the rule it replaces also
 * asked for a GEMM of >= 60 us by the FLOP/s model, which the old path's
 * ~40 us of dependent launches needed (docs/perf/tp.md, "AUTO for
 * AllGather + GEMM: the GEMM's length"). Shards of 256 rows (half of the
 * fitting rows lost, to 0.85) and k < 2048 (two of eight lost, to 0.88)
 * stay sequential. */
LOOM_HD int loom__tp_ag_pays(int64_t shard_rows, int64_t k, int32_t world) {
  return world >= 2 && k >= 2048 && shard_rows >= 1024;
}

/* Dense fp16/bf16 tensor FLOP/s: sm_count x clock x FLOP per SM per clock
 * (4096 on compute capability 9.x, 2048 before). */
LOOM_HD double loom__tp_tensor_flops(int32_t sms, double clock_hz, int32_t cc_major) {
  return (double)sms * clock_hz * (cc_major >= 9 ? 4096.0 : 2048.0);
}

/* The GPU's FLOP per byte of one NVLink direction, for the bulk rule:
 * loom__tp_tensor_flops over LOOM_TP_LINK_BPS (H100 / H200: 132 x 1.98 GHz
 * x 4096 / 450 GB/s ~ 2400). */
#define LOOM_TP_LINK_BPS 450e9 /* NVLink 4, one direction: 18 links x 25 GB/s */
LOOM_HD double loom__tp_flop_per_link_byte(int32_t sms, double clock_hz, int32_t cc_major) {
  return loom__tp_tensor_flops(sms, clock_hz, cc_major) / LOOM_TP_LINK_BPS;
}

/* The GPU's ridge point for loom__tp_auto_fused's AG rule, in rows (FLOP
 * per byte of B): loom__tp_tensor_flops over DRAM bytes/s (H100 SXM: 132 x 1.98 GHz x 4096 / 3.35 TB/s ~ 320; H200: ~225). */
LOOM_HD double loom__tp_ridge_rows(int32_t sms, double clock_hz, int32_t cc_major, double dram_bps) {
  return dram_bps > 0 ? loom__tp_tensor_flops(sms, clock_hz, cc_major) / dram_bps : 0.0;
}

/* SMs for a concurrent communication kernel next to a persistent GEMM of
 * `tiles` tiles on `sms` SMs: the count b in [lo, hi] (lo >= 1, hi < sms)
 * whose GEMM grid sms - b needs the fewest waves (ceil(tiles / (sms - b))),
 * the largest such b on a tie: as many SMs for communication as the GEMM
 * can give without an extra wave. */
LOOM_HD int32_t loom__tp_comm_sms(int64_t tiles, int32_t sms, int32_t lo, int32_t hi) {
  if (hi > sms - 1) hi = sms - 1;
  if (lo < 1) lo = 1;
  if (hi < lo) return lo < sms ? lo : sms - 1;
  int32_t best = lo;
  int64_t best_w = loom__ceil_div(tiles, sms - lo);
  for (int32_t b = lo + 1; b <= hi; ++b) {
    const int64_t w = loom__ceil_div(tiles, sms - b);
    if (w <= best_w) best = b, best_w = w;
  }
  return best;
}

/* ---- the decomposed paths (LOOM_TP_DECOMPOSED) ---- */

/* AllGather+GEMM, step i = 1 .. W-1: rank r sends its shard to
 * loom__dec_ag_to and receives loom__dec_ag_from's (the rank it sends to
 * receives from it in the same step: one send/receive group each). */
LOOM_HD int32_t loom__dec_ag_to(int32_t r, int32_t world, int32_t i) { return ((r - i) % world + world) % world; }
LOOM_HD int32_t loom__dec_ag_from(int32_t r, int32_t world, int32_t i) { return (r + i) % world; }

/* GEMM+ReduceScatter's ring, step s = 0 .. W-1: the owner whose chunk rank
 * r computes (its partial plus the sum rank r - 1 sent at step s - 1), so
 * that owner p's chunk is summed at p + 1, p + 2, .., and last at p; rank
 * r sends its step-s sum to r + 1, whose step-(s + 1) chunk it is. */
LOOM_HD int32_t loom__dec_rs_chunk(int32_t r, int32_t world, int32_t s) {
  return ((r - 1 - s) % world + world) % world;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_TP_SCHEDULE_H */
