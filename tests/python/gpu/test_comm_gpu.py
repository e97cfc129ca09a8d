"""loom.Comm on 2 ranks: bootstrap from torch.distributed, symmetric memory
as torch tensors (peers' stores seen as plain tensors), freeing, the
device-side timeout as an exception."""
import warnings

import pytest
import torch
import torch.distributed as dist
from dist_harness import run_ranks

import loom

pytestmark = pytest.mark.two_gpus


def _bootstrap(rank, world):
    rep = loom.nccl_report()
    with loom.Comm.from_process_group() as comm:
        assert (comm.rank, comm.size, comm.device) == (rank, world, rank)
        info = comm.info
        assert info["rank"] == rank and info["size"] == world and info["device"] == rank
        assert info["lsa_size"] == world, "both GPUs should be load/store reachable (NVLink)"
        assert info["workspace_free"] <= info["workspace_bytes"]
        assert comm.nccl_comm
    return rep


def test_comm_from_process_group():
    reps = run_ranks(_bootstrap, 2)
    print("NCCL per rank:", reps)
    assert reps[0]["loom_loaded"] == reps[1]["loom_loaded"]


def _symmetric(rank, world):
    with loom.Comm.from_process_group() as comm:
        for dtype in (torch.float32, torch.bfloat16):
            _symmetric_dtype(comm, rank, dtype)


def _symmetric_dtype(comm, rank, dtype):
    peer = 1 - rank
    buf = comm.empty((3, 1000), dtype)
    assert buf.shape == (3, 1000) and buf.dtype == dtype and buf.device == torch.device("cuda", rank)
    assert buf.is_contiguous() and comm.owns(buf) and comm.owns(buf[1])
    buf.fill_(rank + 1)
    torch.cuda.synchronize()
    dist.barrier()
    pv = comm.peer_tensor(buf, peer)
    assert pv.device == torch.device("cuda", rank) and pv.shape == buf.shape and pv.dtype == dtype
    assert (pv == peer + 1).all(), "the peer's buffer read through loom_peer_ptr"
    pv[1, :10] = 50 + rank  # store into the peer's memory
    row = comm.peer_tensor(buf[2], peer)  # a view inside the buffer maps too
    row[-5:] = 70 + rank
    torch.cuda.synchronize()
    dist.barrier()
    assert (buf[1, :10] == 50 + peer).all() and (buf[2, -5:] == 70 + peer).all()
    assert (buf[0] == rank + 1).all() and (buf[1, 10:] == rank + 1).all()
    assert comm.peer_tensor(buf, rank) is buf
    with pytest.raises(loom.InvalidArgumentError, match="peer=2 must be in"):
        comm.peer_tensor(buf, 2)
    with pytest.raises(loom.InvalidArgumentError, match="not symmetric memory of this comm"):
        comm.peer_tensor(torch.zeros(4, device="cuda"), peer)
    z = comm.zeros((17,), torch.int64)
    assert (z == 0).all()
    comm.free(z)
    comm.free(buf)
    with pytest.raises(loom.InvalidArgumentError, match="not symmetric memory of this comm"):
        comm.free(buf)


def test_symmetric_memory_is_a_torch_tensor_peers_store_into():
    """float32 and bfloat16 (made as int16 and viewed)."""
    run_ranks(_symmetric, 2)


def _free_unused(rank, world):
    with loom.Comm.from_process_group() as comm:
        free0 = len(comm._allocs)
        a = comm.empty((1 << 20,), torch.float32)
        b = comm.empty((1 << 20,), torch.float32)
        view = b[10:20]
        del b  # b's storage lives on through the view
        if rank == 0:
            del a  # rank 1 still holds a: nobody frees it
        assert comm.free_unused() == 0
        del view
        assert comm.free_unused() == 1  # b: unused everywhere
        if rank == 1:
            del a
        assert comm.free_unused() == 1  # a
        assert len(comm._allocs) == free0
        t = comm.empty((8,), torch.float32)
        with pytest.raises(loom.InvalidArgumentError, match="starts inside a buffer"):
            comm.free(t[2:])
        comm.free(t)


def test_free_unused_frees_what_no_rank_uses():
    run_ranks(_free_unused, 2)


def _torch_comm(rank, world):
    rep = loom.nccl_report()
    if rep["same_library"]:
        with loom.Comm.from_process_group(use_torch_comm=True) as comm:
            buf = comm.empty((64,), torch.float32)
            buf.fill_(rank)
            torch.cuda.synchronize()
            dist.barrier()
            assert (comm.peer_tensor(buf, 1 - rank) == 1 - rank).all()
            comm.free(buf)
        # the same comm by its address, as a C++ extension would hand it over
        backend = dist.group.WORLD._get_backend(torch.device("cuda", rank))
        address = (getattr(backend, "_comm_ptr", None) or backend.comm_ptr)()
        with loom.Comm.from_nccl_comm(address) as comm:
            assert comm.nccl_comm == address and (comm.rank, comm.size) == (rank, world)
        with loom.Comm.from_process_group() as comm:  # the default takes the group's comm
            assert comm.nccl_comm == address and not comm._owns_nccl
        x = torch.ones(4, device="cuda")
        dist.all_reduce(x)  # torch's comm still works
        assert x[0].item() == world
        return "shared"
    with pytest.raises(loom.NcclMismatchError, match="use_torch_comm=True: PyTorch's NCCL calls reach"):
        loom.Comm.from_process_group(use_torch_comm=True)
    import loom.comm as lc
    lc._SAID_SECOND_COMM.clear()
    with pytest.warns(UserWarning, match="loom makes a second NCCL communicator: rank 0 cannot run on the "
                                         "process group's: PyTorch's NCCL calls reach"):
        with loom.Comm.from_process_group() as comm:  # the default: a second comm, said once
            assert comm._owns_nccl
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loom.Comm.from_process_group().close()  # not said again
    return "refused, second comm said once"


def test_loom_on_the_process_group_own_nccl_comm():
    """Shares torch's ncclComm_t when both use one NCCL file (by default too),
    else use_torch_comm=True refuses with NcclMismatchError and the default
    makes a second comm, saying why once (no crash either way)."""
    print(run_ranks(_torch_comm, 2))


def _timeout(rank, world):
    from emb_ref import local_inputs, make_problem
    p = make_problem(5, [1, 1], [64, 64], 32, 64)
    x = local_inputs(p, rank, f"cuda:{rank}")
    comm = loom.Comm.from_process_group(timeout_ms=1500)
    plan = loom.EmbeddingA2A(comm, [1, 1], [64, 64], 32, 64)
    out = plan.output_buffer()
    dist.barrier()
    if rank == 0:  # rank 1 never calls: rank 0's kernel gives up after 1.5 s
        plan(x["tables"], x["indices"], x["offsets"])
        torch.cuda.synchronize()
        with pytest.raises(loom.WaitTimeoutError, match="wait expired") as ei:
            comm.check()
        assert ei.value.code == loom.errors.ERR_TIMEOUT
        with pytest.raises(loom.WaitTimeoutError):  # the comm stays in error
            plan(x["tables"], x["indices"], x["offsets"])
    dist.barrier()
    del out
    plan.close()
    comm.close()


def test_a_peer_that_never_calls_is_a_timeout_exception():
    run_ranks(_timeout, 2)
