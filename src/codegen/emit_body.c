/*
 * emit_body.c - a loop of a kernel unit as CUDA C (emit.h): its frame
 * (ELEM: grid-stride over this rank's piece; ROW: a block per row, the
 * row's sum, then its elements; SUMSQ: a block per partial slot), the
 * element's global coordinates g0.. (the piece's index unravelled, plus the
 * slice's offset), the body's instructions as floats, and its stores.
 *
 * A load's index: the buffer's dimension j takes g[src[j]] (0 where it is
 * broadcast), less the offset of the piece it reads along the sliced
 * dimension, in the piece's row-major order. The piece read: this rank's
 * (q), the owner of the element (g[sliced] / S), a root's or a Send
 * source's (index q of the other group).
 *
 * Vectors. An ELEM or SUMSQ loop, and a ROW loop whose row is kept in
 * registers, runs w consecutive elements of its piece in one body instance
 * (w = 8 where the loop touches a 16-bit buffer, 4 where it touches FP32
 * only: 16 bytes of either) where every access is either w consecutive
 * elements of a buffer, aligned (its last dimension is the loop's, whole
 * vectors on every rank: the extent and, where sliced, the slice a multiple
 * of w), or one element for all of them (its last dimension broadcast): each
 * value is then float v<k>[w], loads and stores are 16-byte vectors
 * (loom__cg_loadv / _storev) and Dropout draws one Philox call per 4
 * elements (loom__dropout_keep4). Arena buffers are 256-byte aligned; the
 * caller's buffers are read so only where every one is 16-byte aligned
 * (a.vec), else the same loop runs an element at a time. A Norm's value
 * (the square root of its partials' sum) is read once before the loop.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg_args.h"
#include "codegen/emit.h"
#include "codegen/emit_body.h"
#include "core/error.h"
#include "core/pointwise.h"

static const char *dtype_c(int t) { return t == LOOM_FP32 ? "LOOM_FP32" : t == LOOM_FP16 ? "LOOM_FP16" : "LOOM_BF16"; }

/* A float constant as C (exact conversion of the double, as the host's (float)). */
static void float_lit(double v, char *out, size_t cap) {
  if (isnan(v)) snprintf(out, cap, "__int_as_float(0x7fc00000)");
  else if (isinf(v)) snprintf(out, cap, "__int_as_float(%s)", v > 0 ? "0x7f800000" : "(int)0xff800000u");
  else snprintf(out, cap, "(float)%.17g", v);
}

/* "1" or the condition that rank r runs over geometry g (its group; a root only). */
static void runs(const cg_emit_t *E, const loom__lw_geom_t *g, char *out, size_t cap) {
  const int W = E->lw->W;
  if (g->group < 0 && g->root < 0) snprintf(out, cap, "1");
  else if (g->root < 0) snprintf(out, cap, "r / %d == %d", W, g->group);
  else if (g->group < 0) snprintf(out, cap, "q == %d", g->root);
  else snprintf(out, cap, "r / %d == %d && q == %d", W, g->group, g->root);
}

/* The pointer to buffer b in rank `rank`'s memory (own: the rank is r). */
static loom_result_t buf_ptr(const cg_emit_t *E, int b, const char *rank, int own, char *out, size_t cap) {
  const loom__lw_buf_t *x = &E->lw->bufs[b];
  if (x->store & LOOM__LWB_ARENA) {
    snprintf(out, cap, "(a.arena[%s] + %lldll)", rank, (long long)x->arena_off);
    return LOOM_SUCCESS;
  }
  if (own && (x->store & LOOM__LWB_INPUT)) {
    snprintf(out, cap, "((const char *)a.ptr[%d])", x->input);
    return LOOM_SUCCESS;
  }
  return loom__fail(LOOM_ERR_INTERNAL, "emit: buffer %d is read %s but lives nowhere it can be", b,
                    own ? "here" : "by a peer");
}

/* Declares p<k>, o<k> and l<k> (the piece read, its offset and length along the sliced dimension) for
 * instruction k's load from the piece of index `piece` of index map x. */
static void piece_decl(const cg_emit_t *E, const loom__lw_index_t *x, int k, const char *piece) {
  const loom__lw_geom_t *g = &x->geom;
  if (g->sliced < 0) return;
  const long long n = (long long)g->dims[g->sliced], S = (long long)g->S;
  loom__buf_printf(E->o, "      const int64_t p%d = %s, o%d = LOOM_CG_MIN(%lldll, p%d * %lldll);\n", k, piece, k, n, k,
                   S);
  loom__buf_printf(E->o, "      const int64_t l%d = LOOM_CG_MIN(%lldll, (p%d + 1) * %lldll) - o%d;\n", k, n, k, S, k);
}

/* The flat index of instruction k's element in its piece (piece_decl's o<k>, l<k>). */
static void index_expr(const loom__lw_index_t *x, int k, char *out, size_t cap) {
  const loom__lw_geom_t *g = &x->geom;
  size_t n = 0;
  n += (size_t)snprintf(out + n, cap - n, "(int64_t)0");
  for (int j = 0; j < g->rank && n < cap; ++j) {
    char c[48], d[48];
    if (x->src[j] < 0) snprintf(c, sizeof c, "0");
    else if (j == g->sliced) snprintf(c, sizeof c, "(g%d - o%d)", x->src[j], k);
    else snprintf(c, sizeof c, "g%d", x->src[j]);
    if (j == g->sliced) snprintf(d, sizeof d, "l%d", k);
    else snprintf(d, sizeof d, "%lldll", (long long)g->dims[j]);
    char prev[1024];
    snprintf(prev, sizeof prev, "%s", out);
    n = (size_t)snprintf(out, cap, "(%s * %s + %s)", prev, d, c);
  }
}

/* ---- vectors ---------------------------------------------------------------------------------- */

/* Dimension j of geometry g splits into whole vectors of w elements on every rank. */
static int whole_vectors(const loom__lw_geom_t *g, int j, int w) {
  return g->dims[j] % w == 0 && (j != g->sliced || g->S % w == 0);
}

/* How a loop running vectors of w reads index map x (lower_body.c's broadcasting: a buffer's last dimension is
 * the loop's last, or broadcast): w consecutive elements of the buffer, aligned (CONTIG); one element for every
 * lane (SAME); neither (NONE: the loop runs an element at a time). */
enum { ACC_NONE = 0, ACC_CONTIG, ACC_SAME };
static int access_of(const loom__lw_index_t *x, int w) {
  const loom__lw_geom_t *g = &x->geom;
  if (g->rank == 0 || x->src[g->rank - 1] < 0) return ACC_SAME;
  return whole_vectors(g, g->rank - 1, w) ? ACC_CONTIG : ACC_NONE;
}

/* v<k>[E->vec], every lane the scalar h<k>. */
static void lanes_of(const cg_emit_t *E, int k) {
  loom__buf_printf(E->o, "      float v%d[%d];\n#pragma unroll\n      for (int u = 0; u < %d; ++u) v%d[u] = h%d;\n", k,
                   E->vec, E->vec, k, k);
}

/* An expression format over values "v%d" as one of its lanes: "v%d[u]". */
static void lane_fmt(const char *f, char *out, size_t cap) {
  size_t n = 0;
  for (; *f && n + 4 < cap; ++f) {
    out[n++] = *f;
    if (f[0] == 'd' && n >= 3 && out[n - 2] == '%' && out[n - 3] == 'v') out[n++] = '[', out[n++] = 'u', out[n++] = ']';
  }
  out[n] = 0;
}

int loom__cg_loop_width(const loom__lw_prog_t *lw, const loom__lw_loop_t *l) {
  const loom__lw_geom_t *g = &l->space;
  int w = LOOM_CG_VEC / 2; /* 16 bytes of FP32; 16 of a 16-bit type where the loop touches one */
  for (int k = 0; k < l->nins; ++k) {
    const loom__lw_ins_t *in = &lw->ins[l->ins0 + k];
    if ((in->kind == LOOM__LI_LOAD || in->kind == LOOM__LI_REDUCE) && lw->bufs[in->buf].dtype != LOOM_FP32)
      w = LOOM_CG_VEC;
  }
  for (int s = 0; s < l->nstore; ++s)
    if (lw->bufs[l->store_buf[s]].dtype != LOOM_FP32) w = LOOM_CG_VEC;
  if (g->rank == 0 || !whole_vectors(g, g->rank - 1, w)) return 1;
  for (int k = 0; k < l->nins; ++k) {
    const loom__lw_ins_t *in = &lw->ins[l->ins0 + k];
    const int reads = in->kind == LOOM__LI_LOAD || in->kind == LOOM__LI_REDUCE;
    const int drop = in->kind == LOOM__LI_OP && in->op == LOOM__OP_DROPOUT;
    if (reads && access_of(&lw->idx[in->idx], w) == ACC_NONE) return 1;
    if (drop && access_of(&lw->idx[in->idx], w) != ACC_CONTIG) return 1; /* its 4-element Philox draws */
  }
  return w;
}

/* Whether loop l touches the caller's buffers (their alignment is known at the call only: a.vec): a read of
 * a buffer outside the arena (an input read in place: by its own rank, or in a group of one rank by any
 * read), or a store into an output. */
static int touches_caller(const cg_emit_t *E, const loom__lw_loop_t *l) {
  for (int k = 0; k < l->nins; ++k) {
    const loom__lw_ins_t *in = &E->lw->ins[l->ins0 + k];
    const int reads = in->kind == LOOM__LI_LOAD || in->kind == LOOM__LI_REDUCE;
    if (reads && !(E->lw->bufs[in->buf].store & LOOM__LWB_ARENA)) return 1;
  }
  for (int s = 0; s < l->nstore; ++s)
    if (E->lw->bufs[l->store_buf[s]].noutput) return 1;
  return 0;
}

/* ---- instructions ------------------------------------------------------------------------- */

static loom_result_t emit_load(const cg_emit_t *E, const loom__lw_ins_t *in, int k) {
  const loom__lw_index_t *x = &E->lw->idx[in->idx];
  char rank[48], piece[48], ptr[96], ix[1024];
  const int own = in->who == LOOM__LWW_OWN || (E->lw->W == 1 && in->who != LOOM__LWW_SRC); /* a group of one */
  switch (in->who) {
    case LOOM__LWW_OWN: snprintf(rank, sizeof rank, "r"), snprintf(piece, sizeof piece, "q"); break;
    case LOOM__LWW_OWNER:
      if (x->geom.sliced < 0) return loom__fail(LOOM_ERR_INTERNAL, "emit: an owner's load of a whole buffer");
      snprintf(piece, sizeof piece, "g%d / %lldll", x->src[x->geom.sliced], (long long)x->geom.S);
      snprintf(rank, sizeof rank, "base + (int)p%d", k);
      break;
    case LOOM__LWW_ROOT: snprintf(rank, sizeof rank, "base + %d", in->arg), snprintf(piece, sizeof piece, "q"); break;
    default: snprintf(rank, sizeof rank, "r - %d", in->arg * E->lw->W), snprintf(piece, sizeof piece, "q"); break;
  }
  LOOM_TRY(buf_ptr(E, in->buf, rank, own, ptr, sizeof ptr));
  piece_decl(E, x, k, piece);
  index_expr(x, k, ix, sizeof ix);
  const char *T = dtype_c(E->lw->bufs[in->buf].dtype);
  if (E->vec == 1)
    loom__buf_printf(E->o, "      const float v%d = loom__load1<%s>(%s, %s);\n", k, T, ptr, ix);
  else if (access_of(x, E->vec) == ACC_CONTIG)
    loom__buf_printf(E->o, "      float v%d[%d];\n      loom__cg_loadv<%s, %d>(%s, %s, v%d);\n", k, E->vec, T, E->vec, ptr,
                     ix, k);
  else {
    loom__buf_printf(E->o, "      const float h%d = loom__load1<%s>(%s, %s);\n", k, T, ptr, ix);
    lanes_of(E, k);
  }
  return LOOM_SUCCESS;
}

/* A reduction over the group's ranks in rank order (fp32), as the interpreter's: vector lanes where the
 * loop runs vectors of the buffer's consecutive elements, else one element (every lane's, where the
 * buffer is broadcast along the loop's last dimension). */
static loom_result_t emit_reduce(const cg_emit_t *E, const loom__lw_ins_t *in, int k) {
  const loom__lw_index_t *x = &E->lw->idx[in->idx];
  const loom__lw_buf_t *b = &E->lw->bufs[in->buf];
  const int W = E->lw->W;
  if (x->geom.sliced >= 0 || (!(b->store & LOOM__LWB_ARENA) && W > 1))
    return loom__fail(LOOM_ERR_INTERNAL, "emit: a reduction of a sliced or private buffer");
  char ix[1024], acc[32], step[96], own[96];
  index_expr(x, k, ix, sizeof ix);
  LOOM_TRY(buf_ptr(E, in->buf, "base", 1, own, sizeof own)); /* rank `base` (the first of the group)'s: at W = 1, r's */
  const char *T = dtype_c(b->dtype), *f = in->op == LOOM__RED_MAX   ? "fmaxf(%s, %s)"
                                          : in->op == LOOM__RED_MIN ? "fminf(%s, %s)"
                                                                    : "%s + %s";
  const long long off = (long long)b->arena_off;
  const int lanes = E->vec > 1 && access_of(x, E->vec) == ACC_CONTIG, n = E->vec;
  loom__buf_printf(E->o, "      const int64_t i%d = %s;\n", k, ix);
  if (lanes) {
    snprintf(acc, sizeof acc, "v%d[u]", k);
    snprintf(step, sizeof step, f, acc, "y[u]");
    loom__buf_printf(E->o, "      float v%d[%d];\n      loom__cg_loadv<%s, %d>(%s, i%d, v%d);\n", k, n, T, n, own, k, k);
    loom__buf_printf(E->o, "      for (int p = 1; p < %d; ++p) {\n        float y[%d];\n", E->lw->W, n);
    loom__buf_printf(E->o, "        loom__cg_loadv<%s, %d>(a.arena[base + p] + %lldll, i%d, y);\n", T, n, off, k);
    loom__buf_printf(E->o, "#pragma unroll\n        for (int u = 0; u < %d; ++u) %s = %s;\n      }\n", n, acc, step);
    return LOOM_SUCCESS;
  }
  snprintf(acc, sizeof acc, "%c%d", E->vec > 1 ? 'h' : 'v', k);
  snprintf(step, sizeof step, f, acc, "y");
  loom__buf_printf(E->o, "      float %s = loom__load1<%s>(%s, i%d);\n", acc, T, own, k);
  loom__buf_printf(E->o, "      for (int p = 1; p < %d; ++p) {\n", E->lw->W);
  loom__buf_printf(E->o, "        const float y = loom__load1<%s>(a.arena[base + p] + %lldll, i%d);\n", T, off, k);
  loom__buf_printf(E->o, "        %s = %s;\n      }\n", acc, step);
  if (E->vec > 1) lanes_of(E, k);
  return LOOM_SUCCESS;
}

static const char *binary_fmt(int op) {
  switch (op) {
    case LOOM__OP_ADD: return "v%d + v%d";
    case LOOM__OP_SUB: return "v%d - v%d";
    case LOOM__OP_MUL: return "v%d * v%d";
    case LOOM__OP_DIV: return "v%d / v%d";
    case LOOM__OP_POW: return "powf(v%d, v%d)";
    case LOOM__OP_MAX: return "(v%d > v%d ? v%d : v%d)";
    case LOOM__OP_MIN: return "(v%d < v%d ? v%d : v%d)";
    case LOOM__OP_LT: return "(v%d < v%d ? 1.f : 0.f)";
    case LOOM__OP_LE: return "(v%d <= v%d ? 1.f : 0.f)";
    case LOOM__OP_GT: return "(v%d > v%d ? 1.f : 0.f)";
    case LOOM__OP_GE: return "(v%d >= v%d ? 1.f : 0.f)";
    case LOOM__OP_EQ: return "(v%d == v%d ? 1.f : 0.f)";
    case LOOM__OP_NE: return "(v%d != v%d ? 1.f : 0.f)";
    default: return NULL;
  }
}

static const char *unary_fmt(int op, int dtype) {
  switch (op) {
    case LOOM__OP_NEG: return "-v%d";
    case LOOM__OP_SQRT: return "sqrtf(v%d)";
    case LOOM__OP_EXP: return "expf(v%d)";
    case LOOM__OP_RELU: return "(v%d > 0.f ? v%d : 0.f)";
    case LOOM__OP_GELU: return "0.5f * v%d * (1.f + tanhf(0.7978845608028654f * (v%d + 0.044715f * v%d * v%d * v%d)))";
    case LOOM__OP_SILU: return "v%d / (1.f + expf(-v%d))";
    case LOOM__OP_CAST:
      return dtype == LOOM_FP16 ? "loom__cg_round_fp16(v%d)" : dtype == LOOM_BF16 ? "loom__cg_round_bf16(v%d)" : "v%d";
    default: return NULL;
  }
}

static loom_result_t emit_op(const cg_emit_t *E, const loom__lw_ins_t *in, int k) {
  const int a0 = in->a[0], a1 = in->a[1];
  char expr[1400], lane[256];
  const char *f = binary_fmt(in->op);
  if (!f) f = unary_fmt(in->op, in->dtype);
  if (f) {
    if (E->vec > 1) lane_fmt(f, lane, sizeof lane), f = lane;
    if (binary_fmt(in->op)) snprintf(expr, sizeof expr, f, a0, a1, a0, a1);
    else snprintf(expr, sizeof expr, f, a0, a0, a0, a0, a0);
    if (E->vec > 1)
      loom__buf_printf(E->o, "      float v%d[%d];\n#pragma unroll\n      for (int u = 0; u < %d; ++u) v%d[u] = %s;\n",
                       k, E->vec, E->vec, k, expr);
    else loom__buf_printf(E->o, "      const float v%d = %s;\n", k, expr);
    return LOOM_SUCCESS;
  }
  if (in->op != LOOM__OP_DROPOUT)
    return loom__fail(LOOM_ERR_INTERNAL, "emit: no code for %s", loom__lang_op_info((loom__op_t)in->op)->name);
  char ix[1024], ks[64];
  index_expr(&E->lw->idx[in->idx], k, ix, sizeof ix);
  float_lit((double)(1.0f / (1.0f - (float)in->value)), ks, sizeof ks);
  const unsigned long long seed = (unsigned long long)in->seed;
  const unsigned thr = loom__dropout_threshold((float)in->value);
  if (E->vec == 1) {
    loom__buf_printf(E->o, "      const float v%d = loom__dropout_keep(%lluull, 0ull, (uint64_t)%s, %uu) ? v%d * %s : 0.f;\n",
                     k, seed, ix, thr, a0, ks);
    return LOOM_SUCCESS;
  }
  /* lane 0's index is a multiple of 4 (loom__cg_loop_width): one Philox call per 4 lanes */
  loom__buf_printf(E->o, "      float v%d[%d];\n      {\n        const uint64_t d = (uint64_t)%s;\n        int kp[%d];\n", k,
                   E->vec, ix, E->vec);
  for (int j = 0; j < E->vec; j += 4)
    loom__buf_printf(E->o, "        loom__dropout_keep4(%lluull, 0ull, d + %d, %uu, kp + %d);\n", seed, j, thr, j);
  loom__buf_printf(E->o, "#pragma unroll\n        for (int u = 0; u < %d; ++u) v%d[u] = kp[u] ? v%d[u] * %s : 0.f;\n      }\n",
                   E->vec, k, a0, ks);
  return LOOM_SUCCESS;
}

/* The loop's body: its instructions, in order (E->vec lanes each). */
static loom_result_t emit_body(const cg_emit_t *E, const loom__lw_loop_t *l) {
  for (int k = 0; k < l->nins; ++k) {
    const loom__lw_ins_t *in = &E->lw->ins[l->ins0 + k];
    const char c = E->vec > 1 ? 'h' : 'v'; /* a lane-independent value: h<k>, then its lanes */
    char lit[64];
    switch (in->kind) {
      case LOOM__LI_CONST:
        float_lit(in->value, lit, sizeof lit);
        loom__buf_printf(E->o, "      const float %c%d = %s;\n", c, k, lit);
        if (E->vec > 1) lanes_of(E, k);
        break;
      case LOOM__LI_LOAD: LOOM_TRY(emit_load(E, in, k)); break;
      case LOOM__LI_REDUCE: LOOM_TRY(emit_reduce(E, in, k)); break;
      case LOOM__LI_PARTIALS: /* the same for every element: summed once before the loop (hoist_partials) */
        loom__buf_printf(E->o, "      const float %c%d = hp%d;\n", c, k, k);
        if (E->vec > 1) lanes_of(E, k);
        break;
      default: LOOM_TRY(emit_op(E, in, k)); break;
    }
  }
  return LOOM_SUCCESS;
}

/* ---- loop frames ----------------------------------------------------------------------------- */

/* Before loop l's elements: each Norm's value it reads (the square root of the sum of its partials over
 * every rank of the group, or its own), the same for every element: hp<k>, summed by the whole block
 * (a thread per partial, then the block's fixed-order sum: the same bits in every block and on every rank). */
static void hoist_partials(const cg_emit_t *E, const loom__lw_loop_t *l) {
  for (int k = 0; k < l->nins; ++k) {
    const loom__lw_ins_t *in = &E->lw->ins[l->ins0 + k];
    if (in->kind != LOOM__LI_PARTIALS) continue;
    const long long off = (long long)E->lw->bufs[in->buf].arena_off;
    const int n = (in->arg ? E->lw->W : 1) * LOOM__LW_NPART;
    loom__buf_printf(E->o, "    float hp%d = 0.f;\n    for (int t = threadIdx.x; t < %d; t += blockDim.x)\n", k, n);
    loom__buf_printf(E->o, "      hp%d += __ldcg((const float *)(a.arena[%s + t / %d] + %lldll) + t %% %d);\n", k,
                     in->arg ? "base" : "r", LOOM__LW_NPART, off, LOOM__LW_NPART);
    loom__buf_printf(E->o, "    hp%d = sqrtf(loom__coll_block_sum(hp%d, loom_red));\n", k, k);
  }
}

/* Declares this rank's piece of the loop's space: d0.. (its dims), so (its offset along the sliced
 * dimension), cnt (its elements). */
static void piece_frame(const cg_emit_t *E, const loom__lw_geom_t *g) {
  if (g->sliced >= 0) {
    const long long n = (long long)g->dims[g->sliced], S = (long long)g->S;
    loom__buf_printf(E->o, "    const int64_t so = LOOM_CG_MIN(%lldll, (int64_t)q * %lldll);\n", n, S);
    loom__buf_printf(E->o, "    const int64_t sl = LOOM_CG_MIN(%lldll, (int64_t)(q + 1) * %lldll) - so;\n", n, S);
  } else {
    loom__buf_printf(E->o, "    const int64_t so = 0;\n");
  }
  loom__buf_printf(E->o, "    const int64_t cnt = (int64_t)1");
  for (int j = 0; j < g->rank; ++j)
    if (j == g->sliced) loom__buf_printf(E->o, " * sl");
    else loom__buf_printf(E->o, " * %lldll", (long long)g->dims[j]);
  loom__buf_printf(E->o, ";\n    (void)so;\n");
}

/* The element's coordinates g0.. from its index `i` in the piece. */
static void coords(const cg_emit_t *E, const loom__lw_geom_t *g) {
  if (g->rank == 0) return;
  loom__buf_printf(E->o, "      int64_t t = i;\n");
  for (int j = g->rank - 1; j >= 0; --j) {
    char d[32];
    if (j == g->sliced) snprintf(d, sizeof d, "sl");
    else snprintf(d, sizeof d, "%lldll", (long long)g->dims[j]);
    if (j > 0) loom__buf_printf(E->o, "      const int64_t g%d = t %% %s%s;\n      t /= %s;\n", j, d,
                                j == g->sliced ? " + so" : "", d);
    else loom__buf_printf(E->o, "      const int64_t g0 = t%s;\n", g->sliced == 0 ? " + so" : "");
  }
  for (int j = 0; j < g->rank; ++j) loom__buf_printf(E->o, "      (void)g%d;\n", j);
}

/* The stores of an ELEM loop's element i (E->vec of them from i): each value into the arena and the
 * caller's outputs. */
static void stores(const cg_emit_t *E, const loom__lw_loop_t *l) {
  for (int s = 0; s < l->nstore; ++s) {
    const loom__lw_buf_t *b = &E->lw->bufs[l->store_buf[s]];
    char st[48];
    if (E->vec > 1) snprintf(st, sizeof st, "loom__cg_storev<%s, %d>", dtype_c(b->dtype), E->vec);
    else snprintf(st, sizeof st, "loom__store1<%s>", dtype_c(b->dtype));
    const int v = l->store_ins[s];
    if (b->store & LOOM__LWB_ARENA)
      loom__buf_printf(E->o, "      %s(a.arena[r] + %lldll, i, v%d);\n", st, (long long)b->arena_off, v);
    for (int k = 0; k < b->noutput; ++k)
      loom__buf_printf(E->o, "      %s(a.ptr[%d], i, v%d);\n", st, E->lw->ninputs + b->output[k], v);
  }
}

/* The grid-stride loop over the piece's elements (E->vec a body instance). */
static loom_result_t elem_loop(const cg_emit_t *E, const loom__lw_loop_t *l) {
  const int w = E->vec;
  loom__buf_printf(E->o, "    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * %d; i < cnt; "
                         "i += (int64_t)gridDim.x * blockDim.x * %d) {\n", w, w);
  coords(E, &l->space);
  LOOM_TRY(emit_body(E, l));
  stores(E, l);
  loom__buf_printf(E->o, "    }\n");
  return LOOM_SUCCESS;
}

/* A loop's iterations at E->vec elements a body instance. */
typedef loom_result_t (*cg_loop_fn)(const cg_emit_t *E, const loom__lw_loop_t *l);

/* Loop l's iterations (`inner`) at width w; where the loop reads or writes the caller's buffers, the same
 * again an element at a time for a call whose buffers are not all 16-byte aligned (a.vec). */
static loom_result_t at_width(cg_emit_t *E, const loom__lw_loop_t *l, int w, cg_loop_fn inner) {
  const int guard = w > 1 && touches_caller(E, l);
  if (guard) loom__buf_printf(E->o, "    if (a.vec) {\n");
  E->vec = w;
  loom_result_t r = inner(E, l);
  E->vec = 1;
  if (r != LOOM_SUCCESS || !guard) return r;
  loom__buf_printf(E->o, "    } else {\n");
  r = inner(E, l);
  loom__buf_printf(E->o, "    }\n");
  return r;
}

/* Vectors where the loop's accesses allow them (and, for the caller's buffers, the call's alignment). */
static loom_result_t emit_elem(cg_emit_t *E, const loom__lw_loop_t *l) {
  piece_frame(E, &l->space);
  hoist_partials(E, l);
  return at_width(E, l, loom__cg_loop_width(E->lw, l), elem_loop);
}

/* One pass over a row's elements (c), the body recomputed, ending with `tail` on the body's values. */
static loom_result_t row_pass(const cg_emit_t *E, const loom__lw_loop_t *l, const char *tail) {
  loom__buf_printf(E->o, "      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {\n");
  loom__buf_printf(E->o, "      const int64_t i = row * C + c;\n");
  coords(E, &l->space);
  LOOM_TRY(emit_body(E, l));
  loom__buf_printf(E->o, "%s      }\n", tail);
  return LOOM_SUCCESS;
}

/* The ROW loop's values kept in registers between its passes: at most this many floats a thread. */
#define LOOM_CG_ROW_REGS 64

/* The stores of a row's element y (at i = row * C + c; E->vec of them, y[]) into the arena and the
 * caller's outputs, into st. */
static void row_stores(const cg_emit_t *E, const loom__lw_loop_t *l, char *st, size_t cap, size_t n) {
  const loom__lw_buf_t *b = &E->lw->bufs[l->store_buf[0]];
  char f[48];
  if (E->vec > 1) snprintf(f, sizeof f, "loom__cg_storev<%s, %d>", dtype_c(b->dtype), E->vec);
  else snprintf(f, sizeof f, "loom__store1<%s>", dtype_c(b->dtype));
  if (b->store & LOOM__LWB_ARENA && n < cap)
    n += (size_t)snprintf(st + n, cap - n, "      %s(a.arena[r] + %lldll, i, y);\n", f, (long long)b->arena_off);
  for (int k = 0; k < b->noutput && n < cap; ++k)
    n += (size_t)snprintf(st + n, cap - n, "      %s(a.ptr[%d], i, y);\n", f, E->lw->ninputs + b->output[k]);
}

/* Body instances a thread runs over a row of `cols` at width w, where the row's values (the body's x, w and
 * b: `arrays` of them) fit in LOOM_CG_ROW_REGS registers a thread; 0 where they do not. */
static int row_cached_instances(int64_t cols, int w, int arrays) {
  const int64_t n = (cols + (int64_t)LOOM_CG_THREADS * w - 1) / ((int64_t)LOOM_CG_THREADS * w);
  return n >= 1 && n * w * arrays <= LOOM_CG_ROW_REGS ? (int)n : 0;
}

/* RMSNorm / LayerNorm over a row whose values fit in registers (n body instances of E->vec elements a
 * thread, each of the body's x, w and b): one pass computes the body once per element and keeps them,
 * the rest reads the registers. */
static loom_result_t emit_row_cached(const cg_emit_t *E, const loom__lw_loop_t *l, int n) {
  const int ln = l->norm == LOOM__OP_LAYERNORM, x = l->x_ins, hb = l->b_ins >= 0, w = E->vec;
  const char *u = w > 1 ? "[u]" : "";
  char eps[64], st[1024], c[96];
  float_lit(l->eps, eps, sizeof eps);
  snprintf(c, sizeof c, "((int64_t)threadIdx.x + (int64_t)j * %d) * %d", LOOM_CG_THREADS, w);
  loom__buf_printf(E->o, "      float xr[%d], wr[%d]", n * w, n * w);
  if (hb) loom__buf_printf(E->o, ", br[%d]", n * w);
  loom__buf_printf(E->o, ";\n");
  loom__buf_printf(E->o, "      float s1 = 0.f;\n#pragma unroll\n      for (int j = 0; j < %d; ++j) {\n", n);
  loom__buf_printf(E->o, "      const int64_t c = %s;\n#pragma unroll\n", c);
  loom__buf_printf(E->o, "      for (int u = 0; u < %d; ++u) {\n        xr[j * %d + u] = 0.f, wr[j * %d + u] = 0.f;\n", w, w,
                   w);
  if (hb) loom__buf_printf(E->o, "        br[j * %d + u] = 0.f;\n", w);
  loom__buf_printf(E->o, "      }\n");
  loom__buf_printf(E->o, "      if (c >= C) continue;\n      const int64_t i = row * C + c;\n");
  coords(E, &l->space);
  LOOM_TRY(emit_body(E, l));
  loom__buf_printf(E->o, "#pragma unroll\n      for (int u = 0; u < %d; ++u) {\n", w);
  loom__buf_printf(E->o, "        xr[j * %d + u] = v%d%s, wr[j * %d + u] = v%d%s;\n", w, x, u, w, l->w_ins, u);
  if (hb) loom__buf_printf(E->o, "        br[j * %d + u] = v%d%s;\n", w, l->b_ins, u);
  if (ln) loom__buf_printf(E->o, "        s1 += xr[j * %d + u];\n      }\n      }\n", w);
  else loom__buf_printf(E->o, "        s1 += xr[j * %d + u] * xr[j * %d + u];\n      }\n      }\n", w, w);
  loom__buf_printf(E->o, "      s1 = loom__coll_block_sum(s1, loom_red);\n");
  if (ln) {
    loom__buf_printf(E->o, "      const float mean = s1 / (float)C;\n      float s2 = 0.f;\n#pragma unroll\n");
    loom__buf_printf(E->o, "      for (int j = 0; j < %d; ++j)\n        if (%s < C)\n#pragma unroll\n", n, c);
    loom__buf_printf(E->o, "          for (int u = 0; u < %d; ++u) s2 += (xr[j * %d + u] - mean) * (xr[j * %d + u] - mean);\n",
                     w, w, w);
    loom__buf_printf(E->o, "      const float rstd = rsqrtf(loom__coll_block_sum(s2, loom_red) / (float)C + %s);\n",
                     eps);
  } else {
    loom__buf_printf(E->o, "      const float mean = 0.f, rstd = rsqrtf(s1 / (float)C + %s);\n", eps);
  }
  loom__buf_printf(E->o, "#pragma unroll\n      for (int j = 0; j < %d; ++j) {\n", n);
  loom__buf_printf(E->o, "      const int64_t c = %s;\n", c);
  loom__buf_printf(E->o, "      if (c >= C) continue;\n      const int64_t i = row * C + c;\n");
  char yv[160];
  if (hb) snprintf(yv, sizeof yv, "(xr[j * %d + u] - mean) * rstd * wr[j * %d + u] + br[j * %d + u]", w, w, w);
  else snprintf(yv, sizeof yv, "(xr[j * %d + u] - mean) * rstd * wr[j * %d + u]", w, w);
  const size_t m = w > 1 ? (size_t)snprintf(st, sizeof st, "      float y[%d];\n#pragma unroll\n      for (int u = 0; u < "
                                            "%d; ++u) y[u] = %s;\n", w, w, yv)
                         : (size_t)snprintf(st, sizeof st, "      const int u = 0;\n      const float y = %s;\n", yv);
  row_stores(E, l, st, sizeof st, m);
  loom__buf_printf(E->o, "%s      }\n", st);
  return LOOM_SUCCESS;
}

/* The row loop at E->vec: the row kept in registers where it fits, else the body recomputed in each pass
 * (the sum, LayerNorm's variance, the stores; E->vec is 1 there). */
static loom_result_t row_loop(const cg_emit_t *E, const loom__lw_loop_t *l) {
  const int64_t cols = l->space.rank ? l->space.dims[l->space.rank - 1] : 1;
  const int ln = l->norm == LOOM__OP_LAYERNORM, x = l->x_ins;
  const int n = row_cached_instances(cols, E->vec, l->b_ins >= 0 ? 3 : 2);
  char eps[64], tail[512];
  float_lit(l->eps, eps, sizeof eps);
  loom__buf_printf(E->o, "    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {\n");
  if (n) {
    LOOM_TRY(emit_row_cached(E, l, n));
    loom__buf_printf(E->o, "    }\n");
    return LOOM_SUCCESS;
  }
  loom__buf_printf(E->o, "      float s1 = 0.f;\n");
  snprintf(tail, sizeof tail, "      s1 += %s;\n", ln ? "v%d" : "v%d * v%d");
  char t1[128];
  snprintf(t1, sizeof t1, tail, x, x);
  LOOM_TRY(row_pass(E, l, t1));
  loom__buf_printf(E->o, "      s1 = loom__coll_block_sum(s1, loom_red);\n");
  if (ln) {
    loom__buf_printf(E->o, "      const float mean = s1 / (float)C;\n      float s2 = 0.f;\n");
    snprintf(t1, sizeof t1, "      s2 += (v%d - mean) * (v%d - mean);\n", x, x);
    LOOM_TRY(row_pass(E, l, t1));
    loom__buf_printf(E->o, "      const float rstd = rsqrtf(loom__coll_block_sum(s2, loom_red) / (float)C + %s);\n",
                     eps);
  } else {
    loom__buf_printf(E->o, "      const float mean = 0.f, rstd = rsqrtf(s1 / (float)C + %s);\n", eps);
  }
  char st[1024];
  size_t m = (size_t)snprintf(st, sizeof st, "      const float y = (v%d - mean) * rstd * v%d", x, l->w_ins);
  if (l->b_ins >= 0) m += (size_t)snprintf(st + m, sizeof st - m, " + v%d", l->b_ins);
  m += (size_t)snprintf(st + m, sizeof st - m, ";\n");
  row_stores(E, l, st, sizeof st, m);
  LOOM_TRY(row_pass(E, l, st));
  loom__buf_printf(E->o, "    }\n");
  return LOOM_SUCCESS;
}

/* RMSNorm / LayerNorm over each row (the last dimension), a block per row, as loom's collectives'
 * row epilogue: y = (x - mean) rsqrt(var + eps) w (+ b), var the mean square (RMSNorm, mean 0). A row
 * whose body values fit in LOOM_CG_ROW_REGS registers a thread is computed once (emit_row_cached), in
 * vectors where the loop's accesses allow (loom__cg_loop_width) and they fit; a longer one is computed
 * again in each pass. */
static loom_result_t emit_row(cg_emit_t *E, const loom__lw_loop_t *l) {
  const int64_t cols = l->space.rank ? l->space.dims[l->space.rank - 1] : 1;
  int w = loom__cg_loop_width(E->lw, l);
  if (w > 1 && !row_cached_instances(cols, w, l->b_ins >= 0 ? 3 : 2)) w = 1;
  piece_frame(E, &l->space);
  hoist_partials(E, l);
  loom__buf_printf(E->o, "    const int64_t C = %lldll, rows = C ? cnt / C : 0;\n", (long long)cols);
  return at_width(E, l, w, row_loop);
}

/* One slot's sum of squares (E->vec elements a body instance; the slot's ends multiples of it). */
static loom_result_t sumsq_slot(const cg_emit_t *E, const loom__lw_loop_t *l) {
  const long long off = (long long)E->lw->bufs[l->store_buf[0]].arena_off;
  const int w = E->vec;
  loom__buf_printf(E->o, "    for (int s = blockIdx.x; s < %d; s += gridDim.x) {\n", LOOM__LW_NPART);
  loom__buf_printf(E->o, "      float acc = 0.f;\n");
  loom__buf_printf(E->o, "      const int64_t lo = cnt / %d * s / %d * %d, hi = cnt / %d * (s + 1) / %d * %d;\n", w,
                   LOOM__LW_NPART, w, w, LOOM__LW_NPART, w);
  loom__buf_printf(E->o, "      for (int64_t i = lo + (int64_t)threadIdx.x * %d; i < hi; i += (int64_t)blockDim.x * %d) {\n",
                   w, w);
  coords(E, &l->space);
  LOOM_TRY(emit_body(E, l));
  if (w > 1)
    loom__buf_printf(E->o, "#pragma unroll\n      for (int u = 0; u < %d; ++u) acc += v%d[u] * v%d[u];\n      }\n", w,
                     l->x_ins, l->x_ins);
  else loom__buf_printf(E->o, "      acc += v%d * v%d;\n      }\n", l->x_ins, l->x_ins);
  loom__buf_printf(E->o, "      acc = loom__coll_block_sum(acc, loom_red);\n");
  loom__buf_printf(E->o, "      if (threadIdx.x == 0) ((float *)(a.arena[r] + %lldll))[s] = acc;\n    }\n", off);
  return LOOM_SUCCESS;
}

/* A Norm's partial sums of squares: slot s of this rank's NPART covers elements [cnt s / NPART,
 * cnt (s + 1) / NPART) of its piece (in vectors: those ends rounded down to whole vectors), a block's sum
 * in fixed order. Every rank reads the same partials, so every rank's norm is the same bits. */
static loom_result_t emit_sumsq(cg_emit_t *E, const loom__lw_loop_t *l) {
  piece_frame(E, &l->space);
  hoist_partials(E, l);
  return at_width(E, l, loom__cg_loop_width(E->lw, l), sumsq_slot);
}

loom_result_t loom__cg_emit_loop(cg_emit_t *E, int li) {
  const loom__lw_loop_t *l = &E->lw->loops[li];
  char cond[96];
  runs(E, &l->space, cond, sizeof cond);
  loom__buf_printf(E->o, "  if (%s) { /* loop %d */\n", cond, li - E->u->loop0);
  loom_result_t r = l->kind == LOOM__LL_ELEM  ? emit_elem(E, l)
                    : l->kind == LOOM__LL_ROW ? emit_row(E, l)
                                              : emit_sumsq(E, l);
  loom__buf_printf(E->o, "  }\n");
  return r;
}
