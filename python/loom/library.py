"""library.py - loom's ops as torch.library custom ops (namespace "loom"):
torch.compile traces them through their fake implementations, autograd
differentiates them through their registered backward, CUDA graphs capture
them (no host synchronisation once a shape's plan exists).

    torch.ops.loom.ag_gemm(x, weight, bias, comm, *, layout, out_dtype, transfer, m, keep_gathered)
        -> (y, gathered)     y [m, ..., n] = AllGather(x shards) @ weight^T (+ bias): column-parallel
    torch.ops.loom.gemm_rs(x, weight, bias, comm, *, layout, out_dtype, transfer)
        -> y [this rank's rows, ..., n] of ReduceScatter(x @ weight^T) (+ bias once): row-parallel
    torch.ops.loom.gemm_ar(x, weight, bias, residual, comm, *, scale, activation, dropout_p, seed, offset,
                           layout, out_dtype, transfer)
        -> y [x's rows, n] = dropout(act(scale AllReduce(x @ weight^T) + bias)) + residual
    torch.ops.loom.all_reduce(x, bias, residual, norm_weight, norm_bias, comm, *, norm, eps, scale,
                              activation, dropout_p, seed, offset, out_dtype)
        -> y [x's shape] = norm(dropout(act(scale sum over ranks of x + bias)) + residual)
    torch.ops.loom.reduce_scatter(same arguments) -> this rank's slice of the same
    torch.ops.loom.all_gather(x, comm, *, size) -> the ranks' slices side by side
    torch.ops.loom.embedding_a2a(weight, indices, offsets, per_sample_weights, comm, *, tables_per_rank,
                                 rows, global_batch, pooling, out_dtype)
        -> [B / W, T_total D]: the fused embedding-bag + All-to-All (ops.EmbeddingA2A); backward:
           torch.ops.loom.embedding_a2a_backward -> this rank's table gradient
    torch.ops.loom.moe_mlp(x, ids, weights, gate_up, down, comm, *, experts, max_tokens, capacity)
        -> [tokens, H]: the expert-parallel MoE layer's plan (moe.py), forward only
    torch.ops.loom.moe_layer(x, ids, weights, gate_up, down, comm, *, layer)
        -> (out, xr, off, gu, h, yr): a loom.nn.MoE layer's forward (the layer,
           named by layer.name, holds the plans) with what its backward
           needs; backward: torch.ops.loom.moe_layer_backward -> (dx,
           d weights, d gate_up, d down) (nn.moe_backward; one host
           synchronisation for the experts' row counts)
    torch.ops.loom.optimizer_step(params, grads, lr, grad_scale, found_inf, comm, *, optimizer) -> None
        one step of a loom.optim optimizer (named by optimizer.name) over its
        flat parameter and gradient buffers, lr a device float [1],
        grad_scale (the loss scale to divide by) and found_inf (nonzero:
        skip) optional device floats, as a GradScaler hands them; mutates
        params (and the plan's own state). loom.optim's step() calls it, so a
        compiled or CUDA-graph-captured training step holds the update too.
        Bound to its optimizer's buffers and state (each call is a new
        step), so torch.library.opcheck, which calls an op on copies and
        twice, does not apply; its GPU test compares eager, compiled and
        captured steps instead

`comm` is the name of an open loom.Comm (comm.name): a string, which
torch.compile keeps in the graph as a constant (the way torch's own
collectives take a group name). loom.functional wraps each op with a Comm
argument and the usual defaults. Shapes, dtypes and options are those of
tp.py and coll.py (whose plans, cached per shape in the comm, the ops run);
x may have any number of leading dimensions where the math allows:

  ag_gemm   x [s, ..., k] this rank's rows -> y [W s, ..., n]; 2-D x may
            give m (uneven shards). gathered: [m, ..., k], the gathered x,
            when keep_gathered (a copy of the plan's symmetric buffer:
            autograd keeps it for the weight gradient), else [0].
  gemm_rs   x [s, ..., k], s a multiple of W -> y [s / W, ..., n]; 2-D x:
            any m, y [this rank's shard rows, n].
  gemm_ar   x [..., k] -> y [..., n]; residual y's shape. A fused plan
            writes its symmetric buffer; the op returns a copy of it.

Gradients (every backward is itself made of these ops, so compiled
backward graphs hold loom's kernels too):
  ag_gemm   dx = gemm_rs(dy, weight^T), d weight = dy^T gathered (the
            kept copy, else gathered again with all_gather), d bias = sum dy
  gemm_rs   dx, dy_full = ag_gemm(dy, weight^T, keep_gathered), d weight =
            dy_full^T x, d bias = sum dy_full
  gemm_ar   Megatron's row-parallel layer: the output and everything after
            it are the same on every rank (one loss), so dx = scale dy
            weight, d weight = scale dy^T x, d bias = d residual sum / dy
            with no collective
  all_reduce, reduce_scatter, all_gather: the collectives' own adjoints
            (every rank's output feeds its own part of the loss, as in
            torch.distributed.nn): all_reduce <- all_reduce (x scale),
            reduce_scatter <- all_gather (x scale), all_gather <-
            reduce_scatter; d bias / d residual as above.
There is no gradient through an activation, dropout or norm fused into
gemm_ar or a collective (the op raises UnsupportedError when asked for
one): apply those in torch when training through them.

Importing this module imports torch and registers the ops (loom.functional
and loom.nn import it).
"""
from typing import Optional

from ._torch import require

torch = require("loom.library")

from . import coll, tp
from .comm import Comm
from .errors import InvalidArgumentError, UnsupportedError

Tensor = torch.Tensor


# ---- shapes (shared by the real and the fake implementations) --------------------

def _comm(name):
    return Comm.named(name)


def _feature(fn, x, arg="x"):
    """k of x [..., k] (x of 2+ dimensions)."""
    if not isinstance(x, Tensor) or x.dim() < 2:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise InvalidArgumentError(f"{fn}: {arg} has shape {got}; expected [rows, k] or [sequence, ..., k]")
    return int(x.shape[-1])


def _weight_n(fn, weight, layout):
    if not isinstance(weight, Tensor) or weight.dim() != 2:
        raise InvalidArgumentError(f"{fn}: weight must be a 2-D tensor")
    if layout not in tp.SWAP_LAYOUT:
        raise InvalidArgumentError(f"{fn}: layout={layout!r}; expected 'nk' or 'kn'")
    return int(weight.shape[0] if layout == "nk" else weight.shape[1])


def _ag_shapes(fn, c, x, weight, layout, m):
    """(y shape, gathered shape, m) of ag_gemm."""
    k, n = _feature(fn, x), _weight_n(fn, weight, layout)
    if m is not None and x.dim() != 2:
        raise InvalidArgumentError(f"{fn}: m= is for 2-D x (uneven shards); x has shape {tuple(x.shape)}")
    lead = tuple(x.shape[:-1])
    if m is None:
        first = (lead[0] * c.size,)
        m = first[0] * _prod(lead[1:])
    else:
        first = (int(m),)
    return first + lead[1:] + (n,), first + lead[1:] + (k,), m


def _rs_shape(fn, c, x, weight, layout):
    _feature(fn, x)
    n = _weight_n(fn, weight, layout)
    lead = tuple(x.shape[:-1])
    if x.dim() > 2:
        if lead[0] % c.size:
            raise InvalidArgumentError(f"{fn}: x has shape {tuple(x.shape)}: an input of more than 2 dimensions "
                                       f"needs its first (the sequence) a multiple of the world size {c.size}; "
                                       f"pass it 2-D for uneven shards")
        return (lead[0] // c.size,) + lead[1:] + (n,)
    return (tp.shard_len(lead[0], c.size, c.rank), n)


def _prod(xs):
    p = 1
    for v in xs:
        p *= v
    return p


def _out_dtype(x, out_dtype):
    return x.dtype if out_dtype is None else out_dtype


def _rows(x):
    return x.reshape(-1, x.shape[-1]).contiguous()


# ---- ag_gemm ---------------------------------------------------------------------

@torch.library.custom_op("loom::ag_gemm", mutates_args=())
def ag_gemm(x: Tensor, weight: Tensor, bias: Optional[Tensor], comm: str, *, layout: str = "nk",
            out_dtype: Optional[torch.dtype] = None, transfer: str = "auto", m: Optional[int] = None,
            keep_gathered: bool = False, chunk_rows: int = 0, comm_blocks: int = 0,
            backward_transfer: str = "auto") -> tuple[Tensor, Tensor]:
    fn = "loom::ag_gemm"
    c = _comm(comm)
    y_shape, g_shape, mm = _ag_shapes(fn, c, x, weight, layout, m)
    x2 = _rows(x)
    spec = tp._ag_spec(fn, c, x2, weight, bias is not None, mm, layout, _out_dtype(x, out_dtype), transfer,
                       chunk_rows, comm_blocks)
    spec.check(fn, c, x2, weight, bias, None)
    plan = tp.cached_plan(c, spec)
    buf = plan.gathered_buffer() if keep_gathered else None
    y = plan.ag_gemm(x2, weight, bias, gathered=buf, _checked=True)
    gathered = buf.clone().view(g_shape) if keep_gathered else x.new_empty((0,))
    return y.view(y_shape), gathered


@ag_gemm.register_fake
def _(x, weight, bias, comm, *, layout="nk", out_dtype=None, transfer="auto", m=None, keep_gathered=False,
      chunk_rows=0, comm_blocks=0, backward_transfer="auto"):
    y_shape, g_shape, _ = _ag_shapes("loom::ag_gemm", _comm(comm), x, weight, layout, m)
    return (x.new_empty(y_shape, dtype=_out_dtype(x, out_dtype)),
            x.new_empty(g_shape) if keep_gathered else x.new_empty((0,)))


def _ag_gemm_setup(ctx, inputs, keyword_only_inputs, output):
    kw = keyword_only_inputs
    x, weight, bias, comm = inputs
    ctx.comm, ctx.layout, ctx.x_shape = comm, kw["layout"], tuple(x.shape)
    ctx.backward_transfer = kw["backward_transfer"]
    ctx.b_dtype = bias.dtype if bias is not None else None
    kept = kw["keep_gathered"]
    ctx.kept = kept
    ctx.save_for_backward(weight, output[1] if kept else x)


def _ag_gemm_backward(ctx, gy, _g_gathered):
    weight, saved = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    g = _rows(gy).to(weight.dtype)
    gx = gw = gb = None
    if need_x:  # collective: every rank needs it or none
        gx = torch.ops.loom.gemm_rs(g, weight, None, ctx.comm, layout=tp.SWAP_LAYOUT[ctx.layout],
                                    transfer=ctx.backward_transfer).view(ctx.x_shape)
    if need_w:
        if ctx.kept:
            x_full = _rows(saved)
        else:
            x2 = _rows(saved)
            x_full = torch.ops.loom.all_gather(x2, ctx.comm, size=int(g.shape[0]))
        gw = tp.weight_grad(g, x_full, ctx.layout, weight.dtype)
    if need_b:
        gb = _rows(gy).sum(0, dtype=torch.float32).to(ctx.b_dtype)
    return gx, gw, gb, None


ag_gemm.register_autograd(_ag_gemm_backward, setup_context=_ag_gemm_setup)


# ---- gemm_rs ---------------------------------------------------------------------

@torch.library.custom_op("loom::gemm_rs", mutates_args=())
def gemm_rs(x: Tensor, weight: Tensor, bias: Optional[Tensor], comm: str, *, layout: str = "nk",
            out_dtype: Optional[torch.dtype] = None, transfer: str = "auto", comm_blocks: int = 0,
            backward_transfer: str = "auto") -> Tensor:
    fn = "loom::gemm_rs"
    c = _comm(comm)
    y_shape = _rs_shape(fn, c, x, weight, layout)
    x2 = _rows(x)
    spec = tp._rs_spec(fn, c, x2, weight, bias is not None, layout, _out_dtype(x, out_dtype), transfer,
                       comm_blocks)
    spec.check(fn, c, x2, weight, bias, None)
    return tp.cached_plan(c, spec).gemm_rs(x2, weight, bias, _checked=True).view(y_shape)


@gemm_rs.register_fake
def _(x, weight, bias, comm, *, layout="nk", out_dtype=None, transfer="auto", comm_blocks=0,
      backward_transfer="auto"):
    return x.new_empty(_rs_shape("loom::gemm_rs", _comm(comm), x, weight, layout), dtype=_out_dtype(x, out_dtype))


def _gemm_rs_setup(ctx, inputs, keyword_only_inputs, output):
    kw = keyword_only_inputs
    x, weight, bias, comm = inputs
    ctx.comm, ctx.layout, ctx.x_dtype = comm, kw["layout"], x.dtype
    ctx.backward_transfer = kw["backward_transfer"]
    ctx.b_dtype = bias.dtype if bias is not None else None
    ctx.save_for_backward(x, weight)


def _gemm_rs_backward(ctx, gy):
    x, weight = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    g = _rows(gy).to(weight.dtype)
    x2 = _rows(x)
    gx_full, gy_full = torch.ops.loom.ag_gemm(g, weight, None, ctx.comm, layout=tp.SWAP_LAYOUT[ctx.layout],
                                              out_dtype=ctx.x_dtype, m=int(x2.shape[0]),
                                              keep_gathered=bool(need_w or need_b),
                                              transfer=ctx.backward_transfer)
    gw = tp.weight_grad(gy_full, x2, ctx.layout, weight.dtype) if need_w else None
    gb = gy_full.sum(0, dtype=torch.float32).to(ctx.b_dtype) if need_b else None
    return (gx_full.view(x.shape) if need_x else None), gw, gb, None


gemm_rs.register_autograd(_gemm_rs_backward, setup_context=_gemm_rs_setup)


# ---- gemm_ar ---------------------------------------------------------------------

def _pointwise_only(fn, activation, dropout_p, norm="none"):
    """Refuses a gradient through the fused nonlinear steps."""
    fused = [w for w, on in (("activation=" + repr(activation), activation != "none"),
                             (f"dropout_p={dropout_p}", dropout_p != 0.0), ("norm=" + repr(norm), norm != "none"))
             if on]
    if fused:
        raise UnsupportedError(f"{fn}: no gradient through the fused {', '.join(fused)}: apply it in torch when "
                               f"training through it (loom's epilogue keeps no mask or pre-activation)")


@torch.library.custom_op("loom::gemm_ar", mutates_args=())
def gemm_ar(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor], comm: str, *,
            scale: float = 1.0, activation: str = "none", dropout_p: float = 0.0, seed: int = 0, offset: int = 0,
            layout: str = "nk", out_dtype: Optional[torch.dtype] = None, transfer: str = "auto",
            comm_blocks: int = 0) -> Tensor:
    fn = "loom::gemm_ar"
    c = _comm(comm)
    _feature(fn, x)
    n = _weight_n(fn, weight, layout)
    y_shape = tuple(x.shape[:-1]) + (n,)
    x2 = _rows(x)
    res = residual.reshape(-1, n) if residual is not None and tuple(residual.shape) == y_shape else residual
    y = tp.gemm_ar(c, x2, weight, bias, residual=res, dropout_p=dropout_p, seed=seed, offset=offset, scale=scale,
                   activation=activation, layout=layout, out_dtype=_out_dtype(x, out_dtype), transfer=transfer,
                   comm_blocks=comm_blocks)
    if c.owns(y):  # a fused plan's own buffer: its next call overwrites it
        y = y.clone()
    return y.view(y_shape)


@gemm_ar.register_fake
def _(x, weight, bias, residual, comm, *, scale=1.0, activation="none", dropout_p=0.0, seed=0, offset=0,
      layout="nk", out_dtype=None, transfer="auto", comm_blocks=0):
    n = _weight_n("loom::gemm_ar", weight, layout)
    return x.new_empty(tuple(x.shape[:-1]) + (n,), dtype=_out_dtype(x, out_dtype))


def _gemm_ar_setup(ctx, inputs, keyword_only_inputs, output):
    kw = keyword_only_inputs
    x, weight, bias, residual, comm = inputs
    ctx.layout, ctx.scale = kw["layout"], kw["scale"]
    ctx.act, ctx.p = kw["activation"], kw["dropout_p"]
    ctx.b_dtype = bias.dtype if bias is not None else None
    ctx.r_dtype = residual.dtype if residual is not None else None
    ctx.save_for_backward(x, weight)


def _gemm_ar_backward(ctx, gy):
    _pointwise_only("loom::gemm_ar backward", ctx.act, ctx.p)
    x, weight = ctx.saved_tensors
    need_x, need_w, need_b, need_r = ctx.needs_input_grad[:4]
    g = _rows(gy)
    gx = gw = gb = gr = None
    if need_x:
        gw_t = weight if ctx.layout == "nk" else weight.t()  # y = x @ op(weight): dx = dy @ op(weight)^T
        gx = ((g.to(weight.dtype) @ gw_t) * ctx.scale).to(x.dtype).view(x.shape)
    if need_w:
        gw = tp.weight_grad(g * ctx.scale, _rows(x), ctx.layout, weight.dtype)
    if need_b:
        gb = g.sum(0, dtype=torch.float32).to(ctx.b_dtype)
    if need_r:
        gr = gy.to(ctx.r_dtype)
    return gx, gw, gb, gr, None


gemm_ar.register_autograd(_gemm_ar_backward, setup_context=_gemm_ar_setup)


# ---- collectives -----------------------------------------------------------------

def _coll_epilogue_kw(kw):
    return dict(norm=kw["norm"], eps=kw["eps"], scale=kw["scale"], activation=kw["activation"],
                dropout_p=kw["dropout_p"], seed=kw["seed"], offset=kw["offset"], out_dtype=kw["out_dtype"])


@torch.library.custom_op("loom::all_reduce", mutates_args=())
def all_reduce(x: Tensor, bias: Optional[Tensor], residual: Optional[Tensor], norm_weight: Optional[Tensor],
               norm_bias: Optional[Tensor], comm: str, *, norm: str = "none", eps: float = 1e-5, scale: float = 1.0,
               activation: str = "none", dropout_p: float = 0.0, seed: int = 0, offset: int = 0,
               out_dtype: Optional[torch.dtype] = None) -> Tensor:
    return coll.all_reduce(_comm(comm), x.contiguous(), bias=bias, residual=residual, norm=norm,
                           norm_weight=norm_weight, norm_bias=norm_bias, eps=eps, scale=scale, activation=activation,
                           dropout_p=dropout_p, seed=seed, offset=offset, out_dtype=out_dtype)


@all_reduce.register_fake
def _(x, bias, residual, norm_weight, norm_bias, comm, **kw):
    return x.new_empty(x.shape, dtype=_out_dtype(x, kw.get("out_dtype")))


@torch.library.custom_op("loom::reduce_scatter", mutates_args=())
def reduce_scatter(x: Tensor, bias: Optional[Tensor], residual: Optional[Tensor], norm_weight: Optional[Tensor],
                   norm_bias: Optional[Tensor], comm: str, *, norm: str = "none", eps: float = 1e-5,
                   scale: float = 1.0, activation: str = "none", dropout_p: float = 0.0, seed: int = 0,
                   offset: int = 0, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    return coll.reduce_scatter(_comm(comm), x.contiguous(), bias=bias, residual=residual, norm=norm,
                               norm_weight=norm_weight, norm_bias=norm_bias, eps=eps, scale=scale,
                               activation=activation, dropout_p=dropout_p, seed=seed, offset=offset,
                               out_dtype=out_dtype)


@reduce_scatter.register_fake
def _(x, bias, residual, norm_weight, norm_bias, comm, **kw):
    c = _comm(comm)
    return x.new_empty(coll.slice_shape(x.shape, c.size, c.rank), dtype=_out_dtype(x, kw.get("out_dtype")))


@torch.library.custom_op("loom::all_gather", mutates_args=())
def all_gather(x: Tensor, comm: str, *, size: Optional[int] = None) -> Tensor:
    return coll.all_gather(_comm(comm), x.contiguous(), size=size)


@all_gather.register_fake
def _(x, comm, *, size=None):
    c = _comm(comm)
    return x.new_empty(coll.gathered_shape(x.shape, c.size, c.rank, size, "loom::all_gather"))


def _coll_setup(ctx, inputs, keyword_only_inputs, output):
    kw = keyword_only_inputs
    x, bias, residual = inputs[:3]
    ctx.comm = inputs[5]
    ctx.kw = kw
    ctx.x_shape, ctx.x_dtype = tuple(x.shape), x.dtype
    ctx.b_dtype = bias.dtype if bias is not None else None
    ctx.r_dtype = residual.dtype if residual is not None else None


def _epilogue_grads(ctx, gy):
    """d bias (summed over the rows of gy) and d residual of a collective."""
    need_b, need_r = ctx.needs_input_grad[1:3]
    cols = coll.layout_of(ctx.x_shape)[1]  # a bias needs rows: cols > 0
    gb = gy.reshape(-1, cols).sum(0, dtype=torch.float32).to(ctx.b_dtype) if need_b else None
    gr = gy.to(ctx.r_dtype) if need_r else None
    return gb, gr


def _all_reduce_backward(ctx, gy):
    kw = ctx.kw
    _pointwise_only("loom::all_reduce backward", kw["activation"], kw["dropout_p"], kw["norm"])
    gx = None
    if ctx.needs_input_grad[0]:  # collective
        gx = torch.ops.loom.all_reduce(gy.contiguous(), None, None, None, None, ctx.comm, scale=kw["scale"],
                                       out_dtype=ctx.x_dtype)
    gb, gr = _epilogue_grads(ctx, gy)
    return gx, gb, gr, None, None, None


def _reduce_scatter_backward(ctx, gy):
    kw = ctx.kw
    _pointwise_only("loom::reduce_scatter backward", kw["activation"], kw["dropout_p"], kw["norm"])
    gx = None
    if ctx.needs_input_grad[0]:  # collective
        size = ctx.x_shape[0]
        gx = torch.ops.loom.all_gather(gy.contiguous(), ctx.comm, size=size)
        gx = (gx * kw["scale"] if kw["scale"] != 1.0 else gx).to(ctx.x_dtype)
    gb, gr = _epilogue_grads(ctx, gy)
    return gx, gb, gr, None, None, None


all_reduce.register_autograd(_all_reduce_backward, setup_context=_coll_setup)
reduce_scatter.register_autograd(_reduce_scatter_backward, setup_context=_coll_setup)


def _all_gather_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.comm = inputs[1]


def _all_gather_backward(ctx, gy):
    gx = torch.ops.loom.reduce_scatter(gy.contiguous(), None, None, None, None, ctx.comm)
    return gx, None


all_gather.register_autograd(_all_gather_backward, setup_context=_all_gather_setup)

# ---- embedding-bag + All-to-All ----------------------------------------------------

def _embedding_out_shape(fn, c, weight, tables_per_rank, rows, global_batch):
    from ._checks import embedding_shapes
    _, t_total, bl, _ = embedding_shapes(fn, tables_per_rank, rows, int(weight.shape[-1]), int(global_batch), c.rank)
    return (bl, t_total * int(weight.shape[-1]))


@torch.library.custom_op("loom::embedding_a2a", mutates_args=())
def embedding_a2a(weight: Tensor, indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor], comm: str,
                  *, tables_per_rank: list[int], rows: list[int], global_batch: int, pooling: str = "sum",
                  out_dtype: Optional[torch.dtype] = None) -> Tensor:
    from . import ops
    out = ops.embedding_a2a(_comm(comm), weight, indices, offsets, tables_per_rank=tables_per_rank, rows=rows,
                            global_batch=global_batch, pooling=pooling, per_sample_weights=per_sample_weights,
                            out_dtype=out_dtype)
    return out.clone()  # the plan's symmetric buffer: its next call overwrites it


@embedding_a2a.register_fake
def _(weight, indices, offsets, per_sample_weights, comm, *, tables_per_rank, rows, global_batch, pooling="sum",
      out_dtype=None):
    shape = _embedding_out_shape("loom::embedding_a2a", _comm(comm), weight, tables_per_rank, rows, global_batch)
    return weight.new_empty(shape, dtype=_out_dtype(weight, out_dtype))


@torch.library.custom_op("loom::embedding_a2a_backward", mutates_args=())
def embedding_a2a_backward(grad_out: Tensor, indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor],
                           comm: str, *, tables_per_rank: list[int], rows: list[int], global_batch: int, dim: int,
                           table_rows: int, table_dtype: torch.dtype, pooling: str = "sum") -> Tensor:
    from . import ops
    return ops.embedding_a2a_backward(_comm(comm), grad_out.contiguous(), indices, offsets,
                                      tables_per_rank=tables_per_rank, rows=rows, global_batch=global_batch, dim=dim,
                                      table_dtype=table_dtype, pooling=pooling, per_sample_weights=per_sample_weights)


@embedding_a2a_backward.register_fake
def _(grad_out, indices, offsets, per_sample_weights, comm, *, tables_per_rank, rows, global_batch, dim, table_rows,
      table_dtype, pooling="sum"):
    return grad_out.new_empty((table_rows, dim), dtype=table_dtype)


def _embedding_setup(ctx, inputs, keyword_only_inputs, output):
    weight, indices, offsets, psw, comm = inputs
    ctx.kw = dict(keyword_only_inputs)
    ctx.comm, ctx.table_rows, ctx.dim, ctx.table_dtype = comm, int(weight.shape[0]), int(weight.shape[1]), weight.dtype
    ctx.save_for_backward(indices, offsets, psw)


def _embedding_backward(ctx, grad_out):
    indices, offsets, psw = ctx.saved_tensors
    if ctx.needs_input_grad[3]:
        raise UnsupportedError("loom::embedding_a2a backward: no gradient for per_sample_weights (pass them "
                               "detached)")
    kw = ctx.kw
    gw = torch.ops.loom.embedding_a2a_backward(grad_out, indices, offsets, psw, ctx.comm,
                                               tables_per_rank=kw["tables_per_rank"], rows=kw["rows"],
                                               global_batch=kw["global_batch"], dim=ctx.dim,
                                               table_rows=ctx.table_rows, table_dtype=ctx.table_dtype,
                                               pooling=kw["pooling"])
    return gw, None, None, None, None


embedding_a2a.register_autograd(_embedding_backward, setup_context=_embedding_setup)

# ---- mixture of experts -------------------------------------------------------------

@torch.library.custom_op("loom::moe_mlp", mutates_args=())
def moe_mlp(x: Tensor, ids: Tensor, weights: Tensor, gate_up: Tensor, down: Tensor, comm: str, *, experts: int,
            max_tokens: int, capacity: int = 0) -> Tensor:
    from .moe import MoE
    c = _comm(comm)
    hidden, topk, ffn = int(x.shape[-1]), int(ids.shape[-1]), int(down.shape[-1])
    key = ("moe", hidden, int(experts), topk, int(max_tokens), ffn, int(capacity), str(x.dtype))
    plan = c.cached_plan(key, lambda: MoE(c, hidden, experts, topk, max_tokens, ffn=ffn, capacity=capacity,
                                          dtype=x.dtype))
    return plan.mlp(x, ids, weights, gate_up, down)


@moe_mlp.register_fake
def _(x, ids, weights, gate_up, down, comm, *, experts, max_tokens, capacity=0):
    return x.new_empty(x.shape)


def _moe_setup(ctx, inputs, keyword_only_inputs, output):
    pass


def _moe_backward(ctx, grad_out):
    raise UnsupportedError("loom::moe_mlp: no backward (it is the plan's forward alone); train with "
                           "loom.nn.MoE, whose forward is loom::moe_layer with a registered backward")


moe_mlp.register_autograd(_moe_backward, setup_context=_moe_setup)

# ---- the MoE layer that trains (loom.nn.MoE under torch.compile) ---------------------

def _moe_saved_shapes(layer, tokens):
    """Shapes of moe_layer's outputs: out, xr, off, gu, h, yr."""
    R, H, F_, n = layer._fwd.info["max_recv_rows"], layer.hidden, layer.ffn, layer.local_experts
    r = R if n > 0 else 0
    return (tokens, H), (R, H), (n + 1,), (r, 2 * F_), (r, F_), (r, H)


@torch.library.custom_op("loom::moe_layer", mutates_args=())
def moe_layer(x: Tensor, ids: Tensor, weights: Tensor, gate_up: Tensor, down: Tensor, comm: str, *,
              layer: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    from .nn import MOE_LAYERS, moe_forward
    out, (xr, off, gu, h, yr) = moe_forward(MOE_LAYERS.get(layer, comm), x, weights, gate_up, down, ids)
    return out, xr.clone(), off.clone(), gu, h, yr  # copies of the plan's buffers: its next forward overwrites them


@moe_layer.register_fake
def _(x, ids, weights, gate_up, down, comm, *, layer):
    from .nn import MOE_LAYERS
    shapes = _moe_saved_shapes(MOE_LAYERS.get(layer, comm), int(x.shape[0]))
    return tuple(x.new_empty(s, dtype=torch.int64 if i == 2 else x.dtype) for i, s in enumerate(shapes))


@torch.library.custom_op("loom::moe_layer_backward", mutates_args=())
def moe_layer_backward(grad_out: Tensor, weights: Tensor, gate_up: Tensor, down: Tensor, ids: Tensor, xr: Tensor,
                       off: Tensor, gu: Tensor, h: Tensor, yr: Tensor, comm: str, *,
                       layer: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    from .nn import MOE_LAYERS, moe_backward
    return moe_backward(MOE_LAYERS.get(layer, comm), grad_out, weights, gate_up, down, ids, xr, off, gu, h, yr)


@moe_layer_backward.register_fake
def _(grad_out, weights, gate_up, down, ids, xr, off, gu, h, yr, comm, *, layer):
    from .nn import MOE_LAYERS
    L = MOE_LAYERS.get(layer, comm)
    return (grad_out.new_empty((int(ids.shape[0]), L.hidden), dtype=L.dtype), torch.empty_like(weights),
            torch.empty_like(gate_up), torch.empty_like(down))


def _moe_layer_setup(ctx, inputs, keyword_only_inputs, output):
    x, ids, weights, gate_up, down, comm = inputs
    ctx.comm, ctx.layer = comm, keyword_only_inputs["layer"]
    ctx.save_for_backward(weights, gate_up, down, ids, *output[1:])


def _moe_layer_backward(ctx, grad_out, *grads_of_saved):
    """The saved outputs (xr .. yr) carry no gradient of their own."""
    dx, dw, dgate_up, ddown = torch.ops.loom.moe_layer_backward(grad_out, *ctx.saved_tensors, ctx.comm,
                                                               layer=ctx.layer)
    return dx, None, dw, dgate_up, ddown, None


moe_layer.register_autograd(_moe_layer_backward, setup_context=_moe_layer_setup)


# ---- optimizer step ------------------------------------------------------------------

@torch.library.custom_op("loom::optimizer_step", mutates_args=("params",))
def optimizer_step(params: Tensor, grads: Tensor, lr: Tensor, grad_scale: Optional[Tensor],
                   found_inf: Optional[Tensor], comm: str, *, optimizer: str) -> None:
    from .optim import OPTIMIZERS
    OPTIMIZERS.get(optimizer, comm).run_step(params, grads, lr, grad_scale, found_inf)


@optimizer_step.register_fake
def _(params, grads, lr, grad_scale, found_inf, comm, *, optimizer):
    return None


OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "all_reduce", "reduce_scatter", "all_gather", "embedding_a2a",
       "embedding_a2a_backward", "moe_mlp", "moe_layer", "moe_layer_backward", "optimizer_step")
