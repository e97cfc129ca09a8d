# both GPUs: the collectives', GEMM+AllReduce's and the TP ops' W = 2 tests; AllReduce bf16 (AUTO's new LL reach,
# + RMSNorm) in this build and nrm0, other first the second time; fp32 AllReduce and bf16 ReduceScatter /
# AllGather around the new thresholds
t0=$(date +%s)
timeout 120 build/tests/loom-test-gpu gpu_coll_ > $O/w2-coll.log 2>&1; echo "w2 coll rc=$? at $(( $(date +%s) - t0 )) s"
timeout 100 build/tests/loom-test-gpu gpu_gemm_ar_ > $O/w2-gemm-ar.log 2>&1; echo "w2 gemm_ar rc=$? at $(( $(date +%s) - t0 )) s"
for t in gpu_tp_gemm_rs_matches_reference_w2 gpu_tp_ag_gemm_matches_reference_w2 gpu_lang_layer_norm_w2; do
  timeout 60 build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$? at $(( $(date +%s) - t0 )) s"; done
b() { local d=build; [ $1 = build ] || d=build/ab/$1; local tag=$1-$2-$3; shift 3
      timeout 100 $d/bin/loom-bench "$@" --world 2 --peer none --results $O/json-$tag > $O/$tag.log 2>&1
      echo "$tag rc=$? at $(( $(date +%s) - t0 )) s"; }
SZ=4K,16K,64K,256K,512K,768K,1M,1536K,2M,3M
b build allreduce bf16 allreduce --sizes $SZ; b nrm0 allreduce bf16 allreduce --sizes $SZ
b nrm0 allreduce bf16b allreduce --sizes $SZ; b build allreduce bf16b allreduce --sizes $SZ
b build allreduce fp32 allreduce --dtype fp32 --sizes 512K,768K,1M,1536K,2M
b build reduce_scatter bf16 reduce_scatter --sizes 1M,2M,3M,4M,6M
b build all_gather bf16 all_gather --sizes 1M,2M,3M,4M,6M
for f in $O/w2-*.log; do echo "$(basename $f): $(grep -E 'passed, ' $f | tr '\n' ' ')$(grep -E '^\[ FAIL' $f | tr '\n' ' ')"; done
for f in $O/build-allreduce-bf16.log $O/nrm0-allreduce-bf16.log $O/build-allreduce-bf16b.log $O/nrm0-allreduce-bf16b.log; do echo "== $(basename $f .log)"
  grep -E "^# allreduce +(nccl|loom-auto|loom\+rmsnorm)\S*/graph" $f | awk '{printf "%s %s%s %s | ", $3, $4, $5, $6} /rmsnorm/ {print ""}'; done
for f in $O/build-allreduce-*.log $O/build-reduce_scatter-*.log $O/build-all_gather-*.log; do echo "== $(basename $f .log) eager"
  grep -E "^# \S+ +(nccl|loom-auto\S*|loom-ll|loom-push) " $f | awk '{printf "%s %s%s %s | ", $3, $4, $5, $6} /push|loom-auto:pull|loom-auto:ll/ && !/allreduce/ {print ""} /loom-push/ {print ""}'; done
