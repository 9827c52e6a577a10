"""Dense convolutions with few weights per output through ``kernels/conv_outlanes.py``
(eight output channels in the lanes, no im2col): the forward with its epilogue and the
weight gradient against torch on odd shapes (strides, asymmetric padding, dilation, batch
1 and 3, channels not a multiple of eight, fewer than eight taps), the bits on one or three
threads, a LeNet-style training step eager and compiled against torch, and the gradients
against finite differences."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.kernels import conv_outlanes  # noqa: E402
from dualgraph.ops import conv as conv_ops  # noqa: E402
from dualgraph.ops.epilogue import CONV2D_EPILOGUE  # noqa: E402

from test_conv_tiles import _data, _torch_conv  # noqa: E402

# n, c, h, w, cout, kernel, stride, padding, dilation, groups
CASES = [
    (3, 6, 14, 14, 16, (5, 5), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),   # LeNet's second conv
    (1, 3, 33, 31, 16, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),   # batch 1, first layer
    (3, 5, 17, 19, 20, (3, 3), (2, 2), ((1, 0), (2, 1)), (1, 1), 1),   # stride, asymmetric pad
    (3, 7, 16, 15, 9, (3, 2), (1, 2), ((2, 2), (0, 1)), (2, 1), 1),    # dilation, a spare block
    (2, 1, 28, 28, 32, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),   # 9 taps: fewer than TAPS
    (3, 2, 20, 6, 24, (2, 3), (1, 1), ((0, 0), (1, 1)), (1, 1), 1),    # rows narrower than a run
]


@pytest.mark.parametrize("case", CASES)
def test_forward_and_weight_grad_match_torch(case):
    x, w, b, attrs = _data(case)
    assert conv_outlanes.wanted(x.shape, w.shape, attrs["padding"], 1, x.dtype)
    want = _torch_conv(x, w, b, **attrs)
    got = conv_ops.CONV2D.kernel(x, w, b, **attrs)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    gy = np.random.default_rng(1).standard_normal(got.shape).astype(np.float32)
    tw = torch.tensor(w, requires_grad=True)
    (top, bottom), (left, right) = attrs["padding"]
    xp = torch.nn.functional.pad(torch.tensor(x), (left, right, top, bottom))
    torch.nn.functional.conv2d(xp, tw, None, attrs["stride"], 0, attrs["dilation"]).backward(
        torch.tensor(gy))
    direct = conv_outlanes.weight_grad(x, gy, w.shape[2:], attrs["stride"], attrs["padding"],
                                       attrs["dilation"])
    np.testing.assert_allclose(direct, tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    op = conv_ops.CONV2D_WEIGHT_GRAD.kernel(x, gy, kernel_size=w.shape[2:], **attrs)
    np.testing.assert_allclose(op, tw.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act,residual_at", [("relu", None), ("clamp", "before"),
                                             ("silu", "after")])
def test_epilogue_gives_the_bits_of_the_conv_then_its_tail(act, residual_at):
    x, w, b, attrs = _data(CASES[2])
    bounds = (0.0, 6.0) if act == "clamp" else (-np.inf, np.inf)
    y = conv_ops.CONV2D.kernel(x, w, b, **attrs)
    r = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    residual = (r,) if residual_at else ()
    got = CONV2D_EPILOGUE.kernel(x, w, b, *residual, act=act, bounds=bounds,
                                 residual_at=residual_at, **attrs)
    want = CONV2D_EPILOGUE.decomposition(x, w, b, *residual, act=act, bounds=bounds,
                                         residual_at=residual_at, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if act == "relu":     # (the one-pass ReLU: the bits of the sum, then the ReLU)
        np.testing.assert_array_equal(got, np.maximum(y, 0))


def test_bits_do_not_depend_on_threads(monkeypatch):
    """Each image's outputs, and each tap group's weight gradient, are summed by one
    thread in one order: three slots give one's bits."""
    x, w, b, attrs = _data(CASES[0])
    geometry = (attrs["stride"], attrs["padding"], attrs["dilation"])
    gy = np.random.default_rng(3).standard_normal((3, 16, 10, 10)).astype(np.float32)
    outs, grads = [], []
    for threads in (1, None):
        monkeypatch.setattr(conv_outlanes, "threads_for", lambda size: threads)
        monkeypatch.setattr(conv_outlanes, "cores", lambda: 3)
        outs.append(conv_outlanes.conv(x, w, np.empty((3, 16, 10, 10), np.float32),
                                       *geometry, 1, b))
        grads.append(conv_outlanes.weight_grad(x, gy, (5, 5), *geometry))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(grads[0], grads[1])


def _lenet(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(400, 10))


def test_lenet_step_eager_and_compiled_match_torch():
    """A training step whose second conv (and its weight gradient) runs here: loss and
    every gradient, eager and under ``dg.compile``, against torch."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 1, 28, 28)).astype(np.float32)   # (5 x 6 x 14 x 14: the
    y = rng.integers(0, 10, 5)                                   # loops' minimum size)
    ref = _lenet(torch)
    loss = torch.nn.functional.cross_entropy(ref(torch.tensor(x)), torch.tensor(y))
    loss.backward()
    want = {k: p.grad.numpy() for k, p in ref.named_parameters()}
    model = _lenet(dg)
    model.load_state_dict({k: dg.tensor(v.detach().numpy())
                           for k, v in ref.state_dict().items()})

    def step(xb, yb):
        model.zero_grad()
        out = dg.nn.functional.cross_entropy(model(xb), yb)
        out.backward()
        return out

    compiled = dg.compile(step)
    for run in (step, compiled, compiled):
        got = run(dg.tensor(x), dg.tensor(y))
        np.testing.assert_allclose(got.detach().numpy(), loss.item(), rtol=1e-5)
        for k, p in model.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), want[k], rtol=1e-4, atol=1e-5,
                                       err_msg=k)
    assert "= conv_outlanes_relu" in compiled.code, compiled.code   # (its fitted forward)


def test_weight_grad_matches_finite_differences():
    """The weight gradient of ``sum(conv(x, w) * gy)`` against central differences in
    float64 of the same conv (torch's), at a few weights."""
    x, w, _, attrs = _data(CASES[3])
    y = conv_ops.CONV2D.kernel(x, w, **attrs)
    gy = np.random.default_rng(5).standard_normal(y.shape).astype(np.float32)
    got = conv_outlanes.weight_grad(x, gy, w.shape[2:], attrs["stride"], attrs["padding"],
                                    attrs["dilation"])
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, w, gy))
    for index in [(0, 0, 0, 0), (8, 6, 2, 1), (4, 3, 1, 0)]:
        step = np.zeros_like(w64)
        step[index] = 1e-4
        plus = _torch_conv(x64, w64 + step, np.zeros(9), **attrs).numpy()
        minus = _torch_conv(x64, w64 - step, np.zeros(9), **attrs).numpy()
        numeric = ((plus - minus) * gy64).sum() / 2e-4
        np.testing.assert_allclose(got[index], numeric, rtol=1e-3, atol=1e-3)
