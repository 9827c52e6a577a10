"""``torch.cov`` with ``fweights`` (integer repeat counts) and ``aweights`` (float
importances), alone and together, every correction, for a matrix and a vector of
observations: values and gradients against torch, compiled as eager; torch's checks of the
weights' shapes and dtypes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 6)).astype(np.float32)
FW = RNG.integers(0, 4, 6)
AW = RNG.uniform(0.1, 2.0, 6).astype(np.float32)


@pytest.mark.parametrize("weights", ["f", "a", "fa"])
@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("rows", [2, 1])
def test_weighted_cov_matches_torch(weights, correction, rows):
    data = X if rows == 2 else X[0]

    def kw(lib):
        given = {"f": ("fweights", FW), "a": ("aweights", AW)}
        return {given[k][0]: lib.tensor(given[k][1]) for k in weights}
    theirs, ours = torch.tensor(data, requires_grad=True), dg.tensor(data, requires_grad=True)
    want = torch.cov(theirs, correction=correction, **kw(torch))
    got = dg.cov(ours, correction=correction, **kw(dg))
    compiled = dg.compile(lambda x: dg.cov(x, correction=correction, **kw(dg)))(dg.tensor(data))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(compiled.numpy(), got.detach().numpy(), rtol=1e-6, atol=1e-7)
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_weights_of_the_wrong_shape_or_dtype_are_refused():
    x = dg.tensor(X)
    with pytest.raises(ValueError, match="fweights"):
        dg.cov(x, fweights=dg.tensor([1, 2]))
    with pytest.raises(TypeError, match="integral"):
        dg.cov(x, fweights=dg.tensor(AW))
    with pytest.raises(TypeError, match="floating point"):
        dg.cov(x, aweights=dg.tensor(FW))
