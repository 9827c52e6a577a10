"""The convolution training loops of ``kernels/conv_columns.py`` (a "same" conv's im2col,
col2im of a strided conv's input gradient) against PyTorch (forward, input, weight and
bias gradient) and against the NumPy kernels they replace (the same bits), on shapes
outside the benchmark suite: odd sizes, batch 1 and 3, strides, paddings 0-2, dilation,
groups, 1x1 and 5x5 kernels, blocks of several images and of a few rows."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import kernels
from dualgraph.ops import conv


@pytest.fixture(autouse=True)
def _no_output_lanes(monkeypatch):
    """These tests pin the GEMM kernels: ``kernels.conv_outlanes`` and
    ``kernels.conv_shallow``, which take some of their small convs, are off here
    (tests/test_conv_outlanes.py and test_conv_shallow.py have their own)."""
    monkeypatch.setattr(kernels.conv_outlanes, "MAX_FORWARD_WEIGHTS", 0)
    monkeypatch.setattr(kernels.conv_shallow, "wins", lambda *args: False)
    monkeypatch.setattr(kernels.conv_outlanes, "MAX_GRAD_CHANNELS", 0)


pytestmark = pytest.mark.skipif(not kernels.numba_available(), reason="Numba is not installed")

SAME = [   # x shape, w shape, conv2d kwargs: output rows as wide as the input's, strides 1
    ((3, 5, 17, 23), (7, 5, 3, 3), {"padding": 1}),
    ((1, 4, 33, 35), (6, 4, 5, 5), {"padding": 2}),
    ((3, 6, 11, 29), (4, 3, 3, 3), {"padding": (0, 1), "groups": 2}),
    ((1, 3, 41, 37), (5, 3, 3, 3), {"padding": 2, "dilation": 2}),
    ((3, 5, 9, 33), (8, 5, 2, 3), {"padding": (1, 1), "dilation": (2, 1)}),
    ((3, 17, 13, 11), (20, 17, 3, 3), {"padding": 1}),   # (weight gradients of over
    ((2, 12, 9, 31), (24, 6, 3, 3), {"padding": (2, 1), "groups": 2, "dilation": (2, 1)}),
]   # products.MAX_OUTPUTS elements, which conv_batch's loop computes)
STRIDED = [   # the input gradient through col2im (and every conv of SAME with fewer input
    #            channels than output channels)
    ((3, 5, 17, 23), (7, 5, 3, 3), {"stride": 2, "padding": 1}),
    ((1, 4, 20, 19), (6, 4, 5, 5), {"stride": 2, "padding": 2}),
    ((3, 6, 15, 14), (4, 3, 3, 3), {"stride": (2, 3), "groups": 2}),
    ((3, 8, 32, 30), (12, 8, 1, 1), {"stride": 2}),
    ((2, 3, 41, 40), (5, 3, 3, 2), {"stride": 3, "padding": (2, 1), "dilation": (2, 1)}),
]


def conv_and_grads(lib, x, w, b, kwargs):
    xs, ws, bs = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
    y = lib.nn.functional.conv2d(xs, ws, bs, **kwargs)
    y.backward(lib.tensor(np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(y.shape)))
    return [t.detach().numpy() for t in (y, xs.grad, ws.grad, bs.grad)]


@pytest.mark.parametrize("block_bytes", [1 << 20, 2048])
@pytest.mark.parametrize("x_shape,w_shape,kwargs,loop", [c + ("_im2col",) for c in SAME]
                         + [c + ("_forward",) for c in SAME]
                         + [c + ("_col2im",) for c in STRIDED])
def test_conv_column_loops_match_torch_and_numpy(monkeypatch, x_shape, w_shape, kwargs, loop,
                                                 block_bytes):
    """The loop named ``loop`` runs (the same convs' inputs are big enough for it:
    ``kernels.MIN_ELEMENTS``; col2im runs at every size); every result is torch's (to
    float32 rounding) and the output and weight gradient are the NumPy kernels' bits
    (im2col copies exactly) where the blocks' GEMMs are NumPy's; with a 2 kB column block
    a same conv's columns come a few rows of one image at a time, a strided conv's input
    gradient one image at a time. ``_forward``: the same convs by ``kernels.conv_batch``'s
    row-shifted GEMMs (its weight gradient too; a grouped conv's forward is
    ``conv_direct``'s; the ``_im2col`` cases turn them off)."""
    monkeypatch.setattr(conv, "COLUMN_BLOCK_BYTES", block_bytes)
    if loop == "_forward" and not kernels.conv_batch.wanted(
            x_shape, w_shape, (1, 1), ((1, 1), (1, 1)), (1, 1), np.float32):
        pytest.skip("no Numba native entries or no OpenBLAS 64-bit sgemm")
    if loop == "_im2col":
        monkeypatch.setattr(kernels.conv_batch, "MAX_COLUMN_BYTES", 0)
    rng = np.random.default_rng(26)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    ran = []
    call = kernels.Loop.__call__
    monkeypatch.setattr(kernels.Loop, "__call__",
                        lambda self, *args: ran.append(self.__name__) or call(self, *args))
    fast = conv_and_grads(dg, x, w, b, kwargs)
    direct = kwargs.get("groups", 1) > 1   # (forward and input gradient: conv_direct's)
    assert (loop in ran or loop == "_forward" and direct)
    if loop != "_col2im":   # (a strided conv's forward and weight gradient: conv_batch's
        #                          row phases where it takes them)
        assert ("_weight_grad" in ran) == (
            loop == "_forward" and np.prod(w_shape) > kernels.products.MAX_OUTPUTS
            and w_shape[1] * w_shape[3] >= kernels.conv_batch.GRAD_MIN_DEPTH)
    batched = "_forward" in ran or "_weight_grad" in ran
    monkeypatch.undo()
    monkeypatch.setattr(conv, "COLUMN_BLOCK_BYTES", block_bytes)
    monkeypatch.setenv("DUALGRAPH_NUMBA", "0")
    slow = conv_and_grads(dg, x, w, b, kwargs)
    torch_results = conv_and_grads(torch, x, w, b, kwargs)
    for i, (got, numpy_got, want) in enumerate(zip(fast, slow, torch_results)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        # the input gradient: per-image GEMMs may round a column differently; a narrow
        # grouped conv's output: conv_direct's loop (without Numba, the columns' GEMM)
        # conv_batch's GEMMs: a sum per kernel row, the weight gradient's by sgemm's beta
        if i == 1 or (i == 0 and kwargs.get("groups", 1) > 1) or batched:
            tolerance = 1e-4 if batched else 1e-5
            np.testing.assert_allclose(got, numpy_got, rtol=tolerance, atol=tolerance)
        else:
            np.testing.assert_array_equal(got, numpy_got)


def test_same_width_takes_only_stride_one_rows_as_wide_as_the_input():
    same = kernels.conv_columns.same_width
    assert same((1, 3, 8, 8), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))
    assert same((1, 3, 8, 8), (3, 3), (1, 1), ((0, 0), (2, 0)), (1, 1))
    assert same((1, 3, 8, 8), (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2))
    assert not same((1, 3, 8, 8), (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1))
    assert not same((1, 3, 8, 8), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1))
    assert not same((1, 3, 8, 8), (3, 3), (1, 2), ((1, 1), (1, 1)), (1, 1))
