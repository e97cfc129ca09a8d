"""test_layers.py - tests/check_layers.py (run by `make test` on the tree)
catches what it exists for: an upward include, a sibling family's header,
an upward symbol and a sibling family's internal symbol, planted in copies
of the tree; a sibling's public function stays allowed."""
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
    if not OBJ.is_dir():
        pytest.skip(f"{OBJ} has no objects: run make first")
    t = tmp_path_factory.mktemp("layers")
    shutil.copytree(REPO / "src", t / "src")
    shutil.copytree(OBJ, t / "obj")
    return t


def test_the_tree_passes(tree):
    r = _run(tree / "src", tree / "obj")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every include and symbol points down" in r.stdout


def _planted(tree, rel, text, fn):
    p = tree / "src" / rel
    old = p.read_text()
    p.write_text(text + old)
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
