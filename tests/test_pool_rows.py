"""``kernels/pooling.py``'s separable loops on rows of any width (average pooling,
``avg_pool`` and ``avg_pool_backward``; max pooling's values on rows the eight-lane loop
leaves, ``max_pool_rows``) and ``kernels/pool_lanes.py``'s loops with eight small planes
in the lanes, against torch: odd planes, padding, ceil mode, stride other than the
kernel, count_include_pad both ways, divisor_override, float32 and float64, NaN for the
maxima; nothing written past the outputs; the same bits on one and two threads; compiled
inference and a compiled training step equal to eager."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph import kernels  # noqa: E402
from dualgraph.kernels import pool_lanes, pooling  # noqa: E402
from dualgraph.kernels.threads import run_rows  # noqa: E402
from dualgraph.ops import conv as conv_ops  # noqa: E402

F = torch.nn.functional

# (n, c, h, w), kernel, stride, padding, ceil mode, count_include_pad, divisor_override
AVERAGES = [
    ((2, 3, 7, 9), 3, 2, 1, True, True, None),
    ((2, 3, 7, 9), 3, 2, 1, True, False, None),
    ((1, 4, 13, 11), (3, 2), (2, 1), (1, 1), False, False, None),
    ((3, 2, 10, 10), 2, 2, 0, False, True, None),
    ((1, 5, 9, 17), 3, 1, 1, False, False, 5),
    ((2, 3, 5, 6), 4, 3, 2, True, True, 7),
    ((2, 3, 5, 6), 4, 3, 2, True, False, None),
    ((1, 2, 1, 1), 1, 1, 0, False, True, None),
    ((2, 7, 28, 29), 2, 2, 0, True, True, None),
    ((1, 3, 15, 8), (5, 3), (3, 2), (2, 1), True, False, 4),
    # eight planes or more, rows of fewer than 16 outputs: the lanes (float32)
    ((3, 5, 14, 14), 2, 2, 0, False, True, None),
    ((1, 11, 9, 7), 3, 1, 1, True, False, None),
    ((2, 9, 13, 10), (3, 2), (2, 3), (1, 1), True, True, 5),
    ((1, 16, 8, 3), 3, 2, 1, False, True, None),
]


def _torch_avg(x, case, g):
    _, k, s, p, ceil, include, divisor = case
    xt = torch.tensor(x, requires_grad=True)
    yt = F.avg_pool2d(xt, k, s, p, ceil, include, divisor)
    yt.backward(torch.tensor(g))
    return yt.detach().numpy(), xt.grad.numpy()


def _out_shape(case):
    shape, k, s, p, ceil, include, divisor = case
    return tuple(F.avg_pool2d(torch.zeros(shape), k, s, p, ceil, include, divisor).shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", AVERAGES)
def test_average_and_gradient_match_torch(case, dtype):
    rng = np.random.default_rng(sum(case[0]))
    x = rng.standard_normal(case[0]).astype(dtype)
    g = rng.standard_normal(_out_shape(case)).astype(dtype)
    _, k, s, p, ceil, include, divisor = case
    xs = dg.tensor(x, requires_grad=True)
    y = dg.nn.functional.avg_pool2d(xs, k, s, p, ceil, include, divisor)
    y.backward(dg.tensor(g))
    want, want_grad = _torch_avg(x, case, g)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(xs.grad.numpy(), want_grad, rtol=tol, atol=tol)
    assert y.dtype == xs.grad.dtype == dg.tensor(x).dtype


def test_ops_run_the_loops_and_numpy_agrees(monkeypatch):
    """The op's kernels call the loops (forward and backward), and with Numba off NumPy's
    passes give the same values."""
    case = AVERAGES[1]
    x = np.random.default_rng(3).standard_normal(case[0]).astype(np.float32)
    g = np.random.default_rng(4).standard_normal(_out_shape(case)).astype(np.float32)
    _, k, s, p, ceil, include, divisor = case
    pool = dict(kernel_size=(k, k), stride=(s, s), padding=(p, p), ceil_mode=ceil,
                count_include_pad=include, divisor_override=divisor)
    calls, entry = [], kernels.Loop.entry
    monkeypatch.setattr(kernels.Loop, "entry",
                        lambda self, *args: calls.append(self.__name__) or entry(self, *args))
    fast = (conv_ops.AVG_POOL2D.kernel(x, **pool),
            conv_ops.AVG_POOL2D_BACKWARD.kernel(g, input_size=x.shape[-2:], **pool))
    assert calls == ["avg_pool_rows_unrolled", "avg_pool_backward"]
    monkeypatch.setenv("DUALGRAPH_NUMBA", "0")
    slow = (conv_ops.AVG_POOL2D.kernel(x, **pool),
            conv_ops.AVG_POOL2D_BACKWARD.kernel(g, input_size=x.shape[-2:], **pool))
    for got, want in zip(fast, slow):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _geometry(shape, k, s, p, ceil, d=1):
    (ho, wo), _ = conv_ops._pool_geometry(shape[-2:], (k, k), (s, s), (p, p), ceil, (d, d))
    return ho, wo


def _guarded(rows, width, dtype):
    """A ``(rows, width)`` array inside a buffer whose last eight elements hold a mark:
    whatever a loop writes past its output lands there."""
    buffer = np.full(rows * width + 8, 1234.5, dtype)
    return buffer, buffer[:rows * width].reshape(rows, width)


@pytest.mark.parametrize("shape,k,s,p,ceil", [((3, 7, 9), 3, 2, 1, True),
                                              ((5, 1, 13), 2, 2, 1, True),
                                              ((2, 11, 5), 3, 1, 1, False)])
def test_nothing_written_past_the_outputs(shape, k, s, p, ceil):
    c, h, w = shape
    ho, wo = _geometry(shape, k, s, p, ceil)
    x = np.random.default_rng(5).standard_normal((c, h * w)).astype(np.float32)
    div = pooling.avg_divisors(3.0, ho, wo).astype(np.float32)
    geometry = (h, w, ho, wo, k, k, s, s)
    buffer, out = _guarded(c, ho * wo, np.float32)
    pooling.avg_pool(0, c, x, out, div, *geometry, p, p)
    assert (buffer[-8:] == 1234.5).all() and np.isfinite(out).all()
    buffer, dx = _guarded(c, h * w, np.float32)
    pooling.avg_pool_backward(0, c, out.copy(), div, dx, *geometry, p, p)
    assert (buffer[-8:] == 1234.5).all() and np.isfinite(dx).all()
    buffer, best = _guarded(c, ho * wo, np.float32)
    pooling.max_pool_rows(0, c, x, best, *geometry, 1, 1, p, p)
    assert (buffer[-8:] == 1234.5).all() and np.isfinite(best).all()
    planes = np.concatenate([x] * 4).reshape(-1)      # (eight planes at least)
    for loop, extra in ((pool_lanes.avg_pool_lanes, (div,)), (pool_lanes.max_pool_lanes,
                                                              (1, 1, p, p))):
        buffer, out = _guarded(1, 4 * c * ho * wo, np.float32)
        args = (geometry + (p, p) + extra) if loop is pool_lanes.avg_pool_lanes else \
            (geometry + extra)
        for lanes in (8, 16)[:1 + (4 * c >= 16)]:     # (a group's planes at least)
            loop(0, -(-4 * c // lanes), planes, out[0], 4 * c, lanes, *args)
        assert (buffer[-8:] == 1234.5).all() and np.isfinite(out).all()


def test_one_and_two_threads_give_the_same_bits():
    """The planes split among threads: the same results on one thread and on two."""
    c, h, w, k, s, p = 37, 9, 11, 3, 2, 1
    ho, wo = _geometry((c, h, w), k, s, p, True)
    x = np.random.default_rng(6).standard_normal((c, h * w)).astype(np.float32)
    div = pooling.avg_divisors(np.random.default_rng(7).uniform(1, 9, (ho, wo)), ho,
                               wo).astype(np.float32)
    geometry = (h, w, ho, wo, k, k, s, s)
    runs = []
    for threads in (1, 2):
        out, dx = np.empty((c, ho * wo), np.float32), np.empty((c, h * w), np.float32)
        best = np.empty((c, ho * wo), np.float32)
        run_rows(pooling.avg_pool, c, x, out, div, *geometry, p, p, threads=threads)
        run_rows(pooling.avg_pool_backward, c, out, div, dx, *geometry, p, p, threads=threads)
        run_rows(pooling.max_pool_rows, c, x, best, *geometry, 1, 1, p, p, threads=threads)
        lanes = [np.empty(c * ho * wo, np.float32) for _ in range(4)]
        for k, width in enumerate((8, 16)):
            groups = -(-c // width)
            run_rows(pool_lanes.avg_pool_lanes, groups, x.reshape(-1), lanes[2 * k], c, width,
                     *geometry, p, p, div, threads=threads)
            run_rows(pool_lanes.max_pool_lanes, groups, x.reshape(-1), lanes[2 * k + 1], c,
                     width, *geometry, 1, 1, p, p, threads=threads)
        runs.append((out, dx, best, *lanes))
    for one, two in zip(*runs):
        np.testing.assert_array_equal(one, two)


# (n, c, h, w), kernel, stride, padding, dilation, ceil mode, the loop: input rows of eight
# or more at column stride 1 or 2 by the values loop along the rows, or pool_separable's for
# windows of at most three columns without column dilation (output rows of fewer than
# eight, planes of one row, windows whose dilated rows all miss a one-row plane),
# narrower rows by the lanes (eight planes at least, output rows of fewer than sixteen),
# the rest (strides over 2, few planes) by the rows loop
SHORT_ROWS = [
    ((2, 40, 14, 14), 3, 2, 0, 1, True, "max_pool_separable"),
    ((2, 20, 14, 14), 3, 1, 1, 1, True, "max_pool_separable"),
    ((1, 24, 17, 17), 3, 2, 0, 1, True, "max_pool_separable"),
    ((3, 19, 20, 20), 2, 2, 0, 1, False, "max_pool_separable"),
    ((2, 9, 19, 13), 3, 1, 1, 2, False, "max_pool_values"),
    ((1, 17, 24, 24), 3, 2, 0, 1, True, "max_pool_separable"),
    ((4, 40, 1, 30), 3, 1, 1, 1, False, "max_pool_separable"),
    ((2, 64, 1, 40), (2, 3), 1, 1, (2, 1), False, "max_pool_separable"),
    ((2, 20, 12, 12), 3, 2, 1, 1, True, "max_pool_separable"),
    ((3, 19, 13, 13), 2, 2, 0, 1, False, "max_pool_separable"),
    ((4, 16, 19, 7), 3, 1, 1, 2, False, "max_pool_lanes"),
    ((2, 64, 7, 7), 3, 1, 1, 1, False, "max_pool_lanes"),
    ((3, 40, 6, 6), 3, 1, 1, 1, False, "max_pool_lanes"),
    ((4, 30, 9, 5), 2, 2, 0, 1, True, "max_pool_lanes"),
    ((3, 30, 9, 13), 2, 2, 1, 1, True, "max_pool_separable"),
    ((1, 50, 11, 12), 3, 3, 1, 2, False, "max_pool_lanes"),
    ((2, 40, 12, 5), (3, 2), (1, 2), (1, 1), (2, 1), True, "max_pool_lanes"),
    ((1, 4, 40, 41), 3, 3, 1, 1, True, "max_pool_rows"),
    ((1, 3, 33, 50), (2, 3), (2, 3), (1, 0), (1, 2), False, "max_pool_rows"),
]


@pytest.mark.parametrize("case", SHORT_ROWS)
def test_max_values_on_short_rows_match_torch_with_nan(case, monkeypatch):
    shape, k, s, p, d, ceil, loop = case
    pair = lambda v: (v, v) if type(v) is int else v   # noqa: E731
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[rng.integers(0, x.size, 4)] = np.nan, np.inf, -np.inf, np.nan
    calls, entry = [], kernels.Loop.entry
    monkeypatch.setattr(kernels.Loop, "entry",
                        lambda self, *args: calls.append(self.__name__) or entry(self, *args))
    got = conv_ops.max_pool_values(x, pair(k), pair(s), pair(p), pair(d), ceil)
    assert calls == [loop]
    want = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("case", [c for c in SHORT_ROWS if c[-1] == "max_pool_lanes"])
def test_lanes_at_both_widths_match_torch(case, width, monkeypatch):
    """``pool_lanes`` with eight and with sixteen planes a group (the last group
    overlapping the one before where the planes are no multiple): max pooling exactly
    torch's with NaN and infinities, average pooling (padding counted and not) within
    rounding of torch's and exactly the same bits at both widths."""
    shape, k, s, p, d, ceil, _ = case
    pair = lambda v: (v, v) if type(v) is int else v   # noqa: E731
    rng = np.random.default_rng(sum(shape) + width)
    x = rng.standard_normal(shape).astype(np.float32)
    monkeypatch.setattr(kernels.pool_lanes, "lanes", lambda planes: width)
    got = conv_ops.max_pool_values(x, pair(k), pair(s), pair(p), pair(d), ceil)
    want = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(got, want)
    x.flat[rng.integers(0, x.size, 3)] = -np.inf, np.nan, np.inf
    x[-1, -1] = np.nan                  # (the last group, which overlaps)
    got = conv_ops.max_pool_values(x, pair(k), pair(s), pair(p), pair(d), ceil)
    want = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(got, want)
    if d == 1 or d == (1, 1):
        x = rng.standard_normal(shape).astype(np.float32)
        for count in (True, False):
            pool = dict(kernel_size=pair(k), stride=pair(s), padding=pair(p), ceil_mode=ceil,
                        count_include_pad=count, divisor_override=None)
            got = conv_ops.AVG_POOL2D.kernel(x, **pool)
            want = F.avg_pool2d(torch.tensor(x), k, s, p, ceil, count).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
            monkeypatch.setattr(kernels.pool_lanes, "lanes", lambda planes: 24 - width)
            np.testing.assert_array_equal(conv_ops.AVG_POOL2D.kernel(x, **pool), got)
            monkeypatch.setattr(kernels.pool_lanes, "lanes", lambda planes: width)


def _small_cnn(lib):
    """A DenseNet-like transition (an average pool) and an Inception-like branch pool
    (a max pool on a 7x7 plane) after a conv."""
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                         nn.AvgPool2d(2, 2), nn.MaxPool2d(3, 2, ceil_mode=True),
                         nn.AvgPool2d(3, 1, padding=1, count_include_pad=False),
                         nn.MaxPool2d(3, 1, padding=1))


def _same_weights(model, reference):
    model[0].weight.data = dg.tensor(reference[0].weight.detach().numpy())
    model[0].bias.data = dg.tensor(reference[0].bias.detach().numpy())


def test_compiled_inference_matches_eager_and_torch():
    torch.manual_seed(0)
    reference = _small_cnn(torch).eval()
    model = _small_cnn(dg).eval()
    _same_weights(model, reference)
    x = np.random.default_rng(8).standard_normal((4, 3, 27, 29)).astype(np.float32)
    with dg.no_grad():
        eager = model(dg.tensor(x)).numpy()
        compiled_fn = dg.compile(model)
        compiled = compiled_fn(dg.tensor(x)).numpy()
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    np.testing.assert_array_equal(compiled, eager)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)
    graph = str(compiled_fn.optimized_graph)
    assert "max_pool2d_values" in graph and "avg_pool2d" in graph


class _PoolBranch:
    """An Inception-like block on 14x14 planes: a conv whose output both a 3x3/1 max pool
    (a plane the lanes take from the values loop) and a 1x1 conv read, the two
    concatenated, then a 3x3/2 ceil-mode pool."""

    def __new__(cls, lib):
        nn = lib.nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 20, 3, padding=1)
                self.side = nn.Conv2d(20, 12, 1)
                self.pool = nn.MaxPool2d(3, 1, padding=1)
                self.down = nn.MaxPool2d(3, 2, ceil_mode=True)

            def forward(self, x):
                y = self.conv(x).relu()
                return self.down(lib.cat([self.pool(y), self.side(y)], 1))
        return Block()


def test_compiled_branch_pool_on_small_planes_matches_eager_and_torch():
    """The pre-pool tensor read by another branch too, batch 2, NaN and -inf in the
    input (NaN spreads through the conv and wins in the pools, as in torch; NaN where
    torch has NaN: ``assert_allclose``'s ``equal_nan``)."""
    torch.manual_seed(2)
    reference = _PoolBranch(torch).eval()
    model = _PoolBranch(dg).eval()
    model.load_state_dict({k: dg.tensor(v.detach().numpy())
                           for k, v in reference.state_dict().items()})
    x = np.random.default_rng(10).standard_normal((2, 3, 14, 14)).astype(np.float32)
    x[1, 0, 4, 9], x[0, 2, 0, 0] = np.nan, -np.inf
    with dg.no_grad():
        eager = model(dg.tensor(x)).numpy()
        compiled = dg.compile(model)(dg.tensor(x)).numpy()
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_allclose(compiled, eager, rtol=1e-6, atol=1e-6)   # (the convs' order)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)


def test_compiled_training_step_matches_eager():
    torch.manual_seed(1)
    reference = _small_cnn(torch)
    x = np.random.default_rng(9).standard_normal((2, 3, 19, 21)).astype(np.float32)

    def step(model, data):
        model.zero_grad()
        loss = (model(data) ** 2).sum()
        loss.backward()
        return loss, model[0].weight.grad

    grads = []
    for compiled in (False, True):
        model = _small_cnn(dg)
        _same_weights(model, reference)
        run = dg.compile(step) if compiled else step
        loss, grad = run(model, dg.tensor(x))
        grads.append((loss.detach().numpy(), np.array(grad.numpy())))
    xt = torch.tensor(x)
    (reference(xt) ** 2).sum().backward()
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-6)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[0][1], reference[0].weight.grad.numpy(), rtol=1e-4,
                               atol=1e-5)
