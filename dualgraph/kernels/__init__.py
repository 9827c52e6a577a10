"""Hand-written loops for the eager kernels NumPy runs slowly, and their scalar helpers.

NumPy's ``tanh``/``exp`` on float32 run one libm call per element here, and a row-wise
normalisation is several full passes with temporaries; the loops in this package do the
same arithmetic in one pass with the vectorisable ``fastmath.exp32``/``tanh32`` (a few
float32 ulps from libm). They are optional: an op calls :func:`enabled` and keeps its
NumPy kernel when Numba is missing, ``DUALGRAPH_NUMBA=0``, or the dtype is not float32.

Loops and helpers are plain Python functions here (:func:`loop`, :func:`helper`): this
package never imports Numba itself. A loop compiles at its first call for its argument
types, and its machine code is kept on disk (``native.py``), so a later process runs it
without starting Numba at all (which costs 0.6-1 s); Numba is imported only to compile
(``build.py``).
"""
from __future__ import annotations

import importlib.util
import math
from functools import lru_cache

import numpy as np

from .._helpers import getenv
from . import native
from .decl import Helper, Intrinsic, helper   # noqa: F401  (the loops' modules use them)

# Below this NumPy's per-call cost is already small. The compiler's fused kernels use the
# same threshold, so an op and a fused group containing it take the same path.
MIN_ELEMENTS = 1 << 12
# From this size on a loop's rows are shared among threads (``threads.run_rows``; fused
# kernels too). Below it the hand-off costs more than it saves.
PARALLEL_MIN = 1 << 20


@lru_cache(maxsize=None)
def _numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None


def numba_available() -> bool:
    """Numba is installed and not switched off with ``DUALGRAPH_NUMBA=0`` (this does not
    import it)."""
    return getenv("DUALGRAPH_NUMBA", "1") != "0" and _numba_installed()


def enabled(*arrays: np.ndarray, min_elements: int = MIN_ELEMENTS) -> bool:
    """Whether the Numba loop should run on these arrays: float32 and big enough (at
    least ``min_elements`` in the first; a kernel whose NumPy form is many calls passes a
    smaller bound, down to 0: its loop wins at every size)."""
    if arrays[0].size < min_elements:
        return False
    for a in arrays:   # (a loop, not all() of a generator: this runs at many ops' calls)
        if a.dtype != np.float32:
            return False
    return numba_available()


class Loop:
    """A Python loop function, compiled at its first call for each set of argument types
    (``native.py``: machine code from the disk cache, or compiled by Numba and stored
    there). Compiled, it runs without the GIL, so a loop over a range of rows can run on
    several threads at once (``threads.run_rows``)."""

    flat_entry = None   # the entry a caller keeps for its one kind of call (flat float32)

    def __init__(self, fn, fastmath=False):
        self.fn, self.fastmath = fn, fastmath
        self.__name__, self.__qualname__, self.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        self._compiled = {}    # argument signature -> callable

    def __call__(self, *args):
        return self.entry(*args)(*args)

    def ready(self, *args) -> bool:
        """Whether a call with these arguments runs without compiling anything: its machine
        code is in this process already, or in the disk cache (then it is loaded now)."""
        key = native.signature(args)
        if key not in self._compiled:
            fn = native.compiled(self, key, build=False)
            if fn is None:
                return False
            self._compiled[key] = fn
        return True

    def job_address(self, *args) -> int | None:
        """The machine address of this loop's job entry for arguments like these (one
        int64: the address of a block of their words, ``native.job_words``), which
        OpenBLAS's threads can run (``blas_threads.py``); None without native entries."""
        key = (native.JOB,) + native.signature(args)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = native.compiled(self, key)
        return native.address(compiled)

    def entry(self, *args):
        """The callable a call with these arguments runs (compiled for their types): a
        caller making many calls of one kind keeps it and skips working out the types."""
        key = native.signature(args)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = native.compiled(self, key)
        return compiled


def loop(fn=None, *, fastmath=False):
    """Decorator: ``fn`` becomes a :class:`Loop` (``fastmath`` as Numba's: a set of LLVM
    flags, e.g. ``{"reassoc"}`` so that a row sum vectorises)."""
    if fn is None:
        return lambda f: Loop(f, fastmath)
    return Loop(fn, fastmath)


def flat(a: np.ndarray) -> np.ndarray:
    """``a`` as a contiguous 1-D array (a view when it already is contiguous)."""
    return np.ascontiguousarray(a).reshape(-1)


def out_images(out: np.ndarray) -> tuple[np.ndarray, int]:
    """A conv's output ``out (N, C, H, W)`` as a flat array from its first element and the
    distance between its images in that array: ``out`` itself and ``C*H*W`` where it is
    contiguous; else ``out`` is a block of channels of a larger output (a concatenation's:
    ``conv2d_cat``), each image's ``(C, H, W)`` contiguous, the images a whole larger
    image apart, and the flat array a view that spans them (a loop writing image ``n``'s
    element ``i`` at ``n * stride + i`` writes ``out``, and nothing between its images).

    >>> y = np.zeros((2, 5, 1, 1), np.float32)
    >>> flat, stride = out_images(y[:, 1:3])
    >>> flat.shape, stride
    ((7,), 5)
    """
    per = math.prod(out.shape[1:])
    if out.flags.c_contiguous or out.size == 0:
        return out.reshape(-1), per
    size = out.itemsize
    inner = [size * math.prod(out.shape[d + 1:]) for d in range(1, out.ndim)]
    if (any(s != e for s, e, d in zip(out.strides[1:], inner, out.shape[1:]) if d > 1)
            or out.strides[0] % size or out.strides[0] < 0 or not out.flags.writeable):
        raise ValueError(f"an output of strides {out.strides} for {out.shape}: each image "
                         "must be contiguous and writeable")
    stride = out.strides[0] // size
    span = (out.shape[0] - 1) * stride + per
    return np.lib.stride_tricks.as_strided(out, (span,), (size,)), stride


def rows(a: np.ndarray, width: int) -> np.ndarray:
    """``a`` as a contiguous 2-D array of rows of ``width`` elements."""
    return np.ascontiguousarray(a).reshape(-1, width)


_LOOP_MODULES = ("activations", "along", "attention", "batch_norm", "batched", "conv", "conv_batch",
                 "conv_blocked", "conv_columns", "conv_direct", "conv_expand", "conv_nhwc",
                 "conv_outlanes", "conv_packed", "conv_pointpacked", "conv_pointwise",
                 "conv_shallow", "conv_tiles",
                 "conv_winograd", "epilogue", "excite", "linear_packed", "normalization",
                 "optim", "pool_lanes", "pool_means", "pool_separable", "pooling", "products", "recurrence", "scatter", "sums",
                 "split_gemm", "trig")


def __getattr__(name: str):
    """``kernels.activations`` etc. import on first use (most programs need few of them)."""
    if name in _LOOP_MODULES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
