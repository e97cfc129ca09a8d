#!/usr/bin/env bash
# moe_layer_check.sh - one device call: the grouped GEMM's and the MoE
# layer's GPU tests (and the dispatch/combine ones they build on), then
# loom-bench moe --layer with PyTorch's layer as the peer, then the same
# at two held-out token counts (512, 2048; no peer). From the repository
# root, after bench/pack_build.sh; results under $OUT. SKIP_TESTS=1: the
# benchmarks only.
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "=== tests"
  timeout 200 build/tests/loom-test-gpu gemm_grouped 2>&1 | grep -E "OK|FAIL|passed|bad [1-9]"
  timeout 400 build/tests/loom-test-gpu gpu_moe 2>&1 | grep -E "OK|FAIL|passed|far|rank [0-9]:" | tail -30
fi
echo "=== bench"; build/bin/loom-bench moe --layer --reps ${REPS:-10} --timeout 300 --results "${OUT:-/tmp}" 2>&1 | grep "^#" | tail -20
for T in 512 2048; do
  build/bin/loom-bench moe --layer --tokens $T --peer none --reps ${REPS:-10} --timeout 300 --results "${OUT:-/tmp}" 2>&1 | grep "^# moe layer"
done
