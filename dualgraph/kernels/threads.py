"""Sharing a loop's rows among threads: OpenBLAS's workers where they can take them
(``blas_threads.py``), else a small pool of Python threads.

Big loops (``PARALLEL_MIN`` elements or more, from ``SHARE_MIN`` on where OpenBLAS's workers
take the rows: :func:`threads_for`) run their rows on several cores. Not with Numba's
``parallel=True``: its parfor lowering made a fused LayerNorm compile about a second
longer, and its OpenMP workers spin after a parallel region, starving OpenBLAS's threads
in the next matmul. Every loop is compiled serial over a range of rows,
``loop(start, stop, *args)``, with ``nogil=True``, and :func:`run_rows` runs contiguous
ranges at once: as job entries on OpenBLAS's own threads (so no thread of ours competes
with its worker, which polls for ~0.1 s after every GEMM), or, for a plain function or
without native entries, on a pool of Python threads whose idle workers sleep on a queue.
Each range is the same loop over its own rows, so the bits do not depend on the split.
The thread count is ``tuning.cores()``: the cores this process may use, or
``DUALGRAPH_NUM_THREADS``; whether OpenBLAS's workers take ranges is ``tuning.py``'s call.
"""
from __future__ import annotations

import ctypes
import os
import time
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter

import numpy as np

from . import PARALLEL_MIN, blas_threads, native, thread_use, tuning

_pool: ThreadPoolExecutor | None = None
_pool_workers = 0
_pool_pid = 0      # a forked child has the pool object but not its threads: it makes its own


# From this many elements on a loop shares its rows where OpenBLAS's workers take them (a
# hand-off of microseconds; waking a Python thread costs 50-120 us: ``PARALLEL_MIN``).
SHARE_MIN = 1 << 17


def threads_for(size: int) -> int | None:
    """``run_rows``'s ``threads`` for a loop over ``size`` elements: every core (None) from
    ``PARALLEL_MIN`` elements on, and from ``SHARE_MIN`` on where OpenBLAS's workers take
    the rows (native entries on); else 1."""
    if size >= PARALLEL_MIN or (size >= SHARE_MIN and blas_threads.count() > 1
                                and native.enabled()):
        return None
    return 1


def run_rows(loop, rows: int, *args, threads: int | None = None) -> None:
    """``loop(start, stop, *args)`` for contiguous ranges covering ``range(rows)``, one
    range per thread (``threads``, default ``tuning.cores()``; 1 runs it here, in one
    call). Returns once every range is done; an exception from any range is raised here,
    after the others have finished (they write into the same outputs). While
    ``thread_use.recording``, each call is noted with the threads it ran on."""
    if thread_use.calls is None:
        _run_rows(loop, rows, args, threads)
        return
    start = time.perf_counter_ns()
    ran = _run_rows(loop, rows, args, threads)
    thread_use.note(loop, min(threads or tuning.cores(), rows), ran, start)


def run_kept(loop, workers: int, entry: list, *args, rows: int | None = None) -> None:
    """``loop(0, rows, *args)`` (``rows`` default ``workers``: a loop that splits its
    items by worker) over ``workers`` threads (:func:`run_rows`); on one, through the
    :class:`Kept` call kept in the caller's list ``entry`` (filled at the first call): no
    type dispatch per call, and only the arrays' words written. For a caller fitted to its
    shapes, whose calls pass arguments of the same types every time, one call at a time
    (``codegen.python.one_call_at_a_time``)."""
    rows = workers if rows is None else rows
    if workers > 1:
        run_rows(loop, rows, *args, threads=workers)
        return
    if not entry:
        entry.append(Kept(loop, rows, args))
    entry[0](rows, args)


class Kept:
    """A fitted caller's loop on one thread through its job entry (one int64: the address
    of a block of the arguments' words, ``native.job_words``), the block kept between
    calls: a call writes the ``id()`` of each array it passes into the block and makes a
    ctypes call of one argument, where the plain entry converted every argument at every
    call (3.3-8 us for a trivial loop of 27 arguments, by the load, against ~0.5 us; a
    fitted conv's call 2.5 us less). The scalars' words are written again only where a call's
    scalars differ from the last's (a comparison of one tuple). Without a job entry (no
    native entries, arguments Numba's dispatcher takes) the loop's own entry runs."""

    def __init__(self, loop, rows: int, args: tuple):
        self.arrays = tuple(i for i, a in enumerate(args) if type(a) is np.ndarray)
        others = tuple(i for i, a in enumerate(args) if type(a) is not np.ndarray)
        get = itemgetter(*others) if others else None
        self.scalars = (get if len(others) > 1 else (lambda a: (get(a),)) if others
                        else (lambda a: ()))
        job = getattr(loop, "job_address", None)
        address = job(0, rows, *args) if job is not None else None
        self.plain = loop.entry(0, rows, *args) if address is None else None
        self.block = (ctypes.c_int64 * (len(args) + 2))()
        self.at = ctypes.addressof(self.block)
        self.call = None if address is None else ctypes.CFUNCTYPE(None, ctypes.c_int64)(address)
        self.rows, self.last = None, None

    def __call__(self, rows: int, args: tuple) -> None:
        if self.call is None:
            self.plain(0, rows, *args)
            return
        block, scalars = self.block, self.scalars(args)
        if rows != self.rows or scalars != self.last:
            block[:] = [0, rows, *native.job_words(args)]
            self.rows, self.last = rows, scalars
        for i in self.arrays:
            block[i + 2] = id(args[i])
        self.call(self.at)


def _run_rows(loop, rows: int, args: tuple, threads: int | None) -> int:
    """:func:`run_rows`; returns how many threads the rows ran on."""
    count = min(threads or tuning.cores(), rows)
    if count <= 1:
        loop(0, rows, *args)
        return 1
    job = getattr(loop, "job_address", None)    # (a compiled Loop; a function takes the pool)
    if job is not None and count <= blas_threads.count():   # OpenBLAS's workers
        address = job(0, rows, *args)
        if address is not None:
            words = native.job_words(args)
            blocks = np.array([[rows * i // count, rows * (i + 1) // count, *words]
                               for i in range(count)], np.int64)
            if not blas_threads.run(address, blocks):
                loop(0, rows, *args)     # (backing off: the cores are oversubscribed)
                return 1
            return count
    global _pool, _pool_workers, _pool_pid
    if _pool_workers < count - 1 or _pool_pid != os.getpid():
        if _pool is not None and _pool_pid == os.getpid():
            _pool.shutdown(wait=False)   # (a bigger pool replaces it: its idle threads exit)
        _pool = ThreadPoolExecutor(count - 1, thread_name_prefix="dualgraph-rows")
        _pool_workers, _pool_pid = count - 1, os.getpid()
    bounds = [rows * i // count for i in range(count + 1)]
    others = [_pool.submit(loop, bounds[i], bounds[i + 1], *args) for i in range(1, count)]
    try:
        loop(bounds[0], bounds[1], *args)
    finally:
        errors = [f.exception() for f in others]
    for error in errors:
        if error is not None:
            raise error
    return count


def fitted_rows(loop):
    """``call(rows, *args)``: ``loop`` over ``range(rows)`` for a node fitted to its static
    shapes (codegen's ``specialise``): shared among threads as :func:`run_rows` does where
    ``threads_for`` says so, else called here through the loop's compiled entry, looked up
    at the first call (a fitted node's argument types do not change), so a call does no
    type dispatch."""
    entry = []

    def call(rows: int, *args) -> None:
        threads = threads_for(rows * args[0].shape[-1])
        if threads != 1:
            run_rows(loop, rows, *args, threads=threads)
            return
        if not entry:
            entry.append(loop.entry(0, rows, *args))
        if thread_use.calls is None:
            entry[0](0, rows, *args)
            return
        start = time.perf_counter_ns()
        entry[0](0, rows, *args)
        thread_use.note(loop, 1, 1, start)
    return call
