"""Rows for the elementwise family: math, rounding, clamping, logic, predicates, activations.

Composites (clamp, silu, log2, ...) are listed under the primitive that carries them, so that
every registry op has rows and every public composite is still checked against torch.
Inputs sit away from kinks (0 for abs/relu, ties for maximum) wherever gradients are checked.
"""
import numpy as np

from . import In, OpCase

ALL = ("float32", "float64", "float16", "bfloat16")
F64 = ("float32", "float64")


def away(*shape, low=0.5, high=2.0):
    """Floats of either sign with |x| in [low, high]: no kinks at 0, safe divisors."""
    def make(rng, dt):
        return (rng.choice([-1.0, 1.0], shape) * rng.uniform(low, high, shape)).astype(dt)
    return In(shape, "custom", fn=make)


def uniform(*shape, low, high):
    return In(shape, "custom", fn=lambda rng, dt: rng.uniform(low, high, shape).astype(dt))


def fixed(values, grad=True):
    """The same values for every dtype (special points: large |x|, NaN, inf, ties)."""
    values = np.array(values, dtype=np.float64)
    return In(values.shape, "custom", grad=grad, fn=lambda rng, dt: values.astype(dt))


def small_ints(*shape):
    """Whole numbers stored as floats: many ties and zeros."""
    return In(shape, "custom", grad=False,
              fn=lambda rng, dt: rng.integers(-2, 3, shape).astype(dt))


def signed_ints(*shape, nonzero=False):
    def make(rng, dt):
        a = rng.integers(-9, 10, shape)
        return np.where(a == 0, 3, a) if nonzero else a
    return In(shape, "custom", fn=make)


SPECIAL = fixed([np.nan, np.inf, -np.inf, 0.0, -1.5, 2.0], grad=False)

CASES = [
    # -- arithmetic: floor division, remainders, reciprocal, square --------------------------
    OpCase("floor_divide", lambda m, a, b: m.floor_divide(a, b), [In((3, 4)), away(4)],
           dtypes=ALL, grad=False),
    OpCase("floor_divide", lambda m, a, b: a // b,
           [signed_ints(3, 4), signed_ints(4, nonzero=True)], "int", grad=False),
    OpCase("floor_divide", lambda m, a: 7.5 // a, [away(5)], "reflected", grad=False),
    OpCase("floor_divide", lambda m, a, b: m.div(a, b, rounding_mode="floor"),
           [In((3, 4)), away(3, 1)], "div-floor"),
    OpCase("floor_divide", lambda m, a, b: m.div(a, b, rounding_mode="trunc"),
           [signed_ints(3, 4), signed_ints(4, nonzero=True)], "div-trunc-int", grad=False),
    OpCase("trunc", lambda m, a, b: m.div(a, b, rounding_mode="trunc"), [In((3, 4)), away(4)],
           "div-trunc", dtypes=ALL),
    OpCase("remainder", lambda m, a, b: m.remainder(a, b), [In((3, 4)), away(4)], dtypes=ALL),
    OpCase("remainder", lambda m, a, b: a % b, [signed_ints(3, 4), signed_ints(4, nonzero=True)],
           "int", grad=False),
    OpCase("remainder", lambda m, a: a % 1.5, [In((2, 3))], "scalar"),
    OpCase("remainder", lambda m, a: 2.5 % a, [away(4)], "reflected", grad=False),
    OpCase("remainder", lambda m, a: a % 3, [signed_ints(6)], "int-scalar", grad=False),
    OpCase("fmod", lambda m, a, b: m.fmod(a, b), [In((3, 4)), away(3, 1)], dtypes=ALL),
    OpCase("fmod", lambda m, a: a.fmod(-2), [signed_ints(6)], "int", grad=False),
    OpCase("div", lambda m, a: m.reciprocal(a), [away(2, 3)], "reciprocal", dtypes=ALL),
    OpCase("div", lambda m, a: a.reciprocal(), [In((4,), "int", 1, 5)], "reciprocal-int",
           grad=False),
    OpCase("mul", lambda m, a: m.square(a), [In((2, 3))], "square", dtypes=ALL),
    OpCase("mul", lambda m, a: a.square(), [signed_ints(5)], "square-int", grad=False),
    # -- unary math --------------------------------------------------------------------------
    OpCase("expm1", lambda m, a: m.expm1(a), [In((2, 3))], dtypes=ALL),
    OpCase("expm1", lambda m, a: a.expm1(), [fixed([1e-10, -3e-9, 1e-5])], "small",
           dtypes=F64, atol=0, rtol=1e-6),
    OpCase("log1p", lambda m, a: m.log1p(a), [In((2, 3), "unit")], dtypes=ALL),
    OpCase("log1p", lambda m, a: a.log1p(), [fixed([1e-10, -3e-9, 1e-5])], "small",
           dtypes=F64, atol=0, rtol=1e-6),
    OpCase("log1p", lambda m, a: m.log1p(a), [In((4,), "int")], "int", grad=False),
    OpCase("sqrt", lambda m, a: m.sqrt(a), [In((2, 3), "pos")], dtypes=ALL),
    OpCase("sqrt", lambda m, a: a.sqrt(), [In((4,), "int")], "int", grad=False),
    OpCase("sqrt", lambda m, a: m.rsqrt(a), [In((2, 3), "pos")], "rsqrt", dtypes=ALL),
    OpCase("log", lambda m, a: m.log2(a), [In((2, 3), "pos")], "log2", dtypes=ALL),
    OpCase("log", lambda m, a: a.log10(), [In((2, 3), "pos")], "log10", dtypes=ALL),
    OpCase("log", lambda m, a: m.log2(a), [In((4,), "int", 1, 9)], "log2-int", grad=False),
    OpCase("exp", lambda m, a: m.exp2(a), [In((2, 3))], "exp2", dtypes=ALL),
    OpCase("exp", lambda m, a: a.exp2(), [In((4,), "int")], "exp2-int", grad=False),
    OpCase("asin", lambda m, a: m.asin(a), [In((2, 3), "unit")], dtypes=F64),
    OpCase("acos", lambda m, a: m.acos(a), [In((2, 3), "unit")], dtypes=F64),
    OpCase("atan", lambda m, a: m.atan(a), [In((2, 3))], dtypes=ALL),
    OpCase("tan", lambda m, a: m.tan(a), [uniform(2, 3, low=-1.4, high=1.4)], dtypes=ALL),
    OpCase("tan", lambda m, a: a.tan() + a.clone().tan_(), [uniform(5, low=-1.2, high=1.2)],
           "method"),
    OpCase("tan", lambda m, a: m.tan(a), [In((4,), "int", -3, 4)], "int", grad=False),
    OpCase("erf", lambda m, a: m.erf(a), [In((3, 4))], dtypes=ALL),
    OpCase("erf", lambda m, a: a.erf(), [uniform(50, low=-6.0, high=6.0)], "wide", dtypes=F64),
    OpCase("erf", lambda m, a: m.erf(a), [SPECIAL], "special", dtypes=F64, grad=False),
    OpCase("erf", lambda m, a: m.erf(a), [In((4,), "int", -2, 3)], "int", grad=False),
    # -- abs, sign, rounding -----------------------------------------------------------------
    OpCase("abs", lambda m, a: m.abs(a), [away(3, 4)], dtypes=ALL),
    OpCase("abs", lambda m, a: abs(a), [signed_ints(5)], "int", grad=False),
    OpCase("abs", lambda m, a: a.abs(), [In((4,), "int", -3, 3, dtype="int32")], "int32",
           grad=False),
    OpCase("sign", lambda m, a: m.sign(a), [In((3, 4))], dtypes=ALL),
    OpCase("sign", lambda m, a: a.sign(), [signed_ints(5)], "int", grad=False),
    OpCase("sign", lambda m, a: m.sign(a), [SPECIAL], "special", dtypes=F64, grad=False),
    OpCase("floor", lambda m, a: m.floor(a), [In((3, 4))], dtypes=ALL),
    OpCase("floor", lambda m, a: a.floor(), [signed_ints(5)], "int", grad=False),
    OpCase("ceil", lambda m, a: m.ceil(a), [In((3, 4))], dtypes=ALL),
    OpCase("trunc", lambda m, a: m.trunc(a), [In((3, 4))], dtypes=ALL),
    OpCase("trunc", lambda m, a: a.trunc(), [signed_ints(5)], "int", grad=False),
    OpCase("trunc", lambda m, a: m.frac(a), [away(3, 4)], "frac", dtypes=ALL),
    OpCase("round", lambda m, a: m.round(a * 3), [In((3, 4))], dtypes=ALL),
    OpCase("round", lambda m, a: m.round(a), [fixed([0.5, 1.5, 2.5, -0.5, -2.5, 3.4])],
           "half-even", dtypes=F64, grad=False),
    OpCase("round", lambda m, a: m.round(a, decimals=2), [In((3, 4))], "decimals"),
    OpCase("round", lambda m, a: a.round(), [signed_ints(5)], "int", grad=False),
    # -- maximum, minimum, clamp -------------------------------------------------------------
    OpCase("maximum", lambda m, a, b: m.maximum(a, b), [In((3, 4)), In((4,))], dtypes=ALL),
    OpCase("maximum", lambda m, a, b: a.maximum(b), [small_ints(3, 4), small_ints(3, 4)],
           "ties", grad=False),
    OpCase("maximum", lambda m, a, b: m.maximum(a, b),
           [fixed([1.0, 2.0, -1.0, 0.0]), fixed([1.0, 3.0, -1.0, 0.0])], "tie-grads",
           gradcheck=False),
    OpCase("maximum", lambda m, a, b: m.maximum(a, b), [In((4,), "int"), In((4,))],
           "int-float", grad=False),
    OpCase("maximum", lambda m, a, b: m.maximum(a, b), [SPECIAL, fixed([0.0] * 6, False)],
           "nan", dtypes=F64, grad=False),
    OpCase("minimum", lambda m, a, b: m.minimum(a, b), [In((2, 1, 3)), In((4, 1))],
           dtypes=ALL),
    OpCase("minimum", lambda m, a, b: a.minimum(b),
           [fixed([1.0, 2.0, -1.0, 0.0]), fixed([1.0, 3.0, -1.0, 0.0])], "tie-grads",
           gradcheck=False),
    OpCase("where", lambda m, a: m.clamp(a, -0.5, 0.5), [In((3, 4))], "clamp", dtypes=ALL),
    OpCase("where", lambda m, a: a.clamp(min=-0.3), [In((3, 4))], "clamp-min"),
    OpCase("where", lambda m, a: a.clip(max=0.2), [In((3, 4))], "clip-max"),
    OpCase("where", lambda m, a, lo, hi: m.clamp(a, lo, hi), [In((3, 4)), In((4,)), In((3, 1))],
           "clamp-tensors"),
    OpCase("where", lambda m, a, lo: m.clamp(a, min=lo), [In((3, 4)), In((4,))],
           "clamp-tensor-min"),
    OpCase("where", lambda m, a: m.clamp(a, min=0.5), [In((4,), "int")], "clamp-int-float",
           grad=False),
    OpCase("where", lambda m, a: m.clamp(a, min=1, max=3), [In((6,), "int")], "clamp-int",
           grad=False),
    OpCase("where", lambda m, a: m.clamp(a, -1.0, 1.0), [SPECIAL], "clamp-nan",
           dtypes=F64, grad=False),
    OpCase("where", lambda m, a, lo: m.clamp_min(a, lo), [In((3, 4)), In((3, 4))],
           "clamp_min"),
    OpCase("where", lambda m, a: a.clamp_max(0.1), [In((3, 4))], "clamp_max"),
    OpCase("hardtanh", lambda m, a: m.nn.functional.hardtanh(a), [In((3, 4))], dtypes=ALL),
    OpCase("hardtanh", lambda m, a: m.nn.functional.relu6(a * 5), [In((3, 4))], "relu6"),
    OpCase("hardsigmoid", lambda m, a: m.nn.functional.hardsigmoid(a * 5), [In((3, 4))],
           dtypes=ALL),
    OpCase("hardswish", lambda m, a: m.nn.functional.hardswish(a * 5), [In((3, 4))],
           dtypes=ALL),
    OpCase("hardswish", lambda m, a: (m.nn.functional.hardswish(a),
                                      m.nn.functional.hardsigmoid(a)),
           [fixed([-4.0, -3.0, -1.0, 0.0, 3.0, 4.0, np.nan])], "bounds-nan", dtypes=F64,
           gradcheck=False),
    OpCase("hardswish", lambda m, a: m.nn.functional.hardswish(a * 1, inplace=True),
           [In((3, 4))], "inplace"),
    OpCase("hardtanh", lambda m, a: m.nn.functional.hardtanh(a, -1.5, 2.0),
           [fixed([-2.0, -1.5, 0.0, 2.0, 3.0, np.nan])], "bounds-nan", dtypes=F64,
           gradcheck=False),
    OpCase("hardtanh", lambda m, a: m.nn.functional.relu6(a * 1, inplace=True),
           [In((3, 4))], "inplace"),
    OpCase("where", lambda m, a: m.nn.functional.hardtanh(a, -1, 1), [In((6,), "int")],
           "hardtanh-int", grad=False),
    OpCase("leaky_relu", lambda m, a: m.nn.functional.leaky_relu(a), [away(3, 4)],
           dtypes=ALL),
    OpCase("leaky_relu", lambda m, a: m.nn.functional.leaky_relu(a, negative_slope=0.2),
           [away(3, 4)], "slope", dtypes=F64),
    OpCase("leaky_relu", lambda m, a: m.nn.functional.leaky_relu(a.mT, negative_slope=-1.5),
           [away(5, 3)], "negative-slope-transposed", dtypes=F64),
    OpCase("leaky_relu", lambda m, a: m.nn.functional.leaky_relu(a * 1, 0.1, inplace=True),
           [away(3, 4)], "inplace", dtypes=F64),
    # -- logic and predicates ----------------------------------------------------------------
    OpCase("bitwise_and", lambda m, a, b: a & b, [In((3, 4), "bool"), In((4,), "bool")],
           grad=False),
    OpCase("bitwise_and", lambda m, a, b: m.bitwise_and(a, b),
           [In((3, 4), "int"), In((4,), "int")], "int", grad=False),
    OpCase("bitwise_and", lambda m, a, b: m.logical_and(a, b), [small_ints(3, 4), small_ints(4)],
           "logical", grad=False),
    OpCase("bitwise_or", lambda m, a, b: a | b, [In((3, 4), "bool"), In((3, 4), "bool")],
           grad=False),
    OpCase("bitwise_or", lambda m, a: True | a, [In((5,), "bool")], "reflected", grad=False),
    OpCase("bitwise_or", lambda m, a, b: a.logical_or(b), [In((4,), "int"), small_ints(4)],
           "logical", grad=False),
    OpCase("bitwise_xor", lambda m, a: a ^ True, [In((3, 4), "bool")], grad=False),
    OpCase("bitwise_xor", lambda m, a, b: m.logical_xor(a, b), [small_ints(6), In((6,), "bool")],
           "logical", grad=False),
    OpCase("bitwise_left_shift", lambda m, a, b: a << b,
           [In((3, 4), "int", -50, 50), In((4,), "int", 0, 5)], grad=False),
    OpCase("bitwise_left_shift", lambda m, a, b: m.bitwise_left_shift(a, b),
           [In((3,), "int", 0, 50, dtype="int32"), In((3,), "int", 0, 5, dtype="int32")],
           "int32", grad=False),
    OpCase("bitwise_right_shift", lambda m, a: a >> 2, [In((3, 4), "int", -50, 50)],
           grad=False),
    OpCase("bitwise_right_shift", lambda m, a, b: m.bitwise_right_shift(a, b),
           [In((3,), "int", -50, 50, dtype="int32"), In((3,), "int", 0, 5, dtype="int32")],
           "int32", grad=False),
    OpCase("bitwise_not", lambda m, a: ~a, [In((3, 4), "bool")], grad=False),
    OpCase("bitwise_not", lambda m, a: ~a, [signed_ints(5)], "int", grad=False),
    OpCase("bitwise_not", lambda m, a: m.logical_not(a), [small_ints(6)], "logical",
           grad=False),
    OpCase("isnan", lambda m, a: m.isnan(a), [SPECIAL], dtypes=ALL, grad=False),
    OpCase("isnan", lambda m, a: a.isnan(), [In((4,), "int")], "int", grad=False),
    OpCase("isinf", lambda m, a: m.isinf(a), [SPECIAL], dtypes=ALL, grad=False),
    OpCase("isfinite", lambda m, a: a.isfinite(), [SPECIAL], dtypes=ALL, grad=False),
    OpCase("isfinite", lambda m, a: m.isfinite(a), [In((4,), "int")], "int", grad=False),
    # -- activations -------------------------------------------------------------------------
    OpCase("relu", lambda m, a: m.relu(a), [away(3, 4)], dtypes=ALL),
    OpCase("relu", lambda m, a: m.nn.functional.relu(a), [signed_ints(5)], "int", grad=False),
    OpCase("sigmoid", lambda m, a: m.sigmoid(a), [In((3, 4))], dtypes=ALL),
    OpCase("sigmoid", lambda m, a: a.sigmoid(),
           [fixed([-800.0, -60.0, -20.0, 0.0, 20.0, 60.0, 800.0])], "large", dtypes=F64),
    OpCase("sigmoid", lambda m, a: m.sigmoid(a), [In((4,), "int", -3, 3)], "int", grad=False),
    OpCase("silu", lambda m, a: m.nn.functional.silu(a), [In((3, 4))], dtypes=ALL),
    OpCase("silu", lambda m, a: m.nn.functional.silu(a.mT), [uniform(5, 7, low=-30.0, high=30.0)],
           "wide-transposed", dtypes=F64),
    OpCase("silu", lambda m, a: m.nn.functional.silu(a * 1, inplace=True), [In((3, 4))],
           "inplace", dtypes=F64),
    OpCase("sigmoid", lambda m, a: m.sigmoid(a[:, ::2]), [In((4, 9))], "strided",
           dtypes=F64),
    OpCase("sigmoid", lambda m, a: m.sigmoid(a), [uniform(37, low=-30.0, high=30.0)], "wide",
           dtypes=F64),
    OpCase("gelu", lambda m, a: m.nn.functional.gelu(a), [In((3, 4))], dtypes=ALL),
    OpCase("gelu", lambda m, a: m.nn.functional.gelu(a), [uniform(40, low=-8.0, high=8.0)],
           "wide", dtypes=F64),
    OpCase("gelu_tanh", lambda m, a: m.nn.functional.gelu(a, approximate="tanh"),
           [In((3, 4))], dtypes=ALL),
    OpCase("gelu_tanh", lambda m, a: m.nn.functional.gelu(a, approximate="tanh"),
           [uniform(40, low=-8.0, high=8.0)], "wide", dtypes=F64),
    # the fused backward, and through its decomposition the second derivative
    OpCase("gelu_tanh_backward", lambda m, a, v: _gelu_grad(m, a, v, "tanh"),
           [In((3, 4)), In((3, 4))], dtypes=F64),
    OpCase("gelu_backward", lambda m, a, v: _gelu_grad(m, a, v, "none"),
           [In((3, 4)), In((3, 4))], dtypes=F64),
    OpCase("elu", lambda m, a: m.nn.functional.elu(a), [In((3, 4))], dtypes=ALL),
    OpCase("elu", lambda m, a: m.nn.functional.elu(a, alpha=0.5),
           [fixed([-30.0, -1.0, 0.5, 100.0, 1000.0])], "alpha-wide", dtypes=F64),
    OpCase("elu", lambda m, a: m.nn.functional.selu(a), [In((3, 4))], "selu"),
    OpCase("elu", lambda m, a: m.nn.functional.celu(a, alpha=2.0), [In((3, 4))], "celu"),
    OpCase("softplus", lambda m, a: m.nn.functional.softplus(a), [In((3, 4))], dtypes=ALL),
    OpCase("softplus", lambda m, a: m.nn.functional.softplus(a, beta=2, threshold=5),
           [uniform(30, low=-6.0, high=6.0)], "beta-threshold", dtypes=F64),
    OpCase("softplus", lambda m, a: m.nn.functional.softplus(a),
           [fixed([-800.0, -30.0, 15.0, 25.0, 800.0])], "wide", dtypes=F64),
    OpCase("softplus", lambda m, a: m.nn.functional.mish(a), [In((3, 4))], "mish"),
    OpCase("softplus", lambda m, a: m.nn.functional.logsigmoid(a), [In((3, 4))],
           "logsigmoid"),
]


def _gelu_grad(m, a, v, approximate):
    """d gelu(a) / da contracted with v, differentiable (its gradients are second
    derivatives); also under no_grad, where finite differences evaluate it."""
    with m.enable_grad():
        if not a.requires_grad:
            a.requires_grad_()
        y = m.nn.functional.gelu(a, approximate=approximate)
        return m.autograd.grad(y, a, v, create_graph=True)[0]


def _relu_grad(m, a, v):
    """d relu(a) / da contracted with v, differentiable (its gradient with respect to v is
    the row's second-order check)."""
    with m.enable_grad():
        if not a.requires_grad:
            a.requires_grad_()
        return m.autograd.grad(m.relu(a), a, v, create_graph=True)[0]


CASES.append(OpCase("relu_backward", _relu_grad, [away(3, 4), In((3, 4))], dtypes=ALL))


def _activation_grad(fn):
    """d fn(a) / da contracted with v, differentiable (its gradients, with respect to v and
    to a, are the row's second-order checks), as :func:`_relu_grad`."""
    def grad(m, a, v):
        with m.enable_grad():
            if not a.requires_grad:
                a.requires_grad_()
            return m.autograd.grad(fn(m, a), a, v, create_graph=True)[0]
    return grad


CASES += [
    OpCase("sigmoid_backward", _activation_grad(lambda m, a: m.sigmoid(a)),
           [In((3, 4)), In((3, 4))], dtypes=ALL),
    OpCase("sigmoid_backward", _activation_grad(lambda m, a: m.sigmoid(a.mT)),
           [In((2, 5)), In((5, 2))], "transposed", dtypes=F64),
    # (64 x 130 float32: the loop; the small rows: NumPy's form, the same bits)
    OpCase("sigmoid_backward", _activation_grad(lambda m, a: m.sigmoid(a)),
           [In((64, 130)), In((64, 130))], "loop", gradcheck=False),
    OpCase("tanh_backward", _activation_grad(lambda m, a: m.tanh(a)),
           [In((3, 4)), In((3, 4))], dtypes=ALL),
    OpCase("tanh_backward", _activation_grad(lambda m, a: m.tanh(a.mT)),
           [In((2, 5)), In((5, 2))], "transposed", dtypes=F64),
    OpCase("tanh_backward", _activation_grad(lambda m, a: m.tanh(a)),
           [In((64, 130)), In((64, 130))], "loop", gradcheck=False),
    OpCase("silu_backward", _activation_grad(lambda m, a: m.nn.functional.silu(a)),
           [In((3, 4)), In((3, 4))], dtypes=ALL),
    OpCase("hardsigmoid_backward",   # (torch has no second derivative of hardsigmoid)
           _activation_grad(lambda m, a: m.nn.functional.hardsigmoid(a * 4)),
           [away(3, 4), In((3, 4))], dtypes=ALL, grad=False),
    OpCase("hardswish_backward",
           _activation_grad(lambda m, a: m.nn.functional.hardswish(a * 4)),
           [away(3, 4), In((3, 4))], dtypes=ALL),
    OpCase("hardtanh_backward",
           _activation_grad(lambda m, a: m.nn.functional.hardtanh(a * 2, -1.0, 1.5)),
           [away(3, 4), In((3, 4))], dtypes=ALL),
    OpCase("leaky_relu_backward",
           _activation_grad(lambda m, a: m.nn.functional.leaky_relu(a, 0.2)),
           [away(3, 4), In((3, 4))], dtypes=ALL),
    OpCase("elu_backward", _activation_grad(lambda m, a: m.nn.functional.elu(a)),
           [away(3, 4), In((3, 4))], dtypes=ALL),
    OpCase("elu_backward", _activation_grad(lambda m, a: m.nn.functional.elu(a.mT, 0.3)),
           [away(5, 7), In((7, 5))], "alpha-transposed", dtypes=F64),
    OpCase("elu_backward", _activation_grad(lambda m, a: m.nn.functional.selu(a)),
           [away(2, 3, 5), In((2, 3, 5))], "selu"),
    OpCase("softplus_backward", _activation_grad(lambda m, a: m.nn.functional.softplus(a)),
           [In((3, 4)), In((3, 4))], dtypes=ALL),
    OpCase("softplus_backward",
           _activation_grad(lambda m, a: m.nn.functional.softplus(a.mT, beta=2, threshold=5)),
           [uniform(6, 5, low=-6.0, high=6.0), In((5, 6))], "beta-threshold-transposed",
           dtypes=F64),
    OpCase("softplus_backward",
           _activation_grad(lambda m, a: m.nn.functional.binary_cross_entropy_with_logits(
               a, a.detach().sigmoid().round(), reduction="none")),
           [uniform(4, 9, low=-50.0, high=50.0), In((4, 9))], "bce-logits-wide",
           dtypes=F64, gradcheck=False),
]


def _relu_grad_in_place(m, g, y):
    """``relu_backward_in_place`` (chosen by the lowering rule of that name) vs torch's
    relu gradient; it is given a copy of ``g``, which it overwrites."""
    if m.__name__ == "torch":
        return g * (y > 0)
    from dualgraph.dispatch import apply
    from dualgraph.ops.elementwise import RELU_BACKWARD_IN_PLACE
    return apply(RELU_BACKWARD_IN_PLACE, g * 1, y)


CASES.append(OpCase("relu_backward_in_place", _relu_grad_in_place,
                    [In((64, 130)), In((64, 130))], dtypes=("float32", "float64"),
                    grad=False))

# -- atan2, erfc, and torch's composites lerp / addcmul / addcdiv / isclose / copy_ -----------
CASES += [
    OpCase("atan2", lambda m, a, b: m.atan2(a, b), [away(3, 4), away(4)], dtypes=ALL),
    OpCase("atan2", lambda m, a, b: a.atan2(b), [In((2, 1, 3)), In((4, 1))], "broadcast",
           dtypes=F64),
    # the axes and the origin's signed zeros, where atan(y / x) would need fixing (no
    # gradient at 0, 0); float32 too, as the ONNX export's row
    OpCase("atan2", lambda m, a, b: m.atan2(a, b),
           [fixed([0.0, 1.0, -1.0, 0.0, 0.0, 2.0, -0.0, 0.0, -0.0, -2.0]),
            fixed([0.0, 0.0, 0.0, -1.0, 1.0, -3.0, 0.0, -0.0, -0.0, -0.0])],
           "axes", dtypes=("float32", "float64"), grad=False),
    OpCase("atan2", lambda m, a, b: m.arctan2(a, b), [signed_ints(5), signed_ints(5)], "int",
           grad=False),
    OpCase("erfc", lambda m, a: m.erfc(a), [In((3, 4))], dtypes=ALL),
    OpCase("erfc", lambda m, a: a.erfc(), [uniform(50, low=-6.0, high=27.0)], "wide",
           dtypes=F64, atol=0, rtol=1e-6),
    OpCase("erfc", lambda m, a: m.erfc(a), [SPECIAL], "special", dtypes=F64, grad=False),
    OpCase("erfc", lambda m, a: m.erfc(a), [In((4,), "int", -2, 3)], "int", grad=False),
    OpCase("add", lambda m, a, b: m.lerp(a, b, 0.3), [In((3, 4)), In((4,))], "lerp",
           dtypes=ALL),
    OpCase("add", lambda m, a, b, w: a.lerp(b, w), [In((3, 4)), In((3, 4)), In((3, 4))],
           "lerp-tensor-weight"),
    OpCase("add", lambda m, a, b, c: m.addcmul(a, b, c, value=0.5),
           [In((3, 4)), In((3, 1)), In((4,))], "addcmul", dtypes=ALL),
    OpCase("div", lambda m, a, b, c: a.addcdiv(b, c, value=-2),
           [In((3, 4)), In((3, 4)), away(4)], "addcdiv", dtypes=ALL),
    OpCase("add", lambda m, a, b: a.clone().lerp_(b, 0.5).addcmul_(a, b).addcdiv_(b, a + 3),
           [In((3, 4), "pos"), In((3, 4), "pos")], "inplace-lerp-addcmul-addcdiv"),
    OpCase("eq", lambda m, a, b: m.isclose(a, a + b * 1e-6), [In((3, 4)), In((3, 4))],
           "isclose", grad=False),
    OpCase("eq", lambda m, a, b: a.isclose(b, rtol=0.5, atol=0.1, equal_nan=True),
           [SPECIAL, fixed([np.nan, np.inf, np.inf, 0.05, -1.0, 2.9], grad=False)],
           "isclose-special", dtypes=F64, grad=False),
    OpCase("eq", lambda m, a, b: m.isclose(a, b), [In((6,), "int", 0, 3), In((6,), "int", 0, 3)],
           "isclose-int", grad=False),
    # copy_: the source broadcast into the destination, its gradient flowing to the source
    OpCase("where", lambda m, a, b: (a * 2).copy_(b), [In((3, 4)), In((4,))], "copy_",
           dtypes=ALL),
    OpCase("where", lambda m, a, b: a.clone().where(b > 0, b), [In((3, 4)), In((3, 4))],
           "where-method"),
]

CASES += [
    OpCase("sub", lambda m, a: m.sinh(a), [In((3, 4))], "sinh", dtypes=ALL),
    OpCase("sub", lambda m, a: a.sinh(), [fixed([1e-9, -3e-8, 1e-4, 20.0], grad=False)],
           "sinh-small", dtypes=F64, grad=False, atol=0, rtol=1e-12),
    OpCase("add", lambda m, a: m.cosh(a), [In((3, 4))], "cosh", dtypes=ALL),
    OpCase("where", lambda m, a: m.nan_to_num(a), [SPECIAL], "nan_to_num", dtypes=ALL,
           grad=False),
    OpCase("where", lambda m, a: a.nan_to_num(nan=1.5, posinf=3.0, neginf=-4.0), [In((3, 4))],
           "nan_to_num-finite"),
    OpCase("where", lambda m, a: m.nan_to_num(a * 0 + a.log()), [In((6,))],
           "nan_to_num-log", dtypes=F64, grad=False),
]

# -- logaddexp / logaddexp2 (issue 26's missing names) ----------------------------------------
CASES += [
    OpCase("logaddexp", lambda m, a, b: m.logaddexp(a, b), [In((3, 4)), In((4,))], dtypes=ALL),
    OpCase("logaddexp", lambda m, a, b: a.logaddexp(b * 30), [In((2, 3)), In((2, 3))], "far",
           dtypes=F64),
    # equal infinities, where max + log1p(exp(-|a - b|)) would be NaN (no gradient there)
    OpCase("logaddexp", lambda m, a, b: m.logaddexp(a, b),
           [fixed([-np.inf, np.inf, -np.inf, 0.0, 1e4]), fixed([-np.inf, np.inf, 2.0, 0.0, -1e4])],
           "infinities", dtypes=F64, grad=False),
    OpCase("logaddexp", lambda m, a: m.logaddexp(a, m.tensor(1.5)), [In((3,))], "scalar"),
    OpCase("logaddexp2", lambda m, a, b: m.logaddexp2(a, b), [In((3, 4)), In((3, 1))],
           dtypes=ALL),
    OpCase("logaddexp2", lambda m, a, b: a.logaddexp2(b),
           [fixed([-np.inf, np.inf, 3.0]), fixed([-np.inf, np.inf, -np.inf])], "infinities",
           dtypes=F64, grad=False),
]

# -- hypot (a name the torch-API programs met missing) ------------------------------------------
CASES += [
    OpCase("hypot", lambda m, a, b: m.hypot(a, b), [In((3, 4)), In((4,))], dtypes=ALL),
    OpCase("hypot", lambda m, a: a.hypot(m.tensor(2.5)), [In((3,))], "scalar"),
    # past 1e154, where sqrt(a * a + b * b) overflows float64
    OpCase("hypot", lambda m, a, b: m.hypot(a * 1e200, b * 1e200) * 1e-200,
           [In((2, 3)), In((2, 3))], "huge", dtypes=F64, grad=False),
]
