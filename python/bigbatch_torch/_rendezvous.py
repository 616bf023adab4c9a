"""What torch.distributed's start asks of a store, answered by MPI's launch.

PyTorch 1.13 ends init_process_group with a barrier on its store (each
rank adds 1 to a counter and waits for the world size); 2.x does so only
if asked. Under mpirun the ranks have already met — MPI's launch joined
them, and the bigbatch backend's creator ends with an MPI barrier — so
this store's counters report every rank present at once. It holds no
shared keys: a key set on one rank is not seen on another, and a read of a
key this rank did not set raises, naming the fix — a gloo or NCCL group
made beside the bigbatch one needs a real store (MASTER_ADDR and
MASTER_PORT, or an init_method).
"""
from datetime import timedelta

import torch.distributed as dist

from . import _C


def launched_by_mpi():
    """True when an MPI launcher started this process (mpirun; srun with PMI
    or PMIx): the C++ side's test, so both agree."""
    return _C.launched_by_mpi()


class MpiRendezvousStore(dist.Store):
    def __init__(self, world_size):
        super().__init__()
        self._world_size = world_size
        self._keys = {}

    def _missing(self, keys):
        return RuntimeError(
            f"bigbatch's MPI rendezvous store holds no shared keys ({', '.join(keys)} were "
            "asked for): a process group of another backend needs a real store — set "
            "MASTER_ADDR and MASTER_PORT, or give init_process_group an init_method")

    def set(self, key, value):
        self._keys[key] = value if isinstance(value, bytes) else str(value).encode()

    def get(self, key):
        if key not in self._keys:
            raise self._missing([key])
        return self._keys[key]

    def add(self, key, amount):
        # Every rank is present: the barrier's counter reads the world size.
        return self._world_size

    def check(self, keys):
        return all(k in self._keys for k in keys)

    def wait(self, keys, timeout=None):
        missing = [k for k in keys if k not in self._keys]
        if missing:
            raise self._missing(missing)

    def num_keys(self):
        return len(self._keys)

    def delete_key(self, key):
        return self._keys.pop(key, None) is not None

    def set_timeout(self, timeout):
        pass

    @property
    def timeout(self):
        return timedelta(minutes=30)
