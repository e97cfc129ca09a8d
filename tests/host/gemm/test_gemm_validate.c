/*
 * test_gemm_validate.c - host tests of the GEMM argument check
 * (src/gemm/gemm_validate.c): every bad description or pointer value gets
 * LOOM_ERR_INVALID_ARGUMENT and a message naming the function, the argument
 * and its value, before anything touches CUDA. No GPU: pointers are fake
 * addresses that are never dereferenced (whether the GPU can reach a
 * pointer is the GPU test gemm_pointer_checks).
 */
#include <stdint.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/gemm.h"

/* Fake, 256-byte aligned, far apart: A, B, C and bias never overlap. */
#define PA ((const void *)(uintptr_t)0x10000000)
#define PB ((const void *)(uintptr_t)0x50000000)
#define PC ((void *)(uintptr_t)0x90000000)
#define PBIAS ((const void *)(uintptr_t)0xd0000000)

static loom_gemm_desc_t good_desc(void) {
  loom_gemm_desc_t d = LOOM_GEMM_DESC(64, 128, 256, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0);
  return d;
}

LOOM_TEST(gemm_validate_rejects_a_stale_struct_size) {
  loom_gemm_desc_t d = good_desc();
  d.struct_size = sizeof(loom_gemm_desc_t) - 8;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("struct_size");
  const loom_gemm_desc_t init = LOOM_GEMM_DESC_INIT;
  CHECK_EQ_INT(init.struct_size, sizeof(loom_gemm_desc_t));
}

LOOM_TEST(gemm_validate_accepts_good) {
  loom_gemm_desc_t d = good_desc();
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_SUCCESS);
  d.has_bias = 1;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, PBIAS), LOOM_SUCCESS);
  d.m = 1; /* m needs no multiple */
  d.c_type = LOOM_FP32;
  d.b_layout = LOOM_B_NK;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, PBIAS), LOOM_SUCCESS);
  d.m = 127, d.ab_type = LOOM_FP16, d.c_type = LOOM_FP16;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, PBIAS), LOOM_SUCCESS);
  /* 16-byte alignment is enough */
  d.has_bias = 0;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, (const char *)PA + 16, (const char *)PB + 48,
                                   (char *)PC + 16, NULL),
               LOOM_SUCCESS);
}

LOOM_TEST(gemm_validate_desc_null) {
  CHECK_RESULT(loom__gemm_validate("loom_gemm", NULL, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: desc=NULL");
}

LOOM_TEST(gemm_validate_shapes) {
  loom_gemm_desc_t d = good_desc();
  d.m = 0;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: m=0 must be >= 1");
  d = good_desc(), d.m = -5;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("m=-5 must be >= 1");
  d = good_desc(), d.n = 0;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: n=0 must be >= 1");
  d = good_desc(), d.k = 0;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: k=0 must be >= 1");
  d = good_desc(), d.n = 12;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: n=12 must be a multiple of 8");
  d = good_desc(), d.k = 100;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: k=100 must be a multiple of 8");
  d = good_desc(), d.k = 7;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("k=7 must be a multiple of 8");
  d = good_desc(), d.m = (int64_t)1 << 40;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("m=1099511627776 must be <= 2147483647");
}

LOOM_TEST(gemm_validate_dtypes) {
  loom_gemm_desc_t d = good_desc();
  d.ab_type = LOOM_FP32;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: ab_type=0 (LOOM_FP32) must be LOOM_BF16 or LOOM_FP16");
  d = good_desc(), d.ab_type = (loom_dtype_t)9;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("ab_type=9");
  d = good_desc(), d.c_type = (loom_dtype_t)7;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: c_type=7 (unknown) must be LOOM_BF16, LOOM_FP16 or LOOM_FP32");
  d = good_desc(), d.c_type = (loom_dtype_t)-1;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("c_type=-1");
}

LOOM_TEST(gemm_validate_layout_and_bias_flag) {
  loom_gemm_desc_t d = good_desc();
  d.b_layout = (loom_layout_t)2;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: b_layout=2 is unknown");
  d = good_desc(), d.has_bias = 2;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, PBIAS), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: has_bias=2 must be 0 or 1");
}

LOOM_TEST(gemm_validate_null_pointers) {
  loom_gemm_desc_t d = good_desc();
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, NULL, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: a=NULL");
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, NULL, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: b=NULL");
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: c=NULL");
}

LOOM_TEST(gemm_validate_alignment) {
  loom_gemm_desc_t d = good_desc();
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, (const char *)PA + 1, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: a=0x10000001 is not 16-byte aligned");
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, (const char *)PB + 8, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: b=0x50000008 is not 16-byte aligned");
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, (char *)PC + 2, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: c=0x90000002 is not 16-byte aligned");
  d.has_bias = 1;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, (const char *)PBIAS + 4), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: bias=0xd0000004 is not 16-byte aligned");
}

LOOM_TEST(gemm_validate_bias_presence) {
  loom_gemm_desc_t d = good_desc();
  d.has_bias = 1;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: bias=NULL while has_bias=1");
  d.has_bias = 0;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, PBIAS), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: bias=0xd0000000 given while has_bias=0");
}

LOOM_TEST(gemm_validate_aliasing) {
  loom_gemm_desc_t d = good_desc(); /* A: 64x256 bf16 = 32 KiB */
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, (char *)PA + 4096, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("overlaps a=");
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, (void *)(uintptr_t)PB, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("overlaps b=");
  /* right after A ends: fine */
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, (char *)PA + 64 * 256 * 2, NULL), LOOM_SUCCESS);
  d.has_bias = 1;
  CHECK_RESULT(loom__gemm_validate("loom_gemm", &d, PA, PB, PC, (const char *)PC + 64), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("overlaps bias=");
}

/* A hooked launch whose rows all go elsewhere (a row_dst table, or the
 * bulk-add epilogue) never touches its c argument: a c whose m x n extent
 * would reach A is accepted there (GEMM+ReduceScatter's atomic path passes
 * a buffer smaller than m x n), and still refused for a launch that
 * stores into c. */
LOOM_TEST(gemm_validate_hooked_checks_c_only_where_it_is_written) {
  loom_gemm_desc_t d = good_desc();
  void *c = (char *)PA + 4096;
  void *const *table = (void *const *)(uintptr_t)0xe0000000;
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  CHECK_RESULT(loom__gemm_validate_hooked("loom_gemm", &d, PA, PB, c, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("overlaps a=");
  h.epilogue = LOOM_EPI_REDUCE;
  CHECK_RESULT(loom__gemm_validate_hooked("loom_gemm", &d, PA, PB, c, NULL, &h), LOOM_ERR_INVALID_ARGUMENT);
  h.row_dst = table;
  CHECK_RESULT(loom__gemm_validate_hooked("loom_gemm", &d, PA, PB, c, NULL, &h), LOOM_SUCCESS);
  h.row_dst = NULL, h.epilogue = LOOM_EPI_BULK_ADD;
  CHECK_RESULT(loom__gemm_validate_hooked("loom_gemm", &d, PA, PB, c, NULL, &h), LOOM_SUCCESS);
  /* the rest is checked as before */
  CHECK_RESULT(loom__gemm_validate_hooked("loom_gemm", &d, PA, PA, c, NULL, &h), LOOM_SUCCESS);
  d.n = 100;
  CHECK_RESULT(loom__gemm_validate_hooked("loom_gemm", &d, PA, PB, c, NULL, &h), LOOM_ERR_INVALID_ARGUMENT);
}

LOOM_TEST(gemm_validate_names_the_function) {
  loom_gemm_desc_t d = good_desc();
  d.n = 12;
  CHECK_RESULT(loom__gemm_validate("loom_ag_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_ag_gemm: n=12");
  /* the public entry points check before they touch CUDA */
  CHECK_RESULT(loom_gemm(&d, PA, PB, PC, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: n=12 must be a multiple of 8");
  CHECK_RESULT(loom_gemm_tune(&d, PA, PB, PC, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm_tune: n=12");
  CHECK_RESULT(loom__gemm_check_args("loom_gemm", &d, PA, PB, PC, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: n=12");
}
