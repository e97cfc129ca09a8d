#!/usr/bin/env bash
# kernel_variants.sh - loom-bench built again with some library files
# compiled under other -D settings, for an A/B of compile-time knobs in one
# device call (the variants run beside the tree's own build/bin/loom-bench).
#
#   bash bench/diag/kernel_variants.sh FILE[,FILE...] NAME="-DX=1 -DY=2" [NAME=...]
#   bash bench/diag/kernel_variants.sh FILE[,FILE...] NAME="@COMMIT [-DX=1 ...]"
#
# @COMMIT: the FILEs as they were at COMMIT, compiled against that commit's
# src/ and include/ (exported to build/ab/NAME/tree, its folders searched
# first), linked with the tree's other objects: the "before" of a change to
# those files and the headers they include.
#
# Leaves build/ab/NAME/bin/loom-bench for each NAME: the tree's objects and
# libloom.a, with the FILEs' objects (.cu or .c) compiled with the given
# flags linked ahead of the archive (so the archive's copies of them are not
# pulled in). sm_90a machine code only. Run after `make` in the tree.
# The flags come first on the compiler's line, so -IDIR there puts DIR's
# headers ahead of the tree's (an older header: git show C:src/X > DIR/X).
set -eu
srcs=${1:?usage: kernel_variants.sh FILE[,FILE...] NAME=FLAGS ...}
shift
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
compile() { # SRC OUT DEFS [FROM]: the tree's own command for SRC, with DEFS, on FROM (default SRC), to OUT
  local cmd from=${4:-$1}
  cmd=$(make -s -n "build/obj/${1%.*}.o" -W "$1" | grep -m1 -E '^[^ ]*(nvcc|cc) ' |
        sed -e 's/-gencode=[^ ]*//g' -e 's/ -MMD -MP -c .*//' -e 's/ -c .*//')
  local cc=${cmd%% *} rest=${cmd#* }
  # DEFS first: an -I there is searched before the tree's own folders
  case $1 in *.cu) $cc $3 $rest -gencode=arch=compute_90a,code=sm_90a -c "$from" -o "$2" ;; *) $cc $3 $rest -c "$from" -o "$2" ;; esac
}
bench_objs=$(make -s -n build/bin/loom-bench -W tools/bench/main.c | grep -m1 '^cc -o build/bin/loom-bench' | sed -e 's/^cc -o build\/bin\/loom-bench //')
for nv in "$@"; do
  name=${nv%%=*}; defs=${nv#*=}
  out=build/ab/$name
  mkdir -p "$out/bin" "$out/obj"
  root=
  case $defs in @*)
    commit=${defs%% *}; commit=${commit#@}
    [ "$defs" = "@$commit" ] && defs= || defs=${defs#* }
    root=$out/tree; rm -rf "$root"; mkdir -p "$root"
    git archive "$commit" src include | tar -x -C "$root"
    defs="-I$root/src -I$root/include $defs" ;;
  esac
  objs=
  for src in ${srcs//,/ }; do
    o=$out/obj/$(basename "${src%.*}").o
    compile "$src" "$o" "$defs" "${root:+$root/$src}"
    objs="$objs $o"
  done
  cc -o "$out/bin/loom-bench" $objs $bench_objs
  echo "$(git rev-parse --short HEAD)+$name ($defs)" > "$out/COMMIT"
  echo "$out/bin/loom-bench: $srcs with $defs"
done
