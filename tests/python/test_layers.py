"""test_layers.py - tests/check_layers.py (run by `make test` on the tree)
catches what it exists for, planted in copies of the tree: an upward
include, a sibling family's header, an upward symbol and a sibling family's
internal symbol; includes that resolve outside src/ (a relative path, or an
-I folder of the Makefile reaching support/, tools/ or tests/), the <...>
form of loom's own headers, a weak definition overridden from a layer above,
and a loom__ name given a second meaning in another file. A sibling's
public function, the public header and downward relative paths stay
allowed."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

CHECK = REPO / "tests" / "check_layers.py"
OBJ = REPO / os.environ.get("BUILD", "build") / "obj" / "src"


def _run(src, obj):
    return subprocess.run([sys.executable, str(CHECK), "--src", str(src), "--obj", str(obj),
                           "--header", str(REPO / "include" / "loom.h")], capture_output=True, text=True)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of what the check reads: src/, the objects, the Makefile, and
    the folders an include could wrongly reach (include/, support/, tools/,
    tests/common/)."""
    if not OBJ.is_dir():
        pytest.skip(f"{OBJ} has no objects: run make first")
    t = tmp_path_factory.mktemp("layers")
    for d in ("src", "include", "support", "tools", "tests/common"):
        shutil.copytree(REPO / d, t / d)
    shutil.copy2(REPO / "Makefile", t / "Makefile")
    shutil.copytree(OBJ, t / "obj")
    return t


def test_the_tree_passes(tree):
    r = _run(tree / "src", tree / "obj")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every include and symbol points down" in r.stdout


def _planted(tree, rel, text, fn, replace=False):
    p = tree / rel if rel == "Makefile" else tree / "src" / rel
    old = p.read_text()
    p.write_text(text if replace else text + old)
    try:
        return fn()
    finally:
        p.write_text(old)


@pytest.mark.parametrize("rel, inc, layer", [
    ("core/memory.c", "gemm/gemm.h", "gemm"),                 # core reaches up
    ("baseline/baseline_coll.c", "ops/coll/coll.h", "ops/coll"),
    ("gemm/gemm.c", "ops/tp/tp_linear.h", "ops/tp"),
    ("ops/coll/coll.c", "ops/tp/tp_schedule.h", "ops/tp"),    # a sibling family
    ("core/log.c", "testing/hooks.h", "testing"),              # the library uses test support
    ("lang/interp.c", "codegen/rtc.h", "codegen"),             # the language reaches its code generator
])
def test_an_upward_include_fails(tree, rel, inc, layer):
    r = _planted(tree, rel, f'#include "{inc}"\n', lambda: _run(tree / "src", tree / "obj"))
    assert r.returncode == 1, r.stdout
    assert f'src/{rel}' in r.stdout and f'includes "{inc}" ({layer})' in r.stdout


def _cc_object(tree, rel, code):
    src = tree / "planted.c"
    src.write_text(code)
    out = tree / "obj" / rel
    subprocess.run(["cc", "-c", str(src), "-o", str(out)], check=True)
    return out


@pytest.mark.parametrize("rel, call, bad", [
    ("core/planted.o", "loom__tp_check_call", True),          # core calls an op family
    ("baseline/planted.o", "loom__gemm_check_args", True),    # baseline calls the GEMM engine
    ("ops/coll/planted.o", "loom__tp_state", True),           # a sibling's internal function
    ("ops/coll/planted.o", "loom_gemm_ar", False),            # a sibling's public function
    ("ops/coll/planted.o", "loom__gemm_check_args", False),   # an op family calls the GEMM engine
    ("lang/planted.o", "loom__rtc_compile", True),            # the language calls its code generator
    ("codegen/planted.o", "loom__lang_interp", False),        # the code generator uses the language
])
def test_an_upward_symbol_fails(tree, rel, call, bad):
    out = _cc_object(tree, rel, f"extern int {call}(void);\nint loom_planted_user(void) {{ return {call}(); }}\n")
    try:
        r = _run(tree / "src", tree / "obj")
    finally:
        out.unlink()
    if bad:
        assert r.returncode == 1, r.stdout
        assert f"symbol: {rel}" in r.stdout and f"uses {call}" in r.stdout
    else:
        assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("rel, inc, where", [
    ("core/log.c", '"../../support/launch.h"', "support/launch.h"),      # a relative path out of src/
    ("gemm/gemm.c", '"support/tool_param.h"', "support/tool_param.h"),   # -I. reaches the whole tree
    ("ops/tp/tp_linear.c", '"tools/bench/bench.h"', "tools/bench/bench.h"),
    ("baseline/baseline_coll.c", '"tests/common/test.h"', "tests/common/test.h"),
    ("core/log.c", "<support/launch.h>", "support/launch.h"),             # the <...> form
    ("lang/ir.c", '"../../tools/nothing_here.h"', "tools/nothing_here.h"),  # out of src/, even with no file
])
def test_an_include_outside_src_fails(tree, rel, inc, where):
    r = _planted(tree, rel, f"#include {inc}\n", lambda: _run(tree / "src", tree / "obj"))
    assert r.returncode == 1, r.stdout
    assert f"src/{rel}" in r.stdout and f"includes {inc}, which resolves outside src/ to {where}" in r.stdout


@pytest.mark.parametrize("rel, inc, layer", [
    ("core/memory.c", "<gemm/gemm.h>", "gemm"),                     # loom's own header, <...> form
    ("ops/coll/coll.c", "<ops/tp/tp_schedule.h>", "ops/tp"),
    ("core/log.c", '"../ops/tp/tp_linear.h"', "ops/tp"),            # upward by a relative path
])
def test_an_upward_include_in_another_form_fails(tree, rel, inc, layer):
    r = _planted(tree, rel, f"#include {inc}\n", lambda: _run(tree / "src", tree / "obj"))
    assert r.returncode == 1, r.stdout
    assert f"src/{rel} " in r.stdout and f"includes {inc} ({layer})" in r.stdout


@pytest.mark.parametrize("rel, inc", [
    ("core/log.c", "<loom.h>"),                      # the public header
    ("baseline/baseline_coll.c", '"../core/error.h"'),  # downward by a relative path
    ("ops/tp/tp_linear.c", "<cuda_runtime.h>"),      # the toolkit's
    ("ref/ref.c", '"support/launch.h"'),             # the test-support library's other half
])
def test_allowed_includes_pass(tree, rel, inc):
    r = _planted(tree, rel, f"#include {inc}\n", lambda: _run(tree / "src", tree / "obj"))
    assert r.returncode == 0, r.stdout


def test_the_makefiles_include_folders_are_the_ones_resolved(tree):
    """An -I folder added to the Makefile makes an include that found nothing
    before land in tools/: the check reads the folders from the Makefile."""
    plant = lambda: _planted(tree, "core/log.c", '#include "bench/bench.h"\n',  # noqa: E731
                             lambda: _run(tree / "src", tree / "obj"))
    r = plant()
    assert r.returncode == 0, r.stdout  # no such folder: a system header as far as the tree knows
    mk = (tree / "Makefile").read_text()
    assert "INCS     := -I. -Iinclude -Isrc" in mk
    r = _planted(tree, "Makefile", mk.replace("INCS     := -I.", "INCS     := -Itools -I."), plant, replace=True)
    assert r.returncode == 1, r.stdout
    assert 'includes "bench/bench.h", which resolves outside src/ to tools/bench/bench.h' in r.stdout


def test_the_include_folders_come_from_the_makefile():
    spec = importlib.util.spec_from_file_location("check_layers", CHECK)
    cl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cl)
    dirs = cl.include_dirs(REPO / "Makefile", str(REPO))
    assert dirs[:3] == [str(REPO), str(REPO / "include"), str(REPO / "src")], dirs
    assert not any("$" in d for d in dirs)


def _cc_weak(tree, rel, name, weak):
    return _cc_object(tree, rel, (f"__attribute__((weak)) " if weak else "") + f"int {name}(void) {{ return 7; }}\n"
                      + (f"int loom_planted_user_{rel.count('/')}(void) {{ return {name}(); }}\n" if weak else ""))


@pytest.mark.parametrize("weak_rel, strong_rel, bad", [
    ("core/planted_weak.o", "ops/tp/planted_strong.o", True),     # core's callers would run ops/tp's code
    ("gemm/planted_weak.o", "testing/planted_strong.o", True),    # the library would run test support
    ("ops/coll/planted_weak.o", "ops/tp/planted_strong.o", True), # a sibling family
    ("ops/tp/planted_weak.o", "core/planted_strong.o", False),    # a default that core provides: downward
    ("core/planted_weak.o", "core/planted_strong.o", False),      # within one layer
])
def test_a_weak_definition_overridden_from_above_fails(tree, weak_rel, strong_rel, bad):
    outs = [_cc_weak(tree, weak_rel, "loom__planted_hook", True), _cc_weak(tree, strong_rel, "loom__planted_hook", False)]
    try:
        r = _run(tree / "src", tree / "obj")
    finally:
        for o in outs:
            o.unlink()
    if bad:
        assert r.returncode == 1, r.stdout
        assert f"weak: loom__planted_hook defined weak in {weak_rel}" in r.stdout
        assert f"is overridden by {strong_rel}" in r.stdout
    else:
        assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("name", ["loom__coll_prepare", "loom__coll_launch"])
def test_a_static_namesake_of_another_files_function_fails(tree, name):
    """baseline_coll.c once gave loom__coll_prepare, the coll family's kernel
    preparation (coll_kernels.cu), a second meaning: its own argument
    checks, as a static function. Planted again, the check names both files."""
    r = _planted(tree, "baseline/baseline_coll.c", f"static int {name}(void) {{ return 0; }}\n",
                 lambda: _run(tree / "src", tree / "obj"))
    assert r.returncode == 1, r.stdout
    line = [x for x in r.stdout.splitlines() if x.startswith(f"check_layers: name: {name} ")]
    assert len(line) == 1, r.stdout
    assert "defined in 2 files with two meanings" in line[0]
    assert "src/ops/coll/coll_kernels.cu" in line[0] and "src/baseline/baseline_coll.c (static)" in line[0]
