"""What a new user tries first, where torch is not installed: the README's
`python -m loom --torch`, `--help`, and importing the torch-only modules.
Each answers with a message that says what to do, never a traceback.

torch is hidden by a stand-in package earlier on the path whose import
fails, so these run the same whether or not this machine has torch.
"""
import os
import subprocess
import sys

import pytest
from conftest import REPO, libloom_path

PY = str(REPO / "python")


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory):
    """A PYTHONPATH on which `import torch` fails as it does without torch."""
    d = tmp_path_factory.mktemp("no_torch")
    (d / "torch").mkdir()
    (d / "torch" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    return str(d) + os.pathsep + PY


def _loom(args, pythonpath, library=None):
    env = dict(os.environ, PYTHONPATH=pythonpath, LOOM_LIBRARY=library or str(libloom_path()))
    return subprocess.run([sys.executable, "-m", "loom", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=str(REPO))


def test_help_prints_usage_and_needs_neither_torch_nor_libloom(no_torch):
    r = _loom(["--help"], no_torch, library="/nonexistent/libloom.so")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("usage: python -m loom") and "--torch" in r.stdout
    assert "Traceback" not in r.stderr, r.stderr


def test_an_unknown_option_is_a_usage_error(no_torch):
    r = _loom(["--bogus"], no_torch)
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_torch_asked_for_but_missing_says_how_to_install_it_and_reports_the_rest(no_torch, lib):
    r = _loom(["--torch"], no_torch)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "python -m loom --torch needs PyTorch" in r.stdout and "pip install torch" in r.stdout, r.stdout
    assert "loom binding" in r.stdout and "NCCL check" in r.stdout, r.stdout  # the report still ran


def test_a_missing_library_is_a_message_not_a_traceback(no_torch):
    r = _loom([], no_torch, library="/nonexistent/libloom.so")
    assert r.returncode == 1
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    assert r.stderr.startswith("loom: libloom.so not found") and "/nonexistent/libloom.so" in r.stderr, r.stderr


@pytest.mark.parametrize("statement, module", [
    ("import loom.nn", "loom.nn"),
    ("import loom.optim", "loom.optim"),
    ("import loom.functional", "loom.functional"),
    ("from loom import nn", "loom.nn"),
    ("import loom; loom.functional", "loom.functional"),
    ("import loom; loom.parallelize", "loom.parallelize"),
    ("import loom.library", "loom.library"),
])
def test_torch_only_modules_say_to_install_torch(no_torch, statement, module):
    code = f"""
try:
    {statement}
except ImportError as e:
    print(type(e).__name__, e.name, "|", e)
"""
    env = dict(os.environ, PYTHONPATH=no_torch)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ModuleNotFoundError torch | "), r.stdout
    assert f"{module} needs PyTorch (>= 2.1)" in r.stdout and "pip install torch" in r.stdout, r.stdout


def test_the_ops_that_need_no_torch_still_import(no_torch):
    env = dict(os.environ, PYTHONPATH=no_torch)
    r = subprocess.run([sys.executable, "-c", "import loom, loom.coll, loom.moe, loom.tp; print(loom.__version__)"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (REPO / "VERSION").read_text().strip()
