"""One model, two front ends: a torch-style module compiled with ``dg.compile`` and the same
model exported from torch and loaded with ``dg.onnx.load`` must reach the same optimised
graph (the rules fire on both spellings), and the squeeze-and-excitation block's
pooling, two small 1x1 convolutions, gate and channel scale become one node. Values are
checked against torch, eager and compiled, at odd channel counts and batches 1 and 3."""
import numpy as np
import pytest

import dualgraph as dg
from dualgraph.passes import simplify

torch = pytest.importorskip("torch")
from test_cnn_inference import compiled_eager_torch  # noqa: E402


def _bits(a):
    return np.asarray(a, np.float32).view(np.int32)


EDGES = np.array([-np.inf, -1e30, -7.5, -3.0000002, -3, -2.9999998, -1e-40, -0.0, 0.0, 1e-40,
                  0.5, 2.9999998, 3, 3.0000002, 5.9999995, 6, 6.0000005, 9, 1e30, np.inf,
                  np.nan], np.float32)


@pytest.mark.parametrize("scale", [lambda v: v / 6, lambda v: v * 0.25, lambda v: 3.0 * v,
                                   lambda v: v / 0.7])
def test_a_positive_scale_moves_before_a_clamp_with_the_same_bits(scale):
    """``clamp(x, lo, hi) / s -> clamp(x / s, lo / s, hi / s)`` (and ``* s``) for s > 0:
    rounding is monotone, so the compiled result equals eager bit for bit, at the bounds,
    signed zeros, subnormals, infinities and NaN included."""
    f = lambda x: scale(dg.clamp(x + 3, 0, 6))
    rng = np.random.default_rng(0)
    x = np.concatenate([EDGES, rng.uniform(-8, 8, 300).astype(np.float32)])
    graph = dg.jit.trace(f, dg.tensor(x)).graph
    _, report = simplify(graph)
    assert any("clamp(x, lo, hi)" in item for item in report.items), report
    eager = f(dg.tensor(x)).numpy()
    got = dg.compile(f)(dg.tensor(x)).numpy()
    np.testing.assert_array_equal(_bits(got), _bits(eager))


def test_a_negative_or_array_scale_stays_after_the_clamp():
    """A negative scale reverses the order (and an array scale is not one number): no
    rewrite, and the compiled values are eager's."""
    w = dg.tensor(np.array([1.0, -2.0, 3.0], np.float32))
    for f in (lambda x: dg.clamp(x, 0, 6) / -6, lambda x: dg.clamp(x, 0, 6) * w):
        x = dg.tensor(np.array([-1.0, 2.0, 7.0], np.float32))
        _, report = simplify(dg.jit.trace(f, x).graph)
        assert not any("clamp(x, lo, hi)" in item for item in report.items)
        np.testing.assert_array_equal(dg.compile(f)(x).numpy(), f(x).numpy())


def se_model(lib, channels=(7, 13), gate="Hardsigmoid", act="ReLU"):
    """A stem conv, then per width a conv + BatchNorm + activation and a squeeze-and-
    excitation block ``x * gate(conv(act(conv(mean(x)))))`` before a 1x1 projection."""
    nn = lib.nn
    layers, cin = [nn.Conv2d(3, channels[0], 3, padding=1)], channels[0]
    for c in channels:
        squeezed = max(1, c // 4)
        se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, squeezed, 1),
                           getattr(nn, act)(), nn.Conv2d(squeezed, c, 1), getattr(nn, gate)())
        body = nn.Sequential(nn.Conv2d(cin, c, 3, padding=1, groups=1), nn.BatchNorm2d(c),
                             getattr(nn, act)())

        class Block(nn.Module):
            def __init__(self, body=body, se=se, project=nn.Conv2d(c, c, 1)):
                super().__init__()
                self.body, self.se, self.project = body, se, project

            def forward(self, x):
                h = self.body(x)
                return self.project(h * self.se(h))
        layers.append(Block())
        cin = c
    return nn.Sequential(*layers)


def _pair(seed=0, **kw):
    model, reference = se_model(dg, **kw), se_model(torch, **kw)
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in reference.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        shape = tuple(value.shape)
        state[name] = (rng.uniform(0.5, 2.0, shape) if name.endswith("running_var")
                       else rng.standard_normal(shape) * 0.5).astype(np.float32)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()}, strict=False)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    return model.eval(), reference.eval()


def _shape_of(graph) -> list:
    """Each node's op and attrs, without value names: what two front ends must agree on."""
    return [(n.op.name, tuple(sorted((k, repr(v)) for k, v in n.attrs.items())))
            for n in graph.nodes]


@pytest.mark.parametrize("gate,act", [("Hardsigmoid", "ReLU"), ("Hardsigmoid", "Hardswish"),
                                      ("Sigmoid", "SiLU")])
def test_the_module_and_its_onnx_import_reach_one_graph(gate, act, tmp_path):
    """torch's hard-sigmoid is relu6(y + 3) / 6 in a traced module and HardSigmoid
    (y / 6 + 0.5 clamped) in its export: both become one conv2d_epilogue clamping to
    [0, 1], so the compiled module's optimised graph is its ONNX import's, node by node."""
    pytest.importorskip("onnx")
    model, reference = _pair(gate=gate, act=act)
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 9)).astype(np.float32)
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    path = str(tmp_path / "se.onnx")
    torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False, input_names=["x"])
    loaded = dg.onnx.load(path)
    np.testing.assert_allclose(loaded(dg.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert _shape_of(compiled.optimized_graph) == _shape_of(loaded.executable.graph)
    assert "div" not in {n.op.name for n in compiled.optimized_graph.nodes}


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("gate,act,channels", [("Hardsigmoid", "ReLU", (7, 13)),
                                               ("Sigmoid", "SiLU", (5, 9)),
                                               ("Hardsigmoid", "Hardswish", (3, 17))])
def test_squeeze_and_excitation_is_one_node_equal_to_torch(batch, gate, act, channels):
    """Each block's mean, two 1x1 convs with their activations, gate and channel scale
    become one squeeze_excite node; compiled equals eager and torch at odd channel counts
    (squeezed to 1-4 channels), batches 1 and 3."""
    model, reference = _pair(seed=batch, gate=gate, act=act, channels=channels)
    x = np.random.default_rng(2).standard_normal((batch, 3, 11, 7)).astype(np.float32)
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-5)
    ops = [n.op.name for n in compiled.optimized_graph.nodes]
    assert ops.count("squeeze_excite") == 2 and "mean" not in ops and "mul" not in ops, ops


def _se_arrays(rng, dtype, n, c, s, hw):
    x = rng.standard_normal((n, c, *hw)).astype(dtype)
    w1, b1 = rng.standard_normal((s, c, 1, 1)).astype(dtype), rng.standard_normal(s).astype(dtype)
    w2, b2 = rng.standard_normal((c, s, 1, 1)).astype(dtype), rng.standard_normal(c).astype(dtype)
    return x, w1, b1, w2, b2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,c,s,hw", [(1, 1, 1, (1, 1)), (3, 5, 2, (3, 7)), (2, 19, 3, (1, 9))])
@pytest.mark.parametrize("acts,bounds", [(("relu", "sigmoid"), ((-np.inf, np.inf),) * 2),
                                         (("hardswish", "clamp"), ((-np.inf, np.inf), (0, 1))),
                                         (("silu", "hardsigmoid"), ((-np.inf, np.inf),) * 2),
                                         (("none", "none"), ((-np.inf, np.inf),) * 2)])
def test_the_squeeze_excite_kernel_equals_torch(dtype, n, c, s, hw, acts, bounds):
    """The op's kernel (float32: the Numba loop; float64: NumPy's passes) against torch's
    mean, convs, activations and product, 1x1 planes and one channel included."""
    from dualgraph.ops.excite import SQUEEZE_EXCITE
    x, w1, b1, w2, b2 = _se_arrays(np.random.default_rng(c), dtype, n, c, s, hw)
    got = SQUEEZE_EXCITE.kernel(x, w1, b1, w2, b2, acts=acts, bounds=bounds)
    F = torch.nn.functional
    torch_act = {"relu": F.relu, "sigmoid": torch.sigmoid, "hardswish": F.hardswish,
                 "silu": F.silu, "hardsigmoid": F.hardsigmoid, "none": lambda v: v}
    t = [torch.tensor(a) for a in (x, w1, b1, w2, b2)]
    h = t[0].mean((2, 3), keepdim=True)
    for (w, b), act, (lo, hi) in zip((t[1:3], t[3:5]), acts, bounds):
        h = F.conv2d(h, w, b)
        h = h.clamp(lo, hi) if act == "clamp" else torch_act[act](h)
    want = (t[0] * h).numpy()
    assert got.dtype == dtype and got.shape == x.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_a_pooled_value_read_elsewhere_stays_unfused():
    """The precondition: each value read only by the next op. A block whose pooled means
    are also returned keeps its ops, and its values."""
    nn = dg.nn
    reduce_, expand = nn.Conv2d(6, 2, 1), nn.Conv2d(2, 6, 1)

    def f(x):
        m = x.mean((2, 3), keepdim=True)
        return x * dg.sigmoid(expand(dg.relu(reduce_(m)))), m
    x = dg.tensor(np.random.default_rng(0).standard_normal((2, 6, 4, 4)).astype(np.float32))
    compiled = dg.compile(f)
    with dg.no_grad():
        got, eager = compiled(x), f(x)
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert "squeeze_excite" not in {n.op.name for n in compiled.optimized_graph.nodes}
