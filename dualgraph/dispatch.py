"""The one place that runs an op.

``apply(op, *inputs, **attrs)`` hands the call to the current mode (eager: the NumPy
kernel; tracing: the tracer appends a graph node), wraps the results in Tensors and, when
an input requires grad and grad mode is on, records a backward :class:`Node`. Nothing else
in dualgraph knows which mode is active. The path is kept short on purpose: per-op overhead
is measured by the ``tiny_ops`` benchmark.
"""
from __future__ import annotations

import contextlib
import math
import threading

import numpy as np

from . import dtypes
from ._helpers import user_location, user_site
from .autograd.tape import Node, departures, edge_of, grad_mode, no_grad, pack_saved
from .kernels import recycle
from .shapes import ShapeError
from . import tensor as _tensor_module
from .tensor import Tensor

_FLOAT_KINDS = "fV"  # "V" is how NumPy reports ml_dtypes' bfloat16
_FLOAT32 = np.dtype(np.float32)


class _Modes:
    """The stack of active tracers (empty in eager mode)."""

    tracer = None
    stack: list = []
    # set once a write through a view gave its root a history (ops/views.py): ops recording
    # autograd first refresh the stale views among their arguments with it
    refresh_views = None

    def building_graph(self) -> bool:
        """Whether the active tracer builds a graph (checked mode's recorder, the other
        kind, runs and logs each op eagerly)."""
        return getattr(self.tracer, "graph", None) is not None


modes = _Modes()
_tensor_module._modes = modes   # (tensor.py reads it: the trace checks of Python values)

# The active profiler (``dg.profiler.profile`` while it records) or None. ``apply`` tests
# it once per op and nothing else, so that not profiling costs one global load; the
# profiler sets it back to None while it runs an op through ``apply``.
profiler = None


def push_tracer(tracer):
    modes.stack.append(tracer)
    modes.tracer = tracer


def pop_tracer():
    modes.stack.pop()
    modes.tracer = modes.stack[-1] if modes.stack else None


@contextlib.contextmanager
def outside_trace():
    """Run eagerly in the middle of a trace, without autograd: compiled code run by capture
    (the kernels' own calls of dualgraph functions on Python numbers must run, not be
    recorded), or a lazy layer creating its parameters at its first call."""
    stack, tracer = modes.stack, modes.tracer
    modes.stack, modes.tracer = [], None
    try:
        with no_grad():
            yield
    finally:
        modes.stack, modes.tracer = stack, tracer


_new_tensor = object.__new__


class _Autocast(threading.local):
    """The autocast state apply reads (``dg.autocast`` sets it; the backward engine turns it
    off, so a VJP computes in the dtypes its forward ran in). ``dtype``: the low float dtype
    while autocast is on, else None. ``cast(tensor, dtype)``: makes the cast (an op call,
    so eager runs it, tracing records it and autograd flows through it)."""

    dtype = None
    cast = None


autocast = _Autocast()
# torch's switch for the inference fast path of MultiheadAttention and TransformerEncoder
# (``dg.backends.mha`` sets it; nn/encoder_fastpath.py reads it): a mode traces depend on
mha_fastpath = [True]
# the dtypes autocast converts: float64 is left alone (as PyTorch does), integers and bool
# are never cast
AUTOCAST_FROM = frozenset(np.dtype(t) for t in ("float16", "float32", dtypes.bfloat16_np))


def _autocast_args(op, args):
    """``args`` with the float tensors cast as ``op.autocast`` asks: to the low dtype
    ("lower") or to float32 ("float32")."""
    want = autocast.dtype if op.autocast == "lower" else _FLOAT32
    return tuple(autocast.cast(a, want) if isinstance(a, Tensor)
                 and a._data.dtype in AUTOCAST_FROM and a._data.dtype != want else a
                 for a in args)


class OpError(RuntimeError):
    """An op failed on its inputs; the message names the op, the user's line and the shapes.

    Raised the same way eagerly and from compiled code (docs/errors.md): its subclasses
    are also the builtin class the failure is (``except IndexError`` catches an
    out-of-range index, as in eager NumPy or PyTorch code), and a compiled call's message
    is the one eager gives for the same inputs.
    """


class OpShapeError(OpError, ShapeError):
    """Shapes that don't fit the op (a ``ShapeError``, so also a ``ValueError``)."""


class OpIndexError(OpError, IndexError):
    """An index or dim out of range."""


class OpTypeError(OpError, TypeError):
    """A dtype or argument type the op does not take."""


class OpValueError(OpError, ValueError):
    """A value the op can't use (a zero-size ``max``, a bad attribute)."""


def error_class(err: Exception) -> type:
    """The ``OpError`` subclass for a failure ``err`` (IndexError first: NumPy's AxisError is
    also a ValueError)."""
    for kind, cls in ((ShapeError, OpShapeError), (IndexError, OpIndexError),
                      (TypeError, OpTypeError), (ValueError, OpValueError)):
        if isinstance(err, kind):
            return cls
    return OpError


def apply(op, *args, **attrs):
    if profiler is not None:
        return profiler.op(op, args, attrs)
    if op.autocast is not None and autocast.dtype is not None:
        args = _autocast_args(op, args)
    tracer = modes.tracer
    if tracer is None:
        count = len(args)
        if count == 2:   # binary and unary ops dominate: skip the comprehension's frame
            a, b = args
            arrays = (a._data if isinstance(a, Tensor) else a,
                      b._data if isinstance(b, Tensor) else b)
        elif count == 1:
            a = args[0]
            arrays = (a._data if isinstance(a, Tensor) else a,)
        else:
            arrays = [a._data if isinstance(a, Tensor) else a for a in args]
        recycler = recycle.current
        try:
            if recycler is not None and op.fills_out and "out" not in attrs:
                raw = _run_into_recycled(op, arrays, attrs, recycler)
            else:
                raw = op.kernel(*arrays, **attrs)
        except (OpError, KeyError):
            raise
        except Exception as e:
            raise op_error(op, arrays, attrs, e, user_location()) from e
        if type(raw) is not np.ndarray:  # NumPy returns scalars from 0-d computations
            raw = np.asarray(raw) if op.num_outputs == 1 else tuple(map(np.asarray, raw))
        if recycler is not None and "out" not in attrs:   # (out=: the caller's arrays)
            if type(raw) is np.ndarray:
                if raw.nbytes >= recycle.MIN_BYTES:
                    recycler.keep(raw)
            else:
                for r in raw:
                    if r.nbytes >= recycle.MIN_BYTES:
                        recycler.keep(r)
        if departures["anomaly"] and grad_mode.anomaly and not grad_mode.in_backward:
            _check_forward_nan(op, arrays, raw)
    else:
        if tracer.numbers:   # (Python numbers traced as graph inputs: capture/symbolic.py)
            args = tracer.lift(args)
        raw = tracer.run(op, args, attrs)

    if op.num_outputs == 1:
        if op.view:
            out = Tensor._make(raw, args[0])
            out._view = (op, attrs)
            out._view_version = out._version[0]
        else:   # Tensor._make, inlined: this is the hot path of every op
            out = _new_tensor(Tensor)
            out._data = raw
            out._version = [0]
        outs = (out,)
    else:
        outs = tuple(Tensor._make(r) for r in raw)
        out = outs
    if tracer is not None:   # (a Value is its trace's alone: a replayed call's are the
        for t in outs:       # tape's own, capture/replay.py)
            t._trace_id = tracer.trace_id

    # (departures: no thread has grad mode off, so this one has it on; tape.py)
    if op.vjp is not None and (not departures["enabled"] or grad_mode.enabled):
        if modes.refresh_views is not None:
            modes.refresh_views(args)
        for a in args:
            if isinstance(a, Tensor) and a.requires_grad:
                node = _record(op, args, outs, attrs, tracer)
                if departures["saved_hooks"] and grad_mode.saved_hooks:
                    # (once the outputs have their node: the hook may run ops)
                    pack_saved(node, op.saved_inputs if op.saves_inputs else (), tracer)
                break
    return out


def _run_into_recycled(op, arrays, attrs, recycler):
    """``op``'s kernel (one that takes ``out=``: ``OpDef.fills_out``) with a recycled array
    for each big result that has one free (kernels/recycle.py): the memory of an earlier
    step's dead activation instead of fresh pages. Only calls with a big array input are
    looked at (a shape rule costs microseconds; a result of a megabyte takes longer)."""
    for a in arrays:
        if type(a) is np.ndarray and a.nbytes >= recycle.MIN_BYTES:
            break
    else:
        return op.kernel(*arrays, **attrs)
    try:
        types = op.infer(*arrays, **attrs)
        types = (types,) if op.num_outputs == 1 else tuple(types)
        types = [(tuple([int(d) for d in t.shape]), dtypes.to_np(t.dtype)) for t in types]
    except Exception:   # (the kernel reports the error, as without recycling)
        return op.kernel(*arrays, **attrs)
    # (math.prod: NumPy's takes microseconds to make an array of the tuple)
    outs = tuple([recycler.take(shape, dt)
                  if dt.itemsize * math.prod(shape) >= recycle.MIN_BYTES else None
                  for shape, dt in types])
    if not any(o is not None for o in outs):
        return op.kernel(*arrays, **attrs)
    return op.kernel(*arrays, out=outs[0] if len(types) == 1 else outs, **attrs)


def _record(op, args, outs, attrs, tracer) -> Node:
    """Make (and return) the backward Node of ``op``'s call and make it the outputs'
    ``grad_fn``: per input the edge its gradient takes, the versions of the tensors the VJP
    will read (an in-place change before backward is then an error, not a wrong gradient)
    and the user's line."""
    if tracer is not None:
        args = _freeze(args)
    edges = []
    # (a tuple, () when nothing is saved: the tape's containers are what the cyclic garbage
    # collector walks while a forward pass is recorded, so the fewer per op the better)
    versions = ()
    saved = op.saved_inputs if op.saves_inputs else ()   # (None: all inputs)
    saves_outputs = op.saves_outputs
    # (OpDef.read_by: input i, or "o", read only by input j's gradient; a custom Function
    # has none)
    read_by = getattr(op, "read_by", None)
    if read_by is not None and saves_outputs and "o" in read_by:
        j = read_by["o"]
        saves_outputs = isinstance(args[j], Tensor) and args[j].requires_grad
    for i, a in enumerate(args):
        edge = None
        if isinstance(a, Tensor):
            if saved is None or i in saved:
                j = read_by.get(i) if read_by is not None else None
                if j is None or (isinstance(args[j], Tensor) and args[j].requires_grad):
                    versions += ((a, a._version[0]),)
            if a.requires_grad:   # (tape.edge_of, inlined for the commonest case)
                fn = a.grad_fn
                edge = fn if fn is not None and not a._output_nr else edge_of(a)
        edges.append(edge)
    node = Node(op, args, _NO_OUTPUT, attrs, edges, versions, user_site())
    diff = op.differentiable_outputs
    if len(outs) == 1 and diff is None:   # the common case, without the loop
        t = outs[0]
        if t._data.dtype.kind in _FLOAT_KINDS:
            t.requires_grad = True
            t.grad_fn = node
        if op.num_outputs == 1 and not op.saves_outputs:
            return node
    else:
        for i, t in enumerate(outs):
            if (diff is None or i in diff) and t._data.dtype.kind in _FLOAT_KINDS:
                t.requires_grad = True
                t.grad_fn = node
                t._output_nr = i
    node.outputs = kept = _shells(outs)
    if saves_outputs:
        chosen = op.saved_outputs
        node.versions += tuple((t, t._version[0]) for i, t in enumerate(kept)
                               if chosen is None or i in chosen)
    return node


# A node never holds its own outputs: node -> output -> node (the output's ``grad_fn``)
# would be a reference cycle per op, which leaves whatever the program drops (an
# evaluation pass in grad mode, an unused final state) to the garbage collector. An op of
# one output whose VJP does not read it (no "o" in ``OpDef.saves``) keeps nothing (its VJP
# gets None: a node runs only once its gradient arrived); the others keep stand-ins.
_NO_OUTPUT = (None,)


def _shells(outs):
    """A node's stand-ins for its outputs: each output's array, version counter and
    ``requires_grad``, without the history (the engine gives them theirs for a backward
    that records, ``engine.saved_outputs``; it passes zeros of their shape for an output
    that got no gradient)."""
    shells = []
    for t in outs:
        shell = _new_tensor(Tensor)
        shell._data, shell._version = t._data, t._version
        shell.requires_grad, shell._trace_id = t.requires_grad, t._trace_id
        shells.append(shell)
    return tuple(shells)


def _freeze(args):
    """While tracing, a node saves the *values* its inputs have now: an in-place update
    later rebinds the tensor object to a new symbolic value (values never change), so the
    node keeps an alias of the old one instead of the object."""
    out = []
    for a in args:
        if isinstance(a, Tensor) and type(a._data) is not np.ndarray:
            alias = Tensor._make(a._data)
            alias._trace_id = a._trace_id
            alias.requires_grad, alias.grad_fn = a.requires_grad, a.grad_fn
            alias._output_nr = a._output_nr
            if a.requires_grad and a.grad_fn is None:   # a leaf: share its accumulator
                alias._accumulator = a._accumulate_node()
            a = alias
        out.append(a)
    return tuple(out)


def op_error(op, arrays, attrs, err, location: str) -> OpError:
    """The error of ``op`` failing with ``err`` on ``arrays`` (or, while tracing, Values) at
    the user's ``location``: the same class and message eagerly, while tracing and when
    compiled code fails (capture/compile.py locates the node and calls this)."""
    shapes = ", ".join(
        str(tuple(a.shape)) if hasattr(a, "shape") else repr(a) for a in arrays)
    try:  # the shape and type rule explains a failure better than NumPy does
        op.infer(*arrays, **attrs)
    except (ShapeError, TypeError, IndexError, ValueError) as rule_err:
        err = rule_err
    except Exception:
        pass
    if isinstance(err, OpError):
        return err
    return error_class(err)(f"{op.name} failed at {location} on inputs of shape {shapes}: "
                            f"{err}")


def _check_forward_nan(op, arrays, raw):
    outs = raw if isinstance(raw, tuple) else (raw,)
    if not any(_has_nan(o) for o in outs):
        return
    if any(_has_nan(a) for a in arrays):
        return
    raise FloatingPointError(
        f"anomaly: {op.name} produced NaN from NaN-free inputs at {user_location()}")


def _has_nan(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f" and bool(np.isnan(a).any())
