/* test_runner_filter.c - the test runner's name filter (tests/common/test.c):
 * parts, exact names and exclusions, as `loom-test-gpu FILTER` and
 * bench/diag/gpu_test_split.sh use them. */
#include "tests/common/test.h"

LOOM_TEST(test_runner_filter_parts_exact_names_and_exclusions) {
  const char *n = "gpu_world_tp_ag_gemm_matches_reference_w8";
  CHECK(loom_test_filter_match("", n));                       /* no item: every name */
  CHECK(loom_test_filter_match("world", n));
  CHECK(!loom_test_filter_match("coll", n));
  CHECK(loom_test_filter_match("coll,tp_ag", n));             /* any part */
  CHECK(!loom_test_filter_match("world,!_w8", n));            /* an exclusion wins */
  CHECK(loom_test_filter_match("!_w2", n));                   /* exclusions alone: every other name */
  CHECK(!loom_test_filter_match("_w2,!world", n));
  CHECK(loom_test_filter_match("_w2,!world", "gpu_tp_ag_gemm_matches_reference_w2"));
  CHECK(loom_test_filter_match("=gpu_world_tp_ag_gemm_matches_reference_w8", n));
  CHECK(!loom_test_filter_match("=gpu_world_tp_ag_gemm", n)); /* exact: not a prefix */
  CHECK(loom_test_filter_match("=a,=gpu_world_tp_ag_gemm_matches_reference_w8,=b", n));
  CHECK(!loom_test_filter_match("=gpu_world_tp_ag_gemm_matches_reference_w8,!world", n));
  CHECK(loom_test_filter_match(",,world,", n));               /* empty items are no items */
}
