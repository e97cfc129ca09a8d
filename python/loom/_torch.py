"""_torch.py - torch tensors over memory that libloom owns.

Two ways in, both zero-copy:
  - own_tensor(): this rank's symmetric memory (loom_malloc) as a torch
    tensor through __cuda_array_interface__. torch keeps a reference to the
    interface object (a _Holder) for as long as the tensor's storage lives
    (every view included) and drops it when the storage dies, so a weak
    reference to the holder tells the binding whether any tensor still uses
    the memory (Comm.free_unused). torch reads the device from the pointer,
    which is this GPU's memory. bfloat16, which the interface has no type
    string for, is made as int16 and viewed.
  - peer_tensor(): a peer's copy of a symmetric buffer, mapped into this
    GPU's address space (loom_peer_ptr). The interface above would ask the
    driver for the pointer's device and get the peer's GPU, so this one goes
    through a DLPack capsule that names this GPU. The capsule's
    DLManagedTensor has no deleter and is kept for the life of the process
    (torch reads its deleter field when the storage dies): a few dozen bytes
    per distinct view, cached.
torch is imported on first use only.
"""
import ctypes
import sys

from ._checks import ITEMSIZE, dtype_name

_CAI_TYPESTR = {"float32": "<f4", "float16": "<f2", "float64": "<f8", "int64": "<i8", "int32": "<i4",
                "int16": "<i2", "int8": "|i1", "uint8": "|u1", "bool": "|b1"}
_DL_CODE = {"float32": (2, 32), "float16": (2, 16), "float64": (2, 64), "bfloat16": (4, 16),
            "int64": (0, 64), "int32": (0, 32), "int16": (0, 16), "int8": (0, 8), "uint8": (1, 8), "bool": (6, 8)}
_DL_CUDA = 2


TORCH_MISSING = ("{what} needs PyTorch (>= 2.1), which this Python ({python}) cannot import ({error}): "
                 "pip install torch (or pip install 'loom-fused[torch]')")


def require(what):
    """torch, imported for `what` (a loom module or command that cannot work
    without it); where torch does not import, ModuleNotFoundError (an
    ImportError) saying so and how to install it, not torch's bare one."""
    try:
        import torch as t
    except ImportError as e:
        raise ModuleNotFoundError(TORCH_MISSING.format(what=what, python=sys.executable, error=e), name="torch") from e
    return t


def torch():
    import torch as t
    return t


def current_stream(device):
    """The handle (int) of torch's current stream on `device`."""
    return torch().cuda.current_stream(device).cuda_stream


def stream_handle(stream, device):
    """An int cudaStream_t from None (torch's current stream on device), an
    int, or a torch.cuda.Stream."""
    if stream is None:
        return current_stream(device)
    if isinstance(stream, int):
        return stream
    return int(stream.cuda_stream)


def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


class _Holder:
    """The __cuda_array_interface__ provider of one tensor over loom memory."""
    __slots__ = ("__cuda_array_interface__", "__weakref__", "owner")

    def __init__(self, ptr, shape, typestr, owner):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (int(ptr), False),
                                         "strides": None, "version": 3}
        self.owner = owner  # whatever must outlive the tensor (the allocation record)


def own_tensor(ptr, shape, dtype, device, owner=None):
    """(tensor, holder): a contiguous tensor of `shape`/`dtype` at device
    address ptr (memory of cuda:device). The holder lives as long as the
    tensor's storage. torch reads the interface's type string with numpy;
    without numpy the tensor is made through DLPack instead and the holder
    is None (nothing then tells when the tensor is gone)."""
    t = torch()
    name = dtype_name(dtype)
    base = "int16" if name == "bfloat16" else name
    if base not in _CAI_TYPESTR:
        raise TypeError(f"dtype {dtype} cannot be exposed as a tensor over loom memory")
    holder = _Holder(ptr, shape, _CAI_TYPESTR[base], owner)
    try:
        tensor = t.as_tensor(holder)
    except RuntimeError as e:
        if "umpy" not in str(e):
            raise
        return peer_tensor(ptr, shape, contiguous_strides(shape), dtype, device), None
    if name == "bfloat16":
        tensor = tensor.view(t.bfloat16)
    return tensor, holder


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_dl_keep = {}  # (ptr, shape, strides, dtype, device) -> (managed, shape array, strides array)


def peer_tensor(ptr, shape, strides, dtype, device):
    """A tensor on cuda:`device` (this GPU) over address ptr (another GPU's
    memory mapped here, or this GPU's); shape/strides in elements."""
    t = torch()
    name = dtype_name(dtype)
    key = (int(ptr), tuple(shape), tuple(strides), name, int(device))
    kept = _dl_keep.get(key)
    if kept is None:
        nd = len(shape)
        sh = (ctypes.c_int64 * max(nd, 1))(*shape)
        st = (ctypes.c_int64 * max(nd, 1))(*strides)
        m = _DLManagedTensor()
        m.dl_tensor.data = int(ptr)
        m.dl_tensor.device = _DLDevice(_DL_CUDA, int(device))
        m.dl_tensor.ndim = nd
        code, bits = _DL_CODE[name]
        m.dl_tensor.dtype = _DLDataType(code, bits, 1)
        m.dl_tensor.shape = sh
        m.dl_tensor.strides = st
        m.dl_tensor.byte_offset = 0
        m.manager_ctx = None
        m.deleter = None
        kept = (m, sh, st)
        _dl_keep[key] = kept
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(kept[0]), b"dltensor", None)
    return t.utils.dlpack.from_dlpack(capsule)


def itemsize(dtype):
    return ITEMSIZE[dtype_name(dtype)]
