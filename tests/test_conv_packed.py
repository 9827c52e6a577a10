"""Dense convolutions on a weight packed once (``kernels/conv_packed.py``, the op
``conv2d_packed`` and the lowering rule ``conv_packed``): the loop with every epilogue
against torch on odd shapes (channels not a multiple of eight or sixteen, odd planes,
strides 1 and 2, padding 0, 1 and asymmetric, dilation, batch 1 and 3, planes smaller
than a run of six positions), the op against its decomposition and without Numba's loop;
compiled models with frozen weights (BatchNorm folded in, a residual block) against eager
and torch, and through ``dg.onnx.load``; a training step keeps its weights as they are."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph import kernels  # noqa: E402
from dualgraph.kernels import conv_packed  # noqa: E402
from dualgraph.ops.epilogue import CONV2D_EPILOGUE, CONV2D_PACKED  # noqa: E402

from test_conv_tiles import _data, _torch_conv  # noqa: E402

# n, c, h, w, cout, kernel, stride, padding, dilation, groups
CASES = [
    (1, 13, 17, 15, 21, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # odd everything
    (3, 13, 17, 15, 37, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),  # stride 2, a spare block
    (3, 20, 9, 11, 16, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),   # no padding
    (1, 9, 7, 7, 48, (3, 3), (2, 2), ((0, 1), (2, 1)), (1, 1), 1),     # asymmetric padding
    (3, 6, 14, 14, 16, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 1),   # 5x5
    (1, 8, 12, 13, 24, (3, 2), (1, 2), ((2, 2), (0, 1)), (2, 1), 1),   # dilation
    (1, 33, 2, 2, 32, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),    # fewer outputs than a run
    # first layers of at most four channels with many weights a position (conv_outlanes
    # declines them): a 7x7 stride-2 stem, 11x11 stride 4, one channel, four channels
    (2, 3, 29, 31, 24, (7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1), 1),
    (1, 3, 45, 47, 32, (11, 11), (4, 4), ((2, 2), (2, 2)), (1, 1), 1),
    (3, 1, 20, 23, 64, (7, 7), (1, 1), ((3, 3), (3, 3)), (1, 1), 1),
    (1, 4, 16, 19, 40, (5, 5), (2, 1), ((2, 1), (0, 2)), (1, 2), 1),
    # grouped convs of a multiple of sixteen outputs a group: two groups of 16, three of 32
    # at stride 2 and batch 3, ten input channels a group with asymmetric padding and
    # dilation, a group width of 48 on a plane larger than 28x28
    (1, 32, 9, 11, 32, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
    (3, 48, 13, 7, 96, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 3),
    (1, 40, 10, 9, 64, (3, 3), (1, 2), ((0, 1), (2, 1)), (2, 1), 4),
    (1, 96, 31, 29, 96, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
    # groups whose outputs are not a multiple of sixteen (padded to whole pairs, the last
    # pair's spare lanes idle): 8 at stride 2 and batch 2, 24 (a whole pair and a half) with
    # asymmetric padding and dilation, 10 at batch 3; and sixteen on a plane larger than
    # 28x28 at stride 2
    (2, 24, 11, 10, 24, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 3),
    (1, 36, 9, 13, 72, (3, 3), (1, 1), ((1, 0), (2, 1)), (2, 1), 3),
    (3, 40, 8, 8, 40, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 4),
    (2, 32, 31, 30, 32, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 2),
]
GROUPED = CASES[-8:]
# one group, more than sixteen outputs: two pairs an item on the grid of the padded planes'
# phases (conv_packed.WIDE_PAIRS, on AVX-512) -- three pairs (two and a spare one), a 5x5
# kernel dilated by 3 (the grid's last run reads past the planes), asymmetric padding and
# dilation at batch 3, a plane of fewer positions than a run; stride 2 on odd planes with
# a spare pair, without padding at batch 3 on even ones, a 5x5 kernel dilated by 2 (its
# taps in one phase of rows and columns), strides (2, 1) with asymmetric padding and
# dilation 3 across, stride 3 with padding 2; three pairs an item on runs of a row
# (WIDE_ROWS: small planes, many outputs) on 7x7 planes without padding and seven pairs
# (one left over), a 5x5 kernel at batch 2 on rows of six (a run past the row), stride 2
# with five pairs (two left over from the three, each alone on runs of two rows), strides
# (2, 1) with asymmetric padding and dilation 3 across on rows of ten, five pairs on 7x7
# at batch 2; and CASES' 21 outputs, stride-2 batch-3 conv and 7x7 stems
PAIRS = [
    (1, 19, 9, 10, 40, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    (1, 10, 16, 15, 32, (5, 5), (1, 1), ((6, 6), (6, 6)), (3, 3), 1),
    (3, 12, 8, 9, 64, (3, 3), (1, 1), ((2, 0), (1, 1)), (2, 2), 1),
    (2, 24, 3, 2, 48, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    (1, 13, 17, 15, 40, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),
    (3, 12, 16, 14, 64, (3, 3), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),
    (1, 10, 15, 16, 32, (5, 5), (2, 2), ((2, 2), (2, 2)), (2, 2), 1),
    (2, 9, 13, 12, 48, (3, 3), (2, 1), ((2, 0), (1, 3)), (1, 3), 1),
    (1, 7, 20, 19, 33, (3, 3), (3, 3), ((2, 2), (2, 2)), (1, 1), 1),
    (1, 16, 9, 9, 112, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
    (2, 9, 5, 6, 96, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 1),
    (1, 12, 13, 14, 80, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),
    (1, 9, 13, 12, 80, (3, 3), (2, 1), ((2, 0), (1, 3)), (1, 3), 1),
    (2, 16, 7, 7, 80, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    CASES[0], CASES[1], CASES[7], CASES[9],
]


def _packed(x, w, b, *residual, act="relu", bounds=(-np.inf, np.inf), residual_at=None,
            stride, padding, dilation, groups):
    return CONV2D_PACKED.kernel(x, conv_packed.pack(w, groups), b, *residual, act=act,
                                bounds=bounds, residual_at=residual_at, stride=stride,
                                padding=padding, dilation=dilation, kernel_size=w.shape[2:],
                                out_channels=w.shape[0], groups=groups)


def _recorded_modes(monkeypatch) -> list:
    """The modes of the packed loop's calls from now on, appended as each runs (the last
    argument of its ``run_kept``)."""
    modes = []
    run_kept = conv_packed.run_kept
    monkeypatch.setattr(conv_packed, "run_kept",
                        lambda *args, **kw: modes.append(args[-1]) or run_kept(*args, **kw))
    return modes


def test_pack_and_unpack():
    w = np.arange(37 * 5 * 3 * 2, dtype=np.float32).reshape(37, 5, 3, 2)
    packed = conv_packed.pack(w)
    assert packed.shape == (3, 30, 16) and packed.flags.c_contiguous
    assert packed[1, 7, 4] == w[20].reshape(-1)[7] and not packed[2, :, 5:].any()
    np.testing.assert_array_equal(conv_packed.unpack(packed, w.shape), w)
    w = w[:36]     # three groups of twelve outputs, each padded to a pair
    packed = conv_packed.pack(w, groups=3)
    assert packed.shape == (3, 30, 16) and not packed[:, :, 12:].any()
    assert packed[2, 7, 4] == w[28].reshape(-1)[7]
    np.testing.assert_array_equal(conv_packed.unpack(packed, w.shape, groups=3), w)


def test_phases_match_the_bordered_planes_sliced():
    """``pad_phases`` compiled (at a column stride of two both phases of a row in one
    loop, the column before the pairs and a spare last one stored apart) against the
    bordered planes sliced: widths odd and even from one column, borders 0-3 (odd ones
    put column 0 in the odd phase), phases narrower and wider than the columns there."""
    from dualgraph.kernels import build
    split = build.compiled_helper(conv_packed.pad_phases)
    rng = np.random.default_rng(0)
    for height, width, sh, sw, top, left, extra in [
            (h, w, sh, sw, t, l, e) for h in (1, 4, 5) for w in (1, 2, 3, 8, 9, 16, 17, 33)
            for sh, sw in ((2, 2), (1, 2), (3, 2), (2, 3)) for t in (0, 1) for l in range(4)
            for e in (-2, 0, 2)]:
        x = rng.standard_normal(2 * height * width + 5).astype(np.float32)
        hq = -(-(height + top) // sh) + 1
        wq = max(1, -(-(width + left) // sw) + extra)
        got = np.zeros((2, sh, sw, hq, wq), np.float32)
        split(x, 5, 2, height, width, got.reshape(-1), hq, wq, sh, sw, top, left)
        planes = x[5:].reshape(2, height, width)
        bordered = np.zeros((2, sh * hq + top, sw * wq + left + width), np.float32)
        bordered[:, top:top + height, left:left + width] = planes
        want = np.stack([np.stack([bordered[:, a::sh, b::sw][:, :hq, :wq] for b in range(sw)],
                                  1) for a in range(sh)], 1)
        np.testing.assert_array_equal(got, want, err_msg=f"{height, width, sh, sw, top, left}")


@pytest.mark.parametrize("case", CASES + PAIRS[:14])
def test_loop_matches_torch(case):
    x, w, b, attrs = _data(case)
    assert conv_packed.packed_wins(x.shape, w.shape, attrs["padding"], attrs["groups"],
                                   x.dtype)
    want = torch.relu(_torch_conv(x, w, b, **attrs)).numpy()
    np.testing.assert_allclose(_packed(x, w, b, **attrs), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [CASES[0], CASES[1], GROUPED[1], GROUPED[5], PAIRS[0],
                                  PAIRS[1], PAIRS[4], PAIRS[9]])
def test_a_fitted_conv_called_again_keeps_its_border_zero(case):
    """The padded planes' buffer is zeroed once, when the conv is fitted (each mode's copy
    writes the same places at every call): called on an input of NaN, then on another,
    the second gives the bits of a conv fitted afresh (NaN in the border would spread)."""
    x, w, b, attrs = _data(case)
    n, c, h, wd, cout, kernel, stride, padding, dilation, groups = case
    out_shape = tuple(_torch_conv(x, w, b, **attrs).shape)
    packed, runs = conv_packed.pack(w, groups), []
    for _ in range(2):
        runs.append(conv_packed.fitted(x.shape, out_shape, stride, padding, dilation, kernel,
                                       groups=groups, act=1))
    runs[0](np.full_like(x, np.nan), packed, b, np.empty(out_shape, np.float32))
    got = runs[0](x, packed, b, np.empty(out_shape, np.float32))
    np.testing.assert_array_equal(got, runs[1](x, packed, b, np.empty(out_shape, np.float32)))
    assert not np.isnan(got).any()


@pytest.mark.parametrize("case", [CASES[1], GROUPED[1], GROUPED[5], GROUPED[6], PAIRS[0],
                                  PAIRS[2], PAIRS[4], PAIRS[10]])
@pytest.mark.parametrize("act,residual_at", [("none", None), ("clamp", "before"),
                                             ("silu", "after"), ("hardswish", None),
                                             ("relu", "before")])
def test_epilogues_match_the_decomposition(act, residual_at, case):
    x, w, b, attrs = _data(case)
    bounds = (0.0, 6.0) if act == "clamp" else (-np.inf, np.inf)
    hw = _torch_conv(x, w, b, **attrs).shape
    r = np.random.default_rng(2).standard_normal(tuple(hw)).astype(np.float32)
    residual = (r,) if residual_at else ()
    got = _packed(x, w, b, *residual, act=act, bounds=bounds, residual_at=residual_at,
                  **attrs)
    wp = dg.tensor(conv_packed.pack(w, attrs["groups"]))
    want = CONV2D_PACKED.decomposition(
        *(dg.tensor(a) for a in (x,)), wp, dg.tensor(b), *(dg.tensor(a) for a in residual),
        act=act, bounds=bounds, residual_at=residual_at, stride=attrs["stride"],
        padding=attrs["padding"], dilation=attrs["dilation"], kernel_size=w.shape[2:],
        out_channels=w.shape[0], groups=attrs["groups"])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [CASES[0], GROUPED[0], GROUPED[5]])
def test_without_the_loop_the_op_unpacks_and_runs_the_epilogue(monkeypatch, case):
    x, w, b, attrs = _data(case)
    want = _packed(x, w, b, **attrs)
    monkeypatch.setattr(kernels, "numba_available", lambda: False)
    np.testing.assert_allclose(_packed(x, w, b, **attrs), want, rtol=1e-5, atol=1e-5)


def test_the_bits_do_not_depend_on_blocks_of_taps_or_threads(monkeypatch):
    """The sums carried from one block of taps to the next, and an image's pairs of
    channel blocks shared among three workers, give the bits of one block on one worker;
    a conv conv_outlanes takes has its bits (the same sums in the same order)."""
    cases = [_data(c) for c in (CASES[1], CASES[3], GROUPED[1], GROUPED[4], GROUPED[6])]
    wants = [_packed(x, w, b, **attrs) for x, w, b, attrs in cases]
    monkeypatch.setattr(conv_packed, "BLOCK_BYTES", 1)     # (one channel's taps a block)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 3)
    for (x, w, b, attrs), want in zip(cases, wants):
        np.testing.assert_array_equal(_packed(x, w, b, **attrs), want)
    x, w, b, attrs = _data((3, 6, 20, 20, 16, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 1))
    assert kernels.conv_outlanes.wanted(x.shape, w.shape, attrs["padding"], 1, x.dtype)
    np.testing.assert_array_equal(_packed(x, w, b, **attrs), CONV2D_EPILOGUE.kernel(
        x, w, b, act="relu", bounds=(-np.inf, np.inf), residual_at=None, **attrs))


@pytest.mark.parametrize("case", PAIRS)
@pytest.mark.parametrize("act,residual_at", [("relu", None), ("silu", "before")])
def test_two_pairs_an_item_give_the_bits_of_one(monkeypatch, case, act, residual_at):
    """Two pairs an item on the grid of the padded planes' phases (``WIDE_PAIRS``), or
    three on runs of a row (``WIDE_ROWS``, where ``Plan.rows``): what a conv of one group
    and more than sixteen outputs takes on AVX-512 where each thread gets an item, give
    the bits of one pair an item (``WIDE_PAIR``, or ``WIDE_ROW_PAIR`` where
    ``Plan.row_pair``: what it takes where threads outnumber the items), with and without
    a residual, NaN and inf in the input, blocks of one channel's taps and two threads;
    either one where the host has no AVX-512 (a wide vector is then two registers)."""
    x, w, b, attrs = _data(case)
    x[0, 0, 0, 0], x[-1, -1, -1, 0] = np.nan, np.inf
    r = np.random.default_rng(4).standard_normal(
        tuple(_torch_conv(x, w, b, **attrs).shape)).astype(np.float32)
    residual = (r,) if residual_at else ()
    modes = _recorded_modes(monkeypatch)
    monkeypatch.setattr(conv_packed, "wide", lambda: True)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 1)
    got = _packed(x, w, b, *residual, act=act, residual_at=residual_at, **attrs)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 64)   # (items < threads)
    want = _packed(x, w, b, *residual, act=act, residual_at=residual_at, **attrs)
    np.testing.assert_array_equal(got, want)
    monkeypatch.setattr(conv_packed, "BLOCK_BYTES", 1)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 1)
    np.testing.assert_array_equal(_packed(x, w, b, *residual, act=act,
                                          residual_at=residual_at, **attrs), want)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 2)
    np.testing.assert_array_equal(_packed(x, w, b, *residual, act=act,
                                          residual_at=residual_at, **attrs), want)
    plan = conv_packed.plan(x.shape, w.shape, got.shape[2:], attrs["stride"],
                            attrs["dilation"])
    rows = plan.rows
    grid = conv_packed.WIDE_ROWS if rows else conv_packed.WIDE_PAIRS
    one = conv_packed.WIDE_ROW_PAIR if plan.row_pair else conv_packed.WIDE_PAIR
    assert modes[:3] == [grid, one, grid]
    assert rows or case not in PAIRS[9:14]


@pytest.mark.parametrize("case", PAIRS)
def test_rows_on_half_width_avx512_give_the_bits_of_eight_lanes(monkeypatch, case):
    """Where the loops are not ``wide`` but have AVX-512's 32 registers (``rows_wide``:
    Zen 4), a conv of one group that ``Plan.rows`` takes sums three pairs on runs of a row
    (``WIDE_ROWS``) and the others keep the eight-lane pair (``NARROW``); the same bits as
    the eight-lane pair (NaN and inf in the input, a residual before the activation)."""
    x, w, b, attrs = _data(case)
    x[0, 0, 0, 0], x[-1, -1, -1, 0] = np.nan, np.inf
    r = np.random.default_rng(5).standard_normal(
        tuple(_torch_conv(x, w, b, **attrs).shape)).astype(np.float32)
    modes = _recorded_modes(monkeypatch)
    monkeypatch.setattr(conv_packed, "wide", lambda: False)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 1)
    monkeypatch.setattr(conv_packed, "rows_wide", lambda: True)
    got = _packed(x, w, b, r, act="silu", residual_at="before", **attrs)
    monkeypatch.setattr(conv_packed, "rows_wide", lambda: False)
    want = _packed(x, w, b, r, act="silu", residual_at="before", **attrs)
    np.testing.assert_array_equal(got, want)
    rows = conv_packed.plan(x.shape, w.shape, got.shape[2:], attrs["stride"],
                            attrs["dilation"]).rows and -(-w.shape[0] // 16) >= 3
    assert modes == [conv_packed.WIDE_ROWS if rows else conv_packed.NARROW,
                     conv_packed.NARROW]
    assert rows or case not in PAIRS[9:14]


def test_three_pairs_on_rows_where_they_sum_fewer_positions():
    """Runs of a row take 7x7 planes of many outputs (the grid sums 72 positions for 49)
    and 14x14 ones at stride 1 (the grid sums 16 columns a row for 14; the pairs left over
    from the threes alone on runs of two rows), not 14x14 at stride 2 (the grid's rows of
    15) nor 28x28 and 56x56 planes (runs of seven cost more a position), nor fewer than
    three pairs."""
    rows = lambda x, w, hw, s: conv_packed.plan(x, w, hw, s, (1, 1)).rows
    assert rows((1, 512, 7, 7), (512, 512, 3, 3), (7, 7), (1, 1))
    assert rows((1, 256, 14, 14), (512, 256, 3, 3), (7, 7), (2, 2))
    assert rows((1, 256, 14, 14), (256, 256, 3, 3), (14, 14), (1, 1))
    assert rows((1, 128, 14, 14), (128, 128, 3, 3), (14, 14), (1, 1))
    assert not rows((1, 128, 28, 28), (256, 128, 3, 3), (14, 14), (2, 2))
    assert not rows((1, 96, 28, 28), (96, 96, 3, 3), (28, 28), (1, 1))
    assert not rows((1, 64, 56, 56), (64, 64, 3, 3), (56, 56), (1, 1))
    assert not rows((1, 64, 7, 7), (32, 64, 3, 3), (7, 7), (1, 1))


# one pair an item on runs of two rows (WIDE_ROW_PAIR, stride 1): groups of 8, 16, 24, 32,
# 48 and 64 outputs, ten input channels a group, odd rows (a spare row summed), rows of
# more than one run and of a plane narrower than a run, dilation with asymmetric padding,
# a 5x5 kernel of one group and one pair, a conv of one group and more pairs than the
# items threads get; batch 1 to 3
ROW_PAIRS = [
    (2, 24, 7, 7, 24, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 3),
    (1, 48, 7, 7, 48, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 3),
    (3, 48, 9, 7, 48, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
    (1, 64, 14, 14, 64, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
    (1, 96, 7, 15, 96, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
    (2, 128, 5, 6, 128, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
    (1, 30, 7, 7, 48, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 3),
    (1, 40, 10, 9, 64, (3, 3), (1, 1), ((0, 1), (2, 1)), (2, 1), 4),
    (1, 12, 7, 7, 16, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 1),
    (2, 21, 8, 7, 37, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
]


@pytest.mark.parametrize("case", ROW_PAIRS)
@pytest.mark.parametrize("act,residual_at", [("relu", "before"), ("relu", "after"),
                                             ("silu", None)])
def test_one_pair_on_two_rows_gives_the_bits_of_twelve_across_rows(monkeypatch, case, act,
                                                                    residual_at):
    """One pair an item on runs of two rows of the padded planes (``WIDE_ROW_PAIR``, taken
    where ``Plan.row_pair``; here on every case) gives the bits of twelve positions at a
    time across rows (``WIDE_PAIR``), with NaN and inf in the input, a residual added
    before or after the activation, blocks of one channel's taps and three threads; and
    torch's values on finite inputs. Either one where the host has no AVX-512."""
    x, w, b, attrs = _data(case)
    r = np.random.default_rng(5).standard_normal(
        tuple(_torch_conv(x, w, b, **attrs).shape)).astype(np.float32)
    residual = (r,) if residual_at else ()
    kw = dict(act=act, residual_at=residual_at, **attrs)
    modes = _recorded_modes(monkeypatch)
    monkeypatch.setattr(conv_packed, "wide", lambda: True)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 64)   # (items < threads)
    monkeypatch.setattr(conv_packed, "ROW_PAIR_COST", 0.0)
    got = _packed(x, w, b, *residual, **kw)
    want = torch.relu(_torch_conv(x, w, b, **attrs)) if act == "relu" else (
        torch.nn.functional.silu(_torch_conv(x, w, b, **attrs)))
    if residual_at == "before":
        want = torch.relu(_torch_conv(x, w, b, **attrs) + torch.tensor(r))
    elif residual_at == "after":
        want = want + torch.tensor(r)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    x[0, 0, 0, 0], x[-1, -1, -1, -1] = np.nan, np.inf
    got = _packed(x, w, b, *residual, **kw)
    monkeypatch.setattr(conv_packed, "BLOCK_BYTES", 1)
    monkeypatch.setattr(conv_packed, "threads_for", lambda size: 3)
    np.testing.assert_array_equal(_packed(x, w, b, *residual, **kw), got)
    monkeypatch.setattr(conv_packed, "ROW_PAIR_COST", np.inf)
    np.testing.assert_array_equal(_packed(x, w, b, *residual, **kw), got)
    assert modes[:4] == [conv_packed.WIDE_ROW_PAIR] * 3 + [conv_packed.WIDE_PAIR]


def test_one_pair_on_two_rows_where_it_sums_fewer_positions():
    """Runs of two rows take stride-1 planes whose rows are whole runs of seven (7x7: 56
    positions where twelve at a time sum 60; 14x14, 28x28), not other widths (rows of
    eight or thirteen: their runs past the row cost more than twelve's last run), nor
    stride 2 (the image split into phases first: slower on 7x7 to 56x56 planes)."""
    row_pair = lambda s, hw, st: conv_packed.plan((1, 64, s, s), (64, 16, 3, 3), hw, st,
                                                  (1, 1)).row_pair
    assert row_pair(7, (7, 7), (1, 1)) and row_pair(14, (14, 14), (1, 1))
    assert row_pair(28, (28, 28), (1, 1))
    assert not row_pair(8, (8, 8), (1, 1)) and not row_pair(13, (13, 13), (1, 1))
    assert not row_pair(14, (7, 7), (2, 2)) and not row_pair(56, (28, 28), (2, 2))


@pytest.mark.parametrize("wide", [False, True])
def test_sixteen_lanes_give_the_bits_of_eight(monkeypatch, wide):
    """The pair's sixteen channels in one wide vector, twelve positions at a time (what the
    loop takes on AVX-512), and in two eight-lane vectors, six at a time, give the same
    bits on every case (a run past the plane's end, spare channels, groups, strides,
    dilation, the epilogue with a residual); either one where the host has the other
    (a wide vector is then two registers)."""
    cases = [(_data(case), {}) for case in CASES]
    x, w, b, attrs = _data(GROUPED[1])
    r = np.random.default_rng(3).standard_normal(
        tuple(_torch_conv(x, w, b, **attrs).shape)).astype(np.float32)
    cases.append(((x, w, b, attrs), dict(act="silu", residual_at="before")))
    monkeypatch.setattr(conv_packed, "wide", lambda: not wide)
    wants = [_packed(x, w, b, *((r,) if e else ()), **e, **attrs)
             for (x, w, b, attrs), e in cases]
    monkeypatch.setattr(conv_packed, "wide", lambda: wide)
    monkeypatch.setattr(conv_packed, "BLOCK_BYTES", 1 if wide else conv_packed.BLOCK_BYTES)
    for ((x, w, b, attrs), e), want in zip(cases, wants):
        np.testing.assert_array_equal(_packed(x, w, b, *((r,) if e else ()), **e, **attrs),
                                      want)


@pytest.mark.parametrize("blocks", [False, True])
def test_sixteen_lanes_with_nan_blocks_and_workers_give_the_bits_of_eight(monkeypatch,
                                                                              blocks):
    """The loop with each position's sixteen channels in one vector and twelve positions a
    run (AVX-512's) gives the bits of two eight-lane vectors and six positions on every
    case (runs crossing rows, planes smaller than a run, spare lanes, groups, NaN and
    infinities in the input), its sums also carried from one block of taps to the next and
    shared among three workers."""
    if blocks:
        monkeypatch.setattr(conv_packed, "BLOCK_BYTES", 1)
        monkeypatch.setattr(conv_packed, "threads_for", lambda size: 3)
    for k, case in enumerate(CASES):
        x, w, b, attrs = _data(case)
        if k % 2:
            x.reshape(-1)[[3, 7 * k]] = np.nan, np.inf
        outs = []
        for wide in (False, True):
            monkeypatch.setattr(conv_packed, "wide", lambda wide=wide: wide)
            outs.append(_packed(x, w, b, act="none", **attrs))
        np.testing.assert_array_equal(outs[1], outs[0])


def test_first_layers_with_few_weights_a_position_stay_with_conv_outlanes():
    """A 3-channel 3x3 first layer (1728 weights a position) runs conv_outlanes' loop,
    measured faster there than packed; a 3-channel 7x7 one (9408) is packed."""
    pad = ((1, 1), (1, 1))
    assert not conv_packed.packed_wins((1, 3, 224, 224), (64, 3, 3, 3), pad, 1, np.float32)
    assert conv_packed.packed_wins((1, 3, 224, 224), (64, 3, 7, 7), pad, 1, np.float32)
    assert conv_packed.packed_wins((1, 5, 224, 224), (64, 5, 3, 3), pad, 1, np.float32)


@pytest.mark.parametrize("wide", [False, True])
def test_grouped_convs_the_loop_takes(monkeypatch, wide):
    """Groups of more than one input channel whose pairs have half their lanes busy or
    more, on any plane and at either vector width (eight lanes: Zen 4)."""
    monkeypatch.setattr(conv_packed, "wide", lambda: wide)
    pad = ((1, 1), (1, 1))
    wins = lambda x, w, g: conv_packed.packed_wins(x, w, pad, g, np.float32)
    assert wins((1, 384, 7, 7), (384, 16, 3, 3), 24)
    assert wins((1, 128, 28, 28), (128, 16, 3, 3), 8)
    assert wins((1, 32, 112, 112), (32, 16, 3, 3), 2)      # (16 a group, a large plane)
    assert wins((1, 128, 56, 56), (128, 16, 3, 3), 8)
    assert wins((1, 128, 56, 56), (128, 32, 3, 3), 4)
    assert wins((1, 64, 14, 14), (64, 8, 3, 3), 8)          # (8 a group: half a pair)
    assert wins((1, 96, 14, 14), (96, 24, 3, 3), 4)         # (24 a group)
    assert wins((1, 200, 29, 29), (200, 40, 3, 3), 5)        # (40: two pairs and a half)
    assert not wins((1, 96, 14, 14), (96, 6, 3, 3), 16)     # (6 a group: under half busy)
    assert not wins((1, 64, 14, 14), (64, 4, 3, 3), 16)     # (4 outputs a group: 1/4 busy)
    assert not wins((1, 32, 14, 14), (32, 1, 3, 3), 32)     # (depthwise)
    assert not wins((1, 16, 14, 14), (32, 1, 3, 3), 16)     # (one input channel a group)


def _net(lib, c=13, mid=21):
    nn = lib.nn

    class Net(nn.Module):
        """A residual block with BatchNorm, a stride-2 conv without bias, a plain conv."""

        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(c, mid, 3, padding=1, bias=False)
            self.b1 = nn.BatchNorm2d(mid)
            self.c2 = nn.Conv2d(mid, mid, 3, padding=1)
            self.down = nn.Conv2d(mid, 40, 3, stride=2, padding=0, bias=False)
            self.head = nn.Conv2d(40, 17, 3, padding=1)

        def forward(self, x):
            y = lib.relu(self.b1(self.c1(x)))
            y = lib.relu(self.c2(y) + y)
            return self.head(self.down(y))
    return Net()


def _state(reference, rng, scale):
    state = {k: (rng.standard_normal(tuple(v.shape)) * scale).astype(np.float32)
             for k, v in reference.state_dict().items() if v.dtype == torch.float32}
    return {k: np.abs(v) + 0.5 if k.endswith("running_var") else v for k, v in state.items()}


def compiled_and_loaded(net, x, tmp_path, scale=0.3):
    """``net(torch)`` and ``net(dg)`` in eval mode with one random state: the dualgraph model
    compiled and torch's export through ``dg.onnx.load``, each checked against eager and
    torch on ``x``. Returns ``(compiled, loaded)`` for their graphs and code."""
    rng = np.random.default_rng(x.shape[0])
    reference = net(torch).eval()
    state = _state(reference, rng, scale)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    model = net(dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()}, strict=False)
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    compiled = dg.compile(model)
    with dg.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        eager = model(dg.tensor(x)).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    path = str(tmp_path / "net.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    loaded = dg.onnx.load(path)
    np.testing.assert_allclose(np.asarray(loaded(dg.tensor(x)).numpy()), want, rtol=1e-4,
                               atol=1e-4)
    return compiled, loaded


def trained_then_frozen(model, x, weight):
    """A compiled SGD step of ``model`` on ``(model(x) ** 2).mean()``, run once; then
    ``model`` in eval mode compiled, called, ``weight`` doubled and called again, checked
    against eager. Returns ``(step, compiled)`` for their graphs."""
    step = compiled_step(model, x)
    model.eval()
    compiled = dg.compile(model)
    with dg.no_grad():
        compiled(x)
        weight.mul_(2.0)
        got = compiled(x).numpy()
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return step, compiled


def compiled_step(model, x):
    """A compiled SGD step of ``model`` on ``(model(x) ** 2).mean()``, run once."""
    opt = dg.optim.SGD(model.parameters(), lr=0.1)

    @dg.compile
    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    step(x)
    return step


def _stem(lib):
    """A 3-channel 11x11 stride-4 first layer (a few-channel conv that the packed loop
    takes: ``conv_shallow.wins`` leaves it) with BatchNorm, ReLU and max pooling."""
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 32, 11, 4, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), nn.Conv2d(32, 16, 3, padding=1))


def _grouped(lib, width=16, stride=2):
    """A RegNet-style block: 1x1, BatchNorm, ReLU; a grouped 3x3 (three groups of
    ``width``) at ``stride``, BatchNorm, ReLU; 1x1 with BatchNorm; a 1x1 shortcut at
    ``stride``; ReLU after the sum."""
    nn = lib.nn
    c = 3 * width

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(24, c, 1, bias=False), nn.BatchNorm2d(c),
                                   nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(c, c, 3, stride, 1, groups=3, bias=False),
                                   nn.BatchNorm2d(c), nn.ReLU())
            self.c = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))
            self.short = nn.Conv2d(24, c, 1, stride)

        def forward(self, x):
            return lib.relu(self.c(self.b(self.a(x))) + self.short(x))
    return Block()


def _grouped24(lib):
    """:func:`_grouped` with groups of 24 outputs (a pair and a half each)."""
    return _grouped(lib, 24)


def _grouped_rows(lib):
    """:func:`_grouped` at stride 1 on rows of one run of seven (on AVX-512 one pair an
    item on runs of two rows: ``conv_packed.WIDE_ROW_PAIR``)."""
    return _grouped(lib, 16, 1)


# a model, its input's (C, H, W), its packed convs, a packed weight's name in the graph
# (the strided 1x1 shortcut of _grouped's blocks is packed too: conv_pointpacked's strides);
# _grouped also on a plane larger than 28x28 (groups of sixteen there ran the direct loop
# on eight lanes before), groups of 24 on both widths
PACKED_MODELS = [(_net, (13, 15, 17), 4, "c1.weight_packed"), (_stem, (3, 37, 45), 2, ""),
                 (_grouped, (24, 15, 13), 4, "b.0.weight_packed"),
                 (_grouped, (24, 33, 31), 4, "b.0.weight_packed"),
                 (_grouped_rows, (24, 9, 7), 4, "b.0.weight_packed"),
                 (_grouped24, (24, 15, 13), 4, "b.0.weight_packed")]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("net,shape,packed,name", PACKED_MODELS)
def test_compiled_and_onnx_import_match_eager_and_torch(net, shape, packed, name, batch,
                                                        tmp_path):
    x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
    compiled, loaded = compiled_and_loaded(net, x, tmp_path)
    graph = str(compiled.optimized_graph)
    assert graph.count("conv2d_packed(") == packed and "conv2d_epilogue" not in graph, graph
    assert name in graph and "conv_packed_relu(" in compiled.code
    assert not name.startswith("b.") or "groups=3)" in graph, graph
    assert loaded.code.count("= conv_packed_") == packed, loaded.code


def test_a_training_step_keeps_its_weights_and_changed_weights_are_repacked():
    """With gradients the weights are no constants: no packing, the same step as before.
    A frozen model whose weight changes is compiled again with the new weight packed."""
    model = _net(dg)
    x = dg.tensor(np.random.default_rng(0).standard_normal((2, 13, 15, 17)).astype(np.float32))
    step, compiled = trained_then_frozen(model, x, model.head.weight)
    assert "conv2d_packed" not in str(step.optimized_graph)
    assert "conv2d_packed" in str(compiled.optimized_graph)
