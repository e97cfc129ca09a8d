# (not run: two GPUs were no longer lent) both GPUs: the collectives' W = 1 and 2 tests; AllReduce bf16 (+ RMSNorm) at W = 2 in both builds, both orders
t0=$(date +%s)
timeout 100 build/tests/loom-test-gpu gpu_coll_ > $O/w2-coll.log 2>&1; echo "w2 coll rc=$? at $(( $(date +%s) - t0 )) s"
b() { local d=build; [ $1 = build ] || d=build/ab/$1; local tag=$1-$2; shift 2
      timeout 40 $d/bin/loom-bench "$@" --world 2 --peer none --results $O/json-$tag > $O/$tag.log 2>&1
      echo "$tag rc=$? at $(( $(date +%s) - t0 )) s"; }
SZ=4K,16K,64K,256K,1M
b build a allreduce --sizes $SZ; b one a allreduce --sizes $SZ; b one b allreduce --sizes $SZ; b build b allreduce --sizes $SZ
grep -E "passed|FAIL" $O/w2-coll.log | tail -3
for f in $O/w1-allreduce-*.log $O/build-?.log $O/one-?.log; do echo "== $(basename $f .log)"
  grep -E "^# allreduce +(nccl|loom-auto|loom\+rmsnorm|loom\+epi)\S*/graph" $f | awk '{printf "%s %s %s; ", $3, $4$5, $6} /rmsnorm/ {print ""}'; done
