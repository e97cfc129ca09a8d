/*
 * test_lang_refuse.c - every transformation checks that it applies and
 * refuses with the reason when it does not, leaving the program unchanged
 * (still equal to a fresh parse, still computing the same results).
 */
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"
#include "lang/lang.h"

static const char *k_prog =
    "Tensor w(FP32, [H, H], Sliced(0));\n"
    "Tensor b(FP32, [H], Replicated);\n"
    "Tensor in(FP32, [B, H], Sliced(1));\n"
    "Tensor r(FP32, [B, H], Replicated);\n"
    "Tensor g(FP32, [H], Replicated);\n"
    "Tensor loc(FP32, [B, H], Local);\n"
    "Var layer = MatMul(in, w);\n"
    "Var sum = AllReduce(\"+\", layer);\n"
    "Var d = Dropout(sum + b, 0.1);\n"
    "Var out = d + r;\n"
    "Var norm = RMSNorm(sum, g);\n"
    "Var both = out + norm;\n"
    "Var other = sum * loc;\n"
    "Var nd = RMSNorm(d, g);\n"
    "Var f3 = nd + d;\n"
    "Execute f({w, b, in, r, g, loc}, {both, other, f3});\n";

/* statements applied in order; the last one must be refused with `msg`. */
static void refuses(const char *const *stmts, int n, const char *msg) {
  loom_prog_t p = NULL, fresh = NULL;
  CHECK_RESULT(loom_prog_parse(k_prog, "p.loom", &p), LOOM_SUCCESS);
  if (!p) return;
  for (int i = 0; i + 1 < n; ++i) CHECK_RESULT(loom_prog_transform(p, stmts[i]), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_schedule(p, NULL, &fresh), LOOM_SUCCESS); /* a copy before */
  CHECK_RESULT(loom_prog_transform(p, stmts[n - 1]), LOOM_ERR_INVALID_ARGUMENT);
  if (!strstr(loom_last_error(), msg))
    loom_test_fail(__FILE__, __LINE__, "`%s`: message \"%s\" lacks \"%s\"", stmts[n - 1], loom_last_error(), msg);
  int eq = 0;
  if (fresh) CHECK_RESULT(loom_prog_equal(p, fresh, &eq), LOOM_SUCCESS);
  CHECK(eq); /* refused: unchanged */
  double diff = 1;
  if (fresh) CHECK_RESULT(loom_prog_interp_compare(p, fresh, 2, "B=4,H=6", 3, &diff), LOOM_SUCCESS);
  CHECK(diff == 0);
  loom_prog_destroy(fresh);
  loom_prog_destroy(p);
}

#define REFUSES(msg, ...)                                                   \
  do {                                                                      \
    const char *s_[] = {__VA_ARGS__};                                       \
    refuses(s_, (int)(sizeof s_ / sizeof s_[0]), msg);                      \
  } while (0)

LOOM_TEST(lang_split_refuses) {
  REFUSES("<statement>:1:1: split: `d` is Dropout and no AllReduce uses it; split takes an AllReduce", "(a, c) = split(d)");
  REFUSES("split: `nothing` is no value of the program", "split(nothing)");
  REFUSES("split: two result names; found 1", "(a) = split(sum)");
  REFUSES("`b` is defined twice", "(b, c) = split(sum)");
  REFUSES("split: `sum` is already in `o`; split before grouping", "o = overlap(layer, sum)", "split(sum)");
}

LOOM_TEST(lang_reorder_refuses) {
  REFUSES("reorder: `agSum` is also used by `norm`, which is not pointwise", "(rs, agSum) = split(sum)",
          "k = fuse(d, out)", "(sc, ag) = reorder(agSum, k)");
  REFUSES("reorder: neither `sum` nor `d` is an AllGather or a Broadcast", "(sc, ag) = reorder(sum, d)");
  REFUSES("reorder: `agSum` is also used by the + at 9:", "(rs, agSum) = split(sum)", "(sc, ag) = reorder(agSum, out)");
  REFUSES("reorder: neither `layer` nor `out` is an AllGather or a Broadcast", "(sc, ag) = reorder(layer, out)");
}

LOOM_TEST(lang_fuse_refuses) {
  REFUSES("fuse: `sum` is AllReduce; fuse takes pointwise operations", "k = fuse(sum, d)");
  REFUSES("fuse: `nd` (RMSNorm) lies between the operations to fuse and is not pointwise", "k = fuse(d, f3)");
  REFUSES("fuse: `out` is already in kernel `k`", "k = fuse(d, out)", "k2 = fuse(out)");
  REFUSES("`d` is defined twice", "d = fuse(out)");
}

LOOM_TEST(lang_fuse_comm_refuses) {
  REFUSES("fuseComm: `rs` is also used by `ag`, outside `k`", "(rs, ag) = split(sum)", "k = fuse(d, out)",
          "f = fuseComm(rs, k, FusedReduceScatter)");
  REFUSES("fuseComm: `layer` is MatMul; fuseComm takes", "k = fuse(d, out)", "f = fuseComm(layer, k)");
  REFUSES("fuseComm: the parts given (an AllReduce, a kernel, 0 AllGathers) make a FusedAllReduceEpilogue, not a "
          "FusedAllGather: write FusedAllReduceEpilogue", "k = fuse(d, out)",
          "f = fuseComm(sum, k, FusedAllGather)");
  REFUSES("fuseComm: `sum` is also used by `norm`, outside `k`", "k = fuse(d, out)",
          "f = fuseComm(sum, k, FusedAllReduceEpilogue)");
}

LOOM_TEST(lang_overlap_refuses) {
  REFUSES("overlap: `out` does not consume `layer`", "o = overlap(layer, out)");
  REFUSES("overlap: `nd` lies between the overlapped operations and is not one of them", "o = overlap(d, f3)");
  REFUSES("overlap: `w` is an input; overlap takes operations", "o = overlap(w, layer)");
  REFUSES("overlap: `sum` is already in stage `o`", "o = overlap(layer, sum)", "o2 = overlap(sum, norm)");
}

LOOM_TEST(lang_as_slice_and_dead_refuse) {
  REFUSES("asSlice: `r` is used whole by `out`; asSlice needs every use to be a slice (reorder first)", "asSlice(r)");
  REFUSES("asSlice: `layer` is no Replicated input tensor", "asSlice(layer)");
  REFUSES("asSlice: `in` is no Replicated input tensor", "asSlice(in)");
  REFUSES("dead: `d` is used by `out`", "dead(d)");
  REFUSES("dead: `both` is a result of the program", "dead(both)");
  REFUSES("dead: `w` is an input tensor", "dead(w)");
  REFUSES("found `frobnicate`; expected a transformation", "frobnicate(d)");
  REFUSES("<statement>:1:8: found `)`; expected a name", "fuse(d,)");
}

/* A policy belongs to one transformation: one of another kind, or a name where only a policy goes, is
 * refused at the policy's own line:column with what to write (before, the first was ignored). */
LOOM_TEST(lang_policies_of_the_wrong_kind_are_refused) {
  REFUSES("<statement>:1:21: split: found `FusedAllReduce`, a fuseComm policy; expected a split policy: "
          "AllReduceSplitRSAG, AllReduceSplit1, AllReduceSplitRB or AllReduceSplitReduceBroadcast",
          "(a, c) = split(sum, FusedAllReduce)");
  REFUSES("<statement>:1:21: split: found `Foo` where the policy goes; expected a split policy: AllReduceSplitRSAG",
          "(a, c) = split(sum, Foo)");
  REFUSES("<statement>:1:22: fuseComm: found `ComputeFuse`, a fuse policy; expected a fuseComm policy: FusedAllReduce, "
          "FusedReduceScatter, FusedAllGather or FusedAllReduceEpilogue",
          "k = fuse(d, out)", "f = fuseComm(sum, k, ComputeFuse)");
  REFUSES("fuse: found `FusedAllReduce`, a fuseComm policy; expected a fuse policy: ComputeFuse",
          "k = fuse(d, out, FusedAllReduce)");
  REFUSES("overlap: found `ComputeFuse`, a fuse policy; expected no policy", "o = overlap(layer, sum, ComputeFuse)");
  REFUSES("fuseComm: found `FusedAllGather` after the policy `FusedReduceScatter`; expected one policy",
          "k = fuse(d, out)", "f = fuseComm(sum, k, FusedReduceScatter, FusedAllGather)");
  REFUSES("reorder: `agSum` is an AllGather; its policy is AllGatherReorder", "(rs, agSum) = split(sum)",
          "k = fuse(d, out)", "(sc, ag) = reorder(agSum, k, BroadcastReorder)");
  REFUSES("fuseComm: `FusedAllReduc` is no value or kernel of the program (nor a fuseComm policy", "k = fuse(d, out)",
          "f = fuseComm(sum, k, FusedAllReduc)");
  REFUSES("fuse: `ComputeFuze` is no value of the program (nor a fuse policy: ComputeFuse)", "k = fuse(d, out, ComputeFuze)");
}

/* In a Schedule section the refusal names the file, and the line and column of the policy. */
LOOM_TEST(lang_policy_refusal_points_at_the_policy_in_the_file) {
  static const char *sched = "Schedule s {\n  fuseOut = fuse(d, out);\n  (rs, ag) = split(sum,\n"
                             "                   FusedAllReduce);\n}\n";
  char text[2048];
  snprintf(text, sizeof text, "%s%s", k_prog, sched);
  loom_prog_t p = NULL, q = NULL;
  CHECK_RESULT(loom_prog_parse(text, "p.loom", &p), LOOM_SUCCESS);
  if (!p) return;
  CHECK_RESULT(loom_prog_schedule(p, "s", &q), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "p.loom:20:20: split: found `FusedAllReduce`, a fuseComm policy") != NULL);
  CHECK(q == NULL);
  loom_prog_destroy(p);
}

/* reorder's gathers bind by position (Execute's outputs first, then the values the computation hands on,
 * in order); names that say another of the gathered values are refused with the order, never bound to
 * the other tensor (before, Figure 6b with agM and agP swapped was accepted: agM gathered p_). */
LOOM_TEST(lang_reorder_refuses_names_of_the_other_gathers) {
  loom_prog_t p = lang_load_example("adam");
  CHECK(p != NULL);
  if (!p) return;
  CHECK_RESULT(loom_prog_transform(p, "fusedComp = fuse(m_, v_, m1, v1, p_)"), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_transform(p, "(rsG, agG) = split(avg, AllReduceSplit1)"), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_transform(p, "(scComp, agM, agP, agV) = reorder(agG, fusedComp, AllGatherReorder)"),
               LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "<statement>:1:1: reorder: result 2, `agM`, names `m_` but gathers `p_`; the gathers "
                                  "come in this order (Execute's outputs first): `p_` (the new `p`), `m_` (the new `m`), "
                                  "`v_` (the new `v`)") != NULL);
  CHECK_RESULT(loom_prog_transform(p, "(scComp, agP, agV, agM) = reorder(agG, fusedComp, AllGatherReorder)"),
               LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "result 3, `agV`, names `v_` but gathers `m_`") != NULL);
  /* the paper's order binds each name to its tensor; names that say nothing bind by position */
  loom_prog_t q = NULL;
  CHECK_RESULT(loom_prog_schedule(p, NULL, &q), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_transform(p, "(scComp, agP, agM, agV) = reorder(agG, fusedComp, AllGatherReorder)"), LOOM_SUCCESS);
  const char *pairs[][2] = {{"agP", "p_"}, {"agM", "m_"}, {"agV", "v_"}};
  for (int i = 0; i < 3; ++i) {
    const int g = loom__lang_find(p, pairs[i][0]);
    CHECK(g >= 0 && p->nodes[p->nodes[g].in[0]].op == LOOM__OP_UPDATE && !strcmp(p->nodes[p->nodes[g].in[0]].name, pairs[i][1]));
  }
  if (q) CHECK_RESULT(loom_prog_transform(q, "(k, g1, g2, g3) = reorder(agG, fusedComp)"), LOOM_SUCCESS);
  if (q) CHECK(!strcmp(q->nodes[q->nodes[loom__lang_find(q, "g2")].in[0]].name, "m_"));
  loom_prog_destroy(q);
  loom_prog_destroy(p);
}
