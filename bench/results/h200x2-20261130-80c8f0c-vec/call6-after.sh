# both GPUs: every example on one process per GPU, the pipeline as two stages, the absent rank at W = 2
for t in gpu_lang_layer_norm_w2 gpu_lang_llama_tp_w2 gpu_lang_model_parallel_w2 gpu_lang_adam_w2 gpu_lang_lamb_w2 \
         gpu_lang_pipeline_two_stages_w2 gpu_lang_absent_rank_times_out_naming_the_stage_w2; do
  timeout ${W2_LIMIT:-120} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$?"
done
