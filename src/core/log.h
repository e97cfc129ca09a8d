/*
 * log.h - logging to stderr, level from LOOM_DEBUG (NONE, WARN, INFO, TRACE).
 * Each message starts with "loom <pid> <LEVEL>:". LOOM_WARN_ONCE logs a
 * message the first time a call site is reached in the process.
 */
#ifndef LOOM_CORE_LOG_H
#define LOOM_CORE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_log_level {
  LOOM_LOG_NONE = 0,
  LOOM_LOG_WARN = 1,
  LOOM_LOG_INFO = 2,
  LOOM_LOG_TRACE = 3
} loom_log_level_t;

loom_log_level_t loom__log_level(void);
/* Sets the level as if LOOM_DEBUG said so (tests of what a level logs). */
void loom__log_set_level(loom_log_level_t l);
/* Parses a LOOM_DEBUG value; unknown text gives -1. */
int loom__log_parse_level(const char *text);
void loom__log(loom_log_level_t level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#define LOOM_LOG_AT(level, ...) \
  do { if (loom__log_level() >= (level)) loom__log((level), __VA_ARGS__); } while (0)
#define LOOM_WARN(...) LOOM_LOG_AT(LOOM_LOG_WARN, __VA_ARGS__)
#define LOOM_INFO(...) LOOM_LOG_AT(LOOM_LOG_INFO, __VA_ARGS__)
#define LOOM_TRACE(...) LOOM_LOG_AT(LOOM_LOG_TRACE, __VA_ARGS__)
#define LOOM_WARN_ONCE(...)                                                     \
  do {                                                                          \
    static int loom__once = 0;                                                  \
    if (!__atomic_exchange_n(&loom__once, 1, __ATOMIC_RELAXED)) LOOM_WARN(__VA_ARGS__); \
  } while (0)

#endif /* LOOM_CORE_LOG_H */
