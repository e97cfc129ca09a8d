/*
 * test_lang_parse.c - the .loom parser and the type/layout checker: the
 * paper's programs parse and type as the paper's comments say (Figure 3:
 * layer Local, sum Replicated, ...), and malformed or ill-typed programs
 * are refused with file:line:column, what was found and what was expected.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"

static const char *k_fig3 =
    "Tensor w(FP16, [H,H], Sliced(0), WORLD, RANK);\n"
    "Tensor b(FP16, [H], Replicated, WORLD);\n"
    "Tensor in(FP16, [B,S,H], Sliced(2), WORLD, RANK);\n"
    "Tensor r(FP16, [B,S,H], Replicated, WORLD);\n"
    "Var layer = MatMul(in, w);\n"
    "Var sum = AllReduce(\"+\", layer);\n"
    "Var dropout = Dropout(sum + b, 0.1);\n"
    "Var out = dropout + r;\n"
    "Execute self_attention({w,in,b,r}, {out});\n";

/* The typed text of a program; "" on failure. */
static char *typed_text(loom_prog_t p) {
  size_t len = 0;
  if (loom_prog_print(p, 1, NULL, 0, &len) != LOOM_ERR_INVALID_ARGUMENT) return calloc(1, 1);
  char *s = malloc(len + 1);
  if (s && loom_prog_print(p, 1, s, len + 1, &len) != LOOM_SUCCESS) s[0] = 0;
  return s;
}

LOOM_TEST(lang_parse_figure3_types_as_the_paper_says) {
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse(k_fig3, "fig3.loom", &p), LOOM_SUCCESS);
  if (!p) return;
  CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  char *t = typed_text(p);
  CHECK(strstr(t, "Var layer = MatMul(in, w);  // fp16 [B, S, H] Local\n") != NULL);
  CHECK(strstr(t, "Var sum = AllReduce(\"+\", layer);  // fp16 [B, S, H] Replicated\n") != NULL);
  CHECK(strstr(t, "Var out = dropout + r;  // fp16 [B, S, H] Replicated\n") != NULL);
  if (loom_test_failures) printf("%s", t);
  free(t);
  loom_prog_destroy(p);
}

LOOM_TEST(lang_parse_examples_check) {
  const char *names[] = {"model_parallel", "adam", "lamb", "pipeline", "llama_tp", "layer_norm"};
  for (int i = 0; i < (int)(sizeof names / sizeof *names); ++i) {
    loom_prog_t p = lang_load_example(names[i]);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
    loom_prog_destroy(p);
  }
}

/* Each bad program is refused with exactly this message. */
static void refused(const char *text, const char *msg) {
  loom_prog_t p = NULL;
  loom_result_t r = loom_prog_parse(text, "t.loom", &p);
  if (r == LOOM_SUCCESS) r = loom_prog_check(p);
  CHECK_EQ_INT(r, LOOM_ERR_INVALID_ARGUMENT);
  if (!strstr(loom_last_error(), msg))
    loom_test_fail(__FILE__, __LINE__, "for\n%s\nmessage \"%s\"\nlacks \"%s\"", text, loom_last_error(), msg);
  loom_prog_destroy(p);
}

LOOM_TEST(lang_parse_errors_name_line_column_found_expected) {
  refused("Tensor x(FP8, [N], Replicated);", "t.loom:1:10: found identifier `FP8`; expected a dtype: FP32, FP16 or BF16");
  refused("Tensor x(FP32, [N], Replicated)\nVar y = x;", "t.loom:2:1: found identifier `Var`; expected `;` after the tensor declaration");
  refused("Tensor x(FP32, [N], Sliced(a));", "t.loom:1:28: found identifier `a`; expected a dimension or rank");
  refused("Tensor x(FP32, [N], Replicated);\nVar y = Frob(x);", "t.loom:2:9: found identifier `Frob`; expected an operation");
  refused("Tensor x(FP32, [N], Replicated);\nVar y = x + z;", "t.loom:2:13: found identifier `z`; expected a tensor or Var defined above");
  refused("Tensor x(FP32, [N], Replicated);\nVar y = (x + 1;", "t.loom:2:15: found `;`; expected `)` closing the parenthesis");
  refused("Tensor x(FP32, [N], Replicated);\nVar x = x + 1;", "t.loom:2:5: `x` is defined twice; expected a new name");
  refused("Tensor x(FP32, [N], Replicated);\nVar y = x @ 2;", "t.loom:2:11: found bad character `@`; expected `;` after the Var definition");
  refused("Tensor x(FP32, [N], Replicated);\n/* open", "t.loom:2:1: found unterminated comment");
  refused("Tensor x(FP32, [N], Replicated);\nVar y = Dropout(x, 1.5);", "t.loom:2:9: Dropout probability 1.5; expected a number in [0, 1)");
  refused("Tensor x(FP32, [N], Replicated);", "t.loom:1:33: found end of file; expected an Execute statement");
}

LOOM_TEST(lang_type_errors_say_what_each_operation_needs) {
  refused("Tensor x(FP32, [N], Replicated);\nVar y = AllGather(x);\nExecute f({x}, {y});",
          "t.loom:2:9: AllGather: operand `x` is Replicated; AllGather needs Sliced(d)");
  refused("Tensor x(FP32, [N], Replicated);\nVar y = AllReduce(\"+\", x);\nExecute f({x}, {y});",
          "t.loom:2:9: AllReduce: operand `x` is Replicated; AllReduce needs Local");
  refused("Tensor x(FP32, [N], Sliced(0));\nTensor z(FP32, [N], Local);\nVar y = x + z;\nExecute f({x, z}, {y});",
          "t.loom:3:11: +: operand `z` is Local where the other operands make Sliced(0)");
  refused("Tensor x(FP32, [N, K], Sliced(0));\nTensor w(FP32, [K, M], Sliced(0));\nVar y = MatMul(x, w);\nExecute f({x, w}, {y});",
          "t.loom:3:9: MatMul: operand `x` is Sliced(0) and `w` is Sliced(0); MatMul takes");
  refused("Tensor x(FP32, [N, K], Replicated);\nTensor w(FP32, [M, K], Replicated);\nVar y = MatMul(x, w);\nExecute f({x, w}, {y});",
          "t.loom:3:9: MatMul: shapes [N, K] and [M, K]; MatMul needs [.., K] and [K, N]");
  refused("Tensor x(FP32, [N], Replicated);\nTensor z(FP32, [M], Replicated);\nVar y = x * z;\nExecute f({x, z}, {y});",
          "t.loom:3:11: *: operand `z` has shape [M], which does not broadcast with [N]");
  refused("Tensor x(FP32, [N, H], Sliced(1));\nTensor g(FP32, [H], Replicated);\nVar y = RMSNorm(x, g);\nExecute f({x, g}, {y});",
          "RMSNorm: operand `x` is Sliced(1) along the normalised dimension");
  refused("Tensor x(FP32, [N], Replicated, GROUP(0));\nTensor z(FP32, [N], Replicated, GROUP(1));\nVar y = x + z;\nExecute f({x, z}, {y});",
          "+: operand `z` is in GROUP(1); the other operands in GROUP(0)");
  refused("Tensor x(FP32, [N], Replicated);\nTensor z(FP32, [N], Replicated, GROUP(1));\nVar y = z + 1;\nExecute f({x, z}, {y});",
          "`x` is in WORLD but `z` in GROUP(1)");
  refused("Tensor x(FP32, [N], Local);\nVar y = Send(x, GroupRank(GROUP+1, RANK));\nExecute f({x}, {y});",
          "Send: operand `x` is Local; Send needs a GROUP(i) of a pipeline program");
  refused("Tensor m(FP32, [N], Replicated);\nTensor g(FP32, [N], Local);\nVar m_ = m.update(m + g);\nExecute f({m, g}, {m_});",
          "state `m` is Replicated [N]; its new value `m_` is Local [N]");
  refused("Tensor m(FP32, [N], Replicated);\nVar a = m.update(m + 1);\nVar b = m.update(m + 2);\nExecute f({m}, {b});",
          "Update: `m` is updated twice");
  refused("Tensor x(FP16, [N], Replicated);\nTensor z(BF16, [N], Replicated);\nVar y = x + z;\nExecute f({x, z}, {y});",
          "+: operand `z` is bf16, another operand fp16; cast one of them");
}
