/*
 * nccl_device.cu - the parts of the comm that need NCCL's device API
 * (C++ headers): creating the device communicator, and reading where this
 * rank's kernels reach each peer's copy of a symmetric window.
 *
 * NCCL 2.28 has no host-side getter for peer addresses, so a one-thread
 * kernel evaluates ncclGetLsaPointer for every rank of the load/store team
 * (the NVLink domain) and the host maps team index -> world rank. Ranks
 * outside the team (other nodes) get NULL.
 */
#include <string.h>
#include <stdlib.h>

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include "comm.h"
#include "error.h"

/* lsa_ptrs [lsa_size]: base address of each team member's copy of `win`. */
__global__ void loom__window_lsa_pointers_kernel(ncclWindow_t win, int lsa_size, void **lsa_ptrs) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (int i = 0; i < lsa_size; ++i) lsa_ptrs[i] = ncclGetLsaPointer(win, 0, i);
}

extern "C" loom_result_t loom__window_peer_pointers(ncclComm_t nccl, ncclWindow_t win, int size,
                                                    void **peer_ptrs) {
  ncclTeam_t lsa = ncclTeamLsa(nccl);
  if (lsa.nRanks < 1 || lsa.nRanks > size)
    return loom__fail(LOOM_ERR_INTERNAL, "NCCL reported an LSA team of %d ranks in a comm of %d",
                      lsa.nRanks, size);
  void **dev = NULL;
  void **host = (void **)calloc((size_t)lsa.nRanks, sizeof(void *));
  if (!host) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of %d pointers failed", lsa.nRanks);
  loom_result_t r = LOOM_SUCCESS;
  cudaError_t e = cudaMalloc((void **)&dev, (size_t)lsa.nRanks * sizeof(void *));
  if (e == cudaSuccess) {
    loom__window_lsa_pointers_kernel<<<1, 1>>>(win, lsa.nRanks, dev);
    e = cudaGetLastError();
    if (e == cudaSuccess)
      e = cudaMemcpy(host, dev, (size_t)lsa.nRanks * sizeof(void *), cudaMemcpyDeviceToHost);
  }
  if (e != cudaSuccess) r = loom__cuda_fail((int)e, "reading peer window addresses", __FILE__, __LINE__);
  if (dev) cudaFree(dev);
  if (r == LOOM_SUCCESS) {
    for (int p = 0; p < size; ++p) peer_ptrs[p] = NULL;
    for (int i = 0; i < lsa.nRanks; ++i) {
      int world = ncclTeamRankToWorld(nccl, lsa, i);
      if (world < 0 || world >= size) {
        r = loom__fail(LOOM_ERR_INTERNAL, "LSA team index %d maps to world rank %d of %d", i, world, size);
        break;
      }
      peer_ptrs[world] = host[i];
    }
  }
  free(host);
  return r;
}

extern "C" loom_result_t loom__lsa_team(ncclComm_t nccl, int *lsa_rank, int *lsa_size) {
  ncclTeam_t lsa = ncclTeamLsa(nccl);
  *lsa_rank = lsa.rank;
  *lsa_size = lsa.nRanks;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__devcomm_create(ncclComm_t nccl, void **devcomm) {
  ncclDevComm_t *dc = (ncclDevComm_t *)calloc(1, sizeof(ncclDevComm_t));
  if (!dc) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of ncclDevComm failed");
  /* 2.28 has no initializer macro (zero is its default); 2.29+ headers have
   * one that fills size/magic/version fields, which zero would leave
   * invalid. */
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER
  ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
  ncclDevCommRequirements_t reqs;
  memset(&reqs, 0, sizeof reqs);
#endif
  reqs.lsaMultimem = false;      /* never NVLink multicast */
  ncclResult_t n = ncclDevCommCreate(nccl, &reqs, dc);
  if (n != ncclSuccess) {
    free(dc);
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "ncclDevCommCreate failed (%s): NCCL's device API and symmetric memory do not "
                      "work on this system (needs NCCL >= 2.28 built with device API support, "
                      "CUDA driver with VMM, and GPUs that can map each other's memory)",
                      ncclGetErrorString(n));
  }
  *devcomm = dc;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__devcomm_destroy(ncclComm_t nccl, void *devcomm) {
  if (!devcomm) return LOOM_SUCCESS;
  ncclResult_t n = ncclDevCommDestroy(nccl, (ncclDevComm_t *)devcomm);
  free(devcomm);
  if (n != ncclSuccess) return loom__nccl_fail((int)n, "ncclDevCommDestroy", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}
