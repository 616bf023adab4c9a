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
`openblas_set_num_threads`, on the library this process has loaded.
"""
import ctypes


def pin_blas_threads(threads):
    """Sets the pool of the OpenBLAS this process has loaded to `threads`.

    Returns the pool's size before, or None where no OpenBLAS is loaded
    (a PyTorch built on MKL: `torch.set_num_threads` already covers it).
    """
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps if "libopenblas" in line})
    if not paths:
        return None
    blas = ctypes.CDLL(paths[0])
    before = blas.openblas_get_num_threads()
    blas.openblas_set_num_threads(int(threads))
    return before
