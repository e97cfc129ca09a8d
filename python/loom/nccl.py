"""nccl.py - the NCCL library under libloom, checked, and driven through ctypes.

A PyTorch process can hold two NCCL libraries with the same soname
libnccl.so.2: the system's, which libloom was linked against, and PyTorch's
own (the nvidia-nccl-cu13 wheel). The dynamic loader, not libloom, decides
which one libloom's calls reach:
  - `import torch` first: torch loads its NCCL (RTLD_GLOBAL); libloom's
    DT_NEEDED libnccl.so.2 then matches that already-loaded soname, so
    libloom runs on PyTorch's NCCL;
  - `import loom` first (libloom loaded, RTLD_NOW): libloom gets the system
    NCCL, and torch's own libnccl.so.2 dependency matches it in turn (seen
    with torch 2.15: `import torch` then fails, undefined symbol
    ncclCommResume, when the system NCCL is older than torch's);
  - LD_PRELOAD or $LOOM_NCCL_LIBRARY: that file, for everybody.
loom's kernels are compiled against one NCCL's device headers (the layouts
of ncclDevComm and ncclWindow, read inline on the GPU), so the library its
host calls reach must be of the same major.minor version; an older one has
no symmetric memory at all (< 2.28). check() compares the two (libloom
reports both: loom_get_nccl_info) before any communicator is made and raises
NcclMismatchError naming both versions and files, and PyTorch's NCCL when it
is another one, instead of running kernels on a foreign layout.
$LOOM_NCCL_CHECK: minor (default), exact, or off.

python/tools/nccl_probe.py runs every load order on a GPU machine and
prints what each side resolved.

The rest drives that same library (found by the path libloom's calls reach,
never by a fresh search) for the bootstrap: ncclGetUniqueId and
ncclCommInitRank, each blocking call run on a helper thread with a deadline
so that a peer that never joins is an exception, not a hang.
"""
import ctypes
import os
import sys
import threading
from dataclasses import dataclass

from . import _lib, _procmaps
from ._structs import NcclInfo
from .errors import CudaError, InvalidArgumentError, NcclError, NcclMismatchError, WaitTimeoutError

MIN_VERSION = 22800  # 2.28.0: symmetric windows and the device API
UNIQUE_ID_BYTES = 128
CHECK_MODES = ("minor", "exact", "off")


def version_text(code):
    """NCCL_VERSION_CODE -> "2.28.9"."""
    if code is None:
        return "unknown"
    code = int(code)
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def version_code(v):
    """A version as an NCCL_VERSION_CODE: an int, a (major, minor, patch)
    tuple (torch.cuda.nccl.version()) or "2.28.9"."""
    if v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        v = tuple(int(x) for x in v.split(".")[:3])
    major, minor, patch = (tuple(v) + (0, 0, 0))[:3]
    return int(major) * 10000 + int(minor) * 100 + int(patch)


@dataclass(frozen=True)
class LoomNccl:
    """What libloom says about its NCCL (loom_get_nccl_info)."""
    header_version: int   # NCCL_VERSION_CODE libloom was compiled against
    loaded_version: int   # version of the library libloom's calls reach
    path: str             # that library's file
    consistent: bool      # all of libloom's NCCL functions resolve into that one file


@dataclass(frozen=True)
class TorchNccl:
    """The NCCL PyTorch's calls reach (None fields where not known)."""
    version: int
    path: str


def loom_nccl():
    """LoomNccl of the loaded libloom (loads it; needs no GPU)."""
    info = NcclInfo()
    _lib.call("loom_get_nccl_info", ctypes.byref(info))
    return LoomNccl(info.header_version, info.loaded_version, info.path.decode(errors="replace"),
                    bool(info.consistent))


def mapped_nccl_files():
    """Every distinct libnccl file this process has mapped now."""
    return _procmaps.distinct_files(_procmaps.mapped_files("libnccl"))


def _dl():
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "dladdr"):
        libc = ctypes.CDLL("libdl.so.2")
    return libc


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def defining_file(addr):
    """The file that holds address `addr` (dladdr), or None."""
    if not addr:
        return None
    dl = _dl()
    dl.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dl.dladdr.restype = ctypes.c_int
    info = _DlInfo()
    if not dl.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) or not info.dli_fname:
        return None
    return info.dli_fname.decode(errors="replace")


def symbol_file(symbol, handle=None):
    """File defining `symbol` as the loader resolves it: in the global scope
    (handle None: RTLD_DEFAULT, what a library without its own binding
    sees first) or in the scope of a dlopen handle."""
    dl = _dl()
    dl.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    dl.dlsym.restype = ctypes.c_void_p
    return defining_file(dl.dlsym(handle, symbol.encode()))


def torch_nccl():
    """The NCCL PyTorch's calls reach, if torch is imported (never imports it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    version = None
    try:
        version = version_code(torch.cuda.nccl.version())
    except Exception:  # torch built without NCCL, or no CUDA
        pass
    # libtorch_cuda binds its NCCL calls through the global scope first, then
    # its own dependencies.
    path = symbol_file("ncclGetVersion")
    if path is None:
        for lib in _procmaps.mapped_files("libtorch_cuda"):
            try:
                h = ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_NOLOAD)
            except OSError:
                continue
            path = symbol_file("ncclGetVersion", h._handle)
            break
    return TorchNccl(version, path)


def compatibility_problem(info, mode="minor", torch=None):
    """Why libloom cannot run on the NCCL its calls reach, in words, or None.

    info: LoomNccl; mode: one of CHECK_MODES; torch: TorchNccl or None
    (named in the message when it is another library)."""
    if mode not in CHECK_MODES:
        raise InvalidArgumentError(f"LOOM_NCCL_CHECK={mode!r}: must be one of {', '.join(CHECK_MODES)}")
    if mode == "off":
        return None
    hdr, got = info.header_version, info.loaded_version
    where = f"NCCL {version_text(got)} at {info.path or '(unknown file)'}"
    if not info.consistent:
        problem = (f"libloom's NCCL calls do not all resolve into one library (the first, ncclGetVersion, "
                   f"into {where}): two NCCLs are mixed")
    elif got < MIN_VERSION:
        problem = (f"libloom's NCCL calls reach {where}, older than 2.28.0, which has no symmetric "
                   f"memory or device API; libloom was built against NCCL {version_text(hdr)}")
    elif mode == "minor" and got // 100 != hdr // 100:
        problem = (f"libloom was built against NCCL {version_text(hdr)}'s headers but its calls reach "
                   f"{where}: loom's kernels read NCCL's device structures as {version_text(hdr)[:4]} "
                   f"lays them out, another minor version may not")
    elif mode == "exact" and got != hdr:
        problem = (f"libloom was built against NCCL {version_text(hdr)} but its calls reach {where} "
                   f"(LOOM_NCCL_CHECK=exact)")
    else:
        return None
    if torch is not None and torch.path and not (info.path and _procmaps.same_file(torch.path, info.path)):
        problem += f"; PyTorch's calls reach NCCL {version_text(torch.version)} at {torch.path}"
    elif torch is not None and torch.path:
        problem += " (PyTorch's calls reach the same library)"
    return problem + ". " + remedy(info, torch)


def remedy(info, torch=None):
    """What to do about a mismatch, in words (names the folder of PyTorch's
    NCCL when its headers are there, for rebuilding libloom against it)."""
    want = version_text(info.header_version)[:4] + ".x"
    fixes = []
    if torch is not None and torch.path:
        home = os.path.dirname(os.path.dirname(torch.path))
        if os.path.isfile(os.path.join(home, "include", "nccl_device.h")):
            fixes.append(f"rebuild libloom against PyTorch's NCCL (make NCCL_HOME={home})")
    fixes.append(f"use a PyTorch whose NCCL is {want} (torch 2.11 ships NCCL 2.28.9)")
    fixes.append("or make the whole process use an NCCL " + want + " (import loom before torch, or "
                 "LD_PRELOAD=/ LOOM_NCCL_LIBRARY=<its libnccl.so.2>): only where PyTorch runs on it; a PyTorch "
                 "built for a newer NCCL then fails at `import torch` (undefined symbol)")
    return ("Fix: " + "; ".join(fixes) + ". LOOM_NCCL_CHECK=off skips this check at your own risk (mismatched "
            "device structures: wrong results or faults)")


def check(mode=None):
    """Raises NcclMismatchError if libloom cannot run on the NCCL its calls
    reach (see compatibility_problem); returns the LoomNccl otherwise."""
    if mode is None:
        mode = os.environ.get("LOOM_NCCL_CHECK", "") or "minor"
    info = loom_nccl()
    tn = torch_nccl()
    problem = compatibility_problem(info, mode, tn)
    if problem:
        raise NcclMismatchError(problem, loom_nccl=f"{version_text(info.loaded_version)} {info.path}",
                                other_nccl=(f"{version_text(tn.version)} {tn.path}" if tn else
                                            f"headers {version_text(info.header_version)}"))
    return info


def report():
    """Which NCCL each side uses, as a dict (for logs and the probe)."""
    info = loom_nccl()
    tn = torch_nccl()
    return {
        "loom_header": version_text(info.header_version),
        "loom_loaded": version_text(info.loaded_version),
        "loom_path": info.path,
        "loom_consistent": info.consistent,
        "torch_version": version_text(tn.version) if tn else None,
        "torch_path": tn.path if tn else None,
        "same_library": bool(tn and tn.path and info.path and _procmaps.same_file(tn.path, info.path)),
        "mapped": mapped_nccl_files(),
    }


# ---- calls into the NCCL libloom uses ---------------------------------------

class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]  # bytes, NULs included


_nccl = None


def library():
    """ctypes handle of the NCCL file libloom's calls reach (never another)."""
    global _nccl
    if _nccl is None:
        path = loom_nccl().path
        if not path:
            raise NcclError("the NCCL library libloom uses could not be named (dladdr failed)")
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_NOLOAD)
        vp, i = ctypes.c_void_p, ctypes.c_int
        for name, res, args in (
                ("ncclGetUniqueId", i, [ctypes.POINTER(UniqueId)]),
                ("ncclCommInitRank", i, [ctypes.POINTER(vp), i, UniqueId, i]),
                ("ncclCommFinalize", i, [vp]),
                ("ncclCommDestroy", i, [vp]),
                ("ncclCommAbort", i, [vp]),
                ("ncclCommCount", i, [vp, ctypes.POINTER(i)]),
                ("ncclCommUserRank", i, [vp, ctypes.POINTER(i)]),
                ("ncclCommCuDevice", i, [vp, ctypes.POINTER(i)]),
                ("ncclGetErrorString", ctypes.c_char_p, [i]),
                ("ncclGetLastError", ctypes.c_char_p, [vp]),
                ("ncclAllReduce", i, [vp, vp, ctypes.c_size_t, i, i, vp, vp])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _nccl = lib
    return _nccl


def _nccl_check(r, what, comm=None):
    if r != 0:
        lib = library()
        detail = lib.ncclGetLastError(comm).decode(errors="replace") if comm is not None else ""
        raise NcclError(f"{what} failed: {lib.ncclGetErrorString(r).decode()} (ncclResult {r})"
                        + (f": {detail}" if detail else ""), function=what)


def get_unique_id():
    """A fresh ncclUniqueId (128 bytes) from the NCCL libloom uses."""
    uid = UniqueId()
    _nccl_check(library().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return bytes(uid.internal)


def _set_device(device):
    """Makes `device` current in the calling thread (torch's runtime if
    torch is imported, else the CUDA runtime libloom loaded)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.cuda.set_device(device)
        return
    _lib.load()
    paths = _procmaps.mapped_files("libcudart")
    if not paths:
        raise CudaError("no CUDA runtime is loaded in this process", function="cudaSetDevice")
    rt = ctypes.CDLL(paths[0], mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    r = rt.cudaSetDevice(ctypes.c_int(device))
    if r != 0:
        raise CudaError(f"cudaSetDevice({device}) failed (cudaError {r})", function="cudaSetDevice")


def run_bounded(fn, timeout_s, what, device=None):
    """fn() on a helper thread (with `device` current there), waiting at most
    timeout_s: for blocking collective calls, so that a peer that never makes
    the matching call raises WaitTimeoutError instead of hanging the caller.
    libloom's error messages are thread-local: fn must turn failures into
    exceptions itself (loom._lib.call does), and they are re-raised here."""
    box = {}

    def body():
        try:
            if device is not None:
                _set_device(device)
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=body, name=f"loom {what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise WaitTimeoutError(
            f"{what} did not return within {timeout_s:g} s: a peer rank did not make the matching "
            "collective call (it failed or is doing something else); the NCCL/loom state of this process "
            "is undefined now: end it", function=what)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def comm_init_rank(nranks, unique_id, rank, device, timeout_s=300.0):
    """ncclCommInitRank on `device` through the NCCL libloom uses, bounded by
    timeout_s; returns the ncclComm_t as an int."""
    if len(unique_id) != UNIQUE_ID_BYTES:
        raise InvalidArgumentError(f"unique_id has {len(unique_id)} bytes, expected {UNIQUE_ID_BYTES}")
    if not 0 <= rank < nranks:
        raise InvalidArgumentError(f"rank={rank} must be in [0, nranks={nranks})")
    uid = UniqueId()
    ctypes.memmove(ctypes.addressof(uid), bytes(unique_id), UNIQUE_ID_BYTES)
    lib = library()

    def init():
        comm = ctypes.c_void_p()
        _nccl_check(lib.ncclCommInitRank(ctypes.byref(comm), int(nranks), uid, int(rank)), "ncclCommInitRank")
        return comm.value

    return run_bounded(init, timeout_s, f"ncclCommInitRank (rank {rank} of {nranks})", device)


def comm_destroy(comm, device, timeout_s=300.0):
    """ncclCommFinalize + ncclCommDestroy of a comm from comm_init_rank (collective)."""
    lib = library()

    def fini():
        _nccl_check(lib.ncclCommFinalize(comm), "ncclCommFinalize", comm)
        _nccl_check(lib.ncclCommDestroy(comm), "ncclCommDestroy")

    run_bounded(fini, timeout_s, "ncclCommFinalize/Destroy", device)


def comm_abort(comm):
    """ncclCommAbort: frees a comm without waiting for peers."""
    library().ncclCommAbort(comm)


def comm_rank_size_device(comm):
    """(rank, size, CUDA device) of an ncclComm_t, read through libloom's NCCL."""
    lib = library()
    r, n, d = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    _nccl_check(lib.ncclCommUserRank(comm, ctypes.byref(r)), "ncclCommUserRank")
    _nccl_check(lib.ncclCommCount(comm, ctypes.byref(n)), "ncclCommCount")
    _nccl_check(lib.ncclCommCuDevice(comm, ctypes.byref(d)), "ncclCommCuDevice")
    return r.value, n.value, d.value
