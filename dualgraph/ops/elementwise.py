"""Elementwise ops: arithmetic, math, comparisons, logic, where, clamp, activations, casts.

Each op is one ``defop`` with its kernel, shape rule, VJP (in dualgraph ops) and scalar
expression; the public function next to it is the user-facing name. Composites (``sub``
is ``a + (-b)`` in spirit, ``relu`` is ``maximum(x, 0)`` in spirit) are primitives here only
where a dedicated kernel is faster or more accurate.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..dispatch import apply
from ..shapes import ShapedType
from . import reduce
from ._util import (as_operand, binary_kernel, cast, float_result_type, infer_binary,
                    infer_binary_float, infer_compare, infer_float, infer_same, needs_grad,
                    unary_float_kernel)
from .opdef import defop

__all__ = ["add", "sub", "mul", "div", "pow", "true_divide", "multiply", "subtract", "neg",
           "negative", "exp", "log", "sin", "cos", "tanh", "eq", "ne", "lt", "le", "gt", "ge",
           "where"]


def unbroadcast(g, x):
    """Sum a broadcast gradient back to the shape of input ``x`` (None for non-tensors)."""
    if not needs_grad(x):
        return None
    return reduce.sum_to(g, tuple(x.shape))


# -- binary arithmetic -------------------------------------------------------------------------
ADD = defop("add", binary_kernel(np.add), infer_binary, saves="",
            vjp=lambda g, out, a, b: (unbroadcast(g, a), unbroadcast(g, b)),
            elementwise="{0} + {1}", onnx="Add")
SUB = defop("sub", binary_kernel(np.subtract), infer_binary, saves="",
            vjp=lambda g, out, a, b: (unbroadcast(g, a), unbroadcast(neg(g), b)),
            elementwise="{0} - {1}", onnx="Sub")
MUL = defop("mul", binary_kernel(np.multiply), infer_binary,
            vjp=lambda g, out, a, b: (unbroadcast(g * b, a) if needs_grad(a) else None,
                                      unbroadcast(g * a, b) if needs_grad(b) else None),
            elementwise="{0} * {1}", onnx="Mul")
DIV = defop("div", binary_kernel(np.true_divide, float_result_type), infer_binary_float,
            vjp=lambda g, out, a, b: (unbroadcast(g / b, a) if needs_grad(a) else None,
                                      unbroadcast(-g * out / b, b) if needs_grad(b) else None),
            elementwise="{0} / {1}", onnx="Div")


def _pow_kernel(a, b):
    dt = dtypes.result_type(a, b)
    return np.power(cast(a, dt), cast(b, dt))


def _pow_vjp(g, out, a, b):
    ga = gb = None
    if needs_grad(a):
        ga = unbroadcast(g * b * pow(a, b - 1), a)
    if needs_grad(b):
        safe_log = log(where(a > 0, a, 1.0))   # d/db a**b = a**b log a; 0 where a <= 0
        gb = unbroadcast(g * out * safe_log, b)
    return ga, gb


POW = defop("pow", _pow_kernel, infer_binary, vjp=_pow_vjp, elementwise="{0} ** {1}",
            onnx="Pow")


def add(a, b, *, alpha=1):
    if alpha != 1:
        b = mul(b, alpha)
    return apply(ADD, as_operand(a), as_operand(b))


def sub(a, b, *, alpha=1):
    if alpha != 1:
        b = mul(b, alpha)
    return apply(SUB, as_operand(a), as_operand(b))


def mul(a, b):
    return apply(MUL, as_operand(a), as_operand(b))


def div(a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return apply(DIV, as_operand(a), as_operand(b))
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        return trunc(div(a, b)).to(dtypes.from_np(dtypes.result_type(a, b)))
    raise ValueError(f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


def pow(a, b):
    return apply(POW, as_operand(a), as_operand(b))


true_divide, multiply, subtract = div, mul, sub

# -- unary math ----------------------------------------------------------------------------------
NEG = defop("neg", np.negative, infer_same, saves="", vjp=lambda g, out, x: neg(g),
            elementwise="-{0}", onnx="Neg")


def neg(x):
    return apply(NEG, x)


negative = neg


def _unary(name, ufunc, vjp, expr, onnx, saves="io"):
    """Define a float unary math op (ints are computed as the default float)."""
    return defop(name, unary_float_kernel(ufunc), infer_float, vjp=vjp, saves=saves,
                 elementwise=expr, onnx=onnx)


EXP = _unary("exp", np.exp, lambda g, out, x: g * out, "exp({0})", "Exp", saves="o")
LOG = _unary("log", np.log, lambda g, out, x: g / x, "log({0})", "Log", saves="i")
SIN = _unary("sin", np.sin, lambda g, out, x: g * cos(x), "sin({0})", "Sin", saves="i")
COS = _unary("cos", np.cos, lambda g, out, x: -g * sin(x), "cos({0})", "Cos", saves="i")
TANH = _unary("tanh", np.tanh, lambda g, out, x: g * (1 - out * out), "tanh({0})", "Tanh",
              saves="o")


def exp(x):
    return apply(EXP, x)


def log(x):
    return apply(LOG, x)


def sin(x):
    return apply(SIN, x)


def cos(x):
    return apply(COS, x)


def tanh(x):
    return apply(TANH, x)


# -- comparisons ---------------------------------------------------------------------------------
def _compare(name, ufunc, onnx):
    return defop(name, binary_kernel(ufunc), infer_compare, elementwise=None, onnx=onnx)


EQ = _compare("eq", np.equal, "Equal")
NE = _compare("ne", np.not_equal, None)
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


# -- where and casts -----------------------------------------------------------------------------
def _where_kernel(cond, a, b):
    dt = dtypes.result_type(a, b)
    return np.where(cond, cast(a, dt), cast(b, dt))


def _infer_where(cond, a, b):
    from ..shapes import broadcast_shapes
    from ._util import shape_of
    return ShapedType(broadcast_shapes(shape_of(cond), shape_of(a), shape_of(b)),
                      dtypes.result_type(a, b))


WHERE = defop("where", _where_kernel, _infer_where, saves="i",
              vjp=lambda g, out, c, a, b: (
                  None,
                  unbroadcast(where(c, g, 0.0), a) if needs_grad(a) else None,
                  unbroadcast(where(c, 0.0, g), b) if needs_grad(b) else None),
              elementwise="where({0}, {1}, {2})", onnx="Where")


def where(condition, input, other):
    """``input`` where ``condition`` else ``other``, broadcasting all three."""
    return apply(WHERE, as_operand(condition), as_operand(input), as_operand(other))


def _cast_kernel(x, dtype):
    return x.astype(dtype)


CAST = defop("cast", _cast_kernel, lambda x, dtype: ShapedType(tuple(x.shape), np.dtype(dtype)),
             attrs=("dtype",), saves="",
             vjp=lambda g, out, x, dtype: cast_to(g, x.dtype),
             differentiable_outputs=None, elementwise="cast({0})", onnx="Cast")


def cast_to(x, dtype):
    """``x`` converted to ``dtype`` (no-op when it already has it)."""
    dt = dtypes.to_np(dtype)
    if x._data.dtype == dt:
        return x
    return apply(CAST, x, dtype=dt)


METHODS = {
    "__add__": add, "__radd__": lambda self, o: add(o, self), "add": add,
    "__sub__": sub, "__rsub__": lambda self, o: sub(o, self), "sub": sub,
    "__mul__": mul, "__rmul__": lambda self, o: mul(o, self), "mul": mul,
    "__truediv__": div, "__rtruediv__": lambda self, o: div(o, self), "div": div,
    "__pow__": pow, "__rpow__": lambda self, o: pow(o, self), "pow": pow,
    "__neg__": neg, "neg": neg, "exp": exp, "log": log, "sin": sin, "cos": cos,
    "tanh": tanh,
    "__eq__": eq, "__ne__": ne, "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge,
    "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge,
}
