/*
 * cg_args.h - what a generated kernel receives, shared by the host code that
 * launches it (prog_exec.c) and the kernel (NVRTC: through cg_device.cuh).
 *
 * A kernel unit's words in every rank's workspace, from sig_off (uint32):
 *   [0, 4)                   its loom_dev_epoch_t (the call's epoch, the
 *                            blocks' count at the end)
 *   [4 + slot]               its signals: arrived (slot 0), done (1),
 *                            ready[s] (2 + s) (lang/lower.h, LOOM__LWS_*)
 *   [4 + 2 + nsteps + s]     step s's count of the blocks that finished it
 * Buffers: the plan's arena at the same offset in every rank's memory
 * (arena[p]: rank p's, as this rank addresses it), and the caller's own
 * inputs and outputs (ptr[i]: input i, ptr[ninputs + j]: output j);
 * vec: 1 where every one of those is 16-byte aligned (the vector loops may
 * read and write them; emit_body.c).
 */
#ifndef LOOM_CODEGEN_CG_ARGS_H
#define LOOM_CODEGEN_CG_ARGS_H

#include <stdint.h>

#include "core/signal.h"

#define LOOM_CG_MAX_RANKS 64  /* ranks whose arenas travel as kernel arguments */
#define LOOM_CG_MAX_PTRS 48   /* the caller's inputs and outputs */
#define LOOM_CG_THREADS 256   /* threads of a generated kernel's blocks */
#define LOOM_CG_WORDS0 4      /* the epoch record's words before the signals */
#define LOOM_CG_VEC 8         /* elements of a vector body instance (16 bytes of a 16-bit type) */
#define LOOM_CG_BLOCKS_PER_SM 4 /* at most, where the kernel's registers allow them all resident */

/* Wait sites of generated kernels (core/signal.h: the language's range 128..191). The error record's
 * `signal` is the word's index in the workspace, which names the stage (prog_exec.c). */
#define LOOM_SITE_CG_ARRIVED 128 /* a rank's inputs of the stage readable (its kernel started) */
#define LOOM_SITE_CG_READY 129   /* a rank's step of the stage finished */
#define LOOM_SITE_CG_DONE 130    /* a rank done reading this rank's buffers */
#define LOOM_SITE_CG_BLOCKS 131  /* this rank's blocks finishing the step before */

typedef struct loom_cg_args {
  loom_dev_comm_t dc;
  uint64_t sig_off;                 /* byte offset of the unit's words in every rank's workspace */
  char *arena[LOOM_CG_MAX_RANKS];   /* every rank's arena, as this rank addresses it */
  void *ptr[LOOM_CG_MAX_PTRS];      /* this rank's inputs, then its outputs (NULL where it holds none) */
  uint32_t vec;                     /* every ptr[] 16-byte aligned */
} loom_cg_args_t;

#endif /* LOOM_CODEGEN_CG_ARGS_H */
