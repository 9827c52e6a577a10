"""Custom autograd functions (``dg.autograd.Function``, issue 24): each written once for
both libraries and checked against ``torch.autograd.Function`` (values, gradients, second
gradients), with finite differences, and under ``dg.compile`` against eager."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg
import dualgraph.nn as nn

RNG = np.random.default_rng(0)


def functions(lib):
    """The same custom functions over ``lib`` (dualgraph or torch)."""
    Function = lib.autograd.Function

    class Exp(Function):            # saves its output
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    class ScaledMul(Function):      # two tensors and a number; needs_input_grad
        @staticmethod
        def forward(ctx, a, b, scale):
            ctx.save_for_backward(a, b)
            ctx.scale = scale
            return a * b * scale

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            ga = g * b * ctx.scale if ctx.needs_input_grad[0] else None
            gb = g * a * ctx.scale if ctx.needs_input_grad[1] else None
            return ga, gb, None

    class RoundSTE(Function):       # straight-through estimator
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    class Reverse(Function):        # gradient reversal, the factor kept on ctx
        @staticmethod
        def forward(ctx, x, alpha):
            ctx.alpha = alpha
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return -ctx.alpha * g, None

    class MaxWithIndex(Function):   # two outputs, one not differentiable
        @staticmethod
        def forward(ctx, x):
            values, index = x.max(dim=1)
            ctx.mark_non_differentiable(index)
            ctx.save_for_backward(x, index)
            return values, index

        @staticmethod
        def backward(ctx, g, g_index):
            x, index = ctx.saved_tensors
            mask = (lib.arange(x.shape[1]).reshape(1, -1) == index.reshape(-1, 1))
            return g.reshape(-1, 1) * mask.to(x.dtype)

    class SinCos(Function):         # two differentiable outputs, setup_context style
        @staticmethod
        def forward(x):
            return x.sin(), x.cos()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, gs, gc):
            (x,) = ctx.saved_tensors
            return gs * x.cos() - gc * x.sin()

    class Cube(Function):           # backward in ops: differentiable again
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    class BroadcastGrad(Function):  # backward returns a broadcast gradient: summed down
        @staticmethod
        def forward(ctx, x, bias):
            return x + bias

        @staticmethod
        def backward(ctx, g):
            return g, g

    return dict(Exp=Exp, ScaledMul=ScaledMul, RoundSTE=RoundSTE, Reverse=Reverse,
                MaxWithIndex=MaxWithIndex, SinCos=SinCos, Cube=Cube,
                BroadcastGrad=BroadcastGrad)


OURS, THEIRS = functions(dg), functions(torch)

CASES = [
    ("Exp", lambda f, a: f.apply(a[0]), [(3, 4)]),
    ("ScaledMul", lambda f, a: f.apply(a[0], a[1], 2.5), [(3, 4), (3, 4)]),
    ("RoundSTE", lambda f, a: f.apply(a[0] * 3), [(5,)]),
    ("Reverse", lambda f, a: f.apply(a[0], 0.7) * a[0], [(2, 3)]),
    ("MaxWithIndex", lambda f, a: f.apply(a[0])[0] * 2, [(3, 5)]),
    ("SinCos", lambda f, a: f.apply(a[0])[0] * f.apply(a[0])[1], [(4,)]),
    ("Cube", lambda f, a: f.apply(a[0]), [(2, 2)]),
    ("BroadcastGrad", lambda f, a: f.apply(a[0], a[1]), [(3, 4), (4,)]),
]


@pytest.mark.parametrize("name,call,shapes", CASES, ids=[c[0] for c in CASES])
def test_custom_function_matches_torch(name, call, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    ours = [dg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = call(OURS[name], ours), call(THEIRS[name], theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-12)
    cot = RNG.standard_normal(tuple(ref.shape))
    (out * dg.tensor(cot)).sum().backward()
    (ref * torch.tensor(cot)).sum().backward()
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["Exp", "ScaledMul", "SinCos", "Cube"])
def test_custom_function_gradcheck(name):
    call, shapes = next((c[1], c[2]) for c in CASES if c[0] == name)
    inputs = tuple(dg.tensor(RNG.standard_normal(s), requires_grad=True) for s in shapes)
    assert dg.autograd.gradcheck(lambda *a: call(OURS[name], a), inputs)


def test_needs_input_grad_and_non_differentiable_outputs():
    seen = []

    class Probe(dg.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, n):
            seen.append(ctx.needs_input_grad)
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    a = dg.ones(2, requires_grad=True)
    Probe.apply(a, dg.ones(2), 3).sum().backward()
    assert seen == [(True, False, False)]
    values, index = OURS["MaxWithIndex"].apply(dg.randn(2, 3, requires_grad=True))
    assert values.requires_grad and not index.requires_grad


def test_numbers_among_the_outputs():
    class Twice(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, 5

        @staticmethod
        def backward(ctx, g, g_number):
            assert g_number is None
            return g * 2

    x = dg.ones(2, requires_grad=True)
    y, n = Twice.apply(x)
    y.sum().backward()
    assert n == 5 and x.grad.tolist() == [2.0, 2.0]


def test_second_order_matches_torch():
    x0 = RNG.standard_normal(3)
    x, xt = dg.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    (g,) = dg.autograd.grad(OURS["Cube"].apply(x).sum(), x, create_graph=True)
    (gt,) = torch.autograd.grad(THEIRS["Cube"].apply(xt).sum(), xt, create_graph=True)
    g.sum().backward()
    gt.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_once_differentiable_refuses_a_second_derivative():
    class Square(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @dg.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = dg.tensor([1.0, 2.0], requires_grad=True)
    Square.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
    v = dg.ones(2, requires_grad=True)   # (a cotangent with a history, as torch's test)
    (g,) = dg.autograd.grad(Square.apply(x), x, grad_outputs=v, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


def test_bad_functions_raise_clear_errors():
    class TooFew(dg.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g

    class WrongShape(dg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.sum()

        @staticmethod
        def backward(ctx, g):
            return dg.ones(5)

    a = dg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"TooFew.backward .*test_autograd_function.py.*"
                                           r"incorrect number of gradients \(expected 2"):
        TooFew.apply(a, a).sum().backward()
    with pytest.raises(RuntimeError, match=r"gradient of shape \(5,\) for argument 0 of "
                                           r"shape \(3,\)"):
        WrongShape.apply(a).backward()
    with pytest.raises(RuntimeError, match="TooFew.apply"):
        TooFew()(a, a)
    with pytest.raises(TypeError, match="save_for_backward can only save tensors"):
        class SavesNumber(dg.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x, 3)
                return x
        SavesNumber.apply(a)


def test_saved_tensor_changed_in_place_is_an_error():
    x = dg.ones(3, requires_grad=True)
    base = x * 1
    y = OURS["Cube"].apply(base)
    base.add_(1)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.sum().backward()


def _model(seed=0):
    dg.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _training(compiled: bool, name: str, steps=4):
    """A training step through a custom function (a straight-through round of the hidden
    layer, or a gradient reversal): the parameters after ``steps``."""
    model = _model()
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fn = OURS[name]

    def step(x, y):
        opt.zero_grad()
        h = model[1](model[0](x))
        h = fn.apply(h * 2) / 2 if name == "RoundSTE" else fn.apply(h, 0.5)
        loss = dg.nn.functional.cross_entropy(model[2](h), y)
        loss.backward()
        opt.step()
        return loss
    if compiled:
        step = dg.compile(step)
    dg.manual_seed(1)
    x, y = dg.randn(16, 4), dg.randint(0, 3, (16,))
    losses = [step(x, y).item() for _ in range(steps)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], step


@pytest.mark.parametrize("name", ["RoundSTE", "Reverse"])
def test_compiled_training_step_calls_the_users_backward(name):
    eager_losses, eager_params, _ = _training(False, name)
    losses, params, step = _training(True, name)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for p, q in zip(params, eager_params):
        np.testing.assert_allclose(p, q, rtol=1e-4, atol=1e-6)
    assert "break" not in [r.kind for r in step.records]


def test_compiled_forward_differentiated_outside_calls_the_users_backward():
    x0 = RNG.standard_normal((4, 3)).astype(np.float32)

    def f(x):
        return OURS["RoundSTE"].apply(x * 3) * x

    grads = []
    for fn in (f, dg.compile(f)):
        x = dg.tensor(x0, requires_grad=True)
        fn(x).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
    x = dg.tensor(x0, requires_grad=True)
    out = dg.compile(f)(x)
    with pytest.raises(RuntimeError, match=r"custom autograd functions \(RoundSTE.apply at "
                                           r".*test_autograd_function.py"):
        dg.autograd.grad(out.sum(), x, create_graph=True)


def test_torch_alias_names():
    assert dg.autograd.function.FunctionCtx is dg.autograd.FunctionCtx
    assert dg.autograd.function.once_differentiable is dg.autograd.once_differentiable
