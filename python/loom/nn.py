"""nn.py - loom ops as autograd functions and torch modules.

ShardedEmbeddingBag: a DLRM's embedding tables sharded table-wise over the
ranks (model parallel), pooled and handed to every rank as its share of the
batch for all tables (data parallel) by loom's fused embedding-bag +
All-to-All; backward sends the output gradient back and accumulates this
rank's table gradients (loom_embedding_a2a_backward), so the module trains
with any torch optimizer.

The forward output is the plan's symmetric output buffer, not a copy. The
autograd function receives it as an input, writes it and marks it dirty, so
its version counter goes up with every forward: a backward that needs an
earlier forward's output after a later forward overwrote it raises
"modified by an inplace operation" instead of using the wrong values
(run forward, backward, forward, backward; or clone() the output).

importing this module imports torch.
"""
import torch

from . import ops
from ._checks import embedding_shapes
from .errors import InvalidArgumentError


class EmbeddingA2AFunction(torch.autograd.Function):
    """out = embedding_a2a(weight, indices, offsets) into `out` (the plan's
    symmetric buffer); backward: d weight = embedding_a2a_backward(d out)."""

    @staticmethod
    def forward(ctx, plan, out, weight, indices, offsets, per_sample_weights):
        plan.forward(weight, indices, offsets, per_sample_weights, out=out)
        ctx.mark_dirty(out)
        ctx.plan = plan
        ctx.save_for_backward(indices, offsets, per_sample_weights)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        indices, offsets, per_sample_weights = ctx.saved_tensors
        grad_weight = None
        if ctx.needs_input_grad[2]:
            grad_weight = ctx.plan.backward(grad_out.contiguous(), indices, offsets, per_sample_weights)
        return None, None, grad_weight, None, None, None


class ShardedEmbeddingBag(torch.nn.Module):
    """This rank's share of table-wise sharded embedding bags, exchanged with
    loom. Collective to build (same arguments on every rank).

    comm: loom.Comm; tables_per_rank [W]; rows: rows of every table,
    rank-major; dim D; global_batch B (a multiple of W). weight: this rank's
    tables stacked, [sum of its rows, D] (initialised N(0, 1) like
    torch.nn.EmbeddingBag); table t of this rank starts at row
    table_offsets[t]. forward(indices, offsets, per_sample_weights=None)
    takes this rank's tables' bags over the global batch (offsets [T*B + 1],
    table-major, PyTorch's CSR) and returns [B / W, sum(tables_per_rank) * D].
    """

    def __init__(self, comm, tables_per_rank, rows, dim, global_batch, *, pooling="sum",
                 per_sample_weights=False, dtype=torch.float32, out_dtype=None, **plan_options):
        super().__init__()
        T, _, _, table_rows = embedding_shapes("loom.nn.ShardedEmbeddingBag", tables_per_rank, rows, dim,
                                               int(global_batch), comm.rank)
        self.plan = ops.EmbeddingA2A(comm, tables_per_rank, rows, dim, global_batch, pooling=pooling,
                                     per_sample_weights=per_sample_weights, table_dtype=dtype,
                                     out_dtype=out_dtype if out_dtype is not None else dtype, **plan_options)
        first = sum(int(t) for t in tables_per_rank[:comm.rank])
        local_rows = [int(r) for r in rows[first:first + T]]
        self.table_offsets = [sum(local_rows[:t]) for t in range(T)]
        self.weight = torch.nn.Parameter(torch.empty(table_rows, dim, dtype=dtype, device=f"cuda:{comm.device}"))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.normal_(0.0, 1.0)

    def forward(self, indices, offsets, per_sample_weights=None):
        if per_sample_weights is not None and per_sample_weights.requires_grad:
            raise InvalidArgumentError("loom.nn.ShardedEmbeddingBag: per_sample_weights requires grad; loom "
                                       "computes no gradient for them (pass per_sample_weights.detach())")
        out = self.plan.output_buffer().detach()
        return EmbeddingA2AFunction.apply(self.plan, out, self.weight, indices, offsets, per_sample_weights)

    def extra_repr(self):
        p = self.plan
        return (f"tables_per_rank={list(p.tables_per_rank)}, dim={p.dim}, global_batch={p.global_batch}, "
                f"pooling={p.pooling!r}, path={p.info['path']}")
