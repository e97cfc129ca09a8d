/*
 * test_coll_protocol.c - the collectives' signal protocol (src/ops/coll/coll.h)
 * played on the host: W ranks x G blocks as actors, each running the steps
 * of its kernel (coll_kernels.cu: arrival, the arrival wait, reduction chunks
 * with their signals, gather items in loom__coll_peer_at order, the last
 * block's done, the hand-back wait, the one-shot in-place write-back) over
 * many calls, with the caller rewriting `in` between calls, under random
 * interleavings (every step atomic; the kernels' fences make their effects
 * visible in this order). Every buffer element carries the call whose data
 * it holds; the test checks that
 *  - every read of a peer's `in` sees the input of the same call (never the
 *    next call's, never an in-place result), every staging read sees the
 *    reduced data of the same call;
 *  - nothing deadlocks (some actor can always move until all calls end);
 *  - every output element is written by the call, exactly once.
 * For AllReduce one-shot and two-shot (in place or not), ReduceScatter and
 * AllGather, W = 1, 2, 3, 4, 8, counts not divisible by W or 8, 1..3 blocks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "ops/coll/coll.h"
#include "ops/coll/coll_schedule.h"

enum { K_ONE = 0, K_TWO = 1, K_RS = 2, K_AG = 3 };
enum {
  S_ARRIVE,      /* arrived[r] = e */
  S_WAIT_ALL,    /* sig[*][idx] >= e (idx: 0 arrived, 1 done) */
  S_REDUCE,      /* [a, b): read every rank's in; write out (+ staging) */
  S_SIGNAL,      /* reduced[r][j] = e */
  S_WAIT_ONE,    /* rank q's sig idx >= e (idx >= 2: reduced chunk idx - 2) */
  S_GATHER,      /* [a, b) of rank q: from its staging (two-shot) or its in (AG) into out */
  S_OWN_COPY,    /* AG: own slice in -> out */
  S_BLOCK_DONE,  /* the block count; the last sets done[r] = e */
  S_WRITEBACK    /* one-shot in place: staging -> out (= in) */
};

typedef struct step {
  int kind, q, idx;
  int64_t a, b;
  uint32_t e;    /* epoch the wait needs */
} step_t;

typedef struct sim {
  int W, G, kind, in_place, calls;
  int mutate;    /* tests of the model: 1 drops the arrival wait, 2 the hand-back wait, 3 the reduced-chunk wait */
  int64_t count, unit, chunk, nch, S;
  /* per rank: signals, buffers' versions (the call whose data they hold;
   * negative: the result of call -v) */
  uint32_t *arrived, *done, *reduced; /* reduced[r * nch + j] */
  int *in_ver, *stg_ver, *out_ver;    /* [r * count + i] */
  int *out_writes;
  int *blocks_done;
} sim_t;

/* The steps of rank r's block blk in call e (the kernel's order). */
static int build(const sim_t *s, int r, int blk, uint32_t e, step_t *st, int cap) {
  int n = 0;
#define PUSH(K, Q, I, A, B, E)                                                                      \
  do {                                                                                              \
    if (n < cap) st[n].kind = K, st[n].q = Q, st[n].idx = I, st[n].a = A, st[n].b = B, st[n].e = E; \
    n++;                                                                                            \
  } while (0)
  const int W = s->W;
  int64_t mb, ml;
  loom__coll_slice(s->count, W, r, s->unit, &mb, &ml);
  PUSH(S_ARRIVE, 0, 0, 0, 0, e);
  if (s->kind != K_AG) {
    if (s->mutate != 1) PUSH(S_WAIT_ALL, 0, 0, 0, 0, e);
    const int one = s->kind == K_ONE;
    const int64_t rb = one ? 0 : mb, rl = one ? s->count : ml;
    const int64_t nch = loom__coll_chunks(rl, s->chunk);
    for (int64_t q = blk; q < nch; q += s->G) {
      const int64_t j = one ? loom__coll_one_shot_chunk(r, W, nch, q) : q;
      int64_t cb, cl;
      loom__coll_chunk(rb, rl, s->chunk, j, &cb, &cl);
      PUSH(S_REDUCE, 0, 0, cb, cb + cl, e);
      if (s->kind == K_TWO) PUSH(S_SIGNAL, 0, (int)j, 0, 0, e);
    }
  }
  if (s->kind == K_TWO || s->kind == K_AG) {
    const int steps = s->kind == K_AG ? W : W - 1;
    for (int64_t t = blk; t < (int64_t)steps * s->nch; t += s->G) {
      int32_t i;
      int64_t j, qb, ql, cb, cl;
      loom__coll_gather_item(t, s->nch, &i, &j);
      const int q = loom__coll_peer_at(r, W, i);
      loom__coll_slice(s->count, W, q, s->unit, &qb, &ql);
      loom__coll_chunk(qb, ql, s->chunk, j, &cb, &cl);
      if (cl == 0) continue;
      if (s->kind == K_AG && q == r) {
        if (!s->in_place) PUSH(S_OWN_COPY, r, 0, cb, cb + cl, e);
        continue;
      }
      if (s->mutate != 3 || s->kind == K_AG) PUSH(S_WAIT_ONE, q, s->kind == K_AG ? 0 : 2 + (int)j, 0, 0, e);
      PUSH(S_GATHER, q, 0, cb, cb + cl, e);
    }
  }
  PUSH(S_BLOCK_DONE, 0, 0, 0, 0, e);
  if (s->kind != K_TWO) {
    if (s->mutate != 2) PUSH(S_WAIT_ALL, 0, 1, 0, 0, e);
    if (s->kind == K_ONE && s->in_place) {
      const int64_t nch = loom__coll_chunks(s->count, s->chunk);
      for (int64_t q = blk; q < nch; q += s->G) {
        int64_t cb, cl;
        loom__coll_chunk(0, s->count, s->chunk, loom__coll_one_shot_chunk(r, W, nch, q), &cb, &cl);
        PUSH(S_WRITEBACK, 0, 0, cb, cb + cl, e);
      }
    }
  }
#undef PUSH
  return n;
}

static uint32_t sigval(const sim_t *s, int q, int idx) {
  return idx == 0 ? s->arrived[q] : idx == 1 ? s->done[q] : s->reduced[(int64_t)q * s->nch + idx - 2];
}

/* Can the step run now? */
static int ready(const sim_t *s, const step_t *st) {
  if (st->kind == S_WAIT_ALL) {
    for (int p = 0; p < s->W; ++p)
      if ((int32_t)(sigval(s, p, st->idx) - st->e) < 0) return 0;
    return 1;
  }
  if (st->kind == S_WAIT_ONE) return (int32_t)(sigval(s, st->q, st->idx) - st->e) >= 0;
  return 1;
}

/* Runs the step; 0 if it read data of another call (the test fails). */
static int run_step(sim_t *s, int r, const step_t *st) {
  const int c = (int)st->e, W = s->W;
  const int64_t N = s->count;
  int64_t mb, ml;
  loom__coll_slice(N, W, r, s->unit, &mb, &ml);
  switch (st->kind) {
    case S_ARRIVE: s->arrived[r] = st->e; return 1;
    case S_SIGNAL: s->reduced[(int64_t)r * s->nch + st->idx] = st->e; return 1;
    case S_REDUCE:
      for (int64_t i = st->a; i < st->b; ++i) {
        for (int p = 0; p < W; ++p)
          if (s->in_ver[(int64_t)p * N + i] != c) return 0;
        if (s->kind == K_ONE && s->in_place) {
          s->stg_ver[(int64_t)r * N + i] = -c;
          continue;
        }
        s->out_ver[(int64_t)r * N + i] = -c;
        s->out_writes[(int64_t)r * N + i]++;
        if (s->in_place) s->in_ver[(int64_t)r * N + i] = -c; /* out is in */
        if (s->kind == K_TWO) s->stg_ver[(int64_t)r * N + (i - mb)] = -c;
      }
      return 1;
    case S_GATHER: {
      int64_t qb, ql;
      loom__coll_slice(N, W, st->q, s->unit, &qb, &ql);
      for (int64_t i = st->a; i < st->b; ++i) {
        if (s->kind == K_TWO && s->stg_ver[(int64_t)st->q * N + (i - qb)] != -c) return 0;
        if (s->kind == K_AG && s->in_ver[(int64_t)st->q * N + i] != c) return 0;
        s->out_ver[(int64_t)r * N + i] = -c;
        s->out_writes[(int64_t)r * N + i]++;
        if (s->in_place && s->kind == K_TWO) s->in_ver[(int64_t)r * N + i] = -c;
      }
      return 1;
    }
    case S_OWN_COPY:
      for (int64_t i = st->a; i < st->b; ++i) {
        if (s->in_ver[(int64_t)r * N + i] != c) return 0;
        s->out_ver[(int64_t)r * N + i] = -c;
        s->out_writes[(int64_t)r * N + i]++;
      }
      return 1;
    case S_BLOCK_DONE:
      if (++s->blocks_done[r] == s->G) {
        s->blocks_done[r] = 0;
        s->done[r] = st->e;
      }
      return 1;
    case S_WRITEBACK:
      for (int64_t i = st->a; i < st->b; ++i) {
        if (s->stg_ver[(int64_t)r * N + i] != -c) return 0;
        s->out_ver[(int64_t)r * N + i] = -c;
        s->out_writes[(int64_t)r * N + i]++;
        s->in_ver[(int64_t)r * N + i] = -c;
      }
      return 1;
    default: return 1;
  }
}

/* Plays `calls` calls; returns 0 on success, else a code saying what failed. */
static int play(int W, int G, int kind, int in_place, int64_t count, int64_t unit, int64_t chunk, uint64_t seed,
                int mutate) {
  sim_t s;
  memset(&s, 0, sizeof s);
  s.mutate = mutate;
  s.W = W, s.G = G, s.kind = kind, s.in_place = in_place, s.calls = 4, s.count = count, s.unit = unit;
  s.S = loom__coll_slice_elems(count, W, unit);
  s.chunk = chunk;
  s.nch = loom__coll_chunks(s.S, chunk);
  s.arrived = (uint32_t *)calloc((size_t)W, 4);
  s.done = (uint32_t *)calloc((size_t)W, 4);
  s.reduced = (uint32_t *)calloc((size_t)(W * (s.nch + 1)), 4);
  s.in_ver = (int *)calloc((size_t)(W * count), sizeof(int));
  s.stg_ver = (int *)calloc((size_t)(W * count), sizeof(int));
  s.out_ver = (int *)calloc((size_t)(W * count), sizeof(int));
  s.out_writes = (int *)calloc((size_t)(W * count), sizeof(int));
  s.blocks_done = (int *)calloc((size_t)W, sizeof(int));
  const int cap = 4096;
  step_t *steps = (step_t *)malloc(sizeof(step_t) * (size_t)(W * G * cap));
  int *len = (int *)calloc((size_t)(W * G), sizeof(int)), *pc = (int *)calloc((size_t)(W * G), sizeof(int));
  int *call = (int *)calloc((size_t)W, sizeof(int)); /* the call each rank runs (1-based; > calls: finished) */
  int rc = 0;
  uint64_t x = seed | 1;
  /* a rank starts call c: the caller wrote its input first (the previous call has completed on its stream) */
#define START(r)                                                                                   \
  do {                                                                                             \
    call[r]++;                                                                                     \
    if (call[r] <= s.calls) {                                                                      \
      int64_t b_, l_;                                                                              \
      loom__coll_slice(count, W, r, unit, &b_, &l_);                                                \
      for (int64_t i = 0; i < count; ++i)                                                          \
        if (kind != K_AG || (i >= b_ && i < b_ + l_)) s.in_ver[(int64_t)(r) * count + i] = call[r]; \
      for (int g = 0; g < G; ++g) {                                                                \
        len[(r) * G + g] = build(&s, r, g, (uint32_t)call[r], steps + (size_t)((r) * G + g) * cap, cap); \
        pc[(r) * G + g] = 0;                                                                       \
        if (len[(r) * G + g] > cap) rc = 9;                                                        \
      }                                                                                            \
    }                                                                                              \
  } while (0)
  for (int r = 0; r < W; ++r) START(r);
  int *cand = (int *)malloc(sizeof(int) * (size_t)(W * G));
  while (rc == 0) {
    int nc = 0, alive = 0;
    for (int a = 0; a < W * G; ++a) {
      const int r = a / G;
      if (call[r] > s.calls || pc[a] >= len[a]) continue;
      alive++;
      if (ready(&s, &steps[(size_t)a * cap + pc[a]])) cand[nc++] = a;
    }
    if (alive == 0) break;
    if (nc == 0) {
      rc = 1; /* deadlock */
      break;
    }
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const int a = cand[x % (uint64_t)nc], r = a / G;
    if (!run_step(&s, r, &steps[(size_t)a * cap + pc[a]])) {
      rc = 2; /* read another call's data */
      break;
    }
    pc[a]++;
    /* the rank's call completes once all its blocks are through: check its
     * output, then its caller starts the next call */
    int all = 1;
    for (int g = 0; g < G; ++g) all &= pc[r * G + g] >= len[r * G + g];
    if (all) {
      int64_t mb, ml;
      loom__coll_slice(count, W, r, unit, &mb, &ml);
      for (int64_t i = 0; i < count && rc == 0; ++i) {
        const int mine = kind == K_RS ? (i >= mb && i < mb + ml) : 1;
        const int want = mine && !(kind == K_AG && in_place && i >= mb && i < mb + ml) ? 1 : 0;
        if (s.out_writes[(int64_t)r * count + i] != want) rc = 3;
        if (want && s.out_ver[(int64_t)r * count + i] != -call[r]) rc = 4;
        s.out_writes[(int64_t)r * count + i] = 0;
      }
      START(r);
    }
  }
#undef START
  free(cand), free(call), free(len), free(pc), free(steps);
  free(s.arrived), free(s.done), free(s.reduced), free(s.in_ver), free(s.stg_ver), free(s.out_ver), free(s.out_writes),
      free(s.blocks_done);
  return rc;
}

LOOM_TEST(coll_protocol_no_stale_read_no_deadlock_every_output_once) {
  const int worlds[] = {1, 2, 3, 4, 8};
  const int64_t counts[] = {1, 5, 17, 40, 63};
  const char *names[] = {"one-shot", "two-shot", "reduce-scatter", "all-gather"};
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi)
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ++ci)
      for (int kind = 0; kind < 4; ++kind)
        for (int in_place = 0; in_place < 2; ++in_place)
          for (int G = 1; G <= 3; ++G)
            for (int64_t unit = 1; unit <= 3; unit += 2)
              for (int64_t chunk = unit; chunk <= 2 * unit; chunk += unit)
                for (uint64_t seed = 1; seed <= 4; ++seed) {
                  const int W = worlds[wi];
                  int64_t count = counts[ci];
                  if (unit > 1) count = (count / unit + 1) * unit; /* rows */
                  const int rc = play(W, G, kind, in_place, count, unit, chunk, seed * 0x9e3779b97f4a7c15ull + W, 0);
                  if (rc)
                    loom_test_fail(__FILE__, __LINE__,
                                   "%s%s W=%d G=%d count=%lld unit=%lld chunk=%lld seed %llu: %s", names[kind],
                                   in_place ? " in place" : "", W, G, (long long)count, (long long)unit,
                                   (long long)chunk, (unsigned long long)seed,
                                   rc == 1   ? "deadlock"
                                   : rc == 2 ? "read data of another call"
                                   : rc == 3 ? "an output element not written exactly once"
                                   : rc == 4 ? "an output element of another call"
                                             : "step list overflow");
                }
}

/* The model can fail: without the arrival wait a rank reads a peer's input
 * before the peer's caller wrote it (or, two-shot, rewrites its staging
 * while a slow peer still reads it); without the hand-back wait the caller
 * rewrites `in` while a peer still reads it; without the reduced-chunk wait
 * a rank fetches a chunk before its owner reduced it. Some interleaving
 * shows each. */
LOOM_TEST(coll_protocol_model_catches_a_missing_wait) {
  for (int mutate = 1; mutate <= 3; ++mutate)
    for (int kind = 0; kind < 4; ++kind) {
      if (mutate == 1 && kind == K_AG) continue;                   /* no reduction */
      if (mutate == 2 && kind == K_TWO) continue;                  /* no hand-back wait */
      if (mutate == 3 && kind != K_TWO) continue;                  /* only two-shot waits on chunks */
      int caught = 0;
      for (uint64_t seed = 1; seed <= 400 && !caught; ++seed)
        caught = play(2 + (int)(seed % 2), 1 + (int)(seed % 3), kind, 0, 40, 1, 4, seed * 0x9e3779b97f4a7c15ull,
                      mutate) != 0;
      if (!caught) loom_test_fail(__FILE__, __LINE__, "mutation %d of kind %d went unnoticed", mutate, kind);
    }
}
