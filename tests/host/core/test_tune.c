#define _POSIX_C_SOURCE 200809L /* mkstemp */
/*
 * test_tune.c - host tests of the tuning cache (src/core/tune.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/test.h"
#include "core/comm.h"
#include "core/plan.h"
#include "core/tune.h"
#include "testing/hooks.h"

LOOM_TEST(tune_put_get_replace) {
  loom__tune_clear();
  char v[64];
  CHECK(!loom__tune_get("gemm sm90 m1 n8 k8", v, sizeof v));
  CHECK_RESULT(loom__tune_put("gemm sm90 m1 n8 k8", "tile=64x128"), LOOM_SUCCESS);
  CHECK(loom__tune_get("gemm sm90 m1 n8 k8", v, sizeof v) && !strcmp(v, "tile=64x128"));
  CHECK_RESULT(loom__tune_put("gemm sm90 m1 n8 k8", "tile=128x128"), LOOM_SUCCESS);
  CHECK(loom__tune_get("gemm sm90 m1 n8 k8", v, sizeof v) && !strcmp(v, "tile=128x128"));
  CHECK_RESULT(loom__tune_put("a=b", "x"), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom__tune_put("", "x"), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom__tune_put("k", "x\ny"), LOOM_ERR_INVALID_ARGUMENT);
  loom__tune_clear();
}

LOOM_TEST(tune_file_round_trip_and_errors) {
  char path[] = "/tmp/loom-tune-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  loom__tune_clear();
  CHECK_RESULT(loom__tune_put("ag_gemm w2 m1024", "split=4 tile=128x256"), LOOM_SUCCESS);
  CHECK_RESULT(loom__tune_put("gemm m64", "tile=64x256"), LOOM_SUCCESS);
  CHECK_RESULT(loom__tune_save(path), LOOM_SUCCESS);
  loom__tune_clear();
  CHECK_RESULT(loom__tune_load(path), LOOM_SUCCESS);
  char v[64];
  CHECK(loom__tune_get("ag_gemm w2 m1024", v, sizeof v) && !strcmp(v, "split=4 tile=128x256"));
  CHECK(loom__tune_get("gemm m64", v, sizeof v) && !strcmp(v, "tile=64x256"));
  FILE *f = fopen(path, "w");
  fprintf(f, "# comment\n\n  good key =  good value  \nno equals sign here\n");
  fclose(f);
  CHECK_RESULT(loom__tune_load(path), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG(":4: expected \"key = value\"");
  CHECK(loom__tune_get("good key", v, sizeof v) && !strcmp(v, "good value"));
  unlink(path);
  CHECK_RESULT(loom__tune_load(path), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("cannot open tuning file");
  loom__tune_clear();
}

LOOM_TEST(tune_words_round_trip_and_refusals) {
  const uint64_t w[8] = {0, 1, 0xffffffffffffffffull, 0x0123456789abcdefull, 42, 1ull << 63, 7, 0xdeadbeefull};
  char v[LOOM_TUNE_TEXT_BYTES];
  CHECK(loom__tune_format_words("algo", w, 8, v, sizeof v));
  CHECK(strlen(v) == 5 + 8 * 16);
  uint64_t back[8];
  memset(back, 0x5a, sizeof back);
  CHECK(loom__tune_parse_words(v, "algo", back, 8) && !memcmp(back, w, sizeof w));
  /* the value survives the file format (trimmed text) */
  CHECK_RESULT(loom__tune_put("cublaslt key", v), LOOM_SUCCESS);
  char got[LOOM_TUNE_TEXT_BYTES];
  CHECK(loom__tune_get("cublaslt key", got, sizeof got) && !strcmp(got, v));
  loom__tune_clear();
  CHECK(!loom__tune_format_words("algo", w, 8, v, 100)); /* does not fit */
  CHECK(!loom__tune_parse_words("algo=12", "algo", back, 8));             /* too short */
  CHECK(!loom__tune_parse_words("alg=0000000000000000", "algo", back, 1)); /* another name */
  CHECK(!loom__tune_parse_words("algo=000000000000000g", "algo", back, 1)); /* not hex */
  CHECK(!loom__tune_parse_words("algo=00000000000000000", "algo", back, 1)); /* one digit too many */
  CHECK(!loom__tune_parse_words(NULL, "algo", back, 1));
  CHECK(loom__tune_parse_words("algo=00000000000000FF", "algo", back, 1) && back[0] == 255);
}

