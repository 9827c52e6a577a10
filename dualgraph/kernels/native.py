"""Compiled loops as machine code on disk, loaded and called without Numba.

Starting Numba costs a process 0.6-1 s here (its import, SciPy's, which it imports to look
for BLAS, and the set-up of its first compile): more than a whole first call of a compiled
step may take. So a loop is compiled by Numba once per argument signature, as a C-callable
entry (``build.py``), and its machine code (an object file) goes into the kernel cache with
a JSON description. A later process links that object with llvmlite's JIT (45 ms to import)
and calls it through ctypes; Numba is not imported at all.

The entry's calling convention: an array is passed as the ndarray object itself (a
``PyObject *``); the entry reads the data pointer and the shape from NumPy's array struct,
so a call costs about what Numba's dispatcher costs (ctypes passes an object without
converting it, and it releases the GIL, so ``threads.run_rows`` still runs ranges at once).
Only C-contiguous, aligned, native-byte-order arrays of a few dtypes and ``bool`` / ``int``
/ ``float`` / NumPy scalars have a native form; a call with anything else runs Numba's
dispatcher (``build.dispatcher``), as does everything when ``DUALGRAPH_NATIVE=0``.

An object is keyed by everything its code depends on: the loop's source file, this
package's files (helpers, this calling convention), the loop's options and argument types,
Numba's and llvmlite's versions and the host CPU (the code uses its instruction set).

The entry Numba writes around a loop also carries code to report a Python exception,
calling helpers of Numba's own C library. The loops cannot raise (NumPy's error model, no
bounds checks, no allocation), so those calls are never made; without Numba loaded their
symbols are bound to a function that says so and aborts, rather than left unresolved.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from .._helpers import getenv, write_atomic
from . import isa, worker
from .worker import NumbaBroken
from .abi import DATA_OFFSET, DIMS_OFFSET, JOB   # noqa: F401  (used as native.JOB)
from .cache import cache_dir, kernels_hash, mark_used, prune_at_exit, writable

# argument codes: an array is "<dtype code>[<ndim>]"
_DTYPE_CODES = {np.float32: "f4", np.float64: "f8", np.int32: "i4", np.int64: "i8",
                np.bool_: "b1", np.uint8: "u1", np.int8: "i1"}
_ARRAY_CODES = {(np.dtype(t), ndim): f"{c}[{ndim}]"
                for t, c in _DTYPE_CODES.items() for ndim in range(1, 6)}
# the same keyed by the id of NumPy's built-in dtype (a singleton that lives as long as
# NumPy): hashing a dtype costs ~0.3 us, a third of signature()'s time an argument. An
# equal dtype that is another object (an unpickled array's) is looked up by value.
_ARRAY_CODES_BY_ID = {(id(dt), ndim): code for (dt, ndim), code in _ARRAY_CODES.items()}
_SCALAR_CODES = {bool: "b", np.bool_: "b", int: "i8", np.int64: "i8", np.int32: "i4",
                 float: "f8", np.float64: "f8", np.float32: "f4"}
_C_SCALARS = {"b": ctypes.c_bool, "i8": ctypes.c_int64, "i4": ctypes.c_int32,
              "f8": ctypes.c_double, "f4": ctypes.c_float}
# Numba's helpers on the (unreachable) exception path of a C-callable entry
ERROR_PATH = frozenset({"NRT_Free", "NRT_MemInfo_call_dtor", "numba_do_raise",
                        "numba_gil_ensure", "numba_gil_release",
                        "numba_runtime_build_excinfo_struct", "numba_unpickle"})

_lock = threading.RLock()
_loaded: dict[str, object] = {}     # key -> ctypes function (each object is linked once)


@dataclass
class Activity:
    """The loops this process has made ready so far: how many were compiled by Numba (and
    stored) and how many loaded from the disk cache, and the seconds each kind took
    (linking included; Numba's start in the first compile). ``dg.compile``'s
    ``explain()`` reports what a graph's first run added (:meth:`since`; process-wide, so
    loops another thread makes ready meanwhile count too)."""
    compiled: int = 0
    compiled_s: float = 0.0
    loaded: int = 0
    loaded_s: float = 0.0

    def since(self, earlier: "Activity") -> "Activity":
        return Activity(self.compiled - earlier.compiled, self.compiled_s - earlier.compiled_s,
                        self.loaded - earlier.loaded, self.loaded_s - earlier.loaded_s)

    def snapshot(self) -> "Activity":
        return replace(self)

    def __add__(self, other: "Activity") -> "Activity":
        return Activity(self.compiled + other.compiled, self.compiled_s + other.compiled_s,
                        self.loaded + other.loaded, self.loaded_s + other.loaded_s)


activity = Activity()


def signature(args) -> tuple:
    """The argument codes a loop compiles for: ``"f4[2]"`` for a float32 matrix, ``"f8"``
    for a Python float; None for an argument with no native form. (Run at every call: it
    is kept to a few dict lookups per argument.)"""
    codes = []
    for a in args:
        if type(a) is np.ndarray:
            flags = a.flags
            codes.append((_ARRAY_CODES_BY_ID.get((id(a.dtype), a.ndim))
                          or _ARRAY_CODES.get((a.dtype, a.ndim)))
                         if flags.c_contiguous and flags.aligned else None)
        else:
            codes.append(_SCALAR_CODES.get(type(a)))
    return tuple(codes)


def address(entry) -> int | None:
    """The machine address of a loaded entry (what :func:`compiled` returns from the disk
    cache or a compile), for C code to call; None for Numba's dispatcher, which runs where
    no native entry exists."""
    if isinstance(entry, ctypes._CFuncPtr):
        return ctypes.cast(entry, ctypes.c_void_p).value
    return None


def job_words(args) -> list[int]:
    """The words of a job entry's block for these arguments: an array's ``id()`` (the
    caller keeps the array alive), a scalar's bytes at the word's start (little-endian:
    a float's bits, an integer or bool as itself)."""
    words = []
    for a in args:
        code = None if type(a) is np.ndarray else _SCALAR_CODES.get(type(a))
        if code is None:
            words.append(id(a))
        elif code in _FLOAT_BITS:
            dtype, bits = _FLOAT_BITS[code]
            words.append(int(np.array(a, dtype).view(bits)))
        else:
            words.append(int(a))
    return words


_FLOAT_BITS = {"f8": (np.float64, np.int64), "f4": (np.float32, np.int32)}


def compiled(loop, codes: tuple, build: bool = True):
    """The callable that runs ``loop`` on arguments of these codes: its machine code from
    the disk cache, else compiled by Numba (and stored), else Numba's dispatcher. With
    ``build=False``, None where that would compile anything."""
    with _lock:
        fn = None
        if None not in codes and enabled():
            key, folder = _key(loop, codes), _folder(loop)
            fn = _loaded.get(key)
            if fn is None:
                start = time.perf_counter()
                stored = _load(folder, key)
                if stored is None and not build:
                    return None
                try:
                    fn = _link(key, *(stored or _build(loop, codes, folder, key)))
                except NumbaBroken:
                    raise
                except Exception as e:   # e.g. a Numba without the internals build.py uses
                    warnings.warn(f"{loop.__qualname__}: no native entry for {codes} ({e}); "
                                  "Numba's dispatcher runs it")
                else:
                    _count(stored is not None, time.perf_counter() - start)
        if fn is None:
            if not build:
                return None
            fn = _numba_build(loop).dispatcher(loop)
        return fn


def _count(loaded: bool, seconds: float) -> None:
    if loaded:
        activity.loaded += 1
        activity.loaded_s += seconds
    else:
        activity.compiled += 1
        activity.compiled_s += seconds


def _numba_build(loop):
    """``build.py``, which imports Numba; a clear error when that import fails (say, a
    NumPy newer than the installed Numba supports)."""
    try:
        from . import build
    except ImportError as e:
        raise NumbaBroken(
            f"compiling the loop {loop.__qualname__} needs Numba, which is installed but "
            f"does not import ({e}). Fix the installation (pip install -e '.[fast]' lets pip "
            "pick versions that fit), or set DUALGRAPH_NUMBA=0 to run NumPy's kernels "
            "instead.") from e
    return build


def enabled() -> bool:
    """Machine code is cached and loaded (``DUALGRAPH_NATIVE=0`` switches it off), llvmlite
    imports, and NumPy's array struct is laid out as the entries read it."""
    return getenv("DUALGRAPH_NATIVE", "1") != "0" and _usable()


@lru_cache(maxsize=None)
def _usable() -> bool:
    try:
        _engine()
        _process_symbols()
    except (ImportError, OSError, TypeError):   # no llvmlite; no dlsym (not a Unix)
        return False
    return array_struct_known()


@lru_cache(maxsize=None)
def array_struct_known() -> bool:
    """NumPy's array struct holds the data pointer and the dims pointer at the offsets the
    entries (and ``memory.float32_vector``) read them from (``DATA_OFFSET``): read from a
    2 x 3 array, they give its data address and its shape."""
    probe = np.arange(6, dtype=np.int64).reshape(2, 3)
    words = (ctypes.c_int64 * 5).from_address(id(probe))
    dims = (ctypes.c_int64 * 2).from_address(words[DIMS_OFFSET // 8])
    return words[DATA_OFFSET // 8] == probe.ctypes.data and tuple(dims) == probe.shape


@lru_cache(maxsize=None)
def _process_symbols() -> ctypes.CDLL:
    """The symbols this process has loaded (Python's C API, libc, libm)."""
    return ctypes.CDLL(None)


@lru_cache(maxsize=None)
def _engine():
    """The process's JIT linker (llvmlite's MCJIT); objects are added to it one by one."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine()
    return llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)


@lru_cache(maxsize=None)
def _environment() -> str:
    """Versions and the CPU Numba compiles for (``isa.target``: the host, or what
    ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` say): machine code from another of these
    is not reused. (Numba's version is read from its ``_version.py`` without importing
    Numba, nor ``importlib.metadata``, which takes 0.1 s to import.)"""
    import llvmlite
    numba_version = Path(importlib.util.find_spec("numba").origin).with_name("_version.py")
    return json.dumps([sys.version_info[:2], llvmlite.__version__, _file_hash(
        str(numba_version)), *isa.target()])


@lru_cache(maxsize=None)
def _file_hash(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _key(loop, codes: tuple) -> str:
    fn = loop.fn
    fastmath = sorted(loop.fastmath) if loop.fastmath else False
    text = json.dumps([kernels_hash(), _environment(), _file_hash(fn.__code__.co_filename),
                       fn.__module__, fn.__qualname__, fastmath, codes])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _folder(loop) -> Path:
    """Where a loop's objects are kept: this package's own loops with the installation
    (compiled once per installation, as Python's ``.pyc`` files), in ``__pycache__`` here
    when it can be written; generated kernels in the kernel cache."""
    here = Path(__file__).parent
    own = Path(loop.fn.__code__.co_filename).parent == here
    return (own and writable(here / "__pycache__" / "native")) or cache_dir() / "native"


def _paths(folder: Path, key: str) -> tuple[Path, Path]:
    return folder / f"{key}.json", folder / f"{key}.o"


def _load(folder: Path, key: str) -> tuple[dict, bytes] | None:
    meta_path, object_path = _paths(folder, key)
    try:
        meta = json.loads(meta_path.read_text())
        code = object_path.read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(code).hexdigest() != meta.get("sha256"):
        return None      # (written by another version, or damaged: compile it again)
    mark_used(meta_path)
    return meta, code


def _build(loop, codes: tuple, folder: Path, key: str) -> tuple[dict, bytes]:
    """Compile the entry (in the compile worker when it can: ``worker.py``) and store it."""
    if worker.can_compile(loop):
        worker.compile_entry(loop, codes, folder, key)
        stored = _load(folder, key)
        if stored is None:
            raise worker.WorkerFailed(f"the compile worker stored no readable entry for "
                                      f"{loop.__qualname__} in {folder}")
    else:
        stored = compile_and_store(loop, codes, folder, key)
    prune_at_exit(folder)
    return stored


def compile_and_store(loop, codes: tuple, folder: Path, key: str) -> tuple[dict, bytes]:
    """Compile the entry with Numba, in this process, and store it with its description."""
    code, symbol, undefined = _numba_build(loop).entry(loop, codes, f"entry_{key}")
    meta = {"loop": f"{loop.fn.__module__}.{loop.fn.__qualname__}", "signature": codes,
            "symbol": symbol, "undefined": sorted(undefined),
            "sha256": hashlib.sha256(code).hexdigest()}
    meta_path, object_path = _paths(folder, key)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(object_path, code, durable=False)
    # last: the metadata marks the entry complete
    write_atomic(meta_path, json.dumps(meta, indent=1).encode(), durable=False)
    return meta, code


def _resolvable(name: str) -> bool:
    """Whether a fresh process can bind ``name``: Python's C API, libc and libm, or one of
    Numba's error-path helpers."""
    return name in ERROR_PATH or hasattr(_process_symbols(), name)


def _link(key: str, meta: dict, code: bytes):
    """The entry of an object as a ctypes function; None when the object needs symbols a
    process without Numba cannot provide (a loop that allocates: Numba's dispatcher runs
    it instead)."""
    import llvmlite.binding as llvm
    if not all(_resolvable(name) for name in meta["undefined"]):
        return None
    for name in meta["undefined"]:
        if name in ERROR_PATH and not llvm.address_of_symbol(name):
            llvm.add_symbol(name, _error_path_address())   # (Numba, if loaded, has its own)
    engine = _engine()
    engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    engine.finalize_object()
    address = engine.get_function_address(meta["symbol"])
    if not address:   # (an object that does not define its symbol: never call address 0)
        return None
    codes = meta["signature"]
    argtypes = [ctypes.c_int64] if tuple(codes[:1]) == (JOB,) else [
        ctypes.py_object if c.endswith("]") else _C_SCALARS[c] for c in codes]
    fn = _loaded[key] = ctypes.CFUNCTYPE(None, *argtypes)(address)
    return fn


def _reached_error_path():
    sys.stderr.write("dualgraph: a compiled loop reached Numba's exception path, which "
                     "cannot report without Numba loaded. Rerun with DUALGRAPH_NATIVE=0 "
                     "to see the error, and please report it.\n")
    sys.stderr.flush()
    os.abort()


_ERROR_PATH_STUB = ctypes.CFUNCTYPE(None)(_reached_error_path)


def _error_path_address() -> int:
    return ctypes.cast(_ERROR_PATH_STUB, ctypes.c_void_p).value
