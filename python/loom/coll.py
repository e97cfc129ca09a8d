"""coll.py - loom's collectives with a fused epilogue on torch tensors
(loom_allreduce, loom_reduce_scatter, loom_all_gather).

    all_reduce(comm, x, bias=, residual=, norm="rms", norm_weight=, ...)
        out [x's shape] = norm(dropout(act(scale * sum over ranks of x + bias)) + residual), on every rank
    reduce_scatter(comm, x, ...)     this rank's slice of the same (before the norm: whole rows)
    all_gather(comm, x, size=None)   the ranks' slices side by side
    slice_range(count, unit, W, p)   which elements rank p owns (loom.h's slicing)
    CollPlan                         one plan: .all_reduce / .reduce_scatter / .all_gather, .info

Shapes. A tensor of 2 or more dimensions is rows of cols = the product of
its trailing dimensions: the slices are whole rows (rank p owns rows
[min(R, p S), min(R, (p+1) S)) of R, S = ceil(R / W), as the tensor-parallel
ops cut theirs), and a bias and a norm run per row (bias [cols], norm_weight
/ norm_bias [cols]). A 1-D tensor is a flat vector cut in units of 8
elements (no bias or norm). reduce_scatter returns this rank's slice with
the input's trailing dimensions ([rows of this rank, ...]; may have no
rows); all_gather takes this rank's slice and returns the whole, whose first
dimension `size` defaults to the slice's times W (equal slices; pass size
for uneven ones).

Memory. loom's collectives load the input from symmetric memory; an input
that is not the comm's symmetric memory is first copied into the plan's own
symmetric buffer on the same stream (a local copy, the price of taking any
tensor). The output is a new tensor unless `out` is given (any device
memory of this GPU).

Arithmetic (loom.h): the sum over ranks in fp32 in rank order (the same
bits on every rank and run), the epilogue and norm in fp32, rounded once to
out_dtype (default: the input's). dtypes bfloat16, float16, float32.
Every call is collective (same shapes, dtypes and epilogue fields on every
rank, the same order); plans are cached in the comm per shape and options.
"""
import ctypes
import math

from . import _lib, _torch
from ._checks import ITEMSIZE, check_tensor, dtype_name, loom_dtype, numel, shape_of
from ._plan import PlanHandle
from ._structs import CollAlgo, CollDesc, CollPlanInfo, Norm
from .errors import InvalidArgumentError
from .ops import _run_on_device
from .tp import _count, _epilogue

_DTYPES = ("bfloat16", "float16", "float32")
_OPS = {"all_reduce": ("loom_plan_allreduce", "loom_allreduce"),
        "reduce_scatter": ("loom_plan_reduce_scatter", "loom_reduce_scatter"),
        "all_gather": ("loom_plan_all_gather", "loom_all_gather")}
NORMS = {"none": Norm.NONE, "rms": Norm.RMS, "layer": Norm.LAYER}
ALGOS = {a.name.lower(): a for a in CollAlgo}
FLAT_UNIT = 8  # elements per slicing unit of a flat vector (loom.h)


def slice_range(count, unit, world, rank):
    """(begin, end) in elements of the slice rank `rank` of `world` owns of
    `count` elements cut in units of `unit` elements (loom.h: S =
    ceil(ceil(count / unit) / W) units; rank p owns [min(count, p S),
    min(count, (p+1) S)))."""
    count, unit = int(count), int(unit)
    s = -(-(-(-count // unit)) // max(int(world), 1)) * unit
    return min(count, int(rank) * s), min(count, (int(rank) + 1) * s)


def layout_of(shape):
    """(count, cols, unit) of a tensor of `shape`: rows of cols for 2+
    dimensions (cols = product of the trailing ones), a flat vector (cols 0,
    unit 8) for 1 dimension."""
    shape = tuple(int(s) for s in shape)
    if len(shape) >= 2:
        cols = numel(shape[1:])
        return numel(shape), cols, cols
    return numel(shape), 0, FLAT_UNIT


def slice_shape(shape, world, rank):
    """The shape of rank `rank`'s slice of a tensor of `shape`."""
    count, cols, unit = layout_of(shape)
    b, e = slice_range(count, unit, world, rank)
    if cols:
        return ((e - b) // cols,) + tuple(int(s) for s in shape[1:])
    return (e - b,)


def gathered_shape(shape, world, rank, size=None, fn="loom.all_gather"):
    """The shape all_gather returns for rank `rank`'s slice of `shape`
    (size: the first dimension of the whole; None: the slice's times W),
    checking that the slice is rank's of it."""
    shape = tuple(int(s) for s in shape)
    if not shape:
        raise InvalidArgumentError(f"{fn}: x is 0-dimensional; expected this rank's slice of at least 1 dimension")
    whole = ((shape[0] * int(world) if size is None else _count(fn, "size", size, 1)),) + shape[1:]
    want = slice_shape(whole, world, rank)
    if want != shape:
        raise InvalidArgumentError(
            f"{fn}: x has shape {shape}; rank {rank} of {world} owns a slice of shape {want} of the whole {whole}"
            + ("" if size is not None else " (pass size= for uneven slices)"))
    return whole


class CollSpec:
    """What a collective plan is made for (the cache key)."""

    def __init__(self, comm, op, shape, dtype, out_dtype, norm="none", eps=1e-5, algo="auto", blocks=0,
                 fn="loom.all_reduce"):
        self.op, self.world, self.rank = op, comm.size, comm.rank
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype_name(dtype)
        loom_dtype(self.dtype, fn, "x.dtype", _DTYPES)
        self.out_dtype = self.dtype if out_dtype is None else dtype_name(out_dtype)
        loom_dtype(self.out_dtype, fn, "out_dtype", _DTYPES)
        if op == "all_gather" and self.out_dtype != self.dtype:
            raise InvalidArgumentError(f"{fn}: out_dtype={self.out_dtype}; all_gather copies, its output has the "
                                       f"input's dtype {self.dtype}")
        self.count, self.cols, self.unit = layout_of(self.shape)
        if self.count < 1:
            raise InvalidArgumentError(f"{fn}: the whole tensor has shape {self.shape}: no elements")
        if not isinstance(norm, str) or norm.lower() not in NORMS:
            raise InvalidArgumentError(f"{fn}: norm={norm!r}; expected one of {sorted(NORMS)}")
        self.norm = norm.lower()
        if self.norm != "none" and (op == "all_gather" or not self.cols):
            raise InvalidArgumentError(f"{fn}: norm={norm!r} needs rows: a tensor of 2+ dimensions "
                                       f"(shape {self.shape}), and a reduction")
        self.eps = float(eps)
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise InvalidArgumentError(f"{fn}: eps={eps!r} must be finite and > 0")
        if not isinstance(algo, str) or algo.lower() not in ALGOS:
            raise InvalidArgumentError(f"{fn}: algo={algo!r}; expected one of {sorted(ALGOS)}")
        self.algo = algo.lower()
        if self.algo != "auto" and op != "all_reduce":
            raise InvalidArgumentError(f"{fn}: algo={algo!r} is all_reduce's choice; {op} takes 'auto'")
        self.blocks = _count(fn, "blocks", blocks, 0)
        self.slice = slice_range(self.count, self.unit, self.world, self.rank)

    @property
    def key(self):
        return ("coll", self.op, self.count, self.cols, self.dtype, self.out_dtype, self.norm, self.eps, self.algo,
                self.blocks)

    @property
    def slice_shape(self):
        return slice_shape(self.shape, self.world, self.rank)

    @property
    def in_elems(self):
        """Elements of the symmetric input: the whole (reductions) or the
        largest slice (all_gather)."""
        if self.op != "all_gather":
            return self.count
        return slice_range(self.count, self.unit, self.world, 0)[1]

    def desc(self):
        return CollDesc(count=self.count, dtype=int(loom_dtype(self.dtype, "", "")),
                        out_type=int(loom_dtype(self.out_dtype, "", "")), cols=self.cols, norm=int(NORMS[self.norm]),
                        norm_eps=self.eps, algo=int(ALGOS[self.algo]), world_size=self.world, blocks=self.blocks)


class CollPlan(PlanHandle):
    """A plan of loom_plan_allreduce / _reduce_scatter / _all_gather for one
    CollSpec. Creation and close() are collective. .info: the plan's choice
    (algo, slice, blocks, bytes held)."""

    def __init__(self, comm, spec):
        self.comm, self.spec = comm, spec
        self._plan = None
        self._input = None
        self._desc = spec.desc()
        info = self._create(_OPS[spec.op][0], self._desc, "loom_coll_plan_info", CollPlanInfo)
        info["algo"] = CollAlgo(info["algo"]).name.lower()
        info["deterministic"] = bool(info["deterministic"])
        self.info = info

    def _plan_label(self):
        return f"loom.CollPlan({self.spec.op})"

    def _symmetric_input(self, x):
        """x itself where it is the comm's symmetric memory with room for the
        plan's input, else the plan's own buffer holding a copy of x (made on
        first use: collective, every rank at the same call)."""
        s = self.spec
        nbytes = s.in_elems * ITEMSIZE[s.dtype]
        if x.is_contiguous() and self.comm.owns(x):
            base, off = self.comm.offset_of(x)
            if off + nbytes <= self.comm._allocs[base].nbytes:
                return x
        if self._input is None:
            self._input = self.comm.empty((s.in_elems,), s.dtype, _internal=True)
        buf = self._input[:x.numel()].view(x.shape)
        buf.copy_(x)
        return buf

    def _norm_args(self, fn, norm_weight, norm_bias):
        s = self.spec
        dev = self.comm.device
        if s.norm == "none":
            if norm_weight is not None or norm_bias is not None:
                raise InvalidArgumentError(f"{fn}: norm_weight / norm_bias given but norm='none'")
            return None, None
        check_tensor(fn, "norm_weight", norm_weight, dtypes=(s.out_dtype,), shape=(s.cols,), device=dev,
                     why=f"[cols={s.cols}] of the output dtype")
        if norm_bias is not None:
            if s.norm != "layer":
                raise InvalidArgumentError(f"{fn}: norm_bias is LayerNorm's (norm='layer'); norm={s.norm!r}")
            check_tensor(fn, "norm_bias", norm_bias, dtypes=(s.out_dtype,), shape=(s.cols,), device=dev,
                         why=f"[cols={s.cols}] of the output dtype")
        return norm_weight.data_ptr(), (norm_bias.data_ptr() if norm_bias is not None else None)

    def _check_epilogue(self, fn, bias, residual, out_shape):
        s = self.spec
        dev = self.comm.device
        if bias is not None:
            if not s.cols:
                raise InvalidArgumentError(f"{fn}: bias needs rows: x of 2+ dimensions (shape {s.shape})")
            check_tensor(fn, "bias", bias, dtypes=(s.out_dtype,), shape=(s.cols,), device=dev,
                         why=f"[cols={s.cols}] of the output dtype")
        if residual is not None:
            check_tensor(fn, "residual", residual, dtypes=(s.out_dtype,), shape=out_shape, device=dev,
                         why="the output's shape and dtype")

    def _out(self, fn, out, shape, dtype):
        if out is not None:
            check_tensor(fn, "out", out, dtypes=(dtype,), shape=shape, device=self.comm.device,
                         why="the output's shape and dtype")
            return out
        torch = _torch.torch()
        return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{self.comm.device}")

    def _reduce(self, fn, x, out, bias, residual, norm_weight, norm_bias, scale, activation, dropout_p, seed,
                offset, stream):
        s = self.spec
        check_tensor(fn, "x", x, dtypes=(s.dtype,), shape=s.shape, device=self.comm.device)
        out_shape = s.shape if s.op == "all_reduce" else s.slice_shape
        self._check_epilogue(fn, bias, residual, out_shape)
        nw, nb = self._norm_args(fn, norm_weight, norm_bias)
        epi = _epilogue(fn, bias, residual, dropout_p, seed, offset, scale, activation)
        dev, plan, call = self.comm.device, self.handle, _OPS[s.op][1]

        def run():
            src = self._symmetric_input(x)
            o = self._out(fn, out, out_shape, s.out_dtype)
            _lib.call(call, ctypes.c_void_p(plan), src.data_ptr(), o.data_ptr() or None,
                      ctypes.byref(epi) if epi is not None else None, nw, nb, _torch.stream_handle(stream, dev))
            return o

        return _run_on_device(dev, run, x)

    def all_reduce(self, x, *, out=None, bias=None, residual=None, norm_weight=None, norm_bias=None, scale=1.0,
                   activation="none", dropout_p=0.0, seed=0, offset=0, stream=None):
        """out [x's shape] = the reduction with its epilogue (top of this file)."""
        self._expect("all_reduce", "loom.all_reduce")
        return self._reduce("loom.all_reduce", x, out, bias, residual, norm_weight, norm_bias, scale, activation,
                            dropout_p, seed, offset, stream)

    def reduce_scatter(self, x, *, out=None, bias=None, residual=None, norm_weight=None, norm_bias=None,
                       scale=1.0, activation="none", dropout_p=0.0, seed=0, offset=0, stream=None):
        """out [this rank's slice] of the reduction with its epilogue."""
        self._expect("reduce_scatter", "loom.reduce_scatter")
        return self._reduce("loom.reduce_scatter", x, out, bias, residual, norm_weight, norm_bias, scale,
                            activation, dropout_p, seed, offset, stream)

    def all_gather(self, x, *, out=None, stream=None):
        """out [the whole] = the ranks' slices side by side; x this rank's slice."""
        fn = "loom.all_gather"
        self._expect("all_gather", fn)
        s = self.spec
        check_tensor(fn, "x", x, dtypes=(s.dtype,), shape=s.slice_shape, device=self.comm.device,
                     why=f"rank {s.rank}'s slice of {s.shape}")
        dev, plan = self.comm.device, self.handle

        def run():
            src = self._symmetric_input(x)
            o = self._out(fn, out, s.shape, s.dtype)
            _lib.call("loom_all_gather", ctypes.c_void_p(plan), src.data_ptr(), o.data_ptr(),
                      _torch.stream_handle(stream, dev))
            return o

        return _run_on_device(dev, run, x)

    def _expect(self, op, fn):
        if self.spec.op != op:
            raise InvalidArgumentError(f"{fn}: this is a {self.spec.op} plan")

    def close(self):
        """Collective: destroys the plan and frees its input buffer."""
        if not self._destroy_plan():
            return
        if self._input is not None:
            self.comm._free_alloc(self.comm._alloc_of(self._input, "loom.CollPlan.close"))
            self._input = None

    def __repr__(self):
        s = self.spec
        algo = self.info["algo"] if self._plan is not None else "closed"
        return f"loom.CollPlan({s.op}, shape={s.shape}, {s.dtype}->{s.out_dtype}, norm={s.norm!r}, algo={algo})"


def coll_plan(comm, spec):
    """The comm's cached plan for `spec` (made on first use: collective)."""
    return comm.cached_plan(spec.key, lambda: CollPlan(comm, spec))


def _whole(fn, x):
    check_tensor(fn, "x", x, dtypes=_DTYPES, contiguous=False)
    if x.dim() < 1:
        raise InvalidArgumentError(f"{fn}: x is 0-dimensional; expected a tensor of at least 1 dimension")
    return shape_of(x)


def all_reduce(comm, x, *, bias=None, residual=None, norm="none", norm_weight=None, norm_bias=None, eps=1e-5,
               scale=1.0, activation="none", dropout_p=0.0, seed=0, offset=0, out_dtype=None, algo="auto",
               blocks=0, out=None, stream=None):
    """out [x's shape] = norm(dropout(act(scale * sum over ranks of x +
    bias)) + residual) on every rank (see the top of this file). Collective."""
    fn = "loom.all_reduce"
    spec = CollSpec(comm, "all_reduce", _whole(fn, x), x.dtype, out_dtype, norm, eps, algo, blocks, fn)
    return coll_plan(comm, spec).all_reduce(x, out=out, bias=bias, residual=residual, norm_weight=norm_weight,
                                            norm_bias=norm_bias, scale=scale, activation=activation,
                                            dropout_p=dropout_p, seed=seed, offset=offset, stream=stream)


def reduce_scatter(comm, x, *, bias=None, residual=None, norm="none", norm_weight=None, norm_bias=None, eps=1e-5,
                   scale=1.0, activation="none", dropout_p=0.0, seed=0, offset=0, out_dtype=None, blocks=0, out=None,
                   stream=None):
    """This rank's slice of all_reduce's result (residual: the slice's
    shape). Collective."""
    fn = "loom.reduce_scatter"
    spec = CollSpec(comm, "reduce_scatter", _whole(fn, x), x.dtype, out_dtype, norm, eps, "auto", blocks, fn)
    return coll_plan(comm, spec).reduce_scatter(x, out=out, bias=bias, residual=residual, norm_weight=norm_weight,
                                                norm_bias=norm_bias, scale=scale, activation=activation,
                                                dropout_p=dropout_p, seed=seed, offset=offset, stream=stream)


def all_gather(comm, x, *, size=None, blocks=0, out=None, stream=None):
    """The ranks' slices side by side: x this rank's slice, the whole's
    first dimension `size` (None: x's times W). Collective."""
    fn = "loom.all_gather"
    shape = gathered_shape(_whole(fn, x), comm.size, comm.rank, size, fn)
    spec = CollSpec(comm, "all_gather", shape, x.dtype, None, blocks=blocks, fn=fn)
    return coll_plan(comm, spec).all_gather(x, out=out, stream=stream)
