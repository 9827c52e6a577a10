"""An eval-mode BatchNorm and its activation before a 1x1 conv as the prologue of the conv's
input read (``conv2d_prologue``, made by the lowering rule ``conv_prologue``): the loop
(``kernels/conv_pointpacked.py``) against the op's decomposition and torch on odd shapes
(channels not a multiple of the block, tails of positions, more input channels than a
block of ``KC``, batch 1 and more) with every prologue activation, BatchNorm scales of zero
and below, NaN and inf inputs, every register block; compiled pre-activation layers
against eager and torch, with the activation (and without: folded into the weights by
``fold_input_affine``), a normalised input another node reads too (it stays), and a conv
the loop does not take (left alone)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.kernels import conv_packed, conv_pointpacked  # noqa: E402
from dualgraph.ops.prologue import CONV2D_PROLOGUE, PROLOGUE_ACTS  # noqa: E402

ATTRS = dict(act="relu", bounds=(-np.inf, np.inf), residual_at=None, stride=(1, 1),
             padding=((0, 0), (0, 0)), dilation=(1, 1), kernel_size=(1, 1), groups=1)
# n, c, h, w, cout
SHAPES = [
    (1, 13, 5, 9, 11),      # 45 positions: a tail of five; channels not a multiple of 8
    (3, 70, 7, 7, 20),      # batch 3, more input channels than KC, 49 positions
    (1, 37, 20, 20, 24),    # 400: two chunks and a sliver
    (2, 8, 2, 4, 8),        # the smallest taken: one vector
]


def _data(n, c, h, w, cout, seed=0):
    """``x`` with NaN, inf and -inf in it, a weight, bias, and a BatchNorm's per-channel
    scale (zero and negative ones among them) and shift."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, c, h, w)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[-1, c - 1, h - 1, w - 1] = np.inf
    w_ = r.standard_normal((cout, c, 1, 1)).astype(np.float32)
    b = r.standard_normal(cout).astype(np.float32)
    scale = r.standard_normal(c).astype(np.float32)
    scale[1] = 0.0     # (inf * 0: NaN, as BatchNorm's eager ops make it)
    scale[2] = -abs(scale[2])
    return x, w_, b, scale, r.standard_normal(c).astype(np.float32)


def _torch_reference(x, w, b, scale, shift, act, bounds):
    t = torch.tensor(x) * torch.tensor(scale)[:, None, None] + torch.tensor(shift)[:, None,
                                                                                   None]
    t = {"none": lambda v: v, "relu": torch.relu,
         "clamp": lambda v: v.clamp(*bounds)}[act](t)
    return torch.relu(torch.nn.functional.conv2d(t, torch.tensor(w), torch.tensor(b))).numpy()


def _close(got, want, atol=1e-4):
    """Equal up to rounding, NaN where ``want`` is (and inf of the same sign)."""
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=atol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("act", PROLOGUE_ACTS)
def test_the_loop_with_each_prologue_matches_torch_and_the_decomposition(shape, act):
    x, w, b, scale, shift = _data(*shape)
    bounds = (0.0, 6.0) if act == "clamp" else (-np.inf, np.inf)
    attrs = dict(ATTRS, out_channels=shape[4], pre_act=act, pre_bounds=bounds)
    wp = conv_packed.pack(w)
    got = CONV2D_PROLOGUE.kernel(x, scale, shift, wp, b, **attrs)
    _close(got, _torch_reference(x, w, b, scale, shift, act, bounds))
    decomposed = CONV2D_PROLOGUE.decomposition(*map(dg.tensor, (x, scale, shift, wp, b)),
                                               **attrs).numpy()
    _close(got, decomposed)


@pytest.mark.parametrize("sums", (12, 24, 48))
def test_the_prologue_over_blocks_of_input_channels_threads_and_register_blocks(
        sums, monkeypatch):
    """``KC`` of five (``WHOLE_BYTES`` 0: no input in one block): the prologue of each
    block of input rows in turn; three threads' slots, each its own buffer; every register
    block (their tails read the buffer too)."""
    monkeypatch.setattr(conv_pointpacked, "KC", 5)
    monkeypatch.setattr(conv_pointpacked, "WHOLE_BYTES", 0)
    monkeypatch.setattr(conv_pointpacked, "threads_for", lambda size: 3)
    shape = (2, 23, 13, 13, 19)
    x, w, b, scale, shift = _data(*shape, seed=1)
    out = np.empty((2, 19, 13, 13), np.float32)
    conv_pointpacked.conv(x, conv_packed.pack(w), out, b, act=1, sums=sums,
                          pre=(scale, shift), pre_act=1)
    _close(out, _torch_reference(x, w, b, scale, shift, "relu", None))


@pytest.mark.parametrize("stride", [(2, 2), (3, 2)])
def test_the_prologue_of_a_strided_conv_matches_torch(stride):
    """At a stride above 1 the loop reads the input gathered first: the prologue (per
    element) on the gathered rows and columns, NaN and inf among them."""
    x, w, b, scale, shift = _data(2, 70, 15, 13, 20)
    x[1, 5, ::stride[0], ::stride[1]][1, :2] = [np.nan, -np.inf]
    attrs = dict(ATTRS, stride=stride, out_channels=20, pre_act="relu",
                 pre_bounds=(-np.inf, np.inf))
    got = CONV2D_PROLOGUE.kernel(x, scale, shift, conv_packed.pack(w), b, **attrs)
    sub = np.ascontiguousarray(x[:, :, ::stride[0], ::stride[1]])
    _close(got, _torch_reference(sub, w, b, scale, shift, "relu", None))


def _pre_activation_layer(lib, cin, cout, act):
    """BatchNorm, an activation (or none), a 1x1 conv: a dense layer's first half."""
    nn = lib.nn
    acts = {"relu": [nn.ReLU()], "relu6": [nn.ReLU6()], "none": []}[act]
    return nn.Sequential(nn.BatchNorm2d(cin), *acts, nn.Conv2d(cin, cout, 1, bias=False))


def _same_weights(dg_module, torch_module, seed=0):
    """Random weights and BatchNorm statistics (weights of zero and below) in both."""
    r = np.random.default_rng(seed)
    state = {}
    for k, v in torch_module.state_dict().items():
        if v.dtype != torch.float32:
            state[k] = v.numpy()
        elif k.endswith("running_var"):
            state[k] = (r.random(v.shape) + 0.5).astype(np.float32)
        else:
            state[k] = r.standard_normal(v.shape).astype(np.float32)
            if k.endswith("0.weight") and v.ndim == 1:
                state[k][:2] = [0.0, -1.5]
    torch_module.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    dg_module.load_state_dict({k: dg.tensor(v) for k, v in state.items()})


def _compiled_eager_torch(dg_module, torch_module, x):
    dg_module.eval(), torch_module.eval()
    compiled = dg.compile(dg_module)
    with dg.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        eager = dg_module(dg.tensor(x)).numpy()
    with torch.no_grad():
        want = torch_module(torch.tensor(x)).numpy()
    ops = [n.op.name for n in compiled.optimized_graph.nodes]
    return got, eager, want, ops


@pytest.mark.parametrize("act", ["relu", "relu6", "none"])
@pytest.mark.parametrize("shape", [(1, 37, 9, 9, 24), (2, 70, 7, 7, 16)])
def test_compiled_pre_activation_layer_takes_the_prologue_and_matches(act, shape):
    n, c, h, w, cout = shape
    m, ref = _pre_activation_layer(dg, c, cout, act), _pre_activation_layer(torch, c, cout,
                                                                            act)
    _same_weights(m, ref)
    x = np.random.default_rng(2).standard_normal((n, c, h, w)).astype(np.float32)
    x[0, 3, 0, :2] = [np.nan, np.inf]
    got, eager, want, ops = _compiled_eager_torch(m, ref, x)
    # (without an activation the BatchNorm folds into the weights: fold_input_affine)
    assert ops == ["conv2d_packed" if act == "none" else "conv2d_prologue"]
    _close(got, eager)
    _close(got, want)


def _also_returned(lib):
    """A pre-activation layer returning its normalised input too."""
    class Both(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = _pre_activation_layer(lib, 20, 16, "relu")

        def forward(self, x):
            h = self.body[1](self.body[0](x))
            return self.body[2](h), h
    return Both()


def test_a_normalised_input_read_elsewhere_stays():
    """The BatchNorm-ReLU's output is also returned: the group stays, the conv reads it."""
    m, ref = _also_returned(dg), _also_returned(torch)
    _same_weights(m.body, ref.body)
    x = np.random.default_rng(3).standard_normal((2, 20, 6, 6)).astype(np.float32)
    m.eval(), ref.eval()
    compiled = dg.compile(m)
    with dg.no_grad():
        got = [t.numpy() for t in compiled(dg.tensor(x))]
        eager = [t.numpy() for t in m(dg.tensor(x))]
    with torch.no_grad():
        want = [t.numpy() for t in ref(torch.tensor(x))]
    ops = [n.op.name for n in compiled.optimized_graph.nodes]
    assert "conv2d_prologue" not in ops and "fused" in ops
    for g, e, w in zip(got, eager, want, strict=True):
        _close(g, e)
        _close(g, w)


def test_a_conv_the_loop_does_not_take_keeps_its_normalised_input():
    """A 3x3 conv after BatchNorm-ReLU (padding: a shift would be wrong at the borders)."""
    def layer(lib):
        nn = lib.nn
        return nn.Sequential(nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1))
    m, ref = layer(dg), layer(torch)
    _same_weights(m, ref)
    x = np.random.default_rng(4).standard_normal((1, 16, 8, 8)).astype(np.float32)
    got, eager, want, ops = _compiled_eager_torch(m, ref, x)
    assert "conv2d_prologue" not in ops
    _close(got, want)
