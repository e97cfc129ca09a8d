/*
 * tune.c - see tune.h.
 */
#include "tune.h"
#include "error.h"
#include "log.h"
#include "param.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES]; } loom_tune_entry_t;

static pthread_mutex_t loom__tune_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_tune_entry_t *loom__tune;
static size_t loom__ntune, loom__captune;
static int loom__tune_env_read;

/* Caller holds the lock. */
static loom_result_t loom__tune_put_locked(const char *key, const char *value) {
  for (size_t i = 0; i < loom__ntune; ++i)
    if (!strcmp(loom__tune[i].key, key)) {
      snprintf(loom__tune[i].value, LOOM_TUNE_TEXT_BYTES, "%s", value);
      return LOOM_SUCCESS;
    }
  if (loom__ntune == loom__captune) {
    size_t ncap = loom__captune ? 2 * loom__captune : 32;
    loom_tune_entry_t *n = (loom_tune_entry_t *)realloc(loom__tune, ncap * sizeof *n);
    if (!n) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation for the tuning cache failed");
    loom__tune = n;
    loom__captune = ncap;
  }
  snprintf(loom__tune[loom__ntune].key, LOOM_TUNE_TEXT_BYTES, "%s", key);
  snprintf(loom__tune[loom__ntune].value, LOOM_TUNE_TEXT_BYTES, "%s", value);
  loom__ntune++;
  return LOOM_SUCCESS;
}

static loom_result_t loom__tune_check_text(const char *key, const char *value) {
  if (!key || !*key) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "tuning key is empty");
  if (!value) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "tuning value for \"%s\" is NULL", key);
  if (strlen(key) >= LOOM_TUNE_TEXT_BYTES || strlen(value) >= LOOM_TUNE_TEXT_BYTES)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "tuning entry \"%s\" is longer than %d characters", key,
                      LOOM_TUNE_TEXT_BYTES - 1);
  if (strpbrk(key, "=\n") || strchr(value, '\n'))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "tuning key \"%s\" contains '=' or a newline", key);
  return LOOM_SUCCESS;
}

loom_result_t loom__tune_put(const char *key, const char *value) {
  LOOM_TRY(loom__tune_check_text(key, value));
  pthread_mutex_lock(&loom__tune_lock);
  loom_result_t r = loom__tune_put_locked(key, value);
  pthread_mutex_unlock(&loom__tune_lock);
  return r;
}

static char *loom__trim(char *s) {
  while (isspace((unsigned char)*s)) ++s;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* Reads the file into the cache; the caller holds the lock when `locked`
 * (the first lookup's load of LOOM_TUNE_FILE, which no other thread may see
 * half done), else every entry takes it. */
static loom_result_t loom__tune_load_file(const char *path, int locked) {
  if (!path) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "tuning file path is NULL");
  FILE *f = fopen(path, "r");
  if (!f) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "cannot open tuning file \"%s\"", path);
  char line[2 * LOOM_TUNE_TEXT_BYTES + 8];
  int lineno = 0;
  loom_result_t r = LOOM_SUCCESS;
  while (r == LOOM_SUCCESS && fgets(line, sizeof line, f)) {
    ++lineno;
    char *s = loom__trim(line);
    if (!*s || *s == '#') continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d: expected \"key = value\"", path, lineno);
      break;
    }
    *eq = '\0';
    char *key = loom__trim(s), *value = loom__trim(eq + 1);
    r = loom__tune_check_text(key, value);
    if (r != LOOM_SUCCESS) {
      loom__fail_append(" (%s:%d)", path, lineno);
      break;
    }
    if (!locked) pthread_mutex_lock(&loom__tune_lock);
    r = loom__tune_put_locked(key, value);
    if (!locked) pthread_mutex_unlock(&loom__tune_lock);
  }
  fclose(f);
  return r;
}

loom_result_t loom__tune_load(const char *path) { return loom__tune_load_file(path, 0); }

int loom__tune_get(const char *key, char *value, size_t size) {
  pthread_mutex_lock(&loom__tune_lock);
  if (!loom__tune_env_read) {
    /* the whole file is in before any lookup (this thread's or another's)
     * reads the cache */
    loom__tune_env_read = 1;
    const char *path = loom__param_TUNE_FILE();
    if (path && *path && loom__tune_load_file(path, 1) != LOOM_SUCCESS)
      LOOM_WARN("LOOM_TUNE_FILE: %s; using heuristic defaults", loom_last_error());
  }
  int found = 0;
  for (size_t i = 0; i < loom__ntune && !found; ++i)
    if (!strcmp(loom__tune[i].key, key)) {
      snprintf(value, size, "%s", loom__tune[i].value);
      found = 1;
    }
  pthread_mutex_unlock(&loom__tune_lock);
  return found;
}

loom_result_t loom__tune_save(const char *path) {
  if (!path) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "tuning file path is NULL");
  FILE *f = fopen(path, "w");
  if (!f) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "cannot write tuning file \"%s\"", path);
  fprintf(f, "# loom tuning cache: key = value\n");
  pthread_mutex_lock(&loom__tune_lock);
  for (size_t i = 0; i < loom__ntune; ++i) fprintf(f, "%s = %s\n", loom__tune[i].key, loom__tune[i].value);
  pthread_mutex_unlock(&loom__tune_lock);
  if (fclose(f) != 0) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "writing tuning file \"%s\" failed", path);
  return LOOM_SUCCESS;
}

void loom__tune_clear(void) {
  pthread_mutex_lock(&loom__tune_lock);
  loom__ntune = 0;
  pthread_mutex_unlock(&loom__tune_lock);
}

void loom__tune_forget_file(void) {
  pthread_mutex_lock(&loom__tune_lock);
  loom__tune_env_read = 0;
  pthread_mutex_unlock(&loom__tune_lock);
}

int loom__tune_format_words(const char *name, const uint64_t *w, int n, char *out, size_t size) {
  int used = snprintf(out, size, "%s=", name);
  if (used < 0 || (size_t)used >= size) return 0;
  for (int i = 0; i < n; ++i) {
    const int k = snprintf(out + used, size - (size_t)used, "%016llx", (unsigned long long)w[i]);
    if (k < 0 || (size_t)(used + k) >= size) return 0;
    used += k;
  }
  return 1;
}

int loom__tune_parse_words(const char *text, const char *name, uint64_t *w, int n) {
  const size_t nl = strlen(name);
  if (!text || strncmp(text, name, nl) != 0 || text[nl] != '=') return 0;
  const char *p = text + nl + 1;
  if (strlen(p) != (size_t)n * 16) return 0;
  for (int i = 0; i < n; ++i) {
    uint64_t v = 0;
    for (int j = 0; j < 16; ++j) {
      const int c = (unsigned char)*p++;
      if (!isxdigit(c)) return 0;
      v = v << 4 | (uint64_t)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
    }
    w[i] = v;
  }
  return 1;
}
