"""The graph IR: building, printing (golden), verifying, interpreting, re-typing, saving."""
import json
import os

import ml_dtypes
import numpy as np
import pytest

import dualgraph  # noqa: F401  (registers every op)
from dualgraph.graph import (Graph, GraphError, GraphFormatError, Node, infer_shapes,
                             interpret, load, verify)
from dualgraph.graph.infer import bind_dim, eval_dim
from dualgraph.graph.ir import parse_dim
from dualgraph.graph.serialize import _decode_attr, _encode_attr, constants_path
from dualgraph.ops.opdef import REGISTRY, OpDef, get
from dualgraph.shapes import ShapedType, ShapeError, Sym

F32 = np.dtype(np.float32)


def mlp_graph() -> Graph:
    """A small program touching inputs, constants, literals, attrs and locations."""
    g = Graph()
    x = g.add_input(("B", 4), "float32", name="x")
    w = g.add_constant(np.arange(4, dtype=np.float32), name="w")
    (h,) = g.add_node("mul", [x, w], location="/home/u/model.py:14")
    (h1,) = g.add_node("add", [h, 0.5], location="/home/u/model.py:15")
    (pos,) = g.add_node("gt", [h1, 0.0], location="/home/u/model.py:16")
    (r,) = g.add_node("where", [pos, h1, 0.0], location="/home/u/model.py:16")
    (t,) = g.add_node("permute", [r], {"perm": (1, 0)})
    (s,) = g.add_node("sum", [t], {"dims": (1,), "keepdim": False, "dtype": None})
    (c,) = g.add_node("cast", [s], {"dtype": np.dtype(np.float16)}, names=["out"])
    g.set_outputs([c, h1])
    return g


MLP_TEXT = """\
graph(%x: f32[B,4]) {
  %w: f32[4] = constant([0.0, 1.0, 2.0, 3.0])
  %mul: f32[B,4] = mul(%x, %w)    # model.py:14
  %add: f32[B,4] = add(%mul, 0.5)    # model.py:15
  %gt: bool[B,4] = gt(%add, 0.0)    # model.py:16
  %where: f32[B,4] = where(%gt, %add, 0.0)    # model.py:16
  %permute: f32[4,B] = permute(%where, perm=(1, 0))
  %sum: f32[4] = sum(%permute, dims=(1,), keepdim=False, dtype=None)
  %out: f16[4] = cast(%sum, dtype=float16)
  return (%out, %add)
}"""


@pytest.fixture
def call_op(monkeypatch):
    """A test-only op with a subgraph attr (``call(*xs, body=g)`` runs ``g``), registered
    for one test so that the op table tests never see it."""
    op = OpDef("test_call", kernel=lambda *xs, body: interpret(body, *xs)[0],
               infer=lambda *xs, body: body.outputs[0].type, attrs=("body",))
    monkeypatch.setitem(REGISTRY, op.name, op)
    return op


def body_graph() -> Graph:
    b = Graph()
    a = b.add_input(("B", 4), "float32", name="a")
    k = b.add_constant(np.float32(2.0), name="k")
    (m,) = b.add_node("mul", [a, k], location="model.py:30")
    (e,) = b.add_node("exp", [m])
    b.set_outputs([e])
    return b


def nested_graph(call_op) -> Graph:
    g = Graph()
    x = g.add_input(("B", 4), "float32", name="x")
    (y,) = g.add_node(call_op, [x], {"body": body_graph()}, location="model.py:31")
    (z,) = g.add_node("neg", [y])
    g.set_outputs([z])
    return g


# -- building and printing ---------------------------------------------------------------------
def test_print_golden():
    g = mlp_graph()
    assert str(g) == MLP_TEXT
    assert repr(g.inputs[0]) == "%x: f32[B,4]"
    assert g.inputs[0].ndim == 2 and g.inputs[0].shape == (Sym("B"), 4)
    assert g.nodes[0].outputs[0].producer is g.nodes[0]
    assert repr(g.nodes[2]) == "%gt: bool[B,4] = gt(%add, 0.0)    # model.py:16"


def test_print_subgraph_golden(call_op):
    assert str(nested_graph(call_op)) == """\
graph(%x: f32[B,4]) {
  %test_call: f32[B,4] = test_call(%x, body=@body)    # model.py:31
    @body = graph(%a: f32[B,4]) {
      %k: f32[] = constant(2.0)
      %mul: f32[B,4] = mul(%a, %k)    # model.py:30
      %exp: f32[B,4] = exp(%mul)
      return (%exp)
    }
  %neg: f32[B,4] = neg(%test_call)
  return (%neg)
}"""


def test_print_attr_kinds_and_large_constants():
    g = Graph()
    x = g.add_input((3,), "bfloat16")
    big = g.add_constant(np.zeros((3, 3), np.int64))
    (y,) = g.add_node("full_like", [x], {"fill_value": float("-inf"), "dtype": np.float64})
    g.set_outputs([y, big])
    assert str(g) == """\
graph(%x: bf16[3]) {
  %const: i64[3,3] = constant
  %full_like: f64[3] = full_like(%x, fill_value=-inf, dtype=float64)
  return (%full_like, %const)
}"""


def test_names_are_unique_sanitised_and_deterministic():
    g = Graph()
    a = g.add_input((2,), "float32", name="x")
    b = g.add_input((2,), "float32", name="x")
    c = g.add_input((2,), "float32", name="layers[0].w")
    outs = [g.add_node("add", [a, b])[0] for _ in range(3)]
    assert [v.name for v in (a, b, c)] == ["x", "x_1", "layers_0_.w"]
    assert [v.name for v in outs] == ["add", "add_1", "add_2"]


def test_nodes_are_immutable_and_constants_are_copied():
    g = Graph()
    arr = np.ones(3, np.float32)
    c = g.add_constant(arr)
    arr[0] = 5
    assert g.constants[c][0] == 1 and not g.constants[c].flags.writeable
    x = g.add_input((3,), "float32")
    g.add_node("add", [x, c])
    with pytest.raises(AttributeError, match="immutable"):
        g.nodes[0].attrs = {}


def test_add_node_errors():
    g, other = Graph(), Graph()
    x = g.add_input((2, 3), "float32")
    y = other.add_input((2, 3), "float32")
    with pytest.raises(GraphError, match="unknown attrs"):
        g.add_node("exp", [x], {"axis": 1})
    with pytest.raises(GraphError, match="not a value of this graph"):
        g.add_node("add", [x, y])
    with pytest.raises(GraphError, match="Values or Python scalars"):
        g.add_node("add", [x, "1"])
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        g.add_node("add", [x, g.add_input((4,), "float32")])
    with pytest.raises(GraphError, match="attrs may be"):
        g.add_node("reshape", [x], {"shape": {6: 1}})
    with pytest.raises(KeyError, match="no op named"):
        g.add_node("no_such_op", [x])
    with pytest.raises(GraphError, match="not a value of this graph"):
        g.set_outputs([y])


def test_numpy_scalars_become_python_scalars():
    g = Graph()
    x = g.add_input((2,), "float32")
    (y,) = g.add_node("add", [x, np.float64(1.5)])
    (z,) = g.add_node("permute", [x], {"perm": (np.int64(0),)})
    assert type(y.producer.inputs[1]) is float and type(z.producer.attrs["perm"][0]) is int


# -- the verifier --------------------------------------------------------------------------------
def test_verify_accepts_good_graphs(call_op):
    assert verify(mlp_graph()).verify() is not None
    verify(nested_graph(call_op))


def _broken(kind):
    g = mlp_graph()
    n = g.nodes
    if kind == "order":
        n[0], n[1] = n[1], n[0]
    elif kind == "foreign":
        stranger = Graph().add_input(("B", 4), "float32", name="q")
        n[1] = Node(n[1].op, (stranger, 0.5), {}, n[1].outputs, n[1].location)
        n[1].outputs[0].producer = n[1]
    elif kind == "twice":
        n.append(n[1])
    elif kind == "name":
        n[1].outputs[0].name = "mul"
    elif kind == "registry":
        rogue = OpDef("add", get("add").kernel, get("add").infer)
        n[1] = Node(rogue, n[1].inputs, {}, n[1].outputs, n[1].location)
    elif kind == "type":
        n[2].outputs[0].dtype = F32
    elif kind == "attr":
        n[4] = Node(n[4].op, n[4].inputs, {"perm": (1, 0), "axes": 1}, n[4].outputs, None)
    elif kind == "rule":
        n[4] = Node(n[4].op, n[4].inputs, {}, n[4].outputs, None)
    elif kind == "output":
        g.outputs.append(Graph().add_input((1,), "float32"))
    elif kind == "constant":
        g.constants[next(iter(g.constants))] = np.zeros(5)
    elif kind == "literal":
        n[1] = Node(n[1].op, (n[0].outputs[0], "0.5"), {}, n[1].outputs, n[1].location)
    return g


@pytest.mark.parametrize("kind, message", [
    ("order", r"node 0 `%add: f32\[B,4\] = add\(%mul, 0.5\).*before it is defined"),
    ("foreign", r"node 1 `.*uses %q which is not defined in this graph"),
    ("twice", r"node 7 `%add.*%add is defined twice"),
    ("name", r"node 1 `.*two values are named %mul"),
    ("registry", r"node 1 `.*op <op add> is not the registry's op"),
    ("type", r"node 2 `%gt: f32\[B,4\].*typed f32\[B,4\] but the shape rule gives bool\[B,4\]"),
    ("attr", r"node 4 `.*permute has no attrs \['axes'\]"),
    ("rule", r"node 4 `.*the shape rule of permute fails"),
    ("output", r"graph output %x: f32\[1\] is not defined"),
    ("constant", r"constant %w: f32\[4\] is bound to an array of type f64\[5\]"),
    ("literal", r"node 1 `.*input of type str"),
])
def test_verify_catches(kind, message):
    with pytest.raises(GraphError, match=message):
        verify(_broken(kind))


def test_verify_recurses_into_subgraphs(call_op):
    g = nested_graph(call_op)
    body = g.nodes[0].attrs["body"]
    body.nodes.reverse()
    with pytest.raises(GraphError, match=r"in @body of node 0 \(test_call\): node 0 `%exp"):
        verify(g)


# -- the interpreter -------------------------------------------------------------------------
def test_interpret_equals_the_kernels():
    g = mlp_graph()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    h = get("add").kernel(get("mul").kernel(x, np.arange(4, dtype=np.float32)), 0.5)
    r = get("where").kernel(get("gt").kernel(h, 0.0), h, 0.0)
    s = get("sum").kernel(get("permute").kernel(r, perm=(1, 0)), dims=(1,), keepdim=False)
    seen = []
    out, added = interpret(g, x, on_node=lambda node, outs: seen.append(node.op.name))
    assert out.dtype == np.float16 and added.dtype == np.float32
    np.testing.assert_array_equal(out, s.astype(np.float16))
    np.testing.assert_array_equal(added, h)
    assert seen == [n.op.name for n in g.nodes]
    np.testing.assert_array_equal(g(x)[0], out)


def test_interpret_wraps_numpy_scalars():
    g = Graph()
    x = g.add_input((3,), "float64")
    (s,) = g.add_node("sum", [x], {"dims": (0,), "keepdim": False, "dtype": None})
    g.set_outputs([s])
    (out,) = g(np.ones(3))
    assert type(out) is np.ndarray and out.shape == () and out == 3


def test_interpret_runs_subgraphs(call_op):
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(nested_graph(call_op)(x)[0], -np.exp(2 * x))


def test_interpret_checks_inputs():
    g = Graph()
    a = g.add_input(("B", 3), "float32", name="a")
    b = g.add_input(("B",), "float32", name="b")
    g.set_outputs([a, b])
    f = np.zeros
    with pytest.raises(TypeError, match=r"takes 2 inputs \(%a: f32\[B,3\], %b: f32\[B\]\)"):
        g(f((2, 3), np.float32))
    with pytest.raises(TypeError, match="dtype float64; cast it to float32"):
        g(f((2, 3)), f(2, np.float32))
    with pytest.raises(ShapeError, match=r"shape \(2,\), which has 1 dims, not 2"):
        g(f(2, np.float32), f(2, np.float32))
    with pytest.raises(ShapeError, match=r"shape \(2, 4\), whose dim 3 is 4"):
        g(f((2, 4), np.float32), f(2, np.float32))
    with pytest.raises(ShapeError, match="its dim B cannot be 5 when B=2"):
        g(f((2, 3), np.float32), f(5, np.float32))
    assert [o.shape for o in g(f((5, 3), np.float32), f(5, np.float32))] == [(5, 3), (5,)]


def test_interpret_names_the_failing_node(monkeypatch):
    g = mlp_graph()

    def boom(*args, **kwargs):
        raise FloatingPointError("boom")
    monkeypatch.setattr(get("exp"), "kernel", boom)
    monkeypatch.setattr(get("mul"), "kernel", lambda a, b: (a * b).astype(np.float64))
    with pytest.raises(TypeError, match=r"mul's kernel returned f64\[2,4\] for %mul: f32"):
        g(np.ones((2, 4), np.float32))


# -- infer_shapes --------------------------------------------------------------------------------
def test_infer_shapes_concretises_symbolic_dims():
    g = Graph()
    x = g.add_input(("B", 4), "float32", name="x")
    (r,) = g.add_node("reshape", [x], {"shape": (Sym("B"), 2, 2)}, location="m.py:1")
    (e,) = g.add_node("expand", [r], {"shape": (Sym("B"), 2, 2)})
    g.set_outputs([e])
    g3 = infer_shapes(g, [ShapedType((3, 4), F32)])
    assert str(g3) == """\
graph(%x: f32[3,4]) {
  %reshape: f32[3,2,2] = reshape(%x, shape=(3, 2, 2))    # m.py:1
  %expand: f32[3,2,2] = expand(%reshape, shape=(3, 2, 2))
  return (%expand)
}"""
    verify(g3)
    x3 = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(g3(x3)[0], g(x3)[0])
    renamed = infer_shapes(g, [((Sym("N"), 4), "float32")])
    assert renamed.outputs[0].shape == (Sym("N"), 2, 2)
    assert str(infer_shapes(g, [x])) == str(g)


def test_infer_shapes_retypes_dtypes_and_subgraphs(call_op):
    g = infer_shapes(nested_graph(call_op), [np.zeros((5, 4), np.float32)])
    assert g.outputs[0].shape == (5, 4)
    assert g.nodes[0].attrs["body"].inputs[0].shape == (5, 4)
    g64 = infer_shapes(mlp_graph(), [((2, 4), "float64")])
    assert g64.nodes[0].outputs[0].dtype == np.float64


def test_infer_shapes_errors():
    g = Graph()
    a = g.add_input(("B",), "float32")
    b = g.add_input(("B",), "float32")
    g.set_outputs(g.add_node("add", [a, b]))
    with pytest.raises(GraphError, match="B cannot be 3 when B=2"):
        infer_shapes(g, [((2,), "float32"), ((3,), "float32")])
    with pytest.raises(GraphError, match="has 1 dims; the new type"):
        infer_shapes(g, [((2, 2), "float32"), ((2,), "float32")])
    g = Graph()
    x = g.add_input((4,), "float32")
    g.add_node("reshape", [x], {"shape": (2, 2)})
    with pytest.raises(ShapeError) as info:
        infer_shapes(g, [((5,), "float32")])
    assert "while re-typing node 0" in str(info.value.__notes__)


@pytest.mark.parametrize("dim, binding, expected", [
    ("B", {"B": 3}, 3),
    ("64*B", {"B": 2}, 128),
    ("B*T", {"B": 2}, "2*T"),
    ("64*B", {"B": Sym("N")}, "64*N"),
    ("2*B", {}, "2*B"),
])
def test_eval_dim(dim, binding, expected):
    assert eval_dim(parse_dim(dim), binding) == parse_dim(str(expected))


@pytest.mark.parametrize("dim, size, before, ok, after", [
    ("B", 3, {}, True, {"B": 3}),
    ("784*B", 1568, {}, True, {"B": 2}),
    ("784*B", 1569, {}, False, {}),
    ("B*T", 6, {"B": 2}, True, {"B": 2, "T": 3}),
    ("B*T", 6, {}, True, {}),
    ("B", 4, {"B": 3}, False, {"B": 3}),
    ("2*B", Sym("N"), {}, False, {}),
    ("2*B", 2 * Sym("N"), {}, True, {"B": Sym("N")}),
    ("s0 + 1", 8, {}, True, {"s0": 7}),
    ("s0 - 1", 8, {}, True, {"s0": 9}),
    ("2*s0 + 1", 8, {}, False, {}),
    ("s0 + s1", 8, {}, True, {}),
    ("s0 + s1", 8, {"s1": 3}, True, {"s1": 3, "s0": 5}),
    ("s0 + s1", 8, {"s1": 3, "s0": 4}, False, {"s1": 3, "s0": 4}),
])
def test_bind_dim(dim, size, before, ok, after):
    assert bind_dim(parse_dim(dim), size, before) == ok and before == after


@pytest.mark.parametrize("text", ["", "B*", "*B", "0*B", "B+", "B--1", "9" * 30, "B**2"])
def test_parse_dim_rejects(text):
    with pytest.raises(GraphError, match="is not a dim"):
        parse_dim(text)


@pytest.mark.parametrize("text", ["s0 + 1", "s0 - 1", "s0 + s1", "2*B - s1 - 3", "-s0 + 3"])
def test_parse_dim_reads_sums_as_printed(text):
    """Sums (a cat along a symbolic dim, a slice by a constant) print and parse back."""
    dim = parse_dim(text)
    assert isinstance(dim, Sym) and dim.is_sum and str(dim) == text
    assert parse_dim(str(dim)) == dim and dim.evaluate({"s0": 5, "s1": 2, "B": 4}) == eval(
        text, {"s0": 5, "s1": 2, "B": 4})


# -- save / load ---------------------------------------------------------------------------------
def _all_dtype_graph() -> Graph:
    g = Graph()
    x = g.add_input(("B", 2), "float32", name="x")
    rng = np.random.default_rng(1)
    consts = {
        "bf16": rng.standard_normal((2,)).astype(ml_dtypes.bfloat16),
        "f16": np.array([np.nan, -0.0], np.float16),
        "f64": np.array([[np.inf, 1e-300]]),
        "i32": np.array([-7, 2 ** 31 - 1], np.int32),
        "i64": np.array(-(2 ** 62), np.int64),
        "flags": np.array([True, False]),
        "empty": np.zeros((0, 2), np.float32),
    }
    total = x
    for name, arr in consts.items():
        c = g.add_constant(arr, name=name)
        if arr.ndim and arr.size:
            (total,) = g.add_node("add", [total, c], location=f"/src/m.py:{len(name)}")
    g.set_outputs([total, g.add_node("neg", [total])[0]])
    return g


def _bits(arr):
    return arr.dtype, arr.shape, arr.tobytes()


def test_save_load_round_trip(tmp_path):
    g = _all_dtype_graph()
    path = tmp_path / "model.json"
    g.save(path)
    assert sorted(os.listdir(tmp_path)) == ["model.json", "model.safetensors"]
    h = load(path)
    assert str(h) == str(g)
    assert [_bits(a) for a in h.constants.values()] == [_bits(a) for a in g.constants.values()]
    x = np.ones((3, 2), np.float32)
    for got, want in zip(h(x), g(x)):
        np.testing.assert_array_equal(got, want)
    assert [n.location for n in h.nodes] == [n.location for n in g.nodes]


def test_save_load_subgraphs(tmp_path, call_op):
    g = nested_graph(call_op)
    g.save(tmp_path / "g.json")
    h = load(tmp_path / "g.json")
    assert str(h) == str(g)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(h(x)[0], g(x)[0])


@pytest.mark.parametrize("val", [
    0, -3, 2 ** 70, 1.5, -0.0, float("inf"), float("-inf"), True, None, "nearest", "",
    (1, (2, 3)), [1, [2.5, None]], (), [], np.dtype(ml_dtypes.bfloat16), np.dtype(np.bool_),
    64 * Sym("B"), Sym("B") * Sym("T"), slice(1, None, -2), slice(None, Sym("T"), None),
    Ellipsis, (Ellipsis, 0),
])
def test_attr_encoding_round_trips(val):
    encoded = _encode_attr(val, "a", {})
    back = _decode_attr(json.loads(json.dumps(encoded, allow_nan=False)), "a", {})
    assert back == val and type(back) is type(val)


def test_attr_encoding_nan():
    back = _decode_attr(json.loads(json.dumps(_encode_attr(float("nan"), "a", {}))), "a", {})
    assert np.isnan(back)


def test_constants_path():
    assert constants_path("a/model.json") == "a/model.safetensors"
    assert constants_path("model") == "model.safetensors"
    with pytest.raises(ValueError):
        constants_path("model.safetensors")


@pytest.mark.parametrize("failing_step, survivor", [(0, "first"), (1, "first"), (2, "second")])
def test_save_is_atomic(tmp_path, monkeypatch, failing_step, survivor):
    """A save that fails at any of its renames (the pending constants, the graph file: the
    commit, the constants to their usual name) leaves a loadable graph: the old one before
    the commit, the new one after it; the next save leaves only the two files."""
    path = tmp_path / "g.json"
    graphs = {"first": mlp_graph(), "second": _all_dtype_graph()}
    graphs["first"].save(path)
    real_replace, calls = os.replace, []

    def crash(src, dst):
        calls.append(dst)
        if len(calls) == failing_step + 1:
            raise OSError("power cut")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        graphs["second"].save(path)
    monkeypatch.undo()
    assert str(load(path)) == str(graphs[survivor])
    leftovers = {"first": [], "second": ["g.safetensors." + calls[0].rsplit(".", 1)[1]]}
    assert sorted(os.listdir(tmp_path)) == ["g.json", "g.safetensors"] + leftovers[survivor]
    graphs["first"].save(path)
    assert sorted(os.listdir(tmp_path)) == ["g.json", "g.safetensors"]
    assert str(load(path)) == str(graphs["first"])


def _rewrite(path, fn):
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(version=99), "format version 99 is not supported"),
    (lambda d: d.update(version=True), "format version True is not supported"),
    (lambda d: d.update(version=1.0), "format version 1.0 is not supported"),
    (lambda d: d.update(format="x"), "not a dualgraph graph file"),
    (lambda d: d["graph"]["nodes"][0].update(op="evil"), r"nodes\[0\]: no op named 'evil'"),
    (lambda d: d["graph"]["nodes"][4]["attrs"].update(perm=[0, 0]), r"nodes\[4\] \(permute\)"),
    (lambda d: d["graph"]["nodes"][4]["attrs"].update(perm={"eval": "1"}), "not an attr enc"),
    (lambda d: d["graph"]["nodes"][1]["outputs"][0].update(dtype="float64"),
     r"types output %add as f64\[B,4\] but the op's shape rule gives f32\[B,4\]"),
    (lambda d: d["graph"]["nodes"][1]["outputs"][0].update(name="mul"), "repeated value name"),
    (lambda d: d["graph"]["inputs"][0].update(dtype="object"), "unknown dtype 'object'"),
    (lambda d: d["graph"]["inputs"][0].update(shape=[-1, 4]), "invalid dim -1"),
    (lambda d: d["graph"]["outputs"].append("ghost"), "'ghost' is not a value defined"),
    (lambda d: d["graph"]["constants"][0].update(shape=[5]), "has no f32\\[5\\] tensor 'w'"),
    (lambda d: d["graph"].pop("nodes"), r"graph.nodes should be list"),
])
def test_load_rejects_tampered_json(tmp_path, edit, message):
    path = tmp_path / "g.json"
    mlp_graph().save(path)
    _rewrite(path, edit)
    with pytest.raises(GraphFormatError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)


def test_load_rejects_bad_files(tmp_path):
    path = tmp_path / "g.json"
    with pytest.raises(GraphFormatError, match="cannot read the graph file"):
        load(path)
    mlp_graph().save(path)
    cpath = tmp_path / "g.safetensors"
    blob = cpath.read_bytes()
    cpath.write_bytes(blob[:-3])
    with pytest.raises(GraphFormatError, match=r"g.safetensors: does not match"):
        load(path)
    cpath.unlink()
    with pytest.raises(GraphFormatError, match="cannot read the constants file"):
        load(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(GraphFormatError, match="not a valid JSON graph file"):
        load(path)
    with pytest.raises(GraphFormatError, match="name the graph file, not its .safetensors"):
        load(cpath)
    assert issubclass(GraphFormatError, ValueError)


# -- DOT -------------------------------------------------------------------------------------
def test_to_dot(call_op):
    dot = nested_graph(call_op).to_dot()
    assert dot.startswith('digraph "graph" {') and dot.endswith("}")
    # a subgraph is a cluster named by its node's op and attr; a node without `bodies` runs
    # its subgraph as one group (as fused does): a filled cluster
    assert "subgraph cluster_g_n0_s0" in dot and 'label="test_call @body"' in dot
    assert 'id=cluster_g_n0_s0; style="filled,rounded"' in dot
    assert ('g_n0 [id=g_n0, label="test_call(body=@body)\\n%test_call: f32[B,4]\\nmodel.py:31", '
            'tooltip="model.py:31"];') in dot
    assert ('g_n0_s0_c0 [id=g_n0_s0_c0, style=filled, fillcolor=lightgrey, '
            'label="%k: f32[]"];') in dot
    assert "g_n0_s0_out -> g_n0 [style=dashed];" in dot
    assert "g_in0 -> g_n0;" in dot and "g_n1 -> g_out;" in dot
    assert dot == nested_graph(call_op).to_dot()   # deterministic
