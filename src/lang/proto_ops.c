/*
 * proto_ops.c - the hand-written ops' protocols in the form of protocol.h,
 * each as its kernels run it (the headers named below say why each signal
 * is there). Regions are per rank shards (region q: the rows or elements
 * rank q owns); one block per rank (a rank's list is the order its
 * kernel's blocks and streams all respect); the caller's accesses open and
 * close each call: it writes the inputs before the call and reads the
 * results after it.
 *
 *   coll (src/ops/coll/coll.h), out of place and in place (coll.c's
 *     check_in_out: AllReduce out == in, ReduceScatter out = the own slice
 *     of in, AllGather in = the own slice of out; one-shot in place reduces
 *     into the staging buffer and copies it back after the hand-back
 *     wait): arrived = e (the input is readable), the
 *     reads of every rank's input (one-shot: every chunk, rank-shifted;
 *     two-shot and ReduceScatter: the own slice), two-shot's staging and
 *     reduced[j] signals and gather in loom__coll_peer_at order, done = e
 *     and the hand-back wait for every peer's done. AllReduce LL and PUSH
 *     (coll_schedule.h, coll_kernels.cu): the input stored into every
 *     peer's slot of the call's parity with its flags (LL: in the lines),
 *     the reduction from the own memory as the flags arrive; one list is
 *     two calls (the two parities).
 *   tp (src/ops/tp/tp_linear.h, tp_schedule.h): GEMM + ReduceScatter: the
 *     begin kernel's wait for every peer's done of the previous call, the
 *     partial tiles in RANK_SHIFTED order (shard r + 1 first), each then
 *     signalled to its owner, the owner's waits for the W sources, its reads
 *     of their partials, done[owner] = e into every source. GEMM + AllReduce
 *     adds the owners' stores into every rank's out and the gathered
 *     signals. AllGather + GEMM: ready = e into every peer, pushes in ring
 *     order after the destination's ready, chunk signals, the GEMM's waits.
 *     The side stream is a second actor of the rank, forked after the begin
 *     kernel and joined before the call ends (fork / join: local signals);
 *     the RS tail's share of the reduction is drawn on the side stream.
 *     GEMM + ReduceScatter by bulk adds (LOOM_TP_BULK_REDUCE, rs_engine.c's
 *     rs_bulk, one stream): the begin kernel's done waits, the GEMM's ADDs
 *     into every owner's sum buffer (striped: peers first, its own last),
 *     the owner pass's pushed = e into every peer and its waits for every
 *     peer's pushed, its READ of its sum, the WRITEs of out and of the
 *     zeroed sum, done = e into every peer. The sum buffer is zero before
 *     the first call (plan creation, not a step).
 *   embedding (src/ops/embedding/embedding_a2a.h, embedding_a2a.cu): the
 *     forward's ready[me] into every peer, pushes of pooled slices into the
 *     destinations' out with the slices' flags, the exit waits on incoming
 *     flags; the atomic backward's gready, pulls of grad_out, gdone and the
 *     wait for every peer's gdone (one slice per source and destination);
 *     the sorted backward's gready, every pull after every peer's gready,
 *     one gdone after the last, the heads, the waits for every gdone;
 *     the GIN forward (loom__proto_emb_gin: staging and puts towards the
 *     ranks of other nodes; fails as its kernel is written).
 *   optim (src/ops/optim/optim.h): ready = e into every rank, the waits,
 *     the sums of the own chunk over every rank's gradients, the stores of
 *     the updated chunk into every rank's parameters, done = e into every
 *     rank and the waits for every peer's done; LAMB adds the partial
 *     norms' table and the phase handshake between its kernels.
 *   moe (src/ops/moe/moe.h): one list is a dispatch and two combines of
 *     its rows (the API allows any number): the counts into every rank's
 *     table and counts_ready, the waits for every peer's counts, the rows
 *     and origins into every owner's receive buffer, delivered, the waits;
 *     the caller's expert GEMMs read the rows and write the outputs; each
 *     combine's comb_ready into every rank and the waits, the outputs into
 *     every source's combine buffer, comb_done, the waits, the reduction.
 *     The two combines of a call are two epochs: their signals are two
 *     slots (a later epoch's set only delays a wait, so separate slots
 *     order no less than the kernels' one word per rank does).
 */
#include "lang/protocol.h"
#include "ops/coll/coll_schedule.h" /* the orders: loom__coll_peer_at, loom__coll_one_shot_chunk */
#include "ops/tp/tp_schedule.h"     /* loom__ag_push_dest, loom__ag_arrival_src */

/* Every collective's start: the caller writes its input, the rank says it
 * arrived and waits for every peer's arrival (their inputs are readable). */
static void loom__proto_arrive(loom__proto_t *p, int r, int in, int arrived) {
  loom__proto_write(p, r, r, in, 0, p->W); /* the caller's input */
  loom__proto_set(p, r, r, arrived, 0, 0);
  loom__proto_wait_peers(p, r, arrived, 0, 0);
}

/* Slice j of every rank's input, read by rank r (a reduction's sources). */
static void loom__proto_read_slice(loom__proto_t *p, int r, int in, int j) {
  for (int s = 0; s < p->W; ++s) loom__proto_read(p, r, s, in, j, j + 1);
}

/* ip: in place (out is in): the reduction goes to the staging buffer and is
 * copied into `in` after the hand-back wait (no peer reads it then). */
static void loom__proto_one_shot(loom__proto_t *p, int r, int ip) {
  const int W = p->W, in = loom__proto_buf(p, "in"), out = ip ? in : loom__proto_buf(p, "out");
  const int stg = ip ? loom__proto_buf(p, "staging") : out;
  const int arrived = loom__proto_sig(p, "arrived"), done = loom__proto_sig(p, "done");
  loom__proto_arrive(p, r, in, arrived);
  for (int q = 0; q < W; ++q) { /* chunks, rank-shifted start */
    const int j = (int)loom__coll_one_shot_chunk(r, W, W, q);
    loom__proto_read_slice(p, r, in, j);
    loom__proto_write(p, r, r, stg, j, j + 1);
  }
  loom__proto_set(p, r, r, done, 0, 0);
  loom__proto_wait_peers(p, r, done, 0, 0); /* the hand-back of `in` */
  if (ip) loom__proto_read(p, r, r, stg, 0, W), loom__proto_write(p, r, r, out, 0, W);
  loom__proto_read(p, r, r, out, 0, W);     /* the caller's use of the result */
}

/* ip: in place (out is in: the own slice and the gathered ones land in `in`). */
static void loom__proto_two_shot(loom__proto_t *p, int r, int ip) {
  const int W = p->W, in = loom__proto_buf(p, "in"), out = ip ? in : loom__proto_buf(p, "out");
  const int stg = loom__proto_buf(p, "staging");
  const int arrived = loom__proto_sig(p, "arrived"), reduced = loom__proto_sig(p, "reduced");
  loom__proto_arrive(p, r, in, arrived);
  loom__proto_read_slice(p, r, in, r);
  loom__proto_write(p, r, r, out, r, r + 1);
  loom__proto_write(p, r, r, stg, 0, 1);
  loom__proto_set(p, r, r, reduced, 0, 0);
  for (int i = 0; i < W - 1; ++i) {
    const int q = loom__coll_peer_at(r, W, i);
    loom__proto_wait(p, r, q, reduced, 0, 0);
    loom__proto_read(p, r, q, stg, 0, 1);
    loom__proto_write(p, r, r, out, q, q + 1);
  }
  loom__proto_read(p, r, r, out, 0, W);
}

/* ip: in place (out is the own slice of in). */
static void loom__proto_rs(loom__proto_t *p, int r, int ip) {
  const int in = loom__proto_buf(p, "in"), out = ip ? in : loom__proto_buf(p, "out");
  const int arrived = loom__proto_sig(p, "arrived"), done = loom__proto_sig(p, "done");
  const int o = ip ? r : 0;
  loom__proto_arrive(p, r, in, arrived);
  loom__proto_read_slice(p, r, in, r);
  loom__proto_write(p, r, r, out, o, o + 1);
  loom__proto_set(p, r, r, done, 0, 0);
  loom__proto_wait_peers(p, r, done, 0, 0);
  loom__proto_read(p, r, r, out, o, o + 1);
}

/* ip: in place (in is the own slice of out: nothing to copy for it). */
static void loom__proto_ag(loom__proto_t *p, int r, int ip) {
  const int W = p->W, out = loom__proto_buf(p, "out"), in = ip ? out : loom__proto_buf(p, "in");
  const int arrived = loom__proto_sig(p, "arrived"), done = loom__proto_sig(p, "done");
  const int o = ip ? r : 0; /* the slice's region in `in` */
  loom__proto_write(p, r, r, in, o, o + 1);
  loom__proto_set(p, r, r, arrived, 0, 0);
  for (int i = 0; i < W; ++i) {
    const int q = loom__coll_peer_at(r, W, i), oq = ip ? q : 0;
    if (q == r && ip) continue;
    if (q != r) loom__proto_wait(p, r, q, arrived, 0, 0);
    loom__proto_read(p, r, q, in, oq, oq + 1); /* q == r: the own copy */
    loom__proto_write(p, r, r, out, q, q + 1);
  }
  loom__proto_set(p, r, r, done, 0, 0);
  loom__proto_wait_peers(p, r, done, 0, 0);
  loom__proto_read(p, r, r, out, 0, W);
}

/* AllReduce LL (ll = 1) or PUSH (ll = 0), one kernel call of epoch e:
 * rank r stores its input into every peer q's slot loom__coll_push_slot(r,
 * q, W) of parity e mod 2 (peers rank-shifted, r + 1 first), then reduces
 * from its own memory: its input and each sender's slot once that slot's
 * flag holds e. No arrival, no done: the only signals are the flags (a flag
 * slot per (parity, slot), one writer each). LL: a line is {word, flag} in
 * one 8-byte store, modelled as the WRITE of the slot and the SET of its
 * flag right after it (the split is a superset of the atomic store's runs),
 * and the reader's 8-byte load that finds the flag as the WAIT for it and
 * the READ of the slot, sender by sender in rank order. PUSH: the chunk is
 * copied into every peer, then (after a system fence) every peer's flag
 * set; the reader waits for every sender's flag, then reads all sources.
 * Abstracted: the lines and chunks of a slot are one region (every line and
 * chunk has its own flag, they behave alike), the LL poll's `== e` is a
 * WAIT `>= e` (a sender cannot reach e + 2 on a parity before this reader
 * pushed its words of e + 1), the blocks of the grid are one. */
/* LL and PUSH: the region (and flag slot) of sender s in receiver q's
 * buffer, parity `parity` (coll_schedule.h's index of (parity, slot)). */
static int loom__proto_box(int W, int parity, int s, int q) {
  return (int)loom__coll_push_region((uint32_t)parity, loom__coll_push_slot(s, q, W), W);
}

static void loom__proto_push_call(loom__proto_t *p, int r, int ll, int parity) {
  const int W = p->W, in = loom__proto_buf(p, "in"), out = loom__proto_buf(p, "out");
  const int box = loom__proto_buf(p, ll ? "ll" : "push"), flag = loom__proto_sig(p, ll ? "line" : "flag");
  loom__proto_write(p, r, r, in, 0, 1); /* the caller's input */
  loom__proto_read(p, r, r, in, 0, 1);
  for (int i = 1; i < W; ++i) { /* PUSH: the stores into every peer, then the flags */
    const int q = (r + i) % W, k = loom__proto_box(W, parity, r, q);
    loom__proto_write(p, r, q, box, k, k + 1);
    if (ll) loom__proto_set(p, r, q, flag, k, 0);
  }
  for (int i = 1; !ll && i < W; ++i) loom__proto_set(p, r, (r + i) % W, flag, loom__proto_box(W, parity, r, (r + i) % W), 0);
  for (int s = 0; !ll && s < W; ++s)
    if (s != r) loom__proto_wait(p, r, r, flag, loom__proto_box(W, parity, s, r), 0);
  for (int s = 0; s < W; ++s) { /* the sum in rank order: the own input, the senders' slots */
    const int k = loom__proto_box(W, parity, s, r);
    if (s != r && ll) loom__proto_wait(p, r, r, flag, k, 0);
    if (s == r) loom__proto_read(p, r, r, in, 0, 1);
    else loom__proto_read(p, r, r, box, k, k + 1);
  }
  loom__proto_write(p, r, r, out, 0, 1);
  loom__proto_read(p, r, r, out, 0, 1); /* the caller's use of the result */
}

/* AllReduce LL / PUSH: what protects a slot's reuse is the parity, so one
 * list is two kernel calls, epochs 2c - 1 (parity 1) and 2c (parity 0) of
 * the checker's call c, and each parity's flags hold c; the checker's two
 * calls are four kernel calls, the third rewriting the first one's slots.
 * The "consumed" handshake is the reverse direction's flags: sender s
 * writes q's slots of call e + 2 after its call e + 1 waited for q's words
 * of e + 1, which q pushed after its reads of call e. */
static void loom__proto_push(loom__proto_t *p, int r, int ll) {
  loom__proto_push_call(p, r, ll, 1);
  loom__proto_push_call(p, r, ll, 0);
}

/* GEMM + ReduceScatter (ar = 0) or + AllReduce (ar = 1): the user's stream
 * (actor r: begin, GEMM, the AR tail's gathered waits, join) and the side
 * stream (actor x: the reduction, done, and for AR the stores into every
 * rank's out and the gathered signals), forked and joined by events. */
static void loom__proto_gemm_rs(loom__proto_t *p, int r, int ar) {
  const int W = p->W, part = loom__proto_buf(p, "partial"), out = loom__proto_buf(p, "out");
  const int tile = loom__proto_sig(p, "tile"), done = loom__proto_sig(p, "done");
  const int fork = loom__proto_sig(p, "fork"), join = loom__proto_sig(p, "join");
  const int gathered = ar ? loom__proto_sig(p, "gathered") : 0, x = loom__proto_actor(p, r);
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
static void loom__proto_gemm_rs_bulk(loom__proto_t *p, int r) {
  const int W = p->W, sum = loom__proto_buf(p, "sum"), out = loom__proto_buf(p, "out");
  const int pushed = loom__proto_sig(p, "pushed"), done = loom__proto_sig(p, "done");
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
static void loom__proto_ag_gemm(loom__proto_t *p, int r) {
  const int W = p->W, shard = loom__proto_buf(p, "a_shard"), afull = loom__proto_buf(p, "a_full");
  const int out = loom__proto_buf(p, "out"), ready = loom__proto_sig(p, "ready"), chunk = loom__proto_sig(p, "chunk");
  const int fork = loom__proto_sig(p, "fork"), join = loom__proto_sig(p, "join"), x = loom__proto_actor(p, r);
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

/* Embedding-bag + All-to-All, forward: ready[me] into every peer, the
 * pooled slices pushed into each destination's out (remote first, after
 * its ready), each slice's flag set on the destination, then the exit
 * waits for every incoming flag. One slice per (source, destination). */
static void loom__proto_emb_fwd(loom__proto_t *p, int r) {
  const int W = p->W, out = loom__proto_buf(p, "out");
  const int ready = loom__proto_sig(p, "ready"), flag = loom__proto_sig(p, "flag");
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, ready, r, 0);
  for (int i = 0; i < W; ++i) { /* remote first: r + 1, ..., r */
    const int q = (r + 1 + i) % W;
    if (q != r) loom__proto_wait(p, r, r, ready, q, 0);
    loom__proto_write(p, r, q, out, r, r + 1);
    if (q != r) loom__proto_set(p, r, q, flag, r, 0);
  }
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, flag, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, out, 0, W); /* the caller's use of the output */
}

/* Embedding-bag + All-to-All, atomic backward: gready into every peer, the
 * gradient rows pulled from each source's grad_out after its gready, gdone
 * into the source after the last task for it, the wait for every peer's
 * gdone before the kernel ends (grad_out is then the caller's again). */
static void loom__proto_emb_bwd(loom__proto_t *p, int r) {
  const int W = p->W, gout = loom__proto_buf(p, "grad_out"), tgrad = loom__proto_buf(p, "table_grad");
  const int gready = loom__proto_sig(p, "gready"), gdone = loom__proto_sig(p, "gdone");
  loom__proto_write(p, r, r, gout, 0, W); /* the caller's gradient (region q: for q's tables) */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, gready, r, 0);
  for (int i = 0; i < W; ++i) {
    const int q = (r + 1 + i) % W;
    if (q != r) loom__proto_wait(p, r, r, gready, q, 0);
    loom__proto_read(p, r, q, gout, r, r + 1);
    loom__proto_write(p, r, r, tgrad, 0, 1);
    if (q != r) loom__proto_set(p, r, q, gdone, r, 0);
  }
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, gdone, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, tgrad, 0, 1);
}

/* Embedding-bag + All-to-All, sorted backward (embedding_a2a_sorted.cu):
 * four kernels on the stream, in this rank's one list. keys: block 0 says
 * gready into every peer first, the keys and meta into the call's scratch;
 * sort; runs: every block waits for every peer's gready, the runs read the
 * gradient rows from every rank's grad_out (in the sorted rows' order, one
 * READ per source here), add the runs inside a chunk to table_grad and
 * leave the partials, and the last block says gdone into every peer;
 * heads: the partials summed into table_grad, then the waits for every
 * peer's gdone (grad_out is the caller's again). The kernel also sets and
 * polls the own slot of gready and gdone: program order, left out. */
static void loom__proto_emb_bwd_sorted(loom__proto_t *p, int r) {
  const int W = p->W, gout = loom__proto_buf(p, "grad_out"), tgrad = loom__proto_buf(p, "table_grad");
  const int keys = loom__proto_buf(p, "keys"), part = loom__proto_buf(p, "partial");
  const int gready = loom__proto_sig(p, "gready"), gdone = loom__proto_sig(p, "gdone");
  loom__proto_write(p, r, r, gout, 0, W); /* the caller's gradient (region q: for q's tables) */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, gready, r, 0); /* keys */
  loom__proto_write(p, r, r, keys, 0, 1);
  loom__proto_read(p, r, r, keys, 0, 1); /* sort, and the runs' keys */
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, gready, (r + 1 + i) % W, 0); /* runs */
  for (int q = 0; q < W; ++q) loom__proto_read(p, r, q, gout, r, r + 1);
  loom__proto_write(p, r, r, tgrad, 0, 1);
  loom__proto_write(p, r, r, part, 0, 1);
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, gdone, r, 0);
  loom__proto_read(p, r, r, part, 0, 1); /* heads */
  loom__proto_write(p, r, r, tgrad, 0, 1);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, gdone, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, tgrad, 0, 1); /* the optimizer's use of the gradient */
}

/* Embedding-bag + All-to-All forward, GIN path (embedding_a2a_gin.cu):
 * the zero-copy forward towards the NVLink ranks (ready, pushes, flags);
 * a slice for a network rank is pooled into the own staging window, then
 * put into the destination's out with SignalAdd on its flag (modelled as
 * the put's READ of the staging, its WRITE into out and the SET: the NIC's
 * asynchrony is not). The kernel says ready to the NVLink ranks only;
 * ready_all = 1 is the variant that says it to (and waits for) every rank.
 * Nodes: ranks 0 .. W-2 share one, rank W-1 is alone (W = 2: two nodes). */
static void loom__proto_emb_gin_rank(loom__proto_t *p, int r, int ready_all) {
  const int W = p->W, out = loom__proto_buf(p, "out"), stage = loom__proto_buf(p, "stage");
  const int ready = loom__proto_sig(p, "ready"), flag = loom__proto_sig(p, "flag");
  for (int i = 0; i < W - 1; ++i) {
    const int q = (r + 1 + i) % W;
    if (ready_all || (q == W - 1) == (r == W - 1)) loom__proto_set(p, r, q, ready, r, 0);
  }
  for (int i = 0; i < W; ++i) { /* remote first: r + 1, ..., r */
    const int q = (r + 1 + i) % W, lsa = (q == W - 1) == (r == W - 1);
    if (q != r && (lsa || ready_all)) loom__proto_wait(p, r, r, ready, q, 0);
    if (!lsa) loom__proto_write(p, r, r, stage, q, q + 1), loom__proto_read(p, r, r, stage, q, q + 1);
    loom__proto_write(p, r, q, out, r, r + 1);
    if (q != r) loom__proto_set(p, r, q, flag, r, 0);
  }
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, flag, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, out, 0, W); /* the caller's use of the output */
}

void loom__proto_emb_gin(int W, int ready_all, loom__proto_t *p) {
  loom__proto_init(p, ready_all ? "embedding_fwd_gin_ready" : "embedding_fwd_gin", W);
  for (int r = 0; r < W; ++r) loom__proto_emb_gin_rank(p, r, ready_all);
}

/* RS-Opt-AG: Adam (lamb = 0) or LAMB (lamb = 1). */
static void loom__proto_optim(loom__proto_t *p, int r, int lamb) {
  const int W = p->W, grad = loom__proto_buf(p, "grad"), param = loom__proto_buf(p, "param");
  const int ready = loom__proto_sig(p, "ready"), done = loom__proto_sig(p, "done");
  loom__proto_write(p, r, r, grad, 0, W); /* the backward pass */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, ready, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, ready, (r + 1 + i) % W, 0);
  for (int s = 0; s < W; ++s) loom__proto_read(p, r, s, grad, r, r + 1);
  if (lamb) {
    const int part = loom__proto_buf(p, "partial"), phase = loom__proto_sig(p, "phase");
    loom__proto_write(p, r, r, part, 0, 1);
    for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, phase, r, 0);
    for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, phase, (r + 1 + i) % W, 0);
    for (int s = 0; s < W; ++s) loom__proto_read(p, r, s, part, 0, 1); /* norms in global order */
  }
  for (int q = 0; q < W; ++q) loom__proto_write(p, r, (r + 1 + q) % W, param, r, r + 1);
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, done, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, done, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, param, 0, W); /* the next forward pass */
}

/* MoE dispatch, then two combines (moe.h). One stream per rank; waits
 * and signals towards the peers only (a rank's own are in program order). */
static void loom__proto_moe(loom__proto_t *p, int r) {
  const int W = p->W, x = loom__proto_buf(p, "x"), counts = loom__proto_buf(p, "counts");
  const int recv = loom__proto_buf(p, "recv"), origin = loom__proto_buf(p, "origin"), y = loom__proto_buf(p, "y");
  const int comb = loom__proto_buf(p, "combine"), out = loom__proto_buf(p, "out");
  const int ready = loom__proto_sig(p, "counts_ready"), delivered = loom__proto_sig(p, "delivered");
  const int cready = loom__proto_sig(p, "comb_ready"), cdone = loom__proto_sig(p, "comb_done");
  loom__proto_write(p, r, r, x, 0, 1); /* the caller's rows and routing */
  for (int i = 0; i < W; ++i) loom__proto_write(p, r, (r + 1 + i) % W, counts, r, r + 1); /* publish */
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, ready, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, ready, (r + 1 + i) % W, 0); /* layout */
  loom__proto_read(p, r, r, counts, 0, W);
  loom__proto_read(p, r, r, x, 0, 1); /* send: rows and origins into every owner */
  for (int i = 0; i < W; ++i) {
    loom__proto_write(p, r, (r + 1 + i) % W, recv, r, r + 1);
    loom__proto_write(p, r, (r + 1 + i) % W, origin, r, r + 1);
  }
  for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, delivered, r, 0);
  for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, delivered, (r + 1 + i) % W, 0);
  loom__proto_read(p, r, r, recv, 0, W); /* the caller's expert GEMMs */
  for (int c = 0; c < 2; ++c) {
    loom__proto_write(p, r, r, y, 0, 1); /* their outputs */
    for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, cready, c * W + r, 0);
    for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, cready, c * W + (r + 1 + i) % W, 0);
    loom__proto_read(p, r, r, origin, 0, W);
    loom__proto_read(p, r, r, y, 0, 1);
    for (int i = 0; i < W; ++i) loom__proto_write(p, r, (r + 1 + i) % W, comb, r, r + 1);
    for (int i = 0; i < W - 1; ++i) loom__proto_set(p, r, (r + 1 + i) % W, cdone, c * W + r, 0);
    for (int i = 0; i < W - 1; ++i) loom__proto_wait(p, r, r, cdone, c * W + (r + 1 + i) % W, 0); /* reduce */
    loom__proto_read(p, r, r, comb, 0, W);
    loom__proto_write(p, r, r, out, 0, 1);
    loom__proto_read(p, r, r, out, 0, 1); /* the caller's use of the output */
  }
}

const char *loom__proto_op_name(int op) {
  static const char *names[] = {"allreduce_one_shot", "allreduce_two_shot", "reduce_scatter", "all_gather",
                                "gemm_rs", "gemm_ar", "ag_gemm", "optim_adam", "optim_lamb",
                                "allreduce_one_shot_ip", "allreduce_two_shot_ip", "reduce_scatter_ip",
                                "all_gather_ip", "embedding_fwd", "embedding_bwd", "allreduce_ll",
                                "allreduce_push", "embedding_bwd_sorted", "gemm_rs_bulk", "moe"};
  return op >= 0 && op < LOOM__PROTO_OPS_COUNT ? names[op] : "?";
}

void loom__proto_op(int op, int W, loom__proto_t *p) {
  loom__proto_init(p, loom__proto_op_name(op), W);
  for (int r = 0; r < W; ++r) switch (op) {
      case LOOM__PROTO_AR_ONE_SHOT: loom__proto_one_shot(p, r, 0); break;
      case LOOM__PROTO_AR_TWO_SHOT: loom__proto_two_shot(p, r, 0); break;
      case LOOM__PROTO_RS: loom__proto_rs(p, r, 0); break;
      case LOOM__PROTO_AG: loom__proto_ag(p, r, 0); break;
      case LOOM__PROTO_AR_ONE_SHOT_IP: loom__proto_one_shot(p, r, 1); break;
      case LOOM__PROTO_AR_TWO_SHOT_IP: loom__proto_two_shot(p, r, 1); break;
      case LOOM__PROTO_RS_IP: loom__proto_rs(p, r, 1); break;
      case LOOM__PROTO_AG_IP: loom__proto_ag(p, r, 1); break;
      case LOOM__PROTO_EMB_FWD: loom__proto_emb_fwd(p, r); break;
      case LOOM__PROTO_EMB_BWD: loom__proto_emb_bwd(p, r); break;
      case LOOM__PROTO_GEMM_RS: loom__proto_gemm_rs(p, r, 0); break;
      case LOOM__PROTO_GEMM_AR: loom__proto_gemm_rs(p, r, 1); break;
      case LOOM__PROTO_AG_GEMM: loom__proto_ag_gemm(p, r); break;
      case LOOM__PROTO_OPTIM_ADAM: loom__proto_optim(p, r, 0); break;
      case LOOM__PROTO_OPTIM_LAMB: loom__proto_optim(p, r, 1); break;
      case LOOM__PROTO_AR_LL: loom__proto_push(p, r, 1); break;
      case LOOM__PROTO_AR_PUSH: loom__proto_push(p, r, 0); break;
      case LOOM__PROTO_EMB_BWD_SORTED: loom__proto_emb_bwd_sorted(p, r); break;
      case LOOM__PROTO_GEMM_RS_BULK: loom__proto_gemm_rs_bulk(p, r); break;
      case LOOM__PROTO_MOE: loom__proto_moe(p, r); break;
      default: p->overflow = 1; break;
    }
}
