/*
 * test_bench_pairing.c - loom-bench's pairing of its rows with a PyTorch
 * peer's rows (support/bench_pair.h). A peer value is taken only for the
 * row's exact shape: equal shapes pair; a row whose value of any one shape
 * field differs, or that lacks a field, or whose peer names a field the row
 * does not, does not pair and says why; numbers compare by value, strings
 * exactly, a number written as a string is no number; a row timed without
 * host time takes only a CUDA-graph peer time.
 *
 * The peer documents are built here field by field, in the layout
 * peer_timing.py writes (json.dump with indent=1) and compact. No GPU.
 */
#define _DEFAULT_SOURCE /* mkstemp */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/test.h"
#include "support/bench_pair.h"

/* One shape field: its key, loom's value (text) and the peer's (a JSON literal). */
typedef struct field {
  const char *key, *loom, *peer;
} field_t;

/* The TP = 8 ag_gemm row of the issue, and a float field. */
static const field_t g_fields[] = {
    {"op", "ag_gemm", "\"ag_gemm\""}, {"model", "llama3-70b", "\"llama3-70b\""},
    {"m", "64", "64"},                {"n", "3584", "3584"},
    {"k", "8192", "8192"},            {"world", "2", "2"},
    {"dtype", "bf16", "\"bf16\""},    {"zipf", "1.05", "1.05"}};
/* For each field, another value of the same JSON type. */
static const char *const g_other[] = {"\"gemm_rs\"", "\"gpt3-175b\"", "128", "14336", "12288", "8", "\"fp16\"", "1.5"};
enum { NF = (int)(sizeof g_fields / sizeof g_fields[0]) };

typedef struct doc {
  char text[8192];
  size_t len;
} doc_t;

static void put(doc_t *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void put(doc_t *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(d->text + d->len, sizeof d->text - d->len, fmt, ap);
  va_end(ap);
  if (n > 0) d->len += (size_t)n;
  if (d->len >= sizeof d->text) d->len = sizeof d->text - 1;
}

/* What one peer row differs in from g_fields. */
typedef struct row_spec {
  int change;         /* this field takes g_other's value (-1: none) */
  int drop;           /* this field is left out of the row (-1: none) */
  const char *extra;  /* one more shape field "key": literal (NULL: none), named in shape_keys */
  const char *variant, *us, *timing; /* timing NULL: no timing member */
  int no_keys;        /* 1: no shape_keys member */
} row_spec_t;

static row_spec_t spec(void) {
  row_spec_t s = {-1, -1, NULL, "async_tp", "812.5", "graph", 0};
  return s;
}

/* Appends one row; `sep` between members (", " compact, ",\n   " indented). */
static void put_row(doc_t *d, const row_spec_t *r, const char *sep) {
  char keys[256] = "";
  put(d, "{");
  for (int i = 0; i < NF; ++i) {
    if (i == r->drop) continue;
    put(d, "\"%s\": %s%s", g_fields[i].key, i == r->change ? g_other[i] : g_fields[i].peer, sep);
    snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", keys[0] ? "," : "", g_fields[i].key);
  }
  if (r->extra) {
    put(d, "%s%s", r->extra, sep);
    char k[32];
    sscanf(r->extra, "\"%31[^\"]\"", k);
    snprintf(keys + strlen(keys), sizeof keys - strlen(keys), ",%s", k);
  }
  put(d, "\"variant\": \"%s\"%s\"us\": %s", r->variant, sep, r->us);
  if (r->timing) put(d, "%s\"timing\": \"%s\"", sep, r->timing);
  if (!r->no_keys) put(d, "%s\"shape_keys\": \"%s\"", sep, keys);
  put(d, "}");
}

/* A peer document holding rows[0 .. n). */
static void make_doc(doc_t *d, const row_spec_t *rows, int n, int indented) {
  d->len = 0;
  d->text[0] = 0;
  put(d, "{\"peer\": \"torch async-TP\", \"world\": 2, \"timing\": \"per row\",%s\"rows\": [", indented ? "\n " : " ");
  for (int i = 0; i < n; ++i) {
    put(d, "%s", i ? (indented ? ",\n  " : ", ") : (indented ? "\n  " : ""));
    put_row(d, &rows[i], indented ? ",\n   " : ", ");
  }
  put(d, "%s]}\n", indented ? "\n " : "");
}

/* loom's shape: every field of g_fields but `drop` (-1: none). */
static void make_shape(loom_bench_shape_t *s, int drop) {
  loom_bench_shape_init(s);
  for (int i = 0; i < NF; ++i)
    if (i != drop) loom_bench_shape_str(s, g_fields[i].key, g_fields[i].loom);
}

/* Pairs a document of the one row r with the whole shape. */
static int pair_one(const row_spec_t *r, int indented, int host_excluded, loom_bench_pair_t *p) {
  doc_t d;
  loom_bench_shape_t s;
  make_doc(&d, r, 1, indented);
  make_shape(&s, -1);
  return loom_bench_pair_text(d.text, "async_tp", &s, host_excluded, p);
}

LOOM_TEST(bench_pair_same_shape_pairs) {
  for (int indented = 0; indented <= 1; ++indented) {
    row_spec_t r = spec();
    loom_bench_pair_t p;
    CHECK_EQ_INT(pair_one(&r, indented, 0, &p), 1);
    CHECK_EQ_INT(p.paired, 1);
    CHECK(p.us == 812.5);
    CHECK_EQ_INT(p.graph, 1);
    CHECK(!strcmp(p.timing, "graph"));
    CHECK(p.why[0] == 0);
    /* a graph time also pairs with a row that excludes host time */
    CHECK_EQ_INT(pair_one(&r, indented, 1, &p), 1);
  }
}

/* The case: the peer ran TP = 2's n for a TP = 8 row. */
LOOM_TEST(bench_pair_refuses_other_n) {
  row_spec_t r = spec();
  r.change = 3; /* n */
  loom_bench_pair_t p;
  CHECK_EQ_INT(pair_one(&r, 1, 0, &p), 0);
  CHECK_EQ_INT(p.paired, 0);
  CHECK(isnan(p.us));
  CHECK(!strcmp(p.why, "peer ran n=14336, row has n=3584"));
  r.change = 1; /* model: a string */
  CHECK_EQ_INT(pair_one(&r, 1, 0, &p), 0);
  CHECK(!strcmp(p.why, "peer ran model=gpt3-175b, row has model=llama3-70b"));
}

/* Every field counts: a pairing that ignored any one would pass a changed
 * or missing value of it here. */
LOOM_TEST(bench_pair_every_field_counts) {
  for (int i = 0; i < NF; ++i) {
    row_spec_t r = spec();
    loom_bench_pair_t p;
    r.change = i;
    CHECK_EQ_INT(pair_one(&r, i % 2, 0, &p), 0);
    CHECK(isnan(p.us));
    char want[64];
    snprintf(want, sizeof want, "row has %s=%s", g_fields[i].key, g_fields[i].loom);
    if (!strstr(p.why, want)) loom_test_fail(__FILE__, __LINE__, "field %s: why \"%s\"", g_fields[i].key, p.why);
    r = spec();
    r.drop = i; /* the peer's row lacks it */
    CHECK_EQ_INT(pair_one(&r, i % 2, 0, &p), 0);
    snprintf(want, sizeof want, "peer row lacks %s", g_fields[i].key);
    if (!strstr(p.why, want)) loom_test_fail(__FILE__, __LINE__, "field %s: why \"%s\"", g_fields[i].key, p.why);
    /* loom's shape lacks it, the peer's names it */
    doc_t d;
    loom_bench_shape_t s;
    r = spec();
    make_doc(&d, &r, 1, 0);
    make_shape(&s, i);
    CHECK_EQ_INT(loom_bench_pair_text(d.text, "async_tp", &s, 0, &p), 0);
    snprintf(want, sizeof want, "peer's shape has %s", g_fields[i].key);
    if (!strstr(p.why, want)) loom_test_fail(__FILE__, __LINE__, "field %s: why \"%s\"", g_fields[i].key, p.why);
  }
}

LOOM_TEST(bench_pair_shape_keys_both_ways) {
  row_spec_t r = spec();
  loom_bench_pair_t p;
  r.extra = "\"cols\": 4096"; /* a shape field of the peer's that the row does not have */
  CHECK_EQ_INT(pair_one(&r, 0, 0, &p), 0);
  CHECK(strstr(p.why, "peer's shape has cols") != NULL);
  r = spec();
  r.no_keys = 1; /* a row that does not say what its shape is */
  CHECK_EQ_INT(pair_one(&r, 0, 0, &p), 0);
  CHECK(strstr(p.why, "shape_keys") != NULL);
}

/* Values as the lookup before promised: a whole number compares with the
 * peer's number (the string "3584" is no number), other text as a string;
 * now also non-whole numbers by value. */
LOOM_TEST(bench_pair_numbers_and_strings) {
  struct { const char *loom, *peer; int pairs; } cases[] = {
      {"3584", "3584", 1},         {"3584", "3584.0", 1},     {"3584", "3.584e3", 1},
      {"3584", "\"3584\"", 0},     {"3584", "3585", 0},       {"bf16", "\"bf16\"", 1},
      {"bf16", "\"BF16\"", 0},     {"bf16", "\"bf16 \"", 0},  {"1.05", "1.05", 1},
      {"1.05", "1.0500001", 0},    {"1.05", "\"1.05\"", 0},   {"0", "0.0", 1},
      {"llama3-70b", "null", 0}, {"true", "true", 0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    doc_t d;
    char row[160];
    snprintf(row, sizeof row,
             "{\"rows\": [{\"x\": %s, \"variant\": \"v\", \"us\": 5, \"timing\": \"graph\", \"shape_keys\": \"x\"}]}",
             cases[c].peer);
    snprintf(d.text, sizeof d.text, "%s", row);
    loom_bench_shape_t s;
    loom_bench_shape_init(&s);
    loom_bench_shape_str(&s, "x", cases[c].loom);
    loom_bench_pair_t p;
    if (loom_bench_pair_text(d.text, "v", &s, 0, &p) != cases[c].pairs)
      loom_test_fail(__FILE__, __LINE__, "loom %s vs peer %s: paired %d, want %d (%s)", cases[c].loom, cases[c].peer,
                     p.paired, cases[c].pairs, p.why);
  }
  /* the helpers write what reads back as the same value */
  loom_bench_shape_t s;
  loom_bench_shape_init(&s);
  loom_bench_shape_num(&s, "zipf", 1.05);
  loom_bench_shape_int(&s, "n", INT64_C(14336));
  CHECK_EQ_INT(s.n, 2);
  CHECK(strtod(s.val[0], NULL) == 1.05);
  CHECK(!strcmp(s.val[1], "14336"));
  loom_bench_shape_int(&s, "n", 3584); /* a key set again replaces its value */
  CHECK_EQ_INT(s.n, 2);
  CHECK(!strcmp(s.val[1], "3584"));
}

LOOM_TEST(bench_pair_timing_and_host_time) {
  row_spec_t r = spec();
  loom_bench_pair_t p;
  r.timing = "eager (includes Python host time)";
  CHECK_EQ_INT(pair_one(&r, 1, 0, &p), 1); /* a row timed call by call: pairs, says eager */
  CHECK_EQ_INT(p.graph, 0);
  CHECK(!strcmp(p.timing, "eager (includes Python host time)"));
  CHECK_EQ_INT(pair_one(&r, 1, 1, &p), 0); /* a per-call time in a graph: not with an eager peer */
  CHECK(isnan(p.us));
  CHECK(strstr(p.why, "eager") != NULL);
  r.timing = NULL;
  CHECK_EQ_INT(pair_one(&r, 1, 0, &p), 0);
  CHECK(strstr(p.why, "how it was timed") != NULL);
  r = spec();
  r.us = "null"; /* PyTorch refused the variant at this shape */
  CHECK_EQ_INT(pair_one(&r, 1, 0, &p), 0);
  CHECK(strstr(p.why, "no time") != NULL);
}

/* The right row among many: other shapes and other variants are passed over. */
LOOM_TEST(bench_pair_picks_the_row) {
  row_spec_t rows[5];
  for (int i = 0; i < 5; ++i) rows[i] = spec();
  rows[0].change = 2, rows[0].us = "100";                 /* m = 128 */
  rows[1].variant = "torch_seq", rows[1].us = "200";      /* same shape, other variant */
  rows[2].us = "300";                                     /* the one */
  rows[3].change = 3, rows[3].us = "400";                 /* n = 14336 */
  rows[4].variant = "torch_seq", rows[4].change = 3;
  doc_t d;
  loom_bench_shape_t s;
  loom_bench_pair_t p;
  make_doc(&d, rows, 5, 1);
  make_shape(&s, -1);
  CHECK_EQ_INT(loom_bench_pair_text(d.text, "async_tp", &s, 0, &p), 1);
  CHECK(p.us == 300.0);
  CHECK_EQ_INT(loom_bench_pair_text(d.text, "torch_seq", &s, 0, &p), 1);
  CHECK(p.us == 200.0);
  CHECK_EQ_INT(loom_bench_pair_text(d.text, "one_shot", &s, 0, &p), 0);
  CHECK(!strcmp(p.why, "peer has no one_shot row"));
  /* the same shape twice: the last row counts */
  row_spec_t twice[2] = {rows[2], rows[2]};
  twice[1].us = "350";
  make_doc(&d, twice, 2, 0);
  CHECK_EQ_INT(loom_bench_pair_text(d.text, "async_tp", &s, 0, &p), 1);
  CHECK(p.us == 350.0);
  /* without the matching row: the nearest one says what differs */
  make_doc(&d, rows + 3, 1, 1);
  CHECK_EQ_INT(loom_bench_pair_text(d.text, "async_tp", &s, 0, &p), 0);
  CHECK(!strcmp(p.why, "peer ran n=14336, row has n=3584"));
}

LOOM_TEST(bench_pair_file_and_bad_input) {
  char path[] = "/tmp/loom-test-pair-XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  doc_t d;
  row_spec_t r = spec();
  make_doc(&d, &r, 1, 1);
  CHECK(write(fd, d.text, d.len) == (ssize_t)d.len);
  close(fd);
  loom_bench_shape_t s;
  loom_bench_pair_t p;
  make_shape(&s, -1);
  CHECK_EQ_INT(loom_bench_pair_file(path, "async_tp", &s, 0, &p), 1);
  CHECK(p.us == 812.5);
  unlink(path);
  CHECK_EQ_INT(loom_bench_pair_file(path, "async_tp", &s, 0, &p), 0);
  CHECK(strstr(p.why, "unreadable") != NULL);
  CHECK_EQ_INT(loom_bench_pair_text("{\"peer\": 1}", "async_tp", &s, 0, &p), 0);
  CHECK(strstr(p.why, "no rows") != NULL);
  CHECK_EQ_INT(loom_bench_pair_text("{\"rows\": [{\"a\": {\"b\": 1}}]}", "async_tp", &s, 0, &p), 0);
  CHECK(strstr(p.why, "not a flat object") != NULL);
  /* a shape that did not fit pairs with nothing */
  make_doc(&d, &r, 1, 1);
  s.overflow = 1;
  CHECK_EQ_INT(loom_bench_pair_text(d.text, "async_tp", &s, 0, &p), 0);
  char key[8];
  loom_bench_shape_init(&s);
  for (int i = 0; i <= LOOM_BENCH_SHAPE_MAX; ++i) {
    snprintf(key, sizeof key, "f%d", i);
    loom_bench_shape_int(&s, key, i);
  }
  CHECK_EQ_INT(s.overflow, 1);
}
