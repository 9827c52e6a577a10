"""The eager per-op shortcuts give what the general path gives: grad mode read from the
thread only while some thread departs from the default (other threads, nesting, anomaly,
exceptions), ``x[i]`` with an int, the float32 sine's kept loop entry, ``sum``, the engine's
inline gradient checks (dtype and number gradients), and the user's line of a node."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.autograd.tape import departures, grad_mode


def _chain(lib, x):
    y = x
    for _ in range(3):
        y = y * 0.9 + 0.1 * lib.sin(y)
    return y.sum()


def test_departures_count_blocks_and_return_to_zero_after_an_exception():
    before = dict(departures)   # (0 and 0, unless a test left a block suspended)
    with dg.no_grad():
        assert departures["enabled"] == before["enabled"] + 1
        with dg.enable_grad():   # back to the default: not a departure
            assert departures["enabled"] == before["enabled"] + 1
            x = dg.ones(3, requires_grad=True)
            assert (x * 2).requires_grad   # this thread's flag is read: grad is on
        assert not (x * 2).requires_grad
    with pytest.raises(ValueError):
        with dg.no_grad(), dg.autograd.detect_anomaly():
            raise ValueError
    assert departures == before


def test_no_grad_in_another_thread_leaves_this_thread_recording():
    x0 = np.random.default_rng(0).random(5).astype(np.float32)
    inside, release = threading.Event(), threading.Event()

    def other():
        with dg.no_grad():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    try:
        assert departures["enabled"] >= 1 and grad_mode.enabled
        x = dg.tensor(x0, requires_grad=True)
        loss = _chain(dg, x)
        loss.backward()
    finally:
        release.set()
        t.join()
    xt = torch.tensor(x0, requires_grad=True)
    _chain(torch, xt).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5)


def test_a_thread_started_inside_no_grad_records():
    out = {}

    def other():
        x = dg.ones(3, requires_grad=True)
        out["y"] = x * 3

    with dg.no_grad():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert out["y"].requires_grad and out["y"].grad_fn is not None


def test_anomaly_still_caught_with_the_shortcut():
    x = dg.tensor([-1.0, 1.0], requires_grad=True)
    with dg.autograd.detect_anomaly():
        with pytest.raises(FloatingPointError, match="test_eager_fast_paths.py"):
            dg.sqrt(x)
    dg.sqrt(x)   # outside: NaN allowed, no error


@pytest.mark.parametrize("key", [0, 2, -1, -3])
def test_int_index_matches_torch_values_and_gradient(key):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x, xt = dg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, yt = x[key], xt[key]
    np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
    (y * y).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_int_index_is_a_view_and_out_of_range_names_the_dim():
    x = dg.zeros(3, 2)
    x[1].add_(5.0)
    assert x.tolist() == [[0.0, 0.0], [5.0, 5.0], [0.0, 0.0]]
    with pytest.raises(IndexError, match="index 3 is out of range for dim 0 with size 3"):
        x[3]
    with pytest.raises(IndexError):
        dg.tensor(1.0)[0]


def test_float32_sine_same_values_for_unaligned_and_strided_inputs():
    a = np.random.default_rng(1).standard_normal(17).astype(np.float32)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    raw[1:] = a.view(np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, a.size, offset=1)
    assert not unaligned.flags.aligned
    expect = dg.sin(dg.tensor(a)).numpy()
    np.testing.assert_array_equal(dg.sin(dg.tensor(unaligned)).numpy(), expect)
    m = np.stack([a, a])
    np.testing.assert_array_equal(dg.cos(dg.tensor(m).t()).numpy(),
                                  dg.cos(dg.tensor(np.ascontiguousarray(m.T))).numpy())
    np.testing.assert_allclose(expect, np.sin(a), atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_sum_dtypes_match_torch(dtype):
    a = (np.random.default_rng(2).random((3, 4)) * 5).astype(dtype)
    for dim in (None, 0, (0, 1), -1):
        got = dg.sum(dg.tensor(a), dim=dim) if dim is not None else dg.tensor(a).sum()
        want = torch.sum(torch.tensor(a), dim=dim) if dim is not None else torch.tensor(a).sum()
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_engine_converts_vjp_gradients_of_another_dtype_and_plain_numbers():
    x = dg.tensor([1.0, 2.0], dtype=dg.float64, requires_grad=True)
    y = (x.float() * 3).sum()   # the cast's VJP gets a float32 gradient
    y.backward()
    assert x.grad.dtype == dg.float64 and x.grad.tolist() == [3.0, 3.0]


def test_node_names_the_user_line_of_a_deep_call():
    gru = dg.nn.GRU(3, 4, batch_first=True)
    out, _ = gru(dg.ones(1, 2, 3))   # the line every node of the layer names
    line = test_node_names_the_user_line_of_a_deep_call.__code__.co_firstlineno + 2
    assert out.grad_fn.location.endswith(f"test_eager_fast_paths.py:{line}")
