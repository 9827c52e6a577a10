"""torch's ``out=`` on the ``torch`` namespace's functions (round 13: AdaBelief's AMSGrad
``torch.max(max_var, var, out=max_var)`` raised ``TypeError``): the result written into
``out`` and ``out`` returned, as torch does, eager and compiled; tuple outs in the result's
named tuple; torch's errors for a dtype out can't hold and for recorded gradients, and its
resize (with the warning) for an out of another shape."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import dualgraph as dg

A = np.array([[1.0, 5.0, -2.0], [0.5, 3.0, 4.0]], np.float32)
B = np.array([[3.0, 1.0, 4.0], [-1.0, 2.0, 6.0]], np.float32)


def _writes(m, a, b):
    """The ops written into outs, with ``a`` itself as an out (AMSGrad's form)."""
    buf, total = m.zeros(2, 3), m.zeros(2, 1)
    values, indices = m.zeros(2, 3), m.zeros(2, 3, dtype=m.int64)
    m.max(a, b, out=a)
    m.add(a, b, alpha=2, out=buf)
    m.sum(buf, 1, keepdim=True, out=total)
    got = m.sort(buf, dim=1, descending=True, out=(values, indices))
    assert got.values is values and got[1] is indices
    m.matmul(a, b.T, out=m.zeros(2, 2))
    doubles = m.zeros(2, 3, dtype=m.float64)
    m.mul(a, 3, out=doubles)   # (float32 into a float64 out: allowed)
    return a, buf, total, values, indices, doubles


def test_out_matches_torch_eager_and_compiled():
    want = _writes(torch, torch.tensor(A), torch.tensor(B))
    got = _writes(dg, dg.tensor(A), dg.tensor(B))
    compiled = dg.compile(lambda a, b: _writes(dg, a * 1, b))(dg.tensor(A), dg.tensor(B))
    for w, g, c in zip(want, got, compiled):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
        np.testing.assert_array_equal(c.numpy(), w.numpy())
        assert str(g.dtype).rsplit(".")[-1] == str(w.dtype).rsplit(".")[-1]


def test_out_returns_out_and_keeps_the_numpy_names():
    a, out = dg.tensor(A), dg.zeros(2, 1)
    assert dg.amax(a, axis=1, keepdims=True, out=out) is out
    np.testing.assert_array_equal(out.numpy(), A.max(1, keepdims=True))
    assert dg.exp(a, out=None).shape == (2, 3)


def test_out_errors_and_resize_as_torch():
    for m in (torch, dg):
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the "
                                               "desired output type Long"):
            m.add(m.ones(2), m.ones(2), out=m.zeros(2, dtype=m.int64))
        x = m.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
            m.mul(x, 2, out=m.zeros(2))
        with m.no_grad():
            np.testing.assert_array_equal(m.mul(x, 2, out=m.zeros(2)).numpy(), [2, 2])
        empty, small = m.zeros(0), m.zeros(1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m.add(m.ones(3), 1, out=empty)
        with pytest.warns(UserWarning, match="was resized"):
            m.add(m.ones(3), 1, out=small)
        assert list(empty.shape) == list(small.shape) == [3]
        np.testing.assert_array_equal(small.numpy(), [2, 2, 2])
