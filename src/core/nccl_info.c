/*
 * nccl_info.c - which NCCL library this libloom calls (loom_get_nccl_info).
 *
 * A process can hold two files with the soname libnccl.so.2: the system's,
 * which libloom was linked against, and PyTorch's (nvidia-nccl-*). Which one
 * a call of libloom reaches is decided by the dynamic loader (load order,
 * RTLD_GLOBAL, soname matching), not by libloom. loom's device code is
 * compiled against one NCCL's device headers, so the library its host calls
 * reach must be of the same minor version; this file reports what is there
 * so that a caller (the Python binding) can refuse a mismatch with both
 * versions in words instead of running kernels on a foreign layout.
 *
 * The address of each NCCL function libloom uses is taken here (the loader
 * filled it in, as for the calls) and dladdr names the file that defines it;
 * `consistent` says whether all of them came from that one file.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <nccl.h>

#include "error.h"

typedef void (*loom__any_fn)(void);

/* The device-API host functions are declared in NCCL's C++ headers
 * (nccl_device.h) as extern "C"; only their addresses are taken here. */
extern void ncclDevCommCreate(void);
extern void ncclDevCommDestroy(void);
extern void ncclTeamLsa(void);
extern void ncclTeamRankToWorld(void);

loom_result_t loom_get_nccl_info(loom_nccl_info_t *info) {
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_get_nccl_info: info=NULL");
  if (info->struct_size != sizeof(loom_nccl_info_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_get_nccl_info: info->struct_size=%zu, expected %zu (initialise with "
                      "LOOM_NCCL_INFO_INIT; header and library differ?)",
                      info->struct_size, sizeof(loom_nccl_info_t));
  info->header_version = NCCL_VERSION_CODE;
  info->loaded_version = 0;
  info->consistent = 0;
  info->path[0] = '\0';
  int v = 0;
  ncclResult_t n = ncclGetVersion(&v);
  if (n != ncclSuccess) return loom__nccl_fail((int)n, "ncclGetVersion", __FILE__, __LINE__);
  info->loaded_version = v;

  /* every NCCL function libloom calls, host side */
  const loom__any_fn fns[] = {
      (loom__any_fn)ncclGetVersion,          (loom__any_fn)ncclCommCount,
      (loom__any_fn)ncclCommUserRank,        (loom__any_fn)ncclCommCuDevice,
      (loom__any_fn)ncclMemAlloc,            (loom__any_fn)ncclMemFree,
      (loom__any_fn)ncclCommWindowRegister,  (loom__any_fn)ncclCommWindowDeregister,
      (loom__any_fn)ncclAllReduce,           (loom__any_fn)ncclAllGather,
      (loom__any_fn)ncclReduceScatter,       (loom__any_fn)ncclSend,
      (loom__any_fn)ncclRecv,                (loom__any_fn)ncclGroupStart,
      (loom__any_fn)ncclGroupEnd,            (loom__any_fn)ncclGetErrorString,
      (loom__any_fn)ncclDevCommCreate,       (loom__any_fn)ncclDevCommDestroy,
      (loom__any_fn)ncclTeamLsa,             (loom__any_fn)ncclTeamRankToWorld,
  };
  const void *base = NULL;
  int consistent = 1;
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; ++i) {
    Dl_info di;
    void *addr;
    memcpy(&addr, &fns[i], sizeof addr); /* function -> object address (POSIX dladdr) */
    if (!dladdr(addr, &di) || !di.dli_fbase) {
      consistent = 0;
      continue;
    }
    if (i == 0) {
      base = di.dli_fbase;
      snprintf(info->path, sizeof info->path, "%s", di.dli_fname ? di.dli_fname : "");
    } else if (di.dli_fbase != base) {
      consistent = 0;
    }
  }
  info->consistent = consistent && base != NULL;
  return LOOM_SUCCESS;
}
