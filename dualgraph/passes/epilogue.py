"""The ``conv_epilogue`` and ``linear_epilogue`` lowering rules: a convolution (a linear
layer), its activation and a residual add become one ``conv2d_epilogue``
(``linear_epilogue``; ``ops/epilogue.py``), whose kernel applies the bias, the residual and
the activation to the layer's output in one pass, in place.

The precondition, per ``conv2d`` (``linear``) node, along the chain from its output: an optional
residual ``add`` of a value of the same type (``r``: the chain value is read by the add
only), then an optional activation (below), then, where there was no residual before it,
an optional residual ``add`` after it; at least one of them. Each value of the chain but
the last is read only inside the chain (not by other nodes, not returned), so nothing
else needs it. The activations, as the graph spells them after ``simplify``:

- ``relu(y)``; ``sigmoid(y)``; ``gelu(y)`` (exact or tanh);
- clamp (ReLU6, hardtanh): ``minimum(maximum(y, lo), hi)`` or either alone;
- hard-sigmoid: ``minimum(maximum(y + 3, 0), 6) / 6`` (torch's spelling),
  ``minimum(maximum(y * (1/6) + 0.5, 0), 1)`` (ONNX's HardSigmoid as imported), or any
  other scalar affine map of ``y``, clamp and positive scale that composes to
  ``clamp(y / 6 + 0.5, 0, 1)`` (``simplify`` moves torch's ``/ 6`` before the clamp);
- SiLU: ``silu(y)`` or ``y * sigmoid(y)``; hard-swish: ``y * hardsigmoid(y)`` (either
  spelling).

Squeeze-and-excitation's ``x * sigmoid(conv(relu(conv(mean(x)))))`` keeps its pooling and
its scaling as they are (each one pass over ``x``, which the elementwise fusion already
makes); its two small convolutions' activations take the epilogue.

A ``linear`` qualifies when its operands share a float32/float64 dtype and its weight is
2-D; a chain that is a ReLU alone on a 2-D input stays for the ``linear_relu`` rule (whose
batch-1 product applies it as it writes the rows). A transformer's blocks are where this pays: the FFN's
``gelu(linear(x))`` and the ``x + linear(y)`` residual branches each write one array
instead of two or three.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Node, Value
from ..ops.conv import CONV2D
from ..ops.elementwise import (ADD, DIV, GELU, GELU_TANH, MAXIMUM, MINIMUM, MUL, RELU,
                               SIGMOID, SILU, SUB)
from ..ops.epilogue import CONV2D_EPILOGUE, LINEAR_EPILOGUE
from ..ops.linalg import BLAS_DTYPES, LINEAR, blas_2d
from .core import Builder, Report, live_readers, needed


@dataclass
class Epilogue:
    """What one ``conv2d_epilogue`` replaces: ``nodes`` (after the conv), the activation,
    its bounds, the residual and where it is added, and the chain's last value."""
    nodes: list
    act: str = "none"
    bounds: tuple = (-np.inf, np.inf)
    residual: Value | None = None
    residual_at: str | None = None
    last: Value | None = None


def conv_epilogues(graph: Graph) -> dict:
    """The precondition (see the module docstring): ``{conv2d node: Epilogue}``."""
    return _epilogues(graph, CONV2D, lambda node, plan: True)


def linear_epilogues(graph: Graph) -> dict:
    """The precondition (see the module docstring): ``{linear node: Epilogue}``."""
    def wanted(node: Node, plan: Epilogue) -> bool:
        x, w, *bias = node.inputs
        return (x.dtype in BLAS_DTYPES and w.ndim == 2
                and all(isinstance(v, Value) and v.dtype == x.dtype
                        for v in [w, *bias] if v is not None)
                and (plan.act != "relu" or plan.residual is not None
                     or not blas_2d(*node.inputs)))
    return _epilogues(graph, LINEAR, wanted)


def _epilogues(graph: Graph, layer, wanted) -> dict:
    """``{node: Epilogue}`` for the ``layer`` nodes whose chain matches and ``wanted(node,
    plan)`` holds."""
    live = live_readers(graph)   # (a clamp's comparisons, dead after simplify, read y)
    found, claimed, removed, residuals = {}, set(), set(), set()
    for node in graph.nodes:
        if node.op is layer and isinstance(node.inputs[0], Value):
            plan = _chain(node.outputs[0], live)
            if plan is None or not wanted(node, plan):
                continue
            # two convs meeting at one add (ResNet's downsampling block) both match it:
            # the first takes it, and no plan may read a value another one removes
            gone = {node.outputs[0]} | {n.outputs[0] for n in plan.nodes[:-1]}
            if (claimed.isdisjoint(plan.nodes) and plan.residual not in removed
                    and gone.isdisjoint(residuals)):
                found[node] = plan
                claimed.update(plan.nodes)
                removed |= gone
                residuals.add(plan.residual)
    return found


def conv_epilogue(graph: Graph, plans: dict, report: Report) -> Graph:
    """Each conv of ``conv_epilogues`` and its chain become one ``conv2d_epilogue`` at the
    chain's last node, named as its last value (a conv without bias gets a zero bias
    constant). Dead nodes are dropped.

    Preserves: types, inputs and outputs; values up to the rounding of the activations'
    float32 formulas (sigmoid and SiLU within a few ulps; relu, clamp, residual adds and
    the GELUs as the unfused kernels compute them).

    Before::

        graph(%x: f32[1,2,4,4], %w: f32[2,2,3,3], %b: f32[2], %r: f32[1,2,4,4]) {
          %y: f32[1,2,4,4] = conv2d(%x, %w, %b, stride=(1, 1), padding=((1, 1), (1, 1)),
              dilation=(1, 1), groups=1)
          %s: f32[1,2,4,4] = add(%y, %r)
          %h: f32[1,2,4,4] = relu(%s)
          return (%h)
        }

    After::

        graph(%x: f32[1,2,4,4], %w: f32[2,2,3,3], %b: f32[2], %r: f32[1,2,4,4]) {
          %h: f32[1,2,4,4] = conv2d_epilogue(%x, %w, %b, %r, act='relu', bounds=(-inf, inf),
              residual_at='before', stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
              groups=1)
          return (%h)
        }
    """
    return _fuse(graph, plans, report, CONV2D_EPILOGUE)


def linear_epilogue(graph: Graph, plans: dict, report: Report) -> Graph:
    """Each linear of ``linear_epilogues`` and its chain become one ``linear_epilogue`` at
    the chain's last node, named as its last value (a linear without bias gets a zero bias
    constant). Dead nodes are dropped.

    Preserves: types, inputs and outputs; values as ``conv_epilogue`` does (the product is
    the same GEMM, its bias added as ``linear`` adds it).

    Before::

        graph(%x: f32[2,3,4], %w: f32[5,4], %b: f32[5], %r: f32[2,3,5]) {
          %y: f32[2,3,5] = linear(%x, %w, %b)
          %h: f32[2,3,5] = gelu(%y)
          %s: f32[2,3,5] = add(%r, %h)
          return (%s)
        }

    After::

        graph(%x: f32[2,3,4], %w: f32[5,4], %b: f32[5], %r: f32[2,3,5]) {
          %s: f32[2,3,5] = linear_epilogue(%x, %w, %b, %r, act='gelu', bounds=(-inf, inf),
              residual_at='after')
          return (%s)
        }
    """
    return _fuse(graph, plans, report, LINEAR_EPILOGUE)


def _fuse(graph: Graph, plans: dict, report: Report, fused) -> Graph:
    """The rewrite of ``conv_epilogue`` and ``linear_epilogue``: each layer node of ``plans``
    and its chain as one ``fused`` node."""
    at_last = {plan.nodes[-1]: (conv, plan) for conv, plan in plans.items()}
    skip = {n for plan in plans.values() for n in plan.nodes} | set(plans)
    live = needed(graph)
    b = Builder(graph)
    for node in graph.nodes:
        if not any(v in live for v in node.outputs):
            continue   # (dead: it may read a value the epilogue no longer makes)
        if node in at_last:
            conv, plan = at_last[node]
            x, w, *bias = [b.get(v) for v in conv.inputs]
            if not bias or bias[0] is None:
                bias = [b.graph.add_constant(np.zeros(w.shape[0], conv.outputs[0].dtype),
                                             name=f"{conv.outputs[0].name}_bias")]
            inputs = [x, w, bias[0]] + ([b.get(plan.residual)] if plan.residual else [])
            (b.env[plan.last],) = b.add(
                fused, inputs,
                dict(act=plan.act, bounds=plan.bounds, residual_at=plan.residual_at,
                     **conv.attrs), node.location, [plan.last.name])
            what = plan.act + (f", residual {plan.residual_at}" if plan.residual else "")
            report.count("epilogues", f"%{conv.outputs[0].name} + {len(plan.nodes)} nodes "
                                      f"({what}) -> {fused.name} %{plan.last.name}")
        elif node not in skip:
            b.copy(node)
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


# -- matching -------------------------------------------------------------------------------------
def _chain(y: Value, live: dict) -> Epilogue | None:
    plan, v = Epilogue([]), y
    v = _residual(v, live, plan, "before")
    act = _activation(v, live)
    if act is not None:
        plan.act, plan.bounds, nodes, v = act
        plan.nodes += nodes
    if plan.residual is None:
        v = _residual(v, live, plan, "after")
    if not plan.nodes:
        return None
    plan.last = v
    return plan


def _only(v: Value, live: dict) -> Node | None:
    """The one node reading ``v`` (once), when nothing else reads or returns it."""
    users = live.get(v, [])
    return users[0] if len(users) == 1 and isinstance(users[0], Node) else None


def _residual(v: Value, live: dict, plan: Epilogue, at: str) -> Value:
    node = _only(v, live)
    if node is None or node.op is not ADD:
        return v
    other = node.inputs[1] if node.inputs[0] is v else node.inputs[0]
    out = node.outputs[0]
    if (isinstance(other, Value) and other is not v and tuple(other.shape) == tuple(v.shape)
            and other.dtype == v.dtype == out.dtype and tuple(out.shape) == tuple(v.shape)):
        plan.nodes.append(node)
        plan.residual, plan.residual_at = other, at
        return out
    return v


def _number(x):
    return float(x) if type(x) in (int, float) else None


def _unary(v: Value, live: dict, op) -> Node | None:
    node = _only(v, live)
    return node if node is not None and node.op is op and node.inputs[0] is v else None


def _bound(v: Value, live: dict, op):
    """``op(v, c)`` (maximum or minimum by a number), as ``(node, c)``; or None."""
    node = _only(v, live)
    if node is None or node.op is not op:
        return None
    a, c = node.inputs
    return (node, _number(c)) if a is v and _number(c) is not None else None


def _clamp(v: Value, live: dict):
    """clamp as ``(nodes, lo, hi, out)`` (a maximum, a minimum, or both in that order)."""
    nodes, lo, hi = [], -np.inf, np.inf
    low = _bound(v, live, MAXIMUM)
    if low is not None:
        nodes.append(low[0])
        lo, v = low[1], low[0].outputs[0]
    high = _bound(v, live, MINIMUM)
    if high is not None:
        nodes.append(high[0])
        hi, v = high[1], high[0].outputs[0]
    return (nodes, lo, hi, v) if nodes else None


def _activation(y: Value, live: dict):
    """``(act, bounds, nodes, out)`` for an activation of ``y`` (module docstring)."""
    same = lambda n: n.outputs[0].dtype == y.dtype and tuple(n.outputs[0].shape) == \
        tuple(y.shape)
    for op, act in ((RELU, "relu"), (GELU, "gelu"), (GELU_TANH, "gelu_tanh"),
                    (SIGMOID, "sigmoid"), (SILU, "silu")):
        node = _unary(y, live, op)
        if node is not None and same(node):
            return act, (-np.inf, np.inf), [node], node.outputs[0]
    clamp = _clamp(y, live)
    if clamp is not None and all(same(n) for n in clamp[0]):
        nodes, lo, hi, out = clamp
        return "clamp", (lo, hi), nodes, out
    gate = _hardsigmoid(y, live)
    if gate is not None and all(same(n) for n in gate[0]):
        return "hardsigmoid", (-np.inf, np.inf), gate[0], gate[1]
    users = [n for n in live.get(y, []) if isinstance(n, Node)]
    if len(users) == 2 and len(live[y]) == 2:   # (y * gate(y): either reader the product)
        for mul, first in (users, users[::-1]):
            gated = _sigmoid_gate if first.op is SIGMOID else _hardsigmoid
            gate = gated(y, {**live, y: [first]})
            if (mul.op is MUL and same(mul) and gate is not None
                    and _only(gate[1], live) is mul
                    and {id(x) for x in mul.inputs} == {id(y), id(gate[1])}):
                act = "silu" if first.op is SIGMOID else "hardswish"
                return act, (-np.inf, np.inf), gate[0] + [mul], mul.outputs[0]
    return None


def _sigmoid_gate(y: Value, live: dict):
    node = _unary(y, live, SIGMOID)
    return ([node], node.outputs[0]) if node is not None else None


def _affine(y: Value, live: dict, most: int):
    """``(nodes, a, b, out)``: up to ``most`` ops each adding, subtracting, multiplying or
    dividing the value before it by a number, ``out = a * y + b``; each value read only
    by the next."""
    nodes, a, b, v = [], 1.0, 0.0, y
    while len(nodes) < most:
        node = _only(v, live)
        if node is None or node.op not in (ADD, SUB, MUL, DIV) or len(node.inputs) != 2:
            break
        first, second = node.inputs
        c = _number(second) if first is v else _number(first)
        if c is None or (first is not v and node.op in (SUB, DIV)) or (
                node.op is DIV and c == 0):
            break
        if node.op in (ADD, SUB):
            b += c if node.op is ADD else -c
        else:
            c = c if node.op is MUL else 1 / c
            a, b = a * c, b * c
        nodes.append(node)
        v = node.outputs[0]
    return nodes, a, b, v


def _close(u: float, v: float) -> bool:
    return abs(u - v) <= 1e-6 * max(abs(u), abs(v), 1e-30)   # (ONNX's float32 1/6)


def _hardsigmoid(y: Value, live: dict):
    """``(nodes, out)`` of hard-sigmoid, ``clamp(y / 6 + 0.5, 0, 1)``, as any scalar affine
    map of ``y``, a clamp and an optional positive scale spell it: torch's relu6(y + 3) / 6
    (``minimum(maximum(y + 3, 0), 6) / 6``), ONNX's HardSigmoid as ``dg.onnx.load``
    imports it (``y * (1/6) + 0.5`` clamped to [0, 1]), or ``(y + 3) / 6`` clamped to [0, 1]
    (``simplify``'s form of torch's); None otherwise."""
    before, a, b, v = _affine(y, live, 2)
    clamp = _clamp(v, live) if before else None
    if clamp is None or len(clamp[0]) != 2:
        return None
    nodes, lo, hi, out = clamp
    for after, s, shift, last in (([], 1.0, 0.0, out), _affine(out, live, 1)):
        if (shift == 0 and s > 0 and _close(a * s, 1 / 6) and _close(b * s, 0.5)
                and lo * s == 0 and _close(hi * s, 1.0)):
            return before + nodes + after, last
    return None
