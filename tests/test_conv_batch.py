"""``kernels/conv_batch.py``: a conv's forward (and a stride-1 conv's flipped-weight input
gradient) and weight gradient as GEMMs on row-shifted columns (stride 1: output rows as
wide as the input's, or narrower; strides 2 and 3: the columns of each row phase).
Checked on shapes outside the benchmark suite (channels 3/5/17, kernels 1x1/1x3/3x3/5x5/
7x7, paddings 0-3, dilation 2, groups 1/2, odd planes, batch 1/3) by the adjoint identities a bilinear op's derivatives must satisfy (the exact form
of a finite-difference check: conv is linear in each argument), against torch, and in a
training step of a small residual network with BatchNorm, compiled against eager and
torch. (``tests/test_conv_columns.py`` checks the same convs against NumPy's kernels.)"""
import numpy as np
import pytest

import dualgraph as dg
from benchmarks.common import training_step
from dualgraph import kernels
from dualgraph.ops import conv

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not kernels.conv_batch.wanted((1, 8, 4, 4), (8, 8, 3, 3), (1, 1), ((1, 1), (1, 1)),
                                  (1, 1), np.float32),
    reason="no Numba native entries or no OpenBLAS 64-bit sgemm")

CASES = [   # x shape, w shape, stride, padding ((top, bottom), (left, right)), dilation,
    #          groups (weights of over products.MAX_OUTPUTS elements: fewer take
    #          products.a_bt)
    ((3, 5, 17, 19), (13, 5, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((1, 17, 13, 21), (17, 17, 5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 1),
    ((3, 6, 15, 31), (24, 3, 3, 3), (1, 1), ((0, 2), (1, 1)), (1, 1), 2),
    ((1, 3, 41, 37), (24, 3, 3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 1),
    ((3, 16, 9, 33), (12, 16, 1, 3), (1, 1), ((0, 0), (1, 1)), (1, 1), 1),
    ((3, 5, 8, 40), (32, 5, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((3, 5, 12, 26), (24, 5, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),     # (output rows
    ((2, 17, 11, 13), (20, 17, 5, 3), (1, 1), ((1, 0), (0, 1)), (1, 1), 1),   # narrower)
    ((3, 17, 33, 31), (19, 17, 3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),   # (row phases)
    ((5, 17, 7, 9), (24, 17, 3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),
    ((1, 17, 33, 31), (32, 17, 1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),
    ((3, 3, 33, 31), (20, 3, 5, 5), (2, 2), ((2, 2), (2, 2)), (1, 1), 1),
    ((3, 6, 19, 17), (24, 3, 3, 3), (2, 2), ((0, 1), (2, 0)), (2, 2), 2),
    ((1, 6, 29, 27), (16, 6, 7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1), 1),
    ((3, 8, 13, 14), (16, 8, 3, 3), (2, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((3, 8, 13, 14), (16, 8, 3, 3), (1, 2), ((1, 1), (0, 1)), (1, 1), 1),
    ((3, 6, 16, 17), (17, 6, 3, 3), (3, 3), ((1, 1), (1, 1)), (1, 1), 1),
]


@pytest.fixture(autouse=True)
def _no_output_lanes(monkeypatch):
    """These tests pin the GEMM kernels: ``kernels.conv_outlanes``, which takes some of
    their small convs, is off here (tests/test_conv_outlanes.py has its own)."""
    monkeypatch.setattr(kernels.conv_outlanes, "MAX_FORWARD_WEIGHTS", 0)
    monkeypatch.setattr(kernels.conv_outlanes, "MAX_GRAD_CHANNELS", 0)

def _ran(monkeypatch):
    ran = []
    call = kernels.Loop.__call__
    monkeypatch.setattr(kernels.Loop, "__call__",
                        lambda self, *args: ran.append(self.__name__) or call(self, *args))
    return ran


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups", CASES)
def test_row_shifted_gemms_are_adjoint_and_match_torch(monkeypatch, x_shape, w_shape, stride,
                                                       padding, dilation, groups):
    """<g, conv(x, w)> = <weight_grad(x, g), w> = <input_grad(g, w), x> (in float64), and
    each kernel is torch's to float32 rounding."""
    rng = np.random.default_rng(sum(x_shape))
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    assert kernels.conv_batch.wanted(x_shape, w_shape, stride, padding, dilation, x.dtype)
    # (every case's weight gradient by the loop: shallower ones take the blocked GEMM)
    monkeypatch.setattr(kernels.conv_batch, "GRAD_MIN_DEPTH", kernels.conv_batch.MIN_DEPTH)
    # (and few-channel forwards too, which conv_shallow's loop takes first)
    monkeypatch.setattr(kernels.conv_shallow, "wins", lambda *args: False)
    ran = _ran(monkeypatch)
    y = conv._conv2d_kernel(x, w, **attrs)
    g = rng.standard_normal(y.shape, dtype=np.float32)
    gw = conv._weight_grad_kernel(x, g, kernel_size=w_shape[2:], **attrs)
    gx = conv._input_grad_kernel(g, w, input_size=x_shape[2:], **attrs)
    monkeypatch.undo()
    direct = conv.conv_method(x_shape, w_shape, stride, padding, dilation, groups) == "direct"
    assert ("_forward" in ran) != direct and "_weight_grad" in ran

    def dot(a, b):
        return float(np.sum(a.astype(np.float64) * b.astype(np.float64)))
    scale = np.sqrt(y.size * np.prod(w_shape[1:]))
    assert abs(dot(g, y) - dot(gw, w)) < 1e-4 * scale
    assert abs(dot(g, y) - dot(gx, x)) < 1e-4 * scale

    (top, bottom), (left, right) = padding
    tx, tw, tg = (torch.tensor(a, dtype=torch.float64) for a in (x, w, g))
    tx = torch.nn.functional.pad(tx, (left, right, top, bottom))
    want = torch.ops.aten.convolution_backward(
        tg, tx, tw, None, list(stride), [0, 0], list(dilation), False, [0, 0], groups,
        [True, True, False])
    want_y = torch.nn.functional.conv2d(tx, tw, None, stride, 0, dilation, groups)
    np.testing.assert_allclose(y, want_y.numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(scale))
    np.testing.assert_allclose(gw, want[1].numpy(), rtol=1e-4, atol=1e-4 * scale)
    want_x = want[0][..., top:top + x_shape[2], left:left + x_shape[3]]
    np.testing.assert_allclose(gx, want_x.numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(scale))


def _net(lib, channels):
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.conv2 = nn.Conv2d(channels, channels, 5, padding=2, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)

        def forward(self, x):
            y = nn.functional.relu(self.bn1(self.conv1(x)))
            return nn.functional.relu(self.bn2(self.conv2(y)) + x)
    return nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), Block(),
                         nn.Conv2d(channels, channels, 3, padding=2, dilation=2, groups=1),
                         nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(2 * channels, 2 * channels, 1, stride=2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * channels, 4))


@pytest.mark.parametrize("batch,channels", [(3, 5), (1, 17)])
def test_training_step_compiled_equals_eager_and_torch(batch, channels):
    """Two SGD steps of a residual block with BatchNorm in training mode on 19x23
    images, then stride-2 convs, whose convs take the row-shifted GEMMs: the compiled
    step's losses and weights are eager's and torch's."""
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((batch, 3, 19, 23), dtype=np.float32)
    y = rng.integers(0, 4, batch)
    results = {}
    for name, lib, compiled in (("eager", dg, False), ("compiled", dg, True),
                                ("torch", torch, False)):
        lib.manual_seed(0)
        model = _net(lib, channels)
        if name == "eager":
            data = {"params": {k: v.numpy().copy() for k, v in model.state_dict().items()},
                    "x": x, "y": y}
        step, xs, ys = training_step(lib, model, data, lambda ps, lib=lib: lib.optim.SGD(
            ps, lr=0.1, momentum=0.9))
        fn = dg.compile(step) if compiled else step
        losses = [float(fn(xs, ys).item()) for _ in range(2)]
        results[name] = losses, {k: v.detach().numpy().copy()
                                 for k, v in model.state_dict().items()}
    for name in ("compiled", "torch"):
        np.testing.assert_allclose(results[name][0], results["eager"][0], rtol=1e-4)
        for key, value in results["eager"][1].items():
            np.testing.assert_allclose(results[name][1][key], value, rtol=1e-3, atol=1e-4,
                                       err_msg=f"{name}: {key}")


@pytest.mark.parametrize("x_shape,w_shape,stride,taken", [
    ((64, 16, 32, 32), (32, 16, 3, 3), (2, 2), True),
    ((1, 256, 7, 7), (256, 256, 3, 3), (1, 1), False),      # 12k weights a position
    ((1, 256, 14, 14), (512, 256, 3, 3), (2, 2), False),
    ((16, 128, 28, 28), (256, 128, 3, 3), (2, 2), True),    # 94 a position
])
def test_many_weights_per_output_position_keep_the_blocked_gemm(x_shape, w_shape, stride,
                                                                taken):
    """Each image's GEMMs pack the weight again: with more weight elements per output
    position of the batch than ``MAX_WEIGHTS_PER_POSITION`` the blocked im2col's GEMMs
    take the conv."""
    assert kernels.conv_batch.wanted(x_shape, w_shape, stride, ((1, 1), (1, 1)), (1, 1),
                                     np.float32) == taken


@pytest.mark.parametrize("channels,stride,hw", [(17, 2, (19, 23)), (16, 1, (19, 23)),
                                               (5, 2, (39, 45)), (64, 1, (9, 17))])
def test_compiled_conv_relu_epilogue_equals_eager(monkeypatch, channels, stride, hw):
    """``relu(conv2d(x, w, b))`` in a compiled training step becomes ``conv2d_epilogue``,
    which runs the row-shifted GEMMs and then the epilogue's pass where they take the conv
    (17 and 16 channels), else the im2col tiles (5 channels at stride 2: shallow
    columns) or the shifted GEMMs with the epilogue in their pass (64). The batch's im2col is over ``COLUMN_BLOCK_BYTES``, so no im2col is shared
    with the weight gradient instead. Its loss and gradients are eager's."""
    from dualgraph.ops import epilogue
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((16, channels, *hw), dtype=np.float32)
    w = (rng.standard_normal((24, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
    b = rng.standard_normal(24, dtype=np.float32)

    def step(x, w, b):
        y = dg.nn.functional.relu(dg.nn.functional.conv2d(x, w, b, stride=stride, padding=1))
        loss = (y * y).mean()
        loss.backward()
        return loss

    taken = []
    row_shifted = epilogue._row_shifted
    monkeypatch.setattr(epilogue, "_row_shifted",
                        lambda *a: taken.append(row_shifted(*a)) or taken[-1])
    results = []
    for fn in (step, dg.compile(step)):
        ws, bs = dg.tensor(w, requires_grad=True), dg.tensor(b, requires_grad=True)
        loss = fn(dg.tensor(x), ws, bs)
        results.append([loss.item(), ws.grad.numpy(), bs.grad.numpy()])
    assert taken and set(taken) == {5 < channels < 64}   # (asked when fitted and when run)
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    for got, want in zip(results[1][1:], results[0][1:]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
