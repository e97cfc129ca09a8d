/*
 * rtc.c - NVRTC compiles with the embedded headers, the key of an image, and
 * the memory cache in front of the disk cache (rtc.h says what each is).
 *
 * The memory cache holds every image the process compiled or loaded, under
 * one mutex; entries are compared on their whole source and options, not on
 * the key alone. A source is compiled once: the first thread to ask for it
 * enters it as being compiled and compiles outside the lock, so that
 * different sources compile at the same time (one per thread), and threads
 * asking for the same one meanwhile (the ranks of a one-GPU world) wait for
 * its image; where the compile fails, one of them tries again for itself.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/rtc.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"

LOOM_PARAM_STR(CACHE_DIR, "",
               "folder of the compiled generated kernels (loom programs), shared by the processes that use it; "
               "empty: $XDG_CACHE_HOME/loom/kernels, else $HOME/.cache/loom/kernels; off: no disk cache")

enum { RTC_READY = 0, RTC_COMPILING = 1, RTC_FREE = 2 };

typedef struct rtc_entry {
  uint64_t key;
  char *src, *opts;
  void *data;
  size_t size;
  int state; /* RTC_* */
} rtc_entry_t;

static pthread_mutex_t rtc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rtc_done = PTHREAD_COND_INITIALIZER;
static rtc_entry_t *rtc_mem;
static int rtc_n, rtc_cap;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

void loom__rtc_arch(int major, int minor, char out[16]) {
  if (major == 9 && minor == 0) snprintf(out, 16, "sm_90a");
  else snprintf(out, 16, "sm_%d%d", major, minor);
}

const char *loom__rtc_cache_dir(char *buf, size_t cap) {
  const char *d = loom__param_CACHE_DIR();
  if (d && !strcmp(d, "off")) return NULL;
  if (d && *d) {
    snprintf(buf, cap, "%s", d);
    return buf;
  }
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg) snprintf(buf, cap, "%s/loom/kernels", xdg);
  else if (home && *home) snprintf(buf, cap, "%s/.cache/loom/kernels", home);
  else return NULL;
  return buf;
}

void loom__rtc_entry_path(const char *dir, uint64_t key, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%016llx.loomrtc", dir, (unsigned long long)key);
}

/* What the image depends on besides the source: NVRTC's options (one per
 * line), loom's version, the embedded headers' hash, NVRTC's version. */
static void rtc_options(const char *arch, char *buf, size_t cap) {
  static uint64_t headers_hash;
  if (!headers_hash) {
    int n;
    const loom__rtc_header_t *h = loom__rtc_headers(&n);
    uint64_t x = 1469598103934665603ull;
    for (int i = 0; i < n; ++i) x = loom__fnv64(loom__fnv64(x, h[i].name, strlen(h[i].name) + 1), h[i].text, h[i].len);
    headers_hash = x;
  }
  int maj = 0, min = 0;
  (void)nvrtcVersion(&maj, &min);
  snprintf(
      buf, cap,
      "--gpu-architecture=%s\n-std=c++17\n-default-device\n-DLOOM_RTC=1\nloom %d.%d.%d headers %016llx nvrtc %d.%d",
      arch, LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR, LOOM_VERSION_PATCH, (unsigned long long)headers_hash, maj, min);
}

/* ---- NVRTC ------------------------------------------------------------------------- */

static loom_result_t nvrtc_fail(nvrtcResult e, const char *what, const char *name) {
  return loom__fail(e == NVRTC_ERROR_OUT_OF_MEMORY ? LOOM_ERR_OUT_OF_MEMORY : LOOM_ERR_INTERNAL, "%s (%s): %s", what,
                    name, nvrtcGetErrorString(e));
}

/* The compile's log as the failure's message. */
static loom_result_t nvrtc_log_fail(nvrtcProgram prog, nvrtcResult e, const char *name, const char *arch) {
  size_t n = 0;
  char *log = nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS ? malloc(n + 1) : NULL;
  if (log && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
  const loom_result_t code = e == NVRTC_ERROR_INVALID_OPTION ? LOOM_ERR_INVALID_ARGUMENT : LOOM_ERR_INTERNAL;
  loom__fail(code, "NVRTC could not compile %s for %s (%s): %.3000s", name, arch, nvrtcGetErrorString(e),
             log ? log : "(no log)");
  free(log);
  return code;
}

/* src compiled by NVRTC for arch: a malloc'ed cubin. */
static loom_result_t nvrtc_build(const char *name, const char *src, const char *arch, void **data, size_t *size) {
  int nh;
  const loom__rtc_header_t *h = loom__rtc_headers(&nh);
  const char **texts = malloc(sizeof(char *) * (size_t)(nh + 1)), **names = malloc(sizeof(char *) * (size_t)(nh + 1));
  if (!texts || !names) {
    free(texts), free(names);
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "NVRTC: out of host memory");
  }
  for (int i = 0; i < nh; ++i) texts[i] = h[i].text, names[i] = h[i].name;
  char archopt[48];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[] = {archopt, "-std=c++17", "-default-device", "-DLOOM_RTC=1"};
  nvrtcProgram prog;
  nvrtcResult e = nvrtcCreateProgram(&prog, src, name, nh, texts, names);
  free(texts), free(names);
  if (e != NVRTC_SUCCESS) return nvrtc_fail(e, "nvrtcCreateProgram", name);
  loom_result_t r = LOOM_SUCCESS;
  e = nvrtcCompileProgram(prog, 4, opts);
  if (e != NVRTC_SUCCESS) r = nvrtc_log_fail(prog, e, name, arch);
  if (r == LOOM_SUCCESS && (e = nvrtcGetCUBINSize(prog, size)) != NVRTC_SUCCESS)
    r = nvrtc_fail(e, "nvrtcGetCUBINSize", name);
  if (r == LOOM_SUCCESS && !(*data = malloc(*size ? *size : 1)))
    r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "NVRTC: out of host memory (%zu bytes)", *size);
  if (r == LOOM_SUCCESS && (e = nvrtcGetCUBIN(prog, (char *)*data)) != NVRTC_SUCCESS) {
    free(*data);
    r = nvrtc_fail(e, "nvrtcGetCUBIN", name);
  }
  nvrtcDestroyProgram(&prog);
  return r;
}

/* ---- the memory cache (under rtc_lock) ------------------------------------------- */

static int mem_find(uint64_t key, const char *src, const char *opts) {
  for (int i = 0; i < rtc_n; ++i)
    if (rtc_mem[i].state != RTC_FREE && rtc_mem[i].key == key && !strcmp(rtc_mem[i].opts, opts) &&
        !strcmp(rtc_mem[i].src, src))
      return i;
  return -1;
}

/* A new entry being compiled (a free slot, or a new one): its index. */
static loom_result_t mem_claim(uint64_t key, const char *src, const char *opts, int *out) {
  int i = 0;
  while (i < rtc_n && rtc_mem[i].state != RTC_FREE) ++i;
  if (i == rtc_n && rtc_n == rtc_cap) {
    const int cap = rtc_cap ? 2 * rtc_cap : 16;
    rtc_entry_t *m = realloc(rtc_mem, sizeof *m * (size_t)cap);
    if (!m) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "NVRTC cache: out of host memory");
    rtc_mem = m, rtc_cap = cap;
  }
  rtc_entry_t *e = &rtc_mem[i];
  memset(e, 0, sizeof *e);
  e->key = key, e->state = RTC_COMPILING;
  e->src = strdup(src), e->opts = strdup(opts);
  if (!e->src || !e->opts) {
    free(e->src), free(e->opts);
    e->src = e->opts = NULL, e->state = RTC_FREE;
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "NVRTC cache: out of host memory");
  }
  if (i == rtc_n) rtc_n++;
  *out = i;
  return LOOM_SUCCESS;
}

void loom__rtc_cache_clear(void) {
  pthread_mutex_lock(&rtc_lock);
  for (int i = 0; i < rtc_n; ++i) free(rtc_mem[i].src), free(rtc_mem[i].opts), free(rtc_mem[i].data);
  rtc_n = 0;
  pthread_mutex_unlock(&rtc_lock);
}

/* ---- the lookup ----------------------------------------------------------------------- */

/* Outside the lock: the disk's image, else NVRTC's (then written to disk); a malloc'ed copy. */
static loom_result_t rtc_fill(const char *name, const char *src, const char *arch, const char *opts, uint64_t key,
                              void **data, size_t *size, int *from) {
  char dirbuf[1024];
  const char *dir = loom__rtc_cache_dir(dirbuf, sizeof dirbuf);
  if (dir && loom__rtc_disk_load(dir, key, src, opts, data, size)) {
    *from = LOOM__RTC_DISK;
    return LOOM_SUCCESS;
  }
  LOOM_TRY(nvrtc_build(name, src, arch, data, size));
  *from = LOOM__RTC_COMPILED;
  if (dir) (void)loom__rtc_disk_store(dir, key, src, opts, *data, *size); /* logged; the image serves anyway */
  return LOOM_SUCCESS;
}

/* Under the lock: entry *i ready (1), or this thread must fill it (0: *i claimed). */
static loom_result_t rtc_wait_or_claim(uint64_t key, const char *src, const char *opts, int *i, int *ready) {
  for (;;) {
    *i = mem_find(key, src, opts);
    if (*i < 0) {
      *ready = 0;
      return mem_claim(key, src, opts, i);
    }
    if (rtc_mem[*i].state == RTC_READY) {
      *ready = 1;
      return LOOM_SUCCESS;
    }
    pthread_cond_wait(&rtc_done, &rtc_lock); /* another thread compiles it */
  }
}

loom_result_t loom__rtc_compile(const char *name, const char *src, const char *arch, loom__rtc_image_t *out) {
  const double t0 = now_ms();
  if (!out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom__rtc_compile: out=NULL");
  memset(out, 0, sizeof *out);
  if (!src || !arch || !*arch)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom__rtc_compile: src=%p arch=%s", (const void *)src,
                      arch ? arch : "NULL");
  char opts[256];
  rtc_options(arch, opts, sizeof opts);
  const uint64_t key = loom__fnv64(loom__fnv64(1469598103934665603ull, src, strlen(src) + 1), opts, strlen(opts));
  pthread_mutex_lock(&rtc_lock);
  int i, ready, from = LOOM__RTC_MEMORY;
  loom_result_t r = rtc_wait_or_claim(key, src, opts, &i, &ready);
  if (r == LOOM_SUCCESS && !ready) {
    void *data = NULL;
    size_t size = 0;
    pthread_mutex_unlock(&rtc_lock);
    r = rtc_fill(name ? name : "<generated>", src, arch, opts, key, &data, &size, &from);
    pthread_mutex_lock(&rtc_lock);
    rtc_entry_t *e = &rtc_mem[i]; /* the array may have moved meanwhile */
    if (r == LOOM_SUCCESS) {
      e->data = data, e->size = size, e->state = RTC_READY;
    } else {
      free(e->src), free(e->opts);
      e->src = e->opts = NULL, e->state = RTC_FREE;
    }
    pthread_cond_broadcast(&rtc_done);
  }
  if (r == LOOM_SUCCESS) out->data = rtc_mem[i].data, out->size = rtc_mem[i].size, out->key = key, out->from = from;
  pthread_mutex_unlock(&rtc_lock);
  out->ms = now_ms() - t0;
  return r;
}
