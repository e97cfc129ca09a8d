#!/usr/bin/env bash
# moe_layer_check.sh - one device call for loom_moe_mlp's forms: the GPU
# tests of the layer, the grouped GEMM and dispatch/combine, then
# loom-bench moe --layer (every shape: loom-auto, loom-mlp-fused,
# loom-mlp-unfused side by side, the GEMMs and the communication alone,
# the forced tiles, PyTorch's layer as the peer). From the repository root,
# after bench/pack_build.sh; results under $OUT.
#   TESTS   loom-test-gpu filters (default: gpu_moe_mlp gpu_gemm_grouped gpu_moe; "none" skips)
#   BENCH   extra loom-bench arguments (e.g. "--quick", "--peer none")
#   REPS    repetitions (default 10)
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name --format=csv,noheader | head -2
if [ "${TESTS:-x}" != none ]; then
  for t in ${TESTS:-gpu_moe_mlp gpu_gemm_grouped gpu_moe}; do
    echo "=== $t"; timeout 300 build/tests/loom-test-gpu "$t" 2>&1 | tee -a "$out/gpu_test.txt" | grep -E "FAIL|passed|rank .*tuned|Error|error" | tail -12
  done
fi
echo "=== bench --layer ($(cat build/carry/COMMIT 2>/dev/null))"
build/bin/loom-bench moe --layer --reps "${REPS:-10}" --timeout 300 ${BENCH:-} --results "$out" > "$out/layer_full.txt" 2>&1
grep -E "^# moe|rror" "$out/layer_full.txt" | tee "$out/layer.txt"
