"""Row writes in a converted ``for`` loop become the scan's ys.

``for x_t in xs: ...; hs[t] = h; t += 1`` carries ``hs`` through the loop. Traced as it is
written, every step copies the whole tensor to change one row, and a gradient saves the
whole tensor before every step (a loop of T steps keeps T copies of it, and copies all of
it each step, forward and backward). When each step writes one row of a variable at a
counter that steps by one, and reads nothing else of it, the rows are the scan's ys
instead: the loop carries the rest, and one ``index_put`` after it writes every row at
once, at ``t0, t0 + 1, ...``, the rows the loop would have written, in the same order, so
the result (and its gradient) is the same.
"""
from __future__ import annotations

from ... import _pytree as pytree
from ..._helpers import user_location
from ...errors import CaptureError
from ...ops import control, creation, elementwise, shape as shape_ops
from ...ops.index import INDEX_PUT, index_put_dims
from ...passes.core import readers
from ...passes.dce import dce
from ...tensor import Tensor


def row_writes(body_fn, row, values: tuple, what: str) -> dict[int, int]:
    """``{k: j}``: the loop variables ``k`` that the body (``body_fn(row, *values)``, a loop
    over rows like ``row``) changes only by writing row ``values[j]`` of them, where
    variable ``j`` is an integer counter the body increases by one. Traces the body once,
    when some variable could be such a pair (a tensor with rows and an integer scalar)."""
    tensors = [isinstance(v, Tensor) for v in values]
    if not (any(t and v.ndim >= 1 for t, v in zip(tensors, values))
            and any(t and v.ndim == 0 and not v.is_floating_point()
                    for t, v in zip(tensors, values))):
        return {}
    body = control.trace_fn(body_fn, (row, *values), f"body of {what}")
    inputs, outputs = _variable_values(body, values)
    variable_of = {v: i for i, v in inputs.items()}
    read_by = readers(body.graph)
    found = {}
    for k, out in outputs.items():
        write = out.producer
        if (write is None or write.op is not INDEX_PUT or len(write.inputs) != 3
                or write.attrs != {"dims": (0,), "accumulate": False}
                or write.inputs[0] is not inputs.get(k) or len(read_by[inputs[k]]) != 1):
            continue
        j = variable_of.get(write.inputs[2])
        if j is not None and j != k and _steps_by_one(outputs.get(j), inputs[j]):
            found[k] = j
    return found


def _variable_values(body: control.Body, values: tuple) -> tuple[dict, dict]:
    """The body's input and output value of each variable that is one tensor."""
    inputs, outputs = {}, {}
    at = 1                          # (input 0 is the row; tensor leaves are inputs)
    for i, v in enumerate(values):
        if isinstance(v, Tensor):
            inputs[i] = body.graph.inputs[at]
        at += sum(isinstance(leaf, Tensor) for leaf in pytree.flatten(v)[0])
    results = iter(zip(body.kinds, _outputs_and_nones(body)))
    for i, child in enumerate(body.spec[1]):   # (the new values, as _var_types reads them)
        got = [next(results) for _ in range(pytree.size(child))]
        if child is None and got[0][0] == "value":
            outputs[i] = got[0][1]
    return inputs, outputs


def _outputs_and_nones(body: control.Body) -> list:
    """Per result leaf of the body, its graph output (None for a constant leaf)."""
    outs = iter(body.graph.outputs)
    return [next(outs) if kind == "value" else None for kind in body.kinds]


def _steps_by_one(out, counter) -> bool:
    """Whether ``out = counter + 1`` for an integer scalar ``counter``."""
    add = getattr(out, "producer", None)
    if (add is None or add.op is not elementwise.ADD or counter.shape != ()
            or counter.dtype.kind not in "iu"):
        return False
    a, b = add.inputs
    return (a is counter and _is_one(b)) or (b is counter and _is_one(a))


def _is_one(x) -> bool:
    return type(x) is int and x == 1


def scan_with_row_writes(body_fn, iterable, values: tuple, names: tuple, rows: dict,
                         what: str) -> tuple:
    """The loop ``vars = body_fn(x, *vars)`` over the rows of ``iterable`` as one scan whose
    ys are the rows written into the variables of ``rows`` (see :func:`row_writes`); those
    variables are written after it. Returns the variables' final values."""
    keep = [i for i in range(len(values)) if i not in rows]
    length = iterable.shape[0]

    def step(carry, x):
        full = list(values)
        for i, v in zip(keep, carry):
            full[i] = v
        for k in rows:   # a stand-in to write into; the write is pruned, its row kept
            full[k] = _stand_in(values[k])
        new = tuple(body_fn(x, *full))
        return tuple(new[i] for i in keep), tuple(_row_written(new[k]) for k in rows)

    # (the body's writes into the stand-ins go: the index_put after the loop writes the
    # same rows at the same positions, so it raises where one of them would)
    carry, ys = control.emit_scan(step, tuple(values[i] for i in keep), [iterable], None,
                                  length, what=what, names=tuple(names[i] for i in keep),
                                  prune=lambda graph: dce(graph, keep_checks=False)[0])
    out = list(values)
    for i, v in zip(keep, carry):
        out[i] = v
    for (k, j), written in zip(rows.items(), ys):
        positions = elementwise.add(creation.arange(length), values[j])
        out[k] = index_put_dims(values[k], written, (positions,), (0,))
    return tuple(out)


def _stand_in(like: Tensor) -> Tensor:
    """A traced tensor shaped as ``like`` (zeros broadcast from one element, so no
    constant of its size enters the graph) for the body to write its row into: a value of
    its own, not a view of the one element (a write into a broadcast view is refused)."""
    t = shape_ops.expand(creation.zeros((), dtype=like.dtype), tuple(like.shape))
    t._view = t._base = None
    t._version = [0]
    return t


def _row_written(result: Tensor) -> Tensor:
    """The row a step wrote: the value operand of the ``index_put`` that made ``result``."""
    write = getattr(result._data, "producer", None)
    if write is None or write.op is not INDEX_PUT:   # (the body traced differently)
        raise CaptureError("a converted loop's body wrote a row at its first trace but "
                           "not at its second", user_location(),
                           "Make the loop body trace the same way each time.")
    return Tensor._make(write.inputs[1])
