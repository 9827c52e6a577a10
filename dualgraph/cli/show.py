"""``dualgraph show FILE``: a summary of a saved graph (``graph.save``'s ``.json``, with its
``.safetensors`` beside it) or an ONNX model: its inputs and outputs with shapes and
dtypes, its parameters, how many nodes of each op it has and what the passes make of it;
``--html`` writes the self-contained page of ``graph/html.py`` (the graph and the optimised
graph side by side, with the memory plan), ``--open`` opens it. Reading a file never runs
code from it."""
from __future__ import annotations

import json
import os
import pathlib
import sys
import webbrowser
from collections import Counter

import numpy as np

HELP = "summarise a saved graph (.json) or an ONNX model (.onnx); --html draws it"


def add_arguments(parser) -> None:
    parser.add_argument("file", help="a graph saved by graph.save (.json) or an ONNX model")
    parser.add_argument("--html", nargs="?", const="", metavar="PATH",
                        help="write a self-contained HTML view of the graphs to PATH "
                        "(default: FILE with the suffix .html)")
    parser.add_argument("--open", action="store_true",
                        help="open the HTML view in a browser (implies --html)")
    parser.add_argument("--layout", choices=("auto", "dot", "js"), default="auto",
                        help="auto: Graphviz's dot where installed, else laid out in the "
                        "page's own script")


def run(args) -> int:
    try:
        print(summary(args.file), end="")
        before, after, plan = optimised(args.file)
    except (OSError, ValueError, ImportError) as e:   # (GraphFormatError, OnnxError: values)
        print(f"dualgraph show: {e}", file=sys.stderr)
        return 1
    print(f"optimised: {len(after.nodes)} nodes" + (f"; {plan.summary()}" if plan else ""))
    if args.html is None and not args.open:
        return 0
    from ..graph import write_html
    path = pathlib.Path(args.file)
    out = args.html or str(path.with_suffix(".html"))
    # (sources=False: a file's locations name the files of the machine that wrote it)
    write_html(out, [(path.name, before), ("optimised", after)], plan, title=path.name,
               layout=args.layout, sources=False)
    print(f"wrote {out}")
    if args.open:
        webbrowser.open(pathlib.Path(out).resolve().as_uri())
    return 0


def optimised(path: str):
    """(the file's graph, that graph after the passes, the memory plan or None)."""
    from ..passes import plan_in, run_pipeline
    if is_onnx(path):
        from .. import onnx
        executable = onnx.load(path).executable
        return executable.source_graph, executable.graph, plan_in(executable.reports)
    from ..graph import load
    graph = load(path)
    after, reports = run_pipeline(graph)
    return graph, after, plan_in(reports)


def summary(path: str) -> str:
    """The terminal summary of the graph or ONNX model at ``path``."""
    if is_onnx(path):
        return onnx_summary(path)
    return graph_summary(path)


def is_onnx(path: str) -> bool:
    """ONNX by its name, else by its content: a saved graph is a JSON document."""
    if path.endswith(".onnx"):
        return True
    with open(path, "rb") as f:
        return not f.read(64).lstrip().startswith(b"{")


def _table(title: str, rows: list[tuple]) -> list[str]:
    if not rows:
        return [f"{title}: none"]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return [f"{title}:"] + ["  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths))
                            .rstrip() for r in rows]


def _parameters(sizes: list[tuple[int, int]]) -> str:
    """``3 tensors, 1,290 values (5.0 KiB)`` for (values, bytes) of each tensor."""
    values, nbytes = sum(v for v, _ in sizes), sum(b for _, b in sizes)
    return f"{len(sizes)} tensors, {values:,} values ({nbytes / 1024:,.1f} KiB)"


def _report(head: str, inputs, outputs, params, ops: Counter, nested: int = 0) -> str:
    lines = [head, *_table("inputs", inputs), *_table("outputs", outputs),
             f"parameters: {params}"]
    title = f"ops ({sum(ops.values())} nodes" + (
        f", {nested} of them inside control-flow bodies)" if nested else ")")
    lines += _table(title, sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))
    return "\n".join(lines) + "\n"


# -- dualgraph graphs ---------------------------------------------------------------------
def graph_summary(path: str) -> str:
    from ..graph import load, subgraphs, type_str
    graph = load(path)
    ops: Counter = Counter()
    nested = [0]

    def count(g, depth):
        for node in g.nodes:
            ops[node.op] += 1
            nested[0] += depth > 0
            for _, body in subgraphs(node.attrs):
                count(body, depth + 1)
    count(graph, 0)
    ops = Counter({op.name: n for op, n in ops.items()})
    with open(path, encoding="utf-8") as f:
        version = json.load(f).get("version")
    inputs = [(v.name, type_str(v.shape, v.dtype)) for v in graph.inputs]
    outputs = [(v.name, type_str(v.shape, v.dtype)) for v in graph.outputs]
    params = _parameters([(a.size, a.nbytes) for a in graph.constants.values()])
    head = f"{os.path.basename(path)}: dualgraph graph (format version {version})"
    return _report(head, inputs, outputs, params + " (constants)", ops, nested[0])


# -- ONNX models ----------------------------------------------------------------------------
def onnx_summary(path: str) -> str:
    from ..export.errors import OnnxError, require_onnx
    onnx = require_onnx()
    with open(path, "rb") as f:
        data = f.read()
    try:   # (parses protobuf only: external data, if any, is not read)
        model = onnx.load_model_from_string(data)
    except Exception as e:
        what = "ONNX model" if path.endswith(".onnx") else \
            "ONNX model or saved graph (graph.save's JSON)"
        raise OnnxError(f"{path}: not a readable {what} ({type(e).__name__}: {e})") from None
    g = model.graph
    init = {t.name for t in g.initializer}
    ops: Counter = Counter()
    nested = [0]

    def count(graph, depth):
        for node in graph.node:
            ops[node.op_type if node.domain in ("", "ai.onnx")
                else f"{node.domain}.{node.op_type}"] += 1
            nested[0] += depth > 0
            for attr in node.attribute:
                for body in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    count(body, depth + 1)
    count(g, 0)
    inputs = [_onnx_value(onnx, v) for v in g.input if v.name not in init]
    outputs = [_onnx_value(onnx, v) for v in g.output]
    sizes = []
    for t in g.initializer:
        n = int(np.prod(t.dims, dtype=np.int64))
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        sizes.append((n, n * itemsize))
    opsets = ", ".join(f"{imp.domain or 'ai.onnx'} {imp.version}" for imp in model.opset_import)
    producer = " ".join(p for p in (model.producer_name, model.producer_version) if p)
    head = (f"{os.path.basename(path)}: ONNX model (IR version {model.ir_version}, opset "
            f"{opsets}" + (f", produced by {producer}" if producer else "") + ")")
    return _report(head, inputs, outputs, _parameters(sizes) + " (initializers)", ops,
                   nested[0])


def _onnx_value(onnx, v) -> tuple[str, str]:
    t = v.type.tensor_type
    if not v.type.HasField("tensor_type"):
        return v.name, v.type.WhichOneof("value") or "?"
    from ..graph import type_str
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
            for d in t.shape.dim] if t.HasField("shape") else ["?"]
    if not t.elem_type:
        return v.name, f"?[{','.join(dims)}]"
    return v.name, type_str(dims, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
