/*
 * optim_schedule.h - who updates which elements of which tensor, for the
 * distributed optimizers (loom_adam_step, loom_lamb_step): the pure
 * functions, usable from host C (host tests at any world size) and device
 * code. Nothing here allocates or fails.
 *
 * Tensors. A plan holds a list of T tensors (parameter t and its gradient
 * have n_t >= 1 elements each), never copied into one buffer. Each tensor
 * takes one of two forms (CoCoNet's schedules, paper 6.1):
 *   RS (RS-Opt-AG)  the tensor is cut into W slices of
 *                   S = roundup(ceil(n / W), LOOM_OPTIM_VEC) elements: rank
 *                   p owns [min(n, p S), min(n, (p+1) S)) (the last slices
 *                   may be short or empty: a tensor smaller than W
 *                   LOOM_OPTIM_VEC elements lives on the first ranks). The
 *                   owner sums its slice of the gradient over all ranks,
 *                   updates it with its sharded state and stores the new
 *                   parameters into every rank's copy.
 *   AR (AR-Opt)     every rank sums the whole gradient over all ranks and
 *                   updates the whole tensor (replicated state, no stores
 *                   into peers).
 * Slices start at multiples of LOOM_OPTIM_VEC elements, so that 16-byte
 * vectors of a tensor never straddle two owners.
 *
 * Chunks (CoCoNet's buckets, paper 5.2). What a rank updates is cut into
 * chunks of at most C elements (C a multiple of LOOM_OPTIM_VEC): RS: its
 * slice of each RS tensor from the slice start, AR: each AR tensor from 0.
 * A chunk record carries the tensor, the first element, the length and the
 * index of its first element in the rank's state arrays, so a block that
 * takes chunk j finds its tensor and offset in one load (no search).
 * The rank's chunk list is tensor-major, then by offset.
 *
 * State. This rank's fp32 state arrays (exp_avg, exp_avg_sq and the master
 * weights) hold, for each tensor in order, its RS slice (hi - lo elements)
 * or the whole AR tensor, each tensor's part starting at a multiple of
 * LOOM_OPTIM_VEC elements.
 *
 * Global chunks (LAMB's per-tensor norms). The chunks of every rank of a
 * tensor, in rank order (RS) or the one rank-independent list (AR), form
 * the tensor's global chunk list; the tensors' lists in tensor order form
 * the global list. Each rank writes the partial sums (||w||^2, ||u||^2) of
 * its chunks at their global index; a tensor's norms are the sum of its
 * global list in that order (the same order, so the same bits, on every
 * rank).
 */
#ifndef LOOM_OPS_OPTIM_SCHEDULE_H
#define LOOM_OPS_OPTIM_SCHEDULE_H

#include <stdint.h>
#include "core/util.h" /* LOOM_HD, loom__ceil_div */

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_OPTIM_VEC 8            /* elements per vector (16 bytes of bf16/fp16, 32 of fp32) */
#define LOOM_OPTIM_CHUNK_DEFAULT 4096
#define LOOM_OPTIM_AR_AUTO_MAX 4096 /* LOOM_OPTIM_AUTO: tensors of at most this many elements take AR */

/* One chunk of a rank's work (32 bytes; the kernels' table). */
typedef struct loom_optim_chunk {
  int64_t offset;  /* first element in the tensor */
  int64_t state;   /* index of that element in this rank's state arrays */
  int32_t tensor;
  int32_t len;     /* elements, 1..C */
  int32_t global;  /* index in the global chunk list */
  int32_t flags;   /* LOOM_OPTIM_CHUNK_* */
} loom_optim_chunk_t;

#define LOOM_OPTIM_CHUNK_PUSH 1u /* RS: the new parameters go into every rank's copy */
#define LOOM_OPTIM_CHUNK_VEC 2u  /* the tensor's pointers (every rank's) are 16-byte aligned */

LOOM_HD int64_t loom__optim_round_vec(int64_t n) { return loom__ceil_div(n, LOOM_OPTIM_VEC) * LOOM_OPTIM_VEC; }

/* S: elements per slice of an RS tensor of n elements on W ranks. */
LOOM_HD int64_t loom__optim_slice_elems(int64_t n, int32_t world) {
  return loom__optim_round_vec(loom__ceil_div(n, world < 1 ? 1 : world));
}

/* Rank p's slice [*lo, *hi) of an RS tensor (empty: *lo == *hi == n). */
LOOM_HD void loom__optim_slice(int64_t n, int32_t world, int32_t p, int64_t *lo, int64_t *hi) {
  const int64_t S = loom__optim_slice_elems(n, world);
  int64_t a = (int64_t)p * S, b = a + S;
  if (a > n) a = n;
  if (b > n) b = n;
  *lo = a;
  *hi = b;
}

/* The owner of element e of an RS tensor. */
LOOM_HD int32_t loom__optim_owner(int64_t n, int32_t world, int64_t e) {
  return (int32_t)(e / loom__optim_slice_elems(n, world));
}

/* The range rank p updates: its slice (RS) or the whole tensor (AR). */
LOOM_HD void loom__optim_rank_range(int64_t n, int32_t world, int32_t p, int ar, int64_t *lo, int64_t *hi) {
  if (ar) {
    *lo = 0;
    *hi = n;
  } else {
    loom__optim_slice(n, world, p, lo, hi);
  }
}

/* Chunks of rank p in one tensor. */
LOOM_HD int64_t loom__optim_rank_chunks(int64_t n, int32_t world, int32_t p, int ar, int64_t chunk) {
  int64_t lo, hi;
  loom__optim_rank_range(n, world, p, ar, &lo, &hi);
  return loom__ceil_div(hi - lo, chunk);
}

/* Chunks of a tensor in the global list. */
LOOM_HD int64_t loom__optim_tensor_global_chunks(int64_t n, int32_t world, int ar, int64_t chunk) {
  if (ar) return loom__ceil_div(n, chunk);
  int64_t total = 0;
  for (int32_t p = 0; p < world; ++p) total += loom__optim_rank_chunks(n, world, p, 0, chunk);
  return total;
}

/* Index, in the tensor's global list, of chunk j of rank p. */
LOOM_HD int64_t loom__optim_global_index(int64_t n, int32_t world, int32_t p, int ar, int64_t chunk, int64_t j) {
  if (ar) return j;
  /* every slice before p is full (S elements) unless the tensor ended */
  int64_t before = 0;
  for (int32_t q = 0; q < p; ++q) before += loom__optim_rank_chunks(n, world, q, 0, chunk);
  return before + j;
}

/* The chunk of rank p (its index j in that rank's list of the tensor) that
 * updates element e, or -1 if rank p does not update e. */
LOOM_HD int64_t loom__optim_chunk_of(int64_t n, int32_t world, int32_t p, int ar, int64_t chunk, int64_t e) {
  int64_t lo, hi;
  loom__optim_rank_range(n, world, p, ar, &lo, &hi);
  if (e < lo || e >= hi) return -1;
  return (e - lo) / chunk;
}

/* This rank's state elements of one tensor (rounded up to a vector). */
LOOM_HD int64_t loom__optim_rank_state(int64_t n, int32_t world, int32_t p, int ar) {
  int64_t lo, hi;
  loom__optim_rank_range(n, world, p, ar, &lo, &hi);
  return loom__optim_round_vec(hi - lo);
}

/* The form of a tensor: 1 AR, 0 RS. form: 0 auto, 1 RS everywhere, 2 AR
 * everywhere (loom_optim_form_t). */
LOOM_HD int loom__optim_tensor_is_ar(int form, int64_t n) {
  return form == 2 || (form == 0 && n <= LOOM_OPTIM_AR_AUTO_MAX);
}

/* Rank p's chunk list over T tensors (numel[T], ar[T]: 1 for AR), written
 * into out[] when out is not NULL; returns the count. vec[T] (or NULL: 0)
 * sets LOOM_OPTIM_CHUNK_VEC. state_off[T] (or NULL) receives where each
 * tensor's part of the state starts, *state_elems (or NULL) the total. */
LOOM_HD int64_t loom__optim_build_chunks(int32_t T, const int64_t *numel, const int *ar, const int *vec,
                                        int32_t world, int32_t p, int64_t chunk, loom_optim_chunk_t *out,
                                        int64_t *state_off, int64_t *state_elems) {
  int64_t count = 0, state = 0, global = 0;
  for (int32_t t = 0; t < T; ++t) {
    const int64_t n = numel[t];
    int64_t lo, hi;
    loom__optim_rank_range(n, world, p, ar[t], &lo, &hi);
    const int64_t nch = loom__ceil_div(hi - lo, chunk);
    const int64_t g0 = global + loom__optim_global_index(n, world, p, ar[t], chunk, 0);
    if (state_off) state_off[t] = state;
    for (int64_t j = 0; j < nch; ++j, ++count) {
      if (!out) continue;
      loom_optim_chunk_t c;
      c.offset = lo + j * chunk;
      c.len = (int32_t)((hi - c.offset) < chunk ? (hi - c.offset) : chunk);
      c.state = state + j * chunk;
      c.tensor = t;
      c.global = (int32_t)(g0 + j);
      c.flags = (ar[t] ? 0 : (int32_t)LOOM_OPTIM_CHUNK_PUSH) | (vec && vec[t] ? (int32_t)LOOM_OPTIM_CHUNK_VEC : 0);
      out[count] = c;
    }
    state += loom__optim_round_vec(hi - lo);
    global += loom__optim_tensor_global_chunks(n, world, ar[t], chunk);
  }
  if (state_elems) *state_elems = state;
  return count;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_OPTIM_SCHEDULE_H */
