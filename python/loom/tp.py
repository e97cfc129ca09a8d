"""tp.py - the tensor-parallel linear ops (loom_ag_gemm, loom_gemm_rs, loom_gemm_ar) on torch tensors.

    ag_gemm(comm, a_shard, weight, bias)   out [m, n] = AllGather(a shards) @ weight^T (+ bias)
                                           the column-parallel linear of sequence parallelism
    gemm_rs(comm, a, weight, bias)         out [this rank's rows, n] = this rank's rows of
                                           ReduceScatter over ranks of a @ weight^T (+ bias, once)
                                           the row-parallel linear
    gemm_ar(comm, a, weight, bias,         out [m, n] on every rank = dropout(act(scale x
            residual=, dropout_p=, ...)    AllReduce over ranks of a @ weight^T + bias)) + residual:
                                           the row-parallel linear of plain tensor parallelism with
                                           its pointwise work, one call (CoCoNet 5.4)
    ag_gemm_plan / gemm_rs_plan /          the comm's cached TpPlan for a layout (collective on first use)
    gemm_ar_plan
    TpPlan                                 one plan: .ag_gemm / .gemm_rs / .gemm_ar, .info,
                                           .gathered_buffer(), .output_buffer(), .close()
    shard_rows / shard_range               which rows a rank owns

Shapes (loom.h, "Tensor-parallel linear layers"): m is global (the tokens of
all W ranks). Rows are cut into W shards of S = ceil(m / W) rows; rank p owns
rows [min(m, p S), min(m, (p+1) S)), so when W does not divide m the last
shards are shorter and may be empty (m = 5, W = 4: 2, 2, 1, 0 rows). n and k
are this rank's: the weight is this rank's shard ([n, k] with layout "nk",
a torch Linear weight, the default; [k, n] with layout "kn").

  ag_gemm  a_shard [this rank's rows, k]; m defaults to rows * W (equal
           shards; pass m= for uneven ones, or give out / gathered, whose
           first dimension is m). gathered: an optional [m, k] tensor in this
           comm's symmetric memory (comm.empty) that receives the gathered A;
           every rank passes its copy of the same buffer (peers store into it).
  gemm_rs  a [m, k]; out [this rank's rows, n]. The bias is added once.
  gemm_ar  a [m, k]; out [m, n], the same on every rank. The epilogue is the
           call's (bias [n], residual [m, n] of the output dtype, scale,
           activation, dropout_p with seed and offset: the mask of element
           row * n + col, as loom_allreduce draws it). A fused plan's peers
           store into out, so unless the plan was made with
           transfer="sequential" (whatever "auto" resolves to), out must be
           symmetric memory of the comm (comm.empty, every rank the same
           buffer), or None: the plan's own buffer (plan.output_buffer(),
           overwritten by the plan's next call; a new tensor for a
           "sequential" plan). Transfers: "auto", "sequential" (the GEMM, then
           loom_allreduce) or "sm_copy" (fused).

a and the weight are bfloat16 or float16 (the same); the output (out_dtype,
default a's dtype) and the bias are bfloat16, float16 or float32; n and k
multiples of 8, tensors contiguous and 16-byte aligned (libloom names what
it refuses). Every rank must call with the same m, n, k, dtypes, layout,
bias presence and transfer, in the same order (the calls and the plans'
creation are collective).

Plans are cached in the comm (comm.cached_plan) per (op, m, n, k, dtypes,
layout, bias, transfer, chunk_rows, comm_blocks, sequential_gemm); calls run on torch's
current stream of the comm's device (or `stream`: a torch.cuda.Stream or
an int cudaStream_t); libloom's refusals are exceptions (errors.py).

transfer: "auto" (libloom chooses: fused where every peer is load/store
reachable, else sequential; also sequential where the fused path could
hide nothing: ag_gemm where a shard has fewer rows than the smallest tile
(64) or the GPU's ridge point (~320 rows on H100), gemm_rs where the GEMM's
tiles fit one wave of SMs, and gemm_ar unless loom_gemm_ar_tune recorded
the fused path: it lost to the sequential one on every shape measured),
"sequential" (NCCL
collective, then the GEMM), "copy_engine" (AG only: the copy engine's pushes, each shard's rows
computed by sequential_gemm's engine once it has landed), "sm_copy", "sm_atomic" (RS only: fp32 atomic
additions, not deterministic) or "bulk_reduce" (RS only: the GEMM's epilogue adds its tiles into
the owners with the tensor memory accelerator; Hopper, m = W equal shards of a multiple of 64 rows) or
"decomposed" (ag_gemm, gemm_rs: the GEMM cut into one chunk per shard, each chunk's GEMM beside NCCL's
send / receive or reduce of another on a second stream, TransformerEngine's way). sequential_gemm: the GEMM of the
sequential and decomposed paths, "auto" (cuBLASLt where it takes the dtypes, else
loom_gemm; a tuned entry's choice), "loom" or "cublaslt";
plan.info["transfer"] says which transfer
a plan took, and plan.info["gemm"] which GEMM its calls run ("cublaslt":
the sequential path where cuBLASLt takes the dtypes, unless a tuned entry
chose loom_gemm; "loom": loom_gemm, or the fused transfers' kernels).

Kernels: libloom loads every kernel of a plan when the plan is made, so
CUDA's lazy module loading (the default) needs no special setting.
"""
import ctypes
import operator

from . import _lib, _torch
from ._checks import ITEMSIZE, check_tensor, dtype_name, loom_dtype, shape_of
from ._structs import Epilogue
from ._structs import Activation, Layout, TpDesc, TpGemm, TpPlanInfo, TpTransfer  # noqa: F401 (TpTransfer: loom.tp.TpTransfer)
from ._plan import PlanHandle
from .errors import InvalidArgumentError
from .ops import _run_on_device

_AB = ("bfloat16", "float16")
_C = ("bfloat16", "float16", "float32")
_LAYOUTS = {"kn": Layout.KN, "nk": Layout.NK}
TRANSFERS = {t.name.lower(): t for t in TpTransfer}  # auto, sequential, copy_engine, sm_copy, ...
_OPS = {"ag_gemm": ("loom_plan_ag_gemm", "loom_ag_gemm"), "gemm_rs": ("loom_plan_gemm_rs", "loom_gemm_rs"),
        "gemm_ar": ("loom_plan_gemm_ar", "loom_gemm_ar")}
_AR_TRANSFERS = ("auto", "sequential", "sm_copy")


# ---- who owns which rows ------------------------------------------------------

def shard_rows(m, world):
    """S = ceil(m / W): the rows of a full shard."""
    return -(-int(m) // max(int(world), 1))


def shard_range(m, world, rank):
    """(begin, end) of the rows rank `rank` owns among m rows on `world` ranks."""
    s = shard_rows(m, world)
    return min(int(m), int(rank) * s), min(int(m), (int(rank) + 1) * s)


def shard_len(m, world, rank):
    b, e = shard_range(m, world, rank)
    return e - b


# ---- the backward's products (torch tensors; no torch import needed) ---------------

SWAP_LAYOUT = {"nk": "kn", "kn": "nk"}  # the weight's layout in the transposed product of a backward


def weight_grad(g, a, layout, dtype):
    """The gradient of a weight of `layout` in y = a @ op(weight): g [rows,
    n], a [rows, k] -> [n, k] ("nk") or [k, n] ("kn"), computed in dtype."""
    g, a = g.to(dtype), a.to(dtype)
    return g.t() @ a if layout == "nk" else a.t() @ g


# ---- argument normalisation -----------------------------------------------------

def _choice(fn, arg, value, enum_type, table):
    """value as a member of enum_type: a member, or its name in any case (table: name -> member)."""
    if isinstance(value, enum_type):
        return value
    v = table.get(value.lower()) if isinstance(value, str) else None
    if v is None:
        raise InvalidArgumentError(f"{fn}: {arg}={value!r}; expected one of " + ", ".join(repr(k) for k in table))
    return v


SEQUENTIAL_GEMMS = {g.name.lower(): g for g in TpGemm}  # auto, loom, cublaslt


def _transfer(fn, transfer):
    return _choice(fn, "transfer", transfer, TpTransfer, TRANSFERS)


def _seq_gemm(fn, sequential_gemm):
    return _choice(fn, "sequential_gemm", sequential_gemm, TpGemm, SEQUENTIAL_GEMMS)


def _layout(fn, layout):
    if layout not in _LAYOUTS:
        raise InvalidArgumentError(f"{fn}: layout={layout!r}; expected 'nk' (weight [n, k], a Linear weight) or "
                                   f"'kn' (weight [k, n])")
    return layout


def _count(fn, arg, v, least):
    try:
        i = operator.index(v)
    except TypeError:
        raise InvalidArgumentError(f"{fn}: {arg}={v!r} is not an integer") from None
    if i < least:
        raise InvalidArgumentError(f"{fn}: {arg}={i} must be >= {least}"
                                   + (" (0: chosen by the plan)" if least == 0 else ""))
    return int(i)


def _out_dtype(fn, out_dtype, out, default):
    if out_dtype is not None:
        c = dtype_name(out_dtype)
        loom_dtype(c, fn, "out_dtype", _C)
        return c
    if out is not None:
        return dtype_name(out.dtype)
    return default


def _matrix(fn, arg, t, dtypes, device, why="", rows_what="rows"):
    """Checks a 2-D operand; returns (dtype name, rows, cols)."""
    name = check_tensor(fn, arg, t, dtypes=dtypes, device=device, why=why, contiguous=False)
    s = shape_of(t)
    if len(s) != 2:
        raise InvalidArgumentError(f"{fn}: {arg} has shape {s}; expected 2 dimensions ({rows_what}, columns)")
    check_tensor(fn, arg, t)  # contiguity, after the shape (its message names the shape)
    return name, s[0], s[1]


def _weight_nk(fn, weight, k, a_arg, a_shape, layout, ab, device):
    """n of the weight in `layout` for a [*, k]; checks dtype, device, shape."""
    _, r, c = _matrix(fn, "weight", weight, (ab,), device, why=f"must match {a_arg}")
    if layout == "nk":
        if c != k:
            raise InvalidArgumentError(f"{fn}: weight has shape {(r, c)}; expected (n, k={k}) with k from {a_arg} "
                                       f"{a_shape} (layout='nk': a Linear weight [out_features, in_features])")
        return r
    if r != k:
        raise InvalidArgumentError(f"{fn}: weight has shape {(r, c)}; expected (k={k}, n) with k from {a_arg} "
                                   f"{a_shape} (layout='kn')")
    return c


def _ag_m(fn, comm, rows, m):
    """The global m of an AllGather whose shard on this rank has `rows` rows."""
    W, p = comm.size, comm.rank
    if m is None:
        return rows * W
    m = _count(fn, "m", m, 1)
    b, e = shard_range(m, W, p)
    if e - b != rows:
        raise InvalidArgumentError(
            f"{fn}: a_shard has {rows} rows; rank {p} of {W} owns rows [{b}, {e}) of m={m} ({e - b} rows; "
            f"S = ceil(m/W) = {shard_rows(m, W)})")
    return m


# ---- plans --------------------------------------------------------------------

class TpSpec:
    """What a plan is made for: op ("ag_gemm" / "gemm_rs"), global m, this
    rank's n and k, dtype names ab and c, the weight's layout, bias or not,
    transfer, chunk_rows, comm_blocks (0: chosen by the plan), and the world
    this rank is in (rows: (begin, end) of its own rows). Validated when
    made; .key is the comm plan-cache key."""
    __slots__ = ("op", "m", "n", "k", "ab", "c", "layout", "has_bias", "transfer", "chunk_rows", "comm_blocks",
                 "activation", "sequential_gemm", "world", "rank", "rows")

    def __init__(self, comm, op, m, n, k, ab, c, *, layout="nk", bias=False, transfer="auto", chunk_rows=0,
                 comm_blocks=0, activation="none", sequential_gemm="auto", fn=None):
        fn = fn or f"loom.TpPlan({op})"
        if op not in _OPS:
            raise InvalidArgumentError(f"{fn}: op={op!r}; expected 'ag_gemm', 'gemm_rs' or 'gemm_ar'")
        self.op = op
        self.m, self.n, self.k = _count(fn, "m", m, 1), _count(fn, "n", n, 1), _count(fn, "k", k, 1)
        self.ab, self.c = dtype_name(ab), dtype_name(c)
        loom_dtype(self.ab, fn, "ab dtype", _AB)
        loom_dtype(self.c, fn, "output dtype", _C)
        self.layout = _layout(fn, layout)
        self.has_bias = bool(bias)
        self.transfer = _transfer(fn, transfer)
        self.chunk_rows = _count(fn, "chunk_rows", chunk_rows, 0)
        self.comm_blocks = _count(fn, "comm_blocks", comm_blocks, 0)
        self.activation = _activation(fn, activation)
        self.sequential_gemm = _seq_gemm(fn, sequential_gemm)
        if op == "gemm_rs" and self.activation != Activation.NONE:
            raise InvalidArgumentError(f"{fn}: activation={activation!r}: gemm_rs takes none (it would apply to "
                                       "each rank's partial sum)")
        if op == "gemm_ar":
            if self.activation != Activation.NONE or self.has_bias:
                raise InvalidArgumentError(f"{fn}: gemm_ar plans take no bias or activation: both come with each "
                                           "call's epilogue (bias=, activation=)")
            if self.transfer.name.lower() not in _AR_TRANSFERS:
                raise InvalidArgumentError(f"{fn}: transfer={self.transfer.name.lower()!r}: gemm_ar takes "
                                           + ", ".join(repr(t) for t in _AR_TRANSFERS))
        self.world, self.rank = comm.size, comm.rank
        self.rows = shard_range(self.m, self.world, self.rank)

    @property
    def key(self):
        return ("tp", self.op, self.m, self.n, self.k, self.ab, self.c, self.layout, self.has_bias,
                self.transfer.name.lower(), self.chunk_rows, self.comm_blocks, self.activation.name.lower(),
                self.sequential_gemm.name.lower())

    @property
    def out_shape(self):
        """ag_gemm, gemm_ar: (m, n); gemm_rs: (this rank's rows, n)."""
        if self.op in ("ag_gemm", "gemm_ar"):
            return (self.m, self.n)
        return (self.rows[1] - self.rows[0], self.n)

    @property
    def a_shape(self):
        """ag_gemm: this rank's shard (rows, k); gemm_rs, gemm_ar: (m, k)."""
        if self.op == "ag_gemm":
            return (self.rows[1] - self.rows[0], self.k)
        return (self.m, self.k)

    @property
    def b_shape(self):
        return (self.n, self.k) if self.layout == "nk" else (self.k, self.n)

    def desc(self):
        return TpDesc(m=self.m, n=self.n, k=self.k, ab_type=int(loom_dtype(self.ab, "", "")),
                      c_type=int(loom_dtype(self.c, "", "")), b_layout=int(_LAYOUTS[self.layout]),
                      has_bias=int(self.has_bias), world_size=self.world, transfer=int(self.transfer),
                      chunk_rows=self.chunk_rows, comm_blocks=self.comm_blocks, activation=int(self.activation),
                      sequential_gemm=int(self.sequential_gemm))

    def check(self, fn, comm, a, weight, bias, out, gathered=None, residual=None):
        """Checks a call's tensors against the spec (raises InvalidArgumentError naming the argument)."""
        dev = comm.device
        a_arg = "a_shard" if self.op == "ag_gemm" else "a"
        check_tensor(fn, a_arg, a, dtypes=(self.ab,), shape=self.a_shape, device=dev,
                     why=(f"rows [{self.rows[0]}, {self.rows[1]}) of m={self.m}, k={self.k}" if self.op == "ag_gemm"
                          else f"m={self.m}, k={self.k}"))
        check_tensor(fn, "weight", weight, dtypes=(self.ab,), shape=self.b_shape, device=dev,
                     why=f"layout={self.layout!r}, n={self.n}, k={self.k}, {self.ab}")
        if self.op == "gemm_ar":  # the epilogue's: optional on every call
            if bias is not None:
                check_tensor(fn, "bias", bias, dtypes=(self.c,), shape=(self.n,), device=dev,
                             why="the output dtype, n of the weight")
            if residual is not None:
                check_tensor(fn, "residual", residual, dtypes=(self.c,), shape=(self.m, self.n), device=dev,
                             why=f"[m, n] of {self.c}, like out")
        elif residual is not None:
            raise InvalidArgumentError(f"{fn}: residual is an argument of gemm_ar")
        elif self.has_bias:
            if bias is None:
                raise InvalidArgumentError(f"{fn}: the plan was made with a bias; pass bias [n={self.n}]")
            check_tensor(fn, "bias", bias, dtypes=(self.c,), shape=(self.n,), device=dev,
                         why="the output dtype, n of the weight")
        elif bias is not None:
            raise InvalidArgumentError(f"{fn}: bias given but the plan was made without one")
        if out is not None:
            check_tensor(fn, "out", out, dtypes=(self.c,), shape=self.out_shape, device=dev,
                         why=("[this rank's rows, n]" if self.op == "gemm_rs" else "[m, n]") + f" of {self.c}")
        if gathered is not None:
            if self.op != "ag_gemm":
                raise InvalidArgumentError(f"{fn}: gathered is an argument of ag_gemm")
            check_tensor(fn, "gathered", gathered, dtypes=(self.ab,), shape=(self.m, self.k), device=dev,
                         why="[m, k] of a_shard's dtype")
            _check_symmetric(fn, comm, "gathered", gathered, self.m * self.k * ITEMSIZE[self.ab], "their rows")


def _check_symmetric(fn, comm, arg, t, nbytes, what):
    """t lies inside one symmetric allocation of the comm (peers store `what` into it)."""
    ptr = int(t.data_ptr())
    a = next((a for a in comm._allocs.values() if a.ptr <= ptr < a.ptr + a.nbytes), None)
    if a is None or ptr + nbytes > a.ptr + a.nbytes:
        raise InvalidArgumentError(
            f"{fn}: {arg} (at {ptr:#x}, {nbytes} bytes) is not " + ("inside " if a else "")
            + f"symmetric memory of this comm: peers store {what} into it, so make it with comm.empty "
            "(every rank the same buffer), or pass None to use the plan's own")


def _epilogue(fn, bias, residual, dropout_p, seed, offset, scale, activation):
    """The loom_epilogue_t of a gemm_ar call (None: the identity); checks each field by name."""
    import math
    try:
        p, sc = float(dropout_p), float(scale)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{fn}: dropout_p={dropout_p!r} and scale={scale!r} must be numbers") from None
    if not 0.0 <= p < 1.0:
        raise InvalidArgumentError(f"{fn}: dropout_p={dropout_p!r} must be in [0, 1)")
    if not math.isfinite(sc):
        raise InvalidArgumentError(f"{fn}: scale={scale!r} must be finite")
    seed, offset = _count(fn, "seed", seed, 0), _count(fn, "offset", offset, 0)
    if seed >= 1 << 64 or offset >= 1 << 64:
        raise InvalidArgumentError(f"{fn}: seed={seed} / offset={offset} must fit in 64 bits")
    act = _activation(fn, activation)
    if bias is None and residual is None and p == 0.0 and sc == 1.0 and act == Activation.NONE:
        return None
    return Epilogue(scale=sc, bias=bias.data_ptr() if bias is not None else None, activation=int(act), dropout_p=p,
                    dropout_seed=seed, dropout_offset=offset,
                    residual=residual.data_ptr() if residual is not None else None)


class TpPlan(PlanHandle):
    """A plan of loom_plan_ag_gemm (op "ag_gemm") or loom_plan_gemm_rs
    ("gemm_rs") for one TpSpec (its fields are the plan's attributes).
    Creation is collective (same arguments on every rank), and so is
    close(). Prefer ag_gemm_plan / gemm_rs_plan, which cache plans in the
    comm.

    .info: what the plan chose (loom_tp_plan_info: transfer, shard_rows,
    chunk_rows, comm_blocks, gemm_bn, gemm_grid, deterministic, the bytes it
    holds). .rows: (begin, end) of the rows this rank owns."""

    def __init__(self, comm, op, m, n, k, ab, c, *, layout="nk", bias=False, transfer="auto", chunk_rows=0,
                 comm_blocks=0, activation="none", sequential_gemm="auto"):
        spec = TpSpec(comm, op, m, n, k, ab, c, layout=layout, bias=bias, transfer=transfer,
                      chunk_rows=chunk_rows, comm_blocks=comm_blocks, activation=activation,
                      sequential_gemm=sequential_gemm)
        self._init(comm, spec)

    @classmethod
    def from_spec(cls, comm, spec):
        self = cls.__new__(cls)
        self._init(comm, spec)
        return self

    def _init(self, comm, spec):
        self.comm, self.spec = comm, spec
        self._plan = None
        self._gathered = None
        self._out = None
        self._desc = spec.desc()
        info = self._create(_OPS[spec.op][0], self._desc, "loom_tp_plan_info", TpPlanInfo)
        info["transfer"] = TpTransfer(info["transfer"]).name.lower()
        info["gemm"] = TpGemm(info["gemm"]).name.lower()  # "loom" or "cublaslt": the GEMM the calls run
        info["deterministic"] = bool(info["deterministic"])
        self.info = info

    def __getattr__(self, name):  # the spec's fields: op, m, n, k, ab, c, layout, has_bias, rows, ...
        if name != "spec" and "spec" in self.__dict__:
            return getattr(self.__dict__["spec"], name)
        raise AttributeError(name)

    def _plan_label(self):
        return f"loom.TpPlan({self.spec.op})"

    def gathered_buffer(self):
        """ag_gemm plans: a symmetric [m, k] tensor (ab dtype) of the plan,
        for callers that need the gathered A after the call (pass it as
        `gathered`); collective the first time (every rank allocates it at
        the same point); the next call that uses it overwrites it."""
        if self.spec.op != "ag_gemm":
            raise InvalidArgumentError("loom.TpPlan.gathered_buffer: only ag_gemm plans gather")
        if self._gathered is None:
            self._gathered = self.comm.empty((self.spec.m, self.spec.k), self.spec.ab, _internal=True)
        return self._gathered

    def output_buffer(self):
        """gemm_ar plans: a symmetric [m, n] tensor (output dtype) of the
        plan, the `out` of calls that pass none to a fused plan; collective
        the first time (every rank allocates it at the same point); the
        plan's next call overwrites it (clone what must survive)."""
        if self.spec.op != "gemm_ar":
            raise InvalidArgumentError("loom.TpPlan.output_buffer: only gemm_ar plans have one")
        if self._out is None:
            self._out = self.comm.empty((self.spec.m, self.spec.n), self.spec.c, _internal=True)
        return self._out

    def _output(self, out):
        if out is not None:
            return out
        torch = _torch.torch()
        return torch.empty(self.spec.out_shape, dtype=getattr(torch, self.spec.c),
                           device=f"cuda:{self.comm.device}")

    def ag_gemm(self, a_shard, weight, bias=None, *, out=None, gathered=None, stream=None, _checked=False):
        """out [m, n] = AllGather(a_shard) @ weight (layout) (+ bias); see the
        top of this file. Collective, asynchronous; returns out."""
        fn = "loom.ag_gemm"
        if self.spec.op != "ag_gemm":
            raise InvalidArgumentError(f"{fn}: this is a {self.spec.op} plan")
        if not _checked:
            self.spec.check(fn, self.comm, a_shard, weight, bias, out, gathered)
        dev = self.comm.device
        plan = self.handle

        def run():
            o = self._output(out)
            _lib.call("loom_ag_gemm", ctypes.c_void_p(plan), a_shard.data_ptr() or None, weight.data_ptr(),
                      o.data_ptr(), gathered.data_ptr() if gathered is not None else None,
                      bias.data_ptr() if bias is not None else None, _torch.stream_handle(stream, dev))
            return o

        return _run_on_device(dev, run, a_shard)

    def gemm_rs(self, a, weight, bias=None, *, out=None, stream=None, _checked=False):
        """out [this rank's rows, n] = this rank's rows of the sum over ranks
        of a @ weight (layout) (+ bias, once). Collective, asynchronous."""
        fn = "loom.gemm_rs"
        if self.spec.op != "gemm_rs":
            raise InvalidArgumentError(f"{fn}: this is a{'n' if self.spec.op == 'ag_gemm' else ''} "
                                       f"{self.spec.op} plan")
        if not _checked:
            self.spec.check(fn, self.comm, a, weight, bias, out)
        dev = self.comm.device
        plan = self.handle

        def run():
            o = self._output(out)
            _lib.call("loom_gemm_rs", ctypes.c_void_p(plan), a.data_ptr(), weight.data_ptr(), o.data_ptr() or None,
                      bias.data_ptr() if bias is not None else None, _torch.stream_handle(stream, dev))
            return o

        return _run_on_device(dev, run, a)

    def gemm_ar(self, a, weight, bias=None, *, residual=None, dropout_p=0.0, seed=0, offset=0, scale=1.0,
                activation="none", out=None, stream=None, _checked=False):
        """out [m, n] = dropout(act(scale * sum over ranks of a @ weight
        (layout) + bias)) + residual on every rank (see the top of this
        file). Collective, asynchronous; returns out (the plan's own buffer
        when out is None and the plan is fused)."""
        fn = "loom.gemm_ar"
        if self.spec.op != "gemm_ar":
            raise InvalidArgumentError(f"{fn}: this is a{'n' if self.spec.op == 'ag_gemm' else ''} "
                                       f"{self.spec.op} plan")
        if not _checked:
            self.spec.check(fn, self.comm, a, weight, bias, out, residual=residual)
        epi = _epilogue(fn, bias, residual, dropout_p, seed, offset, scale, activation)
        # what the call needs of `out` follows the transfer asked for, never
        # the one AUTO resolved to: the same call is accepted on every path
        fused = self.spec.transfer.name.lower() != "sequential"
        if out is not None and fused:
            _check_symmetric(fn, self.comm, "out", out, self.spec.m * self.spec.n * ITEMSIZE[self.spec.c],
                             "their reduced rows")
        dev = self.comm.device
        plan = self.handle
        if out is None and fused:
            out = self.output_buffer()

        def run():
            o = self._output(out)
            _lib.call("loom_gemm_ar", ctypes.c_void_p(plan), a.data_ptr(), weight.data_ptr(), o.data_ptr(),
                      ctypes.byref(epi) if epi is not None else None, _torch.stream_handle(stream, dev))
            return o

        return _run_on_device(dev, run, a)

    def close(self):
        """Collective: destroys the plan and frees its gathered / output buffer."""
        if not self._destroy_plan():
            return
        if self._gathered is not None:
            self.comm._free_alloc(self.comm._alloc_of(self._gathered, "loom.TpPlan.close"))
            self._gathered = None
        if self._out is not None:
            self.comm._free_alloc(self.comm._alloc_of(self._out, "loom.TpPlan.close"))
            self._out = None

    def __repr__(self):
        s = self.spec
        t = self.info["transfer"] if self._plan is not None else "closed"
        return (f"loom.TpPlan({s.op}, m={s.m}, n={s.n}, k={s.k}, {s.ab}->{s.c}, layout={s.layout!r}, "
                f"bias={s.has_bias}, W={s.world}, transfer={t})")


def cached_plan(comm, spec):
    """The comm's plan for `spec` (TpPlan.from_spec on first use: collective)."""
    return comm.cached_plan(spec.key, lambda: TpPlan.from_spec(comm, spec))


def _activation(fn, activation):
    """An activation name ("none", "relu", "gelu_tanh", "gelu_erf") or Activation member."""
    if isinstance(activation, Activation):
        return activation
    names = {a.name.lower(): a for a in Activation}
    if not isinstance(activation, str) or activation.lower() not in names:
        raise InvalidArgumentError(f"{fn}: activation={activation!r}; expected one of {sorted(names)}")
    return names[activation.lower()]


def _ag_spec(fn, comm, a_shard, weight, has_bias, m, layout, out_dtype, transfer, chunk_rows, comm_blocks,
             activation="none", sequential_gemm="auto"):
    layout, tr = _layout(fn, layout), _transfer(fn, transfer)
    ab, rows, k = _matrix(fn, "a_shard", a_shard, _AB, comm.device, rows_what="this rank's rows of A")
    n = _weight_nk(fn, weight, k, "a_shard", (rows, k), layout, ab, comm.device)
    m = _ag_m(fn, comm, rows, m)
    c = _out_dtype(fn, out_dtype, None, ab)
    return TpSpec(comm, "ag_gemm", m, n, k, ab, c, layout=layout, bias=has_bias, transfer=tr,
                  chunk_rows=chunk_rows, comm_blocks=comm_blocks, activation=activation,
                  sequential_gemm=sequential_gemm, fn=fn)


def _rs_spec(fn, comm, a, weight, has_bias, layout, out_dtype, transfer, comm_blocks, sequential_gemm="auto"):
    layout, tr = _layout(fn, layout), _transfer(fn, transfer)
    ab, m, k = _matrix(fn, "a", a, _AB, comm.device, rows_what="m")
    n = _weight_nk(fn, weight, k, "a", (m, k), layout, ab, comm.device)
    if m < 1:
        raise InvalidArgumentError(f"{fn}: a has shape {(m, k)}; expected m >= 1 rows")
    c = _out_dtype(fn, out_dtype, None, ab)
    return TpSpec(comm, "gemm_rs", m, n, k, ab, c, layout=layout, bias=has_bias, transfer=tr,
                  comm_blocks=comm_blocks, sequential_gemm=sequential_gemm, fn=fn)


def ag_gemm_plan(comm, a_shard, weight, *, bias=False, m=None, layout="nk", out_dtype=None, transfer="auto",
                 chunk_rows=0, comm_blocks=0, activation="none", sequential_gemm="auto"):
    """The comm's cached ag_gemm plan for these operands (made on first use:
    collective). bias: whether calls pass one (True, or a tensor)."""
    spec = _ag_spec("loom.ag_gemm", comm, a_shard, weight, bias is not None and bias is not False, m, layout,
                    out_dtype, transfer, chunk_rows, comm_blocks, activation, sequential_gemm)
    return cached_plan(comm, spec)


def gemm_rs_plan(comm, a, weight, *, bias=False, layout="nk", out_dtype=None, transfer="auto", comm_blocks=0,
                 sequential_gemm="auto"):
    """The comm's cached gemm_rs plan for these operands (made on first use: collective)."""
    spec = _rs_spec("loom.gemm_rs", comm, a, weight, bias is not None and bias is not False, layout, out_dtype,
                    transfer, comm_blocks, sequential_gemm)
    return cached_plan(comm, spec)


def ag_gemm(comm, a_shard, weight, bias=None, *, m=None, layout="nk", out=None, out_dtype=None, gathered=None,
            transfer="auto", chunk_rows=0, comm_blocks=0, activation="none", sequential_gemm="auto", stream=None):
    """Column-parallel linear: out [m, n] = AllGather over ranks of a_shard
    [this rank's rows, k] @ weight^T ("nk": weight [n, k]; "kn": weight
    [k, n]: @ weight) (+ bias [n]). Collective. m: global rows (default:
    gathered's or out's first dimension, else rows * W). gathered: optional
    [m, k] symmetric tensor (comm.empty) that receives the gathered A.
    activation ("none", "relu", "gelu_tanh", "gelu_erf"): applied after the
    bias in the GEMM's epilogue (fc1 + GeLU in one call). Every tensor is
    checked before the plan is made. Returns out (a new tensor unless
    given)."""
    fn = "loom.ag_gemm"
    if m is None:
        for arg, t in (("gathered", gathered), ("out", out)):
            if t is not None:
                m = _matrix(fn, arg, t, None, comm.device)[1]
                break
    c = _out_dtype(fn, out_dtype, out, None)
    spec = _ag_spec(fn, comm, a_shard, weight, bias is not None, m, layout, c, transfer, chunk_rows, comm_blocks,
                    activation, sequential_gemm)
    spec.check(fn, comm, a_shard, weight, bias, out, gathered)
    return cached_plan(comm, spec).ag_gemm(a_shard, weight, bias, out=out, gathered=gathered, stream=stream,
                                           _checked=True)


def gemm_rs(comm, a, weight, bias=None, *, layout="nk", out=None, out_dtype=None, transfer="auto", comm_blocks=0,
            sequential_gemm="auto", stream=None):
    """Row-parallel linear: out [this rank's rows, n] = this rank's rows of
    the sum over ranks of a [m, k] @ weight^T ("nk": weight [n, k]; "kn":
    weight [k, n]) (+ bias [n], added once). Collective. Every tensor is
    checked before the plan is made. Returns out (a new tensor unless
    given)."""
    fn = "loom.gemm_rs"
    c = _out_dtype(fn, out_dtype, out, None)
    spec = _rs_spec(fn, comm, a, weight, bias is not None, layout, c, transfer, comm_blocks, sequential_gemm)
    spec.check(fn, comm, a, weight, bias, out)
    return cached_plan(comm, spec).gemm_rs(a, weight, bias, out=out, stream=stream, _checked=True)


def _ar_spec(fn, comm, a, weight, layout, out_dtype, transfer, comm_blocks, sequential_gemm="auto"):
    layout, tr = _layout(fn, layout), _transfer(fn, transfer)
    ab, m, k = _matrix(fn, "a", a, _AB, comm.device, rows_what="m")
    n = _weight_nk(fn, weight, k, "a", (m, k), layout, ab, comm.device)
    if m < 1:
        raise InvalidArgumentError(f"{fn}: a has shape {(m, k)}; expected m >= 1 rows")
    c = _out_dtype(fn, out_dtype, None, ab)
    return TpSpec(comm, "gemm_ar", m, n, k, ab, c, layout=layout, transfer=tr, comm_blocks=comm_blocks,
                  sequential_gemm=sequential_gemm, fn=fn)


def gemm_ar_plan(comm, a, weight, *, layout="nk", out_dtype=None, transfer="auto", comm_blocks=0,
                 sequential_gemm="auto"):
    """The comm's cached gemm_ar plan for these operands (made on first use: collective)."""
    spec = _ar_spec("loom.gemm_ar", comm, a, weight, layout, out_dtype, transfer, comm_blocks, sequential_gemm)
    return cached_plan(comm, spec)


def gemm_ar(comm, a, weight, bias=None, *, residual=None, dropout_p=0.0, seed=0, offset=0, scale=1.0,
            activation="none", layout="nk", out=None, out_dtype=None, transfer="auto", comm_blocks=0,
            sequential_gemm="auto", stream=None):
    """Row-parallel linear with its AllReduce and pointwise work (CoCoNet
    5.4): out [m, n] = dropout(act(scale * sum over ranks of a [m, k] @
    weight^T ("nk": weight [n, k]; "kn": weight [k, n]) + bias [n]),
    dropout_p, seed, offset) + residual [m, n], the same on every rank.
    Collective. out: None (the plan's own symmetric buffer, overwritten by
    its next call; a new tensor when transfer="sequential") or a [m, n]
    tensor (symmetric memory from comm.empty unless transfer="sequential",
    whatever "auto" resolves to). Every tensor
    is checked before the plan is made. Returns out."""
    fn = "loom.gemm_ar"
    c = _out_dtype(fn, out_dtype, out, None)
    spec = _ar_spec(fn, comm, a, weight, layout, c, transfer, comm_blocks, sequential_gemm)
    spec.check(fn, comm, a, weight, bias, out, residual=residual)
    _epilogue(fn, bias, residual, dropout_p, seed, offset, scale, activation)  # checked before the plan too
    return cached_plan(comm, spec).gemm_ar(a, weight, bias, residual=residual, dropout_p=dropout_p, seed=seed,
                                           offset=offset, scale=scale, activation=activation, out=out,
                                           stream=stream, _checked=True)
