#!/usr/bin/env python3
"""check_layers.py - loom's layers point down only.

    python3 tests/check_layers.py [--src SRC] [--obj OBJ] [--header H] [--root ROOT] [--makefile MK]

SRC (default src/) holds the library's layers, OBJ (default
build/obj/src/) their compiled objects, ROOT (default: the folder above
SRC) the repository and MK (default ROOT/Makefile) the Makefile whose
include flags compile them. Four checks:

  includes  every #include of a file in a layer, "..." and <...> alike, is
            resolved as the compiler resolves it: a "..." include first
            beside the including file, then in every -I folder of the
            Makefile's INCS, CFLAGS and NVFLAGS, in order. The header it
            lands on must belong to that layer or to a layer it may use, or
            be include/ (the public header), or lie outside the repository
            (system, CUDA, NCCL). A header elsewhere in the repository
            (support/, tools/, tests/, ...) is refused, whether a relative
            path ("../../support/x.h") or an -I folder (-I. reaches the
            whole tree) leads there; so is a "..." path that steps out of
            src/ where no file is.
  symbols   every symbol an object of a layer leaves undefined (nm -u) and
            another layer's object defines belongs to a layer it may use
            (a strong definition owns a symbol over weak ones).
  weak      a weak definition that another layer's strong one overrides
            makes the weak definer's callers run that layer's code: the
            weak definer's layer must be one that may use the other.
  names     a loom__ function that a file of SRC defines for the others
            (not static) is defined in no other file, static or not: a
            static namesake links without complaint, gives the name a
            second meaning and sends every reader to the wrong one.

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
  lang          everything above except codegen, ref and testing
  codegen       everything above except ref and testing (code generation with
                NVRTC and the execution of loom programs: lang's lowered form
                turned into kernels, run on the GEMM engine and the ops'
                device building blocks)

src/ref (CPU references) and src/testing (hooks into the internals) form
the test-support library with support/, never part of libloom: they may use
any layer and support/'s headers, and no layer may use them.

Exit status 0 when every check passes; 1 with one line per violation.
"""
import argparse
import os
import re
import subprocess
import sys

TEST_SUPPORT = ("ref", "testing")


def layer_of(path):
    """The layer of a path relative to src/ ('core', 'ops/tp', ...), or None."""
    parts = path.split("/")
    if parts[0] == "ops" and len(parts) > 2:
        return "ops/" + parts[1]
    if parts[0] in ("core", "baseline", "gemm", "lang", "codegen") + TEST_SUPPORT:
        return parts[0]
    return None


def may_use(user, used):
    """Whether layer `user` may depend on layer `used`."""
    if user == used:
        return True
    if used in TEST_SUPPORT:
        return user in TEST_SUPPORT
    order = {"core": set(), "baseline": {"core"}, "gemm": {"core", "baseline"},
             "ops/common": {"core", "gemm"}}
    if user in order:
        return used in order[user]
    if user.startswith("ops/"):
        return used in ("core", "baseline", "gemm", "ops/common")
    if user == "lang":
        return used != "codegen"
    if user == "codegen":
        return True
    return user in TEST_SUPPORT


def library_files(src):
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith((".c", ".h", ".cu", ".cuh")):
                full = os.path.join(root, n)
                yield os.path.relpath(full, src).replace(os.sep, "/"), full


# ---- includes ----------------------------------------------------------------

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
FLAGS_RE = re.compile(r"^[ \t]*(?:[^#=\n]*:[ \t]*)?(?:INCS|CFLAGS|NVFLAGS)[ \t]*[:+?]?=(.*)$", re.M)
INC_FLAG_RE = re.compile(r"-(?:I|iquote|isystem|idirafter)[ \t]*(\S+)")


def include_dirs(makefile, root):
    """The folders (absolute) the library's sources are compiled with: every
    literal -I (-iquote, -isystem, -idirafter) of the Makefile's INCS, CFLAGS
    and NVFLAGS lines, relative to root, in order. Folders made of make
    variables ($(NCCL_INC), $(CUDA_HOME)/include) lie outside the tree."""
    text = open(makefile, encoding="utf-8").read().replace("\\\n", " ")
    dirs = []
    for line in FLAGS_RE.findall(text):
        for d in INC_FLAG_RE.findall(line):
            if "$" not in d:
                full = os.path.normpath(os.path.join(root, d))
                if full not in dirs:
                    dirs.append(full)
    return dirs


def within(path, folder):
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(folder)]) == os.path.abspath(folder)


def resolve(form, inc, including_file, idirs, src):
    """The file an include names, as the compiler finds it; for a "..."
    include that no folder holds but whose path steps out of src, that path;
    else None (a header of the system, CUDA or NCCL)."""
    here = os.path.dirname(os.path.abspath(including_file))
    for d in ([here] if form == '"' else []) + idirs:
        p = os.path.normpath(os.path.join(d, inc))
        if os.path.isfile(p):
            return p
    beside = os.path.normpath(os.path.join(here, inc))
    return beside if form == '"' and not within(beside, src) else None


def include_violation(rel, user, form, inc, target, src, root):
    """One line if layer `user`'s file src/rel may not include target, else None."""
    shown = f'"{inc}"' if form == '"' else f"<{inc}>"
    if target is None or not within(target, root):
        return None  # system, CUDA, NCCL
    if within(target, src):
        used = layer_of(os.path.relpath(target, src).replace(os.sep, "/"))
        if used is None or may_use(user, used):
            return None
        return f"include: src/{rel} ({user}) includes {shown} ({used})"
    where = os.path.relpath(target, root).replace(os.sep, "/")
    if where.startswith("include/"):
        return None  # the public header
    if where.startswith("support/") and user in TEST_SUPPORT:
        return None  # the test-support library's other half
    return f"include: src/{rel} ({user}) includes {shown}, which resolves outside src/ to {where}"


def check_includes(src, root, idirs):
    bad = []
    for rel, full in library_files(src):
        user = layer_of(rel)
        if user is None:
            continue
        text = open(full, encoding="utf-8", errors="replace").read()
        for form, inc in INCLUDE_RE.findall(text):
            line = include_violation(rel, user, form, inc, resolve(form, inc, full, idirs, src), src, root)
            if line:
                bad.append(line)
    return bad


# ---- symbols -------------------------------------------------------------------

def nm_all(objs):
    """{object: ({defined symbol: type letter}, {undefined symbols})} from
    one nm run over every object (T D B R strong, W V weak definitions;
    U w v undefined, weak references included)."""
    out = subprocess.run(["nm", "-A", *objs], capture_output=True, text=True)
    if out.returncode != 0 and not out.stdout:
        raise SystemExit(f"check_layers: nm failed: {out.stderr.strip()}")
    syms = {o: ({}, set()) for o in objs}
    for line in out.stdout.splitlines():
        obj, _, rest = line.partition(":")
        f = rest.split()
        if obj not in syms or len(f) < 2:
            continue
        if f[-2] in "Uwv":
            syms[obj][1].add(f[-1])
        elif len(f) >= 3 and f[-2] in "TDBRVW":
            syms[obj][0][f[-1]] = f[-2]
    return syms


def public_functions(header):
    text = open(header, encoding="utf-8").read()
    return set(re.findall(r"\b(loom_[a-z0-9_]+)\s*\(", text))


def layer_objects(obj_root):
    """[(rel, layer, path, defined, undefined)] of the objects in layers."""
    objs = []
    for root, _, names in os.walk(obj_root):
        for n in sorted(names):
            if n.endswith(".o"):
                full = os.path.join(root, n)
                rel = os.path.relpath(full, obj_root).replace(os.sep, "/")
                lay = layer_of(rel)
                if lay:
                    objs.append((rel, lay, full))
    syms = nm_all([full for _, _, full in objs]) if objs else {}
    return [(rel, lay, full) + syms[full] for rel, lay, full in objs]


def definitions(objs):
    """{symbol: ([(layer, rel) strong], [(layer, rel) weak])}."""
    defs = {}
    for rel, lay, _, defined, _ in objs:
        for s, kind in defined.items():
            defs.setdefault(s, ([], []))[kind in "VW"].append((lay, rel))
    return defs


def check_symbols(objs, defs, public):
    owner = {s: (strong or weak)[0] for s, (strong, weak) in defs.items()}
    bad = []
    for rel, lay, _, _, undefined in objs:
        for s in sorted(undefined):
            if s not in owner:
                continue  # CUDA, NCCL, libc, ...
            used, where = owner[s]
            if may_use(lay, used):
                continue
            if lay.startswith("ops/") and used.startswith("ops/") and s in public:
                continue  # a sibling family's public function, as a user calls it
            bad.append(f"symbol: {rel} ({lay}) uses {s} from {where} ({used})")
    return bad


def check_weak(defs):
    """A weak definition overridden from a layer its own may not use."""
    bad = []
    for s in sorted(defs):
        strong, weak = defs[s]
        for wl, wrel in weak:
            for sl, srel in strong:
                if not may_use(wl, sl):
                    bad.append(f"weak: {s} defined weak in {wrel} ({wl}) is overridden by {srel} ({sl}): "
                               f"{wl}'s calls of it run {sl}'s code")
    return bad


# ---- names -------------------------------------------------------------------

NAME_RE = re.compile(r"^[A-Za-z_].*?\b(loom__[A-Za-z0-9_]+)[ \t]*\(", re.M)


def defined_functions(text):
    """{name: static?} of the loom__ functions a C/CUDA file defines at file
    scope: a line starting in column 0 that names one before its '(' and
    whose declaration reaches a '{' before any ';'."""
    names = {}
    for m in NAME_RE.finditer(text):
        head = m.group(0)
        if head.startswith(("typedef", "return", "#")):
            continue
        depth, i = 0, m.end() - 1
        while i < len(text):
            c = text[i]
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and c in ";{=":
                break
            i += 1
        if i < len(text) and text[i] == "{":
            start = text.rfind("\n", 0, max(m.start() - 1, 0)) + 1  # the line before: a split signature
            names[m.group(1)] = bool(re.search(r"\bstatic\b", text[start:m.start()] + head))
    return names


def check_names(src):
    where = {}
    for rel, full in library_files(src):
        for n, static in defined_functions(open(full, encoding="utf-8", errors="replace").read()).items():
            where.setdefault(n, []).append(("src/" + rel, static))
    bad = []
    for n, files in sorted(where.items()):
        if len(files) > 1 and any(not static for _, static in files):
            shown = ", ".join(f"{f}{' (static)' if static else ''}" for f, static in files)
            bad.append(f"name: {n} is defined in {len(files)} files with two meanings: {shown}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default="src")
    ap.add_argument("--obj", default="build/obj/src")
    ap.add_argument("--header", default="include/loom.h")
    ap.add_argument("--root", default=None, help="the repository (default: the folder above --src)")
    ap.add_argument("--makefile", default=None, help="its Makefile (default: ROOT/Makefile)")
    a = ap.parse_args()
    src = os.path.abspath(a.src)
    root = os.path.abspath(a.root) if a.root else os.path.dirname(src)
    makefile = a.makefile or os.path.join(root, "Makefile")
    bad = []
    if os.path.isfile(makefile):
        bad += check_includes(src, root, include_dirs(makefile, root))
    else:
        bad.append(f"includes: {makefile} is missing: the include folders the library is built with are unknown")
    bad += check_names(src)
    if os.path.isdir(a.obj):
        objs = layer_objects(a.obj)
        defs = definitions(objs)
        bad += check_symbols(objs, defs, public_functions(a.header)) + check_weak(defs)
    else:
        bad.append(f"symbols: {a.obj} has no objects (build first)")
    for b in bad:
        print("check_layers: " + b)
    print(f"check_layers: {'FAILED, ' + str(len(bad)) + ' violations' if bad else 'every include and symbol points down'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
