# both GPUs: the collectives' tests (W = 1 and 2); loom-bench allreduce / reduce_scatter / all_gather in this build
# (tiled LL lines, fp32 LL to a quarter) and in llgrp (coll_kernels.cu and coll.c as at 354065d: a group's lines
# together), bf16 and fp32; AllReduce bf16 in full with PyTorch's peers; MoE dispatch / combine at decode
t0=$(date +%s)
timeout 150 build/tests/loom-test-gpu gpu_coll_ > $O/w2-coll.log 2>&1; echo "w2 coll rc=$? at $(( $(date +%s) - t0 )) s"
b() { local d=build; [ $1 = build ] || d=build/ab/$1; local tag=$1-$2-$3; shift 3
      timeout 150 $d/bin/loom-bench "$@" --world 2 --results $O/json-$tag > $O/$tag.log 2>&1
      echo "$tag rc=$? at $(( $(date +%s) - t0 )) s"; }
S16=4K,16K,64K,128K,256K,512K,768K,1M,2M,4M,16M
b build allreduce bf16-peer allreduce --max-bytes 1G
b llgrp allreduce bf16 allreduce --peer none --sizes $S16
b build allreduce fp32 allreduce --peer none --dtype fp32 --sizes 4K,16K,64K,96K,128K,192K,256K,384K,512K,1M,2M,4M,16M
b llgrp allreduce fp32 allreduce --peer none --dtype fp32 --sizes 4K,16K,64K,96K,128K,192K,256K,384K,512K,1M,2M,4M,16M
for op in reduce_scatter all_gather; do
  b build $op bf16 $op --sizes $S16; b llgrp $op bf16 $op --sizes $S16
  b build $op fp32 $op --dtype fp32 --sizes $S16; b llgrp $op fp32 $op --dtype fp32 --sizes $S16
done
b build moe decode moe --tokens 128 --peer none
grep -E "passed|FAIL" $O/w2-coll.log | tail -4
for f in $O/*-allreduce-*.log $O/*-reduce_scatter-*.log $O/*-all_gather-*.log; do echo "== $(basename $f .log)"
  grep -E "^# \S+ +(nccl|loom-auto\S*|loom-ll|loom-push)(/graph\S*)? " $f | awk '{printf "%s %s%s %s | ", $3, $4, $5, $6} /graph/ && /push|loom-auto/ {print ""}'; echo; done 2>/dev/null | cut -c1-400
grep -E "^# moe" $O/build-moe-decode.log | head -20
