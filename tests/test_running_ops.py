"""Running ops (cumsum, cumprod, logcumsumexp) accumulate as torch's CPU kernels do:
float32 in float64 and halves in float32, each output rounded once. A float32 running
sum of many values otherwise drifts from torch's (1e-3 over 100,000 values; a generated
program caught one ulp after 5 rows of ``cumsum(h, 0, dtype=torch.float32)`` of float64)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(7)
OPS = {
    "cumsum": lambda m, x, d: m.cumsum(x, d),
    "cumsum_reversed": lambda m, x, d: m.flip(m.cumsum(m.flip(x, (d,)), d), (d,)),
    "cumprod": lambda m, x, d: m.cumprod(1 + 0.01 * x, d),
    "logcumsumexp": lambda m, x, d: m.logcumsumexp(x, d),
}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dim", [0, 1])
def test_float32_running_ops_equal_torch_bit_for_bit(name, dim):
    x = RNG.standard_normal((3, 20000) if dim else (20000, 3)).astype(np.float32)
    want = OPS[name](torch, torch.tensor(x), dim).numpy()
    eager = OPS[name](dg, dg.tensor(x), dim).numpy()
    compiled = dg.compile(lambda t: OPS[name](dg, t, dim))(dg.tensor(x)).numpy()
    assert eager.dtype == np.float32
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(compiled, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_running_sums_accumulate_in_float32_as_torch(dtype):
    x = RNG.standard_normal(3000).astype(np.float32)
    want = torch.tensor(x).to(getattr(torch, dtype)).cumsum(0).float().numpy()
    got = dg.tensor(x).to(getattr(dg, dtype)).cumsum(0).float().numpy()
    np.testing.assert_array_equal(got, want)


def test_a_dtype_argument_casts_before_the_running_sum():
    x = RNG.standard_normal((5, 6)) * 5
    want = torch.cumsum(torch.tensor(x), 0, dtype=torch.float32).numpy()
    got = dg.cumsum(dg.tensor(x), 0, dtype=dg.float32).numpy()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_the_gradient_of_a_float32_running_sum_matches_torch():
    x = RNG.standard_normal((4, 5000)).astype(np.float32)
    g = RNG.standard_normal((4, 5000)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    torch.cumsum(tx, 1).backward(torch.tensor(g))
    dx = dg.tensor(x, requires_grad=True)
    dg.cumsum(dx, 1).backward(dg.tensor(g))
    np.testing.assert_array_equal(dx.grad.numpy(), tx.grad.numpy())
