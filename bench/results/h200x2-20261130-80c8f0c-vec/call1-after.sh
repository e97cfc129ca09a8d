# both GPUs: every example on one process per GPU
for t in gpu_lang_layer_norm_w2 gpu_lang_llama_tp_w2 gpu_lang_model_parallel_w2 gpu_lang_adam_w2 gpu_lang_lamb_w2 \
         gpu_lang_pipeline_two_stages_w2; do
  timeout ${W2_LIMIT:-120} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$?"
done
for d in ab1 ab2; do
  [ -d $O/$d/before ] && python3 bench/compare_builds.py $O/$d/before $O/$d/after > $O/compare-lang-$d.txt 2>&1 &&
    { echo "== lang $d"; grep -E "^lang|generated" $O/compare-lang-$d.txt | head -40; }
done
grep -E "^  (ar_norm|adam|lamb|gemm_bias|mp_layer)" $O/ab1/after/lang.log | cut -c1-130
grep -E "^==|unit|stage|us" $O/stages.log | head -60
