"""1x1 convolutions by blocks of output positions (``kernels/conv_pointwise.py``): strided
1x1 convs and 1x1 convs whose output would leave L2 before the epilogue's pass, compiled
(``conv1x1_<act>``), checked against eager dualgraph and torch on odd shapes (channels not
a multiple of eight, 3 input channels, odd planes, blocks that do not divide the plane),
and the kernel against NumPy's product."""
import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn.functional as F
from dualgraph import kernels
from dualgraph.kernels import conv_pointwise
from test_cnn_inference import _both as _compiled_and_eager, conv_layer  # noqa: E402

torch = pytest.importorskip("torch")
TF = torch.nn.functional
pytestmark = pytest.mark.skipif(not conv_pointwise.available(),
                                reason="needs Numba's native entries and OpenBLAS's sgemm")

ACTS = {"none": (lambda v: v, lambda v: v), "relu6": (F.relu6, TF.relu6),
        "silu": (F.silu, TF.silu), "hardswish": (F.hardswish, TF.hardswish)}


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("residual_at", [None, "before", "after"])
@pytest.mark.parametrize("x_shape,cout,stride,groups", [
    ((1, 5, 130, 131), 17, 1, 1),     # 1.2 MB of output: blocks of rows, a short last one
    ((2, 3, 61, 67), 40, 1, 1),       # 3 input channels, two images
    ((1, 6, 9, 10), 9, 2, 3),         # strided, grouped, a plane of odd rows
    ((3, 7, 15, 8), 13, (2, 3), 1),   # unequal strides
    ((1, 24, 57, 57), 20, 2, 1),      # strided, an odd plane
])
def test_blocked_1x1_conv_equals_eager_and_torch(act, residual_at, x_shape, cout, stride,
                                                 groups, monkeypatch):
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "1")   # (stride 1 on more: the plain GEMM)
    rng = np.random.default_rng(0)
    n, c, h, w = x_shape
    s = (stride, stride) if isinstance(stride, int) else stride
    ho, wo = (h - 1) // s[0] + 1, (w - 1) // s[1] + 1
    x, wt, b, r = (rng.standard_normal(shape).astype(np.float32) for shape in
                   (x_shape, (cout, c // groups, 1, 1), (cout,), (n, cout, ho, wo)))
    ours, theirs = ACTS[act]
    conv = dict(stride=stride, groups=groups)
    compiled, got, eager = _compiled_and_eager(conv_layer(dg, ours, residual_at, **conv),
                                               [x, wt, b, r])
    want = conv_layer(torch, theirs, residual_at, **conv)(
        *map(torch.tensor, (x, wt, b, r))).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert "= conv1x1" in compiled.code, compiled.code


@pytest.mark.parametrize("threads", ["1", "2"])
def test_large_1x1_conv_on_one_or_two_threads(threads, monkeypatch):
    """On one thread the blocks, on two the batched GEMM and the epilogue's pass on the
    threads: equal results either way."""
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", threads)
    rng = np.random.default_rng(3)
    x, wt, b = (rng.standard_normal(s).astype(np.float32)
                for s in ((1, 9, 100, 101), (33, 9, 1, 1), (33,)))
    fn = lambda x, w, b: F.relu6(F.conv2d(x, w, b))
    compiled, got, eager = _compiled_and_eager(fn, [x, wt, b])
    want = TF.relu6(TF.conv2d(*map(torch.tensor, (x, wt, b)))).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_strided_1x1_conv_without_bias():
    """``conv2d`` alone, strided, no bias: fitted as ``conv1x1`` (zero bias)."""
    rng = np.random.default_rng(1)
    x, wt = (rng.standard_normal(s).astype(np.float32) for s in ((2, 10, 11, 9), (7, 10, 1, 1)))
    fn = lambda x, w: F.conv2d(x, w, stride=2) * 1.0
    compiled, got, eager = _compiled_and_eager(fn, [x, wt])
    want = TF.conv2d(torch.tensor(x), torch.tensor(wt), stride=2).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "= conv1x1(" in compiled.code, compiled.code


@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (3, 1)])
def test_kernel_against_numpy(stride):
    """The kernel itself: ``w @ x[:, :, ::sh, ::sw] + b``, then ReLU and a residual after
    it, for a batch of 3 (items that are whole images and blocks of rows)."""
    rng = np.random.default_rng(2)
    n, c, h, w, cout = 3, 11, 70, 45, 50
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((cout, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    sub = x[:, :, ::stride[0], ::stride[1]]
    r = rng.standard_normal((n, cout) + sub.shape[2:]).astype(np.float32)
    want = np.maximum(np.einsum("oc,nchw->nohw", wt[:, :, 0, 0], sub) + b[:, None, None],
                      0) + r
    run = conv_pointwise.fitted(x.shape, cout, 1, stride,
                                kernels.epilogue.ACTIVATIONS.index("relu"),
                                (-np.inf, np.inf), 2)
    got = run(x, wt, b, r, np.empty(want.shape, np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("batch,groups", [(1, 1), (5, 1), (5, 3)])
@pytest.mark.parametrize("residual_at", [None, "before"])
def test_1x1_conv_on_a_1x1_plane(batch, groups, residual_at):
    """Squeeze-and-excitation's 1x1 convs of one pixel (``epilogue.pointwise``): one GEMM
    over the batch (one group; grouped, a product per image and group) and the epilogue
    along each image's row of channels."""
    rng = np.random.default_rng(4)
    x, wt, b, r = (rng.standard_normal(s).astype(np.float32) for s in (
        (batch, 21, 1, 1), (33, 21 // groups, 1, 1), (33,), (batch, 33, 1, 1)))
    conv = dict(groups=groups)
    compiled, got, eager = _compiled_and_eager(
        conv_layer(dg, dg.sigmoid, residual_at, **conv), [x, wt, b, r])
    want = conv_layer(torch, torch.sigmoid, residual_at, **conv)(
        *map(torch.tensor, (x, wt, b, r))).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "= conv1x1_sigmoid(" in compiled.code, compiled.code
