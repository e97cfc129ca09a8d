/*
 * test_tp_call_checks.c - what a tensor-parallel call accepts never depends
 * on the transfer its plan resolved to: the misuse table of loom_ag_gemm,
 * loom_gemm_rs and loom_gemm_ar (loom__tp_check_call) under every transfer
 * value, AUTO included, at several world sizes, on a detached comm with
 * fake device memory (tests/host/fake_mem.h). Each row states its result
 * for plans made SEQUENTIAL and for every other transfer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/fake_mem.h"
#include "core/pointwise.h"
#include "ops/tp/tp_linear.h"

/* ---- tensor-parallel calls ------------------------------------------------ */

enum { AG = 0, RS = 1, AR = 2 };
#define M 130
#define N 128
#define K 128

typedef struct tp_row {
  int op;
  const char *what;
  int a, b, c, a_full, bias, has_bias, epi; /* X_*; epi: 0 none, 1 valid, 2 bad struct_size, 3 host residual */
  loom_result_t want_seq, want_other;        /* plans made SEQUENTIAL / with any other transfer, AUTO included */
} tp_row_t;

#define OK LOOM_SUCCESS
#define BAD LOOM_ERR_INVALID_ARGUMENT
static const tp_row_t g_tp_rows[] = {
    {AG, "valid, no a_full", X_DEV, X_B, X_DEV2, X_NULL, X_NULL, 0, 0, OK, OK},
    {AG, "valid, a_full given", X_DEV, X_B, X_DEV2, X_SYM, X_NULL, 0, 0, OK, OK},
    {AG, "valid, bias", X_DEV, X_B, X_DEV2, X_NULL, X_DEV, 1, 0, OK, OK},
    {AG, "a_full past its loom_malloc buffer", X_DEV, X_B, X_DEV2, X_SYM_TAIL, X_NULL, 0, 0, BAD, BAD},
    {AG, "a_full plain device memory", X_DEV, X_B, X_SYM, X_DEV2, X_NULL, 0, 0, BAD, BAD},
    {AG, "a_full misaligned", X_DEV, X_B, X_DEV2, X_SYM_MISALIGNED, X_NULL, 0, 0, BAD, BAD},
    {AG, "a_shard NULL", X_NULL, X_B, X_DEV2, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AG, "a_shard host memory", X_HOST, X_B, X_DEV2, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AG, "a_shard past its allocation", X_DEV_TAIL, X_B, X_DEV, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AG, "b NULL", X_DEV, X_NULL, X_DEV2, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AG, "c misaligned", X_DEV, X_B, X_MISALIGNED, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AG, "c past its allocation", X_DEV, X_B, X_DEV_TAIL, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AG, "c aliasing a_full", X_DEV, X_B, X_SYM, X_SYM, X_NULL, 0, 0, BAD, BAD},
    {AG, "bias without has_bias", X_DEV, X_B, X_DEV2, X_NULL, X_DEV, 0, 0, BAD, BAD},
    {AG, "has_bias without bias", X_DEV, X_B, X_DEV2, X_NULL, X_NULL, 1, 0, BAD, BAD},
    {RS, "valid", X_DEV, X_B, X_DEV2, X_NULL, X_NULL, 0, 0, OK, OK},
    {RS, "valid, bias", X_DEV, X_B, X_DEV2, X_NULL, X_SYM, 1, 0, OK, OK},
    {RS, "a NULL", X_NULL, X_B, X_DEV2, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {RS, "c_shard NULL", X_DEV, X_B, X_NULL, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {RS, "c_shard aliasing a", X_DEV, X_B, X_DEV, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {RS, "c_shard past its allocation", X_DEV, X_B, X_DEV_TAIL, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {RS, "c_shard past its loom_malloc buffer", X_DEV, X_B, X_SYM_TAIL, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {RS, "bias misaligned", X_DEV, X_B, X_DEV2, X_NULL, X_MISALIGNED, 1, 0, BAD, BAD},
    {AR, "valid, symmetric out", X_DEV, X_B, X_SYM, X_NULL, X_NULL, 0, 0, OK, OK},
    {AR, "valid, epilogue", X_DEV, X_B, X_SYM, X_NULL, X_NULL, 0, 1, OK, OK},
    {AR, "out plain device memory", X_DEV, X_B, X_DEV2, X_NULL, X_NULL, 0, 0, OK, BAD},
    {AR, "out past its loom_malloc buffer", X_DEV, X_B, X_SYM_TAIL, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AR, "out misaligned", X_DEV, X_B, X_SYM_MISALIGNED, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AR, "out aliasing b", X_DEV, X_SYM, X_SYM, X_NULL, X_NULL, 0, 0, BAD, BAD},
    {AR, "epilogue struct_size wrong", X_DEV, X_B, X_SYM, X_NULL, X_NULL, 0, 2, BAD, BAD},
    {AR, "epilogue residual in host memory", X_DEV, X_B, X_SYM, X_NULL, X_NULL, 0, 3, BAD, BAD},
};

static const loom_tp_transfer_t g_tp_transfers[3][5] = {
    {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_COPY_ENGINE, LOOM_TP_SM_COPY, LOOM_TP_DECOMPOSED},
    {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_SM_COPY, LOOM_TP_SM_ATOMIC, LOOM_TP_DECOMPOSED},
    {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_SM_COPY, LOOM_TP_SM_COPY, LOOM_TP_SM_COPY}};

static loom_result_t tp_check(loom_comm_t c, const bufs_t *x, const tp_row_t *r, loom_tp_transfer_t t) {
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = M, d.n = N, d.k = K, d.world_size = c->size, d.transfer = t, d.has_bias = r->has_bias;
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  e.scale = 0.5f;
  e.bias = x->at[X_DEV];
  e.residual = x->at[X_DEV2];
  if (r->epi == 2) e.struct_size = 1;
  if (r->epi == 3) e.residual = x->at[X_HOST];
  const loom_tp_call_t call = {x->at[r->a], x->at[r->b], x->at[r->c], x->at[r->a_full], x->at[r->bias],
                               r->epi ? &e : NULL};
  loom_pointwise_t pw;
  return loom__tp_check_call("test", r->op, c, &d, &call, &pw);
}

static void tp_rows_at(int rank, int size) {
  loom_comm_t c = fake_comm_create(rank, size);
  const bufs_t x = fake_bufs(c, (size_t)M * (N > K ? N : K) * 4);
  for (size_t i = 0; i < sizeof g_tp_rows / sizeof *g_tp_rows; ++i) {
    const tp_row_t *r = &g_tp_rows[i];
    for (int t = 0; t < 5; ++t) {
      const loom_tp_transfer_t tr = g_tp_transfers[r->op][t];
      const loom_result_t want = tr == LOOM_TP_SEQUENTIAL ? r->want_seq : r->want_other;
      const loom_result_t got = tp_check(c, &x, r, tr);
      if (got != want)
        loom_test_fail(__FILE__, __LINE__, "rank %d of %d, op %d, %s, transfer %d: result %d, expected %d (%s)", rank,
                       size, r->op, r->what, (int)tr, (int)got, (int)want, loom_last_error());
    }
  }
  fake_comm_destroy(c);
}

LOOM_TEST(tp_call_checks_are_the_same_under_every_transfer) {
  tp_rows_at(0, 1);
  tp_rows_at(1, 2);
  tp_rows_at(3, 4); /* m = 130 on 4 ranks: rank 3 owns 31 rows */
  tp_rows_at(5, 8);
}

/* The messages name the argument and what was wrong with it. */
LOOM_TEST(tp_call_checks_name_the_argument) {
  loom_comm_t c = fake_comm_create(1, 2);
  const bufs_t x = fake_bufs(c, (size_t)M * N * 4);
  CHECK_RESULT(tp_check(c, &x, &g_tp_rows[3], LOOM_TP_SEQUENTIAL), BAD);
  CHECK_MSG("a_full=");
  CHECK_MSG("allocation ends after 1024");
  CHECK_RESULT(tp_check(c, &x, &g_tp_rows[4], LOOM_TP_AUTO), BAD);
  CHECK_MSG("is not inside memory from loom_malloc on this comm");
  fake_comm_destroy(c);
}

