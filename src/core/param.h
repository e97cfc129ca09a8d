/*
 * param.h - every LOOM_* environment setting of the library, declared once
 * (the tools' own are in support/tool_param.h).
 *
 * LOOM_PARAMS lists name, kind, default and meaning; param.c turns each row
 * into a getter (loom__param_TIMEOUT_MS()) and into the table that `loom env`
 * prints. INT getters read the environment once per process and keep the
 * value; STR getters read it at every call (paths and names, which tests
 * change in-process). A setting that is not in this list does not exist.
 * Integer values accept K, M, G suffixes (powers of 1024).
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
  X(GEMM_PATH, STR, "auto", "loom_gemm: auto (loom's sm90 kernel on compute capability 9.0, "  \
                            "its sm80 kernel on other GPUs >= 8.0, else cuBLASLt), sm80 "    \
                            "(the sm80 kernel on any GPU >= 8.0) or cublas (always cuBLASLt)") \
  X(CUBLAS_WORKSPACE_BYTES, INT, "32M", "cuBLASLt workspace for the baseline GEMM")          \
  X(TP_BULK_ORDER, STR, "striped", "loom_gemm_rs with LOOM_TP_BULK_REDUCE: the GEMM's tile "  \
                                   "order, striped (the owners' tiles interleaved) or shifted " \
                                   "(every peer's rows, then this rank's)")                   \
  X(ALLREDUCE_LL_BYTES, INT, "1M", "loom_allreduce with LOOM_COLL_AUTO: the low-latency "         \
                                     "one-shot (inputs pushed with flags, one link crossing) up "   \
                                     "to this many bytes of input at 2 ranks, this / (W-1) at W "   \
                                     "(0: never)")                                                  \
  X(ALLREDUCE_PUSH_BYTES, INT, "4M", "loom_allreduce with LOOM_COLL_AUTO: the one-shot by "     \
                                       "stores (a flag per chunk) above LL, up to this many bytes " \
                                       "of input (at W > 2 while its extra traffic over the "       \
                                       "two-shot's stays under 2 MiB; 0: never)")                    \
  X(ALLREDUCE_ONE_SHOT_BYTES, INT, "16M", "loom_allreduce with LOOM_COLL_AUTO: one-shot (each "   \
                                           "rank reduces the whole vector) up to this many bytes "   \
                                           "of input (and, at W > 2, while its extra reads over "    \
                                           "the two-shot's stay under 2 MiB), two-shot above")      \
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

#define LOOM_PARAM_DECL_INT(name) int64_t loom__param_##name(void);
#define LOOM_PARAM_DECL_STR(name) const char *loom__param_##name(void);
#define LOOM_PARAM_DECL(name, kind, def, meaning) LOOM_PARAM_DECL_##kind(name)
LOOM_PARAMS(LOOM_PARAM_DECL)
#undef LOOM_PARAM_DECL

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_PARAM_H */
