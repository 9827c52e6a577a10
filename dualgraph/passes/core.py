"""What every pass shares: the :class:`Report` it returns, the :class:`Builder` that makes a
pass's new graph from the old one (nodes are immutable, so a pass rebuilds, sharing the
nodes it leaves alone), and use counts and sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..graph import Graph, Node, Value, format_node
from ..graph.ir import is_literal
from ..shapes import Sym


@dataclass
class Report:
    """What one pass changed: counts by kind, one line per change, bytes saved.

    ``data`` carries a pass's analysis result (``plan_memory`` puts its plan there);
    ``seconds`` the pass's run time (``run_pipeline`` sets it). ``print(report)`` gives a
    header line and the changes, indented::

        cse: 12 -> 10 nodes (merged 2), 0 B saved, 0.4 ms
          %mul_1 -> %mul
    """
    name: str
    nodes_before: int
    nodes_after: int
    counts: dict = field(default_factory=dict)
    items: list = field(default_factory=list)
    bytes_saved: int = 0
    data: Any = None
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return any(self.counts.values()) or self.nodes_before != self.nodes_after

    def count(self, kind: str, item: str | None = None, n: int = 1) -> None:
        """Record ``n`` changes of ``kind``; ``item`` describes this one."""
        self.counts[kind] = self.counts.get(kind, 0) + n
        if item is not None:
            self.items.append(item)

    def __str__(self):
        kinds = ", ".join(f"{k} {n}" for k, n in self.counts.items() if n)
        head = (f"{self.name}: {self.nodes_before} -> {self.nodes_after} nodes"
                f"{f' ({kinds})' if kinds else ''}, {format_bytes(self.bytes_saved)} saved"
                f"{f', {self.seconds * 1e3:.1f} ms' if self.seconds else ''}")
        return "\n".join([head] + [f"  {line}" for line in self.items])


def format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def describe(node: Node) -> str:
    """A node's printed line without its source location, for report items."""
    return format_node(node).split("    # ")[0]


def numel(shape) -> int:
    """Elements of a shape; a symbolic dim counts as its coefficient (sizes per unit of
    ``B``), so reports stay comparable between graphs with the same symbols."""
    return math.prod(d.coef if isinstance(d, Sym) else d for d in shape)


def nbytes(v: Value) -> int:
    return numel(v.shape) * v.dtype.itemsize


class Builder:
    """Builds a pass's new graph from ``old``, node by node, mapping old values to new ones.

    A node whose operands are unchanged is shared, not copied (``Graph.copy_node``): the
    new graph holds the old node itself, so a pass that rewrites a few nodes of thousands
    costs little more than its analysis. Sharing gives exactly the graph a copy would:
    the same ops, attrs, types, locations and names. Inputs are shared up front (the
    signature never changes); constants (``arrays``: the old graph's, plus any a pass binds
    to old values, as folding does) are added when first read, so constants nothing reads
    are dropped; new nodes keep the names of the values they replace, so printed graphs
    stay comparable. ``env`` maps the old values a pass replaced to their new values; the
    others read so far are in the new graph themselves.
    """

    def __init__(self, old: Graph):
        self.old = old
        self.graph = Graph()
        self.env: dict[Value, Value] = {}
        self.arrays: dict[Value, object] = dict(old.constants)
        for v in old.inputs:
            self.graph.share_input(v)

    def get(self, x):
        """The new operand for an old one (literals pass through)."""
        new = self.env.get(x)
        if new is not None:
            return new
        if is_literal(x) or x in self.graph:   # (a shared value)
            return x
        arr = self.arrays[x]   # a constant read for the first time
        if arr is self.old.constants.get(x) and self.graph.share_constant(x, arr):
            return x
        new = self.env[x] = self.graph.add_constant(arr, name=x.name)
        return new

    def has(self, x) -> bool:
        """Whether old value ``x`` is in the new graph yet (as itself or replaced)."""
        return x in self.env or x in self.graph

    def add(self, op, inputs, attrs, location=None, names=None) -> tuple[Value, ...]:
        """Append a node to the new graph; ``inputs`` are new values or literals."""
        return self.graph.add_node(op, inputs, attrs, location=location, names=names)

    def copy(self, node: Node) -> tuple[Value, ...]:
        """Append ``node`` with its inputs mapped (the node itself when none changed); its
        outputs map to the new ones."""
        outs = self.graph.copy_node(node, [self.get(x) for x in node.inputs])
        if outs is not node.outputs:
            self.env.update(zip(node.outputs, outs))
        return outs

    def keep(self, nodes) -> None:
        """``copy`` each of ``nodes``, in order, when none of them reads a value the pass
        replaced (the nodes before its first change, or all of a pass that only drops or
        reorders nodes): they are shared in sweeps, copied one by one only where sharing
        stops (a constant read for the first time, a name taken)."""
        i = 0
        while i < len(nodes):
            i = self.graph.share_nodes(nodes, i)
            if i < len(nodes):
                self.copy(nodes[i])
                i += 1

    def finish(self) -> Graph:
        self.graph.set_outputs([self.get(v) for v in self.old.outputs])
        return self.graph


def readers(graph: Graph) -> dict:
    """value -> what reads it: each node reading it (once per operand), and for a graph
    output its position among the outputs (an int)."""
    found: dict[Value, list] = {}
    for node in graph.nodes:
        for x in node.inputs:
            if isinstance(x, Value):
                found.setdefault(x, []).append(node)
    for i, v in enumerate(graph.outputs):
        found.setdefault(v, []).append(i)
    return found


def needed(graph: Graph) -> set:
    """The values the outputs need (``simplify`` leaves the nodes it made dead for ``dce``:
    a rule running before ``dce`` must not count their reads)."""
    found = set(graph.outputs)
    for node in reversed(graph.nodes):
        if any(v in found for v in node.outputs):
            found.update(x for x in node.inputs if isinstance(x, Value))
    return found


def live_readers(graph: Graph, live: set | None = None) -> dict:
    """``readers`` among the nodes the outputs need (``live``: :func:`needed`): a node
    any of whose outputs is needed (a layer norm's backward whose input gradient is not,
    while its weight's is)."""
    live = needed(graph) if live is None else live
    return {v: [n for n in users if not isinstance(n, Node)
                or any(o in live for o in n.outputs)]
            for v, users in readers(graph).items()}


def only_reader(read_by: dict, v) -> Node | None:
    """The one node that reads ``v`` (once) where nothing else reads or returns it (in
    ``read_by``: :func:`readers` or :func:`live_readers`); else None."""
    users = read_by.get(v, [])
    return users[0] if len(users) == 1 and isinstance(users[0], Node) else None


def number(graph: Graph, x) -> float | None:
    """``x`` as a float where it is a Python number or a one-element constant of ``graph``
    (an imported model's scalars), else None."""
    if isinstance(x, Value):
        arr = graph.constants.get(x)
        return float(arr.reshape(-1)[0]) if arr is not None and arr.size == 1 else None
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def rebuild(graph: Graph, at: dict, dropped: set, emit) -> Graph:
    """A rewrite's new graph: each node of ``graph`` copied, but those in ``dropped``
    and those keyed in ``at``, at whose place ``emit(builder, node, at[node])`` adds the
    replacement (mapping the old values it replaces in ``builder.env``)."""
    b = Builder(graph)
    for node in graph.nodes:
        if node in at:
            emit(b, node, at[node])
        elif node not in dropped:
            b.copy(node)
    return b.finish()


def merge_into_reader(graph: Graph, matches: list, op, attrs, kind: str,
                      report: Report) -> Graph:
    """Each ``(first, second)`` of ``matches`` (``second`` the one node that reads
    ``first``'s output, as its first input) becomes one ``op`` node at ``second``'s place,
    named as its result: its inputs ``first``'s then ``second``'s others, its attrs
    ``attrs(first, second)``; ``report`` counts each as ``kind``. Returns the new graph."""
    def emit(b, second, first):
        inputs = [b.get(v) for v in (*first.inputs, *second.inputs[1:])]
        (b.env[second.outputs[0]],) = b.add(op, inputs, attrs(first, second), second.location,
                                            [second.outputs[0].name])
        report.count(kind, f"%{first.outputs[0].name} -> %{second.outputs[0].name}")
    new = rebuild(graph, {second: first for first, second in matches},
                  {first for first, _ in matches}, emit)
    report.nodes_after = len(new.nodes)
    return new


def new_scan_body(body: Graph, num_carry: int, num_xs: int, added: list, suffix: str,
                  dropped_carries=()) -> tuple[Graph, dict]:
    """A fresh graph to rebuild a scan's ``body`` in: its carry inputs but
    ``dropped_carries``, its ``num_xs`` scanned inputs, a new scanned input per value of
    ``added`` (named after it with ``suffix``, unique among the body's names), its captured
    inputs and its constants. Returns the graph and a map from each added value (and each
    constant that had to be copied) to its new value; the caller copies the nodes."""
    new, env = Graph(), {}
    for k, v in enumerate(body.inputs[:num_carry + num_xs]):
        if k not in dropped_carries:
            new.share_input(v)
    taken = {v.name for v in (*body.inputs, *body.constants)}
    for v in added:     # (names the inputs shared after these do not have)
        name = v.name + suffix
        while name in taken:
            name += "_"
        taken.add(name)
        env[v] = new.add_input(tuple(v.shape), v.dtype, name=name)
    for v in body.inputs[num_carry + num_xs:]:
        new.share_input(v)
    for v, array in body.constants.items():
        env[v] = v if new.share_constant(v, array) else new.add_constant(array, name=v.name)
    return new, env
