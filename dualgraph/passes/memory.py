"""Memory: liveness, a buffer plan (analysis only) and a schedule that lowers peak memory.

Storage is counted per *root*: a node output that is not a view. A view op's output (op
``view=True``: reshape, permute, expand, slice) shares its input's storage, so it keeps the
root alive instead of needing a buffer. Graph inputs and constants are the caller's memory
and are never planned or written. Symbolic dims count as their coefficient (bytes per unit
of ``B``), so sizes compare between graphs with the same symbols.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import Graph, Node, Value
from ..graph.ir import same_type
from ..shapes import is_static
from .core import Builder, Report, format_bytes, nbytes, numel

END = float("inf")   # the last use of a graph output: it outlives the run


@dataclass
class Liveness:
    """For each root: where it is defined (node index) and last read (END for outputs);
    ``root[v]`` maps every node output (views included) to its root."""
    root: dict
    defined: dict
    last_use: dict

    @classmethod
    def of(cls, graph: Graph, order=None) -> "Liveness":
        """Liveness of ``graph``'s nodes run in ``order`` (default: the graph's order)."""
        root: dict[Value, Value] = {}
        defined, last = {}, {}
        for i, node in enumerate(graph.nodes if order is None else order):
            for x in node.inputs:
                if root.get(x) in defined:   # (a literal or an input has no root)
                    last[root[x]] = i
            base = node.inputs[0] if node.op.view and node.inputs else None
            for v in node.outputs:
                if isinstance(base, Value):
                    root[v] = root.get(base, base)   # a view shares its input's storage
                else:
                    root[v] = v
                    defined[v] = last[v] = i
        for v in graph.outputs:
            if root.get(v) in defined:
                last[root[v]] = END
        return cls({v: r for v, r in root.items() if r in defined}, defined, last)

    def peak(self) -> int:
        """The most bytes of roots alive at once (a root is alive from its node to its last
        read; inputs of a node and its outputs are alive together)."""
        events: dict[float, int] = {}
        for r, i in self.defined.items():
            events[i] = events.get(i, 0) + nbytes(r)
            end = self.last_use[r] + 0.5   # freed after its last reader ran
            events[end] = events.get(end, 0) - nbytes(r)
        live = peak = 0
        for t in sorted(events):
            live += events[t]
            peak = max(peak, live)
        return peak


@dataclass
class MemoryPlan:
    """Buffers and which root value lives in which (views share their root's buffer)."""
    buffers: list = field(default_factory=list)      # (dtype, bytes or shape) per buffer id
    assignment: dict = field(default_factory=dict)   # Value -> buffer id
    inplace: list = field(default_factory=list)      # (output, input) pairs sharing a buffer
    peak_before: int = 0   # every value alive until the end, no reuse
    live_peak: int = 0     # the most bytes alive at once in this order, without in-place
    peak_after: int = 0    # the sum of the planned buffers

    def summary(self) -> str:
        """``memory plan: 3 values in 2 buffers; peak 144 B -> 120 B (...)``: the first line
        of ``str(plan)``."""
        return (f"memory plan: {len(self.assignment)} values in {len(self.buffers)} buffers; "
                f"peak {format_bytes(self.peak_before)} -> {format_bytes(self.peak_after)} "
                f"(live at once, no in-place: {format_bytes(self.live_peak)})")

    def table(self) -> list[tuple]:
        """``(buffer id, dtype name, size, values)`` per buffer, for viewers: the size as
        text (the shape when it is symbolic), the values as ``%b`` or ``%b (in place over
        %a)``, in the order they take the buffer."""
        over = {o: i for o, i in self.inplace}
        values: dict[int, list[str]] = {k: [] for k in range(len(self.buffers))}
        for v, k in self.assignment.items():
            values[k].append(f"%{v.name}" + (f" (in place over %{over[v].name})"
                                             if v in over else ""))
        return [(k, dtype.name, format_bytes(size) if isinstance(size, int) else
                 "[" + ",".join(map(str, size)) + "]", values[k])
                for k, (dtype, size) in enumerate(self.buffers)]

    def __str__(self):
        lines = [self.summary()]
        by_buffer: dict[int, list[str]] = {}
        for v, k in self.assignment.items():
            by_buffer.setdefault(k, []).append(f"%{v.name}")
        for k, names in sorted(by_buffer.items()):
            lines.append(f"  buffer {k}: {', '.join(names)}")
        lines += [f"  in place: %{o.name} overwrites %{i.name}" for o, i in self.inplace]
        return "\n".join(lines)


def plan_in(reports) -> MemoryPlan | None:
    """The memory plan among a pipeline's reports (``run_pipeline``'s), or None (the first
    one: a compiled step's forward graph's, before its backward's)."""
    return next((r.data for r in reports if isinstance(r.data, MemoryPlan)), None)


def plan_memory(graph: Graph) -> tuple[Graph, Report]:
    """Plan buffers for the node outputs (analysis only: the graph is returned unchanged).

    Walking the nodes in order, each root output takes, in this order of preference: the
    buffer of an input of an elementwise op that dies at this node and has exactly its type
    (in place; not when another input is a view of it); the smallest free buffer of its
    dtype that is large enough (the same shape when symbolic); a new buffer. A graph
    output takes no free buffer (it holds its buffer to the end of the run, where a value
    read later might have reused it). A buffer is freed after the last read of the root
    holding it. The plan (``report.data``, a
    MemoryPlan) maps each value to a buffer id.

    Before::                              After (report.data)::

        %a = exp(%x)                          %a -> buffer 0
        %b = neg(%a)                          %b -> buffer 0 (in place over %a)
        %c = sin(%b)                          %c -> buffer 0 (in place over %b)
        return (%c)
    """
    live = Liveness.of(graph)
    plan = MemoryPlan(peak_before=sum(nbytes(r) for r in live.defined),
                      live_peak=live.peak())
    dies_at: dict[int, list[Value]] = {}
    for r, i in live.last_use.items():
        dies_at.setdefault(i, []).append(r)
    free: list[int] = []
    buffer_of: dict[Value, int] = {}
    holder: dict[int, Value] = {}   # buffer id -> the root whose data it holds now
    for i, node in enumerate(graph.nodes):
        donors = _donors(node, live, i)
        for v in node.outputs:
            if live.root.get(v) is not v:
                continue   # a view: its root's buffer
            donor = next((x for x in donors if same_type(x, v)), None)
            if donor is not None:
                donors.remove(donor)
                k = buffer_of[donor]
                plan.inplace.append((v, donor))
            else:   # (an output outlives the run: a free buffer it took would stay taken)
                k = _take(plan, [] if live.last_use[v] == END else free, v)
            buffer_of[v] = k
            holder[k] = v
        for r in dies_at.get(i, ()):
            if holder[buffer_of[r]] is r:
                free.append(buffer_of[r])
    plan.assignment = {v: buffer_of[r] for v, r in live.root.items()}
    plan.peak_after = sum(_buffer_bytes(dtype, size) for dtype, size in plan.buffers)
    report = Report("plan_memory", len(graph.nodes), len(graph.nodes), data=plan,
                    bytes_saved=plan.peak_before - plan.peak_after)
    report.count("buffers", n=len(plan.buffers))
    report.count("in place", n=len(plan.inplace))
    report.items = str(plan).splitlines()
    return graph, report


def _donors(node: Node, live: Liveness, i: int) -> list[Value]:
    """Inputs an elementwise node may overwrite: planned roots read here for the last time,
    and not also read through a view (an elementwise loop must not write what it reads
    at another position). A kernel that fills ``out=`` (op ``fills_out``) writes an array of
    its own: its loops overlap nothing."""
    if node.op.elementwise is None or node.op.fills_out:
        return []
    reads = [live.root[x] for x in node.inputs if x in live.root]
    return [x for x in dict.fromkeys(node.inputs)
            if live.root.get(x) is x and live.last_use[x] == i and
            sum(r is x for r in reads) == sum(y is x for y in node.inputs)]


def _buffer_bytes(dtype, size) -> int:
    return size if isinstance(size, int) else dtype.itemsize * numel(size)


def _take(plan: MemoryPlan, free: list, v: Value) -> int:
    """Best fit among the free buffers of ``v``'s dtype (same shape when symbolic), else a
    new buffer."""
    size = nbytes(v) if is_static(v.shape) else tuple(v.shape)

    def fits(k):
        dtype, have = plan.buffers[k]
        if dtype != v.dtype or isinstance(have, int) != isinstance(size, int):
            return False
        return have >= size if isinstance(size, int) else have == size

    candidates = [k for k in free if fits(k)]
    if candidates:
        k = min(candidates, key=lambda k: _buffer_bytes(*plan.buffers[k]))
        free.remove(k)
        return k
    plan.buffers.append((v.dtype, size))
    return len(plan.buffers) - 1


def schedule(graph: Graph) -> tuple[Graph, Report]:
    """Reorder the nodes to lower the peak of live bytes: a greedy list schedule that, among
    the nodes whose inputs are ready, runs the one that allocates least net of what it
    frees (ties: the original order). The new order is kept only when its peak is lower.

    Preserves: the nodes themselves, a topological order, inputs and outputs, and the
    order among the nodes that communicate (every rank must issue them in the same order).

    Before (peak: %a, %b, %c alive)::     After (peak: two of them)::

        %a = exp(%x)                          %a = exp(%x)
        %b = exp(%y)                          %a2 = sum(%a, ...)
        %c = exp(%z)                          %b = exp(%y)
        %a2 = sum(%a, ...)                    %b2 = sum(%b, ...)
        %b2 = sum(%b, ...)                    ...
    """
    order = _greedy_order(graph)
    before, after = Liveness.of(graph).peak(), Liveness.of(graph, order).peak()
    report = Report("schedule", len(graph.nodes), len(graph.nodes))
    report.items.append(f"peak live bytes {format_bytes(before)} -> "
                        f"{format_bytes(min(before, after))}")
    if after >= before:
        return graph, report
    report.bytes_saved = before - after
    report.count("moved", n=sum(a is not b for a, b in zip(order, graph.nodes)))
    b = Builder(graph)
    b.keep(order)
    return b.finish(), report


def _greedy_order(graph: Graph) -> list[Node]:
    live = Liveness.of(graph)
    index = {node: i for i, node in enumerate(graph.nodes)}
    producer = {v: node for node in graph.nodes for v in node.outputs}
    readers: dict[Value, set] = {}   # root -> nodes still to read it
    waiting, users = {}, {}
    last_communication = None   # communicating nodes keep their order: each waits for the last
    for node in graph.nodes:
        deps = {producer[x] for x in node.inputs if x in producer}
        if node.op.communicates:
            if last_communication is not None:
                deps.add(last_communication)
            last_communication = node
        waiting[node] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(node)
        for x in node.inputs:
            if x in live.root:
                readers.setdefault(live.root[x], set()).add(node)

    def cost(node):
        new = sum(nbytes(v) for v in node.outputs if live.root.get(v) is v)
        freed = {live.root[x] for x in node.inputs if x in live.root}
        return new - sum(nbytes(r) for r in freed
                         if readers[r] == {node} and live.last_use[r] != END)

    ready = [n for n in graph.nodes if not waiting[n]]
    order = []
    while ready:
        node = min(ready, key=lambda n: (cost(n), index[n]))
        ready.remove(node)
        order.append(node)
        for x in node.inputs:
            if x in live.root:
                readers[live.root[x]].discard(node)
        for u in users.get(node, ()):
            waiting[u] -= 1
            if not waiting[u]:
                ready.append(u)
    return order
