"""The ops on a float's sign and representation torch programs call: ``copysign`` (a
composite of ``abs``, ``signbit`` and ``where``), ``nextafter`` (a primitive: NumPy's,
whose loops ml_dtypes' bfloat16 has too) and ``frexp`` (a primitive: mantissa and int32
exponent, as block floating-point quantisers split a scale).

>>> import dualgraph as dg
>>> dg.copysign(dg.tensor([1.0, -2.0]), -0.0)
tensor([-1., -2.])
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from .. import dtypes
from ..dispatch import apply
from ..shapes import ShapedType
from ..tensor import Tensor
from . import elementwise as ew
from ._util import as_operand, binary_kernel, cast, float_result_type, infer_binary
from .creation import zeros_like
from .elementwise import unbroadcast
from .inplace import inplace
from .opdef import defop
from .special import signbit

__all__ = ["copysign", "nextafter", "frexp"]


def copysign(input, other):
    """``|input|`` with the sign of ``other`` (a tensor or a number; -0.0 and negative NaNs
    count as negative), as ``torch.copysign``: integers give the default float. The
    gradient is ``input``'s sign ratio (0 where ``input`` is 0); ``other``'s is zero."""
    other = as_operand(other)
    dt = float_result_type(input._data, getattr(other, "_data", other))
    magnitude = ew.abs(input.to(dt))
    if isinstance(other, Tensor):
        return ew.with_zero_gradient(ew.where(signbit(other), -magnitude, magnitude), other)
    return -magnitude if math.copysign(1.0, other) < 0 else magnitude


def _nextafter_array(x, y):
    dt = dtypes.result_type(x, y)
    return np.nextafter(cast(x, dt), cast(y, dt))


def _nextafter_vjp(g, out, x, y):
    """torch's: the gradient passes to ``input`` unchanged; ``other`` gets zeros."""
    gx = unbroadcast(g, x) if isinstance(x, Tensor) and x.requires_grad else None
    gy = zeros_like(y) if isinstance(y, Tensor) and y.requires_grad else None
    return gx, gy


NEXTAFTER = defop("nextafter", binary_kernel(_nextafter_array),
                  infer_binary, vjp=_nextafter_vjp,
                  doc="The next float after input 0 towards input 1.")


def nextafter(input, other):
    """The next representable float after ``input`` towards ``other``, as
    ``torch.nextafter`` (floating-point inputs only)."""
    input, other = as_operand(input), as_operand(other)
    for t in (input, other):
        if not (t.is_floating_point() if isinstance(t, Tensor) else isinstance(t, float)):
            raise TypeError(f"nextafter: not implemented for {getattr(t, 'dtype', type(t))} "
                            "(floating-point inputs only)")
    return apply(NEXTAFTER, input, other)


def _frexp_kernel(x):
    """NumPy's frexp, in float32 for the half types (exact: their values are float32's)."""
    wide = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    mantissa, exponent = np.frexp(wide)
    return mantissa.astype(x.dtype), exponent.astype(np.int32)


def _frexp_vjp(g, out, x):
    """torch's: the mantissa's gradient divided by ``2 ** exponent``; the exponent is an
    integer (no gradient)."""
    return (ew.div(g[0], ew.exp2(out[1].to(g[0].dtype))),)


FREXP = defop("frexp", _frexp_kernel,
              lambda x: (ShapedType(tuple(x.shape), x.dtype),
                         ShapedType(tuple(x.shape), np.dtype(np.int32))),
              vjp=_frexp_vjp, num_outputs=2, differentiable_outputs=(0,), saves="o",
              doc="Mantissa in [0.5, 1) (signed) and int32 exponent: x = m * 2 ** e.")

FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])


def frexp(input):
    """``(mantissa, exponent)`` with ``input = mantissa * 2 ** exponent``, the mantissa's
    magnitude in [0.5, 1) (0 for 0) and the exponent int32, as ``torch.frexp``
    (floating-point inputs only). The mantissa's gradient is ``grad / 2 ** exponent``.

    >>> dg.frexp(dg.tensor([8.0, -0.75])).exponent.tolist()
    [4, 0]
    """
    if not input.is_floating_point():
        raise RuntimeError(f"torch.frexp() only supports floating-point dtypes, got "
                           f"{input.dtype}")
    return FrexpResult(*apply(FREXP, input))


_BINARY = {"copysign": copysign, "nextafter": nextafter}
METHODS = {**_BINARY, **{name + "_": inplace(fn) for name, fn in _BINARY.items()},
           "frexp": frexp}
