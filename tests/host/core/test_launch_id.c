/*
 * test_launch_id.c - the mpirun-mode id exchange of the launcher
 * (tools/common/launch.c): rank 0 publishes the NCCL id through a file, the
 * others read exactly those bytes; a reader with no writer gives up in time.
 * No GPU: the id is random bytes here.
 */
#define _DEFAULT_SOURCE /* usleep */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/test.h"
#include "support/launch.h"

LOOM_TEST(launch_id_file_handshake) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/loom-test-id-%d", (int)getpid());
  unlink(path);
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = (char)(rand() & 0xff);
  int fd[2];
  CHECK(pipe(fd) == 0);
  pid_t pid = fork();
  if (pid == 0) { /* a reader that starts before the writer */
    ncclUniqueId got;
    memset(&got, 0, sizeof got);
    int rc = loom_launch_share_id(1, path, &got, 10.0);
    int same = rc == 0 && memcmp(&got, &id, sizeof id) == 0;
    if (write(fd[1], &same, sizeof same) != (ssize_t)sizeof same) _exit(2);
    _exit(0);
  }
  usleep(100000);
  CHECK_EQ_INT(loom_launch_share_id(0, path, &id, 10.0), 0);
  int same = 0;
  CHECK(read(fd[0], &same, sizeof same) == (ssize_t)sizeof same);
  CHECK_EQ_INT(same, 1);
  int st = 0;
  waitpid(pid, &st, 0);
  close(fd[0]);
  close(fd[1]);
  unlink(path);

  /* nobody writes: the reader gives up after its timeout */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ncclUniqueId none;
  CHECK(loom_launch_share_id(1, path, &none, 0.3) != 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  CHECK(waited >= 0.3 && waited < 2.0);
}
