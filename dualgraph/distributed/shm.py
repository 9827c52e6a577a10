"""Allreduce through shared memory, for a communicator whose ranks all run on one machine.

An MPI-3 shared-memory window (``MPI_Win_allocate_shared``) gives every rank a region that
all ranks of the machine can read and write. A message to reduce lies at the same offset
of every rank's region; each rank sums its share of it (1/n of the elements, in cache-line
aligned slices) over all ranks' regions and writes the sum into every region
(reduce-scatter and all-gather by direct reads and writes, vectorised by NumPy): no MPI
message, no copy into MPI's own buffers. Each element is computed by one rank only, so the
result is bit-identical on all ranks.

Synchronisation is two counters at the head of each rank's region, each written by its
rank only: ``arrived`` (the number of operations whose input this rank has put in its
region) and ``reduced`` (the number whose share it has summed and written out). Operation
``s`` of a window may be summed once every rank's ``arrived`` is at least ``s``, and is
complete once every rank's ``reduced`` is; then no rank touches that message in any region
again, so its memory may be reused. ``Win.Sync`` (a memory barrier; the window is in one
``Lock_all`` epoch for its life) orders the data before the counter that publishes it, as
MPI's shared-memory model asks. Operations of a window complete in the order they started
(every rank starts them in one order, as MPI's collectives), so the counters only grow.

Nothing moves by itself: :meth:`Window.advance` does what can be done now without waiting,
and is called where MPI's ``Test`` is called (a wait's polls, data parallelism's hooks
during the backward). Waits poll against the communicator's deadline as MPI's do: a rank
that died or hangs is named in the ``DeadlineError`` (here the counters say exactly which).
"""
from __future__ import annotations

import collections
import math
import sys
import weakref

import numpy as np

LINE = 64           # bytes of a cache line: the counters and every rank's share start on one
HEADER = 2 * LINE   # a region's head: its rank's counters, a line each
WHOLE_BYTES = 256 << 10   # a message up to this is summed whole by every rank (see all_reduce)
SPINS = 512         # advance() calls of a blocking allreduce before it waits with the deadline
COMBINE = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MAX": np.maximum,
           "MIN": np.minimum}   # (on bools: add is or, multiply is and, as MPI's path)

_WINDOWS: "weakref.WeakSet[Window]" = weakref.WeakSet()   # every open window: advance_all


def supports(dtype: np.dtype) -> bool:
    """Whether NumPy's ufuncs reduce ``dtype`` as MPI does (bfloat16 goes by MPI)."""
    return dtype.kind in "biuf" and dtype.isnative


def advance_all() -> None:
    """Move every window's operations forward (a wait on one communicator must not starve
    a peer that waits on another: it may need this rank's share first)."""
    for window in list(_WINDOWS):
        if window.queue:
            window.advance()


class Window:
    """One shared-memory window over a communicator's ranks: each rank's region of
    ``nbytes`` of data (after its counters), views of which hold the messages reduced
    through it (:meth:`arrays`), and the operations started on it, oldest first."""

    def __init__(self, comm, nbytes: int, fence):
        """``fence()``: a barrier of ``comm``'s ranks against the deadline (before the
        allocation, which MPI does not bound in time, and after the counters are zero)."""
        mpi = comm.mpi
        fence()
        self.comm, self.rank, self.nbytes = comm, comm.rank, nbytes
        self.win = mpi.Win.Allocate_shared(HEADER + nbytes, 1, comm=comm.handle)
        self.win.Lock_all(mpi.MODE_NOCHECK)   # for the window's life: Sync orders memory
        self.regions = [np.frombuffer(self.win.Shared_query(r)[0], np.uint8)
                        for r in range(comm.size)]
        # counters as Python ints through memoryviews: a read costs 0.1 us, a NumPy one 0.6
        self.arrived = [memoryview(r[:8]).cast("q") for r in self.regions]
        self.reduced = [memoryview(r[LINE:LINE + 8]).cast("q") for r in self.regions]
        self.others = [r for r in range(comm.size) if r != self.rank]
        self.regions[self.rank].fill(0)   # (counters zero; the pages mapped now, not in a step)
        self.win.Sync()
        fence()   # every rank's counters are zero before any is read
        self.started = 0        # operations started on this window
        self.queue: collections.deque = collections.deque()   # started, not complete
        small = min(nbytes, 2 * WHOLE_BYTES)
        self.rings = {True: _Ring(0, small), False: _Ring(small, nbytes)}   # copy_in's
        self._views: dict = {}
        self._placing = None
        self._own = self._holders()   # references to the regions the window itself holds
        _WINDOWS.add(self)

    def _holders(self) -> list:
        return [sys.getrefcount(r) for r in self.regions]

    def arrays(self, offset: int, shape: tuple, dtype) -> list:
        """Every rank's array of ``shape`` and ``dtype`` at ``offset`` bytes into its data
        (``offset`` a multiple of ``LINE``), as a list indexed by rank."""
        dtype = np.dtype(dtype)
        lo = HEADER + offset
        hi = lo + math.prod(shape) * dtype.itemsize
        if offset % LINE or hi > HEADER + self.nbytes:
            raise ValueError(f"shared window: {hi - lo} bytes at offset {offset} do not fit "
                             f"its {self.nbytes} (or the offset is not {LINE}-aligned)")
        return [r[lo:hi].view(dtype).reshape(shape) for r in self.regions]

    def all_reduce(self, arrays: list, op: str, label: str, number: int, result=None,
                   finish=None, whole: bool = False) -> "Reduction":
        """Start the allreduce of the message ``arrays`` (:meth:`arrays`; this rank's input
        already in its own): afterwards each of them holds the reduction, or (``whole``)
        only ``result``, where each rank sums the whole message itself, in rank order
        (bit-identical everywhere: one synchronisation, for small messages). ``wait()``
        returns ``finish(result)`` (``result``: this rank's array by default).

        A ``result`` that is not this rank's array, where ranks sum shares: an array like
        it, or a list of C-contiguous arrays whose sizes add up to its (a data-parallel
        bucket's gradients), receives the reduction instead: this rank's share is summed
        straight into it (and into the other ranks' arrays), and ``wait()`` copies the
        other shares into it from this rank's array: half a pass over the message fewer
        (for two ranks) than a copy out after the reduction."""
        mine = arrays[self.rank]
        self.started += 1
        into = rest = None
        if whole:
            shares = arrays
        else:
            flat = [a.reshape(-1) for a in arrays]
            n, size = flat[0].size, len(flat)
            align = max(1, LINE // flat[0].itemsize)
            share = -(-(-(-n // size)) // align) * align   # ceil(n / size), whole lines
            lo, hi = min(self.rank * share, n), min((self.rank + 1) * share, n)
            shares = [a[lo:hi] for a in flat]
            if result is not None and result is not mine:
                pieces = result if type(result) is list else [result]
                into = [(out, a - lo, b - lo) for out, a, b in _segments(pieces, lo, hi)]
                rest = [(out, flat[self.rank][a:b]) for out, a, b in
                        _segments(pieces, 0, lo) + _segments(pieces, hi, n)]
        reduction = Reduction(self, self.started, shares, COMBINE[op], label, mine, number,
                              mine if result is None else result, finish, whole, into, rest)
        self.win.Sync()   # this rank's input is in memory before the counter says so
        self.arrived[self.rank][0] = self.started
        self.queue.append(reduction)
        return reduction

    def advance(self) -> None:
        """Do what the operations in flight allow now, in order, without waiting."""
        queue, me = self.queue, self.rank
        while queue:
            op = queue[0]
            if not op.summed:
                if self.behind(self.arrived, op.seq):
                    return
                self.win.Sync()   # (the peers' inputs are read after their counters)
                op.sum(me, self.others)
                self.win.Sync()
                self.reduced[me][0] = op.seq
                op.summed = True
                if op.whole:   # (its result is this rank's own: no one else writes it)
                    op.done = True
                    queue.popleft()
                    continue
            if self.behind(self.reduced, op.seq):
                return
            self.win.Sync()
            op.done = True
            queue.popleft()

    def behind(self, counters: list, seq: int) -> bool:
        """Whether a rank's ``counters`` has not reached ``seq`` (the poll: no list)."""
        for r in self.others:
            if counters[r][0] < seq:
                return True
        return False

    def lagging(self, counters: list, seq: int) -> list:
        """The ranks whose ``counters`` have not reached ``seq`` (empty: none)."""
        return [r for r in self.others if counters[r][0] < seq]

    # -- messages that live elsewhere: copied into rings over the window's data ----------
    def copy_in(self, x: np.ndarray, whole: bool) -> list:
        """Every rank's array for a message like ``x`` at the next place of a ring (one
        for messages summed ``whole``, small enough to stay in the caches, one for the
        others), ``x`` copied into this rank's. Operations that still use that place are
        waited for first (see :meth:`placed`); places follow from the sizes alone, which
        every rank sees in one order, so all agree on them."""
        ring = self.rings[whole]
        live = ring.live
        while live and live[0][0].free():
            live.popleft()
        nbytes = -(-x.nbytes // LINE) * LINE
        if ring.pos + nbytes > ring.end:
            ring.pos = ring.start
        lo = ring.pos
        ring.pos = hi = lo + nbytes
        for op, start, end in list(live):
            if start < hi and lo < end:
                op.release()
                live.remove((op, start, end))
        key = (lo, x.shape, x.dtype.num)   # (the number: a dtype hashes slowly)
        arrays = self._views.get(key)
        if arrays is None:
            if len(self._views) > 64:
                self._views.clear()
            arrays = self._views[key] = self.arrays(lo, x.shape, x.dtype)
        np.copyto(arrays[self.rank], x)
        self._placing = (live, lo, hi)
        return arrays

    def placed(self, op: "Reduction") -> "Reduction":
        """Note that ``op`` uses the place :meth:`copy_in` gave last (a ``whole`` one, or
        one whose ``finish`` copies the result out: the place is reused once it ran)."""
        live, lo, hi = self._placing
        live.append((op, lo, hi))
        return op

    def unused(self) -> bool:
        """Whether no operation is in flight and no array outside the window views its
        memory any more (a live ``DistributedDataParallel``'s buckets, a ``.grad`` view of
        one: every view of a region holds a reference to it)."""
        if self.queue:
            return False
        self._views.clear()
        for ring in self.rings.values():
            ring.live.clear()
        return self._holders() == self._own

    def close(self, free: bool = False) -> None:
        """Forget the window; ``free`` (every rank at once, only where :meth:`unused` on
        every rank) also gives its memory back to MPI. A window not freed stays mapped
        until MPI finalises: arrays of it may still be read."""
        _WINDOWS.discard(self)
        self.queue.clear()
        if free:
            self.regions, self.arrived, self.reduced = [], [], []
            self.win.Unlock_all()
            self.win.Free()


class Reduction:
    """An allreduce through a :class:`Window`, started: ``test()`` moves it (and the ones
    before it) forward without waiting; ``wait()`` polls against the deadline, then
    returns ``finish(result)``. The attributes an MPI operation's ``Pending`` has, so the
    communicator's waits and deadline errors take either."""

    __slots__ = ("window", "seq", "shares", "combine", "label", "array", "number", "result",
                 "finish", "whole", "into", "rest", "summed", "done", "started")

    def __init__(self, window, seq, shares, combine, label, array, number, result, finish,
                 whole, into=None, rest=None):
        self.window, self.seq, self.shares, self.combine = window, seq, shares, combine
        self.label, self.array, self.number = label, array, number
        self.result, self.finish, self.whole = result, finish, whole
        # a result of its own (Window.all_reduce): where this rank's share is summed into,
        # (array, first, end) of the share; and the other shares' (array, part of this
        # rank's message) that wait() copies into it
        self.into, self.rest = into, rest
        self.summed = self.done = False
        self.started = None

    def sum(self, me: int, others: list) -> None:
        """This rank's share: the reduction over all ranks' inputs, written into all (or,
        ``whole``, all of it into ``result``, in rank order)."""
        if self.whole:
            shares, out, combine = self.shares, self.result, self.combine
            combine(shares[0], shares[1], out=out)
            for a in shares[2:]:
                combine(out, a, out=out)
            return
        mine = self.shares[me]
        if not mine.size:
            return
        if self.into is None:
            for r in others:
                self.combine(mine, self.shares[r], out=mine)
            for r in others:
                np.copyto(self.shares[r], mine)
            return
        for out, a, b in self.into:
            self.combine(mine[a:b], self.shares[others[0]][a:b], out=out)
            for r in others[1:]:
                self.combine(out, self.shares[r][a:b], out=out)
            for r in others:
                np.copyto(self.shares[r][a:b], out)

    @property
    def what(self) -> str:
        a = self.array   # (formatted only for an error: it costs more than a small message)
        return f"{self.label} of {a.dtype}{list(a.shape)} (operation #{self.number})"

    @property
    def peers(self) -> list:
        """The ranks this operation waits for now (None: not known, any other rank)."""
        w = self.window
        return w.lagging(w.reduced if self.summed else w.arrived, self.seq) or None

    def test(self) -> bool:
        if not self.done:
            self.window.advance()
        return self.done

    def free(self) -> bool:
        """Whether no rank will read or write this message's place any more: waited for
        (the result copied out), or, ``whole``, summed by every rank."""
        w = self.window
        if self.whole:
            return self.done and not w.behind(w.reduced, self.seq)
        return self.done and self.finish is None and self.rest is None

    def release(self) -> None:
        """Wait (against the deadline) until :meth:`free`."""
        self.wait()
        if not self.free():
            self.window.comm.wait_all([_Released(self)])

    def copy_rest(self) -> None:
        """The shares the other ranks summed, from this rank's array into the result."""
        for out, part in self.rest:
            np.copyto(out, part)
        self.rest = None

    def wait(self):
        if not self.done:
            for _ in range(SPINS):
                self.window.advance()
                if self.done:
                    break
            else:
                self.window.comm.wait_all([self])
        if self.rest is not None:
            self.copy_rest()
        if self.finish is not None:
            self.result, self.finish = self.finish(self.result), None
        return self.result


def _segments(pieces: list, lo: int, hi: int) -> list:
    """(a flat view of a piece, first, end) for each part of ``pieces`` (arrays laid end to
    end) that lies in elements ``lo`` to ``hi`` of them."""
    found, start = [], 0
    for piece in pieces:
        end = start + piece.size
        if start < hi and lo < end:
            a, b = max(lo, start), min(hi, end)
            found.append((piece.reshape(-1)[a - start:b - start], a, b))
        start = end
    return found


class _Released:
    """A wait until every rank has summed a ``whole`` :class:`Reduction` (read the inputs
    in its place), for ``wait_all``."""

    def __init__(self, op: Reduction):
        self.op, self.done, self.started = op, False, None

    @property
    def what(self) -> str:
        return f"{self.op.what} (its reading by every rank)"

    @property
    def peers(self) -> list | None:
        w = self.op.window
        return w.lagging(w.reduced, self.op.seq) or None

    def test(self) -> bool:
        self.op.window.advance()
        self.done = self.op.free()
        return self.done


class _Ring:
    """Bytes ``start`` to ``end`` of a window's data, used in turn by :meth:`Window.copy_in`
    from ``pos``; ``live`` holds (operation, its first byte, its end) in order."""

    def __init__(self, start: int, end: int):
        self.start, self.end, self.pos = start, end, start
        self.live: collections.deque = collections.deque()
