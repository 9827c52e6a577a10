"""ONNX export: trace a function or module once and write its graph as an ONNX model.

The trace is ``dg.jit.trace``'s (the same capture, so a line that can't be captured is
named as there), taken without gradient tracking: the model is exported for inference.
The graph is then cleaned by the passes that keep registry ops (``dce``, ``cse``,
``fold_constants``, ``simplify``; fusion and the later passes are for dualgraph's own
executor) and each node becomes ONNX nodes by its op's ``OpDef.onnx``, written through the
emitter of ``onnx_ops.py``; each ONNX node's ``doc_string`` is the user's source line of the
op it came from.

Graph inputs bound to the arguments become the model's inputs; parameters, buffers and
other tensors the function reads become initializers holding their current values.
Symbolic dims (``dynamic_axes``) become named ``dim_param``s.
"""
from __future__ import annotations

import numpy as np

from .._helpers import write_atomic
from .._version import __version__
from ..autograd.tape import no_grad
from ..capture.compile import Compiled
from ..passes import run_pipeline
from ..shapes import Sym
from .errors import OnnxError, require_onnx
from .onnx_fold import fold_for_inference
from .onnx_ops import Emitter, value_info

EXPORT_PASSES = {"dce", "cse", "fold_constants", "simplify"}
DEFAULT_OPSET = 18       # torch.onnx's default too; onnxruntime >= 1.14 runs it
MIN_OPSET = 17           # LayerNormalization


def export_model(fn, example_inputs, path, input_names=None, output_names=None,
                 dynamic_axes=None, opset=None):
    """``dg.onnx.export``: see ``dualgraph/onnx.py``. Returns the ModelProto written."""
    onnx = require_onnx()
    opset = _check_opset(onnx, opset)
    traced = trace_for_export(fn, example_inputs, input_names, output_names, dynamic_axes)
    problem = exportable_problem(traced.capture)
    if problem:
        raise OnnxError(problem)
    model = to_model(onnx, traced, opset)
    onnx.checker.check_model(model)
    write_atomic(path, model.SerializeToString())
    return model


class Traced:
    """What the export writes: the folded graph, the capture (its inputs' bindings), the
    input and output names and ``dynamic_axes``."""

    def __init__(self, graph, capture, input_names, output_names, dynamic_axes, folded):
        self.graph, self.capture = graph, capture
        self.input_names, self.output_names = input_names, output_names
        self.dynamic_axes, self.folded = dynamic_axes, folded


def trace_for_export(fn, example_inputs, input_names=None, output_names=None,
                     dynamic_axes=None) -> Traced:
    """Trace ``fn`` on ``example_inputs`` as the export does (no gradients, the export's
    passes, inference folding)."""
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    # (a dg.compile / to_static callable is traced as the function it runs: its inputs
    # are named after that function's parameters, and dynamic_axes find them)
    fn = fn.fn if isinstance(fn, Compiled) else fn
    names = Compiled(fn).leaf_names(example_inputs, {})
    input_names = _check_names(input_names, names, "input_names")
    dynamic_axes = dynamic_axes or {}
    traced = Compiled(fn, fullgraph=True, strict=True, passes=False,
                      dynamic=_dynamic_leaves(dynamic_axes, input_names, names))
    with no_grad():
        traced(*example_inputs)
    capture = traced.capture
    graph, _ = run_pipeline(capture.graph, EXPORT_PASSES)
    # (a tensor the function updates, a generator's state, is no constant)
    written = {id(t) for _, t in capture.writebacks}
    known = {v: np.asarray(b.tensor._data) for v, b in zip(graph.inputs, capture.bindings)
             if b.kind != "arg" and id(b.tensor) not in written}
    before = len(graph.nodes)
    graph = fold_for_inference(graph, known)
    output_names = _check_names(output_names, _default_output_names(len(graph.outputs)),
                                "output_names")
    unknown = sorted(set(dynamic_axes) - set(input_names) - set(output_names))
    if unknown:
        raise ValueError(f"dynamic_axes names {unknown}, which are neither inputs "
                         f"{input_names} nor outputs {output_names}")
    return Traced(graph, capture, input_names, output_names, dynamic_axes,
                  before - len(graph.nodes))


def _check_opset(onnx, opset) -> int:
    newest = onnx.defs.onnx_opset_version()
    opset = DEFAULT_OPSET if opset is None else opset
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= newest:
        raise ValueError(f"opset must be an int from {MIN_OPSET} to {newest} (the onnx "
                         f"package's newest), got {opset!r}")
    return opset


def _check_names(given, default: list, what: str) -> list:
    if given is None:
        return list(default)
    given = list(given)
    if len(given) != len(default) or len(set(given)) != len(given):
        raise ValueError(f"{what} must be {len(default)} distinct names (one per tensor "
                         f"{'input' if what == 'input_names' else 'output'}: "
                         f"{default}), got {given}")
    return given


def _dynamic_leaves(dynamic_axes: dict, input_names: list, leaf_names: list) -> dict | None:
    """``dynamic_axes`` of the inputs as ``dg.compile``'s ``dynamic`` ({leaf: {dim: name}})."""
    dynamic = {}
    for name, axes in dynamic_axes.items():
        if name not in input_names:
            continue    # an output's axes (or an unknown name): checked after the trace
        if not isinstance(axes, dict):
            axes = {int(a): f"{name}_dim{a}" for a in axes}
        dynamic[leaf_names[input_names.index(name)]] = dict(axes)
    return dynamic or None


def exportable_problem(capture) -> str | None:
    """Why the traced function can't be an ONNX model as a whole, or None."""
    if capture.writebacks:
        return ("the exported function changes tensors it does not return (e.g. "
                "BatchNorm's running statistics in training mode, an in-place update of a "
                "parameter, a random generator's state); ONNX models are pure functions. "
                "Call model.eval() before exporting, or return the new values")
    consts = [k[1] for k in capture.out_leaves if k != "value"]
    if consts:
        return (f"the exported function returns non-tensor values {consts}; an ONNX model "
                "returns tensors only")
    return None


def to_model(onnx, traced: Traced, opset: int, log: list | None = None):
    """The ONNX model of ``traced``. With ``log`` (``dg.onnx.check``), each node's ONNX op
    types, or the error that stops it, are appended to it as (node, types or OnnxError),
    and a node that fails does not stop the others (the model is then None)."""
    graph, capture = traced.graph, traced.capture
    input_names, output_names = traced.input_names, traced.output_names
    dynamic_axes = traced.dynamic_axes
    arg_values = [v for v, b in zip(graph.inputs, capture.bindings) if b.kind == "arg"]
    names = {v: n for v, n in zip(arg_values, input_names)}
    e = Emitter(onnx, opset, names)
    for v in reversed(arg_values):   # (the first input that has a dim binds its name)
        for axis, d in enumerate(v.shape):
            if isinstance(d, Sym) and not d.is_sum and d.coef == 1 and len(d.names) == 1:
                e.dims[d.names[0]] = (names[v], axis)
    used = {x for node in graph.nodes for x in node.inputs} | set(graph.outputs)
    for v, b in zip(graph.inputs, capture.bindings):
        if b.kind != "arg" and v in used:
            names[v] = e.fresh(v.name)
            e.initializers.append(onnx.numpy_helper.from_array(np.asarray(b.tensor._data),
                                                               names[v]))
    for v, array in graph.constants.items():
        names[v] = e.fresh(v.name)
        e.initializers.append(onnx.numpy_helper.from_array(np.asarray(array), names[v]))
    outputs = graph.outputs
    e.reserve(output_names)
    wanted = {}
    for v, name in zip(outputs, output_names):
        if v.producer is not None:
            wanted.setdefault(v, name)
    for node in graph.nodes:
        if log is None:
            e.export_node(node, wanted)
            continue
        start = len(e.nodes)
        try:
            e.export_node(node, wanted)
        except OnnxError as err:
            log.append((node, err))
            continue
        log.append((node, e.nodes[start:]))
    if log is not None and any(isinstance(r, OnnxError) for _, r in log):
        log[:] = [(node, r if isinstance(r, OnnxError) else [n.op_type for n in r])
                  for node, r in log]
        return None
    graph_outputs = []
    for v, name in zip(outputs, output_names):
        if v not in names:
            raise OnnxError(f"output {name!r} is {v.name}, made by {v.producer.op.name}, "
                            "which ONNX can't give (e.g. max_pool2d's indices); don't return "
                            "it")
        if names[v] != name:    # an input, a constant or a repeated output: a copy
            e.op("Identity", [names[v]], outputs=[name])
        axes = dynamic_axes.get(name)
        graph_outputs.append(value_info(onnx, name, v, _output_dims(v, name, axes)))
    inputs = [value_info(onnx, names[v], v) for v in arg_values]
    nodes, initializers = _prune(onnx, opset, e.nodes, e.initializers, output_names)
    if log is not None:   # (the ONNX op types of each node that the outputs need)
        kept = {id(n) for n in nodes}
        log[:] = [(node, [n.op_type for n in made if id(n) in kept]) for node, made in log]
    body = onnx.helper.make_graph(nodes, "dualgraph", inputs, graph_outputs,
                                  initializer=initializers)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(body, opset_imports=opsets, producer_name="dualgraph",
                                   producer_version=__version__)
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    return model


def _prune(onnx, opset: int, nodes: list, initializers: list, outputs: list):
    """Only what the model's outputs need: nodes none of whose outputs is read are dropped
    (max_pool2d's indices and their Mod when only the values are used), optional outputs
    nothing reads are left out (MaxPool's Indices), and so are unread initializers."""
    needed = set(outputs)
    kept = []
    for node in reversed(nodes):
        if not needed.intersection(node.output):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            raise OnnxError(f"the export of {node.doc_string or node.name} needs ONNX's "
                            f"{node.op_type}, which opset {opset} lacks; export with a newer "
                            "opset") from None
        names = list(node.output)
        while (len(names) > 1 and names[-1] not in needed and schema.outputs[
                min(len(names), len(schema.outputs)) - 1].option.name == "Optional"):
            names.pop()
        if len(names) < len(node.output):
            del node.output[len(names):]
        needed.update(node.input)
        needed.update(_outer_names(node))
        kept.append(node)
    return kept[::-1], [t for t in initializers if t.name in needed]


def _outer_names(node) -> set:
    """The names a node's subgraphs (If branches, Loop and Scan bodies) read, their own
    included: a subgraph reads the enclosing graph's names freely."""
    names = set()
    for attr in node.attribute:
        for g in list(attr.g.node and [attr.g]) + list(attr.graphs):
            for inner in g.node:
                names.update(inner.input)
                names.update(_outer_names(inner))
    return names


def _default_output_names(n: int) -> list:
    return ["output"] if n == 1 else [f"output_{i}" for i in range(n)]


def _output_dims(value, name: str, axes) -> dict:
    """An output's ``dynamic_axes``: names for dims the trace found symbolic."""
    if not axes:
        return {}
    if not isinstance(axes, dict):
        axes = {a: str(value.shape[a]) for a in axes}
    for axis in axes:
        if not isinstance(value.shape[axis], Sym):
            raise OnnxError(f"dynamic_axes names dim {axis} of output {name!r}, but that "
                            f"dim is {value.shape[axis]} whatever the dynamic inputs are "
                            f"(output shape {value.shape}); leave it out of dynamic_axes")
    return dict(axes)
