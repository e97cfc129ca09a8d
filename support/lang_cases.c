/* lang_cases.c - see lang_cases.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"
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

/* examples/lang/model_parallel.loom (the paper's Figure 3 with Figure 4's schedules) with its tensors' dtype DT
 * ("FP16" there): the mp_layer cases' text, once. */
#define K_MODEL_PARALLEL(DT) \
    "// The paper's Figure 3: a Megatron-LM model-parallel layer (self-attention's\n" \
    "// output projection): MatMul of sliced input and weight, AllReduce of the\n" \
    "// partial sums, bias + dropout + residual. B: batch, S: sequence, H: hidden.\n" \
    "Tensor w(" DT ", [H, H], Sliced(0), WORLD, RANK);\n" \
    "Tensor b(" DT ", [H], Replicated, WORLD);\n" \
    "Tensor in(" DT ", [B, S, H], Sliced(2), WORLD, RANK);\n" \
    "Tensor r(" DT ", [B, S, H], Replicated, WORLD);\n" \
    "\n" \
    "Var layer = MatMul(in, w);          // Local: partial sums\n" \
    "Var sum = AllReduce(\"+\", layer);    // Replicated\n" \
    "Var d = Dropout(sum + b, 0.1);\n" \
    "Var out = d + r;\n" \
    "\n" \
    "Execute self_attention({w, in, b, r}, {out});\n" \
    "\n" \
    "// Figure 4, schedules 1 to 5 (each prefix is a schedule too): the best one.\n" \
    "Schedule best {\n" \
    "  fuseOut = fuse(d, out, ComputeFuse);\n" \
    "  (rsSum, agSum) = split(layer, AllReduceSplitRSAG);\n" \
    "  (scOut, agOut) = reorder(agSum, fuseOut, AllGatherReorder);\n" \
    "  fuseAR = fuseComm(rsSum, scOut, agOut, FusedAllReduce);\n" \
    "  layerWithAR = overlap(layer, fuseAR);\n" \
    "}\n" \
    "\n" \
    "// AllReduce as Reduce + Broadcast, the computation on the root only.\n" \
    "Schedule reduce_broadcast {\n" \
    "  fuseOut = fuse(d, out);\n" \
    "  (redSum, bcSum) = split(sum, AllReduceSplitRB);\n" \
    "  (rootOut, bcOut) = reorder(bcSum, fuseOut, BroadcastReorder);\n" \
    "}\n"

static const char k_model_parallel[] = K_MODEL_PARALLEL("FP16");
static const char k_model_parallel_bf16[] = K_MODEL_PARALLEL("BF16");

/* Figure 11's schedules: prefixes of model_parallel's Schedule `best`. */
static const lang_prefix_t k_fig11[] = {
    {"mm_ar_c", 1},      /* MM+AR+C: fuse(d, out) */
    {"mm_rs_c_ag", 3},   /* MM+RS+C+AG: + split, reorder */
    {"fuse_rs_c_ag", 4}, /* fuse(RS+C+AG): + fuseComm */
    {"overlap", 5},      /* overlap(MM, fuse(RS+C+AG)): all of best */
};
#define MP_HAND "loom_gemm_ar (epilogue: bias, dropout 0.1, residual; AUTO, SEQUENTIAL, SM_COPY)"

static const lang_case_t k_cases[] = {
    {"ar_norm", "loom_allreduce (bias, dropout 0.1, residual, RMSNorm)", LANG_HAND_ALLREDUCE_NORM, "", k_ar_norm,
     "fused", "R=8192,C=4096", "R=1024,C=4096", "R=64,C=4096", 1, "", NULL, 0},
    {"adam", "loom_adam_step (fp32, step 1's bias correction, no weight decay)", LANG_HAND_ADAM, "adam", k_adam,
     "best", "N=16777216", "N=1048576", "N=65537", 0, "", NULL, 0},
    {"lamb", "loom_lamb_step (fp32, weight decay 0.01 decoupled, eps 1e-6, no bias correction)", LANG_HAND_LAMB, "lamb",
     k_lamb, "best", "N=16777216", "N=1048576", "N=65537", 0, "", NULL, 0},
    {"gemm_bias", "loom_gemm (bf16, B [k, n], the bias in its epilogue)", LANG_HAND_GEMM_BIAS, "", k_gemm_bias,
     "", "M=4096,N=4096,K=4096", "M=1024,N=1024,K=1024", "M=64,N=64,K=64", 1, "", NULL, 0},
    {"mp_layer", MP_HAND, LANG_HAND_GEMM_AR, "model_parallel", k_model_parallel, "best", "B=8,S=1024,H=3072",
     "B=2,S=256,H=1024", "B=2,S=16,H=64", 1, "", k_fig11, 4},
    {"mp_layer_b16", MP_HAND, LANG_HAND_GEMM_AR, "model_parallel", k_model_parallel, "best", "B=16,S=1024,H=3072",
     "B=4,S=256,H=1024", "B=2,S=16,H=64", 1, "", k_fig11, 4},
    {"mp_layer_bf16", MP_HAND, LANG_HAND_GEMM_AR, "model_parallel", k_model_parallel_bf16, "best",
     "B=8,S=1024,H=8192", "B=2,S=256,H=2048", "B=2,S=16,H=64", 1, "BF16", k_fig11, 4},
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

int lang_case_rows(const lang_case_t *c) { return c->prefixes ? c->nprefix : 1; }

const char *lang_case_row_label(const lang_case_t *c, int j) {
  if (j < 0 || j >= lang_case_rows(c)) return NULL;
  return c->prefixes ? c->prefixes[j].label : c->schedule[0] ? c->schedule : "as-written";
}

int lang_case_row_steps(const lang_case_t *c, int j) {
  return c->prefixes && j >= 0 && j < c->nprefix ? c->prefixes[j].steps : -1;
}

void lang_case_row_schedule(const lang_case_t *c, int j, char *buf, size_t cap) {
  const int k = lang_case_row_steps(c, j);
  if (!c->schedule[0]) snprintf(buf, cap, "(none)");
  else if (k < 0) snprintf(buf, cap, "%s", c->schedule);
  else snprintf(buf, cap, "%s[:%d]", c->schedule, k);
}

loom_result_t lang_case_schedule(const lang_case_t *c, int j, loom_prog_t p, loom_prog_t *out) {
  *out = NULL;
  if (j < 0 || j >= lang_case_rows(c))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "case %s: row %d; it has %d", c->name, j, lang_case_rows(c));
  const int k = lang_case_row_steps(c, j);
  if (k < 0) return loom_prog_schedule(p, c->schedule, out); /* the whole schedule, by name */
  const loom__sched_t *s = NULL;
  for (int i = 0; i < p->nsched; ++i)
    if (!strcmp(p->scheds[i].name, c->schedule)) s = &p->scheds[i];
  if (!s || k > s->n)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "case %s, row %s: %d statements of Schedule `%s`; the program has %d",
                      c->name, lang_case_row_label(c, j), k, c->schedule, s ? s->n : 0);
  loom_prog_t q = NULL;
  LOOM_TRY(loom_prog_schedule(p, NULL, &q));
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < k && r == LOOM_SUCCESS; ++i)
    if ((r = loom__lang_apply(q, &s->stmts[i])) != LOOM_SUCCESS)
      loom__fail_append(" (case %s, row %s: statement %d of Schedule `%s`)", c->name, lang_case_row_label(c, j), i + 1,
                        c->schedule);
  if (r == LOOM_SUCCESS) r = loom_prog_check(q);
  if (r != LOOM_SUCCESS) {
    loom_prog_destroy(q);
    return r;
  }
  *out = q;
  return LOOM_SUCCESS;
}

int lang_prog_dropout(loom_prog_t p, float *prob, uint64_t *seed) {
  int found = 0;
  for (int i = 0; i < p->n; ++i) {
    const loom__node_t *nd = &p->nodes[i];
    if (nd->op != LOOM__OP_DROPOUT || nd->removed) continue;
    *prob = (float)nd->value, *seed = nd->seed;
    ++found;
  }
  return found == 1 ? 0 : -1;
}
