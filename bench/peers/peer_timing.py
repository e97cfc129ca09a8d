"""peer_timing.py - the timing loop the PyTorch peers of loom-bench share.

interleaved_medians(torch, dist, ops, warmup, reps): runs every operation of
`ops` `warmup` times, then `reps` repetitions, each repetition running the
operations one after the other between CUDA events (interleaved, so that
clocks and heat weigh on each alike) after a barrier that lines the ranks
up; the time of a repetition is the maximum over ranks (an all-reduce);
returns the median per operation, in microseconds.
"""
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
