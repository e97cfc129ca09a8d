/*
 * test_protocol_sites.c - each family's kernels take their wait sites
 * from one table: the family's table of signals
 * (src/ops/<family>/<family>_protocol.c), which also names each site in
 * timeout messages (loom__proto_register_sites). The kernels pass a site
 * by its constant (LOOM_SITE_..., a #define of the family's header), so
 * the table and the kernels could drift apart; this test reads the
 * family's sources and checks that
 *  - every site constant its code waits at (its .cu, .cuh and .c files,
 *    the protocol builder's excepted) is a site its table carries (else a
 *    timeout would name it "unknown", or another family's name);
 *  - every site the table names is one its code waits at (no stale name).
 * Run from the repository root (make test does).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/protocol.h"
#include "ops/coll/coll_protocol.h"
#include "ops/embedding/embedding_protocol.h"
#include "ops/moe/moe_protocol.h"
#include "ops/optim/optim_protocol.h"
#include "ops/tp/tp_protocol.h"

#define SITES_MAX 64

/* The LOOM_SITE_ constants a family's files define and use. */
typedef struct site_ids {
  int n, defines_only; /* defines_only: a folder read for its #defines (another layer's sites) */
  char id[SITES_MAX][64];
  long val[SITES_MAX]; /* -1: no #define read */
  char use[SITES_MAX][128]; /* a file that uses it ("": none) */
} site_ids_t;

static int site_id(site_ids_t *s, const char *id, size_t len) {
  for (int i = 0; i < s->n; ++i)
    if (strlen(s->id[i]) == len && !strncmp(s->id[i], id, len)) return i;
  if (s->n == SITES_MAX || len >= sizeof s->id[0]) return -1;
  memcpy(s->id[s->n], id, len), s->id[s->n][len] = 0;
  s->val[s->n] = -1, s->use[s->n][0] = 0;
  return s->n++;
}

/* 1 when the file is code that waits (not a header, not the protocol builder). */
static int code_file(const char *path) {
  const char *dot = strrchr(path, '.');
  if (!dot || strstr(path, "_protocol.")) return 0;
  return !strcmp(dot, ".cu") || !strcmp(dot, ".cuh") || !strcmp(dot, ".c");
}

/* Every LOOM_SITE_ token of a file: the name of a #define gives its value,
 * any other in a code file is a use. */
static void scan_file(const char *path, const char *data, size_t n, void *ctx) {
  site_ids_t *s = (site_ids_t *)ctx;
  for (const char *t = strstr(data, "LOOM_SITE_"); t; t = strstr(t + 1, "LOOM_SITE_")) {
    if (t > data && (t[-1] == '_' || (t[-1] >= 'A' && t[-1] <= 'Z'))) continue; /* part of a longer name */
    size_t len = 0;
    while ((t[len] >= 'A' && t[len] <= 'Z') || (t[len] >= '0' && t[len] <= '9') || t[len] == '_') len++;
    const char *line = t;
    while (line > data && line[-1] != '\n') line--;
    while (*line == ' ' || *line == '\t') line++;
    const int define = !strncmp(line, "#define", 7) && line + 7 + strspn(line + 7, " \t") == t;
    if (!define && (s->defines_only || !code_file(path))) continue;
    const int i = site_id(s, t, len);
    if (i < 0) {
      loom_test_fail(__FILE__, __LINE__, "%s: too many site names", path);
      return;
    }
    if (define) s->val[i] = strtol(t + len, NULL, 0);
    else if (!s->use[i][0]) snprintf(s->use[i], sizeof s->use[i], "%s", path);
  }
}

/* The family in folder `dir` against its table t[0..n). */
static void family_sites(const char *dir, const loom__proto_signal_t *t, int n) {
  static site_ids_t s;
  memset(&s, 0, sizeof s);
  char path[128];
  snprintf(path, sizeof path, "src/ops/%s", dir);
  CHECK(loom_test_each_file(path, scan_file, &s) > 0);
  s.defines_only = 1;
  CHECK(loom_test_each_file("src/gemm", scan_file, &s) > 0); /* the GEMM prologue's site */
  for (int i = 0; i < s.n; ++i) {
    if (!s.use[i][0]) continue;
    int k = 0;
    while (k < n && !(s.val[i] >= 0 && t[k].site == (uint32_t)s.val[i])) k++;
    if (s.val[i] < 0) loom_test_fail(__FILE__, __LINE__, "%s uses %s, defined nowhere read", s.use[i], s.id[i]);
    else if (k == n)
      loom_test_fail(__FILE__, __LINE__, "%s waits at %s (%ld), which %s's table of signals does not carry", s.use[i],
                     s.id[i], s.val[i], dir);
  }
  for (int k = 0; k < n; ++k) {
    if (!t[k].site || !t[k].what) continue;
    int i = 0;
    while (i < s.n && !(s.use[i][0] && s.val[i] == (long)t[k].site)) i++;
    if (i == s.n)
      loom_test_fail(__FILE__, __LINE__, "%s's table names site %u (\"%s\"), at which none of src/ops/%s waits", dir,
                     t[k].site, t[k].what, dir);
  }
}

LOOM_TEST(protocol_signal_tables_are_the_kernels_wait_sites) {
  family_sites("coll", loom__coll_signals, LOOM__COLL_NSIG);
  family_sites("tp", loom__tp_signals, LOOM__TP_NSIG);
  family_sites("optim", loom__optim_signals, LOOM__OPTIM_NSIG);
  family_sites("embedding", loom__emb_signals, LOOM__EMB_NSIG);
  family_sites("moe", loom__moe_signals, LOOM__MOE_NSIG);
}
