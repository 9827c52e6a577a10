"""Running a compiled loop's jobs on OpenBLAS's own threads.

NumPy's OpenBLAS keeps a worker thread per extra core, and after every threaded GEMM that
worker polls for the next one for about 0.1 s (it yields the CPU between polls, but stays
runnable). A thread of our own started right after a GEMM, as a training step's optimiser
update is, shares that core with the polling worker and gains nothing: the SGD update of
W1 on two Python threads right after a matmul took 728 us against 687 us on one. Giving
the second half of the update to the polling worker itself instead takes it at once: the
same update then took 258 us against 518 us on one thread (and no worse when the worker
had gone to sleep: it is woken as for a GEMM).

OpenBLAS exports ``gotoblas_pthread(n, function, args, stride)``, the pthread-style entry
of its thread server: ``function(args + i * stride)`` for ``i < n``, job 0 on the calling
thread and the others on its workers, returning when all are done. A loop's job entry
(``build.entry``) is a C function ``void entry(int64)`` reading the loop's arguments from
a block of int64 words at that address, which is what that call expects, so
``threads.run_rows`` hands a loop's ranges of rows to OpenBLAS this way (the group
optimiser updates, ``batched.py``'s products and the row loops all go through it). Jobs
must not wait for each other.

Where no OpenBLAS with that entry is loaded (another BLAS, not Linux), or it runs one
thread (``OPENBLAS_NUM_THREADS=1``, a threadpoolctl limit), :func:`count` is 1 and callers
run their jobs one after another; ``DUALGRAPH_BLAS_THREADS=0`` does the same.
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache

import numpy as np

from . import threads

# the names NumPy's OpenBLAS builds give its thread count (scipy-openblas prefixes and
# suffixes every public symbol; the server's own entry keeps its plain name)
_THREAD_COUNT_NAMES = ("openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
                       "scipy_openblas_get_num_threads", "openblas_get_num_threads64_")


# its CBLAS sgemm with 64-bit integers (NumPy's own build: ``batched.py`` calls it)
_SGEMM_NAMES = ("scipy_cblas_sgemm64_", "cblas_sgemm64_")


@lru_cache(maxsize=None)
def _openblas():
    """``(gotoblas_pthread, get_num_threads, sgemm address or None)`` of the OpenBLAS this
    process has loaded, or None."""
    for path in _loaded_libraries():
        if "openblas" not in os.path.basename(path).lower():
            continue
        try:
            library = ctypes.CDLL(path)
            run = library.gotoblas_pthread
        except (OSError, AttributeError):
            continue
        threads = next((getattr(library, name) for name in _THREAD_COUNT_NAMES
                        if hasattr(library, name)), None)
        if threads is None:
            continue
        run.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        run.restype = ctypes.c_int
        threads.restype = ctypes.c_int
        sgemm = next((ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                      for name in _SGEMM_NAMES if hasattr(library, name)), None)
        return run, threads, sgemm
    return None


def sgemm_address() -> int | None:
    """The address of that OpenBLAS's ``cblas_sgemm`` with 64-bit integers, if it has one."""
    openblas = _openblas()
    return openblas[2] if openblas else None


def _loaded_libraries() -> list[str]:
    """The shared libraries mapped into this process (Linux's ``/proc/self/maps``; empty
    elsewhere). NumPy's ``linalg`` is imported first: it is what loads OpenBLAS."""
    import numpy.linalg  # noqa: F401  (NumPy's BLAS is loaded by then)
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(maxsplit=5)[5].strip() for line in maps
                     if len(line.split(maxsplit=5)) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if ".so" in os.path.basename(p))


def count() -> int:
    """How many jobs :func:`run` runs at once: OpenBLAS's current thread count, capped by
    the cores this process may use; 1 where jobs cannot be handed to OpenBLAS."""
    if os.environ.get("DUALGRAPH_BLAS_THREADS", "1") == "0":
        return 1
    openblas = _openblas()
    if openblas is None:
        return 1
    return max(1, min(openblas[1](), threads.thread_count()))


def run(address: int, blocks: np.ndarray) -> None:
    """``entry(block)`` for each row of the C-contiguous int64 array ``blocks`` at once,
    where ``address`` is the C entry ``void entry(int64)`` of a compiled loop: the first
    row on this thread, the others on OpenBLAS's workers (at most :func:`count` rows: the
    caller, ``threads.run_rows``, has checked). Returns when all are done; the GIL is
    released meanwhile, so the loop must not touch Python objects beyond reading arrays
    the caller keeps alive."""
    _openblas()[0](len(blocks), address, blocks.ctypes.data, blocks.strides[0])
