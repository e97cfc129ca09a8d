/*
 * splitk_fixup_probe.cu - what the sm90 GEMM's split-K / stream-K fixup
 * costs, apart from the main loop, and how else it could be done.
 *
 * In the kernel (gemm_sm90.cuh), every contributor of a shared tile stores
 * its fp32 partial (2 consumer warpgroups x 64 rows x WN columns) to its
 * workspace slot, fences and takes the tile's ticket; the last one reads
 * every contributor's slot back in k order, LOOM_SK_LOADS = 8 float4 loads in
 * flight per thread, and runs the epilogue. On narrow TP = 8 shapes the
 * split configurations measured 9-11 us above their main loops (64 x 768 x
 * 4096, 6 tiles x 8 splits: 14.3 us where 8 k-blocks take ~2), so the fixup
 * is the first cost to understand there.
 *
 * Here each block is one unit of `tiles` x `splits` (split-major, one unit
 * per block, all resident), holds WN/2 accumulators per thread as the
 * kernel's consumers do, and then finishes the tile one of these ways:
 *   none   no partial, no ticket: split 0 writes its own values (the floor)
 *   store  partial stored, fence, ticket; the last writes its own values
 *          (what every contributor pays before the fixup)
 *   seq8   the kernel's fixup: slots in k order, 8 float4 in flight
 *   seqall the same with a whole slot's loads in flight (WN/8 float4)
 *   pipe   seq8 with the next group's 8 loads issued before this group's
 *          adds (16 float4 in flight, across slot boundaries too)
 *   tree   pairwise: the second arriver at each node of a binary tree over
 *          the contributors adds its sibling's slot to its registers (fp32
 *          a + b is commutative, so the bits do not depend on who arrives
 *          second), stores the sum and goes up; log2(splits) slot reads on
 *          the critical path instead of splits + 1, no read-back of its own
 *   fold   the kernel's fixup since: one thread's fence.acq_rel before the
 *          ticket instead of every thread's __threadfence (and none after
 *          it), and the finisher's own partial folded in from registers
 *          (the same additions in the same order, one slot read fewer)
 * Timed eager, 200 launches between two events (per launch), medians of 5;
 * every variant's output checked against fp64 sums of the same values.
 *
 *   build/dev/gemm/splitk_fixup_probe        (make builds it)
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "../world/probe.cuh"

enum { V_NONE, V_STORE, V_SEQ8, V_SEQALL, V_PIPE, V_TREE, V_FOLD, V_COUNT };
static const char *vname[V_COUNT] = {"none", "store", "seq8", "seqall", "pipe", "tree", "fold"};

/* the value a unit's thread holds in accumulator i (small, exact in fp32) */
static __host__ __device__ float val(int u, int cw, int tid, int i) {
  uint32_t h = (uint32_t)u * 2654435761u ^ (uint32_t)(cw * 131 + tid) * 40503u ^ (uint32_t)i * 2246822519u;
  h ^= h >> 15, h *= 2654435761u, h ^= h >> 13;
  return (float)((int)(h & 1023) - 512) * (1.0f / 256.0f) + 0.001f * (float)(h >> 28);
}

static __device__ __forceinline__ uint32_t ticket_take(uint32_t *p) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
}

template <int WN>
static __device__ __forceinline__ void store_slot(float *ws, int slot, int cw, int tid, const float *acc) {
  float4 *mine = (float4 *)(ws + ((size_t)slot * 2 + cw) * 64 * WN);
#pragma unroll
  for (int q = 0; q < WN / 8; ++q)
    __stcg(mine + q * 128 + tid, make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]));
}

/* acc (+)= slot, SKL float4 loads at a time */
template <int WN, int SKL>
static __device__ __forceinline__ void add_slot(const float *ws, int slot, int cw, int tid, float *acc, bool first) {
  const float4 *src = (const float4 *)(ws + ((size_t)slot * 2 + cw) * 64 * WN);
#pragma unroll
  for (int q0 = 0; q0 < WN / 8; q0 += SKL) {
    float4 v[SKL];
#pragma unroll
    for (int q = 0; q < SKL; ++q) v[q] = __ldcg(src + (q0 + q) * 128 + tid);
#pragma unroll
    for (int q = 0; q < SKL; ++q) {
      float *a = acc + 4 * (q0 + q);
      a[0] = first ? v[q].x : a[0] + v[q].x;
      a[1] = first ? v[q].y : a[1] + v[q].y;
      a[2] = first ? v[q].z : a[2] + v[q].z;
      a[3] = first ? v[q].w : a[3] + v[q].w;
    }
    asm volatile("" ::: "memory");
  }
}

/* slots slot0 + c step, c in [0, n), in order, the next group's loads in
 * flight while this group is added */
template <int WN>
static __device__ __forceinline__ void add_slots_pipe(const float *ws, int slot0, int step, int n, int cw, int tid,
                                                      float *acc) {
  constexpr int SKL = 8, NG = WN / 8 / SKL;
  static_assert((WN / 8) % SKL == 0, "whole groups");
  float4 cur[SKL], nxt[SKL];
  const float4 *src = (const float4 *)(ws + ((size_t)slot0 * 2 + cw) * 64 * WN);
#pragma unroll
  for (int q = 0; q < SKL; ++q) cur[q] = __ldcg(src + q * 128 + tid);
  for (int c = 0; c < n; ++c) {
    const float4 *s = (const float4 *)(ws + ((size_t)(slot0 + c * step) * 2 + cw) * 64 * WN);
    const float4 *sn = (const float4 *)(ws + ((size_t)(slot0 + (c + 1) * step) * 2 + cw) * 64 * WN);
    const bool first = c == 0;
#pragma unroll
    for (int g = 0; g < NG; ++g) {
      if (g + 1 < NG) {
#pragma unroll
        for (int q = 0; q < SKL; ++q) nxt[q] = __ldcg(s + ((g + 1) * SKL + q) * 128 + tid);
      } else if (c + 1 < n) {
#pragma unroll
        for (int q = 0; q < SKL; ++q) nxt[q] = __ldcg(sn + q * 128 + tid);
      }
#pragma unroll
      for (int q = 0; q < SKL; ++q) {
        float *a = acc + 4 * (g * SKL + q);
        a[0] = first ? cur[q].x : a[0] + cur[q].x;
        a[1] = first ? cur[q].y : a[1] + cur[q].y;
        a[2] = first ? cur[q].z : a[2] + cur[q].z;
        a[3] = first ? cur[q].w : a[3] + cur[q].w;
      }
#pragma unroll
      for (int q = 0; q < SKL; ++q) cur[q] = nxt[q];
    }
  }
}

/* Block u is unit u = split x tiles + j. Tickets: [tiles x splits], 0
 * between launches (the tree uses node ids 1..splits-1 of each tile). */
template <int WN, int V>
__global__ void __launch_bounds__(256, 1) fixup_kernel(float *ws, uint32_t *tickets, float *out, int tiles, int splits) {
  const int u = blockIdx.x, split = u / tiles, j = u - split * tiles;
  const int cw = threadIdx.x / 128, tid = threadIdx.x % 128;
  __shared__ uint32_t tk;
  float acc[WN / 2];
#pragma unroll
  for (int i = 0; i < WN / 2; ++i) acc[i] = val(u, cw, tid, i);
  bool finish = true;
  if (V == V_NONE) {
    finish = split == 0;
  } else if (V == V_FOLD) {
    store_slot<WN>(ws, u, cw, tid, acc);
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      tk = ticket_take(tickets + (size_t)j * splits);
    }
    __syncthreads();
    finish = tk == (uint32_t)(splits - 1);
    if (finish) {
      constexpr int SKL = 8;
#pragma unroll
      for (int q0 = 0; q0 < WN / 8; q0 += SKL) {
        float r[4 * SKL];
        for (int c = 0; c < splits; ++c) {
          float v[4 * SKL];
          if (c == split) {
#pragma unroll
            for (int i = 0; i < 4 * SKL; ++i) v[i] = acc[4 * q0 + i];
          } else {
            const float4 *src = (const float4 *)(ws + ((size_t)(c * tiles + j) * 2 + cw) * 64 * WN);
#pragma unroll
            for (int q = 0; q < SKL; ++q) {
              const float4 x = __ldcg(src + (q0 + q) * 128 + tid);
              v[4 * q] = x.x, v[4 * q + 1] = x.y, v[4 * q + 2] = x.z, v[4 * q + 3] = x.w;
            }
          }
#pragma unroll
          for (int i = 0; i < 4 * SKL; ++i) r[i] = c == 0 ? v[i] : r[i] + v[i];
        }
#pragma unroll
        for (int i = 0; i < 4 * SKL; ++i) acc[4 * q0 + i] = r[i];
      }
      if (threadIdx.x == 0) tickets[(size_t)j * splits] = 0;
    }
  } else if (V != V_TREE) {
    store_slot<WN>(ws, u, cw, tid, acc);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) tk = ticket_take(tickets + (size_t)j * splits);
    __syncthreads();
    finish = tk == (uint32_t)(splits - 1);
    if (finish) {
      __threadfence();
      if (V == V_SEQ8)
        for (int c = 0; c < splits; ++c) add_slot<WN, 8>(ws, c * tiles + j, cw, tid, acc, c == 0);
      else if (V == V_SEQALL)
        for (int c = 0; c < splits; ++c) add_slot<WN, WN / 8>(ws, c * tiles + j, cw, tid, acc, c == 0);
      else if (V == V_PIPE)
        add_slots_pipe<WN>(ws, j, tiles, splits, cw, tid, acc);
      if (threadIdx.x == 0) tickets[(size_t)j * splits] = 0;
    }
  } else {
    int lo = split; /* lowest contributor of the subtree whose sum acc holds */
    for (int half = 1; half < splits; half *= 2) {
      const int g = split & ~(2 * half - 1), rb = g + half;
      if (rb >= splits) continue; /* no right subtree: up as we are */
      store_slot<WN>(ws, lo * tiles + j, cw, tid, acc);
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) tk = ticket_take(tickets + (size_t)j * splits + rb);
      __syncthreads();
      if (tk == 0) {
        finish = false;
        break;
      }
      __threadfence();
      if (threadIdx.x == 0) tickets[(size_t)j * splits + rb] = 0;
      add_slot<WN, 8>(ws, (lo == g ? rb : g) * tiles + j, cw, tid, acc, false);
      lo = g;
    }
  }
  if (finish) {
    float4 *o = (float4 *)(out + ((size_t)j * 2 + cw) * 64 * WN);
#pragma unroll
    for (int q = 0; q < WN / 8; ++q) o[q * 128 + tid] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
  }
}

typedef void (*kfn_t)(float *, uint32_t *, float *, int, int);
template <int WN>
static kfn_t kernel_of(int v) {
  switch (v) {
    case V_NONE: return fixup_kernel<WN, V_NONE>;
    case V_STORE: return fixup_kernel<WN, V_STORE>;
    case V_SEQ8: return fixup_kernel<WN, V_SEQ8>;
    case V_SEQALL: return fixup_kernel<WN, V_SEQALL>;
    case V_PIPE: return fixup_kernel<WN, V_PIPE>;
    case V_FOLD: return fixup_kernel<WN, V_FOLD>;
    default: return fixup_kernel<WN, V_TREE>;
  }
}
static kfn_t kernel_for(int wn, int v) {
  return wn == 64 ? kernel_of<64>(v) : wn == 128 ? kernel_of<128>(v) : wn == 192 ? kernel_of<192>(v) : kernel_of<256>(v);
}

int main(void) {
  struct cfg_t {
    int wn, tiles, splits;
    const char *what;
  } cfgs[] = {
      {64, 6, 8, "64x128 d128/sp8 (m 64, n 768)"},    {64, 6, 16, "64x128 sp16"},
      {64, 10, 13, "64x128 sp13 (m 64, n 1280)"},     {64, 16, 8, "64x128 sp8, 16 tiles"},
      {128, 24, 5, "128x128 sp5 (m 512, n 768)"},    {128, 24, 3, "128x128 sp3"},
      {128, 40, 3, "128x128 sp3 (m 512, n 1280)"},   {128, 32, 4, "128x128 sp4 (m 512, n 1024)"},
      {128, 12, 8, "128x128 sp8"},                   {192, 16, 4, "128x192 sp4"},
      {192, 16, 2, "128x192 sp2 (m 2048, n 768)"},   {256, 16, 4, "128x256 sp4"},
      {256, 9, 8, "128x256 sp8"},
  };
  const int ncfg = (int)(sizeof cfgs / sizeof cfgs[0]);
  size_t max_ws = 0, max_out = 0, max_t = 0;
  for (int i = 0; i < ncfg; ++i) {
    max_ws = std::max(max_ws, (size_t)cfgs[i].tiles * cfgs[i].splits * 2 * 64 * cfgs[i].wn);
    max_out = std::max(max_out, (size_t)cfgs[i].tiles * 2 * 64 * cfgs[i].wn);
    max_t = std::max(max_t, (size_t)cfgs[i].tiles * cfgs[i].splits);
  }
  float *ws, *out;
  uint32_t *tickets;
  CK(cudaMalloc(&ws, max_ws * 4));
  CK(cudaMalloc(&out, max_out * 4));
  CK(cudaMalloc(&tickets, max_t * 4));
  CK(cudaMemset(tickets, 0, max_t * 4));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> host(max_out);
  printf("%-30s %4s %5s %6s | %s (us per launch; fixup = variant - store)\n", "configuration", "WN", "tiles", "splits",
         "none store seq8 seqall pipe tree fold");
  int bad_total = 0;
  for (int i = 0; i < ncfg; ++i) {
    const cfg_t c = cfgs[i];
    const size_t n_out = (size_t)c.tiles * 2 * 64 * c.wn;
    double us[V_COUNT];
    for (int v = 0; v < V_COUNT; ++v) {
      kfn_t k = kernel_for(c.wn, v);
      /* check: poisoned output, one launch, against fp64 sums */
      CK(cudaMemsetAsync(out, 0xFF, n_out * 4, st));
      k<<<c.tiles * c.splits, 256, 0, st>>>(ws, tickets, out, c.tiles, c.splits);
      CK(cudaGetLastError());
      CK(cudaMemcpyAsync(host.data(), out, n_out * 4, cudaMemcpyDeviceToHost, st));
      CK(cudaStreamSynchronize(st));
      int bad = 0;
      for (int j = 0; j < c.tiles && v != V_NONE && v != V_STORE; ++j)
        for (int cw = 0; cw < 2; ++cw)
          for (int tid = 0; tid < 128; ++tid)
            for (int a = 0; a < c.wn / 2; ++a) {
              double want = 0;
              for (int s = 0; s < c.splits; ++s) want += val(s * c.tiles + j, cw, tid, a);
              const float got = host[((size_t)j * 2 + cw) * 64 * c.wn + (size_t)(a / 4) * 512 + tid * 4 + a % 4];
              if (!(fabs(got - want) <= 1e-5 * (1 + fabs(want)) * c.splits)) ++bad;
            }
      bad_total += bad;
      if (bad) printf("  %s %s: %d wrong\n", c.what, vname[v], bad);
      std::vector<double> t;
      for (int r = 0; r < 6; ++r) {
        CK(cudaEventRecord(e0, st));
        for (int l = 0; l < 200; ++l) k<<<c.tiles * c.splits, 256, 0, st>>>(ws, tickets, out, c.tiles, c.splits);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r) t.push_back(ms * 1e3 / 200);
      }
      CK(cudaGetLastError());
      std::sort(t.begin(), t.end());
      us[v] = t[t.size() / 2];
    }
    printf("%-30s %4d %5d %6d | %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f %5.2f | fixup seq8 %5.2f tree %5.2f fold %5.2f\n",
           c.what, c.wn, c.tiles, c.splits, us[0], us[1], us[2], us[3], us[4], us[5], us[6], us[2] - us[1],
           us[5] - us[1], us[6] - us[1]);
  }
  printf("%d wrong elements in all\n", bad_total);
  return bad_total != 0;
}
