"""1x1 convolutions on the packed weight (``kernels/conv_pointpacked.py``, run by the op
``conv2d_packed`` that the lowering rule ``conv_packed`` makes): the loop against torch on
odd shapes (channels not a multiple of eight, planes with a tail of fewer than eight
positions, several chunks, more input channels than a block of ``KC``, batch 1, 3 and 16,
non-square planes), at strides 2 and (3, 2) (a downsampling shortcut: the input gathered
first), every epilogue against the op's decomposition, the bits independent of
the blocks of input channels, of threads and of the register block (eight or sixteen
lanes, each width's tails), into a concatenation's block of channels; compiled inverted-residual blocks against
eager and torch and through ``dg.onnx.load``; what the loop does not take."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.kernels import conv_packed, conv_pointpacked, isa  # noqa: E402
from dualgraph.kernels.epilogue import ACTIVATIONS  # noqa: E402
from dualgraph.ops.epilogue import CONV2D_PACKED  # noqa: E402

from test_conv_packed import compiled_and_loaded  # noqa: E402
from test_conv_tiles import _data, _torch_conv  # noqa: E402

ONE = dict(kernel=(1, 1), stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
# n, c, h, w, cout
SHAPES = [
    (1, 13, 5, 9, 11),      # 45 positions: five vectors and a tail of five; a spare lane
    (3, 13, 11, 5, 37),     # batch 3, three pairs, the last of five channels
    (1, 70, 7, 7, 48),      # more input channels than KC, 49 positions (two runs + 1)
    (1, 3, 33, 31, 17),     # 1023 positions: several chunks, a tail of seven
    (16, 24, 14, 14, 8),    # batch 16, one block of channels
    (2, 200, 3, 4, 40),     # 12 positions: one vector and a tail, four blocks of KC
    (1, 8, 2, 4, 8),        # the smallest taken: one vector
    (1, 20, 5, 5, 75),      # a tail of one over ten blocks: eight, then two (the last of 3)
    (2, 9, 3, 3, 130),      # nine positions a plane: a vector and a tail of one, 17 blocks
]
# the sixteen-lane block's tails: 48 positions at a time, then 16, then 8, then a column
WIDE_SHAPES = [
    (1, 33, 13, 13, 24),    # 169: three blocks of 48, a vector of 16, one of 8, one position
    (2, 70, 1, 63, 9),      # 63: a block of 48, none of 16, one of 8, a tail of seven
    (3, 7, 8, 8, 16),       # 64: a block of 48 and a vector of 16, no tail
    (1, 5, 2, 16, 40),      # 32: two vectors of 16, no block of 48
    (1, 200, 20, 20, 12),   # 400: two chunks of 192, then 16; four blocks of KC
]
BLOCKS = (12, 24, 48)       # the register blocks (:func:`conv_pointpacked.block_sums`)


def _case(shape):
    n, c, h, w, cout = shape
    return (n, c, h, w, cout, ONE["kernel"], ONE["stride"], ONE["padding"], ONE["dilation"],
            ONE["groups"])


def _run(x, w, b, *residual, act="relu", bounds=(-np.inf, np.inf), residual_at=None):
    return CONV2D_PACKED.kernel(x, conv_packed.pack(w), b, *residual, act=act, bounds=bounds,
                                residual_at=residual_at, stride=(1, 1),
                                padding=((0, 0), (0, 0)), dilation=(1, 1),
                                kernel_size=(1, 1), out_channels=w.shape[0])


@pytest.mark.parametrize("shape", SHAPES)
def test_loop_matches_torch(shape):
    x, w, b, attrs = _data(_case(shape))
    assert conv_pointpacked.wins(x.shape, w.shape, attrs["stride"], attrs["padding"],
                                 attrs["dilation"], 1, x.dtype)
    want = torch.relu(_torch_conv(x, w, b, **attrs)).numpy()
    got = _run(x, w, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    guarded = np.full(want.size + 128, np.nan, np.float32)    # (every element written,
    out = guarded[64:-64].reshape(want.shape)                   # nothing past them)
    conv_pointpacked.conv(x, conv_packed.pack(w), out, b, act=1)
    np.testing.assert_array_equal(out, got)
    assert np.isnan(guarded[:64]).all() and np.isnan(guarded[-64:]).all()


# n, c, h, w, cout, stride: the output plane from 8 positions up
STRIDED = [
    (1, 64, 56, 56, 128, (2, 2)),   # a downsampling shortcut: 28x28, two blocks of KC
    (1, 160, 14, 14, 384, (2, 2)),  # 7x7: a block of 48 and a column
    (3, 13, 15, 9, 20, (2, 2)),     # odd planes (8x5 out), batch 3, channels not of 8
    (2, 70, 9, 10, 37, (3, 2)),     # unequal strides: 3x5 out, a vector and a tail of 7
    (16, 24, 4, 7, 8, (2, 2)),      # batch 16, 2x4 out: one vector
]


@pytest.mark.parametrize("shape", STRIDED)
def test_strided_loop_matches_torch(shape):
    """A stride above 1 gathers the input's rows and columns, then the stride-1 loop: the
    values of torch's conv, every element written, from a strided view of the input too,
    with each epilogue's residual; the bits of the loop on the gathered input."""
    n, c, h, w, cout, stride = shape
    x, wt, b, attrs = _data((n, c, h, w, cout, (1, 1), stride, ((0, 0), (0, 0)), (1, 1), 1))
    assert conv_pointpacked.wins(x.shape, wt.shape, stride, attrs["padding"], (1, 1), 1,
                                 x.dtype)
    want = _torch_conv(x, wt, b, **attrs)
    packed = conv_packed.pack(wt)
    r = np.random.default_rng(3).standard_normal(want.shape).astype(np.float32)
    wider = np.zeros((n, c + 3, h, w), np.float32)      # (x a strided view of it)
    wider[:, 2:c + 2] = x
    for where, source in ((0, x), (1, wider[:, 2:c + 2]), (2, x)):
        expect = torch.relu(want + torch.tensor(r) if where == 1 else want)
        expect = (expect + torch.tensor(r) if where == 2 else expect).numpy()
        guarded = np.full(expect.size + 128, np.nan, np.float32)
        out = guarded[64:-64].reshape(expect.shape)
        conv_pointpacked.conv(source, packed, out, b, r if where else None, where=where,
                              act=1, stride=stride)
        np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)
        assert np.isnan(guarded[:64]).all() and np.isnan(guarded[-64:]).all()
    gathered = np.ascontiguousarray(x[:, :, ::stride[0], ::stride[1]])
    plain = np.empty(expect.shape, np.float32)
    conv_pointpacked.conv(gathered, packed, plain, b, act=1)
    conv_pointpacked.conv(x, packed, out, b, act=1, stride=stride)
    np.testing.assert_array_equal(out, plain)


@pytest.mark.parametrize("residual_at", [None, "before", "after"])
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_every_epilogue_matches_the_decomposition(act, residual_at):
    """Each activation with no residual, the residual before it and after it (the loop's
    epilogue, a function of its own) against the op's decomposition (eager), at batch 3
    on 169 positions (sixteen lanes: 48 x 3, 16, 8 and a column); every register block
    gives the same bits."""
    x, w, b, _ = _data(_case((3, 21, 13, 13, 19)))
    bounds = (0.0, 6.0) if act == "clamp" else (-np.inf, np.inf)
    r = np.random.default_rng(2).standard_normal((3, 19, 13, 13)).astype(np.float32)
    residual = (r,) if residual_at else ()
    got = _run(x, w, b, *residual, act=act, bounds=bounds, residual_at=residual_at)
    want = CONV2D_PACKED.decomposition(
        dg.tensor(x), dg.tensor(conv_packed.pack(w)), dg.tensor(b),
        *(dg.tensor(a) for a in residual), act=act, bounds=bounds, residual_at=residual_at,
        stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), kernel_size=(1, 1),
        out_channels=19)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    where = {None: 0, "before": 1, "after": 2}[residual_at]
    for sums in BLOCKS:
        out = np.empty_like(got)
        conv_pointpacked.conv(x, conv_packed.pack(w), out, b, *residual, where=where,
                              act=ACTIVATIONS.index(act), lo=bounds[0], hi=bounds[1],
                              sums=sums)
        np.testing.assert_array_equal(out, got)


def test_the_bits_do_not_depend_on_blocks_of_channels_or_threads(monkeypatch):
    """Sums carried through the output from one block of input channels to the next, and
    chunks shared among three workers, give the bits of one block on one worker (every
    input channel one block: ``rows_a_block`` takes these cached inputs whole)."""
    cases = [_data(_case(shape)) for shape in (*(SHAPES[i] for i in (2, 3, 5, 7, 8)),
                                               WIDE_SHAPES[0], WIDE_SHAPES[4])]
    for x, w, b, _ in cases:
        n, c, h, wd = x.shape
        assert conv_pointpacked.rows_a_block(c, h * wd, -(-w.shape[0] // 8), False) == c
    wants = [_run(x, w, b) for x, w, b, _ in cases]
    monkeypatch.setattr(conv_pointpacked, "KC", 5)
    monkeypatch.setattr(conv_pointpacked, "WHOLE_BYTES", 0)
    monkeypatch.setattr(conv_pointpacked, "threads_for", lambda size: 3)
    for (x, w, b, _), want in zip(cases, wants):
        np.testing.assert_array_equal(_run(x, w, b), want)
        for sums in BLOCKS:
            out = np.empty_like(want)
            conv_pointpacked.conv(x, conv_packed.pack(w), out, b, act=1, sums=sums)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("shape", [*SHAPES, WIDE_SHAPES[4], (3, 70, 11, 13, 24)])
def test_streamed_inputs_have_the_bits_of_cached_ones(monkeypatch, shape):
    """An input taken as streamed from memory (``STREAM_BYTES`` 0: the next block of rows
    asked into L2 while a block sums, and ``FEW_KC`` input channels a block where the
    output channels are few) gives the bits of one taken as cached, against torch: on its
    own, on three workers, read where it lies as a concatenation's first channels, and
    through the prologue."""
    x, w, b, attrs = _data(_case(shape))
    packed, out_shape = conv_packed.pack(w), (x.shape[0], w.shape[0], *x.shape[2:])
    scale = np.linspace(0.5, 1.5, x.shape[1], dtype=np.float32)
    shift = np.linspace(-0.3, 0.3, x.shape[1], dtype=np.float32)
    joined = np.full((x.shape[0], x.shape[1] + 5, *x.shape[2:]), np.nan, np.float32)
    joined[:, :x.shape[1]] = x          # (the input's images lie apart: ``_images``)

    def outputs():
        got = []
        for xin, pre in ((x, None), (joined[:, :x.shape[1]], None), (x, (scale, shift))):
            out = np.full(out_shape, np.nan, np.float32)
            got.append(conv_pointpacked.conv(xin, packed, out, b, act=1, pre=pre, pre_act=1))
        return got
    wants = outputs()
    np.testing.assert_allclose(wants[0], torch.relu(_torch_conv(x, w, b, **attrs)).numpy(),
                               rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(conv_pointpacked, "STREAM_BYTES", 0)
    for threads in (1, 3):
        monkeypatch.setattr(conv_pointpacked, "threads_for", lambda size: threads)
        for got, want in zip(outputs(), wants):
            np.testing.assert_array_equal(got, want)


def test_rows_a_block():
    """A cached chunk's rows of every input channel are one block up to ``WHOLE_BYTES``
    (384 channels on 7x7, 160 on 14x14, 512 on 13x13: the chunk's 192 positions at
    most), else ``KC``; a
    streamed input keeps ``KC``, or ``FEW_KC`` for few blocks of outputs."""
    rows = conv_pointpacked.rows_a_block
    assert rows(384, 49, 48, False) == 384 and rows(160, 196, 20, False) == 160
    assert rows(1024, 196, 16, False) == conv_pointpacked.KC      # (768 kB a chunk)
    assert rows(512, 169, 125, False) == 512                      # (338 kB)
    assert rows(672, 196, 14, False) == 672                       # (504 kB)
    assert rows(720, 196, 14, False) == conv_pointpacked.KC       # (540 kB)
    assert rows(384, 49, 48, True) == conv_pointpacked.KC
    assert rows(128, 3025, 2, True) == conv_pointpacked.FEW_KC


@pytest.mark.parametrize("cout", [8, 75])
def test_the_tail_has_the_bits_of_the_vector_blocks(cout):
    """A position of the tail (fewer than eight after the vectors: summed with the channels
    in the lanes) gets the bits it gets inside a vector (positions in the lanes)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 70, 1, 25)).astype(np.float32)
    w = rng.standard_normal((cout, 70, 1, 1)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    wide = np.zeros((1, 70, 1, 32), np.float32)      # the same positions, all in vectors
    wide[..., :25] = x
    np.testing.assert_array_equal(_run(x, w, b), _run(wide, w, b)[..., :25])


@pytest.mark.parametrize("shape", SHAPES + WIDE_SHAPES)
def test_every_register_block_gives_the_same_bits(shape):
    """The 12-sum block (16 vector registers: AVX2), the 24-sum one (AVX-512 at half width)
    and the sixteen-lane one (48 positions a block, then 16, then 8) sum each output in the
    same order: the same bits, whichever this host compiles for."""
    x, w, b, attrs = _data(_case(shape))
    packed = conv_packed.pack(w)
    outs = {}
    for sums in BLOCKS:
        outs[sums] = np.full((x.shape[0], w.shape[0], *x.shape[2:]), np.nan, np.float32)
        conv_pointpacked.conv(x, packed, outs[sums], b, act=1, sums=sums)
        np.testing.assert_array_equal(outs[sums], outs[BLOCKS[0]])
    want = torch.relu(_torch_conv(x, w, b, **attrs)).numpy()
    np.testing.assert_allclose(outs[12], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sums", BLOCKS)
@pytest.mark.parametrize("act,residual_at", [("none", None), ("clamp", "before"),
                                             ("silu", "after")])
def test_every_block_writes_into_a_concatenation(sums, act, residual_at):
    """Each register block with each kind of epilogue, its output a block of channels of a
    wider array (a concatenation's: ``kernels.out_images``), at batch 3: the bits of a
    whole output, nothing outside the block written."""
    x, w, b, _ = _data(_case((3, 21, 13, 13, 19)))     # 169 positions: 48 x 3, 16, 8, 1
    r = np.random.default_rng(4).standard_normal((3, 19, 13, 13)).astype(np.float32)
    where = {None: 0, "before": 1, "after": 2}[residual_at]
    kw = dict(where=where, act=ACTIVATIONS.index(act), lo=0.0 if act == "clamp" else -np.inf,
              hi=6.0 if act == "clamp" else np.inf)
    residual = r if residual_at else None
    packed = conv_packed.pack(w)
    want = np.empty((3, 19, 13, 13), np.float32)
    conv_pointpacked.conv(x, packed, want, b, residual, sums=12, **kw)
    whole = np.full((3, 30, 13, 13), np.nan, np.float32)
    conv_pointpacked.conv(x, packed, whole[:, 7:26], b, residual, sums=sums, **kw)
    np.testing.assert_array_equal(whole[:, 7:26], want)
    assert np.isnan(whole[:, :7]).all() and np.isnan(whole[:, 26:]).all()


def test_the_block_follows_the_compiled_for_cpu(monkeypatch):
    monkeypatch.setattr(isa, "full_width", lambda: False)
    monkeypatch.setattr(isa, "vector_registers", lambda: 16)
    assert conv_pointpacked.block_sums() == 12
    monkeypatch.setattr(isa, "vector_registers", lambda: 32)
    assert conv_pointpacked.block_sums() == 24
    monkeypatch.setattr(isa, "full_width", lambda: True)
    assert conv_pointpacked.block_sums() == 48


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,groups", [
    ((1, 16, 4, 5), (32, 16, 1, 1), (2, 2), ((0, 0), (0, 0)), 1),   # strided to 2x3
    ((1, 16, 8, 8), (32, 16, 1, 1), (1, 1), ((1, 1), (1, 1)), 1),   # padded
    ((1, 16, 8, 8), (32, 8, 1, 1), (1, 1), ((0, 0), (0, 0)), 2),    # groups
    ((4, 16, 1, 1), (32, 16, 1, 1), (1, 1), ((0, 0), (0, 0)), 1),   # a 1x1 plane
    ((1, 16, 8, 8), (7, 16, 1, 1), (1, 1), ((0, 0), (0, 0)), 1),    # fewer than 8 outputs
    ((1, 16, 8, 8), (32, 16, 3, 3), (1, 1), ((1, 1), (1, 1)), 1),   # not 1x1
])
def test_what_the_loop_does_not_take(x_shape, w_shape, stride, padding, groups):
    assert not conv_pointpacked.wins(x_shape, w_shape, stride, padding, (1, 1), groups,
                                     np.float32)


def _block(lib, c=13, mid=45, k=3, act="ReLU6"):
    nn = lib.nn

    class Block(nn.Module):
        """An inverted residual block: 1x1 expansion (BatchNorm, activation), depthwise,
        1x1 projection with BatchNorm and the residual; then a 1x1 head of 9 channels."""

        def __init__(self):
            super().__init__()
            self.expand = nn.Sequential(nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                        getattr(nn, act)())
            self.dw = nn.Sequential(nn.Conv2d(mid, mid, k, padding=k // 2, groups=mid),
                                    getattr(nn, act)())
            self.project = nn.Sequential(nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c))
            self.head = nn.Conv2d(c, 9, 1)

        def forward(self, x):
            y = x + self.project(self.dw(self.expand(x)))
            return self.head(y)
    return Block()


@pytest.mark.parametrize("batch,hw,act", [(1, (7, 7), "ReLU6"), (3, (9, 14), "SiLU"),
                                          (16, (5, 5), "Hardswish")])
def test_compiled_and_onnx_import_match_eager_and_torch(batch, hw, act, tmp_path):
    x = np.random.default_rng(batch).standard_normal((batch, 13, *hw)).astype(np.float32)
    compiled, loaded = compiled_and_loaded(lambda lib: _block(lib, act=act), x, tmp_path)
    graph = str(compiled.optimized_graph)
    assert graph.count("conv2d_packed(") == 3, graph     # (the 9-channel head: 8+ outputs)
    assert compiled.code.count("= conv_packed_") == 3, compiled.code
    assert loaded.code.count("= conv_packed_") == 3, loaded.code


def _downsampling_block(lib, c=13, mid=24, out=40):
    nn = lib.nn

    class Block(nn.Module):
        """A residual block that halves the plane: a strided 3x3 and a 1x1 on the main
        path, the shortcut a strided 1x1 with BatchNorm (a ResNet's downsampling)."""

        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(nn.Conv2d(c, mid, 3, stride=2, padding=1, bias=False),
                                      nn.BatchNorm2d(mid), nn.ReLU(),
                                      nn.Conv2d(mid, out, 1, bias=False), nn.BatchNorm2d(out))
            self.shortcut = nn.Sequential(nn.Conv2d(c, out, 1, stride=2, bias=False),
                                          nn.BatchNorm2d(out))

        def forward(self, x):
            return lib.relu(self.main(x) + self.shortcut(x))
    return Block()


@pytest.mark.parametrize("batch,hw", [(1, (14, 14)), (3, (9, 15))])
def test_compiled_downsampling_shortcut_takes_the_loop(batch, hw, tmp_path):
    """The strided 1x1 shortcut's weight is packed and the 1x1 loop runs it (on the input
    gathered), compiled and through ``dg.onnx.load``, against eager and torch."""
    x = np.random.default_rng(batch).standard_normal((batch, 13, *hw)).astype(np.float32)
    compiled, loaded = compiled_and_loaded(_downsampling_block, x, tmp_path)
    graph = str(compiled.optimized_graph)
    assert graph.count("conv2d_packed(") == 3, graph
    assert "stride=(2, 2)" in graph and "conv1x1" not in compiled.code, compiled.code
    assert "conv1x1" not in loaded.code, loaded.code
