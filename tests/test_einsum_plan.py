"""einsum's cached contraction plan (ops/linalg.py ``_einsum_plan``): the kernel runs the
steps ``np.einsum(optimize=True)`` plans, made once per equation and shapes, so its result
must be bit-equal to NumPy's (values, layout) and to itself on a second call."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.ops import linalg
from dualgraph.ops.linalg import _einsum_kernel, _einsum_plan

CASES = [
    ("bhid,jd->bhij", [(2, 3, 7, 5), (11, 5)]),
    ("bhnd,bhne->bhde", [(2, 3, 7, 5), (2, 3, 7, 4)]),
    ("bhde,bhnd,bhn->bhne", [(2, 3, 5, 4), (2, 3, 7, 5), (2, 3, 7)]),
    ("bhnd,bhd->bhn", [(1, 3, 7, 5), (1, 3, 5)]),
    ("bhnd,bhne->bhnde", [(2, 1, 7, 5), (2, 1, 7, 3)]),
    ("ij,jk,kl->il", [(3, 5), (5, 7), (7, 2)]),
    ("ab,ab->", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (1,)]),
    ("abc,cd,de,a->be", [(3, 4, 5), (5, 6), (6, 2), (3,)]),
]


@pytest.mark.parametrize("numpy_gemm", [True, False], ids=["planned", "numpy-without-bmm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("equation,shapes", CASES)
def test_kernel_bit_equal_to_numpy_optimize(monkeypatch, equation, shapes, dtype, numpy_gemm):
    """Also where NumPy has no ``bmm_einsum`` to import (another version): its own einsum."""
    if not numpy_gemm:
        monkeypatch.setattr(linalg, "_bmm_einsum", None)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    want = np.array(np.einsum(equation, *arrays, optimize=True), order="C")
    for _ in range(2):   # the first call makes the plan, the second reuses it
        got = _einsum_kernel(*arrays, equation=equation)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
        assert got.flags.c_contiguous


def test_plan_is_per_shape():
    small = _einsum_plan("ij,jk,kl->il", ((2, 50), (50, 50), (50, 3)))
    other = _einsum_plan("ij,jk,kl->il", ((50, 2), (2, 50), (50, 50)))
    assert small != other   # the greedy order follows the sizes


def test_eager_einsum_matches_torch_with_grad():
    rng = np.random.default_rng(1)
    eq, shapes = "bhde,bhnd,bhn->bhne", [(2, 3, 5, 4), (2, 3, 7, 5), (2, 3, 7)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    xs = [dg.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = dg.einsum(eq, *xs), torch.einsum(eq, *ts)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)
