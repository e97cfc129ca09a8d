"""nn.py - loom ops as autograd functions and torch modules.

ShardedEmbeddingBag: a DLRM's embedding tables sharded table-wise over the
ranks (model parallel), pooled and handed to every rank as its share of the
batch for all tables (data parallel) by loom's fused embedding-bag +
All-to-All; backward sends the output gradient back and accumulates this
rank's table gradients (loom_embedding_a2a_backward), so the module trains
with any torch optimizer.

The forward output is the plan's symmetric output buffer, not a copy. The
autograd function receives it as an input, writes it and marks it dirty, so
its version counter goes up with every forward: a backward that needs an
earlier forward's output after a later forward overwrote it raises
"modified by an inplace operation" instead of using the wrong values
(run forward, backward, forward, backward; or clone() the output).

ColumnParallelLinear / RowParallelLinear: the linear layers of Megatron's
sequence parallelism on loom's fused tensor-parallel ops (tp.py). A
column-parallel layer takes this rank's rows of the tokens and returns all
tokens for its share of the output features: forward AllGather+GEMM
(loom_ag_gemm), backward GEMM+ReduceScatter for the input gradient. A
row-parallel layer takes all tokens for its share of the input features and
returns this rank's rows of the full output: forward GEMM+ReduceScatter
(loom_gemm_rs), backward AllGather+GEMM for the input gradient (the gathered
output gradient also gives the weight and bias gradients). Every rank must
run the same layers in the same order, forward and backward (the ops are
collective).

Precision: the GEMMs take bfloat16 or float16 operands (compute_dtype) with
fp32 accumulation; parameters may be float32 (cast to compute_dtype in
forward, gradients in float32), and outputs float32 (out_dtype).

The column-parallel layer keeps the gathered input for its weight gradient
without a copy: it lives in the layer's symmetric buffer, which the next
forward of that layer overwrites. Each forward bumps the buffer's autograd
version, so a backward that needs an overwritten input raises "modified by
an inplace operation" (run forward, backward, forward, backward, or make
the layer with copy_gathered=True to keep a copy per forward).

Under torch.compile the layers call the registered ops instead
(torch.ops.loom.ag_gemm / gemm_rs, library.py), which the compiler traces
without a graph break; the column-parallel op then keeps a copy of the
gathered input for the weight gradient rather than the layer's buffer.

importing this module imports torch (and registers torch.ops.loom.*).
"""
import math

from ._torch import require

torch = require("loom.nn")

from . import ops, tp

try:  # the registered ops (torch.library.custom_op: torch >= 2.5); older torch runs the layers eager only
    from . import functional
except (AttributeError, ImportError, TypeError):
    functional = None


def _compiling():
    """True while torch.compile traces (the layers then call the registered ops)."""
    return functional is not None and torch.compiler.is_compiling()
from ._checks import dtype_name, embedding_shapes
from ._names import Names
from .errors import InvalidArgumentError


class EmbeddingA2AFunction(torch.autograd.Function):
    """out = embedding_a2a(weight, indices, offsets) into `out` (the plan's
    symmetric buffer); backward: d weight = embedding_a2a_backward(d out)."""

    @staticmethod
    def forward(ctx, plan, out, weight, indices, offsets, per_sample_weights):
        plan.forward(weight, indices, offsets, per_sample_weights, out=out)
        ctx.mark_dirty(out)
        ctx.plan = plan
        ctx.save_for_backward(indices, offsets, per_sample_weights)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        indices, offsets, per_sample_weights = ctx.saved_tensors
        grad_weight = None
        if ctx.needs_input_grad[2]:
            grad_weight = ctx.plan.backward(grad_out.contiguous(), indices, offsets, per_sample_weights)
        return None, None, grad_weight, None, None, None


class ShardedEmbeddingBag(torch.nn.Module):
    """This rank's share of table-wise sharded embedding bags, exchanged with
    loom. Collective to build (same arguments on every rank).

    comm: loom.Comm; tables_per_rank [W]; rows: rows of every table,
    rank-major; dim D; global_batch B (a multiple of W). weight: this rank's
    tables stacked, [sum of its rows, D] (initialised N(0, 1) like
    torch.nn.EmbeddingBag); table t of this rank starts at row
    table_offsets[t]. forward(indices, offsets, per_sample_weights=None)
    takes this rank's tables' bags over the global batch (offsets [T*B + 1],
    table-major, PyTorch's CSR) and returns [B / W, sum(tables_per_rank) * D].
    """

    def __init__(self, comm, tables_per_rank, rows, dim, global_batch, *, pooling="sum",
                 per_sample_weights=False, dtype=torch.float32, out_dtype=None, **plan_options):
        super().__init__()
        T, _, _, table_rows = embedding_shapes("loom.nn.ShardedEmbeddingBag", tables_per_rank, rows, dim,
                                               int(global_batch), comm.rank)
        self.plan = ops.EmbeddingA2A(comm, tables_per_rank, rows, dim, global_batch, pooling=pooling,
                                     per_sample_weights=per_sample_weights, table_dtype=dtype,
                                     out_dtype=out_dtype if out_dtype is not None else dtype, **plan_options)
        first = sum(int(t) for t in tables_per_rank[:comm.rank])
        local_rows = [int(r) for r in rows[first:first + T]]
        self.table_offsets = [sum(local_rows[:t]) for t in range(T)]
        self.weight = torch.nn.Parameter(torch.empty(table_rows, dim, dtype=dtype, device=f"cuda:{comm.device}"))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.normal_(0.0, 1.0)

    def forward(self, indices, offsets, per_sample_weights=None):
        if per_sample_weights is not None and per_sample_weights.requires_grad:
            raise InvalidArgumentError("loom.nn.ShardedEmbeddingBag: per_sample_weights requires grad; loom "
                                       "computes no gradient for them (pass per_sample_weights.detach())")
        out = self.plan.output_buffer().detach()
        return EmbeddingA2AFunction.apply(self.plan, out, self.weight, indices, offsets, per_sample_weights)

    def extra_repr(self):
        p = self.plan
        return (f"tables_per_rank={list(p.tables_per_rank)}, dim={p.dim}, global_batch={p.global_batch}, "
                f"pooling={p.pooling!r}, path={p.info['path']}")


# ---- tensor-parallel linear layers (sequence parallelism) ---------------------

_COMPUTE = ("bfloat16", "float16")


class TpOptions:
    """How a tensor-parallel layer calls loom (passed through autograd as is).

    m: global rows (column-parallel only; None: this rank's rows * W);
    layout: the weight's, "nk" ([n, k], a Linear weight) or "kn";
    out_dtype: None (the input's) or a float dtype; transfer (forward) and
    backward_transfer: see tp.py; chunk_rows / comm_blocks: the forward
    plan's (0: chosen by the plan); gathered: column-parallel only, a
    symmetric [m, k] tensor that receives the gathered input and is kept for
    the backward without a copy (None: the plan's buffer, copied);
    copy_gathered: keep a copy even when gathered is given."""
    __slots__ = ("m", "layout", "out_dtype", "transfer", "backward_transfer", "chunk_rows", "comm_blocks",
                 "gathered", "copy_gathered")

    def __init__(self, *, m=None, layout="nk", out_dtype=None, transfer="auto", backward_transfer="auto",
                 chunk_rows=0, comm_blocks=0, gathered=None, copy_gathered=False):
        fn = "loom.nn.TpOptions"
        self.m = m
        self.layout = tp._layout(fn, layout)
        self.out_dtype = None if out_dtype is None else dtype_name(out_dtype)
        self.transfer = tp._transfer(fn, transfer)
        self.backward_transfer = tp._transfer(fn, backward_transfer)
        self.chunk_rows = tp._count(fn, "chunk_rows", chunk_rows, 0)
        self.comm_blocks = tp._count(fn, "comm_blocks", comm_blocks, 0)
        self.gathered = gathered
        self.copy_gathered = bool(copy_gathered)


def _compute_input(fn, x):
    if not isinstance(x, torch.Tensor):
        raise InvalidArgumentError(f"{fn}: x is a {type(x).__name__}, not a tensor")
    if dtype_name(x.dtype) not in _COMPUTE:
        raise InvalidArgumentError(f"{fn}: x has dtype {x.dtype}; expected torch.bfloat16 or torch.float16 (loom's "
                                   f"GEMM operands; the modules cast to their compute_dtype)")


def _cast(t, dtype):
    return t if t is None or t.dtype == dtype else t.to(dtype)


def _out_dtype(opt, x):
    return getattr(torch, opt.out_dtype) if opt.out_dtype is not None else x.dtype


class ColumnParallelLinearFunction(torch.autograd.Function):
    """y [m, n] = AllGather(x shards) @ weight^T (+ bias): x [this rank's
    rows, k] (bf16/fp16), weight this rank's [n, k] (TpOptions.layout "nk";
    [k, n] for "kn"), any float dtype (cast to x's), bias [n].

    Backward: dx = this rank's rows of ReduceScatter(dy @ weight)
    (loom_gemm_rs, the weight read in the other layout), d weight = dy^T @
    x_full from the gathered input kept by the forward, d bias = dy summed
    over the rows. apply(x, weight, bias, comm, options)."""

    @staticmethod
    def forward(ctx, x, weight, bias, comm, opt):
        _compute_input("loom.nn.ColumnParallelLinear", x)
        w = _cast(weight, x.dtype)
        od = _out_dtype(opt, x)
        b = _cast(bias, od)
        plan = tp.ag_gemm_plan(comm, x, w, bias=b is not None, m=opt.m, layout=opt.layout, out_dtype=od,
                               transfer=opt.transfer, chunk_rows=opt.chunk_rows, comm_blocks=opt.comm_blocks)
        buf = opt.gathered if opt.gathered is not None else plan.gathered_buffer()
        y = plan.ag_gemm(x, w, b, gathered=buf)
        if opt.gathered is not None and not opt.copy_gathered:
            torch.autograd.graph.increment_version(buf)  # loom wrote it: a saved older version is stale
            x_full = buf
        else:
            x_full = buf.clone()  # the plan's buffer is shared by every caller of the plan
        ctx.save_for_backward(x_full, w)
        ctx.comm, ctx.opt = comm, opt
        ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
        ctx.b_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx, gy):
        x_full, w = ctx.saved_tensors
        opt = ctx.opt
        g = gy.contiguous()
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:  # collective: every rank needs it or none
            ga = _cast(g, w.dtype)
            plan = tp.gemm_rs_plan(ctx.comm, ga, w, layout=tp.SWAP_LAYOUT[opt.layout], out_dtype=ctx.x_dtype,
                                   transfer=opt.backward_transfer)
            gx = plan.gemm_rs(ga, w)
        if ctx.needs_input_grad[1]:
            gw = tp.weight_grad(g, x_full, opt.layout, ctx.w_dtype)
        if ctx.needs_input_grad[2]:
            gb = g.sum(0, dtype=torch.float32).to(ctx.b_dtype)
        return gx, gw, gb, None, None


class RowParallelLinearFunction(torch.autograd.Function):
    """y [this rank's rows, n] = this rank's rows of ReduceScatter over ranks
    of x @ weight^T (+ bias, once): x [m, k] (bf16/fp16), weight this rank's
    [n, k] ("nk"; [k, n] for "kn"), bias [n] (the same on every rank).

    Backward: dy_full = AllGather(dy shards) and dx = dy_full @ weight in
    one loom_ag_gemm (the weight read in the other layout), d weight =
    dy_full^T @ x, d bias = dy_full summed over the rows (complete on every
    rank: no all-reduce). apply(x, weight, bias, comm, options)."""

    @staticmethod
    def forward(ctx, x, weight, bias, comm, opt):
        _compute_input("loom.nn.RowParallelLinear", x)
        w = _cast(weight, x.dtype)
        od = _out_dtype(opt, x)
        b = _cast(bias, od)
        plan = tp.gemm_rs_plan(comm, x, w, bias=b is not None, layout=opt.layout, out_dtype=od,
                               transfer=opt.transfer, comm_blocks=opt.comm_blocks)
        y = plan.gemm_rs(x, w, b)
        ctx.save_for_backward(x, w)
        ctx.comm, ctx.opt = comm, opt
        ctx.w_dtype = weight.dtype
        ctx.b_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        opt = ctx.opt
        ga = _cast(gy, w.dtype).contiguous()
        plan = tp.ag_gemm_plan(ctx.comm, ga, w, m=x.shape[0], layout=tp.SWAP_LAYOUT[opt.layout], out_dtype=x.dtype,
                               transfer=opt.backward_transfer)
        gy_full = plan.gathered_buffer()  # read below, on this stream, before the plan's next call writes it
        gx = plan.ag_gemm(ga, w, gathered=gy_full)
        gw = tp.weight_grad(gy_full, x, opt.layout, ctx.w_dtype) if ctx.needs_input_grad[1] else None
        gb = gy_full.sum(0, dtype=torch.float32).to(ctx.b_dtype) if ctx.needs_input_grad[2] else None
        return (gx if ctx.needs_input_grad[0] else None), gw, gb, None, None


def column_parallel_linear(comm, x, weight, bias=None, **options):
    """ColumnParallelLinearFunction.apply with TpOptions(**options)."""
    return ColumnParallelLinearFunction.apply(x, weight, bias, comm, TpOptions(**options))


def row_parallel_linear(comm, x, weight, bias=None, **options):
    """RowParallelLinearFunction.apply with TpOptions(**options) (m, gathered
    and chunk_rows are column-parallel options)."""
    for k in ("m", "gathered", "chunk_rows"):
        if options.get(k):
            raise InvalidArgumentError(f"loom.nn.row_parallel_linear: {k}= is an option of the column-parallel layer")
    return RowParallelLinearFunction.apply(x, weight, bias, comm, TpOptions(**options))


class _ContiguousGrad(torch.autograd.Function):
    """Identity; the gradient made contiguous on its way back."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.contiguous()


def _sequence_dim(fn, d):
    if d not in (0, 1):
        raise InvalidArgumentError(f"{fn}: sequence_dim={d!r}; expected 0 (x is [s, ..., features], Megatron's "
                                   f"layout) or 1 (x is [b, s, ..., features], batch first)")
    return d


def _no_copy_engine(fn, arg, transfer, which):
    if tp._transfer(fn, transfer) == tp.TpTransfer.COPY_ENGINE:
        raise InvalidArgumentError(f"{fn}: {arg}='copy_engine': the {which} of this layer is a GEMM+ReduceScatter, "
                                   f"whose partials are reduced by SMs; use 'sm_copy', 'sequential' or 'auto'")


class _TpLinear(torch.nn.Module):
    """What both tensor-parallel layers share: parameters of this rank's
    shard, nn.Linear's initialisation of the full layer, the casts."""

    def __init__(self, fn, comm, in_features, out_features, weight_shape, bias_features, bias, dtype, compute_dtype,
                 out_dtype, device, transfer, backward_transfer, comm_blocks):
        super().__init__()
        if dtype_name(compute_dtype) not in _COMPUTE:
            raise InvalidArgumentError(f"{fn}: compute_dtype={compute_dtype}; expected torch.bfloat16 or "
                                       f"torch.float16")
        self.comm = comm
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.compute_dtype = getattr(torch, dtype_name(compute_dtype))
        self.out_dtype = None if out_dtype is None else getattr(torch, dtype_name(out_dtype))
        self.transfer, self.backward_transfer = transfer, backward_transfer
        self.comm_blocks = comm_blocks
        dtype = self.compute_dtype if dtype is None else dtype
        device = f"cuda:{comm.device}" if device is None else device
        self.weight = torch.nn.Parameter(torch.empty(*weight_shape, dtype=dtype, device=device))
        self.bias = (torch.nn.Parameter(torch.empty(bias_features, dtype=dtype, device=device)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        """torch.nn.Linear's initialisation of the full layer: weight and bias
        uniform in +-1/sqrt(in_features) (this rank's shard from torch's
        generator on this rank: seed ranks differently, or use load_full)."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def forward(self, x, *args, **kwargs):
        """The layer on x (see the class); with sequence_dim=1, x is
        batch-first [b, s, ..., features] and the sequence (dim 1) is what the
        ranks split: the layer runs on x.transpose(0, 1) (a copy when b > 1)
        and returns its output transposed back (contiguous: a copy when b > 1);
        the gradient it hands back for x is contiguous too (not the
        transposed view autograd would give: attention kernels upstream
        mishandled those strides, measured: cuDNN's SDPA backward)."""
        if self.sequence_dim == 1 and isinstance(x, torch.Tensor) and x.dim() > 2:
            x = _ContiguousGrad.apply(x)
            return self._forward(x.transpose(0, 1), *args, **kwargs).transpose(0, 1).contiguous()
        return self._forward(x, *args, **kwargs)

    def _input(self, fn, x, features):
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] != features:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise InvalidArgumentError(f"{fn}: x has shape {got}; expected [rows, {features}] or "
                                       f"[sequence, ..., {features}]")
        x = _cast(x, self.compute_dtype)
        return x.reshape(-1, features).contiguous()

    def _compute_params(self):
        """(weight in compute_dtype, bias in the output dtype, output dtype):
        what the compiled path hands the registered op (autograd casts the
        gradients back)."""
        od = self.out_dtype if self.out_dtype is not None else self.compute_dtype
        return _cast(self.weight, self.compute_dtype), _cast(self.bias, od), od

    @classmethod
    def from_linear(cls, comm, linear, **kwargs):
        """This rank's shard of a full torch.nn.Linear (its dtype unless dtype= is given)."""
        kwargs.setdefault("dtype", linear.weight.dtype)
        m = cls(comm, linear.in_features, linear.out_features, bias=linear.bias is not None, **kwargs)
        m.load_full(linear.weight, linear.bias)
        return m


class ColumnParallelLinear(_TpLinear):
    """The column-parallel linear layer of sequence parallelism on W ranks:
    x [this rank's rows, in_features] (or [sequence / W, ..., in_features])
    -> y [all rows, out_features / W] (or [sequence, ..., out_features / W])
    = AllGather(x) @ weight^T + bias, this rank's output features
    [p * out_features / W, (p+1) * out_features / W) of the full layer.
    Collective to build and to call (same arguments on every rank).

    weight [out_features / W, in_features], bias [out_features / W]: this
    rank's rows of the full layer's (dtype, default compute_dtype). Inputs
    are cast to compute_dtype (bf16/fp16); out_dtype: the output's (default
    compute_dtype). forward(x, m=None): m, the global rows, for 2-D inputs
    whose shards are uneven (see tp.py). The gathered input lives in a
    symmetric buffer of this layer, grown as m grows (the old one is left to
    comm.free_unused(); free_buffers() frees the current one);
    copy_gathered=True keeps a copy per forward instead (see the top of this
    file)."""

    def __init__(self, comm, in_features, out_features, bias=True, *, dtype=None, compute_dtype=torch.bfloat16,
                 out_dtype=None, device=None, transfer="auto", backward_transfer="auto", chunk_rows=0,
                 comm_blocks=0, copy_gathered=False, sequence_dim=0):
        fn = "loom.nn.ColumnParallelLinear"
        if int(out_features) % comm.size:
            raise InvalidArgumentError(f"{fn}: out_features={out_features} is not a multiple of the world size "
                                       f"{comm.size}")
        self.local_out = int(out_features) // comm.size
        super().__init__(fn, comm, in_features, out_features, (self.local_out, int(in_features)), self.local_out,
                         bias, dtype, compute_dtype, out_dtype, device, transfer, backward_transfer, comm_blocks)
        self.chunk_rows = chunk_rows
        self.copy_gathered = bool(copy_gathered)
        self.sequence_dim = _sequence_dim(fn, sequence_dim)
        self._gathered = None
        TpOptions(transfer=transfer, backward_transfer=backward_transfer, chunk_rows=chunk_rows,
                  comm_blocks=comm_blocks)  # refuses bad options now rather than at the first forward
        _no_copy_engine(fn, "backward_transfer", backward_transfer, "backward")

    def gathered_buffer(self, m):
        """This layer's symmetric [m, in_features] buffer (compute_dtype) for
        the gathered input: a view of its allocation, which grows (a
        collective comm.empty) when m grows."""
        need = int(m) * self.in_features
        buf = self._gathered
        if buf is None or buf.numel() < need or buf.dtype != self.compute_dtype:
            buf = self.comm.empty((int(m), self.in_features), self.compute_dtype)
            self._gathered = buf
        return buf.view(-1)[:need].view(int(m), self.in_features)

    def free_buffers(self):
        """Collective: frees this layer's gathered-input buffer (comm.free;
        no backward of an earlier forward may be pending); the next forward
        allocates a new one. comm.close() frees it too. Buffers the layer
        outgrew are left to comm.free_unused()."""
        if self._gathered is not None:
            buf, self._gathered = self._gathered, None
            self.comm.free(buf)

    def _forward(self, x, m=None):
        fn = "loom.nn.ColumnParallelLinear"
        nd = isinstance(x, torch.Tensor) and x.dim() > 2
        if nd and m is not None:
            raise InvalidArgumentError(f"{fn}: m= is for 2-D inputs (uneven shards); x has shape {tuple(x.shape)}")
        lead = tuple(x.shape[:-1]) if isinstance(x, torch.Tensor) else ()
        x2 = self._input(fn, x, self.in_features)
        mm = x2.shape[0] * self.comm.size if m is None else int(m)
        if _compiling():  # the registered op, which torch.compile traces
            w, b, od = self._compute_params()
            y = functional.ag_gemm(x2, w, self.comm, b, out_dtype=od, transfer=self.transfer, m=mm,
                                   chunk_rows=self.chunk_rows, comm_blocks=self.comm_blocks,
                                   backward_transfer=self.backward_transfer)
            return y.view(lead[0] * self.comm.size, *lead[1:], self.local_out) if nd else y
        opt = TpOptions(m=mm, out_dtype=self.out_dtype, transfer=self.transfer,
                        backward_transfer=self.backward_transfer, chunk_rows=self.chunk_rows,
                        comm_blocks=self.comm_blocks,
                        gathered=None if self.copy_gathered else self.gathered_buffer(mm))
        y = ColumnParallelLinearFunction.apply(x2, self.weight, self.bias, self.comm, opt)
        if nd:
            y = y.view(lead[0] * self.comm.size, *lead[1:], self.local_out)
        return y

    def load_full(self, weight, bias=None):
        """Copies this rank's shard of the full layer's weight [out_features,
        in_features] (and bias [out_features])."""
        p, n = self.comm.rank, self.local_out
        with torch.no_grad():
            self.weight.copy_(weight[p * n:(p + 1) * n])
            if self.bias is not None and bias is not None:
                self.bias.copy_(bias[p * n:(p + 1) * n])
        return self

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} ({self.local_out} on rank "
                f"{self.comm.rank} of {self.comm.size}), bias={self.bias is not None}, "
                f"compute_dtype={self.compute_dtype}, transfer={self.transfer!r}")


class RowParallelLinear(_TpLinear):
    """The row-parallel linear layer of sequence parallelism on W ranks:
    x [all rows, in_features / W] (or [sequence, ..., in_features / W], the
    output of a ColumnParallelLinear) -> y [this rank's rows, out_features]
    (or [sequence / W, ..., out_features]) = this rank's rows of the sum
    over ranks of x @ weight^T, + bias (once). Collective to build and to
    call (same arguments on every rank).

    weight [out_features, in_features / W]: this rank's columns of the full
    layer's; bias [out_features]: the full bias, the same on every rank (its
    gradient is complete on every rank). Dtypes as ColumnParallelLinear."""

    def __init__(self, comm, in_features, out_features, bias=True, *, dtype=None, compute_dtype=torch.bfloat16,
                 out_dtype=None, device=None, transfer="auto", backward_transfer="auto", comm_blocks=0,
                 sequence_dim=0):
        fn = "loom.nn.RowParallelLinear"
        if int(in_features) % comm.size:
            raise InvalidArgumentError(f"{fn}: in_features={in_features} is not a multiple of the world size "
                                       f"{comm.size}")
        self.local_in = int(in_features) // comm.size
        super().__init__(fn, comm, in_features, out_features, (int(out_features), self.local_in),
                         int(out_features), bias, dtype, compute_dtype, out_dtype, device, transfer,
                         backward_transfer, comm_blocks)
        TpOptions(transfer=transfer, backward_transfer=backward_transfer, comm_blocks=comm_blocks)
        _no_copy_engine(fn, "transfer", transfer, "forward")
        self.sequence_dim = _sequence_dim(fn, sequence_dim)

    def _forward(self, x):
        fn = "loom.nn.RowParallelLinear"
        nd = isinstance(x, torch.Tensor) and x.dim() > 2
        lead = tuple(x.shape[:-1]) if isinstance(x, torch.Tensor) else ()
        if nd and lead[0] % self.comm.size:
            raise InvalidArgumentError(f"{fn}: x has shape {tuple(x.shape)}: an input of more than 2 dimensions "
                                       f"needs its first (the sequence) a multiple of the world size "
                                       f"{self.comm.size}; pass it 2-D for uneven shards")
        x2 = self._input(fn, x, self.local_in)
        if _compiling():  # the registered op, which torch.compile traces
            w, b, od = self._compute_params()
            y = functional.gemm_rs(x2, w, self.comm, b, out_dtype=od, transfer=self.transfer,
                                   comm_blocks=self.comm_blocks, backward_transfer=self.backward_transfer)
            return y.view(lead[0] // self.comm.size, *lead[1:], self.out_features) if nd else y
        opt = TpOptions(out_dtype=self.out_dtype, transfer=self.transfer, backward_transfer=self.backward_transfer,
                        comm_blocks=self.comm_blocks)
        y = RowParallelLinearFunction.apply(x2, self.weight, self.bias, self.comm, opt)
        if nd:
            y = y.view(lead[0] // self.comm.size, *lead[1:], self.out_features)
        return y

    def load_full(self, weight, bias=None):
        """Copies this rank's shard of the full layer's weight [out_features,
        in_features] (its columns) and the whole bias."""
        p, k = self.comm.rank, self.local_in
        with torch.no_grad():
            self.weight.copy_(weight[:, p * k:(p + 1) * k])
            if self.bias is not None and bias is not None:
                self.bias.copy_(bias)
        return self

    def extra_repr(self):
        return (f"in_features={self.in_features} ({self.local_in} on rank {self.comm.rank} of {self.comm.size}), "
                f"out_features={self.out_features}, bias={self.bias is not None}, "
                f"compute_dtype={self.compute_dtype}, transfer={self.transfer!r}")


# ---- mixture of experts (expert parallelism) ------------------------------------

_MOE_SMALL = 16  # fp32 columns of the rows that carry each token's router weights and ids (k <= 8)
MOE_LAYERS = Names("loom_moe", "loom.nn.MoE", "loom::moe_layer", "layer")  # by .name (the registered ops)


def _slot_experts(off, rows, n):
    """The local expert of each receive-buffer row (n for rows past the last
    expert's), from the offsets on the device: no host synchronisation."""
    slots = torch.arange(rows, device=off.device)
    return torch.searchsorted(off[1:], slots, right=True).clamp_max(max(n - 1, 0))


def moe_forward(layer, x, weights, gate_up, down, ids):
    """The MoE layer's forward (see MoEFunction): (out [tokens, H], saved),
    saved = (xr, off, gu, h, yr) for moe_backward. xr and off are views of
    the forward plan's buffers (the next forward overwrites them); gu, h, yr
    are new tensors ([0, ...] on a rank without experts)."""
    F_, n = layer.ffn, layer.local_experts
    xr, off = layer._fwd.dispatch(x, ids)
    if n > 0:
        gu = ops.gemm_grouped(xr, gate_up, off)                         # [R, 2F]
        h = torch.nn.functional.silu(gu[:, :F_]) * gu[:, F_:]           # [R, F]
        yr = ops.gemm_grouped(h, down, off)                             # [R, H]
    else:
        gu, h, yr = xr.new_empty((0, 2 * F_)), xr.new_empty((0, F_)), xr.new_empty((0, layer.hidden))
    return layer._fwd.combine(yr if n > 0 else xr, weights), (xr, off, gu, h, yr)


def moe_backward(layer, dout, weights, gate_up, down, ids, xr, off, gu, h, yr, need=(True, True, True)):
    """The MoE layer's backward (see MoEFunction) from moe_forward's saved
    tensors: (dx, d weights, d gate_up, d down); need = (dx, d weights,
    the experts' weight gradients): None where not needed (every rank must
    ask for the same: dx and d weights are collective)."""
    F_, n, k = layer.ffn, layer.local_experts, ids.shape[1]
    T = ids.shape[0]
    dor, _ = layer._bwd.dispatch(dout.to(layer.dtype).contiguous(), ids)   # dOut[t] at every row (t, j)
    small = torch.zeros(T, _MOE_SMALL, dtype=torch.float32, device=dout.device)
    small[:, :k] = weights
    small[:, 8:8 + k] = ids.float()
    sr, _ = layer._small.dispatch(small, ids)                             # [R, 16]: the row's token's weights, ids
    R = dor.shape[0]
    expert = (layer.first_expert + _slot_experts(off, R, n)).float()
    match = (sr[:, 8:8 + k] == expert[:, None]).float()                   # [R, k]: which j the row is
    w_row = (sr[:, :k] * match).sum(1, keepdim=True)
    dyr = (dor.float() * w_row).to(layer.dtype)                           # d y_(t,j) = w_tj dOut[t]
    ones = torch.ones_like(weights)
    if n > 0:
        dh = ops.gemm_grouped(dyr, down, off, layout="kn").float()       # [R, F]
        g, u = gu[:, :F_].float(), gu[:, F_:].float()
        sg = torch.sigmoid(g)
        dgu = torch.cat([dh * u * sg * (1 + g * (1 - sg)), dh * g * sg], dim=1).to(layer.dtype)
        dxr = ops.gemm_grouped(dgu, gate_up, off, layout="kn")            # [R, H]
        dw_row = (dor.float() * yr.float()).sum(1, keepdim=True)
    else:
        dxr, dw_row = dor, torch.zeros(R, 1, device=dout.device)
    dx = layer._bwd.combine(dxr, ones) if need[0] else None
    dw = None
    if need[1]:
        rows = torch.zeros(R, _MOE_SMALL, dtype=torch.float32, device=dout.device)
        rows[:, :k] = match * dw_row
        dw = layer._small.combine(rows, ones)[:, :k].contiguous()
    dgate_up = ddown = None
    if need[2]:
        if n > 0:
            ddown = expert_weight_grads(dyr, h, off, n).to(down.dtype)          # [n, H, F]
            dgate_up = expert_weight_grads(dgu, xr, off, n).to(gate_up.dtype)   # [n, 2F, H]
        else:
            dgate_up, ddown = torch.zeros_like(gate_up), torch.zeros_like(down)
    return dx, dw, dgate_up, ddown


def _grouped_mm_k_ok(a):
    """1 where torch._grouped_mm can group a GEMM's k (2-D x 2-D with
    offsets: bf16 on compute capability 9.0 or newer)."""
    return (hasattr(torch, "_grouped_mm") and a.is_cuda and a.dtype == torch.bfloat16
            and torch.cuda.get_device_capability(a.device) >= (9, 0))


def expert_weight_grads(g, x, off, n):
    """Each local expert's weight gradient from its rows of the receive
    layout: out[l] = g[off[l]:off[l+1]]^T x[off[l]:off[l+1]] ([n, g.shape[1],
    x.shape[1]], fp32 accumulation, bf16 or fp32 out), zero for an expert without rows; rows
    past off[n] are never read. With torch._grouped_mm (its k grouped by
    the offsets, read on the device) there is no host synchronisation;
    elsewhere (fp16, older GPUs) one GEMM per expert after reading the
    offsets on the host."""
    if _grouped_mm_k_ok(g):
        ends = off[1:n + 1].to(torch.int32)
        return torch._grouped_mm(g.t(), x, offs=ends)  # bf16 out, rounded once from fp32
    out = torch.zeros(n, g.shape[1], x.shape[1], dtype=torch.float32, device=g.device)
    bounds = off.tolist()  # the row counts: one host synchronisation
    for e in range(n):
        a, b = bounds[e], bounds[e + 1]
        if b > a:
            out[e] = g[a:b].float().t() @ x[a:b].float()
    return out


class MoEFunction(torch.autograd.Function):
    """out = the expert-parallel SwiGLU MoE layer on x (see MoE). Forward:
    dispatch, grouped gate/up GEMM, SwiGLU, grouped down GEMM, combine.
    Backward (the adjoints): the output gradient dispatched to the experts
    (a second plan, so the forward's receive buffer survives), scaled per
    row by its router weight (carried to the experts by a 16-column fp32
    dispatch of each token's weights and ids), the down and gate/up GEMMs'
    input gradients as grouped GEMMs with the weights read in the other
    layout, the SwiGLU derivative, dx = combine of the rows' gradients with
    unit weights, the router weights' gradient <dOut[t], y_(t,j)> combined
    back through the small plan, and the experts' weight gradients as
    GEMMs whose k is each expert's rows (expert_weight_grads: no host
    synchronisation with bf16 on Hopper).
    apply(x, weights, gate_up, down, ids, layer). Under torch.compile the
    layer runs the same two steps as registered ops (loom::moe_layer,
    loom::moe_layer_backward) instead."""

    @staticmethod
    def forward(ctx, x, weights, gate_up, down, ids, layer):
        out, saved = moe_forward(layer, x, weights, gate_up, down, ids)
        torch.autograd.graph.increment_version(saved[0])  # a later forward overwrites it: stale backwards refuse
        ctx.layer = layer
        ctx.save_for_backward(weights, gate_up, down, ids, *saved)
        return out

    @staticmethod
    def backward(ctx, dout):
        need = ctx.needs_input_grad
        dx, dw, dgate_up, ddown = moe_backward(ctx.layer, dout, *ctx.saved_tensors,
                                               need=(need[0], need[1], need[2] or need[3]))
        return dx, dw, dgate_up, ddown, None, None


class MoE(torch.nn.Module):
    """An expert-parallel SwiGLU mixture-of-experts layer that trains:
    E experts split over the W ranks (loom.MoE's split: this rank owns
    experts first_expert .. first_expert + local_experts - 1), each
    y = W_down (silu(W_gate x) * W_up x). forward(x [tokens, H], ids
    [tokens, k] int32, weights [tokens, k] float32) -> [tokens, H] =
    sum over j of weights[t, j] expert_{ids[t, j]}(x[t]); gradients for x,
    the router weights and this rank's experts' weights (the router itself
    is the caller's). Collective to build and to call (every rank, the
    same order; tokens may differ per rank, at most max_tokens).

    gate_up [local_experts, 2F, H] (each expert's gate then up projection,
    nn.Linear's [out, in] layout) and down [local_experts, H, F]: this
    rank's experts (load_full takes them from all experts' weights).
    dtype bf16 or fp16. The layer holds three dispatch plans (symmetric
    receive buffers of the worst case W max_tokens min(k, ceil(E / W))
    rows): the forward's, the backward's, and a 16-column one for the
    router weights. The forward's received rows are kept for the backward
    without a copy: a second forward before the backward makes autograd
    refuse that backward ("modified by an inplace operation"). capacity: as
    loom.MoE (0: dropless)."""

    def __init__(self, comm, hidden, ffn, experts, topk, max_tokens, *, capacity=0, dtype=torch.bfloat16,
                 device=None):
        super().__init__()
        from .moe import MoE as Plan
        fn = "loom.nn.MoE"
        if dtype_name(dtype) not in _COMPUTE:
            raise InvalidArgumentError(f"{fn}: dtype={dtype}; expected torch.bfloat16 or torch.float16")
        if not 1 <= int(topk) <= 8:
            raise InvalidArgumentError(f"{fn}: topk={topk} must be in [1, 8]")
        self.comm, self.hidden, self.ffn = comm, int(hidden), int(ffn)
        self.experts, self.topk, self.max_tokens = int(experts), int(topk), int(max_tokens)
        self.dtype = getattr(torch, dtype_name(dtype))
        self._fwd = Plan(comm, hidden, experts, topk, max_tokens, capacity=capacity, dtype=dtype)
        self._bwd = Plan(comm, hidden, experts, topk, max_tokens, capacity=capacity, dtype=dtype)
        self._small = Plan(comm, _MOE_SMALL, experts, topk, max_tokens, capacity=capacity, dtype="float32")
        self.local_experts, self.first_expert = self._fwd.local_experts, self._fwd.first_expert
        self.name = MOE_LAYERS.add(self)  # how the registered ops name the layer (its plans)
        device = f"cuda:{comm.device}" if device is None else device
        n, H, F_ = self.local_experts, self.hidden, self.ffn
        self.gate_up = torch.nn.Parameter(torch.empty(n, 2 * F_, H, dtype=self.dtype, device=device))
        self.down = torch.nn.Parameter(torch.empty(n, H, F_, dtype=self.dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self):
        """nn.Linear's initialisation of each expert's projections (this
        rank's experts from torch's generator here: seed ranks differently,
        or use load_full)."""
        with torch.no_grad():
            self.gate_up.uniform_(-1 / math.sqrt(self.hidden), 1 / math.sqrt(self.hidden))
            self.down.uniform_(-1 / math.sqrt(self.ffn), 1 / math.sqrt(self.ffn))

    def load_full(self, gate, up, down):
        """This rank's experts from all experts' weights: gate, up [E, F, H],
        down [E, H, F]."""
        f, n = self.first_expert, self.local_experts
        with torch.no_grad():
            self.gate_up.copy_(torch.cat([gate[f:f + n], up[f:f + n]], dim=1))
            self.down.copy_(down[f:f + n])
        return self

    def forward(self, x, ids, weights):
        fn = "loom.nn.MoE"
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.hidden:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise InvalidArgumentError(f"{fn}: x has shape {got}; expected [tokens, hidden={self.hidden}]")
        x, weights = _cast(x, self.dtype).contiguous(), weights.float().contiguous()
        ids = ids.to(torch.int32).contiguous()
        if _compiling():
            return functional.moe_layer(x, ids, weights, self.gate_up, self.down, self.comm, layer=self.name)
        return MoEFunction.apply(x, weights, self.gate_up, self.down, ids, self)

    def close(self):
        """Collective: destroys the layer's plans."""
        MOE_LAYERS.drop(self.name)
        for p in (self._fwd, self._bwd, self._small):
            p.close()

    def extra_repr(self):
        return (f"hidden={self.hidden}, ffn={self.ffn}, experts={self.experts} ({self.local_experts} here from "
                f"{self.first_expert}), topk={self.topk}, max_tokens={self.max_tokens}, dtype={self.dtype}")
