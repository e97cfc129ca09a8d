#!/usr/bin/env python3
"""check_layers.py - loom's layers point down only.

    python3 tests/check_layers.py [--src SRC] [--obj OBJ]

SRC (default src/) holds the library's layers, OBJ (default
build/obj/src/) their compiled objects. Two checks:

  includes  every `#include "..."` of a file in a layer names a header of
            that layer or of a layer it may use;
  symbols   every symbol an object of a layer leaves undefined (nm -u)
            and another layer's object defines belongs to a layer it may
            use.

The layers, lowest first, and what each may use (loom.h, the public
header, everyone):

  core          nothing else
  baseline      core                          (cuBLASLt, NCCL sequential paths)
  gemm          core, baseline                (the GEMM engine)
  ops/common    core, gemm                    (device building blocks of the op families)
  ops/<family>  core, baseline, gemm, ops/common, and its own folder; never a
                sibling family's headers or internal symbols. A family may call
                another family's public functions (declared in include/loom.h),
                as a user would: gemm_ar's sequential path is loom_allreduce.
  lang          everything above except ref and testing

src/ref (CPU references) and src/testing (hooks into the internals) form
the test-support library, never part of libloom: they may use any layer,
and no layer may use them.

Exit status 0 when both checks pass; 1 with one line per violation.
"""
import argparse
import os
import re
import subprocess
import sys

FAMILY_RE = re.compile(r"^ops/([a-z_0-9]+)(/|$)")


def layer_of(path):
    """The layer of a path relative to src/ ('core', 'ops/tp', ...), or None."""
    parts = path.split("/")
    if parts[0] == "ops" and len(parts) > 2:
        return "ops/" + parts[1]
    if parts[0] in ("core", "baseline", "gemm", "lang", "ref", "testing"):
        return parts[0]
    return None


def may_use(user, used):
    """Whether layer `user` may depend on layer `used`."""
    if user == used:
        return True
    if used in ("ref", "testing"):
        return user in ("ref", "testing")
    order = {"core": set(), "baseline": {"core"}, "gemm": {"core", "baseline"},
             "ops/common": {"core", "gemm"}}
    if user in order:
        return used in order[user]
    if user.startswith("ops/"):
        return used in ("core", "baseline", "gemm", "ops/common")
    if user == "lang":
        return True
    return user in ("ref", "testing")


def library_files(src):
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith((".c", ".h", ".cu", ".cuh")):
                full = os.path.join(root, n)
                yield os.path.relpath(full, src).replace(os.sep, "/"), full


INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def check_includes(src):
    bad = []
    for rel, full in library_files(src):
        user = layer_of(rel)
        if user is None:
            continue
        text = open(full, encoding="utf-8", errors="replace").read()
        for inc in INCLUDE_RE.findall(text):
            target = inc
            # a sibling include ("error.h" inside core/) is the file's own folder
            if "/" not in inc and inc != "loom.h":
                target = os.path.dirname(rel) + "/" + inc
            if inc == "loom.h":
                continue
            used = layer_of(target)
            if used is None:
                continue  # system or tests/ headers are not layers
            if not may_use(user, used):
                bad.append(f"include: src/{rel} ({user}) includes \"{inc}\" ({used})")
    return bad


def nm(obj, undefined):
    args = ["nm", "-u" if undefined else "--defined-only", obj]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    syms = set()
    for line in out.splitlines():
        f = line.split()
        if not f:
            continue
        if undefined:
            syms.add(f[-1])
        elif len(f) >= 3 and f[1] in "TDBRVWtdbr" and f[1].isupper():
            syms.add(f[2])
    return syms


def public_functions(header):
    text = open(header, encoding="utf-8").read()
    return set(re.findall(r"\b(loom_[a-z0-9_]+)\s*\(", text))


def check_symbols(obj_root, public):
    objs = []
    for root, _, names in os.walk(obj_root):
        for n in sorted(names):
            if n.endswith(".o"):
                full = os.path.join(root, n)
                rel = os.path.relpath(full, obj_root).replace(os.sep, "/")
                lay = layer_of(rel)
                if lay:
                    objs.append((rel, lay, full))
    owner = {}
    for rel, lay, full in objs:
        for s in nm(full, False):
            owner.setdefault(s, (lay, rel))
    bad = []
    for rel, lay, full in objs:
        for s in sorted(nm(full, True)):
            if s not in owner:
                continue  # CUDA, NCCL, libc, ...
            used, where = owner[s]
            if may_use(lay, used):
                continue
            if lay.startswith("ops/") and used.startswith("ops/") and s in public:
                continue  # a sibling family's public function, as a user calls it
            bad.append(f"symbol: {rel} ({lay}) uses {s} from {where} ({used})")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default="src")
    ap.add_argument("--obj", default="build/obj/src")
    ap.add_argument("--header", default="include/loom.h")
    a = ap.parse_args()
    bad = check_includes(a.src)
    if os.path.isdir(a.obj):
        bad += check_symbols(a.obj, public_functions(a.header))
    else:
        bad.append(f"symbols: {a.obj} has no objects (build first)")
    for b in bad:
        print("check_layers: " + b)
    print(f"check_layers: {'FAILED, ' + str(len(bad)) + ' violations' if bad else 'every include and symbol points down'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
