"""Two torch forms DINO's multi-crop wrapper relies on (tests/torch_programs/
dino_multicrop.py): ``torch.unique_consecutive`` (runs of equal values, their inverse map
and counts, along a dim too), and ``torch.cat`` skipping tensors of shape ``(0,)`` (the
legacy rule that lets ``output = torch.empty(0)`` grow by ``torch.cat((output, x))``),
eagerly and compiled, against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RUNS = [np.array([1, 1, 2, 2, 3, 1, 1, 2]), np.zeros(0, dtype=np.int64), np.array([5]),
        np.array([[1, 2], [1, 2], [3, 4], [1, 2]]), np.array([[1.0, 1.0, 2.0], [1.0, 1.0, 3.0]]),
        np.array([0.5, np.nan, np.nan, 0.5])]


CASES = [(data, dim) for data in RUNS for dim in (None, 0, 1)
         if dim is None or dim < data.ndim]


@pytest.mark.parametrize("data,dim", CASES, ids=range(len(CASES)))
def test_unique_consecutive_matches_torch(data, dim):
    for inverse in (False, True):
        for counts in (False, True):
            want = torch.unique_consecutive(torch.tensor(data), return_inverse=inverse,
                                            return_counts=counts, dim=dim)
            got = dg.unique_consecutive(dg.tensor(data), return_inverse=inverse,
                                        return_counts=counts, dim=dim)
            want = want if isinstance(want, tuple) else (want,)
            got = got if isinstance(got, tuple) else (got,)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert tuple(g.shape) == tuple(w.shape)
                assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1]
                np.testing.assert_array_equal(g.numpy(), w.numpy())
    np.testing.assert_array_equal(dg.tensor(data).unique_consecutive().numpy(),
                                  torch.tensor(data).unique_consecutive().numpy())


def test_unique_consecutive_of_a_traced_tensor_is_a_graph_break():
    def crops(x):
        counts = dg.unique_consecutive(x.sum(0) > 0, return_counts=True)[1]
        return x * counts.shape[0]
    x = dg.tensor([[1.0, 2.0, -4.0], [1.0, 1.0, 3.0]])
    compiled = dg.compile(crops)
    np.testing.assert_array_equal(compiled(x).numpy(), crops(x).numpy())
    assert "unique_consecutive() on a traced tensor" in compiled.explain()


def _grow(lib, a, b):
    out = lib.empty(0)
    for x in (a, b):
        out = lib.cat((out, x * 2))
    wide = lib.cat([lib.tensor([]), a, lib.zeros(0, dtype=lib.float64)], 1)
    ints = lib.cat([lib.zeros(0, dtype=lib.int64), lib.ones(2, 3, dtype=lib.int32)])
    return out, wide, ints


def test_cat_skips_tensors_of_shape_zero_as_torch_does():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    results = {}
    for name, lib, fn in [("torch", torch, lambda x, y: _grow(torch, x, y)),
                          ("eager", dg, lambda x, y: _grow(dg, x, y)),
                          ("compiled", dg, dg.compile(lambda x, y: _grow(dg, x, y)))]:
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        out = fn(x, y)
        (out[0] ** 2).sum().add(out[1].sum()).backward()
        results[name] = ([(tuple(t.shape), str(t.dtype).split(".")[-1], t.detach().numpy())
                          for t in out], x.grad.numpy(), y.grad.numpy())
    want = results["torch"]
    for name in ("eager", "compiled"):
        got = results[name]
        for (gs, gd, gv), (ws, wd, wv) in zip(got[0], want[0]):
            assert (gs, gd) == (ws, wd), name
            np.testing.assert_allclose(gv, wv, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-6, err_msg=name)
    assert tuple(dg.cat([dg.empty(0), dg.empty(0)]).shape) == (0,)
    empty, ones = dg.zeros(0, requires_grad=True), dg.ones(3, requires_grad=True)
    dg.cat([empty, ones]).sum().backward()   # (1-D tensors join as they are: a gradient each)
    assert tuple(empty.grad.shape) == (0,) and ones.grad.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(dg.dispatch.OpShapeError):   # (only the shape (0,) is skipped)
        dg.cat([dg.zeros(0, 3), dg.zeros(2, 4)])
