"""Elementwise fusion (grouping): connected elementwise ops of one shape, plus an optional
trailing reduction (an op with ``reduction``) or row epilogue (an op with ``row_epilogue``:
LayerNorm over the last dim), become one ``fused`` node holding the group as a subgraph.

This pass only decides the groups; the ``fused`` kernel runs a group with the interpreter
until the code generator compiles each group into one loop.
"""
from __future__ import annotations

import heapq
import math
import re

from ..graph import Graph, Node, Value
from ..kernels import PARALLEL_MIN
from ..ops import fused as fused_ops
from ..shapes import Sym
from .core import Builder, Report, nbytes

# A group whose every value is read outside it keeps nothing in registers: its loop writes
# all that NumPy's calls would, and saves only re-reading values still in cache. When its
# arithmetic runs at memory speed in NumPy too, fusing it saves nothing while each kernel
# adds a compile into a cold cache (a first call waits for it): such a group is left
# unfused below this many elements (from there on values leave the cache, and fused loops
# run on threads). docs/passes.md has the measurements.
UNFUSED_BELOW = PARALLEL_MIN
# The functions of scalar expressions NumPy evaluates at memory speed, besides operators.
# (exp, tanh and the like stay fused: with fast_math a fused loop evaluates them ~10x faster
# than NumPy.)
_MEMORY_SPEED = frozenset({"where", "maximum", "minimum", "absolute"})
_CALL = re.compile(r"(\w+)\(")


def fuse_elementwise(graph: Graph) -> tuple[Graph, Report]:
    """Replace each maximal connected group of two or more elementwise ops with the same
    output shape (their inputs may broadcast), optionally ending in one reduction, by one
    ``fused`` node whose ``graph`` attr is the group.

    Preserves: every value used outside a group (the fused node returns each member output
    read by another node or returned by the graph, so a group may have several outputs),
    types, inputs and outputs. Groups never create a cycle (a node joins a group only when
    no path leaves the group and comes back to it), and nodes are reordered only as far as
    placing each fused node needs. A group whose values nothing reads is dropped; one
    whose every value is read outside it, computing only arithmetic NumPy runs at memory
    speed, on fewer than ``UNFUSED_BELOW`` elements, is left as it is (fused, it would save
    no memory traffic, only add a compile).

    Before::                              After::

        %a = mul(%x, 2.0)                     %s = fused(%x, %y, graph=@graph)
        %b = add(%a, %y)                        @graph = graph(%x, %y) {
        %s = sum(%b, dims=(0,), ...)              %a = mul(%x, 2.0)
        return (%s)                               %b = add(%a, %y)
                                                  %s = sum(%b, dims=(0,), ...)
                                                  return (%s)
                                                }
                                              return (%s)
    """
    report = Report("fuse_elementwise", len(graph.nodes), len(graph.nodes))
    groups = [g for g in _find_groups(graph) if len(g) > 1]
    b = Builder(graph)
    consumers = _consumers(graph)
    group_of = {i: n for n, members in enumerate(groups) for i in members}
    for item in _order(graph, groups, group_of):
        if item[0] not in group_of:
            b.copy(graph.nodes[item[0]])
            continue
        nodes = [graph.nodes[i] for i in item]
        ops = ", ".join(n.op.name for n in nodes)
        if _keeps_nothing(nodes, set(item), consumers, set(graph.outputs)):
            for n in nodes:
                b.copy(n)
            report.count("groups left unfused (every value read outside)",
                         f"{len(nodes)} nodes ({ops}) left unfused")
            continue
        outs = _emit_group(b, nodes, set(item), consumers, set(graph.outputs))
        if not outs:
            report.count("unused groups dropped", n=1)
            continue
        report.count("groups", f"{len(nodes)} nodes ({ops}) -> "
                               f"{', '.join('%' + v.name for v in outs)}")
        report.count("nodes fused", n=len(nodes))
        kept = set(outs)
        inner = [v for n in nodes for v in n.outputs if v not in kept]
        report.bytes_saved += sum(nbytes(v) for v in inner)
    report.nodes_after = len(b.graph.nodes)
    return b.finish(), report


def _keeps_nothing(nodes: list, members: set, consumers: dict, graph_outputs: set) -> bool:
    """Whether every value of the group is read outside it (or returned), its elementwise
    members all run at memory speed in NumPy, and it is smaller than ``UNFUSED_BELOW``
    elements (see there)."""
    if not all(n.op.elementwise is None or set(_CALL.findall(n.op.elementwise)) <= _MEMORY_SPEED
               for n in nodes):
        return False
    values = [v for n in nodes for v in n.outputs]
    if any(v not in graph_outputs and consumers.get(v) and consumers[v] <= members
           for v in values):   # (read inside only; a value nobody reads keeps nothing)
        return False
    read = [x for n in nodes for x in n.inputs if isinstance(x, Value)]
    sizes = [math.inf if any(isinstance(d, Sym) for d in v.shape) else math.prod(v.shape)
             for v in values + read]   # (a symbolic dim: a batch size, taken as large)
    return max(sizes) < UNFUSED_BELOW


def _kind(node: Node) -> str | None:
    """How ``node`` may join a group: "elementwise", or end it as its one "reduction" (the
    reduction's input has the group's shape, so a generated loop accumulates while it
    computes the elementwise part) or "norm" (a row epilogue: each row of the group's
    result normalised right after it is computed); None: it stays alone."""
    op = node.op
    if (op.row_epilogue is not None and isinstance(node.inputs[0], Value)
            and op.row_epilogue.applies(*node.inputs, **node.attrs)):
        return "norm"
    if op.num_outputs != 1:
        return None
    if op.elementwise is not None:
        return "elementwise"
    if op.reduction is not None and sum(isinstance(x, Value) for x in node.inputs) == 1:
        return "reduction"
    return None


def _find_groups(graph: Graph) -> list[list[int]]:
    """Node indices of each group (singletons included), in node order."""
    grouper = _Grouper()
    for i, node in enumerate(graph.nodes):
        grouper.add(i, node)
    return grouper.groups()


class _Grouper:
    """Greedy grouping in node order, with union-find over group ids.

    Legality: a group must be convex (no path from the group through outside nodes back into
    it), else the fused node would depend on itself. So a node may join the groups S only if
    none of its inputs from outside S, and no group of S, depends on a group in S.

    A fused node reads every member's outside inputs, so a group gains dependencies after
    its values were read: when a member joins (``%b`` below makes ``H`` read ``A``, after
    ``%s`` was read) or groups merge; whatever depends on the group then depends on them
    too. Asking what ``%s`` depended on when it was added let ``%e`` join ``A``, and the two
    fused nodes read each other::

        %a = neg(%x0)          # A: f32[2,1]
        %h = exp(%x1)          # H: f32[2,4]
        %s = sum(%h, ...)      # H's reduction: f32[2,1]
        %b = add(%h, %a)       # joins H
        %e = mul(%a, %s)       # may not join A: %s depends on A through H

    So the group-level reachability is kept exact as groups grow and merge (sets of group
    ids as int bitmasks): ``up[g]`` holds the groups ``g`` depends on now, ``down[g]`` those
    that depend on ``g`` now, ``ids[g]`` the ids merged into ``g``. A value's ``anc`` is the
    groups it depended on when it was added; every path from it to a group passes one of
    them first, so it depends on S now if ``anc`` meets S or what depends on S.
    """

    def __init__(self):
        self.parent: list[int] = []               # group id -> the id it merged into
        self.members: dict[int, list[int]] = {}   # root -> node indices
        self.shape: dict[int, tuple] = {}
        self.reduced: dict[int, frozenset] = {}  # group -> the outputs of its one reduction
        #                                          or LayerNorm (nothing in it reads them)
        self.ids: dict[int, int] = {}             # root -> the ids merged into it (bitmask)
        self.up: dict[int, int] = {}              # root -> groups it depends on (bitmask)
        self.down: dict[int, int] = {}            # root -> groups depending on it (bitmask)
        self.group: dict[Value, int] = {}       # grouped node output -> group id (find() it)
        self.anc: dict[Value, int] = {}         # value -> groups it depended on when added

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            g = self.parent[g]
        return g

    def roots(self, mask: int) -> set[int]:
        """The groups (roots) whose ids are in ``mask``."""
        text = bin(mask)   # (finding the ones in the text beats shifting a long int)
        top = len(text) - 1
        out = set()
        i = text.find("1", 2)
        while i >= 0:
            out.add(self.find(top - i))
            i = text.find("1", i + 1)
        return out

    def add(self, i: int, node: Node) -> None:
        values = [x for x in node.inputs if isinstance(x, Value)]
        group = self.group
        # (value, its group or None), the groups as they are before this node joins any
        owners = [(u, self.find(group[u]) if u in group else None) for u in values]
        kind = _kind(node)
        joined = None
        if kind is not None:
            wanted = node.outputs[0].shape if kind == "elementwise" else values[0].shape
            sources = owners if kind == "elementwise" else owners[:1]
            # a group has one reduction (or norm), and nothing in it reads its results
            candidates = {g for _, g in sources if g is not None and self.shape[g] == wanted
                          and (g not in self.reduced or kind == "elementwise"
                               and self.reduced[g].isdisjoint(values))}
            joined = self.join(candidates, owners)
            if joined is None and kind == "elementwise":
                joined = len(self.parent)
                self.parent.append(joined)
                self.members[joined], self.shape[joined] = [], wanted
                self.ids[joined], self.up[joined], self.down[joined] = 1 << joined, 0, 0
        anc = self.anc
        deps = 0
        for u in values:
            deps |= anc.get(u, 0)
        if joined is not None:
            for u, g in owners:
                if u in anc and (g is None or self.find(g) != joined):
                    self.read(joined, anc[u])
            for v in node.outputs:
                group[v] = joined
            self.members[joined].append(i)
            if kind in ("reduction", "norm"):
                self.reduced[joined] = frozenset(node.outputs)
            deps |= 1 << joined
        for v in node.outputs:
            anc[v] = deps

    def read(self, g: int, anc: int) -> None:
        """Group ``g`` now reads a value that depended on the groups ``anc`` when added:
        ``g``, and every group depending on it, depends on those and what they depend on."""
        new = anc & ~self.up[g]
        if not new:   # (``up`` is closed: it holds what its groups depend on)
            return
        reach = new
        for r in self.roots(new):
            reach |= self.ids[r] | self.up[r]
        below = self.ids[g] | self.down[g]
        for r in self.roots(below):
            self.up[r] |= reach
        for r in self.roots(reach):
            self.down[r] |= below

    def legal(self, groups: set, owners) -> bool:
        """May the groups ``groups`` merge, for a node reading ``owners`` ((value, group)
        pairs)?"""
        if len(groups) > 1 and len(self.reduced.keys() & groups) > 1:
            return False
        ids = below = 0
        for g in groups:
            ids |= self.ids[g]
            below |= self.down[g]
        if any(self.up[g] & ids for g in groups):
            return False
        below |= ids   # what depends on a group of ``groups``, and those groups
        return not any(g not in groups and self.anc.get(u, 0) & below for u, g in owners)

    def join(self, candidates: set, owners) -> int | None:
        """Merge the candidates (for a node reading ``owners``: (value, group) pairs) into
        one group if legal, else take the first legal single candidate; the group id, or
        None."""
        if len(candidates) == 1:   # (the common case: no merge to consider)
            return next(iter(candidates)) if self.legal(candidates, owners) else None
        options = [candidates] if len(candidates) > 1 else []
        options += [{g} for g in sorted(candidates)]
        for groups in options:
            if self.legal(groups, owners):
                root, *rest = sorted(groups)
                for g in rest:
                    self.parent[g] = root
                    self.members[root] += self.members.pop(g)
                    for table in (self.ids, self.up, self.down):
                        table[root] |= table.pop(g)
                    if g in self.reduced:
                        self.reduced[root] = self.reduced.pop(g)
                if rest:   # what depended on one of them depends on all, and on theirs
                    ids, up, down = self.ids[root], self.up[root], self.down[root]
                    for r in self.roots(down):
                        self.up[r] |= ids | up
                    for r in self.roots(up):
                        self.down[r] |= ids | down
                return root
        return None

    def groups(self) -> list[list[int]]:
        return sorted(sorted(m) for m in self.members.values())


def _consumers(graph: Graph) -> dict[Value, set]:
    """value -> indices of the nodes that read it."""
    out: dict[Value, set] = {}
    for i, node in enumerate(graph.nodes):
        for x in node.inputs:
            if isinstance(x, Value):
                out.setdefault(x, set()).add(i)
    return out


def _order(graph: Graph, groups, group_of: dict):
    """Lone nodes and groups, as lists of node indices, in a topological order close to the
    original: each is ready once what it reads is placed; the earliest ready one goes next.
    (A group sits where all its inputs exist, which may be after nodes that came between
    its members.)"""
    items = [[i] if i not in group_of else groups[group_of[i]]
             for i in range(len(graph.nodes))
             if i not in group_of or groups[group_of[i]][0] == i]
    owner = {v: k for k, item in enumerate(items) for i in item
             for v in graph.nodes[i].outputs}
    users: list[list[int]] = [[] for _ in items]
    waiting = []
    for k, item in enumerate(items):
        deps = {owner[x] for i in item for x in graph.nodes[i].inputs
                if isinstance(x, Value) and x in owner} - {k}
        waiting.append(len(deps))
        for d in deps:
            users[d].append(k)
    ready = [(item[0], k) for k, item in enumerate(items) if not waiting[k]]
    heapq.heapify(ready)
    placed = 0
    while ready:
        _, k = heapq.heappop(ready)
        yield items[k]
        placed += 1
        for u in users[k]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (items[u][0], u))
    # Groups are convex, so the items form a DAG; were they a cycle, its items would never
    # be ready and be dropped without a word (their outputs then missing from the graph).
    if placed != len(items):
        stuck = [graph.nodes[items[k][0]].outputs[0].name for k in range(len(items))
                 if waiting[k]]
        raise AssertionError(f"fuse_elementwise: groups read each other (a cycle through "
                             f"%{', %'.join(stuck)})")


def _emit_group(b: Builder, nodes: list, members: set, consumers: dict,
                graph_outputs: set) -> list[Value]:
    """Add one fused node for ``nodes`` (indices ``members``); returns the old values it
    now defines."""
    produced = {v for n in nodes for v in n.outputs}
    inputs = list(dict.fromkeys(x for n in nodes for x in n.inputs
                                if isinstance(x, Value) and x not in produced))
    outs = [v for n in nodes for v in n.outputs
            if v in graph_outputs or not consumers.get(v, members) <= members]
    if not outs:   # nothing reads the group (no dce ran before): it is dropped
        return outs
    sub = Graph()
    # Graph inputs and constants (no producer) can be the subgraph's inputs themselves, so
    # the members reading only them and each other are shared, not copied (a graph of
    # thousands of tiny ops on one input is one group); a node output becomes a new input.
    env = {}   # outer value -> what the members read instead
    for u in inputs:
        if u.producer is None:
            sub.share_input(u)
        else:
            env[u] = sub.add_input(u.shape, u.dtype, name=u.name)
    k = 0
    while k < len(nodes):
        k = sub.share_nodes(nodes, k)   # (the members reading nothing replaced, in sweeps)
        if k < len(nodes):
            n = nodes[k]
            args = [env.get(x, x) if isinstance(x, Value) else x for x in n.inputs]
            env.update(zip(n.outputs, sub.copy_node(n, args)))   # (types known: no re-infer)
            k += 1
    sub.set_outputs([env.get(v, v) for v in outs])
    new = b.add(fused_ops.FUSED, [b.get(u) for u in inputs], {"graph": sub},
                nodes[-1].location, [v.name for v in outs])
    b.env.update(zip(outs, new))
    return outs
