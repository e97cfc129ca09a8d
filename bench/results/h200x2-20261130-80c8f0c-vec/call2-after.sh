# both GPUs: every example on one process per GPU; loom-bench lang --world 2 at its full sizes (CoCoNet's Figure 11
# cases, ar_norm, adam, lamb, gemm_bias) with the PyTorch peer; the tuner on the model-parallel layer
for t in gpu_lang_layer_norm_w2 gpu_lang_llama_tp_w2 gpu_lang_model_parallel_w2 gpu_lang_adam_w2 gpu_lang_lamb_w2 \
         gpu_lang_pipeline_two_stages_w2; do
  timeout ${W2_LIMIT:-120} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$?"
done
mkdir -p $O/lang-w2
LOOM_BENCH_RESULTS_DIR=$O/lang-w2 timeout 200 build/bin/loom-bench lang --world 2 > $O/lang-w2.log 2>&1; echo "lang w2 rc=$?"
timeout 150 build/bin/loom tune examples/lang/model_parallel.loom --bind B=8,S=1024,H=3072 > $O/tune-mp.log 2>&1
echo "tune rc=$?"; tail -5 $O/tune-mp.log
for d in ab1 ab2; do
  [ -d $O/$d/before ] && python3 bench/compare_builds.py $O/$d/before $O/$d/after > $O/compare-lang-$d.txt 2>&1 &&
    { echo "== lang $d"; grep -E "^lang|generated" $O/compare-lang-$d.txt | head -12; }
done
grep -E "^  (ar_norm|adam|lamb|gemm_bias|mp_layer)" $O/lang-full-w1.log $O/lang-w2.log 2>/dev/null | cut -c1-150
grep -E "^==|total|kernel" $O/stages.log | head -40
