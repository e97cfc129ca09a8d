"""Every LOOM_* environment setting the Python side reads is declared in
src/core/param.h (the one list of settings, printed by `loom env`), or is
one of the tools' own that README.md names (LOOM_COMMIT, LOOM_TEST_*)."""
import re

from conftest import REPO


def test_python_settings_are_declared_in_param_h():
    declared = set(re.findall(r"X\(([A-Z0-9_]+),", (REPO / "src" / "core" / "param.h").read_text()))
    files = [*(REPO / "python").rglob("*.py"), *(REPO / "examples" / "python").rglob("*.py")]
    used = {}
    for f in files:
        for name in re.findall(r"""environ(?:\.get)?\(?\[?["']LOOM_([A-Z0-9_]+)["']""", f.read_text()):
            used.setdefault(name, f.relative_to(REPO))
    assert {"LIBRARY", "NCCL_LIBRARY", "NCCL_CHECK"} <= set(used)  # the scan itself finds them
    readme = (REPO / "README.md").read_text()
    tools = {n for n in used if n in ("COMMIT", "TEST_SEED", "TEST_TIMEOUT_S") and f"LOOM_{n}" in readme}
    undeclared = {f"LOOM_{n}": str(f) for n, f in used.items() if n not in declared | tools}
    assert not undeclared, f"read but not declared in src/core/param.h: {undeclared}"
