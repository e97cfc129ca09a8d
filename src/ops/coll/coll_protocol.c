/*
 * coll_protocol.c - the collectives' protocol in the form of
 * core/protocol.h, built from the functions coll_kernels.cu takes its
 * schedule from (coll_schedule.h: slices, chunks, the one-shot rotation,
 * gather items in loom__coll_peer_at order, LL's lines and PUSH's slots),
 * so the same builder serves the checkers at two ranks and the host tests
 * at sixteen. The protocol is coll.h's:
 *
 *   one-shot, two-shot, ReduceScatter, AllGather (loom__coll_kernel), out
 *     of place and in place (coll.c's check_in_out: AllReduce out == in,
 *     ReduceScatter out = the own slice of in, AllGather in = the own slice
 *     of out; one-shot in place reduces into the staging buffer and copies
 *     it back after the hand-back wait): arrived = e (the input is
 *     readable), the waits for every peer's arrival, the reads of every
 *     rank's input chunk by chunk (one-shot: the whole vector, rank-shifted
 *     start; two-shot and ReduceScatter: the own slice), two-shot's staging
 *     and reduced[j] signals and gather items in loom__coll_peer_at order
 *     (AllGather: each after the owner's arrival), done = e and the
 *     hand-back wait for every peer's done.
 *   AllReduce LL and PUSH (loom__coll_ll_kernel, loom__coll_push_kernel),
 *   and the slices' LL (loom__coll_ll_slices_kernel: ReduceScatter pushes
 *   each peer's slice of its input, AllGather its own slice to every peer):
 *     the input stored into every peer's slot of the call's parity with its
 *     flags (LL: a flag in every line; PUSH: one per chunk, after the
 *     chunk's stores), the reduction from the own memory as the flags
 *     arrive; no arrival, no done: what protects a slot's reuse is the
 *     parity, so one list is two kernel calls, epochs 2c - 1 (parity 1) and
 *     2c (parity 0) of the checker's call c, each parity's flags holding c;
 *     the checker's two calls are four kernel calls, the third rewriting the
 *     first one's slots. The "consumed" handshake is the reverse
 *     direction's flags: sender s writes q's slots of call e + 2 after its
 *     call e + 1 waited for q's words of e + 1, which q pushed after its
 *     reads of call e.
 *
 * Blocks. Every block of the grid is an actor (G of them per rank; with
 * one, the block and the caller are one list). With G > 1 the caller's
 * stream is an actor of its own: it writes `in`, launches (a local SET the
 * blocks wait for) and, after every block's exit (local SETs it waits
 * for), reads the result. Each block signals arrived in the kernel; block
 * 0 stands for them here (every block starts after the launch, so the
 * first arrival orders no more and no less than any other). The last
 * block to finish sets done; here every block sets its own slot of done
 * and a wait for a rank's done waits for every slot (the same order: the
 * last arrival comes after every block's stores). A rank's waits for its
 * own arrival, and a block's for its own done, are program order and left
 * out. Regions are element indices of the whole vector (staging and a
 * ReduceScatter's out included, whatever offset the kernel addresses them
 * at); LL's box is indexed by line (coll_schedule.h), PUSH's by (parity,
 * slot) x count + element. LL's lines are the flat form's (group g on block
 * (g / LOOM_COLL_THREADS) mod G); a line is {word, flag} in one 8-byte
 * store, modelled as the WRITE of the group's lines and the SET of its
 * flag right after it, and the reader's 8-byte loads that find the flags as
 * the WAIT and the READ, sender by sender in rank order.
 */
#include <stdio.h>
#include <string.h>

#include "ops/coll/coll_protocol.h"
#include "ops/coll/coll_schedule.h"

const loom__proto_signal_t loom__coll_signals[LOOM__COLL_NSIG] = {
    [LOOM__COLL_PS_ARRIVED] = {"arrived", LOOM_SITE_COLL_ARRIVED,
                               "collective: a peer's input readable (its call started)"},
    [LOOM__COLL_PS_REDUCED] = {"reduced", LOOM_SITE_COLL_REDUCED, "AllReduce two-shot: a peer's reduced chunk"},
    [LOOM__COLL_PS_DONE] = {"done", LOOM_SITE_COLL_DONE, "collective: a peer still reading this rank's buffers"},
    [LOOM__COLL_PS_LINE] = {"line", LOOM_SITE_COLL_LL, "AllReduce LL: a peer's pushed words (signal = the line)"},
    [LOOM__COLL_PS_FLAG] = {"flag", LOOM_SITE_COLL_PUSH,
                            "AllReduce PUSH: a peer's chunk stored into this rank (signal = the chunk)"},
    [LOOM__COLL_PS_LAUNCH] = {"launch", 0, NULL},
    [LOOM__COLL_PS_EXIT] = {"exit", 0, NULL},
};

/* The builder's state: the spec, buffer and signal ids. */
typedef struct coll_pb {
  loom__proto_t *p;
  const loom__coll_proto_t *s;
  int W, G, kind, ip;
  int in, out, stg, box; /* the input, the result, the staging, LL's / PUSH's buffer */
  int sig[LOOM__COLL_NSIG];
} coll_pb_t;

/* The actor of block b of rank r. */
static int coll_block(const coll_pb_t *c, int r, int b) { return c->G == 1 ? r : c->W + r * c->G + b; }

static void coll_write(coll_pb_t *c, int a, int owner, int buf, int64_t lo, int64_t hi) {
  if (hi > lo) loom__proto_write(c->p, a, owner, buf, (int)lo, (int)hi);
}
static void coll_read(coll_pb_t *c, int a, int owner, int buf, int64_t lo, int64_t hi) {
  if (hi > lo) loom__proto_read(c->p, a, owner, buf, (int)lo, (int)hi);
}
/* LL: a group's lines, from line l0 of its slot (loom__coll_ll_line: a
 * pair at a time, the pairs a tile apart), read or written. */
static void coll_group_lines(coll_pb_t *c, int a, int owner, int write, int64_t l0, int64_t g, int64_t nl) {
  for (int64_t k = 0; k < nl; k += 2) {
    const int64_t l = l0 + loom__coll_ll_line(g, k, nl);
    if (write) coll_write(c, a, owner, c->box, l, l + 2);
    else coll_read(c, a, owner, c->box, l, l + 2);
  }
}
/* The id of the table's signal i (declared on first use: a protocol has the signals it uses). */
static int coll_sig(coll_pb_t *c, int i) {
  if (c->sig[i] < 0) c->sig[i] = loom__proto_sig_of(c->p, &loom__coll_signals[i]);
  return c->sig[i];
}
static void coll_set(coll_pb_t *c, int a, int owner, int sig, int64_t slot) {
  loom__proto_set(c->p, a, owner, coll_sig(c, sig), (int)slot, 0);
}
static void coll_wait(coll_pb_t *c, int a, int owner, int sig, int64_t slot) {
  loom__proto_wait(c->p, a, owner, coll_sig(c, sig), (int)slot, 0);
}

/* The reduction (AllReduce, ReduceScatter) of block b of rank r: the
 * arrival waits, then its chunks of the span. */
static void coll_reduce(coll_pb_t *c, int r, int b) {
  const loom__coll_proto_t *s = c->s;
  const int W = c->W, a = coll_block(c, r, b), one = c->kind == LOOM__CK_ONE_SHOT, two = c->kind == LOOM__CK_TWO_SHOT;
  int64_t mb, ml;
  loom__coll_slice(s->count, W, r, s->unit, &mb, &ml);
  for (int i = 0; i < W - 1; ++i) coll_wait(c, a, (r + 1 + i) % W, LOOM__COLL_PS_ARRIVED, 0);
  const int64_t rb = one ? 0 : mb, rl = one ? s->count : ml, nch = loom__coll_chunks(rl, s->chunk);
  const int d0 = one && c->ip && W > 1 ? c->stg : c->out;
  for (int64_t q = b; q < nch; q += c->G) {
    const int64_t j = one ? loom__coll_one_shot_chunk(r, W, nch, q) : q;
    int64_t cb, cl;
    loom__coll_chunk(rb, rl, s->chunk, j, &cb, &cl);
    for (int src = 0; src < W; ++src) coll_read(c, a, src, c->in, cb, cb + cl);
    coll_write(c, a, r, d0, cb, cb + cl);
    if (two && W > 1) coll_write(c, a, r, c->stg, cb, cb + cl);
    if (two) coll_set(c, a, r, LOOM__COLL_PS_REDUCED, j);
  }
}

/* The gather (two-shot, AllGather) of block b of rank r: its items. */
static void coll_gather(coll_pb_t *c, int r, int b) {
  const loom__coll_proto_t *s = c->s;
  const int W = c->W, a = coll_block(c, r, b), ag = c->kind == LOOM__CK_AG;
  const int64_t nch = loom__coll_chunks(loom__coll_slice_elems(s->count, W, s->unit), s->chunk);
  const int64_t items = (int64_t)(ag ? W : W - 1) * nch;
  for (int64_t t = b; t < items; t += c->G) {
    int32_t i;
    int64_t j, qb, ql, cb, cl;
    loom__coll_gather_item(t, nch, &i, &j);
    const int q = loom__coll_peer_at(r, W, i);
    loom__coll_slice(s->count, W, q, s->unit, &qb, &ql);
    loom__coll_chunk(qb, ql, s->chunk, j, &cb, &cl);
    if (cl == 0) continue;
    if (ag && q == r) { /* the own slice (in place: already there) */
      if (!c->ip) coll_read(c, a, r, c->in, cb, cb + cl), coll_write(c, a, r, c->out, cb, cb + cl);
      continue;
    }
    coll_wait(c, a, q, ag ? LOOM__COLL_PS_ARRIVED : LOOM__COLL_PS_REDUCED, ag ? 0 : j);
    coll_read(c, a, q, ag ? c->in : c->stg, cb, cb + cl);
    coll_write(c, a, r, c->out, cb, cb + cl);
  }
}

/* Block b of rank r, one call of loom__coll_kernel (coll.h's steps 1-5). */
static void coll_block_main(coll_pb_t *c, int r, int b) {
  const loom__coll_proto_t *s = c->s;
  const int W = c->W, G = c->G, a = coll_block(c, r, b), two = c->kind == LOOM__CK_TWO_SHOT;
  if (b == 0) coll_set(c, a, r, LOOM__COLL_PS_ARRIVED, 0);
  if (c->kind != LOOM__CK_AG) coll_reduce(c, r, b);
  if (two || c->kind == LOOM__CK_AG) coll_gather(c, r, b);
  if (two) return; /* (it sets done too, which no peer waits for: left out) */
  coll_set(c, a, r, LOOM__COLL_PS_DONE, b);
  for (int i = 0; i < W; ++i) /* the hand-back: every rank's done, every block's slot */
    for (int b2 = 0; b2 < G; ++b2)
      if ((r + 1 + i) % W != r || b2 != b) coll_wait(c, a, (r + 1 + i) % W, LOOM__COLL_PS_DONE, b2);
  if (c->kind != LOOM__CK_ONE_SHOT || !c->ip || W == 1) return;
  const int64_t nch = loom__coll_chunks(s->count, s->chunk);
  for (int64_t q = b; q < nch; q += G) { /* one-shot in place: the result copied back */
    int64_t cb, cl;
    loom__coll_chunk(0, s->count, s->chunk, loom__coll_one_shot_chunk(r, W, nch, q), &cb, &cl);
    coll_read(c, a, r, c->stg, cb, cb + cl);
    coll_write(c, a, r, c->out, cb, cb + cl);
  }
}

/* LL, block b of rank r, one kernel call on `parity`: its groups pushed
 * into every peer, then reduced as the lines arrive. */
static void coll_block_ll(coll_pb_t *c, int r, int b, int parity) {
  const loom__coll_proto_t *s = c->s;
  const int W = c->W, a = coll_block(c, r, b);
  const int64_t es = s->esize ? s->esize : 4, nl = loom__coll_ll_group_lines(es);
  const int64_t groups = loom__ceil_div(s->count, LOOM_COLL_VEC), lines = loom__coll_ll_slot_lines(s->count, es);
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t g = 0; g < groups; ++g) {
      if ((g / LOOM_COLL_THREADS) % c->G != b) continue;
      const int64_t e0 = g * LOOM_COLL_VEC, e1 = e0 + LOOM_COLL_VEC < s->count ? e0 + LOOM_COLL_VEC : s->count;
      if (pass == 0 && W > 1) coll_read(c, a, r, c->in, e0, e1);
      for (int i = 1; pass == 0 && i < W; ++i) {
        const int q = (r + i) % W, slot = loom__coll_push_slot(r, q, W);
        const int64_t l0 = loom__coll_ll_line0((uint32_t)parity, slot, W, lines);
        coll_group_lines(c, a, q, 1, l0, g, nl);
        coll_set(c, a, q, LOOM__COLL_PS_LINE, loom__coll_push_region((uint32_t)parity, slot, W) * groups + g);
      }
      for (int src = 0; pass == 1 && src < W; ++src) { /* the sum in rank order */
        const int slot = loom__coll_push_slot(src, r, W);
        const int64_t l0 = loom__coll_ll_line0((uint32_t)parity, slot, W, lines);
        if (src == r) {
          coll_read(c, a, r, c->in, e0, e1);
          continue;
        }
        coll_wait(c, a, r, LOOM__COLL_PS_LINE, loom__coll_push_region((uint32_t)parity, slot, W) * groups + g);
        coll_group_lines(c, a, r, 0, l0, g, nl);
      }
      if (pass == 1) coll_write(c, a, r, c->out, e0, e1);
    }
}

/* The slices' LL (ReduceScatter, AllGather), block b of rank r, one kernel
 * call on `parity`: its groups of each peer's slice (ReduceScatter: of its
 * input) or of its own slice (AllGather) pushed into the peer's slot; then
 * its groups of the own slice reduced over the senders in rank order
 * (ReduceScatter), or of every sender's slice stored into `out` as the
 * lines arrive (AllGather; the own slice from `in` unless in place). */
static void coll_block_ll_slices(coll_pb_t *c, int r, int b, int parity) {
  const loom__coll_proto_t *s = c->s;
  const int W = c->W, a = coll_block(c, r, b), ag = c->kind == LOOM__CK_LL_AG;
  const int64_t es = s->esize ? s->esize : 4, nl = loom__coll_ll_group_lines(es);
  const int64_t S = loom__coll_slice_elems(s->count, W, s->unit), gs = loom__ceil_div(S, LOOM_COLL_VEC);
  const int64_t lines = loom__coll_ll_slot_lines(S, es);
  int64_t xb[LOOM__PROTO_MAXW], xl[LOOM__PROTO_MAXW]; /* every rank's slice */
  for (int q = 0; q < W; ++q) loom__coll_slice(s->count, W, q, s->unit, &xb[q], &xl[q]);
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t g = 0; g < gs; ++g) {
      if ((g / LOOM_COLL_THREADS) % c->G != b) continue;
      for (int i = 1; pass == 0 && i < W; ++i) { /* the pushes, peers in rank-shifted order */
        const int q = (r + i) % W, slot = loom__coll_push_slot(r, q, W), from = ag ? r : q;
        if (g * LOOM_COLL_VEC >= xl[from]) continue;
        const int64_t e0 = xb[from] + g * LOOM_COLL_VEC, e1 = e0 + LOOM_COLL_VEC < xb[from] + xl[from]
                                                                    ? e0 + LOOM_COLL_VEC : xb[from] + xl[from];
        const int64_t l0 = loom__coll_ll_line0((uint32_t)parity, slot, W, lines);
        coll_read(c, a, r, c->in, e0, e1);
        coll_group_lines(c, a, q, 1, l0, g, nl);
        coll_set(c, a, q, LOOM__COLL_PS_LINE, loom__coll_push_region((uint32_t)parity, slot, W) * gs + g);
      }
      for (int src = 0; pass == 1 && src < W; ++src) { /* the receipt, senders in rank order */
        const int at = ag ? src : r;
        if (g * LOOM_COLL_VEC >= xl[at]) continue;
        const int64_t e0 = xb[at] + g * LOOM_COLL_VEC,
                      e1 = e0 + LOOM_COLL_VEC < xb[at] + xl[at] ? e0 + LOOM_COLL_VEC : xb[at] + xl[at];
        const int slot = loom__coll_push_slot(src, r, W);
        const int64_t l0 = loom__coll_ll_line0((uint32_t)parity, slot, W, lines);
        if (src == r) {
          if (!(ag && c->ip)) coll_read(c, a, r, c->in, e0, e1);
        } else {
          coll_wait(c, a, r, LOOM__COLL_PS_LINE, loom__coll_push_region((uint32_t)parity, slot, W) * gs + g);
          coll_group_lines(c, a, r, 0, l0, g, nl);
        }
        if (ag && !(src == r && c->ip)) coll_write(c, a, r, c->out, e0, e1);
        if (!ag && src == W - 1) coll_write(c, a, r, c->out, e0, e1);
      }
    }
}

/* PUSH, block b of rank r, one kernel call on `parity`: its chunks stored
 * into every peer's slot, then flagged; then reduced as the flags arrive. */
static void coll_block_push(coll_pb_t *c, int r, int b, int parity) {
  const loom__coll_proto_t *s = c->s;
  const int W = c->W, a = coll_block(c, r, b);
  const int64_t nch = loom__coll_chunks(s->count, s->chunk);
  for (int64_t q = b; W > 1 && q < nch; q += c->G) {
    int64_t cb, cl;
    loom__coll_chunk(0, s->count, s->chunk, q, &cb, &cl);
    coll_read(c, a, r, c->in, cb, cb + cl);
    for (int i = 1; i < W; ++i) {
      const int64_t region = loom__coll_push_region((uint32_t)parity, loom__coll_push_slot(r, (r + i) % W, W), W);
      coll_write(c, a, (r + i) % W, c->box, region * s->count + cb, region * s->count + cb + cl);
    }
    for (int i = 1; i < W; ++i)
      coll_set(c, a, (r + i) % W, LOOM__COLL_PS_FLAG,
               loom__coll_push_region((uint32_t)parity, loom__coll_push_slot(r, (r + i) % W, W), W) * nch + q);
  }
  for (int64_t q = b; q < nch; q += c->G) {
    int64_t cb, cl;
    loom__coll_chunk(0, s->count, s->chunk, q, &cb, &cl);
    for (int src = 0; src < W; ++src)
      if (src != r) {
        const int64_t region = loom__coll_push_region((uint32_t)parity, loom__coll_push_slot(src, r, W), W);
        coll_wait(c, a, r, LOOM__COLL_PS_FLAG, region * nch + q);
      }
    for (int src = 0; src < W; ++src) {
      const int64_t base = loom__coll_push_region((uint32_t)parity, loom__coll_push_slot(src, r, W), W) * s->count;
      if (src == r) coll_read(c, a, r, c->in, cb, cb + cl);
      else coll_read(c, a, r, c->box, base + cb, base + cb + cl);
    }
    coll_write(c, a, r, c->out, cb, cb + cl);
  }
}

/* The caller's input of rank r (AllGather: its slice), before the call. */
static void coll_caller_in(coll_pb_t *c, int r) {
  int64_t mb, ml;
  loom__coll_slice(c->s->count, c->W, r, c->s->unit, &mb, &ml);
  if (c->kind == LOOM__CK_AG || c->kind == LOOM__CK_LL_AG) coll_write(c, r, r, c->in, mb, mb + ml);
  else coll_write(c, r, r, c->in, 0, c->s->count);
}

/* The caller's use of rank r's result (ReduceScatter: its slice), after the call. */
static void coll_caller_out(coll_pb_t *c, int r) {
  int64_t mb, ml;
  loom__coll_slice(c->s->count, c->W, r, c->s->unit, &mb, &ml);
  if (c->kind == LOOM__CK_RS || c->kind == LOOM__CK_LL_RS) coll_read(c, r, r, c->out, mb, mb + ml);
  else coll_read(c, r, r, c->out, 0, c->s->count);
}

/* Rank r's kernel call h of a protocol call (LL, PUSH: two, parities 1 and
 * 0), with the caller's stores before and loads after it. */
static void coll_call(coll_pb_t *c, int r, int h) {
  const int G = c->G, parity = c->s->one_parity ? 0 : 1 - h;
  coll_caller_in(c, r);
  if (G > 1) coll_set(c, r, r, LOOM__COLL_PS_LAUNCH, h);
  for (int b = 0; b < G; ++b) {
    if (G > 1) coll_wait(c, coll_block(c, r, b), r, LOOM__COLL_PS_LAUNCH, h);
    if (c->kind == LOOM__CK_LL) coll_block_ll(c, r, b, parity);
    else if (c->kind == LOOM__CK_LL_RS || c->kind == LOOM__CK_LL_AG) coll_block_ll_slices(c, r, b, parity);
    else if (c->kind == LOOM__CK_PUSH) coll_block_push(c, r, b, parity);
    else coll_block_main(c, r, b);
    if (G > 1) coll_set(c, coll_block(c, r, b), r, LOOM__COLL_PS_EXIT, (int64_t)h * G + b);
  }
  for (int b = 0; G > 1 && b < G; ++b) coll_wait(c, r, r, LOOM__COLL_PS_EXIT, (int64_t)h * G + b);
  coll_caller_out(c, r);
}

static const char *coll_proto_name(int kind, int ip) {
  static const char *names[2][LOOM__CK_KINDS] = {
      {"allreduce_one_shot", "allreduce_two_shot", "reduce_scatter", "all_gather", "allreduce_ll", "allreduce_push",
       "reduce_scatter_ll", "all_gather_ll"},
      {"allreduce_one_shot_ip", "allreduce_two_shot_ip", "reduce_scatter_ip", "all_gather_ip", "allreduce_ll_ip",
       "allreduce_push_ip", "reduce_scatter_ll_ip", "all_gather_ll_ip"}};
  return kind >= 0 && kind < LOOM__CK_KINDS ? names[ip ? 1 : 0][kind] : "collective";
}

/* The kinds that push into the peers' buffers on two parities (two kernel calls per protocol call). */
static int coll_pushes(int kind) {
  return kind == LOOM__CK_LL || kind == LOOM__CK_PUSH || kind == LOOM__CK_LL_RS || kind == LOOM__CK_LL_AG;
}

/* Buffers and signals of c's kind (names from the table). */
static void coll_names(coll_pb_t *c) {
  loom__proto_t *p = c->p;
  const int ag = c->kind == LOOM__CK_AG || c->kind == LOOM__CK_LL_AG, res_in = c->ip && !ag;
  c->out = loom__proto_buf(p, res_in ? "in" : "out");
  c->in = ag && c->ip ? c->out : loom__proto_buf(p, "in");
  c->stg = (c->kind == LOOM__CK_TWO_SHOT || (c->kind == LOOM__CK_ONE_SHOT && c->ip)) && c->W > 1
               ? loom__proto_buf(p, "staging") : -1;
  c->box = c->kind == LOOM__CK_LL || c->kind == LOOM__CK_LL_RS || c->kind == LOOM__CK_LL_AG ? loom__proto_buf(p, "ll")
           : c->kind == LOOM__CK_PUSH ? loom__proto_buf(p, "push")
                                      : -1;
  loom__proto_once(p, c->out);
  for (int i = 0; i < LOOM__COLL_NSIG; ++i) c->sig[i] = -1;
}

void loom__coll_protocol(const loom__coll_proto_t *s, loom__proto_t *p) {
  coll_pb_t c;
  memset(&c, 0, sizeof c);
  c.p = p, c.s = s, c.W = s->world, c.G = s->blocks, c.kind = s->kind, c.ip = s->in_place;
  loom__proto_init(p, coll_proto_name(s->kind, s->in_place), s->world);
  if (p->overflow || c.G < 1 || (c.G > 1 && c.W * (c.G + 1) > LOOM__PROTO_MAXACT) || s->count < 1 || s->unit < 1 ||
      s->chunk < s->unit || s->chunk % s->unit != 0 || s->kind < LOOM__CK_ONE_SHOT || s->kind >= LOOM__CK_KINDS) {
    p->overflow = 1;
    return;
  }
  coll_names(&c);
  for (int r = 0; c.G > 1 && r < c.W; ++r)
    for (int b = 0; b < c.G; ++b) loom__proto_actor(p, r);
  const int kcalls = coll_pushes(c.kind) ? 2 : 1;
  for (int r = 0; r < c.W; ++r)
    for (int h = 0; h < kcalls; ++h) coll_call(&c, r, h);
}
