/*
 * listing.c - what `loom schedules` lists: the unscheduled program, each of
 * the program's own Schedule sections, and every schedule the search
 * reaches (explore.c), each with its cost and the units it runs, cheapest
 * first. A program's own schedule that a statement refuses stays in the
 * list, last, with the refusal (file:line:col and why), so that the list
 * and its count always agree.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/interp_ops.h"
#include "lang/lang.h"

static const char *kind_name(int k) {
  static const char *n[] = {"kernel", "FusedAllReduce", "FusedReduceScatter", "FusedAllGather", "FusedAllReduceEpilogue",
                            "stage"};
  return k >= 0 && k <= 5 ? n[k] : "?";
}

/* The units q runs, in order: "stage ov_layer, kernel k, AllReduce sum, ..." (malloc'ed; NULL if none). */
static char *units_of(const loom__prog_t *q) {
  loom__buf_t b = {0};
  int *order = malloc(sizeof(int) * (size_t)(q->n + 1)), n = 0, last = -2;
  if (order && loom__lang_unit_order(q, order, &n) == LOOM_SUCCESS)
    for (int i = 0; i < n; ++i) {
      const loom__node_t *nd = &q->nodes[order[i]];
      if (loom__lang_op_info((loom__op_t)nd->op)->cls == LOOM__CLS_LEAF) continue;
      const int g = nd->stage >= 0 ? nd->stage : nd->coll >= 0 ? nd->coll : nd->kern;
      if (g >= 0 && g == last) continue;
      last = g;
      if (g >= 0)
        loom__buf_printf(&b, "%s%s %s", b.len ? ", " : "", kind_name(q->groups[g].kind), q->groups[g].name);
      else
        loom__buf_printf(&b, "%s%s %s", b.len ? ", " : "", loom__lang_op_info((loom__op_t)nd->op)->name, nd->name);
    }
  free(order);
  return b.s;
}

static char *copy_text(const char *s) {
  char *d = malloc(strlen(s) + 1);
  if (d) memcpy(d, s, strlen(s) + 1);
  return d;
}

/* row->s applied to a copy of p: its cost and units, or row->refused. */
static loom_result_t list_row(const loom__prog_t *p, int W, const loom__binding_t *bind, loom__listed_t *row) {
  loom__prog_t *q;
  LOOM_TRY(loom__lang_clone(p, &q));
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < row->s->n && r == LOOM_SUCCESS; ++i) r = loom__lang_apply(q, &row->s->stmts[i]);
  if (r == LOOM_ERR_INVALID_ARGUMENT) {
    r = (row->refused = copy_text(loom_last_error())) ? LOOM_SUCCESS : LOOM_ERR_OUT_OF_MEMORY;
  } else if (r == LOOM_SUCCESS) {
    r = loom__lang_cost(q, W, bind, &row->cost);
    row->units = units_of(q);
  }
  loom__lang_free(q);
  return r == LOOM_ERR_OUT_OF_MEMORY ? loom__fail(r, "schedules: out of host memory") : r;
}

/* Cheapest first; refused schedules last, in the program's order. */
static int by_time(const void *a, const void *b) {
  const loom__listed_t *x = a, *y = b;
  if (!x->refused != !y->refused) return x->refused ? 1 : -1;
  if (x->refused) return x->s < y->s ? -1 : x->s > y->s;
  return x->cost.time_us < y->cost.time_us ? -1 : x->cost.time_us > y->cost.time_us;
}

loom_result_t loom__lang_list(const loom__prog_t *p, int W, const loom__binding_t *bind, int depth, int max,
                              loom__listing_t *out) {
  static const loom__sched_t none = {"unscheduled", 0, 0, NULL};
  memset(out, 0, sizeof *out);
  LOOM_TRY(loom__lang_explore(p, depth, max, &out->found));
  const int total = 1 + p->nsched + out->found.n;
  out->rows = calloc((size_t)total, sizeof *out->rows);
  loom_result_t r = out->rows ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "schedules: out of host memory");
  for (int i = 0; i < total && r == LOOM_SUCCESS; ++i) {
    loom__listed_t *row = &out->rows[out->n++];
    row->s = i == 0 ? &none : i <= p->nsched ? &p->scheds[i - 1] : &out->found.scheds[i - 1 - p->nsched];
    row->own = i > 0 && i <= p->nsched;
    r = list_row(p, W, bind, row);
    out->refused += row->refused != NULL;
  }
  if (r == LOOM_SUCCESS) qsort(out->rows, (size_t)out->n, sizeof *out->rows, by_time);
  if (r != LOOM_SUCCESS) loom__lang_listing_free(out);
  return r;
}

void loom__lang_listing_free(loom__listing_t *l) {
  for (int i = 0; l->rows && i < l->n; ++i) free(l->rows[i].units), free(l->rows[i].refused);
  free(l->rows);
  loom__lang_found_free(&l->found);
  memset(l, 0, sizeof *l);
}
