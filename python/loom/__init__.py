"""loom - the Python binding of loom (communication fused into the kernels of
multi-GPU deep-learning layers), for PyTorch users.

A thin layer over libloom's C API through ctypes: nothing to compile. The
library is found in the build tree, an installed prefix, or $LOOM_LIBRARY
(_lib.py); which NCCL it runs on is checked against the one it was built
for (nccl.py).

    import torch, torch.distributed as dist, loom
    dist.init_process_group("nccl"); torch.cuda.set_device(local_rank)
    comm = loom.Comm.from_process_group()              # collective
    y = loom.gemm(a, b)                                 # a @ b on torch's current stream
    emb = loom.nn.ShardedEmbeddingBag(comm, tables_per_rank, rows, dim, global_batch)
    out = emb(indices, offsets)                         # [B/W, T_total*D]; out.backward(...) works
    y = loom.ag_gemm(comm, x_shard, w)                  # AllGather(x shards) @ w^T, fused (column-parallel)
    z = loom.gemm_rs(comm, h, w2)                       # this rank's rows of sum over ranks of h @ w2^T
    fc1 = loom.nn.ColumnParallelLinear(comm, 1024, 4096)  # sequence-parallel layers with autograd
    import loom.functional as LF                        # torch.ops.loom.*: torch.compile, autograd, CUDA graphs
    h = LF.ag_gemm(x_shard, w, comm)                    # [s / W, ..., k] -> [s, ..., n]
    opt = loom.optim.AdamW(model.parameters(), comm)    # data parallel: the gradients' all-reduce in the step
    moe = loom.MoE(comm, hidden, experts, topk, max_tokens, ffn=ffn)  # expert parallelism (forward)
    out = moe.mlp(x, ids, weights, gate_up, down)       # dispatch, experts' MLP, combine

Errors are exceptions carrying loom's result code and message (errors.py).
`import loom` loads neither libloom nor torch; the first call does.
"""
from . import errors
from ._lib import BINDING_VERSION, library_path, version
from ._structs import Activation, DType, EmbeddingPath, Layout, Pooling, Result, TpTransfer
from .comm import Comm
from .errors import (CudaError, InternalError, InvalidArgumentError, LibraryNotFoundError, LibraryVersionError,
                     LoomError, NcclError, NcclMismatchError, OutOfMemoryError, UnsupportedError, WaitTimeoutError)
from .moe import MoE
from .ops import (EmbeddingA2A, embedding_a2a, embedding_a2a_backward, embedding_plan, gemm, gemm_grouped,
                  gemm_tune, linear)
from .tp import TpPlan, ag_gemm, ag_gemm_plan, gemm_ar, gemm_ar_plan, gemm_rs, gemm_rs_plan, shard_range

__version__ = ".".join(map(str, BINDING_VERSION))


def nccl_report():
    """Which NCCL libloom and PyTorch use, as a dict (loom.nccl.report)."""
    from . import nccl
    return nccl.report()


def __getattr__(name):
    if name in ("nn", "functional", "library", "coll", "optim", "distributed"):  # most import torch: only when asked
        import importlib
        return importlib.import_module("." + name, __name__)
    if name == "parallelize":  # imports torch
        from .parallel import parallelize
        return parallelize
    raise AttributeError(f"module 'loom' has no attribute {name!r}")


__all__ = ["Comm", "MoE", "gemm", "gemm_grouped", "gemm_tune", "linear", "EmbeddingA2A", "embedding_a2a", "embedding_a2a_backward",
           "embedding_plan", "ag_gemm", "gemm_rs", "gemm_ar", "ag_gemm_plan", "gemm_rs_plan", "gemm_ar_plan", "TpPlan",
           "shard_range", "parallelize",
           "version", "library_path", "nccl_report", "errors", "LoomError",
           "InvalidArgumentError", "UnsupportedError", "NcclMismatchError", "CudaError", "NcclError",
           "OutOfMemoryError", "WaitTimeoutError", "InternalError", "LibraryNotFoundError", "LibraryVersionError",
           "DType", "Layout", "Pooling", "EmbeddingPath", "Activation", "Result", "TpTransfer", "__version__"]
