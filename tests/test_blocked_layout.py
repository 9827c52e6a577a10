"""Channel-blocked regions (``passes/layout.py``, the lowering rule ``blocked_channels``;
the ops ``block_channels``, ``unblock_channels``, ``depthwise_blocked``,
``pointwise_blocked``, ``kernels/conv_blocked.py``): both loops with every epilogue
against torch on odd planes, strides 1 and 2, kernels 3/5/7, dilation, batch 1 and 3,
output channels of one, two and three blocks a group and position counts off the
register block and the work item; compiled inverted-residual blocks with
squeeze-and-excitation (BatchNorm folded) against eager and torch, directly and on the
graph of ``dg.onnx.load``; the squeeze-and-excitation kernels the regions call (``mul``'s
per-block gate, ``mean`` over middle dims); what the rule leaves alone."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.codegen import Executable  # noqa: E402
from dualgraph.kernels import conv_blocked  # noqa: E402
from dualgraph.ops.layout import DEPTHWISE_BLOCKED, POINTWISE_BLOCKED  # noqa: E402

from test_layout import _epilogue, _net, _models as layout_models, training_step  # noqa: E402

ON = None   # (the default pipeline: the rule is on)

# n, c, h, w, kernel, stride, padding, dilation, act, residual_at
DEPTHWISE = [
    (1, 16, 9, 11, 3, 1, 1, 1, "relu", None),
    (3, 24, 14, 14, 3, 2, 1, 1, "clamp", None),          # stride 2, batch 3
    (1, 40, 7, 7, 5, 1, 2, 1, "silu", "before"),         # 5x5, residual before
    (2, 16, 15, 13, 7, 2, 3, 1, "hardswish", "after"),   # 7x7 stride 2, residual after
    (1, 8, 12, 10, 3, 1, 2, 2, "sigmoid", None),         # dilation
    (3, 24, 3, 2, 3, 1, 1, 1, "none", "before"),         # rows narrower than four
    (1, 8, 6, 6, 3, 2, 0, 1, "relu", None),              # no padding
    (1, 32, 29, 37, 3, 1, 1, 1, "clamp", "before"),      # runs of eight, 3 wide
    (2, 40, 23, 30, 5, 1, 2, 1, "hardswish", "after"),   # runs of eight, 5 wide
    (1, 16, 40, 12, 5, 1, 1, 1, "none", None),           # padding less than the half
    (0, 24, 7, 7, 3, 1, 1, 1, "relu", None),             # no images
    (2, 40, 7, 7, 3, 1, 1, 1, "silu", "after"),          # rows of seven, 3 wide
    (1, 24, 9, 7, 5, 1, 2, 1, "hardswish", None),        # rows of seven, 5 wide
    (1, 16, 13, 13, 5, 2, 2, 1, "silu", "before"),       # rows of seven at stride 2
    (1, 24, 30, 5, 3, 1, 1, 1, "silu", "after"),         # epilogue twelve rows at a time
]


def _bounds(act):
    return (0.0, 6.0) if act == "clamp" else (-np.inf, np.inf)


@pytest.mark.parametrize("wide", [False, True], ids=["8 lanes", "16 lanes"])
@pytest.mark.parametrize("case", DEPTHWISE, ids=[str(c) for c in DEPTHWISE])
def test_depthwise_loop_matches_torch(case, wide, monkeypatch):
    """Eight lanes a block, or sixteen (pairs of blocks, a last odd one alone: 3 and 5
    blocks), whatever the CPU: the values are torch's, NaN and infinities included."""
    monkeypatch.setattr(conv_blocked, "paired", lambda positions: wide)
    n, c, h, w, k, s, p, d, act, at = case
    rng = np.random.default_rng(c + h)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    if n:
        x[0, c - 1, h // 2, w // 2], x[-1, c // 2, h - 1, 0] = np.nan, np.inf
    weight = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    y = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(weight), torch.tensor(bias),
                                   stride=s, padding=p, dilation=d, groups=c)
    y, residual = _epilogue(y, rng, act, at)
    extra = [conv_blocked.block(residual)] if at else []
    got = DEPTHWISE_BLOCKED.kernel(
        conv_blocked.block(x), weight, bias, *extra, act=act, bounds=_bounds(act),
        residual_at=at, stride=(s, s), padding=((p, p), (p, p)), dilation=(d, d))
    np.testing.assert_allclose(conv_blocked.unblock(got), y.numpy(), rtol=1e-5, atol=1e-5)


POINTWISE = [   # n, h, w, c, cout, act, residual_at
    (1, 9, 7, 16, 40, "relu", None),            # groups of three blocks and two
    (3, 5, 11, 40, 24, "clamp", "before"),      # one group, batch 3
    (2, 6, 6, 24, 8, "hardswish", "after"),     # a group of one block
    (1, 1, 1, 32, 16, "sigmoid", None),         # a 1x1 plane: one position
    (1, 13, 17, 8, 56, "silu", None),           # 221 positions: chunks of 96 and a tail
    (2, 4, 2, 64, 72, "none", "before"),        # fewer positions than a run of eight
    # sixteen-lane groups (48 channels) where Cout is a multiple of 16: one group and two
    # vectors, a group and one, two groups, a vector of sixteen alone
    (1, 9, 7, 16, 80, "relu", None), (3, 5, 11, 40, 64, "clamp", "before"),
    (1, 13, 17, 8, 96, "silu", "after"), (2, 4, 2, 64, 32, "none", None),
]


@pytest.mark.parametrize("wide", [False, True], ids=["8 lanes", "16 lanes"])
@pytest.mark.parametrize("case", POINTWISE, ids=[str(c) for c in POINTWISE])
def test_pointwise_matches_torch(case, wide, monkeypatch):
    """Groups of 24 output channels, or of 48 (sixteen lanes, where Cout is a multiple of
    16) whatever the CPU: the values are torch's, NaN and infinities included."""
    monkeypatch.setattr(conv_blocked, "wide", lambda: wide)
    n, h, w, c, cout, act, at = case
    rng = np.random.default_rng(c + cout)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    x[-1, c - 1, h - 1, w // 2], x[0, 0, 0, 0] = np.nan, -np.inf
    weight = rng.standard_normal((cout, c, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    y = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(weight), torch.tensor(bias))
    y, residual = _epilogue(y, rng, act, at)
    extra = [conv_blocked.block(residual)] if at else []
    got = POINTWISE_BLOCKED.kernel(conv_blocked.block(x), conv_blocked.pack(weight), bias,
                                   *extra, act=act, bounds=_bounds(act), residual_at=at)
    np.testing.assert_allclose(conv_blocked.unblock(got), y.numpy(), rtol=1e-5, atol=1e-5)


def _models(batch, size):
    return layout_models(batch, size, channels=(16, 40, 24))


@pytest.mark.parametrize("batch, size", [(1, (13, 11)), (3, (13, 11)), (1, (41, 35))])
def test_compiled_region_matches_eager_and_torch(batch, size, tmp_path):
    """The block's convs all run blocked, and so does its squeeze-and-excitation (fused
    into one node first: ``squeeze_excite_blocked``, no conversions around it, and on a
    plane of more positions than the projection's padded channels, into the projection:
    ``gated_pointwise_blocked``); the head's output is unblocked, the pooled output
    reshaped."""
    reference, model, x = _models(batch, size)
    with torch.no_grad():
        want = [t.numpy() for t in reference(torch.tensor(x))]
    compiled = dg.compile(model, passes=ON)
    with dg.no_grad():
        got = [t.numpy() for t in compiled(dg.tensor(x))]
        eager = [t.numpy() for t in model(dg.tensor(x))]
    graph = str(compiled.optimized_graph)
    assert graph.count("depthwise_blocked(") == 2, graph
    assert graph.count("pointwise_blocked(") == 3, graph
    gated = graph.count("gated_pointwise_blocked(")   # (on the 21x18 plane, not the 7x6:
    assert gated == (size == (41, 35)), graph           # the gated weights' 48 columns fit)
    assert graph.count("squeeze_excite_blocked(") == 1 - gated, graph
    assert graph.count("unblock_channels(") == 1 and graph.count(" block_channels(") == 1, graph
    assert "middle_means" in compiled.code
    for g, e, w in zip(got, eager, want):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    off = dg.compile(model, passes={"blocked_channels": False})
    with dg.no_grad():
        off(dg.tensor(x))
    assert not _blocked_ops(off.optimized_graph)

    path = str(tmp_path / "block.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    run = Executable(dg.onnx.load(path).graph, passes=ON)
    assert "depthwise_blocked" in run.code and "conv1x1_blocked" in run.code
    for g, w in zip(run.run([x]), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def _blocked_ops(graph) -> bool:
    return any(f"{op}(" in str(graph) for op in ("block_channels", "depthwise_blocked",
                                                  "pointwise_blocked"))


def test_left_alone():
    """Not taken: 1x1 convs without a depthwise conv (nothing to gain), channels that are
    not multiples of eight, a training step (its weights are inputs, not constants)."""
    rng = np.random.default_rng(0)
    pointwise = dg.nn.Sequential(dg.nn.Conv2d(8, 16, 1), dg.nn.ReLU(), dg.nn.Conv2d(16, 8, 1))
    odd = _net(dg)   # (13, 37, 21 channels)
    for model, c in ((pointwise.eval(), 8), (odd.eval(), 13)):
        compiled = dg.compile(model, passes=ON)
        with dg.no_grad():
            compiled(dg.tensor(rng.standard_normal((1, c, 6, 6)).astype(np.float32)))
        assert not _blocked_ops(compiled.optimized_graph)

    _, model, x = _models(1, (9, 9))
    assert not _blocked_ops(training_step(model, x, ON))


@pytest.mark.parametrize("x_shape, g_shape", [
    ((2, 3, 5, 7, 8), (2, 3, 1, 1, 8)),     # a per-block gate: scale_blocks
    ((1, 4, 2, 8), (1, 4, 1, 8)),            # one middle dim
    ((2, 3, 5, 7, 8), (1, 3, 1, 1, 8)),     # batch broadcast too: NumPy
    ((2, 3, 5, 7, 6), (2, 3, 1, 1, 6)),     # not eight lanes: NumPy
    ((2, 3, 5, 7, 8), (2, 3, 5, 7, 8)),     # equal shapes: no gate, NumPy
    ((2, 3, 5, 7, 8), (2, 3, 5, 1, 8)),     # a gate over the last middle dim only
])
def test_gate_product(x_shape, g_shape):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(x_shape).astype(np.float32)
    g = rng.standard_normal(g_shape).astype(np.float32)
    for f in (dg.compile(lambda a, b: a * b), dg.compile(lambda a, b: b * a)):
        np.testing.assert_array_equal(f(dg.tensor(x), dg.tensor(g)).numpy(), x * g)
    fast = x_shape[:2] == g_shape[:2] and x_shape[-1] == 8 and x_shape != g_shape
    assert ("scale_blocks" in f.code) == fast


@pytest.mark.parametrize("shape, dims, keepdim", [
    ((2, 3, 5, 7, 8), (2, 3), True), ((2, 3, 5, 7, 8), (2, 3), False),
    ((1, 2, 1, 3, 8), (2, 3), True), ((2, 3, 4, 5, 6), (1, 2), False),
    ((3, 300, 8), (1,), False),
])
def test_mean_over_middle_dims(shape, dims, keepdim):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    f = dg.compile(lambda a: a.mean(dims, keepdim=keepdim))
    got = f(dg.tensor(x)).numpy()
    assert "middle_means" in f.code
    np.testing.assert_allclose(got, x.mean(dims, keepdims=keepdim), rtol=1e-5, atol=1e-6)


def _guarded(shape, rng):
    """An output array of ``shape`` at the start of a buffer whose tail (64 floats) holds
    canaries, and a check that they are unchanged (a loop writing past its output)."""
    size = int(np.prod(shape))
    buf = np.full(size + 64, np.nan, np.float32)
    buf[size:] = rng.standard_normal(64).astype(np.float32)
    tail = buf[size:].copy()

    def intact():
        np.testing.assert_array_equal(buf[size:], tail)
    return buf[:size].reshape(shape), intact


# output positions 1, 7, 9, 17 (off the run of eight and the chunk); blocks 1, 2, 3; 1x1
# outputs of one, two and three blocks a group and a partial group (8, 16, 24, 40, 56)
ODD = [(1, 1, 1, 1, 8), (2, 1, 7, 2, 16), (1, 3, 3, 3, 24), (3, 1, 17, 1, 40),
       (1, 17, 1, 2, 56)]


@pytest.mark.parametrize("n, h, w, cb, cout", ODD, ids=[str(c) for c in ODD])
def test_no_loop_writes_past_its_output(n, h, w, cb, cout):
    """Every blocked loop on odd position counts and block counts, its output at the
    start of a longer buffer: the values equal NumPy's and the floats after the output
    are untouched (i-dw2's heap corruption was a gate product writing 8x its output)."""
    rng = np.random.default_rng(h * 31 + w)
    c = cb * 8
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    xb = conv_blocked.block(x)
    want_block = x.reshape(n, cb, 8, h, w).transpose(0, 1, 3, 4, 2)
    out, intact = _guarded(xb.shape, rng)
    conv_blocked._relayout(0, n * cb, x.reshape(-1), out.reshape(-1), h * w, True)
    np.testing.assert_array_equal(out, want_block)
    intact()
    out, intact = _guarded(x.shape, rng)
    conv_blocked._relayout(0, n * cb, out.reshape(-1), xb.reshape(-1), h * w, False)
    np.testing.assert_array_equal(out, x)
    intact()

    weight = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(weight),
                                      torch.tensor(bias), padding=1, groups=c).numpy()
    run = conv_blocked.fitted_depthwise(xb.shape, weight.shape, (1, 1), ((1, 1), (1, 1)),
                                        (1, 1))
    out, intact = _guarded(xb.shape, rng)
    run(xb, weight, bias, out=out)
    np.testing.assert_allclose(conv_blocked.unblock(out), want, rtol=1e-5, atol=1e-5)
    intact()

    weight = rng.standard_normal((cout, c, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(weight),
                                      torch.tensor(bias)).numpy()
    out, intact = _guarded((n, cout // 8, h, w, 8), rng)
    conv_blocked.pointwise(xb.shape, cout, False)(xb, conv_blocked.pack(weight), bias,
                                                  out=out)
    np.testing.assert_allclose(conv_blocked.unblock(out), want, rtol=1e-5, atol=1e-5)
    intact()

    gate = rng.standard_normal((n, cb, 1, 1, 8)).astype(np.float32)
    out, intact = _guarded(xb.shape, rng)
    conv_blocked.scale_blocks(0, n * cb, xb.reshape(-1), gate.reshape(-1), out.reshape(-1))
    np.testing.assert_array_equal(out, xb * gate)
    intact()

    out, intact = _guarded((n * cb, 8), rng)
    dg.kernels.normalization.middle_means(0, n * cb, xb.reshape(n * cb, h * w, 8), out)
    np.testing.assert_allclose(out, xb.mean((2, 3)).reshape(-1, 8), rtol=1e-5, atol=1e-6)
    intact()

    w1 = rng.standard_normal((3, c)).astype(np.float32)
    w2 = rng.standard_normal((c, 3)).astype(np.float32)
    b1, b2 = rng.standard_normal(3).astype(np.float32), rng.standard_normal(c).astype(
        np.float32)
    hidden = np.maximum(x.mean((2, 3)) @ w1.T + b1, 0)
    want = x * (1 / (1 + np.exp(-(hidden @ w2.T + b2))))[:, :, None, None]
    out, intact = _guarded((n, cb, h * w, 8), rng)
    relu, sigmoid = (dg.kernels.epilogue.ACTIVATIONS.index(a) for a in ("relu", "sigmoid"))
    inf = np.float32(np.inf)
    dg.kernels.excite.squeeze_excite_blocked(0, n, xb.reshape(n, cb, h * w, 8), w1, b1, w2, b2,
                                             relu, -inf, inf, sigmoid, -inf, inf, out)
    np.testing.assert_allclose(conv_blocked.unblock(out.reshape(xb.shape)), want, rtol=1e-5,
                               atol=1e-5)
    intact()


def test_two_threads_give_the_same_bits_as_one(monkeypatch):
    """The blocked loops share their work items among threads through ``run_rows``; each
    output is the same chain of sums whoever computes it: 1 and 2 threads agree bit for
    bit (the loops asked to share even small arrays)."""
    rng = np.random.default_rng(5)
    n, c, h, w, cout = 3, 24, 11, 13, 40
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    dw = rng.standard_normal((c, 1, 5, 5)).astype(np.float32)
    pw = conv_blocked.pack(rng.standard_normal((cout, c, 1, 1)).astype(np.float32))
    bias = rng.standard_normal(cout).astype(np.float32)
    se = [rng.standard_normal(s).astype(np.float32) for s in ((4, c, 1, 1), (4,), (c, 4, 1, 1),
                                                               (c,))]
    monkeypatch.setattr(conv_blocked, "threads_for", lambda size: None)
    monkeypatch.setattr(dg.ops.excite, "threads_for", lambda size: None)
    monkeypatch.setattr(dg.kernels.excite, "threads_for", lambda size: None)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("DUALGRAPH_NUM_THREADS", threads)
        xb = conv_blocked.block(x)
        y = conv_blocked.fitted_depthwise(xb.shape, dw.shape, (2, 2), ((2, 2), (2, 2)),
                                          (1, 1), act=1)(xb, dw, bias[:c])
        z = conv_blocked.pointwise(y.shape, cout, False)(y, pw, bias)
        e = dg.ops.layout.SQUEEZE_EXCITE_BLOCKED.kernel(y, *se, acts=("relu", "sigmoid"),
                                                        bounds=((-np.inf, np.inf),) * 2)
        gated = dg.ops.layout.GATED_POINTWISE_BLOCKED.kernel(
            y, *se, pw, bias, gate_acts=("relu", "sigmoid"),
            gate_bounds=((-np.inf, np.inf),) * 2, act="none", bounds=(-np.inf, np.inf),
            residual_at=None)
        results.append([xb, y, z, e, conv_blocked.unblock(z), gated])
    for one, two in zip(*results):
        np.testing.assert_array_equal(one.view(np.int32), two.view(np.int32))


def test_symbolic_dims_are_never_blocked():
    """``dynamic=True``: the batch is a symbolic dim, here also the channel dim of a
    permuted value read by elementwise ops (its ``% 8`` raised ShapeError in the
    precondition); nothing of a symbolic shape is blocked, calls of several batches
    equal eager."""
    nn = dg.nn

    class Permuted(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
            self.pw = nn.Conv2d(16, 16, 1)

        def forward(self, x):
            y = self.pw(dg.relu(self.dw(x)))
            z = dg.relu(y.permute(1, 0, 2, 3)) * 2.0     # (16, B, 9, 9)
            return z.permute(1, 0, 2, 3) + y
    model = Permuted().eval()
    compiled = dg.compile(model, dynamic=True)
    with dg.no_grad():
        for n in (1, 2, 3, 8):
            x = dg.tensor(np.random.default_rng(n).standard_normal((n, 16, 9, 9)).astype(
                np.float32))
            np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-4,
                                       atol=1e-4)
    assert not _blocked_ops(compiled.optimized_graph)


def test_sixteen_lanes_give_the_same_bits_as_eight(monkeypatch):
    """Both loops at either width (``conv_blocked.wide``, ``paired``): each output is the
    same chain of multiply-adds, so the bits agree (odd block counts, a 5x5 at stride 2, a 1x1 group of
    48 channels and a partial one)."""
    rng = np.random.default_rng(7)
    n, c, h, w, cout = 2, 40, 13, 11, 80
    x = conv_blocked.block(rng.standard_normal((n, c, h, w)).astype(np.float32))
    dw = rng.standard_normal((c, 1, 5, 5)).astype(np.float32)
    pw = rng.standard_normal((cout, c, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    results = []
    for wide in (False, True):
        monkeypatch.setattr(conv_blocked, "wide", lambda: wide)
        monkeypatch.setattr(conv_blocked, "paired", lambda positions: wide)
        y = conv_blocked.fitted_depthwise(x.shape, dw.shape, (2, 2), ((2, 2), (2, 2)),
                                          (1, 1), act=1)(x, dw, bias[:c])
        z = conv_blocked.pointwise(x.shape, cout, False, act=1)(x, conv_blocked.pack(pw), bias)
        results.append([y, z])
    assert conv_blocked.pack(pw).shape[-1] == 48
    for narrow, wide in zip(*results):
        np.testing.assert_array_equal(narrow.view(np.int32), wide.view(np.int32))


# n, c, (h, w), kernel, stride, ((top, bottom), (left, right)) padding, dilation, act,
# residual_at: planes whose rows have runs of eight positions inside the input (read in
# place), none of any model's shape
INTERIOR = [
    (1, 8, (5, 31), 3, 1, ((1, 1), (1, 1)), 1, "relu", None),        # 5 rows, 1 block
    (3, 24, (17, 37), 3, 2, ((1, 1), (1, 1)), 1, "clamp", "before"),  # stride 2, batch 3
    (1, 40, (31, 31), 5, 1, ((2, 2), (2, 2)), 1, "silu", None),
    (1, 24, (29, 41), 5, 2, ((2, 2), (2, 2)), 1, "hardswish", "after"),
    (2, 8, (25, 27), 7, 1, ((3, 3), (3, 3)), 1, "sigmoid", None),
    (1, 40, (23, 47), 7, 2, ((3, 3), (3, 3)), 1, "none", "before"),
    (1, 16, (19, 29), 3, 1, ((2, 2), (2, 2)), 2, "silu", None),        # dilation 2
    (3, 8, (21, 30), 5, 2, ((1, 3), (0, 2)), 1, "relu", None),         # uneven padding
    (1, 24, (12, 26), 3, 1, ((0, 0), (0, 0)), 1, "hardswish", None),   # no padding
    (1, 16, (9, 40), 3, 2, ((1, 1), (4, 4)), 1, "clamp", "after"),     # wide padding
]


@pytest.mark.parametrize("case", INTERIOR, ids=[str(c) for c in INTERIOR])
def test_depthwise_reads_its_interior_in_place(case, monkeypatch):
    """Eight-lane items whose rows have runs of eight positions inside the input read
    those from the input itself, copying only the border into the padded plane: torch's
    values, NaN and infinities included, and the bits of the loop copying every row (on
    planes that fit L1 too, to keep the cases small)."""
    monkeypatch.setattr(conv_blocked, "paired", lambda positions: False)
    monkeypatch.setattr(conv_blocked, "IN_PLACE_BYTES", 0)
    n, c, (h, w), k, s, pad, d, act, at = case
    rng = np.random.default_rng(h * w + k)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    x[0, c - 1, h // 2, w // 2], x[-1, c // 2, h - 1, 0] = np.nan, np.inf
    weight = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    (top, bottom), (left, right) = pad
    y = torch.nn.functional.conv2d(
        torch.nn.functional.pad(torch.tensor(x), (left, right, top, bottom)),
        torch.tensor(weight), torch.tensor(bias), stride=s, dilation=d, groups=c)
    y, residual = _epilogue(y, rng, act, at)
    extra = [conv_blocked.block(residual)] if at else []
    ho, wo = y.shape[2:]
    hp, wp = (ho - 1) * s + (k - 1) * d + 1, (wo - 1) * s + (k - 1) * d + 1
    inner = conv_blocked.interior((h, w), (ho, wo), (k, k), (s, s), (d, d), (top, left),
                                  (hp, wp), 1)
    assert inner[1] > inner[0] and inner[3] - inner[2] >= 8, inner   # (the test can fail)

    def run():
        return DEPTHWISE_BLOCKED.kernel(
            conv_blocked.block(x), weight, bias, *extra, act=act, bounds=_bounds(act),
            residual_at=at, stride=(s, s), padding=pad, dilation=(d, d))
    got = run()
    np.testing.assert_allclose(conv_blocked.unblock(got), y.numpy(), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(conv_blocked, "interior", lambda *args, **kw: np.zeros(8, np.int64))
    np.testing.assert_array_equal(got.view(np.int32), run().view(np.int32))


def test_depthwise_interior_only_where_a_run_fits(monkeypatch):
    """No interior where the padded plane is small (a 56x56 output of a 3x3, 108 kB, not a
    112x112's 416 kB) or the input large (``IN_PLACE_INPUT``), where no run of eight
    positions lies inside (a 14-position row of a 5x5 at stride 2: runs 0:8 and 6:14,
    inside 1:13), for pairs of blocks, or where every output row reads padding; the
    columns copied are those the other runs read."""
    def inner(size, out, k, s, p, span=1):
        read = tuple((o - 1) * s + k for o in out)
        return list(conv_blocked.interior(size, out, (k, k), (s, s), (1, 1), (p, p), read,
                                          span))
    assert inner((56, 56), (56, 56), 3, 1, 1) == [0] * 8
    big = conv_blocked.IN_PLACE_INPUT + 1   # (an input too large to read in place)
    assert list(conv_blocked.interior((112, 112), (112, 112), (3, 3), (1, 1), (1, 1), (1, 1),
                                      (114, 114), 1, big)) == [0] * 8
    assert inner((112, 112), (112, 112), 3, 1, 1) == [1, 111, 8, 104, 2, 110, 9, 103]
    monkeypatch.setattr(conv_blocked, "IN_PLACE_BYTES", 0)
    assert inner((28, 28), (14, 14), 5, 2, 2) == [0] * 8
    assert inner((30, 30), (30, 30), 3, 1, 1, span=2) == [0] * 8
    assert inner((1, 30), (1, 30), 3, 1, 1) == [0] * 8
    # rows 1:29 and columns 1:29 inside: runs 8:16 and 16:24 read the input; runs 0:8 and
    # 22:30 the padded plane: input rows 0:2 and 28:30 whole, the others' columns 0:9 and
    # 21:30
    assert inner((30, 30), (30, 30), 3, 1, 1) == [1, 29, 8, 24, 2, 28, 9, 21]


def test_depthwise_pairs_blocks_where_their_plane_fits_l1(monkeypatch):
    """The depthwise loop sums pairs of blocks at full width on any plane; with AVX-512's
    32 registers at half width (Zen 4) on planes whose paired form fits L1 (a 7x7 output
    of a 5x5 kernel: 11x11 padded, not 30x30); with 16 registers (AVX2) never."""
    from dualgraph.kernels import isa
    for registers, full, small, large in ((32, True, True, True), (32, False, True, False),
                                          (16, False, False, False)):
        monkeypatch.setattr(isa, "vector_registers", lambda: registers)
        monkeypatch.setattr(isa, "full_width", lambda: full)
        assert (conv_blocked.paired(11 * 11), conv_blocked.paired(30 * 30)) == (small, large)
