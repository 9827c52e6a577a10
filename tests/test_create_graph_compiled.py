"""Gradients of gradients through compiled calls (``create_graph=True`` over a compiled
module, as gradient penalties and meta-learning use): the call's node replays its forward
op by op on the call's inputs and differentiates that (capture/autodiff.py ``Replay``).
Before, the gradient came back without history: a penalty on it was silently a constant.
Against PyTorch, and against the same call's first-order backward."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg


def _weights(lib, net):
    with lib.no_grad():
        for p in net.parameters():
            p.copy_(lib.tensor(np.linspace(-1, 1, p.numel()).reshape(tuple(p.shape))
                               .astype(np.float32)))


def _net(lib):
    net = lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2),
                            lib.nn.Softplus())
    _weights(lib, net)
    return net


def _grads(net):
    return [None if p.grad is None else p.grad.numpy().copy() for p in net.parameters()]


def _same(got, want):
    assert [g is None for g in got] == [w is None for w in want]
    for g, w in zip(got, want):
        if g is not None:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


X = np.linspace(-2, 2, 12).reshape(4, 3).astype(np.float32)


def _penalty_step(lib, net, model):
    x = lib.tensor(X, requires_grad=True)
    out = model(x)
    (gx,) = lib.autograd.grad(out.sum(), x, create_graph=True)
    loss = (out ** 2).mean() + ((gx.norm(dim=1) - 1) ** 2).mean()   # (WGAN-GP's shape)
    loss.backward()
    return float(loss.detach()), _grads(net)


def test_a_gradient_penalty_through_a_compiled_module_matches_torch():
    tnet, dnet = _net(torch), _net(dg)
    want_loss, want = _penalty_step(torch, tnet, tnet)
    got_loss, got = _penalty_step(dg, dnet, dg.compile(dnet))
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    _same(got, want)
    eager_net = _net(dg)
    _same(_penalty_step(dg, eager_net, eager_net)[1], want)


def test_a_maml_inner_step_through_a_compiled_loss_matches_torch():
    def outer(lib, compiled):
        w = lib.tensor(np.linspace(-1, 1, 6).reshape(3, 2).astype(np.float32),
                       requires_grad=True)
        x, y = lib.tensor(X), lib.tensor(X[:, :2] * 0.5)

        def loss(w, x, y):
            return ((lib.tanh(x @ w) - y) ** 2).mean()
        f = dg.compile(loss) if compiled else loss
        (g,) = lib.autograd.grad(f(w, x, y), w, create_graph=True)
        adapted = w - 0.5 * g
        f(adapted, x * 2, y).backward()
        return w.grad.numpy()
    want = outer(torch, False)
    for compiled in (False, True):
        np.testing.assert_allclose(outer(dg, compiled), want, rtol=1e-5, atol=1e-6)


def test_the_replay_reproduces_the_calls_dropout_mask():
    net = dg.nn.Sequential(dg.nn.Linear(3, 8), dg.nn.Dropout(0.5), dg.nn.Linear(8, 1))
    model = dg.compile(net)
    x = dg.tensor(X, requires_grad=True)
    out = model(x).sum()
    (first,) = dg.autograd.grad(out, x, retain_graph=True)        # the backward graph
    (second,) = dg.autograd.grad(out, x, create_graph=True)       # the replay
    assert second.requires_grad
    np.testing.assert_allclose(second.detach().numpy(), first.numpy(), rtol=1e-6)


def test_an_input_changed_since_the_call_is_refused_as_eager_refuses_it():
    net = _net(dg)
    model = dg.compile(net)
    x = dg.tensor(X, requires_grad=True)
    out = model(x).sum()
    with dg.no_grad():
        net[0].weight.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
        dg.autograd.grad(out, x, create_graph=True)


def test_grad_leaves_other_leaves_gradients_alone():
    """Found with the penalty above: autograd.grad(y, x) accumulated into every other leaf's
    .grad (w here), so a later backward() added it in."""
    for lib in (torch, dg):
        w = lib.ones(3, requires_grad=True)
        x = lib.ones(3, requires_grad=True)
        (gx,) = lib.autograd.grad((w * x * x).sum(), x, create_graph=True)
        assert w.grad is None
        gx.sum().backward()
        assert w.grad.tolist() == [2.0, 2.0, 2.0] and x.grad.tolist() == [2.0, 2.0, 2.0]


class _Hooked:
    """A forward that scales its activation's gradient by a hook (``h.register_hook``)."""

    def __init__(self, lib):
        self.lin, self.out = lib.nn.Linear(3, 5), lib.nn.Linear(5, 1)
        _weights(lib, self.lin)
        _weights(lib, self.out)
        self.lib = lib

    def __call__(self, x):
        h = self.lib.tanh(self.lin(x))
        if h.requires_grad:
            h.register_hook(lambda g: g * 0.5)
        return self.out(h)


def test_a_forwards_tensor_hook_acts_in_a_create_graph_backward_through_the_compiled_call():
    """Found by round 14's grad_hooks_unused: the replay of a compiled call ran the forward's
    ops again without the hooks the forward registered on its tensors, so an input-gradient
    penalty (``autograd.grad(out, x, create_graph=True)``) got the gradient without the
    hook's scaling, silently (twice torch's here); the first-order backward had it."""
    def penalty(lib, compiled):
        f = _Hooked(lib)
        model = dg.compile(f) if compiled else f
        x = lib.tensor(X, requires_grad=True)
        (gx,) = lib.autograd.grad(model(x).sum(), x, create_graph=True)
        (gx ** 2).sum().backward()
        return gx.detach().numpy(), f.lin.weight.grad.numpy()
    want = penalty(torch, False)
    for compiled in (False, True):
        for got, w in zip(penalty(dg, compiled), want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
