"""``dg.onnx.check``: a pre-flight report on exporting a model to ONNX, before writing it.

The model is traced and folded as ``dg.onnx.export`` does; the report lists every op of
the graph and the ONNX op types it becomes (or why it has none, with the user's line), how
each control-flow construct is lowered (``cond`` to If, ``while_loop`` to Loop, ``scan`` to
Scan or inlined), which dims of the inputs and outputs stay dynamic, how many nodes
inference folding removed, and the largest differences between a runtime running the
exported file and eager at the example sizes and at other sizes of the dynamic dims. The
runtime is the caller's (``runtime=``: onnxruntime, the deployment target, in a line of the
caller's code; dualgraph never imports it), else dualgraph's own ONNX import, which reads
the file with other code than the export wrote it.
"""
from __future__ import annotations

import numpy as np

from .._helpers import onnx_exports
from ..autograd.tape import no_grad
from ..graph import Value
from ..shapes import Sym
from ..tensor import Tensor
from .errors import OnnxError, require_onnx
from .onnx_export import _check_opset, exportable_problem, to_model, trace_for_export
from .onnx_ops import exporter


class OnnxCheck:
    """What ``dg.onnx.check`` found; ``print`` it. ``ok``: the model exports and (when
    compared) onnxruntime agrees with eager within ``tolerance`` of the outputs' scale.

    Fields: ``ops`` (op name, count, ONNX op types, first location), ``problems``
    (location, sentence), ``control_flow`` (op, location, ONNX op types), ``dynamic``
    ({input or output name: {axis: dim name}}), ``folded`` (nodes folded away),
    ``comparisons`` ([(sizes, max abs error, max rel error)]) or ``not_compared`` (why).
    """

    def __init__(self):
        self.ops: list = []
        self.problems: list = []
        self.control_flow: list = []
        self.dynamic: dict = {}
        self.folded = 0
        self.nodes = 0
        self.comparisons: list = []
        self.not_compared = ""
        self.runtime = "dualgraph's ONNX import"   # what ran the exported file
        self.tolerance = 1e-4
        self.model = None

    @property
    def ok(self) -> bool:
        return not self.problems and all(rel <= self.tolerance
                                         for _, _, rel in self.comparisons)

    def __str__(self):
        verdict = "exports" if not self.problems else f"{len(self.problems)} problem(s)"
        lines = [f"ONNX pre-flight check: {verdict}"
                 + (f", {self.nodes} ONNX nodes" if self.model is not None else "")]
        lines.append("ops:")
        for name, count, types, where in self.ops:
            to = " + ".join(types) if types else "(nothing: folded or an alias)"
            lines.append(f"  {name} x{count} -> {to}" if types is not None
                         else f"  {name} x{count} -> NO ONNX FORM (first at {where})")
        for where, why in self.problems:
            lines.append(f"  problem at {where}: {why}")
        if self.control_flow:
            lines.append("control flow:")
            lines += [f"  {op} at {where} -> {' + '.join(types) or 'inlined'}"
                      for op, where, types in self.control_flow]
        lines.append("dynamic dims: " + (", ".join(
            f"{name}[{axis}]={dim}" for name, axes in self.dynamic.items()
            for axis, dim in axes.items()) or "none (every dim is fixed)"))
        if self.folded:
            lines.append(f"folded for inference: {self.folded} nodes (constants, "
                         "BatchNorm into conv/linear)")
        for sizes, err, rel in self.comparisons:
            lines.append(f"{self.runtime} vs eager at {sizes}: max abs error {err:.3g}, "
                         f"max rel error {rel:.3g}")
        if self.not_compared:
            lines.append(f"not compared with {self.runtime}: {self.not_compared}")
        return "\n".join(lines)

    __repr__ = __str__


def check_model(fn, example_inputs, dynamic_axes=None, input_names=None, opset=None,
                tolerance: float = 1e-4, runtime=None) -> OnnxCheck:
    """``dg.onnx.check``: see ``dualgraph/onnx.py``."""
    onnx = require_onnx()
    opset = _check_opset(onnx, opset)
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    onnx_exports.append(True)   # (layers take their export path while traced, not after)
    try:
        traced = trace_for_export(fn, example_inputs, input_names, None, dynamic_axes)
    finally:
        onnx_exports.pop()
    report = OnnxCheck()
    report.tolerance, report.folded = tolerance, traced.folded
    log: list = []
    problem = exportable_problem(traced.capture)
    if problem:
        report.problems.append(("the function as a whole", problem))
    try:
        report.model = to_model(onnx, traced, opset, log)
    except OnnxError as err:   # (what the model returns: e.g. max_pool2d's indices)
        report.problems.append(("the outputs", str(err)))
    _describe(report, log)
    report.dynamic = _dynamic_dims(traced)
    if report.model is None or problem:
        report.model = None
        report.not_compared = "the model does not export"
        return report
    report.nodes = len(report.model.graph.node)
    if runtime is not None:
        report.runtime = getattr(runtime, "__name__", "the runtime given")
    _compare(report, fn, example_inputs, traced, runtime or _dualgraph_runtime)
    return report


def _describe(report: OnnxCheck, log: list) -> None:
    failed = set()
    by_op: dict = {}
    for node, result in log:
        where = node.location or "(no source line)"
        if isinstance(result, OnnxError):
            failed.update(node.outputs)
            if any(x in failed for x in node.inputs if isinstance(x, Value)):
                continue   # (it reads what an op reported above makes)
            if exporter(node.op) is None:
                types = None
            else:
                report.problems.append((where, str(result)))
                types = ["(fails)"]
        else:
            types = list(dict.fromkeys(result))
        if node.op.bodies:
            report.control_flow.append((node.op.name, where, types or []))
        entry = by_op.setdefault(node.op, [node.op.name, 0, types, where])
        entry[1] += 1
        if types is None:
            entry[2] = None
            report.problems.append((where, f"{node.op.name} has no ONNX form yet"))
        elif entry[2] is not None:
            entry[2] = list(dict.fromkeys(entry[2] + types))
    report.ops = [tuple(e) for e in by_op.values()]


def _dynamic_dims(traced) -> dict:
    graph, names = traced.graph, {}
    args = [v for v, b in zip(graph.inputs, traced.capture.bindings) if b.kind == "arg"]
    for name, v in list(zip(traced.input_names, args)) + list(zip(traced.output_names,
                                                                   graph.outputs)):
        axes = {k: str(d) for k, d in enumerate(v.shape) if isinstance(d, Sym)}
        if axes:
            names[name] = axes
    return names


def _dualgraph_runtime(model_bytes: bytes, feeds: dict) -> list:
    """Run an ONNX file with dualgraph's own import (the default ``runtime``)."""
    from .onnx_load import load as load_model
    run = load_model(require_onnx().load_model_from_string(model_bytes))
    out = run(*[Tensor._make(a) for a in feeds.values()])
    return [np.asarray(t._data) for t in _tensors(out)]


def _compare(report: OnnxCheck, fn, example_inputs, traced, runtime) -> None:
    model_bytes = report.model.SerializeToString()
    runs = [example_inputs]
    other = _other_sizes(example_inputs, traced)
    if other is not None:
        runs.append(other)
    for inputs in runs:
        arrays = [np.asarray(t._data) for t in inputs if isinstance(t, Tensor)]
        got = runtime(model_bytes, dict(zip(traced.input_names, arrays)))
        with no_grad():
            out = fn(*inputs)
        want = [np.asarray(t._data) for t in _tensors(out)]
        err = rel = 0.0
        for g, w in zip(got, want):
            if w.size == 0:
                continue
            diff = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
            scale = float(np.max(np.abs(w.astype(np.float64)))) or 1.0
            err, rel = max(err, diff), max(rel, diff / scale)
        sizes = ", ".join(f"{n}{list(a.shape)}" for n, a in zip(traced.input_names, arrays))
        report.comparisons.append((sizes, err, rel))
    if other is None:
        report.not_compared = "at other sizes (no dim is dynamic)"


def _tensors(out) -> list:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for o in out for t in _tensors(o)]


def _other_sizes(example_inputs, traced):
    """Inputs like the examples with each dynamic dim 3 larger (values random; integer
    inputs drawn below their examples' maximum, so indices stay valid), or None."""
    args = [v for v, b in zip(traced.graph.inputs, traced.capture.bindings) if b.kind == "arg"]
    sizes = {}
    for v, t in zip(args, [t for t in example_inputs if isinstance(t, Tensor)]):
        for d, n in zip(v.shape, t.shape):
            if isinstance(d, Sym) and len(d.names) == 1 and d.coef == 1:
                sizes[d.names[0]] = n + 3
    if not sizes:
        return None
    rng = np.random.default_rng(0)
    out, it = [], iter(args)
    for t in example_inputs:
        if not isinstance(t, Tensor):
            out.append(t)
            continue
        v = next(it)
        shape = tuple(sizes.get(d.names[0], n) if isinstance(d, Sym) else n
                      for d, n in zip(v.shape, t.shape))
        a = np.asarray(t._data)
        if a.dtype.kind == "f":
            new = rng.standard_normal(shape).astype(a.dtype)
        elif a.dtype.kind == "b":
            new = rng.random(shape) < 0.5
        else:
            new = rng.integers(0, max(int(a.max(initial=0)), 0) + 1, shape).astype(a.dtype)
        out.append(Tensor._make(new))
    return tuple(out)
