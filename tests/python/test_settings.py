"""Every LOOM_* environment setting the Python side reads is declared in
src/core/param.h (the library's settings) or support/tool_param.h (the
tools' own); `loom env` prints both."""
import re

from conftest import REPO


def test_python_settings_are_declared_in_param_h():
    declared = set()
    for table in (REPO / "src" / "core" / "param.h", REPO / "support" / "tool_param.h"):
        declared |= set(re.findall(r"X\(([A-Z0-9_]+),", table.read_text()))
    files = [*(REPO / "python").rglob("*.py"), *(REPO / "examples" / "python").rglob("*.py")]
    used = {}
    for f in files:
        for name in re.findall(r"""environ(?:\.get)?\(?\[?["']LOOM_([A-Z0-9_]+)["']""", f.read_text()):
            used.setdefault(name, f.relative_to(REPO))
    assert {"LIBRARY", "NCCL_LIBRARY", "NCCL_CHECK"} <= set(used)  # the scan itself finds them
    undeclared = {f"LOOM_{n}": str(f) for n, f in used.items() if n not in declared}
    assert not undeclared, f"read but declared in neither settings table: {undeclared}"
