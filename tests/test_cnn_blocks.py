"""Generated CNN blocks, compiled for inference: random stacks of convolutions (plain,
grouped, depthwise, 1x1, strided), BatchNorm, activations, residual adds and
squeeze-and-excitation, each written once against the torch-style API. The dg.compile'd
model under ``no_grad`` (parameters frozen, BatchNorm folded, conv epilogues) must equal
the eager model and torch's, with the same weights."""
import numpy as np
import pytest

import dualgraph as dg

torch = pytest.importorskip("torch")
from test_cnn_inference import compiled_eager_torch, onnx_round_trip  # noqa: E402

ACTIVATIONS = ["ReLU", "ReLU6", "SiLU", "Hardswish", "GELU", "Sigmoid", "Hardtanh", None]


def _act(lib, name):
    return getattr(lib.nn, name)() if name else lib.nn.Identity()


def make_block(lib, spec, channels):
    """One block of ``spec`` (a dict drawn by :func:`draw`) on ``channels`` channels."""
    nn = lib.nn
    cout, groups = spec["cout"], spec["groups"]
    groups = channels if groups == "depthwise" else groups
    cout = channels if spec["groups"] == "depthwise" else cout
    k, stride = spec["kernel"], spec["stride"]
    layers = [nn.Conv2d(channels, cout, k, stride, k // 2, groups=groups, bias=spec["bias"])]
    if spec["bn"]:
        layers.append(nn.BatchNorm2d(cout))
    layers.append(_act(lib, spec["act"]))
    body = nn.Sequential(*layers)
    residual = spec["residual"] and stride == 1 and cout == channels
    se = SqueezeExcite(lib, cout) if spec["se"] else None

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.se = body, se
            self.after = _act(lib, spec["act_after"]) if residual else nn.Identity()

        def forward(self, x):
            y = self.body(x)
            if self.se is not None:
                y = self.se(y)
            return self.after(y + x) if residual else y
    return Block(), cout


def SqueezeExcite(lib, channels):
    nn, squeezed = lib.nn, max(1, channels // 4)

    class SE(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.reduce = nn.Conv2d(channels, squeezed, 1)
            self.act = nn.ReLU()
            self.expand = nn.Conv2d(squeezed, channels, 1)
            self.gate = nn.Hardsigmoid() if channels % 2 else nn.Sigmoid()

        def forward(self, x):
            return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))
    return SE()


def draw(rng):
    """A random block spec."""
    return dict(cout=int(rng.choice([4, 8, 12])), groups=[1, 2, "depthwise"][rng.integers(3)],
                kernel=int(rng.choice([1, 3, 5])), stride=int(rng.choice([1, 1, 2])),
                bias=bool(rng.random() < 0.5), bn=bool(rng.random() < 0.8),
                act=ACTIVATIONS[rng.integers(len(ACTIVATIONS))],
                act_after=ACTIVATIONS[rng.integers(len(ACTIVATIONS))],
                residual=bool(rng.random() < 0.6), se=bool(rng.random() < 0.3))


def make_model(lib, specs):
    layers, channels = [], 8
    for spec in specs:
        if spec["groups"] == 2 and (channels % 2 or spec["cout"] % 2):
            spec = dict(spec, groups=1)
        block, channels = make_block(lib, spec, channels)
        layers.append(block)
    return lib.nn.Sequential(*layers)


def random_state(model, rng):
    """Random weights and running statistics (BatchNorm's far from 0 and 1)."""
    state = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        if name.endswith("running_var"):
            state[name] = rng.uniform(0.5, 2.0, shape)
        elif name.endswith("num_batches_tracked"):
            state[name] = np.zeros(shape, np.int64)
            continue
        else:
            state[name] = rng.standard_normal(shape) * 0.5
        state[name] = state[name].astype(np.float32)
    return state


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_cnn_block_stack_equals_eager_and_torch(seed, batch):
    rng = np.random.default_rng(seed)
    specs = [draw(rng) for _ in range(int(rng.integers(2, 5)))]
    model, reference = make_model(dg, specs), make_model(torch, specs)
    state = random_state(model, rng)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model.eval(), reference.eval()
    x = rng.standard_normal((batch, 8, 12, 12)).astype(np.float32)
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    ops = {n.op.name for n in compiled.optimized_graph.nodes}
    if any(s["bn"] for s in specs):
        assert "batch_norm" not in ops and len(compiled.optimized_graph.inputs) == 1


@pytest.mark.parametrize("act", ["ReLU", "ReLU6", "Hardswish", None])
def test_residual_before_and_after_the_activation(act):
    """``act(bn(conv(x)) + x)`` (a ResNet block's end: the residual before the activation)
    and ``bn(conv(x)) + x`` (MobileNetV2's projection), each one conv2d_epilogue."""
    rng = np.random.default_rng(0)
    specs = [dict(cout=8, groups=1, kernel=3, stride=1, bias=False, bn=True, act=None,
                  act_after=act, residual=True, se=False)]
    model, reference = make_model(dg, specs), make_model(torch, specs)
    state = random_state(model, rng)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model.eval(), reference.eval()
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    compiled, got, _, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (node,) = compiled.optimized_graph.nodes
    assert (node.op.name, node.attrs["residual_at"]) == ("conv2d_epilogue", "before")


@pytest.mark.parametrize("act", ["Hardswish", "Hardsigmoid", "SiLU", "ReLU6"])
def test_onnx_spellings_of_the_activations_take_the_epilogue(act, tmp_path):
    """torch.onnx's HardSwish/HardSigmoid/Clip as ``dg.onnx.load`` imports them (x * clamp(x
    / 6 + 0.5, 0, 1), ...) are matched too: every conv of the loaded model is one node
    with its epilogue (the 1x1 conv on its constant weight a conv2d_packed), and the values
    are torch's."""
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                getattr(torch.nn, act)(), torch.nn.Conv2d(8, 8, 1),
                                getattr(torch.nn, act)()).eval()
    with torch.no_grad():
        model[1].running_var.uniform_(0.5, 2.0)
    ops = onnx_round_trip(model, torch.randn(2, 4, 10, 10), str(tmp_path / "block.onnx"),
                          rtol=1e-4, atol=1e-5)
    assert ops == ["conv2d_epilogue", "conv2d_packed"], ops


def down_block(lib):
    """ResNet's downsampling block: relu(bn(conv(x)) + bn(conv1x1(x)))."""
    nn = lib.nn

    class Down(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(nn.Conv2d(4, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8))
            self.down = nn.Sequential(nn.Conv2d(4, 8, 1, 2, bias=False), nn.BatchNorm2d(8))
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.main(x) + self.down(x))
    return Down()


def test_two_convolutions_meeting_at_one_residual_add():
    """Both convs of :func:`down_block` match the add; one takes it, the other stays a
    conv whose result is the residual (the strided 1x1 on its packed weight)."""
    model, reference = down_block(dg), down_block(torch)
    state = random_state(model, np.random.default_rng(1))
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model.eval(), reference.eval()
    x = np.random.default_rng(2).standard_normal((2, 4, 9, 9)).astype(np.float32)
    compiled, got, _, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    ops = sorted(n.op.name for n in compiled.optimized_graph.nodes)
    assert ops == ["conv2d_epilogue", "conv2d_packed"], ops
