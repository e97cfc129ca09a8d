#!/usr/bin/env bash
# pack_build.sh - the built binaries a device call needs, in one archive that
# fits the device tool's carry limit (build/carry/build.tar.xz, ~10 MB: the
# three 17 MB programs share most of their bytes). Then, on the device:
#   LOOM_CARRY_TAR=build/carry/build.tar.xz bash bench/device.sh ...
# with carry ["build/carry"].
set -eu
cd "$(dirname "$0")/.."
mkdir -p build/carry
files="build/bin/loom-bench build/tests/loom-test-gpu build/lib/libloom.so.0 build/lib/libloom.so"
[ -x build/examples/tp_mlp/tp_mlp ] && files="$files build/examples/tp_mlp/tp_mlp"
[ -x build/dev/gemm/bench_gemm_dev ] && files="$files build/dev/gemm/bench_gemm_dev" # LOOM_DEV_GEMM / LOOM_PRESET=gemm
[ -x build/dev/tp/bulk_reduce_probe ] && files="$files build/dev/tp/bulk_reduce_probe" # bulk reductions into a peer
for f in $files; do [ -e "$f" ] || { echo "pack_build: $f missing: run make first" >&2; exit 1; }; done
git rev-parse --short HEAD > build/carry/COMMIT 2>/dev/null || echo unknown > build/carry/COMMIT
tar -cf - $files | xz -T0 -6 > build/carry/build.tar.xz
ls -la build/carry/build.tar.xz
# LOOM_PACK_MUTANTS=1: also the mutant GPU test programs (make mutants; tests/gpu/mutants.sh run on the
# device), in build/carry/mutants.tar.xz: each differs from loom-test-gpu in one object, so one large
# dictionary stores them for little more than one program
rm -f build/carry/mutants.tar.xz
if [ "${LOOM_PACK_MUTANTS:-0}" = 1 ]; then
  ls build/mutants/*/loom-test-gpu > /dev/null || { echo "pack_build: no mutants: run make mutants first" >&2; exit 1; }
  # (and the slow-peer mutants' controls, build/mutants/<name>/control/)
  tar -cf - build/mutants/*/loom-test-gpu $(ls build/mutants/*/control/loom-test-gpu 2>/dev/null) |
    xz --lzma2=preset=3,dict=512MiB > build/carry/mutants.tar.xz
  ls -la build/carry/mutants.tar.xz
fi
# LOOM_PACK_WHEEL=1: also the Python package as a wheel shipping this libloom (~12 MB; built here, where
# PyPI is reachable for its build requirements; bench/diag/wheel_check.sh installs it on the device)
if [ "${LOOM_PACK_WHEEL:-0}" = 1 ]; then
  rm -f build/carry/*.whl
  LOOM_WHEEL_LIBRARY=$PWD/build/lib/libloom.so.0 python3 -m pip wheel --no-deps -q -w build/carry ./python
  ls -la build/carry/*.whl
fi
