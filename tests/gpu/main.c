/* main.c - the GPU test suite: runs every LOOM_TEST linked in; refuses to
 * run (exit 1, one line) where there is no GPU, so that "all skipped" is
 * never mistaken for a pass (`--list [filter]` prints the names anywhere). Each test runs in its own process (CUDA state
 * of one test never leaks into the next, a crash or hang fails one test). */
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "support/launch.h"

int main(int argc, char **argv) {
  const int listing = argc > 1 && !strcmp(argv[1], "--list"); /* names only: no GPU needed */
  if (!listing && loom_launch_gpu_count() == 0) {
    fprintf(stderr, "loom-test-gpu: no CUDA GPU found; the GPU suite needs at least one NVIDIA GPU "
                    "(two for the peer tests)\n");
    return 1;
  }
  /* Under mpirun each process is a rank and tests run in it; otherwise each
   * test runs in its own process. */
  int rank, size;
  return loom_test_main_opts(argc, argv, !loom_launch_under_mpi(&rank, &size));
}
