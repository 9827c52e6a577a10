"""Fuzzing ``dg.onnx.load``: any mutation of a valid model gives a loaded model or an
``OnnxError`` (naming the file), never another exception, a hang or a crash.

The seeds are models dualgraph exports (an MLP with a dynamic batch, a CNN with batch norm
and pools, an attention block, a scan with a cond inside) and hand-made ones for the op types
with optional inputs and list attrs (Clip, Slice, Pad, Split, Conv 1-D, Loop, If, ...).
Each example applies one to three structural mutations to a seed, found by walking every
graph (subgraphs too): drop, duplicate, empty or rename a node's input or output, delete an
attr or change its value, type or length, change an op type, swap nodes, shrink an
initializer's raw data, make a dim negative, change a data type or the opset; then, for
some, truncates the serialized bytes or flips bytes in them. The model is loaded from a
file, as users do.

In CI it runs ``ONNX_FUZZ_EXAMPLES`` examples (default 300). The longer run, which prints
how many models loaded and the OnnxErrors by cause::

    ONNX_FUZZ_EXAMPLES=20000 PYTHONPATH=$PWD python -m pytest -p no:benchmark -s \\
        tests/test_onnx_fuzz.py
"""
from __future__ import annotations

import atexit
import collections
import copy
import os
import re
import shutil
import signal
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dualgraph as dg  # noqa: E402
import dualgraph.nn as nn  # noqa: E402
from dualgraph.export.errors import OnnxError  # noqa: E402
from dualgraph.export.onnx_import_ops import import_rules  # noqa: E402

EXAMPLES = int(os.environ.get("ONNX_FUZZ_EXAMPLES", "300"))
HANG_SECONDS = 30   # one load of a seed takes well under a second
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
_DIR = tempfile.mkdtemp(prefix="onnx_fuzz_")
atexit.register(shutil.rmtree, _DIR, True)


# -- seeds ------------------------------------------------------------------------------------
def _exported(fn, args, **kw) -> bytes:
    path = os.path.join(_DIR, "seed.onnx")
    return dg.onnx.export(fn, args, path, **kw).SerializeToString()


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        x = nn.functional.max_pool2d(nn.functional.relu(self.bn(self.conv(x))), 2)
        x = nn.functional.avg_pool2d(x, 2)
        return nn.functional.log_softmax(self.fc(x.flatten(1)), dim=1)


def _attention(x):
    b, t, d = x.shape
    q = x.reshape(b, t, 2, d // 2).transpose(1, 2)
    att = (q @ q.transpose(-2, -1)).masked_fill(dg.tril(dg.ones(t, t)) == 0, float("-inf"))
    return (att.softmax(dim=-1) @ q).transpose(1, 2).reshape(b, t, d)[:, 1:].sum(dim=-1)


def _scan_with_cond(x):
    w = dg.tensor([0.5, -1.0])

    def step(c, row):
        c = dg.cond(row.sum() > 0, lambda c, r: c + r * w, lambda c, r: c - r, (c, row))
        return c, c.sum()
    return dg.scan(step, dg.zeros(2), x)


def _hand_made(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    graph = helper.make_graph(
        nodes, "hand", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                        for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _loop_and_if() -> bytes:
    i64 = TensorProto.INT64
    body = helper.make_graph(
        [helper.make_node("Add", ["y_in", "one"], ["y_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", i64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [2])])
    branch = [helper.make_graph([helper.make_node(op, ["y", "y"], [f"r_{op}"])], op, [],
                                [helper.make_tensor_value_info(f"r_{op}", TensorProto.FLOAT,
                                                               [2])]) for op in ("Add", "Mul")]
    nodes = [helper.make_node("Loop", ["m", ""], ["y"], body=body),
             helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["p"]),
             helper.make_node("If", ["p"], ["z"], then_branch=branch[0],
                              else_branch=branch[1])]
    graph = helper.make_graph(
        nodes, "loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(3, np.int64), "m"),
         numpy_helper.from_array(np.ones(2, np.float32), "one"),
         numpy_helper.from_array(np.array(0, np.float32), "zero")])
    graph.node[0].input[:] = ["m", "", "x"]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _seeds() -> dict:
    dg.manual_seed(0)
    mk = helper.make_node
    i64 = lambda *v: np.array(v, np.int64)   # noqa: E731
    return {
        "mlp": _exported(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).eval(),
                         (dg.randn(2, 6),), dynamic_axes={"input": {0: "batch"}}),
        "cnn": _exported(_CNN().eval(), (dg.randn(2, 1, 8, 8),)),
        "attention": _exported(_attention, (dg.randn(2, 4, 6),), dynamic_axes={"x": [0]}),
        "scan_cond": _exported(_scan_with_cond, (dg.randn(3, 2),)),
        "shapes": _hand_made(
            [mk("Clip", ["x", "lo", ""], ["c"]),
             mk("Slice", ["c", "starts", "ends", "axes", ""], ["s"]),
             mk("Pad", ["s", "pads", "", ""], ["p"], mode="reflect"),
             mk("Split", ["p", "split"], ["a", "b"], axis=1),
             mk("Concat", ["b", "a"], ["cat"], axis=1),
             mk("Reshape", ["cat", "shape"], ["r"]),
             mk("Transpose", ["r"], ["t"], perm=[2, 0, 1]),
             mk("Gemm", ["g", "w", ""], ["gemm"], transB=1),
             mk("ReduceMean", ["t", "axes"], ["y"], keepdims=1)],
            {"x": [2, 5, 4], "g": [3, 4]}, ["y", "gemm"],
            [("lo", np.float32(-0.5)), ("starts", i64(1)), ("ends", i64(4)), ("axes", i64(1)),
             ("pads", i64(0, 1, 1, 0, 1, 1)), ("split", i64(2, 3)), ("shape", i64(2, 30, 1)),
             ("w", np.ones((2, 4), np.float32))], opset=18),
        "conv1d": _hand_made(
            [mk("Conv", ["x", "w", "b"], ["c"], pads=[1, 1], strides=[2], dilations=[1]),
             mk("AveragePool", ["c"], ["y"], kernel_shape=[2], pads=[0, 0])],
            {"x": [1, 2, 9]}, ["y"],
            [("w", np.ones((3, 2, 3), np.float32)), ("b", np.zeros(3, np.float32))]),
        "loop_if": _loop_and_if(),
    }


SEEDS = _seeds()
OP_TYPES = sorted(import_rules())


# -- mutations --------------------------------------------------------------------------------
def _graphs(g):
    """``g`` and every subgraph in it."""
    yield g
    for node in g.node:
        for a in node.attribute:
            if a.type == a.GRAPH:
                yield from _graphs(a.g)


def _nodes(model):
    return [n for g in _graphs(model.graph) for n in g.node]


def _pick(draw, items):
    return items[draw(st.integers(0, len(items) - 1))] if items else None


INTS = st.integers(-3, 9) | st.sampled_from([2 ** 31, -2 ** 40, 2 ** 62])


def _mutate_attr(draw, a) -> str:
    how = draw(st.sampled_from(["value", "type", "length"]))
    if how == "type":
        a.type = draw(st.integers(0, 14))
    elif a.type == a.INT:
        a.i = draw(INTS)
    elif a.type == a.INTS:
        vals = list(a.ints)
        vals = draw(st.lists(INTS, max_size=6)) if how == "value" or not vals else \
            vals[:-1] if draw(st.booleans()) else vals + vals[-1:]
        a.ClearField("ints")
        a.ints.extend(vals)
    elif a.type == a.FLOAT:
        a.f = draw(st.floats(width=32))
    elif a.type == a.STRING:
        a.s = draw(st.sampled_from([b"", b"SAME_UPPER", b"edge", b"tanh", b"bogus", b"\xff"]))
    elif a.type == a.TENSOR:
        a.t.dims.append(draw(st.integers(-2, 3)))
    return f"attr {how}"


def _mutate(draw, model) -> str:
    """Apply one structural mutation to ``model`` in place; returns its kind."""
    nodes = _nodes(model)
    node = _pick(draw, nodes)
    kind = draw(st.sampled_from([
        "drop input", "duplicate input", "empty input", "drop output", "extra output",
        "rename input", "delete attr", "mutate attr", "add attr", "op type", "swap nodes",
        "shrink raw data", "negative dim", "initializer dims", "data type", "int values",
        "input dim",
        "input type", "opset", "graph output"]))
    inits = list(model.graph.initializer)
    init = _pick(draw, inits)
    if kind in ("drop input", "duplicate input", "empty input", "rename input") and node.input:
        k = draw(st.integers(0, len(node.input) - 1))
        if kind == "drop input":
            del node.input[k]
        elif kind == "duplicate input":
            node.input.insert(k, node.input[k])
        else:
            node.input[k] = "" if kind == "empty input" else node.input[k] + "_x"
    elif kind == "drop output" and node.output:
        del node.output[draw(st.integers(0, len(node.output) - 1))]
    elif kind == "extra output":
        node.output.append(draw(st.sampled_from(["", "extra", node.input[0] if node.input
                                                 else "x"])))
    elif kind in ("delete attr", "mutate attr") and node.attribute:
        k = draw(st.integers(0, len(node.attribute) - 1))
        if kind == "delete attr":
            del node.attribute[k]
        else:
            kind = _mutate_attr(draw, node.attribute[k])
    elif kind == "add attr":
        name = draw(st.sampled_from(["axis", "pads", "perm", "keepdims", "foo", "alpha"]))
        node.attribute.append(helper.make_attribute(name, draw(INTS | st.lists(INTS, min_size=1))))
    elif kind == "op type":
        node.op_type = draw(st.sampled_from(OP_TYPES))
    elif kind == "swap nodes":
        g = _pick(draw, [g for g in _graphs(model.graph) if len(g.node) > 1])
        if g is not None:
            i, j = draw(st.integers(0, len(g.node) - 1)), draw(st.integers(0, len(g.node) - 1))
            a, b = copy.deepcopy(g.node[i]), copy.deepcopy(g.node[j])
            g.node[i].CopyFrom(b)
            g.node[j].CopyFrom(a)
    elif kind == "shrink raw data" and init is not None and init.raw_data:
        init.raw_data = init.raw_data[:draw(st.integers(0, len(init.raw_data) - 1))]
    elif kind in ("negative dim", "initializer dims") and init is not None:
        if kind == "negative dim" and init.dims:
            init.dims[draw(st.integers(0, len(init.dims) - 1))] = draw(st.integers(-5, -1))
        else:
            init.dims.append(draw(st.integers(0, 4))) if draw(st.booleans()) or not init.dims \
                else init.dims.pop()
    elif (kind == "int values" and init is not None and init.data_type == TensorProto.INT64
          and init.raw_data and len(init.raw_data) % 8 == 0):
        values = np.frombuffer(init.raw_data, np.int64).copy()   # (a shape, axes, pads, M)
        values[draw(st.integers(0, values.size - 1))] = draw(INTS)
        init.raw_data = values.tobytes()
    elif kind == "data type" and init is not None:
        init.data_type = draw(st.integers(0, 25))
    elif kind in ("input dim", "input type") and model.graph.input:
        t = _pick(draw, list(model.graph.input)).type.tensor_type
        if kind == "input type":
            t.elem_type = draw(st.integers(0, 25))
        elif t.shape.dim:
            t.shape.dim[draw(st.integers(0, len(t.shape.dim) - 1))].dim_value = \
                draw(st.integers(-3, 3) | st.just(2 ** 40))
    elif kind == "opset":
        model.opset_import[0].version = draw(st.sampled_from([1, 7, 9, 11, 13, 16, 21, 99]))
    elif kind == "graph output":
        model.graph.output[0].name = draw(st.sampled_from(["", "nowhere", "x"]))
    else:
        return "none"
    return kind


@st.composite
def mutated(draw):
    """(seed name, mutation kinds, the mutated model's bytes)."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    model = onnx.load_model_from_string(SEEDS[name])
    kinds = [_mutate(draw, model) for _ in range(draw(st.integers(1, 3)))]
    data = model.SerializeToString()
    byte_level = draw(st.sampled_from(["", "", "", "", "", "truncate", "flip"]))
    if byte_level == "truncate":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif byte_level == "flip":
        for _ in range(draw(st.integers(1, 4))):
            k = draw(st.integers(0, len(data) - 1))
            data = data[:k] + bytes([data[k] ^ draw(st.integers(1, 255))]) + data[k + 1:]
    return name, kinds + ([byte_level] if byte_level else []), data


# -- the harness ------------------------------------------------------------------------------
OUTCOMES = collections.Counter()   # "loaded", or an OnnxError's cause
CATEGORY = collections.Counter()   # the OnnxErrors by the kind of check


# Which check an OnnxError comes from, by its message (the first that matches)
CATEGORIES = [
    ("unexpected (wrapped)", r"the import failed"),
    ("not a model (parse)", r"not a readable ONNX model|has no outputs"),
    ("op schema (counts, attrs, types)", r" takes .*(input|output)|is required, but|has no attr|"
     r"requires attr|of \w+ must be [A-Z]|given twice|must be 0 or 1|has no op|same type|"
     r"which it does not take|is not supported by dualgraph's ONNX import"),
    ("tensor (dims, data, dtype)", r"initializer|tensor attr|negative dims|data type number|"
     r"has ONNX type"),
    ("graph (names, order, outputs)", r"reads |not computed|already defined|is declared|"
     r"named twice|UTF-8|takes \d+ inputs; "),
    ("load-time size bound", r"elements, more than"),
    ("op semantics and support", r""),
]


def _category(message: str) -> str:
    return next(name for name, pattern in CATEGORIES if re.search(pattern, message))


def _cause(message: str) -> str:
    """An OnnxError's message with names, numbers and lists blanked: its cause."""
    text = message.split("): ", 1)[-1] if "): " in message else message.split(": ", 1)[-1]
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\([^)]*\)|-?\d+", "_", text)
    return text[:70]


def _alarm(signum, frame):
    raise TimeoutError(f"dg.onnx.load took over {HANG_SECONDS} s")


@FUZZ
@given(mutated())
def test_mutated_models_load_or_raise_onnx_error(case):
    name, kinds, data = case
    path = os.path.join(_DIR, "fuzzed.onnx")
    with open(path, "wb") as f:
        f.write(data)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_SECONDS)
    try:
        dg.onnx.load(path)
        OUTCOMES["loaded"] += 1
    except OnnxError as e:
        assert str(e).startswith("fuzzed.onnx"), str(e)
        OUTCOMES["OnnxError: " + _cause(str(e))] += 1
        CATEGORY[_category(str(e))] += 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_every_seed_loads():
    for name, data in SEEDS.items():
        assert dg.onnx.load(onnx.load_model_from_string(data)).graph.outputs, name


def teardown_module():
    if EXAMPLES > 300:   # the long run reports what it tried
        total = sum(OUTCOMES.values())
        print(f"\n{total} mutated models: {OUTCOMES['loaded']} loaded, "
              f"{total - OUTCOMES['loaded']} OnnxError")
        for what, counts in (("OnnxErrors by check", CATEGORY), ("by cause", OUTCOMES)):
            print(what)
            for cause, count in counts.most_common():
                print(f"{count:7d}  {cause}")
