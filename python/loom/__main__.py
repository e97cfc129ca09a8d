"""python -m loom - which libloom and which NCCL this Python would use.

Prints the binding's and libloom's versions, the libloom file, the GPUs
torch sees (name, compute capability, SMs), and what
loom.nccl_report() finds (the NCCL libloom's calls reach, PyTorch's if
torch is importable and --torch is given, and whether they match), then the
verdict of the check a communicator makes. Exit status 1 on a mismatch.

    python3 -m loom [--torch]     (--torch: import torch first, as a training script does)
"""
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


def main(argv):
    if "--torch" in argv:
        import torch  # noqa: F401  (its NCCL is loaded first, as in a training script)
    import loom
    from loom import nccl
    print(f"loom binding {loom.__version__}; libloom {'.'.join(map(str, loom.version()))} at {loom.library_path()}")
    for line in gpus():
        print(line)
    print(json.dumps(loom.nccl_report(), indent=1))
    try:
        nccl.check()
        print("NCCL check: ok")
        return 0
    except loom.NcclMismatchError as e:
        print(f"NCCL check: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
