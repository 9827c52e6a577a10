"""``dg.autocast``: mixed precision by op, as ``torch.autocast`` on the CPU.

Inside an enabled region, dispatch casts the float inputs of each op by the op's own
``OpDef.autocast`` fact (the op files set it; nothing here names an op): "lower" ops
(matmul, linear, einsum, conv2d, lstm_cell, and so the composites built on them: bmm,
baddbmm, attention) run in the low dtype; "float32" ops (sums and means, softmax and
log-softmax, norms, layer norm, cross-entropy and the losses built on those reductions)
run in float32; every other op runs on its inputs as they come, promoted to the widest of
them. Parameters stay float32 (the master weights): the casts are ordinary ``cast`` op
calls, so autograd flows back through them and a float32 parameter gets a float32
gradient, and ``dg.compile`` records them as graph nodes. float64 tensors are never cast.

The backward engine runs with autocast off, so each VJP computes in the dtypes its
forward op ran in (as PyTorch does).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings

from .. import dtypes
from ..autograd.tape import grad_mode
from ..dispatch import autocast as _state, modes
from ..ops.elementwise import cast_to

_DEFAULT_DTYPE = {"cpu": dtypes.bfloat16, "cuda": dtypes.float16}
_LOW_DTYPES = (dtypes.bfloat16, dtypes.float16)


class _Region(threading.local):
    """Per thread: the dtype autocast uses on the CPU (kept when it is off, as torch's
    ``get_autocast_dtype``), how many enabled regions are open, and the cache of casts of
    parameters (leaves that require grad), emptied when the outermost region closes."""

    dtype = dtypes.bfloat16
    depth = 0
    cache: dict | None = None


_region = _Region()


def _cast(t, dtype):
    """``t`` cast to ``dtype``; a parameter's cast is made once per region while it is
    unchanged (a weight read at every step of a loop is cast once)."""
    cache = _region.cache
    # (never while tracing: a cast made eagerly before the trace would enter the graph as a
    # constant, stale once the parameter changes; the graph's cse shares the casts anyway)
    if cache is None or not t.requires_grad or t.grad_fn is not None or modes.tracer:
        return cast_to(t, dtype)
    key = (id(t), dtype, grad_mode.enabled)
    hit = cache.get(key)
    # (the same array at the same version, and a cast whose backward node is still usable)
    if (hit is not None and hit[0] is t._data and hit[1] == t._version[0]
            and (hit[2].grad_fn is None or not hit[2].grad_fn.freed)):
        return hit[2]
    out = cast_to(t, dtype)
    cache[key] = (t._data, t._version[0], out)
    return out


_state.cast = _cast


class autocast(contextlib.ContextDecorator):
    """Run the ops inside in mixed precision, as ``torch.autocast``: products (matmul,
    linear, conv, attention) in ``dtype``, reductions, softmax, norms and losses in
    float32, parameters kept in float32. A context manager and a decorator; regions nest,
    and ``enabled=False`` turns it off inside an enabled region. ``device_type="cuda"``
    warns and runs without autocast, as a CPU-only torch does.

    >>> import dualgraph as dg
    >>> w = dg.randn(4, 3, requires_grad=True)
    >>> with dg.autocast("cpu", dtype=dg.bfloat16):
    ...     y = dg.randn(2, 4) @ w
    ...     s = y.sum()
    >>> y.dtype, s.dtype
    (dualgraph.bfloat16, dualgraph.float32)
    >>> s.backward(); w.grad.dtype
    dualgraph.float32
    """

    def __init__(self, device_type: str = "cpu", dtype=None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        if device_type not in _DEFAULT_DTYPE:
            raise ValueError(f"autocast: device_type must be 'cpu' or 'cuda', got "
                             f"{device_type!r}")
        self.device = device_type
        # (no dtype: the one in force, so a nested region keeps its outer region's, as torch)
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else \
            dtypes.as_dtype(dtype)
        self._enabled = bool(enabled)
        self._cache_enabled = True if cache_enabled is None else bool(cache_enabled)
        if self._enabled and device_type == "cuda":
            warnings.warn("dg.autocast(device_type='cuda'): dualgraph runs on the CPU only, "
                          "so autocast is disabled here (as in a CPU-only torch); use "
                          "device_type='cpu'", stacklevel=2)
            self._enabled = False
        if self._enabled and self.fast_dtype not in _LOW_DTYPES:
            warnings.warn(f"dg.autocast: CPU autocast supports bfloat16 and float16, not "
                          f"{self.fast_dtype}; autocast is disabled", stacklevel=2)
            self._enabled = False
        self._saved = []

    def __enter__(self):
        self._saved.append((_state.dtype, _region.dtype, _region.cache))
        if self.device != "cpu":
            return self
        _region.dtype = self.fast_dtype
        _state.dtype = self.fast_dtype.np if self._enabled else None
        if self._enabled:
            _region.depth += 1
            if _region.cache is None and self._cache_enabled:
                _region.cache = {}
        return self

    def __exit__(self, *exc):
        _state.dtype, _region.dtype, cache = self._saved.pop()
        if self.device == "cpu" and self._enabled:
            _region.depth -= 1
        _region.cache = cache if _region.depth else None
        return False

    def __call__(self, fn):
        # (a new instance per call, so a decorated function may recurse or run in threads)
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)
        return wrapper


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether ops run under autocast now (on the CPU: dualgraph's only device).

    >>> import dualgraph as dg
    >>> with dg.autocast("cpu"):
    ...     dg.is_autocast_enabled("cpu")
    True
    """
    return device_type in (None, "cpu") and _state.dtype is not None


def get_autocast_dtype(device_type: str = "cpu"):
    """The low dtype autocast uses on ``device_type`` (bfloat16 for the CPU by default;
    float16 for "cuda", which dualgraph never runs on)."""
    return _region.dtype if device_type == "cpu" else _DEFAULT_DTYPE.get(device_type)


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast can run on ``device_type``: only on the CPU here."""
    return device_type == "cpu"

