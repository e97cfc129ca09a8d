/*
 * bench_pair.c - see bench_pair.h.
 *
 * The peer's JSON is read with a small scanner of its own, enough for what
 * peer_timing.py writes: the "rows" array of flat objects whose values are
 * strings, numbers, true/false or null (a string's escapes are taken as the
 * escaped character: no shape value needs more). Each row is parsed into
 * (key, value, is-string) members, checked against loom's shape field by
 * field, and the best near-miss (fewest differing fields) gives the reason
 * when nothing pairs.
 */
#include "support/bench_pair.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shapes ---------------------------------------------------------------- */

void loom_bench_shape_init(loom_bench_shape_t *s) { memset(s, 0, sizeof *s); }

void loom_bench_shape_str(loom_bench_shape_t *s, const char *key, const char *val) {
  if (strlen(key) >= LOOM_BENCH_KEY_MAX || strlen(val) >= LOOM_BENCH_VAL_MAX) {
    s->overflow = 1;
    return;
  }
  int i = 0;
  while (i < s->n && strcmp(s->key[i], key)) ++i;
  if (i == LOOM_BENCH_SHAPE_MAX) {
    s->overflow = 1;
    return;
  }
  snprintf(s->key[i], LOOM_BENCH_KEY_MAX, "%s", key);
  snprintf(s->val[i], LOOM_BENCH_VAL_MAX, "%s", val);
  if (i == s->n) s->n++;
}

void loom_bench_shape_int(loom_bench_shape_t *s, const char *key, int64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%lld", (long long)v);
  loom_bench_shape_str(s, key, b);
}

void loom_bench_shape_num(loom_bench_shape_t *s, const char *key, double v) {
  char b[40];
  snprintf(b, sizeof b, "%.17g", v);
  loom_bench_shape_str(s, key, b);
}

/* ---- the peer's JSON --------------------------------------------------------- */

#define LOOM__MEMBERS 48

typedef struct loom__member {
  char key[LOOM_BENCH_KEY_MAX];
  char val[128];
  int str; /* 1: a JSON string; 0: a number, true, false or null (as written) */
} loom__member_t;

static const char *loom__ws(const char *p, const char *e) {
  while (p < e && isspace((unsigned char)*p)) ++p;
  return p;
}

/* The string at p (on its opening quote) into buf; the character after the
 * closing quote, or NULL where it does not close. */
static const char *loom__string(const char *p, const char *e, char *buf, size_t cap) {
  size_t n = 0;
  for (++p; p < e && *p != '"'; ++p) {
    if (*p == '\\' && p + 1 < e) ++p;
    if (n + 1 < cap) buf[n++] = *p;
  }
  buf[n] = 0;
  return p < e ? p + 1 : NULL;
}

/* One member "key": value at p into m; the character after it, or NULL. */
static const char *loom__member(const char *p, const char *e, loom__member_t *m) {
  if (p >= e || *p != '"' || !(p = loom__string(p, e, m->key, sizeof m->key))) return NULL;
  p = loom__ws(p, e);
  if (p >= e || *p != ':') return NULL;
  p = loom__ws(p + 1, e);
  if (p >= e || *p == '{' || *p == '[') return NULL; /* flat rows only */
  m->str = *p == '"';
  if (m->str) return loom__string(p, e, m->val, sizeof m->val);
  size_t n = 0;
  for (; p < e && *p != ',' && *p != '}' && !isspace((unsigned char)*p); ++p)
    if (n + 1 < sizeof m->val) m->val[n++] = *p;
  m->val[n] = 0;
  return n ? p : NULL;
}

/* The flat object at p (on '{'): its members into m[0 .. count); count, or
 * -1 where it is not a flat object. *next: after its '}'. */
static int loom__object(const char *p, const char *e, loom__member_t *m, int cap, const char **next) {
  int n = 0;
  p = loom__ws(p + 1, e);
  if (p < e && *p == '}') {
    *next = p + 1;
    return 0;
  }
  while (p < e) {
    if (n == cap || !(p = loom__member(p, e, &m[n]))) return -1;
    ++n;
    p = loom__ws(p, e);
    if (p < e && *p == '}') {
      *next = p + 1;
      return n;
    }
    if (p >= e || *p != ',') return -1;
    p = loom__ws(p + 1, e);
  }
  return -1;
}

/* Just after the '[' of the document's "rows" array, or NULL. */
static const char *loom__rows(const char *json, const char *e) {
  for (const char *p = strstr(json, "\"rows\""); p; p = strstr(p + 1, "\"rows\"")) {
    const char *q = loom__ws(p + 6, e);
    if (q < e && *q == ':') {
      q = loom__ws(q + 1, e);
      if (q < e && *q == '[') return q + 1;
    }
  }
  return NULL;
}

static const loom__member_t *loom__find(const loom__member_t *m, int n, const char *key) {
  for (int i = 0; i < n; ++i)
    if (!strcmp(m[i].key, key)) return &m[i];
  return NULL;
}

/* 1 when t reads completely as a finite number (into *v). */
static int loom__number(const char *t, double *v) {
  if (!(isdigit((unsigned char)t[0]) || t[0] == '-' || t[0] == '+' || t[0] == '.')) return 0;
  char *end = NULL;
  errno = 0;
  const double d = strtod(t, &end);
  if (end == t || *end || errno || !isfinite(d)) return 0;
  *v = d;
  return 1;
}

/* The peer's member x holds loom's value `val` (see bench_pair.h: Values). */
static int loom__same(const loom__member_t *x, const char *val) {
  double a = 0, b = 0;
  if (loom__number(val, &a)) return !x->str && loom__number(x->val, &b) && a == b;
  return x->str && !strcmp(x->val, val);
}

/* ---- pairing ------------------------------------------------------------------ */

/* Counts a problem; the first one's text goes to why. */
static void loom__problem(int *np, char *why, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static void loom__problem(int *np, char *why, size_t cap, const char *fmt, ...) {
  if ((*np)++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
  }
}

/* 1 when `key` is one of the comma-separated keys in list. */
static int loom__listed(const char *list, const char *key) {
  const size_t n = strlen(key);
  for (const char *p = list; *p;) {
    const char *c = strchr(p, ',');
    const size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == n && !strncmp(p, key, n)) return 1;
    p += len + (c != NULL);
  }
  return 0;
}

/* The shape fields in which the peer's row m differs from s (0: it is the
 * same shape); the first difference's text into why. */
static int loom__differences(const loom__member_t *m, int nm, const loom_bench_shape_t *s, char *why, size_t cap) {
  int np = 0;
  why[0] = 0;
  for (int i = 0; i < s->n; ++i) {
    const loom__member_t *x = loom__find(m, nm, s->key[i]);
    if (!x) loom__problem(&np, why, cap, "peer row lacks %s, row has %s=%s", s->key[i], s->key[i], s->val[i]);
    else if (!loom__same(x, s->val[i])) {
      double v = 0;
      const char *q = x->str && loom__number(s->val[i], &v) ? "\"" : ""; /* a string where a number belongs */
      loom__problem(&np, why, cap, "peer ran %s=%s%s%s, row has %s=%s", s->key[i], q, x->val, q, s->key[i], s->val[i]);
    }
  }
  const loom__member_t *keys = loom__find(m, nm, "shape_keys");
  if (!keys || !keys->str) {
    loom__problem(&np, why, cap, "peer row does not list its shape_keys");
    return np;
  }
  char k[LOOM_BENCH_KEY_MAX];
  for (const char *p = keys->val; *p;) {
    const char *c = strchr(p, ',');
    const size_t len = c ? (size_t)(c - p) : strlen(p);
    snprintf(k, sizeof k, "%.*s", (int)(len < sizeof k ? len : sizeof k - 1), p);
    int have = 0;
    for (int i = 0; i < s->n && !have; ++i) have = !strcmp(s->key[i], k);
    if (!have && len) loom__problem(&np, why, cap, "peer's shape has %s, this row's does not", k);
    p += len + (c != NULL);
  }
  for (int i = 0; i < s->n; ++i)
    if (!loom__listed(keys->val, s->key[i]))
      loom__problem(&np, why, cap, "peer's shape_keys lack %s", s->key[i]);
  return np;
}

/* The time and timing of the matching row m into out (paired or why not). */
static int loom__take(const loom__member_t *m, int nm, const char *variant, int host_excluded, loom_bench_pair_t *out) {
  const loom__member_t *us = loom__find(m, nm, "us"), *timing = loom__find(m, nm, "timing");
  double v = NAN;
  if (!us || us->str || !loom__number(us->val, &v) || !(v > 0)) {
    snprintf(out->why, sizeof out->why, "peer's %s gave no time for this shape", variant);
    return 0;
  }
  if (!timing || !timing->str || !timing->val[0]) {
    snprintf(out->why, sizeof out->why, "peer's %s row does not say how it was timed", variant);
    return 0;
  }
  const int graph = !strcmp(timing->val, "graph");
  if (host_excluded && !graph) {
    snprintf(out->why, sizeof out->why, "peer's %s was timed %s; this row's time excludes host time", variant,
             timing->val);
    return 0;
  }
  out->paired = 1, out->us = v, out->graph = graph;
  snprintf(out->timing, sizeof out->timing, "%.*s", (int)sizeof out->timing - 1, timing->val);
  return 1;
}

static void loom__pair_init(loom_bench_pair_t *out) {
  memset(out, 0, sizeof *out);
  out->us = NAN;
}

int loom_bench_pair_text(const char *json, const char *variant, const loom_bench_shape_t *shape, int host_excluded,
                         loom_bench_pair_t *out) {
  loom__pair_init(out);
  if (shape->overflow) {
    snprintf(out->why, sizeof out->why, "this row's shape does not fit loom_bench_shape_t");
    return 0;
  }
  const char *e = json + strlen(json), *p = loom__rows(json, e);
  if (!p) {
    snprintf(out->why, sizeof out->why, "peer JSON has no rows array");
    return 0;
  }
  loom__member_t m[LOOM__MEMBERS], hit[LOOM__MEMBERS];
  int nhit = -1, rows = 0, best = INT_MAX;
  char why[sizeof out->why];
  for (p = loom__ws(p, e); p < e && *p != ']'; p = loom__ws(p, e)) {
    const int nm = *p == '{' ? loom__object(p, e, m, LOOM__MEMBERS, &p) : -1;
    if (nm < 0) {
      snprintf(out->why, sizeof out->why, "peer JSON row %d is not a flat object", rows);
      return 0;
    }
    p = loom__ws(p, e);
    if (p < e && *p == ',') ++p;
    const loom__member_t *v = loom__find(m, nm, "variant");
    if (!v || !v->str || strcmp(v->val, variant)) continue;
    ++rows;
    const int d = loom__differences(m, nm, shape, why, sizeof why);
    if (d == 0) memcpy(hit, m, (size_t)nm * sizeof m[0]), nhit = nm;
    else if (d < best) {
      best = d;
      snprintf(out->why, sizeof out->why, "%.150s%s", why, d > 1 ? " (and more)" : "");
    }
  }
  if (nhit >= 0) {
    out->why[0] = 0;
    return loom__take(hit, nhit, variant, host_excluded, out);
  }
  if (!rows) snprintf(out->why, sizeof out->why, "peer has no %s row", variant);
  return 0;
}

/* The whole file at path, NUL-terminated (free it), or NULL. */
static char *loom__read_file(const char *path) {
  FILE *f = path && path[0] ? fopen(path, "rb") : NULL;
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int ok = 1;
  for (;;) {
    if (len + 1 >= cap) {
      char *b = (char *)realloc(buf, cap = cap ? 2 * cap : (size_t)1 << 16);
      if (!b) {
        ok = 0;
        break;
      }
      buf = b;
    }
    const size_t got = fread(buf + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) break;
  }
  if (ferror(f)) ok = 0;
  fclose(f);
  if (!ok) {
    free(buf);
    return NULL;
  }
  buf[len] = 0;
  return buf;
}

int loom_bench_pair_file(const char *path, const char *variant, const loom_bench_shape_t *shape, int host_excluded,
                         loom_bench_pair_t *out) {
  char *buf = loom__read_file(path);
  if (!buf) {
    loom__pair_init(out);
    snprintf(out->why, sizeof out->why, "peer JSON %.120s unreadable", path && path[0] ? path : "(none)");
    return 0;
  }
  const int r = loom_bench_pair_text(buf, variant, shape, host_excluded, out);
  free(buf);
  return r;
}
