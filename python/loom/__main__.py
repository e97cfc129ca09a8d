"""python -m loom - which libloom and which NCCL this Python would use.

Prints the binding's and libloom's versions, the libloom file, the GPUs
torch sees (name, compute capability, SMs), and what
loom.nccl_report() finds (the NCCL libloom's calls reach, PyTorch's if
torch is importable and --torch is given, and whether they match), then the
verdict of the check a communicator makes, which communicator
Comm.from_process_group would run on, whether torch has loom's registered
ops, and, with a GPU, symmetric memory tried for real: a one-rank loom comm
on GPU 0 allocates a symmetric buffer, writes and reads it. Exit status 1
on a mismatch or a failed symmetric-memory check.

    python3 -m loom [--torch]     (--torch: import torch first, as a training script does)

Without torch the report still runs (loom itself needs no torch) and says
so; --torch then exits 1 after it. Without a usable libloom it says where
it looked and exits 1: never a traceback.
"""
import argparse
import json
import sys


def gpus():
    """The GPUs torch sees, as lines ("" without torch: loom itself needs none to load)."""
    try:
        import torch
    except ImportError:
        return ["GPUs: torch is not installed (loom's ops take torch tensors; the C library does not need it)"]
    n = torch.cuda.device_count()
    lines = [f"GPUs: {n} visible to torch {torch.__version__}"]
    for i in range(n):
        p = torch.cuda.get_device_properties(i)
        ok = "" if (p.major, p.minor) >= (8, 0) else "  (loom needs compute capability >= 8.0)"
        lines.append(f"  {i}: {p.name}, compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs{ok}")
    return lines


def parse(argv):
    ap = argparse.ArgumentParser(
        prog="python -m loom",
        description="Which libloom and which NCCL this Python would use: versions, the libloom file, the GPUs, "
                    "the NCCL check a communicator makes, the registered torch ops, and symmetric memory tried "
                    "on GPU 0. Exit status 1 on a mismatch, a failed check or a missing library.")
    ap.add_argument("--torch", action="store_true",
                    help="import torch first, as a training script does (its NCCL is loaded before libloom's); "
                         "needs PyTorch")
    return ap.parse_args(argv)


def main(argv):
    args = parse(argv)
    torch_missing = None
    if args.torch:
        from loom import _torch
        try:
            _torch.require("python -m loom --torch")  # its NCCL is loaded first, as in a training script
        except ImportError as e:
            torch_missing = str(e)
            print(f"torch: {torch_missing}; the report below runs without it")
    import loom
    try:
        ok = report(loom)
    except (loom.LoomError, loom.LibraryNotFoundError) as e:
        print(f"loom: {e}", file=sys.stderr)
        return 1
    return 0 if ok and not torch_missing else 1


def report(loom):
    """Prints the report; False on a mismatch or a failed check."""
    from loom import nccl
    print(f"loom binding {loom.__version__}; libloom {'.'.join(map(str, loom.version()))} at {loom.library_path()}")
    for line in gpus():
        print(line)
    print(json.dumps(loom.nccl_report(), indent=1))
    try:
        nccl.check()
        print("NCCL check: ok")
    except loom.NcclMismatchError as e:
        print(f"NCCL check: {e}")
        return False
    print("communicator: " + communicator(loom.nccl_report()))
    print("registered ops: " + registered_ops())
    ok, line = symmetric_memory()
    print("symmetric memory: " + line)
    return ok


def communicator(report):
    """Which NCCL comm Comm.from_process_group would run on."""
    if report["torch_path"] is None:
        return "(torch not imported: run with --torch to see whether loom can share PyTorch's comm)"
    if report["same_library"]:
        return ("the process group's own where its backend hands out its ncclComm_t (PyTorch and libloom call "
                "one NCCL library)")
    return (f"a second one made by loom (PyTorch's NCCL is {report['torch_path']}, libloom's "
            f"{report['loom_path']}; said once as a warning)")


def registered_ops():
    """torch.ops.loom.* as torch sees them, or why not."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed"
    try:
        from loom import library
    except Exception as e:  # an older torch: no torch.library.custom_op
        return f"unavailable ({type(e).__name__}: {e})"
    import torch
    names = [n for n in library.OPS if hasattr(torch.ops.loom, n)]
    return f"torch.ops.loom.{{{', '.join(names)}}} (torch {torch.__version__})"


def symmetric_memory():
    """(ok, line): a one-rank loom comm on GPU 0 allocates, writes and reads a symmetric buffer."""
    try:
        import torch
    except ImportError:
        return True, "not tried (torch is not installed)"
    if not torch.cuda.is_available():
        return True, "not tried (no GPU visible)"
    import loom
    from loom import nccl
    torch.cuda.set_device(0)
    address = None
    try:
        address = nccl.comm_init_rank(1, nccl.get_unique_id(), 0, 0, 60.0)
        with loom.Comm(address, timeout_s=60.0, owns_nccl=True, _checked=True) as comm:
            address = None  # the comm owns it now
            t = comm.empty((1024,), torch.float32)
            t.copy_(torch.arange(1024, dtype=torch.float32, device="cuda:0"))
            ok = bool((t.cpu() == torch.arange(1024, dtype=torch.float32)).all())
            comm.free(t)
        return ok, "ok (a one-rank comm on GPU 0: loom_malloc, write, read, loom_free)" if ok else \
            "FAILED: the buffer did not read back what was written"
    except Exception as e:
        if address:
            nccl.comm_abort(address)
        return False, f"FAILED: {type(e).__name__}: {e}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
