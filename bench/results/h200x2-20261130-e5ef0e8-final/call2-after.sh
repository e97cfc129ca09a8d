# HEAD (the tuner's plans tune their GEMM shapes at first use): loom tune of the model-parallel layer at W = 2
# (B=8, S=1024, H=3072, at most 20 programs) with LOOM_DEBUG=INFO (loom_gemm_tune's records), then loom run
# taking the entry
t0=$(date +%s)
B=B=8,S=1024,H=3072
LOOM_TUNE_FILE=$O/tune.txt timeout 150 build/bin/loom tune examples/lang/model_parallel.loom --bind $B --max 20 > $O/tune.log 2>&1
echo "tune rc=$? at $(( $(date +%s) - t0 )) s"
LOOM_TUNE_FILE=$O/tune.txt timeout 60 build/bin/loom run examples/lang/model_parallel.loom --bind $B --iters 20 > $O/run.log 2>&1
echo "run rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^  [0-9]+ +(unscheduled|sequential|cublaslt|s[0-9]+|best)|winner|Spearman" $O/tune.log | head -30
grep -c "^gemm " $O/tune.txt; grep "^gemm " $O/tune.txt | head -3
grep -E "W = |total|GEMM" $O/run.log | head -4
