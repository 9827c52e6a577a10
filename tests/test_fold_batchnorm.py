"""The lowering rule ``fold_batchnorm``: an eval-mode BatchNorm (a per-channel affine chain
of constants) after a conv2d or linear with constant weights folds into the layer's weight
and bias, with the unfolded graph's values; where the precondition fails it is left alone.
"""

import numpy as np
import pytest

from dualgraph.graph import Graph, verify
from dualgraph.passes import fold_batchnorm

CONV = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)


def layer_and_batchnorm(kind: str, bias: bool, weight_constant=True, also_return=False):
    """``kind`` (conv2d or linear) then eval-mode BatchNorm as dualgraph writes it:
    ``(y - mean) * (gamma / sqrt(var + eps)) + beta``, per channel."""
    r = np.random.default_rng(0)
    c = 5
    g = Graph()
    if kind == "conv2d":
        x = g.add_input((2, 3, 6, 6), "float32", name="x")
        w_shape, per_channel, attrs = (c, 3, 3, 3), (c, 1, 1), CONV
    else:
        x = g.add_input((4, 3), "float32", name="x")
        w_shape, per_channel, attrs = (c, 3), (c,), {}
    w_array = r.standard_normal(w_shape).astype(np.float32)
    w = g.add_constant(w_array, name="w") if weight_constant else \
        g.add_input(w_shape, "float32", name="w")
    inputs = [x, w] + ([g.add_constant(r.standard_normal(c).astype(np.float32), name="b")]
                       if bias else [])
    (y,) = g.add_node(kind, inputs, attrs, names=["y"])
    mean, beta = (g.add_constant(r.standard_normal(per_channel).astype(np.float32))
                  for _ in range(2))
    var = r.random(per_channel) + 0.5
    gamma = r.standard_normal(per_channel)
    scale = g.add_constant((gamma / np.sqrt(var + 1e-5)).astype(np.float32))
    (centred,) = g.add_node("sub", [y, mean])
    (scaled,) = g.add_node("mul", [centred, scale])
    (out,) = g.add_node("add", [scaled, beta], names=["out"])
    g.set_outputs([out, y] if also_return else [out])
    args = [r.standard_normal(x.shape).astype(np.float32)]
    return g, args + ([w_array] if not weight_constant else [])


@pytest.mark.parametrize("kind", ["conv2d", "linear"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_batchnorm_folds_into_the_layer_with_the_same_values(kind, bias):
    before, args = layer_and_batchnorm(kind, bias)
    after, report = fold_batchnorm(before)
    verify(after)
    assert [n.op.name for n in after.nodes] == [kind]
    assert report.items == [(f"fold_batchnorm: %y + 3 per-channel steps -> {kind} %out "
                             "with folded weight and bias")]
    (got,), (want,) = after(*args), before(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("kind", ["conv2d", "linear"])
@pytest.mark.parametrize("case", ["output also returned", "weight not constant"])
def test_where_the_precondition_fails_the_graph_is_left_alone(kind, case):
    before, _ = layer_and_batchnorm(kind, True, weight_constant=case != "weight not constant",
                                    also_return=case == "output also returned")
    after, report = fold_batchnorm(before)
    assert not report.changed and str(after) == str(before)


def test_an_imported_onnx_batchnorm_folds_and_explain_says_so(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import dualgraph as dg
    r = np.random.default_rng(1)
    arrays = {"W": r.standard_normal((4, 3, 3, 3)), "s": r.standard_normal(4),
              "t": r.standard_normal(4), "m": r.standard_normal(4), "v": r.random(4) + 0.5}
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"]),
         helper.make_node("BatchNormalization", ["y", "s", "t", "m", "v"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()])
    path = str(tmp_path / "conv_bn.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = dg.onnx.load(path)
    run = model.executable
    assert [n.op.name for n in run.graph.nodes] == ["conv2d"]
    assert any(item.startswith("fold_batchnorm: ") for report in run.reports
               for item in report.items)
    x = r.standard_normal((2, 3, 8, 8)).astype(np.float32)
    (want,) = run.source_graph(x)
    got = model(dg.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# -- fold_input_affine: a BatchNorm (no activation) before its layer ---------------------------
def _norm_then_layer(lib, layer: str):
    """An eval-mode BatchNorm, no activation, then ``layer``."""
    nn = lib.nn
    return {"conv1x1": lambda: nn.Sequential(nn.BatchNorm2d(10), nn.Conv2d(10, 12, 1)),
            "conv3x3 stride 2": lambda: nn.Sequential(nn.BatchNorm2d(10),
                                                      nn.Conv2d(10, 12, 3, stride=2)),
            "grouped": lambda: nn.Sequential(nn.BatchNorm2d(10),
                                             nn.Conv2d(10, 4, 3, groups=2, bias=False)),
            "linear": lambda: nn.Sequential(nn.BatchNorm1d(10), nn.Linear(10, 7)),
            "padded": lambda: nn.Sequential(nn.BatchNorm2d(10),
                                            nn.Conv2d(10, 12, 3, padding=1))}[layer]()


@pytest.mark.parametrize("layer", ["conv1x1", "conv3x3 stride 2", "grouped", "linear",
                                   "padded"])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_batchnorm_before_its_layer_folds_where_there_is_no_padding(layer, batch):
    torch = pytest.importorskip("torch")
    import dualgraph as dg
    from test_conv_prologue import _close, _compiled_eager_torch, _same_weights
    m, ref = _norm_then_layer(dg, layer), _norm_then_layer(torch, layer)
    _same_weights(m, ref)   # (BatchNorm weights of zero and below among them)
    shape = (batch, 10) if layer == "linear" else (batch, 10, 7, 7)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    if layer != "linear" or batch > 1:   # (inf and NaN through the layer, as eager)
        x[(-1, 3) if layer == "linear" else (-1, 3, 0, 0)] = np.inf
    got, eager, want, ops = _compiled_eager_torch(m, ref, x)
    assert ("fused" in ops or "mul" in ops) == (layer == "padded"), ops   # (else folded)
    for other in (eager, want):
        _close(got, other, atol=1e-5 * np.abs(other[np.isfinite(other)]).max())
