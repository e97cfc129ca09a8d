# both GPUs: loom-bench adam / lamb at W = 2 with the loom plans' chunk_elems varied (--chunk), each run with its
# own decomposition rows: does the chunk (4096 elements: two vectors a thread between a block's barriers) hold
# the hand-written step back against the generated kernel's grid-stride loop?
t0=$(date +%s)
run() { timeout 40 build/bin/loom-bench $1 --world 2 --peer none --no-check --dtype $2 --chunk $3 --results $O/json > $O/$1-$2-c$3.log 2>&1
        echo "$1 $2 chunk $3 rc=$? at $(( $(date +%s) - t0 )) s"; }
for c in 4096 16384 65536 8192 32768; do run adam fp32 $c; done
for c in 4096 16384 65536; do run adam mixed $c; done
for c in 4096 16384 65536; do run lamb fp32 $c; done
for c in 4096 16384; do run lamb mixed $c; done
for f in $O/*-c*.log; do echo "== $(basename $f .log)"; grep -E "^# (adam|lamb) loom-(auto|ar)" $f | awk '{print $3, $4, $5, $(NF-12)"="$(NF-11), "rs+upd+ag="$(NF-7)}' | cut -c1-110; done
