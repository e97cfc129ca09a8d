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
 *        as the listing names it ("unscheduled", a Schedule section, or
 *        the search's "s41" at depth D and at most N programs) and the
 *        hash of the scheduled program's printed text, checked when the
 *        value is used (a value that no longer names that program is
 *        stale: warned and ignored).
 */
#ifndef LOOM_CODEGEN_PROG_TUNE_H
#define LOOM_CODEGEN_PROG_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/cg_args.h"
#include "lang/lang.h"

#define LOOM_CG_TUNE_DEPTH 6  /* the search's bounds, as `loom schedules` */
#define LOOM_CG_TUNE_MAX 200
#define LOOM_CG_TUNE_NOTE 160

/* One candidate: a schedule of the program. */
typedef struct loom_cg_cand {
  char name[LOOM__LANG_NAME]; /* "unscheduled", a Schedule section's name, or the search's "s41" */
  int own;                    /* a Schedule section of the program */
  loom__prog_t *q;            /* the program scheduled and typed; NULL where refused */
  double predicted_us;        /* the cost model's time */
  int refused;                /* left out before running: why in note */
  loom_result_t code;         /* the refusal's code (refused) */
  int eligible;               /* takes the program's inputs and outputs as written (row 0 does) */
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
 * generator refuses is kept with refused = 1 and the refusal in note. */
loom_result_t loom__cg_tune_candidates(loom__prog_t *p, int W, const loom__binding_t *b, int depth, int max,
                                       loom_cg_cands_t *out);
void loom__cg_tune_candidates_free(loom_cg_cands_t *c);

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

/* What an untuned compile of p with sizes b runs on shape s: where the
 * tuning cache holds an entry for them, the program its value names
 * (*out, typed; its schedule's name in name[]); else *out NULL (the
 * program as written). A stale or malformed entry is warned about (fn
 * names the caller) and gives NULL. */
loom_result_t loom__cg_tuned_lookup(const loom__prog_t *p, const loom__binding_t *b, const loom_cg_tune_shape_t *s,
                                    const char *fn, loom__prog_t **out, char name[LOOM__LANG_NAME]);

/* p scheduled as `value` says (typed): *out NULL, and why in why[cap],
 * where the value names no schedule of p whose text hashes as it says
 * (stale); a failure only where the value does not parse or memory ran
 * out. */
loom_result_t loom__cg_tuned_program(const loom__prog_t *p, const char *value, loom__prog_t **out, char *why,
                                     size_t cap);

/* Spearman's rank correlation of x[n] and y[n] (ties take their mean
 * rank): the Pearson correlation of the ranks; NAN where n < 2 or either
 * side's ranks are all equal. Pure. */
double loom__rank_correlation(const double *x, const double *y, int n);

#endif /* LOOM_CODEGEN_PROG_TUNE_H */
