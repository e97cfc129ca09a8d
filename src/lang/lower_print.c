/*
 * lower_print.c - the lowered form as text (`loom check --lowered`, test
 * messages): each unit with its steps, loops, bodies and exchanges.
 *
 *   unit fuseAR (kernel, 2 steps)
 *     step 0: WAIT arrived of group [loop 0]
 *       loop 0 ELEM over [2, 3, 8] Sliced(2) S=2:
 *         %0 = REDUCE+ layer
 *         ...
 *         store scOut <- %5
 *       SET ready0 [holders of scOut]
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "lang/lower.h"

static const char *buf_name(const loom__lw_prog_t *lw, int b, char *out, size_t cap) {
  const loom__lw_buf_t *x = &lw->bufs[b];
  const int id = x->node >= 0 ? x->node : x->of;
  char lb[96];
  snprintf(out, cap, "%s%s", loom__lang_label(lw->p, id, lb, sizeof lb), x->node >= 0 ? "" : ".partials");
  return out;
}

static void print_geom(const loom__lw_geom_t *g, loom__buf_t *o) {
  loom__buf_printf(o, "[");
  for (int j = 0; j < g->rank; ++j) loom__buf_printf(o, "%s%lld", j ? ", " : "", (long long)g->dims[j]);
  loom__buf_printf(o, "]");
  if (g->sliced >= 0) loom__buf_printf(o, " Sliced(%d) S=%lld", g->sliced, (long long)g->S);
  if (g->root >= 0) loom__buf_printf(o, " Root(%d)", g->root);
  if (g->local) loom__buf_printf(o, " Local");
  if (g->group >= 0) loom__buf_printf(o, " GROUP(%d)", g->group);
}

static void print_ins(const loom__lw_prog_t *lw, const loom__lw_ins_t *in, int k, loom__buf_t *o) {
  static const char *who[] = {"", "@owner", "@root", "@src"};
  static const char *red[] = {"+", "max", "min"};
  char nb[128];
  loom__buf_printf(o, "        %%%d = ", k);
  switch (in->kind) {
    case LOOM__LI_CONST: loom__buf_printf(o, "%.17g", in->value); break;
    case LOOM__LI_LOAD: loom__buf_printf(o, "LOAD %s%s", buf_name(lw, in->buf, nb, sizeof nb), who[in->who]); break;
    case LOOM__LI_REDUCE:
      loom__buf_printf(o, "REDUCE%s %s", red[in->op % 3], buf_name(lw, in->buf, nb, sizeof nb));
      break;
    case LOOM__LI_PARTIALS:
      loom__buf_printf(o, "NORM %s%s", buf_name(lw, in->buf, nb, sizeof nb), in->arg ? " over the group" : "");
      break;
    default:
      loom__buf_printf(o, "%s", loom__lang_op_info((loom__op_t)in->op)->name);
      for (int a = 0; a < LOOM__LANG_IN && in->a[a] >= 0; ++a) loom__buf_printf(o, "%s%%%d", a ? ", " : " ", in->a[a]);
  }
  loom__buf_printf(o, "\n");
}

static void print_loop(const loom__lw_prog_t *lw, int li, loom__buf_t *o) {
  static const char *kinds[] = {"ELEM", "ROW", "SUMSQ"};
  const loom__lw_loop_t *l = &lw->loops[li];
  char nb[128];
  loom__buf_printf(o, "      loop %d %s over ", li, kinds[l->kind]);
  print_geom(&l->space, o);
  loom__buf_printf(o, "\n");
  for (int k = 0; k < l->nins; ++k) print_ins(lw, &lw->ins[l->ins0 + k], k, o);
  for (int k = 0; k < l->nstore; ++k) {
    loom__buf_printf(o, "        store %s <- ", buf_name(lw, l->store_buf[k], nb, sizeof nb));
    if (l->store_ins[k] >= 0) loom__buf_printf(o, "%%%d\n", l->store_ins[k]);
    else
      loom__buf_printf(o, "%s(%%%d, %%%d)\n", l->norm == LOOM__OP_RMSNORM ? "RMSNorm" : "LayerNorm", l->x_ins,
                       l->w_ins);
  }
}

static void print_ex(const loom__lw_prog_t *lw, const loom__lw_ex_t *e, loom__buf_t *o) {
  static const char *pat[] = {"group", "root", "src", "dst", "self"};
  char nb[128];
  const char *slot = e->slot == LOOM__LWS_ARRIVED ? "arrived" : e->slot == LOOM__LWS_DONE ? "done" : "ready";
  loom__buf_printf(o, "      %s%s %s", e->off ? "(off) " : "", e->kind == LOOM__LX_SET ? "SET" : "WAIT", slot);
  if (e->slot >= LOOM__LWS_READY) loom__buf_printf(o, "%d", e->slot - LOOM__LWS_READY);
  if (e->kind == LOOM__LX_WAIT) loom__buf_printf(o, " of %s", pat[e->pattern]);
  if (e->kind == LOOM__LX_WAIT && e->pattern != LOOM__LWP_GROUP && e->pattern != LOOM__LWP_SELF)
    loom__buf_printf(o, " %d", e->arg);
  if (e->loop >= 0) loom__buf_printf(o, " [ranks of loop %d]", e->loop);
  if (e->buf >= 0) loom__buf_printf(o, " [holders of %s]", buf_name(lw, e->buf, nb, sizeof nb));
  loom__buf_printf(o, "\n");
}

/* Unit u's entries of `kind` at `step`. */
static void print_entries(const loom__lw_prog_t *lw, int u, int step, int kind, loom__buf_t *o) {
  const loom__lw_unit_t *x = &lw->units[u];
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i)
    if (lw->ex[i].step == step && lw->ex[i].kind == kind) print_ex(lw, &lw->ex[i], o);
}

void loom__lw_print(const loom__lw_prog_t *lw, loom__buf_t *o) {
  char nb[128], nb2[128], nb3[128];
  loom__buf_printf(o, "lowered at W = %d (%d groups): arena %lld bytes\n", lw->W, lw->G, (long long)lw->arena_bytes);
  for (int b = 0; b < lw->nbuf; ++b) {
    const loom__lw_buf_t *x = &lw->bufs[b];
    loom__buf_printf(o, "  buffer %s %s ", buf_name(lw, b, nb, sizeof nb), loom__dtype_name((loom_dtype_t)x->dtype));
    print_geom(&x->geom, o);
    loom__buf_printf(o, "%s%s%s%s\n", x->store & LOOM__LWB_INPUT ? " input" : "",
                     x->store & LOOM__LWB_OUTPUT ? " output" : "", x->store & LOOM__LWB_ARENA ? " arena" : "",
                     x->peers_read ? " (peers read it)" : "");
  }
  for (int u = 0; u < lw->nunit; ++u) {
    const loom__lw_unit_t *x = &lw->units[u];
    if (x->kind == LOOM__LU_GEMM) {
      loom__buf_printf(o, "  unit %s: GEMM %s = %s x %s", x->name, buf_name(lw, x->gemm_c, nb, sizeof nb),
                       buf_name(lw, x->gemm_a, nb2, sizeof nb2), buf_name(lw, x->gemm_b, nb3, sizeof nb3));
      if (x->gemm_bias >= 0) loom__buf_printf(o, " + %s (bias epilogue)", buf_name(lw, x->gemm_bias, nb, sizeof nb));
      loom__buf_printf(o, "\n");
      continue;
    }
    if (x->kind == LOOM__LU_COLL) {
      loom__buf_printf(o, "  unit %s: %s %s = %s(%s)\n", x->name, lw->lib == LOOM__LW_LIB_BASE ? "NCCL" : "loom",
                       buf_name(lw, x->gemm_c, nb, sizeof nb),
                       loom__lang_op_info((loom__op_t)lw->p->nodes[x->node].op)->name,
                       buf_name(lw, x->gemm_a, nb2, sizeof nb2));
      continue;
    }
    loom__buf_printf(o, "  unit %s: kernel, %d steps, groups 0x%x\n", x->name, x->nsteps, (unsigned)x->groups);
    print_entries(lw, u, -1, LOOM__LX_SET, o);
    for (int s = 0; s < x->nsteps; ++s) {
      loom__buf_printf(o, "    step %d\n", s);
      print_entries(lw, u, s, LOOM__LX_WAIT, o);
      for (int l = x->loop0; l < x->loop0 + x->nloops; ++l)
        if (lw->loops[l].step == s) print_loop(lw, l, o);
      print_entries(lw, u, s, LOOM__LX_SET, o);
    }
    print_entries(lw, u, x->nsteps, LOOM__LX_SET, o);
    print_entries(lw, u, x->nsteps, LOOM__LX_WAIT, o);
  }
}
