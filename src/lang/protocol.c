/*
 * protocol.c - building protocols (protocol.h): names of buffers and
 * signals, steps appended to a rank's list, their text, and the mutations
 * the tests use to show that every wait and every handshake matters.
 *
 * Builders never fail: a step or a name that does not fit sets `overflow`,
 * and loom__proto_check refuses such a protocol (the limits are fixed
 * arrays, so a protocol is a plain value that can be copied and mutated).
 */
#include <stdio.h>
#include <string.h>

#include "lang/protocol.h"

void loom__proto_init(loom__proto_t *p, const char *name, int W) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->W = W;
  if (W < 1 || W > LOOM__PROTO_MAXW) p->overflow = 1;
  p->nact = p->overflow ? 0 : W;
  for (int r = 0; r < p->nact; ++r) p->rank_of[r] = r;
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

int loom__proto_buf(loom__proto_t *p, const char *name) { return loom__proto_name(p->buf, &p->nbuf, name, &p->overflow); }
int loom__proto_sig(loom__proto_t *p, const char *name) { return loom__proto_name(p->sig, &p->nsig, name, &p->overflow); }

static void loom__proto_push(loom__proto_t *p, int r, int kind, int owner, int obj, int lo, int hi, int delta) {
  if (r < 0 || r >= p->nact || owner < 0 || owner >= p->W || p->n[r] >= LOOM__PROTO_MAXSTEPS || lo < 0 || hi < lo ||
      hi > INT16_MAX) {
    p->overflow = 1;
    return;
  }
  loom__pstep_t *s = &p->steps[r][p->n[r]++];
  s->kind = (int8_t)kind, s->owner = (int8_t)owner, s->obj = (int8_t)obj, s->delta = (int8_t)delta;
  s->lo = (int16_t)lo, s->hi = (int16_t)hi;
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
    snprintf(out, (size_t)cap, "%s %s@%d[%d..%d)", kinds[s->kind], name, s->owner, s->lo, s->hi);
  else
    snprintf(out, (size_t)cap, "%s %s@%d[%d] %s %d", kinds[s->kind], name, s->owner, s->lo,
             s->kind == LOOM__PS_SET ? "=" : ">=", call + s->delta);
}

void loom__proto_drop_step(const loom__proto_t *p, int r, int i, loom__proto_t *out) {
  *out = *p;
  if (r < 0 || r >= p->nact || i < 0 || i >= p->n[r]) return;
  memmove(&out->steps[r][i], &out->steps[r][i + 1], sizeof(loom__pstep_t) * (size_t)(p->n[r] - i - 1));
  out->n[r]--;
}

void loom__proto_drop_sig(const loom__proto_t *p, int sig, loom__proto_t *out) {
  *out = *p;
  for (int r = 0; r < p->nact; ++r) {
    int n = 0;
    for (int i = 0; i < p->n[r]; ++i) {
      const loom__pstep_t *s = &p->steps[r][i];
      if ((s->kind == LOOM__PS_SET || s->kind == LOOM__PS_WAIT) && s->obj == sig) continue;
      out->steps[r][n++] = *s;
    }
    out->n[r] = n;
  }
}
