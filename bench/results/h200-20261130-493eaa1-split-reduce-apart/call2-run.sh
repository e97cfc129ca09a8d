#!/usr/bin/env bash
# call 2: split-K reduced apart in the model. GPU tests, loom-bench gemm --quick (three groups, torch peer),
# loom-bench grouped --quick (torch._grouped_mm), the 20 narrow shapes (picks)
set -u
cd "$(dirname "$0")/../.."
tar xJf build/carry2/all.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH=$PWD/build/lib
O=${OUT:-/tmp/out}; mkdir -p $O/r
T0=$(date +%s)
( for t in gemm_split_k gemm_stream_k gemm_heuristic gemm_tune gemm_set gpu_tp_ops_on_one_rank; do timeout 120 build/tests/loom-test-gpu $t; done ) > $O/r/gpu-test.log 2>&1
echo "gpu tests $(( $(date +%s) - T0 )) s"; grep -E "passed|FAIL" $O/r/gpu-test.log
timeout 200 build/bin/loom-bench gemm --quick --results $O/r > $O/r/bench-gemm.log 2>&1; echo "gemm rc=$? $(( $(date +%s) - T0 )) s"
grep -E "^(==|#|  )|geomean|target|band" $O/r/bench-gemm.log | tail -40
timeout 170 build/bin/loom-bench grouped --quick --results $O/r > $O/r/bench-grouped.log 2>&1; echo "grouped rc=$? $(( $(date +%s) - T0 )) s"
tail -30 $O/r/bench-grouped.log
SH="64,768,4096 512,768,4096 2048,768,4096 64,1280,8192 512,1280,8192 2048,1280,8192 64,1024,6144 512,1024,6144 64,1280,4096 512,1280,4096 512,2304,16384 64,3584,4096 512,3584,4096 2048,1024,6144 2048,1280,4096 2048,2304,16384 8192,1280,8192 1024,768,4096 4096,1024,6144 2048,3584,4096"
for s in $SH; do [ $(( $(date +%s) - T0 )) -gt 540 ] && break; IFS=, read m n k <<< "$s"; timeout 30 build/dev/gemm/bench_gemm_dev shape $m $n $k nk; done > $O/r/dev-narrow.log 2>&1
python3 build/carry2/summ.py $O/r/dev-narrow.log | tee $O/r/narrow-summary.txt | tail -22
cd $O && tar czf results.tgz r && ls -la results.tgz
