"""The parts of the binding's tools, examples and GPU tests that can be
checked without a GPU: every file compiles, the benchmark's C loop builds
and calls what it is given, the NCCL probe's verdicts; and of loom-bench:
what it includes of loom, where it finds its peers, and that `make bench`
without a GPU stops before building anything."""
import ctypes
import os
import py_compile
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, compiler

PY_FILES = sorted(
    [*(REPO / "python").rglob("*.py"), *(REPO / "examples" / "python").rglob("*.py"),
     *(REPO / "tests" / "python").rglob("*.py"), *(REPO / "bench" / "peers").glob("*.py")])


@pytest.mark.parametrize("path", PY_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_python_file_compiles(path, tmp_path):
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)


def test_the_c_loop_calls_the_function_it_is_given_n_times(tmp_path):
    out = tmp_path / "libloop.so"
    subprocess.run([compiler(), "-O2", "-shared", "-fPIC", "-Wall", "-Werror",
                    str(REPO / "python" / "tools" / "c_loop.c"), "-o", str(out)], check=True)
    loop = ctypes.CDLL(str(out)).loom_c_loop_gemm
    vp = ctypes.c_void_p
    loop.argtypes = [vp, vp, vp, vp, vp, vp, vp, ctypes.c_int]
    seen = []
    FN = ctypes.CFUNCTYPE(ctypes.c_int, vp, vp, vp, vp, vp, vp)

    @FN
    def fake_gemm(desc, a, b, c, bias, stream):
        seen.append((desc, a, b, c, bias, stream))
        return 3 if len(seen) == 5 else 0   # the fifth call fails
    fp = ctypes.cast(fake_gemm, vp).value
    assert loop(fp, 1, 2, 3, 4, None, 6, 3) == 0 and len(seen) == 3
    assert seen[0] == (1, 2, 3, 4, None, 6)
    assert loop(fp, 1, 2, 3, 4, None, 6, 10) == 3 and len(seen) == 5  # stops at the failure


def _probe():
    sys.path.insert(0, str(REPO / "python" / "tools"))
    import nccl_probe
    return nccl_probe


def _res(*ranks):
    return {"scenario": "x", "env": {}, "ranks": list(ranks)}


def _rank(steps, exit=0, **kw):
    return {"rank": 0, "exit": exit, "steps": [{"step": s, "ok": ok, **({"error": e} if e else {})}
                                               for s, ok, e in steps], **kw}


def test_probe_verdicts():
    v = _probe().verdict
    ok = [("libraries", True, None), ("loom.Comm.from_process_group", True, None), ("loom.gemm vs torch", True, None)]
    assert v(_res(_rank(ok), _rank(ok))) == "works"
    refused = [("loom.Comm.from_process_group", False, "NcclMismatchError: libloom was built against 2.28.3")]
    assert v(_res(_rank(refused), _rank(refused))).startswith("refused: NcclMismatchError")
    failed = [("loom.Comm.from_process_group", False, "CudaError: boom")]
    assert v(_res(_rank(failed), _rank(ok))).startswith("comm FAILED")
    wrong = ok + [("loom.embedding_a2a vs torch", False, "AssertionError: max error 3")]
    assert v(_res(_rank(wrong), _rank(ok))) == "WRONG: loom.embedding_a2a vs torch"
    assert v(_res(_rank(ok), _rank([], exit="timeout"))).startswith("HANG")
    assert v(_res(_rank(ok), _rank([], exit=-11, crash=-11, output_tail=""))).startswith("CRASH (exit -11)")


def test_loom_bench_moe_lists_its_shapes_and_floors_without_a_gpu():
    """`loom-bench moe --list` prints every shape with the rows the busiest
    rank sends off-rank under the benchmark's routing and the time they need
    on the link, without touching CUDA."""
    exe = _loom_bench()
    r = subprocess.run([str(exe), "moe", "--list"], capture_output=True, text=True, timeout=60,
                       env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith(("Mixtral", "Qwen3", "DeepSeek"))]
    assert len(rows) == 12  # 3 models x 128 / 4096 tokens x uniform / Zipf
    # name, T=, routing, H, E, top, rows off, MiB, floor us
    ds = [x for x in rows if x[0] == "DeepSeek-V3" and x[1] == "T=4096" and x[2] == "uniform"][0]
    assert ds[3:6] == ["7168", "256", "8"]
    off = int(ds[6])
    assert 4096 * 8 // 2 * 0.9 < off < 4096 * 8 // 2 * 1.1  # uniform: about half of each rank's rows leave it
    assert float(ds[7]) == pytest.approx(off * 7168 * 2 / 1048576, rel=1e-3)
    assert float(ds[8]) == pytest.approx(off * 7168 * 2 / 360e3, rel=1e-3)
    r = subprocess.run([str(exe), "moe", "--list", "--world", "4", "--model", "Mixtral-8x7B", "--tokens", "64"],
                       capture_output=True, text=True, timeout=60, env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("Mixtral")]
    assert [x[:3] for x in rows] == [["Mixtral-8x7B", "T=64", "uniform"], ["Mixtral-8x7B", "T=64", "zipf"]]


def test_loom_bench_gemm_ar_lists_its_shapes_without_a_gpu():
    """`loom-bench gemm_ar --list` prints CoCoNet's shapes and their floors
    and exits 0 without touching CUDA (the binary next to the library under
    test; skipped where it was not built)."""
    exe = _loom_bench()
    r = subprocess.run([str(exe), "gemm_ar", "--list"], capture_output=True, text=True, timeout=60,
                       env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith(("mlp-fc2", "attn-out"))]
    # layer, B, m, n, k, GFLOP: the MLP's second GEMM and the attention output at B = 8, 16, split 2 ways
    assert [(x[0], x[1], x[2], x[3], x[4]) for x in rows] == [
        ("mlp-fc2", "8", "8192", "3072", "6144"), ("mlp-fc2", "16", "16384", "3072", "6144"),
        ("attn-out", "8", "8192", "3072", "1536"), ("attn-out", "16", "16384", "3072", "1536")]
    assert float(rows[0][5]) == pytest.approx(2 * 8192 * 3072 * 6144 / 1e9, rel=1e-3)
    r = subprocess.run([str(exe), "gemm_ar", "--list", "--tp", "4", "--layer", "attn", "--batch", "16"],
                       capture_output=True, text=True, timeout=60, env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split()[:5] for line in r.stdout.splitlines() if line.startswith(("mlp-fc2", "attn-out"))]
    assert rows == [["attn-out", "16", "16384", "3072", "768"]], r.stdout


def _loom_bench():
    from conftest import libloom_path
    exe = Path(libloom_path()).resolve().parent.parent / "bin" / "loom-bench"
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    return exe


def test_loom_bench_uses_the_public_api_and_bench_api_only():
    """tools/bench includes loom.h, src/testing/bench_api.h (the one internal
    header for benchmarks), the test-support library's own headers (ref/,
    support/) and its own; it names no loom__ internal and reads no plan
    state."""
    own = {p.name for p in (REPO / "tools" / "bench").glob("*.h")}
    allowed = {"loom.h", "testing/bench_api.h", "ref/ref.h"} | own
    files = sorted((REPO / "tools" / "bench").glob("*.[ch]")) + sorted((REPO / "tools" / "bench").glob("*.cu"))
    assert files
    for f in files:
        text = f.read_text()
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            assert inc in allowed or inc.startswith("support/"), f"{f.name} includes {inc}"
        internal = sorted(set(re.findall(r"\bloom__\w+", text)))
        assert not internal, f"{f.name} names loom internals: {internal}"
        assert "op_state" not in text, f"{f.name} reads a plan's state"


def _make_bench(tmp_path, nvidia_smi, env_extra=None):
    """`make bench` with a fake nvidia-smi (its shell body), building into a
    fresh folder with compilers that fail at once."""
    make = shutil.which("make")
    if not make:
        pytest.skip("no make")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + nvidia_smi + "\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    build = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS")) and k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = f"{fake}:/usr/bin:/bin"
    env.update(env_extra or {})
    r = subprocess.run([make, "-C", str(REPO), "bench", f"BUILD={build}", "CC=false", "NVCC=/bin/false"],
                       capture_output=True, text=True, timeout=120, env=env)
    return r, build


NO_GPU = "make bench needs an NVIDIA GPU"


@pytest.mark.parametrize("smi, env", [
    ('echo "No devices were found"; exit 6', None),                     # no GPU
    ('echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"', {"CUDA_VISIBLE_DEVICES": ""}),  # hidden
    ('echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"', {"CUDA_VISIBLE_DEVICES": "-1"}),
], ids=["none", "hidden-empty", "hidden-minus-one"])
def test_make_bench_without_a_gpu_says_so_and_builds_nothing(tmp_path, smi, env):
    r, build = _make_bench(tmp_path, smi, env)
    assert r.returncode != 0
    assert NO_GPU in r.stderr, r.stdout + r.stderr
    assert not build.exists(), "make bench built something before finding there is no GPU"
    assert "false" not in r.stdout, r.stdout  # no compiler was called


def test_make_bench_with_a_gpu_goes_on_to_build(tmp_path):
    """The check lets a machine with a GPU through (here the build then fails
    at once: the compilers are `false`)."""
    r, _ = _make_bench(tmp_path, 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"')
    assert NO_GPU not in r.stderr, r.stderr
    assert r.returncode != 0


def _peers_line(exe, cwd, env_extra=None):
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""}
    env.update(env_extra or {})
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60, cwd=cwd, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^PyTorch peers: from (\S+) ", r.stdout, re.M)
    assert m, r.stdout
    return m.group(1)


def test_loom_bench_finds_its_peers_installed_in_the_source_tree_or_where_told(tmp_path):
    exe = _loom_bench()
    # the source tree: ./bench/peers from its root
    assert _peers_line(exe, REPO) == "bench/peers"
    # installed: <prefix>/bin/loom-bench finds <prefix>/share/loom/peers, wherever it runs from
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "share" / "loom" / "peers").mkdir(parents=True)
    shutil.copy2(exe, prefix / "bin" / "loom-bench")
    found = _peers_line(prefix / "bin" / "loom-bench", tmp_path)
    assert Path(found).resolve() == (prefix / "share" / "loom" / "peers").resolve()
    # LOOM_BENCH_PEERS wins
    assert _peers_line(prefix / "bin" / "loom-bench", tmp_path, {"LOOM_BENCH_PEERS": "/some/peers"}) == "/some/peers"


def test_loom_bench_writes_to_loom_results_unless_told():
    exe = _loom_bench()
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert "./loom-results" in r.stdout and "--results DIR" in r.stdout, r.stdout
    assert "bench/results" not in r.stdout
    r = subprocess.run([str(exe), "gemm_ar", "--list", "--results", "/tmp/x"], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stdout + r.stderr


def _fake_device_tree(tmp_path):
    """bench/device.sh in a tree of fake binaries and a fake nvidia-smi (2 GPUs)."""
    root = tmp_path / "tree"
    for d in ("bench", "build/tests", "build/bin", "build/dev/gemm", "build/lib", "fake"):
        (root / d).mkdir(parents=True)
    shutil.copy2(REPO / "bench" / "device.sh", root / "bench" / "device.sh")
    scripts = {
        "build/tests/loom-test-gpu": 'echo "filter $*"; echo "3 passed, 0 failed, 0 skipped"',
        "build/bin/loom-bench": 'echo "suite $* NVLS=$NCCL_NVLS_ENABLE"',
        "build/dev/gemm/bench_gemm_dev": 'echo "dev $* REPS=$REPS"',
        "fake/nvidia-smi": 'case "$*" in *-L*) echo "GPU 0: fake"; echo "GPU 1: fake";; '
                           '*"-l 1"*) echo "t, 0, 1980, 2619, 300.0, 40";; *) echo "0, fake";; esac',
        "fake/python3": 'echo "python3 $*"',
    }
    for rel, body in scripts.items():
        p = root / rel
        p.write_text("#!/bin/sh\n" + body + "\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    (root / "build" / "lib" / "libloom.so").write_text("")
    return root


def _device(root, args, env_extra):
    if not shutil.which("bash"):
        pytest.skip("no bash")
    env = {"PATH": f"{root / 'fake'}:/usr/bin:/bin", "LOOM_PREBUILT": "1", "LOOM_COMMIT": "abc",
           "TMPDIR": str(root)}
    env.update(env_extra)
    r = subprocess.run(["bash", str(root / "bench" / "device.sh"), *args], capture_output=True, text=True,
                       timeout=120, env=env, cwd=root)
    steps = r.stdout[r.stdout.index("=== steps ==="):] if "=== steps ===" in r.stdout else ""
    return r, steps


def test_device_script_runs_what_it_is_told_with_no_limit_of_its_own(tmp_path):
    root = _fake_device_tree(tmp_path)
    r, steps = _device(root, ["gpu_tp,!gemm"], {"LOOM_BENCH_SUITES": "ag_gemm allreduce", "NCCL_NVLS_ENABLE": "1",
                                                "OUT": str(tmp_path / "out")})
    assert r.returncode == 0, r.stdout + r.stderr
    for line in ("gpu tests gpu_tp: rc=0", "gpu tests !gemm: rc=0", "loom-bench ag_gemm: rc=0",
                 "loom-bench allreduce: rc=0"):
        assert line in steps, steps
    assert "NOT RUN" not in steps and "TIMED OUT" not in r.stdout
    assert "NCCL_NVLS_ENABLE=1 (the caller's)" in r.stdout and "suite ag_gemm NVLS=1" in r.stdout
    assert (tmp_path / "out" / "results.tgz").is_file() and (tmp_path / "out" / "summary.txt").is_file()


def test_device_script_presets_and_opt_in_deadline(tmp_path):
    root = _fake_device_tree(tmp_path)
    r, steps = _device(root, [], {"LOOM_PRESET": "gemm"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gpu tests gemm: rc=0" in steps and "dev bench gemm all: rc=0" in steps and "loom-bench gemm: rc=0" in steps
    assert "NCCL_NVLS_ENABLE unset: 0 for this run" in r.stdout and "suite gemm --quick NVLS=0" in r.stdout
    r, steps = _device(root, [], {"LOOM_PRESET": "python"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gpu tests" not in steps and "loom-bench" not in steps
    assert "pytest tests/python/gpu: rc=0" in steps
    assert "torchrun examples/python/dlrm_embedding.py --steps 5: rc=0" in steps
    assert "python python/tools/nccl_probe.py --timeout 45: rc=0" in steps
    # a deadline only where asked for: none left, nothing runs
    r, steps = _device(root, ["gemm"], {"LOOM_BENCH_SUITES": "none", "LOOM_DEADLINE": "5"})
    assert r.returncode != 0 and "gpu tests gemm: NOT RUN (LOOM_DEADLINE=5 s reached)" in steps, r.stdout


def test_python_m_loom_self_check_says_every_part():
    """python -m loom: versions, NCCL, the communicator, the registered ops
    and symmetric memory, each on its line (here: no GPU, so the memory
    check says it was not tried, and the run succeeds)."""
    from conftest import libloom_path
    env = dict(os.environ, LOOM_LIBRARY=str(libloom_path()), PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([sys.executable, "-m", "loom"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for line in ("loom binding ", "NCCL check: ok", "communicator: ", "registered ops: ", "symmetric memory: "):
        assert line in r.stdout, (line, r.stdout)
    assert "symmetric memory: not tried" in r.stdout  # the host has no GPU
