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
# From this size on a loop's rows are shared among threads (``threads.run_rows``; fused
# kernels too). Below it the hand-off costs more than it saves.
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
    """A Python loop function, compiled by Numba at its first call. It releases the GIL
    (``nogil``), so a loop over a range of rows can run on several threads at once
    (``threads.run_rows``)."""

    def __init__(self, fn, fastmath=False):
        self.fn, self.fastmath, self._compiled = fn, fastmath, None
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__

    def __call__(self, *args):
        compiled = self._compiled
        if compiled is None:
            from numba import njit
            compiled = self._compiled = njit(cache=True, error_model="numpy", nogil=True,
                                             fastmath=self.fastmath)(self.fn)
        return compiled(*args)


def loop(fn=None, *, fastmath=False):
    """Decorator: ``fn`` becomes a :class:`Loop` (``fastmath`` as Numba's: a set of LLVM
    flags, e.g. ``{"reassoc"}`` so that a row sum vectorises)."""
    if fn is None:
        return lambda f: Loop(f, fastmath)
    return Loop(fn, fastmath)


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
