# The W = 2 tensor-parallel tests with the new default; the training step; AUTO on 40 held-out TP 8 shapes (every m).
for l in $O/world-tp.log $O/tp-one-rank.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l)"; grep "^\[ FAIL" $l; done
timeout 200 build/tests/loom-test-gpu 'gpu_tp_ag,gpu_tp_checks,gpu_tp_bad_arguments,gpu_tp_thousand_calls_alternating,=gpu_tp_tune_records_a_choice_plans_take_it_w2,=gpu_tp_loom_tune_tunes_at_the_first_plan_w2' > $O/w2-tp.log 2>&1
echo "w2-tp: $(grep -E 'passed, ' $O/w2-tp.log)"; grep -E "^\[ FAIL|    FAIL" $O/w2-tp.log | head -5
( sleep 150; pkill -ABRT -f bench/train/llama_tp.py ) & w=$!
PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 PYTHONPATH=$PWD/python LOOM_LIBRARY=$PWD/build/lib timeout 170 \
  python3 bench/train/llama_tp.py --steps 50 --variants loom,loom-sequential,limit,torch-async-tp --json $O/llama_tp.json > $O/llama_tp.log 2>&1; echo "llama_tp rc=$?"
kill $w 2>/dev/null
grep -E "^\| |^loss|losses" $O/llama_tp.log
left=$(( ${TOTAL:-570} - 20 - ($(date +%s) - CALL_START) ))
[ $left -gt 40 ] && timeout $left build/bin/loom-bench ag_gemm --set held-out --tp 8 --sample 40 --quick --peer none --paths ce,sm,dec,auto --results $O/tp8 > $O/tp8.log 2>&1; echo "tp8 rc=$? (limit $left s)"
for j in $O/tp8/ag_gemm-*.json; do [ -f $j ] && python3 bench/tp_auto_check.py $j > $O/tp8-auto-check.txt 2>&1; grep -v "^below" $O/tp8-auto-check.txt | tail -6; done
