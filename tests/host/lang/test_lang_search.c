/*
 * test_lang_search.c - the schedule search and its cost model against the
 * paper: within `loom schedules`' default bounds (6 moves, 200 programs)
 * the search reaches Figure 4's best schedule, Adam's AR-Opt and Figure
 * 6b's fused RS-Opt-AG with the update on slices, and Figure 8b's
 * overlapped ReduceScatter, sliced Send and AllGather; the cost model puts
 * AR-Opt first at 1024 elements (as the paper's Figure 10 and loom's own
 * optimizer, whose AUTO form takes AR-Opt up to 4096 elements, do) and
 * the fused RS-Opt-AG first at the paper's large sizes; and the listing
 * keeps a program's own refused schedule, with why.
 */
#include <stdio.h>
#include <string.h>

#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"
#include "lang/lang.h"

static int count_op(loom_prog_t q, int op) {
  int n = 0;
  for (int i = 0; i < q->n; ++i) n += !q->nodes[i].removed && q->nodes[i].op == op;
  return n;
}

static int group_of_kind(loom_prog_t q, int id, int level, int kind) {
  const int g = level == 0 ? q->nodes[id].kern : level == 1 ? q->nodes[id].coll : q->nodes[id].stage;
  return g >= 0 && q->groups[g].kind == kind ? g : -1;
}

/* Adam's AR-Opt: the AllReduce, then every update operation in one kernel. */
static int is_ar_opt(loom_prog_t q) {
  static const char *upd[] = {"m_", "v_", "m1", "v1", "p_"};
  const int k = q->nodes[loom__lang_find(q, "p_")].kern;
  int ok = k >= 0 && count_op(q, LOOM__OP_ALLREDUCE) == 1 && count_op(q, LOOM__OP_REDUCESCATTER) == 0;
  for (int i = 0; i < 5 && ok; ++i) ok = q->nodes[loom__lang_find(q, upd[i])].kern == k;
  for (int i = 0; i < q->n && ok; ++i) /* every pointwise operation is in it */
    if (!q->nodes[i].removed && loom__lang_op_info(q->nodes[i].op)->cls == LOOM__CLS_POINTWISE) ok = q->nodes[i].kern == k;
  return ok;
}

/* Figure 6b: m and v kept on slices, no AllReduce, one FusedAllReduce with the ReduceScatter, the update
 * (on slices) and the gather of p_. */
static int is_fig6b(loom_prog_t q) {
  const int m = loom__lang_find(q, "m"), v = loom__lang_find(q, "v"), pu = loom__lang_find(q, "p_");
  if (q->nodes[m].ty.lay.kind != LOOM__LAY_SLICED || q->nodes[v].ty.lay.kind != LOOM__LAY_SLICED) return 0;
  if (count_op(q, LOOM__OP_ALLREDUCE) || count_op(q, LOOM__OP_ALLGATHER) != 1 || q->nodes[pu].ty.lay.kind != LOOM__LAY_SLICED)
    return 0;
  const int g = group_of_kind(q, pu, 1, LOOM__GK_FUSED_AR);
  int rs = 0, ag = 0;
  for (int i = 0; i < q->n && g >= 0; ++i) {
    if (q->nodes[i].removed || q->nodes[i].coll != g) continue;
    rs += q->nodes[i].op == LOOM__OP_REDUCESCATTER;
    ag += q->nodes[i].op == LOOM__OP_ALLGATHER && q->nodes[i].in[0] == pu;
  }
  return g >= 0 && rs == 1 && ag == 1 && q->nodes[loom__lang_find(q, "m_")].coll == g;
}

/* Figure 4's best: the MatMul overlapped with a FusedAllReduce that holds the pointwise kernel. */
static int is_fig4(loom_prog_t q) {
  const int layer = loom__lang_find(q, "layer"), out = loom__lang_find(q, "out");
  const int st = group_of_kind(q, layer, 2, LOOM__GK_OVERLAP), fc = group_of_kind(q, out, 1, LOOM__GK_FUSED_AR);
  return st >= 0 && fc >= 0 && q->nodes[out].stage == st && count_op(q, LOOM__OP_ALLREDUCE) == 0;
}

/* Figure 8b: one stage with the ReduceScatter, the Send of a slice and the AllGather after it. */
static int is_fig8b(loom_prog_t q) {
  const int recv = loom__lang_find(q, "recv");
  const int st = group_of_kind(q, recv, 2, LOOM__GK_OVERLAP);
  if (st < 0 || q->nodes[recv].ty.lay.kind != LOOM__LAY_SLICED) return 0;
  int rs = 0, ag = 0;
  for (int i = 0; i < q->n; ++i) {
    if (q->nodes[i].removed || q->nodes[i].stage != st) continue;
    rs += q->nodes[i].op == LOOM__OP_REDUCESCATTER;
    ag += q->nodes[i].op == LOOM__OP_ALLGATHER;
  }
  return rs == 1 && ag == 1;
}

/* How many schedules the search finds for example `name` (defaults of `loom schedules`) that pred holds. */
static int reached(const char *name, int (*pred)(loom_prog_t)) {
  loom_prog_t p = lang_load_example(name);
  CHECK(p != NULL);
  if (!p) return 0;
  loom__found_t found;
  int n = 0;
  CHECK_RESULT(loom__lang_explore(p, 6, 200, &found), LOOM_SUCCESS);
  for (int s = 0; s < found.n; ++s) {
    loom_prog_t q = lang_apply_prefix(p, &found.scheds[s], found.scheds[s].n);
    if (q) n += pred(q);
    loom_prog_destroy(q);
  }
  loom__lang_found_free(&found);
  loom_prog_destroy(p);
  return n;
}

LOOM_TEST(lang_search_reaches_the_papers_schedules) {
  CHECK(reached("model_parallel", is_fig4) >= 1);
  CHECK(reached("adam", is_ar_opt) >= 1);
  CHECK(reached("adam", is_fig6b) >= 1);
  CHECK(reached("pipeline", is_fig8b) >= 1);
  /* the predicates see the programs' own schedules as the paper's */
  static const struct { const char *ex; int (*pred)(loom_prog_t); } own[] = {
      {"model_parallel", is_fig4}, {"adam", is_fig6b}, {"pipeline", is_fig8b}};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; ++i) {
    loom_prog_t p = lang_load_example(own[i].ex), q = NULL;
    if (p) CHECK_RESULT(loom_prog_schedule(p, "best", &q), LOOM_SUCCESS);
    CHECK(q && own[i].pred(q));
    loom_prog_destroy(q);
    loom_prog_destroy(p);
  }
}

/* The first schedule of the listing for example `name` at W ranks and `bind` satisfies pred. */
static void first_is(const char *name, int W, const char *bind, int (*pred)(loom_prog_t), const char *what) {
  loom_prog_t p = lang_load_example(name);
  CHECK(p != NULL);
  if (!p) return;
  loom__binding_t b;
  loom__listing_t l;
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_list(p, W, &b, 6, 200, &l), LOOM_SUCCESS);
  loom_prog_t q = l.n > 0 ? lang_apply_prefix(p, l.rows[0].s, l.rows[0].s->n) : NULL;
  if (!q || !pred(q))
    loom_test_fail(__FILE__, __LINE__, "%s W=%d %s: the cheapest (%s, %.2f us, runs %s) is not %s", name, W, bind,
                   l.n ? l.rows[0].s->name : "-", l.n ? l.rows[0].cost.time_us : 0.0, l.n ? l.rows[0].units : "", what);
  loom_prog_destroy(q);
  loom__lang_listing_free(&l);
  loom_prog_destroy(p);
}

LOOM_TEST(lang_cost_ranks_ar_opt_first_for_small_and_rs_opt_ag_for_large_tensors) {
  static const int worlds[] = {2, 8};
  for (int w = 0; w < 2; ++w) {
    first_is("adam", worlds[w], "N=1024", is_ar_opt, "AR-Opt");
    first_is("adam", worlds[w], "N=134217728", is_fig6b, "the fused RS-Opt-AG (Figure 6b)");
    first_is("adam", worlds[w], "N=1073741824", is_fig6b, "the fused RS-Opt-AG (Figure 6b)");
  }
}

/* `loom schedules` lists a program's own schedule that a statement refuses (last, with the refusal's
 * place and reason), and counts what it lists. */
LOOM_TEST(lang_schedules_list_keeps_a_refused_schedule) {
  char *text = lang_read_file("examples/lang/model_parallel.loom"), buf[8192];
  CHECK(text != NULL);
  if (!text) return;
  snprintf(buf, sizeof buf, "%s\nSchedule wrong {\n  k = fuse(d, out);\n  (a, c) = split(d);\n}\n", text);
  free(text);
  loom_prog_t p = NULL;
  CHECK_RESULT(loom_prog_parse(buf, "mp.loom", &p), LOOM_SUCCESS);
  if (!p) return;
  loom__binding_t b;
  loom__listing_t l;
  CHECK_RESULT(loom__lang_parse_bind("B=8,S=1024,H=3072", &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_list(p, 8, &b, 2, 50, &l), LOOM_SUCCESS);
  CHECK_EQ_INT(p->nsched, 3);
  CHECK_EQ_INT(l.n, 1 + p->nsched + l.found.n);
  CHECK_EQ_INT(l.refused, 1);
  const loom__listed_t *last = l.n ? &l.rows[l.n - 1] : NULL;
  CHECK(last && last->own && !strcmp(last->s->name, "wrong") && last->refused &&
        strstr(last->refused, "mp.loom:34:3: split: `d` is Dropout and no AllReduce uses it"));
  for (int i = 0; i + 1 < l.n; ++i) CHECK(!l.rows[i].refused && (i == 0 || l.rows[i - 1].cost.time_us <= l.rows[i].cost.time_us));
  loom__lang_listing_free(&l);
  loom_prog_destroy(p);
}
