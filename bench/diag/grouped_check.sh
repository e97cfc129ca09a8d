#!/usr/bin/env bash
# grouped_check.sh - one device call: the grouped GEMM's GPU tests, then
# loom-bench grouped when it exists (MoE experts' GEMMs against cuBLASLt
# per group and one dense GEMM). From the repository root, after
# bench/pack_build.sh; results under $OUT.
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
echo "=== gemm_grouped tests"; timeout 300 build/tests/loom-test-gpu gemm_grouped 2>&1 | tail -40
if build/bin/loom-bench --help 2>&1 | grep -q grouped; then
  echo "=== bench"; build/bin/loom-bench grouped --timeout 240 --results "${OUT:-/tmp}" 2>&1 | tail -45
fi
