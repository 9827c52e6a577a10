"""Scalar helpers for the fused kernels, including vectorisable float32 ``exp`` and ``tanh``.

Numba lowers ``np.exp`` / ``np.tanh`` to libm calls, which LLVM cannot vectorise without
Intel's SVML; these branch-free versions (selects, not branches) vectorise, and are accurate
to a few float32 ulps (``tests/test_codegen.py`` checks the maximum error):

- ``exp32``: Cephes' ``expf``: ``x = n ln2 + r`` with ``|r| <= ln2/2``, a degree-6
  polynomial for ``exp(r)``, and ``2**n`` built from its exponent bits (in two halves, so
  ``n = 128`` near the overflow threshold still works). ``exp32_nonpositive`` is the same
  without the overflow handling, for arguments known to be <= 0 (softmax's ``x - max``).
- ``tanh32``: Eigen's rational approximation ``x P(x^2) / Q(x^2)`` on ``|x| <= 7.9``
  (beyond it tanh rounds to +-1 in float32).
- ``sin32`` / ``cos32``: computed in float64 and rounded once, so they are correctly
  rounded float32 results except in rare double-rounding ties (NumPy's own float32 SIMD
  sin/cos are up to ~1.5 ulps off). ``x = k pi/2 + r`` with ``|r| <= pi/4`` (a two-part
  Cody-Waite reduction, exact enough for ``|x| < 2**18``; beyond, libm's double sin/cos),
  then Taylor polynomials for sin and cos of ``r`` (both 1e-17 relative on that interval)
  and the quadrant of ``k`` picking one. The eager sin/cos loops and the fused kernels both
  call them, so compiled and eager agree to the bit.
- ``erf32``: computed in float64 and rounded once (correctly rounded float32 results in
  all but ~1% of arguments, and those 1 ulp off): three polynomials, each a Chebyshev
  least-squares fit (``numpy.polynomial.chebyshev.chebfit`` at 4000 Chebyshev nodes of the
  piece, against float64 ``erf``) rewritten as a polynomial in the piece's variable ``u``
  mapped to [-1, 1]: ``erf(x) / x`` in ``x^2`` on ``|x| < 0.875`` (degree 7, relative
  error 5e-12), ``erf`` on [0.875, 2.375) (degree 12) and [2.375, 3.85) (degree 11; both
  absolute error below 3e-11); from 3.85 on, erf rounds to 1 in float32. Every element
  evaluates all three (selects, not branches, so the loop vectorises); rational forms
  (Cody's) need two float64 divisions, which took most of the time.
- ``gelu32``: ``x Phi(x)`` in float32, ~1.4x the tanh form's time (computed from the
  float64 erf it took 3x torch's time): ``Phi = erfc(|y|) / 2`` for negative x and
  ``1 - erfc(|y|) / 2`` otherwise (``y = x / sqrt 2``), ``erfc(a) = exp(-a^2) t S(t)``
  with ``S`` a Chebyshev fit of ``erfc(a) exp(a^2) / t`` in ``t = 1 / (1 + a / 2)`` on
  [0, 9.4] (degree 8, relative error 2.2e-7 evaluated in float32), and ``exp(-x^2 / 2)``
  from an exact ``x^2`` (``_gauss32``), so the result stays within ~6 ulps of float64's
  down to where ``exp(-x^2 / 2)`` leaves the normal float32s (``x = -13.2``; 0 beyond).
  The tail of very negative x keeps its relative accuracy (no ``1 + erf`` cancelling, as
  in torch's float32 formula). ``gelu_backward32`` shares ``Phi`` and its
  ``exp(-x^2 / 2)`` with the density ``phi``.

Every function is a plain Python function here (a ``kernels.Helper``), so the module
imports, and the formulas can be tested, without Numba; Numba compiles them when a loop
calling them compiles.
"""
from __future__ import annotations

import numpy as np

from . import Intrinsic, helper

# error_model="numpy": no ZeroDivisionError check, which would stop vectorisation.
# Most helpers are separate functions, cached on disk, that LLVM inlines into the loops
# calling them: a kernel calling them compiles in about half the time it took with every
# helper inlined in Numba's IR. The tanh-GELU gradient is inlined in the IR (as a separate
# function LLVM left it a call, and its loop did not vectorise: 7.8 instead of 1.1 ms on
# 524k floats), and so are the pieces the others are built from. fastmath=False is
# explicit: Numba compiles a helper that does not set it with the flags of the loop that
# first calls it (softmax's "reassoc" broke exp32's argument reduction), and caches that,
# so results hung on compile order. The polynomial approximations (exp32, tanh32 and what
# is built on them) allow only "contract": multiply-adds fused where the CPU has FMA, which
# made tanh-GELU 24% faster and tanh32 no less accurate (worst 4.6 instead of 6.6 ulps
# against float64 tanh); sin32/cos32 stay unfused, correctly rounded as documented.
_SEPARATE = {"error_model": "numpy", "cache": True, "fastmath": False}
_POLYNOMIAL = {**_SEPARATE, "fastmath": {"contract"}}
_INLINED = {"inline": "always", "error_model": "numpy"}

F = np.float32
_LOG2E, _LN2_HI, _LN2_LO = F(1.44269504088896341), F(0.693359375), F(-2.12194440e-4)
_EXP_P = tuple(F(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                              4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_EXP_HI, _EXP_LO = F(88.72283905206835), F(-87.33654475055310898657)
_TANH_CLAMP, _TANH_TINY = F(7.90531110763549805), F(0.0004)
_TANH_A = tuple(F(c) for c in (-2.76076847742355e-16, 2.00018790482477e-13,
                               -8.60467152213735e-11, 5.12229709037114e-08,
                               1.48572235717979e-05, 6.37261928875436e-04,
                               4.89352455891786e-03))
_TANH_B = tuple(F(c) for c in (1.19825839466702e-06, 1.18534705686654e-04,
                               2.26843463243900e-03, 4.89352518554385e-03))
_ONE, _HALF, _ZERO, _INF = F(1.0), F(0.5), F(0.0), F(np.inf)
_TWO, _FOUR, _MINUS_TWO = F(2.0), F(4.0), F(-2.0)
_GELU_K, _GELU_C, _GELU_C3 = F(np.sqrt(2 / np.pi)), F(0.044715), F(3 * 0.044715)
# erf's pieces (module docstring): coefficients from the highest power down; each piece
# maps its interval [lo, hi) to u in [-1, 1] as u = v * scale - shift
_ERF_NEAR = (-1.2884047999770292e-08, 2.736337459629054e-07, -5.0897540051596774e-06,
             8.216009815231245e-05, -0.0011217030788183003, 0.012622533418767597,
             -0.11501988579659911, 0.9995275084270665)
_ERF_MID = (2.1751194051696507e-06, -5.421688079838296e-06, -1.9228691459163865e-05,
            0.00010598034414701775, -5.8267361772935613e-05, -0.0008255110903875217,
            0.0025657121065333272, -0.0005066282722487332, -0.015731390656823097,
            0.048448386818429466, -0.07355667229525986, 0.06035419424414449,
            0.9784437332199695)
_ERF_FAR = (-2.5313847892936295e-07, 4.268175440619384e-07, 1.6232588578934954e-06,
            -1.020304941966105e-05, 3.2951814234063355e-05, -7.650010955421848e-05,
            0.00013347710469751803, -0.0001759619475420124, 0.0001720118227163956,
            -0.00011851812857893231, 5.163230430372685e-05, 0.9999892613360121)
_ERF_T1, _ERF_T2, _ERF_ONE = 0.875, 2.375, 3.85   # the pieces' bounds; erf = 1 from _ERF_ONE
_SQRT_HALF64 = 0.7071067811865476
# gelu32 in float32 (module docstring): erfc(a) exp(a^2) / t as a polynomial in
# t = 1 / (1 + a / 2) on [0, 9.4] (a Chebyshev fit of degree 8 in u mapped to [-1, 1], as
# erf's pieces, rewritten in t: the quotient is flat, 1 to 0.28, so the float32 Horner
# steps do not cancel), and exp(-x^2 / 2) = 2**(c x^2), c = _GAUSS_HI + _GAUSS_LO
_ERFCX_T = tuple(F(c) for c in (
    -0.0579435810676952, 0.27935906991147874, -0.4769994937436503, 0.26711386718188956,
    -0.019588759650492834, 0.19992721403929486, 0.24374695965624094, 0.28229400809691135,
    0.28209068317610225))
_GAUSS_HI, _GAUSS_LO = F(-0.7213475108146667), F(-9.629815167500055e-09)   # -log2(e) / 2
# Cephes' exp2f: 2**f = 1 + f P(f) on |f| <= 1/2
_EXP2_P = tuple(F(c) for c in (1.535336188319500e-4, 1.339887440266574e-3,
                               9.618437357674640e-3, 5.550332471162809e-2,
                               2.402264791363012e-1, 6.931472028550421e-1))
_MIN_EXP = F(-126.0)   # 2**-126: the smallest normal float32
_ROUNDER = F(1.5 * 2 ** 23)
_ROUNDER_BITS = np.int32(0x4B400000 - 127)   # its bits, less the exponent bias
_SQRT_HALF32 = F(_SQRT_HALF64)
_INV_SQRT_2PI = F(1 / np.sqrt(2 * np.pi))


_PI2_INV = 0.63661977236758134308        # 2 / pi
_PI2_HI = 1.57079632673412561417          # the first 33 bits of pi / 2: k * _PI2_HI is exact
_PI2_LO = 6.07710050650619224932e-11      # pi / 2 - _PI2_HI
_TRIG_LIMIT = float(2 ** 18)             # |x| from which the reduction would lose bits
_SIN_C = tuple(float((-1) ** i / np.prod(np.arange(1.0, 2 * i + 2))) for i in range(1, 8))
_COS_C = tuple(float((-1) ** i / np.prod(np.arange(1.0, 2 * i + 1))) for i in range(1, 9))


def _pow2_py(n):
    return F(2.0) ** F(n)   # (in Python: the same value, just not a bitcast)


@Intrinsic
def _bits_to_f32(typingctx, bits):
    """Reinterpret an int32 as a float32 (an LLVM bitcast, which vectorises)."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@Intrinsic
def _f32_to_bits(typingctx, v):
    """Reinterpret a float32 as an int32 (an LLVM bitcast, which vectorises)."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


def _pow2_rounded_py(k):
    return F(2.0) ** (k - _ROUNDER)


@helper(python=_pow2_rounded_py, **_INLINED)
def _pow2_rounded(k):
    """``2**n`` from ``k = n + 1.5 * 2**23`` (an integer ``n`` rounded into k's low mantissa
    bits, ``-126 <= n <= 127``): those bits, less k's own, are n's exponent field."""
    return _bits_to_f32((_f32_to_bits(k) - _ROUNDER_BITS) << 23)


@helper(python=_pow2_py, **_INLINED)
def _pow2(n):
    return _bits_to_f32(np.int32((n + 127) << 23))


def _max32_py(a, b):
    return b if a != a else a if b != b else max(a, b)


@Intrinsic
def _maxnum(typingctx, a, b):
    """LLVM's ``maxnum`` of two float32s: the larger, or the one that is not NaN. A loop
    taking a running maximum with it vectorises (a select on ``>`` does not without the
    "nnan" flag: 82 instead of 19 us over 262k floats here)."""
    from llvmlite import ir
    from numba.core import cgutils, types

    def codegen(context, builder, sig, args):
        f32 = ir.FloatType()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f32, [f32, f32]),
                                            "llvm.maxnum.f32")
        return builder.call(fn, args)
    return types.float32(types.float32, types.float32), codegen


@helper(python=_max32_py, **_INLINED)
def max32(a, b):
    """``max(a, b)`` of float32s ignoring a NaN operand (IEEE maxNum; NaN only when both
    are). Which of +0.0 and -0.0 it returns for the pair is unspecified."""
    return _maxnum(a, b)


@helper(**_INLINED)
def _exp_parts(xc):
    """``(y, n)`` with ``exp(xc) = y * 2**n``: ``xc = n ln2 + r``, ``|r| <= ln2/2`` (a
    two-part ln2, so the reduction is exact), and Cephes' polynomial for ``exp(r)``."""
    nf = np.floor(xc * _LOG2E + _HALF)
    r = xc - nf * _LN2_HI - nf * _LN2_LO
    p0, p1, p2, p3, p4, p5 = _EXP_P
    p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
    return p * (r * r) + r + _ONE, np.int32(nf)


@helper(**_POLYNOMIAL)
def exp32(x):
    """``exp`` for float32 scalars; NaN stays NaN, overflow gives inf, underflow 0."""
    xc = x if x < _EXP_HI else _EXP_HI
    # below the underflow threshold (the result is 0, set below) evaluate exp(0): at the
    # threshold itself the last product can be subnormal, and a subnormal result costs a
    # microcode assist per element (a causal softmax's masked half took twice as long)
    xc = xc if xc >= _EXP_LO else _ZERO
    y, n = _exp_parts(xc)
    # n = 128 (x just below the overflow threshold): move one factor 2 into y, so that
    # 2**n stays finite
    big = n > 127
    y = y + y if big else y
    y = y * _pow2(n - np.int32(1) if big else n)
    y = _INF if x > _EXP_HI else y
    y = _ZERO if x < _EXP_LO else y
    return x if x != x else y


@helper(**_POLYNOMIAL)
def exp32_nonpositive(x):
    """``exp32(x)`` to the bit for ``x <= 0`` (NaN stays NaN), without the overflow
    handling, which costs a quarter of the time in a loop: a softmax's ``exp(x - max)``
    and the tanh terms of the GELU gradient never need it. (Still exact up to x = 88.3,
    where 2**n would overflow.)"""
    xc = x if x >= _EXP_LO else _ZERO
    y, n = _exp_parts(xc)
    y = y * _pow2(n)
    y = _ZERO if x < _EXP_LO else y
    return x if x != x else y


@helper(**_POLYNOMIAL)
def tanh32(x):
    """``tanh`` for float32 scalars (NaN stays NaN). Beyond ``|x| = 7.9`` the result is
    selected as +-1, so the rational function needs no clamped argument: where it
    overflows (|x| above ~1.5e4) or gives inf/inf, that value is discarded, and a NaN argument
    gives NaN through it (the clamp and a NaN check took a quarter of a GELU's time)."""
    x2 = x * x
    a13, a11, a9, a7, a5, a3, a1 = _TANH_A
    b6, b4, b2, b0 = _TANH_B
    p = x * ((((((a13 * x2 + a11) * x2 + a9) * x2 + a7) * x2 + a5) * x2 + a3) * x2 + a1)
    q = ((b6 * x2 + b4) * x2 + b2) * x2 + b0
    y = p / q
    y = x if abs(x) < _TANH_TINY else y
    y = _ONE if x >= _TANH_CLAMP else y   # saturate as libm does (the error is < 3e-7)
    return -_ONE if x <= -_TANH_CLAMP else y


@helper(**_POLYNOMIAL)
def sigmoid32(x):
    """``sigmoid`` for float32 scalars, stable for any x and accurate *relative* to its
    value down to 0: with ``e = exp(-|x|)`` (never overflows), ``1 / (1 + e)`` for x >= 0,
    ``e / (1 + e)`` below. (``(1 + tanh(x / 2)) / 2`` gave exactly 0 from x = -18, where
    torch gives 1.5e-8: a binary cross-entropy's log of it then differs by far more than
    an ulp.)"""
    e = exp32_nonpositive(-abs(x))
    r = _ONE / (_ONE + e)
    return r if x >= _ZERO else e * r


@helper(**_INLINED)
def silu32(x):
    """``x * sigmoid(x)`` for float32 scalars (the product the conv and linear epilogues
    make: one function for the eager loop, the fused kernels and the epilogues)."""
    return x * sigmoid32(x)


@helper(**_INLINED)
def silu_backward32(g, x):
    """``g * d/dx silu(x) = g s (1 + x (1 - s))``, ``s = sigmoid(x)`` (torch's formula), for
    float32 scalars."""
    s = sigmoid32(x)
    return g * s * (_ONE + x * (_ONE - s))


@helper(**_INLINED)
def _tanh_terms(u):
    """``(1 + tanh u, 1 - tanh(u)^2)``, both to a few ulps relative even where tanh is
    within an ulp of -1 or 1 (computing them from a rounded tanh would cancel): with
    ``e = exp(-2|u|)``, they are ``2e/(1+e)`` or ``2/(1+e)``, and ``4e/(1+e)^2``."""
    e = exp32_nonpositive(_MINUS_TWO * abs(u))
    r = _ONE / (_ONE + e)
    one_plus = _TWO * e * r if u < _ZERO else _TWO * r
    return one_plus, _FOUR * e * r * r


@helper(**_POLYNOMIAL)
def gelu_tanh32(x):
    """``0.5 x (1 + tanh(K (x + C x^3)))`` for float32 scalars, in that form, as torch's and
    the NumPy kernel compute it (where tanh nears -1 the sum cancels alike in all three);
    with ``tanh32`` it is about a fifth faster than through ``exp32``. Both the eager loop
    and a fused kernel call it, so compiled and eager agree to the bit."""
    return _HALF * x * (_ONE + tanh32(_GELU_K * x * (_ONE + _GELU_C * x * x)))


@helper(**_INLINED)
def gelu_tanh_backward32(g, x):
    """``g * d/dx gelu_tanh(x)`` for float32 scalars."""
    x2 = x * x
    one_plus, sech2 = _tanh_terms(_GELU_K * x * (_ONE + _GELU_C * x2))
    slope = _HALF * _GELU_K * x * (_ONE + _GELU_C3 * x2) * sech2
    return g * (_HALF * one_plus + slope)


def _fma_py(a, b, c):
    return a * b + c   # (in Python: rounded twice; the formulas' tests allow for it)


@Intrinsic
def _fma_intrinsic(typingctx, a, b, c):
    """LLVM's ``fma`` of three float64s, or of three float32s when ``a`` is one: one
    rounding whatever fast-math flags the loop inlining it has (a fused kernel ending in a
    reduction has "reassoc"; an eager loop none), so the eager loop and every fused kernel
    compute the same bits; it vectorises (where the CPU lacks FMA, LLVM calls libm's fma,
    still exact)."""
    from llvmlite import ir
    from numba.core import cgutils, types

    single = a == types.float32
    kind = types.float32 if single else types.float64

    def codegen(context, builder, sig, args):
        t = ir.FloatType() if single else ir.DoubleType()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(t, [t] * 3),
                                            "llvm.fma.f32" if single else "llvm.fma.f64")
        return builder.call(fn, args)
    return kind(kind, kind, kind), codegen


@helper(python=_fma_py, **_INLINED)
def _fma(a, b, c):
    return _fma_intrinsic(a, b, c)


@helper(**_INLINED)
def _horner(coefficients, u):
    r = 0.0
    for c in coefficients:
        r = _fma(r, u, c)
    return r


@helper(**_INLINED)
def _erf64(d):
    """erf of a float64 ``d`` to ~3e-11 absolute (5e-12 relative near 0; see the module
    docstring), exact 0 at 0 (with its sign) and +-1 from |d| = 3.85; NaN gives +-1 (the
    float32 callers keep a NaN argument)."""
    y = abs(d)
    near = d * _horner(_ERF_NEAR, _fma(d * d, 2 / _ERF_T1 ** 2, -1.0))
    mid = _horner(_ERF_MID, _fma(y, 2 / (_ERF_T2 - _ERF_T1),
                                 -(_ERF_T2 + _ERF_T1) / (_ERF_T2 - _ERF_T1)))
    far = _horner(_ERF_FAR, _fma(y, 2 / (_ERF_ONE - _ERF_T2),
                                 -(_ERF_ONE + _ERF_T2) / (_ERF_ONE - _ERF_T2)))
    r = mid if y < _ERF_T2 else far
    r = r if y < _ERF_ONE else 1.0
    r = -r if d < 0 else r
    return near if y < _ERF_T1 else r


@helper(**_INLINED)
def erf32(x):
    """``erf`` for float32 scalars, correctly rounded but for ~1% of arguments (1 ulp)."""
    r = np.float32(_erf64(np.float64(x)))
    return x if x != x else r


@helper(**_INLINED)
def gelu32(x):
    """``x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`` for float32 scalars, in float32 through
    ``erfc`` (:func:`_twice_phi`; module docstring). Selects, not branches."""
    return _HALF * x * _twice_phi(x, _gauss32(x))


@helper(**_INLINED)
def _gauss32(x):
    """``exp(-x^2 / 2)`` for a float32 ``x``, to about an ulp relative while it is a normal
    float32 (``|x| <= 13.2``), 0 beyond (and for NaN: the callers keep a NaN ``x``).
    ``x^2 = hi + lo`` exactly (an FMA) and ``2**(c x^2)`` reduced as ``2**n 2**f`` with
    ``f = c x^2 - n`` from FMAs, so that the rounding of ``x^2`` (tens of ulps of the
    result near the end of the range) does not reach the result; no division."""
    hi = x * x
    lo = _fma(x, x, -hi)
    y = _GAUSS_HI * hi
    # n = y rounded to an integer by adding 1.5 * 2**23 (whose ulp is 1), 2**n from k's bits
    # (no floor, no conversion: 5% of the loop's time)
    k = (y if y >= _MIN_EXP else _MIN_EXP) + _ROUNDER
    n = k - _ROUNDER
    f = _fma(_GAUSS_LO, hi, _fma(_GAUSS_HI, lo, _fma(_GAUSS_HI, hi, -n)))
    p = _fma(f, _horner32(_EXP2_P, f), _ONE)
    e = p * _pow2_rounded(k)
    return e if y >= _MIN_EXP else _ZERO


@helper(**_INLINED)
def _twice_phi(x, e):
    """``2 Phi(x)`` given ``e = exp(-x^2 / 2)``: ``erfc(|y|)`` for negative x, so that the
    tail keeps its relative accuracy instead of cancelling in ``1 + erf``, and
    ``2 - erfc(|y|)`` otherwise; ``y = x / sqrt 2``, ``erfc(a) = exp(-a^2) t S(t)``. Where
    ``e`` is 0 (``|x| > 13.2``) so is erfc, so ``S`` is never needed beyond its range."""
    a = abs(x * _SQRT_HALF32)
    t = _ONE / (_ONE + _HALF * a)
    erfc = e * (t * _horner32(_ERFCX_T, t))
    return erfc if x < _ZERO else _TWO - erfc


@helper(**_INLINED)
def _horner32(coefficients, u):
    r = _ZERO
    for c in coefficients:
        r = _fma(r, u, c)   # (one rounding a step, in every loop alike, and faster)
    return r


@helper(**_INLINED)
def gelu_backward32(g, x):
    """``g * d/dx gelu(x) = g (Phi(x) + x phi(x))`` for float32 scalars."""
    e = _gauss32(x)     # (phi's and Phi's exponential)
    r = g * (_HALF * _twice_phi(x, e) + x * (e * _INV_SQRT_2PI))
    return x if x != x else r


@helper(**_INLINED)
def _trig_core(d, quarter_turns):
    """``sin(d + quarter_turns * pi/2)`` for a float64 ``d`` with ``|d| < 2**18`` (no
    branches, so a loop over it vectorises)."""
    k = np.rint(d * _PI2_INV)
    # d - k * _PI2_HI is exact (Sterbenz); keep d itself when k = 0, so sin(-0.0) is -0.0
    r = d if k == 0.0 else (d - k * _PI2_HI) - k * _PI2_LO
    z = r * r
    s1, s2, s3, s4, s5, s6, s7 = _SIN_C
    c1, c2, c3, c4, c5, c6, c7, c8 = _COS_C
    sin_r = r * (1.0 + z * (s1 + z * (s2 + z * (s3 + z * (s4 + z * (s5 + z * (s6 + z * s7)))))))
    cos_r = 1.0 + z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * (c6 + z * (
        c7 + z * c8)))))))
    q = (np.int64(k) + quarter_turns) & 3
    v = cos_r if q & 1 else sin_r
    return -v if q & 2 else v


@helper(**_SEPARATE)
def _trig32(x, quarter_turns):
    """``sin(x + quarter_turns * pi/2)`` for a float32 scalar, rounded once to float32."""
    d = np.float64(x)
    if abs(d) < _TRIG_LIMIT:
        return np.float32(_trig_core(d, quarter_turns))
    # huge, infinite or NaN: libm's double sin or cos
    return np.float32(np.sin(d) if quarter_turns == 0 else np.cos(d))


@helper(**_SEPARATE)
def sin32(x):
    """``sin`` for float32 scalars, correctly rounded but for rare double-rounding ties."""
    return _trig32(x, 0)


@helper(**_SEPARATE)
def cos32(x):
    """``cos`` for float32 scalars, correctly rounded but for rare double-rounding ties."""
    return _trig32(x, 1)


@helper(**_SEPARATE)
def where(c, a, b):
    return a if c else b


@helper(**_SEPARATE)
def sign(x):
    """torch's sign: ``(x > 0) - (x < 0)``, so sign(NaN) is 0."""
    return (x > 0) - (x < 0)

