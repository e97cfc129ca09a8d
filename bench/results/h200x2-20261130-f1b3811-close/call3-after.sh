# both GPUs: the tensor-parallel suite at W = 2 (the send/receive helper and the pure step functions of the
# decomposed path ran on the host only until now), after the one-GPU jobs
timeout ${W2_LIMIT:-200} build/tests/loom-test-gpu gpu_tp_ > $O/w2-gpu_tp.log 2>&1; echo "w2 gpu_tp_ rc=$?"
