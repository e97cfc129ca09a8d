/*
 * embedding_protocol.c - the embedding-bag + All-to-All protocols in the
 * form of core/protocol.h, as embedding_a2a.h's kernels run them
 * (embedding_a2a.cu, embedding_a2a_sorted.cu, embedding_a2a_gin.cu): the
 * forward's ready[me] into every peer, pushes of pooled slices into the
 * destinations' out with the slices' flags, the exit waits on incoming
 * flags; the atomic backward's gready, pulls of grad_out, gdone and the
 * wait for every peer's gdone (one slice per source and destination); the
 * sorted backward's gready, every pull after every peer's gready, one gdone
 * after the last, the heads, the waits for every gdone; the GIN forward
 * (staging and puts towards the ranks of other nodes; fails as its kernel
 * is written). Regions are per rank (region q: what belongs to rank q);
 * one block per rank.
 */
#include "ops/embedding/embedding_protocol.h"
#include "ops/embedding/embedding_a2a.h" /* the wait sites */

const loom__proto_signal_t loom__emb_signals[LOOM__EMB_NSIG] = {
    [LOOM__EMB_PS_FLAG] = {"flag", LOOM_SITE_EMB_SLICE_READY, "embedding slice ready"},
    [LOOM__EMB_PS_GREADY] = {"gready", LOOM_SITE_EMB_GRAD_READY, "embedding backward: peer's grad_out readable"},
    [LOOM__EMB_PS_GDONE] = {"gdone", LOOM_SITE_EMB_GRAD_DONE, "embedding backward: peer done reading grad_out"},
    [LOOM__EMB_PS_READY] = {"ready", LOOM_SITE_EMB_OUT_READY, "embedding forward: peer's output writable"},
};

static int emb_sig(loom__proto_t *p, int i) { return loom__proto_sig_of(p, &loom__emb_signals[i]); }

/* Forward: ready[me] into every peer, the pooled slices pushed into each
 * destination's out (remote first, after its ready), each slice's flag set
 * on the destination, then the exit waits for every incoming flag. */
static void emb_fwd(loom__proto_t *p, int r) {
  const int W = p->W, out = loom__proto_buf(p, "out");
  const int ready = emb_sig(p, LOOM__EMB_PS_READY), flag = emb_sig(p, LOOM__EMB_PS_FLAG);
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

/* Atomic backward: gready into every peer, the gradient rows pulled from
 * each source's grad_out after its gready, gdone into the source after the
 * last task for it, the wait for every peer's gdone before the kernel ends
 * (grad_out is then the caller's again). */
static void emb_bwd(loom__proto_t *p, int r) {
  const int W = p->W, gout = loom__proto_buf(p, "grad_out"), tgrad = loom__proto_buf(p, "table_grad");
  const int gready = emb_sig(p, LOOM__EMB_PS_GREADY), gdone = emb_sig(p, LOOM__EMB_PS_GDONE);
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

/* Sorted backward (embedding_a2a_sorted.cu): four kernels on the stream,
 * in this rank's one list. keys: block 0 says gready into every peer first,
 * the keys and meta into the call's scratch; sort; runs: every block waits
 * for every peer's gready, the runs read the gradient rows from every
 * rank's grad_out (in the sorted rows' order, one READ per source here),
 * add the runs inside a chunk to table_grad and leave the partials, and the
 * last block says gdone into every peer; heads: the partials summed into
 * table_grad, then the waits for every peer's gdone (grad_out is the
 * caller's again). The kernel also sets and polls the own slot of gready
 * and gdone: program order, left out. */
static void emb_bwd_sorted(loom__proto_t *p, int r) {
  const int W = p->W, gout = loom__proto_buf(p, "grad_out"), tgrad = loom__proto_buf(p, "table_grad");
  const int keys = loom__proto_buf(p, "keys"), part = loom__proto_buf(p, "partial");
  const int gready = emb_sig(p, LOOM__EMB_PS_GREADY), gdone = emb_sig(p, LOOM__EMB_PS_GDONE);
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

/* Forward, GIN path (embedding_a2a_gin.cu): the zero-copy forward towards
 * the NVLink ranks (ready, pushes, flags); a slice for a network rank is
 * pooled into the own staging window, then put into the destination's out
 * with SignalAdd on its flag (modelled as the put's READ of the staging,
 * its WRITE into out and the SET: the NIC's asynchrony is not). The kernel
 * says ready to the NVLink ranks only; ready_all = 1 is the variant that
 * says it to (and waits for) every rank. Nodes: ranks 0 .. W-2 share one,
 * rank W-1 is alone (W = 2: two nodes). */
static void emb_gin_rank(loom__proto_t *p, int r, int ready_all) {
  const int W = p->W, out = loom__proto_buf(p, "out"), stage = loom__proto_buf(p, "stage");
  const int ready = emb_sig(p, LOOM__EMB_PS_READY), flag = emb_sig(p, LOOM__EMB_PS_FLAG);
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

void loom__emb_protocol_gin(int W, int ready_all, loom__proto_t *p) {
  loom__proto_init(p, ready_all ? "embedding_fwd_gin_ready" : "embedding_fwd_gin", W);
  for (int r = 0; r < W && !p->overflow; ++r) emb_gin_rank(p, r, ready_all);
}

void loom__emb_protocol(int op, int W, loom__proto_t *p) {
  static const char *names[] = {"embedding_fwd", "embedding_bwd", "embedding_bwd_sorted"};
  const int ok = op >= LOOM__EMB_PROTO_FWD && op <= LOOM__EMB_PROTO_BWD_SORTED;
  loom__proto_init(p, ok ? names[op] : "embedding", W);
  if (!ok) p->overflow = 1;
  for (int r = 0; ok && r < W && !p->overflow; ++r) {
    if (op == LOOM__EMB_PROTO_FWD) emb_fwd(p, r);
    else if (op == LOOM__EMB_PROTO_BWD) emb_bwd(p, r);
    else emb_bwd_sorted(p, r);
  }
}
