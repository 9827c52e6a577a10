"""Elementwise behaviour the op table can't express: in-place methods, bool operators, clamp
bounds, erf accuracy, second derivatives, and the fusion expressions of the registry."""
import math
import re

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.ops import OpDef
from dualgraph.ops import elementwise as ew

X = np.array([[-2.5, -0.7, 0.0], [0.3, 1.2, 3.9]], dtype=np.float32)


def both(values=X):
    return dg.tensor(values), torch.tensor(values)


# -- in-place methods ----------------------------------------------------------------------------
INPLACE = [
    ("relu_", ()), ("sigmoid_", ()), ("tanh_", ()), ("exp_", ()), ("abs_", ()), ("neg_", ()),
    ("clamp_", (-1.0, 1.0)), ("clamp_min_", (0.1,)), ("clamp_max_", (0.2,)), ("clip_", (0, 2)),
    ("floor_", ()), ("ceil_", ()), ("round_", ()), ("trunc_", ()), ("sign_", ()),
    ("erf_", ()), ("square_", ()), ("expm1_", ()), ("fill_", (2.5,)), ("zero_", ()),
    ("remainder_", (1.5,)), ("fmod_", (1.5,)), ("floor_divide_", (0.5,)),
]


@pytest.mark.parametrize("name,args", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_method_values_and_version(name, args):
    a, t = both()
    version = a._version_value
    out = getattr(a, name)(*args)
    getattr(t, name)(*args)
    assert out is a
    assert a._version_value == version + 1
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["sqrt_", "log1p_", "rsqrt_", "log_", "log2_", "reciprocal_"])
def test_inplace_method_positive_inputs(name):
    a, t = both(np.abs(X) + 0.5)
    getattr(a, name)()
    getattr(t, name)()
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-6)


def test_inplace_writes_through_a_view():
    base = dg.tensor(X.copy())
    row = base.reshape(-1)
    row.clamp_(min=0.0)
    np.testing.assert_array_equal(base.numpy(), np.maximum(X, 0))


def test_inplace_activation_on_a_non_leaf_has_torch_gradients():
    for lib in (dg, torch):
        x = lib.tensor(X, requires_grad=True)
        y = x * 2
        y.relu_()
        z = x * 3
        z.clamp_(-1.0, 1.0)
        w = x * 1
        w.fill_(5.0)
        u = x * 1
        u.abs_()
        v = x - 1
        v.square_()
        v.erf_()
        (y.sum() + (z * z).sum() + w.sum() + (u * v).sum()).backward()
        if lib is dg:
            got = x.grad.numpy()
        else:
            want = x.grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_fill_with_a_tensor_value_gets_its_gradient():
    v = dg.tensor(2.0, requires_grad=True)
    y = dg.zeros(2, 3)
    y.fill_(v)
    (y * 3).sum().backward()
    assert v.grad.item() == pytest.approx(18.0)
    np.testing.assert_array_equal(y.detach().numpy(), np.full((2, 3), 2.0, np.float32))


def test_inplace_on_a_leaf_that_requires_grad_raises():
    x = dg.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        x.relu_()


def test_functional_inplace_flag_returns_the_input():
    a = dg.tensor(X.copy())
    out = dg.nn.functional.relu(a, inplace=True)
    assert out is a
    np.testing.assert_array_equal(a.numpy(), np.maximum(X, 0))
    b = dg.tensor(X.copy())
    dg.nn.functional.leaky_relu(b, 0.1, inplace=True)
    np.testing.assert_allclose(b.numpy(), np.where(X > 0, X, 0.1 * X))


# -- operators -----------------------------------------------------------------------------------
def test_bool_operators_match_torch():
    rng = np.random.default_rng(0)
    p, q = rng.random((3, 4)) < 0.5, rng.random(4) < 0.5
    results = {}
    for lib in (dg, torch):
        a, b = lib.tensor(p), lib.tensor(q)
        c = a.clone()
        c &= b
        d = a.clone()
        d |= True
        e = a.clone()
        e ^= b
        outs = [a & b, a | b, a ^ b, ~a, a & True, False | a, True ^ a, c, d, e,
                ~(a & b) | (a ^ b)]
        results[lib] = [o.numpy() for o in outs]
        assert all(o.dtype == lib.bool for o in outs)
    for got, want in zip(results[dg], results[torch]):
        np.testing.assert_array_equal(got, want)


def test_bitwise_ops_reject_floats():
    with pytest.raises(TypeError, match="bool or integer"):
        dg.tensor(X) & dg.tensor(X)


def test_floordiv_and_mod_operators_in_place():
    for lib in (dg, torch):
        a = lib.tensor([7, -7, 9], dtype=lib.int64)
        a //= 2
        b = lib.tensor([7.5, -7.5, 9.0])
        b %= 2.0
        if lib is dg:
            got = (a.numpy(), b.numpy())
        else:
            want = (a.numpy(), b.numpy())
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_integer_division_modes_are_exact_beyond_float_precision():
    big = np.array([2**62 + 1, -(2**62) - 3, 2**53 + 1, -7], dtype=np.int64)
    div = np.array([3, 7, -2, 2], dtype=np.int64)
    for mode in ("trunc", "floor"):
        got = dg.div(dg.tensor(big), dg.tensor(div), rounding_mode=mode)
        want = torch.div(torch.tensor(big), torch.tensor(div), rounding_mode=mode)
        assert got.dtype == dg.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(dg.remainder(dg.tensor(big), 5).numpy(),
                                  torch.remainder(torch.tensor(big), 5).numpy())


def test_abs_operator_and_bad_rounding_mode():
    a, t = both()
    np.testing.assert_array_equal(abs(a).numpy(), abs(t).numpy())
    with pytest.raises(ValueError, match="rounding_mode"):
        dg.div(a, 2.0, rounding_mode="nearest")


# -- clamp ---------------------------------------------------------------------------------------
def test_clamp_with_tensor_bounds_and_crossed_bounds_matches_torch():
    rng = np.random.default_rng(1)
    x, lo, hi = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((3, 1))
    grads = {}
    for lib in (dg, torch):
        xs = [lib.tensor(v, requires_grad=True) for v in (x, lo, hi)]
        out = lib.clamp(*xs)   # where lo > hi the result is hi, as in torch
        out.backward(lib.ones_like(out) * 1.5)
        grads[lib] = [out.detach().numpy()] + [v.grad.numpy() for v in xs]
    for got, want in zip(grads[dg], grads[torch]):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_clamp_needs_a_bound():
    with pytest.raises(ValueError, match="at least one"):
        dg.clamp(dg.tensor(X))


# -- erf -----------------------------------------------------------------------------------------
def test_erf_is_accurate_in_float64():
    grid = np.concatenate([np.linspace(-7, 7, 140_001), np.geomspace(1e-300, 1e-3, 1000),
                           np.linspace(0.46, 0.48, 2001), np.linspace(3.99, 4.01, 2001)])
    got = dg.erf(dg.tensor(grid)).numpy()
    want = np.array([math.erf(v) for v in grid])
    assert np.max(np.abs(got - want)) < 1e-15
    tiny = (np.abs(want) < 1e-3) & (want != 0)
    assert np.max(np.abs(got[tiny] - want[tiny]) / np.abs(want[tiny])) < 1e-15


def test_erf_float32_and_special_values():
    grid = np.linspace(-5, 5, 10_001, dtype=np.float32)
    got = dg.erf(dg.tensor(grid)).numpy()
    assert got.dtype == np.float32
    want = np.array([math.erf(v) for v in grid.astype(np.float64)])
    assert np.max(np.abs(got - want)) < 3e-7
    special = dg.erf(dg.tensor([np.nan, np.inf, -np.inf, -0.0, 30.0])).numpy()
    np.testing.assert_array_equal(special[1:], [1.0, -1.0, -0.0, 1.0])
    assert np.isnan(special[0]) and np.signbit(special[3])


# -- second derivatives: every VJP is written with dualgraph ops ---------------------------------
SECOND = {
    "sigmoid": lambda m, x: m.sigmoid(x),
    "erf": lambda m, x: m.erf(x),
    "gelu": lambda m, x: m.nn.functional.gelu(x),
    "elu": lambda m, x: m.nn.functional.elu(x, alpha=0.7),
    "softplus": lambda m, x: m.nn.functional.softplus(x, beta=1.5),
    "sqrt": lambda m, x: m.sqrt(x * x + 1),
    "log1p": lambda m, x: m.log1p(x * x),
    "expm1": lambda m, x: m.expm1(x),
    "asin": lambda m, x: m.asin(x * 0.3),
    "atan": lambda m, x: m.atan(x),
    "maximum": lambda m, x: m.maximum(x * x, x + 1),
    "remainder": lambda m, x: m.remainder(x * x, x + 3),
    "fmod": lambda m, x: m.fmod(x * x, x + 3),
    "clamp": lambda m, x: m.clamp(x * x, 0.5, 2.0),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_derivative_matches_torch(name):
    fn = SECOND[name]
    values = np.array([-1.3, -0.4, 0.35, 0.9, 1.7])
    results = []
    for lib in (dg, torch):
        x = lib.tensor(values, requires_grad=True)
        (g,) = lib.autograd.grad(fn(lib, x).sum(), [x], create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), [x])
        results.append(gg.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10, atol=1e-12)


# -- fusion expressions --------------------------------------------------------------------------
SCALAR_FUNCTIONS = {name: getattr(np, name) for name in (
    "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh", "arcsin", "arccos", "arctan",
    "arctan2", "arcsinh", "arccosh", "arctanh",
    "absolute", "sign", "floor", "ceil", "trunc", "round", "maximum", "minimum", "where",
    "fmod", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "isnan", "isinf",
    "isfinite", "logaddexp", "logaddexp2", "hypot")}
SCALAR_FUNCTIONS["erf"] = ew._erf_array
SCALAR_FUNCTIONS["gelu"] = lambda x: 0.5 * x * (1 + ew._erf_array(x / np.sqrt(2)))
SCALAR_FUNCTIONS["gelu_backward"] = lambda g, x: g * (
    0.5 * (1 + ew._erf_array(x / np.sqrt(2))) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi))
# ops whose template names one shared scalar function: their textbook formulas
_K, _C = np.sqrt(2 / np.pi), 0.044715
SCALAR_FUNCTIONS["gelu_tanh"] = lambda x: 0.5 * x * (1 + np.tanh(_K * (x + _C * x ** 3)))
SCALAR_FUNCTIONS["gelu_tanh_backward"] = lambda g, x: g * (
    0.5 * (1 + np.tanh(_K * (x + _C * x ** 3)))
    + 0.5 * x * (1 - np.tanh(_K * (x + _C * x ** 3)) ** 2) * _K * (1 + 3 * _C * x ** 2))
SCALAR_FUNCTIONS["sigmoid"] = lambda x: 1 / (1 + np.exp(-x))
SCALAR_FUNCTIONS["silu"] = lambda x: x / (1 + np.exp(-x))
SCALAR_FUNCTIONS["silu_backward"] = lambda g, x: g * (
    1 / (1 + np.exp(-x)) + x * np.exp(-x) / (1 + np.exp(-x)) ** 2)

TEMPLATE_INPUTS = {
    "bitwise_and": "bool", "bitwise_or": "bool", "bitwise_xor": "bool", "bitwise_not": "bool",
    "log": "pos", "log1p": "pos", "sqrt": "pos", "asin": "unit", "acos": "unit",
    "atanh": "unit", "acosh": "above1",
}
TEMPLATE_ATTRS = {"round": {"decimals": 1}, "elu": {"alpha": 0.5},
                  "leaky_relu": {"negative_slope": 0.2},
                  "leaky_relu_backward": {"negative_slope": -0.3}, "elu_backward": {"alpha": 0.3},
                  "softplus": {"beta": 2.0, "threshold": 3.0},
                  "hardtanh": {"min_val": -1.0, "max_val": 1.5},
                  "hardtanh_backward": {"min_val": -1.0, "max_val": 1.5}}
TEMPLATED = sorted((op for op in vars(ew).values()
                    if isinstance(op, OpDef) and op.elementwise and op.name != "cast"),
                   key=lambda op: op.name)


@pytest.mark.parametrize("op", TEMPLATED, ids=[op.name for op in TEMPLATED])
def test_elementwise_expression_agrees_with_the_kernel(op):
    """The scalar expression fusion will compile computes what the kernel computes."""
    rng = np.random.default_rng(2)
    kind = TEMPLATE_INPUTS.get(op.name, "float")
    arity = 1 + max(int(i) for i in re.findall(r"\{(\d)\}", op.elementwise))
    inputs = [{"bool": rng.random(8) < 0.5, "pos": rng.uniform(0.5, 2, 8),
               "above1": rng.uniform(1, 4, 8),
               "unit": rng.uniform(-0.9, 0.9, 8), "float": rng.standard_normal(8) * 2}[kind]
              for _ in range(arity)]
    if op.name == "where":
        inputs[0] = inputs[0] > 0
    attrs = TEMPLATE_ATTRS.get(op.name, {})
    expr = op.elementwise.format(*(f"x{i}" for i in range(arity)), **attrs)
    with np.errstate(all="ignore"):
        got = eval(expr, dict(SCALAR_FUNCTIONS), {f"x{i}": v for i, v in enumerate(inputs)})
        want = op.kernel(*inputs, **attrs)
    np.testing.assert_allclose(np.asarray(got, dtype=want.dtype), want, rtol=1e-12,
                               atol=1e-12)


# -- small powers as products ---------------------------------------------------------------------
POWERS = {2.0: lambda x: x * x, 3.0: lambda x: x * x * x, 4: lambda x: (x * x) * (x * x),
          0.5: np.sqrt, -0.5: lambda x: 1 / np.sqrt(x), -1.0: lambda x: 1 / x,
          -2.0: lambda x: 1 / (x * x), -3: lambda x: 1 / (x * x * x)}


@pytest.mark.parametrize("exponent", list(POWERS))
def test_small_powers_are_products_eager_and_compiled_and_match_torch(exponent):
    """x ** c for c = +-0.5 and integers up to 4: products, sqrt and a reciprocal (torch's
    own formulas for 2, 3, +-0.5, -1, -2), the same bits eager and compiled (simplify
    rewrites the pow node into those ops), gradients as torch's."""
    rng = np.random.default_rng(16)
    x = (rng.uniform(0.2, 3, 4096) * rng.choice([-1, 1], 4096)).astype(np.float32)
    if exponent in (0.5, -0.5):
        x = np.abs(x)
    g = rng.normal(size=x.size).astype(np.float32)
    xs = dg.tensor(x, requires_grad=True)
    y = xs ** exponent
    y.backward(dg.tensor(g))
    np.testing.assert_array_equal(y.detach().numpy(), POWERS[exponent](x).astype(np.float32))
    xt = torch.tensor(x, requires_grad=True)
    yt = xt.pow(exponent)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=3e-7)
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=2e-6)
    compiled = dg.compile(lambda t: (t ** exponent + 1,))
    (got,) = compiled(dg.tensor(x))
    np.testing.assert_array_equal(got.numpy(), y.detach().numpy() + 1)
    assert "as the kernel" in compiled.explain()


@pytest.mark.parametrize("exponent", list(POWERS) + [1, -4.0])
def test_the_float32_power_loop_keeps_the_products_bits_on_special_values(exponent):
    """From kernels.MIN_ELEMENTS on, a float32 power by products is one loop: the bits of
    NumPy's products (NaN, infinities, signed zeros, subnormals, a strided input)."""
    x = np.random.default_rng(2).normal(0, 3, (80, 130)).astype(np.float32)
    x.flat[:7] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-41]
    view = x[:, ::2]   # (not contiguous)
    with np.errstate(all="ignore"):
        formula = {**POWERS, 1: np.copy, -4.0: lambda v: 1 / ((v * v) * (v * v))}[exponent]
        want = formula(view).astype(np.float32)
    got = dg.tensor(view).pow(exponent).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int8"])
def test_where_on_big_mixed_masks_equals_numpy(dtype):
    """From kernels.MIN_ELEMENTS on, ``where`` runs a select loop (NumPy's branches per
    element): the same values, broadcast operands and a Python scalar included."""
    from dualgraph.ops import REGISTRY
    rng = np.random.default_rng(3)
    cond = rng.random((64, 100)) < 0.5
    a = (rng.standard_normal((64, 100)) * 10).astype(dtype)
    b = (rng.standard_normal((1, 100)) * 10).astype(dtype)
    kernel = REGISTRY["where"].kernel
    got = kernel(cond, a, b)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got, np.where(cond, a, b))
    filled = kernel(cond[:1], a, -7)
    np.testing.assert_array_equal(filled, np.where(cond[:1], a, np.array(-7, dtype)))


# -- gradients at the special points of pow and atan2 --------------------------------------------
def _pow_and_atan2(m, a, e, y, x):
    """pow with a tensor, a zero and a half exponent, Python bases 0, -2 and 2, a zero base;
    atan2 at the origin, where the squares underflow and at an infinite x."""
    return ((a.pow(e) + a ** 0 + 0.0 ** a + (-2.0) ** e + 2.0 ** a + (a * 0) ** e
             + a ** 0.5).sum() + m.atan2(y, x).sum())


@pytest.mark.parametrize("compiled", [False, True])
def test_pow_and_atan2_gradients_at_their_special_points_are_torchs(compiled):
    """torch gives 0, not NaN, for the base where the exponent is 0 (0 * a**-1 was NaN at
    a = 0) and for atan2 where y*y + x*x is 0; NaN, not 0, for the exponent of a negative
    base (log of a negative). Bit for bit, eager and compiled."""
    values = ([0.0, 0.0, -2.0, 0.0, -2.0, 2.0], [0.0, -1.0, 0.5, 0.5, 2.0, 0.0],
              [0.0, 1e-200, 0.0, -0.0, 3e-170, 1e-160, 0.0, 1.0],
              [0.0, 0.0, 1e-200, -0.0, 1e-170, 1e-160, math.inf, 0.0])
    grads = []
    for m in (torch, dg):
        args = [m.tensor(v, dtype=m.float64, requires_grad=True) for v in values]
        fn = dg.compile(_pow_and_atan2) if compiled and m is dg else _pow_and_atan2
        fn(m, *args).backward()
        grads.append([t.grad.numpy() for t in args])
    for want, got in zip(*grads):
        np.testing.assert_array_equal(got, want)



@pytest.mark.parametrize("compiled", [False, True])
def test_logit_outside_its_domain_has_torchs_nan_gradient(compiled):
    """Without eps, torch's logit is NaN outside [0, 1] in value and gradient (log p -
    log1p(-p) alone gave a finite gradient there), inf at 0 and 1; an integer input is
    computed in the default float. Eager and compiled (the finite values within an ulp:
    torch takes log(p / (1 - p)))."""
    values = [-1.0, 0.0, 0.3, 0.5, 1.0, 2.0, math.nan, -math.inf]
    out = []
    for m in (torch, dg):
        x = m.tensor(values, dtype=m.float64, requires_grad=True)
        fn = dg.compile(lambda t: t.logit()) if compiled and m is dg else (lambda t: t.logit())
        y = fn(x)
        y.sum().backward()
        out.append((y.detach().numpy(), x.grad.numpy(), m.logit(m.tensor([0, 1, 2])).numpy()))
    for want, got in zip(*out):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-15)

# -- a Python number with a tensor, as torch rounds it --------------------------------------------
NUMBER_OPS = {
    "mul": lambda a, b: a * b, "rmul": lambda a, b: b * a, "div": lambda a, b: a / b,
    "rdiv": lambda a, b: b / a, "add": lambda a, b: a + b, "sub": lambda a, b: a - b,
    "mul_": lambda a, b: a.clone().mul_(b), "div_": lambda a, b: a.clone().div_(b)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("name", sorted(NUMBER_OPS))
def test_a_python_number_with_a_tensor_rounds_as_torchs(dtype, name):
    """torch's mul and div of a float16/bfloat16 tensor and a Python number compute in
    float32 with the number as a float32 (``bf16 * 1.1`` is not ``bf16 * bf16(1.1)``); its
    add and sub round the number to the tensor's dtype; ``s / x`` is ``x.reciprocal() *
    s`` (an ulp from a division in a quarter of float32 quotients). Bit for bit, eager
    and compiled."""
    op = NUMBER_OPS[name]
    x = (np.random.default_rng(0).standard_normal(2000) * 10).astype(np.float32)
    xt, xd = torch.tensor(x).to(getattr(torch, dtype)), dg.tensor(x).to(getattr(dg, dtype))
    for number in (1.1, 3.7e-3, 1 / 3, 7):
        want = op(xt, number).float().numpy()
        np.testing.assert_array_equal(op(xd, number).float().numpy(), want)
        compiled = dg.compile(lambda v: op(v, number))
        np.testing.assert_array_equal(compiled(xd).float().numpy(), want)


# -- 0-d tensors -----------------------------------------------------------------------------
ZERO_D = ["softplus", "elu", "selu", "celu", "mish", "logsigmoid", "lgamma", "erfinv"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ZERO_D)
def test_unary_kernels_take_0d_tensors(name, dtype):
    """A 0-d tensor (a scalar parameter: a GP's ``F.softplus(self.raw_noise)``) through the
    unary kernels that write in place or call ``.astype``: NumPy gave them a scalar for a
    0-d array, and softplus, elu (so selu, celu), mish, logsigmoid, lgamma and erfinv
    raised (deep_kernel_gp). Values and gradients are torch's, eager and compiled."""
    def module(lib):
        return lib if hasattr(lib, name) else lib.nn.functional

    want = {}
    for value in (0.7, -0.3):
        t = torch.tensor(value, dtype=getattr(torch, dtype), requires_grad=True)
        out = getattr(module(torch), name)(t)
        out.backward()
        want[value] = (out.item(), t.grad.item())
    fn = getattr(module(dg), name)

    def value_and_grad(x):
        out = fn(x)
        (grad,) = dg.autograd.grad(out, [x])
        return out, grad

    for run in (value_and_grad, dg.compile(value_and_grad)):
        for value, (out, grad) in want.items():
            got = run(dg.tensor(value, dtype=getattr(dg, dtype), requires_grad=True))
            assert got[0].shape == () and str(got[0].dtype).endswith(dtype)
            np.testing.assert_allclose([got[0].item(), got[1].item()], [out, grad],
                                       rtol=1e-6, atol=1e-7)
