# both GPUs: every W = 2 optimizer test (pull), then loom-bench adam and lamb at W = 2 in the pull form and in the
# push form (LOOM_OPTIM_PULL=0), each run with its own decomposition rows (rs+update+ag, ar+update)
t0=$(date +%s)
timeout 150 build/tests/loom-test-gpu gpu_optim_ > $O/w2-optim.log 2>&1; echo "w2 optim rc=$? at $(( $(date +%s) - t0 )) s"
for op in adam lamb; do
  for pull in 1 0; do
    LOOM_OPTIM_PULL=$pull timeout 120 build/bin/loom-bench $op --world 2 --peer none --results $O/json > $O/bench-$op-pull$pull.log 2>&1
    echo "bench $op pull=$pull rc=$? at $(( $(date +%s) - t0 )) s"
  done
done
for f in $O/bench-*.log; do echo "== $(basename $f)"; grep -E "^# (adam|lamb) " $f | cut -c1-160; done
grep -E "passed|FAIL" $O/w2-optim.log | tail -4
