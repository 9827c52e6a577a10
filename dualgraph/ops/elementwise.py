"""Elementwise ops: arithmetic, math, comparisons, logic, where, clamp, activations, casts.

Each op is one ``defop`` with its kernel, shape rule, VJP (in dualgraph ops) and scalar
expression; the public function next to it is the user-facing name. Composites (``clamp`` is
``where(x < min, min, x)``, ``silu`` is ``x * sigmoid(x)``) are primitives here only where a
dedicated kernel is faster or more accurate, and each such choice says why.

Scalar expressions (``elementwise=``) are NumPy expressions over scalars: ``{0}``, ``{1}``, ...
stand for the inputs, ``{name}`` for the value of attribute ``name``, and functions are NumPy
ufunc names (``exp``, ``maximum``, ``where``, ``bitwise_and``) plus ``erf`` and ``cast``.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from .. import dtypes, kernels
from ..autograd.tape import grad_mode, no_grad
from ..dispatch import apply
from ..kernels.threads import fitted_rows, run_rows, threads_for
from ..shapes import ShapedType, broadcast_shapes, is_static
from ..tensor import Tensor
from . import creation
from ._util import (HALF_FLOATS, as_operand, binary_kernel, cast, empty_into,
                    float_result_type, infer_binary, infer_binary_float, infer_bool,
                    infer_compare, infer_float, infer_same, is_float, needs_grad, shape_of,
                    sum_to, unary_float_kernel)
from .inplace import commit_inplace, inplace, source_of
from .opdef import OpDef, defop

__all__ = [
    # arithmetic
    "add", "sub", "mul", "div", "pow", "true_divide", "multiply", "subtract", "neg",
    "negative", "floor_divide", "remainder", "fmod", "reciprocal", "square",
    # math
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "abs",
    "absolute", "sign", "floor", "ceil", "round", "trunc", "fix", "frac", "erf", "sin",
    "cos", "tan", "tanh", "asin", "acos", "atan", "arcsin", "arccos", "arctan", "atan2",
    "asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh",
    "arctan2",
    "erfc", "lerp", "addcmul", "addcdiv", "sinh", "cosh", "nan_to_num", "logaddexp",
    "logaddexp2", "hypot",
    # comparisons, clamping, logic, predicates
    "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "clamp", "clip", "clamp_min",
    "clamp_max", "where", "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
    "bitwise_right_shift", "isnan", "isinf", "isfinite",
    "isclose",
    # activations
    "sigmoid", "relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu",
    "softplus", "mish", "hardtanh", "hardsigmoid", "hardswish", "logsigmoid",
]


def unbroadcast(g, x):
    """Sum a broadcast gradient back to the shape of input ``x`` (None when ``x`` needs no
    gradient). Runs in every binary VJP, hence the early exits."""
    if not (isinstance(x, Tensor) and x.requires_grad):
        return None
    shape = x._data.shape
    if g._data.shape == shape:
        return g
    return sum_to(g, tuple(shape))


def _zero_vjp(g, out, *inputs, **attrs):
    """Piecewise-constant ops (floor, sign, ...): the gradient is zero, as in torch."""
    return tuple(creation.zeros_like(x) if needs_grad(x) else None for x in inputs)


def _result_type(*operands) -> np.dtype:
    return dtypes.result_type(*(x._data if isinstance(x, Tensor) else x for x in operands))


# -- binary arithmetic -------------------------------------------------------------------------
ADD = defop("add", binary_kernel(np.add), infer_binary, saves="",
            vjp=lambda g, out, a, b: (unbroadcast(g, a), unbroadcast(g, b)),
            elementwise="{0} + {1}", onnx="Add",
            commutative=True,
            shape_fold=np.add)
SUB = defop("sub", binary_kernel(np.subtract), infer_binary, saves="",
            vjp=lambda g, out, a, b: (unbroadcast(g, a),
                                      unbroadcast(neg(g), b) if needs_grad(b) else None),
            elementwise="{0} - {1}", onnx="Sub",
            shape_fold=np.subtract)
def _mul_vjp(g, out, a, b):
    # (the inputs' checks inline: this is the commonest VJP of all)
    return (unbroadcast(apply(MUL, g, b), a) if isinstance(a, Tensor) and a.requires_grad
            else None,
            unbroadcast(apply(MUL, g, a), b) if isinstance(b, Tensor) and b.requires_grad
            else None)


def _gate_rows(x, g):
    """``(A, 8)`` rows when ``g`` is a per-block gate of ``x``: float32 of static shapes,
    ``x (A..., P..., 8)`` and ``g (A..., 1..., 8)``; else None."""
    shape, gs = tuple(getattr(x, "shape", ())), tuple(getattr(g, "shape", ()))
    if not (len(shape) == len(gs) >= 3 and is_static(shape) and is_static(gs)
            and shape[-1] == gs[-1] == 8 and x.dtype == g.dtype == np.float32
            and kernels.numba_available()):
        return None
    k = next((d for d in range(len(shape)) if shape[d] != gs[d]), len(shape))
    if k >= len(shape) - 1 or any(d != 1 for d in gs[k:-1]):   # (equal shapes: no gate)
        return None
    return math.prod(shape[:k])


def _specialise_mul(a, b):
    """``specialise`` (codegen) of ``a * b`` where one operand is a per-block gate of the
    other (squeeze-and-excitation's scale on a channel-blocked ``(N, C/8, H, W, 8)``
    value, the gate ``(N, C/8, 1, 1, 8)``): ``kernels.conv_blocked.scale_blocks``, eight
    lanes at a time (NumPy's broadcast ran its inner loop over the eight). None otherwise
    (the kernel)."""
    for x, g in ((a, b), (b, a)):
        rows = _gate_rows(x, g)
        if rows:
            scale = fitted_rows(kernels.conv_blocked.scale_blocks)
            first = x is a

            def run(a, b, first=first, shape=tuple(x.shape), rows=rows, scale=scale):
                x, g = (a, b) if first else (b, a)
                out = np.empty(shape, np.float32)
                scale(rows, np.ascontiguousarray(x).reshape(-1),
                      np.ascontiguousarray(g).reshape(-1), out.reshape(-1))
                return out
            return "scale_blocks", run
    return None


MUL = defop("mul", binary_kernel(np.multiply, opmath=True), infer_binary, vjp=_mul_vjp,
            read_by={0: 1, 1: 0}, elementwise="{0} * {1}", onnx="Mul",
            commutative=True, specialise=_specialise_mul,
            shape_fold=np.multiply)
DIV = defop("div", binary_kernel(np.true_divide, float_result_type, opmath=True),
            infer_binary_float,
            vjp=lambda g, out, a, b: (unbroadcast(g / b, a) if needs_grad(a) else None,
                                      unbroadcast(-g * out / b, b) if needs_grad(b) else None),
            saves="1o", read_by={"o": 1}, elementwise="{0} / {1}", onnx="Div",
            onnx_import={})   # (ONNX's Div truncates integers: export/onnx_import_ops.py)


# -- x ** c for small integer and half-integer c: products and a square root -------------------
# A general power costs ~70 ns an element in NumPy's float32 loop, a product ~0.5 ns. torch
# computes x**2, x**3, x**0.5, x**-0.5, x**-1 and x**-2 so (products, sqrt, 1/...), in this
# order of operations; x**4 and x**-3, x**-4 here differ from a correctly rounded power by a
# rounding or two of the products. (x**1.5 as x*sqrt(x) would be NaN at -inf, where pow is
# inf: half-integers other than +-0.5 keep pow, whose special values are C's.) The pow
# kernel applies it eagerly, and simplify's rule rewrites such a pow node into the same ops
# (passes/simplify.py), so compiled == eager.
POWER_PRODUCTS_MAX = 4
_PRODUCT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def power_by_products(dtype, exponent) -> bool:
    """Whether ``x ** exponent`` for ``x`` of (result) dtype ``dtype`` computes as products
    (:func:`expand_power`): a float32/float64 result and a Python number exponent that is
    +-0.5 or a nonzero integer up to 4 in size (``x ** 0`` is 1 even for NaN: NumPy's)."""
    return (np.dtype(dtype) in _PRODUCT_DTYPES and type(exponent) in (int, float)
            and (math.fabs(exponent) == 0.5   # (math's: this module's abs is the op)
                 or (0 < math.fabs(exponent) <= POWER_PRODUCTS_MAX
                     and float(exponent).is_integer())))


def expand_power(x, exponent, mul, sqrt, reciprocal):
    """``x ** exponent`` (where :func:`power_by_products` holds) from ``mul(a, b)``,
    ``sqrt(a)`` and ``reciprocal(a)``: NumPy functions for the kernel, graph calls for the
    rewrite.

    >>> expand_power(np.float32(2), -3, np.multiply, np.sqrt, lambda a: 1 / a)
    0.125
    """
    whole = int(math.fabs(exponent))
    if whole == 0:   # (+-0.5)
        result = sqrt(x)
    elif whole == 1:
        result = x
    else:   # x*x, (x*x)*x, (x*x)*(x*x)
        square = mul(x, x)
        result = square if whole == 2 else mul(square, x if whole == 3 else square)
    return reciprocal(result) if exponent < 0 else result


def _pow_kernel(a, b):
    dt = dtypes.result_type(a, b)
    exponent = b.item() if type(b) is np.ndarray and b.ndim == 0 else b   # (ONNX's Pow)
    if power_by_products(dt, exponent):
        if type(a) is np.ndarray and a.dtype == dt == np.float32 and kernels.enabled(a):
            out = np.empty(a.shape, dt)   # (one float32 pass where NumPy makes two or three)
            run_rows(kernels.activations.power, a.size, kernels.flat(a), out.reshape(-1),
                     int(math.fabs(exponent)), exponent < 0, threads=threads_for(a.size))
            return out
        result = expand_power(cast(a, dt), exponent, np.multiply, np.sqrt,
                              lambda v: np.divide(1.0, v, dtype=dt))
        return result.copy() if result is a else result
    if dt.kind in "iu" and type(b) is np.ndarray and (b < 0).any():
        return _int_pow_negative(cast(a, dt), cast(b, dt))
    return np.power(cast(a, dt), cast(b, dt))


def _int_pow_negative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integers to a tensor of exponents some of which are negative, as torch computes them
    (NumPy raises): ``a ** b`` is 1 for a base of 1, -1 or 1 for -1 (by the exponent's
    parity), else 0. (A Python int exponent below 0 raises, in torch too.)"""
    negative = b < 0
    at_negative = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
    return np.where(negative, at_negative, np.power(a, np.where(negative, 0, b))).astype(a.dtype)


def _pow_vjp(g, out, a, b):
    """torch's gradients: the base's is 0 where the exponent is 0 (not ``0 * a**-1``, NaN
    at a = 0); the exponent's is ``a**b log a``, 0 where a = 0 and b >= 0, NaN for a
    negative base (as torch: no silent 0)."""
    ga = gb = None
    if needs_grad(a):
        ga = g * b * pow(a, b - 1)
        if isinstance(b, Tensor):
            ga = where(b == 0, 0.0, ga)
        elif b == 0:
            ga = creation.zeros_like(ga)
        ga = unbroadcast(ga, a)
    if needs_grad(b):
        base = a if isinstance(a, Tensor) else creation.full_like(out, a)
        gb = unbroadcast(where((base == 0) & (b >= 0), 0.0, g * out * log(base)), b)
    return ga, gb


POW = defop("pow", _pow_kernel, infer_binary, vjp=_pow_vjp, elementwise="{0} ** {1}",
            saves="io", read_by={"o": 1},   # (the exponent's gradient reads a ** b)
            onnx="Pow",
            onnx_import={})   # (ONNX's Pow keeps the base's type: export/onnx_import_ops.py)


def _onnx_floor_divide(e, node):
    dtype = e.common_dtype()
    x, y = e.inputs(dtype)
    if dtype.kind != "f":   # Div truncates; x - x mod y (mod with the divisor's sign)
        return [e.op("Div", [e.op("Sub", [x, e.op("Mod", [x, y], fmod=0)]), y])]
    return [e.op("Floor", [e.op("Div", [x, y])])]


# floor_divide and remainder use NumPy's floor division, which (like torch's) is Python's:
# the quotient rounds toward -inf and the remainder takes the divisor's sign (a zero
# remainder the dividend's: ``_remainder``).
FLOOR_DIVIDE = defop("floor_divide", binary_kernel(np.floor_divide), infer_binary,
                     vjp=_zero_vjp, saves="", elementwise="{0} // {1}",
                     onnx=_onnx_floor_divide)


def _remainder_vjp(g, out, a, b):
    gb = unbroadcast(-g * floor_divide(a, b), b) if needs_grad(b) else None
    return unbroadcast(g, a), gb


def _fmod_vjp(g, out, a, b):
    gb = unbroadcast(-g * div(a, b, rounding_mode="trunc"), b) if needs_grad(b) else None
    return unbroadcast(g, a), gb


def _onnx_remainder(e, node):
    """Python's modulo (the sign of the divisor): ONNX Mod with fmod=0 for ints; for
    floats x - floor(x / y) * y, as NumPy computes it."""
    dtype = e.common_dtype()
    x, y = e.inputs(dtype)
    if dtype.kind != "f":
        return [e.op("Mod", [x, y], fmod=0)]
    return [e.op("Sub", [x, e.op("Mul", [e.op("Floor", [e.op("Div", [x, y])]), y])])]


def _onnx_fmod(e, node):
    return [e.op("Mod", e.inputs(e.common_dtype()), fmod=1)]


def _remainder(a, b):
    """``np.remainder``, except that an exact multiple's zero keeps the dividend's sign, as
    torch's (which adds the divisor to C's ``fmod`` only where the signs differ): NumPy gives
    that zero the divisor's sign (``1.0 % -0.5`` is -0.0 there, 0.0 in torch), which
    ``atan2``, ``signbit`` and division by the result show."""
    out = np.remainder(a, b)
    if out.dtype.kind == "f":
        zero = out == 0
        if zero.any():
            out = np.where(zero, np.copysign(out, a), out).astype(out.dtype, copy=False)
    return out


REMAINDER = defop("remainder", binary_kernel(_remainder), infer_binary, vjp=_remainder_vjp,
                  saves="i", elementwise="{0} % {1}",
                  onnx=_onnx_remainder)
FMOD = defop("fmod", binary_kernel(np.fmod), infer_binary, vjp=_fmod_vjp, saves="i",
             elementwise="fmod({0}, {1})",
             onnx=_onnx_fmod)


def add(a, b, *, alpha=1):
    if type(alpha) not in (int, float) or alpha != 1:   # (a tensor or traced alpha: no bool)
        a, b = _scaled(a, b, alpha)
    return apply(ADD, as_operand(a), as_operand(b))


def sub(a, b, *, alpha=1):
    if type(alpha) not in (int, float) or alpha != 1:
        a, b = _scaled(a, b, alpha)
    return apply(SUB, as_operand(a), as_operand(b))


def _scaled(a, b, alpha) -> tuple:
    """``a`` and ``alpha * b`` in the dtype of ``a + b``, as torch's alpha: an integer
    ``b`` scaled after promotion (not wrapped at uint8's 256 first), a bool one kept bool
    (``add(m, m, alpha=0)`` is ``m``)."""
    if not (type(a) is Tensor and type(b) is Tensor and a._data.dtype == b._data.dtype):
        a, b = _promoted(a, b)   # (an optimiser's ``p.add_(g, alpha=-lr)`` skips this)
    scaled = mul(b, alpha)
    if isinstance(b, Tensor) and scaled.dtype != b.dtype and type(alpha) in (int, bool):
        scaled = scaled.to(b.dtype)
    return a, scaled


def with_zero_gradient(out: Tensor, *inputs) -> Tensor:
    """``out`` (made without history) joined to the ``inputs`` that need a gradient by
    ``where(True, out, x)``, whose gradient to ``x`` is zero: torch's gradient of a
    rounding division and of copysign's sign."""
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad:
            out = where(True, out, x)
    return out


def _promoted(*operands) -> list:
    """The operands' tensors cast to their result dtype, as torch's composite ops compute:
    ``add(f16, u8, alpha=3)`` scales the uint8 tensor as float16 (it wrapped at 256 when
    scaled first), ``addcdiv(f32, f16, f16)`` divides in float32."""
    operands = [as_operand(x) for x in operands]
    dt = _result_type(*operands)
    return [x.to(dt) if isinstance(x, Tensor) and x.dtype != dt else x for x in operands]


def mul(a, b):
    if type(b) is not float:   # x * 0.5 is the hot case: skip the conversions
        a, b = as_operand(a), as_operand(b)
    elif type(a) is not Tensor:
        a = as_operand(a)
    return apply(MUL, a, b)


def div(a, b, *, rounding_mode=None):
    """``a / b``; ``rounding_mode`` "floor" rounds the quotient down, "trunc" toward zero
    (both keep integer dtypes, as in torch)."""
    a, b = as_operand(a), as_operand(b)
    if rounding_mode is None:
        return apply(DIV, a, b)
    if rounding_mode == "floor":
        return apply(FLOOR_DIVIDE, a, b)
    if rounding_mode == "trunc":
        if is_float(_result_type(a, b)):
            # (torch's gradient is zero: trunc's zero through the division's ``g / b``
            # was NaN where b is 0)
            with no_grad():
                out = trunc(apply(DIV, a, b))
            return with_zero_gradient(out, a, b)
        # integers: a - fmod(a, b) is an exact multiple of b, so flooring its quotient is
        # exact (a float division would round int64s beyond 2**53)
        return apply(FLOOR_DIVIDE, a - fmod(a, b), b)
    raise ValueError(f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


def pow(a, b):
    return apply(POW, as_operand(a), as_operand(b))


def floor_divide(a, b):
    """``a // b`` rounded toward -inf (Python's and torch's rule); no gradient."""
    return apply(FLOOR_DIVIDE, as_operand(a), as_operand(b))


def remainder(a, b):
    """``a % b`` with the sign of ``b`` (Python's rule), as ``torch.remainder``."""
    return apply(REMAINDER, as_operand(a), as_operand(b))


def fmod(a, b):
    """C's ``fmod``: the remainder of truncated division, with the sign of ``a``."""
    return apply(FMOD, as_operand(a), as_operand(b))


def reciprocal(x):
    """``1 / x`` (integers give the default float)."""
    return div(1, x)


def square(x):
    """``x * x``; a bool tensor's square is int64, as torch's (``pow(x, 2)``)."""
    if isinstance(x, Tensor) and x.dtype == dtypes.bool_:
        x = x.to(dtypes.int64)
    return mul(x, x)


true_divide, multiply, subtract = div, mul, sub

# -- unary math ----------------------------------------------------------------------------------
NEG = defop("neg", np.negative, infer_same, saves="", vjp=lambda g, out, x: neg(g),
            elementwise="-{0}", onnx="Neg")


def neg(x):
    return apply(NEG, x)


negative = neg


def _float_kernel(fn):
    """unary_float_kernel for a function with attributes: ``fn(x, **attrs)``."""
    def kernel(x, **attrs):
        return unary_float_kernel(lambda a: fn(a, **attrs))(x)
    kernel.__name__ = fn.__name__
    return kernel


def _unary(name, ufunc, vjp, expr, onnx, saves="io", **facts):
    """Define a float unary math op (ints are computed as the default float)."""
    return defop(name, unary_float_kernel(ufunc), infer_float, vjp=vjp, saves=saves,
                 elementwise=expr, onnx=onnx, **facts)


def _onnx_expm1(e, node):
    dtype = node.outputs[0].dtype
    return [e.op("Sub", [e.op("Exp", [e.input(0, dtype)]), e.scalar(1, dtype, "one")])]


def _onnx_log1p(e, node):
    dtype = node.outputs[0].dtype
    return [e.op("Log", [e.op("Add", [e.input(0, dtype), e.scalar(1, dtype, "one")])])]


EXP = _unary("exp", np.exp, lambda g, out, x: g * out, "exp({0})", "Exp", saves="o")
EXPM1 = _unary("expm1", np.expm1, lambda g, out, x: g * (out + 1), "expm1({0})", _onnx_expm1,
               saves="o")
LOG = _unary("log", np.log, lambda g, out, x: g / x, "log({0})", "Log", saves="i")
LOG1P = _unary("log1p", np.log1p, lambda g, out, x: g / (x + 1), "log1p({0})", _onnx_log1p,
               saves="i")
SQRT = _unary("sqrt", np.sqrt, lambda g, out, x: g / (2 * out), "sqrt({0})", "Sqrt",
              saves="o")


def _trig_array(name: str):
    """np.sin / np.cos, or for float32 (at every size) the loop of ``kernels.trig``, which
    a fused kernel's ``sin32`` / ``cos32`` match bit for bit."""
    ufunc = getattr(np, name)
    f32 = np.dtype(np.float32)

    def kernel(x):
        if x.dtype is not f32 and x.dtype != f32 or not kernels.numba_available():
            return ufunc(x)
        flat = x.reshape(-1)   # (a view when contiguous; a fresh, aligned copy otherwise)
        out = np.empty(flat.shape, f32)
        loop = getattr(kernels.trig, name)
        if not flat.flags.aligned:   # (a view into a byte buffer: the loop's own checks)
            loop(flat, out)
        else:   # (working out the argument types costs more than 16 sines: kept once known)
            entry = loop.flat_entry
            if entry is None:
                entry = loop.flat_entry = loop.entry(flat, out)
            entry(flat, out)
        return out if x.ndim == 1 else out.reshape(x.shape)
    kernel.__name__ = name
    return kernel


SIN = _unary("sin", _trig_array("sin"), lambda g, out, x: g * cos(x), "sin({0})", "Sin",
             saves="i",
             scalar32="sin32")
COS = _unary("cos", _trig_array("cos"), lambda g, out, x: -g * sin(x), "cos({0})", "Cos",
             saves="i",
             scalar32="cos32")
TAN = _unary("tan", np.tan, lambda g, out, x: g * (1 + out * out), "tan({0})", "Tan",
             saves="o")
TANH = _unary("tanh", np.tanh, lambda g, out, x: apply(TANH_BACKWARD, _as_dtype_of(g, out), out),
              "tanh({0})",
              "Tanh", saves="o")
ASIN = _unary("asin", np.arcsin, lambda g, out, x: g * rsqrt(1 - x * x), "arcsin({0})",
              "Asin", saves="i")
ACOS = _unary("acos", np.arccos, lambda g, out, x: -g * rsqrt(1 - x * x), "arccos({0})",
              "Acos", saves="i")
ATAN = _unary("atan", np.arctan, lambda g, out, x: g / (1 + x * x), "arctan({0})", "Atan",
              saves="i")
ASINH = _unary("asinh", np.arcsinh, lambda g, out, x: g * rsqrt(x * x + 1), "arcsinh({0})",
               "Asinh", saves="i")
ACOSH = _unary("acosh", np.arccosh, lambda g, out, x: g * rsqrt(x * x - 1), "arccosh({0})",
               "Acosh", saves="i")
ATANH = _unary("atanh", np.arctanh, lambda g, out, x: g / (1 - x * x), "arctanh({0})",
               "Atanh", saves="i")


def exp(x):
    return apply(EXP, x)


def expm1(x):
    """``exp(x) - 1``, accurate for small ``x``."""
    return apply(EXPM1, x)


def log(x):
    return apply(LOG, x)


def log1p(x):
    """``log(1 + x)``, accurate for small ``x``."""
    return apply(LOG1P, x)


def sqrt(x):
    return apply(SQRT, x)


def sin(x):
    return apply(SIN, x)


def cos(x):
    return apply(COS, x)


def tan(x):
    return apply(TAN, x)


def tanh(x):
    return apply(TANH, x)


def asin(x):
    return apply(ASIN, x)


def acos(x):
    return apply(ACOS, x)


def atan(x):
    return apply(ATAN, x)


arcsin, arccos, arctan = asin, acos, atan


def _applying(op: OpDef, doc: str):
    """The public function ``op(x)``, named after the op."""
    def fn(x):
        return apply(op, x)
    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = doc
    return fn


asinh = _applying(ASINH, "The inverse hyperbolic sine, as ``torch.asinh``.")
acosh = _applying(ACOSH, "The inverse hyperbolic cosine (NaN below 1), as ``torch.acosh``.")
atanh = _applying(ATANH, "The inverse hyperbolic tangent (+-inf at +-1, NaN beyond), as "
                         "``torch.atanh``.")
arcsinh, arccosh, arctanh = asinh, acosh, atanh

# Composites within an ulp or two of a dedicated kernel; they export to ONNX for free.
LN2, LN10 = math.log(2), math.log(10)


def _atan2_vjp(g, out, y, x):
    """torch's: ``g * x * r`` and ``g * -y * r`` with ``r = 1 / (y*y + x*x)``, and r = 0
    where that sum is 0 (the origin, or squares that underflow): gradients 0 there, not
    NaN."""
    squares = y * y + x * x
    recip = where(squares == 0, 0.0, reciprocal(squares))
    return (unbroadcast(g * x * recip, y) if needs_grad(y) else None,
            unbroadcast(g * -y * recip, x) if needs_grad(x) else None)


def _onnx_atan2(e, node):
    """ONNX has no Atan2: atan(y / x), moved by pi where x is negative, toward y's side;
    a sign is read as 1 / v < 0, which also tells -0.0 from 0.0, so the axes and the
    origin's four signed zeros give NumPy's values (y itself where both are zero and x is
    not negative). Both infinite gives NaN where NumPy gives a multiple of pi/4."""
    dtype = node.outputs[0].dtype
    y, x = e.inputs(dtype)
    zero, one = e.scalar(0, dtype, "zero"), e.scalar(1, dtype, "one")
    pi = e.scalar(math.pi, dtype, "pi")
    negative = lambda v: e.op("Less", [e.op("Div", [one, v]), zero])
    y_neg, x_neg = negative(y), negative(x)
    angle = e.op("Atan", [e.op("Div", [y, x])])
    turned = e.op("Where", [y_neg, e.op("Sub", [angle, pi]), e.op("Add", [angle, pi])])
    general = e.op("Where", [x_neg, turned, angle])
    origin = e.op("And", [e.op("Equal", [y, zero]), e.op("Equal", [x, zero])])
    on_origin = e.op("Where", [x_neg, e.op("Where", [y_neg, e.op("Neg", [pi]), pi]), y])
    return [e.op("Where", [origin, on_origin, general])]


# (a primitive: atan(y / x) with quadrant fixes is wrong on the axes and at the origin)
ATAN2 = defop("atan2", binary_kernel(np.arctan2, float_result_type), infer_binary_float,
              vjp=_atan2_vjp, elementwise="arctan2({0}, {1})", onnx=_onnx_atan2,
              doc="The angle of the point (other, input): atan(input / other) in the "
                  "right quadrant, in [-pi, pi].")


def atan2(input, other):
    """Elementwise angle of the point ``(other, input)`` in radians, as ``torch.atan2``.

    >>> dg.atan2(dg.tensor([1.0, -1.0]), dg.tensor([0.0, -1.0]))
    tensor([ 1.5708, -2.3562])
    """
    return apply(ATAN2, as_operand(input), as_operand(other))


arctan2 = atan2


def _hypot_vjp(g, out, a, b):
    scale = g / out   # (NaN at the origin, as torch's)
    return (unbroadcast(scale * a, a) if needs_grad(a) else None,
            unbroadcast(scale * b, b) if needs_grad(b) else None)


def _onnx_sum_of_squares(e, node):
    return e.op("Add", [e.op("Mul", [v, v]) for v in e.inputs(node.outputs[0].dtype)])


# (a primitive: sqrt(a * a + b * b) as ops overflows past 1e154 in float64)
HYPOT = defop("hypot", binary_kernel(np.hypot, float_result_type), infer_binary_float,
              vjp=_hypot_vjp, saves="io", elementwise="hypot({0}, {1})", commutative=True,
              onnx=lambda e, node: [e.op("Sqrt", [_onnx_sum_of_squares(e, node)])],
              doc="The hypotenuse sqrt(input ** 2 + other ** 2), without overflow.")


def hypot(input, other):
    """Elementwise ``sqrt(input ** 2 + other ** 2)`` without overflow, as ``torch.hypot``.

    >>> dg.hypot(dg.tensor([3.0]), dg.tensor([4.0]))
    tensor([5.])
    """
    return apply(HYPOT, as_operand(input), as_operand(other))


def onnx_logaddexp(e, a, b, dtype, base2=False):
    """ONNX nodes for ``log(exp(a) + exp(b))`` (base 2 with ``base2``), which ONNX lacks:
    the larger plus ``log(1 + exp(-|a - b|))``, the gap read as 0 where ``a == b`` (two
    infinities of one sign, whose difference is NaN)."""
    scale = LN2 if base2 else 1.0
    gap = e.op("Neg", [e.op("Abs", [e.op("Sub", [a, b])])])
    gap = e.op("Where", [e.op("Equal", [a, b]), e.scalar(0, dtype, "zero"), gap])
    if base2:
        gap = e.op("Mul", [gap, e.scalar(scale, dtype, "ln2")])
    more = e.op("Log", [e.op("Add", [e.scalar(1, dtype, "one"), e.op("Exp", [gap])])])
    if base2:
        more = e.op("Div", [more, e.scalar(scale, dtype, "ln2")])
    return e.op("Add", [e.op("Max", [a, b]), more])


def _logaddexp_op(name, ufunc, base2):
    """``logaddexp`` / ``logaddexp2``: a primitive, because ``max + log1p(exp(-|a - b|))``
    as ops is NaN where both are the same infinity; the gradient of each input is its
    share, ``sigmoid((a - b) * ln base)``, as torch's ``grad / (1 + exp(b - a))``."""
    scale = LN2 if base2 else 1.0

    def vjp(g, out, a, b):
        share = sigmoid((a - b) * scale)
        return (unbroadcast(g * share, a) if needs_grad(a) else None,
                unbroadcast(g * (1.0 - share), b) if needs_grad(b) else None)

    def export(e, node):
        dtype = node.outputs[0].dtype
        return [onnx_logaddexp(e, *e.inputs(dtype), dtype, base2)]
    def kernel(a, b):
        dt = float_result_type(a, b)
        if dt.itemsize >= 4:
            return ufunc(cast(a, dt), cast(b, dt))
        return ufunc(cast(a, np.float32), cast(b, np.float32)).astype(dt)   # (halves)
    kernel.__name__ = ufunc.__name__
    return defop(name, kernel, infer_binary_float, vjp=vjp,
                 elementwise=f"{ufunc.__name__}({{0}}, {{1}})", onnx=export,
                 autocast="float32", commutative=True)


LOGADDEXP = _logaddexp_op("logaddexp", np.logaddexp, base2=False)
LOGADDEXP2 = _logaddexp_op("logaddexp2", np.logaddexp2, base2=True)


def logaddexp(input, other):
    """``log(exp(input) + exp(other))`` without overflow, as ``torch.logaddexp``.

    >>> dg.logaddexp(dg.tensor([0.0]), dg.tensor([0.0]))
    tensor([0.6931])
    """
    return apply(LOGADDEXP, as_operand(input), as_operand(other))


def logaddexp2(input, other):
    """``log2(2 ** input + 2 ** other)`` without overflow, as ``torch.logaddexp2``."""
    return apply(LOGADDEXP2, as_operand(input), as_operand(other))


def sinh(x):
    """Hyperbolic sine, from ``expm1`` so that it stays accurate near 0."""
    return (expm1(x) - expm1(-x)) / 2


def cosh(x):
    """Hyperbolic cosine."""
    return (exp(x) + exp(-x)) / 2


def rsqrt(x):
    """``1 / sqrt(x)`` (torch's CPU kernel computes it the same way)."""
    return div(1, sqrt(x))


def log2(x):
    return log(x) / LN2


def log10(x):
    return log(x) / LN10


def exp2(x):
    return exp(x * LN2)


# -- dtype-keeping unary ops: abs, sign, rounding ------------------------------------------------
def _keep_ints(ufunc):
    """A rounding kernel: integers and bools are already whole, so they come back as a copy
    in their own dtype (NumPy would turn them into floats)."""
    def kernel(x, **attrs):
        if x.dtype.kind in "iub":
            return x.copy()
        return ufunc(x, **attrs)
    kernel.__name__ = ufunc.__name__
    return kernel


def _round_array(x, decimals=0):
    if decimals == 0:
        return np.rint(x)
    if x.itemsize < 4:   # scaling by 10**decimals in half precision would lose digits
        return np.round(x.astype(np.float32), decimals).astype(x.dtype)
    return np.round(x, decimals)


ABS = defop("abs", np.abs, infer_same, vjp=lambda g, out, x: g * sign(x), saves="i",
            elementwise="absolute({0})", onnx="Abs")
def _sign_array(x):
    if x.dtype == np.bool_:
        return x.copy()
    with np.errstate(invalid="ignore"):   # torch: (x > 0) - (x < 0), so sign(NaN) is 0
        return np.subtract(x > 0, x < 0, dtype=x.dtype)


def _onnx_sign(e, node):
    """dualgraph's sign (as torch's) is 0 at NaN; onnxruntime's Sign gives NaN."""
    x = e.input(0)
    if node.inputs[0].dtype.kind != "f":
        return [e.op("Sign", [x])]
    zero = e.scalar(0, node.inputs[0].dtype, "zero")
    return [e.op("Where", [e.op("IsNaN", [x]), zero, e.op("Sign", [x])])]


def _onnx_trunc(e, node):
    x = e.input(0)
    if node.inputs[0].dtype.kind != "f":
        return [e.same(x)]
    return [e.op("Mul", [e.op("Sign", [x]), e.op("Floor", [e.op("Abs", [x])])])]


def _onnx_round(e, node):
    """Round half to even; with ``decimals``, of x * 10^decimals (as NumPy computes it)."""
    x, decimals = e.input(0), node.attrs.get("decimals", 0)
    if node.inputs[0].dtype.kind != "f":
        return [e.same(x)]
    if not decimals:
        return [e.op("Round", [x])]
    scale = e.scalar(10.0 ** decimals, node.inputs[0].dtype, "scale")
    return [e.op("Div", [e.op("Round", [e.op("Mul", [x, scale])]), scale])]


SIGN = defop("sign", _sign_array, infer_same, vjp=_zero_vjp, saves="",
             elementwise="sign({0})",
             onnx=_onnx_sign,
             onnx_import={"Sign": None})
FLOOR = defop("floor", _keep_ints(np.floor), infer_same, vjp=_zero_vjp, saves="",
              elementwise="floor({0})",
              onnx=lambda e, node: e.float_only("Floor", "same"),
              onnx_import={"Floor": None})
CEIL = defop("ceil", _keep_ints(np.ceil), infer_same, vjp=_zero_vjp, saves="",
             elementwise="ceil({0})",
             onnx=lambda e, node: e.float_only("Ceil", "same"),
             onnx_import={"Ceil": None})
TRUNC = defop("trunc", _keep_ints(np.trunc), infer_same, vjp=_zero_vjp, saves="",
              elementwise="trunc({0})",
              onnx=_onnx_trunc)
# round half to even, as torch and NumPy do (ONNX Round too)
ROUND = defop("round", _keep_ints(_round_array), infer_same, vjp=_zero_vjp, saves="",
              attrs=("decimals",), elementwise="round({0}, {decimals})",
              onnx=_onnx_round,
              onnx_import={"Round": lambda b, xs, attrs: b.op("round", xs[0], decimals=0)})


def abs(x):
    return apply(ABS, as_operand(x))


absolute = abs


def sign(x):
    """-1, 0 or 1 by the sign of ``x`` (in ``x``'s dtype); its gradient is zero."""
    return apply(SIGN, as_operand(x))


def floor(x):
    return apply(FLOOR, x)


def ceil(x):
    return apply(CEIL, x)


def trunc(x):
    """Round toward zero."""
    return apply(TRUNC, x)


fix = trunc


def round(x, *, decimals=0):
    """Round half to even, to ``decimals`` decimal places."""
    return apply(ROUND, x, decimals=int(decimals))


def frac(x):
    """The fractional part ``x - trunc(x)``, with the sign of ``x``."""
    return x - trunc(x)


# -- erf -----------------------------------------------------------------------------------------
# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23
# (1969); the coefficients of netlib's specfun CALERF. Relative error below 1e-16 in exact
# arithmetic, so float64 results are within a few ulp.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)
_ONE_OVER_SQRT_PI = 1 / math.sqrt(math.pi)
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _rational(num, den, t):
    """Cody's form: (((n[-1] t + n[0]) t + n[1]) t ... + n[-2]) / ((t + d[0]) t ... + d[-1])."""
    xnum, xden = num[-1] * t, t
    for a, b in zip(num[:-2], den[:-1]):
        xnum = (xnum + a) * t
        xden = (xden + b) * t
    return (xnum + num[-2]) / (xden + den[-1])


def _exp_minus_square(y):
    """``exp(-y*y)`` without the rounding error of forming ``y*y``: split y at 1/16ths."""
    ysq = np.trunc(y * 16) / 16
    return np.exp(-ysq * ysq) * np.exp(-(y - ysq) * (y + ysq))


def _cody(y, clip: float):
    """Cody's rational approximations on ``y = |x|`` (NaN propagates): ``(near, erf_near,
    erfc_far)``: ``near`` marks y <= 0.46875, where ``erf_near`` is erf; ``erfc_far`` is erfc
    on the rest, with y clipped at ``clip`` (beyond it erfc is below what the caller keeps),
    which keeps inf out of the arithmetic."""
    near = y <= 0.46875
    yn = y[near]
    erf_near = yn * _rational(_ERF_A, _ERF_B, yn * yn)
    yf = y[~near]
    erfc_far = np.empty_like(yf)
    mid = yf <= 4.0
    ym = yf[mid]
    erfc_far[mid] = _exp_minus_square(ym) * _rational(_ERF_C, _ERF_D, ym)
    yl = np.minimum(yf[~mid], clip)
    t = 1 / (yl * yl)
    erfc_far[~mid] = (_exp_minus_square(yl)
                      * (_ONE_OVER_SQRT_PI - t * _rational(_ERF_P, _ERF_Q, t)) / yl)
    return near, erf_near, erfc_far


def _loop32(name: str, numpy_kernel):
    """``numpy_kernel(*arrays)``, or for float32 arrays (at every size: a fused kernel calls
    the loop's scalar function, ``OpDef.scalar32``, at any size, and compiled must equal
    eager) the range loop ``kernels.activations.<name>`` over them, flat, broadcast to the
    last one's shape."""
    def kernel(*arrays, out=None):
        if not (all(a.dtype == np.float32 for a in arrays) and kernels.numba_available()):
            return numpy_kernel(*arrays)
        return _run_flat(name, arrays, out)
    kernel.__name__ = name
    return kernel


def _run_flat(name: str, arrays, out, *scalars):
    """``kernels.activations.<name>`` over float32 ``arrays`` (flat, broadcast to the last
    one's shape: a broadcast view costs more than a small loop), then ``scalars``, into
    ``out`` (or a new array), which it returns."""
    x = arrays[-1]
    out = empty_into(out, x.shape, np.float32)
    flats = [kernels.flat(a if a.shape == x.shape else np.broadcast_to(a, x.shape))
             for a in arrays]
    flats.append(out.reshape(-1))
    loop, threads = getattr(kernels.activations, name), threads_for(x.size)
    if threads == 1 and all(f.flags.aligned for f in flats):
        # one range here: the loop's entry for flat float32 arrays and its float32 scalars
        # (each loop has one such signature) kept once known, as the trig kernels keep
        # theirs: working out the argument types costs more than a small loop
        entry = loop.flat_entry
        if entry is None:
            entry = loop.flat_entry = loop.entry(0, x.size, *flats, *scalars)
        entry(0, x.size, *flats, *scalars)
    else:
        run_rows(loop, x.size, *flats, *scalars, threads=threads)
    return out


def _exact_loop32(name: str, numpy_kernel):
    """As :func:`_loop32`, for a loop that computes ``numpy_kernel``'s steps in its order
    (the same bits): the loop only from ``kernels.MIN_ELEMENTS`` elements on, where its
    one pass beats NumPy's several; below that NumPy's calls cost less than the loop's
    call (~1.3 against ~6 us for 64 elements)."""
    def kernel(*arrays, out=None):
        if (arrays[-1].size < kernels.MIN_ELEMENTS
                or not (all(a.dtype == np.float32 for a in arrays)
                        and kernels.numba_available())):
            return numpy_kernel(*arrays)
        return _run_flat(name, arrays, out)
    kernel.__name__ = name
    return kernel


def _attr_loop(name: str, numpy_kernel, *attrs):
    """``numpy_kernel(*arrays, *attr values)``, or for float32 arrays (at every size, as
    :func:`_loop32`) the loop ``kernels.activations.<name>`` over them, flat, with the
    attrs ``attrs`` as float32s (the products NumPy makes of a float32 and a Python
    float)."""
    def kernel(*arrays, **values):
        if not (all(a.dtype == np.float32 for a in arrays) and kernels.numba_available()):
            return numpy_kernel(*arrays, *(values[a] for a in attrs))
        return _run_flat(name, arrays, None, *(np.float32(values[a]) for a in attrs))
    kernel.__name__ = name
    return kernel


def _erf_cody(x):
    """erf of a float32/float64 array, computed in its own dtype."""
    y = np.abs(x)
    out = np.empty_like(y)
    # erfc(10) < 1e-44, so clipping there keeps erf exact
    near, erf_near, erfc_far = _cody(y, 10.0)
    out[near] = erf_near
    out[~near] = 1 - erfc_far
    return np.copysign(out, x)


# (float32: kernels/fastmath.py's erf32, correctly rounded but for ~1% of arguments, 1 ulp
# off; Cody's masked NumPy passes took ~60 ns an element, the loop ~1 ns)
_erf_array = _loop32("erf", _erf_cody)
ERF = _unary("erf", _erf_array,
             lambda g, out, x: g * TWO_OVER_SQRT_PI * exp(-x * x), "erf({0})", "Erf",
             saves="i",
             scalar32="erf32")


def erf(x):
    """The error function (float64 results are within a few ulp of the true value)."""
    return apply(ERF, x)


def _erfc_array(x):
    """erfc of a float32/float64 array, computed directly (not as 1 - erf, which loses
    every digit where erfc is small): Cody's branches for |x|, then erfc(-y) = 2 - erfc(y)."""
    y = np.abs(x)
    out = np.empty_like(y)
    # beyond 26.55 erfc(y) is below the smallest float64
    near, erf_near, erfc_far = _cody(y, 26.55)
    out[near] = 1 - erf_near
    out[~near] = erfc_far
    out[y >= 26.55] = 0
    return np.where(x < 0, 2 - out, out)


def _onnx_erfc(e, node):
    dtype = node.outputs[0].dtype
    return [e.op("Sub", [e.scalar(1, dtype, "one"), e.op("Erf", [e.input(0, dtype)])])]


ERFC = _unary("erfc", _erfc_array,
              lambda g, out, x: -g * TWO_OVER_SQRT_PI * exp(-x * x), None, _onnx_erfc,
              saves="i")


def erfc(x):
    """The complementary error function ``1 - erf(x)``, accurate where it is tiny (large
    ``x``), as ``torch.erfc``.

    >>> dg.erfc(dg.tensor([0.0, 5.0]))
    tensor([1.0000e+00, 1.5375e-12])
    """
    return apply(ERFC, x)


# -- comparisons ---------------------------------------------------------------------------------
def _compare(name, ufunc, onnx, **options):
    return defop(name, binary_kernel(ufunc), infer_compare, elementwise=None, onnx=onnx,
                 specialise=_specialise_compare(ufunc), **options)


def _specialise_compare(ufunc):
    """Operands that the kernel passes to ``ufunc`` as they are (two arrays of one dtype, or
    a float32/float64 array and a Python number, which NumPy 2 converts to the array's
    dtype exactly as the kernel's cast does): the ufunc itself."""
    def specialise(a, b):
        if _same_dtype_or_float_and_number(a, b):
            return ufunc.__name__, ufunc
        return None
    return specialise


def _same_dtype_or_float_and_number(a, b) -> bool:
    """Two arrays (Values) of one dtype, or a float32/float64 one and a Python number."""
    arrays = [x for x in (a, b) if hasattr(x, "dtype")]
    if len(arrays) == 2:
        return a.dtype == b.dtype
    return (len(arrays) == 1 and arrays[0].dtype in (np.float32, np.float64)
            and all(x is arrays[0] or type(x) in (int, float) for x in (a, b)))


EQ = _compare("eq", np.equal, "Equal",
              commutative=True,
              shape_fold=np.equal)
NE = _compare("ne", np.not_equal,
              lambda e, node: [e.op("Not", [e.simple("Equal")[0]])],
              commutative=True)
LT = _compare("lt", np.less, "Less")
LE = _compare("le", np.less_equal, "LessOrEqual")
GT = _compare("gt", np.greater, "Greater")
GE = _compare("ge", np.greater_equal, "GreaterOrEqual")


def eq(a, b):
    return apply(EQ, as_operand(a), as_operand(b))


def ne(a, b):
    return apply(NE, as_operand(a), as_operand(b))


def lt(a, b):
    return apply(LT, as_operand(a), as_operand(b))


def le(a, b):
    return apply(LE, as_operand(a), as_operand(b))


def gt(a, b):
    return apply(GT, as_operand(a), as_operand(b))


def ge(a, b):
    return apply(GE, as_operand(a), as_operand(b))


# -- maximum, minimum, clamp ---------------------------------------------------------------------
def _select_vjp(first_wins):
    """VJP of maximum (``first_wins`` = gt) or minimum (lt): the winner takes the gradient
    and ties split it in half, as torch does."""
    def vjp(g, out, a, b):
        half = g * 0.5
        ga = unbroadcast(where(a == b, half, where(first_wins(a, b), g, 0.0)), a)
        gb = unbroadcast(where(a == b, half, where(first_wins(a, b), 0.0, g)), b)
        return ga, gb
    return vjp


MAXIMUM = defop("maximum", binary_kernel(np.maximum), infer_binary, vjp=_select_vjp(gt),
                saves="i", elementwise="maximum({0}, {1})", onnx="Max",
                commutative=True,
                onnx_import={})   # (ONNX's Max is variadic: export/onnx_import_ops.py)
MINIMUM = defop("minimum", binary_kernel(np.minimum), infer_binary, vjp=_select_vjp(lt),
                saves="i", elementwise="minimum({0}, {1})", onnx="Min",
                commutative=True,
                onnx_import={})   # (ONNX's Min is variadic: export/onnx_import_ops.py)


def maximum(input, other):
    """Elementwise maximum (NaN propagates); ties split the gradient."""
    return apply(MAXIMUM, as_operand(input), as_operand(other))


def minimum(input, other):
    """Elementwise minimum (NaN propagates); ties split the gradient."""
    return apply(MINIMUM, as_operand(input), as_operand(other))


# clamp is where(): that gives torch's gradients exactly (x gets it where min <= x <= max, a
# bound where it is the value chosen), keeps NaN in x, and promotes int x with float bounds.
def clamp_min(input, min):
    return where(lt(input, min), min, input)


def clamp_max(input, max):
    return where(gt(input, max), max, input)


def clamp(input, min=None, max=None):
    """Limit ``input`` to ``[min, max]``; bounds are numbers or tensors, one may be None.
    With two tensor bounds, torch's gradients: ``max`` takes it where it is below ``input``
    or ``min``, ``min`` only where it is below ``max`` (where the two are equal and above
    ``input``, no one does)."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given (not None)")
    if isinstance(min, Tensor) and isinstance(max, Tensor):
        below = where(lt(min, max), min, min.detach())
        return where(logical_or(gt(input, max), lt(max, min)), max,
                     where(lt(input, min), below, input))
    out = input if min is None else clamp_min(input, min)
    return out if max is None else clamp_max(out, max)


clip = clamp


# -- where and casts -----------------------------------------------------------------------------
def _where_kernel(cond, a, b):
    if _small_plain_where(cond, a, b):
        return np.where(cond, a, b)
    dt = dtypes.result_type(a, b)
    a, b = cast(a, dt), cast(b, dt)
    shape = broadcast_shapes(shape_of(cond), shape_of(a), shape_of(b))
    if (math.prod(shape) >= kernels.MIN_ELEMENTS and kernels.numba_available()
            and (dt.kind in "iu" or dt in (np.float32, np.float64))   # (no float16 loops)
            and np.asarray(cond).dtype == np.bool_):
        return _select(cond, a, b, shape, dt)
    return np.where(cond, a, b)


def _small_plain_where(cond, a, b) -> bool:
    """A boolean condition choosing between small arrays of one dtype, or a float array and
    a Python float (a masked fill, a gradient's zero): NumPy's ``where`` at once, with no
    promotion to work out (checked by types alone: this runs at every eager call)."""
    small = kernels.MIN_ELEMENTS
    if type(cond) is not np.ndarray or cond.dtype != np.bool_ or cond.size >= small:
        return False
    ta, tb = type(a), type(b)
    if ta is np.ndarray and tb is np.ndarray:
        return a.dtype == b.dtype and a.size < small and b.size < small
    if ta is float and tb is np.ndarray:
        a, b = b, a
    elif not (ta is np.ndarray and tb is float):
        return False
    return a.dtype.kind == "f" and a.size < small


def _select(cond, a, b, shape, dt):
    """``where`` by the loops of ``kernels.activations`` (NumPy's branches per element:
    5-30x slower); a one-element side (ReLU6's bound) stays a number."""
    out = np.empty(shape, dt)
    full = lambda v: kernels.flat(np.broadcast_to(v, shape))  # noqa: E731
    c = full(cond)
    if np.size(a) == 1 or np.size(b) == 1:
        value, other, when = (a, b, True) if np.size(a) == 1 else (b, a, False)
        run_rows(kernels.activations.select_value, out.size, c,
                 dt.type(np.reshape(value, ())), full(other), out.reshape(-1), when,
                 threads=threads_for(out.size))
    else:
        run_rows(kernels.activations.select, out.size, c, full(a), full(b),
                 out.reshape(-1), threads=threads_for(out.size))
    return out


def _infer_where(cond, a, b):
    return ShapedType(broadcast_shapes(shape_of(cond), shape_of(a), shape_of(b)),
                      dtypes.result_type(a, b))


def _onnx_where(e, node):
    dtype = node.outputs[0].dtype
    return [e.op("Where", [e.input(0, np.bool_), e.input(1, dtype), e.input(2, dtype)])]


def _specialise_where(cond, a, b):
    """A boolean condition choosing between arrays of one dtype (or a float32/float64
    array and a Python number) on fewer elements than the loop takes, all static: the
    kernel's ``np.where`` without its promotion and size checks."""
    if not (hasattr(cond, "dtype") and cond.dtype == np.bool_
            and _same_dtype_or_float_and_number(a, b)):
        return None
    shapes = [tuple(x.shape) for x in (cond, a, b) if hasattr(x, "shape")]
    if not all(type(d) is int for shape in shapes for d in shape):
        return None
    if math.prod(broadcast_shapes(*shapes)) >= kernels.MIN_ELEMENTS:
        return None
    return "np_where", np.where


WHERE = defop("where", _where_kernel, _infer_where, saves="0",   # (the condition only)
              specialise=_specialise_where,
              vjp=lambda g, out, c, a, b: (
                  None,
                  unbroadcast(where(c, g, 0.0), a) if needs_grad(a) else None,
                  unbroadcast(where(c, 0.0, g), b) if needs_grad(b) else None),
              elementwise="where({0}, {1}, {2})",
              onnx=_onnx_where,
              onnx_import={"Where": None},
              shape_fold=np.where)


def where(condition, input=None, other=None):
    """``input`` where ``condition`` else ``other``, broadcasting all three. Given only
    ``condition``: the positions where it holds, one index tensor per dim (torch's
    ``where(condition)``, which is ``nonzero(condition, as_tuple=True)``)."""
    if input is None and other is None:
        return as_operand(condition).nonzero(as_tuple=True)
    return apply(WHERE, as_operand(condition), as_operand(input), as_operand(other))


def _cast_kernel(x, dtype):
    if x.dtype == np.float64 and np.dtype(dtype) in HALF_FLOATS:   # (as torch: through
        return x.astype(np.float32).astype(dtype)   # float32, two roundings, not one)
    return x.astype(dtype)


def _from_onnx_cast(b, xs, attrs, to=None):
    """Cast and CastLike: with ``saturate`` (the default) a float cast to a float8 or float4
    type clamps to its largest finite value, where ml_dtypes' cast gives inf or NaN."""
    x = xs[0]
    to = np.dtype(to if to is not None else b.onnx_dtype(attrs["to"], "Cast's target"))
    narrow = {d.np for d in dtypes.NARROW if d.is_floating_point}
    if attrs.get("saturate", 1) and to in narrow and x.dtype in dtypes.FLOATING:
        big = float(ml_dtypes.finfo(to).max)
        x = b.op("minimum", b.op("maximum", x, -big), big)
    return b.cast(x, to)


CAST = defop("cast", _cast_kernel, lambda x, dtype: ShapedType(tuple(x.shape), np.dtype(dtype)),
             attrs=("dtype",), saves="",
             vjp=lambda g, out, x, dtype: cast_to(g, x.dtype),
             differentiable_outputs=None, elementwise="cast({0})",
             onnx=lambda e, node: [e.cast(e.input(0), node.attrs["dtype"])],
             onnx_import={"Cast": _from_onnx_cast,
                          "CastLike": lambda b, xs, attrs: _from_onnx_cast(b, xs, attrs,
                                                                           xs[1].dtype)},
             # (a shape value stays ints and Syms under an integer cast)
             shape_fold=lambda x, dtype: x if np.dtype(dtype).kind in "iu" else x.astype(dtype))


def cast_to(x, dtype):
    """``x`` converted to ``dtype`` (no-op when it already has it)."""
    dt = dtypes.to_np(dtype)
    if x._data.dtype == dt:
        return x
    return apply(CAST, x, dtype=dt)


# -- logic and predicates ------------------------------------------------------------------------
def _bitwise_kernel(ufunc):
    def kernel(*operands):
        dt = dtypes.result_type(*operands)
        if is_float(dt):
            raise TypeError(f"{ufunc.__name__} needs bool or integer tensors, got {dt}; "
                            "compare first (x > 0) or use logical_* for truth values")
        return ufunc(*(cast(x, dt) for x in operands))
    kernel.__name__ = ufunc.__name__
    return kernel


# ONNX And/Or/Xor/Not take bools; integer tensors export as BitwiseAnd/... instead.
def _onnx_bitwise(bool_type: str, int_type: str):
    def export(e, node):
        dtype = e.common_dtype()
        return [e.op(bool_type if dtype == np.bool_ else int_type, e.inputs(dtype))]
    return export


BITWISE_AND = defop("bitwise_and", _bitwise_kernel(np.bitwise_and), infer_binary,
                    elementwise="bitwise_and({0}, {1})",
                    commutative=True,
                    onnx=_onnx_bitwise("And", "BitwiseAnd"),
                    onnx_import={"And": None, "BitwiseAnd": None})
BITWISE_OR = defop("bitwise_or", _bitwise_kernel(np.bitwise_or), infer_binary,
                   elementwise="bitwise_or({0}, {1})",
                   commutative=True,
                   onnx=_onnx_bitwise("Or", "BitwiseOr"),
                   onnx_import={"Or": None, "BitwiseOr": None})
BITWISE_XOR = defop("bitwise_xor", _bitwise_kernel(np.bitwise_xor), infer_binary,
                    elementwise="bitwise_xor({0}, {1})",
                    commutative=True,
                    onnx=_onnx_bitwise("Xor", "BitwiseXor"),
                    onnx_import={"Xor": None, "BitwiseXor": None})
BITWISE_NOT = defop("bitwise_not", _bitwise_kernel(np.invert), infer_same,
                    elementwise="invert({0})",
                    onnx=_onnx_bitwise("Not", "BitwiseNot"),
                    onnx_import={"Not": None, "BitwiseNot": None})


# (integers only; ONNX's BitShift takes unsigned integers only: not exported)
BITWISE_LEFT_SHIFT = defop("bitwise_left_shift", _bitwise_kernel(np.left_shift),
                           infer_binary, saves="")
BITWISE_RIGHT_SHIFT = defop("bitwise_right_shift", _bitwise_kernel(np.right_shift),
                            infer_binary, saves="")


def bitwise_left_shift(input, other):
    """``input << other`` on integer tensors, as torch."""
    return apply(BITWISE_LEFT_SHIFT, as_operand(input), as_operand(other))


def bitwise_right_shift(input, other):
    """``input >> other`` on integer tensors (arithmetic for signed ones), as torch."""
    return apply(BITWISE_RIGHT_SHIFT, as_operand(input), as_operand(other))


def bitwise_and(input, other):
    return apply(BITWISE_AND, as_operand(input), as_operand(other))


def bitwise_or(input, other):
    return apply(BITWISE_OR, as_operand(input), as_operand(other))


def bitwise_xor(input, other):
    return apply(BITWISE_XOR, as_operand(input), as_operand(other))


def bitwise_not(input):
    return apply(BITWISE_NOT, input)


def _truth(x):
    """``x != 0`` as a bool tensor (free for bool tensors), for the logical ops."""
    x = as_operand(x)
    if not isinstance(x, Tensor):
        return bool(x)
    return x if x._data.dtype == np.bool_ else ne(x, 0)


def logical_and(input, other):
    return bitwise_and(_truth(input), _truth(other))


def logical_or(input, other):
    return bitwise_or(_truth(input), _truth(other))


def logical_xor(input, other):
    return bitwise_xor(_truth(input), _truth(other))


def logical_not(input):
    return bitwise_not(_truth(input))


ISNAN = defop("isnan", np.isnan, infer_bool, elementwise="isnan({0})",
              onnx=lambda e, node: e.float_only("IsNaN", "false"),
              onnx_import={"IsNaN": None})
ISINF = defop("isinf", np.isinf, infer_bool, elementwise="isinf({0})",
              onnx=lambda e, node: e.float_only("IsInf", "false"))


def _onnx_isfinite(e, node):
    x = e.input(0)
    if node.inputs[0].dtype.kind != "f":   # integers are always finite
        return [e.op("Not", [e.false_like(x)])]
    return [e.op("Not", [e.op("Or", [e.op("IsNaN", [x]), e.op("IsInf", [x])])])]


# isfinite is a primitive because GradScaler checks every gradient with it on every step
ISFINITE = defop("isfinite", np.isfinite, infer_bool, elementwise="isfinite({0})",
                 onnx=_onnx_isfinite)


def isnan(input):
    return apply(ISNAN, input)


def isinf(input):
    return apply(ISINF, input)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Where ``|input - other| <= atol + rtol * |other|`` (or the two are equal, infinities
    included; NaNs are equal only with ``equal_nan``), as ``torch.isclose``.

    >>> dg.isclose(dg.tensor([1.0, 2.0]), dg.tensor([1.0 + 1e-9, 2.1]))
    tensor([ True, False])
    """
    input, other = as_operand(input), as_operand(other)
    close = eq(input, other)
    if _result_type(input, other) == np.bool_:
        return close
    if equal_nan:
        close = logical_or(close, logical_and(isnan(input), isnan(other)))
    diff = abs(sub(input, other))
    return logical_or(close, logical_and(isfinite(diff), diff <= atol + rtol * abs(other)))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """``input`` with NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (by
    default the dtype's largest and lowest finite values), as ``torch.nan_to_num``.

    >>> dg.nan_to_num(dg.tensor([float("nan"), float("inf"), 1.0]), posinf=9.0)
    tensor([0., 9., 1.])
    """
    if not is_float(input._data.dtype):
        return input
    info = ml_dtypes.finfo(input._data.dtype)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = where(eq(input, math.inf), posinf, where(eq(input, -math.inf), neginf, input))
    return where(isnan(input), nan, out)


def isfinite(input):
    return apply(ISFINITE, input)


# -- activations ---------------------------------------------------------------------------------
def _activation(x, fn, inplace, reads_input=True):
    """``fn(x)``; with ``inplace=True`` (torch.nn.functional's flag) written into ``x``.
    Eagerly, while autograd records, ``fn`` then reads a copy of ``x`` unless its VJPs
    don't read the input (``reads_input=False``: relu's reads its output): the nodes it
    records keep their inputs and check their versions at backward, and the write would
    change ``x`` under them (torch's in-place activations differentiate from their result).
    Traced, the write makes a new value and the nodes keep the old one: no copy."""
    if not inplace:
        return fn(x)
    src = x
    if reads_input and grad_mode.enabled and x.requires_grad and type(x._data) is np.ndarray:
        src = x.clone()
    return commit_inplace(x, fn(src))


def _sigmoid_array(x):
    # exp(-|x|) never overflows; sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for
    # x < 0, e = exp(-|x|): the numerator is max(e, x >= 0), e <= 1 (a NaN stays NaN).
    # Branch-free passes: np.where over a mixed-sign mask took 30x as long.
    e = np.exp(-np.abs(x))
    out = np.maximum(e, x >= 0)
    e += 1
    out /= e
    return out


def _sigmoid_backward_numpy(g, y):
    return g * y * (1 - y)


# A primitive for stability at large |x| (the composite 1 / (1 + exp(-x)) overflows). In
# float32 both ways are one pass (kernels/activations.py), where NumPy made four forward
# (exp, abs, maximum, divide) and three backward, and silu (x * sigmoid(x)) paid them all.
# The fused kernels call the eager loop's sigmoid32 (scalar32): compiled == eager.
SIGMOID = _unary("sigmoid", _loop32("sigmoid", _sigmoid_array),
                 lambda g, out, x: apply(SIGMOID_BACKWARD, _as_dtype_of(g, out), out),
                 "sigmoid({0})",
                 "Sigmoid", saves="o", fills_out=True, scalar32="sigmoid32")
SIGMOID_BACKWARD = defop(
    "sigmoid_backward", _exact_loop32("sigmoid_backward", _sigmoid_backward_numpy),
    lambda g, y: ShapedType(tuple(y.shape), y.dtype), compiler_only=True,
    decomposition=lambda g, y: g * y * (1 - y),
    vjp=lambda gg, dx, g, y: (apply(SIGMOID_BACKWARD, gg, y) if needs_grad(g) else None,
                              gg * g * (1 - 2 * y) if needs_grad(y) else None),
    saves="i", elementwise="{0} * {1} * (1 - {1})", onnx=None, fills_out=True,
    doc="g * y * (1 - y), y sigmoid's output: sigmoid's gradient.")


def sigmoid(input):
    return apply(SIGMOID, input)


def _as_dtype_of(g, y):
    """An integer or bool gradient (``grad_outputs`` given so) in ``y``'s float dtype, as
    ``g * y`` would promote it, before the one-op gradients above: their kernels and fused
    templates would compute ``int * float`` in NumPy's float64."""
    return g if g.dtype.is_floating_point else cast_to(g, y.dtype)


def _tanh_backward_numpy(g, y):
    return g * (1 - y * y)


# tanh's gradient as one op, as sigmoid's: one dispatch (and for big tensors one pass)
# where the composite made three (a small tensor's backward is mostly dispatch).
TANH_BACKWARD = defop(
    "tanh_backward", _exact_loop32("tanh_backward", _tanh_backward_numpy), infer_binary,
    compiler_only=True,
    decomposition=_tanh_backward_numpy,
    vjp=lambda gg, dx, g, y: (apply(TANH_BACKWARD, gg, y) if needs_grad(g) else None,
                              gg * g * (-2 * y) if needs_grad(y) else None),
    saves="i", elementwise="{0} * (1 - {1} * {1})", onnx=None, fills_out=True,
    doc="g * (1 - y * y), y tanh's output: tanh's gradient.")


# relu is the most used activation: one pass, and ONNX Relu; its backward is one op too.
def _relu_backward_kernel(g, y, out=None):
    """``g`` where relu's output ``y`` is positive, else 0 (into ``out``: ``fills_out``)."""
    if g.shape == y.shape and kernels.enabled(g, y):
        dx = empty_into(out, g.shape, g.dtype)
        kernels.activations.relu_backward(kernels.flat(g), kernels.flat(y), dx.reshape(-1))
        return dx
    return np.where(y > 0, g, g.dtype.type(0))


def relu_backward_in_place(g, out):
    """``relu_backward(g, out)`` written into ``g`` itself where the loop takes them
    (float32 of one shape, ``g`` C-contiguous and writeable), else a new array as the op's
    kernel gives: the compiled code's form where nothing else reads ``g``
    (the ``relu_backward_in_place`` op, which the lowering rule of that name chooses)."""
    if (g.shape == out.shape and g.flags.c_contiguous and g.flags.writeable
            and kernels.enabled(g, out)):
        kernels.activations.relu_backward_in_place(g.reshape(-1), kernels.flat(out))
        return g
    return _relu_backward_kernel(g, out)


def _relu_backward_decomposition(g, out):
    return where(gt(out, 0), g, 0)


RELU_BACKWARD = defop("relu_backward", _relu_backward_kernel, infer_binary,
                      compiler_only=True,
                      decomposition=_relu_backward_decomposition,
                      vjp=lambda gg, dx, g, out: (apply(RELU_BACKWARD, gg, out),
                                                  creation.zeros_like(out)),  # relu'' = 0
                      saves="i", elementwise="where({1} > 0, {0}, 0)", onnx=None,
                      fills_out=True,
                      doc="g where the relu's output is positive, else 0: relu's gradient.")
# Chosen by the lowering rule ``relu_backward_in_place`` after autodiff: no VJP. Its output
# may be ``g`` itself, so it is a view of ``g`` to the memory plan.
RELU_BACKWARD_IN_PLACE = defop(
    "relu_backward_in_place", relu_backward_in_place, infer_binary, onnx=None,
    view=True,
    compiler_only=True,
    decomposition=_relu_backward_decomposition,
    doc="relu_backward(g, out) written into g itself where nothing else reads g.")

RELU = defop("relu", lambda x: np.maximum(x, x.dtype.type(0)), infer_same,
             vjp=lambda g, out, x: apply(RELU_BACKWARD, g, out), saves="o",
             elementwise="maximum({0}, 0)", onnx="Relu")


def relu(input, inplace=False):
    if not inplace:   # (the common call, without _activation's two frames)
        return apply(RELU, input)
    return _activation(input, lambda x: apply(RELU, x), inplace, reads_input=False)


def _elu_array(x, alpha):
    """``x`` where ``x > 0``, else ``alpha * expm1(x)``, as ``max(x, 0) + alpha *
    expm1(min(x, 0))`` (the same bits; a select of a random mask is a mispredicted branch
    per element in NumPy, 10x a pass)."""
    neg = np.minimum(x, 0)
    np.expm1(neg, out=neg)
    if alpha != 1:
        np.multiply(neg, alpha, out=neg)
    return np.add(neg, np.maximum(x, 0), out=neg)


def _elu_backward_decomposition(g, out, x, alpha):
    return where(x > 0, g, g * (out + alpha))


def _onnx_elu(e, node):
    """ONNX Elu; its ``alpha`` is a float32 attribute, so an alpha that float32 rounds
    (0.3) scales Elu(alpha=1)'s negative part by a constant of the input's dtype."""
    alpha, x = float(node.attrs["alpha"]), e.input(0)
    if float(np.float32(alpha)) == alpha:
        return [e.op("Elu", [x], alpha=alpha)]
    dtype = node.outputs[0].dtype
    scaled = e.op("Mul", [e.op("Elu", [x], alpha=1.0), e.scalar(alpha, dtype)])
    return [e.op("Where", [e.op("Greater", [x, e.scalar(0, dtype)]), x, scaled])]


# elu and softplus are primitives: as where() composites, the branch not taken overflows
# (exp of a large x) and its zero gradient becomes 0 * inf = NaN.
ELU = defop("elu", _float_kernel(_elu_array), infer_float, attrs=("alpha",), saves="io",
            vjp=lambda g, out, x, alpha: apply(ELU_BACKWARD, g, out, x, alpha=alpha),
            elementwise="where({0} > 0, {0}, {alpha} * expm1({0}))",
            onnx=_onnx_elu,
            onnx_import={"Elu": lambda b, xs, attrs: b.op(
                "elu", xs[0], alpha=float(attrs.get("alpha", 1.0)))})


# (one float32 pass, where the rule's ops were four: a compare, a sum, a product, a select)
ELU_BACKWARD = defop(
    "elu_backward",
    _attr_loop("elu_backward",
               lambda g, out, x, alpha: np.where(x > 0, g, g * (out + alpha)).astype(
                   g.dtype, copy=False), "alpha"),
    lambda g, out, x, alpha: ShapedType(tuple(x.shape), g.dtype), attrs=("alpha",),
    compiler_only=True, decomposition=_elu_backward_decomposition,
    vjp=lambda gg, dx, g, out, x, alpha: (
        apply(ELU_BACKWARD, gg, out, x, alpha=alpha) if needs_grad(g) else None,
        where(x > 0, 0.0, gg * g) if needs_grad(out) else None, None),
    saves="i", elementwise="where({2} > 0, {0}, {0} * ({1} + {alpha}))", onnx=None,
    doc="g where x > 0, else g * (out + alpha): elu's gradient from its output.")


def elu(input, alpha=1.0, inplace=False):
    return _activation(input, lambda x: apply(ELU, x, alpha=float(alpha)), inplace)


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    return _activation(input, lambda x: elu(x, SELU_ALPHA) * SELU_SCALE, inplace)


def celu(input, alpha=1.0, inplace=False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    return _activation(input, lambda x: elu(x / alpha, 1.0) * alpha, inplace)


def _softplus_array(x, beta, threshold):
    """``log1p(exp(z)) / beta``, ``z = beta x``, rewritten so that exp never overflows:
    ``(max(z, 0) + log1p(exp(-|z|))) / beta``; ``x`` where ``z > threshold``. Passes
    in place, none for ``beta == 1``, and the select only where some ``z`` is past the
    threshold (the same bits as the plain formula)."""
    z = x if beta == 1 else x * beta
    soft = np.abs(z)
    np.negative(soft, out=soft)
    np.exp(soft, out=soft)
    np.log1p(soft, out=soft)
    soft += np.maximum(z, 0)
    if beta != 1:
        soft /= beta
    past = z > threshold
    if past.any():
        np.copyto(soft, x, where=past)
    return soft


def _softplus_backward_array(g, x, beta, threshold):
    z = x * beta
    return np.where(z > threshold, g, g * _sigmoid_array(z)).astype(g.dtype, copy=False)


def _softplus_backward_decomposition(g, x, beta, threshold):
    return where(x * beta > threshold, g, g * sigmoid(x * beta))


def _softplus_backward_vjp(gg, dx, g, x, beta, threshold):
    """``g`` enters linearly; ``d/dx`` of ``g sigmoid(beta x)`` is ``g beta s (1 - s)``."""
    s = sigmoid(x * beta)
    return (apply(SOFTPLUS_BACKWARD, gg, x, beta=beta, threshold=threshold)
            if needs_grad(g) else None,
            where(x * beta > threshold, 0.0, gg * g * beta * s * (1 - s))
            if needs_grad(x) else None)


def _onnx_softplus(e, node):
    """torch's softplus(x, beta, threshold): log(1 + exp(beta x)) / beta, and x itself
    where beta x > threshold."""
    dtype = node.outputs[0].dtype
    x = e.input(0)
    beta, threshold = node.attrs["beta"], node.attrs["threshold"]
    scaled = x if beta == 1 else e.op("Mul", [x, e.scalar(beta, dtype)])
    soft = e.op("Softplus", [scaled])
    if beta != 1:
        soft = e.op("Div", [soft, e.scalar(beta, dtype)])
    linear = e.op("Greater", [scaled, e.scalar(threshold, dtype)])
    return [e.op("Where", [linear, x, soft])]


SOFTPLUS = defop("softplus", _float_kernel(_softplus_array), infer_float,
                 attrs=("beta", "threshold"), saves="i",
                 vjp=lambda g, out, x, beta, threshold: apply(
                     SOFTPLUS_BACKWARD, g, x, beta=beta, threshold=threshold),
                 elementwise="where({0} * {beta} > {threshold}, {0}, "
                             "log1p(exp({0} * {beta})) / {beta})",
                 onnx=_onnx_softplus,
                 onnx_import={"Softplus": lambda b, xs, attrs: b.op(
                     "softplus", xs[0], beta=1.0, threshold=20.0)})


# (one float32 pass, where the rule's ops were five: two products, a compare, sigmoid, a
# select; the loop's sigmoid is the sigmoid op's float32 one, sigmoid32)
SOFTPLUS_BACKWARD = defop(
    "softplus_backward",
    _attr_loop("softplus_backward", _softplus_backward_array, "beta", "threshold"),
    lambda g, x, beta, threshold: ShapedType(tuple(x.shape), g.dtype),
    attrs=("beta", "threshold"), compiler_only=True,
    decomposition=_softplus_backward_decomposition, vjp=_softplus_backward_vjp, saves="i",
    onnx=None, doc="g * sigmoid(beta x), g where beta x > threshold: softplus's gradient.")


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``."""
    return apply(SOFTPLUS, input, beta=float(beta), threshold=float(threshold))


def logsigmoid(input):
    return -softplus(-input)


def _gelu_numpy(x):
    return x * 0.5 * (1 + _erf_cody(x * (1 / math.sqrt(2))))


def _gelu_composite(x):
    """The exact GELU from elementwise ops: what the VJP of its backward differentiates."""
    return 0.5 * x * (1 + erf(x * (1 / math.sqrt(2))))


def _gelu_backward_decomposition(g, x):
    """``g * gelu'(x) = g (Phi(x) + x phi(x))`` from elementwise ops."""
    cdf = 0.5 * (1 + erf(x * (1 / math.sqrt(2))))
    pdf = exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
    return g * (cdf + x * pdf)


def _gelu_backward_numpy(g, x):
    cdf = 0.5 * (1 + _erf_cody(x * (1 / math.sqrt(2))))
    return g * (cdf + x * np.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi)))


def _onnx_gelu(approximate: str):
    def export(e, node):
        x = e.input(0)
        if e.opset >= 20:
            return [e.op("Gelu", [x], approximate=approximate)]
        dtype = node.outputs[0].dtype
        c = lambda v: e.scalar(v, dtype)   # noqa: E731
        if approximate == "none":   # x/2 (1 + erf(x / sqrt 2))
            inner = e.op("Erf", [e.op("Mul", [x, c(1 / np.sqrt(2))])])
        else:                       # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            cube = e.op("Mul", [e.op("Mul", [x, x]), x])
            poly = e.op("Add", [x, e.op("Mul", [cube, c(0.044715)])])
            inner = e.op("Tanh", [e.op("Mul", [poly, c(np.sqrt(2 / np.pi))])])
        half = e.op("Mul", [x, c(0.5)])
        return [e.op("Mul", [half, e.op("Add", [inner, c(1.0)])])]
    return export


SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


# The tanh form is a primitive with a fused backward: as a composite it is ~8 passes over
# the (often large) MLP activations forward and ~15 backward, which dominated GPT steps.
_GELU_C = 0.044715


def _gelu_tanh_inner(x):
    """``tanh(sqrt(2/pi) * (x + c x^3))``, computed in place in one buffer."""
    t = x * x
    t *= _GELU_C
    t += 1
    t *= x
    t *= SQRT_2_OVER_PI
    return np.tanh(t, out=t)


def _gelu_tanh_array(x, out=None):
    if kernels.enabled(x):
        out = empty_into(out, x.shape, x.dtype)
        run_rows(kernels.activations.gelu_tanh, x.size, kernels.flat(x), out.reshape(-1),
                 threads=threads_for(x.size))
        return out
    t = _gelu_tanh_inner(x)
    t += 1
    t *= x
    t *= 0.5
    return t


def _gelu_tanh_backward_array(g, x, out=None):
    if kernels.enabled(x, g):
        out = empty_into(out, x.shape, x.dtype)
        run_rows(kernels.activations.gelu_tanh_backward, x.size,
                 kernels.flat(np.broadcast_to(g, x.shape)), kernels.flat(x), out.reshape(-1),
                 threads=threads_for(x.size))
        return out
    t = _gelu_tanh_inner(x)
    dt = x * x
    dt *= 3 * _GELU_C
    dt += 1
    dt *= SQRT_2_OVER_PI * 0.5
    dt *= x
    dt *= 1 - t * t                   # 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2)
    t += 1
    t *= 0.5
    t += dt                           # + 0.5 (1 + t)
    t *= g
    return t


def _gelu_tanh_composite(x):
    """The same function from elementwise ops: what the VJP of the backward differentiates."""
    inner = (x + _GELU_C * x * x * x) * SQRT_2_OVER_PI
    return 0.5 * x * (1 + tanh(inner))


def _float_binary(fn):
    """A two-input float kernel going through float32 for half precision."""
    def kernel(g, x, out=None):   # (out=: of the ops that are ``fills_out``)
        if x.dtype.itemsize >= 4:
            return fn(g, x, out=out)
        return fn(g.astype(np.float32), x.astype(np.float32)).astype(x.dtype)
    return kernel


def _gelu_tanh_backward_decomposition(g, x):
    """``g * gelu_tanh'(x)`` from elementwise ops: with ``t = tanh(inner(x))``,
    ``0.5 (1 + t) + 0.5 x (1 - t^2) inner'(x)``."""
    t = tanh((x + _GELU_C * x * x * x) * SQRT_2_OVER_PI)
    slope = (1 + 3 * _GELU_C * x * x) * SQRT_2_OVER_PI
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * slope)


def _backward_vjp(composite):
    """The VJP of ``backward(g, x) = g * f'(x)`` for an activation ``f`` given as a
    composite of elementwise ops: linear in g, and d/dx through f''."""
    def vjp(gg, out, g, x):
        from ..autograd.engine import grad
        from ..autograd.tape import enable_grad
        with enable_grad():
            xl = x.detach().requires_grad_()
            y = composite(xl)
            dg_ = grad(y, xl, gg, create_graph=True)[0] if needs_grad(g) else None
            dx = None
            if needs_grad(x):
                (first,) = grad(y, xl, g, create_graph=True)
                (dx,) = grad(first, xl, gg, create_graph=True)
            return dg_, dx
    return vjp


def _activation_backward(name: str, kernel, decomposition, composite):
    """The fused backward op ``<name>_backward(g, x) = g * f'(x)`` of activation ``f``:
    ``kernel`` (float32 and wider; half precision through float32), its decomposition and
    ``f`` as a composite (what its VJP differentiates), the fused kernels' scalar function
    ``<name>_backward32`` (the eager float32 loop's)."""
    return defop(f"{name}_backward", _float_binary(kernel),
                 lambda g, x: ShapedType(tuple(x.shape), x.dtype), compiler_only=True,
                 decomposition=decomposition, vjp=_backward_vjp(composite), saves="i",
                 elementwise=f"{name}_backward({{0}}, {{1}})", onnx=None, fills_out=True,
                 scalar32=f"{name}_backward32")


# The exact GELU is a primitive with a fused backward, as the tanh form below: one float32
# pass each way (kernels/fastmath.py's gelu32 and gelu_backward32, which fused kernels call
# too), where the composite took eight.
GELU = _unary("gelu", _loop32("gelu", _gelu_numpy),
              lambda g, out, x: apply(GELU_BACKWARD, g, x), "gelu({0})", _onnx_gelu("none"),
              saves="i", fills_out=True,
              scalar32="gelu32")
GELU_BACKWARD = _activation_backward("gelu", _loop32("gelu_backward", _gelu_backward_numpy),
                                     _gelu_backward_decomposition, _gelu_composite)


# (Their eager float32 loops apply kernels/fastmath.py's gelu_tanh32 / gelu_tanh_backward32
# per element; ``scalar32`` has a fused kernel call the same, so it computes the same bits.)
GELU_TANH = _unary("gelu_tanh", _gelu_tanh_array,
                   lambda g, out, x: apply(GELU_TANH_BACKWARD, g, x), "gelu_tanh({0})",
                   _onnx_gelu("tanh"), saves="i", fills_out=True,
                   scalar32="gelu_tanh32")
GELU_TANH_BACKWARD = _activation_backward("gelu_tanh", _gelu_tanh_backward_array,
                                          _gelu_tanh_backward_decomposition,
                                          _gelu_tanh_composite)


def gelu(input, approximate="none"):
    """``x * Phi(x)``; ``approximate="tanh"`` uses the tanh formula of Hendrycks & Gimpel."""
    if approximate == "none":
        return apply(GELU, input)
    if approximate == "tanh":
        return apply(GELU_TANH, input)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def _silu_numpy(x):
    return x * _sigmoid_array(x)


def _silu_backward_numpy(g, x):
    s = _sigmoid_array(x)
    return g * s * (1 + x * (1 - s))


def _silu_composite(x):
    """SiLU from ordinary ops: its backward's decomposition differentiates it."""
    return x * sigmoid(x)


def _silu_backward_decomposition(g, x):
    s = sigmoid(x)
    return g * s * (1 + x * (1 - s))


def _onnx_silu(e, node):
    x = e.input(0)
    return [e.op("Mul", [x, e.op("Sigmoid", [x])])]


# SiLU is a primitive with a fused backward (as torch's): as x * sigmoid(x) it was two ops
# forward and four backward (the product's two, sigmoid's, their sum), each a pass over the
# activations. The float32 loops apply fastmath's silu32 / silu_backward32, which the
# fused kernels (scalar32) and the conv and linear epilogues apply too.
SILU = _unary("silu", _loop32("silu", _silu_numpy),
              lambda g, out, x: apply(SILU_BACKWARD, g, x), "silu({0})", _onnx_silu,
              saves="i", fills_out=True, scalar32="silu32")
SILU_BACKWARD = _activation_backward("silu", _loop32("silu_backward", _silu_backward_numpy),
                                     _silu_backward_decomposition, _silu_composite)


def silu(input, inplace=False):
    return _activation(input, lambda x: apply(SILU, x), inplace)


def mish(input, inplace=False):
    return _activation(input, lambda x: x * tanh(softplus(x)), inplace)


def _leaky_relu_backward_decomposition(g, x, negative_slope):
    return where(x > 0, g, g * negative_slope)


# leaky_relu is a primitive with a one-op backward: as where(x > 0, x, x * slope) it was
# three passes and nodes forward and five backward (where's two, the product's, their sum).
LEAKY_RELU = defop(
    "leaky_relu", _attr_loop("leaky_relu",
                             lambda x, s: np.where(x > 0, x, (x * s).astype(x.dtype)),
                             "negative_slope"),
    infer_same, attrs=("negative_slope",), saves="i",
    vjp=lambda g, out, x, negative_slope: apply(LEAKY_RELU_BACKWARD, g, x,
                                                negative_slope=negative_slope),
    elementwise="where({0} > 0, {0}, {0} * {negative_slope})",
    onnx=lambda e, node: [e.op("LeakyRelu", [e.input(0)],
                               alpha=float(node.attrs["negative_slope"]))])
LEAKY_RELU_BACKWARD = defop(
    "leaky_relu_backward",
    _attr_loop("leaky_relu_backward",
               lambda g, x, s: np.where(x > 0, g, (g * s).astype(g.dtype)), "negative_slope"),
    lambda g, x, negative_slope: ShapedType(tuple(x.shape), g.dtype),
    attrs=("negative_slope",), compiler_only=True,
    decomposition=_leaky_relu_backward_decomposition,
    vjp=lambda gg, dx, g, x, negative_slope: (   # (piecewise linear: no d/dx)
        apply(LEAKY_RELU_BACKWARD, gg, x, negative_slope=negative_slope)
        if needs_grad(g) else None, creation.zeros_like(x) if needs_grad(x) else None),
    saves="i", elementwise="where({1} > 0, {0}, {0} * {negative_slope})", onnx=None,
    doc="g where x > 0, else g * negative_slope: leaky_relu's gradient.")


def leaky_relu(input, negative_slope=0.01, inplace=False):
    input = as_operand(input)
    if not is_float(input._data.dtype):
        raise TypeError(f"leaky_relu takes a floating-point tensor, got "
                        f"{dtypes.from_np(input._data.dtype)!r}; convert it with .float()")
    return _activation(input, lambda x: apply(LEAKY_RELU, x,
                                              negative_slope=float(negative_slope)), inplace)


def _hardtanh_kernel(x, min_val, max_val):
    # (NaN stays NaN; half precision computes in float32, as torch, and rounds once)
    return np.minimum(np.maximum(x, min_val), max_val).astype(x.dtype, copy=False)


def _hardtanh_backward_kernel(g, x, min_val, max_val):
    return np.where((x <= min_val) | (x >= max_val), g.dtype.type(0), g)   # (NaN: g)


def _hardtanh_backward_decomposition(g, x, min_val, max_val):
    return where(logical_or(le(x, min_val), ge(x, max_val)), 0.0, g)


def _onnx_hardtanh(e, node):
    dtype = node.outputs[0].dtype
    return [e.op("Clip", [e.input(0), e.scalar(node.attrs["min_val"], dtype, "min"),
                          e.scalar(node.attrs["max_val"], dtype, "max")])]


# hardtanh (relu6) of a float tensor is a primitive with a one-op backward, as torch's: as
# a clamp it was four ops forward (two compares, two selects) and four backward. Its
# gradient passes except where x <= min_val or x >= max_val (torch's hardtanh_backward: NaN
# passes it; clamp's passes at the bounds). Compiled, simplify writes it as
# minimum(maximum(x, lo), hi), the clamp the epilogue and fusion rules read.
HARDTANH = defop(
    "hardtanh", _hardtanh_kernel, infer_same, attrs=("min_val", "max_val"), saves="i",
    vjp=lambda g, out, x, min_val, max_val: apply(HARDTANH_BACKWARD, g, x, min_val=min_val,
                                                  max_val=max_val),
    elementwise="minimum(maximum({0}, {min_val}), {max_val})", onnx=_onnx_hardtanh,
    doc="x limited to [min_val, max_val] (a float tensor; NaN stays NaN).")
HARDTANH_BACKWARD = defop(
    "hardtanh_backward", _hardtanh_backward_kernel,
    lambda g, x, min_val, max_val: ShapedType(tuple(x.shape), g.dtype),
    attrs=("min_val", "max_val"), compiler_only=True,
    decomposition=_hardtanh_backward_decomposition,
    vjp=lambda gg, dx, g, x, min_val, max_val: (   # (piecewise linear: no d/dx)
        apply(HARDTANH_BACKWARD, gg, x, min_val=min_val, max_val=max_val)
        if needs_grad(g) else None, creation.zeros_like(x) if needs_grad(x) else None),
    saves="i", elementwise="where({1} <= {min_val}, 0, where({1} >= {max_val}, 0, {0}))",
    onnx=None, doc="0 where x <= min_val or x >= max_val, else g: hardtanh's gradient.")


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    input = as_operand(input)
    if not (is_float(input._data.dtype) and type(min_val) in (int, float)
            and type(max_val) in (int, float)):
        return _activation(input, lambda x: clamp(x, min_val, max_val), inplace)
    bounds = {"min_val": float(min_val), "max_val": float(max_val)}
    return _activation(input, lambda x: apply(HARDTANH, x, **bounds), inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def _hard_gate(x):
    """relu6(x + 3) / 6 by the kernels of its ops (the same bits as the ops, or as the
    clamp simplify makes of them when compiled)."""
    return DIV.kernel(HARDTANH.kernel(ADD.kernel(x, 3.0), min_val=0.0, max_val=6.0), 6.0)


def _hardswish_backward_kernel(g, x):
    """torch's: 0 where x <= -3, g * (x / 3 + 0.5) where x < 3, else g (NaN: g)."""
    inner = MUL.kernel(g, ADD.kernel(DIV.kernel(x, 3.0), 0.5))
    return np.where(x <= -3, g.dtype.type(0), np.where(x < 3, inner, g))


def _hardswish_backward_decomposition(g, x):
    return where(le(x, -3.0), 0.0, where(lt(x, 3.0), g * (x / 3.0 + 0.5), g))


# torch's hardsigmoid gradient multiplies by 1/6 rounded to float32, in every dtype
_ONE_SIXTH = float(np.float32(1 / 6))


def _hardsigmoid_backward_kernel(g, x):
    """torch's: g * (1/6) where -3 < x < 3, else 0 (NaN: 0)."""
    return np.where((x > -3) & (x < 3), MUL.kernel(g, _ONE_SIXTH), g.dtype.type(0))


def _hardsigmoid_backward_decomposition(g, x):
    return where(logical_and(gt(x, -3.0), lt(x, 3.0)), g * _ONE_SIXTH, 0.0)


def _hardswish_backward_vjp(gg, dx, g, x):
    """Linear in g; its slope in x is g / 3 on (-3, 3)."""
    inside = logical_and(gt(x, -3.0), lt(x, 3.0))
    return (apply(HARDSWISH_BACKWARD, gg, x) if needs_grad(g) else None,
            where(inside, gg * g / 3.0, 0.0) if needs_grad(x) else None)


_GATE = "minimum(maximum({0} + 3, 0), 6) / 6"


def _hard_activation(name, kernel, composite, gate_times_x, backward_kernel,
                     backward_decomposition, backward_expr, backward_vjp, onnx):
    """hardsigmoid or hardswish (of a float tensor) and its backward op: one op each way,
    as torch's, where the composite (``composite``, its decomposition: simplify writes it
    so compiled) was four ops forward and six backward."""
    expr = f"{{0}} * ({_GATE})" if gate_times_x else _GATE
    forward = defop(name, kernel, infer_same, saves="i", decomposition=composite,
                    vjp=lambda g, out, x: apply(backward, g, x), elementwise=expr,
                    onnx=onnx, doc=f"{name}(x) (a float tensor), torch's formula.")
    backward = defop(f"{name}_backward", backward_kernel,
                     lambda g, x: ShapedType(tuple(x.shape), g.dtype), compiler_only=True,
                     decomposition=backward_decomposition, vjp=backward_vjp, saves="i",
                     elementwise=backward_expr, onnx=None,
                     doc=f"the gradient of {name} (torch's hard bounds)")
    return forward, backward


HARDSIGMOID, HARDSIGMOID_BACKWARD = _hard_activation(
    "hardsigmoid", _hard_gate, lambda x: hardtanh(x + 3.0, 0.0, 6.0) / 6.0, False,
    _hardsigmoid_backward_kernel, _hardsigmoid_backward_decomposition,
    f"where({{1}} > -3, where({{1}} < 3, {{0}} * {_ONE_SIXTH!r}, 0), 0)",
    lambda gg, dx, g, x: (apply(HARDSIGMOID_BACKWARD, gg, x) if needs_grad(g) else None,
                          creation.zeros_like(x) if needs_grad(x) else None),
    lambda e, node: [e.op("HardSigmoid", [e.input(0)], alpha=1 / 6, beta=0.5)])
HARDSWISH, HARDSWISH_BACKWARD = _hard_activation(
    "hardswish", lambda x: MUL.kernel(x, _hard_gate(x)),
    lambda x: x * (hardtanh(x + 3.0, 0.0, 6.0) / 6.0), True,
    _hardswish_backward_kernel, _hardswish_backward_decomposition,
    "where({1} <= -3, 0, where({1} < 3, {0} * ({1} / 3 + 0.5), {0}))",
    _hardswish_backward_vjp, lambda e, node: [e.op("HardSwish", [e.input(0)])])


def hardsigmoid(input, inplace=False):
    input = as_operand(input)
    if not is_float(input._data.dtype):
        return _activation(input, lambda x: relu6(x + 3) / 6, inplace)
    return _activation(input, lambda x: apply(HARDSIGMOID, x), inplace)


def hardswish(input, inplace=False):
    input = as_operand(input)
    if not is_float(input._data.dtype):
        return _activation(input, lambda x: x * hardsigmoid(x), inplace)
    return _activation(input, lambda x: apply(HARDSWISH, x), inplace)


# -- in-place methods ----------------------------------------------------------------------------
def fill_(self, value):
    """Fill with ``value``. A where() cuts the history: the old values get a zero gradient
    and a tensor ``value`` gets the summed gradient, as in torch."""
    return commit_inplace(self, where(True, value, source_of(self, value)))


def zero_(self):
    return fill_(self, 0)


def copy_(self, src, non_blocking=False):
    """Copy ``src`` (broadcast to this tensor's shape, cast to its dtype) into this tensor;
    gradients flow to ``src`` and the old value's history is cut, as in torch.

    >>> dg.zeros(2, 2).copy_(dg.tensor([1.0, 2.0]))
    tensor([[1., 2.],
            [1., 2.]])
    """
    src = as_operand(src)
    shape = tuple(self._data.shape)
    if broadcast_shapes(shape_of(src), shape) != shape:
        raise ValueError(f"copy_: the source's shape {tuple(shape_of(src))} does not "
                         f"broadcast to the destination's {shape}")
    if tuple(shape_of(src)) == shape and not (grad_mode.enabled and self.requires_grad):
        return commit_inplace(self, src)
    return commit_inplace(self, where(True, src, source_of(self, src)))


def lerp(input, end, weight):
    """``input + weight * (end - input)``; ``weight`` a number or a tensor, as torch.lerp.

    >>> dg.lerp(dg.tensor([0.0, 10.0]), dg.tensor([10.0, 20.0]), 0.5)
    tensor([ 5., 15.])
    """
    return input + (end - input) * weight


def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2``, as torch.addcmul (in the result's dtype)."""
    input, tensor1, tensor2 = _promoted(input, tensor1, tensor2)
    return input + tensor1 * tensor2 * value


def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``, as torch.addcdiv (in the result's dtype)."""
    input, tensor1, tensor2 = _promoted(input, tensor1, tensor2)
    return input + tensor1 / tensor2 * value


def _where_method(self, condition, other):
    """``x.where(condition, y)`` is ``where(condition, x, y)``."""
    return where(condition, self, other)


def _reflected(fn):
    return lambda self, other: fn(other, self)


def _rdiv(self, other):
    """``other / self`` as torch computes it (``Tensor.__rtruediv__``): ``self.reciprocal()
    * other``, which is up to an ulp from a division (a quarter of float32 quotients)."""
    return mul(reciprocal(self), other)


def _commutative(op):
    """``x + y`` / ``y + x`` (and ``*``): the hot path of user arithmetic, so tensors and
    Python floats go straight to dispatch; both orders compute ``op(self, other)``, which
    is exact for a commutative op."""
    def method(self, other):
        if type(other) is not float and type(other) is not Tensor:
            other = as_operand(other)
        return apply(op, self, other)
    method.__name__ = f"__{op.name}__"
    return method


_OUT_OF_PLACE = {
    "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "neg": neg, "negative": neg,
    "true_divide": div, "multiply": mul, "subtract": sub,
    "floor_divide": floor_divide, "remainder": remainder, "fmod": fmod,
    "reciprocal": reciprocal, "square": square,
    "exp": exp, "exp2": exp2, "expm1": expm1, "log": log, "log2": log2, "log10": log10,
    "log1p": log1p, "sqrt": sqrt, "rsqrt": rsqrt, "abs": abs, "absolute": abs, "sign": sign,
    "floor": floor, "ceil": ceil, "round": round, "trunc": trunc, "fix": trunc, "frac": frac,
    "erf": erf, "erfc": erfc, "atan2": atan2, "arctan2": atan2, "sin": sin, "cos": cos,
    "tan": tan, "tanh": tanh, "asin": asin, "acos": acos,
    "atan": atan, "arcsin": asin, "arccos": acos, "arctan": atan,
    "asinh": asinh, "acosh": acosh, "atanh": atanh, "arcsinh": asinh, "arccosh": acosh,
    "arctanh": atanh,
    "sigmoid": sigmoid, "relu": relu,
    "maximum": maximum, "minimum": minimum, "clamp": clamp, "clip": clip,
    "clamp_min": clamp_min, "clamp_max": clamp_max,
    "logical_and": logical_and, "logical_or": logical_or, "logical_xor": logical_xor,
    "logical_not": logical_not, "bitwise_and": bitwise_and, "bitwise_or": bitwise_or,
    "bitwise_xor": bitwise_xor, "bitwise_not": bitwise_not,
    "bitwise_left_shift": bitwise_left_shift, "bitwise_right_shift": bitwise_right_shift,
    "lerp": lerp, "addcmul": addcmul, "addcdiv": addcdiv, "sinh": sinh, "cosh": cosh,
    "nan_to_num": nan_to_num,
}
# add_/sub_/mul_/div_/pow_ are installed by ops/methods.py
_IN_PLACE = {name: fn for name, fn in _OUT_OF_PLACE.items()
             if name not in ("add", "sub", "mul", "div", "pow")}

METHODS = {
    **_OUT_OF_PLACE,
    **{name + "_": inplace(fn) for name, fn in _IN_PLACE.items()},
    "fill_": fill_, "zero_": zero_, "copy_": copy_, "where": _where_method,
    "isclose": isclose, "logaddexp": logaddexp, "logaddexp2": logaddexp2,
    "hypot": hypot,
    "isnan": isnan, "isinf": isinf, "isfinite": isfinite,
    "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge,
    "__eq__": eq, "__ne__": ne, "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge,
    "__add__": _commutative(ADD), "__radd__": _commutative(ADD),
    "__sub__": sub, "__rsub__": _reflected(sub),
    "__mul__": _commutative(MUL), "__rmul__": _commutative(MUL),
    "__truediv__": div, "__rtruediv__": _rdiv,
    "__floordiv__": floor_divide, "__rfloordiv__": _reflected(floor_divide),
    "__mod__": remainder, "__rmod__": _reflected(remainder),
    "__pow__": pow, "__rpow__": _reflected(pow),
    "__and__": bitwise_and, "__rand__": _reflected(bitwise_and),
    "__or__": bitwise_or, "__ror__": _reflected(bitwise_or),
    "__xor__": bitwise_xor, "__rxor__": _reflected(bitwise_xor),
    "__lshift__": bitwise_left_shift, "__rlshift__": _reflected(bitwise_left_shift),
    "__rshift__": bitwise_right_shift, "__rrshift__": _reflected(bitwise_right_shift),
    "__ilshift__": inplace(bitwise_left_shift), "__irshift__": inplace(bitwise_right_shift),
    "__neg__": neg, "__abs__": abs, "__invert__": bitwise_not,
    "__ifloordiv__": inplace(floor_divide), "__imod__": inplace(remainder),
    "__iand__": inplace(bitwise_and), "__ior__": inplace(bitwise_or),
    "__ixor__": inplace(bitwise_xor),
}
