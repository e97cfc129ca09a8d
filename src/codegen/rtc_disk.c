/*
 * rtc_disk.c - the disk cache's entries: one file per compiled image,
 * `<dir>/<key>.loomrtc`:
 *
 *   header   magic "LOOMRTC1", key, source bytes, options bytes, image
 *            bytes, FNV-1a of the image (six uint64, host byte order)
 *   source   the CUDA C it was compiled from
 *   options  the options, versions and hashes it was compiled with
 *   image    the cubin
 *
 * Loaded only when the file's length is exactly header + the three lengths,
 * the key, source and options are the ones asked for and the image hashes
 * to the recorded value; anything else (a truncated or corrupt file, another
 * program's image under a colliding key, another loom's) is refused with a
 * log line and the caller recompiles. Written to `.<key>.<pid>.<n>.tmp` in
 * the same folder and renamed over the entry: rename is atomic within a
 * file system, so a process reading the entry while another writes it sees
 * the old whole file or the new one, never a part.
 */
#define _POSIX_C_SOURCE 200809L /* fstat, fileno, open, rename */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/rtc.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"

#define RTC_MAGIC 0x314354524d4f4f4cull /* the bytes "LOOMRTC1" on a little-endian host */

typedef struct rtc_header {
  uint64_t magic, key, src_len, opt_len, img_len, img_hash;
} rtc_header_t;

static uint64_t img_hash(const void *p, size_t n) { return loom__fnv64(1469598103934665603ull, p, n); }

/* The whole file into a malloc'ed buffer; 0 if it cannot be read. */
static int read_all(const char *path, unsigned char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  struct stat st;
  int ok = fstat(fileno(f), &st) == 0 && st.st_size >= 0;
  *len = ok ? (size_t)st.st_size : 0;
  *buf = ok ? malloc(*len + 1) : NULL;
  ok = *buf && fread(*buf, 1, *len, f) == *len;
  fclose(f);
  if (!ok) free(*buf), *buf = NULL;
  return ok;
}

/* Why entry (len bytes at b) is not key's image of src and opts; NULL if it is. */
static const char *entry_refusal(const unsigned char *b, size_t len, uint64_t key, const char *src, const char *opts) {
  rtc_header_t h;
  if (len < sizeof h) return "shorter than its header";
  memcpy(&h, b, sizeof h);
  if (h.magic != RTC_MAGIC) return "not a loom kernel cache entry";
  const size_t sl = strlen(src), ol = strlen(opts);
  if (h.src_len > len || h.opt_len > len || h.img_len > len || sizeof h + h.src_len + h.opt_len + h.img_len != len)
    return "truncated or padded (its lengths do not add up to the file's)";
  if (h.key != key) return "made under another key";
  if (h.src_len != sl || memcmp(b + sizeof h, src, sl)) return "made from another source (a colliding key)";
  if (h.opt_len != ol || memcmp(b + sizeof h + sl, opts, ol)) return "made with other options or another loom";
  if (img_hash(b + sizeof h + sl + ol, h.img_len) != h.img_hash) return "its image is corrupt (hash mismatch)";
  return NULL;
}

int loom__rtc_disk_load(const char *dir, uint64_t key, const char *src, const char *opts, void **data, size_t *size) {
  char path[1200];
  loom__rtc_entry_path(dir, key, path, sizeof path);
  unsigned char *b;
  size_t len;
  if (!read_all(path, &b, &len)) return 0;
  const char *why = entry_refusal(b, len, key, src, opts);
  if (why) {
    LOOM_WARN("kernel cache: %s refused: %s; compiling again", path, why);
    free(b);
    return 0;
  }
  const size_t off = sizeof(rtc_header_t) + strlen(src) + strlen(opts);
  *size = len - off;
  memmove(b, b + off, *size);
  *data = b;
  return 1;
}

/* mkdir -p dir (mode 0755). */
static int make_dirs(const char *dir) {
  char p[1024];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; ++s) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w, n -= (size_t)w;
  }
  return 0;
}

loom_result_t loom__rtc_disk_store(const char *dir, uint64_t key, const char *src, const char *opts, const void *data,
                                   size_t size) {
  static int counter;
  char path[1200], tmp[1300];
  loom__rtc_entry_path(dir, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s/.%016llx.%ld.%d.tmp", dir, (unsigned long long)key, (long)getpid(),
           __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
  const rtc_header_t h = {RTC_MAGIC, key, strlen(src), strlen(opts), size, img_hash(data, size)};
  int fd = make_dirs(dir) == 0 ? open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644) : -1;
  int ok = fd >= 0 && write_all(fd, &h, sizeof h) == 0 && write_all(fd, src, h.src_len) == 0 &&
           write_all(fd, opts, h.opt_len) == 0 && write_all(fd, data, size) == 0;
  if (fd >= 0 && close(fd) != 0) ok = 0;
  if (ok && rename(tmp, path) != 0) ok = 0;
  if (ok) return LOOM_SUCCESS;
  const int err = errno;
  if (fd >= 0) unlink(tmp);
  LOOM_WARN("kernel cache: cannot write %s (%s); going on without it", path, strerror(err));
  return loom__fail(LOOM_ERR_INTERNAL, "kernel cache: cannot write %s: %s", path, strerror(err));
}
