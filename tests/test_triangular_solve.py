"""``torch.triangular_solve`` / ``Tensor.triangular_solve`` (the older spelling of
``linalg.solve_triangular``: right-hand side first, a ``(solution, cloned_coefficient)``
result): values and gradients against PyTorch for every flag, batched and broadcast."""
import itertools

import numpy as np
import pytest
import torch

import dualgraph as dg


def _inputs(lib, a_shape, b_shape, seed=0):
    rng = np.random.default_rng(seed)
    n = a_shape[-1]
    A = rng.normal(size=a_shape) * 0.4 + 2.0 * np.eye(n)
    b = rng.normal(size=b_shape)
    return (lib.tensor(b, requires_grad=True), lib.tensor(A, requires_grad=True))


@pytest.mark.parametrize("upper,transpose,unitriangular",
                         list(itertools.product([True, False], repeat=3)))
@pytest.mark.parametrize("shapes", [((3, 3), (3, 2)), ((2, 4, 4), (2, 4, 1)),
                                    ((5, 5), (3, 5, 2))])
def test_triangular_solve_values_and_gradients_match_torch(upper, transpose, unitriangular,
                                                           shapes):
    out = {}
    for lib in (torch, dg):
        b, A = _inputs(lib, *shapes)
        x, clone = lib.triangular_solve(b, A, upper=upper, transpose=transpose,
                                        unitriangular=unitriangular)
        weights = lib.tensor(np.linspace(-1, 1, x.numel()).reshape(tuple(x.shape)))
        ((x * weights).sum() + (clone ** 2).sum()).backward()
        out[lib] = (x.detach().numpy(), clone.detach().numpy(), b.grad.numpy(),
                    A.grad.numpy())
    for got, want in zip(out[dg], out[torch]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_method_form_and_field_names():
    b, A = _inputs(dg, (3, 3), (3, 1))
    r = b.detach().triangular_solve(A.detach(), upper=False)
    assert r.solution.shape == (3, 1) and r.cloned_coefficient.shape == (3, 3)
    tri = np.tril(A.detach().numpy())
    np.testing.assert_allclose(tri @ r.solution.numpy(), b.detach().numpy(), rtol=1e-12)
    assert r.cloned_coefficient._data is not A._data   # (a copy, as torch's)


def test_gradient_matches_finite_differences():
    b, A = _inputs(dg, (3, 3), (3, 2), seed=4)
    assert dg.autograd.gradcheck(
        lambda b, A: dg.triangular_solve(b, A, upper=True, transpose=True).solution, (b, A))
