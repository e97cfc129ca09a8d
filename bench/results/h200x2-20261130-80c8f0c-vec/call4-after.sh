# both GPUs: the two FP32 examples on one process per GPU; adam and lamb at 2^24 and 2^27 at W = 2
for t in gpu_lang_adam_w2 gpu_lang_lamb_w2; do
  timeout ${W2_LIMIT:-120} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$?"
done
mkdir -p $O/lang-w2
for a in "adam" "lamb" "adam --bind N=134217728" "lamb --bind N=134217728"; do
  LOOM_BENCH_RESULTS_DIR=$O/lang-w2 timeout 120 build/bin/loom-bench lang --world 2 --case $a > "$O/lang-w2-${a// /_}.log" 2>&1
  echo "lang w2 $a rc=$?"
done
for d in ab1 ab2; do
  [ -d $O/$d/before ] && python3 bench/compare_builds.py $O/$d/before $O/$d/after > $O/compare-lang-$d.txt 2>&1 &&
    { echo "== lang $d"; grep -E "^lang|generated" $O/compare-lang-$d.txt | head -9; }
done
grep -hE "^  (adam|lamb) " $O/lang-adam-w1*.log $O/lang-lamb-w1.log $O/lang-w2-*.log | cut -c1-160
