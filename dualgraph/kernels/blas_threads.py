"""Running a compiled loop's jobs on OpenBLAS's own threads (the ``"blas"`` trick of
``tuning.py``, which decides whether and how many).

NumPy's OpenBLAS keeps a worker thread per extra core, and after every threaded GEMM that
worker polls for the next one for about 0.1 s (it yields the CPU between polls, but stays
runnable). A thread of our own started right after a GEMM, as a training step's optimiser
update is, shares that core with the polling worker and gains little; giving the second
half of the work to the polling worker itself runs both halves at once (and when the
worker has gone to sleep, it is woken as for a GEMM).

OpenBLAS exports ``gotoblas_pthread(n, function, args, stride)``, the pthread-style entry
of its thread server: ``function(args + i * stride)`` for ``i < n``, job 0 on the calling
thread and the others on its workers, returning when all are done. A loop's job entry
(``build.entry``) is a C function ``void entry(int64)`` reading the loop's arguments from
a block of int64 words at that address, which is what that call expects, so
``threads.run_rows`` hands a loop's ranges of rows to OpenBLAS this way (the group
optimiser updates, ``batched.py``'s products and the row loops all go through it). Jobs
must not wait for each other, nor hand work to OpenBLAS themselves.

Each job runs through :func:`relay`, which keeps the call's first start, first finish and
last finish. A call whose last job finished later after the first finish than that first
job had taken is a stall: the caller waited longer for the others than running their
ranges itself would have taken, because a worker was busy elsewhere or not scheduled
(other processes on these cores, another engine's threads polling for work, other Python
threads handing it work), whether it started late or was preempted midway. Each call's
time saved and time waited feed ``tuning.Backoff.weigh`` (a stall of a time slice now and
then is paid for by the calls around it; stalls that cost more than the sharing saves are
not); while it backs off :func:`run` hands nothing over and the caller runs the whole
range itself. (OpenBLAS's own threaded GEMMs wait for its worker the same
way, and are left as they are: OpenBLAS gives different bits on one thread and two for
most shapes, so running them alone while backing off would make results depend on the
host's load.)
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from . import loop, tuning
from .memory import call, clock_ns, compare_exchange, load

# A relay block: the job's entry, its block, the call's board, a spare word; the board
# (one more row): the first start, the first finish and the last finish (ns), a spare.
_RELAY_WORDS = 4
FIRST_START, FIRST_END, LAST_END = range(3)


@loop
def relay(job, block, board):
    """Run the job entry ``job`` on its ``block``, keeping the times of the call's jobs on
    the words at ``board`` (see ``_RELAY_WORDS``): the first start, the first finish, the
    last finish."""
    compare_exchange(board + 8 * FIRST_START, 0, clock_ns())
    call(job, block)
    end = clock_ns()
    compare_exchange(board + 8 * FIRST_END, 0, end)
    last = load(board + 8 * LAST_END)
    while last < end:   # (the later of the finishes, whichever job stores first)
        seen = compare_exchange(board + 8 * LAST_END, last, end)
        if seen == last:
            break
        last = seen


def balance(board: np.ndarray) -> tuple[int, int]:
    """``(saved, waited)`` ns of a call whose relays kept ``board``: the first job's time
    (about what running the others' ranges on the caller would have added) and the wait
    after it for the last. A stall where ``waited > saved``: running them on the caller
    would have been quicker (a worker that started late, or was preempted midway)."""
    start, first, last = int(board[FIRST_START]), int(board[FIRST_END]), int(board[LAST_END])
    return first - start, last - first


def count() -> int:
    """How many jobs :func:`run` runs at once (``tuning.blas_jobs``): OpenBLAS's current
    thread count capped by the cores this process may use; 1 where jobs cannot be handed
    to OpenBLAS or the ``"blas"`` trick is off."""
    return tuning.blas_jobs()


def sgemm_address() -> int | None:
    """The address of that OpenBLAS's ``cblas_sgemm`` with 64-bit integers, if it has one."""
    found = tuning.openblas()
    return found.sgemm if found else None


@lru_cache(maxsize=None)
def sgemm_function():
    """That ``cblas_sgemm`` as a ctypes function (ctypes releases the GIL around it), or
    None where NumPy's BLAS has none."""
    address = sgemm_address()
    if address is None:
        return None
    i32, i64, f32, ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    return ctypes.CFUNCTYPE(None, i32, i32, i32, i64, i64, i64, f32, ptr, i64, ptr, i64, f32,
                            ptr, i64)(address)


backoff = tuning.Backoff()     # (one per process: every thread's calls feed the same worker)
_relay_address: list[int] = []


def run(address: int, blocks: np.ndarray) -> bool:
    """``entry(block)`` for each row of the C-contiguous int64 array ``blocks`` at once,
    where ``address`` is the C entry ``void entry(int64)`` of a compiled loop: the first
    row on this thread, the others on OpenBLAS's workers (at most :func:`count` rows: the
    caller, ``threads.run_rows``, has checked). Returns True when all are done; False,
    having done nothing, while backing off (the caller runs the work itself). The GIL is
    released meanwhile, so the loop must not touch Python objects beyond reading arrays
    the caller keeps alive."""
    if not _relay_address:
        _relay_address.append(relay.job_address(0, 0, 0))
    if _relay_address[0] is None or not backoff.share():   # (no native relay: never)
        return False
    jobs = len(blocks)
    relays = np.zeros((jobs + 1, _RELAY_WORDS), np.int64)    # the last row: the board
    board = relays.ctypes.data + jobs * relays.strides[0]
    relays[:jobs, 0] = address
    relays[:jobs, 1] = blocks.ctypes.data + blocks.strides[0] * np.arange(jobs)
    relays[:jobs, 2] = board
    tuning.openblas().run(jobs, _relay_address[0], relays.ctypes.data, relays.strides[0])
    backoff.weigh(*balance(relays[jobs]))
    return True
