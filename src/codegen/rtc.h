/*
 * rtc.h - CUDA C compiled at run time (NVRTC) for a device's architecture,
 * with the device headers it includes embedded in libloom, and the cache of
 * compiled images in memory and on disk.
 *
 * Headers. Generated kernels include loom's own device headers (core/
 * signal.cuh, vec8.cuh, pointwise.h, ops/common/coll_device.cuh, the
 * codegen/cg_device.cuh they start from) and, through them, a few of the C
 * library's, CUDA's and NCCL's; NVRTC has none of those, so
 * src/codegen/rtc/ holds stand-ins (stdint.h, cuda_bf16.h: the types and
 * conversions the loom headers use). The build embeds every file reached
 * from codegen/cg_device.cuh (embed_headers.py: loom__rtc_headers), so a
 * compile reads no file and names no path: it runs wherever libloom does,
 * with or without a CUDA toolkit, and on machines without a GPU (CI
 * compiles every generated kernel for sm_90a that way).
 *
 * Cache. An image is keyed by a 64-bit FNV-1a hash of the source, the
 * options (the architecture among them), loom's version, a hash of the
 * embedded headers and NVRTC's version. Lookups go memory (every image of
 * the process; thread-safe), then disk, then NVRTC (which fills both). The
 * disk cache is a folder of files `<key>.loomrtc` (LOOM_CACHE_DIR): each
 * holds a header, the source and options it was compiled from and the
 * image with its hash; one is loaded only if its length is exact, its source
 * and options equal the ones asked for byte for byte (a hash collision
 * cannot load another program's image) and its image hashes right, else it
 * is refused (logged), recompiled and rewritten. Entries are written to a
 * temporary file in the same folder and renamed over the name, so processes
 * sharing the folder (the ranks of a job) see a whole entry or none.
 */
#ifndef LOOM_CODEGEN_RTC_H
#define LOOM_CODEGEN_RTC_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One embedded header: the name an #include spells, its text. */
typedef struct loom__rtc_header {
  const char *name;
  const char *text;
  size_t len;
} loom__rtc_header_t;

/* The embedded headers (generated at build time: embed_headers.py). */
const loom__rtc_header_t *loom__rtc_headers(int *count);

/* Where an image came from. */
enum { LOOM__RTC_COMPILED = 0, LOOM__RTC_MEMORY = 1, LOOM__RTC_DISK = 2 };

/* A compiled image (a cubin for the architecture asked for). data is owned
 * by the memory cache and lives until loom__rtc_cache_clear. */
typedef struct loom__rtc_image {
  const void *data;
  size_t size;
  uint64_t key;
  int from;   /* LOOM__RTC_* */
  double ms;  /* this lookup's time (the compile included) */
} loom__rtc_image_t;

/* The architecture NVRTC compiles for on a device of compute capability
 * major.minor: "sm_90a" on 9.0 (Hopper), else "sm_<major><minor>". */
void loom__rtc_arch(int major, int minor, char out[16]);

/* src compiled for `arch` ("sm_90a"): from the memory cache, else the disk
 * cache, else NVRTC. `name` names the source in messages. A compile error
 * is LOOM_ERR_INTERNAL with NVRTC's log (generated code that does not
 * compile is loom's bug); an arch NVRTC refuses LOOM_ERR_INVALID_ARGUMENT.
 * Thread-safe: a source compiles once (threads asking for it meanwhile wait
 * for its image), different sources at the same time. */
loom_result_t loom__rtc_compile(const char *name, const char *src, const char *arch, loom__rtc_image_t *out);

/* Empties the memory cache (tests: the next lookup goes to disk). Not while
 * another thread uses an image. */
void loom__rtc_cache_clear(void);

/* The disk cache's folder as LOOM_CACHE_DIR sets it into buf; NULL where
 * the disk cache is off. */
const char *loom__rtc_cache_dir(char *buf, size_t cap);

/* The file name of key's entry in folder dir. */
void loom__rtc_entry_path(const char *dir, uint64_t key, char *buf, size_t cap);

/* ---- rtc_disk.c: entries on disk --------------------------------------------- */

/* The image of key from dir, where an entry exists and is whole and made
 * from exactly src and opts: 1 and a malloc'ed copy in *data; 0 where there
 * is none or it is refused (a refusal is logged with the reason). */
int loom__rtc_disk_load(const char *dir, uint64_t key, const char *src, const char *opts, void **data, size_t *size);

/* Writes key's entry (temporary file, then rename). A failure is logged and
 * returned; the caller goes on without the disk cache. */
loom_result_t loom__rtc_disk_store(const char *dir, uint64_t key, const char *src, const char *opts, const void *data,
                                   size_t size);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CODEGEN_RTC_H */
