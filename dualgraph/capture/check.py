"""Checked mode: run a new graph's first call both eagerly and compiled, and when they
differ, name the first node whose value diverges (its op and the user's source line).

Both runs start from the same state: the tensors the graph reads or writes are
snapshotted, the eager run goes first with a :class:`Recorder` logging every op's outputs
in call order, and the state is restored. The *captured* graph then runs on the reference
interpreter, reporting each node's outputs (its nodes were traced in the eager call
order, so the first mismatch names the node); last, the optimised executable runs for real
and its results are compared too, which catches a wrong optimisation pass.
"""
from __future__ import annotations

import numpy as np

from ..dispatch import pop_tracer, push_tracer
from ..graph.interpret import interpret
from ..graph.printer import format_node
from ..tensor import Tensor
from .._pytree import flatten

RTOL, ATOL = 1e-4, 1e-5


class CheckError(AssertionError):
    """Compiled and eager results differ; the message names the first divergent node."""


class Recorder:
    """An eager mode that logs each op's outputs (dispatch hands it every call)."""

    numbers = False   # (no traced Python numbers: capture/symbolic.py)
    trace_id = 0      # (its tensors hold arrays, not a trace's Values)

    def __init__(self):
        self.log: list[tuple] = []

    def run(self, op, args, attrs):
        arrays = [a._data if isinstance(a, Tensor) else a for a in args]
        raw = op.kernel(*arrays, **attrs)
        outs = (raw,) if op.num_outputs == 1 else tuple(raw)
        outs = tuple(np.asarray(o) for o in outs)
        self.log.append((op, outs))
        return outs[0] if op.num_outputs == 1 else outs

    # The hooks capture calls while tracing; in eager recording they do nothing special.
    def value_of(self, t):
        return t._data.copy()

    def constant(self, array):
        return array

    def note_mutation(self, target):
        pass


def _state(entry, args, kwargs):
    """Every tensor the call reads or writes, with a copy of its data and gradient."""
    tensors = [b.tensor for b in entry.capture.bindings]
    tensors += [t for t in flatten((args, kwargs))[0] if isinstance(t, Tensor)]
    tensors += [t for _, t in entry.capture.writebacks] + entry.capture.grads_cleared
    unique = {id(t): t for t in tensors}
    return [(t, t._data.copy(), t.grad, None if t.grad is None else t.grad._data.copy())
            for t in unique.values()]


def _restore(state):
    for t, data, grad, grad_data in state:
        np.copyto(t._data, data)
        t.grad = grad
        if grad is not None:
            np.copyto(grad._data, grad_data)


def run_checked(fn, entry, args, kwargs):
    state = _state(entry, args, kwargs)
    recorder = Recorder()
    push_tracer(recorder)
    try:
        eager_out = fn(*args, **kwargs)
    finally:
        pop_tracer()
    eager_leaves = [np.array(x._data) if isinstance(x, Tensor) else x
                    for x in flatten(eager_out)[0]]
    eager_state = [(t, t._data.copy(), None if t.grad is None else t.grad._data.copy())
                   for t, *_ in state]
    _restore(state)

    # The captured graph, node by node on the interpreter: its nodes were traced in the
    # order the eager run called its ops, so the first mismatch names the culprit.
    tensor_args = [t for t in flatten((args, kwargs))[0] if isinstance(t, Tensor)]
    seen = []
    interpret(entry.capture.graph, *entry.inputs(tensor_args),
              on_node=lambda node, outs: seen.append((node, outs)))
    _compare_nodes(recorder.log, seen)
    # Then the optimised executable, for real (it applies the writebacks).
    out = entry.run(args, kwargs)
    culprit = " (the captured graph matched, so an optimisation pass is wrong: compare " \
              "with passes=False)"
    for i, (a, b) in enumerate(zip(eager_leaves, flatten(out)[0])):
        if isinstance(b, Tensor) and not _close(a, b._data):
            raise CheckError(f"compiled output {i} differs from eager: {_diff(a, b._data)}"
                             + culprit)
    for t, data, grad in eager_state:
        if not _close(data, t._data):
            raise CheckError(f"a tensor the step updates differs from eager: "
                             f"{_diff(data, t._data)}" + culprit)
        if grad is not None and t.grad is not None and not _close(grad, t.grad._data):
            raise CheckError(f"a gradient differs from eager: {_diff(grad, t.grad._data)}"
                             + culprit)
    return out


def _compare_nodes(log, seen):
    if len(log) != len(seen):
        return   # the eager run took another path; the final comparison still applies
    for (_, want), (node, got) in zip(log, seen):
        for a, b in zip(want, got):
            if not _close(a, b):
                raise CheckError(
                    f"compiled and eager differ first at node `{format_node(node)}` "
                    f"(op {node.op.name}, called at {node.location}): {_diff(a, b)}")


def _close(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "biu":
        return bool(np.array_equal(a, b))
    a, b = a.astype(np.float64), b.astype(np.float64)
    # (a sum of large terms that cancel rounds to its terms' size, not its own: an element
    # near 0 among values of 1e3 may differ by 1e-2 between two orders of the same sum, so
    # the absolute tolerance grows with the value's largest finite element)
    finite = np.abs(a[np.isfinite(a)])
    scale = float(finite.max()) if finite.size else 0.0
    return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL + RTOL * scale, equal_nan=True))


def _diff(a, b) -> str:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    return f"max abs difference {np.max(np.abs(a - b)):.3g}"
