#!/usr/bin/python3
"""Point to point on the "bigbatch" backend (mpirun -np N, or torchrun):

- a ring where every rank posts isend to the next and irecv from the
  previous before waiting on either (4 MiB: past every transport's eager
  limit, so a backend that ran each to its end in turn would hang);
- two messages with different tags, received in the other order;
- recv from any source: rank 0 takes one message from every other rank and
  learns each sender;
- a non-contiguous receive buffer; batch_isend_irecv;
- point to point between collectives: rank 0 sends, then all-reduces; the
  others all-reduce, then receive;
- bad calls refused on the caller's thread (a tag out of range, oneself as
  the peer), the group usable after;
- the monitored barrier (the backend's own: torch.distributed's function
  takes gloo only) passes when every rank comes;
- a receive left unmatched at the group's end fails its Work, and the job
  still ends normally.

`p2p_test.py destroy_in_callback` (2 ranks): the group destroyed inside
a future's callback; the job ends normally.

`p2p_test.py recv_timeout`: rank 0 waits for a message rank 1 never
sends; the receive fails at the group's timeout, naming rank 1.

`p2p_test.py monitor_fail`: the other ranks never come to rank 0's
monitored barrier (wait_all_ranks), which raises naming every one of them
(gloo's words), and the job ends with a non-zero status.

  mpirun -np N /usr/bin/python3 p2p_test.py   (PYTHONPATH: the built bigbatch_torch)
"""
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
import bigbatch_torch  # noqa: E402

failures = []


RANK = [None]


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"[rank {RANK[0]}] FAIL: {what}", flush=True)


def monitor_fail():
    dist.init_process_group("bigbatch", timeout=timedelta(seconds=30))
    if dist.get_rank() == 0:
        pg = dist.distributed_c10d._get_default_group()
        try:
            pg.monitored_barrier(timedelta(seconds=2), wait_all_ranks=True)
            print("monitor_fail: the barrier passed", flush=True)
        except RuntimeError as e:
            print(f"monitor_fail: raised: {e}", flush=True)
    sys.exit(1)


def recv_timeout():
    dist.init_process_group("bigbatch", timeout=timedelta(seconds=3))
    if dist.get_rank() == 0:
        try:
            dist.recv(torch.empty(5), 1, tag=3)
            print("recv_timeout: received", flush=True)
        except RuntimeError as e:
            print(f"recv_timeout: raised: {e}", flush=True)
    sys.exit(1)


def destroy_in_callback():
    """destroy_process_group() inside a future's callback: the group ends on
    its completion thread, which the interpreter's exit then waits for."""
    dist.init_process_group("bigbatch", timeout=timedelta(seconds=30))
    t = torch.ones(3)
    work = dist.all_reduce(t, async_op=True)

    def end(fut):
        dist.destroy_process_group()
        return fut.value()
    work.get_future().then(end).wait()
    ok = torch.equal(t, torch.full((3,), 2.0)) and bigbatch_torch._C.live_groups() == 0
    print(f"destroy_in_callback: {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(0 if ok else 1)


def main():
    if sys.argv[1:] == ["destroy_in_callback"]:
        destroy_in_callback()
    if sys.argv[1:] == ["monitor_fail"]:
        monitor_fail()
    if sys.argv[1:] == ["recv_timeout"]:
        recv_timeout()
    dist.init_process_group("bigbatch", timeout=timedelta(seconds=30))
    rank, n = dist.get_rank(), dist.get_world_size()
    RANK[0] = rank
    nxt, prev = (rank + 1) % n, (rank - 1) % n

    # The ring: both posted before either is waited on.
    big = 1 << 20
    out = torch.arange(big, dtype=torch.float32) + rank * big
    got = torch.empty(big)
    s = dist.isend(out, nxt)
    r = dist.irecv(got, prev)
    r.wait()
    s.wait()
    check(torch.equal(got, torch.arange(big, dtype=torch.float32) + prev * big), "the ring exchange")
    check(r.is_completed() and s.is_completed(), "completed after wait")

    # Tags: sent as 7 then 9, received as 9 then 7.
    if rank == 0:
        dist.send(torch.full((3,), 7.0), 1, tag=7)
        dist.send(torch.full((5,), 9.0), 1, tag=9)
    elif rank == 1:
        a, b = torch.empty(5), torch.empty(3)
        dist.recv(a, 0, tag=9)
        dist.recv(b, 0, tag=7)
        check(torch.equal(a, torch.full((5,), 9.0)) and torch.equal(b, torch.full((3,), 7.0)),
              "messages matched by tag")

    # Any source: rank 0 hears from everyone else, in whatever order.
    if rank == 0:
        senders = []
        for _ in range(n - 1):
            t = torch.empty(4, dtype=torch.int64)
            src = dist.recv(t, tag=5)  # its own tag: a later tag-0 message would match too
            senders.append(src)
            check(torch.equal(t, torch.full((4,), 100 + src, dtype=torch.int64)),
                  f"the message from rank {src}: {t.tolist()}")
        check(sorted(senders) == list(range(1, n)), f"the senders {senders}")
    else:
        dist.send(torch.full((4,), 100 + rank, dtype=torch.int64), 0, tag=5)

    # A non-contiguous receive buffer: every other element.
    base = torch.zeros(10, 2)
    strided = base[:, 0]
    ops = [dist.P2POp(dist.isend, torch.arange(10, dtype=torch.float32) * (rank + 1), nxt),
           dist.P2POp(dist.irecv, strided, prev)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(torch.equal(base[:, 0], torch.arange(10, dtype=torch.float32) * (prev + 1)) and
          torch.equal(base[:, 1], torch.zeros(10)), "batch_isend_irecv into a strided view")

    # Between collectives (4 MiB: not sent eagerly, so the send is still in
    # flight while the all_reduce runs).
    if rank == 0:
        w = dist.isend(torch.full((big,), 3.0), 1)
        t = torch.ones(2)
        dist.all_reduce(t)
        w.wait()
    else:
        t = torch.ones(2)
        dist.all_reduce(t)
        if rank == 1:
            m = torch.empty(big)
            dist.recv(m, 0)
            check(torch.equal(m, torch.full((big,), 3.0)), "a send around an all_reduce")
    check(torch.equal(t, torch.full((2,), float(n))), "the all_reduce between")

    # Bad calls: one clear error each, nothing sent.
    try:
        dist.send(torch.ones(1), nxt, tag=40000)
        check(False, "a send with tag 40000 ran")
    except RuntimeError as e:
        check("tags 0..32766" in str(e), f"the tag refusal: {e}")
    pg = dist.distributed_c10d._get_default_group()
    try:
        pg.send([torch.ones(1)], rank, 0)
        check(False, "a send to oneself ran")
    except RuntimeError as e:
        check("this one is" in str(e), f"the self-send refusal: {e}")

    # The monitored barrier, every rank present.
    pg.monitored_barrier(timedelta(seconds=30))
    t = torch.ones(3)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), float(n))), "an all_reduce after")
    dist.barrier()
    # A receive nobody matches, left at the group's end: it fails its Work,
    # and the job ends normally (exit status 0 on every rank).
    orphan = dist.irecv(torch.empty(3), nxt, tag=99) if rank == 0 else None
    del pg  # the group ends with destroy_process_group, not at exit
    dist.destroy_process_group()
    if orphan is not None:
        try:
            orphan.wait()
            check(False, "an unmatched irecv completed")
        except RuntimeError as e:
            # (or, over UCX, the peer's goodbye came first: it ended normally)
            check("destroyed before this operation completed" in str(e) or
                  f"rank {nxt} ended its communicator normally" in str(e),
                  f"the orphan's error: {e}")
    if failures:
        sys.exit(1)
    if rank == 0:
        print(f"p2p_test: ok ({n} ranks)", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
