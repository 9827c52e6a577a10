"""Communication fusion: many small allreduces become a few large ones."""
from __future__ import annotations

import math

from ..graph import Graph
from ..ops.collective import ALL_REDUCE
from ..ops.shape import CAT, RESHAPE, SLICE
from ..shapes import is_static
from .core import Builder, Report, format_bytes, nbytes

BUCKET_BYTES = 25 << 20   # as data parallelism's default bucket: one message at most this


def fuse_all_reduces(graph: Graph, bucket_bytes: int = BUCKET_BYTES) -> tuple[Graph, Report]:
    """Join runs of ``all_reduce`` nodes of one reduction and dtype into one allreduce of
    their inputs flattened and concatenated (at most ``bucket_bytes`` each), each result
    a slice of it: every allreduce costs a latency, so few large ones beat many small
    ones. A run ends at any other communicating node (every rank keeps the order of its
    communications) and before any node that reads a result of the run (the joined
    allreduce takes the place of the run's last node).

    Preserves: every value (an allreduce of a concatenation is the concatenation of the
    allreduces: the reductions are elementwise), inputs and outputs, and the order of the
    communicating nodes among themselves (the same on every rank, as the passes are).

    Before::                                    After::

        %a = all_reduce(%g0, reduction='SUM')       %r0 = reshape(%g0, shape=(6,))
        %b = all_reduce(%g1, reduction='SUM')       %c = cat(%r0, %g1, dim=0)
        return (%a, %b)                             %s = all_reduce(%c, reduction='SUM')
                                                    %a0 = slice(%s, index=((0, 6, 1),))
                                                    %a = reshape(%a0, shape=(2, 3))
                                                    %b = slice(%s, index=((6, 10, 1),))
                                                    return (%a, %b)
    """
    report = Report("fuse_all_reduces", len(graph.nodes), len(graph.nodes))
    runs = _runs(graph, bucket_bytes)
    if not runs:
        return graph, report   # nothing to join: no copy (graphs are immutable)
    last_of = {run[-1]: run for run in runs}
    joined = {node for run in runs for node in run}
    b = Builder(graph)
    for node in graph.nodes:
        if node in last_of:
            run = last_of[node]
            _join(b, run)
            report.count("joined", f"{len(run)} allreduces of "
                         f"{format_bytes(sum(nbytes(n.outputs[0]) for n in run))} -> one "
                         f"({', '.join(sorted({n.location or '?' for n in run}))})")
        elif node not in joined:
            b.copy(node)
    report.nodes_after = len(b.graph.nodes)
    return b.finish(), report


def _runs(graph: Graph, bucket_bytes: int) -> list[list]:
    """The runs of two or more allreduces to join, in node order."""
    runs, run, results, size = [], [], set(), 0

    def close():
        nonlocal run, size
        if len(run) > 1:
            runs.append(run)
        run, size = [], 0
        results.clear()

    for node in graph.nodes:
        if results.intersection(node.inputs):
            close()
        if node.op is not ALL_REDUCE:
            if node.op.communicates:
                close()
            continue
        (x,) = node.inputs
        (out,) = node.outputs
        if not is_static(out.shape):
            close()
            continue
        first = run[0] if run else None
        if first is not None and (first.attrs != node.attrs
                                  or first.outputs[0].dtype != out.dtype
                                  or size + nbytes(out) > bucket_bytes):
            close()
        run.append(node)
        results.add(out)
        size += nbytes(out)
    close()
    return runs


def _join(b: Builder, run: list) -> None:
    flat = []
    for node in run:
        x = b.get(node.inputs[0])
        n = math.prod(x.shape)
        flat.append(x if len(x.shape) == 1 else
                    b.add(RESHAPE, [x], {"shape": (n,)}, node.location)[0])
    location = run[-1].location
    (cat,) = b.add(CAT, flat, {"dim": 0}, location)
    (total,) = b.add(ALL_REDUCE, [cat], dict(run[-1].attrs), location)
    offset = 0
    for node in run:
        out = node.outputs[0]
        n = math.prod(out.shape)
        (part,) = b.add(SLICE, [total], {"index": ((offset, offset + n, 1),)}, node.location)
        if len(out.shape) != 1:
            (part,) = b.add(RESHAPE, [part], {"shape": tuple(out.shape)}, node.location)
        b.env[out] = part
        offset += n
