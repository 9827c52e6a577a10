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


def _with_nans():
    x = RNG.normal(size=(7, 5)).astype(np.float32)
    x[RNG.random((7, 5)) < 0.3] = np.nan
    x[:, 3] = np.nan       # (a column all NaN)
    x[4, 1:] = np.nan      # (a row with one value)
    x[6] = np.nan          # (a row all NaN)
    return x


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "nearest",
                                           "midpoint"])
@pytest.mark.parametrize("levels", LEVELS[:2] + [0.7, [0.2, 0.6]],
                         ids=["six", "0-d", "float", "floats"])
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_nanquantile_and_quantile_of_nans_match_torch(interpolation, levels, dim):
    """nanquantile ranks each slice by its own count of values that are not NaN (an all-NaN
    slice gives NaN); quantile gives NaN for a slice holding one, as torch's; values and
    gradients (the NaNs' own are 0), eager and compiled, levels as tensors or floats."""
    x = _with_nans()
    kw = dict(dim=dim, keepdim=dim == 0, interpolation=interpolation)
    for name in ("nanquantile", "quantile"):
        theirs, ours = torch.tensor(x, requires_grad=True), dg.tensor(x, requires_grad=True)
        q_t = torch.tensor(levels) if isinstance(levels, (list, np.ndarray)) else levels
        q_d = dg.tensor(levels) if isinstance(levels, np.ndarray) else levels
        want = getattr(torch, name)(theirs, q_t, **kw)
        got = getattr(dg, name)(ours, q_d, **kw)
        compiled = dg.compile(lambda t, name=name: getattr(t, name)(q_d, **kw))(dg.tensor(x))
        assert tuple(got.shape) == tuple(want.shape) == tuple(compiled.shape), name
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6,
                                   atol=1e-7, err_msg=name)
        assert np.isnan(want.detach().numpy()).any() == (name == "quantile" or dim is not None)
        np.testing.assert_array_equal(compiled.numpy(), got.detach().numpy())
        if name == "nanquantile":   # (quantile's NaN slices send torch's gradient to a NaN)
            cotangent = RNG.normal(size=tuple(want.shape)).astype(np.float32)
            keep = ~np.isnan(want.detach().numpy())
            (want * torch.tensor(cotangent * keep)).nansum().backward()
            (got * dg.tensor(cotangent * keep)).nansum().backward()
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6,
                                       atol=1e-7)


def test_nanquantile_gradient_by_finite_differences():
    x = RNG.normal(size=(4, 6)).astype(np.float64)
    x[0, 2] = x[3, 0] = np.nan
    t = dg.tensor(x, requires_grad=True)
    q = [0.3, 0.8]
    (dg.nanquantile(t, q, dim=1) * dg.tensor([[1.0], [2.0]])).sum().backward()
    eps, numeric = 1e-6, np.zeros_like(x)
    for i, j in zip(*np.nonzero(~np.isnan(x))):
        for sign in (1, -1):
            y = x.copy()
            y[i, j] += sign * eps
            numeric[i, j] += sign * (np.nanquantile(y, q, axis=1) * [[1.0], [2.0]]).sum()
    np.testing.assert_allclose(t.grad.numpy(), numeric / (2 * eps), atol=1e-6)
