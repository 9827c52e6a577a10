"""The special functions of ``torch.special`` whose kernels are series, rational
approximations or sums: ``erfcx``, ``ndtri``, the modified Bessel functions ``i0``, ``i0e``,
``i1``, ``i1e``, the Bessel functions ``bessel_j0``, ``bessel_j1`` and the Hurwitz ``zeta``; and the composites over them and the gamma family:
``ndtr``, ``log_ndtr``, ``sinc``, ``entr``, ``multigammaln`` (``mvlgamma``).

Every kernel computes in float64 (float32 and halves round the result once):

- ``erfcx(x) = exp(x^2) erfc(x)`` by Cody's rational approximations without their
  ``exp(-x^2)`` factor (for x >= 0.47 erfc is that factor times them), so it neither
  overflows nor loses digits where erfc underflows; ``erfcx(-x) = 2 exp(x^2) - erfcx(x)``.
- ``I_n(x) exp(-|x|)`` (n = 0, 1) by the power series, all of whose terms are positive, for
  |x| <= 30, and by the asymptotic series (its terms shrink until k = 2|x|) beyond.
- ``J_n(x)`` (n = 0, 1) by the trapezoidal rule on Bessel's integral for |x| <= 25 and
  Hankel's asymptotic series beyond.
- ``zeta(x, q)`` by Euler-Maclaurin summation, as Cephes' ``zeta`` (which torch ports).

>>> import dualgraph as dg
>>> dg.special.i0(dg.tensor([0.0, 1.0]))
tensor([1.0000, 1.2661])
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..dispatch import apply
from . import elementwise as ew
from . import reduce as red
from ._util import as_operand, binary_kernel, float_result_type, infer_binary_float, \
    infer_float, needs_grad, unary_float_kernel
from .creation import arange
from .elementwise import unbroadcast
from .inplace import inplace
from .opdef import defop
from .special import _in_float64, erfc_newton, giles, lgamma

__all__ = ["i0", "sinc", "mvlgamma"]


# -- erfcx ----------------------------------------------------------------------------------
def _erfcx_array(x):
    y = np.abs(x)
    out = np.full(y.shape, np.nan)
    near, far = y <= 0.46875, y > 4.0
    mid = ~near & ~far & ~np.isnan(y)
    yn = y[near]
    out[near] = np.exp(yn * yn) * (1 - yn * ew._rational(ew._ERF_A, ew._ERF_B, yn * yn))
    out[mid] = ew._rational(ew._ERF_C, ew._ERF_D, y[mid])
    yf = y[far]
    t = 1 / (yf * yf)
    out[far] = (ew._ONE_OVER_SQRT_PI - t * ew._rational(ew._ERF_P, ew._ERF_Q, t)) / yf
    neg = x < 0
    with np.errstate(over="ignore"):
        out[neg] = 2 * np.exp(x[neg] * x[neg]) - out[neg]
    return out


ERFCX = defop("erfcx", unary_float_kernel(_in_float64(_erfcx_array)), infer_float,
              vjp=lambda g, out, x: g * (2 * x * out - ew.TWO_OVER_SQRT_PI), saves="io",
              doc="The scaled complementary error function exp(x^2) erfc(x).")


def erfcx(input):
    """``exp(input^2) * erfc(input)``, as ``torch.special.erfcx`` (finite where erfc
    underflows)."""
    return apply(ERFCX, input)


# -- the modified Bessel functions I0 and I1 -----------------------------------------------
_SERIES_UP_TO = 30.0   # |x| beyond: the asymptotic series (its 30th term is below 1e-20)
_SERIES_TERMS = 90     # the power series' terms at |x| <= 30 (the 90th is below 1e-30)


def _bessel_i_scaled(x, n):
    """``I_n(x) exp(-|x|)`` in float64 for n = 0 or 1."""
    a = np.abs(x)
    out = np.full(a.shape, np.nan)
    small = a <= _SERIES_UP_TO
    half = a[small] / 2
    term = half if n else np.ones_like(half)
    total = term.copy()
    for k in range(1, _SERIES_TERMS):
        term = term * half * half / (k * (k + n))
        total += term
    out[small] = total * np.exp(-a[small])
    big = a > _SERIES_UP_TO
    z = a[big]
    term, total, mu = np.ones_like(z), np.ones_like(z), 4.0 * n * n
    for k in range(1, 31):
        term = -term * (mu - (2 * k - 1) ** 2) / (k * 8 * z)
        total += term
    with np.errstate(invalid="ignore"):   # (inf: 0 * inf in the series' terms)
        out[big] = np.where(np.isinf(z), 0.0, total / np.sqrt(2 * np.pi * z))
    return np.copysign(out, x) if n else out


def _bessel_i_array(x, n, scaled):
    out = _bessel_i_scaled(x, n)
    if scaled:
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        return out * np.exp(np.abs(x))   # (NaN at +-inf, as torch's: 0 * inf)


def _bessel_i_vjp(g, out, x, n, scaled):
    """torch's rules: I0' = I1; I1' = I0 - I1 / x (1/2 at 0); the scaled forms less
    sgn(x) times themselves."""
    if n == 0:
        d = bessel_i(x, 1, scaled)
        return g * (d - ew.sign(x) * out if scaled else d)
    zero = ew.eq(x, 0)
    safe = ew.where(zero, 1.0, x)
    ratio = out / safe + (ew.sign(x) * out if scaled else 0.0)
    return g * ew.where(zero, 0.5, bessel_i(x, 0, scaled) - ratio).to(out.dtype)


BESSEL_I = defop("bessel_i", ew._float_kernel(_in_float64(_bessel_i_array)),
                 lambda x, n, scaled: infer_float(x), attrs=("n", "scaled"),
                 vjp=_bessel_i_vjp, saves="io",
                 doc="The modified Bessel function of the first kind I_n (n = 0, 1), times "
                     "exp(-|x|) when scaled.")


def bessel_i(x, n: int, scaled: bool):
    """``I_n(x)``, or ``I_n(x) exp(-|x|)`` when ``scaled`` (n = 0 or 1)."""
    return apply(BESSEL_I, x, n=n, scaled=scaled)


def i0(input):
    """The modified Bessel function of the first kind of order 0, as ``torch.i0``."""
    return bessel_i(input, 0, False)


def i0e(input):
    """``i0(input) * exp(-|input|)``, as ``torch.special.i0e``."""
    return bessel_i(input, 0, True)


def i1(input):
    """The modified Bessel function of the first kind of order 1, as
    ``torch.special.i1``."""
    return bessel_i(input, 1, False)


def i1e(input):
    """``i1(input) * exp(-|input|)``, as ``torch.special.i1e``."""
    return bessel_i(input, 1, True)


# -- the Bessel functions J0 and J1 ----------------------------------------------------------
_BESSEL_J_NODES = 128   # trapezoid nodes per period: the rule's error is about J_128(25)
_BESSEL_J_BLOCK = 4096  # elements per block of the (elements x nodes) table


def _bessel_j_array(x, n):
    """J_n(x) in float64 for n = 0 or 1: for |x| <= 25, the mean of cos(n t - x sin t) over
    one period by the trapezoidal rule (exact to rounding for a periodic analytic integrand
    with enough nodes); beyond, Hankel's asymptotic series. NaN at +-inf, as torch's."""
    a = np.abs(x).ravel()
    out = np.full(a.shape, np.nan)
    near = np.flatnonzero(a <= 25.0)
    t = np.arange(_BESSEL_J_NODES) * (2 * np.pi / _BESSEL_J_NODES)
    for start in range(0, near.size, _BESSEL_J_BLOCK):
        at = near[start:start + _BESSEL_J_BLOCK]
        out[at] = np.cos(n * t - a[at, None] * np.sin(t)).mean(axis=1)
    far = np.flatnonzero((a > 25.0) & np.isfinite(a))
    z = a[far]
    mu, term = 4.0 * n * n, np.ones_like(z)
    p, q = np.ones_like(z), np.zeros_like(z)
    for k in range(1, 40):
        term = term * (mu - (2 * k - 1) ** 2) / (k * 8 * z)
        if k % 2:
            q += term * (-1) ** (k // 2)
        else:
            p += term * (-1) ** (k // 2)
    chi = z - (n / 2 + 0.25) * np.pi
    out[far] = np.sqrt(2 / (np.pi * z)) * (p * np.cos(chi) - q * np.sin(chi))
    out[a == 0] = 1 - n   # (the rule's sum leaves a rounding residue where J1 is 0)
    out = out.reshape(np.shape(x))
    return np.where(np.signbit(x), -out, out) if n else out


BESSEL_J = defop("bessel_j", ew._float_kernel(_in_float64(_bessel_j_array)),
                 lambda x, n: infer_float(x), attrs=("n",),
                 doc="The Bessel function of the first kind J_n (n = 0, 1); no gradient, as "
                     "torch's.")


def bessel_j0(input):
    """The Bessel function of the first kind of order 0, as ``torch.special.bessel_j0``
    (which has no gradient)."""
    return apply(BESSEL_J, input, n=0)


def bessel_j1(input):
    """The Bessel function of the first kind of order 1, as ``torch.special.bessel_j1``
    (which has no gradient)."""
    return apply(BESSEL_J, input, n=1)


# -- the Hurwitz zeta function --------------------------------------------------------------
_EULER_MACLAURIN = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                    7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                    -4.5979787224074726105e15, 1.8152105401943546773e17,
                    -7.1661652561756670113e18)
_EPS = np.finfo(np.float64).eps


def _zeta_scalar(x: float, q: float) -> float:
    """Cephes' zeta(x, q) = sum over k >= 0 of (k + q)^-x."""
    x, q = np.float64(x), np.float64(q)   # (0 / 0 is NaN, as in C, not an exception)
    if math.isnan(x) or math.isnan(q):
        return math.nan
    if x == 1:
        return math.inf
    if x < 1:
        return math.nan
    if q <= 0:
        if q == math.floor(q):
            return math.inf
        if x != math.floor(x):
            return math.nan   # (q^-x is complex)
    s, a, i, b = q ** -x, q, 0, 0.0
    while i < 9 or a <= 9.0:
        i, a = i + 1, a + 1
        b = a ** -x
        s += b
        if abs(b / s) < _EPS:
            return s
    w = a
    s += b * w / (x - 1) - 0.5 * b
    a, k = 1.0, 0.0
    for coefficient in _EULER_MACLAURIN:
        a *= x + k
        b /= w
        t = a * b / coefficient
        s += t
        if abs(t / s) < _EPS:
            break
        k += 1
        a *= x + k
        b /= w
        k += 1
    return s


_zeta_each = np.frompyfunc(_zeta_scalar, 2, 1)


def _zeta_array(x, q):
    dt = float_result_type(x, q)
    with np.errstate(all="ignore"):
        out = _zeta_each(np.asarray(x, np.float64), np.asarray(q, np.float64))
    return np.asarray(out, np.float64).astype(dt)


def _zeta_vjp(g, out, x, q):
    if needs_grad(x):
        raise RuntimeError("the derivative for 'zeta' is not implemented.")   # (torch's)
    return None, (unbroadcast(g * -x * zeta(x + 1.0, q), q) if needs_grad(q) else None)


ZETA = defop("zeta", binary_kernel(_zeta_array, float_result_type), infer_binary_float,
             vjp=_zeta_vjp, doc="The Hurwitz zeta function: the sum over k >= 0 of "
                                "(k + q)^-x.")


def zeta(input, other):
    """The Hurwitz zeta function ``sum_k (k + other)^-input``, as ``torch.special.zeta``
    (either may be a number; the gradient is for ``other`` only, as torch's)."""
    return apply(ZETA, as_operand(input), as_operand(other))


# -- composites ----------------------------------------------------------------------------
_SQRT_HALF = math.sqrt(0.5)


def ndtr(input):
    """The standard normal CDF ``erfc(-x / sqrt 2) / 2``, as ``torch.special.ndtr``."""
    return ew.erfc(-_float(input) * _SQRT_HALF) * 0.5


def log_ndtr(input):
    """``log(ndtr(input))``, accurate far into the lower tail (where ndtr underflows): there
    it is ``log(erfcx(-x / sqrt 2) / 2) - x^2 / 2``, as ``torch.special.log_ndtr``."""
    x = _float(input)
    lower = ew.lt(x, -1.0)
    safe_low = ew.where(lower, x, -1.0)   # (each branch's gradient finite everywhere)
    safe_high = ew.where(lower, -1.0, x)
    tail = ew.log(erfcx(-safe_low * _SQRT_HALF) * 0.5) - safe_low * safe_low * 0.5
    return ew.where(lower, tail, ew.log1p(-ew.erfc(safe_high * _SQRT_HALF) * 0.5))


def _ndtri_array(p):
    """ndtri(p) = -sqrt 2 erfcinv(2p) for p < 1/2 (by symmetry above), erfcinv(z) solved
    on log erfc from Giles' start, so that the lower tail keeps its digits (as sqrt 2
    erfinv(2p - 1) would not: 2p - 1 rounds to -1 below p = 1e-17)."""
    q = np.minimum(p, 1.0 - p)
    z = 2.0 * q
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -np.log(z * (2.0 - z))
        # (Giles' range ends near w = 36; beyond, t from erfc(t) ~ exp(-t^2) / (t sqrt pi))
        far = np.maximum(-np.log(z) - 0.5 * np.log(np.pi), 1.0)
        start = np.where(w < 25.0, np.abs(giles(1.0 - z, w)),
                         np.sqrt(far - 0.5 * np.log(far)))
        t = erfc_newton(start, np.log(z))
        x = np.where(p < 0.5, -t, t) * math.sqrt(2.0)
    x = np.where(p == 0, -np.inf, np.where(p == 1, np.inf, x))
    return np.where((p < 0) | (p > 1), np.nan, x)


NDTRI = defop("ndtri", unary_float_kernel(_in_float64(_ndtri_array)), infer_float,
              vjp=lambda g, out, x: g * math.sqrt(2 * math.pi) * ew.exp(out * out * 0.5),
              saves="o", doc="The inverse of the standard normal CDF on (0, 1).")


def ndtri(input):
    """The inverse of ``ndtr`` on (0, 1) (-inf at 0, inf at 1, NaN outside), as
    ``torch.special.ndtri``."""
    return apply(NDTRI, input)


def sinc(input):
    """The normalised sinc ``sin(pi x) / (pi x)``, 1 at 0 (gradient 0 there), as
    ``torch.sinc``."""
    x = _float(input)
    zero = ew.eq(x, 0)
    px = ew.where(zero, 1.0, x) * math.pi
    return ew.where(zero, 1.0, ew.sin(px) / px).to(x.dtype)


def _entr_array(x):
    """``-x log x`` for x > 0, 0 at 0, -inf below, NaN at NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = -x * np.log(x)
    outside = np.where(x == 0, 0.0, np.where(np.isnan(x), x, -np.inf)).astype(x.dtype)
    return np.where(x > 0, inside, outside)


def _onnx_entr(e, node):
    dtype = e.common_dtype()
    x, = e.inputs(dtype)
    scalar = lambda v: e.const(np.asarray(v, dtype), "scalar")
    inside = e.op("Neg", [e.op("Mul", [x, e.op("Log", [x])])])
    below = e.op("Where", [e.op("IsNaN", [x]), x, scalar(-np.inf)])
    outside = e.op("Where", [e.op("Equal", [x, scalar(0.0)]), scalar(0.0), below])
    return [e.op("Where", [e.op("Greater", [x, scalar(0.0)]), inside, outside])]


# An op of its own (not a composite of where and log) for torch's gradient -(1 + log x):
# infinite at 0 and NaN below, where a composite's branches would give 0
ENTR = defop("entr", unary_float_kernel(_entr_array), infer_float,
             vjp=lambda g, out, x: g * -(ew.log(x) + 1.0), onnx=_onnx_entr,
             doc="The elementwise entropy -x log x.")


def entr(input):
    """The elementwise entropy ``-x log x``: 0 at 0, -inf below, as ``torch.special.entr``
    (its gradient ``-(1 + log x)``: infinite at 0, NaN below, as torch's)."""
    return apply(ENTR, input)


def mvlgamma(input, p):
    """The log of the multivariate gamma function of dimension ``p``:
    ``p (p-1)/4 log(pi) + sum_{i<p} lgamma(x - i/2)``, as ``torch.mvlgamma``; every element
    must exceed ``(p - 1) / 2``."""
    if not isinstance(p, int) or p < 1:
        raise ValueError(f"mvlgamma: p has to be greater than or equal to 1, got {p!r}")
    if not input.is_floating_point():
        raise TypeError(f"mvlgamma: not implemented for {input.dtype} (floating-point "
                        "input only)")
    data = input._data   # (checked eagerly: a traced input's values are not known yet)
    if type(data) is np.ndarray and data.size and not (data > (p - 1) / 2).all():
        raise ValueError(f"mvlgamma: all elements of input must be greater than (p-1)/2 = "
                         f"{(p - 1) / 2}")
    steps = ew.cast_to(arange(p), input.dtype) * -0.5
    total = red.sum(lgamma(input.unsqueeze(-1) + steps), -1)
    return total + p * (p - 1) / 4 * math.log(math.pi)


def _float(x):
    """``x`` as a float tensor (integers and bools as the default float), as torch's
    unary float functions take them."""
    x = as_operand(x)
    return x if x.is_floating_point() else x.to(dtypes.get_default_dtype())


_UNARY = {"i0": i0, "sinc": sinc}
METHODS = {**_UNARY, **{name + "_": inplace(fn) for name, fn in _UNARY.items()},
           "mvlgamma": mvlgamma, "mvlgamma_": inplace(mvlgamma)}
