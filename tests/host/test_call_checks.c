/*
 * test_call_checks.c - what a call accepts never depends on the path its
 * plan resolved to. The misuse tables of the tensor-parallel ops
 * (loom__tp_check_call), the collectives (loom__coll_check_call) and the
 * optimizers' plans run under every transfer / algorithm / form value,
 * AUTO included, on a detached comm (no GPU): fake "device memory" answers
 * the pointer checks (an oracle over host buffers), and loom_malloc memory
 * comes from a host backend. Each row states its expected result; AUTO must
 * give what every transfer it may take gives.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/test.h"
#include "core/comm.h"
#include "core/pointwise.h"
#include "core/ptr_check.h"
#include "ops/coll.h"
#include "ops/optim_schedule.h"
#include "ops/tp_linear.h"
#include "testing/hooks.h"

/* ---- fake device memory ------------------------------------------------- */

#define FAKE_MAX 32
static struct { char *p; size_t n; } g_dev[FAKE_MAX];
static int g_ndev;

static int oracle(const void *p, uintptr_t *base, size_t *size) {
  for (int i = 0; i < g_ndev; ++i)
    if ((const char *)p >= g_dev[i].p && (const char *)p < g_dev[i].p + g_dev[i].n) {
      *base = (uintptr_t)g_dev[i].p;
      *size = g_dev[i].n;
      return 1;
    }
  return 0;
}

static char *dev_alloc(size_t n) {
  char *p = (char *)aligned_alloc(256, (n + 255) / 256 * 256);
  if (!p || g_ndev == FAKE_MAX) abort();
  memset(p, 0x3c, n);
  g_dev[g_ndev].p = p, g_dev[g_ndev].n = n, ++g_ndev;
  return p;
}

static void dev_free_all(void) {
  for (int i = 0; i < g_ndev; ++i) free(g_dev[i].p);
  g_ndev = 0;
}

/* symmetric memory: fake device memory every peer "reaches" */
static loom_result_t sym_alloc(loom_comm_t comm, size_t bytes, loom_alloc_t *a) {
  a->ptr = dev_alloc(bytes);
  for (int p = 0; p < comm->size; ++p) a->peer_ptrs[p] = a->ptr;
  return LOOM_SUCCESS;
}
static loom_result_t sym_release(loom_comm_t comm, loom_alloc_t *a) {
  (void)comm, (void)a; /* freed with the fake device memory */
  return LOOM_SUCCESS;
}
static const loom_mem_backend_t g_sym_backend = {sym_alloc, sym_release};

static loom_comm_t make_comm(int rank, int size) {
  loom_comm_t c = NULL;
  if (loom__comm_create_detached(rank, size, 1 << 20, &c) != LOOM_SUCCESS) abort();
  loom__comm_set_mem_backend(c, &g_sym_backend);
  loom__ptr_check_set_oracle(oracle);
  return c;
}

static void drop_comm(loom_comm_t c) {
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  loom__ptr_check_set_oracle(NULL);
  dev_free_all();
}

static void *sym(loom_comm_t c, size_t n) {
  void *p = NULL;
  if (loom_malloc(c, n, &p) != LOOM_SUCCESS) abort();
  return p;
}

/* ---- tensor-parallel calls ------------------------------------------------ */

enum { AG = 0, RS = 1, AR = 2 };
#define M 130
#define N 128
#define K 128

/* Buffers a row names (TP and collectives). */
enum { X_NULL, X_DEV, X_DEV2, X_SYM, X_SYM2, X_SYM_TAIL, X_DEV_TAIL, X_HOST, X_MISALIGNED, X_SYM_MISALIGNED, X_SYM_16,
       X_B, X_SYM_PLUS, X_COUNT };
typedef struct bufs { char *at[X_COUNT]; } bufs_t;

static bufs_t make_bufs(loom_comm_t c, size_t big) {
  static char host[64];
  bufs_t b;
  memset(&b, 0, sizeof b);
  b.at[X_DEV] = dev_alloc(big);
  b.at[X_DEV2] = dev_alloc(big);
  b.at[X_SYM] = (char *)sym(c, big);
  b.at[X_SYM2] = (char *)sym(c, big);
  b.at[X_SYM_TAIL] = b.at[X_SYM2] + big - 1024;
  b.at[X_DEV_TAIL] = b.at[X_DEV2] + big - 1024;
  b.at[X_HOST] = host;
  b.at[X_MISALIGNED] = b.at[X_DEV2] + 8;
  b.at[X_SYM_MISALIGNED] = b.at[X_SYM2] + 8;
  b.at[X_SYM_16] = b.at[X_SYM2] + 16;
  b.at[X_B] = dev_alloc(big);
  b.at[X_SYM_PLUS] = NULL; /* collectives fill it (a slice begin) */
  return b;
}

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

static const loom_tp_transfer_t g_tp_transfers[3][4] = {
    {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_COPY_ENGINE, LOOM_TP_SM_COPY},
    {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_SM_COPY, LOOM_TP_SM_ATOMIC},
    {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_SM_COPY, LOOM_TP_SM_COPY}};

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
  loom_comm_t c = make_comm(rank, size);
  const bufs_t x = make_bufs(c, (size_t)M * (N > K ? N : K) * 4);
  for (size_t i = 0; i < sizeof g_tp_rows / sizeof *g_tp_rows; ++i) {
    const tp_row_t *r = &g_tp_rows[i];
    for (int t = 0; t < 4; ++t) {
      const loom_tp_transfer_t tr = g_tp_transfers[r->op][t];
      const loom_result_t want = tr == LOOM_TP_SEQUENTIAL ? r->want_seq : r->want_other;
      const loom_result_t got = tp_check(c, &x, r, tr);
      if (got != want)
        loom_test_fail(__FILE__, __LINE__, "rank %d of %d, op %d, %s, transfer %d: result %d, expected %d (%s)", rank,
                       size, r->op, r->what, (int)tr, (int)got, (int)want, loom_last_error());
    }
  }
  drop_comm(c);
}

LOOM_TEST(tp_call_checks_are_the_same_under_every_transfer) {
  tp_rows_at(0, 1);
  tp_rows_at(1, 2);
  tp_rows_at(3, 4); /* m = 130 on 4 ranks: rank 3 owns 31 rows */
  tp_rows_at(5, 8);
}

/* The messages name the argument and what was wrong with it. */
LOOM_TEST(tp_call_checks_name_the_argument) {
  loom_comm_t c = make_comm(1, 2);
  const bufs_t x = make_bufs(c, (size_t)M * N * 4);
  CHECK_RESULT(tp_check(c, &x, &g_tp_rows[3], LOOM_TP_SEQUENTIAL), BAD);
  CHECK_MSG("a_full=");
  CHECK_MSG("allocation ends after 1024");
  CHECK_RESULT(tp_check(c, &x, &g_tp_rows[4], LOOM_TP_AUTO), BAD);
  CHECK_MSG("is not inside memory from loom_malloc on this comm");
  drop_comm(c);
}

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
  loom_coll_slice(d.count, c->size, c->rank, loom_coll_unit(d.cols), &b, &l);
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
  loom_comm_t c = make_comm(rank, size);
  bufs_t x = make_bufs(c, 10010 * 4 + 64);
  for (size_t i = 0; i < sizeof g_coll_rows / sizeof *g_coll_rows; ++i) {
    const coll_row_t *r = &g_coll_rows[i];
    for (size_t a = 0; a < sizeof g_algos / sizeof *g_algos; ++a) {
      if (r->op != LOOM__COLL_AR && a > 0) break;
      int64_t b, l;
      loom_coll_slice(r->count, size, rank, loom_coll_unit(r->cols), &b, &l);
      const loom_result_t want = r->out_only && r->op == LOOM__COLL_RS && l == 0 ? OK : r->want;
      const loom_result_t got = coll_check(c, &x, r, g_algos[a]);
      if (got != want)
        loom_test_fail(__FILE__, __LINE__, "rank %d of %d, op %d, %s, algo %d: result %d, expected %d (%s)", rank,
                       size, r->op, r->what, (int)g_algos[a], (int)got, (int)want, loom_last_error());
    }
  }
  drop_comm(c);
}

LOOM_TEST(coll_call_checks_are_the_same_under_every_algorithm) {
  coll_rows_at(0, 1);
  coll_rows_at(1, 2);
  coll_rows_at(2, 3);
  coll_rows_at(7, 8);
}

/* ---- optimizer plans: the form --------------------------------------------- */

/* Gradients must be symmetric under every form; parameters of RS-Opt-AG
 * tensors must be, AR-Opt ones need not be; AUTO is the documented rule of
 * the tensor's size (arguments alone), nothing resolved elsewhere. A valid
 * description on a detached comm ends in LOOM_ERR_UNSUPPORTED ("cannot
 * hold a plan"): every check passed. */
static loom_result_t optim_plan(loom_comm_t c, loom_optim_form_t form, void *param, void *grad, int64_t n) {
  void *params[1] = {param}, *grads[1] = {grad};
  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  d.world_size = c->size, d.num_tensors = 1, d.params = params, d.grads = grads, d.numels = &n;
  d.form = form;
  loom_plan_t plan = NULL;
  return loom_plan_adam(c, &d, &plan);
}

LOOM_TEST(optim_plan_checks_follow_the_form_and_auto_follows_its_rule) {
  loom_comm_t c = make_comm(1, 2);
  bufs_t x = make_bufs(c, 1 << 16);
  const int64_t sizes[2] = {1000, 10000}; /* AUTO: AR-Opt, RS-Opt-AG */
  const loom_result_t valid = LOOM_ERR_UNSUPPORTED;
  for (int s = 0; s < 2; ++s) {
    const int64_t n = sizes[s];
    const loom_optim_form_t forms[3] = {LOOM_OPTIM_AUTO, LOOM_OPTIM_RS_OPT_AG, LOOM_OPTIM_AR_OPT};
    for (int f = 0; f < 3; ++f) {
      /* symmetric both: valid under every form */
      CHECK_RESULT(optim_plan(c, forms[f], x.at[X_SYM], x.at[X_SYM2], n), valid);
      /* plain gradients: refused under every form */
      CHECK_RESULT(optim_plan(c, forms[f], x.at[X_SYM], x.at[X_DEV], n), BAD);
      /* plain parameters: as the form that applies to this tensor says */
      const int ar = loom_optim_tensor_is_ar((int)forms[f], n);
      CHECK_RESULT(optim_plan(c, forms[f], x.at[X_DEV], x.at[X_SYM2], n), ar ? valid : BAD);
    }
  }
  drop_comm(c);
}
