"""Hand-written Numba loops for the eager kernels NumPy runs slowly, and their math helpers.

NumPy's ``tanh``/``exp`` on float32 run one libm call per element here, and a row-wise
normalisation is several full passes with temporaries; the loops in this package do the
same arithmetic in one pass with the vectorisable ``fastmath.exp32``/``tanh32`` (a few
float32 ulps from libm). They are optional: an op calls :func:`enabled` and keeps its
NumPy kernel when Numba is missing, ``DUALGRAPH_NUMBA=0``, or the dtype is not float32.

Every loop is a plain Python function compiled at its first call (so a process that never
runs e.g. an LSTM never imports Numba for it) and cached on disk by Numba. Numba's cache
checks only the file of the function itself: after editing ``fastmath.py`` during
development, clear ``__pycache__`` here.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

# Below this NumPy's per-call cost is already small. The compiler's fused kernels use the
# same threshold, so an op and a fused group containing it take the same path.
MIN_ELEMENTS = 1 << 12
# From this size on a loop may run on Numba's threads (fused kernels too). Not below: after
# a parallel region Numba's OpenMP threads spin and starve OpenBLAS's in the next matmul,
# which cost a GPT step (LayerNorm on 131k elements) twice its time.
PARALLEL_MIN = 1 << 20


@lru_cache(maxsize=None)
def _numba_importable() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def numba_available() -> bool:
    """Numba is installed and not switched off with ``DUALGRAPH_NUMBA=0``."""
    return os.environ.get("DUALGRAPH_NUMBA", "1") != "0" and _numba_importable()


def enabled(*arrays: np.ndarray) -> bool:
    """Whether the Numba loop should run on these arrays: float32 and big enough."""
    return (all(a.dtype == np.float32 for a in arrays)
            and arrays[0].size >= MIN_ELEMENTS and numba_available())


class Loop:
    """A Python loop function, compiled by Numba at its first call (``parallel``: its
    ``prange`` loops share the rows among Numba's threads; see ``PARALLEL_MIN``)."""

    def __init__(self, fn, fastmath=False, parallel=False):
        self.fn, self.fastmath, self.parallel, self._compiled = fn, fastmath, parallel, None
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__

    def __call__(self, *args):
        compiled = self._compiled
        if compiled is None:
            from numba import njit
            compiled = self._compiled = njit(cache=True, error_model="numpy",
                                             fastmath=self.fastmath,
                                             parallel=self.parallel)(self.fn)
        return compiled(*args)


def loop(fn=None, *, fastmath=False, parallel=False):
    """Decorator: ``fn`` becomes a :class:`Loop` (``fastmath`` as Numba's: a set of LLVM
    flags, e.g. ``{"reassoc"}`` so that a row sum vectorises)."""
    if fn is None:
        return lambda f: Loop(f, fastmath, parallel)
    return Loop(fn, fastmath, parallel)


def flat(a: np.ndarray) -> np.ndarray:
    """``a`` as a contiguous 1-D array (a view when it already is contiguous)."""
    return np.ascontiguousarray(a).reshape(-1)


def rows(a: np.ndarray, width: int) -> np.ndarray:
    """``a`` as a contiguous 2-D array of rows of ``width`` elements."""
    return np.ascontiguousarray(a).reshape(-1, width)


_LOOP_MODULES = ("activations", "normalization", "optim", "pooling", "scatter", "trig")


def __getattr__(name: str):
    """``kernels.activations`` etc. import on first use: Numba is imported with them."""
    if name in _LOOP_MODULES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
