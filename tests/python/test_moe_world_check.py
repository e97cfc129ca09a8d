"""bench/diag/moe_world_check.sh: the MoE world's check matrix in one-GPU lanes.

A fake loom-test-gpu that fails where the combine's world cap is off
(LOOM_MOE_WORLD_COMB_PER_SM=0) and passes otherwise, and a fake nvidia-smi
of two GPUs: every variant runs its count, and each line counts the runs
that passed."""
import os
import stat
import subprocess

from conftest import REPO

SCRIPT = REPO / "bench" / "diag" / "moe_world_check.sh"

FAKE_TEST = r"""#!/bin/sh
echo "[ RUN  ] $1"
if [ "${LOOM_MOE_WORLD_COMB_PER_SM:-1}" = 0 ]; then
  echo "[ FAIL ] $1"; echo "0 passed, 1 failed, 0 skipped"; exit 1
fi
echo "[  OK  ] $1"; echo "1 passed, 0 failed, 0 skipped"
"""


def test_each_variant_counts_its_passing_runs(tmp_path):
    t = tmp_path / "loom-test-gpu"
    t.write_text(FAKE_TEST)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 0\necho 1\n")
    for p in (t, smi):
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, LOOM_TEST_GPU=str(t), PATH=f"{smi.parent}:{os.environ['PATH']}")
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT), str(out), "60"], capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    lines = dict(l.split(": ", 1) for l in r.stdout.splitlines())
    assert lines["fresh-cap1"] == "2 of 2 passed"
    assert lines["p255-cap1"] == "4 of 4 passed"
    assert lines["p255-cap0"] == "0 of 4 passed"
    assert lines["p255-cap0-share25"] == "0 of 2 passed"
    assert lines["p255-cap1-share100"] == "2 of 2 passed"
    assert lines["suite-p255"] == "1 of 1 passed"
