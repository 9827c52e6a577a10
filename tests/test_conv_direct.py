"""Depthwise and narrow grouped convolutions through ``kernels/conv_direct.py`` (phase
planes, taps summed in registers, the epilogue per band) against torch, on shapes outside
any model: odd sizes, channel multiplier 2 and 3, groups 2/3/4, dilation 2, strides 2 and
(2, 3), batch 1/3/16, padding 0/1/2 and asymmetric, 1x1 to 7x7 kernels; each activation
and residual of the epilogue; and the same convs eager, under ``dg.compile`` and through
``dg.onnx.load``."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.kernels import conv_direct  # noqa: E402
from dualgraph.kernels.epilogue import ACTIVATIONS  # noqa: E402
from dualgraph.ops import conv as conv_ops  # noqa: E402
from dualgraph.ops.epilogue import CONV2D_EPILOGUE  # noqa: E402

F = torch.nn.functional
# n, c, h, w, cout, (kh, kw), stride, ((top, bottom), (left, right)), dilation, groups
CASES = [
    (1, 16, 23, 23, 16, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 16),    # depthwise
    (3, 7, 13, 17, 14, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 7),      # multiplier 2
    (16, 5, 9, 8, 5, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 5),        # 5x5, batch 16
    (1, 6, 19, 21, 18, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 6),      # dilation, x3
    (3, 8, 12, 15, 8, (3, 3), (2, 3), ((0, 2), (1, 0)), (1, 1), 4),       # groups 4, strides
    (1, 6, 11, 10, 9, (3, 2), (1, 1), ((1, 0), (0, 1)), (2, 1), 3),       # groups 3
    (3, 4, 10, 31, 6, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 2),       # 1x1 strided
    (1, 3, 30, 29, 3, (7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1), 3),       # 7x7
    (16, 9, 7, 7, 9, (3, 3), (2, 2), ((0, 0), (0, 0)), (1, 1), 9),        # no padding
]


def _data(case, seed=0):
    n, c, h, wd, cout, k, stride, padding, dilation, groups = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((cout, c // groups, *k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    return x, w, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def _torch_conv(x, w, b, stride, padding, dilation, groups):
    (top, bottom), (left, right) = padding
    xp = F.pad(torch.tensor(x), (left, right, top, bottom))
    return F.conv2d(xp, torch.tensor(w), torch.tensor(b), stride, 0, dilation, groups)


def test_cases_take_the_direct_loop():
    """Every case above runs conv_direct's loop (a threshold change must not leave them
    on the GEMMs untested)."""
    for case in CASES:
        x, w, _, attrs = _data(case)
        assert conv_ops.conv_method(x.shape, w.shape, **attrs) in ("depthwise", "direct")


@pytest.mark.parametrize("case", CASES)
def test_conv2d_matches_torch(case):
    x, w, b, attrs = _data(case)
    want = _torch_conv(x, w, b, **attrs).numpy()
    got = conv_ops.CONV2D.kernel(x, w, b, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


def test_float64_stays_float64():
    x, w, b, attrs = _data(CASES[1])
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    want = _torch_conv(x, w, b, **attrs).numpy()
    got = conv_ops.CONV2D.kernel(x, w, b, **attrs)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


ACTS = {"relu": F.relu, "clamp": lambda y: y.clamp(0, 6), "sigmoid": torch.sigmoid,
        "silu": F.silu, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
        "gelu": F.gelu, "none": lambda y: y}


@pytest.mark.parametrize("case", CASES[:5])
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("residual_at", [None, "before", "after"])
def test_epilogue_matches_torch(case, act, residual_at):
    x, w, b, attrs = _data(case)
    y = _torch_conv(x, w, b, **attrs)
    r = np.random.default_rng(1).standard_normal(tuple(y.shape)).astype(np.float32)
    rt = torch.tensor(r)
    want = ACTS[act](y + rt if residual_at == "before" else y)
    want = want + rt if residual_at == "after" else want
    got = CONV2D_EPILOGUE.kernel(x, w, b, *([r] if residual_at else []), act=act,
                                 bounds=(0.0, 6.0) if act == "clamp" else (-np.inf, np.inf),
                                 residual_at=residual_at, **attrs)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=3e-5)


def test_bits_do_not_depend_on_threads(monkeypatch):
    """Each output is summed by one thread in tap order: two slots give one's bits."""
    x, w, b, attrs = _data(CASES[2])
    out = [np.empty((16, 5, 9, 8), np.float32) for _ in range(2)]
    monkeypatch.setattr(conv_direct, "threads_for", lambda size: 1)
    conv_direct.conv(x, w, out[0], attrs["stride"], attrs["padding"], attrs["dilation"],
                     attrs["groups"], b)
    monkeypatch.setattr(conv_direct, "threads_for", lambda size: None)
    monkeypatch.setattr(conv_direct, "cores", lambda: 3)
    conv_direct.conv(x, w, out[1], attrs["stride"], attrs["padding"], attrs["dilation"],
                     attrs["groups"], b)
    np.testing.assert_array_equal(out[0], out[1])


def test_activation_codes_are_the_epilogue_module_s():
    assert set(ACTS) <= set(ACTIVATIONS)


class Block(dg.nn.Module):
    """A depthwise-separable block with a channel multiplier, a grouped conv and a
    residual: every conv is direct, each with BatchNorm and an activation to fold."""

    def __init__(self, c=6):
        super().__init__()
        nn = dg.nn
        self.layers = nn.Sequential(
            nn.Conv2d(c, 2 * c, 3, 2, 1, groups=c, bias=False), nn.BatchNorm2d(2 * c),
            nn.ReLU6(),
            nn.Conv2d(2 * c, 2 * c, 5, 1, 4, dilation=2, groups=2 * c), nn.Hardswish(),
            nn.Conv2d(2 * c, 2 * c, 3, 1, 1, groups=3), nn.BatchNorm2d(2 * c), nn.SiLU())

    def forward(self, x):
        h = self.layers(x)
        return h + self.layers[-3](h)


def _models():
    nn = torch.nn
    c = 6
    reference = nn.Sequential(
        nn.Conv2d(c, 2 * c, 3, 2, 1, groups=c, bias=False), nn.BatchNorm2d(2 * c), nn.ReLU6(),
        nn.Conv2d(2 * c, 2 * c, 5, 1, 4, dilation=2, groups=2 * c), nn.Hardswish(),
        nn.Conv2d(2 * c, 2 * c, 3, 1, 1, groups=3), nn.BatchNorm2d(2 * c), nn.SiLU())
    rng = np.random.default_rng(3)
    state = {}
    for k, v in reference.state_dict().items():
        if "num_batches" in k:
            state[k] = np.zeros((), np.int64)
        elif k.endswith("running_var"):
            state[k] = rng.uniform(0.5, 1.5, tuple(v.shape)).astype(np.float32)
        else:
            state[k] = (0.3 * rng.standard_normal(tuple(v.shape))).astype(np.float32)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model = Block()
    model.layers.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    return reference.eval(), model.eval()


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_eager_compiled_and_onnx_import_match_torch(tmp_path, batch):
    reference, model = _models()
    x = np.random.default_rng(batch).standard_normal((batch, 6, 17, 15)).astype(np.float32)
    with torch.no_grad():
        h = reference(torch.tensor(x))
        want = (h + reference[5](h)).numpy()
    with dg.no_grad():
        eager = model(dg.tensor(x)).numpy()
        compiled_fn = dg.compile(model)
        compiled = compiled_fn(dg.tensor(x)).numpy()
    np.testing.assert_allclose(eager, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(compiled, want, rtol=1e-4, atol=1e-4)
    assert "conv2d_epilogue" in str(compiled_fn.optimized_graph)

    class Exported(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = reference

        def forward(self, x):
            h = self.layers(x)
            return h + self.layers[5](h)
    path = str(tmp_path / "block.onnx")
    with torch.no_grad():
        torch.onnx.export(Exported().eval(), (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    loaded = dg.onnx.load(path)
    np.testing.assert_allclose(np.asarray(loaded(dg.tensor(x)).numpy()), want, rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5]])
def test_gradients_of_direct_convs_match_torch(case):
    """A multiplier or a grouped conv's forward is the direct loop, its gradients the
    blocked GEMMs: both against torch."""
    x, w, b, attrs = _data(case)
    xs, ws, bs = (dg.tensor(a, requires_grad=True) for a in (x, w, b))
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    (top, bottom), (left, right) = attrs["padding"]
    y = dg.nn.functional.conv2d(dg.nn.functional.pad(xs, (left, right, top, bottom)), ws, bs,
                                attrs["stride"], 0, attrs["dilation"], attrs["groups"])
    yt = F.conv2d(F.pad(xt, (left, right, top, bottom)), wt, bt, attrs["stride"], 0,
                  attrs["dilation"], attrs["groups"])
    g = np.cos(np.arange(yt.numel(), dtype=np.float32)).reshape(tuple(yt.shape))
    y.backward(dg.tensor(g))
    yt.backward(torch.tensor(g))
    for got, want in [(y, yt), (xs.grad, xt.grad), (ws.grad, wt.grad), (bs.grad, bt.grad)]:
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-4,
                                   atol=1e-4)
