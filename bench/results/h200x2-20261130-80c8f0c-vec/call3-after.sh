# both GPUs: the Adam and LAMB programs at 2^27 at W = 2 (generated, hand-written, PyTorch); the tuner's tables of
# both programs at 2^24 at W = 2
mkdir -p $O/lang-2e27-w2
for c in adam lamb; do
  LOOM_BENCH_RESULTS_DIR=$O/lang-2e27-w2 timeout 150 build/bin/loom-bench lang --world 2 --case $c --bind N=134217728 \
    > $O/lang-$c-w2-2e27.log 2>&1; echo "lang $c w2 2^27 rc=$?"
  timeout 150 build/bin/loom tune examples/lang/$c.loom --bind N=16777216 > $O/tune-$c.log 2>&1
  echo "tune $c rc=$?"; tail -3 $O/tune-$c.log; head -6 $O/tune-$c.log
done
grep -hE "^  (adam|lamb)" $O/lang-*-2e27.log $O/lang-adam-w1-2e27.log $O/lang-lamb-w1-2e27.log 2>/dev/null | cut -c1-170
