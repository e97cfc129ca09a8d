"""distributed.py - loom's collectives where torch.distributed users look
for them: all_reduce, reduce_scatter and all_gather returning new tensors,
with the epilogue fused into the reduction (bias, scale, activation,
dropout, residual, then RMSNorm or LayerNorm per row), differentiable and
traceable by torch.compile. They are loom.functional's (library.py says how
they differentiate):

    import loom.distributed as ldist
    h = ldist.all_reduce(partial, comm, bias=b, residual=x, norm="rms", norm_weight=g)   # one kernel
    s = ldist.reduce_scatter(t, comm)      # this rank's rows; ldist.all_gather(s, comm) puts them back
"""
from .functional import all_gather, all_reduce, reduce_scatter  # noqa: F401

__all__ = ["all_reduce", "reduce_scatter", "all_gather"]
