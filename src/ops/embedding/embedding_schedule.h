/*
 * embedding_schedule.h - who does what when in the fused embedding-bag +
 * All-to-All (pure functions, host and device).
 *
 * Vocabulary (rank r of W; T = T_r local tables, T_total over all ranks,
 * global batch B, local batch Bl = B / W):
 *  - slice (q, j) of a table: samples q*Bl + [j*S, min((j+1)*S, Bl)) - the
 *    j-th group of S samples that rank q receives. nsl = ceil(Bl / S) slices
 *    per (table, destination). A slice is the unit of a ready flag.
 *  - part p of a slice: samples [p*P, (p+1)*P) inside it (P = part_samples);
 *    parts = ceil(S / P). A task = (destination q, slice j, table t, part p)
 *    is what one block does in one iteration of its persistent loop (the
 *    paper's logical WG). Parts past the end of a short last slice are empty
 *    tasks: they still count, so every slice has exactly `parts` tasks.
 *  - task order: task k decodes destination-major, then slice, table, part.
 *    Remote-first: destinations r+1, r+2, ..., r+W-1, then r itself (mod W),
 *    so every rank starts on a different peer (per-rank rotation) and local
 *    work, which needs no transfer, is done last. Local-first (for
 *    measurement) starts at r.
 *  - completion counter per (t, q, j) on the producing rank: each finished
 *    task adds 1; the one that brings it to `parts` is last, resets it and
 *    sets the slice's ready flag on rank q (the paper's WG_Done).
 *  - ready flag index on the receiving rank q for (source rank r, table t,
 *    slice j): (table_base(r) + t) * nsl + j, i.e. global table g = table_base
 *    + t; num_flags = T_total * nsl per rank. Under GIN the same index is the
 *    NCCL GIN signal id.
 *  - exit waits: block b of G waits on flags i with i % G == b (a partition).
 *
 * Counts: every signal word, counter and flag index is 32-bit; a plan whose
 * counts pass LOOM_EMB_MAX_SIGNALS is refused (loom__emb_plan_counts).
 *
 * Sorted backward (fp16/bf16 tables): the positions' table rows are sorted,
 * cut into chunks of LOOM_EMB_RUN_CHUNK positions, and each run of equal
 * rows is summed in fp32 and added to table_grad once (see the section).
 *
 * All functions take the schedule by pointer and do no allocation.
 */
#ifndef LOOM_OPS_EMBEDDING_SCHEDULE_H
#define LOOM_OPS_EMBEDDING_SCHEDULE_H

#include <stdint.h>

#include "core/util.h" /* LOOM_HD */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_emb_sched {
  int world, rank;       /* W, r */
  int t_local;           /* T_r */
  int t_total;           /* T_total */
  int table_base;        /* global index of rank r's first table */
  int64_t batch;         /* B */
  int64_t local_batch;   /* Bl = B / W */
  int slice;             /* S */
  int part;              /* P (<= S) */
  int nsl;               /* ceil(Bl / S) */
  int parts;             /* ceil(S / P) */
  int local_first;       /* 0: remote-first */
} loom_emb_sched_t;

/* One logical task, decoded. */
typedef struct loom_emb_task {
  int dest;              /* q: rank that receives the pooled rows */
  int slice;             /* j */
  int table;             /* t (local) */
  int part;              /* p */
  int64_t sample0;       /* first global sample */
  int count;             /* samples (0 for an empty part) */
} loom_emb_task_t;

/* Fills s; returns 0, or -1 if the numbers are inconsistent (W < 1, rank
 * outside, B not a multiple of W, S or P < 1, more than 2^31 - 1 slices).
 * P is clamped to S. */
LOOM_HD int loom__emb_sched_init(loom_emb_sched_t *s, int world, int rank, int t_local, int t_total,
                                    int table_base, int64_t batch, int slice, int part, int local_first) {
  if (world < 1 || rank < 0 || rank >= world || t_local < 0 || t_total < t_local || batch < world ||
      batch % world != 0 || slice < 1 || part < 1 || table_base < 0 || table_base + t_local > t_total ||
      (batch / world + slice - 1) / slice > 0x7fffffff)
    return -1;
  s->world = world;
  s->rank = rank;
  s->t_local = t_local;
  s->t_total = t_total;
  s->table_base = table_base;
  s->batch = batch;
  s->local_batch = batch / world;
  s->slice = slice;
  s->part = part < slice ? part : slice;
  s->nsl = (int)((s->local_batch + slice - 1) / slice);
  s->parts = (slice + s->part - 1) / s->part;
  s->local_first = local_first;
  return 0;
}

/* Tasks of one call on this rank: W * nsl * T * parts. */
LOOM_HD int64_t loom__emb_num_tasks(const loom_emb_sched_t *s) {
  return (int64_t)s->world * s->nsl * s->t_local * s->parts;
}

/* Tasks whose output goes to one destination: nsl * T * parts. */
LOOM_HD int64_t loom__emb_tasks_per_dest(const loom_emb_sched_t *s) {
  return (int64_t)s->nsl * s->t_local * s->parts;
}

/* Destination of the i-th destination group in this rank's order. */
LOOM_HD int loom__emb_dest_at(const loom_emb_sched_t *s, int i) {
  return s->local_first ? (s->rank + i) % s->world : (s->rank + 1 + i) % s->world;
}

/* Position of destination q in this rank's order (inverse of dest_at). */
LOOM_HD int loom__emb_dest_pos(const loom_emb_sched_t *s, int q) {
  return s->local_first ? (q - s->rank + s->world) % s->world : (q - s->rank - 1 + 2 * s->world) % s->world;
}

/* Task k (0 <= k < num_tasks) of this rank. */
LOOM_HD loom_emb_task_t loom__emb_task_decode(const loom_emb_sched_t *s, int64_t k) {
  loom_emb_task_t t;
  int64_t per_dest = loom__emb_tasks_per_dest(s);
  int di = (int)(k / per_dest);
  int64_t rem = k - (int64_t)di * per_dest;
  int64_t per_slice = (int64_t)s->t_local * s->parts;
  t.dest = loom__emb_dest_at(s, di);
  t.slice = (int)(rem / per_slice);
  rem -= (int64_t)t.slice * per_slice;
  t.table = (int)(rem / s->parts);
  t.part = (int)(rem - (int64_t)t.table * s->parts);
  int64_t in_slice0 = (int64_t)t.part * s->part;               /* offset inside the slice */
  int64_t slice0 = (int64_t)t.slice * s->slice;                /* offset inside the local batch */
  int64_t slice_len = s->local_batch - slice0 < s->slice ? s->local_batch - slice0 : s->slice;
  int64_t n = slice_len - in_slice0;
  if (n > s->part) n = s->part;
  if (n < 0) n = 0;
  t.count = (int)n;
  t.sample0 = (int64_t)t.dest * s->local_batch + slice0 + in_slice0;
  return t;
}

/* Completion counter of (local table t, destination q, slice j) on this rank. */
LOOM_HD uint32_t loom__emb_counter_index(const loom_emb_sched_t *s, int t, int q, int j) {
  return ((uint32_t)t * (uint32_t)s->world + (uint32_t)q) * (uint32_t)s->nsl + (uint32_t)j;
}
LOOM_HD uint32_t loom__emb_num_counters(const loom_emb_sched_t *s) {
  return (uint32_t)s->t_local * (uint32_t)s->world * (uint32_t)s->nsl;
}

/* Tasks per slice: the task that brings a slice's counter to this value is
 * the last of its slice; it resets the counter to 0 for the next call (no
 * other task of this call touches it again, and the next call starts after
 * this kernel ends on the stream). */
LOOM_HD uint32_t loom__emb_counter_target(const loom_emb_sched_t *s) { return (uint32_t)s->parts; }

/* Ready flag on the receiving rank for (source rank's table_base, its local
 * table t, slice j). num_flags = T_total * nsl. */
LOOM_HD uint32_t loom__emb_flag_index(const loom_emb_sched_t *s, int src_table_base, int t, int j) {
  return (uint32_t)(src_table_base + t) * (uint32_t)s->nsl + (uint32_t)j;
}
LOOM_HD uint32_t loom__emb_num_flags(const loom_emb_sched_t *s) {
  return (uint32_t)s->t_total * (uint32_t)s->nsl;
}

/* ---- counts of a plan (32-bit signal words) ------------------------------
 * A plan's signal words (embedding_a2a.h: flags, ready, gready, gdone,
 * bcount, misc, counters) are indexed with 32-bit numbers on the device and
 * handed to NCCL GIN as an int signal count, so each count below must stay
 * at or under LOOM_EMB_MAX_SIGNALS; the plan refuses a description that
 * passes it (the message names the count, its value and the limit). */
#define LOOM_EMB_MAX_SIGNALS ((int64_t)0x7fffffff)

typedef struct loom_emb_counts {
  int64_t nsl;           /* slices per (table, destination): ceil(Bl / S) */
  int64_t flags;         /* ready flags per rank: T_total x nsl */
  int64_t counters;      /* completion counters (sized for the rank with most tables): t_max x W x nsl */
  int64_t words;         /* every signal word of the plan: flags + 4 W + 4 + counters */
} loom_emb_counts_t;

/* a * b for a, b >= 0, saturated at INT64_MAX. */
LOOM_HD int64_t loom__emb_mul_sat(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > INT64_MAX / b ? INT64_MAX : a * b;
}
LOOM_HD int64_t loom__emb_add_sat(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

/* The counts of a plan for W ranks, T_total tables, the most tables on one
 * rank t_max, local batch Bl and slice S (all >= 1 but t_max, T >= 0). */
LOOM_HD loom_emb_counts_t loom__emb_plan_counts(int world, int t_total, int t_max, int64_t local_batch, int slice) {
  loom_emb_counts_t c;
  c.nsl = (local_batch + slice - 1) / slice;
  c.flags = loom__emb_mul_sat(t_total, c.nsl);
  c.counters = loom__emb_mul_sat(loom__emb_mul_sat(t_max, world), c.nsl);
  c.words = loom__emb_add_sat(loom__emb_add_sat(c.flags, c.counters), 4 * (int64_t)world + 4);
  return c;
}

/* The first count over LOOM_EMB_MAX_SIGNALS: 0 none, 1 nsl, 2 flags, 3
 * counters, 4 words; its name for a message in *what, its value in *value. */
LOOM_HD int loom__emb_counts_check(const loom_emb_counts_t *c, const char **what, int64_t *value) {
  int which = 0;
  int64_t v = 0;
  const char *name = "";
  if (c->nsl > LOOM_EMB_MAX_SIGNALS) which = 1, v = c->nsl, name = "slices per table and destination ceil(Bl/S)";
  else if (c->flags > LOOM_EMB_MAX_SIGNALS) which = 2, v = c->flags, name = "slice ready flags T_total x slices";
  else if (c->counters > LOOM_EMB_MAX_SIGNALS)
    which = 3, v = c->counters, name = "slice completion counters max_p T_p x W x slices";
  else if (c->words > LOOM_EMB_MAX_SIGNALS) which = 4, v = c->words, name = "signal words of the plan";
  if (what) *what = name;
  if (value) *value = v;
  return which;
}

/* The block (of `grid`) that waits on incoming flag i before exiting. */
LOOM_HD int loom__emb_flag_waiter(uint32_t i, int grid) { return (int)(i % (uint32_t)grid); }

/* Dynamic task fetch: every block fetches from a counter that starts the
 * call at 0 until it gets an index >= num_tasks; the last block to finish
 * (counted in a blocks-done word) resets counter and count to 0. */

/* Output element offset (in elements of out_type) of sample `b` (global),
 * local table t of source rank with `src_table_base`, in the destination's
 * output [Bl, T_total*D]. */
LOOM_HD int64_t loom__emb_out_offset(const loom_emb_sched_t *s, int src_table_base, int t, int64_t b,
                                        int dim) {
  int64_t row = b % s->local_batch;
  return row * (int64_t)s->t_total * dim + (int64_t)(src_table_base + t) * dim;
}

/* ---- GIN bookkeeping (slices to ranks outside the NVLink domain) --------
 * A remote slice (q, j) of table t is pooled into this rank's staging window
 * at [q][t][row in Bl][D] (contiguous per slice), then sent with one put per
 * sample row (the destination layout is strided) into q's output; the last
 * put of the slice carries SignalAdd(+1) on GIN signal flag_index(...) at q.
 * The receiver keeps the count it expects in the signal's shadow (device
 * memory, so graph replays stay right): each call raises the shadow by one
 * and waits until the signal reaches it. */

/* Staging element offset of sample b's row for (q, t). */
LOOM_HD int64_t loom__emb_gin_stage_offset(const loom_emb_sched_t *s, int q, int t, int64_t b, int dim) {
  return (((int64_t)q * s->t_local + t) * s->local_batch + (b % s->local_batch)) * dim;
}
/* Staging elements per rank: W * T * Bl * D (only slices to other nodes are
 * staged, but the layout keeps a place for every destination). */
LOOM_HD int64_t loom__emb_gin_stage_elems(const loom_emb_sched_t *s, int dim) {
  return (int64_t)s->world * s->t_local * s->local_batch * dim;
}
/* Puts of slice j (its sample rows) and the signal value it leaves. */
LOOM_HD int loom__emb_slice_rows(const loom_emb_sched_t *s, int j) {
  int64_t r = s->local_batch - (int64_t)j * s->slice;
  return (int)(r < s->slice ? r : s->slice);
}
LOOM_HD uint64_t loom__emb_gin_signal_target(uint64_t shadow_before) { return shadow_before + 1u; }

/* Put i (0 <= i < loom__emb_slice_rows(j)) of slice j of local table t for
 * rank q: sample row i of the slice, from this rank's staging window to q's
 * output window (`out_win_off`: where q's out starts in it), in bytes, for
 * `elem`-byte elements. */
typedef struct loom__emb_gin_put {
  uint64_t dst, src, bytes;
} loom_emb_gin_put_t;
LOOM_HD loom_emb_gin_put_t loom__emb_gin_put(const loom_emb_sched_t *s, int q, int t, int j, int i, int dim,
                                                uint64_t elem, uint64_t out_win_off) {
  loom_emb_gin_put_t p;
  const int64_t b = (int64_t)q * s->local_batch + (int64_t)j * s->slice + i;
  p.dst = out_win_off + (uint64_t)loom__emb_out_offset(s, s->table_base, t, b, dim) * elem;
  p.src = (uint64_t)loom__emb_gin_stage_offset(s, q, t, b, dim) * elem;
  p.bytes = (uint64_t)dim * elem;
  return p;
}

/* The rank that sets incoming flag i (it owns global table i / nsl):
 * table_base [W+1] as in the plan (rank p owns tables [table_base[p],
 * table_base[p+1])). Binary search. */
LOOM_HD int loom__emb_flag_source(const int *table_base, int world, int nsl, uint32_t i) {
  const int g = (int)(i / (uint32_t)nsl);
  int lo = 0, hi = world - 1;
  while (lo < hi) { /* the last p with table_base[p] <= g */
    const int mid = lo + (hi - lo + 1) / 2;
    if (table_base[mid] <= g) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* ---- sorted backward (fp16/bf16 tables) ---------------------------------
 * Adding a row's gradient with fp16/bf16 atomics rounds at every addition, so
 * a row hit many times drifts far from its exact sum. The sorted backward
 * adds every row's contributions in fp32 and rounds once (as PyTorch's
 * EmbeddingBag backward does), with no atomics:
 *  1. keys[p] = row of position p in this rank's stacked tables (row_off[t] +
 *     index; LOOM_EMB_NO_ROW for a skipped index or a position in no bag),
 *     pos[p] = p, and per position its gradient row and coefficient;
 *  2. (keys, pos) sorted by key (stable, so the order of a row's additions is
 *     fixed: the result is deterministic);
 *  3. the sorted positions are cut into chunks of LOOM_EMB_RUN_CHUNK; one
 *     warp walks a chunk's runs (maximal equal keys), summing each run's
 *     rows in fp32. A run inside the chunk is added to table_grad at once
 *     (table_grad = round(table_grad + sum)). A run that crosses the
 *     chunk's start leaves its piece in the chunk's FIRST partial, one that
 *     crosses its end (and started in it: the run's head) in its LAST
 *     partial;
 *  4. the warp of a chunk holding a head piece adds the head piece and the
 *     FIRST partials of the following chunks the run reaches, and adds that
 *     sum to table_grad once.
 * Every run is written exactly once (host-tested). Keys and positions are
 * 32-bit: a rank's tables hold at most LOOM_EMB_MAX_SORTED_ROWS rows and a
 * call at most LOOM_EMB_MAX_SORTED_INDICES indices on this path. */
#define LOOM_EMB_RUN_CHUNK 256
#define LOOM_EMB_NO_ROW 0xffffffffu
#define LOOM_EMB_MAX_SORTED_ROWS ((int64_t)0xfffffffe)
#define LOOM_EMB_MAX_SORTED_INDICES ((int64_t)0xffffffff)
#define LOOM_EMB_PIECE_WRITE 0 /* added to table_grad by the chunk's warp */
#define LOOM_EMB_PIECE_FIRST 1 /* the chunk's FIRST partial */
#define LOOM_EMB_PIECE_LAST 2  /* the chunk's LAST partial (a run's head piece) */

LOOM_HD int64_t loom__emb_run_chunks(int64_t n) { return (n + LOOM_EMB_RUN_CHUNK - 1) / LOOM_EMB_RUN_CHUNK; }

/* Bits the sort compares: enough for every row and LOOM_EMB_NO_ROW's low
 * bits to stay above them (2^bits > rows). */
LOOM_HD int loom__emb_key_bits(int64_t rows) {
  int b = 1;
  while (b < 32 && ((int64_t)1 << b) <= rows) ++b;
  return b;
}

typedef struct loom_emb_chunk {
  int64_t i0, i1;        /* sorted positions [i0, i1) */
  int valid;             /* keys[i0] is a row (keys >= rows, unused positions, sort last) */
  int head_open;         /* its first run began in an earlier chunk */
  int tail_open;         /* its last run goes on into the next chunk */
  int single;            /* one run of rows only: keys[i0] == keys[i1 - 1] */
} loom_emb_chunk_t;

/* Chunk c of n sorted keys (rows: the rank's table rows). */
LOOM_HD loom_emb_chunk_t loom__emb_chunk_info(const uint32_t *keys, int64_t n, int64_t c, int64_t rows) {
  loom_emb_chunk_t ch;
  ch.i0 = c * LOOM_EMB_RUN_CHUNK;
  ch.i1 = ch.i0 + LOOM_EMB_RUN_CHUNK < n ? ch.i0 + LOOM_EMB_RUN_CHUNK : n;
  const uint32_t first = keys[ch.i0], last = keys[ch.i1 - 1];
  ch.valid = (int64_t)first < rows;
  ch.head_open = ch.valid && ch.i0 > 0 && keys[ch.i0 - 1] == first;
  ch.tail_open = (int64_t)last < rows && ch.i1 < n && keys[ch.i1] == last;
  ch.single = ch.valid && first == last;
  return ch;
}

/* Where a run's sum goes: first_run / last_run say whether it is the
 * chunk's first / last run of rows. */
LOOM_HD int loom__emb_piece_dest(const loom_emb_chunk_t *ch, int first_run, int last_run) {
  if (first_run && ch->head_open) return LOOM_EMB_PIECE_FIRST;
  if (last_run && ch->tail_open) return LOOM_EMB_PIECE_LAST;
  return LOOM_EMB_PIECE_WRITE;
}

/* 1 if the chunk holds the head piece of a run that goes on past it. */
LOOM_HD int loom__emb_chunk_has_head(const loom_emb_chunk_t *ch) {
  return ch->tail_open && !(ch->head_open && ch->single);
}

/* The last chunk a run reaches, for a run whose head piece is in chunk c
 * (loom__emb_chunk_has_head) with key `key`: the last chunk c2 > c whose
 * first position holds key (binary search; chunk c + 1 does). */
LOOM_HD int64_t loom__emb_run_last_chunk(const uint32_t *keys, int64_t n, int64_t c, uint32_t key) {
  int64_t lo = c + 1, hi = loom__emb_run_chunks(n) - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (keys[mid * LOOM_EMB_RUN_CHUNK] == key) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* ---- path choice -------------------------------------------------------- */

/* 1 = zero-copy, 2 = GIN, 3 = staged (values of loom_embedding_path_t).
 * requested: 0 auto. Returns -1 (with nothing chosen) if the request cannot
 * be met: zero-copy needs every rank load/store reachable, GIN needs NCCL's
 * GIN (or every rank reachable, which needs no network). */
LOOM_HD int loom__emb_choose_path(int requested, int all_lsa, int gin_supported) {
  switch (requested) {
    case 0: return all_lsa ? 1 : gin_supported ? 2 : 3;
    case 1: return all_lsa ? 1 : -1;
    case 2: return all_lsa ? 1 : gin_supported ? 2 : -1;
    case 3: return 3;
  }
  return -1;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_EMBEDDING_SCHEDULE_H */
