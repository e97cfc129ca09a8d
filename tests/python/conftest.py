"""Host tests of the Python binding (no GPU): shared fixtures.

The binding under test is python/loom of this tree, and libloom is
$LOOM_LIBRARY when set (`make test` sets it), else build/lib/libloom.so.
C snippets (layouts, fake libraries) are compiled with $CC (default cc) and
the include folders in $LOOM_TEST_CFLAGS (the Makefile passes its own), else
ones found the way the Makefile finds them.
"""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))


def libloom_path():
    env = os.environ.get("LOOM_LIBRARY")
    if env:
        return Path(env) / "libloom.so" if Path(env).is_dir() else Path(env)
    return REPO / "build" / "lib" / "libloom.so"


def _find_include(header, dirs):
    for d in dirs:
        if d and (Path(d) / header).is_file():
            return d
    return None


def c_flags():
    env = os.environ.get("LOOM_TEST_CFLAGS")
    if env:
        return env.split()
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nccl_home = os.environ.get("NCCL_HOME")
    nccl_inc = (f"{nccl_home}/include" if nccl_home else
                _find_include("nccl.h", ["/usr/include", "/usr/local/include", f"{cuda}/include"]))
    return [f"-I{REPO / 'include'}", f"-I{nccl_inc}", f"-I{cuda}/include"]


def nccl_include_dir():
    for f in c_flags():
        if f.startswith("-I") and (Path(f[2:]) / "nccl.h").is_file():
            return Path(f[2:])
    return None


def compiler():
    cc = os.environ.get("CC", "cc").split()[-1]  # "ccache gcc" -> gcc
    if not shutil.which(cc):
        pytest.skip(f"no C compiler ({cc}) to build the test's C snippet")
    return cc


def compile_c(tmp_path, name, source, shared=False, extra=()):
    """Compiles C `source` into tmp_path/name (an executable, or a shared library)."""
    src = tmp_path / (name + ".c")
    src.write_text(textwrap.dedent(source))
    out = tmp_path / name
    cmd = [compiler(), "-std=c11", "-O0", "-w", *c_flags(), str(src), "-o", str(out)]
    if shared:
        cmd[1:1] = ["-shared", "-fPIC"]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    return out


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter with the binding importable; returns
    the CompletedProcess (text). Loading order tests need a fresh process:
    a process loads libloom and NCCL once."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO / "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("LOOM_LIBRARY", str(libloom_path()))
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=e, timeout=timeout)


@pytest.fixture(scope="session")
def lib():
    """The loaded libloom (through the binding)."""
    path = libloom_path()
    if not path.exists():
        pytest.fail(f"{path} missing: run `make` first (make test does)")
    os.environ.setdefault("LOOM_LIBRARY", str(path))
    from loom import _lib
    return _lib.load()
