#!/usr/bin/env bash
# python_ops_check.sh - one device call for the Python binding's registered
# ops (torch.library): the host tests that need torch (schemas, fake
# shapes, compile tracing on meta tensors), then the GPU tests of the ops
# (tests/python/gpu/test_library_gpu.py: against float64 torch, opcheck,
# eager vs torch.compile vs CUDA graphs), then the comm and TP layer tests
# the change touched; each under its own timeout, no new one started after
# $BUDGET seconds (default 500). From the repository root, after
# bench/pack_build.sh; the log under $OUT.
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0 LOOM_LIBRARY=$PWD/build/lib/libloom.so
budget=${BUDGET:-500}
t0=$(date +%s)
log=${OUT:-/tmp}/python_ops_check.log
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'gpus', torch.cuda.device_count())" | tee -a "$log"
nvidia-smi --query-gpu=name --format=csv,noheader | head -2 | tee -a "$log"
for t in ${TESTS:-tests/python/test_library_host.py tests/python/gpu/test_library_gpu.py tests/python/gpu/test_comm_gpu.py \
         tests/python/gpu/test_tp_gpu.py}; do
  now=$(( $(date +%s) - t0 ))
  [ $now -ge $budget ] && { echo "=== $t: not run (budget $budget s spent)" | tee -a "$log"; continue; }
  echo "=== $t (at ${now} s)" >> "$log"
  timeout $(( budget - now + 30 )) python3 -m pytest -q -p no:cacheprovider -rs "$t" >> "$log" 2>&1
  echo "rc=$?" >> "$log"
  echo "=== $t: $(grep -E 'passed|failed|error' "$log" | tail -1) ($(( $(date +%s) - t0 )) s)"
done
grep -E "^(FAILED|ERROR)|Error|assert" "$log" | head -30
