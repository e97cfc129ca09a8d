#!/usr/bin/env bash
# check_exports.sh LIB HEADER - libloom.so exports exactly the functions its
# public header declares: nothing internal (loom__*, loom_ref_*, test hooks)
# and nothing missing. Prints the difference and exits 1 otherwise.
set -u
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u)
declared=$(perl -0pe 's{/\*.*?\*/}{}gs' "$header" | grep -oE '\bloom_[a-z0-9_]+[[:space:]]*\(' | tr -d ' (' | sort -u)
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
if [ -n "$extra" ] || [ -n "$missing" ]; then
  [ -n "$extra" ] && echo "check_exports: $lib exports symbols loom.h does not declare:" $extra
  [ -n "$missing" ] && echo "check_exports: loom.h declares functions $lib does not export:" $missing
  exit 1
fi
echo "check_exports: $lib exports exactly the $(echo "$declared" | wc -l) functions of $header"
