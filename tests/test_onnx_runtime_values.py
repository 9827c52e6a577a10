"""ONNX models whose shapes, axes and counts are values computed as the model runs: one
import serves every value (``by_value`` nodes, fresh symbolic dims), against onnxruntime.
Torch-exported models with a dynamic batch (and sequence) run at several sizes with one
import and one compile."""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper

import dualgraph as dg
from dualgraph.export import onnx_import

RNG = np.random.default_rng(0)


def i64(*values):
    return np.array(values, np.int64)


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.fixture
def imports(monkeypatch):
    """Counts the model imports and the graph compiles of ``dg.onnx.load``'s functions."""
    counts = {"imports": 0, "compiles": 0}
    real_import, real_exe = onnx_import._import, onnx_import.Executable

    def counted_import(importer):
        counts["imports"] += 1
        return real_import(importer)

    def counted_exe(*args, **kwargs):
        counts["compiles"] += 1
        return real_exe(*args, **kwargs)
    monkeypatch.setattr(onnx_import, "_import", counted_import)
    monkeypatch.setattr(onnx_import, "Executable", counted_exe)
    return counts


def compare(fn, session, feeds, rtol=1e-5, atol=1e-6):
    want = session.run(None, feeds)
    got = fn(*[feeds[n] for n in fn.input_names])
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _parameters_as_inputs():
    """Reshape, ReduceSum, TopK, Tile, Range, Expand, Slice, Pad and Split, each given its
    shape, axes or count as a graph input; the Reshape's result is used again (a MatMul
    over its fresh dims)."""
    mk = helper.make_node
    nodes = [mk("Reshape", ["x", "shape"], ["r"]),
             mk("MatMul", ["r", "rt"], ["gram"]),
             mk("ReduceSum", ["r", "axes"], ["rs"], keepdims=0),
             mk("TopK", ["x", "k"], ["tv", "ti"], axis=1),
             mk("Tile", ["x", "reps"], ["t"]),
             mk("Range", ["start", "limit", "delta"], ["rg"]),
             mk("Expand", ["col", "eshape"], ["e"]),
             mk("Slice", ["x", "starts", "ends", "axes2"], ["sl"]),
             mk("Pad", ["x", "pads"], ["p"]),
             mk("Split", ["x", "split"], ["s1", "s2"], axis=1),
             mk("Transpose", ["r"], ["rt"])]
    nodes = nodes[:1] + nodes[-1:] + nodes[1:-1]
    inputs = [vi("x", TP.FLOAT, ["B", 6]), vi("shape", TP.INT64, [2]), vi("axes", TP.INT64, [1]),
              vi("k", TP.INT64, [1]), vi("reps", TP.INT64, [2]), vi("start", TP.INT64, []),
              vi("limit", TP.INT64, []), vi("delta", TP.INT64, []), vi("col", TP.FLOAT, [3, 1]),
              vi("eshape", TP.INT64, [3]), vi("starts", TP.INT64, [1]), vi("ends", TP.INT64, [1]),
              vi("axes2", TP.INT64, [1]), vi("pads", TP.INT64, [4]), vi("split", TP.INT64, [2])]
    outputs = [helper.make_tensor_value_info(n, TP.INT64 if n in ("ti", "rg") else TP.FLOAT,
                                             None)
               for n in ("gram", "rs", "tv", "ti", "t", "rg", "e", "sl", "p", "s1", "s2")]
    graph = helper.make_graph(nodes, "params", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_parameters_given_as_inputs_run_at_several_values_with_one_import(imports):
    model = _parameters_as_inputs()
    fn, sess = dg.onnx.load(model), session(model)
    assert isinstance(fn, onnx_import.OnnxFunction) and len(fn.run_time_nodes) == 9
    assert "x" in fn.input_names and "shape" in fn.input_names
    values = [(2, (3, 4), 0, 2, (1, 2), (0, 5, 1), (2, 3, 4), (1, 4, 1), (0, 1, 0, 2), (2, 4)),
              (4, (6, 4), 1, 5, (3, 1), (2, 11, 3), (1, 3, 2), (0, -1, 0), (1, 0, 0, 0), (5, 1)),
              (1, (2, 3), 1, 1, (2, 2), (5, 0, -1), (4, 3, 1), (-3, 100, 1), (0, 0, 2, 2), (0, 6)),
              (2, (3, 4), 0, 2, (1, 2), (0, 5, 1), (2, 3, 4), (1, 4, 1), (0, 1, 0, 2), (2, 4))]
    for b, shape, axis, k, reps, rng, eshape, sl, pads, split in values:
        feeds = dict(x=RNG.standard_normal((b, 6)).astype(np.float32), shape=i64(*shape),
                     axes=i64(axis), k=i64(k), reps=i64(*reps), start=np.array(rng[0]),
                     limit=np.array(rng[1]), delta=np.array(rng[2]),
                     col=RNG.standard_normal((3, 1)).astype(np.float32), eshape=i64(*eshape),
                     starts=i64(sl[0]), ends=i64(sl[1]), axes2=i64(sl[2]), pads=i64(*pads),
                     split=i64(*split))
        compare(fn, sess, feeds)
    assert imports == {"imports": 1, "compiles": 1}
    assert fn.explain().startswith("params.onnx: one import serves every input: 9 nodes read "
                                   "a shape, axes or count computed as the model runs")
    assert "params.onnx: node #0 (Reshape)" in fn.explain()


def test_a_result_unlike_the_graph_assumed_is_an_error():
    # the declared output [2, 3] makes ONNX infer the Reshape's result as [2, 3]: the
    # kernel checks the result against it rather than run on a wrong shape
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [vi("x", TP.FLOAT, [6]), vi("shape", TP.INT64, [2])],
                              [vi("y", TP.FLOAT, [2, 3])])
    fn = dg.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(fn(x, i64(2, 3)).numpy(), x.reshape(2, 3))
    with pytest.raises(dg.shapes.ShapeError, match=r"result 0 has shape \[3, 2\] where the "
                                                   r"graph assumed \[2, 3\]"):
        fn(x, i64(3, 2))


def test_arithmetic_on_a_symbolic_dim_runs_as_the_model_runs(imports):
    # Range(0, T - 1) and a Slice from T // 2: T - 1 and T // 2 are no products of dims,
    # so they are computed as the model runs, and the results have fresh dims
    mk = helper.make_node
    nodes = [mk("Shape", ["x"], ["s"]), mk("Constant", [], ["one"], value_int=1),
             mk("Gather", ["s", "one"], ["t"], axis=0), mk("Sub", ["t", "one"], ["t1"]),
             mk("Constant", [], ["zero"], value_int=0),
             mk("Range", ["zero", "t1", "one"], ["idx"]),
             mk("Gather", ["x", "idx"], ["head"], axis=1),
             mk("ReduceMean", ["head"], ["y"], axes=[1], keepdims=0),
             mk("Constant", [], ["two"], value_int=2), mk("Div", ["t", "two"], ["half"]),
             mk("Unsqueeze", ["half", "first"], ["half1"]),
             mk("Slice", ["x", "half1", "end", "axis"], ["tail"])]
    graph = helper.make_graph(nodes, "g", [vi("x", TP.FLOAT, ["B", "T"])],
                              [vi("y", TP.FLOAT, ["B"]), vi("head", TP.FLOAT, ["B", None]),
                               vi("tail", TP.FLOAT, ["B", None])],
                              [onnx.numpy_helper.from_array(i64(2 ** 62), "end"),
                               onnx.numpy_helper.from_array(i64(1), "axis"),
                               onnx.numpy_helper.from_array(i64(0), "first")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fn, sess = dg.onnx.load(model), session(model)
    for shape in [(2, 5), (3, 2), (1, 9)]:
        compare(fn, sess, {"x": RNG.standard_normal(shape).astype(np.float32)})
    assert imports == {"imports": 1, "compiles": 1}


def test_data_sized_results_nonzero_and_unique(imports):
    # the values set the results' lengths: NonZero's indices gather the positive elements,
    # Unique's counts are summed
    mk = helper.make_node
    nodes = [mk("Constant", [], ["zero"], value_float=0.0), mk("Greater", ["x", "zero"], ["pos"]),
             mk("NonZero", ["pos"], ["where"]), mk("Transpose", ["where"], ["pairs"]),
             mk("GatherND", ["x", "pairs"], ["picked"]),
             mk("Unique", ["ids"], ["u", "first", "inverse", "counts"], sorted=0),
             mk("ReduceSum", ["counts"], ["total"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [vi("x", TP.FLOAT, [3, 4]), vi("ids", TP.INT64, ["N"])],
                              [vi("picked", TP.FLOAT, None), vi("u", TP.INT64, None),
                               vi("inverse", TP.INT64, None), vi("total", TP.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fn, sess = dg.onnx.load(model), session(model)
    assert len(fn.run_time_nodes) == 2
    for n in (5, 1, 9):
        compare(fn, sess, {"x": RNG.standard_normal((3, 4)).astype(np.float32),
                           "ids": RNG.integers(0, 4, n).astype(np.int64)})
    assert imports == {"imports": 1, "compiles": 1}


def counter_loop(m_nodes, inputs, cond_nodes=()):
    """A Loop of trip count ``m`` (made by ``m_nodes``) carrying a cumulative sum ``acc +=
    x`` and a running total of the iteration numbers, no scan outputs; ``cond_nodes`` set
    the body's condition ``c_out`` (else the incoming one)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
         helper.make_node("Add", ["tot", "fi"], ["tot_out"]),
         *(cond_nodes or [helper.make_node("Identity", ["c"], ["c_out"])])],
        "body", [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("acc", TP.FLOAT, [2]),
                 vi("tot", TP.FLOAT, [])],
        [vi("c_out", TP.BOOL, []), vi("acc_out", TP.FLOAT, [2]), vi("tot_out", TP.FLOAT, [])])
    loop = helper.make_node("Loop", ["m", "", "a0", "t0"], ["acc_end", "tot_end"], body=body)
    graph = helper.make_graph([*m_nodes, loop], "g", [*inputs, vi("a0", TP.FLOAT, [2]),
                                                      vi("t0", TP.FLOAT, []),
                                                      vi("x", TP.FLOAT, [2])],
                              [vi("acc_end", TP.FLOAT, [2]), vi("tot_end", TP.FLOAT, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def loop_feeds(**given):
    return {"a0": RNG.standard_normal(2).astype(np.float32), "t0": np.array(0.5, np.float32),
            "x": RNG.standard_normal(2).astype(np.float32), **given}


def test_a_loop_whose_trip_count_is_an_input_runs_every_count_with_one_import(imports):
    # no scan outputs: a while_loop testing the iteration number against M as it runs
    model = counter_loop([], [vi("m", TP.INT64, [])])
    fn, sess = dg.onnx.load(model), session(model)
    for m in (0, 1, 3, 7):
        compare(fn, sess, loop_feeds(m=np.array(m)))
    assert "imported per value" not in repr(fn) + fn.explain()
    assert imports == {"imports": 1, "compiles": 1}


def test_a_loop_whose_trip_count_is_computed_from_an_input_shape_with_one_import(imports):
    # M = Shape(s)[0], s of a symbolic length; and a condition computed in the body too
    m_nodes = [helper.make_node("Shape", ["s"], ["shape"]),
               helper.make_node("Constant", [], ["zero"], value=helper.make_tensor(
                   "zero", TP.INT64, [], [0])),
               helper.make_node("Gather", ["shape", "zero"], ["m"])]
    stop = [helper.make_node("ReduceSum", ["acc_out"], ["sum"], keepdims=0),
            helper.make_node("Less", ["sum", "limit"], ["c_out"])]
    model = counter_loop(m_nodes, [vi("s", TP.FLOAT, ["n"])], stop)
    model.graph.initializer.append(helper.make_tensor("limit", TP.FLOAT, [], [4.0]))
    fn, sess = dg.onnx.load(model), session(model)
    for m in (0, 1, 3, 7):
        for x in (np.array([0.5, 0.25], np.float32), np.array([1.5, 1.0], np.float32)):
            compare(fn, sess, loop_feeds(s=np.zeros(m, np.float32), a0=np.zeros(2, np.float32),
                                         x=x))
    assert "imported per value" not in repr(fn) + fn.explain()
    assert imports == {"imports": 1, "compiles": 1}


def test_a_loop_with_scan_outputs_whose_trip_count_is_an_input_is_imported_per_value():
    # the scan outputs' length is M: the fallback imports the model per value of M
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Identity", ["acc_out"], ["y"])],
        "body", [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("acc", TP.FLOAT, [2])],
        [vi("c_out", TP.BOOL, []), vi("acc_out", TP.FLOAT, [2]), vi("y", TP.FLOAT, [2])])
    node = helper.make_node("Loop", ["m", "", "a0"], ["acc_end", "ys"], body=body)
    graph = helper.make_graph([node], "g", [vi("m", TP.INT64, []), vi("a0", TP.FLOAT, [2]),
                                            vi("x", TP.FLOAT, [2])],
                              [vi("acc_end", TP.FLOAT, [2]), vi("ys", TP.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fn, sess = dg.onnx.load(model), session(model)
    for m in (3, 1, 3):
        compare(fn, sess, {"m": np.array(m), "a0": np.ones(2, np.float32),
                           "x": np.array([1.0, 2.0], np.float32)})
    assert "imported per value of m; 2 imported" in repr(fn)
    assert fn.explain() == (
        "g.onnx: imported per value of m (2 imports so far): g.onnx: node #0 (Loop): its trip "
        "count M has no run-time form (a Loop's trip count with scan outputs, an If choosing "
        "between sequences, a result of unknown rank, a node that can't work over the "
        "sizes run-time nodes make, or a Resize along a dynamic dim)")


# -- torch-exported models ---------------------------------------------------------------------
torch = pytest.importorskip("torch")


def export(module, args, dynamic_axes) -> onnx.ModelProto:
    names = [f"x{k}" for k in range(len(args))] if len(args) > 1 else ["x"]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, input_names=names, output_names=["y"],
                          dynamic_axes=dynamic_axes, dynamo=False, opset_version=17)
    return onnx.load_from_string(buf.getvalue())


def test_torch_transformer_encoder_at_three_batch_sizes_with_one_import(imports):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    model = export(encoder, (torch.randn(2, 10, 32),), {"x": {0: "B"}})
    fn, sess = dg.onnx.load(model), session(model)
    assert str(fn.graph.inputs[0]) == "%x: f32[B,10,32]"
    for b in (1, 3, 16, 3):
        compare(fn, sess, {"x": RNG.standard_normal((b, 10, 32)).astype(np.float32)},
                rtol=1e-4, atol=1e-5)
    assert imports == {"imports": 1, "compiles": 1}


class _ReshapesByItsBatch(torch.nn.Module):
    """Heads split by reshaping to the input's own batch and length (``view(b, t, ...)``),
    positions ``arange(t)``: a torch export computes both from ``Shape``."""

    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(50, 16)
        self.positions = torch.nn.Embedding(40, 16)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, ids):
        b, t = ids.shape
        x = self.tokens(ids) + self.positions(torch.arange(t))
        heads = self.proj(x).view(b, t, 4, 4).transpose(1, 2)
        att = (heads @ heads.transpose(-2, -1)).softmax(-1) @ heads
        return att.transpose(1, 2).reshape(b, t, 16)


def test_torch_model_reshaping_by_its_dynamic_batch_and_length_with_one_import(imports):
    torch.manual_seed(0)
    module = _ReshapesByItsBatch().eval()
    model = export(module, (torch.randint(0, 50, (2, 7)),), {"x": {0: "B", 1: "T"}})
    fn, sess = dg.onnx.load(model), session(model)
    assert isinstance(fn, onnx_import.OnnxFunction)
    for b, t in ((1, 7), (3, 12), (16, 5), (3, 7)):
        compare(fn, sess, {"x": RNG.integers(0, 50, (b, t)).astype(np.int64)},
                rtol=1e-4, atol=1e-5)
    assert imports == {"imports": 1, "compiles": 1}
