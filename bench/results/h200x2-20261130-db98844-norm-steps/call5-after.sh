# both GPUs: the collectives' tests; AllReduce bf16 + RMSNorm / + epilogue at W = 2 in both builds, both orders
t0=$(date +%s)
timeout 120 build/tests/loom-test-gpu gpu_coll_ > $O/w2-coll.log 2>&1; echo "w2 coll rc=$? at $(( $(date +%s) - t0 )) s"
b() { local d=build; [ $1 = build ] || d=build/ab/$1; local tag=$1-$2; shift 2
      timeout 100 $d/bin/loom-bench "$@" --world 2 --peer none --results $O/json-$tag > $O/$tag.log 2>&1
      echo "$tag rc=$? at $(( $(date +%s) - t0 )) s"; }
SZ=4K,16K,64K,256K,1M
b build a allreduce --sizes $SZ; b mod64 a allreduce --sizes $SZ; b mod64 b allreduce --sizes $SZ; b build b allreduce --sizes $SZ
cat $O/probe.log
for f in $O/w1-allreduce-*.log $O/build-?.log $O/mod64-?.log; do echo "== $(basename $f .log)"
  grep -E "^# allreduce +(loom-auto|loom\+rmsnorm|loom\+epi)\S*/graph" $f | awk '{printf "%s %s %s; ", $3, $4$5, $6} /rmsnorm/ {print ""}'; done
