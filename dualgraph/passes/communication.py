"""Communication passes: many small allreduces become a few large ones
(``fuse_all_reduces``), and each overlaps the computation after its input is ready
(``overlap_communication``)."""
from __future__ import annotations

import math

from ..graph import Graph, Value
from ..ops.collective import (ALL_REDUCE, ALL_REDUCE_PROGRESS, ALL_REDUCE_START,
                              ALL_REDUCE_WAIT, COMPRESSED_ALL_REDUCE, FIRST_BUCKET_BYTES,
                              PACK_BUCKET)
from ..ops.elementwise import CAST
from ..ops.shape import CAT, RESHAPE, SLICE
from ..shapes import is_static
from .core import Builder, Report, format_bytes, nbytes, readers

BUCKET_BYTES = 25 << 20   # as data parallelism's default bucket: one message at most this


def fuse_all_reduces(graph: Graph, bucket_bytes: int = BUCKET_BYTES) -> tuple[Graph, Report]:
    """Join runs of ``all_reduce`` nodes of one reduction and dtype into one allreduce of
    their inputs flattened and concatenated (at most ``bucket_bytes`` each), each result
    a slice of it: every allreduce costs a latency, so few large ones beat many small
    ones. A run ends at any other communicating node (every rank keeps the order of its
    communications) and before any node that reads a result of the run (the joined
    allreduce takes the place of the run's last node). The graph's first joined allreduce
    stops at ``FIRST_BUCKET_BYTES``, as data parallelism's first bucket: it can start
    while the rest of the backward runs (``overlap_communication``).

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
    cap = min(bucket_bytes, FIRST_BUCKET_BYTES)   # (the first allreduce's, then bucket_bytes)

    def close():
        nonlocal run, size, cap
        if len(run) > 1:
            runs.append(run)
        if run:
            cap = bucket_bytes
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
        if size >= cap:
            close()
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


POLL_BYTES = 1 << 14   # a node writing this much is worth a progress poll after it


def overlap_communication(graph: Graph) -> tuple[Graph, Report]:
    """Each ``all_reduce`` split in two, so that its communication overlaps the computation
    between: ``all_reduce_start`` as soon as its input can be computed (right after the
    node that finishes its last gradient, with the nodes that only prepare its input: the
    ``cat`` of a bucket, the division by the world size, a data-parallel ``pack_bucket``),
    ``all_reduce_wait`` as late as possible (before the first node that reads more than
    the result and its pieces or copy, as an optimiser's update), and between them an
    ``all_reduce_progress``
    after every node that writes at least
    ``POLL_BYTES``: MPICH moves a message forward only inside MPI calls, so without them
    the message would travel only once the wait is reached. The report names, per
    allreduce, where it starts and where it is waited on (``explain()`` prints it).

    Preserves: every value (the start, polls and wait compute the allreduce), inputs and
    outputs, and the order of the communicating nodes among themselves (each start keeps
    its place among the other collectives, as every rank must). An allreduce that nothing
    could overlap (its wait would follow its start) is left whole.

    Before::                                    After::

        %g = linear_backward(...)                   %g = linear_backward(...)
        %s = div(%g, 2)                             %s = div(%g, 2)
        %dx = linear_backward(...)                  %h = all_reduce_start(%s)
        %a = all_reduce(%s)                         %dx = linear_backward(...)
        %w = sub(%p, %a)                            %h1 = all_reduce_progress(%h)
                                                    %a = all_reduce_wait(%h1, %s)
                                                    %w = sub(%p, %a)
    """
    report = Report("overlap_communication", len(graph.nodes), len(graph.nodes))
    reductions = [n for n in graph.nodes if n.op is ALL_REDUCE]
    if not reductions:
        return graph, report
    plan = _overlap_plan(graph, reductions)
    starts = {a for kind, a in plan if kind == "start"}
    if not starts:
        return graph, report
    b = Builder(graph)
    handles, where = {}, {}
    for kind, node in plan:
        if kind == "node":
            b.copy(node)
        elif kind == "start":
            (handles[node],) = b.add(ALL_REDUCE_START, [b.get(node.inputs[0])],
                                     dict(node.attrs), node.location)
            where[node] = [len(b.graph.nodes) - 1, 0]
        elif kind == "progress":
            (handles[node],) = b.add(ALL_REDUCE_PROGRESS, [handles[node]], {}, node.location)
            where[node][1] += 1
        else:
            (b.env[node.outputs[0]],) = b.add(
                ALL_REDUCE_WAIT, [handles[node], b.get(node.inputs[0])], dict(node.attrs),
                node.location)
            where[node].append(len(b.graph.nodes) - 1)
    new = b.finish()
    for i, node in enumerate(n for n in reductions if n in starts):
        start, polls, wait = where[node]
        size = format_bytes(nbytes(node.outputs[0]))
        report.count("overlapped", (
            f"all_reduce #{i} of {size} ({node.location or '?'}): starts at node {start} "
            f"after {_describe_at(new, start - 1)}, waited on at node {wait} before "
            f"{_describe_at(new, _first_use(new, wait))}; {wait - start - 1} nodes between "
            f"({polls} progress polls)"))
    report.nodes_after = len(new.nodes)
    return new, report


def _first_use(graph: Graph, i: int) -> int:
    """The first node after the wait at ``i`` that reads more than the wait's result and
    what :func:`_uses_of_result` makes of it alone (its pieces, a copy)."""
    chain = set(graph.nodes[i].outputs)
    i += 1
    while i < len(graph.nodes) and _reads_only(graph.nodes[i], chain):
        chain.update(graph.nodes[i].outputs)
        i += 1
    return i


def _reads_only(node, chain: set) -> bool:
    """Whether ``node`` reads nothing but values of ``chain`` and does not communicate."""
    inputs = [x for x in node.inputs if isinstance(x, Value)]
    return not node.op.communicates and bool(inputs) and all(x in chain for x in inputs)


def _describe_at(graph: Graph, i: int) -> str:
    if not 0 <= i < len(graph.nodes):
        return "the graph's start" if i < 0 else "the return"
    node = graph.nodes[i]
    return f"{node.op.name} ({node.location or '?'})"


def _overlap_plan(graph: Graph, reductions: list) -> list[tuple[str, object]]:
    """The new order as ``(kind, node)`` items: "node" (copied), "start", "progress" and
    "wait" of an allreduce."""
    index = {n: i for i, n in enumerate(graph.nodes)}
    consumers = readers(graph)
    prep = {a: _preparation(graph, a, index, consumers) for a in reductions}
    preparing = {n for nodes in prep.values() for n in nodes}
    producer = {v: n for n in graph.nodes for v in n.outputs}
    needs = {a: {producer[x] for n in [*prep[a], a] for x in n.inputs if x in producer}
             - set(prep[a]) for a in reductions}
    communicating = [n for n in graph.nodes if n.op.communicates]
    earlier = {a: set(communicating[:communicating.index(a)]) - set(prep[a])
               for a in reductions}
    uses = {a: _uses_of_result(graph, a, index) for a in reductions}
    result_of = {v: a for a in reductions for n in [a, *uses[a]] for v in n.outputs}
    plan, done, in_flight, queue = [], set(), [], list(reductions)

    def wait(a):
        in_flight.remove(a)
        plan.append(("wait", a))
        for n in uses[a]:
            if n not in done:   # (a piece may also prepare another allreduce's input)
                plan.append(("node", n))
                done.add(n)

    def wait_for_inputs(nodes):
        for n in nodes:
            for x in n.inputs:
                a = result_of.get(x)
                if a in in_flight:
                    wait(a)

    def emit(node):
        plan.append(("node", node))
        done.add(node)
        if in_flight and sum(nbytes(v) for v in node.outputs) >= POLL_BYTES:
            plan.append(("progress", in_flight[-1]))

    def start_ready():
        while queue and needs[queue[0]] <= done and earlier[queue[0]] <= done:
            a = queue.pop(0)
            wait_for_inputs([*prep[a], a])
            for n in prep[a]:
                if n not in done:
                    emit(n)
            plan.append(("start", a))
            done.add(a)
            in_flight.append(a)

    start_ready()
    deferred = preparing.union(*uses.values())
    for node in graph.nodes:
        if node in done or node in deferred:
            continue
        if node.op is ALL_REDUCE:   # (what it needs comes before it: done, or waited for)
            wait_for_inputs([*prep[node], node])
            start_ready()
            assert node in done, f"overlap_communication could not start {node}"
            continue
        wait_for_inputs([node])
        emit(node)
        start_ready()
    for a in reductions:
        if a in in_flight:
            wait(a)
    return _unsplit_idle(plan)


def _uses_of_result(graph: Graph, a, index: dict) -> list:
    """The nodes that read nothing but ``a``'s result and what these nodes make of it (the
    views cutting it into gradients, a copy of it into ``.grad``s): they cannot run before
    its wait, so they move with it, which can then come as late as the first node that
    also reads something else (the optimiser's update)."""
    chain, found = set(a.outputs), []
    for node in graph.nodes[index[a] + 1:]:
        if _reads_only(node, chain):
            chain.update(node.outputs)
            found.append(node)
    return found


def _preparation(graph: Graph, a, index: dict, consumers: dict) -> list:
    """The nodes that only prepare ``a``'s input (every value they make is read only by
    them or by ``a``, none is communicating, except a ``pack_bucket`` into ``a``'s place,
    nor a graph output), in node order: they move with the start."""
    prep, frontier = set(), {x.producer for x in a.inputs
                             if isinstance(x, Value) and x.producer is not None}
    for i in range(index[a] - 1, -1, -1):
        if not frontier:
            break
        node = graph.nodes[i]
        if node not in frontier:
            continue
        frontier.discard(node)
        if node.op.communicates and node.op is not PACK_BUCKET or not all(
                r is a or r in prep for v in node.outputs for r in consumers.get(v, ())):
            continue
        prep.add(node)
        frontier.update(x.producer for x in node.inputs
                        if isinstance(x, Value) and x.producer is not None)
    return sorted(prep, key=index.__getitem__)


def _unsplit_idle(plan: list) -> list:
    """An allreduce whose wait would follow its start (only polls of its own between) is
    left whole: there is nothing to overlap."""
    out = []
    for item in plan:
        kind, node = item
        if kind == "wait":
            back = len(out) - 1
            while back >= 0 and out[back] == ("progress", node):
                back -= 1
            if back >= 0 and out[back] == ("start", node):
                del out[back:]
                out.append(("node", node))
                continue
        out.append(item)
    return out


def compressed_all_reduces(graph: Graph) -> list:
    """The precondition: every ``compressed_all_reduce`` node of a static shape."""
    return [n for n in graph.nodes
            if n.op is COMPRESSED_ALL_REDUCE and is_static(n.inputs[0].shape)]


def compress_all_reduces(graph: Graph, nodes: list, report: Report) -> Graph:
    """Each ``compressed_all_reduce`` (a data-parallel compression hook's graph form:
    ``fp16_compress_hook``, ``bf16_compress_hook``) becomes the quantisation around a plain
    allreduce: a cast to the wire dtype, ``all_reduce`` in it, a cast back. Then
    ``fuse_all_reduces`` joins the 16-bit allreduces into buckets and
    ``overlap_communication`` starts them early, as any allreduce.

    Preserves: types, inputs and outputs, and values bit for bit (the same casts and
    reduction the op's kernel and the eager hook run).

    Before::

        graph(%g: f32[4]) {
          %r: f32[4] = compressed_all_reduce(%g, reduction='SUM', dtype=float16)
          return (%r)
        }

    After::

        graph(%g: f32[4]) {
          %cast: f16[4] = cast(%g, dtype=float16)
          %all_reduce: f16[4] = all_reduce(%cast, reduction='SUM')
          %r: f32[4] = cast(%all_reduce, dtype=float32)
          return (%r)
        }
    """
    todo = set(nodes)
    b = Builder(graph)
    for node in graph.nodes:
        if node not in todo:
            b.copy(node)
            continue
        (x,), (out,) = [b.get(v) for v in node.inputs], node.outputs
        wire = node.attrs["dtype"]
        (sent,) = b.add(CAST, [x], {"dtype": wire}, node.location)
        attrs = {k: v for k, v in node.attrs.items() if k != "dtype"}   # (reduction, group)
        (summed,) = b.add(ALL_REDUCE, [sent], attrs, node.location)
        (b.env[out],) = b.add(CAST, [summed], {"dtype": out.dtype}, node.location,
                              names=[out.name])
        report.count("compress_all_reduces", f"{format_bytes(nbytes(out))} sent as {wire} "
                     f"({node.location or '?'})")
    return b.finish()
