"""Dropout as one op each way (ops/random.py ``DROPOUT``): the mask ``dg.rand``'s draw
from the same seed gives, compared and scaled as the composite ``x * ((u < 1 - p) / (1 -
p))`` does, to the bit; the gradient is that mask (finite differences at a fixed seed, and
torch's dropout: both are ``x``'s kept elements scaled by ``1 / (1 - p)``); compiled ==
eager is in test_random_compiled.py."""
import numpy as np
import pytest
import torch

import dualgraph as dg
import dualgraph.nn.functional as F
from dualgraph.autograd.gradcheck import gradcheck
from dualgraph.dispatch import apply
from dualgraph.ops import creation
from dualgraph.ops import random as rnd


@pytest.mark.parametrize("dtype", [dg.float32, dg.float64, dg.float16])
@pytest.mark.parametrize("fn, mask_shape", [
    (lambda x: F.dropout(x, 0.3), (4, 6, 5)),
    (lambda x: F.dropout1d(x, 0.3), (4, 6, 1)),
    (lambda x: F.dropout2d(x.reshape(4, 6, 5, 1), 0.3).reshape(4, 6, 5), (4, 6, 1, 1)),
])
def test_dropout_is_the_composite_of_rands_draw_to_the_bit(fn, mask_shape, dtype):
    x = dg.tensor(np.random.default_rng(0).standard_normal((4, 6, 5)), dtype=dtype,
                  requires_grad=True)
    dg.manual_seed(5)
    y = fn(x)
    dg.manual_seed(5)
    with dg.no_grad():
        keep = (creation.rand(mask_shape) < 0.7).to(dtype)
        mask = (keep / 0.7).reshape(mask_shape[:3])   # (dropout2d's, on x's shape)
    node = y.grad_fn if y.grad_fn.op is rnd.DROPOUT else y.grad_fn.next[0][0]   # (2d)
    assert node.op is rnd.DROPOUT
    np.testing.assert_array_equal(y.detach().numpy(), (x.detach() * mask).numpy())
    y.backward(dg.ones_like(y) * 2)
    np.testing.assert_array_equal(x.grad.numpy(), (2 * mask.expand(4, 6, 5)).numpy())


@pytest.mark.parametrize("lead", [None, 1, 2])
def test_dropout_gradient_by_finite_differences(lead):
    x = dg.tensor(np.random.default_rng(1).standard_normal((3, 4, 5)), requires_grad=True)
    assert gradcheck(lambda t: apply(rnd.DROPOUT, t, 1234, p=0.4, lead=lead)[0], (x,))


def test_dropout_second_gradient_through_the_mask():
    """``create_graph``: the first gradient is the mask times the cotangent, so its own
    gradient with respect to the cotangent is the mask again."""
    x = dg.tensor(np.random.default_rng(2).standard_normal((6, 7)), requires_grad=True)
    v = dg.tensor(np.random.default_rng(3).standard_normal((6, 7)), requires_grad=True)
    y = apply(rnd.DROPOUT, x, 99, p=0.5, lead=None)[0]
    (gx,) = dg.autograd.grad(y, x, grad_outputs=v, create_graph=True)
    (gv,) = dg.autograd.grad(gx.sum(), v)
    mask = apply(rnd.DROPOUT, dg.ones(6, 7, dtype=dg.float64), 99, p=0.5, lead=None)[1]
    np.testing.assert_array_equal(gv.numpy(), mask.numpy())


def test_dropout_against_torch():
    """The same input through both libraries' dropout: every output is 0 or the input
    scaled by ``1 / (1 - p)`` (the kept ones equal torch's where both kept), each
    gradient is ``output / input``, and both drop about ``p`` of 20,000 elements."""
    a = np.random.default_rng(4).uniform(0.5, 2.0, (100, 200)).astype(np.float32)
    x, t = dg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, u = F.dropout(x, 0.2), torch.nn.functional.dropout(t, 0.2)
    y.sum().backward()
    u.sum().backward()
    yd, ud = y.detach().numpy(), u.detach().numpy()
    both = (yd != 0) & (ud != 0)
    np.testing.assert_allclose(yd[both], ud[both], rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy() * a, yd, rtol=1e-6)
    np.testing.assert_allclose(t.grad.numpy() * a, ud, rtol=1e-6)
    assert abs((yd == 0).mean() - 0.2) < 0.015 and abs((ud == 0).mean() - 0.2) < 0.015
