"""Which GEMM kernels NumPy's OpenBLAS runs: its AVX-512 ones wherever the CPU has AVX-512.

An OpenBLAS built for many CPUs (NumPy's wheels: ``DYNAMIC_ARCH``) picks its kernels
once, when it loads, from the CPU it recognises. A CPU newer than the build (AMD Zen 4 and
later, for the OpenBLAS of current NumPy wheels) is taken for an older one of its family,
and gets the AVX2 ("Haswell") kernels though it runs AVX-512 ("SkylakeX") ones: every
float32 GEMM then runs at half the speed the core allows (``sgemm`` 128x256x768 on one
Zen 4 core: 115 GFLOP/s with Haswell's kernels, 180 with SkylakeX's).

:func:`use_avx512` switches it, the way OpenBLAS's own ``OPENBLAS_CORETYPE`` does at load:
where the CPU has the AVX-512 subsets SkylakeX's kernels use (F, BW, DQ, VL; Linux's
``/proc/cpuinfo``), OpenBLAS chose an AVX2 core (Haswell, Zen) and exports its dynamic
dispatch (``gotoblas_dynamic_init``), it drops its choice and makes it again with
``OPENBLAS_CORETYPE=SkylakeX``. A user's own ``OPENBLAS_CORETYPE`` is left alone.
:func:`restore` goes back to the core OpenBLAS chose. Results change only by rounding
(another summation order inside the GEMM), as between any two machines.

The switch must not race a GEMM in another thread (OpenBLAS has no kernel table for an
instant): ``tuning.configure`` runs it when dualgraph is imported, or when called.
"""
from __future__ import annotations

import ctypes
import os

AVX512 = ("avx512f", "avx512bw", "avx512dq", "avx512vl")   # what SkylakeX's kernels use
AVX2_CORES = ("haswell", "zen")        # OpenBLAS's names of the cores it may fall back to
TARGET = "SkylakeX"
ENV = "OPENBLAS_CORETYPE"

_chosen: str | None = None     # the core OpenBLAS chose at load, once switched


def cpu_flags() -> frozenset:
    """The CPU's feature flags (``/proc/cpuinfo``'s first ``flags`` line; empty off Linux)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _library():
    """NumPy's OpenBLAS as a ctypes library with its dynamic dispatch, or None."""
    from . import tuning
    found = tuning.openblas()
    if found is None:
        return None
    library = ctypes.CDLL(found.path)
    if not all(hasattr(library, name) for name in
               ("gotoblas_corename", "gotoblas_dynamic_init", "gotoblas_dynamic_quit")):
        return None   # built for one CPU: nothing to choose
    library.gotoblas_corename.restype = ctypes.c_char_p
    return library


def core() -> str | None:
    """The name of the core whose kernels OpenBLAS runs now (``"Haswell"``, ...), or None."""
    library = _library()
    return None if library is None else library.gotoblas_corename().decode()


def _choose(library, name: str) -> None:
    """Make OpenBLAS choose its kernels again, as it would at load with
    ``OPENBLAS_CORETYPE=name``; the environment is left as it was."""
    before = os.environ.get(ENV)
    os.environ[ENV] = name
    try:
        library.gotoblas_dynamic_quit()
        library.gotoblas_dynamic_init()
    finally:
        if before is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = before


def use_avx512() -> bool:
    """Switch NumPy's OpenBLAS to its AVX-512 kernels where its own choice missed them
    (see the module docstring). Whether it runs them afterwards."""
    global _chosen
    library = _library()
    if library is None:
        return False
    name = library.gotoblas_corename().decode()
    if (name.lower() in AVX2_CORES and ENV not in os.environ
            and cpu_flags().issuperset(AVX512)):
        _chosen = name
        _choose(library, TARGET)
        name = library.gotoblas_corename().decode()
    return name.lower() == TARGET.lower()


def restore() -> None:
    """Give OpenBLAS back the core it chose at load (a no-op where nothing was switched)."""
    global _chosen
    library = _library()
    if library is not None and _chosen is not None:
        _choose(library, _chosen)
        _chosen = None
