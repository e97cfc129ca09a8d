#!/usr/bin/env bash
# check_loom_tool.sh - the `loom` command runs on a machine without a GPU:
# `loom env` lists every setting of both tables (src/core/param.h and
# support/tool_param.h, each row once) and exits 0; `loom version` exits 0.
# Usage: bash tests/check_loom_tool.sh build/bin/loom
set -u
tool=$(realpath "${1:?usage: check_loom_tool.sh LOOM_BINARY}")
cd "$(dirname "$0")/.." || exit 1 # the headers it reads are the repository's
fail=0
out=$("$tool" env) || { echo "check_loom_tool: '$tool env' exited $?"; exit 1; }
for f in src/core/param.h support/tool_param.h; do
  for name in $(grep -oE '^ *X\([A-Z0-9_]+,' "$f" | sed -E 's/^ *X\(([A-Z0-9_]+),/\1/'); do
    c=$(printf '%s\n' "$out" | grep -c "^LOOM_${name} ")
    [ "$c" = 1 ] || { echo "check_loom_tool: LOOM_${name} ($f) listed $c times by 'loom env'"; fail=1; }
  done
done
rows=$(printf '%s\n' "$out" | grep -c '^LOOM_')
decl=$(grep -hoE '^ *X\([A-Z0-9_]+,' src/core/param.h support/tool_param.h | wc -l)
[ "$rows" = "$decl" ] || { echo "check_loom_tool: 'loom env' lists $rows settings, $decl are declared"; fail=1; }
"$tool" version > /dev/null || { echo "check_loom_tool: '$tool version' failed"; fail=1; }
[ $fail = 0 ] && echo "check_loom_tool: loom env lists the $decl settings, loom version runs"
exit $fail
