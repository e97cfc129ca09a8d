/*
 * lang.h - the loom language's program graph (the IR) and what the files of
 * src/lang share.
 *
 * A program is a data-flow graph of nodes in an array (ids are indices; a
 * removed node keeps its slot with `removed` set, so ids stay stable across
 * transformations). A node is an input tensor, a constant or an operation
 * whose operands are earlier or later nodes (transformations may append a
 * node that earlier ids use: every pass walks loom__lang_topo's order).
 *
 *   equal.c         structural equality (the round trip's measure)
 *   interp_ops.c    the interpreter's operations on every rank
 *   ir.c            programs: create, clone, nodes, names, uses, topo order,
 *                   the op catalogue (name, arity, class), equality
 *   lexer.c         tokens with line and column
 *   parser.c        .loom text -> program (statements, expressions)
 *   sched_parse.c   the Schedule sections' statements
 *   printer.c       program -> .loom text (optionally typed)
 *   layout_rules.c  dtype / shape / layout / group inference (one table)
 *   interp.c        the CPU interpreter over W simulated ranks
 *   transform.c     split, reorder, asSlice, dead (graph rewrites)
 *   group.c         fuse, fuseComm, overlap (kernels and stages)
 *   explore.c       the schedules the transformations reach, with a cost
 *   moves.c         the statements the search tries from a program
 *   listing.c       `loom schedules`: every schedule with its cost, refusals kept
 *   prog_api.c      the public loom_prog_* functions
 *   proto_ops.c, proto_lower.c
 *                   the protocols of the hand-written ops (a table of the
 *                   families' builders) and of a program's units
 *                   (lang_proto.h; the form and its checkers: core/protocol.h)
 *
 * Layouts are CoCoNet's (paper 003, section 2.1) plus Root(r) (the result of
 * Reduce: meaningful on rank r of the group only). Groups: WORLD, or
 * GROUP(i), the i-th of the program's pipeline stages (consecutive ranks).
 */
#ifndef LOOM_LANG_LANG_H
#define LOOM_LANG_LANG_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#define LOOM__LANG_NAME 48   /* names (with the terminating 0) */
#define LOOM__LANG_RANK 6    /* dimensions of a tensor */
#define LOOM__LANG_IN 3      /* operands of a node */
#define LOOM__LANG_ARGS 8    /* names on either side of a schedule statement */

typedef enum loom__op {
  LOOM__OP_INPUT, LOOM__OP_CONST,
  /* pointwise, binary */
  LOOM__OP_ADD, LOOM__OP_SUB, LOOM__OP_MUL, LOOM__OP_DIV, LOOM__OP_POW, LOOM__OP_MAX, LOOM__OP_MIN,
  LOOM__OP_LT, LOOM__OP_LE, LOOM__OP_GT, LOOM__OP_GE, LOOM__OP_EQ, LOOM__OP_NE,
  /* pointwise, unary */
  LOOM__OP_NEG, LOOM__OP_SQRT, LOOM__OP_EXP, LOOM__OP_RELU, LOOM__OP_GELU, LOOM__OP_SILU, LOOM__OP_CAST,
  LOOM__OP_DROPOUT, LOOM__OP_SLICE, /* Slice(x, d): a Replicated x's slice (reorder makes them) */
  LOOM__OP_UPDATE, /* in[0]: the state tensor, in[1]: its new value */
  /* compute that is not pointwise */
  LOOM__OP_MATMUL, LOOM__OP_NORM, LOOM__OP_RMSNORM, LOOM__OP_LAYERNORM,
  /* communication */
  LOOM__OP_ALLREDUCE, LOOM__OP_REDUCESCATTER, LOOM__OP_ALLGATHER, LOOM__OP_BROADCAST, LOOM__OP_REDUCE,
  LOOM__OP_ALLTOALL, LOOM__OP_SEND,
  LOOM__OP_COUNT
} loom__op_t;

typedef enum loom__op_class {
  LOOM__CLS_LEAF,      /* input, constant */
  LOOM__CLS_POINTWISE, /* elementwise with broadcasting (Update and Dropout included) */
  LOOM__CLS_COMPUTE,   /* MatMul, norms */
  LOOM__CLS_COMM       /* collectives and Send */
} loom__op_class_t;

typedef struct loom__op_info {
  const char *name;  /* as written in .loom text ("MatMul"); operators: "+" ... */
  int min_in, max_in;
  loom__op_class_t cls;
} loom__op_info_t;

/* The catalogue entry of op (never NULL for op < LOOM__OP_COUNT). */
const loom__op_info_t *loom__lang_op_info(loom__op_t op);
/* The op named `name` as a function ("MatMul", "Sqrt"; letter case aside: "sqrt"), -1 if none. */
int loom__lang_op_by_name(const char *name);

enum { LOOM__LAY_SLICED = 0, LOOM__LAY_REPLICATED = 1, LOOM__LAY_LOCAL = 2, LOOM__LAY_ROOT = 3 };
enum { LOOM__GROUP_WORLD = -1, LOOM__GROUP_ANY = -2 }; /* else GROUP(i), i >= 0 */
enum { LOOM__RED_SUM = 0, LOOM__RED_MAX = 1, LOOM__RED_MIN = 2 };

typedef struct loom__layout {
  int kind;  /* LOOM__LAY_* */
  int arg;   /* Sliced: the dimension; Root: the rank in the group */
  int group; /* LOOM__GROUP_* or i */
} loom__layout_t;

/* A dimension: a symbol bound at run time ("B"), or a literal size. */
typedef struct loom__dim {
  char sym[16]; /* "" for a literal */
  int64_t n;
} loom__dim_t;

typedef struct loom__type {
  int dtype; /* loom_dtype_t */
  int rank;
  loom__dim_t dims[LOOM__LANG_RANK];
  loom__layout_t lay;
} loom__type_t;

typedef struct loom__node {
  int op; /* loom__op_t */
  char name[LOOM__LANG_NAME]; /* "" or a printer temporary (`_...`): anonymous */
  int nin;
  int in[LOOM__LANG_IN];
  /* attributes (which apply depends on op) */
  double value;   /* constant, Dropout p, eps */
  uint64_t seed;  /* Dropout */
  int dim;        /* ReduceScatter / AllToAll: the dimension of the result's slices */
  int root;       /* Reduce, Broadcast */
  int redop;      /* LOOM__RED_* */
  int dtype;      /* Cast target; an input's declared dtype */
  int send_off;   /* Send: GROUP + send_off */
  loom__type_t decl; /* INPUT: as declared (the checker copies it into ty) */
  loom__type_t ty;   /* inferred */
  int typed;
  int removed;
  int line, col;  /* where it was written (0: built through the C API) */
  int kern, coll, stage; /* schedule groups (index into prog->groups) or -1 */
} loom__node_t;

/* Schedule groups: a fused kernel, a fused collective, an overlapped stage. */
enum { LOOM__GK_FUSE = 0, LOOM__GK_FUSED_AR, LOOM__GK_FUSED_RS, LOOM__GK_FUSED_AG, LOOM__GK_FUSED_ARE,
       LOOM__GK_OVERLAP };
typedef struct loom__group {
  char name[LOOM__LANG_NAME];
  int kind;
  int level; /* 0 kern, 1 coll, 2 stage */
} loom__group_t;

typedef struct loom__stmt {
  char fn[LOOM__LANG_NAME];
  int nlhs, nargs;
  char lhs[LOOM__LANG_ARGS][LOOM__LANG_NAME];
  char args[LOOM__LANG_ARGS][LOOM__LANG_NAME];
  int line, col;
  int arg_line[LOOM__LANG_ARGS], arg_col[LOOM__LANG_ARGS]; /* where each argument was written (0: made by the search) */
  int api; /* 1: given alone (loom_prog_transform): its place is "<statement>:line:col" */
} loom__stmt_t;

typedef struct loom__sched {
  char name[LOOM__LANG_NAME];
  int n, cap;
  loom__stmt_t *stmts;
} loom__sched_t;

typedef struct loom__state { int tensor, value; } loom__state_t;

struct loom_prog {
  char name[LOOM__LANG_NAME]; /* Execute's name ("" before Execute) */
  char file[256];             /* for messages */
  int n, cap;
  loom__node_t *nodes;
  int nexec_in, nexec_out;
  int *exec_in, *exec_out;
  char (*exec_names)[LOOM__LANG_NAME]; /* each output's name as Execute named it (kept through schedules) */
  int nstate;
  loom__state_t *states;      /* state tensor -> the node whose value it holds afterwards */
  int ngroups;
  loom__group_t *groups;
  int nsched;
  loom__sched_t *scheds;
  int typed;                  /* inference ran on the current graph */
};
typedef struct loom_prog loom__prog_t;

/* ---- ir.c ---------------------------------------------------------------- */
loom_result_t loom__lang_new(const char *file, loom__prog_t **out);
void loom__lang_free(loom__prog_t *p);
loom_result_t loom__lang_clone(const loom__prog_t *p, loom__prog_t **out);
/* Appends a node (operands given); *id its index. */
loom_result_t loom__lang_add(loom__prog_t *p, int op, const int *in, int nin, int line, int col, int *id);
/* The live node named `name`, -1 if none. */
int loom__lang_find(const loom__prog_t *p, const char *name);
/* The group named `name`, -1 if none. */
int loom__lang_find_group(const loom__prog_t *p, const char *name);
/* Names node id (a name already taken is LOOM_ERR_INVALID_ARGUMENT). */
loom_result_t loom__lang_set_name(loom__prog_t *p, int id, const char *name);
/* A name not yet taken: base, else base2, base3, ... */
void loom__lang_fresh_name(const loom__prog_t *p, const char *base, char out[LOOM__LANG_NAME]);
int loom__lang_anonymous(const loom__node_t *nd);
/* Live users of id (operands, not states or outputs): count, filled up to cap. */
int loom__lang_users(const loom__prog_t *p, int id, int *out, int cap);
/* 1 if id is an Execute output or a state's value. */
int loom__lang_is_result(const loom__prog_t *p, int id);
/* Replaces every use of `from` (operands, outputs, states) by `to`, except in node `except`. */
void loom__lang_replace_uses(loom__prog_t *p, int from, int to, int except);
/* Live nodes in a topological order (operands first; ties by id). order[] has room for p->n. */
loom_result_t loom__lang_topo(const loom__prog_t *p, int *order, int *count);
/* The state entry of tensor t, -1 if none. */
int loom__lang_state_of(const loom__prog_t *p, int tensor);
/* A name for messages: `name`, or "the <Op> at line:col". */
const char *loom__lang_label(const loom__prog_t *p, int id, char *buf, size_t cap);
/* Structural equality (names, ops, attributes, declarations, Execute, states, groups; ids and
 * anonymous names aside). */
int loom__lang_equal(const loom__prog_t *a, const loom__prog_t *b);
loom_result_t loom__lang_add_group(loom__prog_t *p, const char *name, int kind, int level, int *gid);
loom_result_t loom__lang_add_sched(loom__prog_t *p, const char *name, loom__sched_t **out);
loom_result_t loom__lang_sched_push(loom__sched_t *s, const loom__stmt_t *st);
loom_result_t loom__lang_set_exec(loom__prog_t *p, const char *name, const int *in, int nin, const int *out, int nout);
/* Binds the state tensor of Update node u (its operand 0, an input) to u;
 * a tensor updated twice, or a non-input, is LOOM_ERR_INVALID_ARGUMENT. */
loom_result_t loom__lang_bind_update(loom__prog_t *p, int u);
/* Binds state tensor t to value v (replacing an earlier binding). */
loom_result_t loom__lang_bind_state(loom__prog_t *p, int t, int v);

/* ---- parser.c / sched_parse.c ------------------------------------------------ */
loom_result_t loom__lang_parse(const char *text, const char *file, loom__prog_t **out);
/* Parses one schedule statement (text without the trailing ';' allowed). */
loom_result_t loom__lang_parse_stmt(const char *text, loom__stmt_t *st);

/* ---- printer.c -------------------------------------------------------------- */
typedef struct loom__buf { char *s; size_t len, cap; int oom; } loom__buf_t;
void loom__buf_printf(loom__buf_t *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The program as .loom text; typed: each Var with a comment of its type. */
loom_result_t loom__lang_print(const loom__prog_t *p, int typed, loom__buf_t *b);
void loom__lang_print_type(const loom__type_t *t, loom__buf_t *b);
void loom__lang_print_layout(const loom__layout_t *l, loom__buf_t *b);

/* ---- layout_rules.c ----------------------------------------------------------- */
/* Infers every live node's type; the first error names file:line:col. */
loom_result_t loom__lang_infer(loom__prog_t *p);
/* "Sliced(0)", "Replicated", "Local", "Root(1)" (with " GROUP(i)" when in a group). */
const char *loom__lang_layout_str(const loom__layout_t *l, char *buf, size_t cap);
/* "[B, S, 4]" */
const char *loom__lang_shape_str(const loom__type_t *t, char *buf, size_t cap);
/* 1 if two dimensions are the same size (same symbol, or same literal). */
int loom__lang_dim_eq(const loom__dim_t *a, const loom__dim_t *b);
/* Number of pipeline groups (1 for a WORLD program). */
int loom__lang_ngroups(const loom__prog_t *p);

/* ---- interp.c ------------------------------------------------------------------ */
typedef struct loom__binding { int n; char sym[16][16]; int64_t val[16]; } loom__binding_t;
loom_result_t loom__lang_parse_bind(const char *text, loom__binding_t *b);
/* The logical value of a result: element count and a malloc'ed array. */
typedef struct loom__value {
  char name[LOOM__LANG_NAME]; /* the output's or state's name */
  int is_state;
  int local;                  /* Local: `ranks` per-rank copies back to back */
  int ranks;
  int64_t count;              /* elements of one copy */
  double *v;
} loom__value_t;
typedef struct loom__results { int n; loom__value_t *vals; } loom__results_t;
/* Runs p at W ranks per group on inputs drawn from `seed`. */
loom_result_t loom__lang_interp(loom__prog_t *p, int W, const loom__binding_t *bind, uint64_t seed,
                                loom__results_t *res);
void loom__lang_results_free(loom__results_t *r);
/* Largest |a - b| / max(1, |a|) over matching results; an error if they do not match. */
loom_result_t loom__lang_results_diff(const loom__results_t *a, const loom__results_t *b, double *maxdiff);

/* ---- transform.c / group.c --------------------------------------------------- */
/* Applies one schedule statement to p (in place). The refusal says why. */
loom_result_t loom__lang_apply(loom__prog_t *p, const loom__stmt_t *st);
loom_result_t loom__lang_split(loom__prog_t *p, int id, int policy, const char *n1, const char *n2);
loom_result_t loom__lang_reorder(loom__prog_t *p, int ag, const int *members, int nm, const char *const *names,
                                 int nnames, const char *kname);
loom_result_t loom__lang_as_slice(loom__prog_t *p, int t);
loom_result_t loom__lang_dead(loom__prog_t *p, int id);
loom_result_t loom__lang_dce(loom__prog_t *p);
loom_result_t loom__lang_fuse(loom__prog_t *p, const int *ids, int n, const char *name);
loom_result_t loom__lang_fuse_comm(loom__prog_t *p, const char *const *args, int nargs, int policy, const char *name);
loom_result_t loom__lang_overlap(loom__prog_t *p, const char *const *args, int nargs, const char *name);
/* The members of a node or group name: the node itself, or every live node of the group. */
int loom__lang_members(const loom__prog_t *p, const char *name, int *out, int cap);

/* ---- explore.c ------------------------------------------------------------------ */
typedef struct loom__cost { double flops, hbm_bytes, link_bytes, time_us; int kernels; } loom__cost_t;
loom_result_t loom__lang_cost(loom__prog_t *p, int W, const loom__binding_t *bind, loom__cost_t *c);
/* moves.c: the statements the search tries from p (cleanup: after it, every asSlice and dead that applies). */
typedef struct loom__move { loom__stmt_t st; int cleanup; } loom__move_t;
typedef struct loom__moves { int n, cap; loom__move_t *m; } loom__moves_t;
void loom__lang_moves(const loom__prog_t *p, loom__moves_t *out);
/* Keeps every state that is no output on its slices (asSlice) and removes what nothing uses (dead), until
 * nothing more applies; out[] (cap): the statements applied. */
loom_result_t loom__lang_cleanup(loom__prog_t *p, loom__stmt_t *out, int cap, int *n);
typedef struct loom__found {
  int n, cap;
  loom__sched_t *scheds; /* each: the statements from the unscheduled program */
} loom__found_t;
/* Every schedule reachable in <= depth statements (duplicates merged, at most max). */
loom_result_t loom__lang_explore(const loom__prog_t *p, int depth, int max, loom__found_t *out);
void loom__lang_found_free(loom__found_t *f);

/* ---- listing.c ------------------------------------------------------------------ */
/* `loom schedules`: the unscheduled program, the program's own schedules, the search's, cheapest first. */
typedef struct loom__listed {
  const loom__sched_t *s; /* the program's, the search's (in `found`), or the unscheduled one */
  int own;                /* one of the program's Schedule sections */
  loom__cost_t cost;
  char *units;            /* the units it runs, in order */
  char *refused;          /* NULL, or why a statement of the program's own schedule was refused (listed last) */
} loom__listed_t;
typedef struct loom__listing {
  int n, refused;
  loom__listed_t *rows;
  loom__found_t found;
} loom__listing_t;
loom_result_t loom__lang_list(const loom__prog_t *p, int W, const loom__binding_t *bind, int depth, int max,
                              loom__listing_t *out);
void loom__lang_listing_free(loom__listing_t *l);

#endif /* LOOM_LANG_LANG_H */
