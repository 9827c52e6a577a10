"""Special functions and the elementwise odds torch programs call: ``lgamma``, ``digamma``
and ``polygamma``, ``igamma``, ``erfinv``, ``logit``, ``xlogy``, ``heaviside``, ``signbit``,
``gcd`` and ``lcm``, and the counting ops ``isin`` and ``histc``.

NumPy has no ufunc for the gamma family or erfinv, so their kernels are here, computed in
float64 (float32 and halves round the result once): ``lgamma`` with the C library's
``lgamma`` per element; ``polygamma`` (``digamma`` is order 0) by the recurrence up to
x >= 10 and the asymptotic series there, ``digamma`` of negative x by reflection;
``erfinv`` from Giles' approximation refined by two Newton steps on ``erf`` (``erfc``
where |y| > 0.5, so that the steps keep their precision near +-1); ``igamma`` (the
regularised lower incomplete gamma function) by its power series below x = a + 1 and its
continued fraction above, as Numerical Recipes' ``gser`` / ``gcf``.

>>> import dualgraph as dg
>>> dg.lgamma(dg.tensor([5.0]))
tensor([3.1781])
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import dtypes, kernels
from ..dispatch import apply
from ..kernels import special as special_loops
from ..kernels.special import GILES_CENTRAL, GILES_TAIL, SERIES_FROM, SHIFT_LIMIT
from ..kernels.threads import run_rows, threads_for
from ..shapes import ShapedType
from . import elementwise as ew
from ._util import (as_operand, binary_kernel, cast, float_result_type, infer_binary,
                    infer_binary_float, infer_float, needs_grad, shape_of, unary_float_kernel)
from .elementwise import unbroadcast
from .inplace import inplace
from .opdef import defop

__all__ = ["lgamma", "digamma", "polygamma", "igamma", "erfinv", "logit", "xlogy",
           "heaviside", "signbit", "gcd", "lcm", "isin", "histc"]


def _in_float64(fn, loop=None, extras=lambda dtype, **attrs: ()):
    """``fn`` over float64, its result in the input's float dtype; float32 and float64 go
    through ``kernels.special.<loop>`` instead where Numba is there (the same formulas,
    each element read and written once), called with ``extras(dtype, **attrs)`` after
    the arrays."""
    def kernel(x, **attrs):
        if loop is not None and x.dtype in _LOOP_DTYPES and kernels.numba_available():
            out = np.empty(x.shape, x.dtype)
            flat = kernels.flat(x)
            # (an element costs ten or more of a cheap loop's: shared from fewer of them)
            run_rows(getattr(special_loops, loop), flat.size, flat, out.reshape(-1),
                     *extras(x.dtype, **attrs), threads=threads_for(flat.size * 16))
            return out
        with np.errstate(over="ignore", invalid="ignore"):   # (inf and NaN as torch's)
            return fn(x.astype(np.float64), **attrs).astype(x.dtype, copy=False)
    kernel.__name__ = fn.__name__
    return kernel


_LOOP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


# -- lgamma ---------------------------------------------------------------------------------
def _lgamma_scalar(v: float) -> float:
    if v <= 0 and (math.isinf(v) or v == math.floor(v)):   # poles: math.lgamma raises
        return math.inf
    return math.lgamma(v)


_lgamma_each = np.frompyfunc(_lgamma_scalar, 1, 1)


def _lgamma_array(x):
    return _lgamma_each(x).astype(np.float64)


LGAMMA = defop("lgamma", unary_float_kernel(_in_float64(_lgamma_array, "lgamma")), infer_float,
               vjp=lambda g, out, x: g * digamma(x), saves="i",
               doc="The log of the absolute value of the gamma function.")


def lgamma(input):
    """``log |Gamma(input)|``, as ``torch.lgamma`` (inf at the poles 0, -1, -2, ...)."""
    return apply(LGAMMA, input)


# -- igamma --------------------------------------------------------------------------------
_IGAMMA_EPS, _IGAMMA_TINY, _IGAMMA_STEPS = 1e-16, 1e-300, 10_000


def _gamma_series(a, x):
    """P(a, x) by its series, for x < a + 1 (each term shrinks: x / (a + n) < 1)."""
    denominator, term = a.copy(), 1 / a
    total = term.copy()
    for _ in range(_IGAMMA_STEPS):
        denominator += 1
        term *= x / denominator
        total += term
        if np.all(np.abs(term) <= np.abs(total) * _IGAMMA_EPS):
            break
    return total * np.exp(-x + a * np.log(x) - _lgamma_array(a))


def _gamma_fraction(a, x):
    """Q(a, x) = 1 - P(a, x) by its continued fraction (modified Lentz), for x >= a + 1."""
    b = x + 1 - a
    c, d = np.full_like(x, 1 / _IGAMMA_TINY), 1 / b
    h = d.copy()
    for i in range(1, _IGAMMA_STEPS):
        an = -i * (i - a)
        b = b + 2
        d = an * d + b
        d = np.where(np.abs(d) < _IGAMMA_TINY, _IGAMMA_TINY, d)
        c = b + an / c
        c = np.where(np.abs(c) < _IGAMMA_TINY, _IGAMMA_TINY, c)
        d = 1 / d
        step = d * c
        h *= step
        if np.all(np.abs(step - 1) <= _IGAMMA_EPS):
            break
    return np.exp(-x + a * np.log(x) - _lgamma_array(a)) * h


def _igamma_array(a, x):
    dt = float_result_type(a, x)
    a, x = np.broadcast_arrays(cast(a, np.float64), cast(x, np.float64))
    out = np.full(a.shape, np.nan)
    inside = (a > 0) & np.isfinite(a) & (x > 0) & np.isfinite(x)
    near = inside & (x < a + 1)
    far = inside & ~near
    out[near] = _gamma_series(a[near], x[near])
    out[far] = 1 - _gamma_fraction(a[far], x[far])
    # the limits torch gives: P(a, 0) = 0, P(a, inf) = 1, P(0, x > 0) = 1, P(inf, x) = 0
    out[(a > 0) & (x == 0)] = 0.0
    out[(a >= 0) & (a < np.inf) & (x > 0) & ~inside] = 1.0
    out[(a == np.inf) & (x >= 0) & (x < np.inf)] = 0.0
    return out.astype(dt)


def _igamma_vjp(g, out, a, x):
    if needs_grad(a):
        raise NotImplementedError("igamma: the derivative with respect to the first argument "
                                  "(a) is not implemented (nor is it in torch)")
    # d/dx P(a, x) = x^(a - 1) e^-x / Gamma(a)
    density = ew.exp(xlogy(a - 1, x) - x - lgamma(a))
    return None, unbroadcast(g * density, x)


IGAMMA = defop("igamma", binary_kernel(_igamma_array, float_result_type), infer_binary_float,
               vjp=_igamma_vjp, onnx=None,
               doc="The regularised lower incomplete gamma function P(a, x).")


def igamma(input, other):
    """The regularised lower incomplete gamma function ``P(input, other)``, as
    ``torch.igamma`` / ``torch.special.gammainc`` (the CDF of Gamma(input, 1) at
    ``other``; differentiable in ``other`` only, as in torch).

    >>> round(dg.igamma(dg.tensor([1.0]), dg.tensor([1.0])).item(), 4)
    0.6321
    """
    return apply(IGAMMA, as_operand(input), as_operand(other))


# -- polygamma and digamma -----------------------------------------------------------------
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)


@lru_cache(maxsize=None)
def series_coefficients(n: int) -> np.ndarray:
    """The coefficients of psi^(n)'s asymptotic series (``kernels.special.polygamma64``
    says which power of x each multiplies)."""
    if n == 0:
        return np.array([b / (2 * k) for k, b in enumerate(_BERNOULLI, 1)])
    return np.array([math.factorial(n - 1), math.factorial(n) / 2]
                    + [b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
                       for k, b in enumerate(_BERNOULLI, 1)], dtype=np.float64)


def _asymptotic(n: int, x):
    """psi^(n)(x) for x >= 10 by its asymptotic series."""
    c = series_coefficients(n)
    if n == 0:
        inv2 = 1.0 / (x * x)
        return np.log(x) - 0.5 / x - sum(ck * inv2 ** k for k, ck in enumerate(c, 1))
    total = c[0] / x ** n + c[1] / x ** (n + 1)
    for k, ck in enumerate(c[2:], 1):
        total = total + ck / x ** (2 * k + n)
    return total if n % 2 else -total


def _polygamma_extras(dtype, n: int) -> tuple:
    """``kernels.special.polygamma``'s arguments after the arrays."""
    return n, (-1.0) ** n * math.factorial(n), series_coefficients(n)


def _polygamma_array(x, n):
    """psi^(n)(x) in float64: shifted up by the recurrence psi^(n)(x) = psi^(n)(x + 1) -
    (-1)^n n! / x^(n+1) until x >= 10, then the series."""
    x = np.asarray(x, np.float64)
    out = np.full(x.shape, np.nan)
    reflect = (x < 0) if n == 0 else np.zeros(x.shape, bool)
    # (digamma: psi(x) = psi(1 - x) - pi / tan(pi x))
    y = np.where(reflect, 1.0 - x, x)
    ok = ~np.isnan(y) & (y > -SHIFT_LIMIT) & ~(np.isinf(y) & (y < 0))
    z, steps = y[ok], np.ceil(np.maximum(SERIES_FROM - y[ok], 0)).astype(np.int64)
    acc = np.zeros(z.shape)
    sign_fact = (-1.0) ** n * math.factorial(n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for k in range(int(steps.max()) if steps.size else 0):
            live = steps > k
            acc[live] -= sign_fact / (z[live] + k) ** (n + 1)
        out[ok] = _asymptotic(n, z + steps) + acc
        if n == 0:
            q = x - np.rint(x)   # (tan's period taken out exactly: |q| <= 1/2)
            pole = reflect & (x == np.floor(x))
            out = np.where(reflect, out - np.pi / np.tan(np.pi * q), out)
            out[pole] = np.nan
            out[x == 0] = np.copysign(np.inf, -x[x == 0])   # (torch's: +inf at -0.0)
            out[np.isinf(x) & (x < 0)] = np.nan
    return out


def _infer_polygamma(x, n):
    return infer_float(x)


POLYGAMMA = defop("polygamma", ew._float_kernel(_in_float64(_polygamma_array, "polygamma",
                                                            _polygamma_extras)),
                  _infer_polygamma, attrs=("n",),
                  vjp=lambda g, out, x, n: g * polygamma(n + 1, x),
                  doc="The n-th derivative of the digamma function (order 0: digamma).")


def polygamma(n, input):
    """The ``n``-th derivative of ``digamma`` at ``input``, as ``torch.polygamma``."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"polygamma(n, x) does not support negative or non-integer n, got "
                         f"{n!r}")
    return apply(POLYGAMMA, input, n=n)


def digamma(input):
    """The logarithmic derivative of the gamma function, as ``torch.digamma`` (-inf at 0,
    NaN at the negative integers)."""
    return polygamma(0, input)


def _polygamma_method(self, n):
    return polygamma(n, self)


# -- erfinv ---------------------------------------------------------------------------------
def _horner(coefficients, w):
    p = np.full(w.shape, coefficients[0])
    for c in coefficients[1:]:
        p = p * w + c
    return p


def giles(y, w):
    """Giles' approximation of erfinv(y), given ``w = -log((1 - y)(1 + y))``."""
    return y * np.where(w < 5.0, _horner(GILES_CENTRAL, w - 2.5),
                        _horner(GILES_TAIL, np.sqrt(w) - 3.0))


def erfc_newton(t, goal):
    """``t >= 0`` refined by four Newton steps on ``log erfc(t) = goal``: nearly linear in
    t^2, so it converges from afar, and keeps its precision where erfc is tiny."""
    for _ in range(4):
        erfc = ew._erfc_array(t)
        step = (np.log(erfc) - goal) * erfc / (-ew.TWO_OVER_SQRT_PI * np.exp(-t * t))
        t = np.where(np.isfinite(step), t - step, t)
    return t


def _erfinv_array(y):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = giles(y, -np.log((1.0 - y) * (1.0 + y)))
        a = np.abs(y)
        tail = a > 0.5
        near, v = ~tail, y[~tail]
        for _ in range(2):   # Newton on erf(x) = y
            z = x[near]
            x[near] = z - (ew._erf_array(z) - v) / (ew.TWO_OVER_SQRT_PI * np.exp(-z * z))
        # where |y| > 0.5, Newton on log erfc(t) = log(1 - |y|) for t = |x| (erf's
        # rounding near 1 would stall it): nearly linear in t^2, so it converges from afar
        x[tail] = np.copysign(erfc_newton(np.abs(x[tail]), np.log1p(-a[tail])), y[tail])
        x = np.where(a == 1.0, np.copysign(np.inf, y), x)
    return np.where(a > 1.0, np.nan, x)


def _erfinv_extras(dtype) -> tuple:
    """``kernels.special.erfinv``'s arguments after the arrays."""
    return GILES_CENTRAL, GILES_TAIL, 1 if dtype == np.float32 else 2


ERFINV = defop("erfinv", unary_float_kernel(_in_float64(_erfinv_array, "erfinv",
                                                       _erfinv_extras)),
               infer_float,
               vjp=lambda g, out, x: g * (math.sqrt(math.pi) / 2) * ew.exp(out * out),
               saves="o", doc="The inverse of erf on (-1, 1).")


def erfinv(input):
    """The inverse error function, as ``torch.erfinv``: +-inf at +-1, NaN outside."""
    return apply(ERFINV, input)


# -- logit, xlogy ---------------------------------------------------------------------------
def logit(input, eps=None):
    """``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given
    (the gradient is then zero outside), as ``torch.logit``. Without ``eps`` the value and
    the gradient are NaN outside ``[0, 1]``, as torch's (the two logs alone would give a
    finite gradient there)."""
    if eps is not None:
        p = ew.clamp(input, eps, 1.0 - eps)
    else:
        x = as_operand(input)
        x = x if x.is_floating_point() else x.to(dtypes.get_default_dtype())
        outside = ew.logical_or(ew.lt(x, 0), ew.gt(x, 1))
        p = x * ew.where(outside, math.nan, 1.0).to(x.dtype)   # (times 1.0 inside: exact)
    return ew.log(p) - ew.log1p(-p)


def _xlog_array(log):
    """The kernel of ``x * log(y)`` (``log``: np.log or np.log1p), 0 where x is 0 and y is
    not NaN."""
    def kernel(x, y):
        dt = float_result_type(x, y)   # (log of a Python float is a float64 NumPy scalar)
        x, y = cast(x, dt), cast(y, dt)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = x * log(y)
        return np.where((x == 0) & ~np.isnan(y), 0, out).astype(out.dtype, copy=False)
    kernel.__name__ = "x" + log.__name__ + "y"
    return kernel


def _xlog_vjp(shift):
    """The VJP of ``x * log(y + shift)``, torch's: ``xlogy(g, y + shift)`` for x (0 where
    x is 0 and y + shift <= 0, and where g is 0: not ``0 * log`` of a negative, NaN),
    ``x / (y + shift)`` for y."""
    def vjp(g, out, x, y):
        own = xlogy if shift == 0 else xlog1py
        gx = None
        if needs_grad(x):
            zero = ew.logical_and(ew.eq(x, 0), ew.le(y, -shift))
            gx = unbroadcast(ew.where(zero, 0.0, own(g, y)), x)
        gy = unbroadcast(g * x / (y + shift), y) if needs_grad(y) else None
        return gx, gy
    return vjp


def _onnx_xlog(shift):
    def export(e, node):
        dtype = node.outputs[0].dtype
        x, y = e.inputs(dtype)
        zero = e.scalar(0, dtype, "zero")
        keep = e.op("And", [e.op("Equal", [x, zero]), e.op("Not", [e.op("IsNaN", [y])])])
        if shift:
            y = e.op("Add", [y, e.scalar(shift, dtype, "one")])
        return [e.op("Where", [keep, zero, e.op("Mul", [x, e.op("Log", [y])])])]
    return export


# (primitives: x * log(y) as ops is NaN at x = y = 0, and masking it makes its gradient NaN)
XLOGY = defop("xlogy", binary_kernel(_xlog_array(np.log), float_result_type),
              infer_binary_float, vjp=_xlog_vjp(0), onnx=_onnx_xlog(0),
              doc="input * log(other), 0 where input is 0 (unless other is NaN).")
XLOG1PY = defop("xlog1py", binary_kernel(_xlog_array(np.log1p), float_result_type),
                infer_binary_float, vjp=_xlog_vjp(1), onnx=_onnx_xlog(1),
                doc="input * log1p(other), 0 where input is 0 (unless other is NaN).")


def xlogy(input, other):
    """``input * log(other)``, 0 where ``input`` is 0 and ``other`` is not NaN, as
    ``torch.xlogy``."""
    return apply(XLOGY, as_operand(input), as_operand(other))


def xlog1py(input, other):
    """``input * log1p(other)``, 0 where ``input`` is 0 and ``other`` is not NaN, as
    ``torch.special.xlog1py``."""
    return apply(XLOG1PY, as_operand(input), as_operand(other))


# -- heaviside, signbit, gcd, lcm -----------------------------------------------------------
def heaviside(input, values):
    """The step function: 0 below 0, 1 above, ``values`` at 0, as ``torch.heaviside``."""
    values = as_operand(values)
    if isinstance(values, type(input)) and values.dtype != input.dtype:
        raise TypeError(f"heaviside is not yet implemented for tensors with different "
                        f"dtypes: {input.dtype} and {values.dtype}")
    step = ew.where(ew.gt(input, 0), 1, 0).to(input.dtype)
    return ew.where(ew.eq(input, 0), values, step)


def _signbit_array(x):
    return np.signbit(x.astype(np.float32) if x.dtype.itemsize < 4 else x)


SIGNBIT = defop("signbit", _signbit_array, lambda x: ShapedType(tuple(x.shape), np.dtype(bool)),
                saves="", elementwise="signbit({0})",
                doc="Whether the sign bit is set (true for -0.0 and negative NaNs).")


def signbit(input):
    """Whether each element's sign bit is set (``-0.0`` included), as ``torch.signbit``."""
    return apply(SIGNBIT, input)


def _integer_kernel(ufunc):
    base = binary_kernel(ufunc)

    def kernel(a, b):
        dt = dtypes.result_type(a, b)
        if dt.kind not in "iu":
            raise TypeError(f"{ufunc.__name__}: not implemented for {dt} (integers only)")
        return base(a, b)
    kernel.__name__ = ufunc.__name__
    return kernel


def _infer_integer(a, b):
    out = infer_binary(a, b)
    if out.dtype.kind not in "iu":
        raise TypeError(f"expected integer tensors, got {out.dtype}")
    return out


GCD = defop("gcd", _integer_kernel(np.gcd), _infer_integer, saves="", commutative=True,
            elementwise="gcd({0}, {1})", doc="The greatest common divisor (non-negative).")
LCM = defop("lcm", _integer_kernel(np.lcm), _infer_integer, saves="", commutative=True,
            elementwise="lcm({0}, {1})", doc="The least common multiple (non-negative).")


def gcd(input, other):
    """The elementwise greatest common divisor of integers, as ``torch.gcd``."""
    return apply(GCD, as_operand(input), as_operand(other))


def lcm(input, other):
    """The elementwise least common multiple of integers, as ``torch.lcm``."""
    return apply(LCM, as_operand(input), as_operand(other))


# -- isin, histc ----------------------------------------------------------------------------
def _isin_kernel(elements, test_elements, invert):
    return np.isin(elements, test_elements, invert=invert)


ISIN = defop("isin", _isin_kernel,
             lambda x, t, invert: ShapedType(shape_of(x), np.dtype(bool)),
             attrs=("invert",), saves="",
             doc="Whether each element of input 0 occurs in input 1.")


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of ``elements`` is among ``test_elements`` (either may be a number),
    as ``torch.isin``; ``invert=True`` gives the opposite."""
    return apply(ISIN, as_operand(elements), as_operand(test_elements), invert=bool(invert))


def _histc_kernel(x, bins, min, max):
    lo, hi = x.dtype.type(min), x.dtype.type(max)
    if lo == hi and x.size:
        lo, hi = x.min(), x.max()
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError(f"histc: range of [{lo}, {hi}] is not finite")
    inside = x[(x >= lo) & (x <= hi)]
    at = ((inside - lo) * bins / (hi - lo)).astype(np.int64)
    return np.bincount(np.minimum(at, bins - 1), minlength=bins).astype(x.dtype)


def _infer_histc(x, bins, min, max):
    return ShapedType((bins,), x.dtype)


HISTC = defop("histc", _histc_kernel, _infer_histc, attrs=("bins", "min", "max"), saves="",
              doc="A histogram of ``bins`` equal bins over [min, max] (the data's range when "
                  "min == max); elements outside are ignored.")


def histc(input, bins=100, min=0, max=0):
    """Count the elements in ``bins`` equal-width bins between ``min`` and ``max`` (the
    data's smallest and largest when both are equal), as ``torch.histc``."""
    if bins <= 0:
        raise ValueError(f"histc: bins must be > 0, but got {bins}")
    if min > max:
        raise ValueError(f"histc: max must be larger than min, got min={min}, max={max}")
    if not input.is_floating_point():
        raise TypeError(f"histc: not implemented for {input.dtype} (floating-point input "
                        "only)")
    return apply(HISTC, input, bins=int(bins), min=float(min), max=float(max))


_UNARY = {"lgamma": lgamma, "digamma": digamma, "erfinv": erfinv, "logit": logit,
          "xlogy": xlogy, "heaviside": heaviside, "gcd": gcd, "lcm": lcm}
METHODS = {**_UNARY, **{name + "_": inplace(fn) for name, fn in _UNARY.items()},
           "polygamma": _polygamma_method, "polygamma_": inplace(_polygamma_method),
           "signbit": signbit, "histc": histc}
