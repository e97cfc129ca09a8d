/*
 * test_coll_call_checks.c - what a collective call accepts never depends on
 * the algorithm its plan resolved to: the misuse table of loom_allreduce,
 * loom_reduce_scatter and loom_all_gather (loom__coll_check_call) under
 * every algorithm value, AUTO included, at several world sizes, on a
 * detached comm with fake device memory (tests/host/fake_mem.h). In place
 * on rows of any width included.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/fake_mem.h"
#include "core/pointwise.h"
#include "ops/coll/coll.h"

#define OK LOOM_SUCCESS
#define BAD LOOM_ERR_INVALID_ARGUMENT
/* ---- collectives ---------------------------------------------------------- */

typedef struct coll_row {
  int op;        /* LOOM__COLL_* */
  const char *what;
  int64_t count, cols;
  loom_dtype_t in_t, out_t;
  int in, out;   /* X_*; X_SYM_PLUS: the other plus this rank's slice begin (in place) */
  int epi;       /* 0 none, 1 bias + residual, 2 norm weight without a norm */
  loom_result_t want;
  int out_only;  /* the misuse is in `out`, which a ReduceScatter rank with an empty slice never touches */
} coll_row_t;

#define BF LOOM_BF16
#define F32 LOOM_FP32
static const coll_row_t g_coll_rows[] = {
    {LOOM__COLL_AR, "valid", 10010, 1001, BF, BF, X_SYM, X_DEV, 0, OK, 0},
    {LOOM__COLL_AR, "valid, in place", 10010, 1001, BF, BF, X_SYM, X_SYM, 0, OK, 0},
    {LOOM__COLL_AR, "valid, epilogue", 10010, 1001, BF, BF, X_SYM, X_DEV, 1, OK, 0},
    {LOOM__COLL_AR, "in plain device memory", 10010, 1001, BF, BF, X_DEV, X_DEV2, 0, BAD, 0},
    {LOOM__COLL_AR, "in past its loom_malloc buffer", 10010, 1001, BF, BF, X_SYM_TAIL, X_DEV, 0, BAD, 0},
    {LOOM__COLL_AR, "in misaligned", 10010, 0, BF, BF, X_SYM_MISALIGNED, X_DEV, 0, BAD, 0},
    {LOOM__COLL_AR, "out NULL", 10010, 0, BF, BF, X_SYM, X_NULL, 0, BAD, 0},
    {LOOM__COLL_AR, "out past its allocation", 10010, 0, BF, BF, X_SYM, X_DEV_TAIL, 0, BAD, 0},
    {LOOM__COLL_AR, "out host memory", 10010, 0, BF, BF, X_SYM, X_HOST, 0, BAD, 0},
    {LOOM__COLL_AR, "in place with another out type", 10010, 0, BF, F32, X_SYM, X_SYM, 0, BAD, 0},
    {LOOM__COLL_AR, "norm weight without a norm", 10010, 1001, BF, BF, X_SYM, X_DEV, 2, BAD, 0},
    {LOOM__COLL_RS, "valid", 10010, 1001, BF, BF, X_SYM, X_DEV, 0, OK, 0},
    {LOOM__COLL_RS, "valid, in place on rows of 1001 (slice begin not 16-byte aligned)", 10010, 1001, BF, BF, X_SYM, X_SYM_PLUS,
     0, OK, 0},
    {LOOM__COLL_RS, "valid, in place, fp32 rows of 1001", 10010, 1001, F32, F32, X_SYM, X_SYM_PLUS, 1, OK, 0},
    {LOOM__COLL_RS, "valid, in place, flat odd count", 10003, 0, BF, BF, X_SYM, X_SYM_PLUS, 0, OK, 0},
    {LOOM__COLL_RS, "out overlapping in elsewhere", 10010, 1001, BF, BF, X_SYM2, X_SYM_16, 0, BAD, 1},
    {LOOM__COLL_RS, "out misaligned", 10010, 1001, BF, BF, X_SYM, X_MISALIGNED, 0, BAD, 1},
    {LOOM__COLL_AG, "valid", 10010, 1001, BF, BF, X_SYM, X_DEV, 0, OK, 0},
    {LOOM__COLL_AG, "valid, in place", 10010, 1001, BF, BF, X_SYM_PLUS, X_SYM, 0, OK, 0},
    {LOOM__COLL_AG, "in plain device memory", 10010, 1001, BF, BF, X_DEV2, X_DEV, 0, BAD, 0},
};

static const loom_coll_algo_t g_algos[] = {LOOM_COLL_AUTO, LOOM_COLL_ONE_SHOT, LOOM_COLL_TWO_SHOT, LOOM_COLL_LL,
                                           LOOM_COLL_PUSH};

static loom_result_t coll_check(loom_comm_t c, bufs_t *x, const coll_row_t *r, loom_coll_algo_t algo) {
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = r->count, d.cols = r->cols, d.dtype = r->in_t, d.out_type = r->out_t, d.world_size = c->size;
  d.algo = r->op == LOOM__COLL_AR ? algo : LOOM_COLL_AUTO;
  int64_t b, l;
  loom__coll_slice(d.count, c->size, c->rank, loom__coll_unit(d.cols), &b, &l);
  /* in place: RS out = in + begin; AG in = out + begin */
  const int plus_is_out = r->out == X_SYM_PLUS;
  const char *base = x->at[plus_is_out ? r->in : r->out];
  x->at[X_SYM_PLUS] = (char *)base + (size_t)b * loom_dtype_size(plus_is_out ? r->in_t : r->out_t);
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  e.bias = x->at[X_DEV2];
  e.residual = x->at[X_DEV2];
  int in_place = 0;
  loom_pointwise_t pw;
  return loom__coll_check_call("test", r->op, c, &d, x->at[r->in], x->at[r->out], r->epi == 1 ? &e : NULL,
                               r->epi == 2 ? x->at[X_DEV2] : NULL, NULL, &in_place, &pw);
}

static void coll_rows_at(int rank, int size) {
  loom_comm_t c = fake_comm_create(rank, size);
  bufs_t x = fake_bufs(c, 10010 * 4 + 64);
  for (size_t i = 0; i < sizeof g_coll_rows / sizeof *g_coll_rows; ++i) {
    const coll_row_t *r = &g_coll_rows[i];
    for (size_t a = 0; a < sizeof g_algos / sizeof *g_algos; ++a) {
      if (r->op != LOOM__COLL_AR && a > 0) break;
      int64_t b, l;
      loom__coll_slice(r->count, size, rank, loom__coll_unit(r->cols), &b, &l);
      const loom_result_t want = r->out_only && r->op == LOOM__COLL_RS && l == 0 ? OK : r->want;
      const loom_result_t got = coll_check(c, &x, r, g_algos[a]);
      if (got != want)
        loom_test_fail(__FILE__, __LINE__, "rank %d of %d, op %d, %s, algo %d: result %d, expected %d (%s)", rank,
                       size, r->op, r->what, (int)g_algos[a], (int)got, (int)want, loom_last_error());
    }
  }
  fake_comm_destroy(c);
}

LOOM_TEST(coll_call_checks_are_the_same_under_every_algorithm) {
  coll_rows_at(0, 1);
  coll_rows_at(1, 2);
  coll_rows_at(2, 3);
  coll_rows_at(7, 8);
}

