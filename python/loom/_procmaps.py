"""_procmaps.py - which shared-library files this process has mapped.

Read from /proc/self/maps (Linux): the answer the dynamic loader gives, not
a guess from search paths. Used to tell which libnccl.so files are loaded
and by whom before and after libloom is.
"""
import os


def mapped_files(name_part):
    """Paths of mapped files whose base name contains `name_part`, in the
    order they first appear (lowest address first), each once."""
    seen, out = set(), []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                if path.endswith(" (deleted)"):
                    path = path[: -len(" (deleted)")]
                if not path.startswith("/") or name_part not in os.path.basename(path):
                    continue
                if path not in seen:
                    seen.add(path)
                    out.append(path)
    except OSError:
        pass
    return out


def distinct_files(paths):
    """`paths` with aliases of one file (symlinks, hard links) dropped."""
    out, keys = [], set()
    for p in paths:
        try:
            st = os.stat(p)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = ("?", p)
        if key not in keys:
            keys.add(key)
            out.append(p)
    return out


def same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
