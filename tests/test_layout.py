"""Channels-last regions (``passes/layout.py``, the opt-in lowering rule ``channels_last``;
the ops ``relayout`` and ``depthwise_nhwc``, ``kernels/conv_nhwc.py``): the depthwise loop
with every epilogue against torch on odd shapes (channels not a multiple of eight, odd
planes, strides 1 and 2, kernels 3/5/7, dilation, batch 1 and 3, planes narrower than a run
of four positions); compiled inverted-residual blocks with squeeze-and-excitation (odd
channels, BatchNorm folded) against eager and torch, directly and on the graph of
``dg.onnx.load``; the rule's cost rule and opt-in; a training step is left alone. The
default rule ``channels_last_views``: depthwise convs between permutes (LayerNorm over
channels on the permuted tensor) against eager and torch, no relayout left; a region with
an edge to convert left alone; the loop's sixteen lanes give eight's bits."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph.codegen import Executable  # noqa: E402
from dualgraph.kernels import conv_nhwc  # noqa: E402
from dualgraph.ops.layout import DEPTHWISE_NHWC, POINTWISE_NHWC  # noqa: E402

F = torch.nn.functional
ACTS = {"none": lambda v: v, "relu": F.relu, "clamp": F.relu6, "silu": F.silu,
        "hardswish": F.hardswish, "sigmoid": torch.sigmoid}

# n, c, h, w, kernel, stride, padding, dilation, act, residual_at
CASES = [
    (1, 13, 9, 11, 3, 1, 1, 1, "relu", None),        # a partial block
    (3, 21, 14, 14, 3, 2, 1, 1, "clamp", None),      # stride 2, batch 3
    (1, 37, 7, 7, 5, 1, 2, 1, "silu", "before"),     # 5x5, residual before
    (2, 16, 15, 13, 7, 2, 3, 1, "hardswish", "after"),  # 7x7 stride 2, residual after
    (1, 8, 12, 10, 3, 1, 2, 2, "sigmoid", None),     # dilation
    (3, 24, 3, 2, 3, 1, 1, 1, "none", "before"),     # rows narrower than a run of four
    (1, 5, 6, 6, 3, 2, 0, 1, "relu", None),          # fewer than eight channels, no padding
    # rows of runs of eight positions (3- and 5-wide kernels in registers, else tap by tap)
    # and edge positions four blocks at a time, whole blocks then a partial one
    (1, 43, 29, 37, 3, 1, 1, 1, "clamp", "before"),  # 3 wide, 5 blocks + 3 channels
    (2, 40, 23, 30, 5, 1, 2, 1, "hardswish", "after"),  # 5 wide, 5 whole blocks
    (1, 35, 33, 33, 7, 2, 3, 1, "silu", None),       # 7x7 stride 2 on a wide row
    (1, 32, 25, 41, 3, 1, 2, 2, "relu", None),       # dilation 2, taps one at a time
    (16, 24, 15, 17, 3, 2, 1, 1, "clamp", None),     # batch 16, stride 2
    (1, 16, 40, 12, 5, 1, 1, 1, "none", None),       # padding less than the kernel's half
    # sixteen lanes where AVX-512 runs at full width: four wide blocks at an edge, then a
    # wide one, an eight-lane one and three channels; runs of 3-, 5- and 7-wide kernels
    (1, 75, 10, 19, 7, 1, 3, 1, "relu", "after"),    # 7x7: 4x16 + 8 + 3 channels
    (2, 48, 12, 20, 5, 1, 2, 1, "silu", "before"),   # 5 wide in registers, 3 wide blocks
    (3, 88, 9, 17, 3, 1, 1, 1, "clamp", None),       # 3 wide, 5x16 + 8, batch 3
    (1, 40, 7, 7, 7, 1, 3, 1, "hardswish", None),    # 7x7 on 7x7: every position an edge
]


# (the squeeze-excitation blocks stay ops of the region: fused into one node first, the
# region would end at each of them)
CHANNELS_LAST = {"channels_last": True, "squeeze_excite": False}


def _epilogue(y, rng, act, at):
    """torch's ``y`` with the activation and a random residual (``at``: before it, after
    it, or None); the residual as NumPy."""
    residual = rng.standard_normal(tuple(y.shape)).astype(np.float32) if at else None
    if at == "before":
        y = y + torch.tensor(residual)
    y = ACTS[act](y)
    if at == "after":
        y = y + torch.tensor(residual)
    return y, residual


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_depthwise_loop_matches_torch(case):
    n, c, h, w, k, s, p, d, act, at = case
    rng = np.random.default_rng(c)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    y = F.conv2d(torch.tensor(x), torch.tensor(weight), torch.tensor(bias), stride=s,
                 padding=p, dilation=d, groups=c)
    y, residual = _epilogue(y, rng, act, at)
    to_nhwc = (0, 2, 3, 1)
    extra = [np.ascontiguousarray(residual.transpose(to_nhwc))] if at else []
    got = DEPTHWISE_NHWC.kernel(
        np.ascontiguousarray(x.transpose(to_nhwc)), conv_nhwc.pack(weight), bias, *extra,
        act=act, bounds=(0.0, 6.0) if act == "clamp" else (-np.inf, np.inf),
        residual_at=at, stride=(s, s), padding=((p, p), (p, p)), dilation=(d, d))
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), y.numpy(), rtol=1e-5, atol=1e-5)


POINTWISE = [   # n, h, w, c, cout, act, residual_at
    (1, 9, 7, 13, 21, "relu", None), (3, 5, 11, 40, 24, "clamp", "before"),
    (2, 6, 6, 24, 37, "hardswish", "after"), (1, 1, 1, 19, 8, "sigmoid", None),
]


@pytest.mark.parametrize("case", POINTWISE, ids=[str(c) for c in POINTWISE])
def test_pointwise_matches_torch(case, monkeypatch):
    """The 1x1 conv of channels-last activations (``pointwise_nhwc``), in blocks of seven
    positions (the last one partial) and in one block."""
    n, h, w, c, cout, act, at = case
    rng = np.random.default_rng(c)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((cout, c, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    y = F.conv2d(torch.tensor(x), torch.tensor(weight), torch.tensor(bias))
    y, residual = _epilogue(y, rng, act, at)
    to_nhwc = (0, 2, 3, 1)
    extra = [np.ascontiguousarray(residual.transpose(to_nhwc))] if at else []
    for block in (1, 1 << 20):
        monkeypatch.setattr(conv_nhwc, "BLOCK_BYTES", block)
        monkeypatch.setattr(conv_nhwc, "MIN_ROWS", 7)
        got = POINTWISE_NHWC.kernel(
            np.ascontiguousarray(x.transpose(to_nhwc)),
            np.ascontiguousarray(weight[:, :, 0, 0].T), bias, *extra, act=act,
            bounds=(0.0, 6.0) if act == "clamp" else (-np.inf, np.inf), residual_at=at)
        np.testing.assert_allclose(got.transpose(0, 3, 1, 2), y.numpy(), rtol=1e-5,
                                   atol=1e-5)


def _net(lib, c=13, hidden=37, out=21):
    nn = lib.nn

    class Block(nn.Module):
        """1x1 expansion, depthwise 3x3 (stride 2) and 5x5, squeeze-and-excitation, 1x1
        projection with a residual, global pooling: odd channel counts throughout."""

        def __init__(self):
            super().__init__()
            self.expand = nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False),
                                        nn.BatchNorm2d(hidden), nn.ReLU6())
            self.dw1 = nn.Sequential(nn.Conv2d(hidden, hidden, 3, 2, 1, groups=hidden),
                                     nn.Hardswish())
            self.dw2 = nn.Sequential(nn.Conv2d(hidden, hidden, 5, 1, 2, groups=hidden),
                                     nn.SiLU())
            self.se1 = nn.Conv2d(hidden, 5, 1)
            self.se2 = nn.Conv2d(5, hidden, 1)
            self.project = nn.Conv2d(hidden, hidden, 1)
            self.head = nn.Conv2d(hidden, out, 1)

        def forward(self, x):
            y = self.dw1(self.expand(x))
            z = self.dw2(y)
            gate = lib.sigmoid(self.se2(lib.relu(self.se1(z.mean((2, 3), keepdim=True)))))
            y = self.project(z * gate) + y
            return self.head(y), y.mean((2, 3))
    return Block()


def _models(batch, size=(13, 11), channels=(13, 37, 21)):
    """torch's and dualgraph's :func:`_net` with ``channels`` (in, hidden, out), the same
    random weights, and an input of ``batch`` x ``size``."""
    rng = np.random.default_rng(batch)
    c, hidden, out = channels
    reference = _net(torch, c, hidden, out).eval()
    state = {k: (rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32)
             for k, v in reference.state_dict().items() if v.dtype == torch.float32}
    state = {k: np.abs(v) + 0.5 if k.endswith("running_var") else v for k, v in state.items()}
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    model = _net(dg, c, hidden, out).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()}, strict=False)
    x = rng.standard_normal((batch, c, *size)).astype(np.float32)
    return reference, model, x


@pytest.mark.parametrize("batch, size", [(1, (13, 11)), (3, (13, 11)), (16, (9, 8)),
                                         (1, (41, 35))])
def test_compiled_region_matches_eager_and_torch(batch, size, tmp_path):
    reference, model, x = _models(batch, size)
    with torch.no_grad():
        want = [t.numpy() for t in reference(torch.tensor(x))]
    compiled = dg.compile(model, passes=CHANNELS_LAST)
    with dg.no_grad():
        got = [t.numpy() for t in compiled(dg.tensor(x))]
        eager = [t.numpy() for t in model(dg.tensor(x))]
    graph = str(compiled.optimized_graph)
    assert graph.count("depthwise_nhwc(") == 2 and " conv2d" not in graph, graph
    assert graph.count("pointwise_nhwc(") == 5, graph
    assert graph.count("relayout(") == 2, graph   # (the input in, the head's output back)
    for g, e, w in zip(got, eager, want):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    # opt-in: the default pipeline, and a dict that only leaves passes out, leave the
    # layout alone
    for passes in (None, {"cse": False}):
        default = dg.compile(model, passes=passes)
        with dg.no_grad():
            default(dg.tensor(x))
        assert "relayout" not in str(default.optimized_graph), passes

    path = str(tmp_path / "block.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    loaded = dg.onnx.load(path)
    run = Executable(loaded.graph, passes=CHANNELS_LAST)
    assert "depthwise_nhwc" in run.code
    for g, w in zip(run.run([x]), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_cost_rule_and_training_step():
    """A region without a depthwise conv is not taken (1x1 convs alone: nothing to
    gain); a training step's weights are inputs, not constants: nothing is taken."""
    pointwise = dg.nn.Sequential(dg.nn.Conv2d(8, 16, 1), dg.nn.ReLU(), dg.nn.Conv2d(16, 8, 1))
    pointwise.eval()
    compiled = dg.compile(pointwise, passes=CHANNELS_LAST)
    x = dg.tensor(np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32))
    with dg.no_grad():
        compiled(x)
    assert "relayout" not in str(compiled.optimized_graph)

    _, model, x = _models(1)
    assert "nhwc" not in str(training_step(model, x, CHANNELS_LAST))


def training_step(model, x, passes):
    """The optimised graph of ``model``'s SGD step, compiled with ``passes``, after a call
    on ``x``."""
    model.train()
    opt = dg.optim.SGD(model.parameters(), lr=0.1)

    @dg.compile(passes=passes)
    def step(x):
        opt.zero_grad()
        head, pooled = model(x)
        loss = (head ** 2).mean() + pooled.mean()
        loss.backward()
        opt.step()
        return loss
    step(dg.tensor(x))
    return step.optimized_graph


def test_depthwise_loop_same_bits_at_either_width(monkeypatch):
    """Sixteen lanes sum each output in the same order as eight: the same bits."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 12, 15, 75)).astype(np.float32)
    wt = conv_nhwc.pack(rng.standard_normal((75, 1, 5, 5)).astype(np.float32))
    bias = rng.standard_normal(75).astype(np.float32)
    runs = []
    for full in (False, True):
        monkeypatch.setattr(conv_nhwc.isa, "full_width", lambda full=full: full)
        runs.append(conv_nhwc.conv(x, wt, None, (1, 1), ((2, 2), (2, 2)), (1, 1), bias,
                                   act=4))
    np.testing.assert_array_equal(runs[0], runs[1])


def _permuted_net(lib, c, k, stride, act):
    """Blocks that normalise over channels on the permuted ``(N, H, W, C)`` tensor between
    depthwise convs (``channels_last_views``): the depthwise conv's input and output
    permuted, an activation after it, a residual added in NCHW, a mean over the plane."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(c, c, k, stride, k // 2, groups=c)
            self.norm = nn.LayerNorm(c)
            self.up, self.down = nn.Linear(c, 2 * c), nn.Linear(2 * c, c)
            self.act = {"relu6": nn.ReLU6(), "hardswish": nn.Hardswish(), "silu": nn.SiLU(),
                        "none": nn.Identity()}[act]

        def forward(self, x):
            y = self.norm(self.act(self.dw(x)).permute(0, 2, 3, 1))
            y = self.down(lib.nn.functional.gelu(self.up(y)))
            shortcut = x if stride == 1 else self.dw(x)
            return shortcut + y.permute(0, 3, 1, 2)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, c, 2, 2)
            self.norm = nn.LayerNorm(c)
            self.blocks = nn.Sequential(Block(), Block())

        def forward(self, x):
            x = self.norm(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return self.blocks(x).mean((2, 3))
    return Net()


@pytest.mark.parametrize("batch, c, k, stride, act", [
    (1, 40, 7, 1, "none"),        # 2x16 + 8 channels, 7x7
    (3, 21, 3, 1, "relu6"),       # 16 + 5 channels, batch 3
    (2, 35, 5, 2, "hardswish"),   # stride 2 (its output read in the residual too)
    (1, 64, 7, 1, "silu"),        # four wide blocks at the edges
])
def test_permuted_regions_match_eager_and_torch(batch, c, k, stride, act, tmp_path):
    """By default (``channels_last_views``) the depthwise convs between permutes run
    channels-last with no relayout and no permute left around them; values against eager
    and torch, and on the graph of ``dg.onnx.load`` (its Transposes are permutes)."""
    rng = np.random.default_rng(c)
    reference = _permuted_net(torch, c, k, stride, act).eval()
    state = {n: (rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32)
             for n, v in reference.state_dict().items()}
    reference.load_state_dict({n: torch.tensor(v) for n, v in state.items()})
    model = _permuted_net(dg, c, k, stride, act).eval()
    model.load_state_dict({n: dg.tensor(v) for n, v in state.items()})
    x = rng.standard_normal((batch, 3, 30, 26)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    compiled = dg.compile(model)
    with dg.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        eager = model(dg.tensor(x)).numpy()
    graph = str(compiled.optimized_graph)
    assert graph.count("depthwise_nhwc(") == 2, graph   # (at stride 2 cse joins the two)
    assert "relayout(" not in graph and "perm=(0, 3, 1, 2)" not in graph, graph
    # (before linear_epilogue: each block's residual add is its last linear's epilogue)
    assert graph.count("residual_at='before'") == 2, graph
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    path = str(tmp_path / "permuted.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    run = Executable(dg.onnx.load(path).graph, passes={"channels_last_views": True})
    assert "depthwise_nhwc" in run.code and "relayout" not in run.code
    np.testing.assert_allclose(run.run([x])[0], want, rtol=1e-4, atol=1e-4)


def test_permuted_region_with_a_paid_edge_is_left_alone():
    """A region whose output is also read in NCHW (returned) would need a relayout: not
    taken by default; the compiled values still match eager."""
    class Net(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = dg.nn.Conv2d(16, 16, 3, 1, 1, groups=16)
            self.norm = dg.nn.LayerNorm(16)

        def forward(self, x):
            y = self.dw(self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))
            return y, self.norm(y.permute(0, 2, 3, 1))
    model = Net().eval()
    x = dg.tensor(np.random.default_rng(1).standard_normal((1, 16, 9, 9)).astype(np.float32))
    compiled = dg.compile(model)
    with dg.no_grad():
        got = [t.numpy() for t in compiled(x)]
        want = [t.numpy() for t in model(x)]
    assert "nhwc" not in str(compiled.optimized_graph)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
