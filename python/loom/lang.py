"""lang.py - the loom language from Python: a thin mirror of the C builder
(loom_prog_* in loom.h), so that a program reads like the paper's figures:

    from loom.lang import Program, Sliced, Replicated, FP16
    p = Program()
    w = p.tensor("w", FP16, "H, H", Sliced(0))
    b = p.tensor("b", FP16, "H", Replicated)
    inp = p.tensor("in", FP16, "B, S, H", Sliced(2))
    r = p.tensor("r", FP16, "B, S, H", Replicated)
    layer = p.var("layer", p.matmul(inp, w))
    s = p.var("sum", p.all_reduce(layer))
    d = p.var("d", p.dropout(s + b, 0.1))
    out = p.var("out", d + r)
    p.execute("self_attention", [w, inp, b, r], [out])

Every call goes to libloom; errors come back as loom's exceptions with its
message (file:line:column for text, the reason for a refused
transformation). Text, C and Python make the same graph (Program.__eq__).
A value belongs to the program that made it: using it in another program
is refused, naming both. Reductions are the .loom ones: "+", "max", "min".

On GPUs (code generation: loom_prog_compile / loom_prog_run):

    run = loom.lang.compile(p, comm, schedule="best", B=8, S=1024, H=3072)  # collective
    (out,) = run(w, x, b, r)       # this rank's pieces, Execute's order; on torch's current stream

`run.inputs` / `run.outputs` say each buffer's name, dtype and this rank's
shape (None for one this rank does not hold: pass None, get None back).
The call is the torch custom op loom::prog_run (a fake implementation gives
the outputs' shapes), so torch.compile(fullgraph=True) traces it and CUDA
graphs capture it; no gradient goes through it.
"""
import ctypes
import itertools

from . import _lib
from ._checks import check_tensor
from ._plan import PlanHandle
from ._structs import DType, ProgAttr, ProgIo, ProgLayout, ProgPlanInfo
from .errors import InvalidArgumentError

FP32, FP16, BF16 = DType.FP32, DType.FP16, DType.BF16
WORLD = -1
Replicated = (ProgLayout.REPLICATED, 0)
Local = (ProgLayout.LOCAL, 0)


def Sliced(dim):
    return (ProgLayout.SLICED, dim)


def Root(rank):
    return (ProgLayout.ROOT, rank)


_REDUCTIONS = {"+": 0, "max": 1, "min": 2}  # loom_prog_attr_t.reduce, as .loom spells them
_numbers = itertools.count(1)


def _reduction(reduce, fn):
    """The attribute value of `reduce` ("+", "max", "min", or loom's 0, 1, 2)."""
    if isinstance(reduce, str) and reduce in _REDUCTIONS:
        return _REDUCTIONS[reduce]
    if isinstance(reduce, int) and not isinstance(reduce, bool) and reduce in _REDUCTIONS.values():
        return reduce
    raise InvalidArgumentError(f'reduce={reduce!r}: expected "+", "max" or "min" (as .loom writes them)',
                               function=fn)


class Value:
    """A value of a program (its id); arithmetic builds pointwise operations."""

    def __init__(self, prog, vid):
        self.prog, self.id = prog, vid

    def _bin(self, op, other, swap=False):
        a, b = (other, self) if swap else (self, other)
        return self.prog.op(op, a, b)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __lt__(self, o): return self._bin("<", o)
    def __le__(self, o): return self._bin("<=", o)
    def __gt__(self, o): return self._bin(">", o)
    def __ge__(self, o): return self._bin(">=", o)
    def __neg__(self): return self.prog.op("Neg", self)

    def update(self, value):
        """The paper's `m.update(expr)`: the state tensor's new value."""
        return self.prog.op("Update", self, value)


class Program:
    """A loom program (owns its loom_prog_t). .label names it in messages: its Execute name once it
    has one, the file it was parsed from, else "program #k"."""

    def __init__(self, handle=None, label=None):
        if handle is None:
            h = ctypes.c_void_p()
            _lib.call("loom_prog_create", ctypes.byref(h))
            handle = h
        self._h = handle
        self.label = label or f"program #{next(_numbers)}"

    @classmethod
    def parse(cls, text, file="<text>"):
        h = ctypes.c_void_p()
        _lib.call("loom_prog_parse", text.encode(), file.encode(), ctypes.byref(h))
        return cls(h, f"`{file}`")

    def _own(self, v, fn, what):
        """v's id, if v is a Value of this program (a value of another is refused, naming both)."""
        if v.prog is not self:
            raise InvalidArgumentError(f"{what} is a value of {v.prog.label}, not of {self.label}; a value is "
                                       f"used only in the program that made it", function=fn)
        return v.id

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            _lib.load().loom_prog_destroy(h)
            self._h = None

    def _value(self, x, fn="Program.op", what="an operand"):
        if isinstance(x, Value):
            return self._own(x, fn, what)
        vid = ctypes.c_int()
        _lib.call("loom_prog_const", self._h, float(x), ctypes.byref(vid))
        return vid.value

    def tensor(self, name, dtype, shape, layout, group=WORLD):
        vid = ctypes.c_int()
        _lib.call("loom_prog_tensor", self._h, name.encode(), int(dtype), shape.encode(), int(layout[0]),
                  int(layout[1]), group, ctypes.byref(vid))
        return Value(self, vid.value)

    def scalar(self, name, dtype=FP32, group=WORLD):
        return self.tensor(name, dtype, "", Replicated, group)

    def op(self, name, *operands, **attrs):
        """Operation `name` as .loom spells it; attrs: value, seed, dim, root, reduce, dtype, group_offset."""
        ids = [self._value(x, f"Program.op({name!r})", f"operand {i}") for i, x in enumerate(operands)]
        arr = (ctypes.c_int * max(1, len(ids)))(*ids)
        if "reduce" in attrs:
            attrs["reduce"] = _reduction(attrs["reduce"], f"Program.op({name!r})")
        attr = ProgAttr(**{k: int(v) if k != "value" else float(v) for k, v in attrs.items()})
        vid = ctypes.c_int()
        _lib.call("loom_prog_op", self._h, name.encode(), arr, len(ids), ctypes.byref(attr), ctypes.byref(vid))
        return Value(self, vid.value)

    def var(self, name, value):
        """`Var name = value;`"""
        _lib.call("loom_prog_name", self._h, self._own(value, "Program.var", f"`{name}`"), name.encode())
        return value

    def execute(self, name, inputs, outputs):
        ids = [self._own(v, "Program.execute", f"input {k}") for k, v in enumerate(inputs)]
        ods = [self._own(v, "Program.execute", f"output {k}") for k, v in enumerate(outputs)]
        i = (ctypes.c_int * max(1, len(ids)))(*ids)
        o = (ctypes.c_int * len(ods))(*ods)
        _lib.call("loom_prog_execute", self._h, name.encode(), i, len(ids), o, len(ods))
        self.label = f"`{name}`"

    # the paper's operations
    def matmul(self, a, b): return self.op("MatMul", a, b)
    def all_reduce(self, x, reduce="+"): return self.op("AllReduce", x, reduce=reduce)
    def reduce_scatter(self, x, reduce="+"): return self.op("ReduceScatter", x, reduce=reduce)
    def reduce(self, x, root=0, reduce="+"): return self.op("Reduce", x, root=root, reduce=reduce)
    def broadcast(self, x, root=0): return self.op("Broadcast", x, root=root)
    def all_gather(self, x): return self.op("AllGather", x)
    def all_to_all(self, x, dim): return self.op("AllToAll", x, dim=dim)
    def dropout(self, x, p, seed=0): return self.op("Dropout", x, value=p, seed=seed)
    def sqrt(self, x): return self.op("Sqrt", x)
    def send(self, x, groups=1): return self.op("Send", x, group_offset=groups)

    def check(self):
        _lib.call("loom_prog_check", self._h)

    def text(self, typed=False):
        n = ctypes.c_size_t()
        _lib.load().loom_prog_print(self._h, int(typed), None, 0, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value + 1)
        _lib.call("loom_prog_print", self._h, int(typed), buf, n.value + 1, ctypes.byref(n))
        return buf.value.decode()

    def transform(self, statement):
        """Applies one statement ("(rs, ag) = split(sum, AllReduceSplitRSAG)") in place."""
        _lib.call("loom_prog_transform", self._h, statement.encode())

    def schedule(self, name=None):
        h = ctypes.c_void_p()
        _lib.call("loom_prog_schedule", self._h, name.encode() if name else None, ctypes.byref(h))
        return Program(h, f"{self.label} scheduled by `{name}`" if name else None)

    def interp(self, output, world, bind="", seed=1):
        n = ctypes.c_size_t()
        r = _lib.load().loom_prog_interp(self._h, world, bind.encode(), seed, output.encode(), None, 0, ctypes.byref(n))
        if r != 0 and n.value == 0:
            _lib.check(r, "loom_prog_interp")
        vals = (ctypes.c_double * max(1, n.value))()
        _lib.call("loom_prog_interp", self._h, world, bind.encode(), seed, output.encode(), vals, n.value, ctypes.byref(n))
        return list(vals[:n.value])

    def compare(self, other, world, bind="", seed=1):
        """The largest relative difference of the two programs' results (0: bit-exact)."""
        d = ctypes.c_double()
        _lib.call("loom_prog_interp_compare", self._h, other._h, world, bind.encode(), seed, ctypes.byref(d))
        return d.value

    def __eq__(self, other):
        e = ctypes.c_int()
        _lib.call("loom_prog_equal", self._h, other._h, ctypes.byref(e))
        return bool(e.value)

    __hash__ = None


# ---- on GPUs ------------------------------------------------------------------------------

_DTYPE_NAMES = {int(DType.FP32): "float32", int(DType.FP16): "float16", int(DType.BF16): "bfloat16"}
_compiled = {}  # name -> CompiledProgram: the op finds its plan by name (a string torch.compile keeps)


class IoSpec:
    """One input or output of a compiled program on this rank: name, dtype (torch's name), shape of this
    rank's piece (None where the rank holds none)."""
    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, shape

    def __repr__(self):
        return f"IoSpec({self.name!r}, {self.dtype}, {self.shape})"


def check_inputs(fn, specs, tensors, device):
    """The tensors a call passes, against the plan's inputs (count, dtype, shape, device, contiguity): None
    where this rank holds nothing. Runs on stand-ins (no torch needed)."""
    if len(tensors) != len(specs):
        raise InvalidArgumentError(f"{fn}: {len(tensors)} tensors; the program takes {len(specs)} inputs ("
                                   + ", ".join(s.name for s in specs) + ")")
    for i, (spec, t) in enumerate(zip(specs, tensors)):
        arg = f"input {i} (`{spec.name}`)"
        if spec.shape is None:
            if t is not None:
                raise InvalidArgumentError(f"{fn}: {arg}: this rank holds no piece of it; pass None")
            continue
        check_tensor(fn, arg, t, dtypes=(spec.dtype,), shape=spec.shape, device=device,
                     why="this rank's piece, loom_prog_plan_io")


class CompiledProgram(PlanHandle):
    """A program compiled for comm's ranks (loom.lang.compile); call it on this rank's input pieces."""

    def __init__(self, program, comm, schedule, sizes):
        if not isinstance(program, Program):
            raise InvalidArgumentError(f"loom.lang.compile: program is a {type(program).__name__}; expected a "
                                       f"loom.lang.Program")
        self.comm, self.program = comm, program
        bind = ",".join(f"{k}={int(v)}" for k, v in sorted(sizes.items()))
        h = ctypes.c_void_p()
        sched = schedule.encode() if schedule else None
        comm._bounded(lambda: _lib.call("loom_prog_compile", ctypes.c_void_p(comm.handle), program._h, sched,
                                        bind.encode(), ctypes.byref(h)), "loom_prog_compile")
        self._plan = h.value
        comm._register_plan(self)
        info = ProgPlanInfo()
        _lib.call("loom_prog_plan_info", ctypes.c_void_p(self._plan), ctypes.byref(info))
        self.info = info.as_dict()
        self.inputs = [self._io(0, i) for i in range(info.ninputs)]
        self.outputs = [self._io(1, j) for j in range(info.noutputs)]
        self.name = f"prog{next(_numbers)}"
        _compiled[self.name] = self

    def _plan_label(self):
        return f"loom.lang.compile({self.program.label})"

    def _io(self, output, i):
        io = ProgIo()
        _lib.call("loom_prog_plan_io", ctypes.c_void_p(self._plan), output, i, ctypes.byref(io))
        shape = tuple(int(io.dims[j]) for j in range(io.rank)) if io.held else None
        return IoSpec(io.name.decode(), _DTYPE_NAMES[io.dtype], shape)

    def close(self):
        """Collective: destroys the plan."""
        _compiled.pop(getattr(self, "name", None), None)
        self._destroy_plan()

    def run(self, *tensors, stream=None):
        """One call (eager): this rank's output pieces (None where it holds none)."""
        from . import _torch
        torch = _torch.require("loom.lang.compile")
        fn = self._plan_label()
        check_inputs(fn, self.inputs, tensors, self.comm.device)
        dev = torch.device("cuda", self.comm.device)
        outs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device=dev) if s.shape is not None else None
                for s in self.outputs]
        ins = (ctypes.c_void_p * max(1, len(tensors)))(*[t.data_ptr() if t is not None else None for t in tensors])
        ods = (ctypes.c_void_p * max(1, len(outs)))(*[o.data_ptr() if o is not None else None for o in outs])
        _lib.call("loom_prog_run", ctypes.c_void_p(self.handle), ins, ods,
                  ctypes.c_void_p(_torch.stream_handle(stream, self.comm.device)))
        return outs

    def __call__(self, *tensors):
        """This rank's output pieces through the custom op loom::prog_run (traceable by torch.compile)."""
        torch, op = _prog_op()
        dev = torch.device("cuda", self.comm.device)
        ins = [t if t is not None else torch.empty(0, device=dev) for t in tensors]
        outs = op(ins, self.name)
        return tuple(o if s.shape is not None else None for o, s in zip(outs, self.outputs))


def compile(program, comm, schedule=None, **sizes):
    """`program` compiled for comm's ranks, its sizes bound by keyword (B=8, S=1024): a CompiledProgram to call on
    torch tensors. Collective. schedule: loom_prog_compile's (a Schedule section, a schedule `loom schedules`
    lists, "NAME/b2", "unscheduled", "sequential", "cublaslt+nccl"); None: the tuning cache's entry, else the
    cost model's cheapest schedule that takes the program's inputs and outputs as written. `.info["schedule"]`
    names what it runs."""
    return CompiledProgram(program, comm, schedule, sizes)


_op = None


def _prog_op():
    """(torch, torch.ops.loom.prog_run), registered on first use."""
    global _op
    from . import _torch
    torch = _torch.require("loom.lang.compile")
    if _op is not None:
        return torch, _op
    from typing import List

    @torch.library.custom_op("loom::prog_run", mutates_args=())
    def prog_run(inputs: List[torch.Tensor], plan: str) -> List[torch.Tensor]:
        c = _compiled[plan]
        outs = c.run(*[t if s.shape is not None else None for t, s in zip(inputs, c.inputs)])
        dev = torch.device("cuda", c.comm.device)
        return [o if o is not None else torch.empty(0, dtype=getattr(torch, s.dtype), device=dev)
                for o, s in zip(outs, c.outputs)]

    @prog_run.register_fake
    def _(inputs, plan):
        c = _compiled[plan]
        dev = torch.device("cuda", c.comm.device)
        return [torch.empty(s.shape if s.shape is not None else (0,), dtype=getattr(torch, s.dtype), device=dev)
                for s in c.outputs]

    _op = torch.ops.loom.prog_run
    return torch, _op
