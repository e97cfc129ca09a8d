/*
 * lexer.c - .loom text to tokens (lexer.h). Never reads past the string's
 * terminating 0; every byte it does not know becomes a LOOM__T_BAD token
 * that the parser reports with its line and column.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lexer.h"

void loom__lex_init(loom__lexer_t *lx, const char *text, const char *file) {
  memset(lx, 0, sizeof *lx);
  lx->s = text ? text : "";
  lx->line = lx->col = 1;
  lx->file = file;
  loom__lex_next(lx);
}

static char peek(const loom__lexer_t *lx, size_t k) {
  for (size_t i = 0; i < k; ++i)
    if (!lx->s[lx->pos + i]) return 0;
  return lx->s[lx->pos + k];
}

static void adv(loom__lexer_t *lx) {
  if (!lx->s[lx->pos]) return;
  if (lx->s[lx->pos] == '\n')
    lx->line++, lx->col = 1;
  else
    lx->col++;
  lx->pos++;
}

/* Skips blanks and comments; 0 on an unterminated block comment (*bl, *bc: where it starts). */
static int skip_space(loom__lexer_t *lx, int *bl, int *bc) {
  for (;;) {
    char c = peek(lx, 0);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
      adv(lx);
    } else if (c == '#' || (c == '/' && peek(lx, 1) == '/')) {
      while (peek(lx, 0) && peek(lx, 0) != '\n') adv(lx);
    } else if (c == '/' && peek(lx, 1) == '*') {
      *bl = lx->line, *bc = lx->col;
      adv(lx), adv(lx);
      while (peek(lx, 0) && !(peek(lx, 0) == '*' && peek(lx, 1) == '/')) adv(lx);
      if (!peek(lx, 0)) return 0;
      adv(lx), adv(lx);
    } else {
      return 1;
    }
  }
}

static void put(loom__tok_t *t, size_t *n, char c) {
  if (*n + 1 < sizeof t->text)
    t->text[(*n)++] = c, t->text[*n] = 0;
  else
    t->too_long = 1;
}

static void lex_number(loom__lexer_t *lx, loom__tok_t *t) {
  size_t n = 0;
  t->is_int = 1;
  while (isdigit((unsigned char)peek(lx, 0))) put(t, &n, peek(lx, 0)), adv(lx);
  if (peek(lx, 0) == '.' && isdigit((unsigned char)peek(lx, 1))) {
    t->is_int = 0;
    put(t, &n, '.'), adv(lx);
    while (isdigit((unsigned char)peek(lx, 0))) put(t, &n, peek(lx, 0)), adv(lx);
  }
  char e = peek(lx, 0), s = peek(lx, 1);
  if ((e == 'e' || e == 'E') &&
      (isdigit((unsigned char)s) || ((s == '-' || s == '+') && isdigit((unsigned char)peek(lx, 2))))) {
    t->is_int = 0;
    put(t, &n, 'e'), adv(lx);
    if (s == '-' || s == '+') put(t, &n, s), adv(lx);
    while (isdigit((unsigned char)peek(lx, 0))) put(t, &n, peek(lx, 0)), adv(lx);
  }
  t->kind = t->too_long ? LOOM__T_BAD : LOOM__T_NUMBER;
  t->num = strtod(t->text, NULL);
}

static void lex_string(loom__lexer_t *lx, loom__tok_t *t) {
  size_t n = 0;
  adv(lx);
  while (peek(lx, 0) && peek(lx, 0) != '"' && peek(lx, 0) != '\n') put(t, &n, peek(lx, 0)), adv(lx);
  if (peek(lx, 0) != '"') {
    t->kind = LOOM__T_BAD;
    snprintf(t->text, sizeof t->text, "unterminated string");
    return;
  }
  adv(lx);
  t->kind = LOOM__T_STRING;
}

static void lex_punct(loom__lexer_t *lx, loom__tok_t *t) {
  static const char *two[] = {"<=", ">=", "==", "!="};
  size_t n = 0;
  for (size_t i = 0; i < sizeof two / sizeof two[0]; ++i)
    if (peek(lx, 0) == two[i][0] && peek(lx, 1) == two[i][1]) {
      put(t, &n, two[i][0]), put(t, &n, two[i][1]);
      adv(lx), adv(lx);
      t->kind = LOOM__T_PUNCT;
      return;
    }
  char c = peek(lx, 0);
  t->kind = strchr("()[]{},;=+-*/<>.:", c) ? LOOM__T_PUNCT : LOOM__T_BAD;
  if (t->kind == LOOM__T_BAD && (c < 32 || (unsigned char)c > 126))
    snprintf(t->text, sizeof t->text, "byte 0x%02x", (unsigned char)c);
  else
    put(t, &n, c);
  adv(lx);
}

void loom__lex_next(loom__lexer_t *lx) {
  loom__tok_t *t = &lx->tok;
  memset(t, 0, sizeof *t);
  int bl = 0, bc = 0;
  const int ok = skip_space(lx, &bl, &bc);
  t->line = lx->line, t->col = lx->col;
  if (!ok) {
    t->line = bl, t->col = bc;
    t->kind = LOOM__T_BAD;
    snprintf(t->text, sizeof t->text, "unterminated comment");
    return;
  }
  char c = peek(lx, 0);
  if (!c) {
    t->kind = LOOM__T_EOF;
  } else if (isalpha((unsigned char)c) || c == '_') {
    size_t n = 0;
    while (isalnum((unsigned char)peek(lx, 0)) || peek(lx, 0) == '_') put(t, &n, peek(lx, 0)), adv(lx);
    t->kind = LOOM__T_IDENT;
  } else if (isdigit((unsigned char)c)) {
    lex_number(lx, t);
  } else if (c == '"') {
    lex_string(lx, t);
  } else {
    lex_punct(lx, t);
  }
}

const char *loom__lex_what(const loom__tok_t *t, char *buf, size_t cap) {
  switch (t->kind) {
    case LOOM__T_EOF: snprintf(buf, cap, "end of file"); break;
    case LOOM__T_IDENT: snprintf(buf, cap, "identifier `%s%s`", t->text, t->too_long ? "..." : ""); break;
    case LOOM__T_NUMBER: snprintf(buf, cap, "number %s", t->text); break;
    case LOOM__T_STRING: snprintf(buf, cap, "string \"%s\"", t->text); break;
    case LOOM__T_PUNCT: snprintf(buf, cap, "`%s`", t->text); break;
    default:
      if (t->text[0] && t->text[1])
        snprintf(buf, cap, "%s", t->text);
      else
        snprintf(buf, cap, "bad character `%s`", t->text);
      break;
  }
  return buf;
}

loom_result_t loom__lex_error(const loom__lexer_t *lx, const loom__tok_t *t, const char *expected) {
  char what[96];
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: found %s; expected %s", lx->file ? lx->file : "<text>",
                    t->line, t->col, loom__lex_what(t, what, sizeof what), expected);
}
