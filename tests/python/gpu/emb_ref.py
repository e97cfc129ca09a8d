"""emb_ref.py - a table-wise sharded embedding problem and its reference.

make_problem builds, from a seed, every rank's tables, bags (variable
lengths, empty ones included), indices and per-sample weights, so that each
rank can compute the whole model's answer in float64 with
torch.nn.functional.embedding_bag and compare its own share: the output
rows of its local batch for every table, and the gradients of its own
tables.
"""
import torch


class Problem:
    pass


def make_problem(seed, tables_per_rank, rows, dim, global_batch, *, max_bag=7, weighted=False, zipf=False):
    g = torch.Generator(device="cpu").manual_seed(seed)
    p = Problem()
    p.tables_per_rank, p.rows, p.dim, p.global_batch = list(tables_per_rank), list(rows), dim, global_batch
    p.world = len(tables_per_rank)
    p.tables = [torch.rand(r, dim, generator=g, dtype=torch.float64) * 2 - 1 for r in rows]
    p.lengths, p.indices, p.weights = [], [], []
    for r in rows:
        L = torch.randint(0, max_bag + 1, (global_batch,), generator=g)
        n = int(L.sum())
        if zipf:  # a few hot rows
            idx = (torch.rand(n, generator=g) ** 4 * r).long().clamp_max(r - 1)
        else:
            idx = torch.randint(0, r, (n,), generator=g)
        p.lengths.append(L)
        p.indices.append(idx)
        p.weights.append(torch.rand(n, generator=g, dtype=torch.float64) + 0.5 if weighted else None)
    return p


def local_inputs(p, rank, device, table_dtype=torch.float32):
    """This rank's tables (stacked), indices, offsets and weights."""
    first = sum(p.tables_per_rank[:rank])
    mine = list(range(first, first + p.tables_per_rank[rank]))
    offsets, acc = [0], 0
    for t in mine:
        for n in p.lengths[t].tolist():
            acc += n
            offsets.append(acc)
    D = p.dim
    cat = lambda xs, **kw: torch.cat(xs) if xs else torch.zeros((0,), **kw)
    return {
        "tables": (torch.cat([p.tables[t] for t in mine]) if mine else torch.zeros(0, D, dtype=torch.float64))
        .to(table_dtype).to(device),
        "indices": cat([p.indices[t] for t in mine], dtype=torch.int64).to(device),
        "offsets": torch.tensor(offsets, dtype=torch.int64, device=device),
        "weights": (cat([p.weights[t] for t in mine], dtype=torch.float64).float().to(device)
                    if p.weights[0] is not None else None),
        "tables_idx": mine,
    }


def reference(p, pooling="sum", table_dtype=torch.float32, tables=None):
    """[B, T_total * D] float64: every table pooled over the global batch
    (from the tables rounded to table_dtype, as loom reads them), with
    requires_grad tables: returns (out, list of leaf tables)."""
    leaves = []
    cols = []
    for t in range(len(p.rows)):
        w = (tables[t] if tables is not None else p.tables[t].to(table_dtype).double()).clone().requires_grad_(True)
        leaves.append(w)
        starts = torch.cat([torch.zeros(1, dtype=torch.int64), p.lengths[t].cumsum(0)[:-1]])
        psw = p.weights[t].to(torch.float32).double() if p.weights[t] is not None else None
        cols.append(torch.nn.functional.embedding_bag(p.indices[t], w, starts, mode=pooling, per_sample_weights=psw))
    return torch.cat(cols, dim=1), leaves


def local_rows(x, rank, world):
    bl = x.shape[0] // world
    return x[rank * bl:(rank + 1) * bl]
