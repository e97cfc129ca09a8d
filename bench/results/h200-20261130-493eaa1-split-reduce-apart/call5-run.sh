#!/usr/bin/env bash
# call 5: the hooked GEMM+ReduceScatter kernel with idle hooks against cuBLASLt, held-out layers, TP = 8 / 4 / 2 (W = 1)
set -u
cd "$(dirname "$0")/../.."
tar xJf build/carry5/all.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH=$PWD/build/lib
O=${OUT:-/tmp/out}; mkdir -p $O/r
T0=$(date +%s)
for tp in 8 4 2; do
  [ $(( $(date +%s) - T0 )) -gt 150 ] && break
  timeout 80 build/bin/loom-bench gemm_rs --world 1 --set held-out --tp $tp --quick --peer none --results $O/r/tp$tp > $O/r/bench-rs-tp$tp.log 2>&1
  echo "gemm_rs tp$tp rc=$? $(( $(date +%s) - T0 )) s"
  python3 bench/diag/hook_idle_table.py $O/r/tp$tp/gemm_rs-*.json > $O/r/hook-idle-rs-tp$tp.txt 2>&1; tail -4 $O/r/hook-idle-rs-tp$tp.txt
done
cd $O && tar czf results.tgz r && ls -la results.tgz
