/*
 * test_gemm_grouped.c - host tests of the grouped GEMM (loom_gemm_grouped):
 * the argument checks (gemm_grouped.c, fake pointers that are never
 * dereferenced), the tile the model picks (loom__grouped_sm90_config), the
 * kernel table, and that every grouped configuration's shared memory,
 * prefix of the most groups included, fits a block.
 */
#include <stdint.h>

#include "tests/common/test.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/sm90_layout.h"

#define PA ((const void *)(uintptr_t)0x100000000ull)
#define PB ((const void *)(uintptr_t)0x200000000ull)
#define PC ((void *)(uintptr_t)0x300000000ull)
#define PBIAS ((const void *)(uintptr_t)0x400000000ull)
#define POFF ((const int64_t *)(uintptr_t)0x500000000ull)

static loom_grouped_gemm_desc_t good(void) {
  loom_grouped_gemm_desc_t d = LOOM_GROUPED_GEMM_DESC_INIT;
  d.groups = 8, d.max_rows = 4096, d.n = 1024, d.k = 512;
  return d;
}

static loom_result_t check(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, const void *c,
                           const void *bias, const int64_t *off) {
  return loom__grouped_validate("loom_gemm_grouped", d, a, b, c, bias, off);
}

LOOM_TEST(gemm_grouped_accepts_good) {
  loom_grouped_gemm_desc_t d = good();
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_SUCCESS);
  d.has_bias = 1, d.c_type = LOOM_FP32, d.b_layout = LOOM_B_KN, d.groups = LOOM_GROUPED_GEMM_MAX_GROUPS;
  CHECK_RESULT(check(&d, PA, PB, PC, PBIAS, POFF), LOOM_SUCCESS);
  d.max_rows = 1, d.ab_type = LOOM_FP16, d.rows_hint = 7; /* any rows, a hint above them */
  CHECK_RESULT(check(&d, PA, PB, PC, PBIAS, (const int64_t *)((uintptr_t)POFF + 8)), LOOM_SUCCESS);
}

LOOM_TEST(gemm_grouped_rejects_each_bad_field_by_name) {
  const loom_grouped_gemm_desc_t g = good();
  loom_grouped_gemm_desc_t d;
  CHECK_RESULT(check(NULL, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc=NULL");
  d = g, d.struct_size -= 8;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("struct_size");
  d = g, d.groups = 0;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("groups=0");
  d = g, d.groups = LOOM_GROUPED_GEMM_MAX_GROUPS + 1;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("groups=257");
  d = g, d.max_rows = 0;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("max_rows=0");
  d = g, d.rows_hint = -1;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("rows_hint=-1");
  d = g, d.n = 100;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("n=100");
  d = g, d.k = 12;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("k=12");
  d = g, d.ab_type = LOOM_FP32;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("ab_type");
  d = g, d.b_layout = (loom_layout_t)5;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("b_layout=5");
  /* the kernel's int32 tile count: 256 groups x 2^30 rows */
  d = g, d.groups = 256, d.max_rows = INT32_MAX / 2, d.n = 8, d.k = 8;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("tiles");
}

LOOM_TEST(gemm_grouped_rejects_bad_pointers_by_name) {
  const loom_grouped_gemm_desc_t g = good();
  loom_grouped_gemm_desc_t d = g;
  CHECK_RESULT(check(&d, NULL, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("a=NULL");
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("offsets=NULL");
  CHECK_RESULT(check(&d, PA, (const char *)PB + 8, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("16-byte aligned");
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, (const int64_t *)((uintptr_t)POFF + 4)), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("8-byte aligned");
  CHECK_RESULT(check(&d, PA, PB, PC, PBIAS, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("has_bias=0");
  d.has_bias = 1;
  CHECK_RESULT(check(&d, PA, PB, PC, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("bias=NULL");
  /* C over the last group's weights (B is G x n x k: 8 MiB) */
  d.has_bias = 0;
  CHECK_RESULT(check(&d, PA, PB, (char *)PB + 8 * 1024 * 1024 - 16, NULL, POFF), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("overlaps b");
  CHECK_RESULT(check(&d, PA, PB, (char *)PB + 8 * 1024 * 1024, NULL, POFF), LOOM_SUCCESS);
}

LOOM_TEST(gemm_grouped_config_follows_rows_per_group) {
  loom_grouped_gemm_desc_t d = good();
  /* decode: 128 tokens x top-8 over 128 experts: 8 rows a group */
  d.groups = 128, d.max_rows = 65536, d.rows_hint = 1024, d.n = 4096, d.k = 7168;
  loom_gemm_config_t c = loom__grouped_sm90_config(&d, 132);
  CHECK_EQ_INT(c.bm, 64);
  CHECK_EQ_INT(c.bn, 256);
  /* prefill: 4096 tokens: 256 rows a group */
  d.rows_hint = 32768;
  c = loom__grouped_sm90_config(&d, 132);
  CHECK_EQ_INT(c.bm, 128);
  CHECK_EQ_INT(c.bn, 256);
  /* few, small tiles: the narrow tile keeps more SMs busy */
  d.groups = 2, d.rows_hint = 256, d.n = 1024;
  c = loom__grouped_sm90_config(&d, 132);
  CHECK_EQ_INT(c.bn, 128);
  /* no hint: max_rows over the groups */
  d.rows_hint = 0, d.max_rows = 100;
  c = loom__grouped_sm90_config(&d, 132);
  CHECK_EQ_INT(c.bm, 64);
  /* every configuration the model picks has a kernel */
  const int bms[] = {64, 128}, bns[] = {128, 256};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int tb = 0; tb < 2; ++tb) {
        CHECK(loom__gemm_grouped_kernel_for(bms[i], bns[j], LOOM_BF16, tb) != NULL);
        CHECK(loom__gemm_grouped_kernel_for(bms[i], bns[j], LOOM_FP16, tb) != NULL);
        CHECK(loom__gemm_grouped_kernel_for(bms[i], bns[j], LOOM_BF16, tb) !=
              loom__gemm_grouped_kernel_for(bms[i], bns[j], LOOM_FP16, tb));
      }
  CHECK(loom__gemm_grouped_kernel_for(128, 192, LOOM_BF16, 0) == NULL);
  CHECK(loom__gemm_grouped_kernel_for(128, 128, LOOM_FP32, 0) == NULL);
}

LOOM_TEST(gemm_grouped_shared_memory_fits_with_the_most_groups) {
  const int bms[] = {64, 128}, bns[] = {128, 256};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int bm = bms[i], bn = bns[j];
      const size_t bytes = loom__sm90_smem_bytes(bm, bn, LOOM_SM90_STAGES(bm, bn), LOOM_SM90_EPI_BUFS(bm, bn), 0) +
                           LOOM_SM90_GROUPED_BYTES(LOOM_GROUPED_GEMM_MAX_GROUPS);
      if (bytes > LOOM_SM90_SMEM_MAX)
        loom_test_fail(__FILE__, __LINE__, "bm=%d bn=%d: %zu bytes > %d", bm, bn, bytes, LOOM_SM90_SMEM_MAX);
    }
  /* the kernel's prefix sits 8 bytes into the 16 after the barriers */
  CHECK(LOOM_SM90_GROUPED_BYTES(LOOM_GROUPED_GEMM_MAX_GROUPS) + 8 >= 4 * (LOOM_GROUPED_GEMM_MAX_GROUPS + 1));
}
