#!/usr/bin/env bash
# grouped_check.sh - one device call: the grouped GEMM's GPU tests, then
# loom-bench grouped (loom_gemm_grouped against torch._grouped_mm on the
# MoE experts' GEMMs of seven models, tokens 1..8192, uniform and Zipf
# routing; its PyTorch peer needs torch at python3). From the repository
# root, after bench/pack_build.sh; results (the JSONs, the whole output in
# grouped.txt) under $OUT.
#   TESTS   "none" skips the GPU tests (the full bench then fits in one call)
#   BENCH   loom-bench grouped's arguments (default --quick: about 1.5 min;
#           "" for the full run: about 3-6 min, `loom-bench grouped --list`
#           estimates it)
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
out=${OUT:-/tmp}
if [ "${TESTS:-x}" != none ]; then
  echo "=== gemm_grouped tests"; timeout 300 build/tests/loom-test-gpu gemm_grouped 2>&1 | tail -40
fi
echo "=== bench grouped ${BENCH---quick} ($(cat build/carry/COMMIT 2>/dev/null))"
build/bin/loom-bench grouped ${BENCH---quick} --timeout 480 --results "$out" > "$out/grouped.txt" 2>&1
echo "exit $?"
grep -E "BELOW|rror|failure|Traceback|geomean|peer|#wrong [1-9]" "$out/grouped.txt" | tail -60
