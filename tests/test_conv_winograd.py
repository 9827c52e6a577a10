"""Dense 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3) (``kernels/conv_winograd.py``,
the op ``conv2d_winograd`` and the lowering rule ``conv_winograd``): the loops with every
epilogue against torch in float64 on odd shapes (odd planes: partial tiles; padding 0, 1, 2
and asymmetric; channels not a multiple of anything; batch 1 and 3; blocks of tile rows
crossing images), the op against its decomposition and without Numba's loops, the cost
rule; compiled models with frozen weights (BatchNorm folded in, a residual block) against
eager and torch, and through ``dg.onnx.load``; a training step keeps its convs as they are.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph import kernels  # noqa: E402
from dualgraph.kernels import conv_winograd, simd  # noqa: E402
from dualgraph.ops.epilogue import CONV2D_WINOGRAD  # noqa: E402

from optable.conv import torch_tail  # noqa: E402
from test_conv_packed import compiled_and_loaded, trained_then_frozen  # noqa: E402
from test_conv_tiles import _data  # noqa: E402



MIN_CHANNELS_PAIRS = conv_winograd.MIN_CHANNELS_PAIRS


@pytest.fixture(autouse=True)
def one_core(monkeypatch):
    """The cost rule takes Winograd on one core only (``conv_winograd.faster``). The
    layers here are sized by its bound against one pair an item on every host (the bound
    against two, on AVX-512 at full width, leaves some of them to the packed loop)."""
    monkeypatch.setattr(conv_winograd, "cores", lambda: 1)
    monkeypatch.setattr(conv_winograd, "MIN_CHANNELS_PAIRS", conv_winograd.MIN_CHANNELS)


# n, c, h, w, cout, padding
CASES = [
    (1, 13, 17, 15, 21, ((1, 1), (1, 1))),     # odd everything: partial tiles both ways
    (3, 20, 9, 11, 16, ((0, 0), (0, 0))),      # no padding, batch 3
    (2, 9, 7, 8, 33, ((2, 2), (2, 2))),        # padding 2
    (1, 8, 12, 13, 24, ((0, 1), (2, 1))),      # asymmetric padding
    (1, 3, 3, 3, 5, ((0, 0), (0, 0))),         # one output, one partial tile
    (2, 17, 2, 5, 8, ((1, 1), (1, 1))),        # a plane shorter than a tile
]
# the largest error measured against float64 on unit-scale data, relative to the largest
# output (F(2x2, 3x3): ~1e-7 to 1e-6, below a direct float32 conv's)
TOLERANCE = 1e-5


def _winograd(x, w, b, *residual, act="none", bounds=(-np.inf, np.inf), residual_at=None,
              padding):
    return CONV2D_WINOGRAD.kernel(x, conv_winograd.transform_weight(w), b, *residual,
                                  act=act, bounds=bounds, residual_at=residual_at,
                                  padding=padding)


def _case(case, seed=0):
    n, c, h, wd, cout, padding = case
    x, w, b, _ = _data((n, c, h, wd, cout, (3, 3), (1, 1), padding, (1, 1), 1), seed)
    return x, w, b, padding


def _torch64(x, w, b, padding, residual=(), act="none", residual_at=None):
    (top, bottom), (left, right) = padding
    t = [torch.tensor(a, dtype=torch.float64) for a in (x, w, b, *residual)]
    y = torch.nn.functional.conv2d(torch.nn.functional.pad(t[0], (left, right, top, bottom)),
                                   t[1], t[2])
    return torch_tail(torch, y, t[3:], act, residual_at).numpy()


def _error(got, want):
    return np.abs(got - want).max() / np.abs(want).max()


def test_the_weight_transform_and_its_inverse():
    w = np.random.default_rng(0).standard_normal((5, 3, 3, 3)).astype(np.float32)
    u = conv_winograd.transform_weight(w)
    assert u.shape == (16, 5, 3) and u.flags.c_contiguous and u.dtype == np.float32
    np.testing.assert_array_equal(u[0], w[:, :, 0, 0])          # G's first row is (1, 0, 0)
    np.testing.assert_allclose(u[5], w.sum(axis=(2, 3)) / 4, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(conv_winograd.untransform(u), w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_loops_match_torch_in_float64(case):
    x, w, b, padding = _case(case)
    assert conv_winograd.wanted(x.shape, w.shape, (1, 1), padding, (1, 1), 1, x.dtype)
    assert _error(_winograd(x, w, b, padding=padding), _torch64(x, w, b, padding)) < TOLERANCE


def test_the_error_on_wide_layers_stays_below_a_direct_float32_conv():
    x, w, b, padding = _case((1, 256, 14, 14, 64, ((1, 1), (1, 1))))
    want = _torch64(x, w, b, padding)
    direct = torch.nn.functional.conv2d(*map(torch.tensor, (x, w, b)), padding=1).numpy()
    assert _error(_winograd(x, w, b, padding=padding), want) < 2 * _error(direct, want) + 1e-7


@pytest.mark.parametrize("act,residual_at", [("relu", None), ("clamp", "before"),
                                             ("silu", "after"), ("hardswish", None),
                                             ("relu", "before"), ("gelu", "after")])
def test_epilogues_match_torch_and_the_decomposition(act, residual_at):
    x, w, b, padding = _case(CASES[0])
    bounds = (0.0, 6.0) if act == "clamp" else (-np.inf, np.inf)
    r = np.random.default_rng(2).standard_normal((1, 21, 17, 15)).astype(np.float32)
    residual = (r,) if residual_at else ()
    got = _winograd(x, w, b, *residual, act=act, bounds=bounds, residual_at=residual_at,
                    padding=padding)
    want = _torch64(x, w, b, padding, residual, act, residual_at)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    u = dg.tensor(conv_winograd.transform_weight(w))
    decomposed = CONV2D_WINOGRAD.decomposition(
        dg.tensor(x), u, dg.tensor(b), *(dg.tensor(a) for a in residual), act=act,
        bounds=bounds, residual_at=residual_at, padding=padding)
    np.testing.assert_allclose(got, decomposed.numpy(), rtol=1e-5, atol=1e-5)


def test_threads_do_not_change_the_bits_nor_blocks_the_values(monkeypatch):
    """Three threads give the bits of one (each transform is computed by one thread in one
    order); blocks of one tile row (crossing images at batch 3) the values (the GEMMs'
    columns change, and with them OpenBLAS's kernels: not the bits)."""
    x, w, b, padding = _case((3, 13, 9, 7, 21, ((1, 1), (1, 1))))
    want = _winograd(x, w, b, padding=padding)
    monkeypatch.setattr(conv_winograd, "threads_for", lambda size: 3)
    np.testing.assert_array_equal(_winograd(x, w, b, padding=padding), want)
    monkeypatch.setattr(conv_winograd, "BLOCK_TILES", 1)
    np.testing.assert_allclose(_winograd(x, w, b, padding=padding), want, rtol=1e-5,
                               atol=1e-5)


# wider planes: tile rows of more than eight tiles, whole, partial and several vectors of
# sixteen (n, c, h, w, cout, padding)
WIDE_CASES = [
    (1, 19, 9, 33, 17, ((1, 1), (1, 1))),      # 17 tiles a row: one past a wide vector
    (2, 16, 6, 64, 32, ((1, 1), (1, 1))),      # 32 tiles: two whole wide vectors
    (16, 5, 5, 37, 3, ((0, 0), (2, 2))),       # batch 16, odd width, padding 0 and 2
    (1, 7, 11, 18, 9, ((2, 1), (0, 1))),       # asymmetric padding, 9 tiles a row
]


@pytest.mark.parametrize("case", CASES + WIDE_CASES)
def test_eight_and_sixteen_lanes_give_the_same_bits(case, monkeypatch):
    """The transforms on vectors of eight or sixteen lanes (``conv_winograd.lanes``: by the
    CPU and the width of a tile row) do the same operations in the same order: the same
    bits, here written into a concatenation's block of channels with a residual and an
    activation, and near torch's float64 values."""
    x, w, b, padding = _case(case)
    n, cout = x.shape[0], w.shape[0]
    ho = x.shape[2] + sum(padding[0]) - 2
    wo = x.shape[3] + sum(padding[1]) - 2
    r = np.random.default_rng(3).standard_normal((n, cout, ho, wo)).astype(np.float32)
    u = conv_winograd.transform_weight(w)
    got = []
    for lanes in (simd.LANES, simd.WIDE):
        monkeypatch.setattr(conv_winograd, "lanes", lambda tw, lanes=lanes: lanes)
        block = np.full((n, cout + 5, ho, wo), np.nan, np.float32)
        conv_winograd.conv(x, u, block[:, 2:2 + cout], padding, b, residual=r, where=1,
                           act=1)
        assert np.isnan(block[:, :2]).all() and np.isnan(block[:, 2 + cout:]).all()
        got.append(block[:, 2:2 + cout])
    np.testing.assert_array_equal(got[0], got[1])
    want = _torch64(x, w, b, padding, (r,), "relu", "before")
    assert _error(got[1], want) < TOLERANCE


def test_the_lanes_follow_the_cpu_and_the_row(monkeypatch):
    monkeypatch.setattr(conv_winograd, "wide", lambda: True)
    assert [conv_winograd.lanes(tw) for tw in (4, 8, 9, 28)] == [8, 8, 16, 16]
    monkeypatch.setattr(conv_winograd, "wide", lambda: False)     # AVX2: eight lanes
    assert conv_winograd.lanes(28) == 8


def test_without_the_loops_the_op_untransforms_and_runs_the_epilogue(monkeypatch):
    x, w, b, padding = _case(CASES[0])
    want = _winograd(x, w, b, act="relu", padding=padding)
    monkeypatch.setattr(kernels, "numba_available", lambda: False)
    np.testing.assert_allclose(_winograd(x, w, b, act="relu", padding=padding), want,
                               rtol=1e-5, atol=1e-5)


def test_the_op_refuses_a_weight_of_other_channels():
    x, w, b, padding = _case(CASES[0])
    with pytest.raises(ValueError, match="transform_weight"):
        dg.dispatch.apply(CONV2D_WINOGRAD, dg.tensor(x[:, :5]),
                          dg.tensor(conv_winograd.transform_weight(w)), dg.tensor(b),
                          act="none", bounds=(-np.inf, np.inf), residual_at=None,
                          padding=padding)


@pytest.mark.parametrize("x_shape,w_shape,wins", [
    ((1, 128, 28, 28), (128, 128, 3, 3), True),
    ((1, 256, 14, 14), (256, 256, 3, 3), True),
    ((16, 512, 7, 7), (512, 512, 3, 3), True),
    ((1, 64, 56, 56), (64, 64, 3, 3), True),
    ((1, 512, 7, 7), (512, 512, 3, 3), False),    # 16 tiles: GEMMs too narrow
    ((16, 64, 8, 8), (64, 64, 3, 3), False),      # rows of 4 tiles: the transforms' rows
    ((16, 32, 16, 16), (32, 32, 3, 3), False),    # few channels: the transforms dominate
    ((16, 17, 13, 13), (17, 17, 3, 3), False),
    ((1, 128, 28, 28), (64, 128, 3, 3), True),
    ((1, 64, 28, 28), (128, 64, 3, 3), True),
    ((1, 64, 13, 13), (256, 64, 3, 3), True),     # 4x the outputs, partial tiles
    ((16, 48, 13, 13), (192, 48, 3, 3), True),
    ((16, 128, 28, 28), (32, 128, 3, 3), False),  # a quarter of the outputs
    ((1, 64, 16, 16), (64, 64, 3, 3), True),      # rows of 8 tiles
    ((1, 32, 32, 32), (32, 32, 3, 3), False),
])
def test_the_cost_rule(x_shape, w_shape, wins, monkeypatch):
    """Against the packed loop's one pair an item (where AVX-512 is not at full width)."""
    monkeypatch.setattr(conv_winograd, "wide", lambda: False)
    assert conv_winograd.faster(x_shape, w_shape, x_shape[2:]) == wins
    monkeypatch.setattr(conv_winograd, "cores", lambda: 2)     # (not measured to pay)
    assert not conv_winograd.faster(x_shape, w_shape, x_shape[2:])


@pytest.mark.parametrize("x_shape,w_shape,wins", [
    ((1, 128, 28, 28), (128, 128, 3, 3), True),
    ((16, 256, 14, 14), (256, 256, 3, 3), True),
    ((16, 96, 20, 20), (96, 96, 3, 3), True),
    ((1, 64, 13, 13), (256, 64, 3, 3), True),
    ((1, 64, 56, 56), (64, 64, 3, 3), False),     # the two pairs' loop ran it faster
    ((16, 64, 56, 56), (64, 64, 3, 3), False),
    ((1, 128, 56, 56), (32, 128, 3, 3), False),
    ((1, 128, 28, 28), (64, 128, 3, 3), False),
    ((16, 48, 13, 13), (192, 48, 3, 3), False),
    ((1, 64, 16, 16), (64, 64, 3, 3), False),
])
def test_the_cost_rule_against_two_pairs_an_item(x_shape, w_shape, wins, monkeypatch):
    """Against the packed loop's two pairs an item (AVX-512 at full width):
    ``MIN_CHANNELS_PAIRS``."""
    monkeypatch.setattr(conv_winograd, "wide", lambda: True)
    monkeypatch.setattr(conv_winograd, "MIN_CHANNELS_PAIRS", MIN_CHANNELS_PAIRS)
    assert conv_winograd.faster(x_shape, w_shape, x_shape[2:]) == wins


def _net(lib, c=96):
    nn = lib.nn

    class Net(nn.Module):
        """A residual block with BatchNorm and a conv without bias, a padding-0 conv, and a
        stride-2 conv that Winograd does not take."""

        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.b1 = nn.BatchNorm2d(c)
            self.c2 = nn.Conv2d(c, c, 3, padding=1)
            self.valid = nn.Conv2d(c, c, 3, padding=0)
            self.down = nn.Conv2d(c, 32, 3, stride=2, padding=1)

        def forward(self, x):
            y = lib.relu(self.b1(self.c1(x)))
            y = lib.relu(self.c2(y) + x)
            return self.down(self.valid(y))
    return Net()


@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_and_onnx_import_match_eager_and_torch(batch, tmp_path):
    x = np.random.default_rng(batch).standard_normal((batch, 96, 15, 13)).astype(np.float32)
    compiled, loaded = compiled_and_loaded(_net, x, tmp_path, scale=0.1)
    graph = str(compiled.optimized_graph)
    assert graph.count("conv2d_winograd(") == 3 and "conv2d_packed(" in graph, graph
    assert "c1.weight_winograd" in graph and "conv_winograd_relu(" in compiled.code
    assert loaded.code.count("= conv_winograd_") == 3, loaded.code


def test_a_training_step_keeps_its_convs_and_changed_weights_are_transformed_again():
    """With gradients the weights are no constants: no transform, the same step as before.
    A frozen model whose weight changes is compiled again with the new weight."""
    model = _net(dg)
    x = dg.tensor(np.random.default_rng(0).standard_normal((2, 96, 12, 12)).astype(np.float32))
    step, compiled = trained_then_frozen(model, x, model.c2.weight)
    assert "conv2d_winograd" not in str(step.optimized_graph)
    assert "conv2d_winograd" in str(compiled.optimized_graph)


def _fire(lib):
    """A fire-style block: a 1x1 squeeze, then a 1x1 branch (no activation), a 3x3 branch
    the cost rule gives Winograd (128 -> 128, ReLU) and a narrow 3x3 one it leaves to the
    packed loop (128 -> 16), joined along the channels."""
    nn = lib.nn

    class Fire(nn.Module):
        def __init__(self):
            super().__init__()
            self.squeeze = nn.Conv2d(8, 128, 1)
            self.e1, self.e3 = nn.Conv2d(128, 32, 1), nn.Conv2d(128, 128, 3, padding=1)
            self.narrow = nn.Conv2d(128, 16, 3, padding=1)

        def forward(self, x):
            s = lib.relu(self.squeeze(x))
            return lib.cat([self.e1(s), lib.relu(self.e3(s)), self.narrow(s)], 1)
    return Fire()


@pytest.mark.parametrize("batch,size", [(1, (15, 13)), (2, (16, 11))])
def test_a_concatenation_writes_its_winograd_and_packed_branches(batch, size, tmp_path):
    """conv_cat runs after conv_winograd and conv_packed: the cat's members keep the
    kernels their cost rules chose (Winograd's inverse transform written into its channels
    of the cat, at batch 2 a whole image apart), compiled and through ``dg.onnx.load``, equal
    to eager and torch (odd planes: partial tiles)."""
    x = np.random.default_rng(batch).standard_normal((batch, 8, *size)).astype(np.float32)
    compiled, loaded = compiled_and_loaded(_fire, x, tmp_path, scale=0.2)
    for graph in (compiled.optimized_graph, loaded.executable.graph):
        ops = [n.op.name for n in graph.nodes]
        (cat,) = [n for n in graph.nodes if n.op.name == "conv2d_cat"]
        assert "cat" not in ops and "conv2d_winograd" not in ops, ops
        assert [m[0] for m in cat.attrs["members"]] == [    # (the 1x1 branch packed too)
            "conv2d_packed", "conv2d_winograd", "conv2d_packed"], cat.attrs["members"]
        assert tuple(cat.inputs[4].shape) == (16, 128, 128)    # (the transformed weight)


def test_a_training_step_keeps_the_concatenations_convs_as_they_are():
    """With gradients the weights are no constants: the cat's members are plain convs."""
    model = _fire(dg)
    x = dg.tensor(np.random.default_rng(0).standard_normal((2, 8, 12, 12)).astype(np.float32))
    step, compiled = trained_then_frozen(model, x, model.e3.weight)
    assert "conv2d_winograd" not in str(step.optimized_graph)
    assert "'conv2d_winograd'" in str(compiled.optimized_graph)
