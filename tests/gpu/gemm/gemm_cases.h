/*
 * gemm_cases.h - shared pieces of the GEMM GPU tests (gemm_cases.c).
 */
#ifndef LOOM_TEST_GEMM_CASES_H
#define LOOM_TEST_GEMM_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "tests/common/test.h"
#include "loom.h"
#include "core/signal.h"
#include "gemm/gemm.h"

/* Host and device buffers of one GEMM case. */
typedef struct gcase {
  loom_gemm_desc_t d;
  void *ha, *hb, *hbias, *hc, *hc2;
  void *da, *db, *dbias, *dc, *dc2;
  size_t a_bytes, b_bytes, c_bytes, bias_bytes;
} gcase_t;

/* A comm description for hooks without a real comm: host-mapped error
 * record, device abort flag, the given timeout. */
typedef struct fake_comm {
  loom_error_record_t *err_h, *err_d;
  uint32_t *abort_d;
  loom_dev_comm_t dc;
} fake_comm_t;

/* 1 if the current GPU runs loom's kernel of that path (sm80 0: the sm90
 * kernel; 1: the sm80 kernel, and LOOM_GEMM_PATH=sm80 is set for this
 * process so loom_gemm and loom__gemm_hooked take it), else marks the test
 * skipped. */
int gemm_kernel_or_skip(int sm80);
uint64_t next_seed(void);
double now_s(void);
double eps_out(loom_dtype_t t);
double eps_acc(int64_t k); /* fp32 accumulation error over k, relative to |C| */
void gcase_free(gcase_t *g);
int gcase_init(gcase_t *g, const loom_gemm_desc_t *d);
size_t count_unwritten(loom_dtype_t t, const void *c, size_t n);
size_t check_ref(const gcase_t *g, const void *init, double extra_eps, double *rel);
size_t check_same(const gcase_t *g, double *rel);
const char *dt_name(loom_dtype_t t);
int fake_comm_init(fake_comm_t *f, double timeout_s);
void fake_comm_free(fake_comm_t *f);
/* A kernel launcher (loom__gemm_sm90, loom__gemm_sm80). */
typedef loom_result_t (*gemm_launch_fn)(const loom_gemm_desc_t *, const void *, const void *, void *, const void *,
                                        const loom_gemm_config_t *, const loom_gemm_hooks_t *, cudaStream_t);

/* One full case: fresh inputs, C poisoned, loom (cfg NULL: loom_gemm on the
 * selected path; else launch with cfg), then every element checked written,
 * sampled rows/columns against fp64, every element against cuBLASLt
 * (vs_cublas, where cuBLASLt has the dtype pair); one line printed; a
 * mismatch fails the test. Returns 1 if everything matched. */
int gemm_run_case(const loom_gemm_desc_t *d, gemm_launch_fn launch, const loom_gemm_config_t *cfg, int vs_cublas);

/* Launches cfg twice on g's inputs (C and C2 poisoned first) on st: checks
 * (and returns 1 if) the outputs are bit-identical, fully written and within
 * the fp64 bounds; prints one line with `label`. */
int gemm_case_twice_identical(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg, cudaStream_t st,
                              const char *label);
/* The same with cfg into C and cfg2 into C2: two configurations that must
 * give the same bits (e.g. split-K reduced in the kernel and apart). */
int gemm_case_configs_identical(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg,
                                const loom_gemm_config_t *cfg2, cudaStream_t st, const char *label);

/* Captures one launch of cfg in a graph and replays it `replays` times (C
 * poisoned before each): checks (and returns 1 if) every replay gives the
 * bits of a direct launch. */
int gemm_case_graph_replays(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg, cudaStream_t st,
                            int replays);

/* Captures one launch (cfg NULL: loom_gemm; else launch with cfg) of g on
 * st in a graph and replays it `replays` times, C poisoned before each:
 * checks (and returns 1 if) every element is written and the sampled rows
 * and columns match fp64 each time; prints one line with `label`. */
int gemm_capture_check(gcase_t *g, gemm_launch_fn launch, const loom_gemm_config_t *cfg, cudaStream_t st, int replays,
                       const char *label);

/* Hooked GEMMs that only wait, with split-K and stream-K (sm90): random
 * release orders, fp64, determinism, an activation against whole tiles, an
 * expired wait. */
void gemm_hooks_split_wait_only_case(void);

/* loom_gemm (whichever path is selected) captured in a graph, replayed
 * twice with C poisoned before each, checked against fp64 each time. */
void gemm_graph_capture_case(void);

void gemm_hooks_host_schedule_waits_and_tile_signals_case(void);
void gemm_hooks_row_routed_store_and_reduce_case(void);
void gemm_hooks_prologue_timeout_case(void);
/* sm90: a waiting hooked GEMM in 2x1 clusters, released in a random order,
 * then with one row block never released (bounded, no hang). */
void gemm_hooks_clusters_wait_and_time_out_case(void);

#endif /* LOOM_TEST_GEMM_CASES_H */
