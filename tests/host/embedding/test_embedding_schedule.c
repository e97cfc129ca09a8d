/*
 * test_embedding_schedule.c - host tests of the fused embedding-bag +
 * All-to-All's scheduling (src/ops/embedding/embedding_schedule.h) for world sizes this
 * machine cannot run (2..64), and of the plan's argument checks on a test
 * comm without a GPU.
 *
 * For every (W, tables per rank, B, S, grid) the tests simulate one call on
 * every rank: each rank's tasks in its own order, the completion counters,
 * the flags they set on the receivers, and the exit waits, and check that
 * every output row of every destination is written exactly once, every flag
 * is set exactly once, remote tasks come first, and the waited-on flag
 * subsets partition the incoming flags. Also: the 32-bit count bounds of a
 * plan, the sorted backward's run bookkeeping (every run of a row written
 * exactly once, whatever its length), and the GIN bookkeeping (puts, signal
 * targets, the source rank of every incoming flag).
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/comm.h"
#include "core/plan.h"
#include "ops/embedding/embedding_a2a.h"
#include "ops/embedding/embedding_schedule.h"
#include "testing/hooks.h"

static int tables_of(int pattern, int r) {
  switch (pattern) {
    case 0: return 1;
    case 1: return 3;
    case 2: return (r * 7 + 3) % 4; /* uneven, some ranks own none */
    default: return r % 2 ? 2 : 5;
  }
}

/* One configuration; returns the number of failed checks. */
static int check_config(int W, int pattern, int64_t B, int S, int P, int grid, int local_first) {
  int fails0 = loom_test_failures;
  int *tpr = (int *)malloc((size_t)W * sizeof(int)), *base = (int *)malloc((size_t)(W + 1) * sizeof(int));
  base[0] = 0;
  for (int r = 0; r < W; ++r) {
    tpr[r] = tables_of(pattern, r);
    base[r + 1] = base[r] + tpr[r];
  }
  const int T_total = base[W];
  if (T_total == 0) {
    free(tpr);
    free(base);
    return 0;
  }
  const int64_t Bl = B / W;
  /* written[q][row * T_total + g], flag_sets[q][i] */
  uint8_t *written = (uint8_t *)calloc((size_t)W * (size_t)Bl * (size_t)T_total, 1);
  loom_emb_sched_t s0;
  memset(&s0, 0, sizeof s0);
  CHECK_EQ_INT(loom__emb_sched_init(&s0, W, 0, tpr[0], T_total, 0, B, S, P, local_first), 0);
  const uint32_t nf = loom__emb_num_flags(&s0);
  uint8_t *flag_sets = (uint8_t *)calloc((size_t)W * nf, 1);
  for (int r = 0; r < W; ++r) {
    loom_emb_sched_t s;
    memset(&s, 0, sizeof s);
    if (loom__emb_sched_init(&s, W, r, tpr[r], T_total, base[r], B, S, P, local_first) != 0) {
      CHECK(!"sched_init failed");
      continue;
    }
    CHECK_EQ_INT(loom__emb_num_flags(&s), nf);
    const int64_t nt = loom__emb_num_tasks(&s);
    const uint32_t nc = loom__emb_num_counters(&s);
    uint32_t *ctr = (uint32_t *)calloc(nc ? nc : 1, sizeof(uint32_t));
    int seen_local = 0;
    /* simulated dynamic fetch: blocks take turns; each gets k in order */
    for (int64_t k = 0; k < nt; ++k) {
      loom_emb_task_t tk = loom__emb_task_decode(&s, k);
      if (k == 0) CHECK_EQ_INT(tk.dest, local_first ? r : (r + 1) % W);
      CHECK(tk.dest >= 0 && tk.dest < W && tk.table >= 0 && tk.table < s.t_local);
      CHECK(tk.slice >= 0 && tk.slice < s.nsl && tk.part >= 0 && tk.part < s.parts);
      CHECK_EQ_INT(loom__emb_dest_pos(&s, tk.dest), loom__emb_dest_pos(&s, loom__emb_dest_at(&s, loom__emb_dest_pos(&s, tk.dest))));
      if (tk.dest == r) seen_local = 1;
      else if (!local_first && seen_local) { CHECK(!"remote task after a local one"); break; }
      if (local_first && tk.dest == r) CHECK(k < loom__emb_tasks_per_dest(&s));
      for (int i = 0; i < tk.count; ++i) {
        int64_t b = tk.sample0 + i;
        int64_t row = b - (int64_t)tk.dest * Bl;
        if (!(row >= 0 && row < Bl)) { CHECK(!"sample outside the destination's batch"); break; }
        if (!(row >= (int64_t)tk.slice * S && row < (int64_t)(tk.slice + 1) * S)) { CHECK(!"sample outside its slice"); break; }
        int64_t off = loom__emb_out_offset(&s, s.table_base, tk.table, b, 8);
        CHECK_EQ_INT(off, (row * T_total + s.table_base + tk.table) * 8);
        written[((size_t)tk.dest * (size_t)Bl + (size_t)row) * (size_t)T_total + (size_t)(s.table_base + tk.table)]++;
      }
      uint32_t ci = loom__emb_counter_index(&s, tk.table, tk.dest, tk.slice);
      if (ci >= nc) { CHECK(!"counter index out of range"); break; }
      if (++ctr[ci] == loom__emb_counter_target(&s)) {
        ctr[ci] = 0; /* the last task resets it */
        uint32_t fi = loom__emb_flag_index(&s, s.table_base, tk.table, tk.slice);
        if (fi >= nf) { CHECK(!"flag index out of range"); break; }
        flag_sets[(size_t)tk.dest * nf + fi]++;
      }
    }
    for (uint32_t c = 0; c < nc; ++c) CHECK_EQ_INT(ctr[c], 0); /* every counter completed and reset */
    free(ctr);
  }
  /* every output row of every destination exactly once; every flag once */
  size_t bad_rows = 0, bad_flags = 0;
  for (size_t i = 0; i < (size_t)W * (size_t)Bl * (size_t)T_total; ++i) bad_rows += written[i] != 1;
  for (size_t i = 0; i < (size_t)W * nf; ++i) bad_flags += flag_sets[i] != 1;
  CHECK_EQ_INT(bad_rows, 0);
  CHECK_EQ_INT(bad_flags, 0);
  /* exit waits, as the kernel's loop visits them: a partition */
  uint8_t *waited = (uint8_t *)calloc(nf, 1);
  for (int blk = 0; blk < grid; ++blk)
    for (int x = 0; x < LOOM_EMB_THREADS; ++x)
      for (uint32_t i = (uint32_t)blk + (uint32_t)grid * (uint32_t)x; i < nf; i += (uint32_t)grid * LOOM_EMB_THREADS) {
        CHECK_EQ_INT(loom__emb_flag_waiter(i, grid), blk);
        waited[i]++;
      }
  size_t bad_waits = 0;
  for (uint32_t i = 0; i < nf; ++i) bad_waits += waited[i] != 1;
  CHECK_EQ_INT(bad_waits, 0);
  if (loom_test_failures != fails0)
    printf("    failing config: W=%d pattern=%d B=%lld S=%d P=%d grid=%d local_first=%d\n", W, pattern, (long long)B, S, P,
           grid, local_first);
  free(waited);
  free(written);
  free(flag_sets);
  free(tpr);
  free(base);
  return loom_test_failures - fails0;
}

LOOM_TEST(emb_schedule_rows_once_flags_once_remote_first_w2_to_64) {
  static const int Ws[] = {2, 3, 4, 5, 8, 16, 17, 32, 64};
  static const int Ss[] = {1, 3, 8, 32, 100};
  static const int grids[] = {1, 7, 132, 528};
  int configs = 0;
  for (size_t wi = 0; wi < sizeof Ws / sizeof *Ws; ++wi) {
    int W = Ws[wi];
    for (int pattern = 0; pattern < 4; ++pattern)
      for (int bm = 1; bm <= 3; ++bm) {
        int64_t B = (int64_t)W * (W >= 32 ? 8 * bm : 19 * bm); /* Bl not a multiple of most S */
        for (size_t si = 0; si < sizeof Ss / sizeof *Ss; ++si)
          for (int P = 1; P <= 32; P *= (P == 1 ? 4 : 2)) { /* 1, 4, 8, 16, 32 */
            int grid = grids[(wi + si + (size_t)bm) % 4];
            for (int lf = 0; lf < 2; ++lf) {
              if (check_config(W, pattern, B, Ss[si], P, grid, lf)) return;
              ++configs;
            }
          }
      }
  }
  printf("    %d configurations checked\n", configs);
}

LOOM_TEST(emb_schedule_world_of_one_and_bad_numbers) {
  CHECK_EQ_INT(check_config(1, 1, 64, 16, 8, 3, 0), 0);
  loom_emb_sched_t s;
  memset(&s, 0, sizeof s);
  CHECK_EQ_INT(loom__emb_sched_init(&s, 2, 0, 1, 2, 0, 3, 8, 8, 0), -1);  /* B not a multiple of W */
  CHECK_EQ_INT(loom__emb_sched_init(&s, 2, 2, 1, 2, 0, 4, 8, 8, 0), -1);  /* rank outside */
  CHECK_EQ_INT(loom__emb_sched_init(&s, 2, 0, 1, 2, 0, 4, 0, 8, 0), -1);  /* S = 0 */
  CHECK_EQ_INT(loom__emb_sched_init(&s, 2, 1, 2, 2, 1, 4, 8, 8, 0), -1);  /* tables past T_total */
  CHECK_EQ_INT(loom__emb_sched_init(&s, 1, 0, 1, 1, 0, (int64_t)1 << 31, 1, 1, 0), -1); /* 2^31 slices */
  CHECK_EQ_INT(loom__emb_sched_init(&s, 2, 0, 1, 2, 0, 4096, 32, 8, 0), 0);
  CHECK_EQ_INT(s.nsl, 64);
  CHECK_EQ_INT(s.parts, 4);
  CHECK_EQ_INT(loom__emb_num_tasks(&s), 2 * 64 * 1 * 4);
}

/* GIN bookkeeping: staging places unique and inside the staging size; the
 * puts of a slice cover its rows; signal ids are the flag indices. */
LOOM_TEST(emb_gin_bookkeeping) {
  static const int Ws[] = {2, 4, 16, 64};
  for (size_t wi = 0; wi < 4; ++wi) {
    int W = Ws[wi], T = 3, D = 16;
    int64_t B = (int64_t)W * 45;
    loom_emb_sched_t s;
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(loom__emb_sched_init(&s, W, W - 1, T, T * W, T * (W - 1), B, 16, 8, 0), 0);
    int64_t n = loom__emb_gin_stage_elems(&s, D);
    uint8_t *used = (uint8_t *)calloc((size_t)(n / D), 1);
    for (int q = 0; q < W; ++q)
      for (int t = 0; t < T; ++t) {
        int64_t rows = 0;
        for (int j = 0; j < s.nsl; ++j) {
          int nr = loom__emb_slice_rows(&s, j);
          CHECK(nr >= 1 && nr <= 16);
          rows += nr;
          for (int i = 0; i < nr; ++i) {
            int64_t b = (int64_t)q * s.local_batch + (int64_t)j * 16 + i;
            int64_t off = loom__emb_gin_stage_offset(&s, q, t, b, D);
            CHECK(off >= 0 && off + D <= n && off % D == 0);
            used[off / D]++;
          }
          CHECK(loom__emb_flag_index(&s, s.table_base, t, j) < loom__emb_num_flags(&s));
        }
        CHECK_EQ_INT(rows, s.local_batch);
      }
    size_t bad = 0;
    for (int64_t i = 0; i < n / D; ++i) bad += used[i] != 1;
    CHECK_EQ_INT(bad, 0);
    free(used);
  }
  CHECK_EQ_INT(loom__emb_gin_signal_target(0), 1);
  CHECK_EQ_INT(loom__emb_gin_signal_target(41), 42);
}

/* GIN puts: for every destination, the puts of every source rank's slices
 * cover each output row's columns of that source's tables exactly once, and
 * read each staging row once; each incoming flag's source is the rank that
 * owns its table (uneven tables, ranks without tables). */
LOOM_TEST(emb_gin_puts_and_flag_sources_w2_to_64) {
  static const int Ws[] = {2, 3, 4, 8, 16, 64};
  for (size_t wi = 0; wi < sizeof Ws / sizeof *Ws; ++wi) {
    const int W = Ws[wi], D = 8;
    const int64_t B = (int64_t)W * 21; /* Bl = 21: slices 8, 8, 5 */
    int *tpr = (int *)malloc((size_t)W * sizeof(int)), *base = (int *)malloc((size_t)(W + 1) * sizeof(int));
    base[0] = 0;
    for (int r = 0; r < W; ++r) {
      tpr[r] = tables_of(2, r);
      base[r + 1] = base[r] + tpr[r];
    }
    const int T_total = base[W];
    const uint64_t elem = 2, win_off = 4096;
    const size_t out_rows = (size_t)(B / W) * (size_t)T_total; /* (row, global table) cells of one destination */
    uint8_t *cell = (uint8_t *)calloc((size_t)W * out_rows, 1);
    size_t bad = 0;
    for (int r = 0; r < W; ++r) {
      loom_emb_sched_t s;
      memset(&s, 0, sizeof s);
      CHECK_EQ_INT(loom__emb_sched_init(&s, W, r, tpr[r], T_total, base[r], B, 8, 4, 0), 0);
      const int64_t stage_bytes = loom__emb_gin_stage_elems(&s, D) * (int64_t)elem;
      uint8_t *staged = (uint8_t *)calloc((size_t)(stage_bytes / (D * (int64_t)elem)) + 1, 1);
      for (int q = 0; q < W; ++q)
        for (int t = 0; t < tpr[r]; ++t)
          for (int j = 0; j < s.nsl; ++j)
            for (int i = 0; i < loom__emb_slice_rows(&s, j); ++i) {
              const loom_emb_gin_put_t pt = loom__emb_gin_put(&s, q, t, j, i, D, elem, win_off);
              CHECK_EQ_INT(pt.bytes, D * elem);
              const uint64_t o = pt.dst - win_off;
              if (pt.dst < win_off || o % (D * elem) != 0 || o / (D * elem) >= out_rows) { ++bad; continue; }
              const uint64_t c = o / (D * elem); /* row * T_total + global table */
              bad += c % (uint64_t)T_total != (uint64_t)(base[r] + t);
              bad += c / (uint64_t)T_total != (uint64_t)(j * 8 + i);
              cell[(size_t)q * out_rows + c]++;
              if ((int64_t)pt.src + (int64_t)pt.bytes > stage_bytes || pt.src % (D * elem)) { ++bad; continue; }
              staged[pt.src / (D * elem)]++;
            }
      for (int64_t k = 0; k < stage_bytes / (D * (int64_t)elem); ++k) bad += staged[k] != 1;
      free(staged);
      /* the flags this rank sets on a destination name this rank as their source */
      for (int t = 0; t < tpr[r]; ++t)
        for (int j = 0; j < s.nsl; ++j)
          bad += loom__emb_flag_source(base, W, s.nsl, loom__emb_flag_index(&s, base[r], t, j)) != r;
    }
    for (size_t k = 0; k < (size_t)W * out_rows; ++k) bad += cell[k] != 1;
    CHECK_EQ_INT(bad, 0);
    if (bad) printf("    W=%d: %zu bad puts or flags\n", W, bad);
    free(cell);
    free(tpr);
    free(base);
  }
}

/* ---- plan argument checks on a test comm (no GPU) ------------------------ */

static int g_tpr[4] = {2, 1, 0, 3};
static int64_t g_rows[6] = {100, 200, 300, 50, 60, 70};

static loom_embedding_desc_t good_desc(void) {
  loom_embedding_desc_t d = LOOM_EMBEDDING_DESC_INIT;
  d.world_size = 4;
  d.tables_per_rank = g_tpr;
  d.rows = g_rows;
  d.dim = 64;
  d.global_batch = 256;
  return d;
}

/* ---- counts of a plan (32-bit signal words) -------------------------------- */

LOOM_TEST(emb_plan_counts_and_bounds_w2_to_64) {
  static const int Ws[] = {2, 3, 4, 8, 16, 64};
  for (size_t wi = 0; wi < sizeof Ws / sizeof *Ws; ++wi) {
    const int W = Ws[wi];
    /* small: exact values, no bound hit; the kernels' own counts agree */
    const int T_total = 5 * W, t_max = 7;
    loom_emb_counts_t c = loom__emb_plan_counts(W, T_total, t_max, 1000, 128);
    CHECK_EQ_INT(c.nsl, 8);
    CHECK_EQ_INT(c.flags, (int64_t)T_total * 8);
    CHECK_EQ_INT(c.counters, (int64_t)t_max * W * 8);
    CHECK_EQ_INT(c.words, c.flags + c.counters + 4 * W + 4);
    CHECK_EQ_INT(loom__emb_counts_check(&c, NULL, NULL), 0);
    loom_emb_sched_t s;
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(loom__emb_sched_init(&s, W, 0, t_max, T_total, 0, 1000 * (int64_t)W, 128, 4, 0), 0);
    CHECK_EQ_INT(loom__emb_num_flags(&s), c.flags);
    CHECK_EQ_INT(loom__emb_num_counters(&s), (int64_t)t_max * W * 8);
    /* flags past the limit: one slice per sample of a 2^31 batch */
    const char *what = NULL;
    int64_t v = 0;
    c = loom__emb_plan_counts(W, T_total, t_max, ((int64_t)1 << 31) / W, 1);
    CHECK_EQ_INT(loom__emb_counts_check(&c, &what, &v), 2);
    CHECK(what && strstr(what, "slice ready flags"));
    CHECK_EQ_INT(v, (int64_t)T_total * (((int64_t)1 << 31) / W));
    /* counters past it while the flags fit: one rank owns every table */
    const int64_t nsl = LOOM_EMB_MAX_SIGNALS / W + 1; /* x W: over; x 1 table: under */
    c = loom__emb_plan_counts(W, 1, 1, nsl, 1);
    CHECK_EQ_INT(loom__emb_counts_check(&c, &what, &v), 3);
    CHECK_EQ_INT(v, (int64_t)W * nsl);
    /* words past it while flags and counters fit */
    const int64_t half = LOOM_EMB_MAX_SIGNALS / 2 - 8;
    c = loom__emb_plan_counts(1, 1, 1, half, 1);
    c.words = loom__emb_add_sat(c.words, LOOM_EMB_MAX_SIGNALS); /* as if W were huge */
    CHECK_EQ_INT(loom__emb_counts_check(&c, &what, &v), 4);
    CHECK(what && strstr(what, "signal words"));
    /* saturation instead of wrap */
    c = loom__emb_plan_counts(W, 1 << 20, 1 << 20, (int64_t)1 << 31, 1);
    CHECK(c.counters == INT64_MAX || c.counters == (int64_t)(1 << 20) * W * ((int64_t)1 << 31));
    CHECK(c.counters > LOOM_EMB_MAX_SIGNALS && c.words > LOOM_EMB_MAX_SIGNALS);
  }
  CHECK_EQ_INT(loom__emb_mul_sat(INT64_MAX / 2, 3), INT64_MAX);
  CHECK_EQ_INT(loom__emb_add_sat(INT64_MAX - 1, 5), INT64_MAX);
}

/* The plan refuses a description whose counts pass the limit, naming the
 * count, its value and the limit, before it reserves anything. */
LOOM_TEST(emb_plan_refuses_counts_past_32_bits) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 4, 1 << 20, &c), LOOM_SUCCESS);
  if (!c) return;
  loom_plan_t p = NULL;
  loom_embedding_desc_t d = good_desc();
  d.global_batch = (int64_t)1 << 31; /* Bl = 2^29 */
  d.slice_samples = 1;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("slice ready flags T_total x slices = 3221225472 exceeds the limit 2147483647");
  CHECK(p == NULL);
  /* counters: one rank with 8 tables, the flags fit (8 x 2^27), the counters not (8 x 4 x 2^27) */
  int tpr[4] = {8, 0, 0, 0};
  int64_t rows[8] = {10, 10, 10, 10, 10, 10, 10, 10};
  d.tables_per_rank = tpr;
  d.rows = rows;
  d.global_batch = (int64_t)1 << 29;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("slice completion counters max_p T_p x W x slices = 4294967296 exceeds the limit 2147483647");
  /* words: flags and counters fit, their sum with the per-rank words not */
  int tpr1[4] = {1, 1, 1, 1};
  d.tables_per_rank = tpr1;
  d.global_batch = (int64_t)4 * ((int64_t)1 << 28);
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("signal words of the plan = 2147483668 exceeds the limit 2147483647");
  /* within the limits the plan only runs out of workspace (1 MiB here) */
  d.global_batch = (int64_t)4 * ((int64_t)1 << 20);
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_OUT_OF_MEMORY);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* ---- the sorted backward's runs ---------------------------------------------- */

/* Simulates the runs and heads kernels over sorted keys: each position adds
 * its value to its run; a run inside a chunk is written by the chunk, a run
 * crossing chunks leaves pieces in partials that the head chunk adds up.
 * Checks every row present is written exactly once with its exact sum, no
 * other row is written, and every partial is written once and read once. */
static size_t check_runs(const uint32_t *keys, int64_t n, int64_t rows) {
  const int64_t nch = loom__emb_run_chunks(n);
  int64_t *sum = (int64_t *)calloc((size_t)rows, sizeof(int64_t)), *want = (int64_t *)calloc((size_t)rows, sizeof(int64_t));
  int *writes = (int *)calloc((size_t)rows, sizeof(int));
  int64_t *part = (int64_t *)calloc((size_t)nch * 2, sizeof(int64_t));
  int *pw = (int *)calloc((size_t)nch * 2, sizeof(int)), *pr = (int *)calloc((size_t)nch * 2, sizeof(int));
  size_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if ((int64_t)keys[i] < rows) want[keys[i]] += i + 1;
  for (int64_t c = 0; c < nch; ++c) { /* runs kernel */
    const loom_emb_chunk_t ch = loom__emb_chunk_info(keys, n, c, rows);
    if (!ch.valid) continue;
    uint32_t cur = keys[ch.i0];
    int64_t acc = 0;
    int first = 1;
    int64_t i = ch.i0;
    for (; i < ch.i1 && (int64_t)keys[i] < rows; ++i) {
      if (keys[i] != cur) {
        const int dest = loom__emb_piece_dest(&ch, first, 0);
        if (dest == LOOM_EMB_PIECE_WRITE) sum[cur] += acc, writes[cur]++;
        else if (dest == LOOM_EMB_PIECE_FIRST) part[c * 2] = acc, pw[c * 2]++;
        else ++bad; /* a run ending inside the chunk is never its last */
        first = 0;
        cur = keys[i];
        acc = 0;
      }
      acc += i + 1;
    }
    const int dest = loom__emb_piece_dest(&ch, first, 1);
    if (dest == LOOM_EMB_PIECE_WRITE) sum[cur] += acc, writes[cur]++;
    else part[c * 2 + (dest == LOOM_EMB_PIECE_LAST)] = acc, pw[c * 2 + (dest == LOOM_EMB_PIECE_LAST)]++;
  }
  for (int64_t c = 0; c < nch; ++c) { /* heads kernel */
    const loom_emb_chunk_t ch = loom__emb_chunk_info(keys, n, c, rows);
    if (!loom__emb_chunk_has_head(&ch)) continue;
    const uint32_t key = keys[ch.i1 - 1];
    const int64_t last = loom__emb_run_last_chunk(keys, n, c, key);
    if (last <= c || last >= nch) { ++bad; continue; }
    int64_t acc = part[c * 2 + 1];
    pr[c * 2 + 1]++;
    for (int64_t c2 = c + 1; c2 <= last; ++c2) acc += part[c2 * 2], pr[c2 * 2]++;
    sum[key] += acc;
    writes[key]++;
  }
  for (int64_t k = 0; k < rows; ++k) {
    if (want[k] == 0) bad += writes[k] != 0;
    else bad += writes[k] != 1 || sum[k] != want[k];
  }
  for (int64_t k = 0; k < nch * 2; ++k) bad += pw[k] > 1 || pw[k] != pr[k];
  free(sum); free(want); free(writes); free(part); free(pw); free(pr);
  return bad;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t m) {
  g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng % m);
}

/* Sorted keys of n positions over `rows` rows with run lengths drawn by
 * `kind`, the last `tail` positions unused (LOOM_EMB_NO_ROW). */
static void make_keys(uint32_t *keys, int64_t n, int64_t rows, int kind, int64_t tail) {
  int64_t i = 0;
  uint32_t k = 0;
  while (i < n - tail) {
    int64_t len;
    switch (kind) {
      case 0: len = 1; break;                                                /* every row once */
      case 1: len = 1 + rnd(9); break;                                       /* short runs */
      case 2: len = rnd(20) == 0 ? 1 + rnd(3 * LOOM_EMB_RUN_CHUNK) : 1 + rnd(4); break; /* Zipf-like */
      case 3: len = LOOM_EMB_RUN_CHUNK * (1 + rnd(3)); break;                /* runs on chunk edges */
      case 4: len = LOOM_EMB_RUN_CHUNK - 1 + rnd(3); break;                  /* runs just off the edges */
      default: len = n; break;                                               /* one row for everything */
    }
    for (int64_t e = 0; e < len && i < n - tail; ++e) keys[i++] = k;
    k += 1 + (kind == 1 ? rnd(3) : 0);
    if ((int64_t)k >= rows) k = (uint32_t)(rows - 1); /* keep it a row; runs merge */
  }
  for (; i < n; ++i) keys[i] = LOOM_EMB_NO_ROW;
}

LOOM_TEST(emb_sorted_runs_each_row_written_once) {
  static const int64_t ns[] = {1, 2, 255, 256, 257, 511, 512, 513, 3000, 20000};
  int configs = 0;
  size_t bad = 0;
  for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ++ni)
    for (int kind = 0; kind <= 5; ++kind)
      for (int ti = 0; ti < 4; ++ti) {
        const int64_t n = ns[ni];
        const int64_t tails[4] = {0, 1, n / 3, n};
        const int64_t rows = kind == 0 ? n + 3 : 1 + n / 2;
        uint32_t *keys = (uint32_t *)malloc((size_t)n * sizeof(uint32_t));
        make_keys(keys, n, rows, kind, tails[ti]);
        for (int64_t i = 1; i < n; ++i) bad += keys[i] < keys[i - 1]; /* the generator sorts */
        const size_t b = check_runs(keys, n, rows);
        if (b) printf("    n=%lld kind=%d tail=%lld: %zu bad\n", (long long)n, kind, (long long)tails[ti], b);
        bad += b;
        free(keys);
        ++configs;
      }
  CHECK_EQ_INT(bad, 0);
  /* the sort's key bits keep LOOM_EMB_NO_ROW above every row */
  static const int64_t rs[] = {1, 2, 3, 4, 255, 256, 100000, (int64_t)1 << 31, LOOM_EMB_MAX_SORTED_ROWS};
  for (size_t i = 0; i < sizeof rs / sizeof *rs; ++i) {
    const int b = loom__emb_key_bits(rs[i]);
    CHECK(b >= 1 && b <= 32);
    const uint64_t mask = b == 32 ? 0xffffffffull : ((1ull << b) - 1);
    CHECK((uint64_t)(rs[i] - 1) < mask);          /* the largest row sorts before NO_ROW's low bits */
    CHECK((LOOM_EMB_NO_ROW & mask) == mask);
    CHECK(b == 1 || ((int64_t)1 << (b - 1)) <= rs[i]); /* no more bits than needed */
  }
  printf("    %d key arrays checked\n", configs);
}

LOOM_TEST(emb_path_choice) {
  /* auto */
  CHECK_EQ_INT(loom__emb_choose_path(0, 1, 0), 1);
  CHECK_EQ_INT(loom__emb_choose_path(0, 1, 1), 1);
  CHECK_EQ_INT(loom__emb_choose_path(0, 0, 1), 2);
  CHECK_EQ_INT(loom__emb_choose_path(0, 0, 0), 3);
  /* forced */
  CHECK_EQ_INT(loom__emb_choose_path(1, 0, 1), -1);
  CHECK_EQ_INT(loom__emb_choose_path(2, 0, 0), -1);
  CHECK_EQ_INT(loom__emb_choose_path(2, 1, 0), 1);
  CHECK_EQ_INT(loom__emb_choose_path(3, 1, 1), 3);
  CHECK_EQ_INT(loom__emb_choose_path(7, 1, 1), -1);
}

LOOM_TEST(emb_plan_checks_every_argument) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(1, 4, 1 << 20, &c), LOOM_SUCCESS);
  if (!c) return;
  loom_plan_t p = NULL;
  loom_embedding_desc_t d = good_desc();
  CHECK_RESULT(loom_plan_embedding_a2a(c, NULL, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc=NULL");
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("out=NULL");
#define BAD(field, value, text)                                              \
  do {                                                                       \
    d = good_desc();                                                         \
    d.field = value;                                                         \
    CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT); \
    CHECK_MSG(text);                                                         \
    CHECK(p == NULL);                                                        \
  } while (0)
  BAD(struct_size, 3, "desc->struct_size=3");
  BAD(world_size, 2, "desc->world_size=2 but the comm has 4 ranks");
  BAD(tables_per_rank, NULL, "desc->tables_per_rank=NULL");
  BAD(rows, NULL, "desc->rows=NULL");
  BAD(dim, 12, "desc->dim=12");
  BAD(dim, 2048, "desc->dim=2048");
  BAD(global_batch, 254, "desc->global_batch=254");
  BAD(global_batch, 0, "desc->global_batch=0");
  BAD(pooling, (loom_pooling_t)5, "desc->pooling=5");
  BAD(table_type, (loom_dtype_t)9, "desc->table_type=9");
  BAD(out_type, (loom_dtype_t)-1, "desc->out_type=-1");
  BAD(slice_samples, -4, "desc->slice_samples=-4");
  BAD(grid_blocks, -1, "desc->grid_blocks=-1");
  BAD(per_sample_weights, 3, "desc->per_sample_weights=3");
  d = good_desc();
  d.per_sample_weights = 1;
  d.pooling = LOOM_POOL_MEAN;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("weights need LOOM_POOL_SUM");
  int neg[4] = {1, -2, 0, 0};
  d = good_desc();
  d.tables_per_rank = neg;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->tables_per_rank[1]=-2");
  int none[4] = {0, 0, 0, 0};
  d.tables_per_rank = none;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("own 0 tables");
  int64_t rows0[6] = {100, 200, 0, 50, 60, 70};
  d = good_desc();
  d.rows = rows0;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc->rows[2]=0");
  /* a good plan: info and the calls' own checks */
  d = good_desc();
  d.slice_samples = 16;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_SUCCESS);
  if (p) {
    loom_embedding_plan_info_t info = LOOM_EMBEDDING_PLAN_INFO_INIT;
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_SUCCESS);
    CHECK_EQ_INT(info.path, LOOM_EMB_PATH_ZERO_COPY);
    CHECK_EQ_INT(info.slice_samples, 16);
    CHECK_EQ_INT(info.slices_per_rank, 4);      /* Bl = 64 */
    CHECK_EQ_INT(info.num_flags, 6 * 4);        /* T_total x slices */
    CHECK_EQ_INT(info.num_counters, 1 * 4 * 4); /* rank 1: T=1 x W x slices */
    CHECK_EQ_INT(info.staging_bytes, 0);
    info.struct_size = 3;
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("info->struct_size=3");
    info.struct_size = sizeof info;
    CHECK(info.workspace_bytes >= (size_t)(24 + 16 + 4 * 4 + 4) * 4 && info.workspace_bytes <= 4096);
    CHECK_EQ_INT(info.tasks, 4 * 4 * 1 * ((16 + LOOM_EMB_DEFAULT_PART - 1) / LOOM_EMB_DEFAULT_PART)); /* W x slices x T x parts */
    int64_t off[65];
    float w[4];
    CHECK_RESULT(loom_embedding_a2a(p, NULL, (const int64_t *)off, off, 4, NULL, off, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("tables=NULL");
    CHECK_RESULT(loom_embedding_a2a(p, off, (const int64_t *)off, off, 4, w, off, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("per_sample_weights=0");
    CHECK_RESULT(loom_embedding_a2a(p, off, NULL, off, 4, NULL, off, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("indices=NULL");
    CHECK_RESULT(loom_embedding_a2a(p, off, off, off, -1, NULL, off, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("num_indices=-1");
    CHECK_RESULT(loom_embedding_a2a(p, off, off, off, 4, NULL, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("out=NULL");
    CHECK_RESULT(loom_embedding_a2a(p, (char *)off + 4, off, off, 4, NULL, off, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("16-byte aligned");
    CHECK_RESULT(loom_embedding_a2a(p, off, (const int64_t *)((char *)off + 4), off, 4, NULL, off, 0),
                 LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("indices=");
    CHECK_MSG("must be 8-byte aligned");
    CHECK_RESULT(loom_embedding_a2a(p, off, off, (const int64_t *)((char *)off + 4), 4, NULL, off, 0),
                 LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("offsets=");
    CHECK_RESULT(loom_embedding_pool(p, off, off, off, 4, NULL, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("pooled=NULL");
    CHECK_RESULT(loom_embedding_a2a_backward(p, off, off, off, 4, NULL, 1.f, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("table_grad=NULL");
    CHECK_RESULT(loom_embedding_a2a_backward(p, NULL, off, off, 4, NULL, 1.f, off, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("grad_out=NULL");
    /* past the checks, a test comm has no GPU */
    CHECK_RESULT(loom_embedding_a2a(p, off, off, off, 4, NULL, off, 0), LOOM_ERR_UNSUPPORTED);
    CHECK_MSG("without a GPU");
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_ERR_INVALID_ARGUMENT);
  }
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* The internal entry's options (task order, forced path): each checked by
 * name and value, the defaults those of loom_plan_embedding_a2a. */
LOOM_TEST(emb_plan_opts_are_checked) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(1, 4, 1 << 20, &c), LOOM_SUCCESS);
  if (!c) return;
  loom_plan_t p = NULL;
  const loom_embedding_desc_t d = good_desc();
  loom__emb_plan_opts_t o = LOOM__EMB_PLAN_OPTS_INIT;
  o.local_first = 2;
  CHECK_RESULT(loom__plan_embedding_a2a_opts(c, &d, &o, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("opts->local_first=2");
  CHECK(p == NULL);
  o.local_first = 0;
  o.path = (loom_embedding_path_t)8;
  CHECK_RESULT(loom__plan_embedding_a2a_opts(c, &d, &o, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("opts->path=8");
  CHECK(p == NULL);
  o.path = LOOM_EMB_PATH_STAGED;
  o.local_first = 1;
  CHECK_RESULT(loom__plan_embedding_a2a_opts(c, &d, &o, &p), LOOM_SUCCESS);
  if (p) {
    loom_embedding_plan_info_t info = LOOM_EMBEDDING_PLAN_INFO_INIT;
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_SUCCESS);
    CHECK_EQ_INT(info.path, LOOM_EMB_PATH_STAGED);
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  }
  CHECK_RESULT(loom__plan_embedding_a2a_opts(c, &d, NULL, &p), LOOM_SUCCESS);
  if (p) {
    loom_embedding_plan_info_t info = LOOM_EMBEDDING_PLAN_INFO_INIT;
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_SUCCESS);
    CHECK_EQ_INT(info.path, LOOM_EMB_PATH_ZERO_COPY);
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  }
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* The test hooks that re-cut a plan's work or choose its backward, on a
 * test comm: flags and counters do not depend on the part; tasks do. */
LOOM_TEST(emb_part_and_backward_hooks) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(1, 4, 1 << 20, &c), LOOM_SUCCESS);
  if (!c) return;
  loom_plan_t p = NULL;
  loom_embedding_desc_t d = good_desc();
  d.slice_samples = 16;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_SUCCESS);
  if (p) {
    loom_embedding_plan_info_t a = LOOM_EMBEDDING_PLAN_INFO_INIT, b = LOOM_EMBEDDING_PLAN_INFO_INIT;
    int part = 0;
    CHECK_RESULT(loom__emb_get_part(p, &part), LOOM_SUCCESS);
    CHECK_EQ_INT(part, LOOM_EMB_DEFAULT_PART);
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &a), LOOM_SUCCESS);
    CHECK_RESULT(loom__emb_set_part(p, 2), LOOM_SUCCESS);
    CHECK_RESULT(loom__emb_get_part(p, &part), LOOM_SUCCESS);
    CHECK_EQ_INT(part, 2);
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &b), LOOM_SUCCESS);
    CHECK_EQ_INT(b.num_flags, a.num_flags);
    CHECK_EQ_INT(b.num_counters, a.num_counters);
    CHECK_EQ_INT(b.workspace_bytes, a.workspace_bytes);
    CHECK_EQ_INT(b.tasks, 4 * 4 * 1 * 8); /* W x slices x T x parts (16/2) */
    CHECK_RESULT(loom__emb_set_part(p, 33), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("part=33");
    CHECK_RESULT(loom__emb_set_part(p, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_RESULT(loom__emb_get_part(p, &part), LOOM_SUCCESS);
    CHECK_EQ_INT(part, 2); /* unchanged by the refused calls */
    CHECK_RESULT(loom__emb_set_part(p, 32), LOOM_SUCCESS); /* clamped to the slice by the schedule */
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &b), LOOM_SUCCESS);
    CHECK_EQ_INT(b.tasks, 4 * 4 * 1 * 1);
    /* backward accumulation: fp32 tables may take either; the bad value is named */
    CHECK_RESULT(loom__emb_set_backward(p, LOOM_EMB_BWD_SORTED), LOOM_SUCCESS);
    CHECK_RESULT(loom__emb_set_backward(p, LOOM_EMB_BWD_ATOMIC), LOOM_SUCCESS);
    CHECK_RESULT(loom__emb_set_backward(p, 7), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("bwd=7");
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  }
  /* fp16/bf16 tables: the sorted backward only */
  d = good_desc();
  d.table_type = LOOM_BF16;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_SUCCESS);
  if (p) {
    const loom_emb_state_t *st = (const loom_emb_state_t *)p->op_state;
    CHECK_EQ_INT(st->bwd, LOOM_EMB_BWD_SORTED);
    CHECK_RESULT(loom__emb_set_backward(p, LOOM_EMB_BWD_ATOMIC), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("with bf16 tables");
    /* 32-bit positions: a call with more indices is refused by name */
    int64_t w[8];
    CHECK_RESULT(loom_embedding_a2a_backward(p, w, w, w, LOOM_EMB_MAX_SORTED_INDICES + 1, NULL, 1.f, w, 0),
                 LOOM_ERR_UNSUPPORTED);
    CHECK_MSG("num_indices=4294967296");
    CHECK_MSG("at most 4294967295");
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  }
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* The plan's signal layout must be the same on every rank (peers address
 * each other's flags and ready words by offset), also with uneven tables. */
LOOM_TEST(emb_plan_layout_is_symmetric_with_uneven_tables) {
  size_t ref[8] = {0};
  for (int r = 0; r < 4; ++r) {
    loom_comm_t c = NULL;
    CHECK_RESULT(loom__comm_create_detached(r, 4, 1 << 20, &c), LOOM_SUCCESS);
    if (!c) return;
    loom_plan_t p = NULL;
    loom_embedding_desc_t d = good_desc();
    d.slice_samples = 8;
    CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_SUCCESS);
    if (p) {
      const loom_emb_state_t *st = (const loom_emb_state_t *)p->op_state;
      size_t v[8] = {p->slice_offset, p->ws_bytes, st->flags_off, st->ready_off, st->gready_off, st->gdone_off,
                     st->fetch_off, st->counters_off};
      for (int i = 0; i < 8; ++i) {
        if (r == 0) ref[i] = v[i];
        else CHECK_EQ_INT(v[i], ref[i]);
      }
      /* counters fit for the rank with the most tables (3) */
      CHECK(st->counters_off + (size_t)st->num_counters * 4 <= p->slice_offset + p->ws_bytes);
      CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
    }
    CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  }
}
