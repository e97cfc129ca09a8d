/*
 * interp_ops.h - what interp.c (setup, inputs, results) and interp_ops.c
 * (one node on every rank) share: the interpreter's state, and where each
 * rank's piece of a value lies in the whole (loom__interp_local).
 */
#ifndef LOOM_LANG_INTERP_OPS_H
#define LOOM_LANG_INTERP_OPS_H

#include "lang/lang.h"

typedef struct loom__shape {
  int rank;
  int64_t dims[LOOM__LANG_RANK];
  int64_t count;
} loom__shape_t;

/* A rank's piece: its dims and its offset in each dimension of the whole. */
typedef struct loom__local {
  int rank;
  int64_t dims[LOOM__LANG_RANK], off[LOOM__LANG_RANK];
  int64_t count;
} loom__local_t;

typedef struct loom__interp {
  loom__prog_t *p;
  int W, G, R; /* ranks per group, groups, ranks */
  const loom__binding_t *bind;
  uint64_t seed;
  double **vals; /* [node * R + rank]: NULL where the rank holds nothing */
  loom__shape_t *shapes; /* the whole (logical) shape of each node */
} loom__interp_t;

/* 1 if rank r holds a piece of node id. */
int loom__interp_present(const loom__interp_t *in, int id, int r);
/* r's index within id's group. */
int loom__interp_q(const loom__interp_t *in, int id, int r);
/* The first rank of id's group. */
int loom__interp_base(const loom__interp_t *in, int id);
void loom__interp_local(const loom__interp_t *in, int id, int r, loom__local_t *loc);
/* The index in the whole of element e of the piece loc. */
int64_t loom__interp_global(const loom__shape_t *s, const loom__local_t *loc, int64_t e);
/* The logical value of id (Local: W copies back to back) into out. */
loom_result_t loom__interp_logical(loom__interp_t *in, int id, double *out);
/* Computes node id on every rank that holds it. */
loom_result_t loom__interp_node(loom__interp_t *in, int id);
/* interp.c: the size of dimension d under the binding (a literal, or a bound symbol; else
 * LOOM_ERR_INVALID_ARGUMENT saying how to bind it). */
loom_result_t loom__lang_dim_size(const loom__binding_t *b, const loom__dim_t *d, int64_t *n);
/* interp.c: element i (its index in the whole) of input `name`'s logical value drawn from seed (rank: -1,
 * or the Local copy's rank in its group). */
double loom__interp_input_elem(const char *name, uint64_t seed, int rank, int64_t i);
/* x rounded to dtype (round to nearest even). */
double loom__interp_round(double x, int dtype);

/* group.c: the live nodes in the order the schedule runs them (a kernel's,
 * fused collective's or stage's nodes together, the groups in dependence
 * order); a schedule whose groups depend on each other both ways is refused. */
loom_result_t loom__lang_unit_order(const loom__prog_t *p, int *order, int *count);

#endif /* LOOM_LANG_INTERP_OPS_H */
