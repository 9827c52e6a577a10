"""CPU tuning: one module, one switch.

Every decision dualgraph makes about this machine beyond computing the right numbers is
taken here: how many cores its loops may use, whether a loop's rows go to OpenBLAS's own
worker threads, whether a batch-1 product shares its rows with a helper thread that spins,
and whether glibc's allocator keeps freed memory. The modules that do the work
(``blas_threads.py``, ``matvec.py``, ``threads.py``) ask this one; none of the tricks
changes a result (every loop gives the same bits on one thread or two).

The tricks, by name:

- ``"blas"``: hand a loop's ranges of rows (the row loops of softmax, LayerNorm, ...,
  the grouped optimiser updates, stacks of small products) to the worker threads of the
  OpenBLAS NumPy loaded, through its ``gotoblas_pthread`` entry (``blas_threads.py``).
  That worker polls for work right after a GEMM, so a thread of our own would only share
  its core with it; handing it the second range runs both at once.
- ``"matvec"``: a helper thread that, once woken, polls for the next batch-1 product for
  about a millisecond before it sleeps again (``matvec.py``): waking a sleeping thread
  costs more than the product.
- ``"recycle"``: keep the big arrays eager ops return and give one, once nothing else
  references it, to the next op that makes a result of its shape (``recycle.py``): an
  eager step reuses the last step's activations' memory instead of page-faulting fresh
  pages in. It touches only dualgraph's own arrays; up to ``recycle.CAP_BYTES`` of them may
  stay allocated while free (``dg.tune_cpu`` without it drops them).
- ``"malloc"``: raise glibc's mmap and trim thresholds (``mallopt``) so that the MB-sized
  activations a step frees are reused by the next step instead of being unmapped and
  page-faulted in again. This one changes the whole process (every library in it gets
  the settings, and up to ``TRIM_THRESHOLD`` bytes of freed memory may stay resident).

The switch is ``DUALGRAPH_CPU_TUNING``, read once, when dualgraph is imported, and
:func:`configure` (``dg.tune_cpu``) at run time:

==========================  =====================================================
``DUALGRAPH_CPU_TUNING``    tricks on
==========================  =====================================================
unset, ``default``          ``blas``, ``matvec``, ``recycle`` (:data:`DEFAULT`)
``1``, ``on``, ``all``      ``blas``, ``matvec``, ``recycle``, ``malloc`` (:data:`TRICKS`)
``0``, ``off``              none: every loop runs on the calling thread or a plain
                            pool of sleeping threads, malloc is left alone
``blas,malloc`` (a list)    exactly those
==========================  =====================================================

Why the default is what it is: ``blas`` and ``matvec`` touch nothing outside
dualgraph's own kernels (they run only while one of its loops runs, and only on the cores
this process may use) and each backs off where it would fight for a core (below);
``recycle`` holds only arrays dualgraph made and nothing references;
``malloc`` changes the process for everyone in it, so it is never applied unless asked
for: ``import dualgraph`` leaves malloc's settings as they were. :func:`configure` with
``malloc`` applies it at once; without it, a process where it was applied gets glibc's
default thresholds back (128 KiB each; glibc's own adjustment of the mmap threshold stays
off once it has been set). Where the user set glibc's own ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_TOP_PAD_``, or off glibc, ``malloc`` does nothing.

The one finer knob, ``DUALGRAPH_NUM_THREADS`` (read at each use), caps the cores
dualgraph's loops use, as ``OMP_NUM_THREADS`` does for OpenMP programs; 1 turns off every
trick that needs a second core. MPI ranks sharing a machine should get one each (or be
bound to their cores, which :func:`cores` sees).

Where they would fight (detection, all here):

- One core (affinity, ``DUALGRAPH_NUM_THREADS=1``) or OpenBLAS limited to one thread
  (``OPENBLAS_NUM_THREADS=1``, threadpoolctl): ``blas`` hands nothing over and the
  ``matvec`` helper is never started.
- No OpenBLAS with ``gotoblas_pthread`` among the libraries in ``/proc/self/maps`` (another
  BLAS; not Linux): ``blas`` hands nothing over.
- Cores busy with other work (another process, another MPI rank, other Python threads
  handing work to the same worker): a shared job then waits for a thread the OS has not
  scheduled. Each trick notes such stalls (a job of OpenBLAS's that started only after
  another job of the same call had finished; a helper that held the caller up), and
  :class:`Backoff` makes the next calls run alone, for longer each time it happens again.

Platform assumptions kept elsewhere and checked at load: the compiled entries read the
data and dims pointers of NumPy's array struct at fixed offsets (``native.DATA_OFFSET``,
``DIMS_OFFSET``), checked against a real array (``native.array_struct_known``); where they
do not match, loops run through Numba's dispatcher and the grouped optimiser updates
through NumPy. :func:`report` says what was found.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
import warnings
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterable, NamedTuple

from . import recycle

SWITCH = "DUALGRAPH_CPU_TUNING"
TRICKS = frozenset({"blas", "matvec", "recycle", "malloc"})
DEFAULT = frozenset({"blas", "matvec", "recycle"})
_OFF, _ON = ("0", "off", "none", "false", "no"), ("1", "on", "all", "true", "yes")

active: frozenset = frozenset()     # the tricks on now (``"blas" in tuning.active``)
changes = 0    # counts the calls of configure and share_cores (decisions read it again)


def parse(text: str) -> frozenset:
    """The tricks a value of ``DUALGRAPH_CPU_TUNING`` turns on (see the module docstring);
    an unknown name is a ValueError."""
    text = text.strip().lower()
    if text in ("", "default"):
        return DEFAULT
    if text in _OFF:
        return frozenset()
    if text in _ON:
        return TRICKS
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    if names - TRICKS:
        raise ValueError(f"{SWITCH}: unknown tricks {sorted(names - TRICKS)}; the names are "
                         f"{sorted(TRICKS)}, or 0 / 1 / default")
    return names


def configure(setting: bool | str | Iterable[str] = True) -> frozenset:
    """Turn dualgraph's CPU tricks on or off for this process: ``True`` (all of them,
    including the process-wide ``malloc``), ``False`` (none), a string as
    ``DUALGRAPH_CPU_TUNING`` takes, or a set of names. Returns the tricks that were on
    before, which a later call takes back.

    >>> import dualgraph as dg
    >>> before = dg.tune_cpu("blas,matvec,recycle")     # the default: malloc left alone
    >>> sorted(dg.kernels.tuning.active)
    ['blas', 'matvec', 'recycle']
    >>> _ = dg.tune_cpu(before)
    """
    global active, changes
    changes += 1
    if isinstance(setting, bool):
        tricks = TRICKS if setting else frozenset()
    elif isinstance(setting, str):
        tricks = parse(setting)
    else:
        tricks = frozenset(setting)
        if tricks - TRICKS:
            raise ValueError(f"unknown tricks {sorted(tricks - TRICKS)}")
    before, active = active, tricks
    if ("recycle" in tricks) != (recycle.current is not None):
        recycle.current = recycle.Recycler() if "recycle" in tricks else None
    if ("malloc" in tricks) != _malloc.applied:
        _malloc.set(on="malloc" in tricks)
    return before


def cores() -> int:
    """How many cores dualgraph's loops may use: ``DUALGRAPH_NUM_THREADS``, else the cores
    this process may run on (its affinity: an MPI rank bound to one core gets 1)."""
    configured = os.environ.get("DUALGRAPH_NUM_THREADS")
    if configured:
        return max(1, int(configured))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


def share_cores(n: int) -> None:
    """Use ``n`` cores at most: dualgraph's loops (``DUALGRAPH_NUM_THREADS``) and the
    threads of the OpenBLAS NumPy loaded. MPI ranks sharing a machine call it with their
    share of its cores, so that two ranks on two cores run one thread each instead of four
    threads fighting for two cores.

    >>> share_cores(1)   # dg.distributed.init_process_group does this with 2 ranks, 2 cores
    """
    global changes
    n = max(1, int(n))
    changes += 1
    os.environ["DUALGRAPH_NUM_THREADS"] = str(n)
    setter = _thread_setter()
    if setter is not None:
        with _holding:     # (not while a blas_alone block holds the count)
            setter(n)


def join_mpi(local_ranks: int) -> None:
    """Tune this process as one of ``local_ranks`` MPI ranks on this machine
    (``dg.distributed.init_process_group`` with more than one rank):

    - its loops and OpenBLAS use its share of the cores, or ``DUALGRAPH_NUM_THREADS``
      where that is set: OpenBLAS left at its own count (a thread per core of the machine)
      would fight with the other ranks, and with this rank, for the cores;
    - ``malloc`` is on, unless ``DUALGRAPH_CPU_TUNING`` says otherwise: MPI allocates and
      frees message-sized temporary buffers inside its collectives, and with glibc's
      dynamic thresholds those frees unmap them or trim the heap, so that a data-parallel
      step page-faults megabytes of fresh zeroed memory back in (MPI's buffers, the next
      step's gradients and activations), which slows every phase of the step
      (docs/benchmarks.md has the measurements);
    - the calling thread (the one that waits on communication) sleeps as long as it asks
      (Linux's timer slack of 1 ns instead of 50 us): a wait for another rank sleeps 10 to
      100 us between polls, which the default slack stretched to 65-156 us, late by that
      much to sum its share of a reduction the other rank then waits for.
    """
    told = "DUALGRAPH_NUM_THREADS" in os.environ
    share_cores(cores() if told else cores() // max(1, local_ranks))
    if SWITCH not in os.environ and "malloc" not in active:
        configure(active | {"malloc"})
    _exact_sleeps()


def _exact_sleeps() -> None:
    """``prctl(PR_SET_TIMERSLACK, 1)`` for the calling thread, where Linux has it."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").prctl(29, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


class OpenBLAS(NamedTuple):
    """The OpenBLAS this process loaded: its thread server's entry, its thread count and
    its 64-bit CBLAS ``sgemm`` (an address, or None)."""
    path: str
    run: object              # gotoblas_pthread(n, function, args, stride)
    threads: object          # () -> its current thread count
    sgemm: int | None


# the names NumPy's OpenBLAS builds give its thread count (scipy-openblas prefixes and
# suffixes every public symbol; the server's own entry keeps its plain name)
_THREAD_COUNT_NAMES = ("openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
                       "scipy_openblas_get_num_threads", "openblas_get_num_threads64_")
_SET_THREADS_NAMES = tuple(n.replace("get_", "set_") for n in _THREAD_COUNT_NAMES)
# its CBLAS sgemm with 64-bit integers (NumPy's own build: ``batched.py`` calls it)
_SGEMM_NAMES = ("scipy_cblas_sgemm64_", "cblas_sgemm64_")


@lru_cache(maxsize=None)
def openblas() -> OpenBLAS | None:
    """The OpenBLAS with a ``gotoblas_pthread`` entry among the libraries this process has
    loaded (found in ``/proc/self/maps``: Linux only), or None."""
    for path in _loaded_libraries():
        if "openblas" not in os.path.basename(path).lower():
            continue
        try:
            library = ctypes.CDLL(path)
            run = library.gotoblas_pthread
        except (OSError, AttributeError):
            continue
        count = next((getattr(library, name) for name in _THREAD_COUNT_NAMES
                      if hasattr(library, name)), None)
        if count is None:
            continue
        run.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        run.restype = ctypes.c_int
        count.restype = ctypes.c_int
        sgemm = next((ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                      for name in _SGEMM_NAMES if hasattr(library, name)), None)
        return OpenBLAS(path, run, count, sgemm)
    return None


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


def blas_jobs() -> int:
    """How many jobs may go to OpenBLAS's threads at once: its thread count (the one
    :func:`blas_alone` holds back, while it does) capped by :func:`cores`; 1 with ``blas``
    off or no such OpenBLAS. Read under ``_holding``: else another thread's
    ``blas_alone`` could start between the two reads (``_held`` still empty, OpenBLAS's
    count already 1), and a product here that splits on the count be left to np.matmul,
    whose bits differ (the flaky two-thread test of tests/test_split_gemm.py)."""
    if "blas" not in active:
        return 1
    found = openblas()
    if found is None:
        return 1
    with _holding:
        count = _held[-1] if _held else found.threads()
    return max(1, min(count, cores()))


@lru_cache(maxsize=None)
def _thread_setter():
    """The loaded OpenBLAS's ``openblas_set_num_threads`` (by its build's name), or None."""
    found = openblas()
    if found is None:
        return None
    library = ctypes.CDLL(found.path)
    setter = next((getattr(library, name) for name in _SET_THREADS_NAMES
                   if hasattr(library, name)), None)
    if setter is not None:
        setter.argtypes, setter.restype = [ctypes.c_int], None
    return setter


_held: list[int] = []    # OpenBLAS's own thread count while blas_alone holds it at one
# One thread at a time holds it: the jobs inside call sgemm on OpenBLAS's worker, which
# must not thread (a worker handing work to itself waits forever), so no other thread may
# put the count back, or change it, meanwhile.
_holding = threading.RLock()


@contextmanager
def blas_alone():
    """OpenBLAS's own GEMMs on one thread inside the block (its count put back after;
    ``blas_jobs`` keeps reporting that count, so jobs still go to its worker): for callers
    that split a product into single-threaded ``sgemm`` calls themselves
    (``split_gemm.py``). Its worker thread stays; only OpenBLAS's decision to thread a
    GEMM is held back, which costs a call of about a microsecond each way. Other threads
    entering wait for the block to end."""
    setter = _thread_setter()
    with _holding:
        count = openblas().threads() if setter is not None and not _held else 1
        if count == 1:      # (none to hold back, or an outer block holds it)
            yield
            return
        _held.append(count)
        setter(1)
        try:
            yield
        finally:
            setter(count)
            _held.pop()


def matvec_helper() -> bool:
    """Whether batch-1 products may use the spinning helper thread: ``matvec`` on and a
    second core."""
    return "matvec" in active and cores() > 1


# -- backing off where the cores are oversubscribed ----------------------------------------

# A busy host stalls a shared job now and then (a few in 6000 products here); a second
# stall within NEAR shared calls, or a window of WINDOW chunks in which the helper ran
# less than MIN_SHARE of them, means the cores are oversubscribed: the next FIRST_BACKOFF
# calls run alone, twice as many each further time up to MAX_BACKOFF; each good window
# halves the count again.
NEAR, WINDOW, MIN_SHARE = 256, 512, 0.2
FIRST_BACKOFF, MAX_BACKOFF = 32, 16_384
# The relay's calls (``blas_threads.run``) are judged by time instead: each shared call
# saved about its first job's time (the caller would have run the others' ranges after its
# own) and lost what it waited after that; their balance, capped at CREDIT_NS, going below
# zero backs off as above. A batch-1 CNN on a loaded host meets a stall of a time slice
# (~4 ms) in some twenty calls that each save a few hundred microseconds: counted as
# stalls, the second within NEAR calls backed it off for good; weighed, it shares on. The
# cap bounds what a run of stalls may cost before backing off; the calls start (and start
# again after backing off) with a quarter of it, so that one slice-long stall among the
# first calls (a worker woken from its sleep, a host busy for a moment) does not back off.
CREDIT_NS = 16_000_000


class Backoff:
    """Whether the next call shares its work with another thread, from what the last ones
    showed: plain bookkeeping, apart from any thread, so it can be tested. The caller asks
    :meth:`share` once per call and, after a shared one, reports it to :meth:`settle`
    (the relay: to :meth:`weigh`)."""

    def __init__(self):
        self.alone = 0                      # calls to run alone, backing off
        self.backoff = FIRST_BACKOFF        # how many the next backing off sets
        self.since_stall = NEAR + 1         # shared calls since the last stall
        self.posted = 0                     # chunks posted this window (helper awake)
        self.helped = 0                     # the helper's count when the window began
        self.credit = CREDIT_NS // 4        # ns the relay's shared calls saved, net
        self.stalls = 0                     # stalls seen in all (reported)
        self.backed_off = 0                 # times it backed off (reported)

    def share(self) -> bool:
        """Whether to share the next call (else it is one of the ``alone``)."""
        if self.alone:
            self.alone -= 1
            return False
        return True

    def settle(self, stalled: bool, chunks: int = 0, awake: bool = False, helped: int = 0):
        """After a shared call: ``stalled`` if it waited for a thread the OS had not
        scheduled; for a helper that takes chunks (``matvec``), ``chunks`` posted,
        ``awake`` if it was polling when they were, ``helped`` its count of chunks run."""
        self.since_stall += 1
        if stalled:
            self.stalls += 1
            if self.since_stall <= NEAR:
                self._back_off(helped)
            self.since_stall = 0
        elif awake:
            self.posted += chunks
            if self.posted >= WINDOW:
                if helped - self.helped < MIN_SHARE * self.posted:
                    self._back_off(helped)
                else:
                    self.backoff = max(FIRST_BACKOFF, self.backoff // 2)
                    self.posted, self.helped = 0, helped

    def weigh(self, saved_ns: int, waited_ns: int) -> None:
        """After a shared call of the relay: its first job took ``saved_ns`` (what the
        sharing saved, about) and the caller then waited ``waited_ns`` for the last (a
        stall where that is longer). Backs off where the net of the last calls' savings,
        capped at ``CREDIT_NS``, turns negative; a full credit makes the next back-off
        short again."""
        if waited_ns > saved_ns:
            self.stalls += 1
        self.credit = min(CREDIT_NS, self.credit + saved_ns - waited_ns)
        if self.credit < 0:
            self.credit = CREDIT_NS // 4
            self._back_off(0)
        elif self.credit == CREDIT_NS:
            self.backoff = FIRST_BACKOFF

    def _back_off(self, helped: int):
        self.alone, self.backoff = self.backoff, min(2 * self.backoff, MAX_BACKOFF)
        self.posted, self.helped = 0, helped
        self.backed_off += 1


# -- glibc's allocator -----------------------------------------------------------------------

class _Malloc:
    """glibc's mmap and trim thresholds, raised and put back (``mallopt``)."""
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3     # malloc.h
    MMAP_THRESHOLD = 32 << 20     # glibc's largest allowed value on 64-bit systems
    TRIM_THRESHOLD = 256 << 20    # freed memory kept before the heap is trimmed
    GLIBC_DEFAULT = 128 << 10     # both thresholds' defaults
    USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

    def __init__(self):
        self.applied = False

    def set(self, on: bool, environ=os.environ) -> bool:
        """Raise (``on``) or restore the thresholds; whether they are raised afterwards."""
        mallopt = self._mallopt(environ)
        if mallopt is not None:
            mmap, trim = ((self.MMAP_THRESHOLD, self.TRIM_THRESHOLD) if on
                          else (self.GLIBC_DEFAULT, self.GLIBC_DEFAULT))
            done = bool(mallopt(self.M_MMAP_THRESHOLD, mmap)
                        and mallopt(self.M_TRIM_THRESHOLD, trim))
            self.applied = on and done
        return self.applied

    @staticmethod
    def _mallopt(environ):
        """glibc's ``mallopt``, or None: off glibc, or where the user tuned glibc through
        its own variables (theirs win)."""
        if any(k in environ for k in _Malloc.USER_SETTINGS):
            return None
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):   # musl and others: no mallopt
            return None
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        return mallopt


_malloc = _Malloc()


def report() -> dict:
    """What is on and what was found, for a benchmark's record or a bug report."""
    from . import native
    found = openblas()
    return {"tricks": sorted(active), "cores": cores(),
            "openblas": found.path if found else None,
            "openblas_threads": found.threads() if found else None,
            "openblas_core": _core_name(found),
            "blas_jobs": blas_jobs(), "matvec_helper": matvec_helper(),
            "malloc_applied": _malloc.applied,
            "array_struct_known": native.array_struct_known()}


def _core_name(found: OpenBLAS | None) -> str | None:
    """The CPU kernels OpenBLAS chose as it loaded (``OPENBLAS_CORETYPE`` overrides its
    choice: "Haswell" AVX2 kernels on an AVX-512 CPU run GEMMs at ~60% speed), if it says."""
    if found is None:
        return None
    library = ctypes.CDLL(found.path)
    name = next((getattr(library, n) for n in ("openblas_get_corename",
                                               "scipy_openblas_get_corename64_")
                 if hasattr(library, n)), None)
    if name is None:
        return None
    name.restype = ctypes.c_char_p
    return name().decode()


def _from_environment() -> None:
    try:
        configure(os.environ.get(SWITCH, "default"))
    except ValueError as e:    # (import must not fail over a typo: say so, keep the default)
        warnings.warn(f"{e}; using the default", stacklevel=2)
        configure(DEFAULT)


_from_environment()
