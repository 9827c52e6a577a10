"""Convolutions whose kernel equals their stride as a linear over patches (the lowering rule
``patchify_conv``, ``passes/patchify.py``): compiled models against eager and torch on
NCHW inputs with wide kernels and channels-last inputs seen as NCHW (rows and columns past
the last whole patch, batch 1 and more, with and without bias, a kernel that is not
square, float64, NaN and inf, an empty batch); the convs the rule leaves alone."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dualgraph as dg  # noqa: E402
from dualgraph import passes  # noqa: E402
from dualgraph.graph import Graph  # noqa: E402
from dualgraph.ops.conv import CONV2D  # noqa: E402
from dualgraph.ops.epilogue import CONV2D_EPILOGUE, CONV2D_PACKED  # noqa: E402

CONVS = (CONV2D, CONV2D_EPILOGUE, CONV2D_PACKED)


def _pair(lib, cin, cout, k, bias, channels_last, dtype):
    """A conv of kernel = stride ``k``, on an NCHW input or on a channels-last one permuted
    to NCHW, its result permuted to channels last and added to itself (a reader after the
    conv, as ConvNeXt's LayerNorm)."""
    nn = lib.nn

    class Patches(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, stride=k, bias=bias)

        def forward(self, x):
            y = self.conv(x.permute(0, 3, 1, 2) if channels_last else x)
            return y.permute(0, 2, 3, 1) * 2 + 1
    model = Patches().eval()
    return model.double() if dtype == np.float64 else model


def _run(shape, cin, cout, k, bias=True, channels_last=False, dtype=np.float32, x=None):
    torch.manual_seed(sum(shape) + cout)
    ref = _pair(torch, cin, cout, k, bias, channels_last, dtype)
    ours = _pair(dg, cin, cout, k, bias, channels_last, dtype)
    ours.load_state_dict({n: dg.tensor(v.detach().numpy()) for n, v in
                          ref.state_dict().items()})
    if x is None:
        x = np.random.default_rng(cout).standard_normal(shape).astype(dtype)
    compiled = dg.compile(ours)
    with dg.no_grad(), torch.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        eager = ours(dg.tensor(x)).numpy()
        want = ref(torch.tensor(x)).numpy()
    ops = [n.op for n in compiled.optimized_graph.nodes]
    return got, eager, want, ops


@pytest.mark.parametrize("shape,cin,cout,k,bias,channels_last", [
    ((1, 3, 64, 48), 3, 24, 16, True, False),       # ViT's patch embedding, whole patches
    ((2, 3, 35, 37), 3, 70, 16, False, False),      # rows and columns left over, batch 2
    ((1, 11, 13, 40), 40, 80, 2, True, True),       # ConvNeXt's downsampling, odd sizes
    ((3, 8, 8, 24), 24, 64, 2, False, True),        # a full panel of outputs, no bias
    ((2, 9, 14, 8), 8, 7, (3, 2), True, True),      # a kernel that is not square
], ids=["vit", "left-over", "downsample", "no-bias", "3x2"])
def test_compiled_patches_equal_eager_and_torch(shape, cin, cout, k, bias, channels_last):
    """The conv becomes a linear over patches (no conv left), equal to eager and torch up
    to the rounding of sums of ``C*kh*kw`` products."""
    got, eager, want, ops = _run(shape, cin, cout, k, bias, channels_last)
    assert not any(op in CONVS for op in ops)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_float64_channels_last():
    got, eager, want, ops = _run((2, 7, 6, 12), 12, 20, 2, dtype=np.float64,
                                 channels_last=True)
    assert not any(op in CONVS for op in ops) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, eager, rtol=1e-12, atol=1e-12)


def test_nan_and_inf_reach_the_outputs_of_their_patches():
    """A NaN or an infinity in the input makes its patch's outputs NaN or infinite, as the
    conv does; the other outputs are untouched."""
    x = np.random.default_rng(0).standard_normal((1, 6, 6, 8)).astype(np.float32)
    x[0, 1, 2, 3], x[0, 4, 5, 0] = np.nan, np.inf
    got, eager, want, ops = _run(x.shape, 8, 16, 2, channels_last=True, x=x)
    assert not any(op in CONVS for op in ops)
    assert np.isnan(got[0, 0, 1]).all() and np.isfinite(got[0, 0, 0]).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)


def test_empty_batch():
    """An empty batch: an empty result of the conv's shape, as torch's (eager conv2d fails
    on it today: ``conv2d`` indexes the first image)."""
    torch.manual_seed(0)
    ref = _pair(torch, 8, 16, 2, True, True, np.float32)
    ours = _pair(dg, 8, 16, 2, True, True, np.float32)
    ours.load_state_dict({n: dg.tensor(v.detach().numpy()) for n, v in
                          ref.state_dict().items()})
    x = np.zeros((0, 4, 4, 8), np.float32)
    compiled = dg.compile(ours)
    with dg.no_grad(), torch.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        want = ref(torch.tensor(x)).numpy()
    assert got.shape == want.shape == (0, 2, 2, 16)
    assert not any(n.op in CONVS for n in compiled.optimized_graph.nodes)


def _conv_graph(x_shape, w_shape, attrs, weight_constant=True):
    g = Graph()
    x = g.add_input(x_shape, "float32", name="x")
    w = (g.add_constant(np.ones(w_shape, np.float32), name="w") if weight_constant
         else g.add_input(w_shape, "float32", name="w"))
    conv = dict(stride=w_shape[2:], padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    g.set_outputs(list(g.add_node("conv2d", [x, w], {**conv, **attrs}, names=["y"])))
    return g


def test_channels_last_runs_of_fewer_than_64_bytes_keep_their_conv():
    """2x2/2 over 15 channels last: runs of 30 floats, taken; over 7: 14, left alone."""
    for c, taken in ((15, True), (7, False)):
        g = Graph()
        x = g.add_input((1, 8, 8, c), "float32", name="x")
        w = g.add_constant(np.ones((16, c, 2, 2), np.float32), name="w")
        (v,) = g.add_node("permute", [x], dict(perm=(0, 3, 1, 2)), names=["v"])
        g.set_outputs(list(g.add_node("conv2d", [v, w], dict(
            stride=(2, 2), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1),
            names=["y"])))
        after, report = passes.patchify_conv(g)
        assert report.changed == taken and (CONV2D in [n.op for n in after.nodes]) != taken


@pytest.mark.parametrize("case", ["short runs", "padding", "dilation", "groups", "overlap",
                                  "weight input"])
def test_the_rule_leaves_alone(case):
    """A 4x4/4 kernel on an NCHW input (its patches copied in runs of 16 bytes), padding,
    dilation, groups, a stride other than the kernel and a weight that is not a constant
    keep their conv; a 16x16/16 one is rewritten."""
    k = 4 if case == "short runs" else 16
    x, w = (1, 4, 64, 64), (8, 4 // (2 if case == "groups" else 1), k, k)
    attrs = {"padding": dict(padding=((1, 1), (1, 1))), "dilation": dict(dilation=(2, 2)),
             "groups": dict(groups=2), "overlap": dict(stride=(8, 8))}.get(case, {})
    g = _conv_graph(x, w, attrs, weight_constant=case != "weight input")
    after, report = passes.patchify_conv(g)
    assert not report.changed and [n.op for n in after.nodes] == [CONV2D]
    taken, report = passes.patchify_conv(_conv_graph(x, (8, 4, 16, 16), {}))
    assert report.changed and CONV2D not in [n.op for n in taken.nodes]
