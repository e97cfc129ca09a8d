"""The ctypes mirror of loom.h (loom/_structs.py) against the C compiler.

A C program generated from the Python declarations prints, for every
struct, sizeof and the offset of every field, for every enum member its
value, and for every initializer macro the value of every field; the test
compares each line with what ctypes says. A field, member or macro added to
loom.h and not to the binding (or the reverse) fails here, or does not
compile.
"""
import ctypes

from conftest import compile_c

from loom import _structs


def _c_value_format(ctype):
    """printf format and cast that print a field the way Python will."""
    if ctype in (ctypes.c_float, ctypes.c_double):
        return "%.9g", "(double)"
    if issubclass(ctype, ctypes.Array):
        return "%s", ""
    if ctype in (ctypes.c_void_p,) or issubclass(ctype, ctypes._Pointer):
        return "%llu", "(unsigned long long)(uintptr_t)"
    return "%lld", "(long long)"


def _py_value(v):
    if isinstance(v, float):
        return "%.9g" % v
    if isinstance(v, bytes):
        return v.decode()
    if v is None:
        return "0"
    if isinstance(v, ctypes._Pointer):
        return str(ctypes.cast(v, ctypes.c_void_p).value or 0)
    return str(int(v))


def _program():
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include <stdint.h>', '#include "loom.h"',
             'int main(void) {']
    expect = []
    for s in _structs.STRUCTS:
        c = s._c_name_
        lines.append(f'  printf("sizeof {c} %zu\\n", sizeof({c}));')
        expect.append(f"sizeof {c} {ctypes.sizeof(s)}")
        for name, ctype in s._fields_:
            lines.append(f'  printf("offsetof {c}.{name} %zu\\n", offsetof({c}, {name}));')
            expect.append(f"offsetof {c}.{name} {getattr(s, name).offset}")
            lines.append(f'  printf("sizeof {c}.{name} %zu\\n", sizeof((({c} *)0)->{name}));')
            expect.append(f"sizeof {c}.{name} {ctypes.sizeof(ctype)}")
        if s._c_init_:
            lines.append(f"  {{ {c} v = {s._c_init_};")
            inst = s()
            for name, ctype in s._fields_:
                fmt, cast = _c_value_format(ctype)
                lines.append(f'    printf("init {s._c_init_}.{name} {fmt}\\n", {cast}v.{name});')
                expect.append(f"init {s._c_init_}.{name} {_py_value(getattr(inst, name))}")
            lines.append("  }")
    for e in _structs.ENUMS:
        for member, cname in e.c_names().items():
            lines.append(f'  printf("enum {cname} %d\\n", (int){cname});')
            expect.append(f"enum {cname} {int(member)}")
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n", expect


def test_every_struct_enum_and_initializer_matches_the_header(tmp_path):
    import subprocess
    source, expect = _program()
    exe = compile_c(tmp_path, "layout", source)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(got) == len(expect)
    wrong = [f"C: {g!r}  ctypes: {e!r}" for g, e in zip(got, expect) if g != e]
    assert not wrong, "\n".join(wrong)


def test_the_header_has_no_enum_member_the_binding_lacks():
    """Every LOOM_* enum constant in loom.h's enums is mirrored (the C program
    above only checks the ones the binding has)."""
    import re
    from conftest import REPO
    text = (REPO / "include" / "loom.h").read_text()
    known = {c for e in _structs.ENUMS for c in e.c_names().values()}
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, re.S):
        for name in re.findall(r"^\s*(LOOM_[A-Z0-9_]+)\s*=", body, re.M):
            assert name in known, f"{name} (loom.h) has no member in loom/_structs.py"


def test_struct_size_is_set_by_the_constructor():
    for s in _structs.STRUCTS:
        names = [f[0] for f in s._fields_]
        if "struct_size" in names:
            assert s().struct_size == ctypes.sizeof(s)
            assert names[0] == "struct_size"


def test_unknown_field_is_refused():
    import pytest
    with pytest.raises(TypeError, match="no field 'mm'"):
        _structs.GemmDesc(mm=3)
