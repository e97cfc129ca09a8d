"""comm.py - a loom communicator, and its symmetric memory as torch tensors.

    comm = loom.Comm.from_process_group()         # collective, after init_process_group("nccl")
    buf = comm.empty((B, D), torch.bfloat16)      # collective: symmetric memory, a plain tensor
    nxt = comm.peer_tensor(buf, (comm.rank + 1) % comm.size)  # the next rank's copy, on this GPU
    ...
    comm.free(buf)                                # collective, or left to comm.close()
    comm.close()                                  # collective: plans, memory, NCCL comm

Bootstrap. from_process_group makes a new NCCL communicator for loom with
the NCCL library libloom's calls reach (nccl.py): every rank first checks
that library against the headers libloom was built with and the ranks
exchange the verdicts through the group, so a mismatch on any rank raises
NcclMismatchError on every rank (no rank is left waiting in a collective);
then rank 0's ncclUniqueId is broadcast through the group and every rank
calls ncclCommInitRank. By default (use_torch_comm=None) loom runs on the
process group's own NCCL comm instead wherever it can: PyTorch's calls
reach the same NCCL file as libloom's, and the group's backend hands out
its ncclComm_t (the ranks agree first, so all or none do); where it cannot,
loom makes its second comm and says why once per process (a warning).
use_torch_comm=True insists on the group's comm (an error where it cannot),
False always makes a second one. from_nccl_comm wraps any ncclComm_t
address made with libloom's NCCL.

Names. Every comm has a process-wide name (comm.name, "loom0", "loom1",
...), which the registered torch ops (library.py) take in place of the
object; Comm.named(name) finds the live comm.

Collective host calls (comm creation, loom_malloc, loom_free, plan
creation, destruction) run with a deadline (timeout_s, nccl.run_bounded):
a peer that never makes the matching call gives WaitTimeoutError. Device
side waits are bounded by the comm's timeout_ms (LOOM_TIMEOUT_MS).

Memory. empty()/zeros() return torch tensors over loom_malloc memory
(_torch.own_tensor). Freeing is collective, so it never happens behind the
caller's back (a garbage collector runs at different times on different
ranks): free(t) frees one buffer explicitly; free_unused() frees every
buffer that no tensor uses any more on any rank (the ranks agree through an
NCCL all-reduce); close() frees everything left.
"""
import ctypes
import itertools
import os
import warnings
import weakref

from . import _lib, _procmaps, _torch, nccl
from ._checks import ITEMSIZE, dtype_name, numel
from ._structs import CommInfo, Config
from .errors import InvalidArgumentError, NcclMismatchError


# Bytes through a torch.distributed group with tensor collectives (torch's
# object collectives need numpy); tensors on the GPU for an NCCL group.
_MSG_BYTES = 4096


def _group_device(group, device):
    import torch.distributed as dist
    return f"cuda:{device}" if "nccl" in str(dist.get_backend(group)) else "cpu"


def _all_gather_bytes(payload, group, size, device):
    """Every rank's `payload` (at most _MSG_BYTES are kept), in rank order."""
    torch = _torch.torch()
    import torch.distributed as dist
    payload = payload[:_MSG_BYTES]
    buf = torch.zeros(_MSG_BYTES + 4, dtype=torch.uint8)
    buf[:4] = torch.tensor(list(len(payload).to_bytes(4, "little")), dtype=torch.uint8)
    if payload:
        buf[4:4 + len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    buf = buf.to(_group_device(group, device))
    out = [torch.empty_like(buf) for _ in range(size)]
    dist.all_gather(out, buf, group=group)
    res = []
    for o in out:
        b = bytes(o.cpu().tolist())
        res.append(b[4:4 + int.from_bytes(b[:4], "little")])
    return res


def _broadcast_bytes(payload, nbytes, group, device):
    """Group rank 0's `payload` (nbytes long) on every rank."""
    torch = _torch.torch()
    import torch.distributed as dist
    buf = torch.zeros(nbytes, dtype=torch.uint8)
    if payload:
        buf[:] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    buf = buf.to(_group_device(group, device))
    dist.broadcast(buf, src=dist.get_global_rank(group, 0), group=group)
    return bytes(buf.cpu().tolist())


_LIVE = weakref.WeakValueDictionary()  # name -> Comm, while it is open
_NAMES = itertools.count()
_SAID_SECOND_COMM = []  # the reason, once said


def _second_comm_note(reason):
    """Says once per process why loom makes its own NCCL comm."""
    if not _SAID_SECOND_COMM:
        _SAID_SECOND_COMM.append(reason)
        warnings.warn(f"loom.Comm.from_process_group: loom makes a second NCCL communicator: {reason}",
                      stacklevel=3)


class _Alloc:
    __slots__ = ("ptr", "nbytes", "seq", "holders", "internal", "__weakref__")

    def __init__(self, ptr, nbytes, seq, internal):
        self.ptr, self.nbytes, self.seq, self.internal = ptr, nbytes, seq, internal
        self.holders = []  # weak references to the _Holder of each tensor made over it

    def in_use(self):
        return any(h() is not None for h in self.holders)


def _group_comm(group, device, mine):
    """(the group's ncclComm_t address, None) where loom can run on it, else
    (None, why not)."""
    torch = _torch.torch()
    tn = nccl.torch_nccl()
    if not (tn and tn.path and mine.path and _procmaps.same_file(tn.path, mine.path)):
        return None, (f"PyTorch's NCCL calls reach {tn.path if tn and tn.path else '(unknown)'} and libloom's "
                      f"{mine.path}: a comm is only usable by the NCCL library that made it (load one NCCL in "
                      f"both, python/README.md)")
    try:
        backend = group._get_backend(torch.device("cuda", device))
    except Exception as e:
        return None, f"the group has no NCCL backend on cuda:{device} ({e})"
    get_ptr = getattr(backend, "_comm_ptr", None) or getattr(backend, "comm_ptr", None)
    if get_ptr is None:
        return None, f"torch {torch.__version__}'s {type(backend).__name__} does not expose its ncclComm_t"
    address = get_ptr()
    if not address:
        return None, ("the process group has no NCCL comm yet (pass device_id= to init_process_group, or run "
                      "one collective first)")
    return int(address), None


class Comm:
    """A loom communicator (loom_comm_t) on one CUDA device."""
    name = None  # "loom<n>" once made (the registered ops' handle on it)

    def __init__(self, nccl_comm, *, workspace_bytes=0, timeout_ms=0, timeout_s=300.0, owns_nccl=False,
                 _checked=False):
        """Wraps ncclComm_t `nccl_comm` (an int address), which must come
        from the NCCL library libloom's calls reach. Collective. Prefer
        from_process_group / from_nccl_comm."""
        if not nccl_comm:
            raise InvalidArgumentError("loom.Comm: nccl_comm=0 (NULL)")
        if not _checked:
            nccl.check()
        self.timeout_s = float(timeout_s)
        self._nccl = int(nccl_comm)
        self._owns_nccl = owns_nccl
        self._handle = None
        self._allocs = {}  # ptr -> _Alloc
        self._seq = 0
        self._plans = []   # live plans: destroyed (collectively) before the comm
        self._plan_cache = {}
        rank, size, device = nccl.comm_rank_size_device(self._nccl)
        self.rank, self.size, self.device = rank, size, device
        cfg = Config(workspace_bytes=int(workspace_bytes), timeout_ms=int(timeout_ms))
        out = ctypes.c_void_p()
        self._bounded(lambda: _lib.call("loom_comm_create", ctypes.c_void_p(self._nccl), ctypes.byref(cfg),
                                        ctypes.byref(out)), "loom_comm_create")
        self._handle = out.value
        self.info = self._info()
        self.name = f"loom{next(_NAMES)}"
        _LIVE[self.name] = self

    @classmethod
    def named(cls, name):
        """The open comm called `name` (comm.name)."""
        c = _LIVE.get(name) if isinstance(name, str) else None
        if c is None or c._handle is None:
            raise InvalidArgumentError(f"loom.Comm.named: no open loom comm is called {name!r} (comm.name of a "
                                       f"loom.Comm; open: {sorted(_LIVE.keys())})")
        return c

    # ---- construction -----------------------------------------------------

    @classmethod
    def from_process_group(cls, group=None, *, use_torch_comm=None, workspace_bytes=0, timeout_ms=0,
                           timeout_s=300.0):
        """Collective over `group` (default: the world). Every rank must
        have selected its GPU (torch.cuda.set_device) before. use_torch_comm:
        None (the group's NCCL comm where loom can run on it, else a second
        comm, said once), True (the group's, or an error) or False (a second
        comm)."""
        torch = _torch.torch()
        import torch.distributed as dist
        fn = "loom.Comm.from_process_group"
        if not dist.is_initialized():
            raise InvalidArgumentError(f"{fn}: torch.distributed is not initialized "
                                       "(call torch.distributed.init_process_group first)")
        if use_torch_comm not in (None, True, False):
            raise InvalidArgumentError(f"{fn}: use_torch_comm={use_torch_comm!r}; expected None, True or False")
        group = group or dist.group.WORLD
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        device = torch.cuda.current_device()

        # 1. every rank's NCCL verdict and whether it can run on the group's
        #    comm, exchanged, so that all raise together and all or none wrap it
        problem, torch_comm, why_not = None, None, None
        try:
            mine = nccl.loom_nccl()
            mode = os.environ.get("LOOM_NCCL_CHECK", "") or "minor"
            problem = nccl.compatibility_problem(mine, mode, nccl.torch_nccl())
            if use_torch_comm is not False and not problem:
                torch_comm, why_not = _group_comm(group, device, mine)
                if use_torch_comm and why_not:
                    problem = f"use_torch_comm=True: {why_not}"
        except Exception as e:  # the library itself failed to load or answer
            problem = f"{type(e).__name__}: {e}"
        verdict = problem or ("" if torch_comm else "-" + (why_not or "use_torch_comm=False"))
        verdicts = [v.decode(errors="replace") for v in _all_gather_bytes(verdict.encode(), group, size, device)]
        bad = [(r, v) for r, v in enumerate(verdicts) if v and not v.startswith("-")]
        if bad:
            text = "; ".join(f"rank {r}: {p}" for r, p in bad)
            raise NcclMismatchError(f"{fn}: {text}")

        # 2. the NCCL comm loom runs on
        if not any(verdicts):
            return cls(torch_comm, workspace_bytes=workspace_bytes, timeout_ms=timeout_ms, timeout_s=timeout_s,
                       owns_nccl=False, _checked=True)
        if use_torch_comm is None:
            r, v = next((r, v) for r, v in enumerate(verdicts) if v)
            _second_comm_note(f"rank {r} cannot run on the process group's: {v[1:]}")
        uid = _broadcast_bytes(nccl.get_unique_id() if rank == 0 else b"", nccl.UNIQUE_ID_BYTES, group, device)
        address = nccl.comm_init_rank(size, uid, rank, device, timeout_s)
        try:
            return cls(address, workspace_bytes=workspace_bytes, timeout_ms=timeout_ms, timeout_s=timeout_s,
                       owns_nccl=True, _checked=True)
        except BaseException:
            nccl.comm_abort(address)
            raise

    @classmethod
    def from_nccl_comm(cls, address, *, workspace_bytes=0, timeout_ms=0, timeout_s=300.0,
                       trust_same_library=False):
        """Wraps an existing ncclComm_t (an int address; collective). The
        comm must have been made by the NCCL file libloom's calls reach; with
        two NCCL files in the process that cannot be verified, so it is
        refused unless trust_same_library=True."""
        if not isinstance(address, int) or address <= 0:
            raise InvalidArgumentError(f"loom.Comm.from_nccl_comm: address={address!r} must be a non-NULL "
                                       f"ncclComm_t address (an int)")
        info = nccl.check()
        files = nccl.mapped_nccl_files()
        if len(files) > 1 and not trust_same_library:
            raise NcclMismatchError(
                f"loom.Comm.from_nccl_comm: this process has {len(files)} NCCL libraries loaded "
                f"({', '.join(files)}); libloom's calls reach {info.path} and can only use an ncclComm_t "
                f"made by that one. Use Comm.from_process_group (loom makes its own comm), or pass "
                f"trust_same_library=True if the comm comes from {info.path}",
                loom_nccl=info.path, other_nccl=", ".join(f for f in files if f != info.path))
        return cls(address, workspace_bytes=workspace_bytes, timeout_ms=timeout_ms, timeout_s=timeout_s,
                   owns_nccl=False, _checked=True)

    # ---- state ------------------------------------------------------------

    @property
    def handle(self):
        """The loom_comm_t (int); raises once the comm is closed."""
        if self._handle is None:
            raise InvalidArgumentError("loom.Comm: the comm is closed")
        return self._handle

    @property
    def nccl_comm(self):
        """The ncclComm_t (int) this comm runs on."""
        return self._nccl

    def _bounded(self, fn, what):
        return nccl.run_bounded(fn, self.timeout_s, what, self.device)

    def _info(self):
        info = CommInfo()
        _lib.call("loom_comm_get_info", ctypes.c_void_p(self.handle), ctypes.byref(info))
        return info.as_dict()

    def workspace_free(self):
        """Bytes of the symmetric workspace not reserved by plans."""
        return self._info()["workspace_free"]

    def check(self):
        """Raises the error a kernel of this comm recorded (WaitTimeoutError
        when a device-side wait on a peer expired); the comm is unusable
        after one."""
        _lib.call("loom_comm_get_async_error", ctypes.c_void_p(self.handle))

    def __repr__(self):
        state = "closed" if self._handle is None else f"cuda:{self.device}"
        return f"loom.Comm(rank={self.rank}, size={self.size}, {state})"

    # ---- symmetric memory -------------------------------------------------

    def _malloc(self, nbytes, internal=False):
        ptr = ctypes.c_void_p()
        self._bounded(lambda: _lib.call("loom_malloc", ctypes.c_void_p(self.handle), ctypes.c_size_t(nbytes),
                                        ctypes.byref(ptr)), "loom_malloc")
        a = _Alloc(ptr.value, nbytes, self._seq, internal)
        self._seq += 1
        self._allocs[a.ptr] = a
        return a

    def _free_alloc(self, a):
        self._bounded(lambda: _lib.call("loom_free", ctypes.c_void_p(self.handle), ctypes.c_void_p(a.ptr)),
                      "loom_free")
        del self._allocs[a.ptr]

    def empty(self, shape, dtype, *, _internal=False):
        """Collective: an uninitialised contiguous tensor of `shape` and
        `dtype` on this comm's GPU, in symmetric memory (loom_malloc: every
        rank gets the same size, and peers' kernels can load and store it)."""
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise InvalidArgumentError(f"loom.Comm.empty: shape={shape} has a negative size")
        name = dtype_name(dtype)
        if name not in ITEMSIZE:
            raise InvalidArgumentError(f"loom.Comm.empty: dtype={dtype} is not supported")
        nbytes = max(numel(shape) * ITEMSIZE[name], 1)
        a = self._malloc(nbytes, _internal)
        try:
            t, holder = _torch.own_tensor(a.ptr, shape, dtype, self.device, owner=a)
        except BaseException:
            self._free_alloc(a)
            raise
        a.holders.append(weakref.ref(holder) if holder is not None else (lambda: True))  # untracked: in use
        return t

    def zeros(self, shape, dtype):
        """Collective: empty() filled with zeros (on torch's current stream)."""
        t = self.empty(shape, dtype)
        t.zero_()
        return t

    def _alloc_of(self, t, fn):
        ptr = int(t.data_ptr())
        for a in self._allocs.values():
            if a.ptr <= ptr < a.ptr + a.nbytes or (ptr == a.ptr):
                return a
        raise InvalidArgumentError(f"{fn}: the tensor at {ptr:#x} is not symmetric memory of this comm "
                                   f"(make it with comm.empty)")

    def owns(self, t):
        """True if tensor t lies in this comm's symmetric memory."""
        try:
            self._alloc_of(t, "loom.Comm.owns")
            return True
        except InvalidArgumentError:
            return False

    def offset_of(self, t, fn="loom.Comm.offset_of"):
        """(allocation base, byte offset of t in it); raises if t is not this comm's memory."""
        a = self._alloc_of(t, fn)
        return a.ptr, int(t.data_ptr()) - a.ptr

    def free(self, t):
        """Collective: frees the symmetric buffer tensor t was made over (by
        empty/zeros; t must start at its beginning). Every tensor over that
        memory is invalid afterwards."""
        a = self._alloc_of(t, "loom.Comm.free")
        if int(t.data_ptr()) != a.ptr:
            raise InvalidArgumentError(f"loom.Comm.free: the tensor at {int(t.data_ptr()):#x} starts inside a "
                                       f"buffer at {a.ptr:#x}; pass the tensor comm.empty returned")
        if a.internal:
            raise InvalidArgumentError("loom.Comm.free: this buffer belongs to a loom plan; close the plan")
        self._free_alloc(a)

    def free_unused(self):
        """Collective: frees every buffer from empty()/zeros() that no tensor
        uses any more on any rank; returns how many."""
        torch = _torch.torch()
        allocs = sorted((a for a in self._allocs.values() if not a.internal), key=lambda a: a.seq)
        if not allocs:
            return 0
        flags = torch.tensor([0 if a.in_use() else 1 for a in allocs], dtype=torch.int32,
                             device=f"cuda:{self.device}")
        stream = self._all_reduce_(flags, "min", "free_unused")
        done = torch.cuda.Event()
        done.record(stream)
        self._bounded(done.synchronize, "ncclAllReduce (free_unused)")  # a peer that never calls: no hang
        agreed = flags.tolist()
        n = 0
        for a, f in zip(allocs, agreed):
            if f:
                self._free_alloc(a)
                n += 1
        return n

    _NCCL_TYPES = {"int32": 2, "float32": 7}
    _NCCL_OPS = {"sum": 0, "max": 2, "min": 3}

    def _all_reduce_(self, t, op, what):
        """Collective: NCCL's all-reduce of t (contiguous int32 / float32 on
        this comm's GPU) in place, enqueued on torch's current stream of the
        GPU (no host synchronisation); returns that stream. what: the
        caller, for the error."""
        torch = _torch.torch()
        stream = torch.cuda.current_stream(self.device)
        r = nccl.library().ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), self._NCCL_TYPES[dtype_name(t.dtype)],
                                         self._NCCL_OPS[op], self._nccl, stream.cuda_stream)
        nccl._nccl_check(r, f"ncclAllReduce ({what})", self._nccl)
        return stream

    def peer_ptr(self, ptr, peer):
        """Address under which this GPU reaches peer's copy of the symmetric
        memory containing ptr (int)."""
        out = ctypes.c_void_p()
        _lib.call("loom_peer_ptr", ctypes.c_void_p(self.handle), ctypes.c_void_p(int(ptr)), int(peer),
                  ctypes.byref(out))
        return out.value

    def peer_tensor(self, t, peer):
        """Peer `peer`'s copy of symmetric tensor t, as a tensor on this GPU
        (loads and stores go over NVLink). Valid while the buffer is; it
        does not keep the buffer alive."""
        if not 0 <= int(peer) < self.size:
            raise InvalidArgumentError(f"loom.Comm.peer_tensor: peer={peer} must be in [0, {self.size})")
        self._alloc_of(t, "loom.Comm.peer_tensor")
        if int(peer) == self.rank:
            return t
        ptr = self.peer_ptr(t.data_ptr(), peer)
        return _torch.peer_tensor(ptr, tuple(t.shape), tuple(t.stride()), t.dtype, self.device)

    # ---- plans ------------------------------------------------------------

    def _register_plan(self, plan):
        self._plans.append(plan)  # kept until plan.close() or close(): destroying one is collective

    def _unregister_plan(self, plan):
        if plan in self._plans:
            self._plans.remove(plan)

    def cached_plan(self, key, make):
        """The plan of `key` in this comm's cache, made by make() (collective)
        the first time."""
        plan = self._plan_cache.get(key)
        if plan is None or plan.closed:
            plan = make()
            self._plan_cache[key] = plan
        return plan

    # ---- teardown ---------------------------------------------------------

    def close(self):
        """Collective: waits for the device's work (a CUDA graph's replays
        may use this comm's plans), destroys this comm's plans, frees its
        memory (tensors over it become invalid), destroys the loom comm and,
        if loom made it, the NCCL comm."""
        if self._handle is None:
            return
        if self._plans:
            # a CUDA graph's replays may still run these plans' kernels (loom_plan_destroy waits only for
            # the calls made on a stream): the device's work finishes first (graphs come from torch here)
            try:
                t = _torch.torch()
            except ImportError:
                t = None
            if t is not None and t.cuda.is_available():
                self._bounded(lambda: t.cuda.synchronize(self.device), "torch.cuda.synchronize (close)")
        for p in list(self._plans):
            p.close()
        self._plans.clear()
        self._plan_cache.clear()
        # what is left (comm.empty tensors, loom.nn layers' buffers) was allocated collectively, so every rank
        # holds the same allocations: free them in allocation order rather than leave them to loom_comm_destroy
        for a in sorted(self._allocs.values(), key=lambda a: a.seq):
            self._free_alloc(a)
        h = self._handle
        self._bounded(lambda: _lib.call("loom_comm_destroy", ctypes.c_void_p(h)), "loom_comm_destroy")
        self._handle = None
        _LIVE.pop(self.name, None)
        self._allocs.clear()
        if self._owns_nccl:
            nccl.comm_destroy(self._nccl, self.device, self.timeout_s)
        self._nccl = None

    def abort(self):
        """Not collective: after an error on this rank, aborts the NCCL comm
        if loom made it (ncclCommAbort, which also ends its peers' pending
        NCCL calls with an error) and marks the comm closed. loom's own
        resources are left to the process's exit: freeing them is collective."""
        if self._handle is None:
            return
        self._handle = None
        _LIVE.pop(self.name, None)
        self._plans.clear()
        self._plan_cache.clear()
        self._allocs.clear()
        if self._owns_nccl and self._nccl:
            nccl.comm_abort(self._nccl)
        self._nccl = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """close() (collective) on a normal exit; abort() when an exception
        leaves the block, since the other ranks may not be closing."""
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False
