/*
 * op.h - the one door: the table every op gives core, the one sequence that
 * makes a plan from it (loom__plan_make), and the entry and exit every call
 * of every op goes through.
 *
 * A plan is made in one sequence, the same for every op:
 *   begin     out and comm checked (the caller's misuse on this rank)
 *   check     the description, once, a function of the arguments and the
 *             comm's facts (size, rank, SMs, reachability) alone; never of a
 *             path the plan would resolve to
 *   tune      only where the op has a tuner and tuning is asked for
 *             (LOOM_TUNE=1, a description that leaves its choices to loom, no
 *             tuning-cache entry): the tuner times candidate plans it makes
 *             through loom__plan_build, never through an entry, so no tuner
 *             re-enters the door
 *   resolve   the op's state from the checked description: its own copy of
 *             the description (read from here on, never the caller's), the
 *             choices (AUTO, the tuning cache), this rank's part, rank-local
 *             checks of the memory the description names
 *   lay out   the plan's signal words and staging bytes, and the fingerprint
 *             of what every rank must have resolved alike
 *   agree     loom__plan_create: the workspace slice and the agreement
 *   fill      everything beyond the slice (buffers, peer tables, kernels
 *             preloaded); the plan's `done` event is made just before
 * A refusal before `agree` answers the agreement (loom__comm_refuse), so the
 * ranks that accepted never wait for one that refused; after it, the plan is
 * abandoned (destroyed, its state released) and the failure returned.
 *
 * A call: loom__call_enter (a live plan of the op or family, the comm's
 * sticky error), the op's own argument checks, loom__plan_next_epoch, the
 * launches, loom__call_exit (the plan's `done` event recorded, as a graph
 * node when the stream is capturing).
 */
#ifndef LOOM_CORE_OP_H
#define LOOM_CORE_OP_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ops that share call entries and an info call (the tensor-parallel
 * ops, the collectives, the optimizers): a plan of any of them passes where
 * the family is asked for. */
typedef struct loom_op_family {
  const char *name;  /* "tp" */
  const char *plans; /* "an ag_gemm, gemm_rs or gemm_ar plan": messages */
} loom_op_family_t;

/* What an op's layout gives the agreement. */
typedef struct loom_plan_layout {
  uint32_t nsignals;    /* uint32 signal words at the front of the slice */
  size_t staging_bytes; /* workspace bytes after the signals */
  uint64_t fingerprint; /* what every rank must have resolved alike (loom__fnv64) */
} loom_plan_layout_t;

typedef struct loom_op loom_op_t;
struct loom_op {
  const char *name;                 /* "ag_gemm": the plan's op, messages */
  const char *plan_fn;              /* "loom_plan_ag_gemm": messages */
  const loom_op_family_t *family;   /* NULL: the op is its own family */
  int kind;                         /* the op within its family (the family's enum) */
  size_t state_bytes;               /* the op state, zeroed by the door */
  const char *differ;               /* what every rank must pass alike (the agreement's message) */
  /* The description, from the arguments and comm's facts alone. */
  loom_result_t (*check)(const loom_op_t *op, loom_comm_t comm, const void *desc);
  /* Optional: 1 where tuning is asked for (desc checked, comm not detached,
   * LOOM_TUNE=1 already seen by the door), and the tuner. */
  int (*tune_asked)(const loom_op_t *op, loom_comm_t comm, const void *desc);
  loom_result_t (*tune)(const loom_op_t *op, loom_comm_t comm, const void *desc, cudaStream_t stream);
  /* The state of a checked description (not collective). */
  loom_result_t (*resolve)(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state);
  /* Signals, staging and the fingerprint of a resolved state. */
  loom_result_t (*lay_out)(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay);
  /* After the agreement, on every rank (collective steps allowed). */
  loom_result_t (*fill)(loom_plan_t plan, void *state);
  /* Frees what resolve..fill took (the door frees the state itself); runs
   * after the plan's last call has completed. Must take a state stopped at
   * any step. */
  void (*release)(loom_comm_t comm, void *state);
  /* Optional: the plan's INFO line. */
  void (*describe)(loom_plan_t plan, const void *state);
  /* Optional: a short label of a resolved state for the stage traces'
   * lines (trace.h), e.g. "512 x 14336 x 8192, LOOM_TP_COPY_ENGINE". */
  void (*label)(const void *state, char *out, size_t cap);
};

/* The door: check `desc` once, tune if asked, resolve, lay out, agree, fill
 * (collective: every rank calls it with the same op). *out is NULL on any
 * failure. */
loom_result_t loom__plan_make(loom_comm_t comm, const loom_op_t *op, const void *desc, loom_plan_t *out);

/* The door's lower half, for a description checked already (the tuners'
 * candidates, built from a checked description and a choice): resolve, lay
 * out, agree, fill. Collective. */
loom_result_t loom__plan_build(loom_comm_t comm, const loom_op_t *op, const void *desc, loom_plan_t *out);

/* An op's tuning entry (loom_ag_gemm_tune, ...): comm and desc checked
 * (once), the stream not capturing, then op->tune. Collective. */
loom_result_t loom__plan_tune(loom_comm_t comm, const loom_op_t *op, const char *fn, const void *desc,
                              cudaStream_t stream);

/* The op state of a live plan of `op` (or, op NULL, of any op of `family`);
 * LOOM_ERR_INVALID_ARGUMENT naming what the plan is otherwise. No comm
 * check (the info calls). */
loom_result_t loom__plan_state(loom_plan_t plan, const char *fn, const loom_op_family_t *family, const loom_op_t *op,
                               void **state);

/* A call's entry: loom__plan_state, then the comm's sticky error, then
 * the call's stage trace started on `stream` (trace.h; LOOM_DEBUG=TRACE). */
loom_result_t loom__call_enter(loom_plan_t plan, const char *fn, const loom_op_family_t *family, const loom_op_t *op,
                               cudaStream_t stream, void **state);

/* A call's exit: the plan's `done` event recorded on stream (inside a
 * capture as an event node, so replays record it too); *capturing (where
 * not NULL): whether it was; then the trace's last mark. */
loom_result_t loom__call_exit(loom_plan_t plan, cudaStream_t stream, int *capturing);

/* Waits for the plan's last call (its `done` event); LOOM_SUCCESS where it
 * has none (a test comm). */
loom_result_t loom__plan_wait_last_call(loom_plan_t plan, const char *fn);

/* The op a live plan was made by (NULL for NULL). */
const loom_op_t *loom__plan_op(loom_plan_t plan);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_OP_H */
