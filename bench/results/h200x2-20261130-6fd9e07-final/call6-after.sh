# both GPUs: the W = 2 tests of the collectives, GEMM+AllReduce and the TP ops' references; the collectives' whole
# benchmark at W = 2 (AllReduce bf16 with PyTorch's peers, 4 KiB .. 1 GiB; fp32; ReduceScatter, AllGather)
t0=$(date +%s)
timeout 120 build/tests/loom-test-gpu gpu_coll_ > $O/w2-coll.log 2>&1; echo "w2 coll rc=$? at $(( $(date +%s) - t0 )) s"
timeout 90 build/tests/loom-test-gpu gpu_gemm_ar_ > $O/w2-gemm-ar.log 2>&1; echo "w2 gemm_ar rc=$? at $(( $(date +%s) - t0 )) s"
for t in gpu_tp_gemm_rs_matches_reference_w2 gpu_tp_ag_gemm_matches_reference_w2; do
  timeout 60 build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$? at $(( $(date +%s) - t0 )) s"; done
b() { local tag=$1; shift
      timeout 150 build/bin/loom-bench "$@" --world 2 --results $O/json-$tag > $O/$tag.log 2>&1
      echo "$tag rc=$? at $(( $(date +%s) - t0 )) s"; }
b allreduce-bf16 allreduce --max-bytes 1G
b allreduce-fp32 allreduce --peer none --dtype fp32 --max-bytes 256M
b reduce_scatter-bf16 reduce_scatter --max-bytes 256M
b all_gather-bf16 all_gather --max-bytes 256M
for f in $O/w2-*.log; do echo "$(basename $f): $(grep -E 'passed, ' $f | tr '\n' ' ')$(grep -E '^\[ FAIL' $f | tr '\n' ' ')"; done
for f in $O/allreduce-*.log $O/reduce_scatter-*.log $O/all_gather-*.log; do echo "== $(basename $f .log)"
  grep -E "^# \S+ +(nccl|loom-auto\S*|nccl\+rmsnorm|loom\+rmsnorm\S*)(/graph\S*)? " $f | awk '{printf "%s %s%s %s | ", $3, $4, $5, $6} /graph/ && /loom-auto|loom\+rmsnorm/ {print ""}'; echo; done | cut -c1-300
