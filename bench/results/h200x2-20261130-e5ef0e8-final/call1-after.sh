# both GPUs: the Python binding's GPU tests of loom.lang.compile (torch.compile(fullgraph=True), graphs, two
# ranks) and of the optimizers, on HEAD's libloom
t0=$(date +%s)
export LOOM_LIBRARY=$PWD/build/lib/libloom.so
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/python/gpu/test_lang_gpu.py tests/python/gpu/test_optim_gpu.py > $O/py-gpu.log 2>&1
echo "python gpu rc=$? at $(( $(date +%s) - t0 )) s"
tail -5 $O/py-gpu.log
timeout 100 build/tests/loom-test-gpu gpu_optim_ > $O/w2-optim.log 2>&1; echo "w2 optim rc=$? at $(( $(date +%s) - t0 )) s"
