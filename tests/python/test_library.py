"""Finding and loading libloom; the binding's prototypes against loom.h."""
import re

import pytest
from conftest import REPO, compile_c, libloom_path, run_python

from loom import _lib


def _header_functions():
    """name -> argument count of every function loom.h declares."""
    text = (REPO / "include" / "loom.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = {}
    for m in re.finditer(r"^[A-Za-z_][\w \*]*?\b(loom_[a-z0-9_]+)\s*\(([^;]*?)\)\s*;", text, re.M | re.S):
        args = m.group(2).strip()
        out[m.group(1)] = 0 if args in ("", "void") else args.count(",") + 1
    return out


def test_every_function_of_the_header_has_a_prototype_with_its_argument_count():
    header = _header_functions()
    assert "loom_gemm" in header and header["loom_gemm"] == 6  # the parser itself works
    missing = sorted(set(header) - set(_lib.PROTOTYPES))
    assert not missing, f"loom.h functions without a prototype in loom/_lib.py: {missing}"
    extra = sorted(set(_lib.PROTOTYPES) - set(header))
    assert not extra, f"prototypes in loom/_lib.py that loom.h does not declare: {extra}"
    wrong = {n: (header[n], len(a)) for n, (_, a) in _lib.PROTOTYPES.items() if header[n] != len(a)}
    assert not wrong, f"argument counts (loom.h, binding) differ: {wrong}"


def test_binding_header_library_and_package_versions_agree_with_VERSION(lib):
    """VERSION is the one place the version is written; make's header-check
    (tests/check_version.sh) checks loom.h and loom.pc against it too."""
    want = tuple(int(x) for x in (REPO / "VERSION").read_text().strip().split("."))
    text = (REPO / "include" / "loom.h").read_text()
    hv = tuple(int(re.search(rf"#define LOOM_VERSION_{p} (\d+)", text).group(1)) for p in ("MAJOR", "MINOR", "PATCH"))
    assert hv == want, f"include/loom.h's LOOM_VERSION_* say {hv}, VERSION says {want}"
    assert _lib.BINDING_VERSION == want
    assert _lib.version() == want  # the library built from this tree
    # the package's version: pyproject.toml reads loom/VERSION, the link to VERSION
    pyproject = (REPO / "python" / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert re.search(r'^version = \{ *file = "loom/VERSION" *\}', pyproject, re.M)
    assert not re.search(r'^version *= *"', pyproject, re.M), "pyproject.toml states a version of its own"
    assert (REPO / "python" / "loom" / "VERSION").read_text() == (REPO / "VERSION").read_text()
    import loom
    assert loom.__version__ == ".".join(map(str, want))


def test_loads_the_library_it_was_pointed_at(lib):
    import os
    assert os.path.samefile(_lib.library_path(), libloom_path())


_LOAD = """
    import loom
    try:
        loom.version()
    except loom.LibraryNotFoundError as e:
        print("ERR", e)
    """


def test_LOOM_LIBRARY_may_name_the_folder():
    r = run_python("import loom; print(loom.library_path())", {"LOOM_LIBRARY": str(libloom_path().parent)})
    assert r.returncode == 0, r.stderr
    assert "libloom.so" in r.stdout


def test_without_LOOM_LIBRARY_the_build_tree_is_found():
    r = run_python("import loom; print(loom.library_path())", {"LOOM_LIBRARY": None})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(REPO / "build" / "lib")), r.stdout


def test_a_missing_library_is_an_error_naming_where_it_looked():
    r = run_python(_LOAD, {"LOOM_LIBRARY": "/nonexistent/libloom.so"})
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "/nonexistent/libloom.so" in r.stdout and "LOOM_LIBRARY" in r.stdout
    assert "build tree" not in r.stdout  # LOOM_LIBRARY set: no other place is tried


def test_a_file_that_is_not_a_library_is_an_error(tmp_path):
    bad = tmp_path / "libloom.so"
    bad.write_text("not an ELF file")
    r = run_python(_LOAD, {"LOOM_LIBRARY": str(bad)})
    assert "ERR" in r.stdout and str(bad) in r.stdout, r.stdout + r.stderr


def _fake_libloom(tmp_path, version, names):
    body = "\n".join(f"int {n}(void) {{ return 0; }}" for n in names if n != "loom_get_version")
    return compile_c(tmp_path, "libloom.so", f"""
        int loom_get_version(int *v) {{ *v = {version}; return 0; }}
        {body}
        """, shared=True)


_LOAD_VERSION = """
    import loom
    try:
        loom.version()
    except loom.LibraryVersionError as e:
        print("VERSION", isinstance(e, loom.LibraryNotFoundError), isinstance(e, loom.LoomError),
              e.library_version, e.binding_version, e.code_name)
        print("ERR", e)
    """


def test_a_library_of_another_version_is_refused_with_its_own_error(tmp_path):
    """Found and loaded, but of another version: LibraryVersionError (an
    UnsupportedError), not LibraryNotFoundError, which would send the user
    looking for a file that is there."""
    fake = _fake_libloom(tmp_path, 20100, _lib.PROTOTYPES)
    r = run_python(_LOAD_VERSION, {"LOOM_LIBRARY": str(fake)})
    want = ".".join(map(str, _lib.BINDING_VERSION[:2])) + ".x"
    assert f"VERSION False True (2, 1, 0) {_lib.BINDING_VERSION} LOOM_ERR_UNSUPPORTED" in r.stdout, r.stdout + r.stderr
    assert "ERR" in r.stdout and "libloom 2.1.0" in r.stdout and want in r.stdout, r.stdout + r.stderr


def test_a_library_lacking_functions_is_refused_naming_them(tmp_path):
    v = _lib.BINDING_VERSION
    fake = _fake_libloom(tmp_path, v[0] * 10000 + v[1] * 100, ["loom_get_version", "loom_last_error"])
    r = run_python(_LOAD_VERSION, {"LOOM_LIBRARY": str(fake)})
    assert "VERSION False True" in r.stdout, r.stdout + r.stderr
    assert "ERR" in r.stdout and "lacks" in r.stdout and "loom_gemm" in r.stdout, r.stdout + r.stderr


def test_a_library_without_a_version_is_refused_as_of_another_version(tmp_path):
    fake = compile_c(tmp_path, "libloom.so", "int loom_last_error(void) { return 0; }\n", shared=True)
    r = run_python(_LOAD_VERSION, {"LOOM_LIBRARY": str(fake)})
    assert "VERSION False True None" in r.stdout and "of an unknown version" in r.stdout, r.stdout + r.stderr


def test_import_loom_loads_neither_libloom_nor_torch():
    r = run_python("""
        import sys, loom
        from loom import _procmaps
        print(bool(_procmaps.mapped_files("libloom")), "torch" in sys.modules)
        """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_libloom_is_bound_now_and_kept_out_of_the_global_scope(lib):
    """RTLD_NOW | RTLD_LOCAL: libloom's symbols are not visible to later
    libraries through the global scope."""
    from loom import nccl
    assert nccl.symbol_file("loom_gemm") is None


def test_search_order_without_LOOM_LIBRARY(monkeypatch):
    import sys
    monkeypatch.delenv("LOOM_LIBRARY", raising=False)
    c = _lib.candidates()
    assert c[0] == ("package", str(REPO / "python" / "loom" / "lib" / "libloom.so.0"))  # a wheel's own copy
    assert c[1] == ("build tree", str(REPO / "build" / "lib" / "libloom.so"))
    assert ("installed", f"{sys.prefix}/lib/libloom.so.0") in c and ("installed", "/usr/local/lib/libloom.so.0") in c
    assert c[-1] == ("loader search path", "libloom.so.0")  # LD_LIBRARY_PATH, ld.so.cache


def test_an_installed_prefix_is_found_through_the_loader_search_path(tmp_path):
    """`make install PREFIX=...` puts libloom.so.0 in <prefix>/lib; with no
    build tree beside the package, LD_LIBRARY_PATH finds it."""
    import shutil
    pkg = tmp_path / "site" / "loom"
    shutil.copytree(REPO / "python" / "loom", pkg)  # a copy of the package outside the tree
    lib = tmp_path / "prefix" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(libloom_path().resolve(), lib / "libloom.so.0")
    r = run_python("import loom; print(loom.library_path())",
                   {"LOOM_LIBRARY": None, "PYTHONPATH": str(tmp_path / "site"), "LD_LIBRARY_PATH": str(lib)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(lib / "libloom.so.0"), r.stdout
