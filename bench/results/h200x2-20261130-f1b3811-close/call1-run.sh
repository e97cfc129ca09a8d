#!/usr/bin/env bash
# call 1: loom-bench gemm in full (every m of every weight, cuBLASLt, cublasGemmEx and the torch peer in a CUDA
# graph) on the held-out half (GPU 0) and on the new families (GPU 1), the two W = 1 runs side by side
set -u
cd "$(dirname "$0")/../../.."
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH=$PWD/build/lib
O=${OUT:-/tmp/out}/r; mkdir -p $O
T0=$(date +%s)
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/machine.txt 2>&1
lane() { # GPU NAME ARGS...: one loom-bench gemm run on one GPU
  local g=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$g timeout 540 build/bin/loom-bench gemm "$@" --results $O/$name > $O/gemm-$name.log 2>&1
  echo "gemm $name rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "^# (fitting|held-out|new families|all)" $O/gemm-$name.log | head -20
}
lane 0 held-out --held-out &
lane 1 new-families --new-families &
wait
cd ${OUT:-/tmp/out} && tar czf results.tgz r && ls -la results.tgz
