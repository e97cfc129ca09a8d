/*
 * test_moe_plan_checks.c - what loom_plan_moe refuses, by field name and
 * value, and that a valid description passes every check (on a detached
 * comm: tests/host/fake_mem.h, which then ends in LOOM_ERR_UNSUPPORTED,
 * "cannot hold a plan"); the MoE wait sites are named; the tuning of
 * loom_moe_mlp's form (tokens' bucket, key, entry).
 */
#include <stdint.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/fake_mem.h"
#include "core/signal.h"
#include "ops/moe/moe.h"

static loom_moe_desc_t good_desc(void) {
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = 4096, d.experts = 8, d.topk = 2, d.max_tokens = 4096;
  return d;
}

static loom_result_t plan_of(loom_comm_t c, const loom_moe_desc_t *d) {
  loom_plan_t plan = NULL;
  return loom_plan_moe(c, d, &plan);
}

LOOM_TEST(moe_plan_checks_name_each_field) {
  loom_comm_t c = fake_comm_create(0, 2);
  loom_moe_desc_t d = good_desc();
  CHECK_RESULT(plan_of(c, &d), LOOM_ERR_UNSUPPORTED); /* every check passed */
  CHECK_RESULT(plan_of(c, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc=NULL");
#define BAD_FIELD(set, text)                                   \
  do {                                                         \
    loom_moe_desc_t b = good_desc();                           \
    set;                                                       \
    CHECK_RESULT(plan_of(c, &b), LOOM_ERR_INVALID_ARGUMENT);   \
    CHECK_MSG(text);                                           \
  } while (0)
  BAD_FIELD(b.struct_size = 8, "desc->struct_size=8");
  BAD_FIELD(b.dtype = (loom_dtype_t)7, "desc->dtype=7");
  BAD_FIELD(b.hidden = 0, "desc->hidden=0");
  BAD_FIELD(b.hidden = 4, "desc->hidden=4"); /* 8 bytes a row: not a multiple of 16 */
  BAD_FIELD(b.experts = 0, "desc->experts=0");
  BAD_FIELD(b.topk = 0, "desc->topk=0");
  BAD_FIELD(b.topk = 9, "desc->topk=9");
  BAD_FIELD((b.experts = 2, b.topk = 3), "desc->topk=3");
  BAD_FIELD(b.max_tokens = -1, "desc->max_tokens=-1");
  BAD_FIELD(b.capacity = -5, "desc->capacity=-5");
  BAD_FIELD((b.max_tokens = (int64_t)1 << 27, b.topk = 8, b.experts = 64), "worst-case rows");
  BAD_FIELD(b.mlp_path = 4, "desc->mlp_path=4");
  BAD_FIELD(b.mlp_path = -1, "desc->mlp_path=-1");
#undef BAD_FIELD
  /* fp32 rows of 4 elements are 16 bytes: fine; a capacity bounds the buffer */
  d = good_desc();
  d.dtype = LOOM_FP32, d.hidden = 4;
  CHECK_RESULT(plan_of(c, &d), LOOM_ERR_UNSUPPORTED);
  d = good_desc();
  d.max_tokens = (int64_t)1 << 27, d.topk = 8, d.experts = 64, d.capacity = 1000;
  CHECK_RESULT(plan_of(c, &d), LOOM_ERR_UNSUPPORTED);
  fake_comm_destroy(c);
}

LOOM_TEST(moe_wait_sites_are_named) {
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_MOE_COUNTS), "MoE dispatch") != NULL);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_MOE_DELIVERED), "MoE dispatch") != NULL);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_MOE_COMB_READY), "MoE combine") != NULL);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_MOE_COMB_DONE), "MoE combine") != NULL);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_MOE_GRID), "grid barrier") != NULL);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_MOE_LAYOUT), "gate/up GEMM") != NULL);
  CHECK(strstr(loom__wait_site_name(LOOM_SITE_MOE_ARRIVED), "a source's rows of an expert") != NULL);
  CHECK_EQ_INT(loom__wait_site_clashes(), 0);
}

LOOM_TEST(moe_mlp_tuning_key_bucket_and_entry) {
  CHECK_EQ_INT(loom__moe_tokens_bucket(0), 0);
  CHECK_EQ_INT(loom__moe_tokens_bucket(1), 0);
  CHECK_EQ_INT(loom__moe_tokens_bucket(2), 1);
  CHECK_EQ_INT(loom__moe_tokens_bucket(128), 7);
  CHECK_EQ_INT(loom__moe_tokens_bucket(129), 8);
  CHECK_EQ_INT(loom__moe_tokens_bucket(4096), 12);
  CHECK_EQ_INT(loom__moe_tokens_bucket((int64_t)1 << 40), 40);
  loom_moe_desc_t d = good_desc();
  d.ffn = 14336;
  char key[160];
  CHECK(loom__moe_mlp_tune_key(&d, 2, 132, 100, key, sizeof key));
  CHECK(strcmp(key, "moe mlp W2 132sm H4096 F14336 E8 k2 bf16 cap0 t128") == 0);
  char key2[160];
  CHECK(loom__moe_mlp_tune_key(&d, 2, 132, 128, key2, sizeof key2)); /* the same bucket */
  CHECK(strcmp(key, key2) == 0);
  CHECK(loom__moe_mlp_tune_key(&d, 2, 132, 129, key2, sizeof key2) && strcmp(key, key2) != 0);
  CHECK(!loom__moe_mlp_tune_key(&d, 2, 132, 100, key2, 10)); /* does not fit */
  /* a choice formatted and parsed back; the defaults' tiles (0) too */
  const loom_moe_mlp_choice_t each[4] = {{LOOM_MOE_MLP_FUSED, 64, 128, 256, 0},
                                         {LOOM_MOE_MLP_UNFUSED, 128, 64, 128, 0},
                                         {LOOM_MOE_MLP_FUSED, 0, 0, 0, 0},
                                         {LOOM_MOE_MLP_FUSED_ALL, 64, 0, 0, 33}};
  for (int i = 0; i < 4; ++i) {
    char text[80];
    loom__moe_mlp_tune_format(&each[i], text, sizeof text);
    loom_moe_mlp_choice_t back = {LOOM_MOE_MLP_AUTO, -1, -1, -1, -1};
    CHECK_RESULT(loom__moe_mlp_tune_parse(text, &back), LOOM_SUCCESS);
    CHECK(memcmp(&back, &each[i], sizeof back) == 0);
  }
  loom_moe_mlp_choice_t p;
  CHECK_RESULT(loom__moe_mlp_tune_parse("path=2 up=128 down=128x256", &p), LOOM_SUCCESS);
  CHECK_EQ_INT((int)p.path, LOOM_MOE_MLP_UNFUSED);
  CHECK_EQ_INT(p.up_bm, 128);
  CHECK_EQ_INT(p.down_bm * 1000 + p.down_bn, 128256);
  CHECK_EQ_INT(p.disp, 0);
  CHECK_RESULT(loom__moe_mlp_tune_parse("path=3 up=0 down=0x0 disp=16", &p), LOOM_SUCCESS);
  CHECK_EQ_INT((int)p.path * 1000 + p.disp, 3016);
  static const char *const bad[] = {"path=0 up=0 down=0x0",      "path=4 up=0 down=0x0",     "path=1 up=32 down=0x0",
                                    "path=1 up=64 down=96x128",  "path=1 up=64 down=64x192", "path=1 up=64 down=64x128 x",
                                    "path=1",                    "path=1 up=64 down=64",      "",
                                    "path=3 up=0 down=0x0 disp=-1", "path=3 up=0 down=0x0 disp=70000",
                                    "path=3 up=0 down=0x0 disp=8 y"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
    CHECK_RESULT(loom__moe_mlp_tune_parse(bad[i], &p), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("expected \"path=");
  }
  CHECK_RESULT(loom__moe_mlp_tune_parse(NULL, &p), LOOM_ERR_INVALID_ARGUMENT);
}

/* The untuned choice: fused below LOOM_MOE_ALL_TOKENS tokens, fused-all
 * from there on, the model's tiles and the dispatch's default blocks. */
LOOM_TEST(moe_mlp_untuned_default_by_tokens) {
  static const int64_t tokens[] = {0, 1, 128, 511, 512, 513, 4096, (int64_t)1 << 30};
  for (size_t i = 0; i < sizeof tokens / sizeof *tokens; ++i) {
    const loom_moe_mlp_choice_t c = loom__moe_mlp_default(tokens[i]);
    CHECK_EQ_INT((int)c.path, tokens[i] >= LOOM_MOE_ALL_TOKENS ? LOOM_MOE_MLP_FUSED_ALL : LOOM_MOE_MLP_FUSED);
    CHECK_EQ_INT(c.up_bm + c.down_bm + c.down_bn + c.disp, 0);
  }
}
