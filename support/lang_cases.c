/* lang_cases.c - see lang_cases.h. */
#include <stdlib.h>
#include <string.h>

#include "support/lang_cases.h"

/* examples/lang/adam.loom (the paper's Figure 6), as it is (tests/host/bench/test_lang_cases.c compares). */
static const char k_adam[] =
    "// The paper's Figure 6: Adam in data-parallel training. g: this rank's\n"
    "// gradients (Local), p, m, v: parameters and moments (Replicated), lr.\n"
    "Tensor g(FP32, [N], Local, WORLD);\n"
    "Tensor p(FP32, [N], Replicated, WORLD);\n"
    "Tensor m(FP32, [N], Replicated, WORLD);\n"
    "Tensor v(FP32, [N], Replicated, WORLD);\n"
    "Scalar lr(FP32);\n"
    "\n"
    "Var beta1 = 0.9;\n"
    "Var beta2 = 0.999;\n"
    "Var avg = AllReduce(\"+\", g);\n"
    "Var m_ = m.update(m * beta1 + (1 - beta1) * avg);\n"
    "Var v_ = v.update(v * beta2 + (1 - beta2) * avg * avg);\n"
    "Var m1 = m_ / (1 - beta1);\n"
    "Var v1 = v_ / (1 - beta2);\n"
    "Var p_ = p.update(p - lr * m1 / (Sqrt(v1) + 0.00000001));\n"
    "\n"
    "Execute adam({g, p, v, m, lr}, {p_});\n"
    "\n"
    "// Figure 6b: RS-Opt-AG, moments kept as slices, one fused AllReduce.\n"
    "Schedule best {\n"
    "  fusedComp = fuse(m_, v_, m1, v1, p_);\n"
    "  (rsG, agG) = split(avg, AllReduceSplit1);\n"
    "  (scComp, agP, agM, agV) = reorder(agG, fusedComp, AllGatherReorder);\n"
    "  asSlice(m); asSlice(v); dead(agM); dead(agV);\n"
    "  fuseAR = fuseComm(rsG, scComp, agP, FusedAllReduce);\n"
    "}\n";

/* examples/lang/lamb.loom, as it is. */
static const char k_lamb[] =
    "// LAMB (the paper's section 4 and 6): Adam's moments, then a trust ratio\n"
    "// ||p|| / ||u|| that needs whole-tensor norms.\n"
    "Tensor g(FP32, [N], Local, WORLD);\n"
    "Tensor p(FP32, [N], Replicated, WORLD);\n"
    "Tensor m(FP32, [N], Replicated, WORLD);\n"
    "Tensor v(FP32, [N], Replicated, WORLD);\n"
    "Scalar lr(FP32);\n"
    "\n"
    "Var beta1 = 0.9;\n"
    "Var beta2 = 0.999;\n"
    "Var wd = 0.01;\n"
    "Var avg = AllReduce(\"+\", g);\n"
    "Var m_ = m.update(m * beta1 + (1 - beta1) * avg);\n"
    "Var v_ = v.update(v * beta2 + (1 - beta2) * avg * avg);\n"
    "Var u = m_ / (Sqrt(v_) + 0.000001) + wd * p;\n"
    "Var ratio = Norm(p) / Norm(u);\n"
    "Var p_ = p.update(p - lr * ratio * u);\n"
    "\n"
    "Execute lamb({g, p, v, m, lr}, {p_});\n"
    "\n"
    "// The moments on slices (RS-Opt-AG for the first half; the norms need u whole).\n"
    "Schedule best {\n"
    "  moments = fuse(m_, v_, u);\n"
    "  (rsG, agG) = split(avg, AllReduceSplitRSAG);\n"
    "  (scMoments, agM, agV, agU) = reorder(agG, moments, AllGatherReorder);\n"
    "  asSlice(m); asSlice(v); dead(agM); dead(agV);\n"
    "  fusedAR = fuseComm(rsG, scMoments, agU, FusedAllReduce);\n"
    "}\n";

static const char k_ar_norm[] =
    "// AllReduce of each rank's partial sums with bias, dropout and residual, then RMSNorm: loom_allreduce\n"
    "// with its epilogue and norm (desc.norm LOOM_NORM_RMS) computes the same, one kernel.\n"
    "Tensor x(BF16, [R, C], Local, WORLD);\n"
    "Tensor b(BF16, [C], Replicated, WORLD);\n"
    "Tensor r(BF16, [R, C], Replicated, WORLD);\n"
    "Tensor g(BF16, [C], Replicated, WORLD);\n"
    "Var s = AllReduce(\"+\", x);\n"
    "Var h = Dropout(s + b, 0.1, 1234) + r;\n"
    "Var y = RMSNorm(h, g, 0.00001);\n"
    "Execute ar_norm({x, b, r, g}, {y});\n"
    "\n"
    "// One kernel: the reduction with the pointwise work inlined, then the rows' norm.\n"
    "Schedule fused {\n"
    "  k = fuse(h);\n"
    "  f = fuseComm(s, k, FusedAllReduceEpilogue);\n"
    "  st = overlap(f, y);\n"
    "}\n";

static const char k_gemm_bias[] =
    "// A GEMM with its bias: loom_gemm with desc.has_bias computes the same (the bias added to the fp32\n"
    "// accumulator in the epilogue, rounded once).\n"
    "Tensor a(BF16, [M, K], Replicated, WORLD);\n"
    "Tensor w(BF16, [K, N], Replicated, WORLD);\n"
    "Tensor bias(BF16, [N], Replicated, WORLD);\n"
    "Var c = MatMul(a, w);\n"
    "Var y = c + bias;\n"
    "Execute gemm_bias({a, w, bias}, {y});\n";

static const lang_case_t k_cases[] = {
    {"ar_norm", "loom_allreduce (bias, dropout 0.1, residual, RMSNorm)", LANG_HAND_ALLREDUCE_NORM, "", k_ar_norm,
     "fused", "R=8192,C=4096", "R=1024,C=4096", "R=64,C=4096", 1},
    {"adam", "loom_adam_step (fp32, step 1's bias correction, no weight decay)", LANG_HAND_ADAM, "adam", k_adam,
     "best", "N=16777216", "N=1048576", "N=65537", 0},
    {"lamb", "loom_lamb_step (fp32, weight decay 0.01 decoupled, eps 1e-6, no bias correction)", LANG_HAND_LAMB, "lamb",
     k_lamb, "best", "N=16777216", "N=1048576", "N=65537", 0},
    {"gemm_bias", "loom_gemm (bf16, B [k, n], the bias in its epilogue)", LANG_HAND_GEMM_BIAS, "", k_gemm_bias,
     "", "M=4096,N=4096,K=4096", "M=1024,N=1024,K=1024", "M=64,N=64,K=64", 1},
};

int lang_case_count(void) { return (int)(sizeof k_cases / sizeof k_cases[0]); }

const lang_case_t *lang_case(int i) { return i >= 0 && i < lang_case_count() ? &k_cases[i] : NULL; }

const lang_case_t *lang_case_find(const char *name) {
  for (int i = 0; i < lang_case_count(); ++i)
    if (!strcmp(k_cases[i].name, name)) return &k_cases[i];
  return NULL;
}

int64_t lang_bind_size(const char *bind, const char *sym) {
  const size_t n = strlen(sym);
  for (const char *s = bind; s && *s;) {
    if (!strncmp(s, sym, n) && s[n] == '=') return strtoll(s + n + 1, NULL, 10);
    s = strchr(s, ',');
    if (s) ++s;
  }
  return -1;
}

const char *lang_case_check_bind(const lang_case_t *c, const char *bind) {
  int64_t elems = 1;
  for (const char *s = bind; s && *s;) {
    const char *eq = strchr(s, '=');
    if (!eq) break;
    elems *= strtoll(eq + 1, NULL, 10);
    if (elems > LANG_INTERP_MAX) return c->check_bind;
    s = strchr(eq, ',');
    if (s) ++s;
  }
  return bind;
}
