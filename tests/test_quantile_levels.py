"""``torch.quantile`` with its levels given as a tensor: computed by ops on that tensor
(positions ``q * (n - 1)``, the sorted values gathered there and interpolated), so a
compiled function whose levels are made in it (``torch.linspace(0, 1, k)[1:-1]``, a
running quantizer's bin edges) stays one graph where it broke at ``q.tolist()`` before;
values and gradients against torch for every interpolation, 0-d and 1-d levels, every
dim and keepdim, and the same numbers as levels given as Python floats."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)
X = RNG.normal(size=(7, 5)).astype(np.float32)
LEVELS = [np.array([0.1, 0.5, 0.9, 0.25, 1.0, 0.0], np.float32), np.array(0.3, np.float32),
          np.array([0.5], np.float32)]


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "nearest",
                                           "midpoint"])
@pytest.mark.parametrize("levels", LEVELS, ids=["six", "0-d", "one"])
@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_tensor_levels_match_torch_and_python_levels(interpolation, levels, dim, keepdim):
    kw = dict(dim=dim, keepdim=keepdim, interpolation=interpolation)
    theirs, ours = torch.tensor(X, requires_grad=True), dg.tensor(X, requires_grad=True)
    want = torch.quantile(theirs, torch.tensor(levels), **kw)
    got = dg.quantile(ours, dg.tensor(levels), **kw)
    as_numbers = dg.quantile(dg.tensor(X), levels.tolist(), **kw)
    compiled = dg.compile(lambda x: dg.quantile(x, dg.tensor(levels), **kw))(dg.tensor(X))
    assert tuple(got.shape) == tuple(want.shape) == tuple(as_numbers.shape) \
        == tuple(compiled.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_array_equal(as_numbers.numpy(), got.detach().numpy())
    np.testing.assert_array_equal(compiled.numpy(), got.detach().numpy())
    cotangent = RNG.normal(size=tuple(want.shape)).astype(np.float32)
    (want * torch.tensor(cotangent)).sum().backward()
    (got * dg.tensor(cotangent)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_levels_made_in_a_compiled_function_are_no_graph_break():
    def edges(x):
        return dg.quantile(x, dg.linspace(0, 1, 6)[1:-1], dim=0).T
    compiled = dg.compile(edges)
    x = dg.tensor(X)
    np.testing.assert_array_equal(compiled(x).numpy(), edges(x).numpy())
    np.testing.assert_allclose(
        edges(x).numpy(), torch.quantile(torch.tensor(X), torch.linspace(0, 1, 6)[1:-1],
                                         dim=0).T.numpy(), rtol=1e-6, atol=1e-7)
    assert "0 graph break(s)" in compiled.explain().splitlines()[0]


def test_levels_out_of_range_are_refused_where_they_have_values():
    with pytest.raises(ValueError, match=r"q must be in \[0, 1\]"):
        dg.quantile(dg.tensor(X), dg.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match=r"q must be in \[0, 1\]"):
        dg.quantile(dg.tensor(X), -0.1)
