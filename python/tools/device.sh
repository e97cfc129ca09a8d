#!/usr/bin/env bash
# device.sh - the Python binding's GPU checks, in one call on a 2-GPU machine.
#
#   LOOM_PREBUILT=1 LOOM_COMMIT=<sha> bash python/tools/device.sh
#
# Steps (each bounded by `timeout`, each log in $OUT):
#   0. build/lib/libloom.so: carried (LOOM_PREBUILT=1), else built here
#   1. python/tools/nccl_probe.py      PyTorch's NCCL and libloom's in one process,
#                                      every load order (2 ranks per scenario)
#   2. pytest tests/python/gpu         the binding's GPU tests (2-rank tests spawn 2 processes)
#   3. torchrun --nproc_per_node=2 examples/python/dlrm_embedding.py
#                                      a DLRM's sparse part trained with loom vs plain PyTorch
#   4. python/tools/bench_overhead.py  a loom_gemm call through the binding vs from C
# Logs and JSON go to $OUT (default /tmp/loom-out), named
# python-<step>-<machine>-<date>-<commit>.*; a summary is printed last.
# Exit status: 0 when every step passed.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/loom-out}
mkdir -p "$out"
commit=${LOOM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export LOOM_COMMIT=$commit LOOM_BENCH_RESULTS_DIR=$out
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
tag="h200x${gpus}-$(date -u +%Y%m%d)-${commit}"
py=${PYTHON:-python3}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  commit: $commit"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -4
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  grep -h -m3 -E "define NCCL_(MAJOR|MINOR|PATCH) " /usr/include/nccl.h 2>/dev/null | tr '\n' ' '; echo
  ls -la /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/local/cuda/lib64/libnccl.so* 2>/dev/null
} > "$out/python-machine-$tag.txt" 2>&1
cat "$out/python-machine-$tag.txt"

if [ "${LOOM_PREBUILT:-0}" = 1 ]; then
  [ -e build/lib/libloom.so ] || { echo "LOOM_PREBUILT=1 but build/lib/libloom.so is missing: carry build/lib"; exit 1; }
  echo "libloom: carried $(readlink -f build/lib/libloom.so)"
else
  t0=$(date +%s)
  make -j"$(nproc)" build/lib/libloom.so > "$out/python-build-$tag.log" 2>&1 || { tail -30 "$out/python-build-$tag.log"; echo "BUILD FAILED"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi

declare -A rcs
step() {  # step NAME SECONDS command...
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$out/python-$name-$tag.log" 2>&1
  rc=$?
  rcs[$name]=$rc
  echo "$name: rc=$rc$([ $rc = 124 ] && echo ' (TIMED OUT)'), $(( $(date +%s) - t0 )) s"
}

step nccl-probe 200 "$py" python/tools/nccl_probe.py --timeout 45
step gpu-pytest 200 "$py" -m pytest -v -p no:cacheprovider -rs tests/python/gpu
step dlrm-embedding 70 "$py" -m torch.distributed.run --standalone --nproc_per_node=2 examples/python/dlrm_embedding.py --steps 5
step overhead 70 "$py" python/tools/bench_overhead.py

echo "=== NCCL probe (summary)"
sed -n '/^libloom alone/,/^torch .* alone/p' "$out/python-nccl-probe-$tag.log"
sed -n '/^=== summary/,$p' "$out/python-nccl-probe-$tag.log"
echo "=== GPU tests"
grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" "$out/python-gpu-pytest-$tag.log" | tail -25
echo "=== dlrm_embedding (rank 0)"
grep -E "^step|ok  |FAIL|dlrm_embedding" "$out/python-dlrm-embedding-$tag.log" | head -20
echo "=== binding overhead"
sed -n '/^loom binding overhead/,$p' "$out/python-overhead-$tag.log"
bad=0
for k in "${!rcs[@]}"; do [ "${rcs[$k]}" = 0 ] || bad=1; done
exit $bad
