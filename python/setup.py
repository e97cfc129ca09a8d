"""setup.py - the wheel carries libloom.

pyproject.toml holds the metadata; this file only adds one step to the
build: libloom.so is built with the loom tree's own Makefile (the tree this
folder sits in: python/.. ) and copied into the package as
loom/lib/libloom.so.0, so that `pip install ./python` (or a wheel built from
it) works from anywhere, not only inside the build tree. The wheel is then
platform-specific (it holds a shared library).

    pip install ./python                       builds libloom (make), ships it
    pip wheel ./python -w dist                 the same, a wheel to copy around
    LOOM_WHEEL_LIBRARY=/path/libloom.so.0 pip wheel ./python   ship that file instead
    LOOM_WHEEL_LIBRARY=none pip install -e ./python             no library in the package
                                               (editable installs use the build tree anyway)

make's requirements are the loom tree's (CUDA toolkit, NCCL headers: see
the README); its jobs: $LOOM_WHEEL_JOBS (default: the CPUs present).
"""
import os
import shutil
import subprocess
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


class BuildWithLibrary(build_py):
    """build_py, then libloom into <build>/loom/lib (wheels only: an editable
    install keeps using the build tree)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        lib = built_library()
        if lib is None:
            return
        dest = Path(self.build_lib) / "loom" / "lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, dest / "libloom.so.0")


class PlatformWheel(bdist_wheel):
    """A wheel that holds libloom is for one platform, any Python 3 (the
    binding is ctypes: no Python ABI): py3-none-<platform>."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = os.environ.get("LOOM_WHEEL_LIBRARY", "") == "none"

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if not self.root_is_pure else (python, abi, plat)


class BinaryDistribution(Distribution):
    """A package with a shared library: built into platlib, the wheel's root."""

    def has_ext_modules(self):
        return os.environ.get("LOOM_WHEEL_LIBRARY", "") != "none"


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
