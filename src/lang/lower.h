/*
 * lower.h - a scheduled program lowered to what runs on GPUs: the form that
 * code generation (src/codegen) emits kernels from and that the protocol of
 * each generated kernel is expanded from (lower_proto.c), so that the model
 * checker proves what runs.
 *
 * Units. The program's units in loom__lang_unit_order's order (a stage, a
 * fused collective, a kernel, a lone operation: the units of the cost model
 * and of `loom schedules`), each cut where a MatMul is: a MatMul is a GEMM
 * unit (loom_gemm on this rank's pieces), everything else of the program
 * unit one KERNEL unit (one generated kernel). A unit that only adds a bias
 * vector to a MatMul's result (`MatMul(a, b) + bias`, the MatMul read by
 * nothing else) is folded into the GEMM: loom_gemm's bias epilogue, fp32
 * sum rounded once, where every rank's k and n are multiples of 8. Pipeline groups: a unit runs
 * on the ranks of the groups its values live in (a Send on both groups). Lowered for a library runner
 * (lib: the program as loom's ops one after another, or as cuBLASLt + NCCL), a program unit that is one
 * plain collective (loom__lw_coll_unit_op) is a COLL unit instead of a kernel: the library's collective on
 * the ranks' pieces, its operand in the arena (loom's collectives load their peers' operands).
 *
 * Geometry. Every value has a whole shape and a layout; a rank holds its
 * piece: Sliced(d) splits dimension d of n as every loom op does (S =
 * ceil(n / W), rank q of the group owns [min(n, qS), min(n, (q+1)S)):
 * loom__coll_slice with a unit of 1), Replicated and Local the whole shape,
 * Root(r) the whole shape on rank r only. A piece is stored densely in
 * row-major order of its own dimensions.
 *
 * Buffers. A value is materialized (given a buffer) where it leaves its
 * unit (a later unit, an output, a state) or where a rank other than its
 * writer reads it (a collective's operand, a value a later step of the unit
 * reads): the caller's input or output, or the plan's arena (symmetric
 * memory: the same offset on every rank, peers address it). Inputs that
 * peers read are copied into the arena first; an output that peers read is
 * stored twice (arena and the caller's). Everything else is inlined.
 *
 * Steps and loops. A kernel unit runs steps 0, 1, ...: step s computes the
 * materialized values whose expressions read (through inlined values) a
 * value the unit materializes in step s - 1 or earlier, so a step reads only
 * what earlier steps finished; a materialized FP32 pointwise value of the
 * reader's own space (through pointwise operations) is computed by the
 * reader in its step instead (loom__lw_same_element: Adam's moments and
 * the update that reads them, one step). A step is a few loops, each over one value's
 * piece on this rank (the elements of values of one shape and layout share
 * a loop), of a kind: ELEM (the body once per element), ROW (RMSNorm and
 * LayerNorm: per row, a sum over it, then the row), SUMSQ (Norm: partial
 * sums of squares in NPART fixed slots, added in a fixed order later, so
 * every rank computes the same norm bit for bit). A body is straight-line
 * SSA over the element's global coordinates g[]: constants, loads (a
 * buffer's piece of this rank, of the owner of g along the sliced dimension,
 * of a root, of a Send's source), reductions over the group's ranks in rank
 * order (fp32), the program's pointwise operations (Dropout by the element's
 * index in its own whole tensor, loom__dropout_keep's mask), and the sum of
 * a Norm's partials.
 *
 * Exchanges. Each kernel unit's list of SETs and WAITs of its signals
 * (arrived: this rank's inputs are readable; ready[s]: its step s is
 * finished; done: it has finished reading its peers) with the ranks each
 * wait is for (the group, a root, a Send's source or destination) and which
 * ranks do it (those that run a loop, or hold a buffer). The code emits
 * exactly these; lower_proto.c expands the same list, with the loops' reads
 * and writes, into core/protocol.h's steps. Own-rank waits for ready[s] (the
 * unit's blocks meeting between steps) are in the list too and are left out
 * of the protocol (the checker models a rank's blocks as one actor).
 *
 *   lower.c        geometry, buffers, units, steps (from the program)
 *   lower_body.c   the loops' SSA bodies
 *   lower_proto.c  the exchange list and its protocol (checked; mutations)
 *   lower_print.c  the lowered form as text (`loom check --lowered`)
 */
#ifndef LOOM_LANG_LOWER_H
#define LOOM_LANG_LOWER_H

#include <stdint.h>

#include "lang/lang.h"
#include "core/protocol.h"

#define LOOM__LW_NPART 256 /* a Norm's partial-sum slots (per rank): a block each, enough for every SM */

/* Where a rank holds a value. */
typedef struct loom__lw_geom {
  int rank;
  int64_t dims[LOOM__LANG_RANK]; /* whole */
  int sliced;                    /* the Sliced dimension, -1 */
  int64_t S;                     /* Sliced: elements of a slice along `sliced` (ceil(n / W)) */
  int group;                     /* -1 (WORLD) or the pipeline group */
  int root;                      /* Root(r): r; -1 */
  int local;                     /* Local: each rank its own value */
  int64_t max_count;             /* elements of the largest piece */
} loom__lw_geom_t;

/* The piece of index q (0..W-1 in the group): its dims and offset along the sliced dimension. */
void loom__lw_piece(const loom__lw_geom_t *g, int q, int64_t *dims, int64_t *off);
/* Elements of the piece of index q. */
int64_t loom__lw_piece_count(const loom__lw_geom_t *g, int q);

enum { LOOM__LWB_ARENA = 1, LOOM__LWB_INPUT = 2, LOOM__LWB_OUTPUT = 4 }; /* a buffer's storage (flags) */
#define LOOM__LW_MAXDST 4

/* One materialized value (or a Norm's partials). */
typedef struct loom__lw_buf {
  int node;                  /* its value, -1 for partials (`of`: the Norm) */
  int of;
  int dtype;                 /* partials: LOOM_FP32 */
  loom__lw_geom_t geom;
  int store;                 /* LOOM__LWB_* flags */
  int input;                 /* INPUT: the position among the inputs (lw->in_node) */
  int noutput, output[LOOM__LW_MAXDST]; /* OUTPUT: positions among the outputs (Execute's, then the states) */
  int64_t arena_off;         /* ARENA: byte offset in the plan's arena */
  int peers_read;            /* a rank other than the writer reads it */
  int unit, step;            /* the unit and step that write it (-1: before the program: an input) */
} loom__lw_buf_t;

/* Who a load reads: its own piece, the owner of the element, a root, a Send's source. */
enum { LOOM__LWW_OWN = 0, LOOM__LWW_OWNER, LOOM__LWW_ROOT, LOOM__LWW_SRC };

/* Instruction kinds of a body. */
enum {
  LOOM__LI_CONST = 0, /* value */
  LOOM__LI_LOAD,      /* buf, who (arg: the root, or Send's group offset), idx */
  LOOM__LI_REDUCE,    /* buf over every rank of the group in rank order, redop, idx */
  LOOM__LI_OP,        /* the program's pointwise op on a[]; Dropout: idx = its whole flat index */
  LOOM__LI_PARTIALS   /* sqrt of the sum of a Norm's partials: buf, over every rank (arg 1) or its own */
};

typedef struct loom__lw_ins {
  int kind, op;   /* op: a loom__op_t (OP), the reduction (REDUCE) */
  int node;       /* the program value it computes (-1) */
  int a[LOOM__LANG_IN];
  int buf, who, arg, idx;
  double value;   /* CONST; OP: Dropout p */
  uint64_t seed;  /* Dropout */
  int dtype;      /* Cast: its target */
} loom__lw_ins_t;

/* How a loop's global coordinates g[] index a buffer: its dimension j takes
 * g[src[j]] (-1: 0, a broadcast dimension); the piece's geometry is geom. */
typedef struct loom__lw_index {
  int src[LOOM__LANG_RANK];
  loom__lw_geom_t geom;
} loom__lw_index_t;

enum { LOOM__LL_ELEM = 0, LOOM__LL_ROW, LOOM__LL_SUMSQ };
#define LOOM__LW_MAXSTORE 8

typedef struct loom__lw_loop {
  int unit, step, kind;
  loom__lw_geom_t space;  /* the piece it runs over */
  int ins0, nins;         /* its body: lw->ins[ins0 .. ins0 + nins) (indices local to the loop) */
  int nstore;
  int store_buf[LOOM__LW_MAXSTORE], store_ins[LOOM__LW_MAXSTORE];
  /* ROW: the norm (LOOM__OP_RMSNORM / _LAYERNORM), its eps, the body's x, w and b (-1) instructions */
  int norm, x_ins, w_ins, b_ins;
  double eps;
  /* SUMSQ: the x instruction, and the partials buffer (store_buf[0]) */
} loom__lw_loop_t;

/* Signal slots of a kernel unit. */
enum { LOOM__LWS_ARRIVED = 0, LOOM__LWS_DONE = 1, LOOM__LWS_READY = 2 /* + step */ };
/* The ranks a WAIT is for (from the waiting rank r): its group's, the group's rank arg, r - arg W (a
 * Send's source), r + arg W (its destination), r itself (the unit's blocks meeting). */
enum { LOOM__LWP_GROUP = 0, LOOM__LWP_ROOT, LOOM__LWP_SRC, LOOM__LWP_DST, LOOM__LWP_SELF };
enum { LOOM__LX_SET = 0, LOOM__LX_WAIT = 1 };

typedef struct loom__lw_ex {
  int kind;     /* LOOM__LX_* */
  int step;     /* -1: at the start; s: WAIT before / SET after step s; nsteps: at the end */
  int slot;     /* LOOM__LWS_* */
  int pattern;  /* WAIT: LOOM__LWP_*, with arg (the root; Send's group offset) */
  int arg;
  int loop;     /* the ranks that do it: those that run this loop, */
  int buf;      /* or hold this buffer, or (both -1) every rank of the unit */
  int optional; /* a done handshake's entry: kept only where the checker needs it */
  int off;      /* 1: left out (an optional entry the checker proved unneeded, or a mutation) */
} loom__lw_ex_t;

/* A COLL unit (a lowering with lib set): a program unit that is one AllReduce, ReduceScatter or AllGather
 * (sums, WORLD programs, the slices along dimension 0), run as a library collective on this rank's pieces:
 * gemm_a its operand's buffer, gemm_c its result's, node the collective. */
enum { LOOM__LU_KERNEL = 0, LOOM__LU_GEMM = 1, LOOM__LU_COLL = 2 };
/* What runs a program's units (loom__lw_prog_t.lib): generated kernels and loom_gemm (GEN); the bare
 * collectives as loom's collective ops (LOOM); the bare collectives through NCCL and the MatMuls through
 * cuBLASLt (BASE). */
enum { LOOM__LW_LIB_GEN = 0, LOOM__LW_LIB_LOOM = 1, LOOM__LW_LIB_BASE = 2 };

typedef struct loom__lw_unit {
  char name[64];        /* the program unit's name (a stage's unit says which part) */
  char stage[LOOM__LANG_NAME]; /* the program unit it is part of */
  int kind;
  int groups;           /* bit g: group g's ranks run it (WORLD programs: bit 0) */
  int nsteps;
  int loop0, nloops;
  int ex0, nex;
  /* GEMM: C [M, N] = A [M, K] B [K, N] (+ bias [N]) on each rank's pieces (buffers); gemm_bias -1 for
   * none, else the program's `MatMul(a, b) + bias` folded into the GEMM's epilogue (loom__lw_fold_bias):
   * C is the sum's value, the MatMul's own value is never stored, node the MatMul */
  int gemm_a, gemm_b, gemm_c, gemm_bias, node;
} loom__lw_unit_t;

typedef struct loom__lw_prog {
  const loom__prog_t *p;
  int W, G, R;          /* ranks per group, groups, ranks */
  int lib;              /* LOOM__LW_LIB_*: what runs the bare collectives and the MatMuls */
  loom__binding_t bind;
  int nbuf, nunit, nloop, nins, nex;
  int cbuf, cunit, cloop, cins, cex;
  loom__lw_buf_t *bufs;
  loom__lw_unit_t *units;
  loom__lw_loop_t *loops;
  loom__lw_ins_t *ins;
  loom__lw_ex_t *ex;
  int nidx, cidx;
  loom__lw_index_t *idx;
  int *buf_of;          /* [p->n]: the buffer of each node, -1 */
  int *unit_of;         /* [p->n]: the unit of each node, -1 */
  int ninputs, noutputs;
  int *in_node;         /* [ninputs]: Execute's inputs, then the other tensors the program reads (by id) */
  int *out_node;        /* [noutputs]: Execute's outputs, then the states' values (by tensor name) */
  char (*out_name)[LOOM__LANG_NAME];
  int64_t arena_bytes;
} loom__lw_prog_t;

/* ---- lower.c -------------------------------------------------------------------- */
/* Lowers typed program p (inferred, schedule applied) for W ranks per group
 * with sizes from bind, every exchange entry on (the done handshakes
 * included). LOOM_ERR_INVALID_ARGUMENT for what no GPU code here runs
 * (saying what: an unbound size), LOOM_ERR_UNSUPPORTED for what the code
 * generator does not take (an FP32 MatMul). The structure (units, steps,
 * loops, exchange entries and their order) does not depend on W or the
 * sizes; only the geometry does. */
loom_result_t loom__lw_lower_raw(loom__prog_t *p, int W, const loom__binding_t *bind, int lib, loom__lw_prog_t *out);
/* 1 if node id of lowering lw runs as a COLL unit where it is a program unit of its own (lib not GEN): an
 * AllReduce, ReduceScatter or AllGather that sums (a copy: AllGather) in one dtype, in a program of one group,
 * whose slices (ReduceScatter's result, AllGather's operand) are along dimension 0: loom's and NCCL's slices
 * of rows, whatever W is. */
int loom__lw_coll_unit_op(const loom__lw_prog_t *lw, int id);
void loom__lw_free(loom__lw_prog_t *lw);
/* Room for element n of a growing array *arr of capacity *cap (doubled when full). */
loom_result_t loom__lw_grow(void **arr, int n, int *cap, size_t elem);
/* Node id's buffer (made on first use); a Norm's partials buffer. */
loom_result_t loom__lw_buf_for(loom__lw_prog_t *lw, int id, int *b);
loom_result_t loom__lw_partials_for(loom__lw_prog_t *lw, int norm, int *b);
/* The geometry of node id's value. */
loom_result_t loom__lw_geom_of(const loom__prog_t *p, int id, int W, const loom__binding_t *b, loom__lw_geom_t *g);
/* The group's first rank, and r's index in its group. */
static inline int loom__lw_base(const loom__lw_prog_t *lw, int r) { return r / lw->W * lw->W; }
/* 1 if rank r runs loop l / holds buffer b. */
int loom__lw_runs_loop(const loom__lw_prog_t *lw, const loom__lw_loop_t *l, int r);
int loom__lw_holds(const loom__lw_prog_t *lw, const loom__lw_buf_t *b, int r);
/* 1 if rank r runs unit u. */
int loom__lw_runs_unit(const loom__lw_prog_t *lw, const loom__lw_unit_t *u, int r);
/* 1 if two pieces are the same space (rank, dims, slicing, group, root). */
int loom__lw_same_space(const loom__lw_geom_t *a, const loom__lw_geom_t *b);
/* 1 if a reader running over `space` may compute materialized value v
 * itself in its own step instead of loading it a step later: v is an FP32
 * pointwise value (storing and loading it changes no bit) whose piece is
 * `space`, so the reader's element is v's own element on this rank. */
int loom__lw_same_element(const loom__lw_prog_t *lw, int v, const loom__lw_geom_t *space);

/* ---- lower_body.c ----------------------------------------------------------------- */
/* Appends the loops of unit u's step `step` for the materialized nodes
 * nodes[0..n) (one loop per kind and space). */
loom_result_t loom__lw_loops(loom__lw_prog_t *lw, int u, int step, const int *nodes, int n);
/* Whether loop l reads buffer b at other ranks (a REDUCE, or a LOAD not of its own piece; in groups of one
 * rank, only a Send's source is another rank). */
int loom__lw_reads_peers(const loom__lw_prog_t *lw, const loom__lw_loop_t *l, int b);

/* ---- lower_proto.c ------------------------------------------------------------------- */
/* Builds unit u's exchange list from its loops (the arrived, ready and
 * done handshakes its reads need); done only where the protocol without it
 * fails the checker at the world sizes it is checked at. */
loom_result_t loom__lw_exchanges(loom__lw_prog_t *lw, int u);
/* Unit u's protocol (core/protocol.h) expanded from its exchange list and
 * loops, at lw's W (every rank of lw: R <= LOOM__PROTO_MAXW), without the
 * list's entry `drop` (-1: none; a mutation). out's memory is taken as
 * fresh: loom__proto_free it. */
loom_result_t loom__lw_protocol(const loom__lw_prog_t *lw, int u, int drop, loom__proto_t *out);
/* The world sizes (ranks per group) the protocols of p are checked at: 2
 * and 3 (pipeline programs: as many as keep every rank within the checker's
 * LOOM__PROTO_EXH_MAXW, the exhaustive search's reach); *n of them (0: none
 * fits). */
void loom__lw_check_worlds(const loom__prog_t *p, int *W, int *n);
/* The lowering code generation runs: loom__lw_lower_raw at W, with the
 * optional entries the checker needs at the check worlds kept (each done
 * wait left out where every check world's protocol passes without it),
 * then every kernel unit's protocol checked at every check world: a
 * violation is LOOM_ERR_INTERNAL naming the unit, the world and the
 * checker's report, and nothing may run. */
loom_result_t loom__lw_lower(loom__prog_t *p, int W, const loom__binding_t *bind, loom__lw_prog_t *out);
/* loom__lw_lower with lib (LOOM__LW_LIB_*): the bare collectives as COLL units where lib is not GEN. */
loom_result_t loom__lw_lower_lib(loom__prog_t *p, int W, const loom__binding_t *bind, int lib, loom__lw_prog_t *out);
/* Checks every kernel unit of lw (its entries as they are) at lw's world:
 * LOOM_SUCCESS, or LOOM_ERR_INTERNAL with the first violation. */
loom_result_t loom__lw_check(const loom__lw_prog_t *lw);

/* ---- lower_print.c ------------------------------------------------------------------ */
void loom__lw_print(const loom__lw_prog_t *lw, loom__buf_t *o);

#endif /* LOOM_LANG_LOWER_H */
