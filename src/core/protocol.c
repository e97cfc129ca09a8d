/*
 * protocol.c - building protocols (protocol.h): names of buffers and
 * signals, steps appended to an actor's list, their text, the mutations
 * the tests use to show that every wait and every handshake matters, and
 * the registration of a family's wait sites from its signal table.
 *
 * Builders never fail: a step or a name that does not fit (or no memory
 * for a list) sets `overflow`, and the checkers refuse such a protocol. A
 * protocol owns its lists: loom__proto_free releases them, and a copy or a
 * mutation is a new protocol with lists of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/protocol.h"
#include "core/signal.h"

void loom__proto_init(loom__proto_t *p, const char *name, int W) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->W = W;
  if (W < 1 || W > LOOM__PROTO_MAXW) p->overflow = 1;
  p->nact = p->overflow ? 0 : W;
  for (int r = 0; r < p->nact; ++r) p->rank_of[r] = r;
}

void loom__proto_free(loom__proto_t *p) {
  if (!p) return;
  for (int r = 0; r < LOOM__PROTO_MAXACT; ++r) {
    free(p->steps[r]);
    p->steps[r] = NULL, p->n[r] = 0, p->cap[r] = 0;
  }
}

/* Room for one more step in actor r's list (0: none: overflow). */
static int loom__proto_room(loom__proto_t *p, int r, int need) {
  if (need <= p->cap[r]) return 1;
  int cap = p->cap[r] ? p->cap[r] : 16;
  while (cap < need) cap *= 2;
  loom__pstep_t *s = (loom__pstep_t *)realloc(p->steps[r], sizeof *s * (size_t)cap);
  if (!s) return 0;
  p->steps[r] = s, p->cap[r] = cap;
  return 1;
}

void loom__proto_copy(const loom__proto_t *p, loom__proto_t *out) {
  *out = *p;
  for (int r = 0; r < LOOM__PROTO_MAXACT; ++r) out->steps[r] = NULL, out->cap[r] = 0;
  for (int r = 0; r < p->nact; ++r) {
    if (!p->n[r]) continue;
    if (!loom__proto_room(out, r, p->n[r])) {
      out->overflow = 1, out->n[r] = 0;
      continue;
    }
    memcpy(out->steps[r], p->steps[r], sizeof(loom__pstep_t) * (size_t)p->n[r]);
  }
}

int loom__proto_actor(loom__proto_t *p, int rank) {
  if (p->nact >= LOOM__PROTO_MAXACT || rank < 0 || rank >= p->W) {
    p->overflow = 1;
    return 0;
  }
  p->rank_of[p->nact] = rank;
  return p->nact++;
}

static int loom__proto_name(char (*names)[LOOM__PROTO_NAME], int *n, const char *name, int *overflow) {
  for (int i = 0; i < *n; ++i)
    if (strcmp(names[i], name) == 0) return i;
  if (*n >= LOOM__PROTO_MAXOBJ) {
    *overflow = 1;
    return 0;
  }
  snprintf(names[*n], LOOM__PROTO_NAME, "%s", name);
  return (*n)++;
}

int loom__proto_buf(loom__proto_t *p, const char *name) {
  return loom__proto_name(p->buf, &p->nbuf, name, &p->overflow);
}
int loom__proto_sig(loom__proto_t *p, const char *name) {
  return loom__proto_name(p->sig, &p->nsig, name, &p->overflow);
}
int loom__proto_sig_of(loom__proto_t *p, const loom__proto_signal_t *s) { return loom__proto_sig(p, s->name); }

void loom__proto_once(loom__proto_t *p, int buf) {
  if (buf < 0 || buf >= p->nbuf) p->overflow = 1;
  else p->once[buf] = 1;
}

static void loom__proto_push(loom__proto_t *p, int r, int kind, int owner, int obj, int lo, int hi, int delta) {
  const int sig = kind == LOOM__PS_SET || kind == LOOM__PS_WAIT;
  if (r < 0 || r >= p->nact || owner < 0 || owner >= p->W || lo < 0 || hi < lo || (sig && lo >= LOOM__PROTO_MAXSLOT) ||
      delta < INT8_MIN || delta > INT8_MAX || !loom__proto_room(p, r, p->n[r] + 1)) {
    p->overflow = 1;
    return;
  }
  loom__pstep_t *s = &p->steps[r][p->n[r]++];
  s->kind = (int8_t)kind, s->owner = (int8_t)owner, s->obj = (int8_t)obj, s->delta = (int8_t)delta;
  s->lo = lo, s->hi = hi;
}

void loom__proto_write(loom__proto_t *p, int r, int owner, int buf, int lo, int hi) {
  loom__proto_push(p, r, LOOM__PS_WRITE, owner, buf, lo, hi, 0);
}
void loom__proto_read(loom__proto_t *p, int r, int owner, int buf, int lo, int hi) {
  loom__proto_push(p, r, LOOM__PS_READ, owner, buf, lo, hi, 0);
}
void loom__proto_add(loom__proto_t *p, int r, int owner, int buf, int lo, int hi) {
  loom__proto_push(p, r, LOOM__PS_ADD, owner, buf, lo, hi, 0);
}
void loom__proto_set(loom__proto_t *p, int r, int owner, int sig, int slot, int delta) {
  loom__proto_push(p, r, LOOM__PS_SET, owner, sig, slot, slot + 1, delta);
}
void loom__proto_wait(loom__proto_t *p, int r, int owner, int sig, int slot, int delta) {
  loom__proto_push(p, r, LOOM__PS_WAIT, owner, sig, slot, slot + 1, delta);
}
void loom__proto_wait_peers(loom__proto_t *p, int r, int sig, int slot, int delta) {
  const int rank = r >= 0 && r < p->nact ? p->rank_of[r] : 0;
  for (int i = 0; i < p->W - 1; ++i) loom__proto_wait(p, r, (rank + 1 + i) % p->W, sig, slot, delta);
}

void loom__proto_step_str(const loom__proto_t *p, const loom__pstep_t *s, int call, char *out, int cap) {
  static const char *kinds[] = {"WRITE", "READ", "SET", "WAIT", "ADD"};
  const int isbuf = s->kind == LOOM__PS_WRITE || s->kind == LOOM__PS_READ || s->kind == LOOM__PS_ADD;
  const char *name = isbuf ? p->buf[s->obj] : p->sig[s->obj];
  if (isbuf)
    snprintf(out, (size_t)cap, "%s %s@%d[%d..%d)", kinds[s->kind], name, s->owner, (int)s->lo, (int)s->hi);
  else
    snprintf(out, (size_t)cap, "%s %s@%d[%d] %s %d", kinds[s->kind], name, s->owner, (int)s->lo,
             s->kind == LOOM__PS_SET ? "=" : ">=", call + s->delta);
}

void loom__proto_drop_step(const loom__proto_t *p, int r, int i, loom__proto_t *out) {
  loom__proto_copy(p, out);
  if (r < 0 || r >= p->nact || i < 0 || i >= p->n[r] || !out->steps[r]) return;
  memmove(&out->steps[r][i], &out->steps[r][i + 1], sizeof(loom__pstep_t) * (size_t)(p->n[r] - i - 1));
  out->n[r]--;
}

/* out = p without the steps of signal `sig` whose kind is in `kinds` (a bit per kind). */
static void loom__proto_drop_kinds(const loom__proto_t *p, int sig, unsigned kinds, loom__proto_t *out) {
  loom__proto_copy(p, out);
  for (int r = 0; r < p->nact; ++r) {
    int n = 0;
    for (int i = 0; i < out->n[r]; ++i) {
      const loom__pstep_t *s = &out->steps[r][i];
      if ((s->kind == LOOM__PS_SET || s->kind == LOOM__PS_WAIT) && s->obj == sig && (kinds >> s->kind & 1u)) continue;
      out->steps[r][n++] = *s;
    }
    out->n[r] = n;
  }
}

void loom__proto_drop_sig(const loom__proto_t *p, int sig, loom__proto_t *out) {
  loom__proto_drop_kinds(p, sig, 1u << LOOM__PS_SET | 1u << LOOM__PS_WAIT, out);
}

void loom__proto_drop_waits(const loom__proto_t *p, int sig, loom__proto_t *out) {
  loom__proto_drop_kinds(p, sig, 1u << LOOM__PS_WAIT, out);
}

int loom__proto_register_sites(const loom__proto_signal_t *t, int n) {
  int refused = 0;
  for (int i = 0; i < n; ++i)
    if (t[i].what && t[i].site) refused += loom__wait_site_register(t[i].site, t[i].what) != 0;
  return refused;
}
