"""Pooling fitted to a compiled node's static shape once (``ops.conv.fitted_pool``:
``max_pool2d_values``' ``specialise`` as ``max_pool_fitted``, ``avg_pool2d``'s as
``avg_pool_fitted``): the compiled function runs the loop the eager kernel chooses
(``_max_values_plan``, ``_avg_plan``) through an entry kept across calls, so it gives
eager's bits and torch's values call after call, with its output buffers reused and new
inputs each call, on every loop the plans choose (rows of eight or more, planes in the
lanes, the plain rows loop; average pooling's rows, lanes and separable loops), odd
planes, batch 1 and 3, a 3-D input, ceil mode, padding, dilation, count_include_pad and
divisor_override, NaN and infinities in the input (NaN wins in max pooling, as in torch),
and on two threads."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402

# input shape, kernel, stride, padding, dilation, ceil mode
MAX_CASES = [
    ((1, 24, 14, 14), 3, 1, 1, 1, True),      # rows of eight or more: pooling.max_pool_values
    ((3, 19, 27, 27), 3, 2, 0, 1, True),      # the same, odd planes, batch 3
    ((1, 96, 7, 7), 3, 1, 1, 1, True),        # small planes: pool_lanes
    ((3, 97, 9, 5), 2, 2, 1, 1, True),        # pool_lanes, the last group overlapping
    ((2, 6, 20, 20), 3, 3, 1, 1, False),      # stride 3: pooling.max_pool_rows
    ((2, 9, 19, 13), 3, 1, 1, 2, False),      # dilation
    ((12, 30, 30), 2, 2, 0, 1, False),        # a 3-D input
]
# input shape, kernel, stride, padding, ceil mode, count_include_pad, divisor_override
AVG_CASES = [
    ((1, 32, 28, 28), 2, 2, 0, False, True, None),   # pool_means' rows (unrolled 2x2/2)
    ((3, 20, 27, 27), 3, 2, 1, True, False, None),   # pool_means' rows, ceil, padding
    ((1, 40, 14, 14), 2, 2, 0, False, True, None),   # small planes: pool_lanes
    ((3, 9, 12, 12), 3, 1, 1, False, False, None),   # pool_lanes, padding not counted
    ((2, 6, 17, 17), 3, 3, 1, True, True, 5),        # stride 3: pooling.avg_pool, override
]


def _max(lib, k, s, p, d, ceil):
    return lambda x: lib.nn.functional.max_pool2d(x, k, s, p, d, ceil_mode=ceil)


def _avg(lib, k, s, p, ceil, counted, override):
    return lambda x: lib.nn.functional.avg_pool2d(x, k, s, p, ceil, counted, override)


def _inputs(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[seed], flat[-1 - seed], flat[flat.size // 2] = np.nan, np.inf, -np.inf
    return x


def _check_fitted(f, reference, shape, name, exact):
    compiled = dg.compile(f)
    outs = []
    for seed in range(3):
        x = _inputs(shape, seed)
        with dg.no_grad():
            got = compiled(dg.tensor(x)).numpy().copy()
            want = f(dg.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want)
        torch_out = reference(torch.tensor(x)).numpy()
        if exact:
            np.testing.assert_array_equal(got, torch_out)
        else:
            np.testing.assert_allclose(got, torch_out, rtol=1e-6, atol=1e-6)
        outs.append(got)
    assert not np.array_equal(outs[0], outs[1])   # (each call read its own input)
    assert f"{name}(" in compiled.code, compiled.code


@pytest.mark.parametrize("case", MAX_CASES)
def test_fitted_max_pool_gives_eager_bits_and_torch_values(case):
    shape, *pool = case
    with dg.no_grad():   # (the indices unread: max_pool2d_values)
        _check_fitted(_max(dg, *pool), _max(torch, *pool), shape, "max_pool_fitted", True)


@pytest.mark.parametrize("case", AVG_CASES)
def test_fitted_avg_pool_gives_eager_bits_and_torch_values(case):
    shape, *pool = case
    _check_fitted(_avg(dg, *pool), _avg(torch, *pool), shape, "avg_pool_fitted", False)


def test_fitted_pools_on_two_threads():
    """Inputs past ``kernels.PARALLEL_MIN`` elements: the planes shared among two
    threads (``run_rows``), the same bits as eager."""
    before = dg.get_num_threads()
    dg.set_num_threads(2)
    try:
        with dg.no_grad():
            _check_fitted(_max(dg, 3, 2, 1, 1, False), _max(torch, 3, 2, 1, 1, False),
                          (3, 64, 75, 75), "max_pool_fitted", True)
        _check_fitted(_avg(dg, 2, 2, 0, True, True, None), _avg(torch, 2, 2, 0, True, True, None),
                      (3, 64, 75, 75), "avg_pool_fitted", False)
    finally:
        dg.set_num_threads(before)


def test_global_average_and_float64_keep_the_kernel():
    """The whole plane's mean and float64 inputs are not fitted (the op's kernel runs)."""
    x = np.random.default_rng(0).standard_normal((2, 8, 9, 9))
    for f, data in ((lambda t: dg.nn.functional.avg_pool2d(t, 9), x.astype(np.float32)),
                    (lambda t: dg.nn.functional.avg_pool2d(t, 2), x)):
        compiled = dg.compile(f)
        got = compiled(dg.tensor(data)).numpy()
        np.testing.assert_allclose(got, f(dg.tensor(data)).numpy(), rtol=1e-12)
        assert "avg_pool_fitted(" not in compiled.code
