/*
 * sched_parse.c - the statements of a Schedule section, as the paper's
 * figures write them:
 *
 *   fuseOut = fuse(d, out, ComputeFuse);
 *   (rsSum, agSum) = split(sum, AllReduceSplitRSAG);
 *   asSlice(m); dead(agM);
 *
 * A statement is [lhs =] fn(name, ...); where lhs is a name or a
 * parenthesised list of names and every argument is a name (of a Var, a
 * tensor, a kernel made by an earlier statement, or a policy). What the
 * names mean is transform.c's and group.c's business.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"
#include "lang/lexer.h"

static int punct(const loom__lexer_t *lx, const char *s) {
  return lx->tok.kind == LOOM__T_PUNCT && !strcmp(lx->tok.text, s);
}

static loom_result_t name(loom__lexer_t *lx, char out[LOOM__LANG_NAME], const char *expected) {
  if (lx->tok.kind != LOOM__T_IDENT || lx->tok.too_long || strlen(lx->tok.text) >= LOOM__LANG_NAME)
    return loom__lex_error(lx, &lx->tok, expected);
  snprintf(out, LOOM__LANG_NAME, "%s", lx->tok.text);
  loom__lex_next(lx);
  return LOOM_SUCCESS;
}

static loom_result_t expect(loom__lexer_t *lx, const char *s, const char *expected) {
  if (!punct(lx, s)) return loom__lex_error(lx, &lx->tok, expected);
  loom__lex_next(lx);
  return LOOM_SUCCESS;
}

/* ( a, b, ... ) into out[]; *n their count; line[], col[] (or NULL) where each name was written. */
static loom_result_t name_list(loom__lexer_t *lx, char out[][LOOM__LANG_NAME], int *n, const char *what, int *line,
                               int *col) {
  LOOM_TRY(expect(lx, "(", "`(`"));
  *n = 0;
  while (!punct(lx, ")")) {
    if (*n > 0) LOOM_TRY(expect(lx, ",", "`,` or `)`"));
    if (*n == LOOM__LANG_ARGS) return loom__lex_error(lx, &lx->tok, "`)`: at most 8 names");
    if (line) line[*n] = lx->tok.line, col[*n] = lx->tok.col;
    LOOM_TRY(name(lx, out[(*n)++], what));
  }
  loom__lex_next(lx);
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_parse_stmt_lx(loom__lexer_t *lx, loom__stmt_t *st) {
  memset(st, 0, sizeof *st);
  st->line = lx->tok.line, st->col = lx->tok.col;
  if (punct(lx, "(")) {
    LOOM_TRY(name_list(lx, st->lhs, &st->nlhs, "a name for a result", NULL, NULL));
    LOOM_TRY(expect(lx, "=", "`=` after the results"));
    LOOM_TRY(name(lx, st->fn, "a transformation: split, reorder, fuse, fuseComm, overlap, asSlice, dead"));
  } else {
    LOOM_TRY(name(lx, st->fn, "a transformation: split, reorder, fuse, fuseComm, overlap, asSlice, dead"));
    if (punct(lx, "=")) {
      loom__lex_next(lx);
      snprintf(st->lhs[0], LOOM__LANG_NAME, "%s", st->fn);
      st->nlhs = 1;
      LOOM_TRY(name(lx, st->fn, "a transformation: split, reorder, fuse, fuseComm, overlap, asSlice, dead"));
    }
  }
  LOOM_TRY(name_list(lx, st->args, &st->nargs, "a name (a Var, a tensor, a kernel or a policy)", st->arg_line,
                     st->arg_col));
  return expect(lx, ";", "`;` after the schedule statement");
}

loom_result_t loom__lang_parse_stmt(const char *text, loom__stmt_t *st) {
  loom__lexer_t lx;
  loom__lex_init(&lx, text, "<statement>");
  loom_result_t r = LOOM_SUCCESS;
  char buf[1024];
  /* a statement without its `;` is accepted: the API takes one line */
  const size_t len = strlen(text);
  if (len && len + 2 < sizeof buf && !strchr(text, ';')) {
    snprintf(buf, sizeof buf, "%s;", text);
    loom__lex_init(&lx, buf, "<statement>");
  }
  r = loom__lang_parse_stmt_lx(&lx, st);
  st->api = 1;
  if (r == LOOM_SUCCESS && lx.tok.kind != LOOM__T_EOF)
    r = loom__lex_error(&lx, &lx.tok, "the end of the statement (one statement per call)");
  return r;
}
