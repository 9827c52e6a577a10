"""ONNX import (``dg.onnx.load``) checked against onnxruntime.

Every rule of ``onnx_import_ops.import_rules()`` runs in the table below: a one-node model built
with ``onnx.helper`` (checked by ``onnx.checker``), run by onnxruntime and by dualgraph, the
values and dtypes compared. Then whole models (an MLP, a CNN, an attention block whose
reshapes go through Shape/Gather/Concat with a symbolic batch), loading from a file, and the
errors.
"""
from __future__ import annotations

import numpy as np
import pytest

import dualgraph as dg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from dualgraph.export.errors import OnnxError  # noqa: E402
from dualgraph.export.onnx_import_ops import import_rules  # noqa: E402

RNG = np.random.default_rng(0)


def f32(*shape, low=None):
    """Normal float32 samples (uniform in [low, low + 1) with ``low``)."""
    if low is not None:
        return (low + RNG.random(shape)).astype(np.float32)
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values):
    return np.array(values, np.int64)


class W:
    """An input given as an initializer (a weight, a shape, axes) instead of a graph input."""

    def __init__(self, array):
        self.array = np.asarray(array)


def _model(nodes, inputs, opset, outputs, name="case"):
    """A checked model: ``inputs`` maps names to arrays (graph inputs) or Ws (initializers);
    output types come from ONNX shape inference, or are given (``outputs`` holding a
    ValueInfoProto: ONNX infers no shapes of a Loop's results)."""
    graph_inputs = [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs.items() if not isinstance(a, W)]
    inits = [numpy_helper.from_array(a.array, n) for n, a in inputs.items() if isinstance(a, W)]
    graph = helper.make_graph(nodes, name, graph_inputs,
                              [o if isinstance(o, onnx.ValueInfoProto) else
                               onnx.ValueInfoProto(name=o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def _run_both(model, feeds, rtol=1e-5, atol=1e-6):
    """Run ``model`` in onnxruntime and in dualgraph; compare every output."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    fn = dg.onnx.load(model)
    got = fn(*[feeds[n] for n in fn.input_names])
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return fn


def case(op, inputs, opset=17, outputs=1, tol=(1e-5, 1e-6), **attrs):
    """One row of the table: ``op`` applied to ``inputs`` (arrays, Ws, or None for an
    omitted optional input)."""
    return pytest.param(op, inputs, opset, outputs, tol, attrs,
                        id=f"{op}-{opset}-" + "-".join(f"{k}" for k in attrs))


LOOSE = (1e-4, 1e-5)   # transcendental functions: NumPy's and onnxruntime's differ by ulps
X = f32(3, 4)
X4 = f32(2, 3, 5, 5)
INTS = np.array([[-7, 5, 3], [4, -2, 9]], np.int64)
BOOLS = RNG.random((2, 3)) > 0.5
BOOLS2 = RNG.random((2, 3)) > 0.5

CASES = [
    # unary elementwise
    *[case(op, [X], tol=LOOSE) for op in (
        "Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Sin", "Cos", "Atan",
        "Floor", "Ceil", "Sign", "Round", "Softplus", "Softsign", "HardSwish")],
    *[case(op, [f32(3, 4, low=0.1)], tol=LOOSE) for op in ("Log", "Sqrt", "Reciprocal")],
    *[case(op, [f32(3, 4, low=-0.5)], tol=LOOSE) for op in ("Asin", "Acos")],
    case("LeakyRelu", [X], alpha=0.2), case("Elu", [X], alpha=0.5, tol=LOOSE),
    case("Selu", [X], tol=LOOSE), case("HardSigmoid", [X], alpha=0.3, beta=0.4),
    case("PRelu", [X, W(f32(4))]),
    case("Gelu", [X], opset=20, tol=LOOSE), case("Gelu", [X], opset=20, approximate="tanh",
                                                    tol=LOOSE),
    case("IsNaN", [np.array([1.0, np.nan, np.inf], np.float32)]),
    case("IsInf", [np.array([1.0, -np.inf, np.inf], np.float32)]),
    case("IsInf", [np.array([1.0, -np.inf, np.inf], np.float32)], detect_negative=0),
    case("Not", [BOOLS]),
    # binary elementwise (with broadcasting)
    *[case(op, [X, f32(4)]) for op in ("Add", "Sub", "Mul", "Div")],
    case("Div", [INTS, W(np.array([2, -3, 4], np.int64))]),
    case("Pow", [f32(3, 4, low=0.5), f32(3, 4)], tol=LOOSE),
    case("Pow", [X, W(np.array(2, np.int64))]),
    case("Mod", [X, W(np.float32(0.7))], fmod=1, tol=LOOSE),
    case("Mod", [INTS, W(np.array([2, -3, 4], np.int64))]),
    *[case(op, [INTS, W(np.array([5, -2, 3], np.int64))]) for op in (
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")],
    *[case(op, [BOOLS, BOOLS2]) for op in ("And", "Or", "Xor")],
    case("Where", [BOOLS, f32(2, 3), f32(3)]),
    *[case(op, [X, f32(4), f32(3, 1)]) for op in ("Max", "Min", "Sum", "Mean")],
    case("Clip", [X], opset=6, min=-0.5, max=0.5),
    case("Clip", [X, W(np.float32(-0.3)), W(np.float32(0.4))], opset=13),
    case("Clip", [X, None, W(np.float32(0.1))], opset=13),
    case("Cast", [X], to=TensorProto.INT32), case("Cast", [INTS], to=TensorProto.FLOAT),
    case("Cast", [X], to=TensorProto.BOOL), case("Cast", [X], to=TensorProto.FLOAT16),
    case("Cast", [X], to=TensorProto.DOUBLE), case("CastLike", [INTS, W(np.float32(0))]),
    case("Identity", [X]), case("Dropout", [X], opset=13),
    # softmax
    case("Softmax", [f32(2, 3, 4)], axis=1, tol=LOOSE),
    case("Softmax", [f32(2, 3, 4)], opset=11, axis=1, tol=LOOSE),   # flattens to 2-D
    case("LogSoftmax", [f32(2, 3, 4)], tol=LOOSE),
    # matrix products
    case("MatMul", [f32(2, 3, 4), W(f32(4, 5))]), case("MatMul", [f32(2, 3, 4), f32(2, 4, 2)]),
    case("Gemm", [f32(3, 4), W(f32(5, 4)), W(f32(5))], transB=1),
    case("Gemm", [f32(4, 3), W(f32(4, 5)), W(f32(3, 5))], transA=1, alpha=0.5, beta=2.0),
    case("Gemm", [f32(3, 4), f32(4, 5)]),
    case("Einsum", [f32(2, 3, 4), f32(2, 4, 5)], equation="bij,bjk->bik"),
    case("Einsum", [f32(3, 4), f32(4, 5)], equation="ij,jk"),
    case("Einsum", [f32(2, 3, 4), f32(2, 4, 5)], equation="...ij,...jk->...ik"),
    case("Einsum", [f32(3, 3)], equation="ii->i"),
    # shapes
    case("Reshape", [f32(2, 3, 4), W(i64(0, -1, 2))]),
    case("Flatten", [f32(2, 3, 4)], axis=2), case("Flatten", [f32(2, 3, 4)]),
    case("Squeeze", [f32(2, 1, 4, 1)], opset=11, axes=[1]),
    case("Squeeze", [f32(2, 1, 4, 1), W(i64(-1))], opset=13),
    case("Squeeze", [f32(2, 1, 4, 1)], opset=13),
    case("Unsqueeze", [f32(2, 4)], opset=11, axes=[0, 3]),
    case("Unsqueeze", [f32(2, 4), W(i64(1, -1))], opset=13),
    case("Transpose", [f32(2, 3, 4)], perm=[1, 2, 0]), case("Transpose", [f32(2, 3, 4)]),
    case("Concat", [f32(2, 3), f32(2, 1), W(f32(2, 2))], axis=-1),
    case("Split", [f32(6, 2)], opset=11, outputs=2, split=[2, 4]),
    case("Split", [f32(2, 6), W(i64(1, 2, 3))], opset=13, outputs=3, axis=1),
    case("Split", [f32(7, 2)], opset=18, outputs=3, num_outputs=3),
    case("Slice", [f32(5, 6), W(i64(1, -4)), W(i64(4, 100)), W(i64(0, 1)), W(i64(1, 2))]),
    case("Slice", [f32(5, 6), W(i64(-1)), W(i64(-100)), W(i64(1)), W(i64(-2))]),
    case("Slice", [f32(5, 6)], opset=9, starts=[1], ends=[3], axes=[1]),
    case("Gather", [f32(5, 4), np.array([[0, -1], [2, 3]], np.int64)], axis=0),
    case("Gather", [f32(3, 5, 2), W(np.array(-2, np.int64))], axis=1),
    case("GatherElements", [f32(3, 4), np.array([[0, 2], [1, 1], [2, -1]], np.int64)], axis=1),
    case("GatherElements", [f32(3, 4), W(np.array([[2, 0, 1, 1]], np.int64))]),
    case("GatherND", [f32(3, 4, 2), np.array([[0, 1], [2, -1]], np.int64)]),
    case("GatherND", [f32(3, 4), W(np.array([[[1]], [[2]]], np.int64))]),
    case("ScatterND", [f32(3, 4, 2), W(np.array([[0, 1], [2, 3]], np.int64)), f32(2, 2)]),
    case("ScatterND", [f32(4, 3), W(np.array([[1], [1], [3]], np.int64)), f32(3, 3)],
         reduction="add"),                            # repeated rows add up
    case("SoftmaxCrossEntropyLoss", [f32(5, 4), i64(0, 3, 2, 1, 3)], tol=LOOSE),
    case("SoftmaxCrossEntropyLoss", [f32(5, 4), i64(0, 3, 2, 1, 3)], outputs=2, tol=LOOSE,
         ignore_index=3, reduction="sum"),             # and the log-probabilities
    case("SoftmaxCrossEntropyLoss", [f32(3, 4), i64(1, 0, 2)], tol=LOOSE, reduction="none"),
    case("Expand", [f32(3, 1), W(i64(2, 1, 4))]),
    case("Tile", [f32(2, 3), W(i64(2, 3))]),
    case("Pad", [f32(2, 3), W(i64(1, 0, 2, -1)), W(np.float32(1.5))], opset=13),
    case("Pad", [f32(2, 4), W(i64(0, 2, 0, 1))], opset=13, mode="reflect"),
    case("Pad", [f32(2, 4), W(i64(1, 2, 0, 1))], opset=13, mode="edge"),
    case("Pad", [f32(2, 4), W(i64(0, 2, 0, 3))], opset=19, mode="wrap"),
    case("Pad", [f32(2, 4, 3), W(i64(1, 2)), None, W(i64(1))], opset=18),
    case("Pad", [f32(2, 3)], opset=10, pads=[0, 1, 1, 0], value=2.0),
    case("Trilu", [f32(2, 4, 5)]), case("Trilu", [f32(4, 5), W(i64(-1))], upper=0),
    # reductions
    case("ReduceSum", [f32(2, 3, 4)], opset=11, axes=[1], keepdims=0),
    case("ReduceSum", [f32(2, 3, 4), W(i64(0, -1))], opset=13),
    case("ReduceSum", [f32(2, 3, 4)], opset=13, keepdims=0),
    case("ReduceSum", [f32(2, 3, 4), W(i64())], opset=13, noop_with_empty_axes=1),
    case("ReduceSum", [INTS], opset=13, keepdims=0),
    case("ReduceMean", [f32(2, 3, 4)], axes=[2]),
    case("ReduceMean", [f32(2, 3, 4), W(i64(1))], opset=18, keepdims=0),
    *[case(op, [f32(2, 3, 4)], axes=[0, 2], tol=LOOSE) for op in (
        "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
        "ReduceSumSquare")],
    case("ReduceMax", [f32(2, 3, 4), W(i64(1))], opset=18),
    case("ArgMax", [f32(3, 4)], axis=1, keepdims=0), case("ArgMin", [f32(3, 4)], axis=-2),
    case("CumSum", [f32(3, 4), W(np.array(1, np.int64))]),
    case("TopK", [f32(3, 6), W(np.array([4], np.int64))], outputs=2),
    case("TopK", [f32(5, 3), W(np.array([2], np.int64))], outputs=2, axis=0, largest=0),
    case("TopK", [np.array([[3, 1, 3, 2, 1, 3]], np.int64), W(np.array([5], np.int64))],
         outputs=2),                                  # ties: the lower index first
    case("CumSum", [f32(3, 4), W(np.array(0, np.int64))], exclusive=1, reverse=1),
    case("CumSum", [INTS.astype(np.int32), W(np.array(1, np.int32))]),
    # normalisation
    case("LayerNormalization", [f32(2, 3, 4), W(f32(4)), W(f32(4))], outputs=3, tol=LOOSE),
    case("LayerNormalization", [f32(2, 3, 4), W(f32(3, 4))], axis=1, epsilon=1e-3,
         tol=LOOSE),
    case("BatchNormalization", [X4, W(f32(3)), W(f32(3)), W(f32(3)), W(f32(3, low=0.5))],
         opset=15, epsilon=1e-3, tol=LOOSE),
    # convolution and pooling
    case("Conv", [X4, W(f32(4, 3, 3, 3)), W(f32(4))], pads=[1, 1, 1, 1], tol=LOOSE),
    case("Conv", [X4, W(f32(6, 1, 3, 2))], group=3, strides=[2, 1], dilations=[1, 2],
         pads=[0, 1, 2, 0], tol=LOOSE),
    case("Conv", [X4, W(f32(2, 3, 3, 3))], strides=[2, 2], auto_pad="SAME_UPPER", tol=LOOSE),
    case("Conv", [f32(2, 3, 9), W(f32(4, 3, 3)), W(f32(4))], pads=[2, 1], strides=[2],
         tol=LOOSE),
    case("ConvTranspose", [X4, W(f32(3, 2, 3, 3)), W(f32(2))], strides=[2, 2], pads=[1, 1, 1, 1],
         output_padding=[1, 1], tol=LOOSE),
    case("MaxPool", [X4], kernel_shape=[2, 2], strides=[2, 2]),
    case("MaxPool", [X4], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
    case("MaxPool", [f32(2, 3, 9)], kernel_shape=[3], strides=[2]),
    case("MaxPool", [X4], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    case("MaxPool", [X4], outputs=2, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
    case("AveragePool", [X4], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
    case("AveragePool", [X4], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
         count_include_pad=1),
    case("GlobalAveragePool", [X4]), case("GlobalMaxPool", [X4]),
    # regions of images: inside, over the edges, on the second image
    *[case("RoiAlign", [X4, np.array([[0.5, 1.0, 3.5, 4.0], [-1.5, -0.7, 2.2, 6.5],
                                      [2.0, 2.0, 2.6, 2.4]], np.float32), i64(1, 0, 1)],
           opset=16, output_height=3, output_width=2, sampling_ratio=2, spatial_scale=0.9,
           mode=mode, coordinate_transformation_mode=how, tol=LOOSE)
      for mode in ("avg", "max") for how in ("half_pixel", "output_half_pixel")],
    # determinants (a singular matrix among them: its zero pivot)
    case("Det", [np.concatenate([f32(3, 5, 5), np.ones((1, 5, 5), np.float32)])], opset=22,
         tol=LOOSE),
]


@pytest.mark.parametrize("op, inputs, opset, outputs, tol, attrs", CASES)
def test_op(op, inputs, opset, outputs, tol, attrs):
    names = [f"in{k}" if x is not None else "" for k, x in enumerate(inputs)]
    outs = [f"out{k}" for k in range(outputs)]
    node = helper.make_node(op, names, outs, name="the_node", **attrs)
    model = _model([node], {n: x for n, x in zip(names, inputs) if n}, opset, outs)
    feeds = {n: x for n, x in zip(names, inputs) if n and not isinstance(x, W)}
    _run_both(model, feeds, *tol)


def test_the_table_covers_every_converter():
    covered = {p.values[0] for p in CASES}
    covered |= {"Shape", "Size", "Constant", "ConstantOfShape", "Range", "BitwiseAnd",
                "BitwiseOr", "BitwiseXor", "BitwiseNot", "If", "Loop",
                "Scan", "Optional"}   # (tested by the models below)
    # and the op types of the ONNX conformance cases that pass (tests/test_onnx_conformance.py)
    import onnx_conformance as conf
    covered |= {node.op_type for c in conf.cases() if c.name not in conf.failing()
                for node in c.load()[0].graph.node}
    assert set(import_rules()) <= covered, sorted(set(import_rules()) - covered)


def test_each_onnx_op_type_imports_by_one_rule():
    """A registry op that is the natural target of an ONNX op type holds its import rule
    (``OpDef.onnx_import``, or its ``onnx`` op type for a one-to-one op); the converters
    of export/ are for the op types no op claims, and no op type has two rules."""
    from dualgraph.export.onnx_import_ops import CONVERTERS, op_import_rules
    from dualgraph.ops import REGISTRY
    claimed = {}
    for op in REGISTRY.values():
        for op_type in op_import_rules(op):
            assert op_type not in CONVERTERS and op_type not in claimed, \
                (op_type, op.name, claimed.get(op_type, "CONVERTERS"))
            claimed[op_type] = op.name
    assert claimed["Relu"] == "relu" and claimed["ReduceSum"] == "sum"
    assert set(import_rules()) == set(CONVERTERS) | set(claimed)


def test_bitwise_ops_on_ints():
    a, c = INTS, np.array([[1, 3, 6], [7, 0, 2]], np.int64)
    nodes = [helper.make_node(op, ["a", "c"] if op != "BitwiseNot" else ["a"], [op])
             for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")]
    model = _model(nodes, {"a": a, "c": c}, 18, [n.output[0] for n in nodes])
    _run_both(model, {"a": a, "c": c})


# -- whole models -----------------------------------------------------------------------------
def _mlp():
    inputs = {"x": f32(1, 6), "w1": W(f32(16, 6)), "b1": W(f32(16)), "w2": W(f32(16, 3)),
              "b2": W(f32(3))}
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["a"], name="act"),
             helper.make_node("Gemm", ["a", "w2", "b2"], ["z"], name="fc2"),
             helper.make_node("LogSoftmax", ["z"], ["logp"], name="out", axis=1)]
    model = _model(nodes, inputs, 17, ["logp"], name="mlp")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"   # symbolic
    onnx.checker.check_model(model)
    return model


def test_mlp_with_a_symbolic_batch_runs_at_two_batch_sizes():
    model = _mlp()
    fn = _run_both(model, {"x": f32(4, 6)})
    _run_both(model, {"x": f32(9, 6)})
    assert fn(f32(9, 6)).shape == (9, 3)
    assert fn.graph.inputs[0].shape[0] == dg.shapes.Sym("batch")
    assert "mlp.onnx: node 'fc1' (Gemm)" in str(fn.graph)
    assert fn.input_names == ["x"] and fn.output_names == ["logp"]


def test_cnn():
    inputs = {"x": f32(2, 1, 8, 8), "k": W(f32(4, 1, 3, 3)), "kb": W(f32(4)),
              "g": W(f32(4)), "b": W(f32(4)), "m": W(f32(4)), "v": W(f32(4, low=0.5)),
              "w": W(f32(5, 64)), "wb": W(f32(5))}
    nodes = [helper.make_node("Conv", ["x", "k", "kb"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w", "wb"], ["y"], transB=1),
             helper.make_node("Softmax", ["y"], ["prob"])]
    model = _model(nodes, inputs, 13, ["prob"], name="cnn")
    _run_both(model, {"x": f32(2, 1, 8, 8)}, *LOOSE)


def _attention():
    """A causal self-attention block as exporters write it: the head reshapes take their
    shape from Shape -> Gather -> Unsqueeze -> Concat of the input, whose batch is symbolic,
    the mask is built from ConstantOfShape and Trilu, the positions from Range."""
    d, heads = 8, 2
    mk = helper.make_node
    inputs = {"x": f32(2, 4, d), "g": W(f32(d)), "bt": W(f32(d)), "wqkv": W(f32(d, 3 * d)),
              "wo": W(f32(d, d)), "pe": W(f32(4, d)), "split": W(i64(d, d, d)),
              "zero": W(np.array(0, np.int64)), "one": W(np.array(1, np.int64)),
              "ax0": W(i64(0)), "hd": W(i64(heads, d // heads))}
    nodes = [
        mk("Shape", ["x"], ["s"]), mk("Shape", ["x"], ["s_last"], start=-1),
        mk("Gather", ["s", "zero"], ["B"], axis=0), mk("Gather", ["s", "one"], ["T"], axis=0),
        mk("Unsqueeze", ["B", "ax0"], ["B1"]), mk("Unsqueeze", ["T", "ax0"], ["T1"]),
        mk("Range", ["zero", "T", "one"], ["pos"]), mk("Gather", ["pe", "pos"], ["pemb"]),
        mk("Add", ["x", "pemb"], ["xp"]),
        mk("LayerNormalization", ["xp", "g", "bt"], ["ln"], name="ln_1", epsilon=1e-5),
        mk("MatMul", ["ln", "wqkv"], ["qkv"]),
        mk("Split", ["qkv", "split"], ["q", "k", "v"], axis=-1),
        mk("Concat", ["B1", "T1", "hd"], ["heads_shape"], axis=0),
        *[mk("Reshape", [n, "heads_shape"], [n + "4"]) for n in "qkv"],
        mk("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        mk("Transpose", ["k4"], ["kT"], perm=[0, 2, 3, 1]),
        mk("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        mk("MatMul", ["qh", "kT"], ["att"]),
        mk("Constant", [], ["scale"], value_float=0.5), mk("Mul", ["att", "scale"], ["att2"]),
        mk("Concat", ["T1", "T1"], ["tt"], axis=0),
        mk("ConstantOfShape", ["tt"], ["ones"],
           value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        mk("Trilu", ["ones"], ["tri"], upper=0),
        mk("Constant", [], ["zf"], value=numpy_helper.from_array(np.float32(0), "zf")),
        mk("Equal", ["tri", "zf"], ["masked"]),
        mk("Constant", [], ["neg"], value_float=-1e9),
        mk("Where", ["masked", "neg", "att2"], ["att3"]),
        mk("Softmax", ["att3"], ["p"], axis=-1), mk("MatMul", ["p", "vh"], ["o"]),
        mk("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        mk("Concat", ["B1", "T1", "s_last"], ["back"], axis=0),
        mk("Reshape", ["ot", "back"], ["o3"]), mk("MatMul", ["o3", "wo"], ["y"]),
        mk("Add", ["xp", "y"], ["out"], name="residual")]
    model = _model(nodes, inputs, 17, ["out"], name="attention")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "B"
    onnx.checker.check_model(model)
    return model


def test_attention_block_with_shape_arithmetic_on_a_symbolic_batch():
    model = _attention()
    fn = _run_both(model, {"x": f32(2, 4, 8)}, *LOOSE)
    _run_both(model, {"x": f32(3, 4, 8)}, *LOOSE)
    ops = {n.op.name for n in fn.graph.nodes}
    # the shape arithmetic folded away: no Shape/Gather/Concat on shapes is left to run
    assert "reshape" in ops and "cat" not in ops and "trilu" not in ops, ops
    assert str(fn.graph.inputs[0]) == "%x: f32[B,4,8]"


def test_expand_and_constant_of_shape_to_a_symbolic_shape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["twos"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
             helper.make_node("Expand", ["row", "s"], ["rows"]),
             helper.make_node("Mul", ["x", "twos"], ["y"]),
             helper.make_node("Add", ["y", "rows"], ["z"])]
    model = _model(nodes, {"x": f32(2, 3), "row": W(f32(1, 3))}, 17, ["z"])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    for n in (2, 5):
        _run_both(model, {"x": f32(n, 3)})


def test_shape_size_and_constants_fold_at_load_time():
    x = f32(2, 3)
    nodes = [helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["x", "nf"], ["y"]),
             helper.make_node("Shape", ["x"], ["shape"])]
    fn = _run_both(_model(nodes, {"x": x}, 17, ["y", "shape"]), {"x": x})
    assert [n.op.name for n in fn.graph.nodes] == ["div"]
    assert fn(x)[1].numpy().tolist() == [2, 3]


def test_load_from_a_file_path(tmp_path):
    model = _mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    x = f32(5, 6)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None,
                                                                                  {"x": x})
    for source in (path, str(path)):
        fn = dg.onnx.load(source)
        np.testing.assert_allclose(fn(dg.tensor(x)).numpy(), want[0], rtol=1e-5, atol=1e-6)
    assert "mlp.onnx: node 'fc2' (Gemm)" in fn.code
    assert repr(fn) == ("<OnnxFunction mlp.onnx: (x: f32[batch,6]) -> "
                        "(logp: f32[batch,3]), 4 nodes>")


def test_initializers_listed_as_inputs_are_constants():
    model = _mlp()
    for init in model.graph.initializer:   # IR < 4 style: weights are graph inputs too
        model.graph.input.append(helper.make_tensor_value_info(
            init.name, init.data_type, list(init.dims)))
    fn = _run_both(model, {"x": f32(2, 6)})
    assert fn.input_names == ["x"]


def test_call_checks_the_number_of_inputs():
    fn = dg.onnx.load(_mlp())
    with pytest.raises(TypeError, match=r"takes 1 inputs \(x\), got 2"):
        fn(f32(2, 6), f32(2, 6))


# -- errors -----------------------------------------------------------------------------------
def _one_node(op, inputs, outputs=("y",), opset=17, **attrs):
    node = helper.make_node(op, list(inputs), list(outputs), name="my_node", **attrs)
    graph = helper.make_graph([node], "bad", [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs.items()], [helper.make_tensor_value_info(
            o, TensorProto.FLOAT, None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_op_names_the_node():
    model = _one_node("TfIdfVectorizer", {"x": f32(2, 3)})
    with pytest.raises(OnnxError, match=r"bad.onnx: node 'my_node' \(TfIdfVectorizer\): op "
                                        r"type TfIdfVectorizer is not supported.*\d+ op types"):
        dg.onnx.load(model)


def test_one_error_names_every_unsupported_node():
    # a supported node, two unsupported ones (one without a name), one inside a subgraph
    branch = helper.make_graph([helper.make_node("Bernoulli", ["x"], ["u"], name="inner")], "b",
                               [], [helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="fine"),
             helper.make_node("TfIdfVectorizer", ["r"], ["t"], name="tf"),
             helper.make_node("Bernoulli", ["t"], ["y"]),
             helper.make_node("If", ["c"], ["z"], name="choose", then_branch=branch,
                              else_branch=branch)]
    graph = helper.make_graph(nodes, "bad", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxError, match=r"bad.onnx: node 'tf' \(TfIdfVectorizer\), node #2 "
                                        r"\(Bernoulli\), node 'choose': else_branch: node 'inner' "
                                        r"\(Bernoulli\), .*: op types TfIdfVectorizer, Bernoulli are "
                                        r"not supported .* \(ai.onnx 17\)"):
        dg.onnx.load(model)


def test_a_shape_given_as_an_input_stays_a_run_time_input():
    # Reshape's shape and ReduceSum's axes are graph inputs: each node reads them as the
    # model runs (a by_value node), one import for every value
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
        helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    fn = dg.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    x = f32(2, 6)
    for shape, axis in [((3, 4), 0), ((4, 3), 1), ((3, 4), 0), ((12, 1), 0)]:
        got = fn(x, i64(*shape), i64(axis)).numpy()
        np.testing.assert_allclose(got, x.reshape(shape).sum(axis), rtol=1e-6)
    assert [v.name for v in fn.graph.inputs] == ["x", "shape", "axes"]
    assert [n.op.name for n in fn.graph.nodes] == ["by_value", "by_value"]
    assert fn.run_time_nodes == ["g.onnx: node #0 (Reshape)", "g.onnx: node #1 (ReduceSum)"]


def _loop_slicing_by_its_carried_value(steps: int):
    body = helper.make_graph(
        [helper.make_node("Slice", ["x", "zero", "n"], ["part"]),
         helper.make_node("ReduceSum", ["part"], ["s"], keepdims=1),
         helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Identity", ["n"], ["n_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("n_out", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(i64(0), "zero")])
    node = helper.make_node("Loop", ["m", "", "n0"], ["n_end", "ys"], name="loop", body=body)
    graph = helper.make_graph([node], "bad", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("ys", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(steps, np.int64), "m"),
         numpy_helper.from_array(i64(3), "n0")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_shape_computed_in_a_loop_body_is_an_error():
    # the Slice's end is the loop-carried value: not a graph input to specialise on, and
    # the loop is too long to unroll
    model = _loop_slicing_by_its_carried_value(100)
    with pytest.raises(OnnxError, match=r"node 'loop' \(Loop\): body: node #0 \(Slice\): the "
                                        r"ends must be known when the model is loaded"):
        dg.onnx.load(model)


def test_a_short_loop_whose_body_needs_known_values_is_unrolled():
    x = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    ys = dg.onnx.load(_loop_slicing_by_its_carried_value(2))(x)
    np.testing.assert_array_equal(np.asarray(ys), [[7.0], [7.0]])


def test_weighted_softmax_cross_entropy_of_images():
    # (N, C, H, W) scores, class weights, an ignored label: against onnxruntime
    x, t = f32(2, 3, 4, 5), RNG.integers(0, 3, (2, 4, 5)).astype(np.int64)
    t[0, 0, :2] = 1
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["loss", "log_prob"],
                            ignore_index=1)
    model = _model([node], {"x": x, "t": t, "w": W(f32(3, low=0.5))}, 17, ["loss", "log_prob"])
    _run_both(model, {"x": x, "t": t}, *LOOSE)


def test_unsupported_dtype_and_domain_are_errors():
    model = _one_node("Identity", {"x": np.array(["a"], object)})
    with pytest.raises(OnnxError, match="input 'x' has ONNX type STRING, which dualgraph has "
                                        "no dtype for"):
        dg.onnx.load(model)
    model = _one_node("Relu", {"x": f32(3)})
    model.graph.node[0].domain = "com.microsoft"
    with pytest.raises(OnnxError, match="of domain 'com.microsoft' is not supported"):
        dg.onnx.load(model)


def test_slicing_a_symbolic_dim_at_a_fixed_offset_is_an_error():
    model = _model([helper.make_node("Slice", ["x", "s", "e"], ["y"], name="cut")],
                   {"x": f32(2, 3), "s": W(i64(1)), "e": W(i64(2))}, 17, ["y"])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.raises(OnnxError, match=r"node 'cut' \(Slice\): slicing 1:2:1 of the "
                                        r"symbolic dim N"):
        dg.onnx.load(model)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.uint32,
                                   np.uint64])
def test_integer_widths(dtype):
    x = np.array([[0, 7, 100], [3, 120, 5]], dtype)
    y = np.array([[1, 2, 3], [4, 5, 6]], dtype)
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]),
             helper.make_node("Max", ["s", "x"], ["m"]),
             helper.make_node("Cast", ["m"], ["z"], to=TensorProto.INT64)]
    fn = dg.onnx.load(_model(nodes, {"x": x, "y": y}, 17, ["s", "z"]))
    s, z = fn(x, y)
    assert s.numpy().dtype == dtype
    np.testing.assert_array_equal(s.numpy(), x + y)
    np.testing.assert_array_equal(z.numpy(), np.maximum(x + y, x).astype(np.int64))


def test_cast_to_float8_saturates():
    x = np.array([1.0, 500.0, -1e6, np.inf, np.nan, 0.3], np.float32)
    f8 = dg.dtypes.NARROW[0].np   # float8_e4m3fn: largest finite 448
    fn = dg.onnx.load(_model([helper.make_node("Cast", ["x"], ["y"],
                                               to=TensorProto.FLOAT8E4M3FN)],
                             {"x": x}, 19, ["y"]))
    y = fn(x).numpy()
    assert y.dtype == f8
    np.testing.assert_array_equal(y.astype(np.float32)[:4], [1.0, 448.0, -448.0, 448.0])
    assert np.isnan(y.astype(np.float32)[4])


def test_cast_to_bfloat16():
    x = f32(3, 4)
    fn = dg.onnx.load(_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
                             {"x": x}, 17, ["y"]))
    y = fn(x).numpy()
    assert y.dtype == dg.dtypes.bfloat16_np
    np.testing.assert_array_equal(y, x.astype(dg.dtypes.bfloat16_np))


# -- control flow -----------------------------------------------------------------------------
def _typed(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         shape)


def _body(nodes, inputs, outputs, name="body"):
    """A subgraph: ``inputs`` and ``outputs`` as (name, NumPy dtype, shape or None)."""
    return helper.make_graph(nodes, name, [_typed(*i) for i in inputs],
                             [_typed(*o) for o in outputs])


def test_if_whose_branch_reads_outer_names():
    mk = helper.make_node
    then = _body([mk("Mul", ["x", "w"], ["t"], name="scaled")], [], [("t", np.float32, [3])])
    other = _body([mk("Sub", ["x", "c"], ["e"]), mk("Neg", ["e"], ["n"])], [],
                  [("n", np.float32, [3])])
    nodes = [mk("ReduceSum", ["x"], ["s"], keepdims=0), mk("Greater", ["s", "zero"], ["p"]),
             mk("If", ["p"], ["y"], name="choose", then_branch=then, else_branch=other)]
    model = _model(nodes, {"x": f32(3), "w": f32(3), "zero": W(np.float32(0)),
                           "c": W(f32(3))}, 17, ["y"])
    for x in (np.abs(f32(3)), -np.abs(f32(3))):
        fn = _run_both(model, {"x": x, "w": f32(3)})
    cond = next(n for n in fn.graph.nodes if n.op.name == "cond")
    assert [v.name for v in cond.attrs["true_graph"].inputs] == ["x", "w"]   # x, w captured
    assert "node 'choose' (If): then_branch: node 'scaled' (Mul)" in str(fn.graph)


def _loop_model(m, cond, body, carried: dict, outputs, extra=()):
    """Loop(M, cond, *carried) -> outputs, each (name, dtype, shape); ``m``/``cond``: an
    initializer value or None."""
    inputs = {**carried, **dict(extra)}
    if m is not None:
        inputs["M"] = W(np.array(m, np.int64))
    if cond is not None:
        inputs["keep"] = W(np.array(cond))
    loop = helper.make_node("Loop", ["M" if m is not None else "",
                                     "keep" if cond is not None else "", *carried],
                            [o[0] for o in outputs], name="loop", body=body)
    return _model([loop], inputs, 17, [_typed(*o) for o in outputs])


def test_loop_with_only_a_trip_count_and_scan_outputs():
    mk = helper.make_node
    body = _body([mk("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
                  mk("Add", ["acc", "fi"], ["a1"]), mk("Mul", ["a1", "w"], ["acc2"]),
                  mk("Identity", ["c"], ["c2"]), mk("ReduceSum", ["acc2"], ["row"])],
                 [("i", np.int64, []), ("c", np.bool_, []), ("acc", np.float32, [3])],
                 [("c2", np.bool_, []), ("acc2", np.float32, [3]), ("row", np.float32, [1])])
    model = _loop_model(4, None, body, {"acc0": f32(3)},
                        [("acc", np.float32, [3]), ("rows", np.float32, [4, 1])],
                        [("w", f32(3))])
    fn = _run_both(model, {"acc0": f32(3), "w": f32(3)})
    assert [n.op.name for n in fn.graph.nodes] == ["scan"]   # a fixed trip count


def _growing_body():
    """y = y * 1.5 + 0.5 while sum(y) < 20."""
    mk = helper.make_node
    return _body([mk("Mul", ["y", "k"], ["y1"]), mk("Add", ["y1", "h"], ["y2"]),
                  mk("ReduceSum", ["y2"], ["s"], keepdims=0), mk("Less", ["s", "top"], ["go"])],
                 [("i", np.int64, []), ("c", np.bool_, []), ("y", np.float32, [3])],
                 [("go", np.bool_, []), ("y2", np.float32, [3])])


@pytest.mark.parametrize("m", [None, 3, 100])
def test_loop_with_a_condition_and_maybe_a_trip_count(m):
    consts = [("k", W(np.float32(1.5))), ("h", W(np.float32(0.5))), ("top", W(np.float32(20)))]
    model = _loop_model(m, True, _growing_body(), {"y0": f32(3, low=0.5)},
                        [("y", np.float32, [3])], consts)
    for y0 in (f32(3, low=0.5), f32(3, low=5.0)):   # a few iterations; none
        fn = _run_both(model, {"y0": y0})
    assert [n.op.name for n in fn.graph.nodes] == ["while_loop"]


def test_loop_condition_computed_at_run_time():
    mk = helper.make_node
    consts = {"k": W(np.float32(1.5)), "h": W(np.float32(0.5)), "top": W(np.float32(20))}
    nodes = [mk("ReduceSum", ["y0"], ["s0"], keepdims=0), mk("Less", ["s0", "top"], ["go0"]),
             mk("Loop", ["", "go0", "y0"], ["y"], body=_growing_body())]
    model = _model(nodes, {"y0": f32(3), **consts}, 17, [_typed("y", np.float32, [3])])
    for y0 in (f32(3, low=0.5), f32(3, low=9.0)):
        _run_both(model, {"y0": y0})


def test_scan_reversed_with_an_outer_weight_and_output_axis():
    mk = helper.make_node
    body = _body([mk("Mul", ["h", "w"], ["hw"]), mk("Add", ["hw", "x"], ["a"]),
                  mk("Tanh", ["a"], ["h2"]), mk("Identity", ["h2"], ["y"])],
                 [("h", np.float32, [2, 3]), ("x", np.float32, [2, 3])],
                 [("h2", np.float32, [2, 3]), ("y", np.float32, [2, 3])])
    scan = mk("Scan", ["h0", "xs"], ["h", "ys"], name="rnn", body=body, num_scan_inputs=1,
              scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[2])
    feeds = {"h0": f32(2, 3), "xs": f32(2, 5, 3)}
    model = _model([scan], {**feeds, "w": W(f32(3))}, 17, ["h", "ys"])
    fn = _run_both(model, feeds)
    scan = next(n for n in fn.graph.nodes if n.op.name == "scan")
    assert scan.attrs["reverse"] is True


def test_loop_that_changes_a_carried_shape_is_an_error():
    mk = helper.make_node
    body = _body([mk("Concat", ["y", "y"], ["y2"], axis=0), mk("Identity", ["c"], ["c2"])],
                 [("i", np.int64, []), ("c", np.bool_, []), ("y", np.float32, ["n"])],
                 [("c2", np.bool_, []), ("y2", np.float32, ["n"])])
    model = _loop_model(3, None, body, {"y0": f32(2)}, [("y", np.float32, ["n"])])
    with pytest.raises(OnnxError, match=r"node 'loop' \(Loop\): loop-carried value 'y' is "
                                        r"f32\[2\] before but f32\[4\] after the body"):
        dg.onnx.load(model)


def test_loop_with_scan_outputs_and_a_run_time_condition_is_an_error():
    body = _growing_body()
    body.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [3]))
    consts = [("k", W(np.float32(1.5))), ("h", W(np.float32(0.5))), ("top", W(np.float32(20)))]
    model = _loop_model(10, True, body, {"y0": f32(3)},
                        [("y", np.float32, [3]), ("ys", np.float32, None)], consts)
    with pytest.raises(OnnxError, match=r"node 'loop' \(Loop\): its 1 scan outputs have a "
                                        "length known only at run time"):
        dg.onnx.load(model)


def test_branch_reading_an_unknown_name_is_an_error():
    branch = _body([helper.make_node("Identity", ["nowhere"], ["z"])], [],
                   [("z", np.float32, [2])])
    model = _one_node("If", {"c": np.array(True)}, then_branch=branch, else_branch=branch)
    with pytest.raises(OnnxError, match=r"node 'my_node' \(If\): then_branch: node #0 "
                                        r"\(Identity\): reads 'nowhere'"):
        dg.onnx.load(model)


# -- malformed models: each an OnnxError naming the file, node and problem ------------------
def _with_weight(op, array, raw=None, dims=None, **attrs):
    """One ``op`` node reading initializer ``w`` (its raw data or dims then replaced)."""
    model = _one_node(op, {}, **attrs)
    w = numpy_helper.from_array(np.asarray(array), "w")
    if raw is not None:
        w.raw_data = raw
    if dims is not None:
        w.ClearField("dims")
        w.dims.extend(dims)
    model.graph.initializer.append(w)
    model.graph.node[0].input[:] = ["w"]
    return model


def _emptied(model, k: int):
    model.graph.node[0].input[k] = ""
    return model


def _huge_input(model):
    for d in model.graph.input[0].type.tensor_type.shape.dim:
        d.dim_value = 2 ** 32
    return model


def _wrong_output_type():
    model = _one_node("Relu", {"x": f32(2, 3)})
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    return model


def _range_model():
    model = _one_node("Range", {})
    model.graph.node[0].input[:] = ["start", "limit", "delta"]
    model.graph.initializer.extend(numpy_helper.from_array(np.array(v, np.int64), n)
                                   for n, v in (("start", 0), ("limit", 2 ** 40), ("delta", 1)))
    return model


MALFORMED = {
    "concat_without_axis": (lambda: _one_node("Concat", {"a": f32(2), "b": f32(2)}),
                            r"\(Concat\): Concat requires attr 'axis', which the node lacks"),
    "reshape_with_one_input": (lambda: _one_node("Reshape", {"a": f32(2, 3)}),
                               r"\(Reshape\): Reshape takes 2 inputs, got 1"),
    "relu_with_two_inputs": (lambda: _one_node("Relu", {"a": f32(2), "b": f32(2)}),
                             r"\(Relu\): Relu takes 1 input, got 2"),
    "add_with_three_inputs": (lambda: _one_node("Add", {"a": f32(2), "b": f32(2), "c": f32(2)}),
                              r"\(Add\): Add takes 2 inputs, got 3"),
    "conv_pads_of_the_wrong_length": (
        lambda: _one_node("Conv", {"x": f32(1, 1, 5, 5), "k": f32(1, 1, 3, 3)}, pads=[1, 1]),
        r"\(Conv\): pads \[1, 1\] holds 2 numbers; the input \(shape \(1, 1, 5, 5\)\) has 2 "
        r"spatial dims, so it needs 4"),
    "empty_required_input": (
        lambda: _emptied(_one_node("Gemm", {"a": f32(2, 3), "b": f32(3, 2)}), 1),
        r"\(Gemm\): input 1 \(B\) of Gemm is required, but its name is empty"),
    "attr_of_the_wrong_type": (
        lambda: _one_node("Concat", {"a": f32(2), "b": f32(2)}, axis=0.0),
        r"attr 'axis' of Concat must be INT, got FLOAT"),
    "unknown_attr": (lambda: _one_node("Relu", {"a": f32(2)}, alpha=0.5),
                     r"Relu \(opset 17\) has no attr 'alpha'"),
    "inputs_of_two_types": (
        lambda: _one_node("Add", {"a": f32(2), "b": i64(1, 2)}),
        r"inputs 0 and 1 of Add must have the same type \(T\), got tensor\(float\) and "
        r"tensor\(int64\)"),
    "short_raw_data": (lambda: _with_weight("Relu", f32(2, 3), raw=b"\0" * 10),
                       r"bad.onnx: initializer 'w' \(FLOAT \[2, 3\]\) holds 10 bytes of raw "
                       r"data; its dims need 24"),
    "negative_initializer_dim": (lambda: _with_weight("Relu", f32(2, 3), dims=[-2, 3]),
                                 r"bad.onnx: initializer 'w' has negative dims \[-2, 3\]"),
    "flag_attr_out_of_range": (lambda: _one_node("Gemm", {"a": f32(2, 3), "b": f32(3, 2)},
                                                 transA=2),
                               r"attr 'transA' of Gemm is 2; it must be 0 or 1"),
    "output_declared_another_type": (_wrong_output_type,
                                     r"output 'y' is declared int64, but the graph computes "
                                     r"f32\[2,3\]"),
    "split_of_a_scalar": (lambda: _one_node("Split", {"x": np.float32(1.0)}, num_outputs=1,
                                            opset=18),
                          r"\(Split\): the input has shape \(\); it needs at least 1 dims"),
    "input_with_more_elements_than_int64_counts": (
        lambda: _huge_input(_one_node("Relu", {"x": f32(2, 2)})),
        r"input 'x' has negative dims or more elements than an int64 counts"),
    "range_too_long_to_compute_at_load_time": (
        _range_model,
        r"the Range's result would have 1099511627776 elements, more than the 16777216"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_model_is_an_onnx_error_naming_the_node(name):
    build, message = MALFORMED[name]
    with pytest.raises(OnnxError, match=message) as info:
        dg.onnx.load(build())
    assert str(info.value).startswith("bad.onnx: ")


def test_a_truncated_file_is_an_onnx_error(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes(_mlp().SerializeToString()[:-25])
    with pytest.raises(OnnxError, match=r"cut.onnx: not a readable ONNX model \(DecodeError"):
        dg.onnx.load(path)
    with pytest.raises(FileNotFoundError):   # a path that isn't there is not a model's fault
        dg.onnx.load(tmp_path / "missing.onnx")


def test_external_data_is_read_from_beside_the_file_only(tmp_path):
    path, model, x = tmp_path / "mlp.onnx", _mlp(), f32(3, 6)
    want = dg.onnx.load(model)(x).numpy()
    onnx.save_model(model, path, save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    np.testing.assert_allclose(dg.onnx.load(path)(x).numpy(), want, rtol=1e-6)
    # a ModelProto whose data was not loaded: not read from the working directory
    with pytest.raises(OnnxError, match=r"initializer '\w+' keeps its data in an external "
                                        r"file, which is read only when"):
        dg.onnx.load(onnx.load(path, load_external_data=False))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(OnnxError, match=r"mlp.onnx: not a readable ONNX model"):
        dg.onnx.load(path)


@pytest.mark.parametrize("stride,pads,dilation,extra,group", [
    ((2, 1, 3), (1, 0, 1, 1, 0, 1), (2, 1, 1), (1, 0, 2), 1),
    ((3, 2, 2), (2, 1, 0, 2, 1, 0), (1, 2, 1), (2, 1, 1), 2)])
def test_conv_transpose_3d_matches_torch(stride, pads, dilation, extra, group):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 3, 4, 5)), rng.standard_normal((4, 3, 3, 2, 3))
    x, w, bias = x.astype(np.float32), w.astype(np.float32), f32(3 * group)
    model = _one_node("ConvTranspose", {"x": x, "w": w, "b": bias}, strides=stride, pads=pads,
                      dilations=dilation, output_padding=extra, group=group)
    want = torch.nn.functional.conv_transpose3d(
        *map(torch.tensor, (x, w, bias)), stride=stride, padding=pads[:3],
        output_padding=extra, groups=group, dilation=dilation).numpy()
    np.testing.assert_allclose(np.asarray(dg.onnx.load(model)(x, w, bias)), want, atol=1e-5)


def test_opset_8_scan_runs_each_batch_row_in_iteration_order():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "n"], ["so"]), helper.make_node("Mul", ["so", "n"], ["o"])],
        "body", [helper.make_tensor_value_info(k, TensorProto.FLOAT, [2]) for k in "sn"],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, [2]) for k in ("so", "o")])
    i, x = f32(3, 2), f32(3, 4, 2)
    model = _one_node("Scan", {"i": i, "x": x}, outputs=("y", "z"), opset=8, body=body,
                      num_scan_inputs=1, directions=[1])
    model.graph.node[0].input.insert(0, "")   # (no sequence_lens)
    y, z = dg.onnx.load(model)(i, x)
    want_z = np.zeros_like(x)
    s = i.copy()
    for t in range(4):   # (backwards over the steps, the outputs in iteration order)
        s = s + x[:, 3 - t]
        want_z[:, t] = s * x[:, 3 - t]
    np.testing.assert_allclose(np.asarray(y), s, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(z), want_z, rtol=1e-6)


# -- sequences and optionals ------------------------------------------------------------------
def _seq(name, shape):
    return helper.make_value_info(name, helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, shape)))


def _optional(name, elem_type):
    return helper.make_value_info(name, helper.make_optional_type_proto(elem_type))


def test_sequence_input_and_output_are_imported_per_length():
    # a sequence input arrives as a list; the model is imported per length (and shapes) of
    # it, cached; a sequence output is a list
    mk = helper.make_node
    nodes = [mk("SequenceInsert", ["s", "x"], ["s2"]),
             mk("ConcatFromSequence", ["s2"], ["cat"], axis=0),
             mk("SequenceMap", ["s2", "x"], ["scaled"], body=_body(
                 [mk("Mul", ["a", "w"], ["b"])], [("a", np.float32, ["N"]),
                                                  ("w", np.float32, ["M"])],
                 [("b", np.float32, ["N"])]))]
    graph = helper.make_graph(nodes, "seqs", [_seq("s", ["N"]),
                                              _typed("x", np.float32, [3])],
                              [_typed("cat", np.float32, ["C"]), _seq("scaled", ["N"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    fn = dg.onnx.load(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = f32(3)
    for s in ([f32(3), f32(3)], [f32(3)], [f32(3), f32(3)]):
        cat, scaled = fn(s, x)
        want_cat, want_scaled = sess.run(None, {"s": s, "x": x})
        np.testing.assert_allclose(cat.numpy(), want_cat, rtol=1e-6)
        assert len(scaled) == len(want_scaled) == len(s) + 1
        for g, w in zip(scaled, want_scaled):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)
    assert len(fn.cache) == 2
    assert "imported per length of its sequences" in repr(fn)


def test_optional_input_and_output():
    # an optional input is its value or None; OptionalHasElement is known per call, so the
    # If picks a branch when the model is imported; an empty optional output is None
    mk = helper.make_node
    then = _body([mk("OptionalGetElement", ["o"], ["v"]), mk("Add", ["v", "x"], ["t"])], [],
                 [("t", np.float32, [2])])
    other = _body([mk("Identity", ["x"], ["e"])], [], [("e", np.float32, [2])])
    tensor2 = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    nodes = [mk("OptionalHasElement", ["o"], ["has"]),
             mk("If", ["has"], ["y"], then_branch=then, else_branch=other),
             mk("Optional", [], ["nothing"], type=tensor2),
             mk("Optional", ["y"], ["some"])]
    graph = helper.make_graph(nodes, "opt", [_optional("o", tensor2), _typed("x", np.float32, [2])],
                              [_typed("y", np.float32, [2]), _optional("nothing", tensor2),
                               _optional("some", tensor2)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    fn = dg.onnx.load(model)
    o, x = f32(2), f32(2)
    y, nothing, some = fn(o, x)
    np.testing.assert_allclose(y.numpy(), o + x, rtol=1e-6)
    assert nothing is None
    np.testing.assert_allclose(some.numpy(), o + x, rtol=1e-6)
    y, _, _ = fn(None, x)
    np.testing.assert_array_equal(y.numpy(), x)
    assert len(fn.cache) == 2


def test_loop_carrying_a_sequence_is_unrolled():
    # a Loop whose carried value is a sequence grows it by one tensor per step (ONNX's
    # loop13_seq): unrolled, its trip count known
    mk = helper.make_node
    body = helper.make_graph(
        [mk("Identity", ["c"], ["c_out"]), mk("Add", ["i", "one"], ["end"]),
         mk("Unsqueeze", ["end", "zero"], ["ends"]), mk("Slice", ["x", "zero", "ends"], ["part"]),
         mk("SequenceInsert", ["s", "part"], ["s_out"])],
        "body", [_typed("i", np.int64, []), _typed("c", np.bool_, []), _seq("s", None)],
        [_typed("c_out", np.bool_, []), _seq("s_out", None)],
        [numpy_helper.from_array(i64(1)[0], "one"), numpy_helper.from_array(i64(0), "zero")])
    graph = helper.make_graph(
        [mk("SequenceEmpty", [], ["s0"]), mk("Loop", ["m", "", "s0"], ["parts"], body=body)],
        "grow", [_typed("x", np.float32, [4])], [_seq("parts", None)],
        [numpy_helper.from_array(np.array(3, np.int64), "m")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = f32(4)
    parts = dg.onnx.load(model)(x)
    assert [p.numpy().tolist() for p in parts] == [x[:k].tolist() for k in (1, 2, 3)]


def test_a_map_input_is_an_error():
    info = helper.make_value_info("m", helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    graph = helper.make_graph([helper.make_node("Identity", ["m"], ["y"])], "map", [info],
                              [helper.make_value_info("y", info.type)])
    fn = dg.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(OnnxError, match="input 'm' is of ONNX type kind map_type"):
        fn({1: np.float32(2)})


def test_deform_conv_matches_onnx_reference():
    # offsets that move taps over the image's edges, two offset groups, two weight groups,
    # stride, dilation, padding, a mask and a bias; onnx's reference evaluator is the oracle
    from onnx.reference import ReferenceEvaluator
    feeds = {"x": f32(2, 4, 6, 7), "w": f32(6, 2, 3, 2), "offset": 2 * f32(2, 24, 3, 6),
             "b": f32(6), "mask": f32(2, 12, 3, 6, low=0.0)}
    model = _one_node("DeformConv", feeds, opset=19, kernel_shape=[3, 2], strides=[2, 1],
                      dilations=[1, 2], pads=[1, 0, 1, 1], group=2, offset_group=2)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = dg.onnx.load(model)(*feeds.values()).numpy()
    np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-5)
