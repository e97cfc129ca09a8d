#!/usr/bin/env python3
"""nccl_probe.py - what happens when PyTorch's NCCL and libloom's are in one process.

PyTorch ships its own libnccl.so.2 (the nvidia-nccl-cu13 wheel); libloom is
linked against the system's. Both files have the same soname, so which one
each side's calls reach depends on load order and dlopen flags (see
python/loom/nccl.py). This script finds out on a GPU machine: for each way
of starting a process it runs 2 ranks (one process per GPU, NCCL process
group) and each rank reports
  - every libnccl file mapped in the process (/proc/self/maps), the file
    and version libloom's calls reach (loom_get_nccl_info: dladdr inside
    libloom), the file and version PyTorch's calls reach (dladdr of the
    global ncclGetVersion, torch.cuda.nccl.version());
  - whether torch.distributed works, whether loom.Comm.from_process_group
    works (or which exception it raised), and whether loom ops then give the
    right answer: symmetric memory written by the peer through
    loom_peer_ptr (addresses computed by NCCL's device API), the fused
    embedding-bag + All-to-All against a PyTorch reference, loom.gemm;
  - whether torch.distributed still works after loom.
Scenarios:
  torch-first       `import torch` then `import loom` (the usual program)
  loom-first        `import loom` and load libloom, then `import torch`
  loom-nccl-library LOOM_NCCL_LIBRARY=<the system NCCL>, loom first
  preload-system    LD_PRELOAD=<the system NCCL>, torch first
  torch-comm        torch first, Comm.from_process_group(use_torch_comm=True)
                    (loom on the process group's own ncclComm_t)
  exact-loom-first  loom first with LOOM_NCCL_CHECK=exact: refused on every
                    rank where the system NCCL is not exactly libloom's headers
  one-rank-refuses  torch first; rank 1 alone fails its check (an invalid
                    LOOM_NCCL_CHECK): every rank must raise, none may hang
  check-off         torch first with LOOM_NCCL_CHECK=off, only when
                    torch-first was refused: what the check prevents
Every rank of every scenario runs in its own process with a deadline, so
a crash or a hang is reported as such. Prints a table and one JSON object
per scenario, and writes them all to <results>/nccl_probe-<stamp>.json
($LOOM_BENCH_RESULTS_DIR, else ./loom-results, as loom-bench).

Exit status 0 when every scenario that loom allowed (no NcclMismatchError)
gave right answers and none crashed or hung, excluding check-off, which
runs with loom's check disabled on purpose.

    python3 python/tools/nccl_probe.py [--scenarios a,b] [--timeout 180]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = ["torch-first", "loom-first", "loom-nccl-library", "preload-system", "torch-comm", "exact-loom-first",
             "one-rank-refuses", "check-off"]


# ---- worker (one rank) --------------------------------------------------------

def _emb_problem(torch, rank, world, device):
    """A small embedding problem every rank can rebuild (3 + 2 tables on 2 ranks)."""
    tpr = [3, 2] if world == 2 else [2] * world
    D, B = 64, 64 * world
    rows = [97 + 13 * g for g in range(sum(tpr))]
    g = torch.Generator(device="cpu").manual_seed(1234)
    tables = [torch.rand(r, D, generator=g, dtype=torch.float64) * 2 - 1 for r in rows]
    lengths = [torch.randint(0, 6, (B,), generator=g) for _ in rows]
    idx = [torch.cat([torch.randint(0, r, (int(n),), generator=g) for n in L]) if int(L.sum()) else
           torch.zeros(0, dtype=torch.int64) for r, L in zip(rows, lengths)]
    first = sum(tpr[:rank])
    mine = range(first, first + tpr[rank])
    offs, acc = [0], 0
    for t in mine:
        for n in lengths[t]:
            acc += int(n)
            offs.append(acc)
    local = {
        "tables": torch.cat([tables[t] for t in mine]).float().to(device),
        "indices": torch.cat([idx[t] for t in mine]).to(device),
        "offsets": torch.tensor(offs, dtype=torch.int64, device=device),
    }
    ref = []
    for t in range(len(rows)):
        o = torch.cat([torch.zeros(1, dtype=torch.int64), lengths[t].cumsum(0)])
        ref.append(torch.nn.functional.embedding_bag(idx[t], tables[t], o[:-1], mode="sum", include_last_offset=False))
    Bl = B // world
    ref_out = torch.cat(ref, dim=1)[rank * Bl:(rank + 1) * Bl]
    return tpr, rows, D, B, local, ref_out


def worker(scenario):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rep = {"scenario": scenario, "rank": rank, "steps": []}

    def step(name, fn):
        t0 = time.time()
        try:
            out = fn()
            rep["steps"].append({"step": name, "ok": True, "s": round(time.time() - t0, 2), **(out or {})})
            return True
        except Exception as e:
            rep["steps"].append({"step": name, "ok": False, "s": round(time.time() - t0, 2),
                                 "error": f"{type(e).__name__}: {e}",
                                 "trace": traceback.format_exc(limit=4)[-1500:]})
            return False

    if scenario in ("loom-first", "loom-nccl-library", "exact-loom-first"):
        import loom
        loom.version()  # loads libloom (and its NCCL) now
        import torch
    else:
        import torch
        import loom
    import torch.distributed as dist
    from loom import _procmaps, nccl

    dev = torch.device("cuda", rank)

    def init():
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
        x = torch.full((4,), rank + 1.0, device=dev)
        dist.all_reduce(x)
        assert x[0].item() == world * (world + 1) / 2, x
    if not step("torch.distributed init + all_reduce", init):
        print("PROBE " + json.dumps(rep), flush=True)
        return 0

    def libraries():
        r = loom.nccl_report()
        r["torch.cuda.nccl.version"] = ".".join(map(str, torch.cuda.nccl.version()))
        r["global ncclGetVersion"] = nccl.symbol_file("ncclGetVersion")
        r["libcudart mapped"] = _procmaps.distinct_files(_procmaps.mapped_files("libcudart"))
        r["torch"] = torch.__version__
        return r
    step("libraries", libraries)

    comm = {}

    def make_comm():
        comm["c"] = loom.Comm.from_process_group(use_torch_comm=(scenario == "torch-comm"), timeout_ms=20000,
                                                 timeout_s=60)
        return {"info": {k: comm["c"].info[k] for k in ("rank", "size", "lsa_size", "nccl_version")}}
    if step("loom.Comm.from_process_group", make_comm):
        c = comm["c"]

        def symmetric():
            buf = c.empty((4096,), torch.float32)
            buf.fill_(float(rank))
            torch.cuda.synchronize()
            dist.barrier()
            peer = (rank + 1) % world
            pv = c.peer_tensor(buf, peer)
            seen = pv.clone()
            pv[:16] = 100.0 + rank  # store into the peer's memory
            torch.cuda.synchronize()
            dist.barrier()
            src = (rank - 1) % world
            ok_read = bool((seen == float(peer)).all())
            ok_write = bool((buf[:16] == 100.0 + src).all()) and bool((buf[16:] == float(rank)).all())
            c.free(buf)
            assert ok_read and ok_write, f"peer read ok={ok_read}, peer write ok={ok_write}"
        step("symmetric memory via loom_peer_ptr", symmetric)

        def embedding():
            tpr, rows, D, B, local, ref = _emb_problem(torch, rank, world, dev)
            out = loom.embedding_a2a(c, local["tables"], local["indices"], local["offsets"], tables_per_rank=tpr,
                                     rows=rows, global_batch=B)
            torch.cuda.synchronize()
            c.check()
            err = (out.double().cpu() - ref).abs().max().item()
            assert err < 1e-4, f"max error {err}"
            return {"max_abs_error": err}
        step("loom.embedding_a2a vs torch", embedding)

    def gemm():
        a = torch.randn(256, 512, device=dev, dtype=torch.bfloat16)
        b = torch.randn(512, 384, device=dev, dtype=torch.bfloat16)
        y = loom.gemm(a, b, out_dtype=torch.float32)
        ref = a.float() @ b.float()
        err = ((y - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, f"relative error {err}"
        return {"rel_error": err}
    step("loom.gemm vs torch", gemm)

    def after():
        x = torch.ones(8, device=dev)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        assert x[0].item() == world
    step("torch.distributed after loom", after)
    if "c" in comm:
        step("loom.Comm.close", comm["c"].close)
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    print("PROBE " + json.dumps(rep), flush=True)
    return 0


# ---- parent -------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _python_env(extra=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO / "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("NCCL_NVLS_ENABLE", "0")
    e.update(extra or {})
    return e


def _query(code, env=None, timeout=120):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_python_env(env),
                       timeout=timeout)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_scenario(name, world, timeout, env, rank_env=None):
    port = _free_port()
    procs = []
    for rank in range(world):
        e = _python_env(env)
        e.update((rank_env or {}).get(rank, {}))
        e.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", name], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True))
    deadline = time.time() + timeout
    outs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
            codes.append(p.returncode)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, _ = p.communicate()
            codes.append("timeout")
        outs.append(out)
    ranks = []
    for rank, (out, code) in enumerate(zip(outs, codes)):
        line = next((l for l in out.splitlines() if l.startswith("PROBE ")), None)
        if line:
            r = json.loads(line[6:])
        else:
            r = {"rank": rank, "steps": [], "crash": code, "output_tail": out[-3000:]}
        r["exit"] = code
        ranks.append(r)
    return {"scenario": name, "env": dict(env), "rank_env": {str(r): v for r, v in (rank_env or {}).items()},
            "ranks": ranks}


def verdict(res):
    """'works', 'refused (...)', 'WRONG/...', 'CRASH', 'HANG'."""
    for r in res["ranks"]:
        if r["exit"] == "timeout":
            return "HANG (killed at the deadline)"
        if "crash" in r or r["exit"] != 0:
            return f"CRASH (exit {r['exit']})"
    steps = {}
    for r in res["ranks"]:
        for s in r["steps"]:
            steps.setdefault(s["step"], []).append(s)
    comm = steps.get("loom.Comm.from_process_group", [])
    if comm and not all(s["ok"] for s in comm):
        errs = {s.get("error", "")[:160] for s in comm if not s["ok"]}
        kind = "refused" if all("NcclMismatchError" in e for e in errs) else "comm FAILED"
        return f"{kind}: {'; '.join(sorted(errs))}"
    bad = [n for n, ss in steps.items() if not all(s["ok"] for s in ss)]
    return "works" if not bad else "WRONG: " + ", ".join(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=150, help="seconds per scenario (all ranks)")
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker)

    # what each side loads when alone
    loom_alone = _query("import json, loom; print(json.dumps(loom.nccl_report()))")
    torch_alone = _query("import json, torch; from loom import _procmaps as m; "
                         "print(json.dumps({'torch': torch.__version__, 'nccl': '.'.join(map(str, torch.cuda.nccl.version())), "
                         "'mapped': m.distinct_files(m.mapped_files('libnccl')), 'gpus': torch.cuda.device_count()}))")
    system_nccl = loom_alone["loom_path"]
    print(f"libloom alone: NCCL {loom_alone['loom_loaded']} at {system_nccl} (built against "
          f"{loom_alone['loom_header']} headers)")
    print(f"torch {torch_alone['torch']} alone: NCCL {torch_alone['nccl']} mapped from {torch_alone['mapped']}; "
          f"{torch_alone['gpus']} GPUs")
    if torch_alone["gpus"] < args.world:
        print(f"nccl_probe: needs {args.world} GPUs", file=sys.stderr)
        return 1

    envs = {
        "torch-first": {}, "loom-first": {}, "torch-comm": {},
        "loom-nccl-library": {"LOOM_NCCL_LIBRARY": system_nccl},
        "preload-system": {"LD_PRELOAD": system_nccl},
        "check-off": {"LOOM_NCCL_CHECK": "off"},
        "exact-loom-first": {"LOOM_NCCL_CHECK": "exact"},
        "one-rank-refuses": {},
    }
    rank_envs = {"one-rank-refuses": {1: {"LOOM_NCCL_CHECK": "bogus"}}}
    results, wanted = [], [s for s in args.scenarios.split(",") if s]
    doc = {"tool": "nccl_probe", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "commit": os.environ.get("LOOM_COMMIT", ""), "loom_alone": loom_alone, "torch_alone": torch_alone,
           "scenarios": results}
    path = None
    if not args.no_json:
        d = Path(os.environ.get("LOOM_BENCH_RESULTS_DIR") or "loom-results")
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"nccl_probe-{time.strftime('%Y%m%d-%H%M%S')}.json"
    for name in wanted:
        if name not in envs:
            print(f"nccl_probe: unknown scenario {name}", file=sys.stderr)
            return 2
        if name == "check-off":
            first = next((r for r in results if r["scenario"] == "torch-first"), None)
            if first is None or not first["verdict"].startswith("refused"):
                continue  # nothing was refused: nothing to see with the check off
        t0 = time.time()
        res = run_scenario(name, args.world, args.timeout, envs[name], rank_envs.get(name))
        res["verdict"] = verdict(res)
        res["seconds"] = round(time.time() - t0, 1)
        results.append(res)
        if path:  # after every scenario: a deadline on the whole probe loses nothing already seen
            path.write_text(json.dumps(doc, indent=1))
        lib = next((s for r in res["ranks"] for s in r["steps"] if s["step"] == "libraries" and s["ok"]), {})
        print(f"\n=== {name} {res['env'] or ''}{res['rank_env'] or ''}: {res['verdict']}  ({res['seconds']} s)")
        if lib:
            print(f"  loom : NCCL {lib['loom_loaded']} at {lib['loom_path']} (headers {lib['loom_header']}, "
                  f"one file: {lib['loom_consistent']})")
            print(f"  torch: NCCL {lib['torch.cuda.nccl.version']} at {lib['torch_path']}; same file as loom: "
                  f"{lib['same_library']}")
            print(f"  mapped libnccl: {lib['mapped']}; libcudart: {lib['libcudart mapped']}")
        for r in res["ranks"]:
            for s in r["steps"]:
                if s["step"] != "libraries":
                    print(f"  rank {r['rank']} {'ok  ' if s['ok'] else 'FAIL'} {s['step']}"
                          + (f": {s['error'][:300]}" if not s["ok"] else ""))
            if "crash" in r:
                print(f"  rank {r['rank']} exit {r['exit']}; output tail:\n    "
                      + "\n    ".join(r["output_tail"].splitlines()[-15:]))

    print("\n=== summary")
    for res in results:
        print(f"  {res['scenario']:18s} {res['verdict'][:200]}")
    if path:
        print(f"wrote {path}")
    failed = [r["scenario"] for r in results if r["scenario"] != "check-off"
              and not (r["verdict"] == "works" or r["verdict"].startswith("refused"))]
    if failed:
        print(f"nccl_probe: loom allowed these and they went wrong: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
