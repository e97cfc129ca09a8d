/*
 * baseline_coll.c - NCCL collectives as loom calls (see baseline.h).
 *
 * The sequential baseline of every fused op is "NCCL collective, then
 * cuBLASLt GEMM" (or the reverse); these wrappers give the benchmarks and
 * the fallback paths one loom_result_t-returning entry per collective. Each
 * checks its arguments before touching NCCL (so a host test can exercise the
 * checks without a GPU), maps loom_dtype_t onto ncclDataType_t and turns an
 * NCCL error into LOOM_ERR_NCCL with the call's text. All are stream-ordered
 * and graph-capturable as NCCL's own calls are; reductions are ncclSum.
 */
#include "baseline/baseline.h"
#include "core/error.h"

#include <stdint.h>

/* loom dtype -> NCCL dtype; INVALID_ARGUMENT naming fn for an unknown one. */
static loom_result_t base_nccl_type(const char *fn, loom_dtype_t t, ncclDataType_t *out) {
  switch (t) {
    case LOOM_FP32: *out = ncclFloat32; return LOOM_SUCCESS;
    case LOOM_FP16: *out = ncclFloat16; return LOOM_SUCCESS;
    case LOOM_BF16: *out = ncclBfloat16; return LOOM_SUCCESS;
  }
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: dtype=%d is unknown: must be LOOM_FP32, LOOM_FP16 or LOOM_BF16",
                    fn, (int)t);
}

/* The checks every wrapper shares: comm, dtype, buffers (when count > 0). */
static loom_result_t base_coll_check_buffers(const char *fn, ncclComm_t nccl, const void *send, const void *recv,
                                            size_t count, loom_dtype_t dtype, ncclDataType_t *nt) {
  if (!nccl) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: nccl=NULL must be an NCCL communicator", fn);
  LOOM_TRY(base_nccl_type(fn, dtype, nt));
  if (count > 0 && !send) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: send=NULL with count=%zu", fn, count);
  if (count > 0 && !recv) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: recv=NULL with count=%zu", fn, count);
  return LOOM_SUCCESS;
}

/* Ranks of the comm; INVALID_ARGUMENT if count x ranks x element overflows. */
static loom_result_t base_coll_world(const char *fn, ncclComm_t nccl, size_t count, loom_dtype_t dtype, int *world) {
  LOOM_NCCL(ncclCommCount(nccl, world));
  size_t es = loom_dtype_size(dtype);
  if (*world > 0 && count > SIZE_MAX / es / (size_t)*world)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: count=%zu x %d ranks overflows the buffer size", fn,
                      count, *world);
  return LOOM_SUCCESS;
}

/* A wrapper's argument checks before it touches NCCL: the comm, dtype and
 * buffers (giving the NCCL dtype); with world non-NULL (a per-rank count)
 * also the comm's ranks and the count x ranks overflow check. */
static loom_result_t base_coll_check_args(const char *fn, ncclComm_t nccl, const void *send, const void *recv,
                                          size_t count, loom_dtype_t dtype, ncclDataType_t *nt, int *world) {
  LOOM_TRY(base_coll_check_buffers(fn, nccl, send, recv, count, dtype, nt));
  if (world) LOOM_TRY(base_coll_world(fn, nccl, count, dtype, world));
  return LOOM_SUCCESS;
}

loom_result_t loom__base_allgather(ncclComm_t nccl, const void *send, void *recv, size_t count_per_rank,
                                   loom_dtype_t dtype, cudaStream_t stream) {
  const char *fn = "loom__base_allgather";
  ncclDataType_t nt;
  int world = 0;
  LOOM_TRY(base_coll_check_args(fn, nccl, send, recv, count_per_rank, dtype, &nt, &world));
  LOOM_NCCL(ncclAllGather(send, recv, count_per_rank, nt, nccl, stream));
  return LOOM_SUCCESS;
}

loom_result_t loom__base_reducescatter(ncclComm_t nccl, const void *send, void *recv, size_t count_per_rank,
                                       loom_dtype_t dtype, cudaStream_t stream) {
  const char *fn = "loom__base_reducescatter";
  ncclDataType_t nt;
  int world = 0;
  LOOM_TRY(base_coll_check_args(fn, nccl, send, recv, count_per_rank, dtype, &nt, &world));
  LOOM_NCCL(ncclReduceScatter(send, recv, count_per_rank, nt, ncclSum, nccl, stream));
  return LOOM_SUCCESS;
}

loom_result_t loom__base_allreduce(ncclComm_t nccl, const void *send, void *recv, size_t count,
                                   loom_dtype_t dtype, cudaStream_t stream) {
  ncclDataType_t nt;
  LOOM_TRY(base_coll_check_args("loom__base_allreduce", nccl, send, recv, count, dtype, &nt, NULL));
  LOOM_NCCL(ncclAllReduce(send, recv, count, nt, ncclSum, nccl, stream));
  return LOOM_SUCCESS;
}

loom_result_t loom__base_alltoall(ncclComm_t nccl, const void *send, void *recv, size_t count_per_peer,
                                  loom_dtype_t dtype, cudaStream_t stream) {
  const char *fn = "loom__base_alltoall";
  ncclDataType_t nt;
  int world = 0;
  LOOM_TRY(base_coll_check_args(fn, nccl, send, recv, count_per_peer, dtype, &nt, &world));
  if (count_per_peer == 0) return LOOM_SUCCESS;
  const size_t block = count_per_peer * loom_dtype_size(dtype), total = block * (size_t)world;
  const uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
  if (s < r + total && r < s + total)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: send=%p and recv=%p overlap (%zu bytes each): AlltoAll cannot run in place", fn,
                      send, recv, total);
  LOOM_NCCL(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  const char *what = "";
  for (int p = 0; p < world && first == ncclSuccess; ++p) {
    ncclResult_t e = ncclSend((const char *)send + (size_t)p * block, count_per_peer, nt, p, nccl, stream);
    if (e != ncclSuccess) {
      first = e, what = "ncclSend (AlltoAll)";
      break;
    }
    e = ncclRecv((char *)recv + (size_t)p * block, count_per_peer, nt, p, nccl, stream);
    if (e != ncclSuccess) first = e, what = "ncclRecv (AlltoAll)";
  }
  ncclResult_t end = ncclGroupEnd(); /* always closes the group, even after a failed call inside */
  if (first != ncclSuccess) return loom__nccl_fail((int)first, what, __FILE__, __LINE__);
  if (end != ncclSuccess) return loom__nccl_fail((int)end, "ncclGroupEnd (AlltoAll)", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}
