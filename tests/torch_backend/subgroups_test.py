#!/usr/bin/python3
"""Subgroups on the "bigbatch" backend (4 ranks; torchrun or mpirun):

- `new_group` pairs {0,1} and {2,3}, and {1,3}: each a bigbatch group of
  its own (under torchrun its own UCX world over the store c10d prefixed
  for it; under mpirun an MPI communicator its members made alone);
  all_reduce, broadcast, all_gather and reduce_scatter in each, against
  the values computed directly, interleaved with the default group's
  collectives;
- sends and receives inside a subgroup (its own numbering);
- an all_reduce in a pair and one in the default group in flight at once;
- PyTorch 2.x: a 2 x 2 DeviceMesh on the CPU, an all_reduce along each
  dimension.

Under mpirun no MASTER_ADDR is set: the groups need no store.

`subgroups_test.py failure_kept` (torchrun, 4 ranks): an all_reduce of
different sizes in the pair groups fails there, the script catches it and
makes another group, which works; the process exits without destroying
the groups — and the earlier failure still ends the job (exit status 1),
not wiped by the later group.

`subgroups_test.py missing` (mpirun, 3 ranks): rank 1 never calls
new_group([0, 1, 2]); ranks 0 and 2 raise within the group's timeout (3 s),
naming rank 1, instead of hanging in MPI_Comm_create_group (rank 0 in the
barrier's second round, rank 2 in its first). `subgroups_test.py mismatch`
(mpirun, 3 ranks): ranks 0 and 2 make new_group([0, 1, 2]), rank 1
new_group([0, 1]): ranks 0 and 1 raise naming the other's list, rank 2 on
its timeout. Either way the default group (timeout 120 s, so the ranks
wait for each other) still works on every rank after, and the failed
creation is the process's failure: the job ends non-zero at exit
(subgroups_meeting_test.sh checks all of it).

`subgroups_test.py serialized` (mpirun, 2 ranks): the script initialises
MPI itself first (MPI_Init_thread through ctypes, as mpi4py would) at
MPI_THREAD_SERIALIZED; the default group works, and new_group is refused
in one error naming the cause and the fix.

`subgroups_test.py capped` (mpirun, 2 ranks, tests/comm/mpi_thread_cap.c
preloaded: an MPI that reports less thread support than asked, as one
built without it would): at BIGBATCH_TEST_MPI_THREAD_CAP=2 (SERIALIZED)
the default group works and new_group is refused naming the MPI's level
and the fix; at 1 (FUNNELED) init_process_group itself is refused so.

  torchrun --nproc_per_node 4 subgroups_test.py   (PYTHONPATH: the built bigbatch_torch)
  mpirun -np 4 python3 subgroups_test.py
"""
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

if "OMPI_COMM_WORLD_SIZE" not in os.environ:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
import bigbatch_torch  # noqa: E402

failures = []
RANK = [None]


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"[rank {RANK[0]}] FAIL: {what}", flush=True)


def meeting(mode):
    """`missing` or `mismatch`, on 3 ranks under mpirun (the docstring)."""
    dist.init_process_group("bigbatch", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    RANK[0] = rank
    ranks = [0, 1] if mode == "mismatch" and rank == 1 else [0, 1, 2]
    want = {("missing", 0): "no word from rank 1 in round 2",
            ("missing", 2): "no word from rank 1 in round 1",
            ("mismatch", 0): "rank 1 makes a group of other ranks (2 of them)",
            ("mismatch", 1): "rank 0 makes a group of other ranks (3 of them)",
            ("mismatch", 2): "no word from rank 1 in round 1"}.get((mode, rank))
    if want is not None:
        start = time.monotonic()
        try:
            dist.new_group(ranks, timeout=timedelta(seconds=3))
            check(False, f"new_group({ranks}) returned on rank {rank}")
        except Exception as e:  # noqa: BLE001 (the creator's error, whatever c10d wraps it in)
            took = time.monotonic() - start
            check(want in str(e) and took < 30, f"the error on rank {rank} after {took:.1f} s: {e}")
            print(f"[rank {rank}] new_group raised after {took:.1f} s: {e}", flush=True)
    t = torch.ones(2)
    dist.all_reduce(t)  # the default group still works
    check(torch.equal(t, torch.full((2,), float(dist.get_world_size()))), "all_reduce after")
    dist.destroy_process_group()
    if not failures and rank == 0:
        print(f"subgroups_test: {mode} ok", flush=True)


def serialized():
    """MPI initialised by "another library" at SERIALIZED (the docstring)."""
    import ctypes
    mpi = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)
    provided = ctypes.c_int(-1)
    assert mpi.MPI_Init_thread(None, None, 2, ctypes.byref(provided)) == 0  # 2: SERIALIZED
    dist.init_process_group("bigbatch")
    rank = dist.get_rank()
    RANK[0] = rank
    try:
        dist.new_group([0, 1])
        check(False, "a second group ran on MPI_THREAD_SERIALIZED")
    except Exception as e:  # noqa: BLE001 (the creator's error, whatever c10d wraps it in)
        check("MPI was initialised before the first bigbatch group, by another library" in str(e)
              and "at MPI_THREAD_SERIALIZED" in str(e), f"the refusal: {e}")
        print(f"[rank {rank}] refused: {e}", flush=True)
    t = torch.ones(2)
    dist.all_reduce(t)  # the default group still works
    check(torch.equal(t, torch.full((2,), 2.0)), "all_reduce after")
    dist.destroy_process_group()
    bigbatch_torch._C.shutdown_groups()  # the groups' threads end before MPI does
    mpi.MPI_Finalize()  # the library that initialised MPI finalises it
    if not failures and rank == 0:
        print("subgroups_test: serialized ok", flush=True)


def capped():
    """An MPI with less thread support (the docstring)."""
    level = int(os.environ["BIGBATCH_TEST_MPI_THREAD_CAP"])
    names = ["MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED"]
    RANK[0] = int(os.environ["OMPI_COMM_WORLD_RANK"])
    try:
        dist.init_process_group("bigbatch")
    except Exception as e:  # noqa: BLE001 (whatever c10d wraps it in)
        check(level < 2 and f"[rank {RANK[0]}] this MPI provides only {names[level]}, and "
              "bigbatch needs MPI_THREAD_SERIALIZED at the least: use an MPI built with thread "
              "support" in str(e),
              f"init_process_group's refusal: {e}")
        print(f"[rank {RANK[0]}] refused: {e}", flush=True)
    else:
        check(level == 2, f"a bigbatch group started on {names[level]}")
        try:
            dist.new_group([0, 1])
            check(False, "a second group ran on MPI_THREAD_SERIALIZED")
        except Exception as e:  # noqa: BLE001
            check("a second bigbatch process group (new_group, a DeviceMesh) under an MPI launch "
                  "needs MPI_THREAD_MULTIPLE, but this MPI provides only MPI_THREAD_SERIALIZED: "
                  "use an MPI built with thread support" in str(e), f"the refusal: {e}")
            print(f"[rank {RANK[0]}] refused: {e}", flush=True)
        t = torch.ones(2)
        dist.all_reduce(t)  # the default group still works
        check(torch.equal(t, torch.full((2,), 2.0)), "all_reduce after")
        dist.destroy_process_group()
    if not failures and RANK[0] == 0:
        print(f"subgroups_test: capped at {names[level]} ok", flush=True)


def failure_kept():
    dist.init_process_group("bigbatch")
    rank = dist.get_rank()
    RANK[0] = rank
    pair = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    t = torch.ones(3 if rank % 2 == 0 else 4)
    try:
        dist.all_reduce(t, group=pair)
        check(False, "an all_reduce of different sizes ran")
    except RuntimeError as e:
        print(f"[rank {rank}] the pair's failure, caught: {e}", flush=True)
    later = dist.new_group([0, 1, 2, 3])
    x = torch.ones(2)
    dist.all_reduce(x, group=later)
    check(torch.equal(x, torch.full((2,), 4.0)), f"the later group's all_reduce: {x.tolist()}")
    if not failures and rank == 0:
        print("failure_kept: the later group works; exiting normally", flush=True)
    sys.exit(1 if failures else 0)  # the exit hook ends the job for the pair's failure


def in_group(group, members, rank):
    """Collectives in `group` (of `members`, global ranks) on rank `rank`."""
    me = members.index(rank)
    n = len(members)
    check(bigbatch_torch.backend_of(group) is not None, "the subgroup runs bigbatch")
    check(dist.get_rank(group) == me and dist.get_world_size(group) == n,
          f"rank {dist.get_rank(group)} of {dist.get_world_size(group)} in {members}")
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t, group=group)
    want = float(sum(r + 1 for r in members))
    check(torch.equal(t, torch.full((5,), want)), f"all_reduce in {members}: {t.tolist()}")
    b = torch.arange(4, dtype=torch.float64) * (rank + 1)
    dist.broadcast(b, src=members[-1], group=group)  # src: a global rank
    check(torch.equal(b, torch.arange(4, dtype=torch.float64) * (members[-1] + 1)),
          f"broadcast in {members}: {b.tolist()}")
    outs = [torch.empty(3, dtype=torch.int32) for _ in members]
    dist.all_gather(outs, torch.full((3,), rank, dtype=torch.int32), group=group)
    check([int(o[0]) for o in outs] == members, f"all_gather in {members}")
    out = torch.empty(2)
    dist.reduce_scatter(out, [torch.full((2,), float(rank * 10 + i)) for i in range(n)],
                        group=group)
    want = float(sum(r * 10 + me for r in members))
    check(torch.equal(out, torch.full((2,), want)), f"reduce_scatter in {members}: {out.tolist()}")


def main():
    if sys.argv[1:] == ["serialized"]:
        serialized()
        return
    if sys.argv[1:] == ["capped"]:
        capped()
        return
    if sys.argv[1:] in (["missing"], ["mismatch"]):
        meeting(sys.argv[1])
        return
    if sys.argv[1:] == ["failure_kept"]:
        failure_kept()
        return
    dist.init_process_group("bigbatch")
    rank, n = dist.get_rank(), dist.get_world_size()
    RANK[0] = rank
    assert n == 4, "run on 4 ranks"
    # Every rank calls new_group for every group, members or not (c10d's rule).
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    odd = dist.new_group([1, 3])
    mine = [0, 1] if rank < 2 else [2, 3]
    in_group(pairs[rank // 2], mine, rank)
    t = torch.ones(3)
    dist.all_reduce(t)  # the default group between the subgroups' collectives
    check(torch.equal(t, torch.full((3,), 4.0)), f"default all_reduce: {t.tolist()}")
    if rank in (1, 3):
        in_group(odd, [1, 3], rank)
        # Point to point in the subgroup; peers named by their global ranks.
        other = 3 if rank == 1 else 1
        got = torch.empty(4)
        r = dist.irecv(got, other, group=odd)
        dist.send(torch.full((4,), float(rank)), other, group=odd)
        r.wait()
        check(torch.equal(got, torch.full((4,), float(other))), f"recv in [1, 3]: {got.tolist()}")
    in_group(pairs[rank // 2], mine, rank)  # again, after the others' traffic
    # Two groups at work at once: each its own thread and connections.
    a, b = torch.full((1 << 16,), float(rank)), torch.full((1 << 16,), 1.0)
    wa = dist.all_reduce(a, group=pairs[rank // 2], async_op=True)
    wb = dist.all_reduce(b, async_op=True)
    wb.wait()
    wa.wait()
    check(torch.equal(a, torch.full_like(a, float(sum(mine)))) and
          torch.equal(b, torch.full_like(b, 4.0)), "all_reduce in a pair and the default at once")
    meshes = int(torch.__version__.split(".")[0]) >= 2
    if meshes:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for dim, peers in (("dp", [rank % 2, rank % 2 + 2]), ("tp", mine)):
            g = mesh.get_group(dim)
            check(bigbatch_torch.backend_of(g) is not None, f"the mesh's {dim} group runs bigbatch")
            t = torch.full((2,), float(rank + 1))
            dist.all_reduce(t, group=g)
            want = float(sum(p + 1 for p in peers))
            check(torch.equal(t, torch.full((2,), want)), f"mesh {dim} all_reduce: {t.tolist()}")
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        sys.exit(1)
    if rank == 0:
        print(f"subgroups_test: ok{' (and a 2 x 2 DeviceMesh)' if meshes else ''}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    if failures:
        sys.exit(1)
