"""The lowering rule ``expand_into_depthwise`` (``passes/expand.py``; the op
``expand_depthwise_blocked``, ``kernels/conv_expand.py``): in a blocked region, a 1x1
convolution whose output only a depthwise conv reads is computed a band of rows at a time
into the depthwise conv's padded scratch. Inverted-residual blocks compiled against eager
and torch: kernels 3, 5 and 7, strides 1 and 2, expansions 1, 4 and 6, expanded channels
that are and are not multiples of sixteen (sixteen- and eight-lane loops), planes of one to
seven rows and odd widths, batches 1 and 3, ReLU6, hard-swish and SiLU, the depthwise
conv's residual; NaN and infinities; the places the precondition leaves alone (the 1x1's
output read elsewhere too, or as the residual); the default cost rule on a plane larger
than L2 keeps, and the fused loop against the two ops bit for bit (several bands, all
edge cases of a band)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph import kernels  # noqa: E402
from dualgraph.ops.layout import (DEPTHWISE_BLOCKED, EXPAND_DEPTHWISE_BLOCKED,  # noqa: E402
                                  POINTWISE_BLOCKED)
from dualgraph.passes import expand  # noqa: E402
from test_cnn_inference import compiled_eager_torch  # noqa: E402


def _block(lib, c=16, t=6, cout=16, k=3, stride=1, act="ReLU6", use="project"):
    """Expand ``c`` to ``t * c`` (1x1, ``act``), depthwise ``k``x``k`` at ``stride``
    (``act``), project to ``cout`` (1x1), then two depthwise 3x3 convs (so that the blocked
    region pays for its conversions at any expansion). ``use``: ``"residual"`` adds the
    block's input to the depthwise conv's output after its activation, ``"residual_before"``
    before it (``t == 1``, stride 1: the depthwise conv's residual), ``"twice"`` adds the
    expanded value after the activation (stride 1: it is read elsewhere too),
    ``"as_residual"`` before it (the depthwise conv's residual)."""
    nn, e = lib.nn, t * c

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.expand = nn.Sequential(nn.Conv2d(c, e, 1), getattr(nn, act)())
            self.dw = nn.Conv2d(e, e, k, stride, k // 2, groups=e)
            self.act = getattr(nn, act)()
            self.project = nn.Conv2d(e, cout, 1)
            self.tail = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, groups=cout), nn.ReLU(),
                                      nn.Conv2d(cout, cout, 3, 1, 1, groups=cout))

        def forward(self, x):
            h = self.expand(x)
            d = self.dw(h)
            if use == "as_residual":
                d = d + h
            elif use == "residual_before":
                d = d + x
            d = self.act(d)
            if use == "residual":
                d = d + x
            elif use == "twice":
                d = d + h
            return self.tail(self.project(d))
    return Block()


def _pair(seed, **kw):
    model, reference = _block(dg, **kw).eval(), _block(torch, **kw).eval()
    rng = np.random.default_rng(seed)
    state = {k: (rng.standard_normal(tuple(v.shape)) * 0.4).astype(np.float32)
             for k, v in reference.state_dict().items()}
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    return model, reference


def _check(model, reference, x):
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return [n.op.name for n in compiled.optimized_graph.nodes]


@pytest.fixture
def any_size(monkeypatch):
    """The cost rule off: the rule takes expansions of any size (small planes here)."""
    monkeypatch.setattr(expand, "MIN_EXPANDED_BYTES", 0)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("kw,size", [
    (dict(), (9, 11)),
    (dict(k=5, stride=2, act="Hardswish"), (13, 7)),
    (dict(k=7, stride=2, act="SiLU", t=4, cout=24), (7, 9)),
    (dict(k=3, stride=2, c=8, t=5, cout=8), (1, 13)),       # 40 channels: eight lanes
    (dict(k=5, c=8, t=3), (3, 5)),                          # 24 channels
    (dict(k=7, c=24, t=4, cout=8, act="Hardswish"), (2, 17)),
    (dict(t=1, use="residual"), (6, 9)),
    (dict(t=4, k=5, stride=2), (4, 3)),
    (dict(t=1, use="residual_before", act="SiLU"), (5, 23)),
])
def test_expansion_into_the_depthwise_conv_equal_to_eager_and_torch(any_size, batch, kw,
                                                                    size):
    """The block's expand and depthwise convs are one expand_depthwise_blocked (and its
    projection with the first depthwise conv after it another); compiled equals eager and
    torch."""
    model, reference = _pair(batch, **kw)
    c = kw.get("c", 16)
    x = np.random.default_rng(batch).standard_normal((batch, c, *size)).astype(np.float32)
    ops = _check(model, reference, x)
    assert ops.count("expand_depthwise_blocked") == 2, ops
    assert "pointwise_blocked" not in ops and ops.count("depthwise_blocked") == 1, ops


def test_nan_and_infinities_reach_the_output_as_in_eager(any_size):
    """A NaN and an infinity in the input spread through the 1x1 into every expanded
    channel of their position and through the depthwise window as in eager."""
    model, reference = _pair(0, k=5, stride=2)
    x = np.random.default_rng(0).standard_normal((2, 16, 11, 9)).astype(np.float32)
    x[0, 3, 2, 2], x[1, 5, 8, 1] = np.nan, np.inf
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    assert "expand_depthwise_blocked" in [n.op.name for n in compiled.optimized_graph.nodes]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(eager))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("use", ["twice", "as_residual"])
def test_the_precondition_leaves_an_expansion_read_elsewhere(any_size, use):
    """The expanded value read also by an add (or as the depthwise conv's residual, where
    conv_epilogue makes it one): the two convs stay apart (the projection still goes into
    the depthwise conv after it), the values eager's and torch's."""
    model, reference = _pair(2, use=use)
    x = np.random.default_rng(2).standard_normal((1, 16, 7, 7)).astype(np.float32)
    ops = _check(model, reference, x)
    assert ops.count("expand_depthwise_blocked") == 1, ops
    assert ops.count("pointwise_blocked") == 1 and ops.count("depthwise_blocked") == 2, ops


def test_the_cost_rule_takes_a_plane_larger_than_l2_keeps():
    """By default the rule takes 16 -> 96 channels on a 57x61 plane (1.3 MB an image, odd
    sizes, stride 2; not the 16-channel projection into the depthwise conv after it), not
    16 -> 48 on 9x11; both equal eager and torch."""
    model, reference = _pair(4, t=6, stride=2)
    x = np.random.default_rng(4).standard_normal((1, 16, 57, 61)).astype(np.float32)
    assert _check(model, reference, x).count("expand_depthwise_blocked") == 1
    model, reference = _pair(5, t=3)
    x = np.random.default_rng(5).standard_normal((1, 16, 9, 11)).astype(np.float32)
    assert "expand_depthwise_blocked" not in _check(model, reference, x)


@pytest.mark.parametrize("shape,cout,k,stride,dilation", [
    ((2, 2, 40, 23, 8), 96, 3, 2, 1),
    ((1, 3, 31, 9, 8), 72, 5, 1, 1),
    ((1, 1, 17, 8, 8), 40, 7, 2, 1),
    ((2, 2, 12, 15, 8), 48, 3, 1, 2),
    ((0, 2, 9, 9, 8), 48, 3, 1, 1),
])
def test_the_fused_loop_is_the_two_ops_bit_for_bit(monkeypatch, shape, cout, k, stride,
                                                     dilation):
    """Bands of a few rows (``BAND_BYTES`` small: many bands, the last one shorter, bands
    that start and end in the padding), dilation, an empty batch: the fused loop's output
    is ``pointwise_blocked`` then ``depthwise_blocked``, the same bits."""
    monkeypatch.setattr(kernels.conv_expand, "BAND_BYTES", 6 * cout * shape[3] * 4)
    rng = np.random.default_rng(k)
    x = rng.standard_normal(shape).astype(np.float32)
    wp = kernels.conv_blocked.pack(rng.standard_normal((cout, shape[1] * 8, 1, 1)).astype(
        np.float32))
    b, db = rng.standard_normal((2, cout)).astype(np.float32)
    w = rng.standard_normal((cout, 1, k, k)).astype(np.float32)
    pad = dilation * (k // 2)
    attrs = dict(act="hardswish", bounds=(-np.inf, np.inf), residual_at=None,
                 stride=(stride, stride), padding=((pad, pad), (pad - 1, pad)),
                 dilation=(dilation, dilation))
    y = POINTWISE_BLOCKED.kernel(x, wp, b, act="clamp", bounds=(0.0, 6.0), residual_at=None)
    want = DEPTHWISE_BLOCKED.kernel(y, w, db, **attrs)
    got = EXPAND_DEPTHWISE_BLOCKED.kernel(x, wp, b, w, db, expand_act="clamp",
                                          expand_bounds=(0.0, 6.0), **attrs)
    np.testing.assert_array_equal(got, want)
