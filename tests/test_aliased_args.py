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
