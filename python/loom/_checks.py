"""_checks.py - argument checks on tensors, before anything reaches libloom.

libloom sees bare pointers: it checks handles, shapes it is given, alignment
and that pointers are device memory, but cannot see a tensor's dtype, its
shape against the other tensors', its device or its strides. These checks
do, and raise InvalidArgumentError naming the function, the argument and
the value ("loom.gemm: b has dtype torch.float32; expected torch.bfloat16
(the dtype of a)").

They use only what every tensor answers (.dtype, .shape, .device,
.is_contiguous(), .data_ptr()) and never import torch, so the host tests
run them on stand-in objects where torch is not installed.
"""
from ._structs import DType
from .errors import InvalidArgumentError

# torch dtype name (str(t.dtype) without "torch.") -> loom dtype
LOOM_DTYPES = {"float32": DType.FP32, "float16": DType.FP16, "bfloat16": DType.BF16}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


_names = {}


def dtype_name(dtype):
    """'bfloat16' for torch.bfloat16 (or for the string 'bfloat16')."""
    try:
        return _names[dtype]
    except (KeyError, TypeError):
        pass
    s = str(dtype)
    name = s[6:] if s.startswith("torch.") else s
    try:
        _names[dtype] = name
    except TypeError:  # unhashable stand-in
        pass
    return name


def loom_dtype(dtype, fn, arg, allowed=("float32", "float16", "bfloat16")):
    """The loom DType of a torch dtype (or name), refusing others."""
    name = dtype_name(dtype)
    if name not in allowed:
        raise InvalidArgumentError(f"{fn}: {arg}={_show(name)} is not supported; expected "
                                   + " or ".join(_show(a) for a in allowed))
    return LOOM_DTYPES[name]


def _show(name):
    return f"torch.{name}"


def shape_of(t):
    return tuple(int(s) for s in t.shape)


def check_tensor(fn, arg, t, dtypes=None, shape=None, device=None, contiguous=True, why=""):
    """Checks tensor argument `arg` of function `fn`; returns its dtype name.

    dtypes: allowed dtype names (None: any); shape: expected shape, entries
    None for "any" (its length fixes the number of dimensions); device: the
    CUDA device index it must be on (None: any CUDA device); contiguous:
    row-major dense. `why` is appended to a dtype or shape message."""
    if t is None:
        raise InvalidArgumentError(f"{fn}: {arg} is None; expected a CUDA tensor")
    try:
        dev, dtype, got = t.device, t.dtype, t.shape
    except AttributeError:
        raise InvalidArgumentError(f"{fn}: {arg} is a {type(t).__name__}, not a tensor") from None
    if dev.type != "cuda":
        raise InvalidArgumentError(f"{fn}: {arg} is on device {dev}; loom ops take CUDA tensors")
    if device is not None and dev.index != device:
        raise InvalidArgumentError(f"{fn}: {arg} is on cuda:{dev.index}, expected cuda:{device}"
                                   + (f" ({why})" if why else ""))
    name = dtype_name(dtype)
    if dtypes is not None and name not in dtypes:
        raise InvalidArgumentError(f"{fn}: {arg} has dtype {_show(name)}; expected "
                                   + " or ".join(_show(d) for d in dtypes) + (f" ({why})" if why else ""))
    if shape is not None:
        ok = len(got) == len(shape) and all(e is None or e == g for e, g in zip(shape, got))
        if not ok:
            got = shape_of(t)
            want = "(" + ", ".join("*" if e is None else str(e) for e in shape) + ("," if len(shape) == 1 else "") + ")"
            raise InvalidArgumentError(f"{fn}: {arg} has shape {got}; expected {want}" + (f" ({why})" if why else ""))
    if contiguous and not t.is_contiguous():
        raise InvalidArgumentError(f"{fn}: {arg} (shape {shape_of(t)}) is not contiguous; pass "
                                   f"{arg}.contiguous()")
    return name


def check_same_device(fn, tensors):
    """All (arg, tensor) pairs (None tensors skipped) on one CUDA device; returns its index."""
    idx, first = None, None
    for arg, t in tensors:
        if t is None:
            continue
        d = t.device
        if idx is None:
            idx, first = d.index, arg
        elif d.index != idx:
            raise InvalidArgumentError(f"{fn}: {arg} is on cuda:{d.index} but {first} is on cuda:{idx}")
    return idx


def numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def gemm_shapes(fn, a_shape, b_shape, layout):
    """(m, n, k) of C = A B (layout "kn": B [k, n]) or A B^T ("nk": B [n, k])."""
    if len(a_shape) != 2:
        raise InvalidArgumentError(f"{fn}: a has shape {tuple(a_shape)}; expected 2 dimensions (m, k)")
    if len(b_shape) != 2:
        raise InvalidArgumentError(f"{fn}: b has shape {tuple(b_shape)}; expected 2 dimensions")
    m, k = a_shape
    if layout == "kn":
        if b_shape[0] != k:
            raise InvalidArgumentError(f"{fn}: b has shape {tuple(b_shape)}; expected (k={k}, n) with k from a "
                                       f"{tuple(a_shape)} (layout='kn': C = A B)")
        n = b_shape[1]
    elif layout == "nk":
        if b_shape[1] != k:
            raise InvalidArgumentError(f"{fn}: b has shape {tuple(b_shape)}; expected (n, k={k}) with k from a "
                                       f"{tuple(a_shape)} (layout='nk': C = A B^T, a Linear weight)")
        n = b_shape[0]
    else:
        raise InvalidArgumentError(f"{fn}: layout={layout!r}; expected 'kn' (b is [k, n]) or 'nk' (b is [n, k])")
    return int(m), int(n), int(k)


def embedding_shapes(fn, tables_per_rank, rows, dim, global_batch, rank):
    """Checks an embedding layout for `rank` and returns
    (T, T_total, Bl, table_rows): this rank's tables, all tables, local
    batch, and the rows of this rank's stacked tables."""
    tpr = [int(t) for t in tables_per_rank]
    if any(t < 0 for t in tpr):
        raise InvalidArgumentError(f"{fn}: tables_per_rank={tpr} has a negative entry")
    t_total = sum(tpr)
    if t_total < 1:
        raise InvalidArgumentError(f"{fn}: tables_per_rank={tpr} holds no table")
    rows = [int(r) for r in rows]
    if len(rows) != t_total:
        raise InvalidArgumentError(f"{fn}: rows has {len(rows)} entries; expected one per table, "
                                   f"sum(tables_per_rank)={t_total}")
    W = len(tpr)
    if not 0 <= rank < W:
        raise InvalidArgumentError(f"{fn}: rank {rank} is outside tables_per_rank (W={W})")
    if global_batch < 1 or global_batch % W:
        raise InvalidArgumentError(f"{fn}: global_batch={global_batch} must be a positive multiple of the "
                                   f"world size {W}")
    first = sum(tpr[:rank])
    T = tpr[rank]
    return T, t_total, global_batch // W, sum(rows[first:first + T])
