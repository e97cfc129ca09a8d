/*
 * log.c - see log.h.
 */
#include "log.h"
#include "param.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int loom__log_parse_level(const char *text) {
  if (!text) return -1;
  if (!strcasecmp(text, "NONE")) return LOOM_LOG_NONE;
  if (!strcasecmp(text, "WARN")) return LOOM_LOG_WARN;
  if (!strcasecmp(text, "INFO")) return LOOM_LOG_INFO;
  if (!strcasecmp(text, "TRACE")) return LOOM_LOG_TRACE;
  return -1;
}

static int level = -2; /* -2: not read yet */

void loom__log_set_level(loom_log_level_t l) { __atomic_store_n(&level, (int)l, __ATOMIC_RELAXED); }

loom_log_level_t loom__log_level(void) {
  int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
  if (l == -2) {
    l = loom__log_parse_level(loom__param_DEBUG());
    if (l < 0) {
      fprintf(stderr, "loom %d WARN: LOOM_DEBUG=\"%s\" is not NONE, WARN, INFO or TRACE; using WARN\n",
              (int)getpid(), loom__param_DEBUG());
      l = LOOM_LOG_WARN;
    }
    __atomic_store_n(&level, l, __ATOMIC_RELAXED);
  }
  return (loom_log_level_t)l;
}

void loom__log(loom_log_level_t level, const char *fmt, ...) {
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "loom %d %s: %s\n", (int)getpid(), names[level], line);
}
