/*
 * parser.c - .loom text to a program graph (recursive descent, one token of
 * look-ahead). The grammar (docs/language.md has it in full):
 *
 *   stmt    := Tensor NAME ( DTYPE , [dims] , layout [, group] [, RANK] ) ;
 *            | Scalar NAME ( DTYPE [, group] ) ;
 *            | [Var] NAME = expr ;            (names starting with `_`: anonymous)
 *            | State NAME = NAME ;            (the value a state holds afterwards)
 *            | Execute NAME ( {names} , {names} ) ;
 *            | Schedule NAME { sched-stmt* }
 *   expr    := sum [(< <= > >= == !=) sum]
 *   sum     := term {(+ | -) term}     term := unary {(* | /) unary}
 *   unary   := - unary | postfix       postfix := primary [. update ( expr )]
 *   primary := NUMBER | NAME | NAME ( args ) | ( expr )
 *
 * Every error is "file:line:col: found X; expected Y" (loom__lex_error) or,
 * for names, what is wrong with the name at its position. The parser stops
 * at the first error and frees what it built.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"
#include "lang/lexer.h"

typedef struct parser {
  loom__lexer_t lx;
  loom__prog_t *p;
} parser_t;

#define TOK (&ps->lx.tok)

static int is_punct(const parser_t *ps, const char *s) {
  return ps->lx.tok.kind == LOOM__T_PUNCT && !strcmp(ps->lx.tok.text, s);
}
static int is_ident(const parser_t *ps, const char *s) {
  return ps->lx.tok.kind == LOOM__T_IDENT && !strcmp(ps->lx.tok.text, s);
}
static loom_result_t fail_at(parser_t *ps, const char *expected) { return loom__lex_error(&ps->lx, TOK, expected); }

static loom_result_t expect(parser_t *ps, const char *punct, const char *expected) {
  if (!is_punct(ps, punct)) return fail_at(ps, expected);
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t take_name(parser_t *ps, char out[LOOM__LANG_NAME], const char *expected) {
  if (TOK->kind != LOOM__T_IDENT || TOK->too_long || strlen(TOK->text) >= LOOM__LANG_NAME) return fail_at(ps, expected);
  snprintf(out, LOOM__LANG_NAME, "%s", TOK->text);
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t take_int(parser_t *ps, int lo, int hi, int *v, const char *expected) {
  if (TOK->kind != LOOM__T_NUMBER || !TOK->is_int || TOK->num < lo || TOK->num > hi) return fail_at(ps, expected);
  *v = (int)TOK->num;
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t take_number(parser_t *ps, double *v, const char *expected) {
  if (TOK->kind != LOOM__T_NUMBER) return fail_at(ps, expected);
  *v = TOK->num;
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

/* ---- declarations ----------------------------------------------------------- */

static loom_result_t parse_dtype(parser_t *ps, int *dt) {
  static const char *names[] = {"FP32", "FP16", "BF16"};
  for (int i = 0; i < 3; ++i)
    if (is_ident(ps, names[i])) {
      *dt = i; /* LOOM_FP32, LOOM_FP16, LOOM_BF16 */
      loom__lex_next(&ps->lx);
      return LOOM_SUCCESS;
    }
  return fail_at(ps, "a dtype: FP32, FP16 or BF16");
}

static loom_result_t parse_dim(parser_t *ps, loom__dim_t *d) {
  memset(d, 0, sizeof *d);
  if (TOK->kind == LOOM__T_NUMBER && TOK->is_int && TOK->num >= 1 && TOK->num <= 1e15) {
    d->n = (int64_t)TOK->num;
  } else if (TOK->kind == LOOM__T_IDENT && !TOK->too_long && strlen(TOK->text) < sizeof d->sym) {
    snprintf(d->sym, sizeof d->sym, "%s", TOK->text);
  } else {
    return fail_at(ps, "a size: a positive integer or a symbol of at most 15 characters");
  }
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t parse_shape(parser_t *ps, loom__type_t *t) {
  LOOM_TRY(expect(ps, "[", "`[` opening the shape"));
  t->rank = 0;
  while (!is_punct(ps, "]")) {
    if (t->rank == LOOM__LANG_RANK) return fail_at(ps, "`]`: at most 6 dimensions");
    if (t->rank > 0) LOOM_TRY(expect(ps, ",", "`,` or `]` in the shape"));
    LOOM_TRY(parse_dim(ps, &t->dims[t->rank++]));
  }
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t parse_layout(parser_t *ps, loom__layout_t *l) {
  const char *exp = "a layout: Sliced(dim), Replicated, Local or Root(rank)";
  if (is_ident(ps, "Replicated") || is_ident(ps, "Local")) {
    l->kind = is_ident(ps, "Local") ? LOOM__LAY_LOCAL : LOOM__LAY_REPLICATED;
    loom__lex_next(&ps->lx);
    return LOOM_SUCCESS;
  }
  if (!is_ident(ps, "Sliced") && !is_ident(ps, "Root")) return fail_at(ps, exp);
  l->kind = is_ident(ps, "Sliced") ? LOOM__LAY_SLICED : LOOM__LAY_ROOT;
  loom__lex_next(&ps->lx);
  LOOM_TRY(expect(ps, "(", "`(` after the layout's name"));
  LOOM_TRY(take_int(ps, 0, 1 << 20, &l->arg, "a dimension or rank (an integer >= 0)"));
  return expect(ps, ")", "`)` closing the layout");
}

static loom_result_t parse_group(parser_t *ps, int *g) {
  if (is_ident(ps, "WORLD")) {
    *g = LOOM__GROUP_WORLD;
    loom__lex_next(&ps->lx);
    return LOOM_SUCCESS;
  }
  if (!is_ident(ps, "GROUP")) return fail_at(ps, "a group: WORLD or GROUP(i)");
  loom__lex_next(&ps->lx);
  LOOM_TRY(expect(ps, "(", "`(` after GROUP"));
  LOOM_TRY(take_int(ps, 0, 1023, g, "a group index (0..1023)"));
  return expect(ps, ")", "`)` closing GROUP(i)");
}

static loom_result_t define_input(parser_t *ps, const char *name, const loom__type_t *decl, int line, int col) {
  int id;
  LOOM_TRY(loom__lang_add(ps->p, LOOM__OP_INPUT, NULL, 0, line, col, &id));
  ps->p->nodes[id].decl = *decl;
  ps->p->nodes[id].dtype = decl->dtype;
  loom_result_t r = loom__lang_set_name(ps->p, id, name);
  if (r != LOOM_SUCCESS) {
    ps->p->nodes[id].removed = 1;
    return loom__fail(r, "%s:%d:%d: `%s` is defined twice; expected a new name", ps->lx.file, line, col, name);
  }
  return LOOM_SUCCESS;
}

static loom_result_t parse_tensor(parser_t *ps) {
  char name[LOOM__LANG_NAME];
  loom__type_t t;
  memset(&t, 0, sizeof t);
  const int line = TOK->line, col = TOK->col;
  LOOM_TRY(take_name(ps, name, "the tensor's name"));
  LOOM_TRY(expect(ps, "(", "`(` after the tensor's name"));
  LOOM_TRY(parse_dtype(ps, &t.dtype));
  LOOM_TRY(expect(ps, ",", "`,` after the dtype"));
  LOOM_TRY(parse_shape(ps, &t));
  LOOM_TRY(expect(ps, ",", "`,` after the shape"));
  LOOM_TRY(parse_layout(ps, &t.lay));
  t.lay.group = LOOM__GROUP_WORLD;
  if (is_punct(ps, ",")) {
    loom__lex_next(&ps->lx);
    LOOM_TRY(parse_group(ps, &t.lay.group));
    if (is_punct(ps, ",")) {
      loom__lex_next(&ps->lx);
      if (!is_ident(ps, "RANK")) return fail_at(ps, "RANK");
      loom__lex_next(&ps->lx);
    }
  }
  LOOM_TRY(expect(ps, ")", "`)` closing the tensor declaration"));
  LOOM_TRY(expect(ps, ";", "`;` after the tensor declaration"));
  return define_input(ps, name, &t, line, col);
}

static loom_result_t parse_scalar(parser_t *ps) {
  char name[LOOM__LANG_NAME];
  loom__type_t t;
  memset(&t, 0, sizeof t);
  const int line = TOK->line, col = TOK->col;
  LOOM_TRY(take_name(ps, name, "the scalar's name"));
  LOOM_TRY(expect(ps, "(", "`(` after the scalar's name"));
  LOOM_TRY(parse_dtype(ps, &t.dtype));
  t.lay.kind = LOOM__LAY_REPLICATED;
  t.lay.group = LOOM__GROUP_WORLD;
  if (is_punct(ps, ",")) {
    loom__lex_next(&ps->lx);
    LOOM_TRY(parse_group(ps, &t.lay.group));
  }
  LOOM_TRY(expect(ps, ")", "`)` closing the scalar declaration"));
  LOOM_TRY(expect(ps, ";", "`;` after the scalar declaration"));
  return define_input(ps, name, &t, line, col);
}

/* ---- expressions ------------------------------------------------------------------ */

static loom_result_t parse_expr(parser_t *ps, int *id);

static loom_result_t node(parser_t *ps, int op, const int *in, int nin, int line, int col, int *id) {
  LOOM_TRY(loom__lang_add(ps->p, op, in, nin, line, col, id));
  if (op != LOOM__OP_UPDATE) return LOOM_SUCCESS;
  loom_result_t r = loom__lang_bind_update(ps->p, *id);
  if (r != LOOM_SUCCESS) loom__fail_append(" (%s:%d:%d)", ps->lx.file, line, col);
  return r;
}

static loom_result_t parse_redop(parser_t *ps, int *redop) {
  *redop = LOOM__RED_SUM;
  if (TOK->kind != LOOM__T_STRING) return LOOM_SUCCESS;
  if (!strcmp(TOK->text, "+"))
    *redop = LOOM__RED_SUM;
  else if (!strcmp(TOK->text, "max"))
    *redop = LOOM__RED_MAX;
  else if (!strcmp(TOK->text, "min"))
    *redop = LOOM__RED_MIN;
  else
    return fail_at(ps, "a reduction: \"+\", \"max\" or \"min\"");
  loom__lex_next(&ps->lx);
  return expect(ps, ",", "`,` after the reduction");
}

/* GroupRank(GROUP + k, RANK) (Send) or GroupRank(GROUP - k, RANK) (Recv); *off = +-k. */
static loom_result_t parse_group_rank(parser_t *ps, int *off) {
  if (!is_ident(ps, "GroupRank")) return fail_at(ps, "GroupRank(GROUP+k, RANK)");
  loom__lex_next(&ps->lx);
  LOOM_TRY(expect(ps, "(", "`(` after GroupRank"));
  if (!is_ident(ps, "GROUP")) return fail_at(ps, "GROUP");
  loom__lex_next(&ps->lx);
  const int sign = is_punct(ps, "-") ? -1 : 1;
  LOOM_TRY(expect(ps, sign < 0 ? "-" : "+", "`+` or `-` after GROUP"));
  int k = 0;
  LOOM_TRY(take_int(ps, 1, 1023, &k, "a group distance (1..1023)"));
  LOOM_TRY(expect(ps, ",", "`,` after GROUP+k"));
  if (!is_ident(ps, "RANK")) return fail_at(ps, "RANK");
  loom__lex_next(&ps->lx);
  *off = sign * k;
  return expect(ps, ")", "`)` closing GroupRank");
}

/* The attributes after the operands: Dropout p [, seed], Cast dtype, norms' eps, roots, dims. */
static loom_result_t parse_call_attrs(parser_t *ps, int op, const char *fname, loom__node_t *nd) {
  if (op == LOOM__OP_DROPOUT) {
    LOOM_TRY(expect(ps, ",", "`,` and the dropout probability"));
    LOOM_TRY(take_number(ps, &nd->value, "the dropout probability (a number in [0, 1))"));
    if (nd->value < 0 || nd->value >= 1) return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
        "%s:%d:%d: Dropout probability %g; expected a number in [0, 1)", ps->lx.file, nd->line, nd->col, nd->value);
    if (is_punct(ps, ",")) {
      loom__lex_next(&ps->lx);
      double s = 0;
      LOOM_TRY(take_number(ps, &s, "the dropout seed (an integer >= 0)"));
      if (s < 0 || s > 1.8e19 || s != (double)(uint64_t)s)
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: Dropout seed %g; expected an integer >= 0",
                          ps->lx.file, nd->line, nd->col, s);
      nd->seed = (uint64_t)s;
    }
  } else if (op == LOOM__OP_CAST) {
    LOOM_TRY(expect(ps, ",", "`,` and the dtype to cast to"));
    LOOM_TRY(parse_dtype(ps, &nd->dtype));
  } else if (op == LOOM__OP_RMSNORM || op == LOOM__OP_LAYERNORM) {
    nd->value = op == LOOM__OP_RMSNORM ? 1e-6 : 1e-5;
    if (is_punct(ps, ",")) {
      loom__lex_next(&ps->lx);
      LOOM_TRY(take_number(ps, &nd->value, "epsilon (a number > 0)"));
      if (!(nd->value > 0)) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: %s epsilon %g; expected a number > 0",
                                              ps->lx.file, nd->line, nd->col, fname, nd->value);
    }
  } else if ((op == LOOM__OP_REDUCE || op == LOOM__OP_BROADCAST) && is_punct(ps, ",")) {
    loom__lex_next(&ps->lx);
    LOOM_TRY(take_int(ps, 0, 1 << 20, &nd->root, "the root rank (an integer >= 0)"));
  } else if (op == LOOM__OP_ALLTOALL || op == LOOM__OP_SLICE) {
    LOOM_TRY(expect(ps, ",", "`,` and the dimension the result is sliced on"));
    LOOM_TRY(take_int(ps, 0, LOOM__LANG_RANK - 1, &nd->dim, "a dimension (0..5)"));
  } else if (op == LOOM__OP_SEND) {
    LOOM_TRY(expect(ps, ",", "`,` and GroupRank(GROUP+k, RANK)"));
    LOOM_TRY(parse_group_rank(ps, &nd->send_off));
    if ((nd->send_off > 0) != ((fname[0] | 0x20) == 's')) /* Send or Recv, in any case */
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: %s to GROUP%+d; expected %s", ps->lx.file, nd->line,
                        nd->col, fname, nd->send_off, nd->send_off > 0 ? "Send for a later group" : "Recv for an earlier group");
    if (nd->send_off < 0) nd->send_off = -nd->send_off;
  }
  return expect(ps, ")", "`)` closing the call");
}

static loom_result_t parse_call(parser_t *ps, const char *fname, int line, int col, int *id) {
  int op = (fname[0] | 0x20) == 'r' && !strcmp(fname + 1, "ecv") ? LOOM__OP_SEND : loom__lang_op_by_name(fname);
  if (op < 0) {
    loom__tok_t t = *TOK;
    t.line = line, t.col = col, t.kind = LOOM__T_IDENT;
    snprintf(t.text, sizeof t.text, "%s", fname);
    return loom__lex_error(&ps->lx, &t, "an operation (MatMul, AllReduce, Dropout, Sqrt, ...; docs/language.md)");
  }
  loom__lex_next(&ps->lx); /* ( */
  int redop = LOOM__RED_SUM;
  if (op == LOOM__OP_ALLREDUCE || op == LOOM__OP_REDUCESCATTER || op == LOOM__OP_REDUCE)
    LOOM_TRY(parse_redop(ps, &redop));
  const loom__op_info_t *info = loom__lang_op_info(op);
  int in[LOOM__LANG_IN], nin = 0;
  for (; nin < info->max_in; ++nin) {
    if (nin > 0) LOOM_TRY(expect(ps, ",", "`,` and the next operand"));
    LOOM_TRY(parse_expr(ps, &in[nin]));
  }
  LOOM_TRY(node(ps, op, in, nin, line, col, id));
  loom__node_t *nd = &ps->p->nodes[*id];
  nd->redop = redop;
  return parse_call_attrs(ps, op, fname, nd);
}

static loom_result_t parse_name_ref(parser_t *ps, int *id) {
  *id = loom__lang_find(ps->p, TOK->text);
  if (*id < 0 || TOK->too_long) return fail_at(ps, "a tensor or Var defined above");
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t parse_primary(parser_t *ps, int *id) {
  const int line = TOK->line, col = TOK->col;
  if (TOK->kind == LOOM__T_NUMBER) {
    LOOM_TRY(node(ps, LOOM__OP_CONST, NULL, 0, line, col, id));
    ps->p->nodes[*id].value = TOK->num;
    loom__lex_next(&ps->lx);
    return LOOM_SUCCESS;
  }
  if (is_punct(ps, "(")) {
    loom__lex_next(&ps->lx);
    LOOM_TRY(parse_expr(ps, id));
    return expect(ps, ")", "`)` closing the parenthesis");
  }
  if (TOK->kind != LOOM__T_IDENT) return fail_at(ps, "an operand: a name, a number, a call or `(`");
  char fname[64];
  snprintf(fname, sizeof fname, "%s", TOK->text);
  loom__lexer_t save = ps->lx;
  loom__lex_next(&ps->lx);
  if (is_punct(ps, "(")) return parse_call(ps, fname, line, col, id);
  ps->lx = save;
  return parse_name_ref(ps, id);
}

static loom_result_t parse_postfix(parser_t *ps, int *id) {
  LOOM_TRY(parse_primary(ps, id));
  if (!is_punct(ps, ".")) return LOOM_SUCCESS;
  const int line = TOK->line, col = TOK->col;
  loom__lex_next(&ps->lx);
  if (!is_ident(ps, "update")) return fail_at(ps, "update after `.`");
  loom__lex_next(&ps->lx);
  LOOM_TRY(expect(ps, "(", "`(` after update"));
  int in[2] = {*id, -1};
  LOOM_TRY(parse_expr(ps, &in[1]));
  LOOM_TRY(expect(ps, ")", "`)` closing update"));
  return node(ps, LOOM__OP_UPDATE, in, 2, line, col, id);
}

static loom_result_t parse_unary(parser_t *ps, int *id) {
  if (!is_punct(ps, "-")) return parse_postfix(ps, id);
  const int line = TOK->line, col = TOK->col;
  loom__lex_next(&ps->lx);
  if (TOK->kind == LOOM__T_NUMBER) { /* a negative literal is one constant */
    LOOM_TRY(node(ps, LOOM__OP_CONST, NULL, 0, line, col, id));
    ps->p->nodes[*id].value = -TOK->num;
    loom__lex_next(&ps->lx);
    return LOOM_SUCCESS;
  }
  int x;
  LOOM_TRY(parse_unary(ps, &x));
  return node(ps, LOOM__OP_NEG, &x, 1, line, col, id);
}

static int binop_of(const parser_t *ps, int level) {
  static const struct { const char *s; int op, level; } ops[] = {
      {"*", LOOM__OP_MUL, 2}, {"/", LOOM__OP_DIV, 2}, {"+", LOOM__OP_ADD, 1}, {"-", LOOM__OP_SUB, 1},
      {"<", LOOM__OP_LT, 0},  {"<=", LOOM__OP_LE, 0}, {">", LOOM__OP_GT, 0},  {">=", LOOM__OP_GE, 0},
      {"==", LOOM__OP_EQ, 0}, {"!=", LOOM__OP_NE, 0}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
    if (ops[i].level == level && is_punct(ps, ops[i].s)) return ops[i].op;
  return -1;
}

/* level 2: * /, level 1: + -, level 0: comparisons (not chained). */
static loom_result_t parse_level(parser_t *ps, int level, int *id) {
  if (level == 3) return parse_unary(ps, id);
  LOOM_TRY(parse_level(ps, level + 1, id));
  for (int op; (op = binop_of(ps, level)) >= 0;) {
    const int line = TOK->line, col = TOK->col;
    loom__lex_next(&ps->lx);
    int in[2] = {*id, -1};
    LOOM_TRY(parse_level(ps, level + 1, &in[1]));
    LOOM_TRY(node(ps, op, in, 2, line, col, id));
    if (level == 0) break;
  }
  return LOOM_SUCCESS;
}

static loom_result_t parse_expr(parser_t *ps, int *id) { return parse_level(ps, 0, id); }

/* ---- statements --------------------------------------------------------------------- */

static loom_result_t parse_var(parser_t *ps) {
  char name[LOOM__LANG_NAME];
  const int line = TOK->line, col = TOK->col;
  LOOM_TRY(take_name(ps, name, "the Var's name"));
  LOOM_TRY(expect(ps, "=", "`=` after the Var's name"));
  int id;
  LOOM_TRY(parse_expr(ps, &id));
  if (!is_punct(ps, ";")) return fail_at(ps, "`;` after the Var definition (or an operator)");
  if (!loom__lang_anonymous(&ps->p->nodes[id]) || ps->p->nodes[id].op == LOOM__OP_INPUT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: Var `%s` = `%s`, a name alone; expected an operation",
                      ps->lx.file, line, col, name, ps->p->nodes[id].name);
  if (loom__lang_find(ps->p, name) >= 0 || loom__lang_find_group(ps->p, name) >= 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: `%s` is defined twice; expected a new name", ps->lx.file,
                      line, col, name);
  snprintf(ps->p->nodes[id].name, LOOM__LANG_NAME, "%s", name);
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t parse_state(parser_t *ps) {
  const int line = TOK->line, col = TOK->col;
  int t, v;
  LOOM_TRY(parse_name_ref(ps, &t));
  if (ps->p->nodes[t].op != LOOM__OP_INPUT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: State `%s`: found a Var; expected a Tensor", ps->lx.file,
                      line, col, ps->p->nodes[t].name);
  LOOM_TRY(expect(ps, "=", "`=` after the state's name"));
  LOOM_TRY(parse_name_ref(ps, &v));
  LOOM_TRY(loom__lang_bind_state(ps->p, t, v));
  return expect(ps, ";", "`;` after the State statement");
}

static loom_result_t parse_names(parser_t *ps, int *ids, int *n, int cap) {
  LOOM_TRY(expect(ps, "{", "`{` opening a list of names"));
  *n = 0;
  while (!is_punct(ps, "}")) {
    if (*n > 0) LOOM_TRY(expect(ps, ",", "`,` or `}` in the list of names"));
    if (*n == cap) return fail_at(ps, "`}`: too many names");
    LOOM_TRY(parse_name_ref(ps, &ids[(*n)++]));
  }
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t parse_execute(parser_t *ps) {
  char name[LOOM__LANG_NAME];
  int in[256], out[256], nin, nout;
  if (ps->p->name[0]) return fail_at(ps, "one Execute per program (found a second)");
  LOOM_TRY(take_name(ps, name, "the program's name"));
  LOOM_TRY(expect(ps, "(", "`(` after the program's name"));
  LOOM_TRY(parse_names(ps, in, &nin, 256));
  LOOM_TRY(expect(ps, ",", "`,` between the inputs and the outputs"));
  LOOM_TRY(parse_names(ps, out, &nout, 256));
  LOOM_TRY(expect(ps, ")", "`)` closing Execute"));
  LOOM_TRY(expect(ps, ";", "`;` after Execute"));
  return loom__lang_set_exec(ps->p, name, in, nin, out, nout);
}

static loom_result_t parse_schedule(parser_t *ps) {
  char name[LOOM__LANG_NAME];
  loom__sched_t *s;
  const int line = TOK->line, col = TOK->col;
  LOOM_TRY(take_name(ps, name, "the schedule's name"));
  if (loom__lang_add_sched(ps->p, name, &s) != LOOM_SUCCESS)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: Schedule `%s` is defined twice; expected a new name",
                      ps->lx.file, line, col, name);
  LOOM_TRY(expect(ps, "{", "`{` opening the schedule"));
  while (!is_punct(ps, "}")) {
    loom__stmt_t st;
    LOOM_TRY(loom__lang_parse_stmt_lx(&ps->lx, &st));
    LOOM_TRY(loom__lang_sched_push(&ps->p->scheds[ps->p->nsched - 1], &st));
  }
  loom__lex_next(&ps->lx);
  return LOOM_SUCCESS;
}

static loom_result_t parse_stmt(parser_t *ps) {
  static const struct { const char *kw; loom_result_t (*fn)(parser_t *); } kws[] = {
      {"Tensor", parse_tensor}, {"Scalar", parse_scalar},   {"Var", parse_var},
      {"State", parse_state},   {"Execute", parse_execute}, {"Schedule", parse_schedule}};
  if (TOK->kind != LOOM__T_IDENT) return fail_at(ps, "a statement: Tensor, Scalar, Var, State, Execute or Schedule");
  for (size_t i = 0; i < sizeof kws / sizeof kws[0]; ++i)
    if (is_ident(ps, kws[i].kw)) {
      loom__lex_next(&ps->lx);
      return kws[i].fn(ps);
    }
  return parse_var(ps); /* `name = expr;` (the paper's Figure 6a writes a second Var so) */
}

loom_result_t loom__lang_parse(const char *text, const char *file, loom__prog_t **out) {
  parser_t ps;
  *out = NULL;
  LOOM_TRY(loom__lang_new(file, &ps.p));
  loom__lex_init(&ps.lx, text, ps.p->file);
  loom_result_t r = LOOM_SUCCESS;
  while (r == LOOM_SUCCESS && ps.lx.tok.kind != LOOM__T_EOF) r = parse_stmt(&ps);
  if (r == LOOM_SUCCESS && !ps.p->name[0])
    r = loom__lex_error(&ps.lx, &ps.lx.tok, "an Execute statement naming the program's inputs and outputs");
  if (r != LOOM_SUCCESS) {
    loom__lang_free(ps.p);
    return r;
  }
  *out = ps.p;
  return LOOM_SUCCESS;
}
