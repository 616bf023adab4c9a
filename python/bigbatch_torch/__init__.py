"""bigbatch's gradient exchange for PyTorch scripts.

``import bigbatch_torch`` registers the torch.distributed backend
"bigbatch": a script started with ``mpirun -np N python3 script.py`` or
``torchrun --nproc_per_node N script.py`` then uses bigbatch's communicator and collectives (its allreduce algorithms and
their online tuning, the shared-memory phase on a host, its timeouts and
heartbeat) through ``dist.init_process_group("bigbatch")`` — DDP, its comm
hooks and ordinary collectives alike — and bigbatch's own codecs as DDP
comm hooks (``bigbatch_torch.hooks``). Under mpirun the bytes move over
MPI; under torchrun (or any env:// start) over UCX (or Gloo's transport,
BIGBATCH_TRANSPORT=gloo), the ranks meeting through torch.distributed's
store. docs/TORCH_BACKEND.md has
the whole story.

Under mpirun the import also sets what ``init_process_group``'s default
``env://`` start reads, from MPI's launch: RANK, WORLD_SIZE, LOCAL_RANK
and LOCAL_WORLD_SIZE (where not set); and, where MASTER_ADDR is not set,
the rendezvous yields bigbatch's MPI rendezvous store instead of a TCP
store: the MPI launch has joined the ranks already.
"""
import atexit
import importlib
import os
import sys
import urllib.parse

import torch
import torch.distributed as dist

from ._version import __version__, torch_version as _BUILT_FOR


def _same_minor(a, b):
    return a.split("+")[0].split(".")[:2] == b.split("+")[0].split(".")[:2]


# A module built against one PyTorch's C++ API and imported under another
# aborts the interpreter in its first call (a C++ ABI mismatch): refuse it
# here, by name, before _C is loaded.
if not _same_minor(torch.__version__, _BUILT_FOR):
    raise ImportError(
        f"bigbatch_torch was built against PyTorch {_BUILT_FOR}, but this interpreter "
        f"({sys.executable}) imports PyTorch {torch.__version__}: rebuild it for this PyTorch "
        f"with `pip install --no-build-isolation <bigbatch>/python` in this environment "
        f"(docs/TORCH_BACKEND.md, \"Installing\")")

from . import _C  # noqa: E402  (after the check above)
from ._rendezvous import MpiRendezvousStore, launched_by_mpi  # noqa: E402

__all__ = ["hooks", "MpiRendezvousStore", "ProcessGroupBigbatch", "backend_of", "__version__"]

ProcessGroupBigbatch = _C.ProcessGroupBigbatch
_TORCH_MAJOR = int(torch.__version__.split(".")[0])


def _create(opts, pg_options=None):
    # c10d's extended creator API (1.13 and 2.x): besides the store, rank,
    # size and timeout, the group's members by their ranks in the default
    # group (empty for the default group), which an MPI launch needs to make
    # the group's MPI communicator among its members alone.
    return _C.create(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                     list(opts.global_ranks_in_group))


if _TORCH_MAJOR >= 2:
    # CUDA tensors reach the backend too, which refuses them naming the fix
    # ("nccl", or "cpu:bigbatch,cuda:nccl"), rather than PyTorch's "no backend".
    dist.Backend.register_backend("bigbatch", _create, extended_api=True,
                                  devices=["cpu", "cuda"])
else:
    dist.Backend.register_backend("bigbatch", _create, extended_api=True)


def backend_of(group=None):
    """The ProcessGroupBigbatch behind `group` (None: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if isinstance(pg, ProcessGroupBigbatch):
        return pg
    if hasattr(pg, "_get_backend"):  # PyTorch 2.x: a ProcessGroup over backends
        backend = pg._get_backend(torch.device("cpu"))
        # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the backend in a checker
        backend = getattr(backend, "wrapped_pg", backend)
        if isinstance(backend, ProcessGroupBigbatch):
            return backend
    raise RuntimeError(
        "this process group does not run the bigbatch backend: initialise it with "
        'dist.init_process_group("bigbatch") (after import bigbatch_torch)')


def _mpi_environment():
    """RANK and WORLD_SIZE (and LOCAL_*) from the MPI launch, where unset."""
    if not launched_by_mpi():
        return
    env = os.environ
    for ours, mpi in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                      ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
                      ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        if ours not in env and mpi in env:
            env[ours] = env[mpi]
    if "RANK" not in env or "WORLD_SIZE" not in env:
        # Another launcher (srun with PMIx, MPICH's hydra): ask MPI itself.
        rank, size = _C.mpi_rank_and_size()
        env.setdefault("RANK", str(rank))
        env.setdefault("WORLD_SIZE", str(size))


def _env_rendezvous_through_mpi():
    """init_process_group's env:// start, without MASTER_ADDR, under mpirun."""
    # The module (torch.distributed's own `rendezvous` name is its function).
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    handlers = getattr(rdzv, "_rendezvous_handlers", None)
    if handlers is None or "env" not in handlers:
        return  # another PyTorch layout: init_method="bigbatch://" still works
    original = handlers["env"]

    def env_or_mpi(url, timeout=None, **kwargs):
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
        if not launched_by_mpi() and "RANK" not in os.environ and "rank" not in query:
            raise ValueError(
                "torch.distributed's env:// start found no RANK: start the script with "
                "torchrun --nproc_per_node N SCRIPT or mpirun -np N python3 SCRIPT (or set "
                "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every rank)")
        if "MASTER_ADDR" in os.environ or not launched_by_mpi():
            if timeout is None:
                yield from original(url, **kwargs)
            else:
                yield from original(url, timeout=timeout, **kwargs)
            return
        yield from _mpi_rendezvous(url, timeout=timeout, **kwargs)

    handlers["env"] = env_or_mpi


_RENDEZVOUS_STORES = []


def _mpi_rendezvous(url, timeout=None, **kwargs):
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
    rank = int(query.get("rank", os.environ.get("RANK", -1)))
    size = int(query.get("world_size", os.environ.get("WORLD_SIZE", -1)))
    if rank < 0 or size < 1:
        raise RuntimeError(
            "bigbatch's MPI rendezvous: no rank and world size (RANK, WORLD_SIZE); start the "
            "script with mpirun -np N")
    store = MpiRendezvousStore(size)
    # Held here for the process's life: c10d keeps only the C++ side, and a
    # Python store whose Python object is gone answers new_group's barrier
    # (1.13) with "pure virtual function ::c10d::Store::add".
    _RENDEZVOUS_STORES.append(store)
    yield (store, rank, size)
    raise RuntimeError("bigbatch's MPI rendezvous cannot be used twice in one process")


def _end_a_failed_job():
    """At exit after a group failed: end the whole job (MPI_Abort under MPI;
    under torchrun this process exits and the agent ends the others) instead
    of finalizing, which would wait for peers that may be gone or stopped."""
    failure = _C.process_failure()
    if failure:
        print(f"bigbatch_torch: the process group failed ({failure}); ending every rank "
              "of the job", file=sys.stderr, flush=True)
        _C.abort_job(1)


def _at_exit():
    """A failed group ends the job (above); otherwise every group still alive
    (a script that keeps DDP or a hook's state in a global holds its group
    past destroy_process_group) finishes and stops its threads while Python
    still runs: a completion thread must not run a callback in a finalizing
    interpreter, nor the heartbeat outlive MPI (ProcessGroupBigbatch's
    shutdownAll)."""
    _end_a_failed_job()
    _C.shutdown_groups()
    _end_a_failed_job()  # a queued collective may have failed just now


def _end_the_job_on_an_uncaught_exception():
    """A rank that dies of an uncaught exception ends the whole job, as
    mpi4py's `python -m mpi4py` does: its peers would otherwise wait in the
    step's collective until the group's timeout, and its own exit would wait
    for them (MPI_Finalize's fence). The traceback is printed first."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if not (_C.live_groups() > 0 and int(os.environ.get("WORLD_SIZE", "1")) > 1):
            previous(kind, value, tb)
            return
        # PyTorch 2.x's init_process_group wraps this hook and holds what it
        # prints (sys.stderr, for the while) until it returns, which ending
        # the job here would lose: the traceback (the earlier hook's) goes
        # to the process's own stderr.
        held, sys.stderr = sys.stderr, sys.__stderr__
        try:
            previous(kind, value, tb)
        finally:
            sys.stderr = held
        print(f"bigbatch_torch: rank {os.environ.get('RANK', '?')} ended with an uncaught "
              f"{kind.__name__}; ending every rank of the job", file=sys.__stderr__, flush=True)
        _C.abort_job(1)

    sys.excepthook = hook


_mpi_environment()
_env_rendezvous_through_mpi()
atexit.register(_at_exit)
_end_the_job_on_an_uncaught_exception()
try:
    from torch.distributed.rendezvous import register_rendezvous_handler
    register_rendezvous_handler("bigbatch", _mpi_rendezvous)  # init_method="bigbatch://"
except (RuntimeError, ImportError):
    pass  # registered already (a reload), or a PyTorch without the call

from . import hooks  # noqa: E402  (after the backend is registered)
