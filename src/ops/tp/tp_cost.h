/*
 * tp_cost.h - the bytes each path of GEMM + ReduceScatter moves, per rank:
 * the first half of a model of the paths (the second, the rates that turn
 * bytes and FLOPs into time, is fitted on measurements: docs/perf/tp.md,
 * "AUTO measured on held-out shapes"). Pure: host tests check it at any
 * world size, and AUTO may evaluate it on the host at plan creation.
 *
 * A rank computes the partial product C_r [m, n] = A_r [m, k] x B_r [k, n]
 * (its slice k of the contraction); the output shard of rank p is rows
 * [p S, (p+1) S) of sum_r C_r, S = ceil(m / W) (the last shards shorter:
 * the model takes S m / W, the mean). ab: bytes of an A/B element; cs: of
 * an output element (2 for bf16 / fp16, 4 for fp32).
 *
 * Per path (bytes of this rank's HBM: its own kernels' reads and writes
 * plus peers' accesses to its memory; link: bytes into this rank over
 * NVLink, which by symmetry equal the bytes out):
 *   GEMM (every path)   HBM  (m k + k n) ab + m n cs (the partial written
 *                       once; A and B read once: tiles re-read from L2 are
 *                       not HBM traffic)
 *   SEQUENTIAL          + NCCL's ring ReduceScatter of the partial: reads
 *                       it (m n cs), receives (W-1)/W m n cs into buffers
 *                       and reads them back while summing, writes the
 *                       shard (S n cs); link (W-1)/W m n cs
 *   SM_COPY (pull)      the owner's reduction reads its own partial rows
 *                       (S n cs) and every peer's (link (W-1) S n cs),
 *                       while the peers read this rank's partial rows of
 *                       their shards from its HBM ((W-1) S n cs), and
 *                       writes the shard (S n cs); SMs: the reduction's
 *                       blocks during the GEMM, every SM for the tail
 *   SM_ATOMIC           the epilogue adds fp32 into the owner's fp32
 *                       accumulator (red.global.add: W sources x S n x 4
 *                       bytes read and written at the owner; link (W-1) S
 *                       n 4), after it was zeroed (S n 4); then the shard
 *                       is converted (read S n 4, write S n cs); the
 *                       partial is never written (no m n cs)
 *   BULK_REDUCE         (not built yet: the path the model says to try)
 *                       the epilogue adds each tile into the owner's output
 *                       in its own type by bulk reductions
 *                       (cp.reduce.async.bulk): link (W-1) S n cs; at the
 *                       owner the shard zeroed at the call's start (S n
 *                       cs), then W read-modify-writes of S n cs (its own
 *                       tiles and the peers', in any order: addition into
 *                       zero needs no ordering between the sources); no
 *                       partial, no tail pass
 * `tail` is the bytes of work that can only start after the GEMM's last
 * tile: a reduction of the last wave's rows (SM_COPY: the tail reduction
 * over `last_wave_rows` rows; SEQUENTIAL: the whole ReduceScatter; the
 * in-epilogue paths: 0).
 */
#ifndef LOOM_OPS_TP_COST_H
#define LOOM_OPS_TP_COST_H

#include <stdint.h>

#include "core/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  LOOM__RS_PATH_SEQUENTIAL = 0,
  LOOM__RS_PATH_SM_COPY = 1,
  LOOM__RS_PATH_SM_ATOMIC = 2,
  LOOM__RS_PATH_BULK_REDUCE = 3
} loom__rs_path_t;

typedef struct loom__tp_bytes {
  double hbm;   /* bytes of this rank's HBM traffic (above) */
  double link;  /* bytes into this rank over NVLink (= out, by symmetry) */
  double flops; /* 2 m n k */
  double tail;  /* bytes moved by work that starts only after the GEMM's last tile */
} loom__tp_bytes_t;

/* The bytes of `path` for the shape; last_wave_rows: output rows of this
 * rank's shard whose tiles the GEMM's last wave computes (SM_COPY's tail).
 * Every count is >= 0; W = 1 moves nothing over NVLink. */
LOOM_HD loom__tp_bytes_t loom__tp_rs_bytes(loom__rs_path_t path, int64_t m, int64_t n, int64_t k, int32_t world,
                                          int32_t ab, int32_t cs, int64_t last_wave_rows) {
  const double W = world < 1 ? 1.0 : (double)world, M = (double)m, N = (double)n, K = (double)k;
  const double S = M / W, peers = W - 1.0;
  loom__tp_bytes_t b;
  b.flops = 2.0 * M * N * K;
  b.hbm = (M * K + K * N) * ab; /* A and B */
  b.link = 0.0, b.tail = 0.0;
  switch (path) {
    case LOOM__RS_PATH_SEQUENTIAL:
      b.hbm += M * N * cs;                                     /* the partial */
      b.hbm += M * N * cs + 2.0 * peers / W * M * N * cs + S * N * cs; /* the ring */
      b.link = peers / W * M * N * cs;
      b.tail = M * N * cs + 2.0 * peers / W * M * N * cs + S * N * cs;
      break;
    case LOOM__RS_PATH_SM_COPY: {
      const double lw = last_wave_rows < 0 ? 0.0 : (double)last_wave_rows;
      b.hbm += M * N * cs;                               /* the partial */
      b.hbm += S * N * cs + peers * S * N * cs + S * N * cs; /* own rows, peers' pulls, the shard */
      b.link = peers * S * N * cs;
      b.tail = (W + 1.0) * (lw < S ? lw : S) * N * cs;   /* the last wave's rows: W partials read, one written */
      break;
    }
    case LOOM__RS_PATH_SM_ATOMIC:
      b.hbm += S * N * 4.0 + 2.0 * W * S * N * 4.0 + S * N * 4.0 + S * N * cs;
      b.link = peers * S * N * 4.0;
      b.tail = S * N * 4.0 + S * N * cs; /* the conversion */
      break;
    case LOOM__RS_PATH_BULK_REDUCE:
      b.hbm += S * N * cs + 2.0 * W * S * N * cs; /* zeroed, then W read-modify-writes */
      b.link = peers * S * N * cs;
      break;
  }
  return b;
}

#ifdef __cplusplus
}
#endif

#endif /* LOOM_OPS_TP_COST_H */
