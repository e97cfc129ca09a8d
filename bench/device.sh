#!/usr/bin/env bash
# device.sh - everything one GPU-machine call does, in one command:
# record the machine, build, run the GPU tests and the benchmark suites named
# in $LOOM_BENCH_SUITES (default: all), copy logs and JSON to $OUT (when set),
# and print a short summary last.
#
#   bash bench/device.sh [test-filter]
# Environment: LOOM_COMMIT (commit being tested; the device has no .git),
# LOOM_BENCH_SUITES ("none" to skip benchmarks), LOOM_BENCH_ARGS (passed to
# every loom-bench suite, e.g. "--reps 10"), LOOM_BEFORE (a directory from
# bench/build_before.sh holding the previous build's libloom.so.0: the
# embedding_a2a suite times it side by side, the before(us) column),
# LOOM_PREBUILT=1 (use the carried build/bin/loom-bench and
# build/tests/loom-test-gpu as they are: no make on the device), OUT (where
# logs go), LOOM_EXAMPLES=0 (skip examples/tp_mlp, run on every GPU when
# build/examples/tp_mlp/tp_mlp exists: carry it with build/lib). loom-bench embedding_a2a runs its PyTorch peer
# (bench/peers/embedding_torch.py) itself, in the same job.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/loom-out}
mkdir -p "$out"
filter=${1:-}
commit=${LOOM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export LOOM_COMMIT=$commit
stamp=$(date -u +%Y%m%d-%H%M%S)
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  commit: $commit"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -5
  nvcc --version | tail -1
  grep -m1 NCCL_VERSION_CODE /usr/include/nccl.h 2>/dev/null
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

suites=${LOOM_BENCH_SUITES:-all}
targets="build/tests/loom-test-gpu"
[ "$suites" != none ] && targets="$targets build/bin/loom-bench"
t0=$(date +%s)
if [ "${LOOM_PREBUILT:-0}" = 1 ]; then
  for t in $targets; do
    [ -x "$t" ] || { echo "LOOM_PREBUILT=1 but $t is missing: carry it or unset LOOM_PREBUILT"; exit 1; }
  done
  echo "prebuilt binaries: $targets" > "$out/build.log"
elif ! make -j"$(nproc)" $targets > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "BUILD FAILED"
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
{ cat "$out/machine.txt"; build/tests/loom-test-gpu $filter; } > "$out/gpu-test.log" 2>&1
test_rc=$?
echo "gpu tests: rc=$test_rc, $(( $(date +%s) - t0 )) s"

bench_rc=0
if [ "$suites" != none ]; then
  export LOOM_BENCH_RESULTS_DIR="$out"
  t0=$(date +%s)
  for s in $suites; do
    extra=""
    if [ "$s" = embedding_a2a ] && [ -n "${LOOM_BEFORE:-}" ]; then
      [ -f "$LOOM_BEFORE/libloom.so.0" ] || { echo "LOOM_BEFORE=$LOOM_BEFORE has no libloom.so.0"; exit 1; }
      extra="--before $LOOM_BEFORE/libloom.so.0"
      echo "before: $(cat "$LOOM_BEFORE/COMMIT" 2>/dev/null || echo unknown) ($LOOM_BEFORE/libloom.so.0)" >> "$out/machine.txt"
    fi
    build/bin/loom-bench "$s" ${LOOM_BENCH_ARGS:-} $extra > "$out/bench-$s.log" 2>&1 || bench_rc=$?
  done
  echo "bench ($suites): rc=$bench_rc, $(( $(date +%s) - t0 )) s"
fi

# the tensor-parallel example (every GPU present), when it was built or carried
ex_rc=0
if [ "${LOOM_EXAMPLES:-1}" = 1 ] && [ -x build/examples/tp_mlp/tp_mlp ]; then
  LD_LIBRARY_PATH=$PWD/build/lib:${LD_LIBRARY_PATH:-} timeout 600 build/examples/tp_mlp/tp_mlp > "$out/tp_mlp.log" 2>&1 || ex_rc=$?
  echo "examples/tp_mlp: rc=$ex_rc ($(tail -1 "$out/tp_mlp.log"))"
fi

echo "=== GPU tests ==="
grep -E "^\[ (FAIL|SKIP|  OK  ) \]|^    |passed, .* failed" "$out/gpu-test.log" | tail -60
if [ "$suites" != none ]; then
  for s in $suites; do echo "=== loom-bench $s (tail) ==="; tail -45 "$out/bench-$s.log"; done
fi
exit $(( test_rc != 0 || bench_rc != 0 || ex_rc != 0 ))
