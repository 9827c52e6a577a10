"""The backward of split, chunk, unbind and tensor_split builds the input's gradient once:
the eager engine writes each part's gradient into one array (``OpDef.grad_block``), not a
zero-filled array per part and their sum, and the compiled step joins the parts' gradients
into one concatenation. Values and gradients against torch, compiled against eager, for any
dim, uneven parts, views of non-contiguous inputs, parts unused or used twice, the input
used directly too, empty parts, NaN and inf, and recorded (second-order) backward."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.ops.shape import SELECT, SLICE

SPLITS = {   # name -> (x -> parts), the same call in both libraries
    "split_int": lambda x: x.split(2, dim=1),
    "split_sizes_negative_dim": lambda x: x.split([1, 3, 0, 1], dim=-1),
    "chunk": lambda x: x.chunk(3, 0),
    "unbind": lambda x: x.unbind(-2),
    "tensor_split_sections": lambda x: x.tensor_split(3, dim=1),
    "tensor_split_indices": lambda x: x.tensor_split([1, 4], dim=2),
    "rows_of_a_loop": lambda x: [x[:, t] for t in range(x.shape[1])],
}


def _loss(parts, x):
    """Parts weighted differently, part 1 unused, part 0 used twice, and x itself."""
    total = (x * 0.5).sum()
    for i, p in enumerate(parts):
        if i != 1:
            total = total + (p * (i + 1)).sum()
    return total + (parts[0] * parts[0]).sum()


def _view(leaf, transposed):
    """x: a non-contiguous view of the leaf (the parts then view a transposed array), or a
    product (the input of the parts has a producing node, not an accumulator)."""
    return leaf.transpose(0, 2) if transposed else leaf * 1.0


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("name", sorted(SPLITS))
def test_split_gradients_match_torch_eager_and_compiled(name, transposed):
    split = SPLITS[name]
    array = np.random.default_rng(0).standard_normal((5, 5, 5)).astype(np.float32)
    array[0, 0, 0], array[2, 4, 1] = np.nan, np.inf
    ours, theirs = dg.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)
    x, xt = _view(ours, transposed), _view(theirs, transposed)
    _loss(split(x), x).backward()
    _loss(split(xt), xt).backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)

    eager = ours.grad.numpy().copy()
    ours.grad = None
    step = dg.compile(lambda leaf: _loss(split(_view(leaf, transposed)),
                                         _view(leaf, transposed)))
    step(ours).backward()
    np.testing.assert_array_equal(ours.grad.numpy(), eager)


def test_eager_split_backward_runs_no_vjp_of_its_parts(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a part's VJP ran: a zero-filled array per part")
    monkeypatch.setattr(SLICE, "vjp", refuse)
    monkeypatch.setattr(SELECT, "vjp", refuse)
    x = dg.tensor(np.arange(24.0).reshape(2, 3, 4), requires_grad=True)
    q, k, v = x.split([1, 2, 1], dim=-1)
    (q * 2 + k.sum(-1, keepdim=True) * 3).sum().backward()
    want = np.zeros((2, 3, 4))
    want[..., 0], want[..., 1:3] = 2.0, 3.0
    np.testing.assert_array_equal(x.grad.numpy(), want)
    x.grad = None
    sum(r * i for i, r in enumerate(x.unbind(1))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, :, 0], [0.0, 1.0, 2.0])


def test_second_order_and_hooks_take_the_vjp():
    array = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    results = []
    for lib in (dg, torch):
        x = lib.tensor(array, requires_grad=True)
        seen = []
        a, b = x.split([1, 3], dim=1)
        b.register_hook(lambda g: seen.append(g.sum().item()) or g * 2)
        loss = (a ** 3).sum() + (b ** 2).sum()
        (gx,) = (dg if lib is dg else torch).autograd.grad(loss, x, create_graph=True)
        (ggx,) = (dg if lib is dg else torch).autograd.grad((gx * gx).sum(), x)
        results.append((np.asarray(gx.detach().numpy()), np.asarray(ggx.numpy()), seen))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)
    np.testing.assert_allclose(results[0][2], results[1][2], rtol=1e-12)


def test_empty_input_and_float64_and_a_part_with_no_gradient():
    for shape, dim in (((0, 4), 1), ((2, 0), 1), ((3, 4), 0)):
        x = dg.zeros(*shape, dtype=dg.float64, requires_grad=True)
        parts = x.chunk(2, dim)
        parts[-1].sum().backward()
        xt = torch.zeros(*shape, dtype=torch.float64, requires_grad=True)
        xt.chunk(2, dim)[-1].sum().backward()
        assert x.grad.dtype == dg.float64
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_compiled_backward_of_a_split_is_one_concatenation():
    x = dg.tensor(np.ones((4, 6), np.float32), requires_grad=True)

    def step(x):
        q, k, v = x.split(2, dim=1)
        return (q * 1.0 + k * 2.0 + v * 3.0).sum()
    compiled = dg.compile(step)
    compiled(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat([[1.0, 1, 2, 2, 3, 3]], 4, 0))
    assert "slice_backward" not in compiled.code
