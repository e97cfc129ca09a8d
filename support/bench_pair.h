/*
 * bench_pair.h - pairing a loom-bench row with a row of an outside
 * baseline's JSON (the scripts in bench/peers) by the row's complete shape.
 *
 * Why: a ratio of two times is a statement only when both ran the same
 * thing. loom-bench once paired its TP = 8 rows with the peer's TP = 2 rows
 * because its lookup keyed on (op, model, m) alone, and n differed 4x.
 * Here a pairing is all or nothing: every shape field loom's row names must
 * be in the peer's row with the same value, and every shape field the
 * peer's row names (its "shape_keys") must be in loom's; otherwise there is
 * no peer value and `why` says which field differed ("peer ran n=14336,
 * row has n=3584").
 *
 * The peer's JSON (peer_timing.py writes it): an object whose "rows" array
 * holds flat objects, one per (shape, variant):
 *   {"op": "ag_gemm", "model": "llama3-70b", "m": 64, "n": 3584, "k": 8192,
 *    "world": 2, "dtype": "bf16", "variant": "async_tp", "us": 812.5,
 *    "timing": "graph", "shape_keys": "op,model,m,n,k,world,dtype"}
 * "us" is the time of one call (null: the variant gave none there);
 * "timing" is "graph" (per call of calls captured in a CUDA graph: no
 * Python host time) or "eager (includes Python host time)".
 *
 * Values. A shape value of loom's that reads completely as a number
 * ("3584", "1.05") compares with the peer's JSON number by value (3584
 * equals 3584.0; the string "3584" is no number and does not match);
 * any other value compares as a string, exactly ("bf16").
 *
 * Host time. A row whose time excludes host issue time (loom's per-call
 * times in a CUDA graph) pairs only with a "graph" peer time; a row timed
 * call by call pairs with either (the pairing reports which).
 *
 * Plain C, no CUDA: linked into loom-bench and the host tests.
 */
#ifndef LOOM_SUPPORT_BENCH_PAIR_H
#define LOOM_SUPPORT_BENCH_PAIR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_BENCH_SHAPE_MAX 16
#define LOOM_BENCH_KEY_MAX 32
#define LOOM_BENCH_VAL_MAX 64

/* The complete shape of one loom-bench row: (key, value) pairs as text. */
typedef struct loom_bench_shape {
  int n;
  int overflow; /* a field did not fit: such a shape pairs with nothing */
  char key[LOOM_BENCH_SHAPE_MAX][LOOM_BENCH_KEY_MAX];
  char val[LOOM_BENCH_SHAPE_MAX][LOOM_BENCH_VAL_MAX];
} loom_bench_shape_t;

void loom_bench_shape_init(loom_bench_shape_t *s);
/* Sets field `key` (replacing an earlier value of the same key). */
void loom_bench_shape_str(loom_bench_shape_t *s, const char *key, const char *val);
void loom_bench_shape_int(loom_bench_shape_t *s, const char *key, int64_t v);
/* "%.17g": reads back as the same double (as the peer's JSON number does). */
void loom_bench_shape_num(loom_bench_shape_t *s, const char *key, double v);

/* The outcome of one pairing. */
typedef struct loom_bench_pair {
  int paired;     /* 1: us is the peer's time of this exact shape */
  double us;      /* NAN unless paired */
  int graph;      /* paired: 1 when the peer's time was taken in a CUDA graph */
  char timing[64];/* paired: the peer row's "timing" */
  char why[192];  /* not paired: why ("peer ran n=14336, row has n=3584") */
} loom_bench_pair_t;

/* Pairs `shape` with the rows of variant `variant` of the peer JSON text
 * `json` (NUL-terminated). host_excluded: the row's own time excludes host
 * issue time (then only a "graph" peer time pairs). Where several rows
 * match, the last one counts. Returns out->paired. */
int loom_bench_pair_text(const char *json, const char *variant, const loom_bench_shape_t *shape, int host_excluded,
                         loom_bench_pair_t *out);

/* The same, reading the peer's JSON file at `path` (not paired, with the
 * reason, where it cannot be read). */
int loom_bench_pair_file(const char *path, const char *variant, const loom_bench_shape_t *shape, int host_excluded,
                         loom_bench_pair_t *out);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_SUPPORT_BENCH_PAIR_H */
