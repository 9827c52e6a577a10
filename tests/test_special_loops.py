"""The special functions' loops (``kernels/special.py``: lgamma, digamma/polygamma, erfinv)
against torch (float32, and where torch's values are exact), mpmath (float64: torch's own
float64 trigamma is 5e-10 off) and their NumPy forms (``ops/special.py``, what runs without
Numba), over the whole line: poles, reflections, the series' edge at 10, erfinv's tails
near +-1, infinities, NaN, signed zeros, empty and 0-d arrays."""
import mpmath
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import kernels

pytestmark = pytest.mark.skipif(not kernels.numba_available(), reason="the loops need Numba")

_RNG = np.random.default_rng(0)
_EDGES = [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -7.0, 0.5, -0.5, -2.5, 9.999, 10.0, 10.001, 1e-30,
          -1e-30, 1e30, -1e30, 171.5, -999.5, -1000.5, np.inf, -np.inf, np.nan]
_LINE = np.concatenate([_EDGES, _RNG.uniform(-30, 30, 400), _RNG.uniform(0, 3, 200),
                        10.0 ** _RNG.uniform(-8, 8, 100)])
_UNIT = np.concatenate([[0.0, -0.0, 0.5, -0.5, 0.5000001, 1.0, -1.0, 1.5, -1.5, 1 - 1e-7,
                         -1 + 1e-7, 1 - 1e-15, 1e-30, np.inf, -np.inf, np.nan],
                        _RNG.uniform(-1, 1, 500), 1 - 10.0 ** _RNG.uniform(-16, -1, 100)])

CASES = [("lgamma", dg.lgamma, torch.lgamma, lambda v: mpmath.log(abs(mpmath.gamma(v))), _LINE),
         ("digamma", dg.digamma, torch.digamma, mpmath.digamma, _LINE),
         ("polygamma1", lambda x: dg.polygamma(1, x), lambda x: torch.polygamma(1, x),
          lambda v: mpmath.polygamma(1, v), np.abs(_LINE)),
         ("polygamma2", lambda x: dg.polygamma(2, x), lambda x: torch.polygamma(2, x),
          lambda v: mpmath.polygamma(2, v), np.concatenate([np.abs(_LINE), [-0.5, -3.25]])),
         ("polygamma3", lambda x: dg.polygamma(3, x), lambda x: torch.polygamma(3, x),
          lambda v: mpmath.polygamma(3, v), np.abs(_LINE)),
         ("erfinv", dg.erfinv, torch.erfinv, mpmath.erfinv, _UNIT)]
IDS = [c[0] for c in CASES]


def _close(got, want, dtype, ulps=4):
    """Equal NaN/inf pattern; finite values within ``ulps`` of ``dtype`` (relative, and
    absolute near the functions' zeros)."""
    tol = ulps * np.finfo(dtype).eps
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    infinite = np.isinf(want)
    np.testing.assert_array_equal(got[infinite], want[infinite])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol)


@pytest.mark.parametrize("name,ours,theirs,exact,values", CASES, ids=IDS)
def test_the_loops_match_torch_in_float32(name, ours, theirs, exact, values):
    x = values.astype(np.float32)
    got = ours(dg.tensor(x)).numpy()
    assert got.dtype == np.float32
    # torch computes float32 in float32 (a few ulp off): its float64, rounded
    with np.errstate(over="ignore"):
        want = theirs(torch.tensor(x.astype(np.float64))).numpy().astype(np.float32)
    if name in ("polygamma2", "polygamma3"):   # (torch: NaN at +inf; here the limit, 0)
        want = np.where(x == np.inf, 0.0, want)
    _close(got, want, np.float32)


@pytest.mark.parametrize("name,ours,theirs,exact,values", CASES, ids=IDS)
def test_the_loops_are_within_a_few_ulp_in_float64(name, ours, theirs, exact, values):
    got = ours(dg.tensor(values)).numpy()
    want = theirs(torch.tensor(values)).numpy()   # (for NaN, inf and the poles)
    if name in ("polygamma2", "polygamma3"):
        want = np.where(values == np.inf, 0.0, want)
    finite = np.isfinite(want) & np.isfinite(values)
    mpmath.mp.dps = 40
    want[finite] = [float(exact(mpmath.mpf(float(v)))) for v in values[finite]]
    _close(got, want, np.float64, ulps=16)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,ours,theirs,exact,values", CASES, ids=IDS)
def test_the_loops_match_the_numpy_forms(monkeypatch, name, ours, theirs, exact, values, dtype):
    x = dg.tensor(values.astype(dtype))
    looped = ours(x).numpy()
    monkeypatch.setenv("DUALGRAPH_NUMBA", "0")
    plain = ours(x).numpy()
    _close(looped, plain, dtype, ulps=16)
    if dtype == np.float32:   # (float64 inside: the float32 results are the same numbers)
        assert np.mean(looped[np.isfinite(plain)] == plain[np.isfinite(plain)]) > 0.99


@pytest.mark.parametrize("op", [dg.lgamma, dg.digamma, dg.erfinv])
def test_empty_0d_strided_and_shared_rows(op):
    assert op(dg.zeros(0, 3)).shape == (0, 3)
    assert op(dg.tensor(0.25)).shape == ()
    x = np.random.default_rng(1).uniform(0.05, 0.95, (64, 3000)).astype(np.float32)
    whole = op(dg.tensor(x)).numpy()   # (large: its rows shared among threads)
    np.testing.assert_array_equal(op(dg.tensor(x[:, ::2])).numpy(), whole[:, ::2])
    np.testing.assert_array_equal(op(dg.tensor(x.T)).numpy(), whole.T)


def test_gradients_and_compiled_calls_use_the_same_values():
    x = dg.tensor(np.linspace(0.1, 0.9, 7, dtype=np.float32), requires_grad=True)
    y = (dg.lgamma(x) + dg.digamma(x) + dg.erfinv(x)).sum()
    y.backward()
    t = torch.tensor(x.detach().numpy(), requires_grad=True)
    (torch.lgamma(t) + torch.digamma(t) + torch.erfinv(t)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5)
    compiled = dg.compile(lambda v: dg.lgamma(v) * dg.erfinv(v) + dg.polygamma(1, v))
    with dg.no_grad():
        np.testing.assert_array_equal(
            compiled(x.detach()).numpy(),
            (dg.lgamma(x) * dg.erfinv(x) + dg.polygamma(1, x)).detach().numpy())
