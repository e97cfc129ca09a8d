# then, with what time is left: AllGather+GEMM held-out at TP = 8 and TP 2-8 with every path and AUTO (W = 2)
for l in $O/g-*.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l) $(grep -E '^\[ FAIL' $l | tr '\n' ' ')"; done
grep -h "SKIP" $O/g-*.log | head -20
B=build/bin/loom-bench
timeout 120 $B ag_gemm --set held-out --tp 8 --sample 40 --quick --peer none --results $O/tp8 > $O/tp8.log 2>&1; echo "tp8 rc=$?"
timeout 120 $B ag_gemm --set held-out --sample 60 --quick --peer none --results $O/tp2 > $O/tp2.log 2>&1; echo "tp2 rc=$?"
for r in tp8 tp2; do for j in $O/$r/ag_gemm-*.json; do [ -f $j ] && python3 bench/tp_auto_check.py $j > $O/$r-auto-check.txt 2>&1; grep -v "^below" $O/$r-auto-check.txt | tail -6; echo "below 0.98: $(grep -c "^below" $O/$r-auto-check.txt)"; done; done
