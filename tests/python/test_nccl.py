"""Which NCCL libloom runs on, and the mismatch checks, without a GPU.

PyTorch's NCCL is played by a fake libnccl.so.2 built here (the soname
libloom needs, every NCCL function libloom calls as a stub, ncclGetVersion
answering a chosen version), loaded the way torch loads its own: by path,
RTLD_GLOBAL, before libloom. The real case runs on the GPU machine
(python/tools/nccl_probe.py, tests/python/gpu).
"""
import re
import shutil
import subprocess
import threading

import pytest
from conftest import compile_c, libloom_path, nccl_include_dir, run_python

import loom
from loom import _procmaps, nccl


def _header_version():
    text = (nccl_include_dir() / "nccl.h").read_text()
    v = {k: int(re.search(rf"#define NCCL_{k} (\d+)", text).group(1)) for k in ("MAJOR", "MINOR", "PATCH")}
    return v["MAJOR"] * 10000 + v["MINOR"] * 100 + v["PATCH"]


def test_libloom_names_the_nccl_it_calls(lib):
    info = nccl.loom_nccl()
    assert info.header_version == _header_version()
    assert info.loaded_version >= nccl.MIN_VERSION
    assert info.consistent
    mapped = nccl.mapped_nccl_files()
    assert any(_procmaps.same_file(info.path, m) for m in mapped), (info.path, mapped)
    # alone (no torch loaded first), libloom gets the NCCL it was linked against, and passes
    r = run_python("""
        import loom
        from loom import nccl
        info = nccl.check()
        rep = loom.nccl_report()
        print(info.header_version, rep["loom_header"], rep["torch_version"])
        """)
    assert r.returncode == 0, r.stderr
    hv = _header_version()
    assert r.stdout.split() == [str(hv), nccl.version_text(hv), "None"]


def test_version_codes_and_text():
    assert nccl.version_text(22809) == "2.28.9"
    assert nccl.version_code((2, 28, 3)) == 22803
    assert nccl.version_code("2.27.5") == 22705
    assert nccl.version_code(22900) == 22900
    assert nccl.version_code(None) is None


def _info(header, loaded, consistent=True, path="/lib/libnccl.so.2"):
    return nccl.LoomNccl(header, loaded, path, consistent)


def test_compatibility_rules():
    assert nccl.compatibility_problem(_info(22803, 22809)) is None  # same minor: fine by default
    p = nccl.compatibility_problem(_info(22803, 22809), "exact")
    assert "2.28.3" in p and "2.28.9" in p
    p = nccl.compatibility_problem(_info(22803, 22705))
    assert "2.27.5" in p and "older than 2.28.0" in p and "2.28.3" in p
    p = nccl.compatibility_problem(_info(22803, 22901))
    assert "2.28.3" in p and "2.29.1" in p and "/lib/libnccl.so.2" in p and "use a PyTorch whose NCCL is 2.28.x" in p
    p = nccl.compatibility_problem(_info(22803, 22803, consistent=False))
    assert "do not all resolve into one library" in p
    assert nccl.compatibility_problem(_info(22803, 22705), "off") is None
    with pytest.raises(loom.InvalidArgumentError, match="LOOM_NCCL_CHECK='strict'"):
        nccl.compatibility_problem(_info(22803, 22803), "strict")
    other = nccl.TorchNccl(22901, "/site-packages/nvidia/nccl/lib/libnccl.so.2")
    p = nccl.compatibility_problem(_info(22803, 22705), "minor", other)
    assert "PyTorch's calls reach NCCL 2.29.1 at /site-packages/nvidia/nccl/lib/libnccl.so.2" in p


def test_the_remedy_names_the_folder_to_rebuild_against(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "include" / "nccl_device.h").write_text("")
    torch_nccl = nccl.TorchNccl(23007, str(tmp_path / "lib" / "libnccl.so.2"))
    p = nccl.compatibility_problem(_info(22809, 23007, path=torch_nccl.path), "minor", torch_nccl)
    assert f"make NCCL_HOME={tmp_path}" in p and "PyTorch's calls reach the same library" in p


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory):
    """make(version) -> path of a fake libnccl.so.2 answering that version."""
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) is needed to list the NCCL functions libloom calls")
    syms = sorted({line.split()[-1] for line in subprocess.run(
        ["nm", "-D", "--undefined-only", str(libloom_path())], capture_output=True, text=True, check=True
    ).stdout.splitlines() if line.split() and line.split()[-1].startswith("nccl")})
    assert "ncclDevCommCreate" in syms and "ncclGetVersion" in syms
    made = {}

    def make(version):
        if version not in made:
            d = tmp_path_factory.mktemp(f"nccl{version}")
            stubs = "\n".join(f"int {s}(void) {{ return 5; }}" for s in syms
                              if s not in ("ncclGetVersion", "ncclGetErrorString", "ncclGetLastError"))
            made[version] = compile_c(d, "libnccl.so.2", f"""
                int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}
                const char *ncclGetErrorString(int r) {{ return "fake NCCL error"; }}
                const char *ncclGetLastError(void *c) {{ return ""; }}
                {stubs}
                """, shared=True, extra=["-Wl,-soname,libnccl.so.2"])
        return str(made[version])
    return make


_TORCH_LIKE = """
    import ctypes, os
    ctypes.CDLL({fake!r}, mode=os.RTLD_NOW | os.RTLD_GLOBAL)   # what `import torch` does with its NCCL
    import loom
    from loom import nccl
"""


def test_an_older_nccl_loaded_first_is_refused_naming_both_versions(fake_nccl):
    fake = fake_nccl(22705)
    r = run_python(_TORCH_LIKE.format(fake=fake) + """
    info = nccl.loom_nccl()
    print("LOADED", info.loaded_version, info.path, info.consistent)
    try:
        loom.Comm(0x1234)      # refused before the address is touched
    except loom.NcclMismatchError as e:
        print("ERR", e)
    """)
    assert r.returncode == 0, r.stderr
    assert f"LOADED 22705 {fake} True" in r.stdout  # libloom's calls went to the first NCCL loaded
    hv = nccl.version_text(_header_version())
    assert "ERR" in r.stdout and "2.27.5" in r.stdout and hv in r.stdout and fake in r.stdout, r.stdout


def test_another_minor_version_is_refused_and_LOOM_NCCL_CHECK_off_lets_it_through(fake_nccl):
    hv = _header_version()
    other = (hv // 100 + 1) * 100 + 1  # next minor
    fake = fake_nccl(other)
    code = _TORCH_LIKE.format(fake=fake) + """
    try:
        print("OK", nccl.check().loaded_version)
    except loom.NcclMismatchError as e:
        print("ERR", e)
    """
    r = run_python(code)
    assert "ERR" in r.stdout and nccl.version_text(other) in r.stdout and nccl.version_text(hv) in r.stdout, r.stdout + r.stderr
    r = run_python(code, {"LOOM_NCCL_CHECK": "off"})
    assert f"OK {other}" in r.stdout, r.stdout + r.stderr
    r = run_python(code, {"LOOM_NCCL_CHECK": "bogus"})
    assert "LOOM_NCCL_CHECK='bogus'" in r.stderr


def test_LOOM_NCCL_LIBRARY_loads_that_nccl_for_the_process(fake_nccl):
    fake = fake_nccl(22705)
    r = run_python("""
        import loom
        from loom import nccl
        print("PATH", nccl.loom_nccl().path)
        print("GLOBAL", nccl.symbol_file("ncclGetVersion"))
        """, {"LOOM_NCCL_LIBRARY": fake})
    assert r.returncode == 0, r.stderr
    assert f"PATH {fake}" in r.stdout and f"GLOBAL {fake}" in r.stdout  # libloom and later libraries


def test_LOOM_NCCL_LIBRARY_too_late_or_missing_is_an_error(fake_nccl):
    real = nccl.loom_nccl().path if libloom_path().exists() else None
    fake = fake_nccl(22705)
    r = run_python(_TORCH_LIKE.format(fake=fake) + """
    try:
        loom.version()
    except loom.NcclMismatchError as e:
        print("ERR", e)
    """, {"LOOM_NCCL_LIBRARY": real})
    assert "ERR" in r.stdout and "cannot take effect" in r.stdout and fake in r.stdout, r.stdout + r.stderr
    r = run_python("""
        import loom
        try:
            loom.version()
        except loom.LibraryNotFoundError as e:
            print("ERR", e)
        """, {"LOOM_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    assert "ERR LOOM_NCCL_LIBRARY=/nonexistent/libnccl.so.2: no such file" in r.stdout, r.stdout + r.stderr


def test_a_foreign_nccl_comm_address_is_refused_when_two_nccls_are_loaded(fake_nccl, tmp_path):
    fake = fake_nccl(22705)
    r = run_python(f"""
        import ctypes, os, loom
        loom.version()                                    # libloom and its NCCL first
        ctypes.CDLL({fake!r}, mode=os.RTLD_NOW | os.RTLD_LOCAL)  # then a second NCCL file
        try:
            loom.Comm.from_nccl_comm(0x1234)
        except loom.NcclMismatchError as e:
            print("ERR", e)
        try:
            loom.Comm.from_nccl_comm(0)
        except loom.InvalidArgumentError as e:
            print("ERR0", e)
        """)
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "2 NCCL libraries" in r.stdout and fake in r.stdout, r.stdout
    assert "ERR0" in r.stdout and "address=0" in r.stdout


def test_unique_ids_come_from_libloom_s_nccl(lib):
    a, b = nccl.get_unique_id(), nccl.get_unique_id()
    assert len(a) == len(b) == nccl.UNIQUE_ID_BYTES and a != b
    with pytest.raises(loom.InvalidArgumentError, match="unique_id has 3 bytes"):
        nccl.comm_init_rank(2, b"abc", 0, 0)
    with pytest.raises(loom.InvalidArgumentError, match=r"rank=2 must be in \[0, nranks=2\)"):
        nccl.comm_init_rank(2, a, 2, 0)


def test_a_blocking_call_that_never_returns_is_a_timeout_not_a_hang():
    never = threading.Event()
    with pytest.raises(loom.WaitTimeoutError, match=r"ncclCommInitRank \(rank 1 of 2\) did not return within 0.2 s"):
        nccl.run_bounded(never.wait, 0.2, "ncclCommInitRank (rank 1 of 2)")
    never.set()

    def fails():
        raise loom.InvalidArgumentError("bad", function="f")
    with pytest.raises(loom.InvalidArgumentError, match="bad"):
        nccl.run_bounded(fails, 5, "f")
    assert nccl.run_bounded(lambda: 42, 5, "g") == 42
