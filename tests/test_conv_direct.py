"""Depthwise and narrow grouped convolutions through ``kernels/conv_direct.py`` (phase
planes, taps summed in registers, the epilogue per band) beyond test_conv_tiles.py's
shapes and epilogues (``DIRECT``: odd sizes, channel multipliers 2 and 3, groups 2-4,
dilation, strides, batch 1/3/16, padding 0-2 and asymmetric, 1x1 to 7x7 kernels): float64,
the bits on one or three threads, a block with BatchNorm, activations and a residual eager,
under ``dg.compile`` and through ``dg.onnx.load``, and the gradients of the convs whose
forward alone is direct; depthwise convs also in blocks of eight channels
(``kernels/conv_lanes.py``)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.kernels import conv_direct, conv_lanes  # noqa: E402
from dualgraph.ops import conv as conv_ops  # noqa: E402

from test_conv_tiles import DIRECT, _data, _torch_conv  # noqa: E402

F = torch.nn.functional


def test_float64_stays_float64():
    x, w, b, attrs = _data(DIRECT[1])
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    want = _torch_conv(x, w, b, **attrs).numpy()
    got = conv_ops.CONV2D.kernel(x, w, b, **attrs)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_bits_do_not_depend_on_threads(monkeypatch):
    """Each output is summed by one thread in tap order: two slots give one's bits."""
    x, w, b, attrs = _data(DIRECT[2])
    out = [np.empty((16, 5, 9, 8), np.float32) for _ in range(2)]
    monkeypatch.setattr(conv_direct, "threads_for", lambda size: 1)
    conv_direct.conv(x, w, out[0], attrs["stride"], attrs["padding"], attrs["dilation"],
                     attrs["groups"], b)
    monkeypatch.setattr(conv_direct, "threads_for", lambda size: None)
    monkeypatch.setattr(conv_direct, "cores", lambda: 3)
    conv_direct.conv(x, w, out[1], attrs["stride"], attrs["padding"], attrs["dilation"],
                     attrs["groups"], b)
    np.testing.assert_array_equal(out[0], out[1])


def test_lanes_bits_do_not_depend_on_threads(monkeypatch):
    """The same for the blocks of eight channels (17 channels: a partial block)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 17, 14, 14)).astype(np.float32)
    w = rng.standard_normal((17, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(17).astype(np.float32)
    out = [np.empty((3, 17, 7, 7), np.float32) for _ in range(2)]
    assert conv_lanes.wanted(x.shape, w.shape, (7, 7), ((1, 1), (1, 1)), 17, x.dtype)
    monkeypatch.setattr(conv_lanes, "threads_for", lambda size: 1)
    conv_direct.conv(x, w, out[0], (2, 2), ((1, 1), (1, 1)), (1, 1), 17, b)
    monkeypatch.setattr(conv_lanes, "threads_for", lambda size: None)
    monkeypatch.setattr(conv_lanes, "cores", lambda: 4)
    conv_direct.conv(x, w, out[1], (2, 2), ((1, 1), (1, 1)), (1, 1), 17, b)
    np.testing.assert_array_equal(out[0], out[1])
    want = F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), 2, 1, 1, 17).numpy()
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-5)


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


@pytest.mark.parametrize("batch, size", [(1, (17, 15)), (3, (17, 15)), (16, (17, 15)),
                                         (2, (33, 35))])   # (rows filled in phase pairs)
def test_eager_compiled_and_onnx_import_match_torch(tmp_path, batch, size):
    reference, model = _models()
    x = np.random.default_rng(batch).standard_normal((batch, 6, *size)).astype(np.float32)
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


@pytest.mark.parametrize("case", [DIRECT[1], DIRECT[4], DIRECT[5]])
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


# Depthwise shapes of every kind the loop takes (n, c, multiplier, h, w, k, stride,
# padding, dilation), each with one epilogue: (activation, bounds, where the residual
# goes). Planes 1x1, 5x7 and 57x57; channels 1, 3, 17 and 96; kernels 3, 5 and 7; stride 2
# on rows of ``PAIR_MIN_WIDTH`` or more (both column phases filled in one pass) and fewer.
EPILOGUES = [("none", None, None), ("relu", None, "before"), ("clamp", (0, 6), None),
             ("sigmoid", None, "after"), ("silu", None, None), ("hardswish", None, "before")]
DEPTHWISE = [
    (1, 1, 1, 1, 1, 3, 1, 1, 1), (3, 3, 2, 5, 7, 3, 2, 1, 1), (16, 17, 1, 5, 7, 5, 1, 2, 1),
    (1, 96, 1, 57, 57, 3, 2, 1, 1), (3, 17, 2, 57, 57, 5, 2, 2, 1),
    (1, 3, 1, 57, 57, 7, 1, 3, 1), (1, 17, 1, 5, 7, 3, 1, 2, 2), (16, 3, 1, 5, 7, 7, 2, 3, 1),
    (3, 96, 1, 14, 14, 5, 1, 0, 1), (1, 17, 2, 9, 11, 3, 1, 0, 2),
    (1, 3, 1, 1, 1, 5, 2, 2, 1), (16, 1, 2, 7, 7, 3, 1, 1, 1),
    (1, 3, 1, 30, 31, 3, 2, 0, 1), (3, 17, 1, 29, 40, 7, 2, 3, 2),   # rows in phase pairs
    # blocks of eight channels (kernels/conv_lanes.py): 8, 9 and 96 channels, 7x7 to 28x28
    (1, 8, 1, 7, 7, 3, 1, 1, 1), (16, 9, 1, 14, 14, 3, 2, 1, 1), (3, 96, 1, 7, 7, 5, 1, 2, 2),
    (1, 8, 1, 14, 14, 7, 1, 3, 1), (16, 24, 1, 28, 28, 3, 2, 1, 1), (3, 9, 1, 5, 7, 3, 2, 0, 1),
    # rows of exactly eight positions and of fifteen (a last run of eight rewriting seven),
    # 13 and 21 channels (partial blocks whose weights the loop interleaves), batch 3
    (1, 13, 1, 9, 15, 3, 1, 1, 1), (3, 21, 1, 16, 16, 3, 2, 1, 1),
    # 3- and 5-wide windows at stride 1 (a row's input vectors shared by its eight
    # positions): odd planes, 20 and 11 channels, rows of exactly eight, batch 2 and 3;
    # dilation 2 takes the general loop
    (2, 20, 1, 33, 27, 3, 1, 1, 1), (1, 11, 1, 19, 23, 5, 1, 2, 1),
    (3, 16, 1, 8, 8, 3, 1, 1, 1), (2, 24, 1, 9, 17, 5, 1, 2, 1), (1, 9, 1, 12, 12, 5, 1, 2, 2),
    (1, 16, 1, 10, 40, 3, 1, 0, 1),
    # rows of eight columns or more of which a strided conv reads fewer than eight (the
    # last column unread): staged as narrow rows, in a buffer once sized by the width, so
    # the loop wrote past it (wrong values, a corrupted heap; test_generated_cnns seed 183)
    (1, 64, 1, 7, 8, 3, 2, 0, 1), (2, 16, 1, 9, 8, 3, 2, 0, 1),
]


@pytest.mark.parametrize("lanes", [False, True])
@pytest.mark.parametrize("i, case", list(enumerate(DEPTHWISE)))
def test_depthwise_with_each_epilogue_matches_torch(i, case, lanes, monkeypatch):
    """The direct loop with the compiled epilogue's arguments, against torch's conv, its
    activation and the residual, on the shapes above; with ``lanes`` every depthwise conv
    of multiplier 1 in blocks of eight channels (``conv_lanes``), else none."""
    from dualgraph.kernels.epilogue import ACTIVATIONS
    n, c, mult, h, w, k, s, p, d = case
    monkeypatch.setattr(conv_lanes, "MAX_POSITIONS", 1 << 30 if lanes else 0)
    if lanes and mult > 1:
        pytest.skip("a channel multiplier is conv_direct's alone")
    act, bounds, residual_at = EPILOGUES[i % len(EPILOGUES)]
    rng = np.random.default_rng(i)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((c * mult, 1, k, k)).astype(np.float32) / k
    b = rng.standard_normal(c * mult).astype(np.float32)
    y = F.conv2d(torch.tensor(x), torch.tensor(weight), torch.tensor(b), s, p, d, c)
    r = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    act_fn = {"none": lambda t: t, "relu": F.relu, "clamp": lambda t: t.clamp(0, 6),
              "sigmoid": torch.sigmoid, "silu": F.silu, "hardswish": F.hardswish}[act]
    want = act_fn(y + torch.tensor(r) if residual_at == "before" else y)
    want = (want + torch.tensor(r) if residual_at == "after" else want).numpy()
    out = np.full(tuple(y.shape), np.nan, np.float32)
    where = {None: 0, "before": 1, "after": 2}[residual_at]
    lo, hi = bounds or (-np.inf, np.inf)
    conv_direct.conv(x, weight, out, (s, s), ((p, p), (p, p)), (d, d), c, b,
                     r if where else None, where, ACTIVATIONS.index(act), lo, hi)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
