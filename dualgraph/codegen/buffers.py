"""Which node outputs the generated code writes into preallocated buffers.

The passes' memory plan (``plan_memory``) says which values may share a buffer; it counts
aliasing only through ops marked ``view=True``. Here the plan is checked against a stricter
rule before any write is trusted: any node the code generator did not emit itself (a
registry kernel call) may return an array that aliases its inputs (``cast`` to the same
dtype returns its input), so a buffer holding ``r`` stays busy until every value that may
alias ``r`` is dead. A value gets a slot only when

- its node writes fresh memory (a direct ufunc call or a fused kernel), so ``out=`` works;
- no alias of it is returned to the caller (buffers are reused by the next call), and
- its buffer's previous occupant, with all its aliases, is dead by then; or is overwritten
  in place by an elementwise ufunc reading it, at the same position, for the last time.

Planned values that fail a check simply get fresh memory: correctness first.
"""
from __future__ import annotations

from ..graph import Graph, Value

END = float("inf")


def assign_slots(graph: Graph, plan, fresh: dict) -> list[tuple[Value, int]]:
    """``[(value, buffer id)]`` in node order: the values written into buffers.

    ``plan`` is a ``MemoryPlan``; ``fresh`` maps the nodes that write fresh memory to
    "ufunc" or "fused" (only ufunc nodes may overwrite an input in place).
    """
    roots, ext_last = _aliases(graph, fresh)
    busy: dict[int, Value] = {}   # buffer id -> its current occupant
    slots = []
    for i, node in enumerate(graph.nodes):
        if node not in fresh:
            continue
        for v in node.outputs:
            k = plan.assignment.get(v)
            if k is None or v.ndim == 0 or ext_last[v] == END:
                continue
            prev = busy.get(k)
            if prev is None or ext_last[prev] < i or (
                    ext_last[prev] == i and fresh[node] == "ufunc"
                    and _in_place_ok(node, prev, v, roots)):
                busy[k] = v
                slots.append((v, k))
    return slots


def _aliases(graph: Graph, fresh: dict):
    """May-alias roots and extended last use of every node output."""
    defined: dict[Value, int] = {}
    roots: dict[Value, frozenset] = {}
    last: dict[Value, float] = {}
    for i, node in enumerate(graph.nodes):
        for x in node.inputs:
            if x in defined:
                last[x] = i
        inherited = frozenset() if node in fresh else frozenset().union(
            *(roots[x] for x in node.inputs if x in roots))
        for v in node.outputs:
            defined[v] = last[v] = i
            roots[v] = inherited | {v}
    for v in graph.outputs:
        if v in defined:
            last[v] = END
    ext_last = {v: last[v] for v in defined}
    for v, rs in roots.items():
        for r in rs:
            ext_last[r] = max(ext_last[r], last[v])
    return roots, ext_last


def _in_place_ok(node, prev: Value, v: Value, roots: dict) -> bool:
    """``v`` may overwrite ``prev`` at ``node``: same type, ``prev`` read directly, and no
    other input of the node may alias ``prev`` (a ufunc must not read what it already
    overwrote at another position)."""
    if prev not in node.inputs or prev.shape != v.shape or prev.dtype != v.dtype:
        return False
    return all(x is prev or prev not in roots.get(x, ()) for x in node.inputs)
