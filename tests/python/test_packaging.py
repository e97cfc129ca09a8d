"""The wheel carries libloom (python/setup.py): built from the tree, it
installs into a fresh virtual environment and loads its own libloom from
anywhere, with no build tree and no LOOM_LIBRARY; it carries the LICENSE,
declares what libloom needs from the system (Requires-External: the CUDA
runtime major, the NCCL major.minor) and its platform in its tag. It is not
built from a copy of python/ alone (no version, no license there) nor around
a libloom of another version.

Builds the wheel with pip (build isolation: setuptools comes from PyPI, as
for any user; skipped, saying so, where PyPI cannot be reached), shipping
the libloom this test run loads (LOOM_WHEEL_LIBRARY) rather than running
make inside `make test`.
"""
import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO, compile_c, libloom_path


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def pip_wheel(src, out, library):
    """pip wheel of `src` into `out` shipping `library`; skips where PyPI is unreachable."""
    env = dict(os.environ, LOOM_WHEEL_LIBRARY=str(library), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("LOOM_LIBRARY", None)
    r = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)], env=env)
    if r.returncode != 0 and ("NewConnectionError" in r.stderr or "Could not find a version" in r.stderr):
        pytest.skip("PyPI unreachable: pip could not fetch setuptools for the isolated build")
    return r, env


def needed_sonames(lib):
    r = run(["readelf", "-d", str(lib)])
    if r.returncode != 0:
        pytest.skip("no readelf to read the library's DT_NEEDED entries")
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout)


def test_wheel_ships_libloom_and_loads_it_from_anywhere(tmp_path, lib):
    lib = libloom_path().resolve()
    out = tmp_path / "dist"
    r, env = pip_wheel(REPO / "python", out, lib)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheels = list(out.glob("loom_fused-*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    name = wheels[0].name
    # one platform, the library's machine; any Python 3 (ctypes: no Python ABI); never py3-none-any
    assert name.endswith(f"-py3-none-linux_{platform.machine()}.whl"), name
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        licenses = [n for n in names if ".dist-info/" in n and n.endswith("/LICENSE")]
        assert licenses, names
        assert z.read(licenses[0]) == (REPO / "LICENSE").read_bytes()
    assert "loom/lib/libloom.so.0" in names and "loom/_lib.py" in names
    # what libloom needs from the system, from the library itself
    external = re.findall(r"^Requires-External: (.*)$", meta, re.M)
    cudart = [int(m.group(1)) for m in map(re.compile(r"libcudart\.so\.([0-9]+)").fullmatch, needed_sonames(lib)) if m]
    assert len(cudart) == 1, needed_sonames(lib)
    assert f"libcudart (>={cudart[0]}, <{cudart[0] + 1})" in external, external
    from loom import _lib
    from loom._structs import NcclInfo
    info = NcclInfo()
    _lib.call("loom_get_nccl_info", ctypes.byref(info))
    major, minor = info.header_version // 10000, info.header_version // 100 % 100
    assert (major, minor) >= (2, 28)
    assert f"libnccl (>={major}.{minor}, <{major}.{minor + 1})" in external, external
    assert meta.index("Requires-External") < meta.index("\n\n")  # in the header block, not the description
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    py = venv / "bin" / "python"
    r = run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheels[0])], env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    probe = "import loom; print(loom.library_path()); print('.'.join(map(str, loom.version())))"
    r = run([str(py), "-c", probe], env=env, cwd=str(tmp_path))  # outside the tree, no LOOM_LIBRARY
    assert r.returncode == 0, r.stderr[-2000:]
    path, version = r.stdout.split()[:2]
    assert path.startswith(str(venv)) and path.endswith("loom/lib/libloom.so.0"), path
    assert version == (REPO / "VERSION").read_text().strip()


def test_a_copy_of_python_alone_refuses_to_build(tmp_path):
    """python/loom/VERSION and python/LICENSE link into the tree; in a copy of
    python/ alone (links kept, as cp -r keeps them) they resolve to nothing,
    and setuptools would have made the version 0.0.0 without a license."""
    copy = tmp_path / "python"
    shutil.copytree(REPO / "python", copy, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info", "lib"))
    assert (copy / "loom" / "VERSION").is_symlink() and not (copy / "loom" / "VERSION").exists()
    out = tmp_path / "dist"
    r, _ = pip_wheel(copy, out, libloom_path().resolve())
    assert r.returncode != 0, r.stdout[-2000:]
    assert "loom/VERSION does not resolve here" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert "not from a copy of python/ alone" in r.stdout + r.stderr
    assert not out.exists() or not list(out.glob("*.whl"))


def test_a_library_of_another_version_is_not_shipped(tmp_path):
    fake = compile_c(tmp_path, "libloom.so.0", """
        int loom_get_version(int *v) { *v = 20100; return 0; }
        """, shared=True)
    out = tmp_path / "dist"
    r, _ = pip_wheel(REPO / "python", out, fake)
    version = (REPO / "VERSION").read_text().strip()
    assert r.returncode != 0, r.stdout[-2000:]
    assert f"is libloom 2.1.0, the package {version}" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert not out.exists() or not list(out.glob("*.whl"))


def _setup_module(monkeypatch):
    """python/setup.py's helpers (importing it runs no setup(): pip runs it as
    __main__). Where this Python has neither setuptools >= 70.1 nor the wheel
    package (pip's isolated build has one), a stand-in bdist_wheel base lets
    it import; the helpers do not use it."""
    import importlib.util
    import types
    pytest.importorskip("setuptools")
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None and importlib.util.find_spec("wheel") is None:
        stub = types.ModuleType("wheel.bdist_wheel")
        stub.bdist_wheel = type("bdist_wheel", (), {})
        monkeypatch.setitem(sys.modules, "wheel", types.ModuleType("wheel"))
        monkeypatch.setitem(sys.modules, "wheel.bdist_wheel", stub)
    spec = importlib.util.spec_from_file_location("loom_setup", REPO / "python" / "setup.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_the_library_facts_come_from_its_elf_header(tmp_path, lib, monkeypatch):
    s = _setup_module(monkeypatch)
    machine, needed = s.elf_facts(libloom_path().resolve())
    assert machine == platform.machine() and needed == needed_sonames(libloom_path().resolve())
    data = bytearray(libloom_path().resolve().read_bytes())
    data[18:20] = (183 if machine != "aarch64" else 62).to_bytes(2, "little")
    other = tmp_path / "libloom.so.0"  # the same file marked as another machine's code
    other.write_bytes(bytes(data))
    assert s.elf_facts(other) == ("aarch64" if machine != "aarch64" else "x86_64", needed)
    (tmp_path / "cut.so").write_bytes(bytes(data[:64]))  # a header whose sections are not there
    (tmp_path / "text.so").write_text("not an ELF file at all")
    for bad in ("cut.so", "text.so"):
        with pytest.raises(SystemExit, match="not a 64-bit little-endian ELF shared library"):
            s.elf_facts(tmp_path / bad)


def test_requires_external_names_the_runtime_majors_and_the_nccl_minor(tmp_path, monkeypatch):
    s = _setup_module(monkeypatch)
    lines = s.requires_external(["libnccl.so.2", "libcublasLt.so.12", "libcudart.so.12", "libc.so.6"], 22903)
    assert lines == ["libcublasLt (>=12, <13)", "libcudart (>=12, <13)", "libnccl (>=2.29, <2.30)"]
    meta = tmp_path / "METADATA"
    meta.write_text("Metadata-Version: 2.4\nName: loom-fused\n\n# loom for PyTorch\n\ntext\n")
    s.add_metadata(meta, "Requires-External", lines[:1])
    assert meta.read_text() == ("Metadata-Version: 2.4\nName: loom-fused\nRequires-External: libcublasLt (>=12, <13)"
                                "\n\n# loom for PyTorch\n\ntext\n")
