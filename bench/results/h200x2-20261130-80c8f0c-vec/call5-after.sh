# both GPUs: LAMB on one process per GPU; lamb at 2^24 and 2^27 at W = 2
timeout ${W2_LIMIT:-120} build/tests/loom-test-gpu gpu_lang_lamb_w2 > $O/w2-gpu_lang_lamb_w2.log 2>&1; echo "w2 lamb rc=$?"
mkdir -p $O/lang-w2
LOOM_BENCH_RESULTS_DIR=$O/lang-w2 timeout 120 build/bin/loom-bench lang --world 2 --case lamb > $O/lang-w2-lamb.log 2>&1
LOOM_BENCH_RESULTS_DIR=$O/lang-w2 timeout 120 build/bin/loom-bench lang --world 2 --case lamb --bind N=134217728 \
  > $O/lang-w2-lamb-2e27.log 2>&1
for d in ab1 ab2; do
  [ -d $O/$d/before ] && python3 bench/compare_builds.py $O/$d/before $O/$d/after > $O/compare-lang-$d.txt 2>&1 &&
    { echo "== lang $d"; grep -E "^lang|generated" $O/compare-lang-$d.txt | head -9; }
done
grep -hE "^  lamb " $O/lang-lamb-w1*.log $O/lang-w2-*.log | cut -c1-160
grep -E "^==|total|kernel" $O/stages.log | grep -A12 "lamb" | head -30
