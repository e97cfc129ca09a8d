"""functional.py - loom's registered ops (library.py) as differentiable
functions in torch's argument order: tensors first, the comm after them,
options by keyword.

    import loom.functional as LF
    y = LF.ag_gemm(x_shard, w1, comm)               # column-parallel: [W s, ..., n]
    z = LF.gemm_rs(y, w2, comm, bias=b2)            # row-parallel: [s, ..., h]
    o = LF.gemm_ar(h, w, comm, residual=r)          # row-parallel with AllReduce (plain TP)
    t = LF.all_reduce(t, comm, bias=b, residual=r, norm="rms", norm_weight=g)
    s = LF.reduce_scatter(t, comm); t = LF.all_gather(s, comm)

comm: a loom.Comm or its name. Each call is one torch.ops.loom op, so
torch.compile(fullgraph=True) traces through it, autograd differentiates
it (library.py says how, and what has no gradient) and CUDA graphs
capture it. Every call is collective: every rank calls the same functions
with the same shapes in the same order, forward and backward.
"""
from ._torch import require

torch = require("loom.functional")

from . import library  # noqa: F401  (registers torch.ops.loom.*)

_ops = torch.ops.loom


def _name(comm):
    """A loom.Comm's name (or the name itself)."""
    return comm if isinstance(comm, str) else comm.name


def _training(*tensors):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _no_grad_through(fn, tensors, activation="none", dropout_p=0.0, norm="none"):
    if _training(*tensors):
        library._pointwise_only(fn, activation, dropout_p, norm)


def ag_gemm(x, weight, comm, bias=None, *, layout="nk", out_dtype=None, transfer="auto", m=None,
            keep_gathered=None, chunk_rows=0, comm_blocks=0, backward_transfer="auto"):
    """y [W s, ..., n] = AllGather(x [s, ..., k] over the ranks) @ weight^T
    ("nk": weight [n, k]; "kn": [k, n]) + bias [n]. keep_gathered (None:
    when the weight needs a gradient) keeps a copy of the gathered x for the
    weight gradient; False gathers again in the backward instead (less
    memory, more communication)."""
    keep = _training(weight) if keep_gathered is None else bool(keep_gathered)
    return _ops.ag_gemm(x, weight, bias, _name(comm), layout=layout, out_dtype=out_dtype, transfer=transfer, m=m,
                        keep_gathered=keep, chunk_rows=chunk_rows, comm_blocks=comm_blocks,
                        backward_transfer=backward_transfer)[0]


def gemm_rs(x, weight, comm, bias=None, *, layout="nk", out_dtype=None, transfer="auto", comm_blocks=0,
            backward_transfer="auto"):
    """y [s / W, ..., n] = this rank's rows of the sum over ranks of
    x [s, ..., k] @ weight^T, + bias [n] once (2-D x: any rows, y this
    rank's shard of them)."""
    return _ops.gemm_rs(x, weight, bias, _name(comm), layout=layout, out_dtype=out_dtype, transfer=transfer,
                        comm_blocks=comm_blocks, backward_transfer=backward_transfer)


def gemm_ar(x, weight, comm, bias=None, *, residual=None, scale=1.0, activation="none", dropout_p=0.0, seed=0,
            offset=0, layout="nk", out_dtype=None, transfer="auto", comm_blocks=0):
    """y [..., n] = dropout(act(scale * sum over ranks of x [..., k] @
    weight^T + bias)) + residual, the same on every rank. No gradient
    through activation or dropout (UnsupportedError while training)."""
    _no_grad_through("loom.functional.gemm_ar", (x, weight, bias, residual), activation, dropout_p)
    return _ops.gemm_ar(x, weight, bias, residual, _name(comm), scale=scale, activation=activation,
                        dropout_p=dropout_p, seed=seed, offset=offset, layout=layout, out_dtype=out_dtype,
                        transfer=transfer, comm_blocks=comm_blocks)


def all_reduce(x, comm, *, bias=None, residual=None, norm="none", norm_weight=None, norm_bias=None, eps=1e-5,
               scale=1.0, activation="none", dropout_p=0.0, seed=0, offset=0, out_dtype=None):
    """norm(dropout(act(scale * sum over ranks of x + bias)) + residual), x's
    shape, on every rank (coll.py: rows, bias and norm per row). No gradient
    through activation, dropout or norm (UnsupportedError while training)."""
    _no_grad_through("loom.functional.all_reduce", (x, bias, residual, norm_weight, norm_bias), activation,
                     dropout_p, norm)
    return _ops.all_reduce(x, bias, residual, norm_weight, norm_bias, _name(comm), norm=norm, eps=eps, scale=scale,
                           activation=activation, dropout_p=dropout_p, seed=seed, offset=offset, out_dtype=out_dtype)


def reduce_scatter(x, comm, *, bias=None, residual=None, norm="none", norm_weight=None, norm_bias=None, eps=1e-5,
                   scale=1.0, activation="none", dropout_p=0.0, seed=0, offset=0, out_dtype=None):
    """This rank's slice (whole rows; a 1-D x in units of 8 elements) of
    all_reduce's result; residual has the slice's shape."""
    _no_grad_through("loom.functional.reduce_scatter", (x, bias, residual, norm_weight, norm_bias), activation,
                     dropout_p, norm)
    return _ops.reduce_scatter(x, bias, residual, norm_weight, norm_bias, _name(comm), norm=norm, eps=eps,
                               scale=scale, activation=activation, dropout_p=dropout_p, seed=seed, offset=offset,
                               out_dtype=out_dtype)


def all_gather(x, comm, *, size=None):
    """The ranks' slices side by side: x this rank's slice, the whole's
    first dimension `size` (None: x's times W)."""
    return _ops.all_gather(x, _name(comm), size=size)


def embedding_a2a(weight, indices, offsets, comm, *, tables_per_rank, rows, global_batch, pooling="sum",
                  per_sample_weights=None, out_dtype=None):
    """The fused embedding-bag + All-to-All (loom.EmbeddingA2A's layout):
    this rank's stacked tables `weight` pooled over the global batch, every
    rank's share returned, [B / W, T_total * D], a new tensor; the tables'
    gradient through loom's backward. per_sample_weights get no gradient."""
    return _ops.embedding_a2a(weight, indices, offsets, per_sample_weights, _name(comm),
                              tables_per_rank=[int(t) for t in tables_per_rank], rows=[int(r) for r in rows],
                              global_batch=int(global_batch), pooling=pooling, out_dtype=out_dtype)


def moe_mlp(x, ids, weights, gate_up, down, comm, *, experts, max_tokens, capacity=0):
    """The expert-parallel MoE layer (loom.MoE.mlp's shapes): x [tokens, H],
    ids [tokens, k] int32, weights [tokens, k] float32, this rank's experts'
    gate_up [E_local, 2F, H] and down [E_local, H, F]; returns [tokens, H].
    Forward only (UnsupportedError from its backward; loom.nn.MoE trains)."""
    return _ops.moe_mlp(x, ids, weights, gate_up, down, _name(comm), experts=int(experts),
                        max_tokens=int(max_tokens), capacity=int(capacity))


def moe_layer(x, ids, weights, gate_up, down, comm, *, layer):
    """A loom.nn.MoE layer's forward with autograd (the layer named `layer`,
    its .name, holds the plans): [tokens, H]. What the layer runs while
    torch.compile traces it; differentiable in x, weights, gate_up, down."""
    return _ops.moe_layer(x, ids, weights, gate_up, down, _name(comm), layer=layer)[0]
