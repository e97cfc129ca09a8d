"""setup.py - the wheel carries libloom.

pyproject.toml holds the metadata; this file adds the steps around the
build: libloom.so is built with the loom tree's own Makefile (the tree this
folder sits in: python/.. ) and copied into the package as
loom/lib/libloom.so.0, so that `pip install ./python` (or a wheel built from
it) works from anywhere, not only inside the build tree. The wheel is then
for one platform, any Python 3 (py3-none-linux_<machine>: the binding is
ctypes, so no Python ABI; not manylinux, since libloom needs libraries that
policy does not allow: the CUDA runtime and NCCL).

    pip install ./python                       builds libloom (make), ships it
    pip wheel ./python -w dist                 the same, a wheel to copy around
    LOOM_WHEEL_LIBRARY=/path/libloom.so.0 pip wheel ./python   ship that file instead
    LOOM_WHEEL_LIBRARY=none pip install -e ./python             no library in the package
                                               (editable installs use the build tree anyway)

Refused, with the reason, before anything ships:
  - a folder whose loom/VERSION or LICENSE does not resolve (both are links
    into the loom tree: a copy of python/ alone would otherwise become
    version 0.0.0 without its license);
  - a libloom of another version than the package's (loaded in a
    subprocess, which also reads the NCCL headers it was built with), or of
    another machine than the wheel's platform tag.
The wheel's METADATA declares what the shipped libloom needs from the
system as Requires-External lines: the CUDA runtime major its ELF names
(libcudart.so.N) and the NCCL major.minor of the headers it was built with
(the binding refuses another one by default).

make's requirements are the loom tree's (CUDA toolkit, NCCL headers: see
the README); its jobs: $LOOM_WHEEL_JOBS (default: the CPUs present).
"""
import json
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
except ImportError:  # older setuptools: the wheel package's
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
NOT_IN_TREE = ("loom: {what} does not resolve here: it is a link into the loom tree ({link}), and this folder "
               "({here}) is not inside one. Build the wheel from the loom tree itself (pip wheel <loom tree>/python), "
               "not from a copy of python/ alone")


def package_version():
    """The package's version, loom/VERSION's MAJOR.MINOR.PATCH; refuses a
    folder where the link does not resolve (setuptools would make that
    version 0.0.0)."""
    f = HERE / "loom" / "VERSION"
    try:
        text = f.read_text().strip()
    except OSError:
        raise SystemExit(NOT_IN_TREE.format(what="loom/VERSION", link="../../VERSION", here=HERE)) from None
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", text):
        raise SystemExit(f"loom: {f} holds {text!r}; expected MAJOR.MINOR.PATCH")
    return text


def check_license():
    if not (HERE / "LICENSE").is_file():
        raise SystemExit(NOT_IN_TREE.format(what="LICENSE", link="../LICENSE", here=HERE))


def built_library():
    """The libloom.so.0 to ship, building it first where needed; None where
    LOOM_WHEEL_LIBRARY=none."""
    chosen = os.environ.get("LOOM_WHEEL_LIBRARY", "")
    if chosen == "none":
        return None
    if chosen:
        p = Path(chosen)
        if not p.is_file():
            raise SystemExit(f"loom: LOOM_WHEEL_LIBRARY={chosen}: no such file")
        return p
    if not (TREE / "Makefile").is_file() or not (TREE / "include" / "loom.h").is_file():
        raise SystemExit(f"loom: {TREE} is not a loom tree (no Makefile, include/loom.h): build libloom with make "
                         "there, or set LOOM_WHEEL_LIBRARY to a built libloom.so.0 (or to none)")
    jobs = os.environ.get("LOOM_WHEEL_JOBS", str(os.cpu_count() or 1))
    print(f"loom: building libloom in {TREE} (make -j{jobs} build/lib/libloom.so)", flush=True)
    r = subprocess.run(["make", f"-j{jobs}", "build/lib/libloom.so"], cwd=TREE)
    if r.returncode != 0:
        raise SystemExit(f"loom: make build/lib/libloom.so failed in {TREE} (exit {r.returncode}); see its output above")
    return TREE / "build" / "lib" / "libloom.so.0"


# ---- what the library is and needs ---------------------------------------------

ELF_MACHINES = {62: "x86_64", 183: "aarch64", 21: "ppc64le"}


def elf_facts(path):
    """(machine, [DT_NEEDED sonames]) of a 64-bit little-endian ELF file."""
    try:
        return _elf_facts(path)
    except (struct.error, ValueError, IndexError) as e:
        raise SystemExit(f"loom: {path} is not a 64-bit little-endian ELF shared library ({e})") from None


def _elf_facts(path):
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"\x7fELF" or m[4] != 2 or m[5] != 1:
            raise ValueError("no ELF64 little-endian header")
        machine = struct.unpack_from("<H", m, 18)[0]
        shoff = struct.unpack_from("<Q", m, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", m, 0x3A)
        # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
        sections = [struct.unpack_from("<IIQQQQIIQQ", m, shoff + i * shentsize) for i in range(shnum)]
        needed = []
        for sec in sections:
            if sec[1] != 6:  # SHT_DYNAMIC
                continue
            strtab = sections[sec[6]][4]
            for off in range(sec[4], sec[4] + sec[5], 16):
                tag, val = struct.unpack_from("<qQ", m, off)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED
                    needed.append(m[strtab + val:m.find(b"\0", strtab + val)].decode())
    return ELF_MACHINES.get(machine, f"ELF machine {machine}"), needed


PROBE = """
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
from loom import _lib
from loom._structs import NcclInfo
lib = ctypes.CDLL(sys.argv[2], mode=os.RTLD_NOW | os.RTLD_LOCAL)
info = NcclInfo()
ok = hasattr(lib, "loom_get_nccl_info")
if ok:
    lib.loom_get_nccl_info.argtypes = [ctypes.POINTER(NcclInfo)]
    ok = lib.loom_get_nccl_info(ctypes.byref(info)) == 0
print(json.dumps({"version": _lib.library_version(lib), "nccl_header": info.header_version if ok else None}))
"""


def probe_library(path):
    """{"version": [major, minor, patch] or None, "nccl_header": NCCL_VERSION_CODE or None}
    of a libloom, loaded in a subprocess (its loader errors stay there)."""
    r = subprocess.run([sys.executable, "-c", PROBE, str(HERE), str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"loom: {path} did not load, so its version cannot be checked before it ships "
                         f"(its CUDA and NCCL libraries must load here; LD_LIBRARY_PATH may name them):\n"
                         f"{r.stderr.strip()[-1500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def requires_external(needed, nccl_header):
    """Requires-External lines: the CUDA runtime major the ELF names and the
    NCCL major.minor of the headers libloom was built with."""
    lines = []
    for soname in needed:
        m = re.fullmatch(r"lib(cudart|cublasLt|nvrtc)\.so\.([0-9]+)", soname)
        if m:
            major = int(m.group(2))
            lines.append(f"lib{m.group(1)} (>={major}, <{major + 1})")
    if nccl_header:
        major, minor = nccl_header // 10000, nccl_header // 100 % 100
        lines.append(f"libnccl (>={major}.{minor}, <{major}.{minor + 1})")
    return lines


def checked_library(lib, version):
    """Facts of the library to ship; SystemExit where it is not this package's version."""
    machine, needed = elf_facts(lib)
    p = probe_library(lib)
    got = ".".join(map(str, p["version"])) if p["version"] else "of an unknown version"
    if got != version:
        raise SystemExit(f"loom: {lib} is libloom {got}, the package {version}: a wheel ships the libloom of its own "
                         "version (rebuild it with make, or point LOOM_WHEEL_LIBRARY at the right one)")
    return {"path": str(lib), "machine": machine, "requires_external": requires_external(needed, p["nccl_header"])}


class BuildWithLibrary(build_py):
    """build_py, then libloom into <build>/loom/lib (wheels only: an editable
    install keeps using the build tree), checked first."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        lib = built_library()
        if lib is None:
            return
        self.distribution.loom_library = checked_library(lib, package_version())
        dest = Path(self.build_lib) / "loom" / "lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, dest / "libloom.so.0")


def add_metadata(metadata_file, field, values):
    """Adds `field: value` lines to a METADATA file's header block."""
    text = Path(metadata_file).read_text(encoding="utf-8")
    head, sep, body = text.partition("\n\n")
    extra = "".join(f"\n{field}: {v}" for v in values)
    Path(metadata_file).write_text(head + extra + (sep + body if sep else "\n"), encoding="utf-8")


class PlatformWheel(bdist_wheel):
    """A wheel that holds libloom is for one platform, any Python 3 (the
    binding is ctypes: no Python ABI): py3-none-<platform>, the platform's
    machine that of the library."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = os.environ.get("LOOM_WHEEL_LIBRARY", "") == "none"

    def get_tag(self):
        python, abi, plat = super().get_tag()
        if self.root_is_pure:
            return python, abi, plat
        lib = getattr(self.distribution, "loom_library", None)
        if lib and not plat.endswith("_" + lib["machine"]):
            raise SystemExit(f"loom: {lib['path']} is {lib['machine']} code; this wheel's platform is {plat}")
        return "py3", "none", plat

    def write_wheelfile(self, wheelfile_base, *args, **kwargs):
        """The wheel's dist-info folder is complete here (made from egg-info,
        or copied from the metadata pip prepared first): add what libloom
        needs to its METADATA before the archive and its RECORD are written."""
        lib = getattr(self.distribution, "loom_library", None)
        if lib:
            add_metadata(Path(wheelfile_base) / "METADATA", "Requires-External", lib["requires_external"])
        return super().write_wheelfile(wheelfile_base, *args, **kwargs)


class BinaryDistribution(Distribution):
    """A package with a shared library: built into platlib, the wheel's root."""

    def has_ext_modules(self):
        return os.environ.get("LOOM_WHEEL_LIBRARY", "") != "none"


if __name__ == "__main__":  # as pip's build backend runs it; tests import the helpers above
    package_version()  # refuses a copy of python/ alone before setuptools reads the version
    check_license()
    setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
