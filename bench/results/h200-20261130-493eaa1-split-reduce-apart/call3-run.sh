#!/usr/bin/env bash
# call 3: split-K reduced apart in the wait-only hooked kernels (AllGather+GEMM). GPU tests, then the hooked GEMM
# with idle hooks against cuBLASLt on the held-out TP = 8 / 4 / 2 layers (loom-bench ag_gemm --world 1)
set -u
cd "$(dirname "$0")/../.."
tar xJf build/carry3/all.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH=$PWD/build/lib
O=${OUT:-/tmp/out}; mkdir -p $O/r
T0=$(date +%s)
( for t in gemm_hooks_split_k_stream_k_wait_only gemm_split_k_reduced gpu_tp_ops_on_one_rank gemm_hooks; do timeout 150 build/tests/loom-test-gpu $t; done ) > $O/r/gpu-test.log 2>&1
echo "gpu tests $(( $(date +%s) - T0 )) s"; grep -E "passed|FAIL|reduced apart" $O/r/gpu-test.log
for tp in 8 4 2; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
  timeout 150 build/bin/loom-bench ag_gemm --world 1 --set held-out --tp $tp --quick --peer none --results $O/r/tp$tp > $O/r/bench-ag-tp$tp.log 2>&1
  echo "ag_gemm tp$tp rc=$? $(( $(date +%s) - T0 )) s"
  python3 bench/diag/hook_idle_table.py $O/r/tp$tp/ag_gemm-*.json > $O/r/hook-idle-tp$tp.txt 2>&1; tail -8 $O/r/hook-idle-tp$tp.txt
done
cd $O && tar czf results.tgz r && ls -la results.tgz
