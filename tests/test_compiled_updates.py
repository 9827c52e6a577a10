"""Compiled == eager for what hand-written training loops do to parameters and state:
updates through ``p.data`` / ``p.detach()`` / ``p.data = t`` under ``no_grad``, and state
made lazily inside the step (an optimiser's buffers at its first step, a cached mask).
Each case runs several steps eagerly and compiled from the same weights and compares the
parameters (or outputs), or asserts the graph break naming the user's line."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn

HERE = os.path.basename(__file__)
LR = 0.1
STEPS = 4


def line_of(marker: str) -> int:
    """The line number of the source line in this file containing ``marker``."""
    src = open(__file__).read().splitlines()
    return next(i + 1 for i, text in enumerate(src) if marker in text
                and "line_of(" not in text)


def _data(x):
    return np.random.default_rng(0).standard_normal(x).astype(np.float32)


X, Y = dg.tensor(_data((16, 4))), dg.tensor(_data((16, 1)))


def _model():
    dg.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def _sgd_data_add(p):
    p.data.add_(p.grad, alpha=-LR)


def _sgd_add(p):
    p.add_(p.grad, alpha=-LR)


def _sgd_isub(p):
    p.data -= LR * p.grad


def _sgd_copy(p):
    p.data.copy_(p.data - LR * p.grad)


def _sgd_assign(p):
    p.data = p.data - LR * p.grad


def _sgd_detach(p):
    p.detach().sub_(LR * p.grad)


def _run(update, compiled: bool):
    model = _model()

    def step(x, y):
        for p in model.parameters():
            p.grad = None
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        with dg.no_grad():
            for p in model.parameters():
                update(p)
        return loss

    fn = dg.compile(step) if compiled else step
    losses = [fn(X, Y).item() for _ in range(STEPS)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], fn


@pytest.mark.parametrize("update", [_sgd_data_add, _sgd_add, _sgd_isub, _sgd_copy,
                                    _sgd_assign, _sgd_detach])
def test_hand_written_sgd_updates_are_captured(update):
    """Every form of a hand-written SGD update changes the parameters as eager does, in
    one compiled graph (no graph break, no eager fallback)."""
    losses_e, params_e, _ = _run(update, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        losses_c, params_c, fn = _run(update, True)
    assert not fn.eager_only and len(fn.cache) == 1
    np.testing.assert_allclose(losses_c, losses_e, rtol=1e-6)
    assert losses_e[-1] < losses_e[0]       # the updates really happened
    for a, b in zip(params_c, params_e):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_data_alias_reads_the_updated_value():
    """An alias taken before an in-place update of its owner reads the new value, as the
    shared storage does eagerly."""
    w = dg.tensor([1.0, 2.0])

    def f(x):
        before = w * 1
        alias = w.data
        w.add_(x)
        return alias * 2 + before

    np.testing.assert_allclose(dg.compile(f)(dg.tensor([1.0, 1.0])).numpy(), [5.0, 8.0])
    np.testing.assert_allclose(w.numpy(), [2.0, 3.0])


def test_setting_data_eagerly_shares_the_new_storage():
    """``p.data = t`` (eager): ``p`` shares ``t``'s storage, as in torch; an alias of the
    old storage keeps it."""
    p = nn.Parameter(dg.tensor([1.0, 2.0]))
    old = p.data
    t = dg.tensor([5.0, 6.0, 7.0])
    p.data = t
    t.add_(1.0)
    np.testing.assert_allclose(p.detach().numpy(), [6.0, 7.0, 8.0])
    np.testing.assert_allclose(old.numpy(), [1.0, 2.0])
    assert p.requires_grad and p.grad_fn is None


def test_setting_data_of_another_shape_is_a_graph_break_naming_the_line():
    p = nn.Parameter(dg.tensor([1.0, 2.0]))

    def f(x):
        p.data = dg.cat([p.data, x])   # MARK-resize
        return x * 2

    cf = dg.compile(f)
    with pytest.warns(UserWarning, match=rf"graph break .*{HERE}:{line_of('MARK-resize')}"):
        cf(dg.tensor([3.0]))
    np.testing.assert_allclose(p.detach().numpy(), [1.0, 2.0, 3.0])   # ran eagerly


class Momentum:
    """A hand-written SGD with momentum whose buffers are made at its first step."""

    def __init__(self, params, lr=LR, mu=0.9):
        self.params, self.lr, self.mu, self.state = list(params), lr, mu, {}

    def step(self):
        with dg.no_grad():
            for p in self.params:
                if p not in self.state:
                    self.state[p] = dg.zeros_like(p)
                buf = self.state[p]
                buf.mul_(self.mu).add_(p.grad)
                p.add_(buf, alpha=-self.lr)


class CachedMask(nn.Module):
    """Attention over the time dim with a causal mask made at the first forward."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.mask = None

    def forward(self, x):
        if self.mask is None:
            self.mask = dg.tril(dg.ones(x.shape[1], x.shape[1]))
        scores = self.proj(x) @ x.transpose(-1, -2)
        scores = scores.masked_fill(self.mask == 0, float("-inf"))
        return dg.softmax(scores, -1) @ x


def _train_with_lazy_state(model_cls, compiled: bool, steps=5):
    dg.manual_seed(0)
    model = model_cls()
    opt = Momentum(model.parameters())
    x = dg.tensor(_data((2, 3, 4)))

    def step(x):
        for p in model.parameters():
            p.grad = None
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fn = dg.compile(step) if compiled else step
    losses = [fn(x).item() for _ in range(steps)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], fn, opt, model


@pytest.mark.parametrize("model_cls", [lambda: nn.Linear(4, 4), CachedMask])
def test_state_made_at_the_first_step_is_captured(model_cls):
    """The first call's graph runs once and makes the buffers (and the mask) real tensors;
    the second call traces the steady step, which every later call reuses."""
    losses_e, params_e, _, _, _ = _train_with_lazy_state(model_cls, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        losses_c, params_c, fn, opt, model = _train_with_lazy_state(model_cls, True)
    np.testing.assert_allclose(losses_c, losses_e, rtol=1e-5)
    for a, b in zip(params_c, params_e):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert all(type(buf._data) is np.ndarray for buf in opt.state.values())
    assert not fn.eager_only and len(fn.cache) == 1 and len(fn.records) == 2
    assert "opt.state[" in fn.explain() and "runs once" in fn.explain()
    if isinstance(model, CachedMask):
        assert type(model.mask._data) is np.ndarray and "model.mask" in fn.explain()


def test_state_made_at_every_call_runs_the_python_at_every_call():
    """A tensor stored anew at every call can't be one graph's input: after three calls the
    function runs its Python at every call (its ops compiled and replayed, no warning, not
    eagerly), with ``explain()`` naming the line; results equal eager's and the stored
    tensor is never left symbolic."""
    class Keeps(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.last = None

        def forward(self, x):
            self.last = dg.tanh(self.lin(x))   # MARK-keeps
            return self.last * 2

    dg.manual_seed(0)
    eager = Keeps()
    dg.manual_seed(0)
    model = Keeps()
    cf = dg.compile(model)
    xs = [dg.tensor(_data((2, 3)) + i) for i in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = [cf(x) for x in xs]
    assert "Python state at every call (self.last)" in cf.explain()
    assert f"{HERE}:{line_of('MARK-keeps')}" in cf.explain() and not cf.eager_only
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out.detach().numpy(), eager(x).detach().numpy(),
                                   rtol=1e-6)
        assert type(model.last._data) is np.ndarray
    np.testing.assert_allclose(model.last.detach().numpy(), eager.last.detach().numpy(),
                               rtol=1e-6)


def test_state_made_before_a_graph_break_is_made_again_eagerly():
    """A trace that made state and then hit a graph break leaves no symbolic tensor behind:
    the places it stored into are put back (a new dict item removed, an attribute reset),
    so the eager run makes the state itself and equals eager."""
    def run(compiled):
        dg.manual_seed(0)
        model = CachedMask()
        opt = Momentum(model.parameters())
        x = dg.tensor(_data((2, 3, 4)))

        def step(x):
            for p in model.parameters():
                p.grad = None
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            if loss.item() > 1e9:   # MARK-item-break
                raise AssertionError
            return loss

        fn = dg.compile(step) if compiled else step
        losses = [fn(x).item() for _ in range(3)]
        return losses, [p.detach().numpy().copy() for p in model.parameters()], opt, model

    losses_e, params_e, _, _ = run(False)
    with pytest.warns(UserWarning, match=rf"{HERE}:{line_of('MARK-item-break')}"):
        losses_c, params_c, opt, model = run(True)
    np.testing.assert_allclose(losses_c, losses_e, rtol=1e-6)
    for a, b in zip(params_c, params_e):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert all(type(buf._data) is np.ndarray for buf in opt.state.values())
    assert type(model.mask._data) is np.ndarray


def test_setting_data_of_an_alias_is_a_graph_break_naming_the_line():
    """``d = p.data; d.data = t`` makes ``d`` stop sharing ``p``'s storage eagerly: not
    captured (its writeback would reach ``p``), a graph break; ``p`` stays as eager has it."""
    p = nn.Parameter(dg.tensor([1.0, 2.0]))

    def f(x):
        alias = p.data
        alias.data = x * 3   # MARK-alias-data
        return alias + 0

    with pytest.warns(UserWarning, match=rf"graph break .*{HERE}:{line_of('MARK-alias-data')}"):
        out = dg.compile(f)(dg.tensor([1.0, 1.0]))
    np.testing.assert_allclose(out.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(p.detach().numpy(), [1.0, 2.0])


def test_setting_data_of_a_gradient_made_by_backward_is_captured():
    """``w.grad.data = w.grad.data * 0.0`` after ``backward()`` (GradNorm's step, before it
    assigns its own ``w.grad``): the gradient backward made is a tensor of its own, no alias
    of the engine's temporary, so it is captured (it was a graph break that ran the whole
    step eagerly), equal to eager, the gradient accumulated across calls too."""
    def run(compiled):
        model = _model()
        opt = dg.optim.SGD(model.parameters(), lr=LR)
        w = model[2].weight

        def step(x, y):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            w.grad.data = w.grad.data * 0.5
            opt.step()
            return loss

        fn = dg.compile(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            losses = [fn(X, Y).item() for _ in range(STEPS)]   # (no zero_grad: accumulates)
        return losses, [p.detach().numpy().copy() for p in model.parameters()], fn

    want, got = run(False), run(True)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not got[2].records or all(r.kind != "break" for r in got[2].records)


class HandAdam:
    """Adam as tutorials write it: a per-parameter dict filled at the first step (moments
    and a tensor step count), ``p -= ...`` under no_grad."""

    def __init__(self, params, lr=0.01):
        self.params, self.lr, self.state = list(params), lr, {}

    def step(self):
        with dg.no_grad():
            for p in self.params:
                st = self.state.setdefault(p, {})
                if not st:
                    st["m"], st["v"], st["t"] = dg.zeros_like(p), dg.zeros_like(p), dg.zeros(())
                st["t"] += 1
                st["m"].mul_(0.9).add_(p.grad, alpha=0.1)
                st["v"].mul_(0.99).addcmul_(p.grad, p.grad, value=0.01)
                m_hat = st["m"] / (1 - 0.9 ** st["t"])
                v_hat = st["v"] / (1 - 0.99 ** st["t"])
                p -= self.lr * m_hat / (v_hat.sqrt() + 1e-8)


def test_hand_written_adam_with_lazy_state_dicts():
    def run(compiled):
        model = _model()
        opt = HandAdam(model.parameters())

        def step(x, y):
            for p in model.parameters():
                p.grad = None
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        fn = dg.compile(step) if compiled else step
        losses = [fn(X, Y).item() for _ in range(6)]
        return losses, [p.detach().numpy().copy() for p in model.parameters()], fn

    losses_e, params_e, _ = run(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        losses_c, params_c, fn = run(True)
    np.testing.assert_allclose(losses_c, losses_e, rtol=1e-5)
    for a, b in zip(params_c, params_e):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert not fn.eager_only and len(fn.cache) == 1


def test_in_place_update_of_a_tensor_argument_reaches_each_calls_argument():
    """``x.mul_(2)`` on an argument: every call's own argument is updated (not the tensor
    the first call traced), by the general path and the fast path alike."""
    def f(x, y):
        x.mul_(2.0)
        y.add_(x)
        return x * 1.0

    compiled = dg.compile(f)
    for i in range(4):
        a, b = dg.tensor([1.0, 3.0]) * (i + 1), dg.ones(2)
        a2, b2 = a.clone(), b.clone()
        got, want = compiled(a, b), f(a2, b2)
        for u, v in ((got, want), (a, a2), (b, b2)):
            np.testing.assert_array_equal(u.numpy(), v.numpy())


def test_an_argument_that_is_a_parameter_the_traced_call_did_not_step_gets_its_own_graph():
    """A step traced with ``c`` a plain tensor (the optimiser skipped every parameter: none
    had a gradient) called with ``c`` a parameter of that optimiser: the parameter gets a
    gradient through the argument and is stepped, eagerly and compiled alike."""
    def world():
        dg.manual_seed(0)
        net = nn.Linear(4, 4, dtype=dg.float64)
        opt = dg.optim.SGD(net.parameters(), lr=0.05)

        def step(a, c):
            loss = (a * c).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach()
        return net, step

    rng = np.random.default_rng(0)
    a, c0 = rng.normal(size=(3, 4)), rng.normal(size=4)
    results = []
    for compile_it in (False, True):
        net, step = world()
        fn = dg.compile(step) if compile_it else step
        own = dg.tensor(c0, requires_grad=True)
        fn(dg.tensor(a), own)
        fn(dg.tensor(a), net.bias)
        assert net.bias.grad is not None
        results.append([net.bias.detach().numpy(), net.bias.grad.numpy()])
        fn(dg.tensor(a), own)
        assert net.bias.grad is None
        results[-1] += [net.bias.detach().numpy(), own.grad.numpy()]
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert not np.allclose(results[0][0], world()[0].bias.detach().numpy())
