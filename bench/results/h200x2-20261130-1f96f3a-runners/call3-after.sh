# both GPUs, HEAD (loom tune prints every row): the tuner on the model-parallel layer (B=8,S=1024,H=3072) and on
# Adam (N = 2^24), at most 60 programs each, every row with the library runners and the knob's round; loom run
# taking each entry; the W = 2 suites call 2 did not reach
t0=$(date +%s)
for c in "model_parallel B=8,S=1024,H=3072" "adam N=16777216"; do
  set -- $c
  LOOM_TUNE_FILE=$O/tune-$1.txt timeout 150 build/bin/loom tune examples/lang/$1.loom --bind $2 --max 60 > $O/tune-$1.log 2>&1
  echo "tune $1 rc=$? at $(( $(date +%s) - t0 )) s"
  LOOM_TUNE_FILE=$O/tune-$1.txt timeout 60 build/bin/loom run examples/lang/$1.loom --bind $2 --iters 20 > $O/run-$1.log 2>&1
  echo "run $1 rc=$? at $(( $(date +%s) - t0 )) s"
done
for t in gpu_lang_layer_norm_w2 gpu_lang_pipeline_two_stages_w2 gpu_lang_absent_rank_times_out_naming_the_stage_w2; do
  timeout ${W2_LIMIT:-60} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$? at $(( $(date +%s) - t0 )) s"
done
for c in model_parallel adam; do
  grep -E "^  (0|[0-9]+) +(unscheduled|sequential|cublaslt|s[0-9]+/b|best)|winner|Spearman" $O/tune-$c.log | head -16
  grep -E "W = |total" $O/run-$c.log | head -3
done
