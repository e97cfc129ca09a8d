/*
 * signal.cuh - device side of signals (see signal.h for the protocol).
 *
 *   loom__signal_store_release(addr, v)  data stores before it are visible to
 *                                       any GPU that acquires v (system scope)
 *   loom__signal_add_release(addr, v)    the same, as an atomic add (counters)
 *   loom__signal_load_acquire(addr)      a poll; never cached (.nc/__ldg) loads
 *   loom__signal_wait(dc, addr, ...)     poll until >= expected, bounded by the
 *                                       comm's timeout; returns 0 on expiry
 *                                       (or when another wait of the comm
 *                                       expired) after recording who waited
 *                                       on what, 1 when reached.
 * Callers that get 0 must stop the kernel's work (return), never spin on.
 */
#ifndef LOOM_CORE_SIGNAL_CUH
#define LOOM_CORE_SIGNAL_CUH

#include <stdint.h>
#include "signal.h"

/* Mutant builds (`make mutants`, tests/gpu/mutants.sh): compiled with
 * -DLOOM_MUTANT_SITE=<a LOOM_SITE_ value>, every wait at that site is met at
 * once (the wait removed, as the protocol model's mutations remove one), so
 * that the world's GPU tests show they catch a missing wait. The library's
 * own build never defines it: the test is then the constant 0 and every
 * kernel compiles as before. */
#ifdef LOOM_MUTANT_SITE
#define LOOM__WAIT_REMOVED(site) ((uint32_t)(site) == (uint32_t)(LOOM_MUTANT_SITE))
#else
#define LOOM__WAIT_REMOVED(site) 0
#endif

/* A slow peer, for the same tests (LOOM_MUTANT_SLOW_US, tests/gpu/mutants.txt's
 * fifth column): in a kernel built with it, every block of the last rank
 * waits that many microseconds before the data it pushes into its peers,
 * after its own handshakes, so that a peer whose kernel ends without
 * waiting for that data (the wait removed) reads it before it lands, where
 * on one GPU the ranks' pushes would otherwise land together. Built alone
 * it is the mutant's control (the waits in place, the peer as slow); the
 * library's own build never defines it and the call compiles to nothing. */
#ifdef LOOM_MUTANT_SLOW_US
#define LOOM__MUTANT_SLOW_PUSH(dc) loom__mutant_slow_push(dc)
#else
#define LOOM__MUTANT_SLOW_PUSH(dc) ((void)0)
#endif

static __device__ __forceinline__ void loom__signal_store_release(uint32_t *addr, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(addr), "r"(v) : "memory");
}

static __device__ __forceinline__ void loom__signal_add_release(uint32_t *addr, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(addr), "r"(v) : "memory");
}

static __device__ __forceinline__ uint32_t loom__signal_load_acquire(const uint32_t *addr) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
  return v;
}

static __device__ __forceinline__ uint64_t loom__globaltimer_ns(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* The calling thread idles ns nanoseconds of the global timer (tests'
 * delays: a world's skew, a mutant's slow peer). */
static __device__ __forceinline__ void loom__sleep_ns(uint64_t ns) {
  const uint64_t t0 = loom__globaltimer_ns();
  while (loom__globaltimer_ns() - t0 < ns) __nanosleep(1000);
}

#ifdef LOOM_MUTANT_SLOW_US
static __device__ void loom__mutant_slow_push(const loom_dev_comm_t *dc) {
  if (dc->rank == dc->size - 1 && threadIdx.x == 0) loom__sleep_ns((uint64_t)(LOOM_MUTANT_SLOW_US) * 1000u);
  __syncthreads();
}
#endif

/* An error record written once by whoever fails first (loom_error_record_t
 * here, loom_emb_err_t in the embedding op): claim it (1 for the winner),
 * fill its fields, then publish it (the host reads `valid` last). */
static __device__ __forceinline__ int loom__record_claim(uint32_t *claimed) {
  return atomicCAS((unsigned int *)claimed, 0u, 1u) == 0u;
}
static __device__ __forceinline__ void loom__record_publish(uint32_t *valid) {
  __threadfence_system();
  *(volatile uint32_t *)valid = 1u;
  __threadfence_system();
}

/* Records the expiry (first expiring wait of the comm only) and raises the
 * abort flag. Kept out of line: it is the cold path. */
static __device__ __noinline__ void loom__signal_record_timeout(const loom_dev_comm_t *dc, int peer,
                                                               uint32_t signal, uint32_t expected,
                                                               uint32_t seen, uint32_t site,
                                                               uint64_t waited_ns) {
  atomicExch(dc->abort_flag, 1u);
  if (loom__record_claim(&dc->err->claimed)) {
    volatile loom_error_record_t *r = dc->err;
    r->rank = dc->rank;
    r->peer = peer;
    r->signal = signal;
    r->expected = expected;
    r->seen = seen;
    r->site = site;
    r->waited_ns = waited_ns;
    loom__record_publish(&dc->err->valid);
  }
}

/* The bound of every poll loop: called after failed poll number `polls`
 * (1, 2, ...; t0 = loom__globaltimer_ns() before the first), it checks every
 * 64th time whether another wait of the comm expired or this one has waited
 * longer than the comm's timeout (recording it: `peer`, `signal`,
 * `expected`, `seen` and `site` describe the wait). 1: give up. */
static __device__ __forceinline__ int loom__poll_expired(const loom_dev_comm_t *dc, uint32_t polls, uint64_t t0,
                                                        int peer, uint32_t signal, uint32_t expected,
                                                        uint32_t seen, uint32_t site) {
  if ((polls & 63u) != 0u) return 0;
  if (*(volatile uint32_t *)dc->abort_flag) return 1;
  const uint64_t waited = loom__globaltimer_ns() - t0;
  if (waited <= dc->timeout_ns) return 0;
  loom__signal_record_timeout(dc, peer, signal, expected, seen, site, waited);
  return 1;
}

/* Polls *addr until it reaches `expected` (wrap-safe). One thread calls it;
 * the rest of its block waits at a barrier after it. `peer`, `signal` and
 * `site` only describe the wait in the error record. */
static __device__ __forceinline__ int loom__signal_wait(const loom_dev_comm_t *dc, const uint32_t *addr,
                                                       uint32_t expected, int peer, uint32_t signal,
                                                       uint32_t site) {
  if (LOOM__WAIT_REMOVED(site)) return 1;
  uint32_t seen = loom__signal_load_acquire(addr);
  if (loom__epoch_reached(seen, expected)) return 1;
  const uint64_t t0 = loom__globaltimer_ns();
  for (uint32_t polls = 1;; ++polls) {
    seen = loom__signal_load_acquire(addr);
    if (loom__epoch_reached(seen, expected)) return 1;
    if (loom__poll_expired(dc, polls, t0, peer, signal, expected, seen, site)) return 0;
  }
}

/* A barrier of every block of a grid whose blocks are all resident at once
 * (a cooperative launch: without it a block could wait for one that never
 * starts). bar[0] counts arrivals, bar[1] is the generation; both zeroed
 * once and reused by every launch. Every thread of every block calls it.
 * Orders each block's memory operations before it with every block's after
 * it (device scope). 1 when every block arrived; 0 when another wait of the
 * comm expired (its abort flag), or this one waited twice the comm's
 * timeout (recorded at `site`: the blocks wait only for each other, and
 * every wait of theirs is bounded by the timeout, so that means a bug). */
static __device__ int loom__grid_barrier(const loom_dev_comm_t *dc, uint32_t *bar, uint32_t site) {
  __shared__ int ok;
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile uint32_t *gen = bar + 1;
    const uint32_t g = *gen; /* read before arriving: the last arrival moves it only after this one's */
    int good = 1;
    __threadfence();
    if (atomicAdd(bar, 1u) + 1u == gridDim.x * gridDim.y * gridDim.z) {
      *(volatile uint32_t *)bar = 0u; /* before the generation moves: the next barrier counts from zero */
      __threadfence();
      atomicExch(bar + 1, g + 1u);
    } else {
      const uint64_t t0 = loom__globaltimer_ns();
      for (uint32_t polls = 1; *gen == g; ++polls) {
        if ((polls & 63u) != 0u) continue;
        if (*(volatile uint32_t *)dc->abort_flag) {
          good = 0;
          break;
        }
        const uint64_t waited = loom__globaltimer_ns() - t0;
        if (waited > 2u * dc->timeout_ns) {
          loom__signal_record_timeout(dc, -1, 0u, g + 1u, *gen, site, waited);
          good = 0;
          break;
        }
      }
    }
    __threadfence();
    ok = good;
  }
  __syncthreads();
  return ok;
}

/* The last block of a call publishes its epoch (the call's other blocks
 * are done with it: they counted in before this block got here). */
static __device__ __forceinline__ void loom__epoch_publish(loom_dev_epoch_t *e, uint32_t epoch) {
  *(volatile uint32_t *)&e->epoch = epoch;
}

/* The epoch of the call this kernel runs (see loom_dev_epoch_t). */
static __device__ __forceinline__ uint32_t loom__epoch_begin(const loom_dev_epoch_t *e) {
  return *(const volatile uint32_t *)&e->epoch + 1u;
}

/* One thread of a block (or warp) that has finished a share of some work,
 * after a system fence of its own loads and stores: counts it in at *count
 * and returns 1 in the last of n to arrive, which resets the counter (for
 * the next launch) and fences again, so that every counted share's effects
 * are ordered before what it does next (typically the release store of a
 * signal: the acquire half of the hand-off); 0 in the others. */
static __device__ __forceinline__ int loom__last_arrival(uint32_t *count, uint32_t n) {
  if (atomicAdd(count, 1u) + 1u != n) return 0;
  *count = 0u;
  __threadfence_system();
  return 1;
}

/* One thread per block, after the block's last use of the epoch: the last
 * block of the grid publishes `epoch` as completed. */
static __device__ __forceinline__ void loom__epoch_block_done(loom_dev_epoch_t *e, uint32_t epoch) {
  if (loom__last_arrival(&e->blocks_done, gridDim.x * gridDim.y * gridDim.z)) *(volatile uint32_t *)&e->epoch = epoch;
}

/* Address of signal word `index` of an array at byte `offset` in rank
 * `rank`'s workspace (NULL if that rank is not load/store reachable). */
static __device__ __forceinline__ uint32_t *loom_signal_addr(const loom_dev_comm_t *dc, int rank,
                                                             size_t offset, uint32_t index) {
  char *base = dc->peer_ws[rank];
  return base ? (uint32_t *)(base + offset) + index : (uint32_t *)0;
}

#endif /* LOOM_CORE_SIGNAL_CUH */
