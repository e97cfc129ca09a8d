"""dist_harness.py - run a test body on W GPUs, one process per rank.

run_ranks(fn, world, *args) starts W processes (multiprocessing, spawn),
each of which selects GPU `rank`, joins an NCCL process group over
loopback, calls fn(rank, world, *args) and reports its result or its
traceback. The caller gets the results in rank order, or an AssertionError
that names every rank that failed, crashed or outlived the deadline (those
are killed): a rank that breaks cannot hang the suite or hide behind the
other rank's result.

Each rank imports torch (the test module does, at the top) before loom
loads libloom: the order of an ordinary PyTorch program.
"""
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback
from datetime import timedelta


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, fn, args, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    try:
        import torch
        import torch.distributed as dist
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank),
                                timeout=timedelta(seconds=120))
        try:
            q.put((rank, "ok", fn(rank, world, *args)))
        finally:
            try:
                dist.destroy_process_group()
            except Exception:
                pass
    except BaseException:
        q.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, world=2, *args, timeout=120):
    """[fn(0, world, *args), ..., fn(world-1, world, *args)] run on W ranks."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, fn, args, q), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.time() + timeout
    got = {}
    while len(got) < world and time.time() < deadline:
        try:
            rank, status, value = q.get(timeout=1.0)
            got[rank] = (status, value)
            if status != "ok":  # the others may wait for it in a collective: not for long
                deadline = min(deadline, time.time() + 30)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=max(0.0, min(20.0, deadline - time.time())))
    problems = []
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join()
            if r not in got:
                problems.append(f"rank {r}: no result within {timeout} s (killed)")
                continue
        if r not in got:
            problems.append(f"rank {r}: died with exit code {p.exitcode} and no result")
        elif got[r][0] != "ok":
            problems.append(f"rank {r} failed:\n{got[r][1]}")
    assert not problems, "\n".join(problems)
    return [got[r][1] for r in range(world)]


def within(worst, tol):
    """worst (name -> largest relative difference), once every entry is at
    most tol (an AssertionError naming those that are not)."""
    bad = {k: v for k, v in worst.items() if v > tol}
    assert not bad, f"relative differences over {tol}: {bad}"
    return worst


def print_ranks(results):
    """Each rank's dict of relative differences, one line per rank."""
    for r, w in enumerate(results):
        print(f"rank {r}:", {k: f"{v:.1e}" for k, v in w.items()})
