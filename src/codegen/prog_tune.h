/*
 * prog_tune.h - the tuner of loom programs (loom_prog_tune) and the
 * tuning-cache entry that an untuned loom_prog_compile takes.
 *
 *   prog_tune_key.c    (host) the entry's key and value, the schedule a
 *                      value names found again, the rank correlation
 *   prog_tune_cands.c  (host) a program's candidates: every schedule `loom
 *                      schedules` lists, scheduled and lowered, the ones
 *                      the code generator refuses left out with the reason,
 *                      and which of them take the program's inputs and
 *                      outputs as written
 *   prog_tune.c        the race on the GPUs (core/tune_rule.h), the entry
 *                      recorded, the table
 *
 * Key:   "prog <execute name> <hash> W<W> G<G> <sms>sm <arch>[ world] <bind>"
 *        e.g. "prog adam 1f0c2a9e3b7d4c15 W8 G1 132sm sm_90a N:1048576";
 *        hash: FNV-1a of the program's printed text (loom__lang_print) and
 *        of its own Schedule sections, so any change to the program is
 *        another key; bind: the sizes of the symbols its tensors use,
 *        sorted by name (":" for "=": a key holds no '='), or
 *        "bind#<hash>" where the key would pass LOOM_TUNE_TEXT_BYTES;
 *        "world": the ranks of a one-GPU world (whose times are not W
 *        GPUs': its entries are never taken by a comm of GPUs).
 * Value: "schedule=<name> depth=<D> max=<N> text=<hash>": the candidate
 *        by its run name (below) and the
 *        hash of the scheduled program's printed text, checked when the
 *        value is used (a value that no longer names that program is
 *        stale: warned and ignored).
 *
 * Run names (loom_prog_compile's schedule, the tuner's rows, the value):
 *   <schedule>[/b<N>]   a schedule as the listing names it ("unscheduled",
 *                       a Schedule section, or the search's "s41" at the
 *                       listing's bounds), its generated kernels' grids at
 *                       most N blocks per SM (1..LOOM_CG_BLOCKS_PER_SM; the
 *                       knob; none: as many as are resident, up to the most)
 *   sequential          the program as written as loom's ops one after
 *                       another: every program unit that is one plain
 *                       collective runs as loom_allreduce / _reduce_scatter
 *                       / _all_gather, MatMuls as loom_gemm, the rest as
 *                       generated kernels
 *   cublaslt+nccl       the same with NCCL's collectives and cuBLASLt's
 *                       GEMMs (a comm with an NCCL communicator)
 */
#ifndef LOOM_CODEGEN_PROG_TUNE_H
#define LOOM_CODEGEN_PROG_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/cg_args.h"
#include "lang/lang.h"
#include "lang/lower.h"

#define LOOM_CG_TUNE_DEPTH 6  /* the search's bounds, as `loom schedules` */
#define LOOM_CG_TUNE_MAX 200
#define LOOM_CG_TUNE_NOTE 160
#define LOOM_CG_RUN_SEQUENTIAL "sequential"
#define LOOM_CG_RUN_BASELINE "cublaslt+nccl"

/* What a run name says. */
typedef struct loom_cg_run {
  char schedule[LOOM__LANG_NAME]; /* "" (no name) or the schedule part */
  int lib;                        /* LOOM__LW_LIB_* */
  int bps;                        /* generated kernels' blocks per SM at most; 0: no knob */
} loom_cg_run_t;

/* One candidate: a schedule of the program, its runner and knob. */
typedef struct loom_cg_cand {
  char name[LOOM__LANG_NAME]; /* its run name: "unscheduled", a Schedule section's, the search's "s41", "s41/b2" */
  int own;                    /* a Schedule section of the program */
  loom__prog_t *q;            /* the program scheduled and typed; NULL where refused */
  double predicted_us;        /* the cost model's time */
  int refused;                /* left out before running: why in note */
  loom_result_t code;         /* the refusal's code (refused) */
  int eligible;               /* takes the program's inputs and outputs as written (row 0 does) */
  loom_cg_run_t run;          /* how it runs: a library runner (lib), a knob (bps); the cost model predicts neither */
  int kernels;                /* its generated kernels (a knob sizes their grids) */
  char note[LOOM_CG_TUNE_NOTE];
  uint64_t text;              /* hash of q's printed text */
  int ni, no;                 /* inputs, outputs */
  size_t in_bytes[LOOM_CG_MAX_PTRS], out_bytes[LOOM_CG_MAX_PTRS]; /* each whole (every piece fits) */
  int in_dtype[LOOM_CG_MAX_PTRS];
} loom_cg_cand_t;

/* Every candidate; c[0] is the program as written (the default). */
typedef struct loom_cg_cands {
  int n;
  loom_cg_cand_t *c;
} loom_cg_cands_t;

/* ---- prog_tune_cands.c --------------------------------------------------------------------- */

/* The candidates of typed program p at W ranks per group with sizes b:
 * the listing of loom__lang_list(p, W, b, depth, max), the unscheduled
 * program first, then the others cheapest first (the refused own schedules
 * last); each scheduled and lowered (loom__lw_lower: its protocols
 * checked) at W, and compared with c[0]'s inputs and outputs (names,
 * dtypes, every rank's piece). A candidate the language or the code
 * generator refuses is kept with refused = 1 and the refusal in note.
 * Then the program as written run by the libraries, where that is not the
 * unscheduled candidate again: "sequential" where it has a plain
 * collective, "cublaslt+nccl" where it has one or a MatMul (eligible). */
loom_result_t loom__cg_tune_candidates(loom__prog_t *p, int W, const loom__binding_t *b, int depth, int max,
                                       loom_cg_cands_t *out);
void loom__cg_tune_candidates_free(loom_cg_cands_t *c);
/* Appends to cs the knob's variants (blocks per SM 1 .. LOOM_CG_BLOCKS_PER_SM / 2, halving) of candidate i (a
 * copy of its program each); *added: how many. */
loom_result_t loom__cg_tune_knobs(loom_cg_cands_t *cs, int i, int *added);

/* ---- prog_tune_key.c ----------------------------------------------------------------------- */

/* FNV-1a of p's printed text (text_only) or of the text and p's own
 * Schedule sections (the key's hash); 0 where printing ran out of memory. */
uint64_t loom__cg_prog_hash(const loom__prog_t *p, int text_only);

/* The comm facts a key names. */
typedef struct loom_cg_tune_shape {
  int W, G, sms, world;
  char arch[16];
} loom_cg_tune_shape_t;

/* The key of program p with sizes b on shape s into key[cap]; 0 where p
 * could not be printed. */
int loom__cg_tune_key(const loom__prog_t *p, const loom__binding_t *b, const loom_cg_tune_shape_t *s, char *key,
                      size_t cap);
void loom__cg_tune_value(const char *schedule, int depth, int max, uint64_t text, char *out, size_t cap);
/* LOOM_ERR_INVALID_ARGUMENT naming the value where it is not one. */
loom_result_t loom__cg_tune_parse_value(const char *value, char schedule[LOOM__LANG_NAME], int *depth, int *max,
                                        uint64_t *text);

/* The shape of comm for a program of G groups of W ranks (the arch as the code generator compiles for). */
void loom__cg_tune_shape(loom_comm_t comm, int W, int G, loom_cg_tune_shape_t *s);

/* What an untuned compile of p with sizes b runs on shape s where the
 * tuning cache holds an entry for them: the program its value names
 * (*out, typed), its run (*run) and run name (name[]); else *out NULL. A
 * stale or malformed entry is warned about (fn names the caller) and gives
 * NULL. */
loom_result_t loom__cg_tuned_lookup(const loom__prog_t *p, const loom__binding_t *b, const loom_cg_tune_shape_t *s,
                                    const char *fn, loom__prog_t **out, loom_cg_run_t *run, char name[LOOM__LANG_NAME]);

/* What an untuned compile runs where the tuning cache has no entry: the
 * cost model's cheapest schedule in the listing (loom__lang_list at W, b,
 * depth, max) that lowers and takes the program's inputs and outputs as
 * written (*out, typed; its name in name[]); the program as written where
 * none does. */
loom_result_t loom__cg_default_program(loom__prog_t *p, int W, const loom__binding_t *b, int depth, int max,
                                       loom__prog_t **out, char name[LOOM__LANG_NAME]);

/* Run name `name` parsed into *run (NULL or "": all empty); 0 where it is
 * malformed (an empty schedule, a knob out of 1..LOOM_CG_BLOCKS_PER_SM, a
 * knob on a library runner). Pure. */
int loom__cg_run_parse(const char *name, loom_cg_run_t *run);
/* The run name of *run into out[cap]. Pure. */
void loom__cg_run_name(const loom_cg_run_t *run, char *out, size_t cap);
/* p with schedule `schedule` applied, typed (*out; NULL where p has no
 * schedule of that name, own or the search's at depth and max): "",
 * "unscheduled" and the library runners' names are the program as written. */
loom_result_t loom__cg_named_program(const loom__prog_t *p, const char *schedule, int depth, int max,
                                     loom__prog_t **out);

/* p scheduled as `value` says (typed) and its run (*run): *out NULL, and
 * why in why[cap], where the value names no schedule of p whose text
 * hashes as it says (stale); a failure only where the value does not parse
 * or memory ran out. */
loom_result_t loom__cg_tuned_program(const loom__prog_t *p, const char *value, loom__prog_t **out,
                                     loom_cg_run_t *run, char *why, size_t cap);

/* Spearman's rank correlation of x[n] and y[n] (ties take their mean
 * rank): the Pearson correlation of the ranks; NAN where n < 2 or either
 * side's ranks are all equal. Pure. */
double loom__rank_correlation(const double *x, const double *y, int n);

#endif /* LOOM_CODEGEN_PROG_TUNE_H */
