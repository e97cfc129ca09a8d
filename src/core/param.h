/*
 * param.h - every LOOM_* environment setting of the library, each declared
 * once: core's own and those every layer reads here (LOOM_PARAMS), a
 * layer's or family's own where it is used (LOOM_PARAM_INT / LOOM_PARAM_STR
 * below, as NCCL_PARAM; the tools' own are in support/tool_param.h).
 *
 * LOOM_PARAMS lists name, kind, default and meaning; param.c turns each row
 * into a getter (loom__param_TIMEOUT_MS()) and a row of the table that
 * `loom env` prints, to which the settings declared elsewhere add theirs
 * when the library loads. INT getters read the environment once per process
 * and keep the value; STR getters read it at every call (paths and names,
 * which tests change in-process). A setting declared nowhere does not
 * exist. Integer values accept K, M, G suffixes (powers of 1024).
 *
 * Kinds: INT (int64_t), STR (const char *).
 */
#ifndef LOOM_CORE_PARAM_H
#define LOOM_CORE_PARAM_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_PARAMS(X)                                                                       \
  X(TIMEOUT_MS, INT, "60000", "bound on every device-side wait, in milliseconds; on expiry "  \
                              "the op reports LOOM_ERR_TIMEOUT instead of hanging")           \
  X(WORKSPACE_BYTES, INT, "64M", "symmetric workspace per rank that plans carve up for "      \
                                 "signals and staging")                                       \
  X(DEBUG, STR, "WARN", "log level: NONE, WARN, INFO or TRACE (to stderr; TRACE also logs "  \
                        "each tensor-parallel call's stage timeline)")                        \
  X(TUNE_FILE, STR, "", "file of tuned kernel configurations (key = value lines), read at "   \
                        "the first lookup (a plan or loom_gemm) and written back by "         \
                        "loom_gemm_tune (empty: none)")                             \
  X(TUNE, INT, "0", "1: loom_gemm tunes a shape the tuning cache lacks at its first call "     \
                    "(as loom_gemm_tune: tens of launches, synchronizes the stream; inside a " \
                    "graph capture the heuristic runs instead) and records it; plans of "       \
                    "loom_ag_gemm, loom_gemm_rs and loom_gemm_ar that leave every knob to "     \
                    "loom run loom_*_tune first for a description the cache lacks")              \
  X(LIBRARY, STR, "", "Python binding: libloom.so to load (a file, or the folder holding "    \
                      "it); empty: the build tree, then the installed prefix")               \
  X(NCCL_LIBRARY, STR, "", "Python binding: the NCCL library (file) to load for the whole "   \
                           "process before libloom, if no NCCL is loaded yet (empty: the "    \
                           "one the loader finds)")                                           \
  X(NCCL_CHECK, STR, "minor", "Python binding: how the NCCL that libloom's calls reach must "  \
                              "match the NCCL headers libloom was built with before a comm "  \
                              "is made: minor (same major.minor), exact, or off")

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_param_kind { LOOM_PARAM_INT, LOOM_PARAM_STR } loom_param_kind_t;

typedef struct loom_param_desc {
  const char *name;        /* without the LOOM_ prefix */
  loom_param_kind_t kind;
  const char *default_text;
  const char *meaning;
} loom_param_desc_t;

/* The table, in declaration order. */
const loom_param_desc_t *loom__param_table(size_t *count);

/* The value in force as text (environment, else default). */
const char *loom__param_text(const loom_param_desc_t *p);

/* Parses "123", "64M", "1G"; returns 0 on success. */
int loom__parse_int(const char *text, int64_t *out);

/* A row declared outside LOOM_PARAMS joins the table (at load, through
 * LOOM_PARAM_INT / LOOM_PARAM_STR); a second row of one name is dropped
 * with a warning. */
void loom__param_register(const loom_param_desc_t *row);

/* An INT row's value in force (the default, warned, where the text is not a
 * non-negative integer). */
int64_t loom__param_int_of(const loom_param_desc_t *row);

/* A setting declared where it is used: defines loom__param_<name>() (INT:
 * read once per process; STR: at every call) and adds its row to the table.
 * Another file of the same layer that reads it declares the getter with
 * LOOM_PARAM_DECL_INT / _STR. */
#define LOOM_PARAM_INT(name, def, meaning)                                                    \
  static const loom_param_desc_t loom__param_row_##name = {#name, LOOM_PARAM_INT, def, meaning}; \
  __attribute__((constructor)) static void loom__param_add_##name(void) {                     \
    loom__param_register(&loom__param_row_##name);                                           \
  }                                                                                           \
  int64_t loom__param_##name(void) {                                                          \
    static int cached = 0;                                                                    \
    static int64_t value;                                                                     \
    if (!__atomic_load_n(&cached, __ATOMIC_ACQUIRE)) {                                        \
      __atomic_store_n(&value, loom__param_int_of(&loom__param_row_##name), __ATOMIC_RELAXED); \
      __atomic_store_n(&cached, 1, __ATOMIC_RELEASE);                                         \
    }                                                                                         \
    return __atomic_load_n(&value, __ATOMIC_RELAXED);                                         \
  }
#define LOOM_PARAM_STR(name, def, meaning)                                                    \
  static const loom_param_desc_t loom__param_row_##name = {#name, LOOM_PARAM_STR, def, meaning}; \
  __attribute__((constructor)) static void loom__param_add_##name(void) {                     \
    loom__param_register(&loom__param_row_##name);                                           \
  }                                                                                           \
  const char *loom__param_##name(void) { return loom__param_text(&loom__param_row_##name); }

#define LOOM_PARAM_DECL_INT(name) int64_t loom__param_##name(void);
#define LOOM_PARAM_DECL_STR(name) const char *loom__param_##name(void);
#define LOOM_PARAM_DECL(name, kind, def, meaning) LOOM_PARAM_DECL_##kind(name)
LOOM_PARAMS(LOOM_PARAM_DECL)
#undef LOOM_PARAM_DECL

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_PARAM_H */
