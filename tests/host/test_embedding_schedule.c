/*
 * test_embedding_schedule.c - host tests of the fused embedding-bag +
 * All-to-All's scheduling (src/ops/embedding_schedule.h) for world sizes this
 * machine cannot run (2..64), and of the plan's argument checks on a test
 * comm without a GPU.
 *
 * For every (W, tables per rank, B, S, grid) the tests simulate one call on
 * every rank: each rank's tasks in its own order, the completion counters,
 * the flags they set on the receivers, and the exit waits, and check that
 * every output row of every destination is written exactly once, every flag
 * is set exactly once, remote tasks come first, and the waited-on flag
 * subsets partition the incoming flags.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/test.h"
#include "core/comm.h"
#include "core/plan.h"
#include "ops/embedding_a2a.h"
#include "ops/embedding_schedule.h"

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
  CHECK_EQ_INT(loom_emb_sched_init(&s0, W, 0, tpr[0], T_total, 0, B, S, P, local_first), 0);
  const uint32_t nf = loom_emb_num_flags(&s0);
  uint8_t *flag_sets = (uint8_t *)calloc((size_t)W * nf, 1);
  for (int r = 0; r < W; ++r) {
    loom_emb_sched_t s;
    memset(&s, 0, sizeof s);
    if (loom_emb_sched_init(&s, W, r, tpr[r], T_total, base[r], B, S, P, local_first) != 0) {
      CHECK(!"sched_init failed");
      continue;
    }
    CHECK_EQ_INT(loom_emb_num_flags(&s), nf);
    const int64_t nt = loom_emb_num_tasks(&s);
    const uint32_t nc = loom_emb_num_counters(&s);
    uint32_t *ctr = (uint32_t *)calloc(nc ? nc : 1, sizeof(uint32_t));
    int seen_local = 0;
    /* simulated dynamic fetch: blocks take turns; each gets k in order */
    for (int64_t k = 0; k < nt; ++k) {
      loom_emb_task_t tk = loom_emb_task_decode(&s, k);
      if (k == 0) CHECK_EQ_INT(tk.dest, local_first ? r : (r + 1) % W);
      CHECK(tk.dest >= 0 && tk.dest < W && tk.table >= 0 && tk.table < s.t_local);
      CHECK(tk.slice >= 0 && tk.slice < s.nsl && tk.part >= 0 && tk.part < s.parts);
      CHECK_EQ_INT(loom_emb_dest_pos(&s, tk.dest), loom_emb_dest_pos(&s, loom_emb_dest_at(&s, loom_emb_dest_pos(&s, tk.dest))));
      if (tk.dest == r) seen_local = 1;
      else if (!local_first && seen_local) { CHECK(!"remote task after a local one"); break; }
      if (local_first && tk.dest == r) CHECK(k < loom_emb_tasks_per_dest(&s));
      for (int i = 0; i < tk.count; ++i) {
        int64_t b = tk.sample0 + i;
        int64_t row = b - (int64_t)tk.dest * Bl;
        if (!(row >= 0 && row < Bl)) { CHECK(!"sample outside the destination's batch"); break; }
        if (!(row >= (int64_t)tk.slice * S && row < (int64_t)(tk.slice + 1) * S)) { CHECK(!"sample outside its slice"); break; }
        int64_t off = loom_emb_out_offset(&s, s.table_base, tk.table, b, 8);
        CHECK_EQ_INT(off, (row * T_total + s.table_base + tk.table) * 8);
        written[((size_t)tk.dest * (size_t)Bl + (size_t)row) * (size_t)T_total + (size_t)(s.table_base + tk.table)]++;
      }
      uint32_t ci = loom_emb_counter_index(&s, tk.table, tk.dest, tk.slice);
      if (ci >= nc) { CHECK(!"counter index out of range"); break; }
      if (++ctr[ci] == loom_emb_counter_target(&s)) {
        ctr[ci] = 0; /* the last task resets it */
        uint32_t fi = loom_emb_flag_index(&s, s.table_base, tk.table, tk.slice);
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
        CHECK_EQ_INT(loom_emb_flag_waiter(i, grid), blk);
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
  CHECK_EQ_INT(loom_emb_sched_init(&s, 2, 0, 1, 2, 0, 3, 8, 8, 0), -1);  /* B not a multiple of W */
  CHECK_EQ_INT(loom_emb_sched_init(&s, 2, 2, 1, 2, 0, 4, 8, 8, 0), -1);  /* rank outside */
  CHECK_EQ_INT(loom_emb_sched_init(&s, 2, 0, 1, 2, 0, 4, 0, 8, 0), -1);  /* S = 0 */
  CHECK_EQ_INT(loom_emb_sched_init(&s, 2, 1, 2, 2, 1, 4, 8, 8, 0), -1);  /* tables past T_total */
  CHECK_EQ_INT(loom_emb_sched_init(&s, 2, 0, 1, 2, 0, 4096, 32, 8, 0), 0);
  CHECK_EQ_INT(s.nsl, 64);
  CHECK_EQ_INT(s.parts, 4);
  CHECK_EQ_INT(loom_emb_num_tasks(&s), 2 * 64 * 1 * 4);
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
    CHECK_EQ_INT(loom_emb_sched_init(&s, W, W - 1, T, T * W, T * (W - 1), B, 16, 8, 0), 0);
    int64_t n = loom_emb_gin_stage_elems(&s, D);
    uint8_t *used = (uint8_t *)calloc((size_t)(n / D), 1);
    for (int q = 0; q < W; ++q)
      for (int t = 0; t < T; ++t) {
        int64_t rows = 0;
        for (int j = 0; j < s.nsl; ++j) {
          int nr = loom_emb_slice_rows(&s, j);
          CHECK(nr >= 1 && nr <= 16);
          rows += nr;
          for (int i = 0; i < nr; ++i) {
            int64_t b = (int64_t)q * s.local_batch + (int64_t)j * 16 + i;
            int64_t off = loom_emb_gin_stage_offset(&s, q, t, b, D);
            CHECK(off >= 0 && off + D <= n && off % D == 0);
            used[off / D]++;
          }
          CHECK(loom_emb_flag_index(&s, s.table_base, t, j) < loom_emb_num_flags(&s));
        }
        CHECK_EQ_INT(rows, s.local_batch);
      }
    size_t bad = 0;
    for (int64_t i = 0; i < n / D; ++i) bad += used[i] != 1;
    CHECK_EQ_INT(bad, 0);
    free(used);
  }
  CHECK_EQ_INT(loom_emb_gin_signal_target(0), 1);
  CHECK_EQ_INT(loom_emb_gin_signal_target(41), 42);
}

LOOM_TEST(emb_path_choice) {
  /* auto */
  CHECK_EQ_INT(loom_emb_choose_path(0, 1, 0), 1);
  CHECK_EQ_INT(loom_emb_choose_path(0, 1, 1), 1);
  CHECK_EQ_INT(loom_emb_choose_path(0, 0, 1), 2);
  CHECK_EQ_INT(loom_emb_choose_path(0, 0, 0), 3);
  /* forced */
  CHECK_EQ_INT(loom_emb_choose_path(1, 0, 1), -1);
  CHECK_EQ_INT(loom_emb_choose_path(2, 0, 0), -1);
  CHECK_EQ_INT(loom_emb_choose_path(2, 1, 0), 1);
  CHECK_EQ_INT(loom_emb_choose_path(3, 1, 1), 3);
  CHECK_EQ_INT(loom_emb_choose_path(7, 1, 1), -1);
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
  BAD(local_first, 2, "desc->local_first=2");
  BAD(path, (loom_embedding_path_t)8, "desc->path=8");
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
    loom_embedding_plan_info_t info;
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_SUCCESS);
    CHECK_EQ_INT(info.path, LOOM_EMB_PATH_ZERO_COPY);
    CHECK_EQ_INT(info.slice_samples, 16);
    CHECK_EQ_INT(info.slices_per_rank, 4);      /* Bl = 64 */
    CHECK_EQ_INT(info.num_flags, 6 * 4);        /* T_total x slices */
    CHECK_EQ_INT(info.num_counters, 1 * 4 * 4); /* rank 1: T=1 x W x slices */
    CHECK_EQ_INT(info.staging_bytes, 0);
    CHECK(info.workspace_bytes >= (size_t)(24 + 16 + 4 * 4 + 4) * 4 && info.workspace_bytes <= 4096);
    const loom_emb_tuning_t tdef = LOOM_EMB_TUNING_DEFAULT;
    CHECK_EQ_INT(info.tasks, 4 * 4 * 1 * ((16 + tdef.part - 1) / tdef.part)); /* W x slices x T x parts */
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
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_ERR_INVALID_ARGUMENT);
  }
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* Work cuts (worker group, part, unroll, variant bits, row loop): the
 * checks, and a plan re-cut on a test comm keeps its flags and counters
 * (they do not depend on the part) while its tasks follow the part. */
LOOM_TEST(emb_tuning_checks_and_recut) {
  loom_emb_tuning_t t = LOOM_EMB_TUNING_DEFAULT;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_SUCCESS);
  CHECK(t.part <= 32 * t.group && (t.unroll == 8 || t.unroll == 16));
  t.group = 3;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("tuning.group=3");
  t.group = 1;
  t.part = 33;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("tuning.part=33");
  t.part = 0;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  t.part = 4;
  t.unroll = 12;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("tuning.unroll=12");
  t.unroll = 16;
  t.variant = 64;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  t.variant = LOOM_EMB_V_NOWAIT;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_SUCCESS);
  CHECK_RESULT(loom__emb_check_tuning("f", NULL, 128), LOOM_ERR_INVALID_ARGUMENT);
  /* row loops: 0..3; unroll 16 only for SELECT and FLAT; no register cap
   * only for SELECT at unroll 8 */
  CHECK_EQ_INT(t.loop, LOOM_EMB_LOOP_FLAT); /* the measured fastest (bench/NOTES.md) */
  t.loop = 4;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("tuning.loop=4");
  t.loop = -1;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  t.loop = LOOM_EMB_LOOP_FLAT;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_SUCCESS); /* unroll 16 */
  t.loop = LOOM_EMB_LOOP_PIPE;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("only loops SELECT and FLAT");
  t.loop = LOOM_EMB_LOOP_F07;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  t.unroll = 8;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_SUCCESS);
  t.loop = LOOM_EMB_LOOP_PIPE;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_SUCCESS);
  t.variant = LOOM_EMB_V_NOCAP;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("LOOM_EMB_V_NOCAP with loop=2");
  t.loop = LOOM_EMB_LOOP_SELECT;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_SUCCESS);
  t.unroll = 16;
  CHECK_RESULT(loom__emb_check_tuning("f", &t, 128), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("unroll=16");

  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(1, 4, 1 << 20, &c), LOOM_SUCCESS);
  if (!c) return;
  loom_plan_t p = NULL;
  loom_embedding_desc_t d = good_desc();
  d.slice_samples = 16;
  CHECK_RESULT(loom_plan_embedding_a2a(c, &d, &p), LOOM_SUCCESS);
  if (p) {
    loom_embedding_plan_info_t a, b;
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &a), LOOM_SUCCESS);
    loom_emb_tuning_t u = {1, 2, 8, 0, LOOM_EMB_LOOP_SELECT}, back;
    CHECK_RESULT(loom__emb_set_tuning(p, &u), LOOM_SUCCESS);
    CHECK_RESULT(loom__emb_get_tuning(p, &back), LOOM_SUCCESS);
    CHECK_EQ_INT(back.group, 1);
    CHECK_EQ_INT(back.part, 2);
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &b), LOOM_SUCCESS);
    CHECK_EQ_INT(b.num_flags, a.num_flags);
    CHECK_EQ_INT(b.num_counters, a.num_counters);
    CHECK_EQ_INT(b.workspace_bytes, a.workspace_bytes);
    CHECK_EQ_INT(b.tasks, 4 * 4 * 1 * 8);  /* W x slices x T x parts (16/2) */
    u.part = 64;                           /* past 32 bags per warp */
    CHECK_RESULT(loom__emb_set_tuning(p, &u), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_RESULT(loom__emb_get_tuning(p, &back), LOOM_SUCCESS);
    CHECK_EQ_INT(back.part, 2);            /* unchanged by the refused call */
    u.part = 2;
    u.loop = LOOM_EMB_LOOP_PIPE;
    u.unroll = 16;                         /* PIPE has no unroll 16 */
    CHECK_RESULT(loom__emb_set_tuning(p, &u), LOOM_ERR_INVALID_ARGUMENT);
    u.unroll = 8;
    CHECK_RESULT(loom__emb_set_tuning(p, &u), LOOM_SUCCESS);
    CHECK_RESULT(loom__emb_get_tuning(p, &back), LOOM_SUCCESS);
    CHECK_EQ_INT(back.loop, LOOM_EMB_LOOP_PIPE);
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
