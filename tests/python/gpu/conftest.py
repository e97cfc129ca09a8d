"""GPU tests of the Python binding (pytest; the 2-rank tests spawn 2 processes).

    python3 -m pytest -v tests/python/gpu        (from the loom tree, after make)

Needs torch with CUDA; the 2-rank tests need 2 GPUs. Where torch or the
GPUs are missing the run FAILS (a GPU suite that passes by skipping every
test says nothing), unless LOOM_GPU_TESTS_MAY_SKIP=1 asks for skips with the
reason instead (a machine with one GPU: the 2-rank tests skip). libloom:
$LOOM_LIBRARY, else build/lib/libloom.so.
"""
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

try:
    import torch
    _GPUS = torch.cuda.device_count()
    _WHY = None if _GPUS else "no CUDA GPU visible to torch"
except ImportError:
    _GPUS, _WHY = 0, "torch is not installed"


_MAY_SKIP = os.environ.get("LOOM_GPU_TESTS_MAY_SKIP", "") == "1"
# the test modules import torch: without it none of them can be collected
collect_ignore_glob = ["test_*.py"] if _WHY == "torch is not installed" else []


_MISSING = []  # why tests could not run here


def pytest_collection_modifyitems(config, items):
    for item in items:
        need = 2 if item.get_closest_marker("two_gpus") else 1
        why = _WHY or (f"needs {need} GPUs, {_GPUS} visible" if _GPUS < need else None)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=why))
            _MISSING.append(why)


def pytest_sessionfinish(session, exitstatus):
    """Tests that could not run (no torch, too few GPUs) fail the run, unless
    LOOM_GPU_TESTS_MAY_SKIP=1."""
    why = _WHY or (_MISSING[0] if _MISSING else None)
    if not why:
        return
    if _MAY_SKIP:
        print(f"\nloom GPU tests: {why}: skipped (LOOM_GPU_TESTS_MAY_SKIP=1)")
        if _WHY:
            session.exitstatus = 0
    else:
        print(f"\nloom GPU tests: {why}: failing the run (LOOM_GPU_TESTS_MAY_SKIP=1 skips instead)")
        session.exitstatus = 1


def pytest_configure(config):
    config.addinivalue_line("markers", "two_gpus: runs 2 ranks (2 processes, 2 GPUs)")
