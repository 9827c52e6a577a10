"""Elementwise torch names that are other names of dualgraph's ops (``greater``,
``not_equal``, ``divide``, ``sgn``, ...) or exact compositions of them (``deg2rad``,
``fmax``, ``float_power``, ``isposinf``, ...): they differentiate, trace, fuse and export
through those ops.

>>> import dualgraph as dg
>>> dg.fmax(dg.tensor([1.0, float("nan")]), dg.tensor([2.0, 0.5]))
tensor([2.0000, 0.5000])
"""
from __future__ import annotations

import math

from .. import dtypes
from ..tensor import Tensor
from . import elementwise as ew
from ._util import as_operand
from .creation import ones_like
from .inplace import inplace

__all__ = ["greater", "greater_equal", "less", "less_equal", "not_equal", "divide",
           "positive", "sgn", "deg2rad", "rad2deg", "fmax", "fmin", "float_power",
           "isposinf", "isneginf", "isreal"]

greater, greater_equal, less, less_equal, not_equal = ew.gt, ew.ge, ew.lt, ew.le, ew.ne
divide, sgn = ew.div, ew.sign   # (sgn: sign, for the real dtypes dualgraph has)


def positive(input):
    """``input`` itself, as ``torch.positive`` (bool tensors raise, as there)."""
    if input.dtype == dtypes.bool_:
        raise TypeError("The `+` operator, on a bool tensor is not supported.")
    return input


def _as_float(x):
    return x if x.is_floating_point() else x.to(dtypes.get_default_dtype())


def deg2rad(input):
    """Degrees to radians (integers give the default float), as ``torch.deg2rad``."""
    return _as_float(input) * (math.pi / 180)


def rad2deg(input):
    """Radians to degrees (integers give the default float), as ``torch.rad2deg``."""
    return _as_float(input) * (180 / math.pi)


def _nan_ignoring(keep_first):
    def pick(input, other):
        other = as_operand(other)
        first = keep_first(input, other)
        if isinstance(other, Tensor):
            first = ew.logical_or(first, ew.isnan(other))
        return ew.where(first, input, other)
    return pick


# the gradient goes to input where it is kept (ties included), else to other, as torch's
fmax = _nan_ignoring(ew.ge)
fmin = _nan_ignoring(ew.le)
fmax.__name__, fmin.__name__ = "fmax", "fmin"
fmax.__doc__ = ("The elementwise maximum where a NaN loses to a number (NaN where both "
                "are), as ``torch.fmax``.")
fmin.__doc__ = ("The elementwise minimum where a NaN loses to a number (NaN where both "
                "are), as ``torch.fmin``.")


def float_power(input, exponent):
    """``input ** exponent`` computed in float64, as ``torch.float_power`` (no in-place
    form: torch's takes float64 tensors only)."""
    wide = [x.to(dtypes.float64) if isinstance(x, Tensor) else x for x in (input, exponent)]
    return ew.pow(*wide)


def isposinf(input):
    """Where ``input`` is +inf, as ``torch.isposinf``."""
    return ew.logical_and(ew.isinf(input), ew.gt(input, 0))


def isneginf(input):
    """Where ``input`` is -inf, as ``torch.isneginf``."""
    return ew.logical_and(ew.isinf(input), ew.lt(input, 0))


def isreal(input):
    """All true: dualgraph's dtypes are real, as ``torch.isreal`` of a real tensor."""
    return ones_like(input, dtype=dtypes.bool_)


_NAMES = {"greater": greater, "greater_equal": greater_equal, "less": less,
          "less_equal": less_equal, "not_equal": not_equal, "divide": divide, "sgn": sgn,
          "deg2rad": deg2rad, "rad2deg": rad2deg}
METHODS = {**_NAMES, **{name + "_": inplace(fn) for name, fn in _NAMES.items()},
           "fmax": fmax, "fmin": fmin, "float_power": float_power, "positive": positive,
           "isposinf": isposinf, "isneginf": isneginf,
           "isreal": isreal}
