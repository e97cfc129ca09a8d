"""_lib.py - finding, loading and calling libloom.so through ctypes.

Where libloom comes from, in this order (the first that exists is loaded;
LOOM_LIBRARY, when set, is the only place looked at):
  1. $LOOM_LIBRARY: the file, or the folder holding libloom.so;
  2. the package's own copy, loom/lib/libloom.so.0, which a wheel built
     from the tree carries (python/setup.py);
  3. the build tree this package sits in: <repo>/build/lib/libloom.so
     (python/loom/ -> <repo>), as after `make`;
  4. an installed prefix: <sys.prefix>/lib, /usr/local/lib, then whatever
     the dynamic loader finds for libloom.so.0 (LD_LIBRARY_PATH, ld.so.cache),
     as after `make install PREFIX=...`.

How it is loaded: RTLD_NOW | RTLD_LOCAL, so that every NCCL function libloom
calls is bound once, at load, to one library (a lazily bound call could
otherwise land in an NCCL that PyTorch loads later), and libloom's own
symbols stay out of the process's global scope. If $LOOM_NCCL_LIBRARY names
an NCCL file, it is loaded first with RTLD_GLOBAL, so that libloom and
everything loaded after it (PyTorch included) use that one; this only works
if no NCCL is in the process yet, else NcclMismatchError says which one is.
nccl.py checks the NCCL libloom reaches before a communicator is made.

Every libloom function has its prototype here (restype, argtypes); call()
turns a failed loom_result_t into the exception of its code with
loom_last_error()'s message (errors.py).
"""
import ctypes
import os
import sys
import threading
from pathlib import Path

from . import _procmaps
from ._structs import (CollDesc, CollPlanInfo, CommInfo, Config, EmbeddingDesc, EmbeddingPlanInfo, Epilogue, GemmDesc,
                       GroupedGemmDesc, MoeDesc, MoePlanInfo, NcclInfo, OptimArgs, OptimDesc, OptimPlanInfo, ProgAttr,
                       ProgIo, ProgPlanInfo, ProgTuneResult, TpDesc, TpPlanInfo)
from .errors import LibraryNotFoundError, LibraryVersionError, NcclMismatchError, make_error


def _read_version():
    """The repository's VERSION file (MAJOR.MINOR.PATCH) as a tuple: the
    package's VERSION (a link to it in the tree, a copy in a wheel), else the
    tree's own (a package whose link was lost in a copy)."""
    for f in (Path(__file__).with_name("VERSION"), Path(__file__).resolve().parents[2] / "VERSION"):
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        parts = text.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ImportError(f"loom: {f} holds {text!r}; expected MAJOR.MINOR.PATCH")
        return tuple(int(p) for p in parts)
    raise ImportError(f"loom: no VERSION file beside {__file__} or in the loom tree above it")


# The libloom version this binding is written for: the repository's VERSION,
# which LOOM_VERSION_* in loom.h must equal (make's header-check); a library
# of another major.minor is refused.
BINDING_VERSION = _read_version()

_P = ctypes.POINTER
_r = ctypes.c_int  # loom_result_t
_vp, _i, _i64, _f, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float, ctypes.c_size_t
_s, _d = ctypes.c_char_p, ctypes.c_double

# name -> (restype, argtypes), in loom.h's order. tests/python/test_library.py
# checks that every function loom.h declares is here with its argument count.
PROTOTYPES = {
    "loom_result_string": (ctypes.c_char_p, [_i]),
    "loom_last_error": (ctypes.c_char_p, []),
    "loom_get_version": (_r, [_P(_i)]),
    "loom_finalize": (_r, []),
    "loom_get_nccl_info": (_r, [_P(NcclInfo)]),
    "loom_dtype_size": (_sz, [_i]),
    "loom_comm_create": (_r, [_vp, _P(Config), _P(_vp)]),
    "loom_comm_destroy": (_r, [_vp]),
    "loom_comm_get_info": (_r, [_vp, _P(CommInfo)]),
    "loom_comm_get_async_error": (_r, [_vp]),
    # a world of ranks on one GPU: size, device, out; world, rank, cfg, out; world
    "loom_world_create": (_r, [_i, _i, _P(_vp)]),
    "loom_comm_create_in_world": (_r, [_vp, _i, _P(Config), _P(_vp)]),
    "loom_world_destroy": (_r, [_vp]),
    "loom_malloc": (_r, [_vp, _sz, _P(_vp)]),
    "loom_free": (_r, [_vp, _vp]),
    "loom_peer_ptr": (_r, [_vp, _vp, _i, _P(_vp)]),
    "loom_plan_destroy": (_r, [_vp]),
    # desc, a, b, c, bias, stream
    "loom_gemm": (_r, [_P(GemmDesc), _vp, _vp, _vp, _vp, _vp]),
    "loom_gemm_tune": (_r, [_P(GemmDesc), _vp, _vp, _vp, _vp, _vp]),
    # desc, a, b, c, bias, offsets, stream
    "loom_gemm_grouped": (_r, [_P(GroupedGemmDesc), _vp, _vp, _vp, _vp, _vp, _vp]),
    "loom_plan_embedding_a2a": (_r, [_vp, _P(EmbeddingDesc), _P(_vp)]),
    "loom_embedding_a2a_plan_info": (_r, [_vp, _P(EmbeddingPlanInfo)]),
    # plan, tables, indices, offsets, num_indices, weights, out, stream
    "loom_embedding_a2a": (_r, [_vp, _vp, _vp, _vp, _i64, _vp, _vp, _vp]),
    # plan, grad_out, indices, offsets, num_indices, weights, scale, table_grad, stream
    "loom_embedding_a2a_backward": (_r, [_vp, _vp, _vp, _vp, _i64, _vp, _f, _vp, _vp]),
    # plan, tables, indices, offsets, num_indices, weights, pooled, stream
    "loom_embedding_pool": (_r, [_vp, _vp, _vp, _vp, _i64, _vp, _vp, _vp]),
    "loom_embedding_a2a_check": (_r, [_vp]),
    "loom_plan_ag_gemm": (_r, [_vp, _P(TpDesc), _P(_vp)]),
    "loom_plan_gemm_rs": (_r, [_vp, _P(TpDesc), _P(_vp)]),
    "loom_ag_gemm_tune": (_r, [_vp, _P(TpDesc), _vp]),
    "loom_gemm_rs_tune": (_r, [_vp, _P(TpDesc), _vp]),
    "loom_plan_gemm_ar": (_r, [_vp, _P(TpDesc), _P(_vp)]),
    "loom_gemm_ar_tune": (_r, [_vp, _P(TpDesc), _vp]),
    "loom_tp_plan_info": (_r, [_vp, _P(TpPlanInfo)]),
    # plan, a_shard, b, c, a_full, bias, stream
    "loom_ag_gemm": (_r, [_vp, _vp, _vp, _vp, _vp, _vp, _vp]),
    # plan, a, b, c_shard, bias, stream
    "loom_gemm_rs": (_r, [_vp, _vp, _vp, _vp, _vp, _vp]),
    # plan, a, b, out, epilogue, stream
    "loom_gemm_ar": (_r, [_vp, _vp, _vp, _vp, _P(Epilogue), _vp]),
    "loom_plan_adam": (_r, [_vp, _P(OptimDesc), _P(_vp)]),
    "loom_plan_lamb": (_r, [_vp, _P(OptimDesc), _P(_vp)]),
    # plan, args, stream
    "loom_adam_step": (_r, [_vp, _P(OptimArgs), _vp]),
    "loom_lamb_step": (_r, [_vp, _P(OptimArgs), _vp]),
    "loom_optim_plan_info": (_r, [_vp, _P(OptimPlanInfo)]),
    "loom_plan_moe": (_r, [_vp, _P(MoeDesc), _P(_vp)]),
    "loom_moe_plan_info": (_r, [_vp, _P(MoePlanInfo)]),
    # plan, x, ids, tokens, stream
    "loom_moe_dispatch": (_r, [_vp, _vp, _vp, _i64, _vp]),
    # plan, y, weights, out, stream
    "loom_moe_combine": (_r, [_vp, _vp, _vp, _vp, _vp]),
    # plan, x, ids, weights, tokens, gate_up, down, out, stream
    "loom_moe_mlp": (_r, [_vp, _vp, _vp, _vp, _i64, _vp, _vp, _vp, _vp]),
    "loom_moe_mlp_tune": (_r, [_vp, _vp, _vp, _vp, _i64, _vp, _vp, _vp, _vp]),
    # plan, tokens, path out
    "loom_moe_mlp_path": (_r, [_vp, _i64, _P(_i)]),
    # plan, tensor, lo, hi, state_offset
    "loom_optim_tensor_state": (_r, [_vp, _i, _P(_i64), _P(_i64), _P(_i64)]),
    # plan, step, stream
    "loom_optim_set_step": (_r, [_vp, ctypes.c_int32, _vp]),
    "loom_plan_allreduce": (_r, [_vp, _P(CollDesc), _P(_vp)]),
    "loom_plan_reduce_scatter": (_r, [_vp, _P(CollDesc), _P(_vp)]),
    "loom_plan_all_gather": (_r, [_vp, _P(CollDesc), _P(_vp)]),
    "loom_coll_plan_info": (_r, [_vp, _P(CollPlanInfo)]),
    # plan, in, out, epilogue, norm_weight, norm_bias, stream
    "loom_allreduce": (_r, [_vp, _vp, _vp, _vp, _vp, _vp, _vp]),
    "loom_reduce_scatter": (_r, [_vp, _vp, _vp, _vp, _vp, _vp, _vp]),
    # plan, in, out, stream
    "loom_all_gather": (_r, [_vp, _vp, _vp, _vp]),
    # the language (lang.py)
    "loom_prog_parse": (_r, [_s, _s, _P(_vp)]),
    "loom_prog_create": (_r, [_P(_vp)]),
    "loom_prog_destroy": (_r, [_vp]),
    "loom_prog_tensor": (_r, [_vp, _s, _i, _s, _i, _i, _i, _P(_i)]),
    "loom_prog_const": (_r, [_vp, _d, _P(_i)]),
    "loom_prog_op": (_r, [_vp, _s, _P(_i), _i, _P(ProgAttr), _P(_i)]),
    "loom_prog_name": (_r, [_vp, _i, _s]),
    "loom_prog_execute": (_r, [_vp, _s, _P(_i), _i, _P(_i), _i]),
    "loom_prog_check": (_r, [_vp]),
    "loom_prog_print": (_r, [_vp, _i, _s, _sz, _P(_sz)]),
    "loom_prog_equal": (_r, [_vp, _vp, _P(_i)]),
    "loom_prog_transform": (_r, [_vp, _s]),
    "loom_prog_schedule": (_r, [_vp, _s, _P(_vp)]),
    "loom_prog_interp": (_r, [_vp, _i, _s, ctypes.c_uint64, _s, _P(_d), _sz, _P(_sz)]),
    "loom_prog_interp_compare": (_r, [_vp, _vp, _i, _s, ctypes.c_uint64, _P(_d)]),
    # comm, prog, schedule, bind, plan out; plan, inputs, outputs, stream
    "loom_prog_compile": (_r, [_vp, _vp, _s, _s, _P(_vp)]),
    "loom_prog_run": (_r, [_vp, _P(_vp), _P(_vp), _vp]),
    "loom_prog_plan_io": (_r, [_vp, _i, _i, _P(ProgIo)]),
    "loom_prog_plan_info": (_r, [_vp, _P(ProgPlanInfo)]),
    # comm, prog, bind, stream, result
    "loom_prog_tune": (_r, [_vp, _vp, _s, _vp, _P(ProgTuneResult)]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None
_preloaded_nccl = None


def repo_root():
    """The source tree this package sits in (python/loom/ -> <repo>)."""
    return Path(__file__).resolve().parents[2]


def candidates():
    """(source, path) pairs to try, in order (see the top of this file)."""
    env = os.environ.get("LOOM_LIBRARY", "")
    if env:
        p = Path(env)
        if p.is_dir():
            return [("LOOM_LIBRARY", str(p / "libloom.so"))]
        return [("LOOM_LIBRARY", str(p))]
    out = [("package", str(Path(__file__).resolve().parent / "lib" / "libloom.so.0")),
           ("build tree", str(repo_root() / "build" / "lib" / "libloom.so"))]
    for prefix in dict.fromkeys([sys.prefix, "/usr/local"]):
        out.append(("installed", str(Path(prefix) / "lib" / "libloom.so.0")))
    out.append(("loader search path", "libloom.so.0"))
    return out


def _preload_nccl():
    """Loads $LOOM_NCCL_LIBRARY with RTLD_GLOBAL before libloom (once)."""
    global _preloaded_nccl
    want = os.environ.get("LOOM_NCCL_LIBRARY", "")
    if not want or _preloaded_nccl:
        return
    if not os.path.isfile(want):
        raise LibraryNotFoundError(f"LOOM_NCCL_LIBRARY={want}: no such file")
    loaded = _procmaps.distinct_files(_procmaps.mapped_files("libnccl"))
    others = [p for p in loaded if not _procmaps.same_file(p, want)]
    if others:
        raise NcclMismatchError(
            f"LOOM_NCCL_LIBRARY={want} cannot take effect: this process already loaded NCCL from "
            f"{others[0]} (PyTorch loads its own NCCL at `import torch`); import loom before torch, or "
            f"start Python with LD_PRELOAD={want}",
            loom_nccl=want, other_nccl=others[0])
    try:
        ctypes.CDLL(want, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        raise LibraryNotFoundError(f"LOOM_NCCL_LIBRARY={want} did not load: {e}") from e
    _preloaded_nccl = want


def library_version(lib):
    """(major, minor, patch) of a loaded libloom (loom_get_version), None if it has no such function."""
    if not hasattr(lib, "loom_get_version"):
        return None
    fn = lib.loom_get_version
    fn.restype, fn.argtypes = _r, [_P(_i)]
    v = ctypes.c_int(0)
    if fn(ctypes.byref(v)) != 0:
        return None
    return (v.value // 10000, v.value // 100 % 100, v.value % 100)


def _bind(lib, path):
    """Prototypes onto a loaded libloom; LibraryVersionError for one of
    another major.minor or one that lacks a function the binding calls."""
    want = ".".join(map(str, BINDING_VERSION))
    got = library_version(lib)
    shown = ".".join(map(str, got)) if got else "of an unknown version"
    if got is None or got[:2] != BINDING_VERSION[:2]:
        raise LibraryVersionError(
            f"{path} is libloom {shown}; this binding ({want}) needs libloom "
            f"{'.'.join(map(str, BINDING_VERSION[:2]))}.x: rebuild it (make), or point LOOM_LIBRARY at a matching "
            "one", path=path, library_version=got, binding_version=BINDING_VERSION)
    missing = [n for n in PROTOTYPES if not hasattr(lib, n)]
    if missing:
        raise LibraryVersionError(
            f"{path} (libloom {shown}) lacks {', '.join(missing)}, which this binding ({want}) calls: rebuild it "
            "(make), or point LOOM_LIBRARY at a matching one",
            path=path, library_version=got, binding_version=BINDING_VERSION)
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load():
    """The loaded libloom (a ctypes.CDLL with prototypes), loading it on first use."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        _preload_nccl()
        tried = []
        for source, path in candidates():
            if "/" in path and not os.path.exists(path):
                tried.append(f"{path} ({source}): not there")
                continue
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            except OSError as e:
                tried.append(f"{path} ({source}): {e}")
                if source == "LOOM_LIBRARY" or "/" in path:
                    break  # a file that exists but does not load: say so, do not fall back
                continue
            _bind(lib, path)
            _lib, _lib_path = lib, _resolved_path(lib, path)
            return _lib
        raise LibraryNotFoundError(
            "libloom.so not found or not loadable; tried:\n  " + "\n  ".join(tried)
            + "\nbuild it with `make` in the loom tree, install it (`make install PREFIX=...`), or set "
            "LOOM_LIBRARY to the file or its folder")


def _resolved_path(lib, path):
    """The file the loader actually opened for `path` (a bare soname included)."""
    for p in _procmaps.mapped_files("libloom"):
        if "/" not in path or _procmaps.same_file(p, path):
            return p
    return path


def library_path():
    """Path of the loaded libloom.so (loads it)."""
    load()
    return _lib_path


def last_error():
    return load().loom_last_error().decode(errors="replace")


def result_string(code):
    return load().loom_result_string(int(code)).decode()


def call(name, *args):
    """Calls libloom function `name`; raises the exception of a failed result."""
    lib = load()
    r = getattr(lib, name)(*args)
    if r != 0:
        raise make_error(r, last_error(), name)
    return r


def check(r, name):
    """Raises for a loom_result_t `r` returned by function `name`."""
    if r != 0:
        raise make_error(r, last_error(), name)


def version():
    """libloom's version as (major, minor, patch)."""
    v = ctypes.c_int(0)
    call("loom_get_version", ctypes.byref(v))
    return (v.value // 10000, v.value // 100 % 100, v.value % 100)
