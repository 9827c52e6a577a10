"""Max pooling by ``kernels/pooling.py``'s loops (``max_pool``: values, and positions for
the backward, eight lanes; ``max_pool_values``: values alone, eight or sixteen lanes)
against torch: planes 1x1 to 57x57, kernels 2 and 3, strides 1-3, padding, dilation 2 and
ceil mode (with and without a last window past the edge), channels not a multiple of
sixteen, NaN and infinities, ties for the positions; the compiled inference path and
``dg.onnx.load`` that run it; and max pooling's gradient."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.kernels import pool_separable, pooling  # noqa: E402
from dualgraph.ops import conv as conv_ops  # noqa: E402
from dualgraph.ops.epilogue import MAX_POOL2D_VALUES  # noqa: E402

F = torch.nn.functional

# (n, c, h, w), kernel, stride, padding, dilation, ceil mode
POOLS = [
    ((1, 1, 1, 1), 2, 2, 1, 1, True), ((3, 3, 5, 7), 2, 1, 1, 1, True),
    ((1, 8, 7, 7), 3, 2, 1, 1, False), ((16, 9, 14, 14), 3, 1, 1, 1, False),
    ((2, 17, 57, 57), 3, 2, 0, 1, True), ((1, 96, 57, 57), 3, 2, 1, 2, False),
    ((1, 3, 14, 14), 2, 2, 0, 1, False), ((3, 5, 29, 40), 3, 3, 1, 1, True),
    ((1, 4, 23, 37), 2, 1, 0, 2, False), ((1, 2, 33, 16), 3, 2, 1, 1, True),
    ((2, 3, 19, 18), 3, 2, 1, 1, True), ((3, 4, 12, 17), 2, 1, 0, 1, False),
    ((1, 19, 56, 56), 3, 2, 0, 1, True), ((2, 20, 35, 34), 3, 2, 1, 1, True),
    ((2, 7, 21, 20), 3, 1, 1, 1, True), ((1, 5, 30, 33), 2, 2, 1, 1, True),
]


def _vectorised(case):
    return pooling.vectorised(case[0][3], case[2])


# (the values loop runs only where the op finds it vectorised; the rest: NumPy's passes)
VECTORISED = [case for case in POOLS if _vectorised(case)]
VALUES = [(case, lanes) for case in VECTORISED for lanes in (8, 16)]


def _pool(x, k, s, p, d, ceil, indices=False, lanes=8):
    """The loop on every plane of ``x`` at once (no size threshold; the values loop, or
    ``pool_separable``'s for the window, only where ``pooling.vectorised``, with vectors
    of ``lanes``)."""
    n, c, h, w = x.shape
    (ho, wo), _ = conv_ops._pool_geometry((h, w), (k, k), (s, s), (p, p), ceil, (d, d))
    out = np.full((n * c, ho * wo), 7.0, np.float32)
    geometry = (h, w, ho, wo, k, k, s, s, d, d, p, p)
    if not indices:
        loop = pool_separable.values_loop(k, s, d)
        loop(0, n * c, x.reshape(n * c, h * w), out, *geometry, lanes)
        return out.reshape(n, c, ho, wo), None
    where = np.full((n * c, ho * wo), -5, np.int64)
    pooling.max_pool(0, n * c, x.reshape(n * c, h * w), out, where, *geometry)
    return out.reshape(n, c, ho, wo), where.reshape(n, c, ho, wo)


def test_cases_include_vectorised_ones_with_padding_dilation_and_ceil_mode():
    for lanes in (8, 16):
        cases = [case for case, n in VALUES if n == lanes]
        assert len(cases) >= 6
        assert {case[1] for case in cases} == {2, 3} and {case[2] for case in cases} == {1, 2}
        assert {case[3] for case in cases} >= {0, 1} and {case[4] for case in cases} \
            >= {1, 2} and {case[5] for case in cases} == {False, True}


@pytest.mark.parametrize("case,lanes", VALUES)
def test_values_match_torch_with_nan_and_infinities(case, lanes):
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[rng.integers(0, x.size, 4)] = np.nan, np.inf, -np.inf, np.nan
    want = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(_pool(x, k, s, p, d, ceil, lanes=lanes)[0], want)


@pytest.mark.parametrize("case,lanes", VALUES)
def test_values_match_torch_without_nan(case, lanes):
    """The plain maxima (no plane pooled again), -inf and ties included."""
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(sum(shape) + 2)
    x = rng.integers(-4, 5, shape).astype(np.float32)
    x.flat[rng.integers(0, x.size, 3)] = -np.inf
    want = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(_pool(x, k, s, p, d, ceil, lanes=lanes)[0], want)


@pytest.mark.parametrize("where", ["inf and -inf", "nan at an edge", "nan inside",
                                   "nan in a padded edge window", "nan in a ceil edge window"])
def test_values_pooled_again_keeping_nan_only_where_needed(where):
    """Without indices a plane is pooled with plain maxima and again, NaN-keeping, where
    its taps summed to NaN: infinities of both signs (no NaN: the same values either way),
    a NaN in the last column (ceil mode), a NaN inside, a NaN only in a window done one by
    one (column 0 under padding 1, the last column where ceil mode's last window sticks
    out) and so in no vector's taps."""
    x = np.random.default_rng(7).standard_normal((1, 3, 21, 23)).astype(np.float32)
    pool = (3, 2, 0, 1, True)
    if where == "inf and -inf":
        x[0, 0, 4, 5], x[0, 0, 9, 9] = np.inf, -np.inf
    elif where == "nan at an edge":
        x[0, 1, 6, 22] = np.nan
    elif where == "nan inside":
        x[0, 2, 10, 11] = np.nan
    elif where == "nan in a padded edge window":
        x[0, 1, 7, 0], pool = np.nan, (3, 2, 1, 1, False)
    else:
        x, pool = x[..., :22], (3, 2, 0, 1, True)
        x[0, 2, 11, 21] = np.nan
    want = F.max_pool2d(torch.tensor(x), *pool[:4], ceil_mode=pool[4]).numpy()
    assert np.isnan(want).any() == (where != "inf and -inf")
    np.testing.assert_array_equal(_pool(x, *pool)[0], want)


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("case", [((1, 1, 5, 40), 3, 2, 1, 1, True),
                                  ((1, 1, 4, 37), 3, 1, 1, 1, False),
                                  ((1, 1, 6, 45), 5, 2, 2, 1, True),
                                  ((1, 1, 5, 50), 3, 1, 1, 3, False),
                                  ((1, 1, 7, 47), 3, 2, 0, 2, True),
                                  ((1, 1, 3, 33), 2, 2, 1, 1, True)])
def test_values_find_a_nan_in_every_column(case, lanes):
    """One plane per input column, a NaN in that column alone (in the middle row, and
    where an infinity of each sign shares the plane, in the first or last row): the values
    loop sees each NaN a window holds (the sums it reads cover every such column: the
    first taps of each vector and all taps of a row's last, every tap with dilation), NaN
    wins in its windows as in torch; the plain maxima elsewhere."""
    (_, _, h, w), k, s, p, d, ceil = case
    rng = np.random.default_rng(w)
    x = np.repeat(rng.standard_normal((1, 1, h, w)).astype(np.float32), 2 * w, axis=1)
    for q in range(w):
        x[0, q, h // 2, q] = np.nan
        x[0, w + q, (h - 1) * (q % 2), q] = np.nan
        x[0, w + q, 0, (q + 1) % w], x[0, w + q, h - 1, (q + 2) % w] = np.inf, -np.inf
    want = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil_mode=ceil).numpy()
    assert _vectorised(case) and np.isnan(want).any()
    np.testing.assert_array_equal(_pool(x, k, s, p, d, ceil, lanes=lanes)[0], want)


@pytest.mark.parametrize("seed", range(6))
def test_values_of_random_windows_match_torch(seed):
    """Windows of unequal sides, strides (the column's 1 or 2), padding, dilation and
    ceil mode drawn at random, on planes of 1-40 rows and 8-70 columns, float64 left to
    NumPy, at both widths: the op's values (the values loop where its rows fit) are
    torch's, NaN and infinities included."""
    rng = np.random.default_rng(seed)
    for _ in range(12):
        k, d = rng.integers(1, 6, 2), rng.integers(1, 3, 2)
        s, p = (rng.integers(1, 4), rng.integers(1, 3)), rng.integers(0, k // 2 + 1)
        h, w = rng.integers(max(1, d[0] * (k[0] - 1) + 1 - 2 * p[0]), 41), rng.integers(8, 71)
        h, w = max(h, 1), max(w, d[1] * (k[1] - 1) + 1)
        x = rng.standard_normal((int(rng.integers(1, 3)), int(rng.integers(1, 20)), h, w))
        x = x.astype(np.float32)
        x.flat[rng.integers(0, x.size, 3)] = np.nan, np.inf, -np.inf
        pool = tuple(map(tuple, (k, s, p, d))) + (bool(rng.integers(0, 2)),)
        want = F.max_pool2d(torch.tensor(x), *pool[:4], ceil_mode=pool[4]).numpy()
        for lanes in (8, 16):
            if pooling.vectorised(w, s[1]):
                n, c = x.shape[:2]
                ho, wo = want.shape[2:]
                out = np.full((n * c, ho * wo), 7.0, np.float32)
                loop = pool_separable.values_loop(k[1], s[1], d[1])
                loop(0, n * c, x.reshape(n * c, h * w), out, h, w, ho, wo, *k, *s, *d, *p,
                     lanes)
                np.testing.assert_array_equal(out.reshape(want.shape), want, err_msg=pool)
        got = MAX_POOL2D_VALUES.kernel(x, kernel_size=pool[0], stride=pool[1], padding=pool[2],
                                       dilation=pool[3], ceil_mode=pool[4])
        np.testing.assert_array_equal(got, want, err_msg=str(pool))
        got = MAX_POOL2D_VALUES.kernel(x.astype(np.float64), kernel_size=pool[0],
                                       stride=pool[1], padding=pool[2], dilation=pool[3],
                                       ceil_mode=pool[4])
        np.testing.assert_array_equal(got, want.astype(np.float64), err_msg=str(pool))


# (rows, columns): around a chunk of eight and sixteen columns, outputs a vector and one over
SEPARABLE_PLANES = [(9, 8), (5, 15), (7, 16), (6, 17), (4, 31), (11, 33), (3, 47), (8, 64)]


@pytest.mark.parametrize("kh,kw,sw,dh", [(3, 3, 2, 1), (3, 3, 1, 1), (2, 2, 2, 1),
                                         (2, 2, 1, 1), (1, 1, 1, 1), (1, 1, 2, 1),
                                         (3, 2, 1, 2), (4, 3, 2, 1), (2, 3, 1, 1)])
@pytest.mark.parametrize("lanes", [8, 16])
def test_separable_windows_match_torch_at_every_edge(kh, kw, sw, dh, lanes):
    """``pool_separable``'s loop (the windows ``values_loop`` gives it: at most three
    columns at column stride 1 or 2) on rows of 8-64 columns, batch 1 and 3, with and
    without padding, both ceil modes and row strides 1-3: torch's values, a NaN in the
    last column or row (which only the chunks past the middle read), and infinities."""
    assert pool_separable.values_loop(kw, sw, 1) is pool_separable.max_pool_separable
    rng = np.random.default_rng(kh * 100 + kw * 10 + sw + lanes)
    for h, w in SEPARABLE_PLANES:
        for n, sh, p, ceil in ((1, 2, 0, True), (3, 1, kw // 2, False), (1, 3, kh // 2, True),
                               (3, 2, min(kh, kw) // 2, False)):
            if h < dh * (kh - 1) + 1 - 2 * p:
                continue
            x = rng.standard_normal((n, 2, h, w)).astype(np.float32)
            x[0, 0, rng.integers(0, h), w - 1] = np.nan
            x[-1, 1, h - 1, rng.integers(0, w)] = np.nan
            x[0, 1].flat[rng.integers(0, h * w, 2)] = np.inf, -np.inf
            pool = ((kh, kw), (sh, sw), (min(p, kh // 2), min(p, kw // 2)), (dh, 1))
            want = F.max_pool2d(torch.tensor(x), *pool, ceil_mode=ceil).numpy()
            ho, wo = want.shape[2:]
            out = np.full((n * 2, ho * wo), 7.0, np.float32)
            geometry = (*pool[0], *pool[1], *pool[3], *pool[2])
            pool_separable.max_pool_separable(0, n * 2, x.reshape(n * 2, h * w), out, h, w, ho,
                                              wo, *geometry, lanes)
            np.testing.assert_array_equal(out.reshape(want.shape), want,
                                          err_msg=f"{(h, w)} {pool} {ceil}")


def test_windows_the_separable_loop_leaves_go_to_the_values_loop():
    for kw, sw, dw in ((4, 1, 1), (5, 2, 1), (3, 2, 2), (2, 1, 3)):
        assert pool_separable.values_loop(kw, sw, dw) is pooling.max_pool_values
    assert not pool_separable.takes(3, 3, 1)


@pytest.mark.parametrize("case", POOLS)
def test_indices_match_torch(case):
    """Values and flat positions (no NaN: the op checks; ties in a window: the first)."""
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(sum(shape) + 1)
    x = rng.integers(-3, 4, shape).astype(np.float32)     # (many ties)
    x.flat[rng.integers(0, x.size, 2)] = np.inf, -np.inf
    want, want_at = F.max_pool2d(torch.tensor(x), k, s, p, d, ceil_mode=ceil,
                                 return_indices=True)
    got, got_at = _pool(x, k, s, p, d, ceil, indices=True)
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(got_at, want_at.numpy())


@pytest.mark.parametrize("shape,k,s,p", [((2, 16, 30, 31), 3, 2, 1), ((1, 21, 20, 20), 3, 1, 1),
                                         ((3, 9, 33, 34), 2, 2, 0), ((2, 20, 14, 14), 3, 1, 1),
                                         ((1, 17, 28, 28), 3, 2, 0), ((1, 24, 14, 14), 3, 2, 0)])
def test_op_takes_the_loop_from_its_size_on(shape, k, s, p):
    """Each of the op's loops (the values loop at sixteen or eight lanes, planes in the
    lanes on 7x7 outputs), NaN included, and into ``out`` where given."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x[0, 1, 3, 4] = np.nan
    got = conv_ops.max_pool_values(x, (k, k), (s, s), (p, p), (1, 1), True)
    want = F.max_pool2d(torch.tensor(x), k, s, p, 1, ceil_mode=True).numpy()
    np.testing.assert_array_equal(got, want)
    out = np.full(want.shape, 5.0, np.float32)
    got = MAX_POOL2D_VALUES.kernel(x, kernel_size=(k, k), stride=(s, s), padding=(p, p),
                                   dilation=(1, 1), ceil_mode=True, out=out)
    assert np.shares_memory(got, out)
    np.testing.assert_array_equal(out, want)
    assert conv_ops.max_pool_values(x.astype(np.float64), (3, 3), (2, 2), (1, 1), (1, 1),
                                    True) is None


class Pools(torch.nn.Module):
    """Two pools as in a small CNN: a padded 3x3/2 pool and a 3x3/2 ceil-mode one."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.first = torch.nn.MaxPool2d(3, 2, padding=1)
        self.second = torch.nn.MaxPool2d(3, 2, ceil_mode=True)

    def forward(self, x):
        return self.second(self.first(self.conv(x).relu()))


def test_compiled_and_onnx_import_match_torch(tmp_path):
    reference = Pools().eval()
    model = dg.nn.Sequential(dg.nn.Conv2d(3, 16, 3, padding=1), dg.nn.ReLU(),
                             dg.nn.MaxPool2d(3, 2, padding=1),
                             dg.nn.MaxPool2d(3, 2, ceil_mode=True))
    model[0].weight.data = dg.tensor(reference.conv.weight.detach().numpy())
    model[0].bias.data = dg.tensor(reference.conv.bias.detach().numpy())
    x = np.random.default_rng(1).standard_normal((2, 3, 45, 47)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    with dg.no_grad():
        compiled_fn = dg.compile(model.eval())
        compiled = compiled_fn(dg.tensor(x)).numpy()
        again = compiled_fn(dg.tensor(-x)).numpy()    # (the first pool's buffer reused)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(again, reference(torch.tensor(-x)).numpy(), rtol=1e-5,
                                   atol=1e-5)
    assert "max_pool2d_values" in str(compiled_fn.optimized_graph)
    path = str(tmp_path / "pools.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    loaded = dg.onnx.load(path)
    np.testing.assert_allclose(np.asarray(loaded(dg.tensor(x)).numpy()), want, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("case", [POOLS[3], POOLS[4], POOLS[7]])
def test_gradient_matches_torch(case):
    shape, k, s, p, d, ceil = case
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    xs, xt = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y = dg.nn.functional.max_pool2d(xs, k, s, p, d, ceil_mode=ceil)
    yt = F.max_pool2d(xt, k, s, p, d, ceil_mode=ceil)
    g = np.cos(np.arange(yt.numel(), dtype=np.float32)).reshape(tuple(yt.shape))
    y.backward(dg.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-6)
