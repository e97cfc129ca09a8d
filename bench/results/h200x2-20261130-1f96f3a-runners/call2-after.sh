# both GPUs: the examples on one process per GPU (sequential and cublaslt+nccl at W = 2 over the link); loom run
# with cublaslt+nccl; the tuner on the two GPUs (model-parallel layer, B=8,S=1024,H=3072, at most 60 programs:
# its library rows and knob round), then loom run taking its entry
t0=$(date +%s)
B=B=8,S=1024,H=3072
L="timeout 60 build/bin/loom"
$L run examples/lang/model_parallel.loom --bind $B --schedule cublaslt+nccl --check --iters 20 > $O/run-mp-nccl.log 2>&1
echo "run cublaslt+nccl rc=$? at $(( $(date +%s) - t0 )) s"
LOOM_TUNE_FILE=$O/tune-mp.txt timeout 200 build/bin/loom tune examples/lang/model_parallel.loom --bind $B --max 60 > $O/tune-mp.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - t0 )) s"
LOOM_TUNE_FILE=$O/tune-mp.txt $L run examples/lang/model_parallel.loom --bind $B --check --iters 20 > $O/run-mp-tuned.log 2>&1
echo "run tuned rc=$? at $(( $(date +%s) - t0 )) s"
for t in gpu_lang_model_parallel_w2 gpu_lang_llama_tp_w2 gpu_lang_adam_w2 gpu_lang_lamb_w2; do
  timeout ${W2_LIMIT:-60} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$? at $(( $(date +%s) - t0 )) s"
done
for f in run-mp-nccl run-mp-tuned; do echo "== $f"; grep -E "W = |total|interpreter" $O/$f.log | head -4; done
grep -E "sequential|cublaslt|/b[12]|winner|Spearman|unscheduled " $O/tune-mp.log | head -14
