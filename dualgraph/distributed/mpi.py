"""The MPI runtime under ``dg.distributed``: communicators (the world and its sub-groups),
non-blocking operations on NumPy arrays, and waits polled against a deadline. No Tensors
here: the collective ops (``ops/collective.py``) and data parallelism call this module with
arrays.

Why every wait polls: MPI has no per-operation timeout, and a peer that died or hangs makes a
blocking call spin forever. So every operation is started non-blocking (``Iallreduce``,
``Ibcast``, ``Isend``, ...) and :meth:`Pending.wait` calls ``Test`` until it completes or
the deadline passes; on expiry it raises :class:`DeadlineError` naming the operation and the
ranks it waited for, and the job is aborted (``MPI.COMM_WORLD.Abort``) instead of hanging.
MPICH moves a non-blocking operation forward only inside MPI calls, so the ``Test`` calls
are also what makes communication progress while Python computes (data parallelism calls
:meth:`Communicator.progress` during the backward).

Where all ranks of a communicator run on one machine, allreduces of up to ``SHM_BYTES / 2``
(and data parallelism's buckets, in windows of their own) go through shared memory instead
(``shm.py``; ``DUALGRAPH_DIST_SHM=0`` keeps everything on MPI, ``=1`` requires it); their
waits and deadlines are the same.

``mpi4py`` is imported only by :func:`connect`, so ``import dualgraph`` works without it; a
single process without ``mpi4py`` (and not started by ``mpiexec``) gets a communicator of
size 1 whose operations are copies.
"""
from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import time
import zlib

import numpy as np

from .._helpers import user_location
from ..dispatch import OpError
from ..dtypes import bfloat16_np
from . import shm

TIMEOUT_ENV = "DUALGRAPH_DIST_TIMEOUT"   # seconds; init_process_group(timeout=) wins
DEFAULT_TIMEOUT = 300.0
# the launchers' variables that say "started by mpiexec with more than one process"
_LAUNCH_SIZE = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")
# A wait calls Test() back to back for SPIN_S, as MPI's own blocking calls poll, then
# sleeps between batches of POLLS calls, 10 us at first, doubling up to MAX_SLEEP_S. MPICH
# moves a large message forward only inside such calls, so long sleeps cost bandwidth;
# spinning for long takes the core from the rank being waited for when the machine has
# more runnable processes than cores (docs/benchmarks.md has the measurements).
SPIN_S = 2e-4
MAX_SLEEP_S = 1e-4
POLLS = 256
FIRST_POLLS = 512  # Test calls a wait makes before it starts the deadline's clock (~100 us)
# An in-place allreduce of this many bytes (inclusive) runs out of place into a scratch
# array, copied back: MPICH's intranode in-place algorithm costs 1.25-1.4x its out-of-place
# one at 32-128 KiB (the copy back and its Python, 2-5 us, less than that from 32 KiB), and
# no faster from 256 KiB, the slower one from 512 KiB (docs/benchmarks.md, 2026-12-03).
OUT_OF_PLACE_BYTES = (32 << 10, 128 << 10)
SHM_ENV = "DUALGRAPH_DIST_SHM"   # "0": MPI only; "1": shared memory required; unset: where it can
SHM_BYTES = 8 << 20   # each rank's ring for allreduces through shared memory (up to half each)
SHM_MIN_BYTES = 8 << 10   # smaller ones go by MPI: its C path beats our Python's (~5 us a call)


class DistributedError(OpError):
    """A communication failed (a peer's MPI error, a mismatched call)."""


class DeadlineError(DistributedError, TimeoutError):
    """An operation did not complete within the process group's timeout (or, sooner, once
    mpiexec reported that a rank of the job died)."""


REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MAX", "MIN")


class Pending:
    """A started non-blocking operation: ``wait()`` returns its result array (polling
    ``Test`` against the deadline), ``test()`` says whether it is done without waiting.
    ``what`` (the operation, its array and its number, for errors) is written only when
    an error needs it: formatting costs more than a small allreduce."""

    __slots__ = ("comm", "label", "array", "number", "requests", "result", "finish", "peers",
                 "done", "started")

    def __init__(self, comm: "Communicator", label: str, array, number: int, requests: list,
                 result, finish=None, peers=None):
        self.comm, self.label, self.array, self.number = comm, label, array, number
        self.requests, self.result, self.finish, self.peers = requests, result, finish, peers
        self.done = not requests
        self.started = None   # when a wait began (wait_all sets it: the clock costs)

    def _spin(self) -> None:
        """A few ``Test`` calls first, without the deadline's clock: a small message
        completes within them."""
        if len(self.requests) == 1:
            test = self.requests[0].Test
            try:
                for _ in range(FIRST_POLLS):
                    if test():
                        self.done = True
                        return
            except self.comm.mpi.Exception as e:
                raise DistributedError(f"{self.what} failed on {self.comm.where()}: "
                                       f"{e}") from e

    @property
    def what(self) -> str:
        return f"{self.label} of {_describe(self.array)} (operation #{self.number})"

    def test(self) -> bool:
        if not self.done:
            self.done = self.comm._testall(self.requests, self)
        return self.done

    def wait(self):
        if not self.done:
            self._spin()
        if not self.done:
            self.comm.wait_all([self])
        if self.finish is not None:
            self.result, self.finish = self.finish(self.result), None
        return self.result


class Communicator:
    """The world, or a sub-group of it: ``rank``, ``size`` (in this communicator), and
    non-blocking operations that return :class:`Pending`. ``mpi`` is mpi4py's ``MPI``
    module (None for a lone process); ``ranks`` are a sub-group's members as ranks of the
    world (None for the world itself), which errors name."""

    def __init__(self, mpi, timeout: float, handle=None, ranks: tuple | None = None):
        self.mpi, self.timeout, self.ranks = mpi, float(timeout), ranks
        if handle is None and mpi is not None:
            handle = mpi.COMM_WORLD.Dup()
        self.handle = handle     # the MPI communicator (None for a lone process)
        self.rank = handle.Get_rank() if handle is not None else 0
        self.size = handle.Get_size() if handle is not None else 1
        self.calls = 0           # operations started: names the one that timed out
        self.in_flight: list = []   # started and not yet seen complete (progress())
        self.mailbox: dict = {}     # a lone process's messages to itself, by tag
        self._reductions: dict = {}   # (op, dtype) -> what _reduction made for them
        self._last = (None, None, None)   # all_reduce_now's last (op, dtype, reduction)
        self._scratch = None   # all_reduce_now's out-of-place results (OUT_OF_PLACE_BYTES)
        self._scratch_views: dict = {}   # (shape, dtype number) -> a view of it
        self.node_size = 1 if handle is None else _node_size(mpi, handle)
        self.windows: list = []   # shared-memory windows made over this communicator
        self.uses_shm = self._shm_wanted()
        self.shared = self.shared_window(SHM_BYTES)   # allreduces' ring (None: MPI only)

    def _shm_wanted(self) -> bool:
        """Whether allreduces go through shared memory: every rank runs on this machine
        and ``SHM_ENV`` does not say no."""
        choice = os.environ.get(SHM_ENV, "").strip().lower()
        if self.mpi is None or self.size == 1 or choice in ("0", "mpi", "off", "no"):
            return False
        if self.node_size != self.size:
            if choice in ("1", "shm", "on", "yes"):
                raise DistributedError(
                    f"{SHM_ENV}={choice} asks for shared memory, but only {self.node_size} "
                    f"of the {self.size} ranks of {self.where()} run on this machine; unset "
                    f"it (or {SHM_ENV}=0) to communicate through MPI")
            return False
        return True

    def shared_window(self, nbytes: int) -> "shm.Window | None":
        """A new shared-memory window of ``nbytes`` per rank (every rank calls it, as any
        collective), or None where this communicator does not use shared memory."""
        if not self.uses_shm:
            return None
        window = shm.Window(self, nbytes, self._fence)
        self.windows.append(window)
        return window

    def shared_arrays(self, likes: list) -> "tuple[shm.Window, list] | None":
        """(a new shared-memory window, per array of ``likes`` every rank's array like it
        in the window), or None where this communicator does not use shared memory
        (collective)."""
        if not self.uses_shm or not all(shm.supports(a.dtype) for a in likes):
            return None
        line = shm.LINE
        offsets = np.cumsum([0] + [-(-a.nbytes // line) * line for a in likes]).tolist()
        window = self.shared_window(offsets[-1])
        return window, [window.arrays(at, a.shape, a.dtype) for at, a in zip(offsets, likes)]

    def _fence(self) -> None:
        """A barrier against the deadline that is not one of the user's operations."""
        Pending(self, "barrier (making a shared window)", np.empty(0), self.calls,
                [self.handle.Ibarrier()], None).wait()

    def name(self, rank: int) -> str:
        """Rank ``rank`` of this communicator, as errors name it (with its world rank in a
        sub-group)."""
        if self.ranks is None:
            return f"rank {rank}"
        return f"group rank {rank} (global rank {self.ranks[rank]})"

    def where(self) -> str:
        """This process, as errors name it: its rank, and the group's members."""
        if self.ranks is None:
            return f"rank {self.rank} of {self.size}"
        return (f"{self.name(self.rank)} of {self.size} in the group of global ranks "
                f"{list(self.ranks)}")

    def new_group(self, ranks: tuple) -> "Communicator | None":
        """A new communicator over ``ranks`` (sorted ranks of this one, which must be the
        world): every rank calls it with the same ``ranks`` (checked, against the deadline),
        the members get the sub-group, the others None."""
        digest = np.array([len(ranks), zlib.crc32(np.asarray(ranks, np.int64).tobytes())],
                          np.int64)
        seen = np.empty((self.size, 2), np.int64)
        seen[0] = digest
        self._start(f"new_group({list(ranks)})", digest, lambda: self.handle.Iallgather(
            digest, seen), seen).wait()
        differ = [r for r in range(self.size) if not (seen[r] == digest).all()]
        if differ:
            raise DistributedError(
                f"new_group({list(ranks)}) on {self.where()}: ranks {differ} called it with "
                "other ranks (every rank must call new_group, in the same order, with the "
                "same ranks)")
        member = self.rank in ranks
        if self.mpi is None:
            return Communicator(None, self.timeout, None, tuple(ranks)) if member else None
        handle = self.handle.Split(0 if member else self.mpi.UNDEFINED, self.rank)
        return Communicator(self.mpi, self.timeout, handle, tuple(ranks)) if member else None

    # -- waiting ------------------------------------------------------------------------------
    def _testall(self, requests, pending) -> bool:
        try:
            if len(requests) == 1:
                return requests[0].Test()
            return self.mpi.Request.Testall(requests)
        except self.mpi.Exception as e:
            raise DistributedError(f"{pending.what} failed on {self.where()}: {e}") from e

    def progress(self) -> None:
        """Let MPI move the operations in flight forward (MPICH progresses only inside MPI
        calls); cheap, never waits."""
        self.in_flight = [p for p in self.in_flight if not p.test()]

    def wait_all(self, pendings) -> None:
        """Wait until every operation in ``pendings`` completes; past the deadline raise
        :class:`DeadlineError` for the first one still open."""
        now = time.monotonic()
        deadline, spin_until, sleep = now + self.timeout, now + SPIN_S, 1e-5
        for pending in pendings:
            if pending.started is None:
                pending.started = now
            while not pending.done:
                for _ in range(POLLS):   # (the clock is read once per POLLS tests)
                    if pending.test():
                        break
                else:
                    now = time.monotonic()
                    if now > deadline or _peer_died[0]:
                        self._expired(pending)
                    shm.advance_all()   # (a peer may wait on this rank's share elsewhere)
                    if now > spin_until:
                        time.sleep(sleep)
                        sleep = min(2 * sleep, MAX_SLEEP_S)

    def _expired(self, pending: Pending):
        others = [r for r in range(self.size) if r != self.rank]
        peers = pending.peers if pending.peers is not None else others
        if len(peers) == 1:
            who = self.name(peers[0])
        elif self.ranks is None:
            who = f"one or more of ranks {peers} (MPI does not say which)"
        else:
            who = (f"one or more of group ranks {peers} (global ranks "
                   f"{[self.ranks[r] for r in peers]}; MPI does not say which)")
        why = ("mpiexec reported that a process of the job died" if _peer_died[0] else
               "a rank died, hangs, or called a different operation")
        waited = time.monotonic() - pending.started
        when = (f"was given up after {waited:.1f} s" if _peer_died[0] else
                f"did not complete within {self.timeout:g} s")
        _failed[0] = True
        raise DeadlineError(
            f"{pending.what}, waited on at {user_location()}, on {self.where()} {when}: "
            f"{who} did not arrive ({why}). The job is aborted instead of hanging; raise the "
            "deadline with init_process_group(timeout=datetime.timedelta(...)) or "
            f"{TIMEOUT_ENV}")

    # -- operations -----------------------------------------------------------------------------
    def _start(self, what, array, start, result, finish=None, peers=None) -> Pending:
        """Start an operation on ``array``, the contiguous buffer MPI reads: the pending
        operation holds it (a copy made for a non-contiguous tensor must outlive MPI's
        reading it)."""
        self.calls += 1
        if self.mpi is None:   # a lone process: the result is already there
            return Pending(self, what, array, self.calls, [], result, finish, peers)
        try:
            requests = start()
        except self.mpi.Exception as e:
            what = Pending(self, what, array, self.calls, [], None).what
            raise DistributedError(f"{what} could not start on {self.where()}: {e}") from e
        pending = Pending(self, what, array, self.calls,
                          requests if isinstance(requests, list) else [requests],
                          result, finish, peers)
        if len(self.in_flight) >= 8:
            self.in_flight = [p for p in self.in_flight if not p.done]   # (waited ones go)
        self.in_flight.append(pending)
        return pending

    def all_reduce(self, x: np.ndarray, op: str = "SUM", inplace: bool = False) -> Pending:
        """``inplace``: the result overwrites ``x`` (C-contiguous; of OUT_OF_PLACE_BYTES,
        MPI writes a new array, copied into ``x`` by the wait)."""
        if self._through_shm(x):
            return self._shared_all_reduce(x, op, inplace)
        send = x if inplace or x.flags.c_contiguous else np.ascontiguousarray(x)
        wire, mpi_op, finish = self._reduction(op, x.dtype)
        if inplace and _out_of_place(x.nbytes):
            inplace, finish = False, _into(x, finish)
        out = send if inplace else np.empty_like(send)
        if self.mpi is None:
            out[...] = send
        return self._start(f"all_reduce({op})", send, lambda: self.handle.Iallreduce(
            self.mpi.IN_PLACE if inplace else wire(send), wire(out), mpi_op), out, finish)

    def all_reduce_now(self, x: np.ndarray, op: str = "SUM") -> np.ndarray:
        """``all_reduce(x, op, inplace=True).wait()`` (``x`` C-contiguous) with the least
        Python on the way: a small message completes within the first ``Test`` calls, and
        only one that does not gets a :class:`Pending` and the deadline's wait."""
        if self._through_shm(x):
            return self._shared_all_reduce(x, op, True).wait()
        dtype, last = x.dtype, self._last
        if last[0] is op and last[1] is dtype:   # (as the call before: a dtype hashes slowly)
            wire, mpi_op, finish = last[2]
        else:
            wire, mpi_op, finish = found = self._reduction(op, dtype)
            self._last = (op, dtype, found)
        self.calls += 1
        if self.mpi is None:
            return finish(x)
        out = self._scratch_for(x) if _out_of_place(x.nbytes) else None
        try:
            request = (self.handle.Iallreduce(self.mpi.IN_PLACE, wire(x), mpi_op) if out is None
                       else self.handle.Iallreduce(wire(x), wire(out), mpi_op))
            polls = FIRST_POLLS   # (this loop's form was the fastest to see completion)
            while not request.Test():
                polls -= 1
                if not polls:
                    self.wait_all([Pending(self, f"all_reduce({op})", x, self.calls, [request],
                                           x)])
                    break
        except self.mpi.Exception as e:
            what = Pending(self, f"all_reduce({op})", x, self.calls, [], None).what
            raise DistributedError(f"{what} failed on {self.where()}: {e}") from e
        if out is not None:
            np.copyto(x, out)
        return finish(x)

    def _through_shm(self, x: np.ndarray) -> bool:
        return (self.shared is not None and SHM_MIN_BYTES <= x.nbytes <= SHM_BYTES // 2
                and shm.supports(x.dtype))

    def _shared_all_reduce(self, x: np.ndarray, op: str, inplace: bool) -> "shm.Reduction":
        """``all_reduce`` through the shared ring, ``x`` copied in: up to
        ``shm.WHOLE_BYTES`` each rank sums all of it into the result itself (one
        synchronisation), else its share, straight into the result (``x`` if ``inplace``),
        and the other shares are copied into it when it is waited for."""
        finish = self._reduction(op, x.dtype)[2]   # (checks op and dtype, as MPI's path)
        whole = x.nbytes <= shm.WHOLE_BYTES
        arrays = self.shared.copy_in(x, whole)
        out = x if inplace else np.empty(x.shape, x.dtype)
        return self.shared.placed(self.all_reduce_shared(self.shared, arrays, op, out,
                                                         finish, whole))

    def all_reduce_shared(self, window: "shm.Window", arrays: list, op: str = "SUM",
                          result=None, finish=None, whole=False) -> "shm.Reduction":
        """Start the allreduce of a message that lives in ``window`` (``arrays``: every
        rank's, from ``window.arrays``; ``Window.all_reduce`` says the rest); it is waited
        for as any operation."""
        self.calls += 1
        op = str(op).upper()
        reduction = window.all_reduce(arrays, op, f"all_reduce({op})", self.calls, result,
                                      finish, whole)
        if len(self.in_flight) >= 8:
            self.in_flight = [p for p in self.in_flight if not p.done]
        self.in_flight.append(reduction)
        return reduction

    def _scratch_for(self, x: np.ndarray) -> np.ndarray:
        """An array like ``x`` in this communicator's scratch memory (kept: a fresh one of
        this size would page-fault in every call)."""
        key = (x.shape, x.dtype.num)   # (the number: a dtype hashes slowly)
        view = self._scratch_views.get(key)
        if view is None or view.dtype != x.dtype:
            if self._scratch is None:
                self._scratch = np.empty(OUT_OF_PLACE_BYTES[1], np.uint8)
            if len(self._scratch_views) > 64:
                self._scratch_views.clear()
            view = self._scratch[:x.nbytes].view(x.dtype).reshape(x.shape)
            self._scratch_views[key] = view
        return view

    def _reduction(self, op: str, dtype):
        """(the arrays' form for MPI, the MPI op, the result's finish) of a reduction
        ``op`` over ``dtype``, made once per pair: a small allreduce's time is mostly this
        kind of Python work."""
        key = (op, dtype)
        found = self._reductions.get(key)
        if found is None:
            as_wire, from_wire = _wire(dtype)
            found = (as_wire, _mpi_op(self.mpi, op, dtype), _finish(op, self.size, from_wire))
            self._reductions[key] = found
        return found

    def reduce(self, x: np.ndarray, dst: int, op: str = "SUM") -> Pending:
        """The reduction on rank ``dst``; zeros on the others (a pure function of the
        inputs, which a graph and a VJP can use)."""
        _check_rank(dst, self.size, "dst")
        send, as_wire, from_wire = _reduction_buffer(x)
        out = np.empty_like(send) if self.rank == dst else np.zeros_like(send)
        mpi_op = _mpi_op(self.mpi, op, x.dtype)
        if self.mpi is None:
            out[...] = send
        finish = _finish(op, self.size, from_wire)
        return self._start(f"reduce({op}, dst={dst})", send, lambda: self.handle.Ireduce(
            as_wire(send), as_wire(out) if self.rank == dst else None, mpi_op, root=dst),
            out, finish if self.rank == dst else from_wire)

    def broadcast(self, x: np.ndarray, src: int, inplace: bool = False) -> Pending:
        _check_rank(src, self.size, "src")
        out = x if inplace else np.array(x, order="C", copy=True)
        return self._start(f"broadcast(src={src})", x,
                           lambda: self.handle.Ibcast(_bytes(out), root=src), out,
                           peers=None if self.rank == src else [src])

    def all_gather(self, x: np.ndarray) -> Pending:
        """The inputs of all ranks stacked along a new leading dim (``[size, *x.shape]``)."""
        send = np.ascontiguousarray(x)
        out = np.empty((self.size,) + x.shape, x.dtype)
        if self.mpi is None:
            out[0] = send
        return self._start("all_gather", send, lambda: self.handle.Iallgather(
            _bytes(send), _bytes(out)), out)

    def reduce_scatter(self, x: np.ndarray, op: str = "SUM") -> Pending:
        """Rank r gets the reduction of block r of ``x`` (``x`` is ``[size, *block]``)."""
        if x.ndim == 0 or x.shape[0] != self.size:
            raise ValueError(f"reduce_scatter: input of shape {x.shape} must have "
                             f"{self.size} blocks (one per rank) along dim 0")
        send, as_wire, from_wire = _reduction_buffer(x)
        out = np.empty_like(send[0])
        mpi_op = _mpi_op(self.mpi, op, x.dtype)
        if self.mpi is None:
            out[...] = send[0]
        return self._start(f"reduce_scatter({op})", send, lambda: self.handle.Ireduce_scatter_block(
            as_wire(send), as_wire(out), mpi_op), out, _finish(op, self.size, from_wire))

    def send(self, x: np.ndarray, dst: int, tag: int = 0) -> Pending:
        _check_peer(dst, self.rank, self.size, "dst")
        send = np.ascontiguousarray(x)
        if self.mpi is None:   # a lone process sends to itself: the message waits here
            self.mailbox.setdefault(tag, []).append(send.copy())
        return self._start(f"send(dst={dst}, tag={tag})", send,
                           lambda: self.handle.Isend(_bytes(send), dst, tag), None, peers=[dst])

    def recv(self, out: np.ndarray, src: int, tag: int = 0) -> Pending:
        _check_peer(src, self.rank, self.size, "src")
        if self.mpi is None:
            if not self.mailbox.get(tag):
                raise DistributedError(f"recv(tag={tag}) in a lone process: nothing was sent")
            out[...] = self.mailbox[tag].pop(0).reshape(out.shape)
        return self._start(f"recv(src={src}, tag={tag})", out,
                           lambda: self.handle.Irecv(_bytes(out), src, tag), out, peers=[src])

    def barrier(self) -> Pending:
        return self._start("barrier", np.empty(0), lambda: self.handle.Ibarrier(), None)

    def local_size(self) -> int:
        """How many ranks (of this communicator) share this machine."""
        return self.node_size

    def abort(self, code: int = 1) -> None:
        if self.mpi is not None and self.size > 1:
            self.mpi.COMM_WORLD.Abort(code)

    def close(self) -> None:
        """Free the communicator, and its shared windows that no array outside them views
        any more on any rank (they agree first: freeing is collective); the others, as a
        live DistributedDataParallel's buckets, stay mapped until MPI finalises."""
        self.in_flight = []
        if self.windows:
            gc.collect()   # (a DistributedDataParallel dropped in a reference cycle)
            free = np.array([w.unused() for w in self.windows], np.uint8)
            if _failed[0] or _peer_died[0]:   # (no agreement with a rank that is gone)
                free[:] = 0
            elif self.size > 1:
                self.all_reduce(free, "MIN", inplace=True).wait()
            for window, ok in zip(self.windows, free):
                window.close(bool(ok))
            self.windows, self.shared = [], None
        if self.handle is not None:
            self.handle.Free()
            self.handle = None


def _node_size(mpi, handle) -> int:
    """How many ranks of the communicator ``handle`` run on this machine (MPI's view)."""
    node = handle.Split_type(mpi.COMM_TYPE_SHARED)
    try:
        return node.Get_size()
    finally:
        node.Free()


def _out_of_place(nbytes: int) -> bool:
    return OUT_OF_PLACE_BYTES[0] <= nbytes <= OUT_OF_PLACE_BYTES[1]


def _into(x: np.ndarray, finish):
    """A result's ``finish`` that also copies it into ``x`` (an in-place allreduce run out
    of place)."""
    def copy_back(out):
        np.copyto(x, out)
        return finish(x)
    return copy_back


def _describe(x: np.ndarray) -> str:
    return f"{x.dtype}{list(x.shape)}"


def _check_rank(r: int, size: int, what: str) -> None:
    if not 0 <= r < size:
        raise ValueError(f"{what}={r} is not a rank of a world of size {size}")


def _check_peer(r: int, me: int, size: int, what: str) -> None:
    _check_rank(r, size, what)
    if r == me and size > 1:   # (a blocking send to oneself would wait for its own recv)
        raise ValueError(f"{what}={r} is this process's own rank; send to another rank")


def _bytes(a: np.ndarray):
    """``a`` as raw bytes for MPI: moving data needs no MPI type for bfloat16 or bool."""
    return [a.reshape(-1).view(np.uint8), _BYTE[0]]


_BYTE = [None]   # MPI.BYTE once connected


def _reduction_buffer(x: np.ndarray):
    """(contiguous send array, its form for MPI, back-conversion of the result)."""
    return (np.ascontiguousarray(x), *_wire(x.dtype))


def _wire(dtype):
    """(an array's form for MPI, the result's back-conversion) for arrays of ``dtype``:
    bfloat16 travels as 16-bit words (reduced by :func:`_bfloat16_op`), bool as uint8."""
    if _is_bfloat16(dtype):
        return lambda a: [a.view(np.uint16), _UINT16[0]], _itself
    if dtype == np.bool_:
        return lambda a: a.view(np.uint8), _itself
    return _itself, _itself


def _itself(a):
    return a


_UINT16 = [None]   # MPI.UINT16_T once connected


def _is_bfloat16(dtype) -> bool:
    return dtype == bfloat16_np


def _mpi_op(mpi, op: str, dtype):
    op = str(op).upper()
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduce op {op!r}; use one of {REDUCE_OPS}")
    if op == "AVG" and dtype.kind in "iub":
        raise TypeError(f"ReduceOp.AVG needs a floating tensor, not {dtype}")
    if mpi is None:
        return None
    if dtype == np.bool_:   # or / and, as torch's sum / product of bools
        return {"SUM": mpi.MAX, "PRODUCT": mpi.MIN, "MAX": mpi.MAX, "MIN": mpi.MIN}[op]
    if _is_bfloat16(dtype):
        return _bfloat16_op(mpi, "SUM" if op == "AVG" else op, dtype)
    return {"SUM": mpi.SUM, "AVG": mpi.SUM, "PRODUCT": mpi.PROD, "MAX": mpi.MAX,
            "MIN": mpi.MIN}[op]


_BF16_OPS: dict = {}
_COMBINE = {"SUM": np.add, "PRODUCT": np.multiply, "MAX": np.maximum, "MIN": np.minimum}


def _bfloat16_op(mpi, op: str, dtype):
    """An MPI reduction over bfloat16 (MPI has no such type): each pair combined in
    float32 and rounded back, so the data travels at 2 bytes an element."""
    if op not in _BF16_OPS:
        combine = _COMBINE[op]

        def reduce(inbuf, inoutbuf, datatype):
            a, b = np.frombuffer(inbuf, dtype), np.frombuffer(inoutbuf, dtype)
            b[...] = combine(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
        _BF16_OPS[op] = mpi.Op.Create(reduce, commute=True)
    return _BF16_OPS[op]


def _finish(op: str, size: int, from_wire):
    if str(op).upper() != "AVG":
        return from_wire
    return lambda a: from_wire(np.divide(a, size, out=a, casting="unsafe"))


# -- the one communicator of this process -------------------------------------------------------
def connect(timeout: float | None = None) -> Communicator:
    """Initialise MPI (once per process) and return a communicator over all its ranks."""
    if timeout is None:
        timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    try:
        from mpi4py import MPI
    except ImportError as e:
        if any(int(os.environ.get(v, "1") or 1) > 1 for v in _LAUNCH_SIZE):
            raise ImportError(
                "dualgraph.distributed needs mpi4py to run several processes: "
                "pip install 'dualgraph[distributed]' (mpi4py and the mpich wheel)") from e
        return Communicator(None, timeout)
    _BYTE[0], _UINT16[0] = MPI.BYTE, MPI.UINT16_T
    comm = Communicator(MPI, timeout)
    if comm.size > 1:
        _fail_stop(comm)
    return comm


def _fail_stop(comm: Communicator) -> None:
    """An uncaught exception on one rank aborts the job (the other ranks would wait in
    their next operation until the deadline); a rank whose deadline expired aborts at exit
    too, since MPI's own finalisation would wait for the missing rank forever."""
    previous = sys.excepthook

    def abort_on_error(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        comm.abort(1)
    sys.excepthook = abort_on_error
    atexit.register(lambda: _failed[0] and comm.abort(1))
    # mpiexec (Hydra) signals SIGUSR1 to the other ranks when one dies, which would end
    # them silently; note it instead, and the wait under way fails at once with its error
    if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGUSR1, lambda number, frame: _peer_died.__setitem__(0, True))


_peer_died = [False]
_failed = [False]   # a deadline expired here (on any communicator): abort at exit
