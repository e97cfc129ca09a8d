# both GPUs: the examples on one process per GPU (sequential and cublaslt+nccl at W = 2 over the link), then the
# tuner on the two GPUs (the model-parallel layer at Figure 11's first size: library rows, knob round), and loom
# run untuned before and after the entry, and with each runner named, --check
t0=$(date +%s)
for t in gpu_lang_model_parallel_w2 gpu_lang_llama_tp_w2 gpu_lang_adam_w2 gpu_lang_lamb_w2 gpu_lang_layer_norm_w2 \
         gpu_lang_pipeline_two_stages_w2; do
  timeout ${W2_LIMIT:-90} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$? at $(( $(date +%s) - t0 )) s"
done
B=B=8,S=1024,H=3072
L="timeout 120 build/bin/loom"
$L run examples/lang/model_parallel.loom --bind $B --check --iters 20 > $O/run-mp-untuned.log 2>&1; echo "run untuned rc=$?"
for s in unscheduled sequential cublaslt+nccl best; do
  $L run examples/lang/model_parallel.loom --bind $B --schedule $s --check --iters 20 > $O/run-mp-$s.log 2>&1
  echo "run $s rc=$? at $(( $(date +%s) - t0 )) s"
done
LOOM_TUNE_FILE=$O/tune-mp.txt timeout 200 build/bin/loom tune examples/lang/model_parallel.loom --bind $B > $O/tune-mp.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - t0 )) s"
LOOM_TUNE_FILE=$O/tune-mp.txt $L run examples/lang/model_parallel.loom --bind $B --check --iters 20 > $O/run-mp-tuned.log 2>&1
echo "run tuned rc=$?"
for f in run-mp-untuned run-mp-unscheduled run-mp-sequential run-mp-cublaslt+nccl run-mp-best run-mp-tuned; do
  echo "== $f"; grep -E "W = |total|interpreter" $O/$f.log | head -4
done
echo "== tune"; grep -E "^  [0-9]|winner|recorded|Spearman" $O/tune-mp.log | sort -t' ' -k1 | head -12
grep -E "sequential|cublaslt|/b[12]|winner|Spearman" $O/tune-mp.log | head -14
