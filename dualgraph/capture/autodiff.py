"""Compiled functions that stay differentiable from the outside.

When a captured function returns tensors that require grad (``out = compiled_model(x)``
followed by ``loss.backward()`` outside), the trace also records the backward pass: one
cotangent input per differentiable output and the VJPs of every op, traced by the same
autograd engine. The joint graph is then split, as AOTAutograd does, into a *forward* graph
(which also returns the values the backward needs) and a *backward* graph (from those saved
values and the cotangents to the input gradients). At run time the forward graph's outputs
are recorded on the autograd tape as one node whose VJP runs the backward graph.

A checkpointed region in the forward (``checkpoint``, ``checkpoint_sequential``) runs again
in the backward, and writes state again there as eagerly (a batch norm's running
statistics in training mode are updated twice, as torch's are): the backward graph outputs
the state values its trace wrote (:attr:`Backward.state`), and the node's VJP writes them
into their tensors.

A backward with ``create_graph=True`` (a gradient penalty, meta-learning) needs the
gradient's own history, which the backward graph's arrays lack: there the node replays the
forward graph op by op on the call's input tensors, recorded by autograd, and
differentiates that (:class:`Replay`), so gradients of gradients are eager's. The gradient
hooks the forward registered on its tensors (``h.register_hook(fn)``) are registered on
their replayed tensors too, as the backward graph traced them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..autograd import engine
from ..autograd.tape import grad_mode
from ..dispatch import _record, apply, modes
from ..graph import Graph
from ..graph.ir import Value
from ..tensor import Tensor, bump
from .subgraph import copy_nodes


@dataclass
class Backward:
    """The backward half of a split graph and how it connects to the forward half."""
    graph: Graph
    num_saved: int          # forward outputs after the user's and the writebacks'
    diff_outputs: list      # positions (among user output leaves) of differentiable outputs
    diff_inputs: list       # bindings whose tensors receive gradients
    grad_present: list      # per diff input: does the backward graph produce a gradient?
    state: list             # bindings whose tensors the backward writes (its last outputs)


def build_backward(tracer, capture, result_tensors) -> Backward | None:
    """Trace the VJPs of the differentiable outputs, then split the joint graph in two."""
    diff_outputs, diff_inputs = differentiable(capture, result_tensors)
    if not diff_outputs or not diff_inputs:
        return None
    graph = capture.graph
    roots = [result_tensors[i] for i in diff_outputs]
    cotangents = [Tensor._make(graph.add_input(r._data.shape, r._data.dtype, name="grad_out"))
                  for r in roots]
    before = {id(b.tensor): b.tensor._data for b in capture.bindings if b.kind != "grad"}
    grads = engine.run_backward(roots, cotangents, retain_graph=True, create_graph=False,
                                capture=[_as_bound(b.tensor) for b in diff_inputs],
                                leaf_hooks=False)   # (the call's backward runs them)
    grad_values = [None if g is None else tracer.value_of(g) for g in grads]
    state = [b for b in capture.bindings if b.kind != "grad" and id(b.tensor) in tracer._mutated
             and b.tensor._data is not before.get(id(b.tensor), b.value)]   # (written)
    forward_outputs = list(graph.outputs)
    return _split(graph, capture, forward_outputs, [c._data for c in cotangents],
                  grad_values, diff_outputs, diff_inputs, state)


def _as_bound(t: Tensor) -> Tensor:
    """``t`` as the leaf of the graph it was bound as. One that took on a history while
    traced (a view argument refreshed after a write to its base: ``a.mul_(0.5)`` under
    ``no_grad``, then ``c = a[1]`` read) gets the gradient of its input value only, what
    reached its accumulator, not that of its new value (which reaches its base already:
    counted twice, once through the graph and once through the caller's view). One whose
    ``requires_grad`` the step turned off after ops read it is differentiated through the
    same accumulator."""
    if t.grad_fn is None and t.requires_grad:
        return t
    leaf = Tensor._make(t._data)
    leaf.requires_grad = True
    if t._accumulator is not None:   # (held strongly: the gradient is t's)
        leaf._accumulator = t._accumulate_node()
    return leaf


def differentiable(capture, result_tensors) -> tuple[list, list]:
    """The positions of the differentiable outputs among ``result_tensors`` and the
    bindings of ``capture`` whose tensors receive gradients: the backward half is built
    when both are non-empty."""
    # Outputs whose history the function's own backward() already freed (a training step
    # returning its loss, or an RNN's last hidden state, after loss.backward()) are not
    # differentiated again: eager would refuse a second backward through them too.
    diff_outputs = [i for i, t in enumerate(result_tensors)
                    if isinstance(t, Tensor) and t.requires_grad and t.grad_fn is not None
                    and not _reaches_freed(t.grad_fn)]
    # (also a tensor that required grad when the ops read it and no longer does: their
    # results require grad, as eagerly; backward then gives it none, engine.py)
    diff_inputs = [b for b in capture.bindings if b.kind != "grad"
                   and (b.tensor.requires_grad or b.required)]
    return diff_outputs, diff_inputs


def _reaches_freed(node) -> bool:
    """Whether the backward from ``node`` would meet a node whose saved values a
    backward() already freed."""
    seen, stack = set(), [node]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if getattr(node, "freed", False):
            return True
        stack.extend(entry[0] for entry in getattr(node, "next", ()) or () if entry)
    return False


def _split(joint: Graph, capture, forward_outputs, cot_values, grad_values, diff_outputs,
           diff_inputs, state) -> Backward:
    tainted = set(cot_values)
    backward_nodes, forward_nodes = [], []
    for node in joint.nodes:
        if any(isinstance(x, Value) and x in tainted for x in node.inputs):
            backward_nodes.append(node)
            tainted.update(node.outputs)
        else:
            forward_nodes.append(node)
    produced_backward = set(tainted)
    present = [g for g in grad_values if g is not None]
    written = [b.tensor._data for b in state]
    saved = []
    for v in _reads(backward_nodes) + present + written:
        if v not in produced_backward and v not in saved:
            saved.append(v)

    fwd_inputs = [v for v in joint.inputs if v not in cot_values]
    copied: dict = {}
    forward = copy_nodes(joint, fwd_inputs, forward_nodes, forward_outputs + saved, copied)
    backward = copy_nodes(joint, saved + list(cot_values), backward_nodes, present + written)
    capture.graph = forward
    capture.tensor_hooks = [(copied[v], hooks) for v, hooks in capture.tensor_hooks
                            if v in copied]
    return Backward(backward, len(saved), diff_outputs, diff_inputs,
                    [g is not None for g in grad_values], state)


def _reads(nodes) -> list:
    out = []
    for node in nodes:
        out.extend(x for x in node.inputs if isinstance(x, Value))
    return out


class CompiledOp:
    """The autograd tape's view of one call of a compiled function: its VJP runs the
    backward graph on the values the forward graph saved."""

    saves_inputs = False
    saves_outputs = False
    saved_inputs = None
    differentiable_outputs = None
    name = "compiled"

    def __init__(self, backward: Backward, executable, saved: list, replay=None, state=()):
        self.backward, self.executable, self.saved = backward, executable, saved
        self.replay, self.state = replay, state
        self.num_outputs = len(backward.diff_outputs)

    def vjp(self, g, out, *inputs):
        from ..ops.creation import zeros_like
        gs = (g,) if self.num_outputs == 1 else g
        outs = (out,) if self.num_outputs == 1 else out
        cotangents = [gi if gi is not None else zeros_like(o) for gi, o in zip(gs, outs)]
        if grad_mode.enabled:   # create_graph: gradients with their own history
            if self.state:
                raise RuntimeError(
                    "dg.compile: create_graph=True backward through a compiled call whose "
                    "backward writes state (a checkpointed region recomputed with a batch "
                    "norm in training mode); call the function uncompiled for gradients of "
                    "gradients")
            plan, tensors, kept = self.replay
            return tuple(plan.gradients(inputs, tensors, kept, cotangents))
        cots = [c._data for c in cotangents]
        results = iter(self.executable.run(self.saved + cots))
        grads = [Tensor._make(next(results)) if present else None
                 for present in self.backward.grad_present]
        for t, new in zip(self.state, results):   # (state the recomputation wrote)
            np.copyto(t._data, new)
            bump(t)
        return tuple(grads)


class Replay:
    """How a call's forward graph runs again, op by op on tensors, for a backward that
    records its own history (``create_graph=True``): the nodes the differentiable outputs
    need, and which graph inputs among them the call itself updates (a dropout's seed, a
    running statistic), whose values before the call must be kept."""

    def __init__(self, capture, backward: Backward):
        graph = capture.graph
        value_positions = [i for i, k in enumerate(capture.out_leaves) if k == "value"]
        self.outputs = [graph.outputs[value_positions.index(i)] for i in backward.diff_outputs]
        needed, self.nodes = set(self.outputs), []
        for node in reversed(graph.nodes):
            if any(v in needed for v in node.outputs):
                self.nodes.append(node)
                needed.update(x for x in node.inputs if isinstance(x, Value))
        self.nodes.reverse()
        self.graph = graph
        read = [k for k, v in enumerate(graph.inputs) if v in needed]
        # the inputs the call itself updates (or a .grad it reads) are kept from before it
        self.kept = [k for k in read if capture.bindings[k].kind == "grad"
                     or any(kind == "data" and t is capture.bindings[k].tensor
                            for kind, t in capture.writebacks)]
        self.read = [k for k in read if k not in self.kept]
        self.custom_functions = capture.custom_functions
        self.tensor_hooks = capture.tensor_hooks

    def gradients(self, targets, tensors: dict, kept: dict, cotangents: list) -> tuple:
        """The gradients of the diff inputs, with history: the forward again on
        ``tensors`` (graph input position -> (a call's input tensor, its version then):
        unchanged since, checked as eager checks saved tensors) and the ``kept`` copies,
        then eager autograd with ``create_graph=True`` for ``targets`` (the diff inputs)."""
        if self.custom_functions:   # (their backward is the user's, not their ops' VJPs)
            raise RuntimeError(
                "dg.compile: create_graph=True backward through a compiled call that "
                f"applies custom autograd functions ({', '.join(self.custom_functions)}) "
                "is not supported; call the function uncompiled for gradients of gradients")
        inputs = self.graph.inputs
        env = {v: Tensor._make(a) for v, a in self.graph.constants.items()}
        env.update((inputs[k], Tensor._make(a)) for k, a in kept.items())
        for k, (t, version) in tensors.items():
            if t._version[0] != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: the compiled call's input {inputs[k].name} of "
                    f"shape {tuple(t.shape)} (a second-order backward replays the call)")
            env[inputs[k]] = t
        for node in self.nodes:
            ins = [env[x] if isinstance(x, Value) else x for x in node.inputs]
            outs = apply(node.op, *ins, **node.attrs)
            env.update(zip(node.outputs, outs if isinstance(outs, tuple) else (outs,)))
        for value, hooks in self.tensor_hooks:   # (the forward's h.register_hook(fn), again)
            if value in env and env[value].requires_grad:
                for hook in hooks:
                    env[value].register_hook(hook)
        return engine.grad([env[v] for v in self.outputs], targets, cotangents,
                           retain_graph=True, create_graph=True, allow_unused=True)


def record_call(backward: Backward, executable, user_leaves: list, saved: list, inputs,
                shared=(), replay=None, state=()):
    """Put the differentiable outputs of this call on the autograd tape; ``inputs`` are
    this call's tensors for ``backward.diff_inputs``. ``shared`` are the tensors whose own
    arrays are among ``saved`` (weights, not copied): as eager autograd does for a saved
    tensor, the backward checks that none was changed in place since. ``replay``: ``(Replay,
    {input position: (tensor, version)}, {input position: array kept})`` for a
    ``create_graph`` backward; ``state``: this call's tensors for ``backward.state``."""
    op = CompiledOp(backward, executable, saved, replay, state)
    outs = tuple(user_leaves[i] for i in backward.diff_outputs)
    _record(op, inputs, outs, {}, modes.tracer)
    if shared and outs:
        outs[0].grad_fn.versions += tuple((t, t._version[0]) for t in shared)
