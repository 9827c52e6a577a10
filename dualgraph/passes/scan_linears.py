"""``batch_scan_linears``: a scan's per-step linears over its xs become one GEMM outside it.

What ``batch_linears`` does for an unrolled loop, for a ``scan``. A recurrent step's input
projection (``linear`` of the step's x and captured weights) does not depend on the carry,
so it can run once over all the rows before the loop; its gradient (``linear_backward``
of a per-step output gradient and the step's x), whose weight and bias gradients the
reverse scan sums in its carry, can run once over all the rows after the loop, as can an
``lstm_cell_backward``'s recurrent weight gradient (``d_gates^T @ h`` per step). BLAS is
much faster on one GEMM of all the rows than on one small GEMM per step, and the loop
keeps less to do in Python per step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import Graph, Node, Value
from ..ops.control import SCAN
from ..ops.elementwise import ADD
from ..ops.linalg import LINEAR, LINEAR_BACKWARD
from ..ops.recurrent import LSTM_CELL_BACKWARD
from .core import Builder, Report, new_scan_body, readers
from .dce import dce


def scan_plans(graph: Graph) -> dict:
    """The precondition, per ``scan`` node: what its body has to move out (a ``_Plan``, see
    ``batch_scan_linears``); empty when no scan has anything."""
    plans = {node: _plan(node) for node in graph.nodes if node.op is SCAN}
    return {node: plan for node, plan in plans.items() if plan}


def batch_scan_linears(graph: Graph, plans: dict, report: Report) -> Graph:
    """Rewrite each scan of ``scan_plans`` so that

    - a body ``linear(x_t, w, b)`` of a scanned row ``x_t`` and captured ``w``, ``b`` is one
      ``linear`` of the whole scanned tensor before the scan, read as an extra xs;
    - a body ``linear_backward(g, x_t, w)`` of a scanned row, a captured weight and a
      per-step ``g``, whose input gradient only becomes a y and whose weight and bias
      gradients are only added into carries (``acc' = acc + dw``), is one
      ``linear_backward`` after the scan over ``g`` stacked as a y: its input gradient is
      the stacked y, its weight and bias gradients are added to the carries' initial
      values, and those carries leave the loop;
    - likewise an ``lstm_cell_backward``, or a ``linear_backward`` whose input gradient
      the loop reads, whose weight and bias gradients are only added into carries stops
      computing them; one ``linear_backward`` of its output gradients and inputs (the gate
      gradients and hidden states), stacked, computes their sums after the scan;
    - a y that is a scanned row, or a hoisted linear, is the whole tensor (no per-step
      copy).

    Scans that save their carries for a gradient (``saves_carry``) get the first and last
    rewrites only (their outputs end with the saved carries). The rule repeats until nothing
    changes: hoisting one linear can make the next one's operand a scanned row.

    Preserves: types, inputs and outputs, and values up to floating-point rounding (the
    weight gradients are summed over all rows in one GEMM instead of step by step).

    Before::

        graph(%acc0: f32[3,5], %gs: f32[4,2,3], %xs: f32[4,2,5], %w: f32[3,5]) {
          %acc: f32[3,5], %dxs: f32[4,2,5] = scan(%acc0, %gs, %xs, %w, body_graph=@body_graph,
              num_carry=1, num_xs=2, length=4, reverse=True)
            @body_graph = graph(%acc: f32[3,5], %g_t: f32[2,3], %x_t: f32[2,5], %w: f32[3,5]) {
              %dx: f32[2,5], %dw: f32[3,5], %db: f32[3] = linear_backward(%g_t, %x_t, %w,
                  need=(True, True, False))
              %total: f32[3,5] = add(%acc, %dw)
              return (%total, %dx)
            }
          return (%acc, %dxs)
        }

    After::

        graph(%acc0: f32[3,5], %gs: f32[4,2,3], %xs: f32[4,2,5], %w: f32[3,5]) {
          %dx_all: f32[4,2,5], %dw_all: f32[3,5], %db_all: f32[3] = linear_backward(%gs, %xs,
              %w, need=(True, True, False))
          %add: f32[3,5] = add(%acc0, %dw_all)
          return (%add, %dx_all)
        }
    """
    b = Builder(graph)
    for node in graph.nodes:
        if node in plans:
            _rewrite(b, node, plans[node], report)
        else:
            b.copy(node)
    graph = dce(b.finish())[0]   # (a gradient moved out that no output reads)
    report.nodes_after = len(graph.nodes)
    return graph


@dataclass
class _Plan:
    """What to move out of one scan's body."""
    body: "_Body"                                   # the scan's body, as analysed
    hoisted: list = field(default_factory=list)     # linear nodes of a scanned row
    sunk: list = field(default_factory=list)        # (linear_backward node, {k: carry})
    weights: list = field(default_factory=list)     # (node, {k: carry}): its weight grads
    row_ys: dict = field(default_factory=dict)      # y position -> a scanned row or hoisted
    dropped: set = field(default_factory=set)       # body nodes that go (the adds too)

    def __bool__(self):
        return bool(self.hoisted or self.sunk or self.weights or self.row_ys)


class _Body:
    """A scan body's parts and who reads each of its values."""

    def __init__(self, node: Node):
        self.graph: Graph = node.attrs["body_graph"]
        c, x = node.attrs["num_carry"], node.attrs["num_xs"]
        self.carries, ins = c, self.graph.inputs
        self.scanned = {v: c + i for i, v in enumerate(ins[c:c + x])}
        self.captured = set(ins[c + x:])
        self.saved = c if node.attrs.get("saves_carry") else 0
        outs = self.graph.outputs
        self.ys = range(c, len(outs) - self.saved)
        self.readers = readers(self.graph)

    def per_step(self, v) -> bool:
        """A value that changes from step to step (not captured, not a literal)."""
        return isinstance(v, Value) and v not in self.captured

    def only_stacked(self, v, plan) -> bool:
        """``v`` is read only as ys, or as the output gradient of nodes ``plan`` sinks."""
        sunk = {inner for inner, _ in plan.sunk}
        return all(r in self.ys if isinstance(r, int) else r in sunk and r.inputs[0] is v
                   for r in self.readers.get(v, []))

    def accumulator(self, v):
        """``(k, add)`` when ``v`` is only added into carry ``k`` (``acc' = acc + v``, the sum
        only returned as carry ``k``, ``acc`` read by nothing else); else None."""
        users = self.readers.get(v, [])
        if len(users) != 1 or isinstance(users[0], int) or users[0].op is not ADD:
            return None
        add = users[0]
        (acc,) = [x for x in add.inputs if x is not v] or [None]
        ins = self.graph.inputs
        if acc not in ins[:self.carries] or self.readers.get(acc) != [add]:
            return None
        k = ins.index(acc)
        return (k, add) if self.readers.get(add.outputs[0]) == [k] else None


def _plan(node: Node):
    body = _Body(node)
    plan = _Plan(body)
    for inner in body.graph.nodes:
        if inner.op is LINEAR and inner.inputs[0] in body.scanned and all(
                x is None or x in body.captured for x in inner.inputs[1:]):
            plan.hoisted.append(inner)
    for inner in ([] if body.saved else reversed(body.graph.nodes)):   # readers first
        need = inner.attrs.get("need")
        if inner.op is LINEAR_BACKWARD:
            g, x, w = inner.inputs
            if x in body.scanned and w in body.captured and body.per_step(g):
                whole = not need[0] or body.only_stacked(inner.outputs[0], plan)
                _take(plan, plan.sunk if whole else plan.weights, body, inner,
                      [k for k in (1, 2) if need[k]])
        elif inner.op is LSTM_CELL_BACKWARD and need[3]:
            if inner.inputs[5] in body.captured and body.per_step(inner.inputs[3]):
                _take(plan, plan.weights, body, inner, [k for k in (3, 4) if need[k]])
    plan.sunk.reverse()   # (in the body's order: one may read another's input gradient)
    for i in body.ys:
        v = body.graph.outputs[i]
        if v in body.scanned or v.producer in plan.hoisted:
            plan.row_ys[i] = v
    return plan or None


def _take(plan: _Plan, into: list, body: _Body, inner: Node, summed: list) -> None:
    """Move ``inner`` (or its weight gradients) when each of its ``summed`` outputs is only
    added into a carry."""
    found = [body.accumulator(inner.outputs[k]) for k in summed]
    if all(found) and (found or into is plan.sunk):   # (a sunk node may sum nothing)
        into.append((inner, {k: carry for k, (carry, _) in zip(summed, found)}))
        plan.dropped |= {add for _, add in found}
        if into is plan.sunk:
            plan.dropped.add(inner)


def _rewrite(b: Builder, node: Node, plan: _Plan, report: Report) -> None:
    """The scan with ``plan`` applied, and the nodes before and after it."""
    body = plan.body
    outer = [b.get(x) for x in node.inputs]
    hoisted = [b.add(LINEAR, [outer[body.scanned[h.inputs[0]]]] +
                     [None if x is None else outer[body.graph.inputs.index(x)]
                      for x in h.inputs[1:]], {}, h.location, [h.outputs[0].name + "_all"])[0]
               for h in plan.hoisted]
    removed = {k for _, carries in plan.sunk + plan.weights for k in carries.values()}
    removed_ys = set(plan.row_ys) | {i for inner, _ in plan.sunk for i in body.ys
                                     if body.graph.outputs[i] is inner.outputs[0]}
    stacked = _stacked_values(body, plan)
    new_body = _new_body(body, plan, removed, removed_ys, stacked)
    c, x = body.carries, len(body.scanned)
    kept = [k for k in range(c) if k not in removed]
    operands, num_xs = _without_unread(
        new_body, [outer[k] for k in kept] + outer[c:c + x] + hoisted + outer[c + x:],
        len(kept), x + len(hoisted))
    outs = b.add("scan", operands, {**node.attrs, "body_graph": new_body,
                                    "num_carry": len(kept), "num_xs": num_xs}, node.location,
                 [node.outputs[k].name for k in kept] + [
                     node.outputs[i].name for i in body.ys if i not in removed_ys]
                 + [v.name + "_rows" for v in stacked]
                 + [v.name for v in node.outputs[len(node.outputs) - body.saved:]])
    outs = iter(outs)
    for k in kept:
        b.env[node.outputs[k]] = next(outs)
    for i in body.ys:
        if i not in removed_ys:
            b.env[node.outputs[i]] = next(outs)
    rows = {v: next(outs) for v in stacked}
    for i in range(len(node.outputs) - body.saved, len(node.outputs)):
        b.env[node.outputs[i]] = next(outs)
    for i, v in plan.row_ys.items():
        b.env[node.outputs[i]] = (outer[body.scanned[v]] if v in body.scanned
                                  else hoisted[plan.hoisted.index(v.producer)])

    sunk_dx = {}

    def whole(v):   # a per-step value over all the steps
        if v in sunk_dx:
            return sunk_dx[v]
        return outer[body.scanned[v]] if v in body.scanned else rows[v]

    def add_to_carry(k, total):
        b.env[node.outputs[k]] = (total if _zeros(b, node.inputs[k]) else
                                  b.add(ADD, [outer[k], total], {}, node.location)[0])

    for inner, carries in plan.sunk:
        g, x_t, w = inner.inputs
        dx, dw, db = b.add(LINEAR_BACKWARD, [whole(g), whole(x_t), outer[
            body.graph.inputs.index(w)]], {"need": inner.attrs["need"]}, inner.location,
                           [v.name + "_all" for v in inner.outputs])
        sunk_dx[inner.outputs[0]] = dx
        for i in body.ys:
            if body.graph.outputs[i] is inner.outputs[0]:
                b.env[node.outputs[i]] = dx
        for k, total in ((1, dw), (2, db)):
            if k in carries:
                add_to_carry(carries[k], total)
        report.count("batched linear gradients", f"linear_backward of %{w.name} in "
                     f"%{node.outputs[0].name}'s body -> %{dx.name} after it")
    for inner, carries in plan.weights:
        g, x_t, w, summed = _weight_gradient(inner)
        _, dw, db = b.add(LINEAR_BACKWARD, [whole(g), whole(x_t),
                                              outer[body.graph.inputs.index(w)]],
                          {"need": (False, True, summed[1] in carries)}, inner.location,
                          ["unused", "d_" + w.name, "d_" + w.name + "_bias"])
        for k, total in zip(summed, (dw, db)):
            if k in carries:
                add_to_carry(carries[k], total)
        report.count("hoisted weight gradients", f"{inner.op.name}'s of %{w.name} in "
                     f"%{node.outputs[0].name}'s body -> %{dw.name} after it")
    for h, y in zip(plan.hoisted, hoisted):
        report.count("hoisted linears", f"linear of %{h.inputs[0].name} in "
                     f"%{node.outputs[0].name}'s body -> %{y.name} before it")
    if plan.row_ys:
        report.count("rows not copied", f"{len(plan.row_ys)} ys of %{node.outputs[0].name} "
                     "that are scanned rows", n=len(plan.row_ys))


def _weight_gradient(inner: Node) -> tuple:
    """``(g, x, w, (weight output, bias output))``: the node's weight gradient is
    ``g^T @ x`` (and its bias gradient ``g`` summed), one step's share."""
    if inner.op is LSTM_CELL_BACKWARD:    # d_gates^T @ h_prev
        return inner.outputs[0], inner.inputs[3], inner.inputs[5], (3, 4)
    return (*inner.inputs, (1, 2))


def _stacked_values(body: _Body, plan: _Plan) -> list:
    """The body values the moved gradients need over all steps, as new ys (once each)."""
    wanted = [inner.inputs[0] for inner, _ in plan.sunk]
    for inner, _ in plan.weights:
        wanted += _weight_gradient(inner)[:2]
    return list(dict.fromkeys(v for v in wanted if v not in body.scanned
                              and v.producer not in plan.dropped))


def _new_body(body: _Body, plan: _Plan, removed: set, removed_ys: set, stacked: list) -> Graph:
    """The body without what moves out: the hoisted linears' values read as new xs, the
    sunk nodes, accumulating adds and ``removed`` carries gone, ``stacked`` returned as ys
    (before the saved carries)."""
    old = body.graph
    new, env = new_scan_body(old, body.carries, len(body.scanned),
                             [h.outputs[0] for h in plan.hoisted], "_t", removed)
    c = body.carries
    weights = {inner: carries for inner, carries in plan.weights}
    for inner in old.nodes:
        if inner in plan.dropped or inner in plan.hoisted:
            continue
        inputs = [env.get(v, v) for v in inner.inputs]
        if inner in weights:
            need = tuple(n and k not in weights[inner] for k, n in
                         enumerate(inner.attrs["need"]))
            outs = new.add_node(inner.op, inputs, {**inner.attrs, "need": need},
                                inner.location, [v.name for v in inner.outputs])
        else:
            outs = new.copy_node(inner, inputs)
        env.update(zip(inner.outputs, outs))
    outputs = [v for i, v in enumerate(old.outputs)
               if not (i < c and i in removed) and i not in removed_ys]
    first_saved = len(outputs) - body.saved
    outputs[first_saved:first_saved] = stacked
    new.set_outputs([env.get(v, v) for v in outputs])
    return dce(new)[0]


def _without_unread(body: Graph, operands: list, carries: int, xs: int) -> tuple[list, int]:
    """Drop the scanned and captured inputs ``body`` (a fresh graph) no longer reads (a
    hoisted linear's row and weights), and their operands; returns the operands left and
    the number of scanned ones."""
    read = {v for inner in body.nodes for v in inner.inputs} | set(body.outputs)
    keep = [i for i, v in enumerate(body.inputs) if i < carries or v in read]
    body.inputs = [body.inputs[i] for i in keep]
    return [operands[i] for i in keep], sum(carries <= i < carries + xs for i in keep)


def _zeros(b: Builder, v) -> bool:
    """Whether old value ``v`` is a constant of zeros (adding to it changes nothing)."""
    array = b.arrays.get(v)
    return array is not None and not array.any()
