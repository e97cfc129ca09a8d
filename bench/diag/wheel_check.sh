#!/usr/bin/env bash
# wheel_check.sh - one device call: the Python package as a user gets it.
# A fresh virtual environment (seeing the machine's torch through a .pth
# file: the device has no network), pip install of the wheel
# bench/pack_build.sh built with LOOM_PACK_WHEEL=1 (else of ./python with
# the libloom just built: LOOM_WHEEL_LIBRARY, no second build), then, from
# outside the tree,
# `python -m loom --torch` and the README's PyTorch quick start under
# torchrun on 2 GPUs. From the repository root, after bench/pack_build.sh;
# the log under $OUT.
set -u
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
log=${OUT:-/tmp}/wheel_check.log
venv=$(mktemp -d)/venv
{
  echo "date: $(date -u '+%F %T') UTC  commit: $(cat build/carry/COMMIT 2>/dev/null)"
  nvidia-smi --query-gpu=name --format=csv,noheader | head -2
  python3 -m venv --system-site-packages "$venv" && echo "venv: $venv"
  # the machine's python3 may itself be a virtual environment holding torch: let the new one see its packages
  parent=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  mine=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$parent" > "$mine/machine-packages.pth" && echo "sees: $parent"
  whl=$(ls build/carry/*.whl 2>/dev/null | head -1)
  if [ -n "$whl" ]; then  # the wheel bench/pack_build.sh built (LOOM_PACK_WHEEL=1)
    "$venv/bin/pip" install --no-deps -q "$whl" && echo "pip install $(basename "$whl"): ok"
  else  # no network here: the build requirements must already be installed
    LOOM_WHEEL_LIBRARY=$PWD/build/lib/libloom.so.0 "$venv/bin/pip" install --no-deps --no-build-isolation -q ./python \
      && echo "pip install ./python: ok"
  fi
  "$venv/bin/pip" show loom-fused | head -3
  awk '/^## Quick start: PyTorch/{f=1} f && /^```python/{c=1; next} c && /^```/{exit} c' README.md > /tmp/quickstart.py
  echo "--- the README's PyTorch quick start ($(wc -l < /tmp/quickstart.py) lines)"
  cd /tmp
  "$venv/bin/python" -c "import loom, sys; print('loom from', loom.__file__); print('library', loom.library_path())"
  "$venv/bin/python" -m loom --torch; echo "python -m loom: exit $?"
  timeout 300 "$venv/bin/python" -m torch.distributed.run --nproc_per_node=2 /tmp/quickstart.py; echo "quick start: exit $?"
} > "$log" 2>&1
grep -E "ok|exit|loom from|library|symmetric memory|registered ops|communicator|Error" "$log" | head -20
