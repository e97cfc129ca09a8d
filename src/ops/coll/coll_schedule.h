/*
 * coll_schedule.h - who owns which elements of a collective, in which chunks
 * they move and in which order ranks visit their peers: the pure functions
 * of loom's collectives (loom_allreduce, loom_reduce_scatter,
 * loom_all_gather; src/ops/coll/coll.c), usable from host C (host tests at any
 * world size) and device code (coll_device.cuh). Nothing here allocates or
 * fails.
 *
 * Units. A vector of `count` elements is cut in units of `unit` elements:
 * LOOM_COLL_VEC (8: one 16-byte vector of a 16-bit type, two of fp32) for a
 * flat vector, or `cols` (one whole row) when the vector is rows x cols.
 * units = ceil(count / unit) (the last unit may be short).
 *
 * Slices (ownership). Rank p owns the elements
 *   [min(count, p S), min(count, (p+1) S)),  S = ceil(units / W) x unit,
 * so slices start on a unit boundary (16-byte aligned vectors, or a row
 * start), every element has exactly one owner, and the last slices may be
 * short or empty (count = 1, W = 2: rank 0 owns the element, rank 1
 * nothing). The owner reduces its slice (sum over every rank's input, in rank
 * order 0..W-1, fp32), applies the epilogue to it once, and (AllReduce) the
 * others fetch the result.
 *
 * Chunks. A slice is cut into chunks of C elements (C a multiple of the
 * unit; the last chunk shorter): chunk j is [b + j C, min(b + len, b + (j+1) C)).
 * Every slice has at most nch = ceil(S / C) chunks, so (owner, chunk) pairs
 * number W x nch and each owner's chunk j has its own signal.
 *
 * Orders.
 *  - Gather (pull) step i = 0 .. W-2: rank r fetches from peer
 *    (r + 1 + i) mod W. At each step the map r -> peer is a permutation
 *    (every rank is read by exactly one rank), so the ranks do not all
 *    hit one peer's memory at the same time; over the W-1 steps every
 *    peer is visited once. Step W-1 is rank r itself.
 *  - Gather items t = 0 .. steps x nch - 1 are step-major (all chunks of
 *    the first peer, then the next), block b of a grid of G takes items b,
 *    b + G, ...
 *  - One-shot (each rank reduces the whole vector): rank r's item q is
 *    chunk (q + floor(r nch / W)) mod nch, so the ranks start in different
 *    parts of the vector.
 *
 * LL (AllReduce's low-latency one-shot). The vector is cut in groups of 8
 * elements (the last may be short: its missing elements travel as zeros);
 * a group's 8 x esize bytes travel as 2 x esize lines of 8 bytes, each line
 * one 4-byte word of the input and a 4-byte flag (the call's epoch), stored
 * and loaded as one 8-byte access, so a line whose flag is the epoch holds
 * that call's word. Every rank's LL buffer holds 2 parities x (W-1) slots
 * of ceil(count / 8) x 2 x esize lines: sender s writes into receiver q's
 * slot (s - q - 1) mod W (for each q the W-1 senders fill slots 0..W-2
 * once each) of parity epoch mod 2. Alternating parities is what lets a
 * sender write without a handshake: the receiver's reads of the same
 * parity two calls ago ended before it sent the words of the previous call,
 * which this sender received before its own previous call could end.
 *
 * LL for ReduceScatter and AllGather (the slices' LL). The same lines,
 * parities and slots, each slot one slice long (ceil(S / 8) groups): a
 * ReduceScatter sender pushes group g of receiver q's slice of its input
 * into q's slot, and q sums group g of its own slice over the senders in
 * rank order (its own input, the others' lines); an AllGather sender pushes
 * group g of its own slice into every peer's slot, and each receiver stores
 * every sender's group g at that sender's slice in `out`. The parity
 * argument needs every pair of ranks to exchange lines in every call, so
 * the slices' LL applies only where every slice is nonempty (a rank with
 * nothing to receive would wait for no peer, and could run two calls ahead
 * into a slot its peer still reads: the protocol checker shows it), and
 * where slices start on a group (unit a multiple of 8: aligned vectors).
 */
#ifndef LOOM_OPS_COLL_SCHEDULE_H
#define LOOM_OPS_COLL_SCHEDULE_H

#include <stdint.h>
#include "core/util.h" /* LOOM_HD, loom__ceil_div */
#include "ops/common/vector.h" /* LOOM_COLL_VEC */

#ifdef __cplusplus
extern "C" {
#endif


/* The unit of a description: cols (rows) or LOOM_COLL_VEC (flat). */
LOOM_HD int64_t loom__coll_unit(int64_t cols) { return cols > 0 ? cols : LOOM_COLL_VEC; }

/* S: elements per slice (a multiple of unit; >= unit when count >= 1). */
LOOM_HD int64_t loom__coll_slice_elems(int64_t count, int32_t world, int64_t unit) {
  const int64_t units = loom__ceil_div(count, unit);
  return loom__ceil_div(units, world < 1 ? 1 : world) * unit;
}

/* Rank p's slice [*begin, *begin + *len) (len 0: an empty slice at the end). */
LOOM_HD void loom__coll_slice(int64_t count, int32_t world, int32_t p, int64_t unit, int64_t *begin, int64_t *len) {
  const int64_t S = loom__coll_slice_elems(count, world, unit);
  int64_t b = (int64_t)p * S, e = b + S;
  if (b > count) b = count;
  if (e > count) e = count;
  *begin = b;
  *len = e - b;
}

/* Chunks of at most C elements in a slice of len elements. */
LOOM_HD int64_t loom__coll_chunks(int64_t len, int64_t chunk) { return len > 0 ? loom__ceil_div(len, chunk) : 0; }

/* Chunk j of the slice [begin, begin + len): [*cb, *cb + *cl) (cl 0 past its end). */
LOOM_HD void loom__coll_chunk(int64_t begin, int64_t len, int64_t chunk, int64_t j, int64_t *cb, int64_t *cl) {
  int64_t s = j * chunk, e = s + chunk;
  if (s > len) s = len;
  if (e > len) e = len;
  *cb = begin + s;
  *cl = e - s;
}

/* The chunk size for slices of at most S elements on `grid` blocks: about
 * one chunk per block per slice, at most max_bytes / esize elements (so that
 * large slices are pipelined: a peer fetches chunk j while later chunks are
 * still being reduced), a multiple of unit, at least one unit. */
LOOM_HD int64_t loom__coll_chunk_elems(int64_t S, int64_t unit, int32_t grid, int64_t esize, int64_t max_bytes) {
  int64_t c = loom__ceil_div(loom__ceil_div(S > 0 ? S : 1, grid < 1 ? 1 : grid), unit) * unit;
  int64_t cap = max_bytes / (esize > 0 ? esize : 1) / unit * unit;
  if (cap < unit) cap = unit;
  return c < cap ? c : cap;
}

/* The peer rank r fetches from at gather step i (0 <= i < W; i = W-1 is r). */
LOOM_HD int32_t loom__coll_peer_at(int32_t r, int32_t world, int32_t i) { return (r + 1 + i) % world; }

/* Gather item t (step-major over `nch` chunks per peer): the step and chunk. */
LOOM_HD void loom__coll_gather_item(int64_t t, int64_t nch, int32_t *step, int64_t *j) {
  *step = (int32_t)(t / nch);
  *j = t - (int64_t)*step * nch;
}

/* One-shot: the chunk rank r reduces as its item q (a rotation by r nch / W). */
LOOM_HD int64_t loom__coll_one_shot_chunk(int32_t r, int32_t world, int64_t nch, int64_t q) {
  const int64_t shift = nch > 0 ? (int64_t)r * nch / (world < 1 ? 1 : world) : 0;
  return nch > 0 ? (q + shift) % nch : 0;
}

/* LL: lines (8 bytes each) per group of 8 elements of esize bytes. */
LOOM_HD int64_t loom__coll_ll_group_lines(int64_t esize) { return 2 * esize; }

/* LL: where line k of group g lies in a slot (nl lines a group). Groups in
 * tiles of 32; inside a tile the line pairs (k, k + 1) of its 32 groups
 * side by side, pair after pair. The 32 lanes of a warp push (and read) 32
 * consecutive groups a line pair (16 bytes) at a time, so each warp
 * instruction covers 512 contiguous bytes; with a group's lines together it
 * covered 1 KiB (16-bit) or 2 KiB (fp32), half or a quarter used. */
LOOM_HD int64_t loom__coll_ll_line(int64_t g, int64_t k, int64_t nl) {
  return (g >> 5) * 32 * nl + (k >> 1) * 64 + (g & 31) * 2 + (k & 1);
}

/* LL: lines of one slot (a sender's whole input; whole tiles of 32 groups). */
LOOM_HD int64_t loom__coll_ll_slot_lines(int64_t count, int64_t esize) {
  return loom__ceil_div(loom__ceil_div(count, LOOM_COLL_VEC), 32) * 32 * loom__coll_ll_group_lines(esize);
}

/* LL and PUSH: the slot sender s writes in receiver q's buffer (s != q):
 * 0 .. W-2. */
LOOM_HD int32_t loom__coll_push_slot(int32_t s, int32_t q, int32_t world) { return (s - q - 1 + 2 * world) % world; }

/* LL and PUSH: the index of (parity, slot) among a buffer's 2 (W-1)
 * regions (parity-major). */
LOOM_HD int64_t loom__coll_push_region(uint32_t parity, int32_t slot, int32_t world) {
  return (int64_t)(parity & 1u) * (world - 1) + slot;
}

/* LL: the first line of (parity, slot) in a buffer. */
LOOM_HD int64_t loom__coll_ll_line0(uint32_t parity, int32_t slot, int32_t world, int64_t slot_lines) {
  return loom__coll_push_region(parity, slot, world) * slot_lines;
}

/* LL: bytes of each rank's buffer (0 at W = 1: nothing is pushed). */
LOOM_HD int64_t loom__coll_ll_bytes(int64_t count, int64_t esize, int32_t world) {
  return world > 1 ? 2 * (int64_t)(world - 1) * loom__coll_ll_slot_lines(count, esize) * 8 : 0;
}

/* LL: blocks of `threads`: one group per thread (flat), or one block per
 * row (rows > 0: a row-wise norm), at most max_blocks (every block
 * resident: blocks wait on peers' blocks). */
LOOM_HD int32_t loom__coll_ll_grid(int64_t count, int64_t rows, int32_t threads, int32_t max_blocks) {
  int64_t g = rows > 0 ? rows : loom__ceil_div(loom__ceil_div(count, LOOM_COLL_VEC), threads < 1 ? 1 : threads);
  if (g > max_blocks) g = max_blocks;
  return g < 1 ? 1 : (int32_t)g;
}

/* PUSH (AllReduce's one-shot by stores): the input travels as it is, in
 * chunks of C elements; every rank's PUSH buffer holds 2 parities x (W-1)
 * slots of the whole input (slot_bytes each, 256-byte aligned), then 2 x
 * (W-1) x nch flag words. Sender s stores chunk j of its input into
 * receiver q's slot loom__coll_push_slot(s, q, W) of parity epoch mod 2, then
 * sets that slot's flag j to the epoch; q reduces chunk j from its own
 * memory once every sender's flag j is set. The parity argument is LL's. */
LOOM_HD int64_t loom__coll_push_slot_bytes(int64_t count, int64_t esize) { return loom__ceil_div(count * esize, 256) * 256; }

/* PUSH: byte offset of (parity, slot)'s data in a buffer. */
LOOM_HD int64_t loom__coll_push_data_off(uint32_t parity, int32_t slot, int32_t world, int64_t slot_bytes) {
  return loom__coll_push_region(parity, slot, world) * slot_bytes;
}

/* PUSH: byte offset of (parity, slot)'s flag of chunk j. */
LOOM_HD int64_t loom__coll_push_flag_off(uint32_t parity, int32_t slot, int64_t j, int32_t world, int64_t slot_bytes,
                                        int64_t nch) {
  return 2 * (int64_t)(world - 1) * slot_bytes + (loom__coll_push_region(parity, slot, world) * nch + j) * 4;
}

/* PUSH: bytes of each rank's buffer (0 at W = 1). */
LOOM_HD int64_t loom__coll_push_bytes(int64_t count, int64_t esize, int32_t world, int64_t nch) {
  return world > 1 ? loom__coll_push_flag_off(0, 0, 2 * (world - 1) * nch, world, loom__coll_push_slot_bytes(count, esize),
                                             nch)
                   : 0;
}

/* AllReduce AUTO's thresholds, in bytes of input (LOOM_ALLREDUCE_LL_BYTES,
 * LOOM_ALLREDUCE_PUSH_BYTES, LOOM_ALLREDUCE_ONE_SHOT_BYTES; 0: never). */
typedef struct loom_coll_thresholds {
  int64_t ll, push, one_shot;
} loom_coll_thresholds_t;

/* AllReduce AUTO, from the input's bytes on `world` ranks:
 *  LL        where it applies (ll_ok) and bytes x (W-1) <= t->ll: LL pushes
 *            2 x bytes to each of W-1 peers, so its reach shrinks with W
 *            (t->ll is its crossover at W = 2);
 *  PUSH      where bytes <= t->push, and
 *  ONE_SHOT  where bytes <= t->one_shot, each while its extra traffic over
 *            the two-shot's, (W-1) bytes - 2 (W-1)/W bytes = (W-1)(W-2)/W x
 *            bytes (both move the whole input to every peer), takes at most
 *            LOOM_COLL_ONE_SHOT_EXTRA (2 MiB: the two-shot's extra
 *            handshake, ~7 us, at ~300 GB/s). At W = 2 all three move the
 *            bytes the two-shot moves but apply the epilogue to the whole
 *            vector (the two-shot: to the rank's slice); measured order on
 *            2x H100 with and without the epilogue (docs/perf/coll.md, "AUTO's tiers"): LL to
 *            1 MiB, PUSH at 4 MiB, one-shot at 16 MiB, two-shot above;
 *  TWO_SHOT  otherwise.
 * Returns 1 (LL), 2 (PUSH), 3 (one-shot) or 4 (two-shot). */
#define LOOM_COLL_ONE_SHOT_EXTRA ((int64_t)2 << 20)
LOOM_HD int loom__coll_auto_algo(int64_t bytes, int32_t world, int ll_ok, const loom_coll_thresholds_t *t) {
  const int64_t w = world < 1 ? 1 : world;
  if (ll_ok && bytes <= t->ll / (w > 1 ? w - 1 : 1)) return 1;
  const double extra = (double)(w - 1) * (double)(w - 2 > 0 ? w - 2 : 0) / (double)w * (double)bytes;
  const int whole = extra <= (double)LOOM_COLL_ONE_SHOT_EXTRA;
  if (whole && bytes <= t->push) return 2;
  if (whole && bytes <= t->one_shot) return 3;
  return 4;
}

/* The slices' LL (ReduceScatter, AllGather) applies: every slice nonempty,
 * slices starting on a group of 8. */
LOOM_HD int loom__coll_ll_slices_ok(int64_t count, int32_t world, int64_t unit) {
  const int64_t w = world < 1 ? 1 : world;
  return unit % LOOM_COLL_VEC == 0 && (w - 1) * loom__coll_slice_elems(count, (int32_t)w, unit) < count;
}
/* ReduceScatter and AllGather AUTO: the slices' LL where it applies and the
 * words a rank pushes, (W-1) x S x esize bytes, are within twice AllReduce
 * LL's reach (2 t->ll); else the pull kernel (loom__coll_kernel). Twice:
 * AllReduce's LL gives way to PUSH, which moves half its bytes with no
 * handshake, where the slices' LL gives way to the pull kernel and its
 * handshake (2x H200, W = 2: the slices' LL 17.4 / 16.8 us at 2 MiB of
 * input, 1 MiB pushed, against the pull kernel's 22.4 / 23.0 and NCCL's
 * 19.6 / 20.8; docs/perf/coll.md). 1 for LL, 0 for the pull kernel. */
LOOM_HD int loom__coll_auto_ll_slices(int64_t count, int64_t esize, int32_t world, int64_t unit,
                                      const loom_coll_thresholds_t *t) {
  const int64_t w = world < 1 ? 1 : world, S = loom__coll_slice_elems(count, (int32_t)w, unit);
  return loom__coll_ll_slices_ok(count, (int32_t)w, unit) && (w > 1 ? w - 1 : 1) * S * esize <= 2 * t->ll;
}
/* Blocks for a phase that moves `bytes` per rank: one per 16 KiB (small
 * messages are latency-bound: more SMs keep more peer loads in flight), at
 * least 1, at most max_blocks (the SM count: every block resident, since
 * blocks wait on peers). */
LOOM_HD int32_t loom__coll_grid(int64_t bytes, int32_t max_blocks) {
  int64_t g = loom__ceil_div(bytes > 0 ? bytes : 1, (int64_t)16 << 10);
  if (g > max_blocks) g = max_blocks;
  return g < 1 ? 1 : (int32_t)g;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_COLL_SCHEDULE_H */
