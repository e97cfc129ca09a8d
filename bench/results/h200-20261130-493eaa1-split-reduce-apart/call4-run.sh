#!/usr/bin/env bash
# call 4: the reduction kernel preloaded before a hooked GEMM; GPU tests again; loom-bench gemm over the whole set
# (three groups, --peer none: the torch peer of the whole set runs ~8.5 min alone) and loom-bench grouped (full, torch peer)
set -u
cd "$(dirname "$0")/../.."
tar xJf build/carry4/all.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH=$PWD/build/lib
O=${OUT:-/tmp/out}; mkdir -p $O/r
T0=$(date +%s)
( for t in gemm_hooks_split_k_stream_k_wait_only gemm_split_k_reduced gemm_set; do timeout 120 build/tests/loom-test-gpu $t; done ) > $O/r/gpu-test.log 2>&1
echo "gpu tests $(( $(date +%s) - T0 )) s"; grep -E "passed|FAIL|reduced apart" $O/r/gpu-test.log
timeout 260 build/bin/loom-bench gemm --peer none --results $O/r > $O/r/bench-gemm-full.log 2>&1; echo "gemm rc=$? $(( $(date +%s) - T0 )) s"
grep -E "^# (fitting|held-out|new families)" $O/r/bench-gemm-full.log
timeout 230 build/bin/loom-bench grouped --results $O/r > $O/r/bench-grouped-full.log 2>&1; echo "grouped rc=$? $(( $(date +%s) - T0 )) s"
grep -E "^# " $O/r/bench-grouped-full.log | head -14
cd $O && tar czf results.tgz r && ls -la results.tgz
