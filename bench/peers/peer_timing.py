"""peer_timing.py - the timing loop the PyTorch peers of loom-bench share.

interleaved_medians(torch, dist, ops, warmup, reps): runs every operation of
`ops` `warmup` times, then `reps` repetitions, each repetition running the
operations one after the other between CUDA events (interleaved, so that
clocks and heat weigh on each alike) after a barrier that lines the ranks
up; the time of a repetition is the maximum over ranks (an all-reduce);
returns the median per operation, in microseconds.
write_results(...): rank 0's JSON (the fields every peer writes, then its
rows). peer_arguments(...): the parser with the options every peer takes
(--world, --reps, --warmup, --quick, --json). spawn_ranks(...): a peer's
main after its arguments (torch present, enough GPUs, one process per rank).
"""
import argparse
import statistics


def interleaved_medians(torch, dist, ops, warmup, reps):
    for _ in range(warmup):
        for fn in ops:
            fn()
    torch.cuda.synchronize()
    times = [[] for _ in ops]
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(ops) + 1)]
        for j, fn in enumerate(ops):
            ev[j].record()
            fn()
        ev[-1].record()
        ev[-1].synchronize()
        for j in range(len(ops)):
            times[j].append(ev[j].elapsed_time(ev[j + 1]) * 1000.0)  # us
    t = torch.tensor(times, device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [statistics.median(row) for row in t.tolist()]


TIMING = "interleaved per repetition, max over ranks, median"


def write_results(path, torch, args, world, peer, rows, **extra):
    """Rank 0's JSON for loom-bench: the peer's name, the device, torch's
    version, world, reps, warmup, the timing rule (TIMING unless extra sets
    "timing"), any extra fields, then the rows; written through a temporary
    file, so that a reader never sees half of it."""
    import json
    import os

    doc = {"peer": peer, "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "world": world,
           "reps": args.reps, "warmup": args.warmup, "timing": TIMING}
    doc.update(extra)
    doc["rows"] = rows
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def peer_arguments(world_help="ranks (0: every GPU, at most 8)"):
    """An argument parser with the options every peer takes; each peer adds
    its own (shapes, op) before parsing."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=0, help=world_help)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="", help="write the results here")
    return ap


def spawn_ranks(script, worker, args, purpose, min_world=2, default_world=8, modules=(), check=None):
    """A peer's main: imports torch (and `modules`), takes args.world ranks
    (0: min(default_world, GPUs)), checks min_world <= world <= GPUs and
    check(world) (a message where the shapes do not fit, else None), then
    runs worker(rank, world, args, port, args.json) on every rank
    (torch.multiprocessing spawn, one process per GPU). Returns the exit
    status: 0, or 2 with a message when nothing could be measured."""
    import importlib
    import os
    import sys

    try:
        import torch
        import torch.multiprocessing as mp
        for m in modules:
            importlib.import_module(m)
    except ImportError as e:
        what = "PyTorch" + (f" ({', '.join(modules)})" if modules else "")
        print(f"{script}: {what} is not importable ({e}): nothing measured", file=sys.stderr)
        return 2
    gpus = torch.cuda.device_count()
    world = args.world or min(default_world, gpus)
    if world < min_world or world > gpus:
        print(f"{script}: {gpus} GPU(s), world {world}: {purpose} needs {min_world} or more; nothing measured",
              file=sys.stderr)
        return 2
    why = check(world) if check else None
    if why:
        print(f"{script}: {why}", file=sys.stderr)
        return 2
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(world, args, port, args.json), nprocs=world, join=True)
    return 0
