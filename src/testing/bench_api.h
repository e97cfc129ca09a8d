/*
 * bench_api.h - what a benchmark needs from loom beyond include/loom.h, and
 * nothing else: the one internal header tools/bench includes.
 *
 * Part of the test-support library (libloom_testsupport.a, src/testing);
 * never in libloom.so. Every function here is a thin call into loom's
 * internals, so that loom-bench measures exactly the code the library runs
 * (the sequential baselines are the library's own sequential paths, the
 * kernels are the library's kernels), without tools reading loom's internal
 * structs or headers. Each entry says why a benchmark needs it; where the
 * public API gives the same information (plan info: loom_tp_plan_info,
 * loom_coll_plan_info, loom_optim_plan_info, loom_embedding_a2a_plan_info;
 * shard sizes: the rules include/loom.h states) tools use that instead.
 *
 *   errors       loom_bench_fail, loom_bench_cuda_fail, loom_bench_nccl_fail
 *                and LOOM_BENCH_TRY / _CUDA / _NCCL: a harness failure is
 *                reported through the same loom_last_error() as the
 *                library's own
 *   baselines    loom_bench_base_*: cuBLASLt GEMM (with its candidate
 *                tuning) and NCCL collectives, exactly as loom's SEQUENTIAL
 *                paths call them (src/baseline)
 *   GEMM engine  loom_bench_gemm_config_text, loom_bench_gemm_sm80 /
 *                _sm90 / _hooks_idle, loom_bench_tp_gemm_config: one kernel
 *                or one configuration of the engine, to split a fused op's
 *                time into its GEMM and the rest
 *   optimizers   loom_bench_optim_update_plan: the update without the
 *                gradients' communication (the "NCCL, then update" baseline)
 *   embedding    loom_bench_plan_embedding_a2a (forced path and task
 *                order), loom_bench_emb_*: the plan's work cut, kernel registers,
 *                the sorted backward on fp32 tables, its scratch size
 *   pointwise    loom_bench_pointwise_*: a loom_epilogue_t as one separate
 *                elementwise kernel (the unfused baseline of GEMM+AllReduce)
 *   programs     loom_bench_rtc_cache_clear: the generated kernels' memory
 *                cache emptied, to time a compile from the disk cache or NVRTC
 * and the shape set loom's GEMM is measured on (src/gemm/gemm_shapes.h: its
 * tables and types, included below; its functions through
 * loom_bench_gemm_weights / loom_bench_gemm_shape_variant).
 */
#ifndef LOOM_TESTING_BENCH_API_H
#define LOOM_TESTING_BENCH_API_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "loom.h"
#include "core/check_macros.h"
#include "gemm/gemm_shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors -------------------------------------------------------------- */

/* Sets this thread's loom_last_error() message (printf format) and returns
 * code: a harness step that fails (a cudaMalloc of its inputs, a check's
 * copy) is reported by the suite's one path, loom_last_error(), like a
 * library call that fails. */
loom_result_t loom_bench_fail(loom_result_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A failed CUDA / NCCL call of the harness, in the library's words:
 * LOOM_ERR_CUDA (LOOM_ERR_OUT_OF_MEMORY for cudaErrorMemoryAllocation) or
 * LOOM_ERR_NCCL, the call's text, the error's name, file and line. */
loom_result_t loom_bench_cuda_fail(int err, const char *what, const char *file, int line);
loom_result_t loom_bench_nccl_fail(int err, const char *what, const char *file, int line);

#define LOOM_BENCH_TRY(call) LOOM_CHECK_RESULT(call)
#define LOOM_BENCH_CUDA(call) LOOM_CHECK_CUDA_WITH(loom_bench_cuda_fail, call)
#define LOOM_BENCH_NCCL(call) LOOM_CHECK_NCCL_WITH(loom_bench_nccl_fail, call)

/* ---- the sequential baselines (src/baseline) ----------------------------- */
/* A fused op is measured against NCCL + cuBLASLt as loom's own SEQUENTIAL
 * path runs them: the same cuBLASLt descriptors, algorithm cache and
 * workspace, the same NCCL calls. */

/* C = A x B (+ bias) through cuBLASLt on `stream` (current device): the
 * cached algorithm for the shape (the heuristic's first, or the one
 * loom_bench_base_gemm_tune chose). */
loom_result_t loom_bench_base_gemm(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                   cudaStream_t stream);

/* Times up to `candidates` of cuBLASLt's heuristic algorithms on these
 * buffers (the one tuning rule, synchronizing `stream`), and makes the
 * winner the one loom_bench_base_gemm runs for the shape: the baseline a
 * benchmark quotes is cuBLASLt at its best, not its first guess. *best_ms
 * (may be NULL): its time. */
loom_result_t loom_bench_base_gemm_tune(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                        const void *bias, int candidates, cudaStream_t stream, float *best_ms);

/* Frees the process's cuBLASLt handles and per-shape cache (a suite that
 * runs many shapes calls it between them). */
void loom_bench_base_gemm_release(void);

/* NCCL collectives on the caller's comm, counts in elements of dtype,
 * reductions sums; AlltoAll is ncclSend/ncclRecv in a group (block p of
 * count_per_peer elements to rank p). */
loom_result_t loom_bench_base_allgather(ncclComm_t nccl, const void *send, void *recv, size_t count_per_rank,
                                        loom_dtype_t dtype, cudaStream_t stream);
loom_result_t loom_bench_base_reducescatter(ncclComm_t nccl, const void *send, void *recv, size_t count_per_rank,
                                            loom_dtype_t dtype, cudaStream_t stream);
loom_result_t loom_bench_base_allreduce(ncclComm_t nccl, const void *send, void *recv, size_t count,
                                        loom_dtype_t dtype, cudaStream_t stream);
loom_result_t loom_bench_base_alltoall(ncclComm_t nccl, const void *send, void *recv, size_t count_per_peer,
                                       loom_dtype_t dtype, cudaStream_t stream);

/* ---- mixture of experts -------------------------------------------------- */

/* The rank that owns expert e of E at W ranks (loom.h's split). */
int loom_bench_moe_expert_rank(int experts, int world, int e);

/* The choice a loom_moe_mlp call of `tokens` gets: "path=<1|2> up=<bm>
 * down=<bm>x<bn>" (tiles 0: the model's). */
loom_result_t loom_bench_moe_mlp_choice(loom_plan_t plan, int64_t tokens, char *out, size_t size);

/* loom_moe_mlp in the form `path` (loom_moe_mlp_path_t; AUTO as the plan
 * resolves it) with the model's tiles, whatever the plan's desc->mlp_path. */
loom_result_t loom_bench_moe_mlp_form(loom_plan_t plan, const void *x, const int32_t *ids, const float *weights,
                                      int64_t tokens, const void *gate_up, const void *down, void *out, int path,
                                      cudaStream_t stream);

/* loom_gemm_grouped's kernel with the tile bm x bn forced (bm 64 or 128, bn
 * 128 or 256; 0, 0: the model's), the arguments as loom_gemm_grouped
 * takes them (checked the same way); glu 1: the SwiGLU epilogue
 * loom_moe_mlp's gate/up GEMM runs (C [rows, n / 2], bn 256); *bm_out,
 * *bn_out (may be NULL): the tile that ran. */
loom_result_t loom_bench_gemm_grouped_tile(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, void *c,
                                           const int64_t *offsets, int bm, int bn, int glu, int *bm_out, int *bn_out,
                                           cudaStream_t stream);

/* ---- the GEMM engine ----------------------------------------------------- */

/* The shape set (gemm/gemm_shapes.h): every distinct weight of one group
 * (0 fitting, 1 held out, -1 both halves, 2 the new families) into
 * out[max] (NULL: count only), and how many there are; the description of
 * the GEMM of m rows on weight [k, n] as the set measures it (its dtype and
 * layout variant by shape). */
int loom_bench_gemm_weights(int half, loom_gemm_weight_t *out, int max);
/* The layers of family f (loom_gemm_families[f]) at tensor-parallel size
 * tp, their per-rank weights (n and k multiples of 8 only), up to max into
 * out; how many there are. */
int loom_bench_gemm_family_layers(int f, int tp, loom_gemm_weight_t *out, int max);
loom_gemm_desc_t loom_bench_gemm_shape_variant(int64_t m, int64_t n, int64_t k);

/* One kernel configuration of the GEMM engine (tile, stages, band, grid,
 * split, cluster), opaque here: what a fused op's GEMM launches with, to be
 * launched again on its own. */
typedef struct loom_bench_gemm_config {
  int64_t opaque[8];
} loom_bench_gemm_config_t;

/* The configuration loom_gemm takes for d on the current device, as the
 * table's note prints it: "cuBLASLt path", or "[sm80 ]tuned <cfg>" /
 * "[sm80 ]model <cfg>" (a tuning-cache entry, else the model's choice). A
 * row says which kernel it timed. */
void loom_bench_gemm_config_text(const loom_gemm_desc_t *d, char *out, size_t size);

/* The portable sm80 kernel (cp.async + mma.sync) on d, with its own
 * heuristic (cfg NULL) or cfg: timed beside the sm90 kernel on Hopper. */
loom_result_t loom_bench_gemm_sm80(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                   const loom_bench_gemm_config_t *cfg, cudaStream_t stream);

/* The sm90 kernel (TMA + wgmma) without hooks, in configuration cfg (NULL:
 * its heuristic): a fused op's GEMM configuration as a plain GEMM
 * (TMA-store epilogue), so that the fused op's time can be split. */
loom_result_t loom_bench_gemm_sm90(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                   const loom_bench_gemm_config_t *cfg, cudaStream_t stream);

/* The hooked kernel instantiation (what the fused ops launch) with every
 * hook idle (no waits, no signals, stores from registers), in
 * configuration cfg: what the hooks' machinery costs by itself. */
loom_result_t loom_bench_gemm_hooks_idle(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                         const void *bias, const loom_bench_gemm_config_t *cfg, cudaStream_t stream);

/* A configuration of tile bm x bn and every other field the kernel's default
 * (for a plan without a fused GEMM). */
loom_bench_gemm_config_t loom_bench_gemm_config_tile(int bm, int bn);

/* The configuration the fused GEMM of a tensor-parallel plan (loom_plan_ag_gemm,
 * loom_plan_gemm_rs, loom_plan_gemm_ar) launches with: tile, grid, band,
 * clusters (plan info gives tile and grid, not the whole launch). *cluster
 * (may be NULL): its blocks per cluster (0 or 1: none; 2: pairs).
 * LOOM_ERR_INVALID_ARGUMENT for another plan or one without a fused GEMM
 * (loom_tp_plan_info's gemm_bn 0). */
loom_result_t loom_bench_tp_gemm_config(loom_plan_t plan, loom_bench_gemm_config_t *cfg, int *cluster);

/* ---- the distributed optimizers ------------------------------------------ */

/* A plan of Adam (lamb 0) or LAMB (lamb 1) whose step is the update alone:
 * every tensor AR-Opt, each rank's own gradients (any device memory, not
 * symmetric), no communication and no signals. The baselines "NCCL
 * all-reduce, then update" and "reduce-scatter, update, all-gather" time
 * loom's own update kernel with it, so that the fused step is compared with
 * the same arithmetic. desc.world_size is the comm's size. Collective as
 * any plan (it holds a slice of the comm's workspace: every rank makes the
 * same plans in the same order), but the tensors are each rank's own and
 * are not compared. Steps and destroy as any optimizer plan. */
loom_result_t loom_bench_optim_update_plan(loom_comm_t comm, const loom_optim_desc_t *desc, int lamb,
                                           loom_plan_t *out);

/* ---- loom programs (code generation) ------------------------------------- */

/* Empties the process's memory cache of generated kernels: the next
 * loom_prog_compile takes its kernels from the disk cache (LOOM_CACHE_DIR)
 * or NVRTC, so that `loom-bench lang` can time each. Plans made before
 * keep their loaded kernels. Not while another thread compiles. */
void loom_bench_rtc_cache_clear(void);

/* ---- embedding-bag + All-to-All ------------------------------------------ */

/* loom_plan_embedding_a2a with the task order and the path forced (the
 * public description has neither: they exist for measurements): the
 * local-first rows and the staged path where AUTO takes zero-copy. */
loom_result_t loom_bench_plan_embedding_a2a(loom_comm_t comm, const loom_embedding_desc_t *desc, int local_first,
                                            loom_embedding_path_t path, loom_plan_t *out);

/* Bags per task of a plan's forward kernel (its work cut, 1..32), for the
 * table's configuration column. */
loom_result_t loom_bench_emb_part(loom_plan_t plan, int *part);

/* Registers per thread and local (spill) bytes of the forward kernel for
 * these dtypes and dim: whether a configuration spills. */
loom_result_t loom_bench_emb_kernel_regs(loom_dtype_t table_type, loom_dtype_t out_type, int dim, int *regs,
                                         int *spill_bytes);

/* Makes a plan with fp32 tables take the sorted backward (fp32 sums per
 * row, one rounding: deterministic) instead of fp32 atomics, to time both
 * on the same tables. Waits for the plan's last call; every rank must make
 * the same change before its next call. */
loom_result_t loom_bench_emb_backward_sorted(loom_plan_t plan);

/* Device scratch bytes of one sorted backward call with n indices of dim D
 * (printed beside its time). */
size_t loom_bench_emb_sorted_scratch_bytes(int64_t n, int dim);

/* ---- the pointwise epilogue as a separate kernel -------------------------- */

/* A checked loom_epilogue_t as loom's kernels receive it, opaque here. */
typedef struct loom_bench_pointwise {
  int64_t opaque[12];
} loom_bench_pointwise_t;

/* Checks epi (each field by name and value, as loom's ops do) for an output
 * of out_type with rows of `cols` elements, and fills *pw. */
loom_result_t loom_bench_pointwise_make(const loom_epilogue_t *epi, loom_dtype_t out_type, int64_t cols,
                                        loom_bench_pointwise_t *pw);

/* y [count] = epilogue(x [count]) (count a multiple of 8; y may be x) as
 * one elementwise kernel, 8 elements per thread, fp32 arithmetic, with
 * loom's own device functions (the same dropout mask as loom's fused
 * epilogues): the separate bias-dropout-add kernel of an unfused baseline,
 * whose output is comparable element by element with loom's. */
loom_result_t loom_bench_pointwise_run(const loom_bench_pointwise_t *pw, const void *x, void *y, int64_t count,
                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_TESTING_BENCH_API_H */
