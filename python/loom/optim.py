"""optim.py - loom's data-parallel Adam, AdamW and LAMB (loom_plan_adam /
loom_plan_lamb) as torch.optim.Optimizer subclasses.

    opt = loom.optim.AdamW(model.parameters(), comm, lr=1e-4, weight_decay=0.1)   # collective
    loss.backward()                  # this rank's gradients: no DDP, no all-reduce
    opt.step()                       # the gradients' all-reduce fused into the update
    opt.zero_grad()

Data parallelism: every rank holds the same parameters and computes
gradients of its own batch; step() sums each gradient over the ranks
(averaged by default, as DDP does: average_grads=False sums) inside the
optimizer's kernels, each rank updating 1/W of every tensor with state it
alone holds and storing the result into every rank's parameters
(RS-Opt-AG; tensors of <= 4096 elements: every rank updates the whole
tensor, AR-Opt; form= picks one for all). The arithmetic is loom.h's
(torch's Adam / AdamW and NVIDIA's LAMB in fp32, summed in rank order: the
same bits on every rank).

Memory. Peers load each other's gradients and store parameters, so the
optimizer moves the parameters (their .data) into one symmetric buffer of
the comm and gives each parameter a .grad that is a view of a second one,
where autograd accumulates. zero_grad() zeroes that buffer in place (it
never sets .grad to None); a .grad that something replaced is copied back
in at the next step. bf16 / fp16 parameters get fp32 master weights in the
plan (the parameters are their rounding). Every parameter must be a CUDA
tensor on the comm's GPU, all of one dtype, and every rank must build the
optimizer over the same shapes in the same order (collective).

Hyperparameters: one lr, betas and eps for all groups (loom's plan has
one; an LR scheduler may change lr between steps: it is read on the
device), weight_decay per group. state_dict() holds this rank's shard of
the state (per parameter: its slice [lo, hi), exp_avg, exp_avg_sq and the
fp32 master of the slice, step) and loads back into an optimizer over the
same shapes on the same number of ranks (ZeRO-1's checkpoint form).
Mixed precision: loom.optim.GradScaler (torch.amp.GradScaler whose
found_inf is agreed over the ranks) with these optimizers divides the
gradients by its scale inside the step and skips a step whose gradient has
an inf or NaN on any rank, on every rank; torch's own GradScaler is refused
(its check sees this rank's gradients alone).
"""
import ctypes

from ._torch import require

torch = require("loom.optim")

from . import _lib, _torch, library  # noqa: F401  (library registers torch.ops.loom.optimizer_step)
from ._checks import dtype_name, loom_dtype
from ._names import Names
from ._plan import PlanHandle
from ._structs import OptimArgs, OptimDesc, OptimForm, OptimPlanInfo
from .errors import InvalidArgumentError, UnsupportedError

_FORMS = {"auto": OptimForm.AUTO, "rs_opt_ag": OptimForm.RS_OPT_AG, "ar_opt": OptimForm.AR_OPT}
OPTIMIZERS = Names("loom_optim", "loom.optim optimizer", "loom::optimizer_step", "optimizer")  # by .name


class _OptimPlan(PlanHandle):
    def __init__(self, comm, make, desc):
        self.comm = comm
        self._plan = None
        self.info = self._create(make, desc, "loom_optim_plan_info", OptimPlanInfo)

    def close(self):
        self._destroy_plan()


class _LoomOptimizer(torch.optim.Optimizer):
    """What Adam, AdamW and LAMB share (their plan kind in _kind)."""
    _kind = "adam"

    def __init__(self, params, comm, *, lr, betas, eps, weight_decay, decoupled, bias_correction=True,
                 average_grads=True, form="auto", use_nvlamb=False, chunk_elems=0):
        fn = f"loom.optim.{type(self).__name__}"
        self._fn = fn
        lr = lr if isinstance(lr, torch.Tensor) else float(lr)  # a device tensor: changed without recompiling
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=float(eps),
                                      weight_decay=float(weight_decay)))
        if not isinstance(form, str) or form.lower() not in _FORMS:
            raise InvalidArgumentError(f"{fn}: form={form!r}; expected one of {sorted(_FORMS)}")
        if not all(hasattr(comm, a) for a in ("handle", "device", "size", "empty")):
            raise InvalidArgumentError(f"{fn}: comm={comm!r} is not a loom.Comm")
        self.comm = comm
        self._params = [p for g in self.param_groups for p in g["params"]]
        self._check_params(fn)
        g0 = self.param_groups[0]
        for gi, g in enumerate(self.param_groups[1:], 1):
            for key in ("lr", "betas", "eps"):
                if g[key] != g0[key]:
                    raise InvalidArgumentError(f"{fn}: param group {gi} has {key}="
                                               f"{g[key]!r}, group 0 {g0[key]!r}: loom's plan takes one {key} "
                                               f"(weight_decay may differ per group)")
        self._flatten(comm)
        self._desc_arrays = self._describe(g0, decoupled, bias_correction, average_grads, form, use_nvlamb,
                                           chunk_elems)
        torch.cuda.current_stream(comm.device).synchronize()  # the plan reads the master weights now
        self._plan = _OptimPlan(comm, f"loom_plan_{self._kind}", self._desc_arrays[0])
        dev = f"cuda:{comm.device}"
        self._lr, self._scale, self._found = (torch.empty(1, dtype=torch.float32, device=dev) for _ in range(3))
        self._args = OptimArgs(lr=self._lr.data_ptr())
        self._found_inf_agreed = False  # set by loom.optim.GradScaler, whose found_inf the ranks agree on
        self.name = OPTIMIZERS.add(self)

    # ---- construction ---------------------------------------------------------

    def _check_params(self, fn):
        if not self._params:
            raise InvalidArgumentError(f"{fn}: no parameters")
        seen = set()
        dtype = self._params[0].dtype
        for i, p in enumerate(self._params):
            if id(p) in seen:
                raise InvalidArgumentError(f"{fn}: parameter {i} appears twice")
            seen.add(id(p))
            if p.device.type != "cuda" or p.device.index != self.comm.device:
                raise InvalidArgumentError(f"{fn}: parameter {i} is on {p.device}; expected cuda:{self.comm.device} "
                                           f"(the comm's GPU)")
            if p.dtype != dtype:
                raise InvalidArgumentError(f"{fn}: parameter {i} has dtype {p.dtype}, parameter 0 {dtype}: one "
                                           f"dtype for all")
        loom_dtype(dtype, fn, "the parameters' dtype")
        self._dtype = dtype

    def _flatten(self, comm):
        """Moves the parameters into one symmetric buffer and points their
        .grad at views of a second (collective: comm.empty)."""
        self._offsets, total = [], 0
        for p in self._params:
            self._offsets.append(total)
            total += p.numel()
        self._param_buf = comm.empty((total,), self._dtype)
        self._grad_buf = comm.zeros((total,), self._dtype)
        self._grad_views = []
        with torch.no_grad():
            for p, off in zip(self._params, self._offsets):
                n = p.numel()
                self._param_buf[off:off + n].copy_(p.reshape(-1))
                g = p.grad
                p.data = self._param_buf[off:off + n].view(p.shape)
                view = self._grad_buf[off:off + n].view(p.shape)
                if g is not None:
                    view.copy_(g)
                p.grad = view
                self._grad_views.append(view)

    def _describe(self, g0, decoupled, bias_correction, average_grads, form, use_nvlamb, chunk_elems):
        T = len(self._params)
        params = (ctypes.c_void_p * T)(*[p.data_ptr() for p in self._params])
        grads = (ctypes.c_void_p * T)(*[v.data_ptr() for v in self._grad_views])
        numels = (ctypes.c_int64 * T)(*[p.numel() for p in self._params])
        wds = (ctypes.c_float * T)(*[g["weight_decay"] for g in self.param_groups for _ in g["params"]])
        dt = int(loom_dtype(self._dtype, self._fn, "dtype"))
        desc = OptimDesc(world_size=self.comm.size, num_tensors=T, params=params, grads=grads, numels=numels,
                         param_type=dt, grad_type=dt, form=int(_FORMS[form.lower()]), lr=float(g0["lr"]),
                         beta1=g0["betas"][0], beta2=g0["betas"][1], eps=g0["eps"], weight_decay=0.0,
                         weight_decays=wds, decoupled_weight_decay=int(bool(decoupled)),
                         bias_correction=int(bool(bias_correction)), average_grads=int(bool(average_grads)),
                         use_nvlamb=int(bool(use_nvlamb)), chunk_elems=int(chunk_elems))
        return desc, params, grads, numels, wds  # the arrays live as long as the optimizer

    # ---- steps ----------------------------------------------------------------

    def _gather_grads(self):
        """Every parameter's gradient in the symmetric buffer (a missing one:
        zero; one something replaced: copied in). By identity, which
        torch.compile traces: autograd accumulates into the .grad it finds."""
        with torch.no_grad():
            for p, view in zip(self._params, self._grad_views):
                g = p.grad
                if g is None:
                    view.zero_()
                elif g is not view:
                    view.copy_(g)
                else:
                    continue
                p.grad = view

    _step_supports_amp_scaling = True  # GradScaler hands step() grad_scale and found_inf (loom.optim.GradScaler)

    @torch.no_grad()
    def step(self, closure=None):
        """One step over every parameter (collective): torch.ops.loom.optimizer_step,
        so torch.compile traces it and CUDA graphs capture it. lr may be a
        float or a device tensor (no recompilation when it changes). Under
        loom.optim.GradScaler, the gradients are divided by its scale inside
        the step and a step with an inf or NaN gradient on any rank is
        skipped on every rank. Returns closure()'s loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        lr = self.param_groups[0]["lr"]
        for g in self.param_groups[1:]:
            if g["lr"] is not lr and g["lr"] != lr:
                raise InvalidArgumentError(f"{self._fn}: the param groups' lr differ "
                                           f"({[g['lr'] for g in self.param_groups]}): loom's plan takes one lr")
        self._gather_grads()
        if isinstance(lr, torch.Tensor):
            self._lr.copy_(lr.reshape(1))
        else:
            self._lr.fill_(float(lr))
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)  # GradScaler's
        if found_inf is not None and not self._found_inf_agreed:
            raise UnsupportedError(f"{self._fn}: a GradScaler's found_inf is this rank's alone (loom reduces the "
                                   f"gradients inside the step, after the scaler checks them): use "
                                   f"loom.optim.GradScaler, which makes the ranks agree")
        torch.ops.loom.optimizer_step(self._param_buf, self._grad_buf, self._lr, grad_scale, found_inf,
                                      self.comm.name, optimizer=self.name)
        return loss

    def run_step(self, params, grads, lr, grad_scale=None, found_inf=None):
        """What torch.ops.loom.optimizer_step runs: the plan's step on torch's
        current stream, reading lr [1], the loss scale the gradients are
        divided by and found_inf (nonzero: skip the step) on the device."""
        if params.data_ptr() != self._param_buf.data_ptr() or grads.data_ptr() != self._grad_buf.data_ptr():
            raise InvalidArgumentError(f"{self._fn}: loom::optimizer_step takes this optimizer's own flat buffers "
                                       f"(call optimizer.step())")
        if lr.data_ptr() != self._lr.data_ptr():
            self._lr.copy_(lr.reshape(1))
        for t, mine, field in ((grad_scale, self._scale, "grad_scale"), (found_inf, self._found, "found_inf")):
            if t is not None:
                mine.copy_(t.reshape(1))
            setattr(self._args, field, mine.data_ptr() if t is not None else None)
        _lib.call(f"loom_{self._kind}_step", ctypes.c_void_p(self._plan.handle), ctypes.byref(self._args),
                  _torch.current_stream(self.comm.device))

    def zero_grad(self, set_to_none=True):
        """Zeroes the gradients in place (they stay in loom's symmetric
        buffer; set_to_none is accepted and ignored)."""
        self._grad_buf.zero_()
        for p, view in zip(self._params, self._grad_views):
            p.grad = view

    # ---- checkpoints ----------------------------------------------------------

    def _state_arrays(self):
        info, dev = self._plan.info, self.comm.device
        n = info["state_elems"]
        arrays = {"exp_avg": info["exp_avg"], "exp_avg_sq": info["exp_avg_sq"], "master": info["master"]}
        return {k: _torch.peer_tensor(ptr, (n,), (1,), torch.float32, dev) for k, ptr in arrays.items() if ptr}

    def _slices(self):
        """(lo, hi, state offset) of each parameter on this rank."""
        out = []
        for t in range(len(self._params)):
            lo, hi, off = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
            _lib.call("loom_optim_tensor_state", ctypes.c_void_p(self._plan.handle), t, ctypes.byref(lo),
                      ctypes.byref(hi), ctypes.byref(off))
            out.append((lo.value, hi.value, off.value))
        return out

    def _step_count(self):
        s = _torch.peer_tensor(self._plan.info["step"], (1,), (1,), torch.int32, self.comm.device)
        return int(s.item())

    def state_dict(self):
        """torch's form (param_groups, state per parameter index) with this
        rank's shard of the state: slice (lo, hi), exp_avg, exp_avg_sq,
        master (fp32 copies on this GPU) and step; plus the world size and
        rank it belongs to."""
        sd = super().state_dict()
        arrays = self._state_arrays()
        step = self._step_count()
        state = {}
        for i, (lo, hi, off) in enumerate(self._slices()):
            st = {"step": torch.tensor(float(step)), "slice": (lo, hi)}
            for k, a in arrays.items():
                st[k] = a[off:off + (hi - lo)].clone()
            state[i] = st
        sd["state"] = state
        sd["loom"] = {"world_size": self.comm.size, "rank": self.comm.rank, "kind": self._kind}
        return sd

    def load_state_dict(self, state_dict):
        """Loads what state_dict() of an optimizer over the same shapes on
        the same rank of the same number of ranks saved."""
        fn = self._fn + ".load_state_dict"
        meta = state_dict.get("loom")
        here = {"world_size": self.comm.size, "rank": self.comm.rank, "kind": self._kind}
        if meta != here:
            raise InvalidArgumentError(f"{fn}: the state was saved by {meta}; this optimizer is {here}")
        arrays = self._state_arrays()
        slices = self._slices()
        state = state_dict["state"]
        if len(state) != len(slices):
            raise InvalidArgumentError(f"{fn}: the state has {len(state)} parameters; this optimizer {len(slices)}")
        step = None
        with torch.no_grad():
            for i, (lo, hi, off) in enumerate(slices):
                st = state[i]
                if tuple(st["slice"]) != (lo, hi):
                    raise InvalidArgumentError(f"{fn}: parameter {i}'s saved slice is {tuple(st['slice'])}; this "
                                               f"rank's is {(lo, hi)} (other shapes or world size)")
                for k, a in arrays.items():
                    a[off:off + (hi - lo)].copy_(st[k])
                step = int(float(st["step"]))
        groups = state_dict["param_groups"]
        for g, saved in zip(self.param_groups, groups):
            for key in ("lr", "betas", "eps", "weight_decay"):
                if key in saved:
                    g[key] = saved[key]
        if step is not None:
            dev = self.comm.device
            _lib.call("loom_optim_set_step", ctypes.c_void_p(self._plan.handle), ctypes.c_int32(step),
                      _torch.current_stream(dev))

    def close(self):
        """Collective: destroys the plan (the parameters stay in the comm's
        symmetric memory until comm.close() / free_unused())."""
        OPTIMIZERS.drop(self.name)
        self._plan.close()

    def __repr__(self):
        g = self.param_groups[0]
        return (f"loom.optim.{type(self).__name__}({len(self._params)} tensors, {dtype_name(self._dtype)}, "
                f"lr={g['lr']}, betas={g['betas']}, eps={g['eps']}, W={self.comm.size})")


class Adam(_LoomOptimizer):
    """torch.optim.Adam (L2 weight decay: g += wd p), data parallel."""
    _kind = "adam"

    def __init__(self, params, comm, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **options):
        super().__init__(params, comm, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=False,
                         **options)


class AdamW(_LoomOptimizer):
    """torch.optim.AdamW (decoupled weight decay: p -= lr wd p), data parallel."""
    _kind = "adam"

    def __init__(self, params, comm, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, **options):
        super().__init__(params, comm, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=True,
                         **options)


class LAMB(_LoomOptimizer):
    """LAMB (You et al.; NVIDIA's FusedLAMB with adam_w_mode by default:
    decoupled=False for L2), data parallel."""
    _kind = "lamb"

    def __init__(self, params, comm, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=1e-2, decoupled=True,
                 use_nvlamb=False, **options):
        super().__init__(params, comm, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=decoupled,
                         use_nvlamb=use_nvlamb, **options)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler for loom.optim's optimizers: loom sums the
    gradients over the ranks inside the step, after the scaler has checked
    each rank's own for inf and NaN, so this scaler makes the ranks agree
    (a max over the optimizer's comm of its found_inf, on the device)
    wherever torch's checks them: the step is skipped, and the scale backs
    off, on every rank alike. Use it as torch's: scaler.scale(loss).backward();
    scaler.step(opt); scaler.update(). Collective in step() and unscale_().
    Other optimizers pass through unchanged."""

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        per_device = super()._unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16)
        comm = getattr(optimizer, "comm", None)
        if isinstance(optimizer, _LoomOptimizer) and comm is not None:
            for t in per_device.values():
                comm._all_reduce_(t, "max", "loom.optim.GradScaler found_inf")
            optimizer._found_inf_agreed = True
        return per_device
