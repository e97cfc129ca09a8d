# both GPUs: the four loop structures of dev/optim/adam_peer_loads; the optimizers' W = 2 tests on the new kernels;
# then loom-bench adam / lamb fp32 at W = 2 in four builds (build = 4-wide at 4 blocks/SM; v8b4 = the previous kernels;
# v8b3 / v4b3: 3 blocks per SM), each with its own decomposition rows, order rotated
t0=$(date +%s)
timeout 90 build/dev/optim/adam_peer_loads 20 24 27 > $O/adam_peer_loads.log 2>&1; echo "peer_loads rc=$? at $(( $(date +%s) - t0 )) s"
timeout 100 build/tests/loom-test-gpu gpu_optim_ > $O/w2-optim.log 2>&1; echo "w2 optim rc=$? at $(( $(date +%s) - t0 )) s"
run() { local d=build; [ $1 = build ] || d=build/ab/$1
        timeout 40 $d/bin/loom-bench $2 --world 2 --peer none --no-check --dtype $3 --results $O/json-$1 > $O/$2-$3-$1.log 2>&1
        echo "$2 $3 $1 rc=$? at $(( $(date +%s) - t0 )) s"; }
for b in build v8b4 v4b3 v8b3; do run $b adam fp32; done
for b in v8b4 build v8b3 v4b3; do run $b lamb fp32; done
run build adam mixed; run build lamb mixed
cat $O/adam_peer_loads.log | tail -20
grep -E "passed|FAIL" $O/w2-optim.log | tail -4
for f in $O/*-fp32-*.log $O/*-mixed-*.log $O/w1-adam-*.log; do echo "== $(basename $f .log)"; grep -E "^# (adam|lamb) loom-(auto|ar|rs)" $f | awk '{n=NF; print $3, $4, "loom="$(n-11), "ar+upd="$(n-9), "rs+upd+ag="$(n-7), "sp="$n}' | cut -c1-110; done
