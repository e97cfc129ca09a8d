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
"""
import ctypes
import itertools

from . import _lib
from ._structs import DType, ProgAttr, ProgLayout
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
