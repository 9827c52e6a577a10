"""The float32 convolution kernels of ``kernels/conv_tiles.py`` (shifted GEMMs, im2col
tiles), ``kernels/conv_direct.py`` (depthwise with multipliers 1-3, groups 2-4) and the
1x1 and grouped convs beside them, with their epilogues, against torch:
shapes outside any model (odd sizes, asymmetric padding, dilation, groups, strides), batch
1, 3 and 16, and the epilogue's activations and residuals."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

from dualgraph.kernels import conv_tiles  # noqa: E402
from dualgraph.kernels.epilogue import ACTIVATIONS  # noqa: E402
from dualgraph.ops import conv as conv_ops  # noqa: E402
from dualgraph.ops.epilogue import CONV2D_EPILOGUE  # noqa: E402

F = torch.nn.functional
# n, c, h, w, cout, (kh, kw), stride, ((top, bottom), (left, right)), dilation, groups
CASES = [
    (1, 64, 24, 24, 8, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),      # shifted
    (3, 65, 19, 23, 5, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),      # shifted, odd
    (2, 64, 21, 70, 7, (3, 5), (1, 1), ((0, 2), (2, 1)), (1, 2), 1),      # shifted, dilated
    (16, 16, 7, 7, 12, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),      # 7x7: conv_batch
    (3, 8, 17, 19, 12, (3, 3), (2, 2), ((1, 1), (1, 2)), (1, 1), 1),      # conv_batch, s2
    (3, 2, 33, 35, 12, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1),      # s2 shallow: tiles
    (1, 3, 33, 31, 8, (7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1), 1),       # stem-like
    (3, 8, 13, 11, 6, (3, 3), (2, 1), ((1, 0), (1, 2)), (1, 1), 2),       # groups, strides
    (2, 6, 9, 12, 4, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),        # 1x1 strided
    (2, 12, 10, 9, 6, (3, 2), (1, 3), ((2, 2), (0, 1)), (2, 1), 3),       # dilation, groups
    (3, 10, 9, 7, 15, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 5),       # 1x1 grouped
    (16, 24, 6, 6, 9, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),       # 1x1
]
DIRECT = [   # depthwise and narrow grouped convs: kernels/conv_direct.py
    (1, 16, 23, 23, 16, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 16),    # depthwise
    (3, 7, 13, 17, 14, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 7),      # multiplier 2
    (16, 5, 9, 8, 5, (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), 5),        # 5x5, batch 16
    (1, 6, 19, 21, 18, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 6),      # dilation, x3
    (3, 8, 12, 15, 8, (3, 3), (2, 3), ((0, 2), (1, 0)), (1, 1), 4),       # groups 4, strides
    (1, 6, 11, 10, 9, (3, 2), (1, 1), ((1, 0), (0, 1)), (2, 1), 3),       # groups 3
    (3, 4, 10, 31, 6, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 2),       # 1x1 strided
    (1, 3, 30, 29, 3, (7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1), 3),       # 7x7
    (16, 9, 7, 7, 9, (3, 3), (2, 2), ((0, 0), (0, 0)), (1, 1), 9),        # no padding
    (2, 32, 9, 11, 48, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),      # 16 x 24 a group
]


def _torch_conv(x, w, b, stride, padding, dilation, groups):
    (top, bottom), (left, right) = padding
    xp = F.pad(torch.tensor(x), (left, right, top, bottom))
    return F.conv2d(xp, torch.tensor(w), torch.tensor(b), stride, 0, dilation, groups)


def _data(case, seed=0):
    n, c, h, wd, cout, k, stride, padding, dilation, groups = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((cout, c // groups, *k)) / np.sqrt(c * k[0])).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    return x, w, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


@pytest.mark.parametrize("case", CASES + DIRECT)
def test_conv2d_kernel_matches_torch(case):
    x, w, b, attrs = _data(case)
    want = _torch_conv(x, w, b, **attrs).numpy()
    got = conv_ops.CONV2D.kernel(x, w, b, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


ACTS = {"relu": F.relu, "clamp": lambda y: y.clamp(0.0, 6.0), "sigmoid": torch.sigmoid,
        "silu": F.silu, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
        "gelu": F.gelu, "none": lambda y: y}


@pytest.mark.parametrize("case", CASES + DIRECT)
@pytest.mark.parametrize("act,residual_at", [("relu", "before"), ("clamp", None),
                                             ("silu", "after"), ("hardswish", None),
                                             ("sigmoid", "before"), ("none", "after")])
def test_epilogue_matches_torch(case, act, residual_at):
    x, w, b, attrs = _data(case, 1)
    y = _torch_conv(x, w, b, **attrs)
    r = np.random.default_rng(2).standard_normal(tuple(y.shape)).astype(np.float32)
    if residual_at == "before":
        y = y + torch.tensor(r)
    want = ACTS[act](y)
    if residual_at == "after":
        want = want + torch.tensor(r)
    got = CONV2D_EPILOGUE.kernel(x, w, b, *([r] if residual_at else []), act=act,
                                 bounds=(0.0, 6.0) if act == "clamp" else (-np.inf, np.inf),
                                 residual_at=residual_at, **attrs)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=2e-5)


def test_each_method_is_taken():
    """The cases above cover the shifted GEMMs, the im2col tiles over several tiles and the
    direct loop (a change of thresholds must not leave a path untested)."""
    shifted = [c for c in CASES if conv_tiles.shifted((c[0], c[1], c[2], c[3]),
                                                      (c[4], c[1] // c[9], *c[5]), *c[6:])]
    assert len(shifted) == 3
    for c in DIRECT:
        x, w, _, attrs = _data(c)
        assert conv_ops.conv_method(x.shape, w.shape, **attrs) in ("depthwise", "direct")
    assert conv_tiles.tile_rows(16 * 7, 1 << 20) < 16 * 7    # several tiles
    assert conv_tiles.tile_rows(10, 100) == 10


def test_tiles_split_rows_evenly():
    for rows, row_bytes in [(112, 150_000), (7, 10 ** 7), (3136, 4000), (1, 1)]:
        per = conv_tiles.tile_rows(rows, row_bytes)
        tiles = -(-rows // per)
        assert 1 <= per <= rows and tiles * per - rows < tiles
        assert per * row_bytes <= conv_tiles.TILE_BYTES or per == 1


def test_activation_codes_are_the_epilogue_module_s():
    assert set(ACTS) <= set(ACTIVATIONS)


@pytest.mark.parametrize("geometry", [
    # (n, c, h, w), (kh, kw), stride, dilation, (top, left): padding on both sides
    ((2, 3, 9, 9), (3, 3), (1, 1), (1, 1), (1, 1)),      # "same": one run per image
    ((3, 2, 7, 7), (1, 1), (1, 1), (1, 1), (0, 0)),      # 1x1: whole planes
    ((2, 4, 13, 13), (7, 7), (1, 1), (2, 2), (3, 2)),    # taps wholly in the padding
    ((2, 3, 11, 10), (3, 3), (2, 2), (1, 1), (1, 1)),    # stride 2: row by row
    ((1, 2, 9, 9), (5, 3), (3, 1), (1, 2), (2, 0)),      # uneven stride and dilation
    ((2, 5, 6, 5), (3, 1), (1, 2), (1, 1), (4, 1)),      # padding over the whole height
])
def test_columns_match_torch_unfold_on_every_tile(geometry):
    """The im2col tiles (``columns``), every split of the batch's output rows into tiles
    (one row, part of an image, whole images, tiles across images), against torch's
    ``unfold``; a tile's columns are fully overwritten."""
    (n, c, h, w), (kh, kw), stride, dilation, (top, left) = geometry
    x = np.random.default_rng(0).standard_normal((n, c, h, w)).astype(np.float32)
    want = F.unfold(torch.tensor(x), (kh, kw), dilation, (top, left), stride).numpy()
    ho = (h + 2 * top - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * left - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    whole = want.transpose(1, 0, 2).reshape(c * kh * kw, n * ho * wo)   # (taps, batch rows)
    for rows in sorted({1, 2, ho - 1 or 1, ho, n * ho // 2 + 1, n * ho}):
        for q0 in range(0, n * ho, rows):
            size = (min(q0 + rows, n * ho) - q0) * wo
            cols = np.full((c * kh * kw, size), np.nan, np.float32)
            conv_tiles.columns(0, c * kh * kw, x, cols, q0, ho, wo, kh, kw, *stride,
                               *dilation, top, left)
            np.testing.assert_array_equal(cols, whole[:, q0 * wo:q0 * wo + size])


@pytest.mark.parametrize("act,bounds", [("relu", (-np.inf, np.inf)), ("clamp", (0.0, 6.0)),
                                        ("none", (-np.inf, np.inf))])
def test_one_pass_epilogue_rounds_as_the_sum_then_the_activation(act, bounds):
    """The bias and ReLU or clamp in one pass (``epilogue.planes`` after a 1x1 conv's GEMM,
    ``conv_tiles.scatter`` after a tile's) give the bits of the float32 sum, then the
    activation; NaN stays NaN."""
    activate = {"relu": lambda v: np.maximum(v, 0), "clamp": lambda v: np.clip(v, *bounds),
                "none": lambda v: v}[act]
    x, w, b, attrs = _data((2, 12, 9, 7, 20, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1))
    x[0, 0, 0, :3] = np.nan, np.inf, -np.inf
    for shape, conv in [(w.shape, attrs), ((20, 12, 3, 3), dict(attrs, padding=((1, 1),) * 2))]:
        wt = np.resize(w, shape)
        y = _torch_conv(x, wt, np.zeros_like(b), **conv).numpy() + b.reshape(-1, 1, 1)
        want = activate(y)
        got = CONV2D_EPILOGUE.kernel(x, wt, b, act=act, bounds=bounds, residual_at=None,
                                     **conv)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        ours = conv_ops.CONV2D.kernel(x, wt, **conv) + b.reshape(-1, 1, 1)
        np.testing.assert_array_equal(got, activate(ours))


@pytest.mark.parametrize("pool", [
    # (n, c, h, w), kernel, stride, padding, dilation, ceil_mode
    ((2, 8, 17, 19), (3, 3), (2, 2), (1, 1), (1, 1), False),     # the stem's 3x3/2 pool
    ((1, 20, 15, 15), (3, 3), (2, 2), (0, 0), (1, 1), True),     # ceil mode's last window
    ((3, 16, 9, 12), (2, 3), (1, 3), (1, 0), (2, 1), False),     # dilation, stride 3
    ((1, 64, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
])
def test_max_pool_values_match_torch_with_nan(pool):
    """The inference max pool without indices (``max_pool2d_values``), float32 and
    float64, against torch, NaN and infinities included (NaN wins)."""
    from dualgraph.ops.epilogue import MAX_POOL2D_VALUES
    shape, kernel, stride, padding, dilation, ceil = pool
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x[0, 0, 1, :3] = np.nan, np.inf, -np.inf
    x[-1, -1, -1, -1] = np.nan
    want = F.max_pool2d(torch.tensor(x), kernel, stride, padding, dilation,
                        ceil_mode=ceil).numpy()
    attrs = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
                 ceil_mode=ceil)
    np.testing.assert_array_equal(MAX_POOL2D_VALUES.kernel(x, **attrs), want)
    np.testing.assert_array_equal(MAX_POOL2D_VALUES.kernel(x.astype(np.float64), **attrs),
                                  want)


def _dense_block(lib):
    """Dense convs of every path (a 7x7/2 stem on 3 channels, 5 and 17 channels, dilation
    2, 1x1 stride 1 and 2, a residual), each with BatchNorm or a bias and an activation
    for the compiler to fold into ``conv2d_epilogue``; written once for torch and
    dualgraph."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 5, 7, 2, 3, bias=False), nn.BatchNorm2d(5),
                                      nn.ReLU())
            self.wide = nn.Sequential(nn.Conv2d(5, 17, 3, 1, 2, dilation=2), nn.ReLU6(),
                                      nn.Conv2d(17, 17, 1), nn.SiLU())
            self.conv = nn.Conv2d(17, 17, 5, 1, 2)
            self.down = nn.Sequential(nn.Conv2d(17, 5, 1, 2), nn.Hardswish())

        def forward(self, x):
            h = self.wide(self.stem(x))
            return self.down(lib.relu(h + self.conv(h)))
    return Block()


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_dense_block_eager_compiled_and_onnx_import_match_torch(tmp_path, batch):
    import dualgraph as dg
    reference = _dense_block(torch)
    rng = np.random.default_rng(5)
    state = {k: (rng.uniform(0.5, 1.5, tuple(v.shape)) if k.endswith("running_var") else
                 0.3 * rng.standard_normal(tuple(v.shape))).astype(v.numpy().dtype)
             for k, v in reference.state_dict().items()}
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model = _dense_block(dg)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    reference.eval(), model.eval()
    x = rng.standard_normal((batch, 3, 29, 23)).astype(np.float32)
    path = str(tmp_path / "dense.onnx")
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    compiled = dg.compile(model)
    with dg.no_grad():
        for run in (model, compiled, dg.onnx.load(path)):   # eager, compiled, imported
            got = np.asarray(run(dg.tensor(x)).numpy())
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    graph = str(compiled.optimized_graph)   # (3x3 convs of frozen weights: conv2d_packed)
    assert graph.count("conv2d_epilogue") + graph.count("conv2d_packed") >= 4
