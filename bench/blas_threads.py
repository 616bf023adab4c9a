"""OpenBLAS's own thread pool, set to a PyTorch peer's thread count.

Debian's PyTorch 1.13 runs its Linear layers' products in OpenBLAS
(libopenblas0-pthread), and OpenBLAS keeps a thread pool of its own, one
thread per core, that `torch.set_num_threads` does not reach: after
`torch.set_num_threads(1)`, `openblas_get_num_threads()` still says 2 on a
2-core machine (checked 2026-12-05). Ranks that share the cores then run
two BLAS threads each. On 2 emulated hosts x 1 rank of
bench/torch_backend_bench.sh that took gloo's fp16 row from 127 to 108
img/s, and bigbatch's PowerSGD row from 265 to 216 (single runs).

bigbatch's own ranks get `OPENBLAS_NUM_THREADS=1` from its launcher
(apps/process_env.cpp). A peer that claims "1 thread per rank" must have
the same, so each peer script calls `pin_blas_threads` next to
`torch.set_num_threads`. OpenBLAS reads its environment variable only when
it loads, so this sets the pool through OpenBLAS's own call,
`openblas_set_num_threads`, on every OpenBLAS this process has loaded
(a numpy wheel may bring a second one, with 64-bit-index names).
"""
import ctypes

# (setter, getter): the LP64 names and the ILP64 ones of a `64_` build.
_NAMES = [("openblas_set_num_threads", "openblas_get_num_threads"),
          ("openblas_set_num_threads64_", "openblas_get_num_threads64_")]


def _loaded_openblas():
    """The paths of the OpenBLAS libraries mapped into this process."""
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.rstrip("\n").split(None, 5)  # the path may hold spaces
            if len(fields) == 6 and "libopenblas" in fields[5]:
                paths.add(fields[5].removesuffix(" (deleted)"))
    return sorted(paths)


def pin_blas_threads(threads):
    """Sets the pool of every OpenBLAS this process has loaded to `threads`.

    Returns {path: pool size before} for each library set; empty where no
    OpenBLAS is loaded (a PyTorch built on MKL: `torch.set_num_threads`
    already covers it).
    """
    before = {}
    for path in _loaded_openblas():
        try:
            blas = ctypes.CDLL(path)
        except OSError:
            continue
        for setter, getter in _NAMES:
            if hasattr(blas, setter) and hasattr(blas, getter):
                before[path] = getattr(blas, getter)()
                getattr(blas, setter)(int(threads))
                break
    return before
