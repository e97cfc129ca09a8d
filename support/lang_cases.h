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
 * The example programs' texts are held here as they are in examples/lang
 * (the suite runs wherever it is installed); the host test checks that they
 * still are.
 *
 * Checks: ar_norm and gemm_bias compare the generated outputs with the
 * hand-written op's on the same inputs; adam and lamb (whose hand-written
 * op keeps its moments inside the plan, zero at the start) compare with
 * the CPU interpreter, at the timed sizes where the interpreter can (at
 * most LANG_INTERP_MAX elements: lang_case_check_bind), else at
 * check_bind.
 *
 * Plain C, no CUDA: linked into loom-bench and the host tests.
 */
#ifndef LOOM_SUPPORT_LANG_CASES_H
#define LOOM_SUPPORT_LANG_CASES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lang_hand {
  LANG_HAND_ALLREDUCE_NORM = 0,
  LANG_HAND_ADAM = 1,
  LANG_HAND_LAMB = 2,
  LANG_HAND_GEMM_BIAS = 3
} lang_hand_t;

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

#ifdef __cplusplus
}
#endif
#endif /* LOOM_SUPPORT_LANG_CASES_H */
