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

import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor

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


def run_kept(loop, workers: int, entry: list, *args, rows: int | None = None,
             fixed: tuple = ()) -> None:
    """``loop(0, rows, *args, *fixed)`` (``rows`` default ``workers``: a loop that splits
    its items by worker) over ``workers`` threads (:func:`run_rows`); on one, through the
    compiled entry kept in the caller's list ``entry`` (filled at the first call): no
    type dispatch per call. For a caller fitted to its shapes, whose calls pass arguments
    of the same types every time, and ``fixed`` (its scratch arrays and geometry) the same
    values every time: those are written once into the job entry's block
    (:class:`Kept`)."""
    rows = workers if rows is None else rows
    if workers > 1:
        run_rows(loop, rows, *args, *fixed, threads=workers)
        return
    if not entry:
        entry.append(_kept(loop, rows, args, fixed))
    entry[0](rows, args)


def _kept(loop, rows: int, args: tuple, fixed: tuple):
    """The kept call ``call(rows, args)`` of ``loop`` for arguments of these types: a
    :class:`Kept` where it applies, else the compiled entry called with every argument."""
    every = (0, rows, *args, *fixed)
    if fixed and all(type(a) is np.ndarray for a in args) and native.enabled():
        job = loop.job_entry(*every)
        if native.address(job) is not None:
            return Kept(job, every, len(args))
    fn = loop.entry(*every)
    return lambda rows, args: fn(0, rows, *args, *fixed)


class Kept:
    """A loop's job entry (one int64: the address of a block of its arguments' words,
    ``native.job_words``) with the block kept between calls: the trailing fixed
    arguments' words are written once, and a call writes only its row count and its
    arrays' objects (``struct.pack_into``, one C call) before calling the entry with one
    argument. A ctypes call converts each argument in turn, about 0.1 us apiece: a fitted
    conv's entry of 29 arguments spent 3 us on them at every call, as long as the Python
    around it. The block holds the fixed arrays' addresses, so it keeps them alive; the
    other arrays live in the caller's frame during the call. A call at a time, as the
    caller's scratch arrays already require."""

    def __init__(self, job, every: tuple, count: int):
        self.job, self.fixed = job, every[2 + count:]
        self.words = np.array(native.job_words(every), np.int64)
        self.address = self.words.ctypes.data
        self.pack = struct.Struct("<" + "q" * (2 + count)).pack_into

    def __call__(self, rows: int, args: tuple) -> None:
        self.pack(self.words, 0, 0, rows, *map(id, args))
        self.job(self.address)


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
