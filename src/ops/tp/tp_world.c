/*
 * tp_world.c - the transfer the tensor-parallel ops run in a world of ranks
 * on one GPU (core/world.h): one without NCCL.
 *
 * The sequential and decomposed AllGather+GEMM and GEMM+ReduceScatter run
 * NCCL, which a world has not. Asked for, they are refused; chosen
 * by AUTO (one rank, shards shorter than a tile, a shape where fusing would
 * hide nothing), the fused default takes their place (AG: the copy engine;
 * RS: the bulk reduction where its shape rule holds, else SM copies; the
 * plan turns BULK_REDUCE into SM_COPY where the sm90 GEMM does not run), so
 * every description AUTO takes runs in a world. GEMM+AllReduce's sequential
 * path is a GEMM and loom_allreduce, without NCCL: it runs as it is.
 * Its GEMM is loom's: cuBLASLt loads a kernel at its first use of a type
 * pair even under CUDA_MODULE_LOADING=EAGER, and that load waits for every
 * running kernel (dev/world/host_calls_probe.cu's cuBLASLt row: 1.17 s
 * against a 1 s spin on an H200), another rank's kernel waiting for this
 * rank included; asked for by name, cuBLASLt is refused, and AUTO takes
 * loom's GEMM.
 * A fused AllGather+GEMM on the sm80 GEMM path is refused: that kernel runs
 * a block per tile, each waiting for its rows, so it may launch more
 * waiting blocks than the rank's share of the SMs holds, and they could
 * fill the GPU before the peers' copies start.
 */
#include "core/comm.h"
#include "core/error.h"
#include "core/world.h"
#include "gemm/gemm.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

/* The GEMM path desc's local GEMM takes (LOOM__PATH_BASE where none can
 * carry hooks or the GPU cannot be asked). */
static loom__gemm_path_t tp_world_gemm_path(const char *fn, const loom_tp_desc_t *desc) {
  const loom_gemm_desc_t g = loom__tp_gemm_desc(desc);
  loom__gemm_path_t path = LOOM__PATH_BASE;
  if (loom__gemm_validate_desc(fn, &g) != LOOM_SUCCESS || loom__gemm_path(&g, &path) != LOOM_SUCCESS)
    return LOOM__PATH_BASE;
  return path;
}

loom_result_t loom__tp_world_transfer(const char *fn, loom_comm_t comm, const loom_tp_desc_t *desc, int kind,
                                      loom_tp_transfer_t *t) {
  if (!comm->world) return LOOM_SUCCESS;
  if (*t == LOOM_TP_DECOMPOSED) {
    if (desc->transfer == LOOM_TP_DECOMPOSED)
      return loom__world_unsupported(comm, fn, "desc->transfer=LOOM_TP_DECOMPOSED",
                                     "the decomposed path runs NCCL's send, receive and reduce; take a fused "
                                     "transfer or LOOM_TP_AUTO");
    *t = LOOM_TP_SEQUENTIAL; /* AUTO's: the fused default below takes its place */
  }
  const int seq = *t == LOOM_TP_SEQUENTIAL && kind != LOOM__TP_AR;
  if (seq && desc->transfer == LOOM_TP_SEQUENTIAL)
    return loom__world_unsupported(comm, fn, "desc->transfer=LOOM_TP_SEQUENTIAL",
                                   "the sequential path runs NCCL's collectives; take a fused transfer or "
                                   "LOOM_TP_AUTO");
  if (kind == LOOM__TP_AR && desc->sequential_gemm == LOOM_TP_GEMM_CUBLASLT &&
      (desc->transfer == LOOM_TP_SEQUENTIAL || desc->transfer == LOOM_TP_AUTO))
    return loom__world_unsupported(comm, fn, "desc->sequential_gemm=LOOM_TP_GEMM_CUBLASLT",
                                   "cuBLASLt loads a kernel at its first use, which waits for every running kernel, "
                                   "another rank's waiting one included; take LOOM_TP_GEMM_LOOM or LOOM_TP_GEMM_AUTO");
  if (comm->detached) return LOOM_SUCCESS; /* a test world: the plan stops before it would run */
  const loom__gemm_path_t path = tp_world_gemm_path(fn, desc);
  if (seq) {
    if (path == LOOM__PATH_BASE)
      return loom__world_unsupported(comm, fn, "desc->transfer=LOOM_TP_AUTO",
                                     "the fused transfers need loom's GEMM kernels (compute capability >= 8.0) and "
                                     "the sequential path NCCL");
    *t = kind == LOOM__TP_AG                           ? LOOM_TP_COPY_ENGINE
         : loom__tp_bulk_shape_ok(desc->m, comm->size) ? LOOM_TP_BULK_REDUCE
                                                       : LOOM_TP_SM_COPY;
  }
  if (kind == LOOM__TP_AG && *t != LOOM_TP_SEQUENTIAL && path == LOOM__PATH_SM80)
    return loom__world_unsupported(comm, fn, "a fused AllGather+GEMM on the sm80 GEMM path",
                                   "its kernel runs a block per tile, each waiting for its rows, more than the "
                                   "rank's share of the SMs holds (run on sm90, LOOM_GEMM_PATH unset)");
  return LOOM_SUCCESS;
}

int loom__tp_world_keeps_fused(loom_comm_t comm, int kind) { return comm->world && kind != LOOM__TP_AR; }

loom_tp_gemm_t loom__tp_world_gemm(loom_comm_t comm, loom_tp_gemm_t g) {
  return comm->world && g == LOOM_TP_GEMM_CUBLASLT ? LOOM_TP_GEMM_LOOM : g;
}
