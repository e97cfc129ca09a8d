/*
 * prog.h - a compiled loom program: the plan's state and what the files of
 * its execution share.
 *
 *   prog_plan.c   the op (core/op.h): loom_prog_compile through the door;
 *                 check, resolve (the tuning cache's schedule where none
 *                 is named, lower, emit, compile), lay out, fill (the
 *                 arena, the peers' addresses, the kernels loaded);
 *                 loom_prog_plan_io
 *   prog_exec.c   loom_prog_run: the call's checks, the inputs peers
 *                 read copied into the arena, each unit in order, a timeout
 *                 named by its stage
 *   prog_gemm.c   a GEMM unit on this rank's pieces (loom_gemm, or cuBLASLt
 *                 for cublaslt+nccl; through zero-padded copies where k or
 *                 n is no multiple of 8)
 *   prog_coll.c   a COLL unit on this rank's pieces (loom's collective or
 *                 NCCL's)
 *   module.c      images loaded as CUDA libraries (once per process)
 *
 * The plan's workspace slice holds each kernel unit's words (cg_args.h) one
 * after the other; the arena (one loom_malloc allocation: the same offsets
 * on every rank) holds the lowering's buffers, then the GEMM units' padded
 * operands.
 */
#ifndef LOOM_CODEGEN_PROG_H
#define LOOM_CODEGEN_PROG_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/cg_args.h"
#include "core/op.h"
#include "lang/lower.h"

/* What a unit is on this rank. */
typedef struct loom_cg_unit_rt {
  int runs;            /* this rank launches it */
  uint32_t word0;      /* kernel: its words' first index among the plan's signals */
  uint32_t words;
  uint64_t key;        /* kernel: its image */
  const void *func;    /* kernel: loaded (cudaKernel_t) */
  int64_t work;        /* kernel: blocks its loops have work for on this rank */
  int blocks;          /* kernel: its grid on this rank (work, and what may be resident at once) */
  /* GEMM on this rank's pieces: C [m, n] = A [m, k] B [k, n] */
  int64_t m, n, k, k8, n8;
  int pad;             /* k or n no multiple of 8: through the padded operands */
  int64_t pad_a, pad_b, pad_c; /* their arena offsets */
  loom_plan_t coll;    /* COLL unit run by loom's collective: its plan */
} loom_cg_unit_rt_t;

typedef struct loom_cg_state {
  loom_prog_t prog;        /* the scheduled copy the lowering points into */
  loom__lw_prog_t lw;
  loom_cg_unit_rt_t *units; /* [lw.nunit] */
  char arch[16];
  int rank, q;             /* this rank, its index in its group */
  int64_t arena_bytes;     /* the lowering's buffers, then the padded GEMM operands */
  void *arena;             /* loom_malloc memory */
  char *arena_peer[LOOM_CG_MAX_RANKS];
  uint64_t fingerprint;
  double compile_ms;       /* NVRTC (or the caches) at resolve */
  int compiled, kernels;
  char tuned[LOOM__LANG_NAME]; /* the run the tuning cache named (prog_tune.h); "": none taken */
  char run[LOOM__LANG_NAME];   /* the run name of what the plan runs (named, tuned or the cost model's) */
  int bps;                     /* the run's knob: generated kernels' blocks per SM at most (0: the most) */
  int tune_gemms;              /* a plan of the tuner's: GEMM units tune a shape the tuning cache lacks first */
} loom_cg_state_t;

extern const loom_op_t loom__op_prog;

/* loom_prog_compile, for the tuner: tuned 0 leaves the tuning cache and the cost model alone (a NULL schedule is
 * the program as given) and makes the plan's GEMM units tune their shapes where the tuning cache lacks them
 * (loom__gemm_tuning, outside a capture); checked 1 skips the door's check (a description the door checked already: loom__plan_build). */
loom_result_t loom__cg_compile(loom_comm_t comm, loom_prog_t prog, const char *schedule, const char *bind, int tuned,
                               int checked, loom_plan_t *out);

/* prog_gemm.c: unit u's shape and padding on this rank (resolve); its run (execute). */
loom_result_t loom__cg_gemm_resolve(loom_cg_state_t *st, int u);
loom_result_t loom__cg_gemm_run(loom_plan_t plan, loom_cg_state_t *st, int u, const void *const *inputs,
                                void *const *outputs, cudaStream_t stream);
/* prog_coll.c: COLL unit u's run (execute). */
loom_result_t loom__cg_coll_run(loom_plan_t plan, loom_cg_state_t *st, int u, const void *const *inputs,
                                void *const *outputs, cudaStream_t stream);
/* The address on this rank of buffer b (the arena's, else the caller's input or output). */
char *loom__cg_buf_addr(const loom_cg_state_t *st, int b, const void *const *inputs, void *const *outputs);
/* Buffer b's bytes at c (its address: loom__cg_buf_addr) copied into the caller's outputs it has besides. */
loom_result_t loom__cg_copy_out(const loom_cg_state_t *st, int b, const char *c, size_t bytes, void *const *outputs,
                                cudaStream_t stream);

/* prog_exec.c: a call as loom_prog_run makes it, timed: ms[u] the time of unit u (events around each;
 * waits for the call; not inside a capture). For `loom run`. */
loom_result_t loom__cg_execute_timed(loom_plan_t plan, const void *const *inputs, void *const *outputs,
                                     cudaStream_t stream, float *ms, int cap);

/* module.c: image im loaded (once per process: a CUDA library is loaded into every context) and its kernel. */
loom_result_t loom__cg_module_kernel(const void *image, uint64_t key, const void **func);

#endif /* LOOM_CODEGEN_PROG_H */
