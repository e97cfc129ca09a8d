for f in $O/w1-allreduce-*.log; do echo "== $(basename $f .log)"
  grep -E "^# allreduce +(nccl|loom-auto|loom\+rmsnorm|loom\+epi)\S*/graph" $f | awk '{printf "%s %s %s; ", $3, $4$5, $6} /rmsnorm/ {print ""}'; done
