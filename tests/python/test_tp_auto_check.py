"""bench/tp_auto_check.py: AUTO judged per op and half on loom-bench TP JSON.

A synthetic run: two held-out shapes (AUTO 10% slower than sequential on
one, faster on the other), one fitting shape, one reference-model shape;
the check must count the held-out shape below the floor, list it, and
report the oracle (the best path measured) and a missed better path.
"""
import json
import subprocess
import sys

from conftest import REPO

SCRIPT = REPO / "bench" / "tp_auto_check.py"


def row(shape, impl, **t):
    r = {"op": "gemm_rs", "impl": impl, "shape": shape, "dtype": "bf16", "m": 2048, "n": 4096, "k": 1024,
         "bytes": 1, "world": 2, "fused_us": None, "auto_us": None, "seq_us": None, "overlap": None}
    r.update(t)
    return r


def run(tmp_path, rows, *args):
    p = tmp_path / "gemm_rs.json"
    p.write_text(json.dumps({"suite": "gemm_rs", "rows": rows}))
    return subprocess.run([sys.executable, str(SCRIPT), str(p), *args], capture_output=True, text=True)


def test_held_out_loss_is_counted_and_listed(tmp_path):
    h1, h2, f1 = "Llama-3-8B/o tp4 m=2048 H", "Falcon-180B/ffn_down tp8 m=1024 H", "Gemma-2-27B/o tp2 m=64 F"
    rows = [row(h1, "loom-auto:sm-copy", auto_us=110.0, seq_us=100.0), row(h1, "loom-sm", fused_us=110.0, overlap=-0.2),
            row(h1, "loom-at", fused_us=90.0, overlap=0.4),
            row(h2, "loom-auto:sm-copy", auto_us=80.0, seq_us=100.0), row(h2, "loom-sm", fused_us=80.0, overlap=0.8),
            row(f1, "loom-auto:sequential", auto_us=50.0, seq_us=50.0),
            row("llama3-70b tp2 m=64", "loom-auto:sequential", auto_us=20.0, seq_us=20.0)]
    r = run(tmp_path, rows)
    assert r.returncode == 0, r.stderr
    lines = {tuple(l.split()[:2]): l.split() for l in r.stdout.splitlines() if l.startswith("gemm_rs")}
    held = lines[("gemm_rs", "held-out")]
    assert held[2] == "2"                       # shapes
    assert held[5] == "1"                       # < floor: h1 only
    assert abs(float(held[4]) - 100 / 110) < 1e-3  # min seq/auto
    assert held[7] == "1"                       # missed: loom-at was 18% faster than AUTO on h1
    assert abs(float(held[8]) - (0.4 + 0.8) / 2) < 1e-6  # overlap of the best fused path at m >= 1024
    assert lines[("gemm_rs", "fitting")][5] == "0" and lines[("gemm_rs", "models")][2] == "1"
    assert "below 0.98: gemm_rs held-out %s loom-auto:sm-copy" % h1 in r.stdout


def test_no_auto_rows_is_an_error(tmp_path):
    r = run(tmp_path, [row("x tp2 m=64 H", "loom-sm", fused_us=1.0)])
    assert r.returncode == 1 and "no AUTO rows" in r.stdout
