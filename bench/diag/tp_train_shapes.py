#!/usr/bin/env python3
"""tp_train_shapes.py - the tensor-parallel GEMMs of one training step of a
Llama-style block (bench/train/llama_tp.py's model), each on every
transfer loom has, side by side with the sequential path and with the GEMM
alone (no communication: the floor), at W ranks.

    python3 -m torch.distributed.run --nproc_per_node=2 bench/diag/tp_train_shapes.py \
        [--seq 4096 --hidden 4096 --ffn 11008] [--json out.json]

Rows (m = seq tokens, H hidden, F ffn, W ranks):
  fwd qkv    AG+GEMM  [m, H] x [H, 3H/W]      (column layer forward, nk)
  fwd w13    AG+GEMM  [m, H] x [H, 2F/W]
  fwd wo     GEMM+RS  [m, H/W] x [H/W, H]     (row layer forward, nk)
  fwd w2     GEMM+RS  [m, F/W] x [F/W, H]
  bwd wo     AG+GEMM  [m, H] x [H, H/W]       (row layer backward: dy gathered, kn)
  bwd w2     AG+GEMM  [m, H] x [H, F/W]
  bwd qkv    GEMM+RS  [m, 3H/W] x [3H/W, H]   (column layer backward, kn)
  bwd w13    GEMM+RS  [m, 2F/W] x [2F/W, H]
Each cell: the median of --reps calls between CUDA events (max over
ranks), after --warmup; "auto" names what AUTO resolved to. The result of
every fused transfer is checked against the sequential path's.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def _time(torch, dist, fn, warmup, reps):
    for _ in range(warmup):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        dist.barrier()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in ev)[reps // 2]
    t = torch.tensor([ms], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item()) * 1000.0  # us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    import torch
    import torch.distributed as dist
    import loom
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    comm = loom.Comm.from_process_group()
    W, p = comm.size, comm.rank
    m, H, F = a.seq, a.hidden, a.ffn
    g = torch.Generator(dev).manual_seed(1 + p)
    rnd = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16, generator=g) * 0.05  # noqa: E731
    rows = []
    # (name, op, n, k, layout): weights as the layers hold them ([n, k] nk for the forward, read kn backward)
    cases = [("fwd qkv", "ag", 3 * H // W, H, "nk"), ("fwd w13", "ag", 2 * F // W, H, "nk"),
             ("fwd wo", "rs", H, H // W, "nk"), ("fwd w2", "rs", H, F // W, "nk"),
             ("bwd wo", "ag", H // W, H, "kn"), ("bwd w2", "ag", F // W, H, "kn"),
             ("bwd qkv", "rs", H, 3 * H // W, "kn"), ("bwd w13", "rs", H, 2 * F // W, "kn")]
    for name, op, n, k, layout in cases:
        w = rnd(n, k) if layout == "nk" else rnd(k, n)
        if op == "ag":
            x = rnd(m // W, k)
            transfers = ["sequential", "copy_engine", "sm_copy", "auto"]
            call = lambda t: loom.ag_gemm(comm, x, w, m=m, layout=layout, transfer=t)  # noqa: E731
            floor_a = rnd(m, k)
        else:
            x = rnd(m, k)
            transfers = ["sequential", "sm_copy", "sm_atomic", "bulk_reduce", "auto"]
            call = lambda t: loom.gemm_rs(comm, x, w, layout=layout, transfer=t)  # noqa: E731
            floor_a = x
        wt = w if layout == "kn" else w.t()
        row = dict(name=name, m=m, n=n, k=k, layout=layout, W=W,
                   gemm_us=_time(torch, dist, lambda: floor_a @ wt, a.warmup, a.reps))
        ref = call("sequential").float()
        for t in transfers:
            try:
                out = call(t)
                err = float((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6))
                if err > 2e-2:
                    raise AssertionError(f"relative error {err:.3g} against the sequential path")
                row[t] = _time(torch, dist, lambda: call(t), a.warmup, a.reps)
            except Exception as e:  # noqa: BLE001  (a transfer this shape refuses: reported, the rest run)
                row[t] = None
                row[t + "_why"] = f"{type(e).__name__}: {e}".splitlines()[0][:160]
        spec = loom.tp.cached_plan(comm, (loom.tp._ag_spec if op == "ag" else loom.tp._rs_spec)(
            "tp_train_shapes", comm, x, w, False, *((m,) if op == "ag" else ()), layout, None, "auto",
            *((0, 0, "none", "auto") if op == "ag" else (0, "auto"))))
        row["auto_is"] = spec.info["transfer"]
        rows.append(row)
    if p == 0:
        cols = ["sequential", "copy_engine", "sm_copy", "sm_atomic", "bulk_reduce", "auto"]
        print(f"| shape (W={W}) | m x n x k | GEMM alone us | " + " | ".join(cols) + " | auto is | best vs seq |")
        print("|---|---|---|" + "---|" * len(cols) + "---|---|")
        for r in rows:
            got = [r.get(c) for c in cols]
            best = min(v for c, v in zip(cols, got) if v is not None and c != "auto")
            cells = " | ".join("-" if v is None else f"{v:.0f}" for v in got)
            print(f"| {r['name']} | {r['m']}x{r['n']}x{r['k']} {r['layout']} | {r['gemm_us']:.0f} | {cells} | "
                  f"{r['auto_is']} | {r['sequential'] / best:.3f} |")
        for r in rows:
            for c in cols:
                if r.get(c + "_why"):
                    print(f"  {r['name']} {c}: {r[c + '_why']}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
