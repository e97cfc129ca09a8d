# Call 4 (2x H200): make gpu-test, part 1: the two-GPU tests (names with "_w2", the one-GPU worlds' apart), both
# GPUs visible (one process per GPU). Part 2, call 5: every other test, in one-GPU lanes.
timeout 545 build/tests/loom-test-gpu '_w2,!world' > $O/gpu-test-w2.log 2>&1; echo "gpu-test part 1 rc=$?"
grep -E "passed, " $O/gpu-test-w2.log; grep -E "^\[ FAIL" $O/gpu-test-w2.log; grep -E "^\[ (RUN|SKIP)" $O/gpu-test-w2.log | tail -2
echo "OK lines: $(grep -cE '^\[  OK  \]' $O/gpu-test-w2.log)"
