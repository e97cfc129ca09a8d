/*
 * tp_protocol.c - the tensor-parallel ops' protocols in the form of
 * core/protocol.h, each as its kernels run it (tp_linear.h and
 * tp_schedule.h say why each signal is there; the orders are
 * tp_schedule.h's). Regions are per rank shards (region q: the rows rank q
 * owns; the tiles of a shard behave alike); one block per rank.
 *
 *   GEMM + ReduceScatter: the begin kernel's wait for every peer's done of
 *     the previous call, the partial tiles in RANK_SHIFTED order (shard
 *     r + 1 first), each then signalled to its owner, the owner's waits for
 *     the W sources, its reads of their partials, done[owner] = e into
 *     every source. GEMM + AllReduce adds the owners' stores into every
 *     rank's out and the gathered signals. The side stream is a second
 *     actor of the rank, forked after the begin kernel and joined before
 *     the call ends (fork / join: events); the RS tail's share of the
 *     reduction is drawn on the side stream.
 *   AllGather + GEMM: ready = e into every peer, pushes in ring order after
 *     the destination's ready (loom__ag_push_dest), chunk signals, the
 *     GEMM's prologue waits in arrival order (loom__ag_arrival_src).
 *   GEMM + ReduceScatter by bulk adds (LOOM_TP_BULK_REDUCE, rs_engine.c's
 *     rs_bulk, one stream): the begin kernel's done waits, the GEMM's ADDs
 *     into every owner's sum buffer (striped: peers first, its own last),
 *     the owner pass's pushed = e into every peer and its waits for every
 *     peer's pushed, its READ of its sum, the WRITEs of out and of the
 *     zeroed sum, done = e into every peer. The sum buffer is zero before
 *     the first call (plan creation, not a step).
 */
#include "ops/tp/tp_protocol.h"
#include "gemm/gemm.h"             /* LOOM_SITE_GEMM_PROLOGUE */
#include "ops/tp/tp_linear.h"      /* the wait sites */
#include "ops/tp/tp_schedule.h"    /* loom__ag_push_dest, loom__ag_arrival_src */

const loom__proto_signal_t loom__tp_signals[LOOM__TP_NSIG] = {
    [LOOM__TP_PS_READY] = {"ready", LOOM_SITE_AG_READY,
                           "AllGather+GEMM: peer's gathered buffer writable (its call started)"},
    [LOOM__TP_PS_CHUNK] = {"chunk", LOOM_SITE_GEMM_PROLOGUE, NULL}, /* the GEMM engine names its site */
    [LOOM__TP_PS_SHARD] = {"shard", LOOM_SITE_AG_SHARD, "AllGather+GEMM: a peer's shard landed, before its rows' GEMM"},
    [LOOM__TP_PS_TILE] = {"tile", LOOM_SITE_RS_TILE, "GEMM+ReduceScatter: a peer's partial tile"},
    [LOOM__TP_PS_DONE] = {"done", LOOM_SITE_RS_DONE,
                          "GEMM+ReduceScatter: a peer still reading this rank's previous partial"},
    [LOOM__TP_PS_GATHERED] = {"gathered", LOOM_SITE_AR_GATHERED,
                              "GEMM+AllReduce: a peer's reduced tile of this rank's out"},
    [LOOM__TP_PS_PUSHED] = {"pushed", LOOM_SITE_RS_PUSHED,
                            "GEMM+ReduceScatter (bulk reduce): a peer's partial tiles added into this rank's sum"},
    [LOOM__TP_PS_FORK] = {"fork", 0, NULL},
    [LOOM__TP_PS_JOIN] = {"join", 0, NULL},
};

static int tp_sig(loom__proto_t *p, int i) { return loom__proto_sig_of(p, &loom__tp_signals[i]); }

/* GEMM + ReduceScatter (ar = 0) or + AllReduce (ar = 1): the user's stream
 * (actor r: begin, GEMM, the AR tail's gathered waits, join) and the side
 * stream (actor x: the reduction, done, and for AR the stores into every
 * rank's out and the gathered signals), forked and joined by events. */
static void tp_gemm_rs(loom__proto_t *p, int r, int ar) {
  const int W = p->W, part = loom__proto_buf(p, "partial"), out = loom__proto_buf(p, "out");
  const int tile = tp_sig(p, LOOM__TP_PS_TILE), done = tp_sig(p, LOOM__TP_PS_DONE);
  const int fork = tp_sig(p, LOOM__TP_PS_FORK), join = tp_sig(p, LOOM__TP_PS_JOIN);
  const int gathered = ar ? tp_sig(p, LOOM__TP_PS_GATHERED) : 0, x = loom__proto_actor(p, r);
  const int epoch = loom__proto_buf(p, "epoch"); /* the call's epoch, published by the begin kernel */
  for (int i = 0; i < W - 1; ++i) /* begin: the peers finished reading the previous partial */
    loom__proto_wait(p, r, r, done, (r + 1 + i) % W, -1);
  loom__proto_write(p, r, r, epoch, 0, 1);
  loom__proto_set(p, r, r, fork, 0, 0);
  for (int i = 0; i < W; ++i) { /* GEMM tiles, RANK_SHIFTED: shard r + 1 first */
    const int t = (r + 1 + i) % W;
    loom__proto_write(p, r, r, part, t, t + 1);
    loom__proto_set(p, r, t, tile, r, 0);
  }
  for (int i = 0; ar && i < W - 1; ++i) loom__proto_wait(p, r, r, gathered, (r + 1 + i) % W, 0);
  loom__proto_wait(p, r, r, join, 0, 0);
  loom__proto_read(p, r, r, out, 0, ar ? W : 1); /* the caller's use of the result */
  /* the side stream: the reduction reads the call's epoch (its waits' targets) */
  loom__proto_wait(p, x, r, fork, 0, 0);
  loom__proto_read(p, x, r, epoch, 0, 1);
  for (int s = 0; s < W; ++s) loom__proto_wait(p, x, r, tile, s, 0);
  for (int s = 0; s < W; ++s) loom__proto_read(p, x, s, part, r, r + 1);
  for (int q = 0; q < (ar ? W : 1); ++q) loom__proto_write(p, x, (r + q) % W, out, ar ? r : 0, ar ? r + 1 : 1);
  for (int i = 0; ar && i < W - 1; ++i) loom__proto_set(p, x, (r + 1 + i) % W, gathered, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, x, (r + 1 + i) % W, done, r, 0);
  loom__proto_set(p, x, r, join, 0, 0);
}

/* GEMM + ReduceScatter by bulk adds: one stream per rank (begin, the
 * GEMM adding into the owners, the owner pass). */
static void tp_gemm_rs_bulk(loom__proto_t *p, int r) {
  const int W = p->W, sum = loom__proto_buf(p, "sum"), out = loom__proto_buf(p, "out");
  const int pushed = tp_sig(p, LOOM__TP_PS_PUSHED), done = tp_sig(p, LOOM__TP_PS_DONE);
  const int epoch = loom__proto_buf(p, "epoch");
  for (int i = 0; i < W - 1; ++i) /* begin: the peers' passes of the previous call zeroed their sums */
    loom__proto_wait(p, r, r, done, (r + 1 + i) % W, -1);
  loom__proto_write(p, r, r, epoch, 0, 1);
  for (int i = 0; i < W; ++i) loom__proto_add(p, r, (r + 1 + i) % W, sum, 0, 1); /* the GEMM's tiles */
  loom__proto_read(p, r, r, epoch, 0, 1); /* the owner pass: the call's epoch, its waits' targets */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, pushed, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, pushed, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, sum, 0, 1);
  loom__proto_write(p, r, r, out, 0, 1);
  loom__proto_write(p, r, r, sum, 0, 1); /* zeroed for the next call's adds */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, done, r, 0);
  loom__proto_read(p, r, r, out, 0, 1); /* the caller's use of the result */
}

/* AllGather + GEMM: the user's stream (actor r: the caller's shard, begin,
 * the own shard into place, the GEMM's waits and reads, join) and the side
 * stream (actor x: the pushes into the peers after their ready, chunk
 * signals). */
static void tp_ag_gemm(loom__proto_t *p, int r) {
  const int W = p->W, shard = loom__proto_buf(p, "a_shard"), afull = loom__proto_buf(p, "a_full");
  const int out = loom__proto_buf(p, "out"), ready = tp_sig(p, LOOM__TP_PS_READY), chunk = tp_sig(p, LOOM__TP_PS_CHUNK);
  const int fork = tp_sig(p, LOOM__TP_PS_FORK), join = tp_sig(p, LOOM__TP_PS_JOIN), x = loom__proto_actor(p, r);
  loom__proto_write(p, r, r, shard, 0, 1); /* the caller's input */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, ready, r, 0); /* begin */
  loom__proto_set(p, r, r, fork, 0, 0);
  loom__proto_read(p, r, r, shard, 0, 1);
  loom__proto_write(p, r, r, afull, r, r + 1); /* the own shard into place */
  for (int i = -1; i < W - 1; ++i) { /* GEMM tile rows: the own shard, then in arrival order */
    const int q = i < 0 ? r : loom__ag_arrival_src(r, W, i);
    if (q != r) loom__proto_wait(p, r, r, chunk, q, 0);
    loom__proto_read(p, r, r, afull, q, q + 1);
  }
  loom__proto_write(p, r, r, out, 0, 1);
  loom__proto_wait(p, r, r, join, 0, 0);
  loom__proto_read(p, r, r, out, 0, 1);
  /* the side stream: step i to rank r - 1 - i */
  loom__proto_wait(p, x, r, fork, 0, 0);
  for (int i = 0; i < W - 1; ++i) {
    const int d = loom__ag_push_dest(r, W, i);
    loom__proto_wait(p, x, r, ready, d, 0);
    loom__proto_read(p, x, r, shard, 0, 1);
    loom__proto_write(p, x, d, afull, r, r + 1);
    loom__proto_set(p, x, d, chunk, r, 0);
  }
  loom__proto_set(p, x, r, join, 0, 0);
}

void loom__tp_protocol(int op, int W, loom__proto_t *p) {
  static const char *names[] = {"gemm_rs", "gemm_ar", "ag_gemm", "gemm_rs_bulk"};
  const int ok = op >= LOOM__TP_PROTO_GEMM_RS && op <= LOOM__TP_PROTO_GEMM_RS_BULK;
  loom__proto_init(p, ok ? names[op] : "tp", W);
  if (!ok) p->overflow = 1;
  for (int r = 0; ok && r < W && !p->overflow; ++r) switch (op) {
      case LOOM__TP_PROTO_GEMM_RS: tp_gemm_rs(p, r, 0); break;
      case LOOM__TP_PROTO_GEMM_AR: tp_gemm_rs(p, r, 1); break;
      case LOOM__TP_PROTO_AG_GEMM: tp_ag_gemm(p, r); break;
      default: tp_gemm_rs_bulk(p, r); break;
    }
}
