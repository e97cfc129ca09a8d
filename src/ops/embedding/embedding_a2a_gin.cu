/*
 * embedding_a2a_gin.cu - the fused embedding-bag + All-to-All across nodes:
 * slices for ranks outside the NVLink domain go out as NCCL GIN puts. The
 * bookkeeping (staging places, put list, signal targets, which rank sets
 * each incoming flag) is pure and host-tested (embedding_schedule.h, "GIN");
 * the kernel compiles for every build but has never run (no multi-node
 * machine), so a plan refuses an explicit LOOM_EMB_PATH_GIN and the auto path
 * takes the staged path instead (embedding_a2a_plan.c).
 *
 * Kernel: the forward's task loop (embedding_a2a.cuh). A slice for an
 * NVLink rank q is pooled straight into q's output and flagged as in the
 * zero-copy kernel; a slice for a network rank is pooled into this rank's
 * staging window ([q][t][Bl][D]) and the warp that completes it puts its
 * rows into q's output window, the last put carrying SignalAdd(+1) on GIN
 * signal flag_index at q. Incoming: flags from NVLink sources are waited for
 * as in the zero-copy kernel, GIN signals from network sources against the
 * signal's shadow (device memory, raised by one per call, so graph replays
 * stay right); every wait is bounded. W <= LOOM_EMB_MAX_LSA (the peers'
 * output addresses travel as kernel arguments).
 */
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/error.h"
#include "core/log.h"
#include "ops/embedding/embedding_a2a.cuh"

#if defined(__has_include)
#if __has_include(<nccl_device.h>) && NCCL_VERSION_CODE >= 22809
#include <nccl_device.h>
#define LOOM_EMB_HAVE_GIN 1
#endif
#endif
#ifndef LOOM_EMB_HAVE_GIN
#define LOOM_EMB_HAVE_GIN 0
#endif

#if LOOM_EMB_HAVE_GIN
typedef struct loom_emb_gin_args {
  ncclWindow_t out_win, stage_win;
  size_t out_win_off;            /* offset of `out` inside out_win */
  char *stage;                   /* local staging base */
} loom_emb_gin_args_t;

/* Polls GIN signal i until it reaches the shadow + 1 (and raises the shadow);
 * bounded by the comm's timeout. 0 on expiry or abort. */
static __device__ int emb_gin_wait(const loom_emb_kargs_t &a, ncclGin &gin, uint32_t i, uint32_t epoch) {
  uint64_t *shadow = gin.getSignalShadowPtr((ncclGinSignal_t)i);
  const uint64_t target = loom__emb_gin_signal_target(*shadow);
  *shadow = target;
  const uint64_t t0 = loom__globaltimer_ns();
  for (uint32_t polls = 1;; ++polls) {
    if (gin.readSignal((ncclGinSignal_t)i) >= target) return 1;
    if (loom__poll_expired(&a.dc, polls, t0, -1, i, epoch, 0, LOOM_SITE_EMB_SLICE_READY)) return 0;
  }
}

template <typename TT, typename OT, int NV>
__global__ void __launch_bounds__(LOOM_EMB_THREADS)
    loom__emb_fwd_gin_kernel(const __grid_constant__ loom_emb_kargs_t a, const __grid_constant__ ncclDevComm dcomm,
                             const __grid_constant__ loom_emb_gin_args_t g) {
  __shared__ int64_t s_task[LOOM_EMB_THREADS / 32];
  __shared__ int s_abort;
  __shared__ unsigned char s_ready[LOOM_EMB_MAX_LSA];
  const loom_emb_sched_t &s = a.s;
  const int lane = threadIdx.x & 31;
  const int D = a.dim;
  const int64_t ntasks = loom__emb_num_tasks(&s);
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  const uint32_t epoch = loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off));
  ncclGin gin(dcomm, 0);
  const ncclTeam world = ncclTeamWorld(dcomm);
  if (threadIdx.x == 0) s_abort = 0;
  /* ready handshake with the NVLink ranks only. KNOWN GAP (why plans refuse
   * this path today): a network rank's output gets no ready handshake, so a
   * put of the next call can land before that rank's caller has read this
   * call's output (src/lang's protocol checker: lang_protocol_embedding_gin
   * shows the run; ready to and from every rank removes it, and the puts
   * must also complete locally before the staging window is rewritten) */
  for (int p = threadIdx.x; p < LOOM_EMB_MAX_LSA; p += blockDim.x)
    s_ready[p] = p == s.rank || p >= s.world || a.dc.peer_ws[p] == nullptr;
  if (blockIdx.x == 0)
    for (int p = threadIdx.x; p < s.world; p += blockDim.x)
      if (a.dc.peer_ws[p]) loom__signal_store_release(loom_signal_addr(&a.dc, p, a.ready_off, (uint32_t)s.rank), epoch);
  __syncthreads();
  emb_fetch_t f = emb_fetch_init(misc, (const uint32_t *)(a.dc.ws + a.ready_off), emb_sig_index(a, a.ready_off),
                                 LOOM_SITE_EMB_OUT_READY, epoch);
  for (;;) {
    const int64_t k = emb_next_task(a, f, ntasks, s_task, s_ready, &s_abort);
    if (k < 0 || k >= ntasks) break;
    const loom_emb_task_t tk = loom__emb_task_decode(&s, k);
    const int t = tk.table;
    const bool lsa = a.peer[tk.dest] != nullptr;
    const int64_t row0 = (int64_t)tk.dest * s.local_batch;
    if (lsa)
      emb_pool_bags<TT, OT, NV, LOOM_EMB_UNROLL, EMB_ROWS_FLAT>(
          a, tk, lane, reinterpret_cast<OT *>(a.peer[tk.dest]) + (int64_t)(s.table_base + t) * D, row0,
          (int64_t)s.t_total * D);
    else
      emb_pool_bags<TT, OT, NV, LOOM_EMB_UNROLL, EMB_ROWS_FLAT>(
          a, tk, lane, reinterpret_cast<OT *>(g.stage) + loom__emb_gin_stage_offset(&s, tk.dest, t, row0, D), row0, D);
    __syncwarp();
    if (lane == 0) {
      __threadfence_system();
      uint32_t *ctr = (uint32_t *)(a.dc.ws + a.counters_off) + loom__emb_counter_index(&s, t, tk.dest, tk.slice);
      if (loom__last_arrival(ctr, loom__emb_counter_target(&s))) {
        const uint32_t fi = loom__emb_flag_index(&s, s.table_base, t, tk.slice);
        if (lsa) {
          loom__signal_store_release(loom_signal_addr(&a.dc, tk.dest, a.flags_off, fi), epoch);
        } else {
          const int rows = loom__emb_slice_rows(&s, tk.slice);
          for (int i = 0; i < rows; ++i) {
            const loom_emb_gin_put_t pt = loom__emb_gin_put(&s, tk.dest, t, tk.slice, i, D, sizeof(OT), g.out_win_off);
            if (i + 1 < rows) gin.put(world, tk.dest, g.out_win, pt.dst, g.stage_win, pt.src, pt.bytes);
            else gin.put(world, tk.dest, g.out_win, pt.dst, g.stage_win, pt.src, pt.bytes, ncclGin_SignalAdd{(ncclGinSignal_t)fi, 1});
          }
        }
      }
    }
  }
  if (!__syncthreads_and(!s_abort)) return;
  /* incoming: each flag is set by one source rank (loom__emb_flag_source):
   * an NVLink source stores it, a network source adds to its GIN signal */
  const uint32_t nf = loom__emb_num_flags(&s);
  const uint32_t *flags = (const uint32_t *)(a.dc.ws + a.flags_off);
  int ok = 1;
  for (uint32_t i = blockIdx.x + gridDim.x * threadIdx.x; ok && i < nf; i += gridDim.x * blockDim.x) {
    const int src = loom__emb_flag_source(a.table_base, s.world, s.nsl, i);
    if (a.dc.peer_ws[src]) ok = loom__signal_wait(&a.dc, flags + i, epoch, src, i, LOOM_SITE_EMB_SLICE_READY);
    else ok = emb_gin_wait(a, gin, i, epoch);
  }
  if (!__syncthreads_and(ok)) return;
  if (threadIdx.x == 0) emb_block_done(a, epoch, 0);
}

/* Not reached from the host (the plan refuses the GIN path until it has run
 * on a multi-node machine); referenced here so the kernel is instantiated and
 * compiled in every build. */
extern "C" loom_result_t loom__emb_launch_forward_gin(const loom_emb_kargs_t *a, const void *devcomm,
                                                      ncclWindow_t out_win, size_t out_win_off, ncclWindow_t stage_win,
                                                      void *stage, int grid, cudaStream_t stream) {
  loom_emb_gin_args_t g;
  g.out_win = out_win;
  g.stage_win = stage_win;
  g.out_win_off = out_win_off;
  g.stage = (char *)stage;
  loom__emb_fwd_gin_kernel<float, float, 2><<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a, *(const ncclDevComm *)devcomm, g);
  LOOM_CUDA_LAUNCHED("loom__emb_fwd_gin_kernel");
  return LOOM_SUCCESS;
}
#endif

extern "C" loom_result_t loom__emb_gin_probe(ncclComm_t nccl, int signals, int *supported, void **devcomm) {
  *supported = 0;
  *devcomm = NULL;
#if LOOM_EMB_HAVE_GIN
  ncclDevComm *dc = (ncclDevComm *)calloc(1, sizeof(ncclDevComm));
  if (!dc) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of a GIN device comm failed");
  ncclDevCommRequirements_t reqs;
  memset(&reqs, 0, sizeof reqs);
  reqs.lsaMultimem = false; /* never NVLink multicast */
  reqs.ginContextCount = 1;
  reqs.ginSignalCount = signals;
  ncclResult_t n = ncclDevCommCreate(nccl, &reqs, dc);
  if (n == ncclSuccess && dc->ginContextCount > 0) {
    *supported = 1;
    *devcomm = dc;
    return LOOM_SUCCESS;
  }
  if (n == ncclSuccess) {
    ncclResult_t d = ncclDevCommDestroy(nccl, dc);
    if (d != ncclSuccess) {
      free(dc);
      return loom__nccl_fail((int)d, "ncclDevCommDestroy (GIN probe)", __FILE__, __LINE__);
    }
  }
  free(dc);
#else
  (void)nccl;
  (void)signals;
#endif
  return LOOM_SUCCESS;
}

extern "C" void loom__emb_gin_release(ncclComm_t nccl, void *devcomm) {
#if LOOM_EMB_HAVE_GIN
  if (devcomm) {
    ncclResult_t d = ncclDevCommDestroy(nccl, (ncclDevComm *)devcomm);
    if (d != ncclSuccess) LOOM_WARN("loom_plan_destroy (embedding): ncclDevCommDestroy failed: %s", ncclGetErrorString(d));
    free(devcomm);
  }
#else
  (void)nccl;
  (void)devcomm;
#endif
}
