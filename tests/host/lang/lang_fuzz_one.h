/*
 * lang_fuzz_one.h - one input of the language's fuzzer (dev/lang/fuzz.sh)
 * and of its kept corpus (test_lang_fuzz_corpus.c): any bytes go through
 * parse -> check -> print -> parse again (must give an equal graph) ->
 * each Schedule section (applied, printed and parsed back equal) -> the
 * interpreter at W = 1 and 2 with every symbol bound to 3 (the scheduled
 * and unscheduled results must agree). Errors are fine; a crash, a leak
 * (under the sanitizers) or a broken property is a finding.
 * Returns 0, or the number of the property that broke.
 */
#ifndef LOOM_TESTS_LANG_FUZZ_ONE_H
#define LOOM_TESTS_LANG_FUZZ_ONE_H

#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "lang/lang.h"

static inline char *lang_fuzz_print(loom_prog_t p) {
  loom__buf_t b = {0};
  if (loom__lang_print(p, 0, &b) != LOOM_SUCCESS) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

/* The printed text parses back (with its applied schedule) to an equal graph. */
static inline int lang_fuzz_round_trip(loom_prog_t p) {
  char *text = lang_fuzz_print(p);
  loom_prog_t q = NULL, r = NULL;
  int eq = 0;
  if (text && loom_prog_parse(text, "printed", &q) == LOOM_SUCCESS &&
      loom_prog_schedule(q, p->ngroups ? "applied" : NULL, &r) == LOOM_SUCCESS)
    loom_prog_equal(p, r, &eq);
  loom_prog_destroy(q);
  loom_prog_destroy(r);
  free(text);
  return eq;
}

/* "A=3,B=3,..." for every symbol of the program. */
static inline void lang_fuzz_bind(loom_prog_t p, char *out, size_t cap) {
  size_t n = 0;
  int count = 0;
  out[0] = 0;
  for (int i = 0; i < p->n && count < 16; ++i)
    for (int d = 0; d < p->nodes[i].decl.rank; ++d) {
      const char *s = p->nodes[i].decl.dims[d].sym;
      if (!s[0] || strstr(out, s)) continue; /* (a prefix match only binds fewer) */
      n += (size_t)snprintf(out + n, cap - n, "%s%s=3", n ? "," : "", s);
      if (n >= cap || ++count == 16) return;
    }
}

static inline int lang_fuzz_one(const char *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  loom_prog_t p = NULL;
  int bad = 0;
  if (loom_prog_parse(text, "fuzz", &p) == LOOM_SUCCESS && loom_prog_check(p) == LOOM_SUCCESS) {
    if (!lang_fuzz_round_trip(p)) bad = 1;
    char bind[256];
    lang_fuzz_bind(p, bind, sizeof bind);
    for (int s = 0; s < p->nsched && !bad; ++s) {
      loom_prog_t q = NULL;
      if (loom_prog_schedule(p, p->scheds[s].name, &q) == LOOM_SUCCESS) {
        if (!lang_fuzz_round_trip(q)) bad = 2;
        for (int w = 1; w <= 2 && !bad; ++w) {
          double d = 0;
          const loom_result_t r = loom_prog_interp_compare(p, q, w, bind, 1, &d);
          if (r == LOOM_SUCCESS && d != 0) bad = 3;
          if (r == LOOM_ERR_INTERNAL) bad = 4;
        }
      }
      loom_prog_destroy(q);
    }
    double d = 0;
    if (!bad && loom_prog_interp_compare(p, p, 2, bind, 1, &d) == LOOM_ERR_INTERNAL) bad = 4;
  }
  loom_prog_destroy(p);
  free(text);
  return bad;
}

#endif /* LOOM_TESTS_LANG_FUZZ_ONE_H */
