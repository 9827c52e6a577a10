"""Which node outputs the generated code writes into preallocated buffers.

The passes' memory plan (``plan_memory``) says which values may share a buffer; it counts
aliasing only through ops marked ``view=True``. Here the plan is checked against a stricter
rule before any write is trusted: any node the code generator did not emit itself (a
registry kernel call) may return an array that aliases its inputs (``cast`` to the same
dtype returns its input), so a buffer holding ``r`` stays busy until every value that may
alias ``r`` is dead. A value gets a slot only when

- its node writes fresh memory (a direct ufunc call, a fused kernel, or the kernel of an op
  flagged ``fills_out``, which never returns a view of an input), so ``out=`` works;
- no alias of it is returned to the caller (buffers are reused by the next call), and
- its buffer's previous occupant, with all its aliases, is dead by then; or is overwritten
  in place by an elementwise ufunc reading it, at the same position, for the last time.

Planned values that fail a check simply get fresh memory: correctness first.

``donations`` applies the same rules to *donated inputs*: a training step's new parameter
is written straight into the array of the old one (which the caller would otherwise copy it
into), when nothing reads the old value, or a view of it, afterwards.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Value

END = float("inf")
LINE_BYTES = 64   # a cache line, and an AVX-512 vector


def aligned_empty(n: int, dtype) -> np.ndarray:
    """``np.empty(n, dtype)`` starting on a cache line: a planned buffer's storage.

    malloc puts arrays of 128 kB and more 16 bytes past a line (glibc's mapped chunks), so
    a loop's vector loads and stores of whole rows would each straddle two lines (a 1x1
    conv on a 56x56 or 112x112 plane ran 3-14% longer so, docs/benchmarks.md).

    >>> aligned_empty(40000, np.float32).ctypes.data % LINE_BYTES
    0
    """
    size = n * np.dtype(dtype).itemsize
    raw = np.empty(size + LINE_BYTES, np.uint8)
    start = -raw.ctypes.data % LINE_BYTES
    return raw[start:start + size].view(dtype)


def assign_slots(graph: Graph, plan, fresh: dict) -> list[tuple[Value, int]]:
    """``[(value, buffer id)]`` in node order: the values written into buffers.

    ``plan`` is a ``MemoryPlan``; ``fresh`` maps the nodes that write fresh memory to
    "ufunc", "fused" or "kernel" (only ufunc nodes may overwrite an input in place).
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


def donations(graph: Graph, pairs: dict, fresh: dict) -> dict[Value, Value]:
    """``{output value: input value}`` for the pairs of ``pairs`` (output position -> input
    position) whose output may be written into the input's own array.

    The output's node must write fresh memory (``fresh``), elementwise over the input if it
    reads it (so each element is read before it is overwritten, also through another
    operand that is the same array); no operand of that node may be a view of the input
    (another layout); and nothing may read the input, or anything that may alias it, after
    that node, nor return it. A node the generator did not emit may alias its input when it
    is a view op, or when it has one array operand and returns its type (``cast`` to the
    same dtype returns the input itself); kernels of several arrays (``linear_backward``)
    return new ones."""
    index = {node: i for i, node in enumerate(graph.nodes)}
    outputs = list(graph.outputs)
    donated = {}
    for o, k in pairs.items():
        v, u = outputs[o], graph.inputs[k]
        node = v.producer
        if (node not in fresh or outputs.count(v) != 1 or u in donated.values()
                or tuple(v.shape) != tuple(u.shape) or v.dtype != u.dtype):
            continue
        aliases = {u: "same"}   # values that may alias u: "same" array, or a "view"
        last_reader = -1
        for i, n in enumerate(graph.nodes):
            read = [x for x in n.inputs if isinstance(x, Value) and x in aliases]
            if read:
                last_reader = i
                operands = [x for x in n.inputs if isinstance(x, Value)]
                if n not in fresh:   # a view, or a kernel that returns its input as it is
                    for v_out in n.outputs:
                        if n.op.view:
                            aliases[v_out] = "view"
                        elif len(operands) == 1 and v_out.type == operands[0].type:
                            aliases[v_out] = aliases[operands[0]]
        # at the node, the same array elementwise is fine; a view is another layout
        if (last_reader > index[node] or set(aliases) & set(outputs)
                or any(aliases.get(x) == "view" for x in node.inputs)):
            continue
        donated[v] = u
    return donated
