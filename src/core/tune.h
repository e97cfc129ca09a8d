/*
 * tune.h - the tuning cache: which kernel configuration to use per shape.
 *
 * Entries are text: a key that names the operation, GPU and shape (an op
 * builds it, e.g. "gemm sm90 m4096 n24576 k12288 bf16 kn") and a value that
 * the op parses (e.g. "tile=128x256 stages=4 cluster=2"). A plan looks its
 * key up at creation; a miss means "use the heuristic default". Entries come
 * from LOOM_TUNE_FILE (read once, at the first lookup) and from the tuner
 * (loom__tune_put), and can be written back with loom__tune_save.
 *
 * File format: one entry per line, `key = value`; blank lines and lines
 * starting with '#' are ignored. Keys and values are trimmed.
 * Thread-safe.
 */
#ifndef LOOM_CORE_TUNE_H
#define LOOM_CORE_TUNE_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_TUNE_TEXT_BYTES 160

/* Reads entries from `path` (adding to / replacing those in memory). A
 * malformed line gives LOOM_ERR_INVALID_ARGUMENT naming file and line. */
loom_result_t loom__tune_load(const char *path);

/* Copies the value for `key` into value[size]; 1 if found, 0 if not. */
int loom__tune_get(const char *key, char *value, size_t size);

/* Sets key = value (both shorter than LOOM_TUNE_TEXT_BYTES, no '=' or
 * newline in the key, no newline in the value). */
loom_result_t loom__tune_put(const char *key, const char *value);

/* Writes every entry to `path`. */
loom_result_t loom__tune_save(const char *path);

/* Opaque words in a value: "<name>=" and n 64-bit words as 16 hex digits
 * each (what a library's serialisable handle is, e.g. a cuBLASLt algorithm),
 * and back. Format: 1 if it fit in out[size]. Parse: 1 if `text` is exactly
 * that (name, '=', 16 x n lowercase or uppercase hex digits), else 0. */
int loom__tune_format_words(const char *name, const uint64_t *w, int n, char *out, size_t size);
int loom__tune_parse_words(const char *text, const char *name, uint64_t *w, int n);

/* Forgets every entry (tests). */
void loom__tune_clear(void);

/* Tests: the next lookup reads LOOM_TUNE_FILE again (as the first one of
 * the process does). */
void loom__tune_forget_file(void);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_TUNE_H */
