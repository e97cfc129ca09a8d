/*
 * test_gemm_tune.c - host tests of loom_gemm's tuning entries
 * (src/gemm/gemm_tune.c): the key names path, GPU size and shape; values
 * round-trip; malformed values are rejected naming the token and the entry;
 * the cache's entry is what loom_gemm would use; the tuner's candidates are
 * valid, distinct and include what the shape needs (clusters with >= 2 tile
 * rows, split-K and stream-K for decode shapes, the 64-row decode variant
 * (bm=64) for m <= 128 only and only on sm90, the small-m kernel (bm=16)
 * for m <= 64 on both paths). Runs on any machine.
 */
#include <string.h>

#include "tests/common/test.h"
#include "core/tune.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"

LOOM_TEST(gemm_tune_key_names_path_gpu_and_shape) {
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(4096, 24576, 12288, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  char key[LOOM_TUNE_TEXT_BYTES];
  CHECK(loom__gemm_tune_key(&d, "sm90", 132, key, sizeof key));
  CHECK(!strcmp(key, "gemm sm90 132sm m4096 n24576 k12288 bf16->bf16 nk bias0"));
  const loom_gemm_desc_t e = LOOM_GEMM_DESC(7, 64, 8, LOOM_FP16, LOOM_FP32, LOOM_B_KN, 1);
  CHECK(loom__gemm_tune_key(&e, "sm80", 108, key, sizeof key));
  CHECK(!strcmp(key, "gemm sm80 108sm m7 n64 k8 fp16->fp32 kn bias1"));
  char tiny[8];
  CHECK(!loom__gemm_tune_key(&d, "sm90", 132, tiny, sizeof tiny));
}

LOOM_TEST(gemm_tune_value_round_trip_and_errors) {
  const loom_gemm_config_t cs[] = {{256, 0, 16, 0, 0, 0, 0, 2, 0, 0},   {128, 0, 16, 0, -1, 0, 6, 0, 0, 0},
                                   {128, 6, 4, 66, -1, 132, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                                   {256, 0, 16, 0, 0, 0, 0, 0, 64, 0},   {128, 8, 16, 0, -1, 0, 11, 0, 64, 0},
                                   {256, 0, 0, 0, 0, 0, 0, 0, 128, 0}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) {
    char v[LOOM_TUNE_TEXT_BYTES];
    loom_gemm_config_t back;
    loom__gemm_config_format(&cs[i], v, sizeof v);
    CHECK_RESULT(loom__gemm_config_parse(v, &back), LOOM_SUCCESS);
    CHECK(!memcmp(&back, &cs[i], sizeof back));
  }
  loom_gemm_config_t c;
  CHECK_RESULT(loom__gemm_config_parse("  bn=128   cluster=2 ", &c), LOOM_SUCCESS);
  CHECK(c.bn == 128 && c.cluster == 2 && c.sk_splits == 0 && c.bm == 0);
  /* the decode variant's field; entries written before it existed mean bm 0 */
  char v[LOOM_TUNE_TEXT_BYTES];
  const loom_gemm_config_t dec = {256, 0, 16, 0, -1, 0, 11, 0, 64, 0};
  loom__gemm_config_format(&dec, v, sizeof v);
  CHECK(!strcmp(v, "bn=256 group=16 sk_tiles=-1 splits=11 bm=64"));
  CHECK_RESULT(loom__gemm_config_parse("bm=64 bn=128", &c), LOOM_SUCCESS);
  CHECK(c.bm == 64 && c.bn == 128 && c.group == 0);
  CHECK_RESULT(loom__gemm_config_parse("bn=128 bm=6x", &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("bm=6x");
  CHECK_RESULT(loom__gemm_config_parse("bn=abc", &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("bn=abc");
  CHECK_RESULT(loom__gemm_config_parse("bn=128 tile=64", &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("unknown field \"tile\"");
  CHECK_RESULT(loom__gemm_config_parse("bn", &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom__gemm_config_parse("=3", &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom__gemm_config_parse("bn=12x", &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom__gemm_config_parse("splits=-5", &c), LOOM_ERR_INVALID_ARGUMENT);
}

LOOM_TEST(gemm_tuned_config_comes_from_the_cache) {
  loom__tune_clear();
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 2056, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 1);
  loom_gemm_config_t c;
  int found = 1;
  CHECK_RESULT(loom__gemm_tuned_config(&d, "sm90", 132, &c, &found), LOOM_SUCCESS);
  CHECK(found == 0);
  char key[LOOM_TUNE_TEXT_BYTES];
  CHECK(loom__gemm_tune_key(&d, "sm90", 132, key, sizeof key));
  CHECK_RESULT(loom__tune_put(key, "bn=128 cluster=2"), LOOM_SUCCESS);
  CHECK_RESULT(loom__gemm_tuned_config(&d, "sm90", 132, &c, &found), LOOM_SUCCESS);
  CHECK(found == 1 && c.bn == 128 && c.cluster == 2);
  /* another GPU size or path: not this entry */
  CHECK_RESULT(loom__gemm_tuned_config(&d, "sm90", 114, &c, &found), LOOM_SUCCESS);
  CHECK(found == 0);
  CHECK_RESULT(loom__gemm_tuned_config(&d, "sm80", 132, &c, &found), LOOM_SUCCESS);
  CHECK(found == 0);
  CHECK_RESULT(loom__tune_put(key, "bn=128 clusters=2"), LOOM_SUCCESS);
  CHECK_RESULT(loom__gemm_tuned_config(&d, "sm90", 132, &c, &found), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("gemm sm90 132sm m1000");
  loom__tune_clear();
}

static int has_cfg_bm(const loom_gemm_config_t *v, int n, int bm, int bn, int cluster, int splits, int sk_tiles) {
  for (int i = 0; i < n; ++i)
    if (v[i].bm == bm && v[i].bn == bn && v[i].cluster == cluster && v[i].sk_splits == splits &&
        v[i].sk_tiles == sk_tiles)
      return 1;
  return 0;
}

/* How many candidates have tiles of bm rows. */
static int count_bm(const loom_gemm_config_t *v, int n, int bm) {
  int c = 0;
  for (int i = 0; i < n; ++i) c += v[i].bm == bm;
  return c;
}

/* What loom_gemm_tune times besides the model's pick: the model's
 * candidates (gemm_heuristic.c), valid and distinct, shaped by the GEMM:
 * 128-row tiles of every width above m = 64 (clusters from two tile rows),
 * the decode variant up to m = 128, the small-m kernel up to m = 64 (on the
 * sm80 path too), split-K where tiles leave SMs idle, split-K of the last
 * partial wave for long k-loops. */
LOOM_TEST(gemm_tune_candidates_valid_distinct_and_shape_aware) {
  const loom__gemm_device_t dev = loom__gemm_device_model(132, 1);
  const loom_gemm_desc_t shapes[] = {LOOM_GEMM_DESC(4096, 24576, 12288, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0),
                                     LOOM_GEMM_DESC(64, 12288, 24576, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0),
                                     LOOM_GEMM_DESC(256, 12288, 24576, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0),
                                     LOOM_GEMM_DESC(1, 64, 8, LOOM_FP16, LOOM_FP32, LOOM_B_KN, 1),
                                     LOOM_GEMM_DESC(64, 8192, 14336, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0),
                                     LOOM_GEMM_DESC(16, 24576, 12288, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0),
                                     LOOM_GEMM_DESC(128, 14336, 8192, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0),
                                     LOOM_GEMM_DESC(129, 14336, 8192, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0)};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (int sm90 = 0; sm90 <= 1; ++sm90) {
      loom_gemm_config_t v[LOOM_GEMM_MAX_CANDIDATES];
      const int n = loom__gemm_candidates(&shapes[i], &dev, sm90, v, LOOM_GEMM_MAX_CANDIDATES);
      CHECK(n >= 1 && n < 64);
      for (int a = 0; a < n; ++a) {
        CHECK(v[a].bm == 0 || v[a].bm == 64 || v[a].bm == 16);
        CHECK(v[a].bm == 16 ? v[a].bn == 0 : (v[a].bn == 128 || v[a].bn == 256 ||
                                               (sm90 && (v[a].bn == 192 || v[a].bn == 224) && v[a].cluster <= 1)));
        CHECK(v[a].cluster >= 0 && v[a].cluster <= 2);
        CHECK(v[a].bm == 0 || v[a].cluster == 0); /* no clusters with 64-row tiles or the small-m kernel */
        CHECK(v[a].sk_tiles >= -1);
        for (int b = a + 1; b < n; ++b) CHECK(memcmp(&v[a], &v[b], sizeof v[a]) != 0);
      }
      const int64_t m = shapes[i].m;
      CHECK((count_bm(v, n, 16) > 0) == (m <= 64)); /* the small-m kernel, both paths */
      if (sm90) {
        CHECK((count_bm(v, n, 64) > 0) == (m <= 128));
        CHECK((count_bm(v, n, 0) > 0) == (m > 64));
        if (m > 64) {
          CHECK(has_cfg_bm(v, n, 0, 192, 0, 0, 0) && has_cfg_bm(v, n, 0, 224, 0, 0, 0));
          CHECK(has_cfg_bm(v, n, 0, 256, 2, 0, 0) == (m > 128));
        }
      } else {
        CHECK_EQ_INT(count_bm(v, n, 64), 0); /* the sm80 path has no decode variant */
        CHECK(has_cfg_bm(v, n, 0, 128, 0, 0, 0) && has_cfg_bm(v, n, 0, 256, 0, 0, 0));
      }
    }
  /* Llama down m = 64: 32 tiles of 64 x 256 leave SMs idle: split-K of
   * those tiles with loom__gemm_split_count's splits, and stream-K */
  {
    loom_gemm_config_t w[LOOM_GEMM_MAX_CANDIDATES];
    const int nw = loom__gemm_candidates(&shapes[4], &dev, 1, w, LOOM_GEMM_MAX_CANDIDATES);
    const int s256 = loom__gemm_split_count(32, 224, 132), s128 = loom__gemm_split_count(64, 224, 132);
    CHECK(s256 > 1 && s128 > 1);
    CHECK(has_cfg_bm(w, nw, 64, 256, 0, s256, -1) && has_cfg_bm(w, nw, 64, 128, 0, s128, -1));
    CHECK(has_cfg_bm(w, nw, 64, 256, 0, 0, -1) && has_cfg_bm(w, nw, 64, 128, 0, 0, -1));
  }
  /* Flux RS m = 256 (96 tiles of 128 x 256 on 132 SMs): split-K of all tiles */
  loom_gemm_config_t v[LOOM_GEMM_MAX_CANDIDATES];
  int n = loom__gemm_candidates(&shapes[2], &dev, 1, v, LOOM_GEMM_MAX_CANDIDATES);
  int split = 0;
  for (int a = 0; a < n; ++a) split |= v[a].sk_splits > 1 && v[a].sk_tiles == -1;
  CHECK(split);
  /* m = 1000, n = 4608, k = 12288: split-K of the last partial wave of
   * 128 x 192 tiles (60 of 192) */
  const loom_gemm_desc_t qkv = LOOM_GEMM_DESC(1000, 4608, 12288, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  n = loom__gemm_candidates(&qkv, &dev, 1, v, LOOM_GEMM_MAX_CANDIDATES);
  CHECK(has_cfg_bm(v, n, 0, 192, 0, 2, 60));
}
