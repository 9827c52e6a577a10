"""``dg.onnx``: export a function or module to an ONNX file, and load an ONNX file as a
function that runs on dualgraph's kernels.

The implementations live in ``dualgraph/export/``; they are imported on first use, so that
``import dualgraph`` does not import the ``onnx`` package (an optional dependency).
"""
from __future__ import annotations

from ._helpers import onnx_exports


def export(fn_or_module, example_inputs, path, input_names=None, output_names=None,
           dynamic_axes=None, opset=None):
    """Trace ``fn_or_module`` on ``example_inputs`` (a tensor or a tuple of them) and write
    the graph to ``path`` as an ONNX model; a module's parameters and buffers become the
    model's initializers. ``dynamic_axes`` (``{input or output name: {axis: "name"} or
    [axes]}``) makes those dims symbolic. Returns the ``onnx.ModelProto`` written.

    >>> import dualgraph as dg
    >>> dg.onnx.export(lambda x: x * 2, (dg.ones(2),), "double.onnx")   # doctest: +SKIP
    """
    from .export.onnx_export import export_model
    onnx_exports.append(True)
    try:
        return export_model(fn_or_module, example_inputs, path, input_names=input_names,
                            output_names=output_names, dynamic_axes=dynamic_axes,
                            opset=opset)
    finally:
        onnx_exports.pop()


def is_in_onnx_export() -> bool:
    """Whether an ``export`` is tracing the model now (models test it to take an
    export-friendly path), as ``torch.onnx.is_in_onnx_export``."""
    return bool(onnx_exports)


def check(fn_or_module, example_inputs, dynamic_axes=None, input_names=None, opset=None,
          tolerance: float = 1e-4, runtime=None):
    """A pre-flight report on exporting ``fn_or_module`` (traced on ``example_inputs`` as
    ``export`` traces it; ``dynamic_axes`` and ``input_names`` as there), written nowhere:
    every op and the ONNX ops it becomes (or that it has none, with the user's line), how
    each control-flow construct is lowered, which dims stay dynamic, and the largest error
    of a runtime running the exported file against eager at the example sizes and with each
    dynamic dim 3 larger. ``runtime(model_bytes, {input name: array}) -> [arrays]`` runs it
    (give one that calls onnxruntime, the usual deployment target: docs/onnx.md); without
    one, dualgraph's own ONNX import does. ``print`` it; ``.ok`` says whether it exports and
    agrees within ``tolerance`` (relative to the outputs' largest magnitude).

    >>> import dualgraph as dg
    >>> report = dg.onnx.check(dg.nn.Linear(4, 2), dg.randn(3, 4), {"input": {0: "B"}})
    >>> report.ok
    True
    """
    from .export.onnx_preflight import check_model
    return check_model(fn_or_module, example_inputs, dynamic_axes=dynamic_axes,
                       input_names=input_names, opset=opset, tolerance=tolerance,
                       runtime=runtime)


def load(path):
    """Read the ONNX model at ``path`` (or an ``onnx.ModelProto``) into a dualgraph graph;
    returns a callable that runs it, compiled, on dualgraph's kernels (``.graph`` is the
    graph). Reading a model never executes code from it.

    >>> import dualgraph as dg
    >>> dg.onnx.load("double.onnx")(dg.ones(2))   # doctest: +SKIP
    tensor([2., 2.])
    """
    from .export.onnx_load import load as load_model
    return load_model(path)


def to_html(model, path) -> str:
    """Write an ONNX model (a path, an ``onnx.ModelProto`` or what ``load`` returned) to
    ``path`` as a self-contained HTML page: the imported graph and the optimised one side by
    side, with the memory plan's buffers (see ``Graph.to_html``). Returns the path.

    >>> import dualgraph as dg
    >>> dg.onnx.to_html("double.onnx", "double.html")   # doctest: +SKIP
    'double.html'
    """
    from .export.onnx_import import OnnxFunction
    from .graph import write_html
    from .passes import plan_in
    function = model if isinstance(model, OnnxFunction) else load(model)
    run = function.executable
    # (sources=False: the locations name the model's nodes, not this machine's files)
    return write_html(path, [("imported", run.source_graph), ("optimised", run.graph)],
                      plan_in(run.reports), title=function.label, sources=False)
