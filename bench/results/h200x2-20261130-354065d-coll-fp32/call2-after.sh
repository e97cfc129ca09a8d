# both GPUs: the collectives' tests (W = 1 and 2); loom-bench allreduce fp32 in this build and in coll8 (the header
# before 354065d: 8 consecutive fp32 a lane), other build first the second time; reduce_scatter / all_gather fp32;
# the optimizers at two small sizes (below the benchmark's 2^20)
t0=$(date +%s)
timeout 150 build/tests/loom-test-gpu gpu_coll_ > $O/w2-coll.log 2>&1; echo "w2 coll rc=$? at $(( $(date +%s) - t0 )) s"
ar() { local d=build; [ $1 = build ] || d=build/ab/$1
       timeout 90 $d/bin/loom-bench $2 --world 2 --peer none --dtype fp32 --max-bytes 256M --results $O/json-$1 > $O/$2-fp32-$1$3.log 2>&1
       echo "$2 fp32 $1 rc=$? at $(( $(date +%s) - t0 )) s"; }
ar build allreduce; ar coll8 allreduce
ar build reduce_scatter; ar coll8 reduce_scatter; ar build all_gather
for op in adam lamb; do for n in 4096 65536; do
  timeout 30 build/bin/loom-bench $op --world 2 --peer none --size $n --results $O/json-small > $O/$op-$n.log 2>&1
  echo "$op $n rc=$? at $(( $(date +%s) - t0 )) s"; done; done
grep -E "passed|FAIL" $O/w2-coll.log | tail -5
for f in $O/allreduce-fp32-*.log $O/reduce_scatter-fp32-*.log $O/all_gather-fp32-*.log; do echo "== $(basename $f .log)"
  grep -E "^# \S+ +(nccl|loom-auto\S*|loom-1shot|loom-push|loom-2shot) " $f | awk '{printf "%s %s%s %s; ", $3, $4, $5, $6} $3 ~ /2shot|loom-auto/ && $0 !~ /allreduce/ {print ""} $3 ~ /2shot/ {print ""}'; done
for f in $O/adam-*.log $O/lamb-*.log; do echo "== $(basename $f .log)"; grep -E "^# (adam|lamb) loom-(auto)" $f | awk '{n=NF; print $3, $4, $5, "loom="$(n-11), "ar+upd="$(n-9), "rs+upd+ag="$(n-7), "sp="$n}'; done
