"""The torch functions without gradients that real programs call (i-names): window
functions, logspace, tril/triu_indices, dtype promotion queries, the global generator's
state, the integer casts; each against torch, odd sizes and dtypes included, and bad
arguments raising errors that say what to do."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import dualgraph as dg

WINDOWS = ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
           "kaiser_window"]


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("length", [0, 1, 2, 5, 8, 33])
@pytest.mark.parametrize("periodic", [True, False])
def test_windows_match_torch(name, length, periodic):
    got, want = getattr(dg, name)(length, periodic), getattr(torch, name)(length, periodic)
    assert got.dtype == dg.float32 and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-6)


def test_window_parameters_and_dtypes():
    for args in [(7, False, 0.5, 0.5), (6, True, 0.6)]:
        np.testing.assert_allclose(dg.hamming_window(*args, dtype=dg.float64).numpy(),
                                   torch.hamming_window(*args, dtype=torch.float64).numpy(),
                                   atol=1e-12)
    np.testing.assert_allclose(dg.kaiser_window(9, False, 3.5, dtype=dg.float64).numpy(),
                               torch.kaiser_window(9, False, 3.5, dtype=torch.float64).numpy(),
                               rtol=1e-10)
    assert dg.hann_window(4, requires_grad=True).requires_grad
    with pytest.raises(TypeError, match="floating point dtype"):
        dg.hann_window(4, dtype=dg.int64)
    with pytest.raises(ValueError, match="non-negative window_length"):
        dg.blackman_window(-1)


@pytest.mark.parametrize("args,kwargs", [((0, 2, 5), {}), ((-1, 1.5, 7), {"base": 2}),
                                         ((2, 0, 4), {"dtype": "float64"}),
                                         ((0, 3, 4), {"dtype": "int64"}), ((1, 1, 1), {}),
                                         ((0, 1, 0), {})])
def test_logspace_matches_torch(args, kwargs):
    dt = kwargs.pop("dtype", None)
    got = dg.logspace(*args, **kwargs, dtype=dt and getattr(dg, dt))
    want = torch.logspace(*args, **kwargs, dtype=dt and getattr(torch, dt))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("row,col,offset", [(3, 4, 0), (3, 4, 1), (4, 3, -1), (1, 1, 0),
                                            (0, 3, 0), (5, 2, -4), (2, 5, 3), (3, 3, -5)])
def test_tril_and_triu_indices_match_torch(row, col, offset):
    for name in ("tril_indices", "triu_indices"):
        got = getattr(dg, name)(row, col, offset)
        want = getattr(torch, name)(row, col, offset)
        assert got.dtype == dg.int64 and got.tolist() == want.tolist(), name
    assert dg.tril_indices(3, 3, dtype=dg.int32).dtype == dg.int32


NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
         "float32", "float64"]


def test_promote_types_and_can_cast_match_torch():
    for a, b in itertools.product(NAMES, NAMES):
        da, db, ta, tb = getattr(dg, a), getattr(dg, b), getattr(torch, a), getattr(torch, b)
        assert dg.can_cast(da, db) == torch.can_cast(ta, tb), (a, b)
        assert dg.promote_types(da, db).name == str(torch.promote_types(ta, tb))[6:], (a, b)


@pytest.mark.parametrize("make", [
    lambda m: (m.tensor([1, 2]), 1.5), lambda m: (2, 3.0), lambda m: (True, 2),
    lambda m: (m.tensor([1], dtype=m.int32), m.tensor(1)),
    lambda m: (m.tensor([1.0], dtype=m.float16), m.tensor(2.0, dtype=m.float64)),
    lambda m: (m.tensor(1, dtype=m.uint8), m.tensor([1], dtype=m.int8)),
    lambda m: (m.tensor([True]), 2)])
def test_result_type_matches_torch(make):
    got, want = dg.result_type(*make(dg)), torch.result_type(*make(torch))
    assert got.name == str(want)[6:]


def test_rng_state_round_trip_reproduces_draws_eager_and_compiled():
    dg.manual_seed(11)
    dg.rand(3)
    state = dg.get_rng_state()
    assert state.dtype == dg.uint8 and state.ndim == 1
    step = dg.compile(lambda x: x + dg.rand(4))
    first = (dg.randn(5).numpy(), step(dg.zeros(4)).numpy(), dg.randint(0, 9, (3,)).numpy())
    dg.manual_seed(99)
    dg.rand(7)
    dg.set_rng_state(state)
    again = (dg.randn(5).numpy(), step(dg.zeros(4)).numpy(), dg.randint(0, 9, (3,)).numpy())
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert dg.initial_seed() == 11
    with pytest.raises(TypeError, match="uint8 tensor of"):
        dg.set_rng_state(state.to(dg.int64))


def test_integer_casts_match_torch():
    values = [1.5, -2.0, 300.0, 0.0]
    for name in ("byte", "char", "short"):
        got, want = getattr(dg.tensor(values), name)(), getattr(torch.tensor(values), name)()
        assert got.dtype.name == str(want.dtype)[6:]
        assert got.tolist() == want.tolist(), name
    assert dg.short is dg.int16


def test_storage_queries_match_torch():
    for m in (dg, torch):
        a = m.arange(12.0).reshape(3, 4)
        view = a[1:, 2:]
        got = (a.nbytes, a.itemsize, a.storage_offset(), view.storage_offset(),
               a.t().storage_offset(), m.zeros(3, dtype=m.int16).nbytes, a.is_sparse,
               a.is_pinned(), a.share_memory_() is a, a.data_ptr() == a[0].data_ptr(),
               view.data_ptr() - a.data_ptr())
        if m is dg:
            mine = got
            assert a.layout is dg.strided and repr(dg.strided) == "dualgraph.strided"
    assert mine == got


def test_reshaping_in_place_keeps_storage_and_refuses_what_torch_refuses():
    x = dg.arange(6.0).reshape(2, 3)
    before = x.data_ptr()
    assert x.t_() is x and tuple(x.shape) == (3, 2) and x.data_ptr() == before
    x.unsqueeze_(0).squeeze_(0).swapaxes_(0, 1).swapdims_(1, 0)
    assert x.tolist() == torch.arange(6.0).reshape(2, 3).t().tolist()
    leaf = dg.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        leaf.t_()
    with pytest.raises(NotImplementedError, match="on a view of another tensor"):
        (leaf * 1)[0:1].t_()
    with pytest.raises(ValueError, match="is not expandable to size"):
        dg.zeros(2, 3).sum_to_size(4)
    with pytest.raises(ValueError, match="all dimensions of input must be of equal length"):
        dg.zeros(2, 3, 3).fill_diagonal_(1)


def test_reshaping_an_argument_in_place_is_not_captured():
    """A compiled function can't change its argument's shape for the caller: fullgraph
    raises; otherwise that part runs eagerly, so the caller sees torch's result."""
    def step(x):
        x.t_()
        return x * 2

    with pytest.raises(dg.CaptureError, match="t_.. of a view or of a tensor from outside"):
        dg.compile(step, fullgraph=True)(dg.ones(2, 3))
    x = dg.arange(6.0).reshape(2, 3)
    out = dg.compile(step)(x)
    assert tuple(x.shape) == (3, 2) and out.tolist() == (torch.arange(6.0).reshape(2, 3).t()
                                                         * 2).tolist()


@pytest.mark.parametrize("name", dg._namespace.METHOD_FORMS)
def test_functional_forms_of_methods_are_torch_names(name):
    """``torch.exp_(x)`` & co: each is a torch name and calls the method on its input."""
    assert hasattr(torch, name)
    assert getattr(dg, name).__name__ == name


@pytest.mark.parametrize("call", [
    lambda m, x: m.exp_(x), lambda m, x: m.clamp_(x, -0.5, 0.5), lambda m, x: m.tan_(x),
    lambda m, x: m.relu_(x), lambda m, x: m.logit_(x.sigmoid_(), 1e-3),
    lambda m, x: m.xlogy_(x.abs_(), 3.0), lambda m, x: m.fill_(x, 2.0),
    lambda m, x: m.nan_to_num_(x.log_(), 0.0, 1.0, -1.0),
    lambda m, x: m.detach(x) * m.square_(x)])
def test_functional_in_place_forms_match_torch(call):
    values = np.array([0.3, -1.2, 2.5, 0.0], np.float32)
    got, want = dg.tensor(values), torch.tensor(values)
    got_out, want_out = call(dg, got), call(torch, want)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got_out.numpy(), want_out.numpy(), rtol=1e-6)
