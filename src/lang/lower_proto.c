/*
 * lower_proto.c - a kernel unit's exchanges (lower.h), their protocol, and
 * the check that lets generated code run.
 *
 * The exchange list is derived from the loops' reads. A loop of step s
 * that reads buffer b at other ranks (a reduction, an owner's, a root's or
 * a Send source's piece):
 *  - b written before the unit: the holders of b SET arrived at the start,
 *    the loop's ranks WAIT for the arrived of the ranks they read before
 *    step s; and, optional, the loop's ranks SET done at the end and the
 *    holders WAIT for the done of the ranks that read them (the hand-back:
 *    b may be rewritten once they have);
 *  - b written by step j < s of the unit: its holders SET ready[j] after
 *    step j, the loop's ranks WAIT ready[j] of the ranks they read before
 *    step s (and the same optional done);
 * and a loop that reads its own rank's piece of a value of an earlier step
 * waits for its own ready[j] (the unit's blocks meet; not in the protocol).
 * Which optional entries stay is settled by the checker (loom__lw_lower):
 * each done WAIT is left out where every check world's protocol passes
 * without it (a FusedAllReduce's ready waits already hand its input back).
 *
 * The protocol (core/protocol.h) of unit u, per rank of every group: the
 * caller's WRITE of the buffers peers read that the unit does not write,
 * the start's SETs, then per step its WAITs, the READs of the buffers peers
 * read (at every rank the loop reads) and the WRITEs of those its loops
 * store, its SETs; at the end the done SETs and WAITs. Regions are the W
 * slices of a buffer: a Sliced buffer's piece q is region q; a whole one is
 * [0, W), or the reader's slice where the loop runs over a slice of it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lower.h"

/* ---- the exchange list ---------------------------------------------------------------- */

static loom_result_t add_ex(loom__lw_prog_t *lw, int u, const loom__lw_ex_t *e) {
  const loom__lw_unit_t *x = &lw->units[u];
  for (int i = x->ex0; i < lw->nex; ++i)
    if (!memcmp(&lw->ex[i], e, sizeof *e)) return LOOM_SUCCESS;
  LOOM_TRY(loom__lw_grow((void **)&lw->ex, lw->nex, &lw->cex, sizeof *lw->ex));
  lw->ex[lw->nex++] = *e;
  lw->units[u].nex = lw->nex - lw->units[u].ex0;
  return LOOM_SUCCESS;
}

static loom__lw_ex_t ex_of(int kind, int step, int slot, int pattern, int arg, int loop, int buf, int optional) {
  loom__lw_ex_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind, e.step = step, e.slot = slot, e.pattern = pattern, e.arg = arg, e.loop = loop, e.buf = buf;
  e.optional = optional;
  return e;
}

/* The ranks instruction `in` reads, as a WAIT pattern (-1: only its own rank). */
static int read_pattern(const loom__lw_ins_t *in, int *arg) {
  *arg = in->arg;
  if (in->kind == LOOM__LI_REDUCE || (in->kind == LOOM__LI_PARTIALS && in->arg)) return LOOM__LWP_GROUP;
  if (in->kind != LOOM__LI_LOAD || in->who == LOOM__LWW_OWN) return -1;
  if (in->who == LOOM__LWW_OWNER) return LOOM__LWP_GROUP;
  return in->who == LOOM__LWW_ROOT ? LOOM__LWP_ROOT : LOOM__LWP_SRC;
}

/* The entries one read of loop l (global index li) needs. */
static loom_result_t read_entries(loom__lw_prog_t *lw, int u, int li, const loom__lw_ins_t *in) {
  const loom__lw_loop_t *l = &lw->loops[li];
  const loom__lw_buf_t *b = &lw->bufs[in->buf];
  const int nsteps = lw->units[u].nsteps, mine = b->unit == u;
  int arg;
  const int pat = read_pattern(in, &arg);
  if (pat < 0) { /* its own piece: only a value of an earlier step needs waiting for (the blocks meet) */
    if (!mine) return LOOM_SUCCESS;
    loom__lw_ex_t w = ex_of(LOOM__LX_WAIT, l->step, LOOM__LWS_READY + b->step, LOOM__LWP_SELF, 0, li, -1, 0);
    LOOM_TRY(add_ex(lw, u, &w));
    loom__lw_ex_t s = ex_of(LOOM__LX_SET, b->step, LOOM__LWS_READY + b->step, 0, 0, -1, in->buf, 0);
    return add_ex(lw, u, &s);
  }
  const int slot = mine ? LOOM__LWS_READY + b->step : LOOM__LWS_ARRIVED;
  loom__lw_ex_t set = ex_of(LOOM__LX_SET, mine ? b->step : -1, slot, 0, 0, -1, in->buf, 0);
  loom__lw_ex_t wait = ex_of(LOOM__LX_WAIT, l->step, slot, pat, arg, li, -1, 0);
  /* the hand-back: the readers (this loop's ranks) say done; the holders wait for them */
  const int back = pat == LOOM__LWP_SRC ? LOOM__LWP_DST : l->space.root >= 0 ? LOOM__LWP_ROOT : LOOM__LWP_GROUP;
  loom__lw_ex_t dset = ex_of(LOOM__LX_SET, nsteps, LOOM__LWS_DONE, 0, 0, li, -1, 1);
  loom__lw_ex_t dwait = ex_of(LOOM__LX_WAIT, nsteps, LOOM__LWS_DONE, back,
                              back == LOOM__LWP_ROOT ? l->space.root : arg, -1, in->buf, 1);
  LOOM_TRY(add_ex(lw, u, &set));
  LOOM_TRY(add_ex(lw, u, &wait));
  LOOM_TRY(add_ex(lw, u, &dset));
  return add_ex(lw, u, &dwait);
}

loom_result_t loom__lw_exchanges(loom__lw_prog_t *lw, int u) {
  loom__lw_unit_t *x = &lw->units[u];
  x->ex0 = lw->nex, x->nex = 0;
  for (int li = x->loop0; li < x->loop0 + x->nloops; ++li) {
    const loom__lw_loop_t *l = &lw->loops[li];
    for (int i = 0; i < l->nins; ++i) {
      const loom__lw_ins_t in = lw->ins[l->ins0 + i];
      if (in.kind == LOOM__LI_LOAD || in.kind == LOOM__LI_REDUCE || in.kind == LOOM__LI_PARTIALS)
        LOOM_TRY(read_entries(lw, u, li, &in));
    }
  }
  return LOOM_SUCCESS;
}

/* ---- ranks and regions ------------------------------------------------------------------- */

/* 1 if rank r does entry e (runs its loop, holds its buffer, or runs the unit). */
static int does(const loom__lw_prog_t *lw, const loom__lw_ex_t *e, int r) {
  if (e->loop >= 0) return loom__lw_runs_loop(lw, &lw->loops[e->loop], r);
  if (e->buf >= 0) return loom__lw_holds(lw, &lw->bufs[e->buf], r);
  return 1;
}

/* The ranks of pattern (arg) seen from rank r into out[]; their count. */
static int pattern_ranks(const loom__lw_prog_t *lw, int pattern, int arg, int r, int *out) {
  const int base = loom__lw_base(lw, r);
  int n = 0;
  if (pattern == LOOM__LWP_GROUP)
    for (int i = 0; i < lw->W; ++i) out[n++] = base + i;
  else if (pattern == LOOM__LWP_ROOT) out[n++] = base + arg;
  else if (pattern == LOOM__LWP_SRC && r - arg * lw->W >= 0) out[n++] = r - arg * lw->W;
  else if (pattern == LOOM__LWP_DST && r + arg * lw->W < lw->R) out[n++] = r + arg * lw->W;
  else if (pattern == LOOM__LWP_SELF) out[n++] = r;
  return n;
}

/* The ranks instruction `in` of a loop run by r reads. */
static int read_ranks(const loom__lw_prog_t *lw, const loom__lw_ins_t *in, int r, int *out) {
  int arg;
  const int pat = read_pattern(in, &arg);
  return pattern_ranks(lw, pat < 0 ? LOOM__LWP_SELF : pat, arg, r, out);
}

/* The regions [*lo, *hi) of buffer b that rank r writes (its piece). */
static void write_region(const loom__lw_prog_t *lw, int b, int r, int *lo, int *hi) {
  const int q = r % lw->W;
  if (lw->bufs[b].geom.sliced >= 0) *lo = q, *hi = q + 1;
  else *lo = 0, *hi = lw->W;
}

/* The regions of buffer `in->buf` at rank p that loop l, run by rank r, reads. */
static void read_region(const loom__lw_prog_t *lw, const loom__lw_loop_t *l, const loom__lw_ins_t *in, int r, int p,
                        int *lo, int *hi) {
  const loom__lw_buf_t *b = &lw->bufs[in->buf];
  if (b->geom.sliced >= 0) {
    *lo = p % lw->W, *hi = *lo + 1;
    return;
  }
  *lo = 0, *hi = lw->W;
  if (in->idx < 0 || l->space.sliced < 0) return;
  for (int j = 0; j < lw->idx[in->idx].geom.rank; ++j)
    if (lw->idx[in->idx].src[j] == l->space.sliced) *lo = r % lw->W, *hi = *lo + 1; /* the reader's slice of it */
}

/* ---- the protocol ----------------------------------------------------------------------- */

/* 1 if buffer b is read at another rank by a loop of unit u (the buffers the protocol models). */
static int peer_buffer(const loom__lw_prog_t *lw, int u, int b) {
  const loom__lw_unit_t *x = &lw->units[u];
  for (int l = x->loop0; l < x->loop0 + x->nloops; ++l)
    if (loom__lw_reads_peers(lw, &lw->loops[l], b)) return 1;
  return 0;
}

static void proto_names(const loom__lw_prog_t *lw, int u, loom__proto_t *out, int *pbuf) {
  for (int b = 0; b < lw->nbuf; ++b) {
    pbuf[b] = -1;
    if (!peer_buffer(lw, u, b)) continue;
    char name[LOOM__PROTO_NAME];
    const int id = lw->bufs[b].node;
    snprintf(name, sizeof name, "%.24s%s", id >= 0 ? lw->p->nodes[id].name : lw->p->nodes[lw->bufs[b].of].name,
             id >= 0 ? "" : "_part");
    if (!name[0] || !strcmp(name, "_part")) snprintf(name, sizeof name, "buf%d", b);
    pbuf[b] = loom__proto_buf(out, name);
  }
}

static int slot_sig(loom__proto_t *out, int slot) {
  char name[24];
  if (slot == LOOM__LWS_ARRIVED) return loom__proto_sig(out, "arrived");
  if (slot == LOOM__LWS_DONE) return loom__proto_sig(out, "done");
  snprintf(name, sizeof name, "ready%d", slot - LOOM__LWS_READY);
  return loom__proto_sig(out, name);
}

/* Rank r's entries of `kind` at `step` (WAITs for the other ranks of their pattern). */
static void proto_entries(const loom__lw_prog_t *lw, int u, int drop, int step, int kind, int r, loom__proto_t *out) {
  const loom__lw_unit_t *x = &lw->units[u];
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i) {
    const loom__lw_ex_t *e = &lw->ex[i];
    if (e->off || i == drop || e->step != step || e->kind != kind || !does(lw, e, r)) continue;
    const int sig = slot_sig(out, e->slot);
    if (kind == LOOM__LX_SET) {
      loom__proto_set(out, r, r, sig, 0, 0);
      continue;
    }
    int ranks[64];
    const int n = e->pattern == LOOM__LWP_SELF ? 0 : pattern_ranks(lw, e->pattern, e->arg, r, ranks);
    for (int k = 0; k < n; ++k)
      if (ranks[k] != r) loom__proto_wait(out, r, ranks[k], sig, 0, 0);
  }
}

/* Rank r's READs and WRITEs of the modelled buffers in the loops of step s. */
static void proto_loops(const loom__lw_prog_t *lw, int u, int s, int r, const int *pbuf, loom__proto_t *out) {
  const loom__lw_unit_t *x = &lw->units[u];
  for (int li = x->loop0; li < x->loop0 + x->nloops; ++li) {
    const loom__lw_loop_t *l = &lw->loops[li];
    if (l->step != s || !loom__lw_runs_loop(lw, l, r)) continue;
    for (int i = 0; i < l->nins; ++i) {
      const loom__lw_ins_t *in = &lw->ins[l->ins0 + i];
      if ((in->kind != LOOM__LI_LOAD && in->kind != LOOM__LI_REDUCE && in->kind != LOOM__LI_PARTIALS) ||
          pbuf[in->buf] < 0)
        continue;
      int ranks[64], lo, hi;
      const int n = read_ranks(lw, in, r, ranks);
      for (int k = 0; k < n; ++k) {
        read_region(lw, l, in, r, ranks[k], &lo, &hi);
        loom__proto_read(out, r, ranks[k], pbuf[in->buf], lo, hi);
      }
    }
    for (int k = 0; k < l->nstore; ++k) {
      int lo, hi;
      if (pbuf[l->store_buf[k]] < 0) continue;
      write_region(lw, l->store_buf[k], r, &lo, &hi);
      loom__proto_write(out, r, r, pbuf[l->store_buf[k]], lo, hi);
    }
  }
}

loom_result_t loom__lw_protocol(const loom__lw_prog_t *lw, int u, int drop, loom__proto_t *out) {
  const loom__lw_unit_t *x = &lw->units[u];
  if (lw->R > LOOM__PROTO_MAXW)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "protocol of %s: %d ranks; the checker takes at most %d", x->name,
                      lw->R, LOOM__PROTO_MAXW);
  int *pbuf = malloc(sizeof(int) * (size_t)(lw->nbuf + 1));
  if (!pbuf) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  loom__proto_init(out, x->name, lw->R);
  proto_names(lw, u, out, pbuf);
  for (int r = 0; r < lw->R; ++r) {
    if (!loom__lw_runs_unit(lw, x, r)) continue;
    for (int b = 0; b < lw->nbuf; ++b) /* the caller's (earlier units') writes of what peers read */
      if (pbuf[b] >= 0 && lw->bufs[b].unit != u && loom__lw_holds(lw, &lw->bufs[b], r)) {
        int lo, hi;
        write_region(lw, b, r, &lo, &hi);
        loom__proto_write(out, r, r, pbuf[b], lo, hi);
      }
    proto_entries(lw, u, drop, -1, LOOM__LX_SET, r, out);
    for (int s = 0; s < x->nsteps; ++s) {
      proto_entries(lw, u, drop, s, LOOM__LX_WAIT, r, out);
      proto_loops(lw, u, s, r, pbuf, out);
      proto_entries(lw, u, drop, s, LOOM__LX_SET, r, out);
    }
    proto_entries(lw, u, drop, x->nsteps, LOOM__LX_SET, r, out);
    proto_entries(lw, u, drop, x->nsteps, LOOM__LX_WAIT, r, out);
  }
  free(pbuf);
  return LOOM_SUCCESS;
}

/* ---- the check ------------------------------------------------------------------------ */

void loom__lw_check_worlds(const loom__prog_t *p, int *W, int *n) {
  const int G = loom__lang_ngroups(p);
  *n = 0;
  for (int w = G == 1 ? 2 : 1; w <= (G == 1 ? 3 : 2); ++w)
    if (G * w <= LOOM__PROTO_EXH_MAXW) W[(*n)++] = w;
}

/* Unit u of lw checked over two calls: LOOM_SUCCESS with *ok 1 or 0 (rep: the violation). */
static loom_result_t check_unit(const loom__lw_prog_t *lw, int u, int drop, int *ok, loom__proto_report_t *rep) {
  loom__proto_t *pr = malloc(sizeof *pr);
  if (!pr) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  loom_result_t r = loom__lw_protocol(lw, u, drop, pr);
  if (r == LOOM_SUCCESS) r = loom__proto_check(pr, 2, rep);
  *ok = r == LOOM_SUCCESS && rep->violation == LOOM__PV_NONE;
  loom__proto_free(pr);
  free(pr);
  return r;
}

loom_result_t loom__lw_check(const loom__lw_prog_t *lw) {
  loom__proto_report_t *rep = malloc(sizeof *rep);
  if (!rep) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  loom_result_t r = LOOM_SUCCESS;
  for (int u = 0; u < lw->nunit && r == LOOM_SUCCESS; ++u) {
    if (lw->units[u].kind != LOOM__LU_KERNEL || lw->units[u].nex == 0) continue;
    int ok;
    r = check_unit(lw, u, -1, &ok, rep);
    if (r == LOOM_SUCCESS && !ok)
      r = loom__fail(LOOM_ERR_INTERNAL, "the generated protocol of %s fails the model checker at %d ranks: %s",
                     lw->units[u].name, lw->R, rep->text);
  }
  free(rep);
  return r;
}

/* 1 if unit u passes at every check world (lws[0..n)). */
static loom_result_t passes(loom__lw_prog_t *lws, int n, int u, int *ok, loom__proto_report_t *rep) {
  *ok = 1;
  for (int k = 0; k < n && *ok; ++k) LOOM_TRY(check_unit(&lws[k], u, -1, ok, rep));
  return LOOM_SUCCESS;
}

static void set_off(loom__lw_prog_t *lws, int n, int i, int off) {
  for (int k = 0; k < n; ++k) lws[k].ex[i].off = off;
}

/* Unit u's optional entries: each done WAIT left out where the checker passes without it at every check
 * world; the done SETs with them once no done WAIT stays. */
static loom_result_t settle(loom__lw_prog_t *lws, int n, int u, loom__proto_report_t *rep) {
  const loom__lw_unit_t *x = &lws[0].units[u];
  int ok, waits = 0;
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i)
    if (lws[0].ex[i].optional && lws[0].ex[i].kind == LOOM__LX_WAIT) {
      set_off(lws, n, i, 1);
      LOOM_TRY(passes(lws, n, u, &ok, rep));
      if (!ok) set_off(lws, n, i, 0), waits++;
    }
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i)
    if (lws[0].ex[i].optional && lws[0].ex[i].kind == LOOM__LX_SET && !waits) set_off(lws, n, i, 1);
  return LOOM_SUCCESS;
}

/* 1 if two lowerings have the same units and exchange lists (they differ only in geometry). */
static int same_structure(const loom__lw_prog_t *a, const loom__lw_prog_t *b) {
  if (a->nunit != b->nunit || a->nex != b->nex || a->nloop != b->nloop) return 0;
  for (int u = 0; u < a->nunit; ++u)
    if (a->units[u].ex0 != b->units[u].ex0 || a->units[u].nex != b->units[u].nex) return 0;
  for (int i = 0; i < a->nex; ++i)
    if (a->ex[i].kind != b->ex[i].kind || a->ex[i].slot != b->ex[i].slot || a->ex[i].step != b->ex[i].step ||
        a->ex[i].pattern != b->ex[i].pattern)
      return 0;
  return 1;
}

/* The check worlds' lowerings of p with the optional entries settled, each checked. */
static loom_result_t settled(loom__prog_t *p, const loom__binding_t *bind, int lib, loom__lw_prog_t *lws, int *n) {
  int W[4];
  loom__lw_check_worlds(p, W, n);
  if (*n == 0)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "%d pipeline groups: the protocol checker covers at most %d ranks, so no "
                      "generated protocol of this program can be checked", loom__lang_ngroups(p), LOOM__PROTO_EXH_MAXW);
  loom__proto_report_t *rep = malloc(sizeof *rep);
  loom_result_t r = rep ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  int made = 0;
  for (; made < *n && r == LOOM_SUCCESS; ++made) r = loom__lw_lower_raw(p, W[made], bind, lib, &lws[made]);
  if (r == LOOM_SUCCESS) made = *n;
  else made--;
  for (int k = 1; k < made && r == LOOM_SUCCESS; ++k)
    if (!same_structure(&lws[0], &lws[k]))
      r = loom__fail(LOOM_ERR_INTERNAL, "lowering: %d and %d ranks give different exchanges", W[0], W[k]);
  for (int u = 0; r == LOOM_SUCCESS && u < lws[0].nunit; ++u)
    if (lws[0].units[u].kind == LOOM__LU_KERNEL) r = settle(lws, *n, u, rep);
  for (int k = 0; k < made && r == LOOM_SUCCESS; ++k) r = loom__lw_check(&lws[k]);
  if (r != LOOM_SUCCESS)
    for (int k = 0; k < made; ++k) loom__lw_free(&lws[k]);
  free(rep);
  return r;
}

loom_result_t loom__lw_lower_lib(loom__prog_t *p, int W, const loom__binding_t *bind, int lib, loom__lw_prog_t *out) {
  memset(out, 0, sizeof *out);
  LOOM_TRY(loom__lang_infer(p));
  loom__lw_prog_t lws[4];
  int n;
  LOOM_TRY(settled(p, bind, lib, lws, &n));
  loom_result_t r = loom__lw_lower_raw(p, W, bind, lib, out);
  if (r == LOOM_SUCCESS && !same_structure(out, &lws[0]))
    r = loom__fail(LOOM_ERR_INTERNAL, "lowering: %d ranks give other exchanges than %d", W, lws[0].W);
  for (int i = 0; r == LOOM_SUCCESS && i < out->nex; ++i) out->ex[i].off = lws[0].ex[i].off;
  for (int k = 0; k < n; ++k) loom__lw_free(&lws[k]);
  if (r != LOOM_SUCCESS) loom__lw_free(out);
  return r;
}

loom_result_t loom__lw_lower(loom__prog_t *p, int W, const loom__binding_t *bind, loom__lw_prog_t *out) {
  return loom__lw_lower_lib(p, W, bind, LOOM__LW_LIB_GEN, out);
}
