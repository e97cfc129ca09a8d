/*
 * lang_cases.h - the programs `loom-bench lang` times: each a loom program
 * whose generated code computes what one of loom's hand-written ops
 * computes, so that the two run side by side on the same shapes.
 *
 *   ar_norm    AllReduce + bias + dropout + residual + RMSNorm (the suite's
 *              program; its Schedule `fused` makes it one kernel) against
 *              loom_allreduce with that epilogue and desc.norm RMS
 *   adam       examples/lang/adam.loom (the paper's Figure 6, with its
 *              RS-Opt-AG schedule `best`) against loom_adam_step: the same
 *              update at step 1 (its bias correction is the program's
 *              1 - beta constants), no weight decay
 *   lamb       examples/lang/lamb.loom against loom_lamb_step with
 *              bias_correction 0, weight decay 0.01 (decoupled), eps 1e-6:
 *              the program's update
 *   gemm_bias  MatMul + bias (the suite's program) against loom_gemm with
 *              the bias in its epilogue
 *   mp_layer, mp_layer_b16, mp_layer_bf16
 *              the CoCoNet paper's Figure 11: examples/lang/model_parallel.loom
 *              (Figure 3's layer out = Dropout(AllReduce(MatMul(in, w)) + b,
 *              0.1) + r) at H = 3072, S = 1024, B = 8 and 16 in FP16, and
 *              with BF16 tensors at H = 8192, B = 8, against loom_gemm_ar
 *              (the same bias, dropout mask and residual in its epilogue).
 *              Four generated rows each: prefixes of its Schedule `best`
 *              (Figure 4's schedules): MM+AR+C (its first statement, fuse),
 *              MM+RS+C+AG (3: + split, reorder), fuse(RS+C+AG) (4: +
 *              fuseComm), overlap(MM, fuse(RS+C+AG)) (all 5)
 * The example programs' texts are held here as they are in examples/lang
 * (the suite runs wherever it is installed; model_parallel's once, as a
 * macro of its dtype, the BF16 case that text with BF16 for FP16); the host
 * test checks that they still are.
 *
 * Generated rows: a case's `prefixes` name schedule prefixes, each a row
 * (loom_prog_compile takes a Schedule by name, whole): lang_case_schedule
 * applies the first `steps` statements of the case's Schedule to the
 * program, and the suite compiles that scheduled program as written. A case
 * without prefixes has one row: its whole Schedule (or none).
 *
 * Checks: ar_norm, gemm_bias and the mp_layer cases compare the generated outputs with the
 * hand-written op's on the same inputs; adam and lamb (whose hand-written
 * op keeps its moments inside the plan, zero at the start) compare with
 * the CPU interpreter, at the timed sizes where the interpreter can (at
 * most LANG_INTERP_MAX elements: lang_case_check_bind), else at
 * check_bind.
 *
 * Plain C, no CUDA code (the language on the host, src/lang): linked into
 * loom-bench and the host tests.
 */
#ifndef LOOM_SUPPORT_LANG_CASES_H
#define LOOM_SUPPORT_LANG_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lang_hand {
  LANG_HAND_ALLREDUCE_NORM = 0,
  LANG_HAND_ADAM = 1,
  LANG_HAND_LAMB = 2,
  LANG_HAND_GEMM_BIAS = 3,
  LANG_HAND_GEMM_AR = 4
} lang_hand_t;

/* One generated row of a case: the first `steps` statements of the case's Schedule. */
typedef struct lang_prefix {
  const char *label; /* the row's impl is "generated:<label>" */
  int steps;         /* >= 1 */
} lang_prefix_t;

/* The most generated rows of a case. */
#define LANG_ROWS_MAX 8

typedef struct lang_case {
  const char *name;       /* "ar_norm": the rows' op, --case */
  const char *hand;       /* the hand-written op it is compared with, in words */
  lang_hand_t kind;
  const char *example;    /* examples/lang/<example>.loom that `text` is, or "" (the suite's own program) */
  const char *text;       /* the program */
  const char *schedule;   /* its Schedule section the generated row runs ("": the program as written) */
  const char *bind;       /* the sizes timed */
  const char *quick_bind; /* with --quick */
  const char *check_bind; /* the sizes the interpreter checks where the timed ones are too large for it */
  int check_hand;         /* 1: the outputs against the hand-written op's; 0: against the interpreter */
  const char *as_dtype;   /* "BF16": examples/lang/<example>.loom with its FP16 written BF16; "": as it is */
  const lang_prefix_t *prefixes; /* the generated rows (NULL: one, the whole schedule) */
  int nprefix;
} lang_case_t;

int lang_case_count(void);
/* Case i (NULL out of range). */
const lang_case_t *lang_case(int i);
/* The case called name, NULL if none. */
const lang_case_t *lang_case_find(const char *name);
/* The size `sym` has in a bind ("R=8192,C=4096"), -1 where it has none. */
int64_t lang_bind_size(const char *bind, const char *sym);

/* The most elements (the product of a bind's sizes) the CPU interpreter checks. */
#define LANG_INTERP_MAX ((int64_t)1 << 21)

/* The sizes case c's outputs are checked at against the interpreter when
 * `bind` is timed: bind itself where the product of its sizes is at most
 * LANG_INTERP_MAX, else c->check_bind. */
const char *lang_case_check_bind(const lang_case_t *c, const char *bind);

/* The generated rows of case c: its prefixes, or 1 (its whole schedule). */
int lang_case_rows(const lang_case_t *c);
/* Row j's label ("mm_ar_c"; a case without prefixes: its schedule, or "as-written"), NULL out of range. */
const char *lang_case_row_label(const lang_case_t *c, int j);
/* Row j's statements of the case's Schedule: the prefix's steps, or every statement (-1: all). */
int lang_case_row_steps(const lang_case_t *c, int j);
/* Row j's schedule in words, into buf: "best", "best[:3]" (its first 3 statements), "(none)". */
void lang_case_row_schedule(const lang_case_t *c, int j, char *buf, size_t cap);

/* A checked (typed) copy of p, case c's program as written, with row j's statements of c->schedule applied,
 * in *out (loom_prog_destroy it). Errors name the case, the row, the schedule and the statement refused. */
loom_result_t lang_case_schedule(const lang_case_t *c, int j, loom_prog_t p, loom_prog_t *out);

/* The probability and seed of p's one Dropout: 0, or -1 where p has no Dropout or more than one. */
int lang_prog_dropout(loom_prog_t p, float *prob, uint64_t *seed);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_SUPPORT_LANG_CASES_H */
