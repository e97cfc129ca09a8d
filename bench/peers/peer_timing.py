"""peer_timing.py - what the PyTorch peers of loom-bench share.

Shapes. loom-bench passes each peer the exact shapes of its rows (--shapes,
--sizes, --cases: parse them with `tuples`); a peer run by hand without
them uses its own defaults. Every JSON row carries the complete shape it
ran (every field that identifies loom's row: m, n, k, world, dtype, ...)
and names those fields in "shape_keys": loom-bench pairs a row only with
the peer row of the same complete shape (support/bench_pair.h) and says
why where there is none.

Timing. time_variants(torch, dist, fns, args): for each operation, N calls
(--graph-calls, default 16) are captured in a torch.cuda.CUDAGraph (after
warm-up calls on a side stream, so the NCCL communicator and PyTorch's
lazily made state exist before capture) and a repetition replays the graph:
its time / N is the time per call, without Python's host time per call
(timing "graph"). An operation that cannot be captured (every rank must
capture it, else none uses its graph) is timed call by call instead:
timing "eager (includes Python host time)", which loom-bench prints beside
the row and never pairs with a row that itself excludes host time.
--eager times every operation call by call.
interleaved_medians(torch, dist, ops, warmup, reps): runs every operation
`warmup` times, then `reps` repetitions, each running the operations one
after the other between CUDA events (interleaved, so that clocks and heat
weigh on each alike) after a barrier that lines the ranks up; the time of a
repetition is the maximum over ranks (an all-reduce); returns the median
per operation, in microseconds.

Ranks. join_ranks(torch, dist, rank, world, port): a spawned rank's GPU and
its NCCL process group (NVLink multicast off, as loom runs).

Rows. variant_rows(shape, names, timed): one JSON row per variant, the
shape's fields first, then "variant", "us" (per call; null where the
variant gave no time), "timing" and "shape_keys". write_results(...): rank
0's JSON. peer_arguments(...): the parser with the options every peer takes
(--world, --reps, --warmup, --quick, --eager, --graph-calls, --json).
spawn_ranks(...): a peer's main after its arguments (torch present, enough
GPUs, one process per rank).

No torch at import: a peer parses its arguments and says "needs torch"
(exit 2) without it, and the shape parsing and row building run anywhere.
"""
import argparse
import statistics
import sys

GRAPH = "graph"
EAGER = "eager (includes Python host time)"
NONE = "none"  # a variant PyTorch refused at this shape: no time

TIMING = ("per row: graph = the time per call of --graph-calls calls captured in one CUDA graph (no Python "
          "host time), eager = each call timed from Python (includes its host time); repetitions interleaved, "
          "max over ranks, median")


def join_ranks(torch, dist, rank, world, port):
    """Rank `rank` of a peer: its GPU, NVLink multicast off (NCCL's NVLS and
    symm_mem's, as loom's runs), the NCCL process group on localhost:port."""
    import os
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))


def tuples(*convs, sep=":"):
    """An argparse type: "a:b:c,d:e:f" -> [(conv0(a), conv1(b), ...), ...],
    each item with exactly len(convs) fields."""
    def parse(text):
        out = []
        for item in text.split(","):
            parts = item.split(sep)
            if len(parts) != len(convs):
                raise argparse.ArgumentTypeError(f"{item!r}: needs {len(convs)} fields separated by {sep!r}")
            try:
                out.append(tuple(c(p) for c, p in zip(convs, parts)))
            except ValueError as e:
                raise argparse.ArgumentTypeError(f"{item!r}: {e}") from None
        return out
    return parse


def variant_rows(shape, names, timed):
    """One row per variant: dict(shape) (its complete shape), "variant", "us"
    (per call, rounded to 0.01 us; None where the variant gave no time),
    "timing" and "shape_keys" (the shape's fields, comma-separated).
    timed: [(us or None, timing)] in the order of names."""
    rows = []
    for name, (us, timing) in zip(names, timed):
        row = dict(shape)
        row.update({"variant": name, "us": None if us is None else round(us, 2),
                    "timing": timing if us is not None else NONE, "shape_keys": ",".join(shape)})
        rows.append(row)
    return rows


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


def all_ranks(torch, dist, ok):
    """True when ok is true on every rank (a collective)."""
    t = torch.tensor([1 if ok else 0], device="cuda", dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def capture(torch, dist, fn, calls, warmup=3):
    """A CUDA graph of `calls` calls of fn, or (None, why). Warm-up calls
    run first on a side stream (lazy state, NCCL communicator); capture is
    thread-local, so that PyTorch's NCCL watchdog thread may go on. Every
    rank must have captured, else none keeps its graph."""
    graph, why = None, ""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            for _ in range(calls):
                fn()
        torch.cuda.synchronize()
        graph = g
    except Exception as e:  # noqa: BLE001 (capture refused: any reason)
        why = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
    if not all_ranks(torch, dist, graph is not None):
        return None, why or "another rank could not capture it"
    return graph, ""


def time_variants(torch, dist, fns, args, names=None, log=None):
    """[(us per call, timing)] of each fn (see the top of this file); log:
    where to say which variant fell back to eager timing and why (rank 0)."""
    ops, per, timing, keep = [], [], [], []
    for j, fn in enumerate(fns):
        graph, why = (None, "--eager") if args.eager else capture(torch, dist, fn, args.graph_calls)
        if graph is not None:
            keep.append(graph)
            ops.append(graph.replay)
            per.append(args.graph_calls)
            timing.append(GRAPH)
        else:
            ops.append(fn)
            per.append(1)
            timing.append(EAGER)
            if log and not args.eager:
                log(f"{names[j] if names else j}: not captured in a CUDA graph ({why}): timed eagerly")
    med = interleaved_medians(torch, dist, ops, args.warmup, args.reps)
    del keep
    return [(m / n, t) for m, n, t in zip(med, per, timing)]


def write_results(path, torch, args, world, peer, rows, **extra):
    """Rank 0's JSON for loom-bench: the peer's name, the device, torch's
    version, world, reps, warmup, graph calls, the timing rule (TIMING
    unless extra sets "timing"), any extra fields, then the rows; written
    through a temporary file, so that a reader never sees half of it."""
    import json
    import os

    doc = {"peer": peer, "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "world": world,
           "reps": args.reps, "warmup": args.warmup, "graph_calls": 0 if args.eager else args.graph_calls,
           "timing": TIMING}
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
    ap.add_argument("--quick", action="store_true", help="fewer default shapes (no effect with an explicit list)")
    ap.add_argument("--eager", action="store_true",
                    help="time each call from Python, no CUDA graph (the times include Python's host time)")
    ap.add_argument("--graph-calls", type=int, default=16, help="calls per CUDA graph (default 16)")
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

    if args.graph_calls < 1:
        print(f"{script}: --graph-calls needs 1 or more", file=sys.stderr)
        return 2
    try:
        import torch
        import torch.multiprocessing as mp
        for m in modules:
            importlib.import_module(m)
    except ImportError as e:
        what = "PyTorch" + (f" ({', '.join(modules)})" if modules else "")
        print(f"{script}: needs torch: {what} is not importable ({e}): nothing measured", file=sys.stderr)
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
