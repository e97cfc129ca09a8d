/*
 * test_gemm_kernels.c - host tests of the GEMM launchers' kernel tables
 * (gemm_sm90.cu, gemm_sm80.cu): the kernel templates are instantiated in
 * groups, one translation unit each (gemm_sm90_<bm>x<bn>_<type>.cu,
 * gemm_sm80_<type>.cu), and each launcher finds a configuration's kernel
 * through its table of groups.
 *   - every configuration a launcher takes has a kernel;
 *   - distinct instantiations are distinct kernels, and there are as many
 *     as the template's configurations: sm90, per A/B type and B layout,
 *     14 plain (bm 128: data-parallel and stream-K at every width, clusters
 *     at 128 and 256; bm 64 at 128 and 256: data-parallel and stream-K)
 *     and 48 hooked per activation (the 6 tiles data-parallel, the 2
 *     cluster ones, and stream-K at the 4 tiles 128 or 256 wide: the
 *     wait-only kernels) plus the wait-only stream-K ones at bn 192 and 224
 *     without an activation, 256 in all; sm80 20 (5 per type and layout: bn
 *     128 plain, hooked, split-K; bn 256 plain, hooked);
 *   - what the launchers fold together stays together: stream-K never in a
 *     cluster, bm 64 and bn 192 / 224 never a cluster, plain GEMMs ignore
 *     the activation; a hooked stream-K kernel at bn 192 / 224 only without
 *     an activation (NULL otherwise: the launcher never asks).
 * No GPU needed (kernels are compared by their host-side functions).
 */
#include <stddef.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/gemm.h"

static int count_distinct(const void **p, int n) {
  int d = 0;
  for (int i = 0; i < n; ++i) {
    int seen = 0;
    for (int j = 0; j < i && !seen; ++j) seen = p[j] == p[i];
    d += !seen;
  }
  return d;
}

LOOM_TEST(gemm_kernels_sm90_table) {
  static const int tiles[6][2] = {{64, 128}, {64, 256}, {128, 128}, {128, 192}, {128, 224}, {128, 256}};
  static const int types[2] = {LOOM_BF16, LOOM_FP16};
  static const void *all[6 * 2 * 2 * 2 * 2 * 2 * 4];
  int n = 0;
  for (int t = 0; t < 6; ++t)
    for (int ty = 0; ty < 2; ++ty)
      for (int tb = 0; tb <= 1; ++tb) {
        const int bm = tiles[t][0], bn = tiles[t][1];
        const void *mine[2 * 2 * 2 * 4];
        int nm = 0;
        for (int hooks = 0; hooks <= 1; ++hooks)
          for (int sk = 0; sk <= 1; ++sk)
            for (int cl = 1; cl <= 2; ++cl)
              for (int act = LOOM_ACT_NONE; act <= LOOM_ACT_GELU_ERF; ++act) {
                const void *k = loom__gemm_sm90_kernel_for(bm, bn, types[ty], tb, hooks, sk, cl, act);
                if (hooks && sk && (bn == 192 || bn == 224) && act != LOOM_ACT_NONE) {
                  CHECK(k == NULL);
                  continue;
                }
                CHECK(k != NULL);
                all[n++] = mine[nm++] = k;
                /* folded together by the launcher */
                if (hooks) CHECK(k == loom__gemm_sm90_kernel_for(bm, bn, types[ty], tb, 1, sk, sk ? 1 : cl, act));
                else CHECK(k == loom__gemm_sm90_kernel_for(bm, bn, types[ty], tb, 0, sk, sk ? 1 : cl, LOOM_ACT_NONE));
                if (bm == 64 || bn == 192 || bn == 224) CHECK(k == loom__gemm_sm90_kernel_for(bm, bn, types[ty], tb, hooks, sk, 1, act));
              }
        /* per tile, type and layout: plain data-parallel, stream-K, cluster
         * (bm 128 x bn 128 / 256); hooked per activation the same, stream-K
         * only at bn 128 / 256 */
        const int cl2 = bm == 128 && (bn == 128 || bn == 256), hsk = bn == 128 || bn == 256;
        CHECK_EQ_INT(count_distinct(mine, nm), (2 + cl2) + 4 * (1 + cl2 + hsk) + !hsk);
      }
  CHECK_EQ_INT(count_distinct(all, n), 256);
  /* the odd values the launcher normalises (validated before it) */
  CHECK(loom__gemm_sm90_kernel_for(128, 256, LOOM_BF16, 7, 0, 0, 1, 0) == loom__gemm_sm90_kernel_for(128, 256, LOOM_BF16, 1, 0, 0, 1, 0));
}

LOOM_TEST(gemm_kernels_sm80_table) {
  static const int types[2] = {LOOM_BF16, LOOM_FP16};
  const void *all[2 * 2 * 2 * 2 * 2];
  int n = 0;
  for (int b = 0; b < 2; ++b)
    for (int ty = 0; ty < 2; ++ty)
      for (int tb = 0; tb <= 1; ++tb)
        for (int hooks = 0; hooks <= 1; ++hooks)
          for (int split = 0; split <= 1; ++split) {
            const int bn = b ? 256 : 128;
            const void *k = loom__gemm_sm80_kernel_for(bn, types[ty], tb, hooks, split);
            CHECK(k != NULL);
            all[n++] = k;
            /* split-K: plain 128-wide tiles only */
            if (hooks || bn == 256) CHECK(k == loom__gemm_sm80_kernel_for(bn, types[ty], tb, hooks, 0));
          }
  CHECK_EQ_INT(count_distinct(all, n), 20);
}
