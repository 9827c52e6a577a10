"""One tensor passed as two arguments (``f(x, x)``, ``model(src, mask, mask)``): bound once,
one graph input read through both, and guarded by the aliasing pattern. Compiled against
eager on values and gradients (one gradient, not two: a first fix doubled it), in-place
writes through one alias read through the other, and calls whose pattern changes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dualgraph as dg


def leaf(seed, shape=(3, 4)):
    rng = np.random.default_rng(seed)
    return dg.tensor(rng.normal(size=shape).astype(np.float32), requires_grad=True)


def loss_fn(a, b):
    return (a * b).sum() + (a.exp() * 2).sum() - b.sum()


@pytest.mark.parametrize("calls", [1, 4])
def test_gradients_through_a_tensor_passed_twice_equal_eager(calls):
    compiled = dg.compile(loss_fn)
    for k in range(calls):
        x_eager, x = leaf(k), leaf(k)
        want = loss_fn(x_eager, x_eager)
        want.backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = compiled(x, x)
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), x_eager.grad.numpy(), rtol=1e-5)
    assert len(compiled.cache) == 1 and not compiled.eager_only


def test_a_step_with_backward_inside_accumulates_one_gradient():
    def step(a, b):
        loss = loss_fn(a, b)
        loss.backward()
        return loss.detach()

    compiled = dg.compile(step)
    x_eager, x = leaf(0), leaf(0)
    for _ in range(4):   # (the gradient accumulates, as eagerly)
        want, got = step(x_eager, x_eager), compiled(x, x)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), x_eager.grad.numpy(), rtol=1e-5)
    assert not compiled.eager_only


def write_then_read(a, b):
    a.mul_(2)           # through one alias ...
    return b + 1        # ... read through the other


def test_an_in_place_write_through_one_alias_is_read_through_the_other():
    compiled = dg.compile(write_then_read)
    with dg.no_grad():
        for k in range(3):
            x_eager, x = leaf(k).detach(), leaf(k).detach()
            want, got = write_then_read(x_eager, x_eager), compiled(x, x)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
            np.testing.assert_allclose(x.numpy(), x_eager.numpy(), rtol=1e-6)


def test_a_change_of_aliasing_is_a_guard_that_fires():
    """f(x, y) compiled (its fast path too) must not serve f(x, x), nor the other way."""
    compiled = dg.compile(write_then_read)
    with dg.no_grad():
        for pattern in ["xy", "xy", "xy", "xx", "xx", "xy", "xx"]:
            x_eager, x = leaf(1).detach(), leaf(1).detach()
            y_eager, y = leaf(2).detach(), leaf(2).detach()
            args_eager = (x_eager, x_eager if pattern == "xx" else y_eager)
            args = (x, x if pattern == "xx" else y)
            want, got = write_then_read(*args_eager), compiled(*args)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
            np.testing.assert_allclose(x.numpy(), x_eager.numpy(), rtol=1e-6)
    assert len(compiled.cache) == 2
    assert "b is now the very tensor passed as a" in compiled.explain()


def test_a_module_given_one_mask_for_two_roles_compiles():
    class Net(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = dg.nn.Linear(4, 4)

        def forward(self, x, mask_a, mask_b):
            h = self.fc(x).masked_fill(mask_a, 0.0)
            return (h.masked_fill(mask_b, -1.0) * h).sum()

    net = Net()
    compiled = dg.compile(net)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = dg.tensor(rng.normal(size=(5, 4)).astype(np.float32))
        mask = dg.tensor(rng.random((5, 4)) > 0.5)
        net.zero_grad()
        net(x, mask, mask).backward()
        want = [p.grad.numpy().copy() for p in net.parameters()]
        net.zero_grad()
        compiled(x, mask, mask).backward()
        for p, w in zip(net.parameters(), want):
            np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-5, atol=1e-6)
    assert not compiled.eager_only and compiled.records[0].kind == "capture"


def test_an_argument_that_is_a_view_of_another_is_guarded():
    """f(x, x[0]) and f(x, y) differ where the function writes in place: each pattern is
    traced for, in either order (the guard fires on the fast path too)."""
    for order in (["view", "apart", "view", "apart"], ["apart", "apart", "apart", "view"]):
        compiled = dg.compile(write_then_read)
        with dg.no_grad():
            for pattern in order:
                results = []
                for fn in (write_then_read, compiled):
                    x, y = dg.ones(3, 2), dg.full((2,), 5.0)
                    out = fn(x, x[0] if pattern == "view" else y)
                    results.append((out.numpy().copy(), x.numpy().copy()))
                for a, b in zip(*results):
                    np.testing.assert_array_equal(a, b)
    assert "share storage" in compiled.explain()


W = dg.ones(3)


def scale_state_then_read(a):
    W.mul_(2)           # state the function reads
    return a + 1        # an argument that may be (a view of) that state


@pytest.mark.parametrize("order", [["w", "v", "w", "v"], ["v", "v", "w", "view"],
                                   ["view", "v", "view", "w"]])
def test_an_argument_that_is_state_the_function_writes_is_guarded(order):
    compiled = dg.compile(scale_state_then_read)
    with dg.no_grad():
        for which in order:
            results = []
            for fn in (scale_state_then_read, compiled):
                W.copy_(dg.ones(3))
                v = dg.ones(3)
                arg = {"w": W, "v": v, "view": W[1:]}[which]
                results.append((fn(arg).numpy().copy(), W.numpy().copy()))
            for a, b in zip(*results):
                np.testing.assert_array_equal(a, b)


def test_a_parameter_passed_as_an_argument_gets_one_gradient():
    lin = dg.nn.Linear(3, 3, bias=False)

    def step(a, x):
        loss = (lin(x) * a).sum()    # a is lin.weight at some calls
        loss.backward()
        return loss.detach()

    compiled = dg.compile(step)
    for which in ["weight", "other", "weight", "other"]:
        grads = []
        for fn in (step, compiled):
            lin.weight.data.copy_(dg.eye(3))
            lin.weight.grad = None
            other = dg.full((3, 3), 2.0, requires_grad=True)
            fn(lin.weight if which == "weight" else other, dg.ones(3, 3))
            grads.append(lin.weight.grad.numpy().copy())
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
