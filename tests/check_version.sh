#!/bin/sh
# check_version.sh - the version is written in one place, VERSION
# (MAJOR.MINOR.PATCH); every other place that states it must agree:
#   include/loom.h       LOOM_VERSION_MAJOR / _MINOR / _PATCH (C users' macros)
#   python/loom/VERSION  a link to VERSION: pyproject.toml's dynamic version
#                        and the binding's BINDING_VERSION read it
#   loom.pc              "Version: @VERSION@" in loom.pc.in, filled in by make
# and loom.pc links NCCL the way the Makefile does (its NCCL_LINK).
#
#   sh tests/check_version.sh LOOM_PC NCCL_LINK
# LOOM_PC: a loom.pc made from loom.pc.in as make install makes it.
# Run by make's header-check (part of every build, so of make test).
set -u
pc=$1 nccl_link=$2
fail=0
err() { echo "loom: version check: $*" >&2; fail=1; }

v=$(cat VERSION 2>/dev/null) || { echo "loom: version check: no VERSION file" >&2; exit 1; }
echo "$v" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+$' || { echo "loom: version check: VERSION holds \"$v\"; expected MAJOR.MINOR.PATCH" >&2; exit 1; }

h=$(for p in MAJOR MINOR PATCH; do sed -n "s/^#define LOOM_VERSION_$p \([0-9][0-9]*\)\$/\1/p" include/loom.h; done | paste -sd. -)
[ "$h" = "$v" ] || err "include/loom.h's LOOM_VERSION_MAJOR/MINOR/PATCH say $h, VERSION says $v: set them to VERSION's numbers"

py=$(cat python/loom/VERSION 2>/dev/null)
[ "$py" = "$v" ] || err "python/loom/VERSION holds \"$py\", VERSION \"$v\": it must be a link to ../../VERSION (ln -sf ../../VERSION python/loom/VERSION)"
grep -Eq '^dynamic = \["version"\]' python/pyproject.toml && grep -Eq '^version = \{ *file = "loom/VERSION" *\}' python/pyproject.toml ||
  err "python/pyproject.toml must take its version from loom/VERSION (dynamic = [\"version\"], [tool.setuptools.dynamic] version = { file = \"loom/VERSION\" })"
grep -Eq '^version *= *"' python/pyproject.toml && err "python/pyproject.toml states a version of its own; VERSION is the only place"

pv=$(sed -n 's/^Version: //p' "$pc")
[ "$pv" = "$v" ] || err "$pc says Version: $pv, VERSION $v (loom.pc.in must say Version: @VERSION@)"
grep -n '@[A-Z_]*@' "$pc" >/dev/null && err "$pc has placeholders left: $(grep -o '@[A-Z_]*@' "$pc" | sort -u | paste -sd' ' -)"
grep -E '^Libs:' "$pc" | grep -qF -- " $nccl_link " || err "$pc's Libs do not link NCCL as the Makefile does ($nccl_link)"
exit $fail
