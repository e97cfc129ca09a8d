/*
 * prog_api.c - the public loom_prog_* functions (include/loom.h): argument
 * checks, then the internal passes of src/lang. Builder calls make the same
 * nodes the parser makes (loom__lang_add, the Update state binding), so a
 * built program prints to text that parses back to an equal graph.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"

#define NEED(cond, ...)                                                      \
  do {                                                                       \
    if (!(cond)) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, __VA_ARGS__);  \
  } while (0)

loom_result_t loom_prog_parse(const char *text, const char *file, loom_prog_t *out) {
  NEED(text && out, "loom_prog_parse: text=%p out=%p: must not be NULL", (const void *)text, (void *)out);
  return loom__lang_parse(text, file ? file : "<text>", out);
}

loom_result_t loom_prog_create(loom_prog_t *out) {
  NEED(out, "loom_prog_create: out is NULL");
  return loom__lang_new("<builder>", out);
}

loom_result_t loom_prog_destroy(loom_prog_t prog) {
  loom__lang_free(prog);
  return LOOM_SUCCESS;
}

static int valid_name(const char *s) {
  if (!s || !(isalpha((unsigned char)s[0]) || s[0] == '_') || strlen(s) >= LOOM__LANG_NAME) return 0;
  for (; *s; ++s)
    if (!isalnum((unsigned char)*s) && *s != '_') return 0;
  return 1;
}

/* "B, S, 4" into t's dims. */
static loom_result_t parse_shape_text(const char *shape, loom__type_t *t) {
  const char *s = shape;
  t->rank = 0;
  while (*s) {
    while (*s == ' ' || *s == ',') s++;
    if (!*s) break;
    NEED(t->rank < LOOM__LANG_RANK, "loom_prog_tensor: shape \"%s\": more than 6 dimensions", shape);
    loom__dim_t *d = &t->dims[t->rank++];
    size_t n = 0;
    while (s[n] && s[n] != ',' && s[n] != ' ') n++;
    NEED(n > 0 && n < sizeof d->sym, "loom_prog_tensor: shape \"%s\": a dimension longer than 15 characters", shape);
    if (isdigit((unsigned char)s[0])) {
      char *end;
      d->n = strtoll(s, &end, 10);
      NEED(end == s + n && d->n >= 1, "loom_prog_tensor: shape \"%s\": `%.*s` is no size >= 1", shape, (int)n, s);
    } else {
      snprintf(d->sym, sizeof d->sym, "%.*s", (int)n, s);
      NEED(valid_name(d->sym), "loom_prog_tensor: shape \"%s\": `%s` is no symbol", shape, d->sym);
    }
    s += n;
  }
  return LOOM_SUCCESS;
}

loom_result_t loom_prog_tensor(loom_prog_t prog, const char *name, loom_dtype_t dtype, const char *shape,
                               loom_prog_layout_t layout, int arg, int group, int *id) {
  NEED(prog && id && shape, "loom_prog_tensor: prog, shape and id must not be NULL");
  NEED(valid_name(name), "loom_prog_tensor: name \"%s\": expected a name of letters, digits and _",
       name ? name : "(null)");
  NEED(dtype == LOOM_FP32 || dtype == LOOM_FP16 || dtype == LOOM_BF16, "loom_prog_tensor: dtype=%d", (int)dtype);
  NEED((unsigned)layout <= LOOM_PROG_ROOT && arg >= 0, "loom_prog_tensor: layout=%d arg=%d", (int)layout, arg);
  NEED(group >= LOOM_PROG_WORLD && group < 1024, "loom_prog_tensor: group=%d: WORLD (-1) or 0..1023", group);
  loom__type_t t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  LOOM_TRY(parse_shape_text(shape, &t));
  t.lay.kind = (int)layout, t.lay.arg = layout == LOOM_PROG_SLICED || layout == LOOM_PROG_ROOT ? arg : 0;
  t.lay.group = group;
  LOOM_TRY(loom__lang_add(prog, LOOM__OP_INPUT, NULL, 0, 0, 0, id));
  prog->nodes[*id].decl = t;
  prog->nodes[*id].dtype = dtype;
  loom_result_t r = loom__lang_set_name(prog, *id, name);
  if (r != LOOM_SUCCESS) prog->nodes[*id].removed = 1;
  return r;
}

loom_result_t loom_prog_const(loom_prog_t prog, double value, int *id) {
  NEED(prog && id, "loom_prog_const: prog and id must not be NULL");
  NEED(isfinite(value), "loom_prog_const: value %g: must be finite", value);
  LOOM_TRY(loom__lang_add(prog, LOOM__OP_CONST, NULL, 0, 0, 0, id));
  prog->nodes[*id].value = value;
  return LOOM_SUCCESS;
}

static int op_by_any_name(const char *op) {
  if (!strcmp(op, "Recv")) return LOOM__OP_SEND;
  for (int i = LOOM__OP_ADD; i < LOOM__OP_COUNT; ++i)
    if (!strcmp(loom__lang_op_info(i)->name, op)) return i;
  return -1;
}

static loom_result_t set_attrs(loom__node_t *nd, const loom_prog_attr_t *a) {
  NEED(a->struct_size == sizeof *a, "loom_prog_op: attr->struct_size=%zu: expected %zu", a->struct_size, sizeof *a);
  NEED(nd->op != LOOM__OP_DROPOUT || (a->value >= 0 && a->value < 1), "loom_prog_op: Dropout p=%g: expected [0, 1)", a->value);
  NEED(a->reduce >= 0 && a->reduce <= 2, "loom_prog_op: reduce=%d: expected 0 (+), 1 (max) or 2 (min)", a->reduce);
  NEED(a->dim >= 0 && a->dim < LOOM__LANG_RANK && a->root >= 0, "loom_prog_op: dim=%d root=%d", a->dim, a->root);
  NEED(nd->op != LOOM__OP_SEND || (a->group_offset >= 1 && a->group_offset < 1024), "loom_prog_op: Send group_offset=%d: expected >= 1",
       a->group_offset);
  NEED(nd->op != LOOM__OP_CAST || (unsigned)a->dtype <= LOOM_BF16, "loom_prog_op: Cast dtype=%d", (int)a->dtype);
  NEED(isfinite(a->value) && a->value >= 0, "loom_prog_op: value=%g: must be finite and >= 0", a->value);
  nd->value = a->value, nd->seed = a->seed, nd->dim = a->dim, nd->root = a->root, nd->redop = a->reduce;
  if (nd->op == LOOM__OP_CAST) nd->dtype = a->dtype;
  nd->send_off = a->group_offset;
  return LOOM_SUCCESS;
}

loom_result_t loom_prog_op(loom_prog_t prog, const char *op, const int *inputs, int ninputs, const loom_prog_attr_t *attr,
                           int *id) {
  NEED(prog && op && id && (inputs || ninputs == 0), "loom_prog_op: prog, op, id (and inputs) must not be NULL");
  const int o = op_by_any_name(op);
  NEED(o >= 0, "loom_prog_op: op \"%s\": no such operation (docs/language.md lists them)", op);
  const loom__op_info_t *info = loom__lang_op_info(o);
  NEED(ninputs >= info->min_in && ninputs <= info->max_in, "loom_prog_op: %s takes %d operands; found %d", op,
       info->max_in, ninputs);
  const loom_prog_attr_t def = LOOM_PROG_ATTR_INIT;
  loom__node_t tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.op = o;
  LOOM_TRY(set_attrs(&tmp, attr ? attr : &def));
  LOOM_TRY(loom__lang_add(prog, o, inputs, ninputs, 0, 0, id));
  loom__node_t *nd = &prog->nodes[*id];
  nd->value = tmp.value, nd->seed = tmp.seed, nd->dim = tmp.dim, nd->root = tmp.root, nd->redop = tmp.redop;
  nd->send_off = tmp.send_off;
  if (o == LOOM__OP_CAST) nd->dtype = tmp.dtype;
  if ((o == LOOM__OP_RMSNORM || o == LOOM__OP_LAYERNORM) && nd->value == 0) nd->value = o == LOOM__OP_RMSNORM ? 1e-6 : 1e-5;
  if (o != LOOM__OP_UPDATE) return LOOM_SUCCESS;
  loom_result_t r = loom__lang_bind_update(prog, *id);
  if (r != LOOM_SUCCESS) nd->removed = 1;
  return r;
}

loom_result_t loom_prog_name(loom_prog_t prog, int id, const char *name) {
  NEED(prog && valid_name(name) && name[0] != '_', "loom_prog_name: name \"%s\": expected letters, digits and _ (not first)",
       name ? name : "(null)");
  NEED(id >= 0 && id < prog->n && !prog->nodes[id].removed, "loom_prog_name: id %d is no value of the program", id);
  NEED(prog->nodes[id].name[0] == 0, "loom_prog_name: value %d is already named `%s`", id, prog->nodes[id].name);
  LOOM_TRY(loom__lang_set_name(prog, id, name));
  for (int i = 0; i < prog->nexec_out && prog->exec_names; ++i) /* an output named after Execute */
    if (prog->exec_out[i] == id && !prog->exec_names[i][0]) snprintf(prog->exec_names[i], LOOM__LANG_NAME, "%s", name);
  return LOOM_SUCCESS;
}

loom_result_t loom_prog_execute(loom_prog_t prog, const char *name, const int *inputs, int ninputs, const int *outputs,
                                int noutputs) {
  NEED(prog && valid_name(name), "loom_prog_execute: name \"%s\": expected a name", name ? name : "(null)");
  NEED(ninputs >= 0 && noutputs >= 1 && (inputs || !ninputs) && outputs, "loom_prog_execute: %d inputs, %d outputs",
       ninputs, noutputs);
  for (int i = 0; i < ninputs + noutputs; ++i) {
    const int v = i < ninputs ? inputs[i] : outputs[i - ninputs];
    NEED(v >= 0 && v < prog->n && !prog->nodes[v].removed, "loom_prog_execute: id %d is no value of the program", v);
    NEED(i >= ninputs || prog->nodes[v].op == LOOM__OP_INPUT, "loom_prog_execute: input %d (id %d) is no tensor", i, v);
  }
  return loom__lang_set_exec(prog, name, inputs, ninputs, outputs, noutputs);
}

loom_result_t loom_prog_check(loom_prog_t prog) {
  NEED(prog, "loom_prog_check: prog is NULL");
  return loom__lang_infer(prog);
}

loom_result_t loom_prog_print(loom_prog_t prog, int typed, char *buf, size_t cap, size_t *len) {
  NEED(prog && len && (buf || cap == 0), "loom_prog_print: prog and len must not be NULL (buf only with cap 0)");
  if (typed) LOOM_TRY(loom__lang_infer(prog));
  loom__buf_t b = {0};
  loom_result_t r = loom__lang_print(prog, typed, &b);
  if (r == LOOM_SUCCESS) {
    *len = b.len;
    if (cap) snprintf(buf, cap, "%s", b.s ? b.s : "");
    if (b.len >= cap) r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_prog_print: %zu bytes needed, cap=%zu", b.len + 1, cap);
  }
  free(b.s);
  return r;
}

loom_result_t loom_prog_equal(loom_prog_t a, loom_prog_t b, int *equal) {
  NEED(a && b && equal, "loom_prog_equal: a, b and equal must not be NULL");
  *equal = loom__lang_equal(a, b);
  return LOOM_SUCCESS;
}

loom_result_t loom_prog_transform(loom_prog_t prog, const char *statement) {
  NEED(prog && statement, "loom_prog_transform: prog and statement must not be NULL");
  loom__stmt_t st;
  LOOM_TRY(loom__lang_parse_stmt(statement, &st));
  return loom__lang_apply(prog, &st);
}

loom_result_t loom_prog_schedule(loom_prog_t prog, const char *name, loom_prog_t *out) {
  NEED(prog && out, "loom_prog_schedule: prog and out must not be NULL");
  const loom__sched_t *s = NULL;
  for (int i = 0; name && *name && i < prog->nsched; ++i)
    if (!strcmp(prog->scheds[i].name, name)) s = &prog->scheds[i];
  NEED(!name || !*name || s, "loom_prog_schedule: the program has no Schedule `%s`", name);
  loom__prog_t *q;
  LOOM_TRY(loom__lang_clone(prog, &q));
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; s && i < s->n && r == LOOM_SUCCESS; ++i) r = loom__lang_apply(q, &s->stmts[i]);
  if (r == LOOM_SUCCESS) r = loom__lang_infer(q);
  if (r != LOOM_SUCCESS) {
    loom__lang_free(q);
    return r;
  }
  *out = q;
  return LOOM_SUCCESS;
}

static loom_result_t run(loom_prog_t prog, int world, const char *bind, uint64_t seed, loom__results_t *res) {
  loom__binding_t b;
  LOOM_TRY(loom__lang_parse_bind(bind, &b));
  return loom__lang_interp(prog, world, &b, seed, res);
}

static int find_result(const loom_prog_t prog, const loom__results_t *res, const char *output) {
  if (output[0] == '#') {
    const int i = atoi(output + 1);
    return i >= 0 && i < prog->nexec_out ? i : -1;
  }
  for (int i = 0; i < prog->nexec_out; ++i) /* the value that holds it now, or the name Execute gave it */
    if (!strcmp(prog->nodes[prog->exec_out[i]].name, output) || (prog->exec_names && !strcmp(prog->exec_names[i], output)))
      return i;
  for (int i = prog->nexec_out; i < res->n; ++i)
    if (!strcmp(res->vals[i].name, output)) return i;
  return -1;
}

loom_result_t loom_prog_interp(loom_prog_t prog, int world, const char *bind, uint64_t seed, const char *output,
                               double *values, size_t cap, size_t *count) {
  NEED(prog && output && count && (values || cap == 0), "loom_prog_interp: prog, output and count must not be NULL");
  loom__results_t res;
  LOOM_TRY(run(prog, world, bind, seed, &res));
  const int i = find_result(prog, &res, output);
  loom_result_t r = LOOM_SUCCESS;
  if (i < 0) {
    r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_prog_interp: `%s` is no output or state of the program", output);
  } else {
    const loom__value_t *v = &res.vals[i];
    *count = (size_t)(v->count * v->ranks);
    memcpy(values, v->v, sizeof(double) * (*count < cap ? *count : cap));
    if (*count > cap) r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_prog_interp: `%s` has %zu elements, cap=%zu", output, *count, cap);
  }
  loom__lang_results_free(&res);
  return r;
}

loom_result_t loom_prog_interp_compare(loom_prog_t a, loom_prog_t b, int world, const char *bind, uint64_t seed,
                                       double *max_diff) {
  NEED(a && b && max_diff, "loom_prog_interp_compare: a, b and max_diff must not be NULL");
  loom__results_t ra, rb;
  LOOM_TRY(run(a, world, bind, seed, &ra));
  loom_result_t r = run(b, world, bind, seed, &rb);
  if (r == LOOM_SUCCESS) {
    r = loom__lang_results_diff(&ra, &rb, max_diff);
    loom__lang_results_free(&rb);
  }
  loom__lang_results_free(&ra);
  return r;
}
