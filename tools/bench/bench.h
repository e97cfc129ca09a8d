/*
 * bench.h - the loom-bench harness: suite registration, common options,
 * timing with CUDA events, L2-defeating input rotation, random fills, the
 * results table and its JSON file.
 *
 * A suite is one file in tools/bench/ (bench_<name>.c or .cu) that registers
 * itself; main.c never changes:
 *
 *   LOOM_BENCH(gemm, "loom GEMM engine vs cuBLASLt") {   // int fn(int argc, char **argv)
 *     loom_bench_opts_t o;                              // argv[0] is "gemm"
 *     int rc = loom_bench_parse(&o, argc, argv, NULL, NULL); // own options: a loom_bench_opt_fn
 *     if (rc != LOOM_BENCH_RUN) return rc;              // --help (0) or bad usage (2)
 *     int w = loom_bench_world(&o, 1);                  // ranks to run (here 1)
 *     if (w == 0) return 1;
 *     return loom_bench_launch(&o, w, my_rank_fn, &o) ? 1 : 0; // one process per GPU
 *   }
 *
 * Process model. The loom-bench process itself never touches CUDA: every
 * suite does its GPU work inside loom_bench_launch (support/launch.h),
 * which forks one child per rank (or is one rank under mpirun). CUDA must not
 * be initialised before a fork, and `loom-bench all` runs suite after suite
 * in the same parent, so a suite that calls CUDA outside a rank function
 * breaks every suite after it.
 *
 * Inside a rank function: create a stream; time with loom_bench_time (one
 * GPU) or loom_bench_time_ranks (every rank runs the op; the reported time
 * of each repetition is the maximum over ranks, computed with an NCCL max
 * all-reduce, so a collective's time is that of its slowest rank); sum
 * per-rank error counts with loom_bench_sum_ranks; rank 0 alone fills a
 * loom_bench_table_t, prints it last (loom_bench_print) and writes its JSON
 * (loom_bench_write_json). Other ranks report through those NCCL reductions.
 *
 * Rows. One row per measured case. Times are medians in microseconds, NAN
 * where a column was not measured; loom_bench_row_finish derives ECT,
 * overlap efficiency, TFLOP/s, algbw and busbw from what is set:
 *   ECT(x)   = x - gemm_us (gemm_us: the best non-split GEMM of the shape)
 *   overlap  = 1 - ECT(loom) / ECT(seq), loom = fused, else auto
 *   TFLOP/s  = flops / main time,   algbw = bytes / main time (GB/s),
 *   busbw    = algbw * busbw_factor (nccl-tests: AllReduce 2(n-1)/n,
 *              AllGather / ReduceScatter / AlltoAll (n-1)/n)
 * where main time = fused, else auto, else seq, else comm, else gemm;
 * before_us and peer_us (the previous build's and the outside baseline's
 * time of the same op) give the ratios vs_before = before / main and
 * vs_peer = peer / main. A suite may add columns of its own
 * (loom_bench_own_col: a head for the table, a key for the JSON; the
 * rows' values in own[]). Columns absent in every row are left out of the
 * table.
 *
 * A row says what ran. An AUTO plan's row (loom_bench_row_auto) names the
 * path the plan resolved to, from the public plan-info call, in its label
 * ("loom-auto:sequential") and in auto_path; its time is auto_us (JSON
 * "auto_us"), never fused_us, whichever path ran (a collective's stays in
 * comm_us, as every collective row's). A peer's time is taken
 * only for the row's exact shape (loom_bench_row_pair, support/bench_pair.h:
 * every shape field compared, both ways); otherwise there is no peer value
 * and no ratio, and the row's note says which field differed.
 */
#ifndef LOOM_TOOLS_BENCH_H
#define LOOM_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "loom.h"
#include "support/bench_pair.h"
#include "support/launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- registration -------------------------------------------------------- */

/* A suite: argv[0] is its name, then its options. Returns the exit code:
 * 0 ok, 1 a failure (an error, or a wrong result), 2 bad usage. */
typedef int (*loom_bench_fn)(int argc, char **argv);

void loom_bench_register(const char *name, const char *help, loom_bench_fn fn);
int loom_bench_count(void);
/* Suite i in name order (i < loom_bench_count()). */
const char *loom_bench_name(int i);
const char *loom_bench_help(int i);
loom_bench_fn loom_bench_suite(int i);
/* Index of the suite called `name`, -1 if none. */
int loom_bench_find(const char *name);

#define LOOM_BENCH(name, help)                                                  \
  static int loom_bench_##name(int argc, char **argv);                          \
  __attribute__((constructor)) static void loom_bench_reg_##name(void) {        \
    loom_bench_register(#name, help, loom_bench_##name);                        \
  }                                                                             \
  static int loom_bench_##name(int argc, char **argv)

/* ---- options every suite accepts ----------------------------------------- */

typedef struct loom_bench_opts {
  int quick;      /* --quick: fewer sizes and repetitions */
  int warmup;     /* --warmup N (default 5; --quick 2) */
  int reps;       /* --reps N timed repetitions (default 20; --quick 5) */
  int world;      /* --world N ranks (0: every GPU present) */
  int timeout_s;  /* --timeout S bound on the whole launch (default 1800) */
  int json;       /* 0 with --no-json */
  int check;      /* 0 with --no-check: skip result checks (#wrong shows "-") */
  int warmup_set, reps_set; /* internal: given explicitly (--quick leaves them) */
} loom_bench_opts_t;

void loom_bench_opts_default(loom_bench_opts_t *o);

/* Parses a common option at argv[*i] (advancing *i past its value): 1 if it
 * was one, 0 if not, -1 on a bad value (printed). --quick also lowers
 * warmup/reps unless they were given explicitly. */
int loom_bench_parse_common(loom_bench_opts_t *o, int argc, char **argv, int *i);

/* A suite's own option at argv[*i]: 1 consumed, 0 unknown, -1 bad value. */
typedef int (*loom_bench_opt_fn)(void *ctx, int argc, char **argv, int *i);

#define LOOM_BENCH_RUN (-1)

/* Whole command line of a suite (argv[0] = its name): defaults, then common
 * options, then `own` (may be NULL) for the rest. Returns LOOM_BENCH_RUN to
 * go on; 0 after -h/--help (common usage printed, then `own` is called with
 * argv[*i] = "--help" so it can print its own lines); 2 after a bad or
 * unknown option (printed). */
int loom_bench_parse(loom_bench_opts_t *o, int argc, char **argv, loom_bench_opt_fn own, void *ctx);

/* The common options, one per line, for a suite's --help. */
void loom_bench_usage_common(FILE *f);

/* ---- launching ----------------------------------------------------------- */

/* Ranks to run: o->world if set, else `want` (<= 0: every GPU present; under
 * mpirun: the job's size). 0 with a printed message when it cannot be run
 * (more ranks than GPUs, none at all). Never initialises CUDA. */
int loom_bench_world(const loom_bench_opts_t *o, int want);

/* loom_bench_env_defaults(), then loom_launch(world, o->timeout_s, fn,
 * arg); returns 0 when every rank returned 0. */
int loom_bench_launch(const loom_bench_opts_t *o, int world, loom_rank_fn fn, void *arg);

/* NCCL_NVLS_ENABLE=0 where the caller left it unset (loom never uses NVLink
 * multicast), saying so in one line on stderr; a value the caller set is
 * kept. Once per process; before the ranks and the peers start. */
void loom_bench_env_defaults(void);

/* ---- timing -------------------------------------------------------------- */

/* Enqueues repetition `iter` (0, 1, ... counting warm-up) on `stream`.
 * Use iter % nsets to rotate input sets. */
typedef loom_result_t (*loom_bench_op_fn)(void *arg, int iter, cudaStream_t stream);

typedef struct loom_bench_time {
  double median_us, min_us, max_us, mean_us;
  double host_us;  /* median host time to issue one call of the op (this rank): where it
                      exceeds what the GPU needs, the op's time is the host's */
  int reps;
} loom_bench_time_t;

/* `warmup` untimed repetitions, then `reps` repetitions, each between two
 * CUDA events on `stream` behind a hold of the GPU (loom_bench_hold: 1.5x
 * the op's slowest host issue time in the warm-up plus 10 us, at most 2 ms),
 * so the op is queued before the GPU reaches it and its time is the GPU's,
 * also where it is shorter than its issue time (host_us reports that);
 * statistics over the reps. LOOM_BENCH_HOLD=0: no hold. Not
 * graph-capturable (it synchronizes). */
loom_result_t loom_bench_time(cudaStream_t stream, int warmup, int reps, loom_bench_op_fn op, void *arg,
                              loom_bench_time_t *out);

/* Several operations side by side: each repetition runs ops[0] .. ops[nops-1]
 * back to back (events between them), so that clocks, heat and other tenants
 * of the GPU weigh on each alike; out[j] are the statistics of ops[j]. The
 * `iter` argument counts runs over all ops (run r of the whole sequence gets
 * iter r), so a rotation of input sets by iter never gives two consecutive
 * runs the same set. loom_bench_time is the case nops = 1. */
loom_result_t loom_bench_time_side_by_side(cudaStream_t stream, int warmup, int reps, int nops,
                                           loom_bench_op_fn *ops, void **args, loom_bench_time_t *out);

/* Collective: every rank calls it with the same warmup/reps. Ranks line up
 * before every timed op (an NCCL all-reduce of one element on the stream,
 * outside the op's start and stop events: no op's time holds another
 * rank's lag), then the per-repetition times are max-reduced over ranks and
 * the statistics taken on those. Before each barrier the GPU is held
 * (loom_bench_hold) for 1.5x the op's median host time in the warm-up plus
 * 10 us (at most 2 ms), so the op is queued when the barrier ends: the time
 * is the GPU's, with every rank starting together, not the host's issue
 * time or its skew between ranks (host_us reports the issue time).
 * LOOM_BENCH_HOLD=0: no hold (support/tool_param.h). */
loom_result_t loom_bench_time_ranks(ncclComm_t nccl, cudaStream_t stream, int warmup, int reps,
                                    loom_bench_op_fn op, void *arg, loom_bench_time_t *out);

/* Collective: loom_bench_time_ranks of several operations side by side
 * (each repetition runs ops[0] .. ops[nops-1] in turn on every rank, each
 * after its barrier); out[j] are the statistics of ops[j] over the
 * per-repetition maxima over ranks. */
loom_result_t loom_bench_time_ranks_side_by_side(ncclComm_t nccl, cudaStream_t stream, int warmup, int reps, int nops,
                                                 loom_bench_op_fn *ops, void **args, loom_bench_time_t *out);

/* Device-to-device copy bandwidth of the current GPU, measured now: bytes
 * read + written per second of a 256 MiB cudaMemcpyAsync on `stream`, best
 * of 8 after a warm-up. NAN if it could not be measured (never a guess). */
double loom_bench_copy_bandwidth(cudaStream_t stream);

/* Copies `bytes` (a multiple of 16; both ends 16-byte aligned) from src
 * to dst by 16-byte kernel stores from every SM: with dst a peer's memory
 * (loom_peer_ptr), the link's one-way store rate (bench_kernels.cu). */
loom_result_t loom_bench_link_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* Queues a kernel on `stream` that occupies the GPU for `us` microseconds
 * (one thread; nothing for us <= 0): bench_kernels.cu. */
loom_result_t loom_bench_hold(cudaStream_t stream, double us);

/* Collective: *value becomes the sum over ranks. */
loom_result_t loom_bench_sum_ranks(ncclComm_t nccl, cudaStream_t stream, int64_t *value);

/* Collective: *value becomes op (ncclSum, ncclMin, ncclMax) over ranks. */
loom_result_t loom_bench_reduce_ranks(ncclComm_t nccl, cudaStream_t stream, int64_t *value, ncclRedOp_t op);

/* Collective: returns once every rank called it (polls, does not spin a
 * core: idle ranks can wait here while rank 0 works alone). */
loom_result_t loom_bench_barrier(ncclComm_t nccl, cudaStream_t stream);

/* ---- inputs -------------------------------------------------------------- */

/* How many input sets of `bytes_per_set` to rotate among so that one set is
 * evicted from L2 before it comes round again (sets x bytes >= 4 x L2 of
 * the current device), at most 32 and at most `budget_bytes` in all (>= 1). */
int loom_bench_rotation(size_t bytes_per_set, size_t budget_bytes);

/* Period of loom_bench_fill_random: 4 Mi elements. */
#define LOOM_BENCH_FILL_PERIOD ((size_t)1 << 22)

/* The period of a fill of n elements: min(n, LOOM_BENCH_FILL_PERIOD). */
static inline size_t loom_bench_fill_period(size_t n) {
  return n < LOOM_BENCH_FILL_PERIOD ? n : LOOM_BENCH_FILL_PERIOD;
}

/* Fills n elements of device buffer `dev` with random values of dtype t in
 * [-scale, scale), never zero: element i = P[i % period], where P is
 * loom_ref_fill_random(t, P, period, seed, scale) and period =
 * min(n, LOOM_BENCH_FILL_PERIOD). A checker rebuilds P on the host.
 * Synchronous: the data is in place for every stream when it returns. */
loom_result_t loom_bench_fill_random(void *dev, loom_dtype_t t, size_t n, uint64_t seed, double scale);

/* ---- results ------------------------------------------------------------- */

#define LOOM_BENCH_OWN_COLS 6 /* columns a suite may add */

typedef struct loom_bench_row {
  char op[32];       /* "gemm", "allreduce", "ag_gemm", ... */
  char impl[40];     /* what ran: "cublasLt", "nccl", "loom", "loom-auto:sm-copy", ... */
  char shape[64];    /* as printed: "8192x24576x12288 NK", "64 MiB" */
  char dtype[16];    /* "bf16", "bf16->fp32", ... */
  int64_t m, n, k;   /* GEMM shape (0: none); plots use m as x */
  int64_t bytes;     /* bytes of the op's buffer (nccl-tests convention); plots' x */
  int world;         /* ranks that ran it */
  double fused_us, gemm_us, comm_us, seq_us; /* medians; NAN: absent */
  double auto_us;        /* an AUTO plan's time, whichever path it took (NAN: not an AUTO row's) */
  char auto_path[24];    /* the path AUTO resolved to ("sequential", "sm-copy", "ll", ...; "": not AUTO) */
  double min_us, max_us;                     /* spread of the main time (NAN: unknown) */
  double host_us;        /* median host time to issue the main op (NAN: not measured) */
  double flops;          /* per call, for TFLOP/s (0: none) */
  double busbw_factor;   /* busbw = algbw x factor; NAN (default): no algbw/busbw */
  int64_t wrong;         /* elements wrong in the check; -1: not checked */
  double before_us;      /* the main time of the same op built from the previous commit (NAN: not run) */
  double peer_us;        /* the outside baseline's (PyTorch's) time of this exact shape (NAN: not run
                            or not paired: loom_bench_row_pair) */
  char peer_timing[64];  /* paired: how the peer was timed ("graph", "eager (includes Python host time)") */
  char peer_note[200];   /* the pairing's outcome, printed after the note: the peer's timing, or why no value */
  char note[192];
  double own[LOOM_BENCH_OWN_COLS]; /* the suite's own columns (loom_bench_own_col); NAN: absent */
  /* derived by loom_bench_row_finish (NAN where not derivable) */
  double ect_us, seq_ect_us, overlap, tflops, algbw, busbw;
  double vs_before, vs_peer; /* before_us / main time, peer_us / main time (> 1: faster now) */
} loom_bench_row_t;

typedef struct loom_bench_table {
  loom_bench_row_t **rows; /* each row allocated on its own: pointers stay valid */
  int n, cap;
  char notes[32][192];  /* printed under the table and written to the JSON (more are dropped) */
  int nnotes;
  char own_head[LOOM_BENCH_OWN_COLS][12]; /* the suite's own columns: table heads ("hand(us)") */
  char own_key[LOOM_BENCH_OWN_COLS][24];  /* their JSON keys ("hand_us") */
  int own_digits[LOOM_BENCH_OWN_COLS];    /* decimals printed */
  int nown;
} loom_bench_table_t;

/* A column of the suite's own after the common ones (before #wrong): its
 * head in the table (at most 11 characters), its key in each JSON row, the
 * decimals printed; the rows' values go in own[index]. Returns the index,
 * or -1 where LOOM_BENCH_OWN_COLS are taken already. */
int loom_bench_own_col(loom_bench_table_t *t, const char *head, const char *key, int digits);

/* A new row at the end of t: times and busbw_factor NAN, wrong -1, world 1,
 * rest zero; NULL only if memory ran out. The pointer stays valid until
 * loom_bench_table_free, however many rows are added after it. */
loom_bench_row_t *loom_bench_add(loom_bench_table_t *t);
/* Derives ect/overlap/tflops/algbw/busbw (see the top of this file). */
void loom_bench_row_finish(loom_bench_row_t *r);
/* A line under the table (printf format). */
void loom_bench_note(loom_bench_table_t *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void loom_bench_table_free(loom_bench_table_t *t);

/* nccl-tests-like table; calls loom_bench_row_finish on every row. */
void loom_bench_print(FILE *f, loom_bench_table_t *t, const char *title);

/* Where results go: --results DIR, else $LOOM_BENCH_RESULTS_DIR, else
 * loom-results (relative to the current directory). */
const char *loom_bench_results_dir(void);

/* Writes <results dir>/<suite>-<YYYYmmdd-HHMMSS>.json (directory
 * created) with device name (current device), GPUs present, world, date,
 * commit (LOOM_COMMIT, else `git rev-parse --short HEAD`, else "unknown"),
 * NCCL and CUDA versions, options, notes and rows. Call on rank 0 inside a
 * rank function. The path goes to path_out (may be NULL). 0 on success. */
int loom_bench_write_json(const char *suite, loom_bench_table_t *t, const loom_bench_opts_t *o, int world,
                          char *path_out, size_t path_cap);

/* A rank's stream and loom comm on its NCCL communicator (default
 * configuration): 0, or 1 after printing why (nothing is left open). */
int loom_bench_rank_open(const loom_rank_ctx_t *ctx, cudaStream_t *s, loom_comm_t *comm);
/* Closes what loom_bench_rank_open opened. */
void loom_bench_rank_close(cudaStream_t s, loom_comm_t comm);

/* The end of a suite on rank 0: its JSON written to the results folder
 * (unless --no-json; the path noted under the table; a JSON that could not
 * be written is one more failure), the table printed under `title`, and a
 * line counting the failures where there were any. Returns the failures. */
int loom_bench_finish(const char *suite, loom_bench_table_t *t, const loom_bench_opts_t *o, int world,
                      const char *title, int failures);

/* ---- outside baselines (bench/peers) ------------------------------------ */

/* The folder of the PyTorch peers: $LOOM_BENCH_PEERS, else
 * <prefix>/share/loom/peers next to an installed loom-bench (<prefix>/bin,
 * found through /proc/self/exe; make install puts them there), else
 * bench/peers (the source tree, run from its root). */
const char *loom_bench_peers_dir(void);

/* Runs `python3 script args --json <results dir>/<name>-<stamp>.json` from
 * the parent process (call it before loom_bench_launch: the peer and the
 * ranks never share the GPUs), bounded by 900 s; script is `peer` in
 * loom_bench_peers_dir() ("tp_torch.py"), or `peer` itself where it names a
 * path (holds a '/'). 0 with the JSON's path in json_path; else nonzero and
 * note says why there is no peer column (not found, no PyTorch or GPU
 * (exit 2), timed out, under mpirun, arguments too long). The suite passes
 * its exact shapes in args (the peer runs those and nothing else). */
int loom_bench_run_peer(const char *peer, const char *args, const char *name, char *json_path, size_t json_cap,
                        char *note, size_t note_cap);

/* Appends printf-style text to the NUL-terminated buf of cap bytes; -1
 * (buf unchanged) where it does not fit. For a peer's argument list. */
int loom_bench_appendf(char *buf, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Pairs row r with the row of `variant` ("async_tp", "one_shot", ...) of
 * the same complete shape in the peer's JSON at `path`
 * (loom_bench_pair_file): r->peer_us is set only when every shape field
 * agrees, both ways; r->peer_timing says how the peer was timed and
 * r->peer_note what the table prints after the row's note ("peer async_tp:
 * graph", or "no peer: peer ran n=14336, row has n=3584"). host_excluded:
 * r's time excludes host issue time (per call in a CUDA graph): only a
 * graph-timed peer pairs. Does nothing where path is "" (the peer did not
 * run: the table's notes say why). Returns 1 when paired. */
int loom_bench_row_pair(loom_bench_row_t *r, const char *path, const char *variant, const loom_bench_shape_t *shape,
                        int host_excluded);

/* Marks r as an AUTO plan's row: auto_path = path (what the plan resolved
 * to, from its public plan-info call) and ":path" appended to r->impl.
 * The suite puts the time in r->auto_us (or, for a collective, comm_us). */
void loom_bench_row_auto(loom_bench_row_t *r, const char *path);

/* Names of the paths a plan can take, for loom_bench_row_auto. */
const char *loom_bench_tp_path(loom_tp_transfer_t t);       /* "sequential", "copy-engine", "sm-copy", "sm-atomic", "bulk-reduce" */
const char *loom_bench_coll_path(loom_coll_algo_t a);       /* "one-shot", "two-shot", "ll", "push" */
const char *loom_bench_emb_path(loom_embedding_path_t p);   /* "zero-copy", "gin", "staged" */

/* An own-option parser's "--peer none" (the benchmarks whose outside
 * baseline runs by default): 0 if argv[*i] is not "--peer"; 1 with *peer = 0
 * and *i past the value; -1 with a message for any other value. */
int loom_bench_opt_peer(int argc, char **argv, int *i, int *peer);

/* "1 MiB", "256 MiB", "1 GiB", "1000 B". */
void loom_bench_format_bytes(int64_t bytes, char *buf, size_t cap);

/* Short dtype name: "bf16", "fp16", "fp32". */
const char *loom_bench_dtype_name(loom_dtype_t t);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_TOOLS_BENCH_H */
