"""bench/diag/gpu_test_split.sh: make gpu-test as a two-GPU part and one-GPU lanes.

A fake loom-test-gpu (a shell script: `--list` with the runner's filter
forms, and runs that print the runner's lines) and a fake nvidia-smi of two
GPUs: every name must run exactly once, the two-GPU tests in the first
part, the worlds and the rest in lanes; a failure is listed, and with a
lane deadline of 0 the lanes' names are reported as not finished; PARTS runs only the parts
asked for, and REST_SLOTS runs several rest jobs on a GPU at once."""
import os
import stat
import subprocess

from conftest import REPO

SCRIPT = REPO / "bench" / "diag" / "gpu_test_split.sh"
NAMES = ["gemm_a", "gpu_coll_x_w2", "gpu_coll_y", "gpu_world_tp_w4", "gpu_world_auto_w2", "gpu_tp_z_w2", "gpu_bad",
         "gpu_peer_v_2gpu"]

FAKE_TEST = r"""#!/usr/bin/env python3
import sys
names = %r
def match(f, n):
    pos = hit = 0
    for it in f.split(","):
        if it.startswith("!"):
            if it[1:] in n: return False
        elif it.startswith("="):
            pos += 1; hit |= n == it[1:]
        elif it:
            pos += 1; hit |= it in n
    return pos == 0 or hit
a = sys.argv[1:]
if a and a[0] == "--list":
    got = [n for n in names if len(a) < 2 or match(a[1], n)]
    print("\n".join(got)) if got else None
    sys.exit(0 if got else 2)
with open(%r, "a") as log:
    for n in names:
        if not a or match(a[0], n):
            log.write(n + "\n")
            print("[ RUN  ] " + n)
            print(("[ FAIL ] " if n == "gpu_bad" else "[  OK  ] ") + n)
"""


def setup(tmp_path):
    runs = tmp_path / "runs.txt"
    t = tmp_path / "loom-test-gpu"
    t.write_text(FAKE_TEST % (sorted(NAMES), str(runs)))
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 0\necho 1\n")
    for p in (t, smi):
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, LOOM_TEST_GPU=str(t), JOB_TESTS="2", PATH=f"{smi.parent}:{os.environ['PATH']}")
    return runs, env


def test_every_name_runs_once_two_gpu_part_first(tmp_path):
    runs, env = setup(tmp_path)
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT), str(out), "60", "60"], capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    ran = runs.read_text().split()
    assert sorted(ran) == sorted(NAMES)
    two = (out / "two-gpu.log").read_text()
    assert "gpu_coll_x_w2" in two and "gpu_tp_z_w2" in two and "gpu_peer_v_2gpu" in two and "world" not in two
    assert "make gpu-test (split, parts two,worlds,rest): 7 passed, 1 failed, 0 skipped" in r.stdout
    assert "[ FAIL ] gpu_bad" in r.stdout
    assert "not finished (never started, or cut by a limit): 0 of 8" in r.stdout


def test_a_lane_deadline_leaves_names_unfinished(tmp_path):
    runs, env = setup(tmp_path)
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT), str(out), "60", "0"], capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert sorted(runs.read_text().split()) == ["gpu_coll_x_w2", "gpu_peer_v_2gpu", "gpu_tp_z_w2"]
    assert "not finished (never started, or cut by a limit): 5 of 8" in r.stdout


def test_parts_run_only_what_they_name(tmp_path):
    runs, env = setup(tmp_path)
    out = tmp_path / "out"
    env = dict(env, PARTS="worlds")
    r = subprocess.run(["bash", str(SCRIPT), str(out), "60", "60"], capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert sorted(runs.read_text().split()) == ["gpu_world_auto_w2", "gpu_world_tp_w4"]
    assert "parts worlds): 2 passed, 0 failed" in r.stdout
    assert "not finished (never started, or cut by a limit): 0 of 2" in r.stdout


def test_rest_slots_run_every_rest_name_once(tmp_path):
    runs, env = setup(tmp_path)
    out = tmp_path / "out"
    env = dict(env, PARTS="rest", REST_SLOTS="3", JOB_TESTS="1")
    r = subprocess.run(["bash", str(SCRIPT), str(out), "60", "60"], capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert sorted(runs.read_text().split()) == ["gemm_a", "gpu_bad", "gpu_coll_y"]
    assert "parts rest): 2 passed, 1 failed" in r.stdout
    lanes = (out / "lanes.txt").read_text().splitlines()
    assert len(lanes) == 3
