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
 * All functions take the schedule by pointer and do no allocation.
 */
#ifndef LOOM_OPS_EMBEDDING_SCHEDULE_H
#define LOOM_OPS_EMBEDDING_SCHEDULE_H

#include <stdint.h>

#ifdef __CUDACC__
#define LOOM_EMB_HD __host__ __device__ static inline
#else
#define LOOM_EMB_HD static inline
#endif

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
 * outside, B not a multiple of W, S or P < 1). P is clamped to S. */
LOOM_EMB_HD int loom_emb_sched_init(loom_emb_sched_t *s, int world, int rank, int t_local, int t_total,
                                    int table_base, int64_t batch, int slice, int part, int local_first) {
  if (world < 1 || rank < 0 || rank >= world || t_local < 0 || t_total < t_local || batch < world ||
      batch % world != 0 || slice < 1 || part < 1 || table_base < 0 || table_base + t_local > t_total)
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
LOOM_EMB_HD int64_t loom_emb_num_tasks(const loom_emb_sched_t *s) {
  return (int64_t)s->world * s->nsl * s->t_local * s->parts;
}

/* Tasks whose output goes to one destination: nsl * T * parts. */
LOOM_EMB_HD int64_t loom_emb_tasks_per_dest(const loom_emb_sched_t *s) {
  return (int64_t)s->nsl * s->t_local * s->parts;
}

/* Destination of the i-th destination group in this rank's order. */
LOOM_EMB_HD int loom_emb_dest_at(const loom_emb_sched_t *s, int i) {
  return s->local_first ? (s->rank + i) % s->world : (s->rank + 1 + i) % s->world;
}

/* Position of destination q in this rank's order (inverse of dest_at). */
LOOM_EMB_HD int loom_emb_dest_pos(const loom_emb_sched_t *s, int q) {
  return s->local_first ? (q - s->rank + s->world) % s->world : (q - s->rank - 1 + 2 * s->world) % s->world;
}

/* Task k (0 <= k < num_tasks) of this rank. */
LOOM_EMB_HD loom_emb_task_t loom_emb_task_decode(const loom_emb_sched_t *s, int64_t k) {
  loom_emb_task_t t;
  int64_t per_dest = loom_emb_tasks_per_dest(s);
  int di = (int)(k / per_dest);
  int64_t rem = k - (int64_t)di * per_dest;
  int64_t per_slice = (int64_t)s->t_local * s->parts;
  t.dest = loom_emb_dest_at(s, di);
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
LOOM_EMB_HD uint32_t loom_emb_counter_index(const loom_emb_sched_t *s, int t, int q, int j) {
  return ((uint32_t)t * (uint32_t)s->world + (uint32_t)q) * (uint32_t)s->nsl + (uint32_t)j;
}
LOOM_EMB_HD uint32_t loom_emb_num_counters(const loom_emb_sched_t *s) {
  return (uint32_t)s->t_local * (uint32_t)s->world * (uint32_t)s->nsl;
}

/* Tasks per slice: the task that brings a slice's counter to this value is
 * the last of its slice; it resets the counter to 0 for the next call (no
 * other task of this call touches it again, and the next call starts after
 * this kernel ends on the stream). */
LOOM_EMB_HD uint32_t loom_emb_counter_target(const loom_emb_sched_t *s) { return (uint32_t)s->parts; }

/* Ready flag on the receiving rank for (source rank's table_base, its local
 * table t, slice j). num_flags = T_total * nsl. */
LOOM_EMB_HD uint32_t loom_emb_flag_index(const loom_emb_sched_t *s, int src_table_base, int t, int j) {
  return (uint32_t)(src_table_base + t) * (uint32_t)s->nsl + (uint32_t)j;
}
LOOM_EMB_HD uint32_t loom_emb_num_flags(const loom_emb_sched_t *s) {
  return (uint32_t)s->t_total * (uint32_t)s->nsl;
}

/* The block (of `grid`) that waits on incoming flag i before exiting. */
LOOM_EMB_HD int loom_emb_flag_waiter(uint32_t i, int grid) { return (int)(i % (uint32_t)grid); }

/* Dynamic task fetch: every block fetches from a counter that starts the
 * call at 0 until it gets an index >= num_tasks; the last block to finish
 * (counted in a blocks-done word) resets counter and count to 0. */

/* Output element offset (in elements of out_type) of sample `b` (global),
 * local table t of source rank with `src_table_base`, in the destination's
 * output [Bl, T_total*D]. */
LOOM_EMB_HD int64_t loom_emb_out_offset(const loom_emb_sched_t *s, int src_table_base, int t, int64_t b,
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
LOOM_EMB_HD int64_t loom_emb_gin_stage_offset(const loom_emb_sched_t *s, int q, int t, int64_t b, int dim) {
  return (((int64_t)q * s->t_local + t) * s->local_batch + (b % s->local_batch)) * dim;
}
/* Staging elements per rank: W * T * Bl * D (only slices to other nodes are
 * staged, but the layout keeps a place for every destination). */
LOOM_EMB_HD int64_t loom_emb_gin_stage_elems(const loom_emb_sched_t *s, int dim) {
  return (int64_t)s->world * s->t_local * s->local_batch * dim;
}
/* Puts of slice j (its sample rows) and the signal value it leaves. */
LOOM_EMB_HD int loom_emb_slice_rows(const loom_emb_sched_t *s, int j) {
  int64_t r = s->local_batch - (int64_t)j * s->slice;
  return (int)(r < s->slice ? r : s->slice);
}
LOOM_EMB_HD uint64_t loom_emb_gin_signal_target(uint64_t shadow_before) { return shadow_before + 1u; }

/* ---- path choice -------------------------------------------------------- */

/* 1 = zero-copy, 2 = GIN, 3 = staged (values of loom_embedding_path_t).
 * requested: 0 auto. Returns -1 (with nothing chosen) if the request cannot
 * be met: zero-copy needs every rank load/store reachable, GIN needs NCCL's
 * GIN (or every rank reachable, which needs no network). */
LOOM_EMB_HD int loom_emb_choose_path(int requested, int all_lsa, int gin_supported) {
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
