/*
 * test_optim.c - host tests of the distributed optimizers' schedule
 * (src/ops/optim/optim_schedule.h) at W = 1, 2, 3, 4, 8, 16, 64, of their
 * description checks (src/ops/optim/optim.c, no GPU) and of their CPU references
 * (src/ref/optim_ref.c) against closed forms:
 *  - every element of every RS tensor is updated by exactly one rank (its
 *    owner), of every AR tensor by every rank, in chunks of 1..C elements
 *    starting at multiples of the vector width; the owner and chunk lookups
 *    name the chunk that holds the element; state indices are dense per
 *    tensor and vector-aligned; global chunk indices are a permutation in
 *    rank order (RS) or the same list on every rank (AR);
 *  - sizes 1, below W, not multiples of W or of 8, single chunks, many;
 *  - every bad description field is refused, naming it and its value;
 *  - Adam / AdamW / L2 / no bias correction and LAMB (trust ratio and its
 *    zero guards) single steps equal their closed forms; the reduction sums
 *    the exact bf16/fp16/fp32 inputs.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "ops/optim/optim.h"
#include "ops/optim/optim_schedule.h"
#include "ref/optim_ref.h"
#include "ref/ref.h"

static const int32_t worlds[] = {1, 2, 3, 4, 8, 16, 64};
static const int64_t sizes[] = {1, 2, 7, 8, 9, 15, 63, 64, 65, 100, 1000, 4095, 4096, 4097, 8191, 12345, 65536, 100003};
#define NSIZES ((int)(sizeof sizes / sizeof *sizes))

/* Checks one (W, chunk, form) schedule over the tensor list `sizes`. */
static void check_schedule(int32_t W, int64_t C, int form) {
  const int T = NSIZES;
  int ar[NSIZES], vec[NSIZES];
  int64_t gfirst[NSIZES + 1];
  gfirst[0] = 0;
  for (int t = 0; t < T; ++t) {
    ar[t] = loom__optim_tensor_is_ar(form, sizes[t]);
    vec[t] = t % 2;
    gfirst[t + 1] = gfirst[t] + loom__optim_tensor_global_chunks(sizes[t], W, ar[t], C);
  }
  const int64_t G = gfirst[T];
  /* per element: how many ranks update it */
  int64_t total = 0;
  for (int t = 0; t < T; ++t) total += sizes[t];
  int64_t *base = (int64_t *)calloc((size_t)T, sizeof(int64_t));
  for (int t = 1; t < T; ++t) base[t] = base[t - 1] + sizes[t - 1];
  int *hits = (int *)calloc((size_t)total, sizeof(int));
  int *ghits = (int *)calloc((size_t)G, sizeof(int));
  for (int32_t p = 0; p < W; ++p) {
    int64_t state_off[NSIZES], state_elems = 0;
    const int64_t n = loom__optim_build_chunks(T, sizes, ar, vec, W, p, C, NULL, state_off, &state_elems);
    loom_optim_chunk_t *ch = (loom_optim_chunk_t *)calloc((size_t)(n > 0 ? n : 1), sizeof *ch);
    CHECK_EQ_INT(loom__optim_build_chunks(T, sizes, ar, vec, W, p, C, ch, NULL, NULL), n);
    int64_t expect_state = 0, first_of_tensor = 0;
    int prev_t = -1;
    for (int64_t q = 0; q < n; ++q) {
      const loom_optim_chunk_t c = ch[q];
      const int t = c.tensor;
      CHECK(t >= prev_t); /* tensor-major */
      if (t != prev_t) first_of_tensor = q;
      prev_t = t;
      int64_t lo, hi;
      loom__optim_rank_range(sizes[t], W, p, ar[t], &lo, &hi);
      CHECK(c.len >= 1 && c.len <= C);
      CHECK(c.offset >= lo && c.offset + c.len <= hi);
      CHECK_EQ_INT(c.offset % LOOM_OPTIM_VEC, 0);
      CHECK_EQ_INT(c.offset, lo + (q - first_of_tensor) * C);
      CHECK_EQ_INT(c.state, state_off[t] + (c.offset - lo));
      CHECK_EQ_INT(state_off[t] % LOOM_OPTIM_VEC, 0);
      CHECK_EQ_INT(!!(c.flags & LOOM_OPTIM_CHUNK_PUSH), !ar[t]);
      CHECK_EQ_INT(!!(c.flags & LOOM_OPTIM_CHUNK_VEC), vec[t]);
      /* a chunk shorter than C is the last of its range */
      if (c.len < C) CHECK_EQ_INT(c.offset + c.len, hi);
      /* global index: in the tensor's list, at the position the schedule says */
      CHECK(c.global >= gfirst[t] && c.global < gfirst[t + 1]);
      CHECK_EQ_INT(c.global, gfirst[t] + loom__optim_global_index(sizes[t], W, p, ar[t], C, q - first_of_tensor));
      if (ar[t]) CHECK_EQ_INT(c.global, gfirst[t] + (q - first_of_tensor));
      if (c.global >= 0 && c.global < G) ghits[c.global]++;
      for (int64_t e = c.offset; e < c.offset + c.len; ++e) {
        hits[base[t] + e]++;
        /* lookups */
        CHECK_EQ_INT(loom__optim_chunk_of(sizes[t], W, p, ar[t], C, e), q - first_of_tensor);
        if (!ar[t]) CHECK_EQ_INT(loom__optim_owner(sizes[t], W, e), p);
      }
    }
    /* state: every tensor's part, rounded up to a vector, in order */
    for (int t = 0; t < T; ++t) {
      CHECK_EQ_INT(state_off[t], expect_state);
      int64_t lo, hi;
      loom__optim_rank_range(sizes[t], W, p, ar[t], &lo, &hi);
      CHECK_EQ_INT(loom__optim_rank_chunks(sizes[t], W, p, ar[t], C), loom__ceil_div(hi - lo, C));
      CHECK_EQ_INT(loom__optim_rank_state(sizes[t], W, p, ar[t]), loom__optim_round_vec(hi - lo));
      expect_state += loom__optim_round_vec(hi - lo);
    }
    CHECK_EQ_INT(state_elems, expect_state);
    free(ch);
  }
  /* every RS element once, every AR element once per rank */
  int64_t bad = 0;
  for (int t = 0; t < T; ++t)
    for (int64_t e = 0; e < sizes[t]; ++e) bad += hits[base[t] + e] != (ar[t] ? W : 1);
  CHECK_EQ_INT(bad, 0);
  /* every global chunk written by exactly one rank (RS) or by every rank (AR) */
  for (int t = 0; t < T; ++t)
    for (int64_t g = gfirst[t]; g < gfirst[t + 1]; ++g)
      if (ghits[g] != (ar[t] ? W : 1)) {
        loom_test_fail(__FILE__, __LINE__, "W=%d C=%lld form=%d tensor %d: global chunk %lld written %d times", W,
                       (long long)C, form, t, (long long)g, ghits[g]);
        break;
      }
  /* slices: consecutive, rank order, every slice but the last ones full */
  for (int t = 0; t < T; ++t) {
    int64_t next = 0;
    for (int32_t p = 0; p < W; ++p) {
      int64_t lo, hi;
      loom__optim_slice(sizes[t], W, p, &lo, &hi);
      CHECK_EQ_INT(lo, next);
      CHECK(hi - lo <= loom__optim_slice_elems(sizes[t], W));
      if (hi < sizes[t]) CHECK_EQ_INT(hi - lo, loom__optim_slice_elems(sizes[t], W));
      next = hi;
    }
    CHECK_EQ_INT(next, sizes[t]);
  }
  free(base), free(hits), free(ghits);
}

LOOM_TEST(optim_schedule_every_element_once_any_world) {
  static const int64_t chunks[] = {8, 64, 4096};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ++ci)
      for (int form = 0; form <= 2; ++form) check_schedule(worlds[wi], chunks[ci], form);
}

LOOM_TEST(optim_schedule_small_tensors_live_on_the_first_ranks) {
  /* 1 element on 64 ranks: rank 0 owns it, every other slice is empty */
  int64_t lo, hi;
  loom__optim_slice(1, 64, 0, &lo, &hi);
  CHECK_EQ_INT(lo, 0);
  CHECK_EQ_INT(hi, 1);
  for (int p = 1; p < 64; ++p) {
    loom__optim_slice(1, 64, p, &lo, &hi);
    CHECK_EQ_INT(hi - lo, 0);
    CHECK_EQ_INT(loom__optim_rank_chunks(1, 64, p, 0, 4096), 0);
  }
  /* 17 elements on 2 ranks: slices of 16 and 1 */
  CHECK_EQ_INT(loom__optim_slice_elems(17, 2), 16);
  loom__optim_slice(17, 2, 1, &lo, &hi);
  CHECK_EQ_INT(lo, 16);
  CHECK_EQ_INT(hi, 17);
  /* the automatic form: AR up to 4096 elements */
  CHECK(loom__optim_tensor_is_ar(LOOM_OPTIM_AUTO, 4096));
  CHECK(!loom__optim_tensor_is_ar(LOOM_OPTIM_AUTO, 4097));
  CHECK(!loom__optim_tensor_is_ar(LOOM_OPTIM_RS_OPT_AG, 1));
  CHECK(loom__optim_tensor_is_ar(LOOM_OPTIM_AR_OPT, 1 << 30));
}

LOOM_TEST(optim_schedule_bert_large_list) {
  /* 360 tensors of BERT-large's shapes: per layer 4 attention weights
   * [1024, 1024] and biases, 2 LayerNorms, the MLP [4096, 1024] x 2 and
   * biases; the sum of every rank's state is the tensor total (RS) plus W
   * times the AR total, up to vector padding */
  int64_t n[360];
  int T = 0;
  for (int l = 0; l < 24 && T + 15 <= 360; ++l) {
    const int64_t layer[15] = {1 << 20, 1024, 1 << 20, 1024, 1 << 20, 1024, 1 << 20, 1024, 1024, 1024,
                               4 << 20, 4096, 4 << 20, 1024, 1024};
    for (int i = 0; i < 15; ++i) n[T++] = layer[i];
  }
  CHECK_EQ_INT(T, 360);
  int ar[360];
  for (int W = 1; W <= 64; W *= 2) {
    int64_t rs_total = 0, ar_total = 0, state_sum = 0, chunks = 0;
    for (int t = 0; t < T; ++t) {
      ar[t] = loom__optim_tensor_is_ar(LOOM_OPTIM_AUTO, n[t]);
      if (ar[t]) ar_total += n[t];
      else rs_total += n[t];
    }
    for (int p = 0; p < W; ++p) {
      int64_t se = 0;
      chunks += loom__optim_build_chunks(T, n, ar, NULL, W, p, 4096, NULL, NULL, &se);
      state_sum += se;
    }
    CHECK(state_sum >= rs_total + (int64_t)W * ar_total);
    CHECK(state_sum <= rs_total + (int64_t)W * ar_total + (int64_t)W * T * LOOM_OPTIM_VEC);
    CHECK(chunks >= loom__ceil_div(rs_total, 4096));
  }
}

static loom_optim_desc_t good_desc(void **ptrs, int64_t *numels) {
  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  d.world_size = 2;
  d.num_tensors = 2;
  d.params = ptrs;
  d.grads = ptrs + 2;
  d.numels = numels;
  return d;
}

LOOM_TEST(optim_bad_descriptions_are_named) {
  static char mem[4][64];
  void *ptrs[4] = {mem[0], mem[1], mem[2], mem[3]};
  int64_t numels[2] = {10, 3};
  const char *fn = "loom_plan_adam";
  loom_optim_desc_t d = good_desc(ptrs, numels);
  CHECK_RESULT(loom__optim_check_desc(fn, 2, &d), LOOM_SUCCESS);
  CHECK_RESULT(loom__optim_check_desc(fn, 2, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc=NULL");
#define BAD(field_stmt, text)                                                  \
  do {                                                                         \
    loom_optim_desc_t b = good_desc(ptrs, numels);                             \
    int64_t nb[2] = {10, 3};                                                   \
    b.numels = nb;                                                             \
    field_stmt;                                                                \
    CHECK_RESULT(loom__optim_check_desc(fn, 2, &b), LOOM_ERR_INVALID_ARGUMENT); \
    CHECK_MSG(text);                                                           \
  } while (0)
  BAD(b.struct_size = 8, "desc->struct_size=8");
  BAD(b.world_size = 3, "desc->world_size=3");
  BAD(b.num_tensors = 0, "desc->num_tensors=0");
  BAD(b.params = NULL, "desc->params=NULL");
  BAD(b.grads = NULL, "desc->grads=NULL");
  BAD(b.numels = NULL, "desc->numels=NULL");
  BAD(nb[1] = 0, "desc->numels[1]=0");
  BAD(nb[0] = -5, "desc->numels[0]=-5");
  BAD(b.param_type = (loom_dtype_t)7, "desc->param_type=7");
  BAD(b.grad_type = (loom_dtype_t)-1, "desc->grad_type=-1");
  BAD(b.form = (loom_optim_form_t)9, "desc->form=9");
  BAD(b.lr = -1.0f, "desc->lr=-1");
  BAD(b.lr = NAN, "desc->lr=nan");
  BAD(b.beta1 = 1.0f, "desc->beta1=1");
  BAD(b.beta2 = -0.5f, "desc->beta2=-0.5");
  BAD(b.eps = 0.0f, "desc->eps=0");
  BAD(b.weight_decay = -0.1f, "desc->weight_decay=-0.1");
  BAD(b.decoupled_weight_decay = 2, "desc->decoupled_weight_decay=2");
  BAD(b.bias_correction = -1, "desc->bias_correction=-1");
  BAD(b.average_grads = 5, "desc->average_grads=5");
  BAD(b.use_nvlamb = 3, "desc->use_nvlamb=3");
  BAD(b.chunk_elems = 12, "desc->chunk_elems=12");
  BAD(b.chunk_elems = -8, "desc->chunk_elems=-8");
  {
    static const float wds[2] = {0.0f, -1.0f};
    BAD(b.weight_decays = wds, "desc->weight_decays[1]=-1");
  }
  {
    void *nullp[4] = {mem[0], NULL, mem[2], mem[3]};
    BAD(b.params = nullp, "desc->params[1]=NULL");
  }
#undef BAD
}

/* ---- references against closed forms ---- */

static loom_ref_optim_hp_t hp_default(void) {
  loom_ref_optim_hp_t h;
  memset(&h, 0, sizeof h);
  h.lr = 1e-2, h.beta1 = 0.9, h.beta2 = 0.999, h.eps = 1e-8, h.weight_decay = 0;
  h.decoupled = 1, h.bias_correction = 1;
  return h;
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 * (1 + fabs(b)); }

LOOM_TEST(optim_ref_adam_single_steps_closed_form) {
  const double g[4] = {0.5, -2.0, 1e-3, 3.0}, p0[4] = {1.0, -0.25, 0.75, 0.0};
  for (int mode = 0; mode < 4; ++mode) {
    loom_ref_optim_hp_t h = hp_default();
    if (mode == 1) h.weight_decay = 0.1;                  /* AdamW */
    if (mode == 2) h.weight_decay = 0.1, h.decoupled = 0; /* L2 */
    if (mode == 3) h.bias_correction = 0;
    double p[4], m[4] = {0}, v[4] = {0};
    memcpy(p, p0, sizeof p);
    loom_ref_adam_step(&h, 1, 4, p, m, v, g);
    for (int i = 0; i < 4; ++i) {
      double want;
      if (mode == 0) want = p0[i] - h.lr * g[i] / (fabs(g[i]) + h.eps);
      else if (mode == 1) want = p0[i] * (1 - h.lr * h.weight_decay) - h.lr * g[i] / (fabs(g[i]) + h.eps);
      else if (mode == 2) {
        const double gg = g[i] + h.weight_decay * p0[i];
        want = p0[i] - h.lr * gg / (fabs(gg) + h.eps);
      } else {
        want = p0[i] - h.lr * (1 - h.beta1) * g[i] / (sqrt(1 - h.beta2) * fabs(g[i]) + h.eps);
      }
      if (!close_to(p[i], want)) loom_test_fail(__FILE__, __LINE__, "mode %d elem %d: %.17g != %.17g", mode, i, p[i], want);
    }
    /* a second step with the same gradient: the bias-corrected moments are
     * still g and g^2 (no weight decay) */
    if (mode == 0) {
      double p1[4];
      memcpy(p1, p, sizeof p);
      loom_ref_adam_step(&h, 2, 4, p, m, v, g);
      for (int i = 0; i < 4; ++i) CHECK(close_to(p[i], p1[i] - h.lr * g[i] / (fabs(g[i]) + h.eps)));
    }
  }
}

LOOM_TEST(optim_ref_lamb_single_steps_closed_form_and_guards) {
  const double g[3] = {0.5, -2.0, 1.0}, p0[3] = {1.0, 2.0, -2.0};
  /* decoupled weight decay: u = g / (|g| + eps) + wd p, ratio lr ||p|| / ||u|| */
  loom_ref_optim_hp_t h = hp_default();
  h.weight_decay = 0.01;
  double p[3], m[3] = {0}, v[3] = {0}, u[3], un = 0, pn = 0, ratio = 0;
  memcpy(p, p0, sizeof p);
  for (int i = 0; i < 3; ++i) {
    u[i] = g[i] / (fabs(g[i]) + h.eps) + h.weight_decay * p0[i];
    un += u[i] * u[i], pn += p0[i] * p0[i];
  }
  loom_ref_lamb_step(&h, 1, 3, p, m, v, g, &ratio);
  CHECK(close_to(ratio, h.lr * sqrt(pn) / sqrt(un)));
  for (int i = 0; i < 3; ++i) CHECK(close_to(p[i], p0[i] - ratio * u[i]));
  /* zero parameters: ||p|| = 0, the ratio is lr */
  double z[3] = {0, 0, 0}, m2[3] = {0}, v2[3] = {0};
  loom_ref_lamb_step(&h, 1, 3, z, m2, v2, g, &ratio);
  CHECK(close_to(ratio, h.lr));
  /* no weight decay and no nvlamb: the ratio is lr; with nvlamb: the trust ratio */
  h.weight_decay = 0;
  memcpy(p, p0, sizeof p);
  memset(m, 0, sizeof m), memset(v, 0, sizeof v);
  loom_ref_lamb_step(&h, 1, 3, p, m, v, g, &ratio);
  CHECK(close_to(ratio, h.lr));
  h.use_nvlamb = 1;
  memcpy(p, p0, sizeof p);
  memset(m, 0, sizeof m), memset(v, 0, sizeof v);
  loom_ref_lamb_step(&h, 1, 3, p, m, v, g, &ratio);
  un = 0;
  for (int i = 0; i < 3; ++i) un += pow(g[i] / (fabs(g[i]) + h.eps), 2);
  CHECK(close_to(ratio, h.lr * sqrt(pn) / sqrt(un)));
  /* zero gradient and zero moments: ||u|| = 0, the ratio is lr */
  const double g0[3] = {0, 0, 0};
  memset(m, 0, sizeof m), memset(v, 0, sizeof v);
  loom_ref_lamb_step(&h, 1, 3, p, m, v, g0, &ratio);
  CHECK(close_to(ratio, h.lr));
  /* L2 mode: the decay is in the gradient, not in u */
  h.use_nvlamb = 0, h.decoupled = 0, h.weight_decay = 0.5;
  memcpy(p, p0, sizeof p);
  memset(m, 0, sizeof m), memset(v, 0, sizeof v);
  loom_ref_lamb_step(&h, 1, 3, p, m, v, g, &ratio);
  un = 0;
  for (int i = 0; i < 3; ++i) {
    const double gg = g[i] + 0.5 * p0[i];
    u[i] = gg / (fabs(gg) + h.eps);
    un += u[i] * u[i];
  }
  CHECK(close_to(ratio, h.lr * sqrt(pn) / sqrt(un)));
  for (int i = 0; i < 3; ++i) CHECK(close_to(p[i], p0[i] - ratio * u[i]));
}

LOOM_TEST(optim_ref_reduce_sums_the_exact_inputs) {
  uint16_t a[3], b[3];
  float c[3] = {0.1f, -3.0f, 1e-3f};
  for (int i = 0; i < 3; ++i) {
    a[i] = loom_ref_float_to_bf16(1.0f + (float)i);
    b[i] = loom_ref_float_to_bf16(0.5f * (float)i - 0.25f);
  }
  const void *gs[2] = {a, b};
  double g[3];
  loom_ref_optim_reduce(LOOM_BF16, 2, gs, 3, 2.0, 4.0, g);
  for (int i = 0; i < 3; ++i)
    CHECK(close_to(g[i], ((double)loom_ref_bf16_to_float(a[i]) + loom_ref_bf16_to_float(b[i])) / 8.0));
  const void *gf[1] = {c};
  loom_ref_optim_reduce(LOOM_FP32, 1, gf, 3, 1.0, 1.0, g);
  for (int i = 0; i < 3; ++i) CHECK_EQ_INT(g[i] == (double)c[i], 1);
  /* the sum in rank order in fp32 (the kernels' contract): 1 + 2^-24 is 1 in
   * fp32, so (1 + 2^-24) - 1 is 0 where a double sum would keep 2^-24 */
  const float x[1] = {1.0f}, y[1] = {5.9604645e-08f}, z[1] = {-1.0f};
  const void *gx[3] = {x, y, z};
  loom_ref_optim_reduce(LOOM_FP32, 3, gx, 1, 1.0, 1.0, g);
  CHECK_EQ_INT(g[0] == 0.0, 1);
}
