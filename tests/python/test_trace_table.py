"""bench/diag/trace_table.py: LOOM_DEBUG=TRACE call lines to per-stage medians.

Synthetic lines of two ranks of one plan, with a warm-up call and a line of
another kind; the table must keep the logged stage order, skip the warm-up,
take medians per rank and ignore what is not a call line."""
import subprocess
import sys

from conftest import REPO

SCRIPT = REPO / "bench" / "diag" / "trace_table.py"


def line(rank, call, stages):
    body = " ".join(f"{s} {d}/{h}" for s, d, h in stages)
    return (f"loom 12 TRACE: ag_gemm rank {rank} call {call} [2048 x 1280 x 8192, LOOM_TP_COPY_ENGINE]: host 40.0 us; "
            f"device/host us: {body}")


def test_medians_in_logged_order_after_the_warm_up(tmp_path):
    log = [line(0, 0, [("begin", 30.0, 1), ("side.ready", 900.0, 2), ("gemm", 1000.0, 3), ("end", 1002.0, 4)])]
    for c, (r, g) in enumerate([(20.0, 150.0), (19.0, 160.0), (21.0, 170.0)], start=1):
        log.append(line(0, c, [("begin", 7.0, 1), ("side.ready", r, 2), ("gemm", g, 3), ("end", g + 3, 4)]))
        log.append(line(1, c, [("begin", 8.0, 1), ("side.ready", r + 1, 2), ("gemm", g + 10, 3), ("end", g + 13, 4)]))
    log.append("loom 12 TRACE: loom_malloc 67108864 B at 0x7f0551000000 (rank 0)")
    p = tmp_path / "trace.log"
    p.write_text("\n".join(log) + "\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "--skip", "1", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert len(out) == 2
    assert out[0].startswith("ag_gemm [2048 x 1280 x 8192, LOOM_TP_COPY_ENGINE] rank 0, 3 calls")
    assert out[0].endswith("begin 7.0  side.ready 20.0  gemm 160.0  end 163.0")
    assert out[1].endswith("begin 8.0  side.ready 21.0  gemm 170.0  end 173.0")
    r1 = subprocess.run([sys.executable, str(SCRIPT), "--skip", "1", "--rank", "1", str(p)], capture_output=True, text=True)
    assert r1.stdout.splitlines() == out[1:]


def test_no_call_lines_is_an_error(tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("nothing traced here\n")
    r = subprocess.run([sys.executable, str(SCRIPT), str(p)], capture_output=True, text=True)
    assert r.returncode == 1 and "no TRACE call lines" in r.stderr
