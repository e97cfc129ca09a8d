"""The Python GPU suite fails where it cannot run (no torch, no GPU), instead
of passing with every test skipped; LOOM_GPU_TESTS_MAY_SKIP=1 asks for the
skips. Runs the suite in a subprocess on this GPU-less machine."""
import os
import subprocess
import sys

import pytest
from conftest import REPO


def _gpus():
    try:
        import torch
        return torch.cuda.device_count()
    except ImportError:
        return 0


pytestmark = pytest.mark.skipif(_gpus() > 0, reason="a GPU is visible: the gate is for machines without one")


def _run(may_skip):
    env = {k: v for k, v in os.environ.items() if k != "LOOM_GPU_TESTS_MAY_SKIP"}
    if may_skip:
        env["LOOM_GPU_TESTS_MAY_SKIP"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests/python/gpu")],
                          capture_output=True, text=True, env=env, cwd=str(REPO))


def test_gpu_suite_fails_without_gpus():
    r = _run(False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "failing the run" in r.stdout


def test_gpu_suite_skips_when_asked():
    r = _run(True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped (LOOM_GPU_TESTS_MAY_SKIP=1)" in r.stdout
