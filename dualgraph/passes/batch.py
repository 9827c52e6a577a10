"""``batch_linears``: the per-step linears of a loop over one tensor become one GEMM.

A Python loop that applies a layer to ``x[:, t]`` for every step ``t`` (an RNN's input
projection) traces into one small ``linear`` per step, and autodiff adds one small
``linear_backward`` per step whose weight gradients are then summed. BLAS is much faster
on one GEMM over all the rows. The same holds for a recurrent cell's own weight gradient
(``lstm_cell_backward`` computes ``d_gates^T @ h`` per step): it is hoisted out of the
steps into one GEMM over the concatenated gate gradients and hidden states.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from ..graph.ir import is_literal
from ..ops.elementwise import ADD
from ..ops.linalg import LINEAR, LINEAR_BACKWARD
from ..ops.recurrent import LSTM_CELL_BACKWARD
from ..ops.shape import CAT, RESHAPE, SELECT, SLICE
from .core import Builder, Report, describe, readers


def loop_linear_groups(graph: Graph):
    """The precondition, as ``(forward, backward, recurrent)`` groups (None: none at all):

    - forward: ``linear`` nodes that share a weight and bias and read one position each of
      the same tensor along one dim (``reshape(slice(x, t))``, dropping that dim), distinct
      positions covering at least half of it;
    - backward: their ``linear_backward`` nodes over a contiguous run of positions, when
      each per-step weight and bias gradient is only summed by a tree of ``add``s;
    - recurrent: the ``lstm_cell_backward`` steps of one weight whose weight (and bias)
      gradients are summed that way.
    """
    consumers = readers(graph)
    groups = (_forward_groups(graph), _backward_groups(graph, consumers),
              _recurrent_groups(graph, consumers))
    return groups if any(groups) else None


def batch_linears(graph: Graph, groups: tuple, report: Report) -> Graph:
    """Each forward group of ``loop_linear_groups`` becomes one ``linear`` of the whole
    tensor and a view per step; each backward group one ``linear_backward`` over the
    concatenated output gradients, whose gradients the sum trees' roots now read (the
    per-step input gradients become views of the batched one); each recurrent group its
    steps without their weight gradients and one ``linear_backward`` over the concatenated
    gate gradients and hidden states after the last step.

    Preserves: types, inputs and outputs, and values up to floating-point rounding (the
    weight gradient is summed over all rows in one GEMM instead of per step). Nodes move
    only as far as the batched backward needs: what reads a per-step gradient waits for
    it. A rewrite that would need a step's gradient before it exists is not made (the
    report says so).

    Before::

        graph(%x: f32[2,2,3], %w: f32[4,3], %b: f32[4]) {
          %s0: f32[2,1,3] = slice(%x, index=(None, (0, 1, 1), None))
          %x0: f32[2,3] = reshape(%s0, shape=(2, 3))
          %y0: f32[2,4] = linear(%x0, %w, %b)
          %s1: f32[2,1,3] = slice(%x, index=(None, (1, 2, 1), None))
          %x1: f32[2,3] = reshape(%s1, shape=(2, 3))
          %y1: f32[2,4] = linear(%x1, %w, %b)
          return (%y0, %y1)
        }

    After::

        graph(%x: f32[2,2,3], %w: f32[4,3], %b: f32[4]) {
          %s0: f32[2,1,3] = slice(%x, index=(None, (0, 1, 1), None))
          %x0: f32[2,3] = reshape(%s0, shape=(2, 3))
          %y0_all: f32[2,2,4] = linear(%x, %w, %b)
          %slice: f32[2,1,4] = slice(%y0_all, index=(None, (0, 1, 1), None))
          %y0: f32[2,4] = reshape(%slice, shape=(2, 4))
          %s1: f32[2,1,3] = slice(%x, index=(None, (1, 2, 1), None))
          %x1: f32[2,3] = reshape(%s1, shape=(2, 3))
          %slice_1: f32[2,1,4] = slice(%y0_all, index=(None, (1, 2, 1), None))
          %y1: f32[2,4] = reshape(%slice_1, shape=(2, 4))
          return (%y0, %y1)
        }
    """
    new = _Rewriter(graph, *groups, report).run()
    if new is None:
        report.counts.clear()
        report.items = ["declined: a batched gradient would be needed before it exists"]
        return graph
    report.nodes_after = len(new.nodes)
    return new


def _step_of(x):
    """``(source, dim, position)`` when ``x = reshape(slice(source, one position along
    dim))`` with that dim dropped, or ``select(source, dim, position)`` (not the last dim:
    the features); else None."""
    reshape = x.producer if isinstance(x, Value) else None
    if reshape is not None and reshape.op is SELECT:
        src, d = reshape.inputs[0], reshape.attrs["dim"]
        return (src, d, reshape.attrs["index"]) if d != src.ndim - 1 else None
    if reshape is None or reshape.op is not RESHAPE:
        return None
    sliced = reshape.inputs[0].producer
    if sliced is None or sliced.op is not SLICE:
        return None
    src, index = sliced.inputs[0], sliced.attrs["index"]
    picked = [(d, r) for d, r in enumerate(index) if r is not None]
    if len(picked) != 1:
        return None
    d, (start, stop, _) = picked[0]
    dropped = tuple(src.shape[:d]) + tuple(src.shape[d + 1:])
    if stop - start != 1 or d == src.ndim - 1 or tuple(x.shape) != dropped:
        return None
    return src, d, start


def _covering(steps: list, size) -> bool:
    """Positions that are distinct, at least two, and cover most of the dim (a batched
    GEMM computes every position of it)."""
    positions = [p for p, _ in steps]
    return (len(steps) >= 2 and len(set(positions)) == len(positions)
            and isinstance(size, int) and 2 * len(steps) >= size)


def _step_groups(graph: Graph, op, x_at: int, key) -> dict[tuple, list]:
    """The ``op`` nodes whose operand ``x_at`` is one step of a tensor, grouped by
    ``(source, dim) + key(node)``, as ``(position, node)`` pairs sorted by position."""
    groups: dict[tuple, list] = {}
    for node in graph.nodes:
        if node.op is op:
            step = _step_of(node.inputs[x_at])
            if step is not None:
                src, d, pos = step
                groups.setdefault((src, d) + key(node), []).append((pos, node))
    return {k: sorted(steps, key=lambda s: s[0]) for k, steps in groups.items()}


def _forward_groups(graph: Graph) -> list[list]:
    groups = _step_groups(graph, LINEAR, 0, lambda node: tuple(node.inputs[1:]))
    return [steps for (src, d, *_), steps in groups.items() if _covering(steps, src.shape[d])]


def _backward_groups(graph: Graph, consumers: dict) -> list[tuple]:
    """``(steps, weight-gradient root, bias-gradient root)`` per batchable group."""
    groups = _step_groups(graph, LINEAR_BACKWARD, 1,
                          lambda node: (node.inputs[2], node.attrs["need"]))
    found = []
    for (src, d, _, need), steps in groups.items():
        first = steps[0][0]
        contiguous = [p for p, _ in steps] == list(range(first, first + len(steps)))
        if not (contiguous and _covering(steps, src.shape[d])):
            continue
        roots = [_sum_tree([n.outputs[k] for _, n in steps], consumers) if need[k] else None
                 for k in (1, 2)]
        unneeded_read = any(not need[k] and consumers.get(n.outputs[k])
                            for k in range(3) for _, n in steps)
        if all(r is not None for r, k in zip(roots, (1, 2)) if need[k]) and not unneeded_read:
            found.append((steps, *roots))
    return found


def _recurrent_groups(graph: Graph, consumers: dict) -> list[tuple]:
    """``(nodes, weight-gradient root, bias-gradient root)`` for the ``lstm_cell_backward``
    steps of one weight whose weight (and bias) gradients are only summed."""
    groups: dict[tuple, list] = {}
    for node in graph.nodes:
        if node.op is LSTM_CELL_BACKWARD and node.attrs["need"][3]:
            key = (node.inputs[5], node.attrs["need"][4])
            groups.setdefault(key, []).append(node)
    found = []
    for (_, bias), nodes in groups.items():
        roots = [_sum_tree([n.outputs[k] for n in nodes], consumers) for k in (3, 4)]
        if roots[0] is not None and (roots[1] is not None or not bias):
            found.append((nodes, roots[0], roots[1] if bias else None))
    return found


def _sum_tree(leaves: list, consumers: dict):
    """The root of a tree of ``add`` nodes summing exactly ``leaves``, each leaf and inner
    sum read by that tree only; None when there is no such tree."""
    inside, consumed = set(leaves), set()
    grew = True
    while grew:
        grew = False
        for v in list(inside - consumed):
            users = consumers.get(v, [])
            if len(users) != 1 or isinstance(users[0], int) or users[0].op is not ADD:
                continue
            a, b = users[0].inputs
            if (a is not b and a in inside and b in inside and a not in consumed
                    and b not in consumed and all(len(consumers[x]) == 1 for x in (a, b))):
                consumed |= {a, b}
                inside.add(users[0].outputs[0])
                grew = True
    roots = inside - consumed
    return roots.pop() if len(roots) == 1 and len(leaves) > 1 else None


class _Rewriter:
    """Copies the graph with the groups rewritten; a node whose operands are not there yet
    (a per-step gradient of a batched backward) waits until they are."""

    def __init__(self, graph, forward, backward, hoisted, report):
        self.graph, self.report = graph, report
        self.b = Builder(graph)
        self.forward = {node: steps for steps in forward for _, node in steps}
        self.batched: dict[int, Value] = {}           # id(group) -> the batched linear
        self.backward = {node: group for group in backward for _, node in group[0]}
        self.seen: dict[int, int] = {}                # id(group) -> its nodes reached
        self.hoisted = {node: group for group in hoisted for node in group[0]}
        # a value a backward group concatenates -> (the group, its position, the dim), so
        # that a recurrent group over the same gate gradients concatenates them the same way
        self.positions = {n.inputs[0]: (id(steps), pos, _step_of(steps[0][1].inputs[1])[1])
                          for steps, *_ in backward for pos, n in steps}
        self.dropped = set()                          # the sum trees' adds
        trees = [([n for _, n in steps], roots, (1, 2)) for steps, *roots in backward]
        trees += [(nodes, roots, (3, 4)) for nodes, *roots in hoisted]
        for nodes, roots, outputs in trees:
            for root, k in zip(roots, outputs):
                if root is not None:
                    self.dropped |= _tree_adds(root, {n.outputs[k] for n in nodes})

    def run(self):
        pending: list[Node] = []
        for node in self.graph.nodes:
            pending.append(node)
            pending = self._flush(pending)
        return None if pending else self.b.finish()

    def _flush(self, pending):
        progress = True
        while progress:
            progress = False
            for node in list(pending):
                if self._ready(node):
                    pending.remove(node)
                    self._emit(node)
                    progress = True
        return pending

    def _ready(self, node) -> bool:
        if node in self.dropped:
            return True
        if node in self.backward:   # the last step of a group needs every step's operands
            group = self.backward[node]
            steps = group[0]
            if self.seen.get(id(group), 0) + 1 < len(steps):
                return True
            needed = [n.inputs[0] for _, n in steps] + [_step_of(node.inputs[1])[0],
                                                        node.inputs[2]]
            return all(self._available(x) for x in needed)
        return all(self._available(x) for x in node.inputs)

    def _available(self, x) -> bool:
        return is_literal(x) or self.b.has(x) or x in self.b.arrays

    def _emit(self, node):
        if node in self.dropped:
            return
        if node in self.forward:
            return self._forward_step(node)
        if node in self.backward:
            return self._backward_step(node)
        if node in self.hoisted:
            return self._recurrent_step(node)
        self.b.copy(node)

    def _forward_step(self, node):
        steps = self.forward[node]
        src, d, pos = _step_of(node.inputs[0])
        y = self.batched.get(id(steps))
        if y is None:
            weights = [self.b.get(x) for x in node.inputs[1:]]
            (y,) = self.b.add(LINEAR, [self.b.get(src)] + weights, {}, node.location,
                              [node.outputs[0].name + "_all"])
            self.batched[id(steps)] = y
            self.report.count("batched linears", f"{len(steps)} x {describe(node)} -> "
                                                 f"%{y.name}", n=len(steps))
        self.b.env[node.outputs[0]] = self._step_view(y, d, pos, node.outputs[0], node)

    def _step_view(self, whole, d, pos, like, node):
        index = tuple((pos, pos + 1, 1) if i == d else None for i in range(whole.ndim))
        (part,) = self.b.add(SLICE, [whole], {"index": index}, node.location)
        (view,) = self.b.add(RESHAPE, [part], {"shape": tuple(like.shape)}, node.location,
                             [like.name])
        return view

    def _backward_step(self, node):
        group = self.backward[node]
        steps, w_root, b_root = group
        self.seen[id(group)] = self.seen.get(id(group), 0) + 1
        if self.seen[id(group)] < len(steps):
            return   # the batched node comes with the group's last step
        src, d, first = _step_of(steps[0][1].inputs[1])
        grads = self._stacked([n.inputs[0] for _, n in steps], d, node.location)
        x = self.b.get(src)
        if len(steps) != src.shape[d]:
            index = tuple((first, first + len(steps), 1) if i == d else None
                          for i in range(src.ndim))
            (x,) = self.b.add(SLICE, [x], {"index": index}, node.location)
        need = node.attrs["need"]
        dx, dw, db = self.b.add(LINEAR_BACKWARD, [grads, x, self.b.get(node.inputs[2])],
                                {"need": need}, node.location,
                                [v.name + "_all" for v in node.outputs])
        if need[0]:
            for pos, n in steps:
                self.b.env[n.outputs[0]] = self._step_view(dx, d, pos - first, n.outputs[0],
                                                           n)
        for root, value in ((w_root, dw), (b_root, db)):
            if root is not None:
                self.b.env[root] = value
        self.report.count("batched linear gradients",
                          f"{len(steps)} x linear_backward of %{node.inputs[2].name} -> "
                          f"%{dx.name}", n=len(steps))

    def _stacked(self, values: list, d: int, location):
        """``values`` (old values, one per step) stacked along a new dim ``d``."""
        parts = [self.b.add(RESHAPE, [self.b.get(v)],
                            {"shape": tuple(v.shape[:d]) + (1,) + tuple(v.shape[d:])},
                            location)[0] for v in values]
        return self.b.add(CAT, parts, {"dim": d}, location)[0]

    def _recurrent_step(self, node):
        """The step without its weight gradients; after the group's last step, the one GEMM
        for them all."""
        group = self.hoisted[node]
        nodes, w_root, b_root = group
        need = node.attrs["need"][:3] + (False, False)
        outs = self.b.add(node.op, [self.b.get(x) for x in node.inputs], {"need": need},
                          node.location, [v.name for v in node.outputs])
        self.b.env.update(zip(node.outputs, outs))
        self.seen[id(group)] = self.seen.get(id(group), 0) + 1
        if self.seen[id(group)] < len(nodes):
            return
        places = [self.positions.get(n.outputs[0]) for n in nodes]
        joined = _joined_order(self.graph, nodes)
        if joined or (all(places) and len({group for group, _, _ in places}) == 1):
            # stacked as the input projection's gradient stacks the same gate gradients
            # (one concatenation after cse), the hidden states in the same order
            order, d = joined or (
                [n for _, n in sorted(zip([pos for _, pos, _ in places], nodes))],
                places[0][2])
            gates = self._stacked([n.outputs[0] for n in order], d, node.location)
            hidden = self._stacked([n.inputs[3] for n in order], d, node.location)
        else:
            (gates,) = self.b.add(CAT, [self.b.get(n.outputs[0]) for n in nodes],
                                  {"dim": 0}, node.location)
            (hidden,) = self.b.add(CAT, [self.b.get(n.inputs[3]) for n in nodes],
                                   {"dim": 0}, node.location)
        _, dw, db = self.b.add(LINEAR_BACKWARD, [gates, hidden, self.b.get(node.inputs[5])],
                               {"need": (False, True, b_root is not None)}, node.location,
                               ["unused", "d_" + node.inputs[5].name, "d_bias"])
        self.b.env[w_root] = dw
        if b_root is not None:
            self.b.env[b_root] = db
        self.report.count("hoisted recurrent weight gradients",
                          f"{len(nodes)} x {node.op.name} of %{node.inputs[5].name} -> "
                          f"%{dw.name}", n=len(nodes))


def _joined_order(graph: Graph, nodes: list):
    """``(steps, dim)`` where a ``cat`` already stacks the steps' gate gradients along a
    new ``dim`` (a layer's input projection over the whole sequence: its per-step views'
    gradients, joined by ``simplify``), the steps in its order; else None."""
    step_of = {n.outputs[0]: n for n in nodes}
    for cat in graph.nodes:
        if cat.op is not CAT or len(cat.inputs) != len(nodes):
            continue
        d, order = cat.attrs["dim"], []
        for x in cat.inputs:
            src = x.producer if isinstance(x, Value) else None
            g = src.inputs[0] if src is not None and src.op is RESHAPE else None
            if g in step_of and tuple(x.shape) == tuple(g.shape[:d]) + (1,) + tuple(
                    g.shape[d:]):
                order.append(step_of[g])
        if len(set(order)) == len(nodes):
            return order, d
    return None


def _tree_adds(root: Value, leaves: set) -> set:
    """The add nodes of the sum tree under ``root``."""
    adds, todo = set(), [root]
    while todo:
        v = todo.pop()
        if v in leaves:
            continue
        adds.add(v.producer)
        todo += [x for x in v.producer.inputs if isinstance(x, Value)]
    return adds
