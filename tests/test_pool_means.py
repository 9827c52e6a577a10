"""``kernels/pool_means.py``: float32 average pooling straight from the input rows, against
torch through the op (odd planes, batch 1 and 3, padding counted in the divisor or not,
ceil mode, divisor_override, rectangular windows and strides, output rows of fewer than
eight, of 9-15 (one wide vector, its first lanes stored) and of more; NaN and infinities
carried), which loop the op picks (this one, ``pool_lanes`` on narrow rows, ``pooling``'s
for other strides and dtypes); nothing written past the outputs at either vector width;
the same bits on one and two threads; a compiled average pool writing the memory plan's
buffer (``out=``) equal to eager and torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph import kernels  # noqa: E402
from dualgraph.kernels import pool_means, pooling  # noqa: E402
from dualgraph.kernels.simd import LANES, WIDE  # noqa: E402
from dualgraph.kernels.threads import run_rows  # noqa: E402
from dualgraph.ops import conv as conv_ops  # noqa: E402

F = torch.nn.functional

# (n, c, h, w), kernel, stride, padding, ceil mode, count_include_pad, divisor_override,
# the loop the op runs
CASES = [
    ((1, 5, 56, 56), 2, 2, 0, False, True, None, "avg_pool_rows_unrolled"),
    ((3, 4, 29, 31), 2, 2, 0, True, True, None, "avg_pool_rows_unrolled"),
    ((1, 3, 57, 57), 3, 2, 1, True, True, None, "avg_pool_rows_unrolled"),
    ((3, 2, 25, 27), 3, 2, 1, True, False, None, "avg_pool_rows_unrolled"),
    ((1, 6, 33, 40), 3, 1, 1, False, True, None, "avg_pool_rows_unrolled"),
    ((2, 3, 19, 24), 3, 1, 1, True, False, 5, "avg_pool_rows_unrolled"),
    ((1, 4, 9, 17), 3, 2, 0, True, True, None, "avg_pool_rows_unrolled"),    # rows of 8
    ((3, 2, 11, 9), 3, 1, 1, False, False, None, "avg_pool_rows_unrolled"),  # rows of 9
    ((1, 3, 20, 12), 2, 2, 1, True, True, None, "avg_pool_rows_unrolled"),   # rows of 7
    ((1, 2, 30, 30), 4, 2, 2, True, True, None, "avg_pool_rows"),
    ((3, 3, 27, 26), (3, 2), (2, 1), (1, 1), True, False, None, "avg_pool_rows"),
    ((1, 4, 13, 41), (2, 5), (1, 2), (1, 2), False, True, 7, "avg_pool_rows"),
    ((1, 2, 1, 40), (1, 4), 1, (0, 1), False, True, None, "avg_pool_rows"),
    ((1, 40, 28, 28), 2, 2, 0, False, True, None, "avg_pool_rows_unrolled"),
    # narrow rows, eight planes and more: the lanes; stride 3 and few planes: pooling's rows
    ((1, 40, 14, 14), 2, 2, 0, False, True, None, "avg_pool_lanes"),
    ((2, 9, 12, 12), 3, 1, 1, False, True, None, "avg_pool_lanes"),
    ((1, 3, 24, 25), 3, 3, 1, True, True, None, "avg_pool"),
]


def _pair(v):
    return (v, v) if type(v) is int else tuple(v)


def _pool(case):
    _, k, s, p, ceil, include, divisor, _ = case
    return dict(kernel_size=_pair(k), stride=_pair(s), padding=_pair(p), ceil_mode=ceil,
                count_include_pad=include, divisor_override=divisor)


@pytest.mark.parametrize("case", CASES)
def test_the_op_matches_torch_and_runs_the_loop(case, monkeypatch):
    rng = np.random.default_rng(sum(case[0]))
    x = rng.standard_normal(case[0]).astype(np.float32)
    x.flat[rng.integers(0, x.size, 3)] = np.nan, np.inf, -np.inf
    pool = _pool(case)
    calls, entry = [], kernels.Loop.entry
    monkeypatch.setattr(kernels.Loop, "entry",
                        lambda self, *args: calls.append(self.__name__) or entry(self, *args))
    got = conv_ops.AVG_POOL2D.kernel(x, **pool)
    assert set(calls) == {case[-1]}
    want = F.avg_pool2d(torch.tensor(x), **pool).numpy()
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)   # (NaN where torch's)
    out = np.full(want.size, 7.0, np.float32)
    assert conv_ops.AVG_POOL2D.kernel(x, **pool, out=out).base is out
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("lanes", (LANES, WIDE))
@pytest.mark.parametrize("shape,k,s,p,ceil", [((3, 9, 40), 3, 2, 1, True),
                                              ((2, 5, 13), 2, 2, 1, True),
                                              ((2, 11, 8), 3, 1, 1, False),
                                              ((4, 6, 30), 4, 1, 2, True)])
def test_nothing_written_past_the_outputs(shape, k, s, p, ceil, lanes):
    c, h, w = shape
    (ho, wo), _ = conv_ops._pool_geometry((h, w), (k, k), (s, s), (p, p), ceil)
    if lanes == WIDE and wo <= LANES:
        lanes = LANES     # (the op runs rows of at most eight outputs at eight lanes)
    x = np.random.default_rng(5).standard_normal((c, h * w)).astype(np.float32)
    div = pooling.avg_divisors(3.0, ho, wo).astype(np.float32)
    buffer = np.full(c * ho * wo + 16, 1234.5, np.float32)
    out = buffer[:c * ho * wo].reshape(c, ho * wo)
    pool_means.rows_loop(k, s)(0, c, x, out, div, h, w, ho, wo, k, k, s, s, p, p, lanes)
    assert (buffer[-16:] == 1234.5).all() and np.isfinite(out).all()
    want = F.avg_pool2d(torch.tensor(x.reshape(1, c, h, w)), k, s, p, ceil,
                        divisor_override=3).numpy()
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-6, atol=1e-6)


def test_one_and_two_threads_give_the_same_bits():
    c, h, w, k, s, p = 37, 19, 23, 3, 2, 1
    (ho, wo), _ = conv_ops._pool_geometry((h, w), (k, k), (s, s), (p, p), True)
    x = np.random.default_rng(6).standard_normal((c, h * w)).astype(np.float32)
    div = pooling.avg_divisors(np.random.default_rng(7).uniform(1, 9, (ho, wo)), ho,
                               wo).astype(np.float32)
    runs = []
    for threads in (1, 2):
        out = np.empty((c, ho * wo), np.float32)
        run_rows(pool_means.avg_pool_rows_unrolled, c, x, out, div, h, w, ho, wo, k, k, s, s,
                 p, p, pooling.values_lanes(wo), threads=threads)
        runs.append(out)
    np.testing.assert_array_equal(*runs)


def test_a_compiled_average_pool_equals_eager_and_torch():
    """Compiled, the pool fills its planned buffer (``fills_out``), called twice."""
    x = np.random.default_rng(8).standard_normal((3, 6, 23, 25)).astype(np.float32)

    def f(lib, x):
        h = lib.nn.functional.avg_pool2d(x * 2, 3, 2, 1, ceil_mode=True,
                                         count_include_pad=False)
        return lib.nn.functional.avg_pool2d(h.relu(), 2, 2) + 1

    want = f(torch, torch.tensor(x)).numpy()
    compiled = dg.compile(lambda x: f(dg, x))
    eager = f(dg, dg.tensor(x)).numpy()
    for _ in range(2):
        got = compiled(dg.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)
