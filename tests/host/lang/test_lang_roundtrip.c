/*
 * test_lang_roundtrip.c - the front ends make the same graph: every example
 * program, unscheduled and with each of its schedules applied, printed and
 * parsed back is an equal graph (the kernels and stages through the printed
 * `Schedule applied`); the paper's Figure 3 built with the loom_prog_*
 * builder equals the parsed text; equality notices a difference.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"
#include "lang/lang.h"

static char *print(loom_prog_t p) {
  size_t len = 0;
  loom_prog_print(p, 0, NULL, 0, &len);
  char *s = malloc(len + 1);
  if (s && loom_prog_print(p, 0, s, len + 1, &len) != LOOM_SUCCESS) s[0] = 0;
  return s;
}

/* print(p) parses back (with its applied schedule) to a graph equal to p. */
static void round_trip(loom_prog_t p, const char *what) {
  char *text = print(p);
  loom_prog_t q = NULL, r = NULL;
  int eq = 0;
  if (loom_prog_parse(text, what, &q) != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "%s: the printed text does not parse: %s\n%s", what, loom_last_error(), text);
  } else if (loom_prog_schedule(q, p->ngroups ? "applied" : NULL, &r) != LOOM_SUCCESS) {
    loom_test_fail(__FILE__, __LINE__, "%s: the printed schedule does not apply: %s\n%s", what, loom_last_error(), text);
  } else {
    loom_prog_equal(p, r, &eq);
    if (!eq) loom_test_fail(__FILE__, __LINE__, "%s: printed and parsed back, the graph differs:\n%s", what, text);
  }
  loom_prog_destroy(q);
  loom_prog_destroy(r);
  free(text);
}

LOOM_TEST(lang_print_parse_round_trip_of_every_example_and_schedule) {
  const char *names[] = {"model_parallel", "adam", "lamb", "pipeline", "llama_tp", "layer_norm"};
  int n = 0;
  for (int i = 0; i < (int)(sizeof names / sizeof *names); ++i) {
    loom_prog_t p = lang_load_example(names[i]);
    CHECK(p != NULL);
    if (!p) continue;
    round_trip(p, names[i]);
    for (int s = 0; s < p->nsched; ++s) {
      loom_prog_t q = NULL;
      CHECK_RESULT(loom_prog_schedule(p, p->scheds[s].name, &q), LOOM_SUCCESS);
      if (q) round_trip(q, p->scheds[s].name), n++;
      loom_prog_destroy(q);
    }
    loom_prog_destroy(p);
  }
  CHECK(n >= 6);
}

static const char *k_fig3 =
    "Tensor w(FP16, [H, H], Sliced(0), WORLD);\n"
    "Tensor b(FP16, [H], Replicated, WORLD);\n"
    "Tensor in(FP16, [B, S, H], Sliced(2), WORLD);\n"
    "Tensor r(FP16, [B, S, H], Replicated, WORLD);\n"
    "Var layer = MatMul(in, w);\n"
    "Var sum = AllReduce(\"+\", layer);\n"
    "Var d = Dropout(sum + b, 0.1);\n"
    "Var out = d + r;\n"
    "Execute self_attention({w, in, b, r}, {out});\n";

static loom_prog_t build_fig3(void) {
  loom_prog_t p = NULL;
  int w, b, in, r, layer, sum, sb, d, out;
  loom_prog_attr_t drop = LOOM_PROG_ATTR_INIT;
  drop.value = 0.1;
  if (loom_prog_create(&p) != LOOM_SUCCESS) return NULL;
  loom_result_t e = loom_prog_tensor(p, "w", LOOM_FP16, "H, H", LOOM_PROG_SLICED, 0, LOOM_PROG_WORLD, &w);
  if (!e) e = loom_prog_tensor(p, "b", LOOM_FP16, "H", LOOM_PROG_REPLICATED, 0, LOOM_PROG_WORLD, &b);
  if (!e) e = loom_prog_tensor(p, "in", LOOM_FP16, "B, S, H", LOOM_PROG_SLICED, 2, LOOM_PROG_WORLD, &in);
  if (!e) e = loom_prog_tensor(p, "r", LOOM_FP16, "B, S, H", LOOM_PROG_REPLICATED, 0, LOOM_PROG_WORLD, &r);
  if (!e) e = loom_prog_op(p, "MatMul", (int[]){in, w}, 2, NULL, &layer);
  if (!e) e = loom_prog_name(p, layer, "layer");
  if (!e) e = loom_prog_op(p, "AllReduce", &layer, 1, NULL, &sum);
  if (!e) e = loom_prog_name(p, sum, "sum");
  if (!e) e = loom_prog_op(p, "+", (int[]){sum, b}, 2, NULL, &sb);
  if (!e) e = loom_prog_op(p, "Dropout", &sb, 1, &drop, &d);
  if (!e) e = loom_prog_name(p, d, "d");
  if (!e) e = loom_prog_op(p, "+", (int[]){d, r}, 2, NULL, &out);
  if (!e) e = loom_prog_name(p, out, "out");
  if (!e) e = loom_prog_execute(p, "self_attention", (int[]){w, in, b, r}, 4, &out, 1);
  if (e) {
    loom_test_fail(__FILE__, __LINE__, "building Figure 3: %s", loom_last_error());
    loom_prog_destroy(p);
    return NULL;
  }
  return p;
}

LOOM_TEST(lang_builder_and_text_make_the_same_graph) {
  loom_prog_t built = build_fig3(), parsed = NULL;
  CHECK_RESULT(loom_prog_parse(k_fig3, "fig3", &parsed), LOOM_SUCCESS);
  int eq = 0;
  if (built && parsed) {
    CHECK_RESULT(loom_prog_equal(built, parsed, &eq), LOOM_SUCCESS);
    CHECK(eq);
    char *a = print(built), *b = print(parsed);
    CHECK(a && b && !strcmp(a, b));
    CHECK(a && !strcmp(a, k_fig3)); /* the text form is the paper's, as written */
    if (a && strcmp(a, k_fig3)) printf("%s", a);
    free(a), free(b);
    round_trip(built, "built");
    CHECK_RESULT(loom_prog_transform(built, "(rs, ag) = split(sum, AllReduceSplitRSAG)"), LOOM_SUCCESS);
    CHECK_RESULT(loom_prog_equal(built, parsed, &eq), LOOM_SUCCESS);
    CHECK(!eq);
  }
  loom_prog_destroy(built);
  loom_prog_destroy(parsed);
}

LOOM_TEST(lang_builder_refuses_bad_arguments) {
  loom_prog_t p = NULL;
  int x, y;
  CHECK_RESULT(loom_prog_create(&p), LOOM_SUCCESS);
  if (!p) return;
  CHECK_RESULT(loom_prog_tensor(p, "x", LOOM_FP32, "N, 0", LOOM_PROG_SLICED, 0, LOOM_PROG_WORLD, &x),
               LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("`0` is no size >= 1");
  CHECK_RESULT(loom_prog_tensor(p, "x", LOOM_FP32, "N", LOOM_PROG_SLICED, 0, LOOM_PROG_WORLD, &x), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_tensor(p, "x", LOOM_FP32, "N", LOOM_PROG_SLICED, 0, LOOM_PROG_WORLD, &y), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("`x` is defined twice");
  CHECK_RESULT(loom_prog_op(p, "Frob", &x, 1, NULL, &y), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("op \"Frob\": no such operation");
  CHECK_RESULT(loom_prog_op(p, "MatMul", &x, 1, NULL, &y), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("MatMul takes 2 operands; found 1");
  CHECK_RESULT(loom_prog_op(p, "Sqrt", (int[]){99}, 1, NULL, &y), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("operand 0 is id 99");
  CHECK_RESULT(loom_prog_op(p, "AllGather", &x, 1, NULL, &y), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_name(p, y, "x"), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_prog_check(p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("no Execute statement");
  loom_prog_destroy(p);
}
