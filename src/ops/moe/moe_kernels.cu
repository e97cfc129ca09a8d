/*
 * moe_kernels.cu - the kernels of a mixture-of-experts dispatch and combine
 * (the steps and their signals: moe.h; the layout: moe_schedule.h).
 *
 * Shapes: x [tokens, H] and the receive buffers [R, H] in the plan's dtype
 * (es bytes per element, H es a multiple of 16: rows move as 16-byte
 * vectors), ids [tokens, k] int32, weights [tokens, k] fp32, the combine
 * buffers [T_max k, H], out [tokens, H].
 * One launch each. Dispatch: one kernel whose steps (count, publish,
 * layout, slots, send, wait) are phases between grid barriers; combine: one
 * kernel (send, then every block waits for every owner and reduces). Both
 * are cooperative launches (every block resident at once: blocks wait for
 * each other), sized to the work and to what the GPU holds (until 9f7b797
 * they were six and two launches; docs/perf/moe.md, "One launch each").
 * The routing is small next to the rows, so the phases that only read it
 * run on one block (publish, layout) or one warp per chunk. Any sm_80+.
 */
#include <cuda_runtime.h>

#include "core/error.h"
#include "core/signal.cuh"
#include "core/trace.cuh"
#include "core/trace.h"
#include "core/vec8.cuh"
#include "ops/moe/moe.h"

/* The call's epoch (moe.h: every kernel of a call reads the same one). */
static __device__ __forceinline__ uint32_t moe_epoch(const loom_moe_kargs_t &a) {
  return loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off));
}

static __device__ __forceinline__ int moe_aborted(const loom_moe_kargs_t &a) {
  return *(volatile uint32_t *)a.dc.abort_flag != 0u;
}

/* Phase stamp i of kernel row `row` (0 dispatch, 1 combine) by thread 0 of
 * the calling block, at LOOM_DEBUG=TRACE only (what each index means:
 * moe_plan.c's table of names). */
static __device__ __forceinline__ void moe_stamp(const loom_moe_kargs_t &a, int row, int i) {
  loom__trace_stamp(a.stamps, row * LOOM_TRACE_STAMPS + i);
}

/* Records a bad routing entry (the first one of the call wins). */
static __device__ void moe_record_bad(loom_moe_err_t *err, uint32_t kind, int64_t entry, int32_t value) {
  if (!loom__record_claim(&err->claimed)) return;
  err->kind = kind, err->entry = entry, err->value = value;
  loom__record_publish(&err->valid);
}

/* 0 if entry i = t k + j is a good row, else the kind of fault (moe.h). */
static __device__ __forceinline__ uint32_t moe_bad_entry(const loom_moe_kargs_t &a, int64_t i) {
  const int32_t e = a.ids[i];
  if (e < 0 || e >= a.experts) return 1u;
  const int64_t t0 = i - i % a.topk;
  for (int64_t q = t0; q < i; ++q)
    if (a.ids[q] == e) return 2u;
  return 0u;
}

/* Thread 0 waits for word s of the array at `off` (this rank's) to reach e
 * for every rank s; 1 for every thread of the block when all did. */
static __device__ int moe_wait_all(const loom_moe_kargs_t &a, size_t off, uint32_t e, uint32_t site) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    int good = 1;
    for (int s = 0; s < a.world && good; ++s)
      good = loom__signal_wait(&a.dc, (const uint32_t *)(a.dc.ws + off) + s, e, s, (uint32_t)s, site);
    ok = good;
  }
  __syncthreads();
  return ok;
}

/* Copies one row of `bytes` (a multiple of 16, both ends 16-byte aligned)
 * with the lanes of a warp, D 16-byte loads per lane in flight (4 where
 * the grid fills the GPU; 8 for the arrival form's send on a few SMs). */
template <int D = 4>
static __device__ __forceinline__ void moe_copy_row(char *dst, const char *src, int64_t bytes, int lane) {
  const uint4 *s = (const uint4 *)src;
  uint4 *d = (uint4 *)dst;
  const int64_t n = bytes / 16;
  int64_t q = lane;
  for (; q + 32 * (D - 1) < n; q += 32 * D) {
    uint4 v[D];
#pragma unroll
    for (int u = 0; u < D; ++u) v[u] = __ldcg(s + q + 32 * u);
#pragma unroll
    for (int u = 0; u < D; ++u) d[q + 32 * u] = v[u];
  }
  for (; q < n; q += 32) d[q] = __ldcg(s + q);
}

/* 1 count: rows per expert of each routing chunk (a block per chunk). */
static __device__ void moe_count(const loom_moe_kargs_t &a) {
  const int64_t n = a.tokens * a.topk;
  for (int c = (int)blockIdx.x; c < a.nchunks; c += (int)gridDim.x) {
    const int64_t i0 = (int64_t)c * a.chunk;
    const int64_t i1 = i0 + a.chunk < n ? i0 + a.chunk : n;
    int32_t *h = a.hist + (int64_t)c * a.experts;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
      const uint32_t bad = moe_bad_entry(a, i);
      if (bad) {
        moe_record_bad(a.err, bad, i, a.ids[i]);
        a.slot[i] = -1;
        continue;
      }
      a.slot[i] = 0; /* a good entry: the slots phase finds its row */
      atomicAdd(&h[a.ids[i]], 1);
    }
  }
}

/* A counts-table word: the rows of one (source, expert) and the epoch of
 * the call that counted them, one 64-bit store (single-copy atomic), so a
 * reader that sees this call's epoch sees this call's count: no fence and
 * no separate signal. */
static __device__ __forceinline__ unsigned long long moe_count_word(uint32_t epoch, int32_t rows) {
  return ((unsigned long long)epoch << 32) | (uint32_t)rows;
}

/* A counts word's request for arrival signals (its rows field's top bit). */
#define MOE_WANTS 0x80000000u

/* 2 publish (one block): the chunks' counts into exclusive bases (the
 * loads of 8 chunks in flight before their stores), this source's counts
 * into every rank's table, stamped with the epoch. */
static __device__ void moe_publish(const loom_moe_kargs_t &a, uint32_t e) {
  const int r = a.dc.rank;
  for (int x = (int)threadIdx.x; x < a.experts; x += (int)blockDim.x) {
    int32_t running = 0;
    for (int g0 = 0; g0 < a.nchunks; g0 += 8) {
      int32_t v[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) v[q] = g0 + q < a.nchunks ? a.hist[(int64_t)(g0 + q) * a.experts + x] : 0;
#pragma unroll
      for (int q = 0; q < 8; ++q)
        if (g0 + q < a.nchunks) {
          a.hist[(int64_t)(g0 + q) * a.experts + x] = running;
          running += v[q];
        }
    }
    /* the top bit: this rank's GEMM waits per (source, expert) (rows < 2^31) */
    const unsigned long long w = moe_count_word(e, (int32_t)((uint32_t)running | (a.prologue ? MOE_WANTS : 0u)));
    for (int p = 0; p < a.world; ++p)
      asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(a.counts[p] + (int64_t)r * a.experts + x), "l"(w)
                   : "memory");
  }
}

/* Block 0 waits for every word of this rank's counts table to carry epoch
 * e (every rank has entered this call: its previous use of its receive
 * buffer is over). 1 when all did; 0 when a wait expired (recorded: the
 * source as the peer, the expert as the signal). */
static __device__ int moe_wait_counts(const loom_moe_kargs_t &a, uint32_t e) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const unsigned long long *tab = a.counts[a.dc.rank];
  const int n = a.world * a.experts;
  for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) {
    unsigned long long w;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(w) : "l"(tab + i) : "memory");
    if (loom__epoch_reached((uint32_t)(w >> 32), e) || LOOM__WAIT_REMOVED(LOOM_SITE_MOE_COUNTS)) continue;
    const uint64_t t0 = loom__globaltimer_ns();
    for (uint32_t polls = 1;; ++polls) {
      asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(w) : "l"(tab + i) : "memory");
      if (loom__epoch_reached((uint32_t)(w >> 32), e)) break;
      if (*(volatile int *)&failed ||
          loom__poll_expired(&a.dc, polls, t0, i / a.experts, (uint32_t)(i % a.experts), e, (uint32_t)(w >> 32),
                             LOOM_SITE_MOE_COUNTS)) {
        failed = 1;
        break;
      }
    }
  }
  __syncthreads();
  return !failed;
}

/* Exclusive prefix sums of v[0 .. n) in place, v[n] = the total; one
 * block of LOOM_MOE_THREADS threads, each a contiguous range: each
 * thread's sum, a shuffle scan per warp, the warps' totals added. */
static __device__ void moe_block_scan(int64_t *v, int n) {
  __shared__ int64_t warp_total[LOOM_MOE_THREADS / 32];
  const int per = (n + (int)blockDim.x - 1) / (int)blockDim.x;
  const int lo = (int)threadIdx.x * per, hi = lo + per < n ? lo + per : n;
  const int lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x / 32);
  int64_t sum = 0;
  for (int x = lo; x < hi; ++x) sum += v[x];
  int64_t inc = sum; /* inclusive over the warp's threads */
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int64_t y = __shfl_up_sync(0xffffffffu, inc, d);
    if (lane >= d) inc += y;
  }
  if (lane == 31) warp_total[warp] = inc;
  __syncthreads();
  int64_t run = inc - sum;
  for (int q = 0; q < warp; ++q) run += warp_total[q];
  if (threadIdx.x == blockDim.x - 1) v[n] = run + sum;
  for (int x = lo; x < hi; ++x) { /* this thread's own range only: no other thread reads it */
    const int64_t c = v[x];
    v[x] = run;
    run += c;
  }
  __syncthreads();
}

/* The send order of the arrival form: experts interleaved over their
 * owners, (local index j, owner p) ascending, so every owner's first
 * experts come first; sbase[x] = this source's kept rows before expert x in
 * that order, sscan's last entry their total (one block, after the kept
 * matrix is written). */
static __device__ int moe_send_slots(const loom_moe_kargs_t &a) {
  return a.world * ((a.experts + a.world - 1) / a.world);
}
static __device__ void moe_send_bases(const loom_moe_kargs_t &a) {
  const int W = a.world, E = a.experts, r = a.dc.rank, n = moe_send_slots(a);
  __syncthreads();
  for (int q = (int)threadIdx.x; q < n; q += (int)blockDim.x) {
    const int j = q / W, p = q % W;
    a.sscan[q] = j < loom__moe_experts_on(E, W, p) ? a.kept[(int64_t)r * E + loom__moe_expert_begin(E, W, p) + j] : 0;
  }
  __syncthreads();
  moe_block_scan(a.sscan, n);
  for (int x = (int)threadIdx.x; x < E; x += (int)blockDim.x) {
    const int p = loom__moe_expert_rank(E, W, x);
    a.sbase[x] = a.sscan[(int64_t)(x - loom__moe_expert_begin(E, W, p)) * W + p];
  }
}

/* 3 layout (one block): every rank's counts; the kept matrix, this
 * source's bases, this rank's receive groups. rows(e) are scanned over all
 * experts (P), and an owner's running total is P[e] - P[begin(owner)]
 * (moe_schedule.h: loom__moe_source_bases, loom__moe_recv_offsets). 0 when
 * the wait for the counts expired. */
static __device__ int moe_layout(const loom_moe_kargs_t &a, uint32_t e) {
  if (!moe_wait_counts(a, e)) return 0;
  const int W = a.world, E = a.experts, r = a.dc.rank;
  const unsigned long long *counts = a.counts[r]; /* this rank's table: [W, E] */
  int64_t *P = a.scan;                  /* [E + 1] */
  uint32_t wants = 0;
  for (int x = (int)threadIdx.x; x < E; x += (int)blockDim.x) {
    int64_t before = 0, rows = 0, mine_before = 0;
    for (int s = 0; s < W; ++s) {
      const uint32_t word = (uint32_t)__ldcg(counts + (int64_t)s * E + x);
      wants |= word >> 31;
      const int64_t c = (int64_t)(word & ~MOE_WANTS);
      int64_t k = c;
      if (a.capacity > 0) {
        k = a.capacity - before;
        k = k < 0 ? 0 : k > c ? c : k;
      }
      a.kept[(int64_t)s * E + x] = (int32_t)k;
      if (s < r) mine_before += k;
      rows += k;
      before += c;
    }
    a.base[x] = mine_before;
    P[x] = rows;
  }
  const int arrivals = __syncthreads_or((int)wants);
  moe_block_scan(P, E);
  const int e0 = loom__moe_expert_begin(E, W, r), nl = loom__moe_experts_on(E, W, r);
  for (int x = (int)threadIdx.x; x < E; x += (int)blockDim.x) {
    const int b = loom__moe_expert_begin(E, W, loom__moe_expert_rank(E, W, x));
    a.base[x] += P[x] - P[b];
    if (x >= e0 && x < e0 + nl) a.expert_off[x - e0] = P[x] - P[e0];
  }
  if (threadIdx.x == 0) a.expert_off[nl] = P[e0 + nl] - P[e0], *a.arrivals = (uint32_t)arrivals;
  if (arrivals) moe_send_bases(a);
  if (a.prologue) { /* the GEMM may read the layout now */
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(a.ready), "r"(e) : "memory");
    }
  }
  return 1;
}

/* 4 slots: each good entry's receive row (token order within a chunk,
 * chunks in order), -1 where the capacity drops it, and (arrival signals)
 * its place in the send order; hist's row zeroed after. One warp per
 * chunk, in entry order. */
static __device__ void moe_slots(const loom_moe_kargs_t &a) {
  const int lane = (int)(threadIdx.x % 32), r = a.dc.rank;
  const int64_t n = a.tokens * a.topk;
  const int32_t *kept_r = a.kept + (int64_t)r * a.experts;
  const int arrivals = *(volatile uint32_t *)a.arrivals != 0u;
  const int warps = (int)(gridDim.x * (blockDim.x / 32));
  for (int c = (int)(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32); c < a.nchunks; c += warps) {
    const int64_t i0 = (int64_t)c * a.chunk;
    const int64_t i1 = i0 + a.chunk < n ? i0 + a.chunk : n;
    int32_t *h = a.hist + (int64_t)c * a.experts;
    for (int64_t b = i0; b < i1; b += 32) {
      const int64_t i = b + lane;
      const int live = i < i1 && a.slot[i] == 0;
      const int32_t x = live ? a.ids[i] : -1 - lane; /* unique keys for the lanes without a row */
      const unsigned group = __match_any_sync(0xffffffffu, x);
      const int before = __popc(group & ((1u << lane) - 1u));
      const int32_t cursor = live ? h[x] : 0;
      __syncwarp();
      if (live) {
        const int64_t m = (int64_t)cursor + before;
        a.slot[i] = m < kept_r[x] ? a.base[x] + m : -1;
        if (arrivals && m < kept_r[x]) a.order[a.sbase[x] + m] = (int32_t)i;
        if (before == __popc(group) - 1) h[x] = cursor + __popc(group);
      }
      __syncwarp();
    }
    for (int x = lane; x < a.experts; x += 32) h[x] = 0; /* the next call counts from zero */
  }
}

/* Row i of the dispatch: its owner's receive row (NULL for a dropped or
 * bad entry) and its token row in *src; `first`: also store the row's
 * origin {source, i} beside it. */
static __device__ __forceinline__ uint4 *moe_dispatch_row(const loom_moe_kargs_t &a, int64_t row_bytes, int64_t i,
                                                          int first, const uint4 **src) {
  const int64_t s = a.slot[i];
  if (s < 0) return NULL;
  const int p = loom__moe_expert_rank(a.experts, a.world, a.ids[i]);
  if (first) a.origin[p][s] = make_int2(a.dc.rank, (int)i);
  *src = (const uint4 *)(a.x + (i / a.topk) * row_bytes);
  return (uint4 *)(a.recv[p] + s * row_bytes);
}

/* The dispatch's n rows as 16-byte vectors spread over every thread of the
 * grid (where there are fewer rows than warps), MOE_VEC_BATCH vectors of
 * each thread loaded before they are stored. (Measured: the lookups of a
 * batch in a pass of their own before any store, and 2, 8, 16 or 64
 * vectors per thread, were no faster at decode sizes and up to 3% slower
 * at prefill: docs/perf/moe.md.) */
#define MOE_VEC_BATCH 4
static __device__ __forceinline__ void moe_copy_rows_spread(const loom_moe_kargs_t &a, int64_t n, int64_t row_bytes) {
  const int64_t vpr = row_bytes / 16, stride = (int64_t)gridDim.x * blockDim.x, total = n * vpr;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < total; v += MOE_VEC_BATCH * stride) {
    uint4 val[MOE_VEC_BATCH];
    uint4 *dst[MOE_VEC_BATCH];
#pragma unroll
    for (int q = 0; q < MOE_VEC_BATCH; ++q) {
      const int64_t w = v + q * stride;
      dst[q] = NULL;
      if (w < total) {
        const int64_t i = w / vpr, c = w - i * vpr;
        const uint4 *src;
        dst[q] = moe_dispatch_row(a, row_bytes, i, c == 0, &src);
        if (dst[q]) dst[q] += c, val[q] = __ldcg(src + c);
      }
    }
#pragma unroll
    for (int q = 0; q < MOE_VEC_BATCH; ++q)
      if (dst[q]) *dst[q] = val[q];
  }
}

/* Every thread's stores of this block, then the last block of the grid to
 * get here stores e into this rank's word of the signal array at `off` on
 * every rank. 1 in that block (every thread), 0 in the others. */
static __device__ int moe_last_tells(const loom_moe_kargs_t &a, size_t off, uint32_t e) {
  __shared__ int last;
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = loom__last_arrival(a.count, gridDim.x);
    if (last)
      for (int p = 0; p < a.world; ++p)
        loom__signal_store_release(loom_signal_addr(&a.dc, p, off, (uint32_t)a.dc.rank), e);
  }
  __syncthreads();
  return last;
}

/* The arrival form's count of a piece (warp 0, after every thread of the
 * block fenced its stores): positions [q0, q1) of the send order, 32 at a
 * time, a lane each; the lanes of one expert add their rows to its counter
 * (acq_rel: the other pieces' stores of it come before), and the add that
 * completes the expert's rows resets the counter and tells its owner
 * arrived[r][x]. */
static __device__ void moe_piece_arrived(const loom_moe_kargs_t &a, uint32_t e, int64_t q0, int64_t q1, int lane) {
  for (int64_t b = q0; b < q1; b += 32) {
    const int64_t q = b + lane;
    const int32_t x = q < q1 ? a.ids[a.order[q]] : -1 - lane;
    const unsigned group = __match_any_sync(0xffffffffu, x);
    if (q >= q1 || lane != __ffs(group) - 1) continue;
    const int32_t n = __popc(group);
    int32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(a.sent_rows + x), "r"(n) : "memory");
    if (old + n < a.kept[(int64_t)a.dc.rank * a.experts + x]) continue;
    a.sent_rows[x] = 0; /* every row of x counted: the next call counts from zero */
    const int p = loom__moe_expert_rank(a.experts, a.world, x);
    loom__signal_store_release(
        loom_signal_addr(&a.dc, p, a.arrived_off, (uint32_t)((int64_t)a.dc.rank * a.experts + x)), e);
  }
}

/* 5 send, the arrival form: the kept entries in send order, in pieces of
 * rpw rows per warp of a block (pieces over the grid in order; rpw 4..16,
 * the larger where there are rows enough for every block to take two
 * pieces: fewer fences), each row's lanes with 8 loads in flight; the
 * block's stores fenced after each piece and counted per expert. */
static __device__ void moe_send_ordered(const loom_moe_kargs_t &a, uint32_t e) {
  const int64_t row_bytes = (int64_t)a.hidden * a.es, total = a.sscan[moe_send_slots(a)];
  const int warps = (int)(blockDim.x / 32), warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
  int64_t rpw = total / ((int64_t)gridDim.x * warps * 2) / 4 * 4;
  rpw = rpw < 4 ? 4 : rpw > 16 ? 16 : rpw;
  const int64_t piece = rpw * warps;
  for (int64_t q0 = (int64_t)blockIdx.x * piece; q0 < total; q0 += (int64_t)gridDim.x * piece) {
    for (int64_t j = 0; j < rpw; ++j) {
      const int64_t q = q0 + j * warps + warp;
      if (q >= total) break;
      const uint4 *src;
      char *dst = (char *)moe_dispatch_row(a, row_bytes, a.order[q], lane == 0, &src);
      if (dst) moe_copy_row<8>(dst, (const char *)src, row_bytes, lane);
    }
    __threadfence_system();
    __syncthreads();
    if (warp == 0) moe_piece_arrived(a, e, q0, q0 + piece < total ? q0 + piece : total, lane);
  }
}

/* 5 send: the rows into their owners' receive buffers, origins beside
 * them (in send order with arrival signals where a rank asked for them);
 * the last block to finish tells every rank (delivered). 1 in that block,
 * 0 in the others. */
static __device__ int moe_send(const loom_moe_kargs_t &a, uint32_t e) {
  const int64_t row_bytes = (int64_t)a.hidden * a.es, n = a.tokens * a.topk;
  LOOM__MUTANT_SLOW_PUSH(&a.dc); /* mutant builds only (core/signal.cuh) */
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  if (*(volatile uint32_t *)a.arrivals) {
    moe_send_ordered(a, e);
  } else if (n < warps) { /* fewer rows than warps (decode sizes): every thread of the grid */
    moe_copy_rows_spread(a, n, row_bytes);
  } else { /* a warp per row (prefill sizes: 1-3% faster there than the grid-wide copy) */
    const int lane = (int)(threadIdx.x % 32);
    for (int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
      const uint4 *src;
      char *dst = (char *)moe_dispatch_row(a, row_bytes, i, lane == 0, &src);
      if (dst) moe_copy_row(dst, (const char *)src, row_bytes, lane);
    }
  }
  return moe_last_tells(a, a.delivered_off, e);
}

/* The dispatch: the steps of moe.h as phases of one cooperative launch.
 * Publish and layout run on block 0 while the others wait at the second
 * barrier; 6 wait: the block that sent last waits for every source's rows
 * and publishes the epoch (the call is complete). */
__global__ void __launch_bounds__(LOOM_MOE_THREADS) loom__moe_dispatch_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  const int b0 = blockIdx.x == 0;
  if (b0) moe_stamp(a, 0, 0);
#if __CUDA_ARCH__ >= 900
  if (a.prologue) asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); /* the GEMM may start now */
#endif
  if (moe_aborted(a)) return; /* a wait of the comm expired: its calls stop (a barrier exits on it too) */
  moe_count(a);
  if (b0) moe_stamp(a, 0, 1);
  if (!loom__grid_barrier(&a.dc, a.bar, LOOM_SITE_MOE_GRID)) return;
  if (b0) {
    moe_stamp(a, 0, 2);
    moe_publish(a, e);
    moe_stamp(a, 0, 3);
    (void)moe_layout(a, e); /* an expired wait raised the abort flag: every block stops below */
    moe_stamp(a, 0, 4);
  }
  if (!loom__grid_barrier(&a.dc, a.bar, LOOM_SITE_MOE_GRID) || moe_aborted(a)) return;
  if (b0) moe_stamp(a, 0, 5);
  moe_slots(a);
  if (!loom__grid_barrier(&a.dc, a.bar, LOOM_SITE_MOE_GRID)) return;
  if (b0) moe_stamp(a, 0, 6);
  const int last = moe_send(a, e);
  if (b0) moe_stamp(a, 0, 7);
  if (!last || a.prologue) return; /* (prologue: the GEMM waits per piece and publishes the epoch) */
  moe_stamp(a, 0, 8);
  if (!moe_wait_all(a, a.delivered_off, e, LOOM_SITE_MOE_DELIVERED)) return;
  moe_stamp(a, 0, 9);
  if (threadIdx.x == 0) loom__epoch_publish((loom_dev_epoch_t *)(a.dc.ws + a.epoch_off), e);
}

/* Blocks for `items` of work, `per_block` per block: as many as the work
 * needs, at most per_sm per SM (grid-stride loops do the rest) and at most
 * `resident` (a cooperative launch), at least 1. */
static unsigned moe_grid(int64_t items, int64_t per_block, int per_sm, int sms, int resident) {
  int64_t b = (items + per_block - 1) / per_block;
  if (b > (int64_t)per_sm * sms) b = (int64_t)per_sm * sms;
  if (b > resident) b = resident;
  return b < 1 ? 1u : (unsigned)b;
}

/* One cooperative launch of `kernel` over `blocks` blocks of LOOM_MOE_THREADS. */
static loom_result_t moe_launch(void (*kernel)(const loom_moe_kargs_t), const char *name, unsigned blocks,
                                const loom_moe_kargs_t *k, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(LOOM_MOE_THREADS), cfg.dynamicSmemBytes = 0, cfg.stream = stream;
  cfg.attrs = attr, cfg.numAttrs = 1;
  LOOM_CUDA(cudaLaunchKernelEx(&cfg, kernel, *k));
  LOOM_CUDA_LAUNCHED(name);
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__moe_dispatch_launch(const loom_moe_kargs_t *k, const loom_moe_grid_t *g,
                                                   int max_blocks, cudaStream_t stream) {
  /* MOE_VEC_BATCH vectors per thread (send); at least a block per routing chunk (count) */
  const int64_t vectors = k->tokens * k->topk * ((int64_t)k->hidden * k->es / 16);
  unsigned blocks = moe_grid(vectors, LOOM_MOE_THREADS * MOE_VEC_BATCH, 2, g->sms, g->dispatch_blocks);
  if (blocks < (unsigned)k->nchunks) blocks = moe_grid(k->nchunks, 1, 2, g->sms, g->dispatch_blocks);
  if (max_blocks > 0 && blocks > (unsigned)max_blocks) blocks = (unsigned)max_blocks; /* SMs left to a GEMM beside it */
  return moe_launch(loom__moe_dispatch_kernel, "loom__moe_dispatch_kernel", blocks, k, stream);
}

/* Combine's send: each received row's expert output into its source's
 * combine buffer at its origin slot, a warp per row. (The dispatch's
 * copy over the whole grid was 1-2% slower here at prefill sizes and no
 * faster at decode: docs/perf/moe.md.) */
static __device__ void moe_comb_send(const loom_moe_kargs_t &a) {
  const int lane = (int)(threadIdx.x % 32), r = a.dc.rank;
  const int nl = loom__moe_experts_on(a.experts, a.world, r);
  const int64_t total = a.expert_off[nl], row_bytes = (int64_t)a.hidden * a.es;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < total; i += warps) {
    const int2 o = __ldcg(a.origin[r] + i); /* stored by the sources during the dispatch */
    moe_copy_row(a.combine[o.x] + (int64_t)o.y * row_bytes, a.y + i * row_bytes, row_bytes, lane);
  }
}

/* Combine's reduce: out[t] = sum over kept j (ascending) of w[t][j] y_j,
 * fp32, each product rounded once; a thread per 8 elements of a token. */
static __device__ void moe_comb_reduce(const loom_moe_kargs_t &a) {
  const int r = a.dc.rank, K = a.topk;
  const int64_t vpr = a.hidden / 8, nv = a.tokens * vpr;
  const char *cb = a.combine[r];
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += stride) {
    const int64_t t = v / vpr, c = (v % vpr) * 8;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j = 0; j < K; ++j) {
      if (a.slot[t * K + j] < 0) continue; /* dropped or a bad entry */
      const float w = a.weights[t * K + j];
      float y[8];
      loom__load8_as<-1>(cb, (t * K + j) * a.hidden + c, a.dtype, y);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] = __fadd_rn(acc[q], __fmul_rn(w, y[q]));
    }
    loom__store8_as(a.out, t * a.hidden + c, a.dtype, acc);
  }
}

/* The combine: every rank's combine buffer is free (its last reduction is
 * over); each received row's expert output into its source's buffer at
 * its origin slot, a warp per row; the last block tells every rank; then
 * every block waits for every owner and sums out[t] = sum over kept j
 * (ascending) of w[t][j] y_j, fp32, each product rounded once, a thread per
 * 8 elements of a token. */
__global__ void __launch_bounds__(LOOM_MOE_THREADS, 4) loom__moe_combine_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  const int r = a.dc.rank, b0 = blockIdx.x == 0;
  if (b0) moe_stamp(a, 1, 0);
  for (int p = (int)threadIdx.x; p < a.world; p += (int)blockDim.x)
    loom__signal_store_release(loom_signal_addr(&a.dc, p, a.comb_ready_off, (uint32_t)r), e);
  if (!a.sent) { /* (fused: the down GEMM stored the rows; moe.h says why it needs no comb_ready) */
    if (!moe_wait_all(a, a.comb_ready_off, e, LOOM_SITE_MOE_COMB_READY)) return;
    if (b0) moe_stamp(a, 1, 1);
    moe_comb_send(a);
  }
  if (b0) moe_stamp(a, 1, 2);
  if (moe_last_tells(a, a.comb_done_off, e)) moe_stamp(a, 1, 3);
  if (!moe_wait_all(a, a.comb_done_off, e, LOOM_SITE_MOE_COMB_DONE)) return;
  if (b0) moe_stamp(a, 1, 4);
  moe_comb_reduce(a);
  if (b0) moe_stamp(a, 1, 5);
  __syncthreads();
  if (threadIdx.x == 0) loom__epoch_block_done((loom_dev_epoch_t *)(a.dc.ws + a.epoch_off), e);
}

extern "C" loom_result_t loom__moe_combine_launch(const loom_moe_kargs_t *k, int64_t max_recv, const loom_moe_grid_t *g,
                                                  cudaStream_t stream) {
  /* a warp per received row (send), a thread per 8 elements (reduce) */
  const int cap = g->comb_per_sm; /* (a world: every block waits for the peers' outputs) */
  const unsigned sb = k->sent ? 1u : moe_grid(max_recv, LOOM_MOE_THREADS / 32, cap ? cap : 2, g->sms, g->comb_blocks);
  const unsigned rb = moe_grid(k->tokens * (k->hidden / 8), LOOM_MOE_THREADS, cap ? cap : 4, g->sms, g->comb_blocks);
  return moe_launch(loom__moe_combine_kernel, "loom__moe_combine_kernel", sb > rb ? sb : rb, k, stream);
}

extern "C" loom_result_t loom__moe_grid_limits(int sms, int comb_per_sm, loom_moe_grid_t *g) {
  int dev = 0, coop = 0, per_sm_d = 0, per_sm_c = 0;
  LOOM_CUDA(cudaGetDevice(&dev));
  g->sms = sms;
  g->comb_per_sm = comb_per_sm;
  LOOM_CUDA(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (!coop)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "the MoE kernels need cooperative launches, which device %d does not support",
                      dev);
  LOOM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_d, loom__moe_dispatch_kernel, LOOM_MOE_THREADS, 0));
  LOOM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_c, loom__moe_combine_kernel, LOOM_MOE_THREADS, 0));
  g->dispatch_blocks = per_sm_d * g->sms, g->comb_blocks = per_sm_c * g->sms;
  if (g->dispatch_blocks < 1 || g->comb_blocks < 1)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "the MoE kernels fit no block of %d threads on device %d", LOOM_MOE_THREADS,
                      dev);
  return LOOM_SUCCESS;
}
