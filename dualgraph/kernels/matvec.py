"""Matrix-vector products (a batch-1 ``linear``) on two cores, with a helper thread that
spins between products (the ``"matvec"`` trick of ``tuning.py``, which decides whether).

OpenBLAS runs a GEMV on one thread, and handing half of one to a sleeping thread costs
more than the product here: waking a thread took 50-120 us on this machine, a 512 x 784
GEMV 27 us. So, as onnxruntime's and OpenMP's pools do, a helper thread, once woken, keeps
polling (in machine code, without the GIL) for the next product for about a millisecond
(``SPIN_POLLS``) before it sleeps again: a run of inferences keeps it awake, and a program
that stops calling gets its core back a millisecond later.

A product is posted on the helper's job board (int64 words in shared memory): its arrays'
addresses and sizes, then a ticket ``sequence << 32 | next chunk``. The caller and the
helper both claim chunks of ``CHUNK_ROWS`` rows by compare-and-swap on the ticket and
count the chunks they finish; the caller returns when all are counted. A helper that is
asleep simply claims nothing, so no product ever waits for it, and a helper that read a
finished job's fields fails its claim (the sequence moved on) and reads them again.

Each row is one dot product summed in one order (a row alone, or four rows at a time from
row 0 where rows are short: ``LONG_ROW``), so the result does not depend on which thread
ran which rows, nor on whether the helper was awake: every product of this shape gives the
same bits. Callers: the eager ``linear`` kernel and the code the compiler writes for it
(``ops/linalg.py``).
"""
from __future__ import annotations

import atexit
import math
import os
import threading
import time

import numpy as np

from . import MIN_ELEMENTS, enabled, helper, loop, tuning
from .memory import (add, clock_ns, compare_exchange, float32_array, load, pause, store,
                     yield_cpu)

# A product with fewer weights runs on the caller alone: claiming chunks would cost more
# than the helper saves (a 10 x 512 product takes ~1 us).
SHARE_MIN = 1 << 16
CHUNK_ROWS = 32          # a multiple of 4 (the rows a pass sums together)
# Polls of the board (with the CPU's spin hint) before the helper sleeps: ~1 ms here.
# A caller waiting for the helper's last chunks offers its core to the OS
# (``sched_yield``) every YIELD_POLLS polls.
SPIN_POLLS, YIELD_POLLS = 40_000, 64
# When the cores are oversubscribed (other programs, a busy host), sharing costs more
# than it saves: the helper is descheduled while it holds a chunk and the caller waits a
# time slice for it (a stall: waiting STALL_NS for the helper's last chunks, where the
# product alone takes ~30 us), or the helper, awake, gets too little CPU to take its share
# and only takes time from the caller. ``tuning.Backoff`` turns both into products run
# alone. (A stall is timed, not counted in polls: on a busy host each ``sched_yield`` of
# the wait may give the core away for a whole time slice.)
STALL_NS = 100_000
# From this many columns each row is summed alone, so the loop reads the weight as one
# sequential stream, which the hardware prefetcher follows; four rows a pass read four
# streams a row (a few hundred bytes to a few KB) long, too short for it to follow, and
# wait on memory wherever the weight is not in L2 (a model's weights, between calls): a
# 1024 x 1000 weight from memory took 0.25 ms four rows a pass, 0.17 one row (but one read
# again and again from L3, 1280 x 1000, 0.082 against 0.069: four streams keep more misses
# in flight). Below it a row alone is mostly the vector loop's scalar tail, and four rows
# (x read once for four) are faster.
LONG_ROW = 128
_FAST = {"reassoc", "nsz", "contract"}

# The board's words (8 bytes each). The ticket and the done count, which both threads
# write, sit on cache lines of their own; the job's fields on a third.
TICKET, DONE, SPINNING, HELPED = 0, 8, 16, 17
W, X, B, Y, ROWS, COLS, FLAGS, CHUNKS = range(24, 32)
WAITED = 32       # how long (ns) the caller waited for the helper's chunks, last product
STOP = 33         # set at exit: the helper leaves its loop (the board is freed after)
_BOARD_WORDS = 40


@helper(inline="always")
def _dot_rows(w, x, b, y, has_bias, relu, start, stop):
    """``y[i] = w[i] . x (+ b[i])``, then ``relu`` of it if asked, for rows ``start:stop``
    of ``w`` (flat, rows of ``x.size``): rows of ``LONG_ROW`` or more one by one (one
    stream through the weight), shorter ones four per pass, so each element of ``x`` is
    loaded once for four products (``start`` a multiple of 4, the leftover rows at the
    matrix's end one by one)."""
    n = x.size
    top = start if n >= LONG_ROW else start + (stop - start) // 4 * 4
    for i in range(start, top, 4):
        # (row views: indexing them by k >= 0 needs no negative-index check, which would
        # keep the loop from vectorising)
        w0, w1 = w[i * n:(i + 1) * n], w[(i + 1) * n:(i + 2) * n]
        w2, w3 = w[(i + 2) * n:(i + 3) * n], w[(i + 3) * n:(i + 4) * n]
        s0 = s1 = s2 = s3 = np.float32(0)
        for k in range(n):
            xk = x[k]
            s0 += w0[k] * xk
            s1 += w1[k] * xk
            s2 += w2[k] * xk
            s3 += w3[k] * xk
        y[i], y[i + 1], y[i + 2], y[i + 3] = s0, s1, s2, s3
    for i in range(top, stop):
        row = w[i * n:(i + 1) * n]
        total = np.float32(0)
        for k in range(n):
            total += row[k] * x[k]
        y[i] = total
    if has_bias:
        for i in range(start, stop):
            y[i] += b[i]
    if relu:   # (as np.maximum(y, 0): NaN and -0.0 stay)
        for i in range(start, stop):
            if y[i] < 0:
                y[i] = 0


@helper(inline="always")
def _flat(a):
    """``a`` (C-contiguous float32, any shape) as a 1-D array."""
    return float32_array(a.ctypes.data, a.size)


@loop(fastmath=_FAST)
def matvec_alone(w, x, b, y, flags):
    """The whole product ``y = w x (+ b)`` on this thread (``flags``: 1 adds ``b``, 2
    applies relu)."""
    _dot_rows(_flat(w), _flat(x), _flat(b), _flat(y), flags & 1 != 0, flags & 2 != 0, 0,
              y.size)


@helper(inline="always")
def _claim_chunks(board, sequence):
    """Run chunks of job ``sequence`` until none is left to claim; returns how many."""
    rows, cols = load(board + 8 * ROWS), load(board + 8 * COLS)
    w = float32_array(load(board + 8 * W), rows * cols)
    x = float32_array(load(board + 8 * X), cols)
    b = float32_array(load(board + 8 * B), rows)
    y = float32_array(load(board + 8 * Y), rows)
    flags, chunks = load(board + 8 * FLAGS), load(board + 8 * CHUNKS)
    done = 0
    while True:
        ticket = load(board + 8 * TICKET)
        chunk = ticket & 0xFFFFFFFF
        if ticket >> 32 != sequence or chunk >= chunks:
            return done
        if compare_exchange(board + 8 * TICKET, ticket, ticket + 1) == ticket:
            _dot_rows(w, x, b, y, flags & 1 != 0, flags & 2 != 0, chunk * CHUNK_ROWS,
                      min(rows, (chunk + 1) * CHUNK_ROWS))
            add(board + 8 * DONE, 1)
            done += 1


@loop(fastmath=_FAST)
def matvec_shared(board, w, x, b, y, flags):
    """Post the product ``y = w x (+ b)`` (``flags`` as :func:`matvec_alone`'s) on
    ``board``, run chunks of it, and return when every chunk is done (by this thread or
    the helper)."""
    address = board.ctypes.data
    rows, chunks = y.size, (y.size + CHUNK_ROWS - 1) // CHUNK_ROWS
    sequence = (load(address + 8 * TICKET) >> 32) + 1
    store(address + 8 * DONE, 0)
    store(address + 8 * W, w.ctypes.data)
    store(address + 8 * X, x.ctypes.data)
    store(address + 8 * B, b.ctypes.data)
    store(address + 8 * Y, y.ctypes.data)
    store(address + 8 * ROWS, rows)
    store(address + 8 * COLS, x.size)
    store(address + 8 * FLAGS, flags)
    store(address + 8 * CHUNKS, chunks)
    store(address + 8 * TICKET, sequence << 32)      # last: the job is open
    _claim_chunks(address, sequence)
    polls, start = 0, clock_ns()
    while load(address + 8 * DONE) < chunks:   # the helper's last chunks
        polls += 1
        pause()
        if polls % YIELD_POLLS == 0:
            yield_cpu()
    store(address + 8 * WAITED, clock_ns() - start if polls else 0)


@loop(fastmath=_FAST)
def spin(board, polls):
    """The helper: run chunks of every job posted on ``board`` until ``polls`` polls in a
    row found none (or ``board[STOP]`` is set); ``board[SPINNING]`` is 1 meanwhile,
    ``board[HELPED]`` counts the chunks it ran."""
    address = board.ctypes.data
    store(address + 8 * SPINNING, 1)
    seen = load(address + 8 * TICKET) >> 32
    idle = 0
    while idle < polls and load(address + 8 * STOP) == 0:
        sequence = load(address + 8 * TICKET) >> 32
        if sequence != seen:
            seen = sequence
            add(address + 8 * HELPED, _claim_chunks(address, sequence))
            idle = 0
        else:
            idle += 1
            pause()
    store(address + 8 * SPINNING, 0)


class _Helper:
    """The helper thread, its board and when to use it."""

    def __init__(self):
        self.board = np.zeros(_BOARD_WORDS, np.int64)
        self.wake = threading.Event()
        self.posting = threading.Lock()     # one caller posts at a time
        self.backoff = tuning.Backoff()
        self.thread = threading.Thread(target=self._run, name="dualgraph-matvec",
                                       daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            self.wake.wait()
            self.wake.clear()
            spin(self.board, SPIN_POLLS)

    def stop(self):
        """At exit, before the interpreter frees the board: out of the loop, and wait
        (a poll or a chunk: microseconds) until it has left."""
        self.board[STOP] = 1
        for _ in range(10_000):
            if not self.board[SPINNING]:
                return
            time.sleep(1e-5)


_helper: _Helper | None = None
_decided = (-1, False)    # (tuning.changes when decided, whether products share)


def _shared_helper() -> _Helper | None:
    """This process's helper, made at the first product it shares; None while the
    ``"matvec"`` trick is off or the process may use one core (``tuning.cores``, read at
    the first product and again after each ``dg.set_num_threads`` or ``dg.tune_cpu``)."""
    global _helper, _decided
    if "matvec" not in tuning.active:
        return None
    if _decided[0] != tuning.changes:
        _decided = (tuning.changes, tuning.matvec_helper())
    if not _decided[1]:
        return None
    if _helper is None:
        _helper = _Helper()
    return _helper


def _forget_helper():
    """In a forked child: the parent's helper thread is not there; make a new one."""
    global _helper, _decided
    _helper, _decided = None, (-1, False)


def _stop_helper():
    if _helper is not None:
        _helper.stop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helper)
atexit.register(_stop_helper)


def wanted(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> bool:
    """Whether :func:`matvec` should compute this ``linear``: float32 operands of
    :func:`product_shapes`, Numba available. Eager asks this and the compiler asks
    :func:`product_shapes` of the same shapes, so a product runs the same loop (and gives
    the same bits) either way. A weight not stored row-major (a frozen weight stored
    (K, N), ``passes/linears.py``'s ``weights_kn``, where the rows are symbolic) is left to
    NumPy's GEMV, which reads it as it is (as fast on one thread): the loop would copy it
    at every call."""
    return (product_shapes(x.shape, w.shape, None if bias is None else bias.shape)
            and (bias is None or bias.dtype == np.float32) and w.flags.c_contiguous
            and enabled(w, x))


def product_shapes(x_shape: tuple, w_shape: tuple, bias_shape: tuple | None) -> bool:
    """Shapes of a ``linear`` this module computes: ``x`` one row (any leading dims of size
    1), ``w`` 2-D of ``x``'s width with at least ``MIN_ELEMENTS`` entries (below that
    NumPy's call costs as little), a bias (if any) one per output."""
    return (len(w_shape) == 2 and x_shape[-1] == w_shape[1]
            and all(isinstance(d, int) for d in (*x_shape, *w_shape))   # (not symbolic)
            and math.prod(x_shape) == x_shape[-1] and w_shape[0] * w_shape[1] >= MIN_ELEMENTS
            and (bias_shape is None or tuple(bias_shape) == tuple(w_shape[:1])))


_NO_BIAS = np.zeros(1, np.float32)   # (passed, never read, when there is no bias)


class Plan:
    """One kind of product (the rank of ``x``, ``w``'s shape, bias or not, relu or not),
    worked out once: the result's shape, the loops' flags, whether it is shared, its chunk
    count and the compiled loops (looked up at its first call). The compiler binds one per
    batch-1 ``linear`` in the code it writes; :func:`matvec` keeps one per kind. Calling
    it computes the product for float32 operands of that kind (any layout)."""

    def __init__(self, x_ndim: int, rows: int, cols: int, bias: bool, relu: bool):
        self.shape = (1,) * (x_ndim - 1) + (rows,)
        self.flags = (1 if bias else 0) | (2 if relu else 0)
        self.share = rows * cols >= SHARE_MIN
        self.chunks = -(-rows // CHUNK_ROWS)
        self._alone = self._shared = None    # the compiled loops

    def __call__(self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                 out=None):
        """``out``: a C-contiguous float32 array of the result's shape to write it into, or
        None (an op's ``fills_out`` form)."""
        if not (x.flags.c_contiguous and w.flags.c_contiguous
                and (bias is None or bias.flags.c_contiguous)):
            x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
            bias = None if bias is None else np.ascontiguousarray(bias)
        y = np.empty(self.shape, np.float32) if out is None else out
        b = _NO_BIAS if bias is None else bias
        helper = _shared_helper() if self.share else None
        if helper is None or not self._with_helper(helper, w, x, b, y):
            if self._alone is None:
                self._alone = matvec_alone.entry(w, x, b, y, self.flags)
            self._alone(w, x, b, y, self.flags)
        return y

    def _with_helper(self, helper: _Helper, w, x, b, y) -> bool:
        """Compute the product with the helper; False (nothing done) while backing off or
        while another thread posts one."""
        if not helper.posting.acquire(blocking=False):
            return False
        try:
            if not helper.backoff.share():
                return False
            board = helper.board
            awake = board[SPINNING] != 0
            if not awake:
                helper.wake.set()
            if self._shared is None:
                self._shared = matvec_shared.entry(board, w, x, b, y, self.flags)
            self._shared(board, w, x, b, y, self.flags)
            helper.backoff.settle(board[WAITED] > STALL_NS, self.chunks, awake,
                                  board[HELPED])
            return True
        finally:
            helper.posting.release()


_plans: dict[tuple, Plan] = {}


def matvec(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
           relu: bool = False) -> np.ndarray:
    """``x @ w.T (+ bias)`` for a one-row float32 ``x`` (see :func:`wanted`), shaped as
    ``linear``'s result, and ``relu`` of it when asked (the compiler's epilogue of a
    linear whose only use is a relu); on two threads when the product is big enough."""
    key = (x.ndim, w.shape, bias is not None, relu)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = Plan(x.ndim, *w.shape, bias is not None, relu)
    return plan(x, w, bias)
