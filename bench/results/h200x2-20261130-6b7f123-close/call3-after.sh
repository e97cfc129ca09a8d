# 1. The training step: bench/train/llama_tp.py spawns its own W ranks (call 2 ran it under torchrun by mistake:
#    two launchers, four ranks on two GPUs, killed at 200 s). Every variant, 50 steps; the ranks' stacks dumped
#    (SIGABRT, faulthandler) if it runs past 280 s. 2. AllGather+GEMM on held-out TP 8 shapes and
#    GEMM+ReduceScatter on held-out TP 2 shapes, m = 2048, with PyTorch's async-TP as the peer.
for l in $O/fresh-*.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l) $(grep -E '^    took' $l | tr -s ' ')"; done
( sleep 280; pkill -ABRT -f bench/train/llama_tp.py ) & w=$!
PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 PYTHONPATH=$PWD/python LOOM_LIBRARY=$PWD/build/lib timeout 300 \
  python3 bench/train/llama_tp.py --steps 50 --json $O/llama_tp.json > $O/llama_tp.log 2>&1; echo "llama_tp rc=$?"
kill $w 2>/dev/null
grep -vE "Warning|warn|enable_symm|^\s+(File|\^)" $O/llama_tp.log | tail -22
left=$(( (${TOTAL:-570} - 20 - ($(date +%s) - CALL_START)) / 2 ))
[ $left -gt 30 ] && timeout $left build/bin/loom-bench ag_gemm --set held-out --tp 8 --m 2048 --sample 10 --quick --results $O/ag8 > $O/ag8.log 2>&1; echo "ag8 rc=$? (limit $left s)"
left=$(( ${TOTAL:-570} - 15 - ($(date +%s) - CALL_START) ))
[ $left -gt 30 ] && timeout $left build/bin/loom-bench gemm_rs --set held-out --tp 2 --m 2048 --sample 10 --quick --results $O/rs2 > $O/rs2.log 2>&1; echo "rs2 rc=$? (limit $left s)"
