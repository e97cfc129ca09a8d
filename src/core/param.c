/*
 * param.c - getters for the settings of param.h's list, and the table of
 * every setting: that list's rows, then the rows declared elsewhere
 * (LOOM_PARAM_INT / _STR), added as the library loads.
 */
#include "param.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const loom_param_desc_t loom__params[] = {
#define LOOM_PARAM_ROW(name, kind, def, meaning) {#name, LOOM_PARAM_##kind, def, meaning},
    LOOM_PARAMS(LOOM_PARAM_ROW)
#undef LOOM_PARAM_ROW
};
#define LOOM_PARAMS_CORE (sizeof loom__params / sizeof loom__params[0])
#define LOOM_PARAMS_MAX 128

/* Every row: the list's, then the registered ones (constructors run
 * before any thread of the program, so no lock). */
static loom_param_desc_t loom__param_all[LOOM_PARAMS_MAX];
static size_t loom__param_n;

static void loom__param_fill_core(void) {
  if (loom__param_n >= LOOM_PARAMS_CORE) return;
  for (size_t i = 0; i < LOOM_PARAMS_CORE; ++i) loom__param_all[i] = loom__params[i];
  loom__param_n = LOOM_PARAMS_CORE;
}

void loom__param_register(const loom_param_desc_t *row) {
  loom__param_fill_core();
  for (size_t i = 0; i < loom__param_n; ++i)
    if (!strcmp(loom__param_all[i].name, row->name)) {
      LOOM_WARN("LOOM_%s is declared twice; the second declaration is dropped", row->name);
      return;
    }
  if (loom__param_n == LOOM_PARAMS_MAX) {
    LOOM_WARN("LOOM_%s: more than %d settings declared; raise LOOM_PARAMS_MAX", row->name, LOOM_PARAMS_MAX);
    return;
  }
  loom__param_all[loom__param_n++] = *row;
}

const loom_param_desc_t *loom__param_table(size_t *count) {
  loom__param_fill_core();
  *count = loom__param_n;
  return loom__param_all;
}

const char *loom__param_text(const loom_param_desc_t *p) {
  char env[96];
  snprintf(env, sizeof env, "LOOM_%s", p->name);
  const char *v = getenv(env);
  return (v && *v) ? v : p->default_text;
}

int loom__parse_int(const char *text, int64_t *out) {
  if (!text || !*text) return -1;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text) return -1;
  long long mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1LL << 10, end++;
  else if (*end == 'M' || *end == 'm') mul = 1LL << 20, end++;
  else if (*end == 'G' || *end == 'g') mul = 1LL << 30, end++;
  if (*end != '\0') return -1;
  if (v < 0 || (mul > 1 && v > (long long)(INT64_MAX / mul))) return -1;
  *out = (int64_t)(v * mul);
  return 0;
}

int64_t loom__param_int_of(const loom_param_desc_t *p) {
  int64_t v = 0;
  const char *text = loom__param_text(p);
  if (loom__parse_int(text, &v) != 0) {
    LOOM_WARN("LOOM_%s=\"%s\" is not a non-negative integer; using the default %s", p->name,
              text, p->default_text);
    loom__parse_int(p->default_text, &v);
  }
  return v;
}

/* Index of each setting in the table, for the getters. */
enum {
#define LOOM_PARAM_INDEX(name, kind, def, meaning) LOOM__PARAM_INDEX_##name,
  LOOM_PARAMS(LOOM_PARAM_INDEX)
#undef LOOM_PARAM_INDEX
};

/* Integer values are read once per process (like NCCL_PARAM). Two threads
 * that read one first at the same time both parse the environment and store
 * the same value: every access is atomic, so that is no data race. */
#define LOOM_PARAM_DEF_INT(name)                                         \
  int64_t loom__param_##name(void) {                                     \
    static int cached = 0;                                               \
    static int64_t value;                                                \
    if (!__atomic_load_n(&cached, __ATOMIC_ACQUIRE)) {                   \
      __atomic_store_n(&value, loom__param_int_of(&loom__params[LOOM__PARAM_INDEX_##name]), __ATOMIC_RELAXED); \
      __atomic_store_n(&cached, 1, __ATOMIC_RELEASE);                    \
    }                                                                    \
    return __atomic_load_n(&value, __ATOMIC_RELAXED);                    \
  }
#define LOOM_PARAM_DEF_STR(name)                                         \
  const char *loom__param_##name(void) {                                 \
    return loom__param_text(&loom__params[LOOM__PARAM_INDEX_##name]);    \
  }
#define LOOM_PARAM_DEF(name, kind, def, meaning) LOOM_PARAM_DEF_##kind(name)
LOOM_PARAMS(LOOM_PARAM_DEF)
#undef LOOM_PARAM_DEF
