/*
 * test_ptr_check.c - host tests of core/ptr_check.h on a machine that may
 * have no GPU: NULL and host pointers are refused by name either way (without
 * a driver the runtime's own error is the refusal).
 */
#include <stdlib.h>

#include "tests/common/test.h"
#include "core/ptr_check.h"

LOOM_TEST(ptr_check_refuses_null_and_host_memory_by_name) {
  CHECK_RESULT(loom__check_device_ptr("loom_gemm", "a", NULL, 16), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: a=NULL");
  char *host = (char *)malloc(64);
  const loom_result_t r = loom__check_device_ptr("loom_gemm", "b", host, 64);
  /* no GPU or driver: cudaGetDevice fails (LOOM_ERR_CUDA); with one, a host
   * pointer is an invalid argument naming b */
  CHECK(r == LOOM_ERR_INVALID_ARGUMENT || r == LOOM_ERR_CUDA);
  if (r == LOOM_ERR_INVALID_ARGUMENT) CHECK_MSG("b=");
  free(host);
}
