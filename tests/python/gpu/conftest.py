"""GPU tests of the Python binding (pytest; the 2-rank tests spawn 2 processes).

    python3 -m pytest -v tests/python/gpu        (from the loom tree, after make)

Needs torch with CUDA; the 2-rank tests need 2 GPUs. Where those are
missing every test is skipped with the reason. libloom: $LOOM_LIBRARY, else
build/lib/libloom.so.
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


def pytest_collection_modifyitems(config, items):
    for item in items:
        need = 2 if item.get_closest_marker("two_gpus") else 1
        if _WHY:
            item.add_marker(pytest.mark.skip(reason=_WHY))
        elif _GPUS < need:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPUs, {_GPUS} visible"))


def pytest_configure(config):
    config.addinivalue_line("markers", "two_gpus: runs 2 ranks (2 processes, 2 GPUs)")
