"""One-pass loops for the special functions NumPy has no ufunc for: ``lgamma``,
``polygamma`` (``digamma`` is order 0) and ``erfinv``, over flat float32 or float64 arrays,
each element computed in float64 and rounded once to the output's dtype.

The formulas are those of the NumPy kernels in ``ops/special.py``, which document them and
run where Numba is missing (``lgamma`` here is the C library's, as Python's
``math.lgamma`` there; ``erf`` and ``erfc`` are the C library's too, where the NumPy form
uses Cody's: the Newton steps converge to the same float64 root within an ulp or two).
NumPy's form of these is one Python call per element (``lgamma``) or a dozen full passes
with temporaries and masks (``polygamma``, ``erfinv``): 12-230x torch's time; these loops
read and write each element once.
"""
from __future__ import annotations

import math

import numpy as np

from . import helper, loop

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
SERIES_FROM = 10.0      # polygamma's asymptotic series from here up (error < 1e-16)
SHIFT_LIMIT = 1000.0    # polygamma(n >= 1) of x below -this many is NaN (no reflection)
# Giles' single-precision approximation of erfinv, central (w < 5) and tail coefficients
GILES_CENTRAL = np.array([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                           0.00021858087, -0.00125372503, -0.00417768164, 0.246640727,
                           1.50140941])
GILES_TAIL = np.array([-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                        0.00573950773, -0.0076224613, 0.00943887047, 1.00167406,
                        2.83297682])


@helper(inline="always")
def lgamma64(v):
    """``log |Gamma(v)|``; +inf at the poles 0, -1, -2, ... and at -inf."""
    if v <= 0.0 and (math.isinf(v) or v == math.floor(v)):
        return math.inf
    return math.lgamma(v)


@loop
def lgamma(start, stop, x, out):
    """``out = lgamma(x)`` over elements ``start:stop`` of flat arrays."""
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = lgamma64(np.float64(xs[i]))


@helper(inline="always")
def polygamma64(x, n, sign_factorial, coefficients):
    """psi^(n)(x): shifted up by psi^(n)(x) = psi^(n)(x + 1) - (-1)^n n! / x^(n + 1) until
    x >= 10, then the asymptotic series, whose coefficients the caller works out once
    (``ops.special.series_coefficients``): n = 0, ``c[k]`` of ``x^-(2k + 2)``; n >= 1,
    ``c[0]`` of ``x^-n``, ``c[1]`` of ``x^-(n + 1)``, ``c[k]`` of ``x^-(2k - 2 + n)``.
    digamma (n = 0) of negative x by the reflection psi(x) = psi(1 - x) - pi / tan(pi x)."""
    if math.isnan(x):
        return math.nan
    if n == 0 and x == 0.0:
        return math.copysign(math.inf, -x)     # (torch's: -inf at 0.0, +inf at -0.0)
    reflect = n == 0 and x < 0.0
    if reflect and x == math.floor(x):         # the poles, and -inf
        return math.nan
    y = 1.0 - x if reflect else x
    if y <= -SHIFT_LIMIT or (math.isinf(y) and y < 0.0):
        return math.nan
    steps = int(math.ceil(max(SERIES_FROM - y, 0.0)))
    shift = 0.0
    for k in range(steps):
        shift -= sign_factorial / (y + k) ** (n + 1)
    z = y + steps
    if n == 0:
        inverse_square = 1.0 / (z * z)
        series, power = 0.0, 1.0
        for c in coefficients:
            power *= inverse_square
            series += c * power
        value = math.log(z) - 0.5 / z - series
    else:
        value = coefficients[0] / z ** n + coefficients[1] / z ** (n + 1)
        for k in range(2, coefficients.size):
            value += coefficients[k] / z ** (2 * (k - 1) + n)
        if n % 2 == 0:
            value = -value
    value += shift
    if reflect:
        value -= math.pi / math.tan(math.pi * (x - np.rint(x)))   # (tan's period out exactly)
    return value


@loop
def polygamma(start, stop, x, out, n, sign_factorial, coefficients):
    """``out = polygamma(n, x)`` over elements ``start:stop`` of flat arrays."""
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = polygamma64(np.float64(xs[i]), n, sign_factorial, coefficients)


@helper(inline="always")
def horner(coefficients, w):
    p = coefficients[0]
    for k in range(1, coefficients.size):
        p = p * w + coefficients[k]
    return p


@helper(inline="always")
def erfinv64(y, central, tail, steps):
    """The inverse of erf: Giles' approximation (relative error < 4e-7), then Newton's
    steps on ``erf(x) = y`` where |y| <= 0.5, and on ``log erfc(t) = log(1 - |y|)`` for
    t = |x| beyond (nearly linear in t^2, so it converges from afar, and keeps its
    precision where erfc is tiny). ``steps``: 1 for a float32 result (quadratic
    convergence: 1e-13 after one), 2 (and up to 4 in the tail) for float64."""
    a = abs(y)
    if a > 1.0:
        return math.nan
    if a == 1.0:
        return math.copysign(math.inf, y)
    w = -math.log((1.0 - y) * (1.0 + y))
    if w < 5.0:
        x = y * horner(central, w - 2.5)
    else:
        x = y * horner(tail, math.sqrt(w) - 3.0)
    if not a > 0.5:                             # (NaN stays NaN on this branch)
        for _ in range(steps):
            x -= (math.erf(x) - y) / (_TWO_OVER_SQRT_PI * math.exp(-x * x))
        return x
    t, goal = abs(x), math.log1p(-a)
    for k in range(2 * steps):
        erfc = math.erfc(t)
        step = (math.log(erfc) - goal) * erfc / (-_TWO_OVER_SQRT_PI * math.exp(-t * t))
        if math.isfinite(step):
            t -= step
        if k + 1 >= steps and not abs(step) > 1e-9 * t:   # (the next: below an ulp)
            break
    return math.copysign(t, y)


@loop
def erfinv(start, stop, x, out, central, tail, steps):
    """``out = erfinv(x)`` over elements ``start:stop`` of flat arrays (``steps``: as
    :func:`erfinv64`)."""
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = erfinv64(np.float64(xs[i]), central, tail, steps)
