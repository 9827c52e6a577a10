"""Kernels fitted to a compiled node's static shapes once (``conv_direct.fitted``,
``conv_lanes.fitted``, ``conv_packed.fitted``, ``conv_shallow.fitted``,
``conv_blocked.fitted_relayout``, ``ops.excite.fitted_loop``; ``conv2d``'s ``specialise``
as ``conv_direct``, ``conv2d_epilogue``'s as ``conv_shallow_<act>`` / ``conv_direct_<act>``,
the squeeze-and-excitation ops' as their loops, the channel relayouts'): the
compiled function gives eager's bits and torch's values, call after call with its output
buffers reused and new inputs and weights each call (the fitted closures keep scratch, a
padded weight or bias buffer and the loop's entry across calls), with NaN and inf in the
input, at batch 1 and 3, on planes the direct loop takes and the small ones ``conv_lanes``
takes, and with narrow groups. Two threads calling one compiled CNN at once get their own
results (a call while another runs gets kernels fitted for itself: codegen/python.py's
``one_call_at_a_time``)."""
import re
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
import dualgraph.nn.functional as F  # noqa: E402
from dualgraph.kernels import thread_use  # noqa: E402

from test_squeeze_excite import _pair  # noqa: E402

# x shape, weight shape, stride, padding, groups
CASES = [
    ((1, 24, 28, 28), (24, 1, 3, 3), 1, 1, 24),    # depthwise, a plane the direct loop takes
    ((3, 16, 7, 9), (16, 1, 3, 3), 2, 1, 16),      # depthwise, small plane: conv_lanes
    ((1, 13, 11, 10), (13, 1, 5, 5), 1, 2, 13),    # channels not a multiple of eight
    ((3, 32, 12, 12), (32, 4, 3, 3), 1, 1, 8),     # narrow groups: the direct loop
    ((1, 58, 14, 14), (58, 1, 3, 3), 2, 1, 58),
]


def _conv(lib, stride, padding, groups):
    functional = lib.nn.functional

    def f(x, w, b):
        return functional.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
    return f


def _data(x_shape, w_shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    x[0, 0, 0, 0], x[-1, -1, -1, -1] = np.nan, np.inf
    return (x, rng.standard_normal(w_shape).astype(np.float32),
            rng.standard_normal(w_shape[0]).astype(np.float32))


@pytest.mark.parametrize("case", CASES)
def test_compiled_convs_give_eager_bits_call_after_call(case):
    x_shape, w_shape, stride, padding, groups = case
    f = _conv(dg, stride, padding, groups)
    compiled = dg.compile(f)
    outs = []
    for seed in range(3):
        arrays = _data(x_shape, w_shape, seed)
        with dg.no_grad():
            got = compiled(*map(dg.tensor, arrays)).numpy().copy()
            want = f(*map(dg.tensor, arrays)).numpy()
        np.testing.assert_array_equal(got, want)
        ref = _conv(torch, stride, padding, groups)(*map(torch.tensor, arrays)).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        outs.append(got)
    assert not np.array_equal(outs[0], outs[1])   # (new weights were read)
    assert "conv_direct(" in compiled.code, compiled.code


def test_a_conv_without_bias_and_an_empty_batch():
    x, w, _ = _data((2, 8, 9, 9), (8, 1, 3, 3), 0)
    compiled = dg.compile(lambda x, w: F.conv2d(x, w, None, padding=1, groups=8))
    with dg.no_grad():
        got = compiled(dg.tensor(x), dg.tensor(w)).numpy()
        want = F.conv2d(dg.tensor(x), dg.tensor(w), None, padding=1, groups=8).numpy()
        np.testing.assert_array_equal(got, want)
        empty = np.zeros((0, 8, 9, 9), np.float32)
        assert compiled(dg.tensor(empty), dg.tensor(w)).shape == (0, 8, 9, 9)


@pytest.mark.parametrize("groups,residual", [(1, False), (1, True), (2, True)])
def test_a_fitted_packed_conv_reused_gives_each_calls_bits(groups, residual):
    """``conv_packed.fitted``'s run, called again and again with new inputs, bias and
    residual into the same output, gives what a fresh :func:`conv_packed.conv` gives."""
    cp = dg.kernels.conv_packed
    rng = np.random.default_rng(1)
    x_shape, w_shape = (1, 32, 9, 11), (32, 32 // groups, 3, 3)
    packed = cp.pack(rng.standard_normal(w_shape).astype(np.float32), groups)
    args = ((1, 1), ((1, 1), (1, 1)), (1, 1))
    codes = dict(where=1 if residual else 0, act=1, lo=-np.inf, hi=np.inf, groups=groups)
    run = cp.fitted(x_shape, (1, 32, 9, 11), *args, (3, 3), None, residual, **codes)
    out = np.empty((1, 32, 9, 11), np.float32)
    for _ in range(3):
        x, b, r = (rng.standard_normal(s).astype(np.float32)
                   for s in (x_shape, (32,), (1, 32, 9, 11)))
        want = cp.conv(x, packed, np.empty_like(out), *args, b, (3, 3),
                       residual=r if residual else None, **codes)
        np.testing.assert_array_equal(run(x, packed, b, out, r if residual else None), want)


@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("n,c,s,hw", [(1, 16, 4, (7, 9)), (3, 24, 5, (5, 5)), (2, 8, 1, (1, 1))])
def test_fitted_squeeze_excite_gives_the_kernels_bits_call_after_call(blocked, n, c, s, hw):
    """The squeeze-and-excitation ops' ``specialise`` (the loop fitted once) gives their
    kernel's bits on new inputs and weights each call, NaN and inf included."""
    from dualgraph.ops.excite import SQUEEZE_EXCITE
    from dualgraph.ops.layout import SQUEEZE_EXCITE_BLOCKED
    from dualgraph.shapes import ShapedType
    op = SQUEEZE_EXCITE_BLOCKED if blocked else SQUEEZE_EXCITE
    x_shape = (n, c // 8, *hw, 8) if blocked else (n, c, *hw)
    shapes = [x_shape, (s, c, 1, 1), (s,), (c, s, 1, 1), (c,)]
    attrs = dict(acts=("hardswish", "clamp"), bounds=((-np.inf, np.inf), (0.0, 1.0)))
    name, run = op.specialise(*(ShapedType(t, np.float32) for t in shapes), **attrs)
    rng = np.random.default_rng(n)
    for _ in range(3):
        arrays = [rng.standard_normal(t).astype(np.float32) for t in shapes]
        arrays[0].reshape(-1)[:2] = np.nan, np.inf
        np.testing.assert_array_equal(run(*arrays), op.kernel(*arrays, **attrs))


@pytest.mark.parametrize("channels", [(7, 13), (16, 24)])
def test_a_compiled_squeeze_excite_runs_its_fitted_loop(channels):
    model, reference = _pair(channels=channels, gate="Hardsigmoid", act="ReLU")
    compiled = dg.compile(model)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((1, 3, 11, 9)).astype(np.float32)
        with dg.no_grad():
            got = compiled(dg.tensor(x)).numpy().copy()
        with torch.no_grad():
            want = reference(torch.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert "k_squeeze_excite" not in compiled.code and "squeeze_excite" in compiled.code


def test_two_threads_calling_one_compiled_cnn_get_their_own_results():
    # (the fitted closures' scratch, shared by two threads' calls, gave each the other's
    # sums: errors of 0.005-0.02)
    nn = dg.nn
    dg.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU6(),
        nn.Conv2d(32, 32, 3, 1, 1, groups=32), nn.BatchNorm2d(32), nn.ReLU6(),
        nn.Conv2d(32, 48, 1), nn.BatchNorm2d(48),
        nn.Conv2d(48, 48, 3, 1, 1, groups=48), nn.ReLU(),
        nn.Conv2d(48, 64, 3, 1, 1, groups=4), nn.ReLU(),
        nn.Conv2d(64, 64, 3, 1, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).eval()
    compiled = dg.compile(model)
    rng = np.random.default_rng(0)
    data = [dg.tensor(rng.standard_normal((1, 3, 56, 56)).astype(np.float32))
            for _ in range(2)]
    with dg.no_grad():
        want = [compiled(d).numpy().copy() for d in data]
        for d, w in zip(data, want):
            np.testing.assert_allclose(model(d).numpy(), w, rtol=1e-4, atol=1e-5)
    errors = []

    def worker(k):
        with dg.no_grad():
            for _ in range(300):
                got = compiled(data[k]).numpy()
                if not np.array_equal(got, want[k]):
                    errors.append((k, float(np.abs(got - want[k]).max())))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def test_set_num_threads_after_compiling_reaches_the_fitted_kernels():
    # (a kernel fitted at the first call kept that call's thread count for good)
    nn = dg.nn
    dg.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 64, 3, 1, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, 1, 1),
                          nn.ReLU(), nn.Conv2d(64, 64, 1)).eval()
    compiled = dg.compile(model)
    x = dg.tensor(np.random.default_rng(0).standard_normal((2, 16, 56, 56)).astype(np.float32))
    before = dg.get_num_threads()
    try:
        dg.set_num_threads(2)
        with dg.no_grad():
            want = compiled(x).numpy().copy()
            with thread_use.recording() as calls:
                compiled(x)
            assert max(asked for _, asked, *_ in calls) == 2, calls
            dg.set_num_threads(1)
            with thread_use.recording() as calls:
                got = compiled(x).numpy()
        assert all(asked == 1 for _, asked, *_ in calls), calls
        np.testing.assert_array_equal(got, want)   # (the bits do not depend on the split)
    finally:
        dg.set_num_threads(before)


@pytest.mark.parametrize("n,cout,stride,residual", [(1, 16, 2, False), (3, 13, 1, True),
                                                    (2, 8, 2, True)])
def test_a_fitted_shallow_conv_reused_gives_each_calls_bits(n, cout, stride, residual):
    """``conv_shallow.fitted``'s run (its scratch, packed weight and bias buffers kept),
    called again and again with new inputs, weights, bias and residual into the same
    output, gives what a fresh :func:`conv_shallow.conv` gives, NaN and inf included."""
    cs = dg.kernels.conv_shallow
    x_shape, w_shape = (n, 3, 21, 34), (cout, 3, 3, 3)
    geometry = ((stride, stride), ((1, 1), (1, 1)), (1, 1), 1)
    out_shape = (n, cout, (21 - 1) // stride + 1, (34 - 1) // stride + 1)
    codes = dict(where=2 if residual else 0, act=3, lo=-np.inf, hi=np.inf)
    run = cs.fitted(x_shape, w_shape, out_shape, *geometry, np.float32, residual, **codes)
    out, rng = np.empty(out_shape, np.float32), np.random.default_rng(n)
    for _ in range(3):
        x, w, b, r = (rng.standard_normal(s).astype(np.float32)
                      for s in (x_shape, w_shape, (cout,), out_shape))
        x[0, 0, 0, :2] = np.nan, np.inf
        want = cs.conv(x, w, np.empty_like(out), *geometry, b,
                       residual=r if residual else None, **codes)
        np.testing.assert_array_equal(run(x, w, b, out, r if residual else None), want)


def _conv_act(lib, stride, padding, groups, residual):
    functional = lib.nn.functional

    def f(x, w, b, r):
        y = functional.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
        return functional.hardswish(y + r if residual else y)
    return f


@pytest.mark.parametrize("case,residual,kernel", [
    (((1, 3, 30, 34), (16, 3, 3, 3), 2, 1, 1), False, "conv_shallow_hardswish"),
    (((2, 3, 20, 19), (13, 3, 3, 3), 1, 1, 1), True, "conv_shallow_hardswish"),
    (((1, 13, 11, 10), (13, 1, 5, 5), 1, 2, 13), False, "conv_direct_hardswish"),
    (((2, 12, 12, 12), (12, 4, 3, 3), 1, 1, 3), True, "conv_direct_hardswish")])
def test_compiled_convs_with_an_epilogue_give_eager_values_call_after_call(case, residual,
                                                                           kernel):
    """``conv2d_epilogue``'s ``specialise`` runs ``conv_shallow`` and ``conv_direct``
    fitted once: new inputs and weights each call into the reused output buffer give the
    eager values and torch's."""
    x_shape, w_shape, stride, padding, groups = case
    f = _conv_act(dg, stride, padding, groups, residual)
    compiled = dg.compile(f)
    outs = []
    for seed in range(3):
        arrays = _data(x_shape, w_shape, seed)
        hw = [(s + 2 * padding - k) // stride + 1 for s, k in zip(x_shape[2:], w_shape[2:])]
        arrays += (np.random.default_rng(seed).standard_normal(
            (x_shape[0], w_shape[0], *hw)).astype(np.float32),)
        with dg.no_grad():
            got = compiled(*map(dg.tensor, arrays)).numpy().copy()
            want = f(*map(dg.tensor, arrays)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        ref = _conv_act(torch, stride, padding, groups, residual)(
            *map(torch.tensor, arrays)).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        outs.append(got)
    assert not np.array_equal(outs[0], outs[1])   # (new weights were read)
    assert f"{kernel}(" in compiled.code, compiled.code


@pytest.mark.parametrize("shape", [(1, 16, 32, 33), (2, 24, 17, 15)])
def test_fitted_relayouts_reused_give_each_calls_bits(shape):
    """``conv_blocked.fitted_relayout`` (``block_channels`` / ``unblock_channels``'
    ``specialise``), called again and again into the same output, gives what
    ``block`` / ``unblock`` give; NumPy's copy (None) below ``SMALL`` elements."""
    cb = dg.kernels.conv_blocked
    n, c, h, w = shape
    to_blocked, to_planar = cb.fitted_relayout(shape, True), \
        cb.fitted_relayout((n, c // 8, h, w, 8), False)
    blocked, planar = np.empty((n, c // 8, h, w, 8), np.float32), np.empty(shape, np.float32)
    rng = np.random.default_rng(n)
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32)
        x[0, 0, 0, :2] = np.nan, np.inf
        np.testing.assert_array_equal(to_blocked(x, out=blocked), cb.block(x))
        np.testing.assert_array_equal(to_planar(blocked, out=planar), x)
    assert cb.fitted_relayout((1, 8, 4, 4), True) is None


def _mobile(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish(),
        nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 24, 1), nn.BatchNorm2d(24), nn.Hardswish(),
        nn.Conv2d(24, 24, 5, 2, 2, groups=24), nn.BatchNorm2d(24), nn.Hardswish(),
        nn.Conv2d(24, 16, 1), nn.BatchNorm2d(16),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()


@pytest.mark.parametrize("batch", [1, 2])
def test_a_compiled_blocked_region_writes_its_planned_buffers_call_after_call(batch):
    """The stem (``conv_shallow``, writing the blocked layout: no relayout) and the
    blocked convs of a compiled mobile CNN write the memory plan's buffers (``fills_out``): call after call with new
    inputs they give eager's and torch's values, and the first call's output is not
    overwritten by the next (the graph's output is never a planned buffer)."""
    model, reference = _mobile(dg), _mobile(torch)
    rng = np.random.default_rng(batch)
    state = {k: (np.abs(v) + 0.5 if k.endswith("running_var") else v) for k, v in (
        (k, (rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
        for k, v in reference.state_dict().items() if v.dtype == torch.float32)}
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()}, strict=False)
    compiled = dg.compile(model)
    results = []
    for _ in range(3):
        x = rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)
        with dg.no_grad():
            got = compiled(dg.tensor(x)).numpy()
            eager = model(dg.tensor(x)).numpy()
        with torch.no_grad():
            want = reference(torch.tensor(x)).numpy()
        np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        results.append((got, got.copy()))
    for got, kept in results:
        np.testing.assert_array_equal(got, kept)
    for kernel in ("conv_shallow_blocked_hardswish", "depthwise_blocked_relu",
                   "conv1x1_blocked_hardswish"):
        assert re.search(rf"= {kernel}\(.*out=bufs\[", compiled.code), compiled.code
