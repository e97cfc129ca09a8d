#define _DEFAULT_SOURCE /* usleep */
/*
 * hello_loom.c - the smallest loom program: one rank per process, as under
 * mpirun or torchrun. Rank and size come from LOOM_RANK/LOOM_SIZE (default
 * 0/1); with more than one rank, rank 0 writes the NCCL id to the file named
 * by LOOM_ID_FILE and the others read it. Creates a loom comm over the NCCL
 * comm, allocates symmetric memory, finds a peer's address and frees it all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <loom.h>

#define CHECK(call) do { loom_result_t r = (call); if (r != LOOM_SUCCESS) { \
  fprintf(stderr, "%s: %s: %s\n", #call, loom_result_string(r), loom_last_error()); return 1; } } while (0)

static int get_id(int rank, int size, ncclUniqueId *id) {
  const char *path = getenv("LOOM_ID_FILE");
  if (size == 1 || !path) return ncclGetUniqueId(id) == ncclSuccess ? 0 : 1;
  if (rank == 0) {
    FILE *f = fopen(path, "wb");
    if (ncclGetUniqueId(id) != ncclSuccess || !f || fwrite(id, sizeof *id, 1, f) != 1) return 1;
    return fclose(f);
  }
  for (int tries = 0; tries < 600; ++tries, usleep(100000)) {
    FILE *f = fopen(path, "rb");
    if (f && fread(id, sizeof *id, 1, f) == 1) return fclose(f);
    if (f) fclose(f);
  }
  return 1;
}

int main(void) {
  int rank = getenv("LOOM_RANK") ? atoi(getenv("LOOM_RANK")) : 0;
  int size = getenv("LOOM_SIZE") ? atoi(getenv("LOOM_SIZE")) : 1;
  ncclUniqueId id;
  ncclComm_t nccl;
  if (get_id(rank, size, &id) || cudaSetDevice(rank) != cudaSuccess ||
      ncclCommInitRank(&nccl, size, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: no GPU or NCCL comm\n", rank);
    return 1;
  }
  loom_comm_t comm;
  CHECK(loom_comm_create(nccl, NULL, &comm));          /* collective */
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  CHECK(loom_comm_get_info(comm, &info));
  void *buf, *peer_buf;
  CHECK(loom_malloc(comm, 64 << 20, &buf));            /* collective: symmetric memory */
  CHECK(loom_peer_ptr(comm, buf, (rank + 1) % size, &peer_buf));
  printf("rank %d/%d on %d SMs: my buffer %p, next rank's copy at %p\n", rank, size, info.sm_count, buf, peer_buf);
  CHECK(loom_free(comm, buf));
  CHECK(loom_comm_destroy(comm));
  ncclCommDestroy(nccl);
  return 0;
}
