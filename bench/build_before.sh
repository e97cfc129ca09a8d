#!/usr/bin/env bash
# build_before.sh - the previous build of loom, for "before" columns: the
# public libloom.so of commit COMMIT, built from a clean export of that commit
# (git archive; no work tree of it is touched).
#
#   bash bench/build_before.sh COMMIT [DIR]      (DIR default: build/before)
#
# Leaves DIR/libloom.so.0 and DIR/COMMIT (the commit it came from) and
# nothing else there (the exported tree is built in DIR.src). Run it
# where the repository's .git is (the build machine), then carry DIR to the
# GPU machine; `loom-bench embedding_a2a --before DIR/libloom.so.0` (or
# LOOM_BEFORE=DIR bash bench/device.sh) times both builds side by side in one
# process. Uses $MAKEFLAGS / CC / NVCC as given (e.g. ccache).
set -eu
commit=${1:?usage: build_before.sh COMMIT [DIR]}
dir=${2:-build/before}
src="$dir.src"
rm -rf "$src" "$dir"
mkdir -p "$src" "$dir"
git archive --format=tar "$commit" | tar -x -C "$src"
make -C "$src" ${CC:+CC="$CC"} ${NVCC:+NVCC="$NVCC"} build/lib/libloom.so
cp -L "$src/build/lib/libloom.so" "$dir/libloom.so.0"
git rev-parse --short "$commit" > "$dir/COMMIT"
echo "before: $(cat "$dir/COMMIT") -> $dir/libloom.so.0 ($(du -h "$dir/libloom.so.0" | cut -f1))"
