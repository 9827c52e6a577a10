"""``dualgraph show FILE``: a saved graph (``graph.save``'s JSON file) or an ONNX model,
summarised in the terminal: its size, its ops, and what the passes make of it; ``--html``
writes the self-contained page of ``graph/html.py`` (the graph and the optimised graph side
by side, with the memory plan) and ``--open`` opens it in a browser.

The command line (``dualgraph/__main__.py``) gives the ``show`` subparser to
``add_arguments`` and the parsed arguments to ``run``.
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import sys
import webbrowser

from .. import onnx
from ..graph import load, write_html
from ..passes import plan_in, run_pipeline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``show``'s arguments to ``parser`` (its subparser)."""
    parser.add_argument("file", help="a saved graph (the .json file graph.save or "
                        "compiled.save wrote) or an ONNX model (.onnx)")
    parser.add_argument("--html", nargs="?", const="", metavar="PATH",
                        help="write a self-contained HTML view of the graphs to PATH "
                        "(default: FILE with the suffix .html)")
    parser.add_argument("--open", action="store_true",
                        help="open the HTML view in a browser (implies --html)")
    parser.add_argument("--layout", choices=("auto", "dot", "js"), default="auto",
                        help="auto: Graphviz's dot where installed, else laid out in the "
                        "page's own script")


def run(args: argparse.Namespace) -> int:
    """Print the summary of ``args.file`` and write its HTML view if asked; the exit status.

    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="dualgraph show"); add_arguments(parser)
    >>> run(parser.parse_args(["model.onnx", "--html"]))   # doctest: +SKIP
    """
    path = pathlib.Path(args.file)
    try:
        before, after, plan = _graphs(path)
    except (OSError, ValueError, ImportError) as e:   # (GraphFormatError, OnnxError: values)
        print(f"dualgraph show: {e}", file=sys.stderr)
        return 2
    ops = collections.Counter(node.op.name for node in before.nodes)
    print(f"{path.name}: {len(before.inputs)} inputs, {len(before.constants)} constants, "
          f"{len(before.nodes)} nodes, {len(before.outputs)} outputs")
    print("  ops: " + ", ".join(f"{name} x{n}" for name, n in ops.most_common()))
    print(f"  optimised: {len(after.nodes)} nodes")
    if plan is not None:
        print("  " + plan.summary())
    if args.html is None and not args.open:
        return 0
    out = args.html or str(path.with_suffix(".html"))
    # (sources=False: a file's locations name the files of the machine that wrote it)
    write_html(out, [(path.name, before), ("optimised", after)], plan, title=path.name,
               layout=args.layout, sources=False)
    print(f"wrote {out}")
    if args.open:
        webbrowser.open(pathlib.Path(out).resolve().as_uri())
    return 0


def _graphs(path: pathlib.Path):
    """(the file's graph, that graph after the passes, the memory plan)."""
    if path.suffix == ".onnx":
        run = onnx.load(path).executable
        return run.source_graph, run.graph, plan_in(run.reports)
    graph = load(path)
    after, reports = run_pipeline(graph)
    return graph, after, plan_in(reports)
