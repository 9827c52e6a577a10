"""``save_scan_residuals``: a reverse ``scan`` reads what its forward ``scan`` computed.

The gradient of ``scan`` is a reverse ``scan`` whose body runs the VJP of the forward body
on the carries saved before each step (``saves_carry``). Traced, that body computes the
forward body's values again (an LSTM step's input projection and gates) before it
differentiates them. Where those are nodes the forward body has too, on the same values,
the forward scan can output them stacked over the steps and the reverse scan read them as
extra ``xs``: each step's forward work runs once, as in an unrolled loop, keeping one
value per step, as an unrolled loop does.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from ..graph.ir import is_literal
from ..ops.control import SCAN
from .core import Builder, Report, format_bytes, nbytes, new_scan_body
from .dce import dce


def save_scan_residuals(graph: Graph) -> tuple[Graph, Report]:
    """Make each reverse ``scan`` that recomputes nodes of the forward ``scan`` whose saved
    carries it reads take their values from that forward scan instead.

    A reverse-body node is the same as a forward-body node when it has the same op and
    attrs and its operands are the same: a saved carry read as an ``x`` is the forward
    body's carry input, the same outer tensor scanned or captured by both is the same
    input, and so on through the nodes. The forward body returns the values the rest of
    the reverse body reads, as ys placed before its saved carries; the reverse scan gets
    them as xs after its own, and no longer has the nodes computing them.

    Preserves: types, inputs and outputs, and values (the same ops on the same operands;
    every op is pure). Costs memory: one value per step for each one saved.

    Before::                                       After::

        fwd body(c, x, w):                            fwd body(c, x, w):
          %a = lstm_cell(x, c, ..., w)                  %a = lstm_cell(x, c, ..., w)
          return (a..., c)                              return (a..., a_2, c)
        bwd body(g, c_t, x_t, w):                     bwd body(g, c_t, x_t, a_2_t, w):
          %a = lstm_cell(x_t, c_t, ..., w)              %d = lstm_cell_backward(g, ..., a_2_t)
          %d = lstm_cell_backward(g, ..., a_2)
    """
    report = Report("save_scan_residuals", len(graph.nodes), len(graph.nodes))
    scans = [node for node in graph.nodes if node.op is SCAN]
    saved_by = {out: (node, k) for node in scans if node.attrs.get("saves_carry")
                for k, out in enumerate(node.outputs)}
    plans, forwards = {}, set()
    for node in scans:
        plan = _plan(node, saved_by)
        if plan is not None and plan[0] not in forwards:
            plans[node] = plan
            forwards.add(plan[0])
    if not plans:
        return graph, report
    by_forward = {forward: (backward, pairs)
                  for backward, (forward, pairs, _) in plans.items()}
    b = Builder(graph)
    residuals = {}   # backward node -> the forward scan's stacked residual outputs
    for node in graph.nodes:
        if node in by_forward:
            backward, pairs = by_forward[node]
            stacked = _rebuild_forward(b, node, [fv for _, fv in pairs])
            residuals[backward] = stacked
            report.count("saved", f"{len(pairs)} values of %{node.outputs[0].name}'s body "
                         f"stacked for %{backward.outputs[0].name}'s ("
                         f"{format_bytes(sum(nbytes(v) for v in stacked))} kept): "
                         + ", ".join(f"%{bv.name}" for bv, _ in pairs))
        elif node in plans:
            _, pairs, skipped = plans[node]
            _rebuild_backward(b, node, [bv for bv, _ in pairs], skipped, residuals[node])
        else:
            b.copy(node)
    return b.finish(), report


def _plan(backward: Node, saved_by: dict):
    """``(forward scan, [(reverse-body value, forward-body value), ...], nodes)``: the
    values of ``backward``'s body that its forward scan's body computes too and that the
    rest of the body reads, and the body's nodes the forward body has (all to be dropped);
    None when no value is read."""
    body: Graph = backward.attrs["body_graph"]
    carries, xs = backward.attrs["num_carry"], backward.attrs["num_xs"]
    sources = [saved_by.get(v) for v in backward.inputs[carries:carries + xs]]
    forwards = {s[0] for s in sources if s is not None}
    if len(forwards) != 1:
        return None
    (forward,) = forwards
    if (forward.attrs["reverse"] == backward.attrs["reverse"]
            or forward.attrs["length"] != backward.attrs["length"]):
        return None
    f_carries, f_xs = forward.attrs["num_carry"], forward.attrs["num_xs"]
    first_saved = len(forward.outputs) - f_carries
    f_outer = list(forward.inputs)
    keys: dict = {}          # reverse-body value -> the key of the forward-body input it is
    for i, v in enumerate(backward.inputs):
        if carries <= i < carries + xs and sources[i - carries] is not None:
            k = sources[i - carries][1]
            if k >= first_saved:
                keys[body.inputs[i]] = ("in", k - first_saved)
            continue
        scanned = i < carries + xs
        for j in (range(f_carries, f_carries + f_xs) if scanned
                  else range(f_carries + f_xs, len(f_outer))):
            if i >= carries and f_outer[j] is v:
                keys[body.inputs[i]] = ("in", j)
    forward_nodes, forward_values = _node_keys(forward.attrs["body_graph"])
    matched, nodes = {}, set()
    for node in body.nodes:
        key = _key(node, keys)
        if key is None or key not in forward_nodes:
            continue
        nodes.add(node)
        for v, w in zip(node.outputs, forward_nodes[key].outputs):
            keys[v] = forward_values[w]
            matched[v] = w
    used = {x for node in body.nodes if node not in nodes
            for x in node.inputs if isinstance(x, Value)} | set(body.outputs)
    pairs = [(v, w) for v, w in matched.items() if v in used]
    return (forward, pairs, nodes) if pairs else None


def _node_keys(body: Graph):
    """The forward body's nodes by key, and each value's key."""
    values = {v: ("in", i) for i, v in enumerate(body.inputs)}
    nodes = {}
    for node in body.nodes:
        key = _key(node, values)
        if key is None:
            continue
        nodes.setdefault(key, node)
        for k, v in enumerate(node.outputs):
            values[v] = ("out", key, k)
    return nodes, values


def _key(node: Node, values: dict):
    """What makes two nodes compute the same: op, attrs and operands' keys; None for a
    node with a subgraph attr or an operand without a key."""
    if any(_holds_graph(a) for a in node.attrs.values()):
        return None
    operands = []
    for x in node.inputs:
        if is_literal(x):
            operands.append(("literal", type(x).__name__, repr(x)))
        elif x in values:
            operands.append(values[x])
        else:
            return None
    return node.op, repr(sorted(node.attrs.items())), tuple(operands)


def _holds_graph(attr) -> bool:
    """Whether an attr is or holds a subgraph (whose repr would not say what it computes)."""
    if isinstance(attr, (tuple, list)):
        return any(_holds_graph(a) for a in attr)
    return isinstance(attr, Graph)


def _rebuild_forward(b: Builder, node: Node, saved: list) -> list:
    """The forward scan, its body also returning ``saved`` before its saved carries;
    returns the stacked outputs for them (its old outputs map to the new)."""
    body: Graph = node.attrs["body_graph"]
    first_saved = len(body.outputs) - node.attrs["num_carry"]
    new_body = Builder(body)
    new_body.keep(body.nodes)
    new_body.graph.set_outputs([new_body.get(v) for v in
                                (*body.outputs[:first_saved], *saved,
                                 *body.outputs[first_saved:])])
    outs = b.add(node.op, [b.get(x) for x in node.inputs],
                 {**node.attrs, "body_graph": new_body.graph}, location=node.location)
    old_outer_first = len(node.outputs) - node.attrs["num_carry"]
    kept = [*outs[:old_outer_first], *outs[old_outer_first + len(saved):]]
    b.env.update(zip(node.outputs, kept))
    return list(outs[old_outer_first:old_outer_first + len(saved)])


def _rebuild_backward(b: Builder, node: Node, replaced: list, skipped: set,
                      stacked: list) -> None:
    """The reverse scan, reading ``stacked`` as extra xs whose rows stand for the body's
    ``replaced`` values, without its ``skipped`` nodes (the forward body's)."""
    body: Graph = node.attrs["body_graph"]
    carries, xs = node.attrs["num_carry"], node.attrs["num_xs"]
    new, env = new_scan_body(body, carries, xs, replaced, "_saved")
    for inner in body.nodes:
        if inner in skipped:
            continue
        outs = new.copy_node(inner, [env.get(x, x) for x in inner.inputs])
        env.update(zip(inner.outputs, outs))
    new.set_outputs([env.get(v, v) for v in body.outputs])
    new_body, _ = dce(new)
    inputs = [b.get(x) for x in node.inputs]
    outs = b.add(node.op, [*inputs[:carries + xs], *stacked, *inputs[carries + xs:]],
                 {**node.attrs, "num_xs": xs + len(stacked), "body_graph": new_body},
                 location=node.location)
    b.env.update(zip(node.outputs, outs))
