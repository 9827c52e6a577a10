"""Convolutions with few input channels by ``kernels/conv_shallow.py`` (output positions
in a vector's lanes) against torch on odd shapes: padding, stride 1-3, dilation, output
channels not a multiple of 6, rows not of 8 or 16, bands not of 4, batch 1 and 3, every
activation and residual placement, eight and sixteen lanes, one thread and two; the
compiled ``conv2d_epilogue`` that runs it (``conv_shallow_<act>``) against eager, and a
torch export loaded with ``dg.onnx.load``."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.kernels import conv_shallow  # noqa: E402
from dualgraph.kernels.epilogue import ACTIVATIONS  # noqa: E402

TF = torch.nn.functional
TORCH_ACTS = {"none": lambda v: v, "relu": TF.relu, "clamp": lambda v: v.clamp(0, 6),
              "sigmoid": torch.sigmoid, "silu": TF.silu, "hardswish": TF.hardswish,
              "gelu": TF.gelu, "gelu_tanh": lambda v: TF.gelu(v, approximate="tanh"),
              "hardsigmoid": TF.hardsigmoid}

# (n, c, h, w), cout, kernel, stride, padding, dilation
CONVS = [
    ((1, 3, 33, 35), 16, 3, 2, 1, 1), ((3, 3, 20, 19), 13, 3, 1, 1, 1),
    ((1, 1, 28, 28), 6, 5, 1, 0, 1), ((2, 4, 30, 41), 8, 7, 2, 3, 1),
    ((1, 2, 25, 40), 5, 3, 3, 2, 1), ((1, 3, 24, 26), 9, 3, 1, 2, 2),
    ((3, 3, 17, 17), 24, (3, 5), (2, 1), (1, 2), 1),
]


def _pair(v):
    return (v, v) if isinstance(v, int) else v


def _arrays(case):
    """A case's random generator, input, weight and bias, and its (stride, padding,
    dilation) as pairs."""
    shape, cout, k, s, p, d = case
    rng = np.random.default_rng(sum(shape) + cout)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((cout, shape[1], *_pair(k))) * 0.3).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    return rng, x, w, b, tuple(map(_pair, (s, p, d)))


@pytest.mark.parametrize("case", CONVS)
@pytest.mark.parametrize("act", ["relu", "hardswish", "silu"])
def test_matches_torch(case, act):
    rng, x, w, b, (s, p, d) = _arrays(case)
    want = TORCH_ACTS[act](TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), s,
                                     p, d)).numpy()
    pads = ((p[0],) * 2, (p[1],) * 2)
    assert conv_shallow.wanted(x.shape, w.shape, want.shape[2:], pads, 1, np.float32)
    out = np.full(want.shape, np.nan, np.float32)
    conv_shallow.conv(x, w, out, s, pads, d, 1, b,
                      act=ACTIVATIONS.index(act))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("where", [1, 2])
@pytest.mark.parametrize("act", sorted(TORCH_ACTS))
def test_residual_and_every_activation(where, act):
    """A residual added before (1) or after (2) each activation, on a block of channels
    that fills every lane and one that does not (13 channels)."""
    rng = np.random.default_rng(where)
    x = rng.standard_normal((2, 3, 19, 21)).astype(np.float32)
    w = (rng.standard_normal((13, 3, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(13).astype(np.float32)
    y = TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), 1, 1)
    r = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    f = TORCH_ACTS[act] if act != "clamp" else (lambda v: v.clamp(-0.5, 0.5))
    want = (f(y + torch.tensor(r)) if where == 1 else f(y) + torch.tensor(r)).numpy()
    out = np.empty(want.shape, np.float32)
    lo, hi = (-0.5, 0.5) if act == "clamp" else (-np.inf, np.inf)
    conv_shallow.conv(x, w, out, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, b, residual=r,
                      where=where, act=ACTIVATIONS.index(act), lo=lo, hi=hi)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CONVS[:4] + [((2, 3, 23, 45), 11, 5, 4, (0, 3), 1)])
def test_activations_in_registers_give_the_bits_of_the_pass(case):
    """ReLU, clamp, hard-swish and hard-sigmoid applied to the sums in registers give the
    bits of ``epilogue._activate``'s pass over the conv's result (run as plain Python), on
    NaN, +-inf and -0.0 sums too (rows of zeros, negative weights and a -0.0 bias:
    ReLU makes +0.0 of -0.0), stride 4 and padding of 0 and 3."""
    from dualgraph.kernels.epilogue import _activate
    rng, x, w, b, (s, p, d) = _arrays(case)
    x[0, 0, :2, :5] = [[np.nan, np.inf, 0, -np.inf, 1e30]] * 2
    x[:, :, x.shape[2] // 2:], w[-1], b[-1] = 0, -np.abs(w[-1]), -0.0
    pads = ((p[0],) * 2, (p[1],) * 2)
    hw = [(n + 2 * q - d[i] * (k - 1) - 1) // s[i] + 1
          for i, (n, q, k) in enumerate(zip(x.shape[2:], p, w.shape[2:]))]
    plain = np.empty((x.shape[0], w.shape[0], *hw), np.float32)
    conv_shallow.conv(x, w, plain, s, pads, d, 1, b)
    assert np.isnan(plain).any() and (np.signbit(plain) & (plain == 0)).any()
    for act, lo, hi in [("relu", -np.inf, np.inf), ("clamp", -0.5, 0.25),
                        ("hardswish", -np.inf, np.inf), ("hardsigmoid", -np.inf, np.inf)]:
        out = np.full(plain.shape, 7, np.float32)
        conv_shallow.conv(x, w, out, s, pads, d, 1, b, act=ACTIVATIONS.index(act), lo=lo,
                          hi=hi)
        want = plain.copy().reshape(-1)
        _activate(want, ACTIVATIONS.index(act), np.float32(lo), np.float32(hi))
        np.testing.assert_array_equal(out.view(np.int32), want.reshape(out.shape).view(
            np.int32), err_msg=act)


# (n, c, h, w), cout, kernel, stride, padding, dilation: rows of a multiple of sixteen
# outputs and not, row counts of no multiple of four (the last band overlaps), channels of
# no multiple of six (the last block repeats one), four rows only
TAILS = [((2, 3, 41, 37), 13, 3, 1, 1, 1), ((1, 3, 15, 68), 7, 7, 2, 3, 1),
         ((3, 2, 10, 20), 6, 3, 1, 1, (2, 1)), ((1, 1, 16, 35), 64, 5, 2, 2, 1),
         ((2, 4, 14, 16), 5, 3, 1, 1, 1)]


@pytest.mark.parametrize("case", TAILS)
def test_same_bits_at_both_widths_and_thread_counts(case, monkeypatch):
    """Eight or sixteen outputs a vector, one thread or two (bands shared between them,
    a residual added after ReLU): the same bits, and torch's values."""
    rng, x, w, b, (s, p, d) = _arrays(case)
    y = TF.relu(TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), s, p, d))
    r = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    want = (y + torch.tensor(r)).numpy()
    runs = []
    for width in (8, 16)[:1 + (want.shape[3] >= 16)]:
        for threads in (1, 2):
            monkeypatch.setattr(conv_shallow, "lanes", lambda wo: width)
            monkeypatch.setattr(conv_shallow, "threads_for", lambda size: threads)
            out = np.full(want.shape, np.nan, np.float32)
            conv_shallow.conv(x, w, out, s, ((p[0],) * 2, (p[1],) * 2), d, 1, b, residual=r,
                              where=2, act=ACTIVATIONS.index("relu"))
            runs.append(out)
    np.testing.assert_allclose(runs[0], want, rtol=1e-5, atol=1e-5)
    for other in runs[1:]:
        np.testing.assert_array_equal(other, runs[0])


def test_not_wanted_for_many_channels_narrow_rows_or_groups():
    pad = ((1, 1), (1, 1))
    assert not conv_shallow.wanted((1, 5, 32, 32), (8, 5, 3, 3), (32, 32), pad, 1, np.float32)
    assert not conv_shallow.wanted((1, 3, 12, 12), (8, 3, 3, 3), (6, 7), pad, 1, np.float32)
    assert not conv_shallow.wanted((1, 3, 4, 32), (8, 3, 3, 3), (2, 32), pad, 1, np.float32)
    assert not conv_shallow.wanted((1, 4, 32, 32), (8, 2, 3, 3), (32, 32), pad, 2, np.float32)
    assert not conv_shallow.wanted((1, 3, 32, 32), (8, 3, 3, 3), (32, 32), pad, 1, np.float64)
    assert not conv_shallow.wanted((1, 3, 32, 32), (8, 3, 3, 3), (32, 32), ((-1, 0), (0, 0)), 1,
                                   np.float32)


def _first_layer(lib, cout=12, k=3):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, cout, k, 2, k // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.Hardswish(), nn.Conv2d(cout, 8, 1))


def _both(make, rng):
    """``make(torch)`` and ``make(dg)`` in eval mode with the same random state (running
    variances positive)."""
    reference = make(torch).eval()
    state = {k: (rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32)
             for k, v in reference.state_dict().items() if v.dtype == torch.float32}
    state = {k: np.abs(v) + 0.5 if k.endswith("running_var") else v for k, v in state.items()}
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    model = make(dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()}, strict=False)
    return reference, model


# (a 3x3 layer of 12 channels: conv_outlanes takes it first where it would, as the eager
# conv does; a 9x9 layer of 12 channels has too many weights per output for it and too
# few channels to pack: conv_shallow; so is a 7x7 stem of 64 channels, faster than packed)
@pytest.mark.parametrize("batch, cout, k, kernel", [(1, 12, 3, "(shallow|outlanes)"),
                                                    (3, 12, 3, "(shallow|outlanes)"),
                                                    (2, 12, 9, "shallow"),
                                                    (2, 64, 7, "shallow")])
def test_compiled_and_onnx_import_match_eager_and_torch(batch, cout, k, kernel, tmp_path):
    """A first layer (3 channels, BatchNorm folded, hard-swish) compiled runs
    ``conv_<kernel>_hardswish``; compiled, eager, ``dg.onnx.load`` of the torch export and
    torch agree."""
    rng = np.random.default_rng(batch)
    reference, model = _both(lambda lib: _first_layer(lib, cout, k), rng)
    x = rng.standard_normal((batch, 3, 30, 34)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    compiled = dg.compile(model)
    with dg.no_grad():
        compiled(dg.tensor(x))
        got = compiled(dg.tensor(x)).numpy()
        eager = model(dg.tensor(x)).numpy()
    assert re.search(rf"= conv_{kernel}_hardswish\(", compiled.code), compiled.code
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    path = str(tmp_path / "first.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    loaded = dg.onnx.load(path)
    np.testing.assert_allclose(np.asarray(loaded(dg.tensor(x)).numpy()), want, rtol=1e-4,
                               atol=1e-5)


# (n, c, h, w), cout, kernel, stride, padding, dilation: output channels a multiple of
# eight (the blocked layout's), rows of 16 outputs and not, bands of three rows and not
BLOCKED = [((2, 3, 41, 37), 16, 3, 1, 1, 1), ((1, 3, 15, 68), 8, 7, 2, 3, 1),
           ((3, 1, 30, 35), 24, 5, 2, 2, 1), ((1, 4, 24, 26), 32, 3, 1, 2, 2)]


@pytest.mark.parametrize("case", BLOCKED)
@pytest.mark.parametrize("act, where", [("clamp", 0), ("silu", 0), ("relu", 1)])
def test_blocked_output_gives_the_bits_of_the_planes_blocked(case, act, where, monkeypatch):
    """Written channel-blocked ``(N, Cout/8, Ho, Wo, 8)`` (``fitted(blocked=True)``: the
    sums staged and transposed), the loop gives the bits of its NCHW output blocked, the
    epilogue in registers (clamp) or a pass (SiLU, a blocked residual added first), at
    eight and sixteen lanes, one thread and two; and torch's values."""
    from dualgraph.kernels.conv_blocked import block
    rng, x, w, b, (s, p, d) = _arrays(case)
    y = TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), s, p, d)
    r = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y = y + torch.tensor(r) if where else y
    want = (y.clamp(0, 6) if act == "clamp" else TORCH_ACTS[act](y)).numpy()
    pads, code = ((p[0],) * 2, (p[1],) * 2), ACTIVATIONS.index(act)
    plain = np.empty(want.shape, np.float32)
    conv_shallow.conv(x, w, plain, s, pads, d, 1, b, residual=r if where else None,
                      where=where, act=code, lo=0, hi=6)
    np.testing.assert_allclose(plain, want, rtol=1e-5, atol=1e-5)
    for width in (8, 16)[:1 + (want.shape[3] >= 16)]:
        for threads in (1, 2):
            monkeypatch.setattr(conv_shallow, "lanes", lambda wo: width)
            monkeypatch.setattr(conv_shallow, "threads_for", lambda size: threads)
            run = conv_shallow.fitted(x.shape, w.shape, want.shape, s, pads, d, 1, np.float32,
                                      bool(where), where, code, 0, 6, blocked=True)
            out = np.full(block(want).shape, np.nan, np.float32)
            run(x, w, b, out, block(r) if where else None)
            np.testing.assert_array_equal(out, block(plain))


def _stem_block(lib, act, pad):
    """A first layer (asymmetric padding through F.pad where ``pad``), BatchNorm, ``act``,
    then two depthwise 3x3 convs, a 1x1 and a mean: a blocked region that reads the first
    layer's output (and pays for unblocking it where it is returned too)."""
    nn = lib.nn

    class Stem(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, 2, 0 if pad else 1, bias=False)
            self.bn, self.act = nn.BatchNorm2d(16), act(lib)
            self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
            self.dw2 = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
            self.pw = nn.Conv2d(16, 8, 1)

        def forward(self, x):
            x = lib.nn.functional.pad(x, (0, 2, 1, 0)) if pad else x
            h = self.act(self.bn(self.conv(x)))
            y = self.pw(self.dw2(lib.nn.functional.relu6(self.dw(h))))
            return y.mean((2, 3)), h
    return Stem()


@pytest.mark.parametrize("act, pad, batch, read_outside", [
    (lambda lib: lib.nn.ReLU6(), False, 1, False), (lambda lib: lib.nn.SiLU(), True, 2, False),
    (lambda lib: lib.nn.Hardswish(), False, 2, True)])
def test_a_first_layer_read_by_a_blocked_region_writes_the_blocked_layout(
        act, pad, batch, read_outside):
    """A 3-channel first layer whose output a blocked region (depthwise, 1x1) reads
    compiles to ``conv_shallow_blocked_<act>`` with no ``block_channels`` pass; its output
    also returned (read outside the region) is unblocked once. Compiled, eager and torch
    agree."""
    rng = np.random.default_rng(batch)
    reference, model = _both(lambda lib: _stem_block(lib, act, pad), rng)
    x = rng.standard_normal((batch, 3, 45, 50)).astype(np.float32)
    pick = (lambda outs: outs) if read_outside else (lambda outs: outs[:1])
    with torch.no_grad():
        want = [t.numpy() for t in pick(reference(torch.tensor(x)))]
    compiled = dg.compile(lambda v: pick(model(v)))
    with dg.no_grad():
        compiled(dg.tensor(x))
        got = [t.numpy() for t in compiled(dg.tensor(x))]
        eager = [t.numpy() for t in pick(model(dg.tensor(x)))]
    assert re.search(r"= conv_shallow_blocked_\w+\(", compiled.code), compiled.code
    assert "block_channels(" not in compiled.code.replace("unblock_channels(", ""), \
        compiled.code
    for g, e, t in zip(got, eager, want):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g, t, rtol=1e-4, atol=1e-5)
