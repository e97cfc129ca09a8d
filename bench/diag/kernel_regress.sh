#!/usr/bin/env bash
# kernel_regress.sh - one device call after a change to the sm90 GEMM
# kernel's template (gemm_sm90.cuh): the GEMM engine's GPU tests of the
# plain, decode, stream-K and hooked kernels, the grouped GEMM's, the MoE
# ops', then the Python binding's MoE test; each test group under its own
# timeout, no new group started after $BUDGET seconds (default 480). From
# the repository root, after bench/pack_build.sh; the log under $OUT.
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
budget=${BUDGET:-480}
t0=$(date +%s)
log=${OUT:-/tmp}/kernel_regress.log
# FILTERS: another list (the rest of the GEMM tests: "gemm_stream_k_det gemm_graph_capture ...")
for f in ${FILTERS:-gemm_odd_shapes gemm_dtypes_bias gemm_both_tile gemm_hooks gemm_decode_dtypes gemm_tile_widths \
         gemm_grouped gpu_moe gemm_stream_k_shapes gemm_decode_more gemm_split_k_long gpu_tp_}; do
  now=$(( $(date +%s) - t0 ))
  [ $now -ge $budget ] && { echo "=== $f: not run (budget $budget s spent)" | tee -a "$log"; continue; }
  echo "=== $f (at ${now} s)" >> "$log"
  timeout $(( budget - now + 30 )) build/tests/loom-test-gpu $f >> "$log" 2>&1
  echo "rc=$?" >> "$log"
  grep -E "^\[ *(OK|FAIL|SKIP)|passed,|rc=" "$log" | tail -0
  echo "=== $f: $(grep -E 'passed,' "$log" | tail -1) ($(( $(date +%s) - t0 )) s)"
done
if [ -n "${FILTERS:-}" ]; then
  :
elif python3 -c "import torch, pytest" 2>/dev/null; then
  LOOM_LIBRARY=$PWD/build/lib/libloom.so timeout 200 python3 -m pytest -q tests/python/gpu/test_moe_gpu.py 2>&1 \
    | tee -a "$log" | tail -4
else
  echo "python: torch or pytest missing"
fi
grep -E "FAIL" "$log" | head -20
