"""Rematerialisation: recompute values instead of keeping them alive, to lower peak memory.

Two sources of recomputation meet here. A checkpointed region (autograd/checkpoint.py) is
already recomputed in the graph's backward part (its nodes are located ``(recompute)``):
``checkpoint_savings`` reports what that saves, ``rematerialize`` what it recomputes. With a budget of live bytes (``dg.compile(...,
memory_budget=...)``), the pass itself picks values to recompute where they are read again
after a long gap, cheapest first, until the peak fits.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from ..ops.control import RECOMPUTE_BARRIER
from .core import Builder, Report, format_bytes, nbytes
from .cse import cse
from .memory import END, Liveness

RECOMPUTED = " (recompute)"       # the location suffix of a checkpointed region's recomputation
REMATERIALISED = " (rematerialised)"
MAX_STEPS = 500                   # recomputations tried per graph, at most


def rematerialize(graph: Graph, budget: int | None = None) -> tuple[Graph, Report]:
    """Report the checkpointed regions' recomputation; given ``budget`` (bytes), recompute
    values whose producer is cheap, in place of keeping them alive across the peak.

    Each step finds the point of peak live bytes and, among the values alive there but not
    read there, the one to recompute just before its next read after the peak: its
    producer must read only values alive at that read anyway (graph inputs, constants,
    values read later still), so nothing else lives longer. Producers are tried in tiers:
    elementwise ops, then reductions and view-free shape ops, then anything else
    (matrix products, convolutions, norms) only when the cheaper tiers cannot meet the
    budget; within a tier, the largest value first. A step is kept only when it lowers the
    peak. The report says whether the budget was met.

    Preserves: every output value; the nodes, in order, plus the recomputing copies (their
    location ends in ``(rematerialised)``), which later reads use.

    Before (budget: %b must not live across %big)::    After::

        %b = exp(%x)                          %b = exp(%x)
        %c = neg(%b)                          %c = neg(%b)
        %big = ...(%c)                        %big = ...(%c)
        %d = mul(%big, %b)                    %b_1 = exp(%x)    (rematerialised)
                                              %d = mul(%big, %b_1)
    """
    report = Report("rematerialize", len(graph.nodes), len(graph.nodes))
    recomputed = [n for n in graph.nodes if (n.location or "").endswith(RECOMPUTED)]
    if recomputed:
        again = sum(nbytes(v) for n in recomputed if not n.op.view for v in n.outputs)
        report.count("recomputed by checkpoints", n=len(recomputed))
        report.items.append(
            f"checkpointed regions: {len(recomputed)} nodes recompute "
            f"{format_bytes(again)} of values in the backward instead of keeping them from "
            f"the forward (what that saves: checkpoint_savings)")
    if budget is None:
        return graph, report
    live = Liveness.of(graph)
    start = peak = live.peak()
    tried: set = set()
    for _ in range(MAX_STEPS):
        if peak <= budget:
            break
        step = _best_step(graph, live, tried)
        if step is None:
            break
        new = _recompute(graph, *step)
        new_live = Liveness.of(new)
        if new_live.peak() < peak:
            report.count("rematerialised", f"%{step[0].outputs[0].name} before node {step[1]}")
            graph, live, peak = new, new_live, new_live.peak()
        tried.add(step[0])
    met = "met" if peak <= budget else "NOT met: nothing cheaper left to recompute"
    report.items.append(f"memory budget {format_bytes(budget)} {met}: peak live bytes "
                        f"{format_bytes(start)} -> {format_bytes(peak)}")
    report.bytes_saved += start - peak
    report.nodes_after = len(graph.nodes)
    report.data = peak <= budget
    return graph, report


def checkpoint_savings(graph: Graph) -> tuple[Graph, Report]:
    """Analysis only (the graph is returned unchanged): the peak of live bytes in the
    traced order, and what it would be if the checkpointed regions' forward values were
    kept for the backward instead of recomputed: the graph with each
    ``recompute_barrier`` read as its input, after ``cse`` merges each recomputation with
    the forward it repeats. ``report.bytes_saved`` is the difference; ``report.data`` the
    two peaks ``(with, kept)``. Run first, before fusion makes the two unmergeable.
    """
    report = Report("checkpoint_savings", len(graph.nodes), len(graph.nodes))
    if not any(node.op is RECOMPUTE_BARRIER for node in graph.nodes):
        return graph, report
    b = Builder(graph)
    for node in graph.nodes:
        if node.op is RECOMPUTE_BARRIER:
            b.env[node.outputs[0]] = b.get(node.inputs[0])
        else:
            b.copy(node)
    kept, _ = cse(b.finish())
    now, before = Liveness.of(graph).peak(), Liveness.of(kept).peak()
    report.data = (now, before)
    report.bytes_saved = before - now
    report.items.append(f"peak live bytes in the traced order {format_bytes(now)}; "
                        f"{format_bytes(before)} if the forward kept what the checkpointed "
                        "regions recompute")
    return graph, report


def _tier(node: Node) -> int:
    op = node.op
    if op.elementwise is not None:
        return 0
    if op.reduction is not None or op.shape_only:
        return 1
    return 2


def _peak_index(live: Liveness) -> int:
    """The node index at which the most root bytes are alive."""
    events: dict[float, int] = {}
    for r, i in live.defined.items():
        events[i] = events.get(i, 0) + nbytes(r)
        end = live.last_use[r] + 0.5
        events[end] = events.get(end, 0) - nbytes(r)
    best, at, now = -1, 0, 0
    for t in sorted(events):
        now += events[t]
        if now > best:
            best, at = now, t
    return int(at)


def _best_step(graph: Graph, live: Liveness, tried: set):
    """``(node, index)``: a producer to recompute before node ``index``, or None."""
    t = _peak_index(live)
    reads: dict[Value, list] = {}   # root -> indices of the nodes reading it (views included)
    direct: dict[Value, list] = {}
    for i, node in enumerate(graph.nodes):
        for x in node.inputs:
            r = live.root.get(x)
            if r is not None:
                reads.setdefault(r, []).append(i)
                if x is r:
                    direct.setdefault(r, []).append(i)
    best = None
    for r, d in live.defined.items():
        last = live.last_use[r]
        if not d < t < last or last == END:
            continue
        node = r.producer
        if node in tried or node.op.bodies or node.op.view:
            continue
        later = [i for i in reads[r] if i > t]
        if later != [i for i in direct.get(r, ()) if i > t]:
            continue   # (read later through a view: the view would need recomputing too)
        at = later[0]
        if not all(_alive_at(x, live, at) for x in node.inputs):
            continue
        key = (_tier(node), -sum(nbytes(v) for v in node.outputs))
        if best is None or key < best[0]:
            best = (key, node, at)
    return None if best is None else best[1:]


def _alive_at(x, live: Liveness, at: int) -> bool:
    if not isinstance(x, Value):
        return True
    r = live.root.get(x)
    return r is None or live.last_use[r] >= at   # (inputs and constants have no root)


def _recompute(graph: Graph, node: Node, at: int) -> Graph:
    """``graph`` with a copy of ``node`` before node ``at``; reads from ``at`` on use it."""
    b = Builder(graph)
    b.keep(graph.nodes[:at])
    outs = b.add(node.op, [b.get(x) for x in node.inputs], node.attrs,
                 location=(node.location or "") + REMATERIALISED)
    b.env.update(zip(node.outputs, outs))
    for n in graph.nodes[at:]:
        b.copy(n)
    return b.finish()
