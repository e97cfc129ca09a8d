# stages.sh [BUILD...]: each stage's median time (`loom run --world 1 --iters 50`) of adam, lamb (N = 2^20, best)
# and layer_norm (T = 1024, H = 4096, fused) in each build of build/ab (default: 768dad5 now)
builds=${*:-768dad5 now}
for b in $builds; do
  for a in "adam.loom --schedule best --bind N=1048576" "lamb.loom --schedule best --bind N=1048576" \
           "layer_norm.loom --schedule fused --bind T=1024,H=4096"; do
    set -- $a
    echo "== $b $a"
    build/ab/$b/bin/loom run examples/lang/$a --world 1 --iters 50 2>&1 | tail -15
  done
done > $O/stages.log 2>&1
