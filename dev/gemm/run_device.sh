#!/bin/bash
# run_device.sh - one device call for the GEMM engine: build the library (or
# whatever of it compiles), the GEMM GPU tests and the dev benchmark; record
# ptxas resources and the SASS's HGMMA count; run tests, then the benchmark.
#   dev/gemm/run_device.sh [bench-set] [test-filter]   (logs to $OUT or /tmp)
set -o pipefail
OUT=${OUT:-/tmp/gemm_out}; mkdir -p $OUT
export CUDA_VISIBLE_DEVICES=0 NCCL_NVLS_ENABLE=0
SET=${1:-quick}; FILTER=${2:-gemm}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
INC="-Iinclude -Isrc -I/usr/include -I$CUDA_HOME/include"
LIBS="-L$CUDA_HOME/lib64 -lnccl -lcublasLt -lcublas -lnvrtc -lcudart -lpthread -lm -ldl -lstdc++"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
t0=$(date +%s)
make -k -j16 build/lib/libloom.a > $OUT/build.log 2>&1 || echo "make libloom.a failed (see build.log); archiving what compiled"
ar rcs build/libloom_dev.a $(find build/obj/src -name '*.o') || exit 1
gcc -std=c11 -O2 $INC -I. tests/gpu/main.c tests/common/test.c tools/common/launch.c tests/gpu/test_gemm.c build/libloom_dev.a $LIBS -o build/gemm-test || exit 1
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a $INC dev/gemm/bench_gemm_dev.cu build/libloom_dev.a $LIBS -o build/bench_gemm_dev || exit 1
[ "$SKIP_SASS" = 1 ] || { nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a $INC -Xptxas -v -c src/gemm/gemm_sm90.cu -o /tmp/g90.o > $OUT/ptxas.log 2>&1
cuobjdump --dump-sass /tmp/g90.o > /tmp/g90.sass 2>&1
{ echo "HGMMA instructions in SASS: $(grep -c HGMMA /tmp/g90.sass)"; grep -m3 HGMMA /tmp/g90.sass;
  echo "LDL/STL (local memory) in SASS: $(grep -cE '\bLDL|\bSTL' /tmp/g90.sass)"; } | tee $OUT/sass.txt
grep -E "registers|spill" $OUT/ptxas.log | sort | uniq -c | tee -a $OUT/sass.txt; }
echo "build took $(( $(date +%s) - t0 )) s"
timeout 150 ./build/gemm-test $FILTER 2>&1 | tee $OUT/test.log | grep -vE "^\s+ok " ; echo "test rc=$?"
timeout 200 ./build/bench_gemm_dev $SET $OUT/bench.json 2>&1 | tee $OUT/bench.log
