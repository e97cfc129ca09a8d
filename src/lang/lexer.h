/*
 * lexer.h - the tokens of .loom text, with the line and column where each
 * starts (1-based). Comments: // to the end of the line, and # likewise;
 * block comments (slash-star to star-slash). Numbers: decimal integers and floats (1e-5).
 * Strings: "..." without escapes ("+" in AllReduce("+", x)).
 */
#ifndef LOOM_LANG_LEXER_H
#define LOOM_LANG_LEXER_H

#include "loom.h"

typedef enum loom__tok_kind {
  LOOM__T_EOF, LOOM__T_IDENT, LOOM__T_NUMBER, LOOM__T_STRING, LOOM__T_PUNCT, LOOM__T_BAD
} loom__tok_kind_t;

typedef struct loom__tok {
  loom__tok_kind_t kind;
  char text[64]; /* identifiers, punctuation ("<="), strings without quotes; truncated */
  int too_long;  /* the token is longer than text holds */
  double num;
  int is_int;
  int line, col;
} loom__tok_t;

typedef struct loom__lexer {
  const char *s;
  size_t pos;
  int line, col;
  const char *file;
  loom__tok_t tok; /* the current token */
} loom__lexer_t;

void loom__lex_init(loom__lexer_t *lx, const char *text, const char *file);
/* Advances to the next token (an unterminated comment or string is LOOM__T_BAD). */
void loom__lex_next(loom__lexer_t *lx);
/* A description of the current token for messages: "identifier `x`", "`;`", "end of file". */
const char *loom__lex_what(const loom__tok_t *t, char *buf, size_t cap);

/* sched_parse.c: one schedule statement `[lhs =] fn(arg, ...);` at the current
 * token (the `;` consumed); errors name file:line:column. */
struct loom__stmt;
loom_result_t loom__lang_parse_stmt_lx(loom__lexer_t *lx, struct loom__stmt *st);
/* The parse error at token t: "file:line:col: found <t>; expected <what>". */
loom_result_t loom__lex_error(const loom__lexer_t *lx, const loom__tok_t *t, const char *expected);

#endif /* LOOM_LANG_LEXER_H */
