"""Control flow as ops: ``cond``, ``while_loop`` and ``scan``, whose bodies are subgraphs.

Eager, each is plain Python (``if``, ``while``, ``for``), so autograd records exactly the ops
that ran. While tracing, each traces its Python functions into *closed* subgraphs with a
nested tracer: the outer tensors a function reads (traced values, parameters, globals)
become extra operands of the node, after the explicit ones. The node holds the subgraphs
as attrs, so the printer, verifier, serializer and interpreter handle it like any other.
Its kernel runs them with ``run(graph, *arrays)``: the reference interpreter by default; a
compiled graph's code passes each body's own compiled program (``codegen/executable.py``).

Gradients are written with these same functions, so they trace, run and differentiate
like any other op: the VJP of ``cond`` is a ``cond`` over the two branches' VJPs; the VJP
of ``scan`` recomputes the carries of every step with a forward ``scan`` (the kernel keeps
only the last) and runs the body's VJP in a reverse ``scan``; the VJP of ``while_loop``
does the same over ``max_iters`` steps, each a ``cond`` on ``step < iterations`` (the
forward node also outputs its iteration count), so it needs that bound.

Semantics: ``cond`` and ``while_loop`` follow torch.cond and torch's while_loop; ``scan``
follows ``jax.lax.scan`` (``f(carry, x) -> (carry, y)``, ys stacked on a new leading axis).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._helpers import user_location
from ..autograd.tape import enable_grad, grad_mode, no_grad
from ..dispatch import apply, modes
from ..errors import CaptureError
from ..graph import Graph, interpret
from ..graph.ir import Value, type_str
from ..shapes import ShapedType, ShapeError
from ..tensor import Tensor
from . import creation, elementwise, shape as shape_ops
from .._pytree import flatten, unflatten
from ._util import empty_into, is_float, out_part
from .opdef import defop

__all__ = ["cond", "while_loop", "scan"]


class BodyMismatch(TypeError):
    """A body's results that the node can't hold: the branches of a ``cond`` differ in
    structure or types, or a loop body changes what it carries. ``what`` names the construct
    (``to_static`` matches it against its own, to report the user's line); the message is
    ``reason. fix``."""

    def __init__(self, what: str, reason: str, fix: str):
        self.what, self.reason, self.fix = what, f"{what}: {reason}", fix
        super().__init__(f"{self.reason}. {fix}")


# -- tracing a Python function into a closed subgraph ---------------------------------------
@dataclass
class Slot:
    """A placeholder type for a subgraph input that no tensor holds yet (a scan slice)."""
    shape: tuple
    dtype: np.dtype
    name: str = "x"


class _Lifting:
    """Mixed into the active tracer's class to trace a function body: the outer tensors the
    body reads become inputs of its graph, listed in ``captured`` in input order."""

    def __init__(self, names=None):
        super().__init__(names)
        self.captured: list[Tensor] = []
        self._lifted: dict[Value, Value] = {}
        self.what = "body"

    def note_mutation(self, target):
        data = target._data
        if type(data) is Value and data not in self.graph:   # an outer graph's value
            raise _outer_write(self.what)
        super().note_mutation(target)

    def value_of(self, t):
        data = t._data
        if type(data) is Value and data not in self.graph:   # a value of an outer graph
            inner = self._lifted.get(data)
            if inner is None:
                inner = self.graph.add_input(data.shape, data.dtype, name=data.name)
                self._lifted[data] = inner
                self.captured.append(t)
            return inner
        return super().value_of(t)

    def bind(self, t, kind, name=None, shape=None, index=-1):
        binding = super().bind(t, kind, name, shape, index)
        self.captured.append(t)
        return binding


_NESTED: dict[type, type] = {}


def _nested_tracer(outer):
    """A tracer of the active tracer's kind (seen by duck typing: ops don't import capture)
    that lifts outer tensors into inputs."""
    base = type(outer)
    if not issubclass(base, _Lifting):
        if base not in _NESTED:
            _NESTED[base] = type(f"Nested{base.__name__}", (_Lifting, base), {})
        base = _NESTED[base]
    return base(getattr(outer, "names", None))


@dataclass
class Body:
    """A function traced into ``graph``: inputs are the tensor leaves of its arguments, then
    ``captured`` (outer tensors it reads); outputs are the tensor leaves of its result.
    ``kinds`` says per result leaf "value" (a graph output) or ("const", python value)."""
    graph: Graph
    captured: list
    spec: object
    kinds: list
    num_params: int

    def rebuild(self, values):
        """The function's result, with ``values`` for its tensor leaves."""
        it = iter(values)
        return unflatten(self.spec, [next(it) if k == "value" else k[1] for k in self.kinds])

    def leaf_types(self) -> list:
        """Per result leaf, its type (``ShapedType``) or ``("const", value)``."""
        outs = iter(self.graph.outputs)
        return [next(outs).type if k == "value" else k for k in self.kinds]


def trace_fn(fn, args: tuple, what: str, names=None) -> Body:
    """Trace ``fn(*args)`` into a closed graph. Tensor (and :class:`Slot`) leaves of ``args``
    become fresh placeholders, the graph's first inputs (named by ``names``, one per
    argument, when given); other leaves pass through."""
    tracer = _nested_tracer(modes.tracer)
    tracer.what = what
    leaves, spec = flatten(tuple(args))
    labels = _leaf_labels(args, names) if names else [None] * len(leaves)
    params = []
    for x, label in zip(leaves, labels):
        if isinstance(x, (Tensor, Slot)):
            aval = x._data if isinstance(x, Tensor) else x
            name = label or getattr(aval, "name", None) or "x"
            x = Tensor._make(tracer.graph.add_input(aval.shape, aval.dtype, name=name))
        params.append(x)
    num_params = len(tracer.graph.inputs)
    with tracer, no_grad():
        result = fn(*unflatten(spec, params))
        out_leaves, out_spec = flatten(result)
        capture = tracer.finish(out_leaves)
    if capture.writebacks:
        raise _outer_write(what)
    return Body(capture.graph, tracer.captured, out_spec, capture.out_leaves, num_params)


def _outer_write(what: str) -> CaptureError:
    return CaptureError(f"an in-place change of an outer tensor inside the {what}",
                        user_location(), "Return the new value from the function instead "
                        "(control-flow bodies are pure functions).")


def _leaf_labels(args, names) -> list:
    """A name per leaf of ``args``: the argument's name, suffixed in a structure."""
    labels = []
    for arg, name in zip(args, names):
        n = len(flatten(arg)[0])
        labels += [name] if n == 1 else [f"{name}_{i}" for i in range(n)]
    return labels


def align(bodies: list) -> list:
    """Give the graphs of ``bodies`` (traced with the same arguments) the same inputs: the
    parameters, then every tensor any of them captured. Returns those tensors."""
    captured: dict[int, tuple] = {}   # id(tensor) -> (tensor, its input in some body)
    for b in bodies:
        for t, v in zip(b.captured, b.graph.inputs[b.num_params:]):
            captured.setdefault(id(t), (t, v))
    for b in bodies:
        g = b.graph
        params = g.inputs[:b.num_params]
        own = {id(t): v for t, v in zip(b.captured, g.inputs[b.num_params:])}
        extra = [own[k] if k in own else g.add_input(v.shape, v.dtype, name=v.name)
                 for k, (t, v) in captured.items()]
        g.inputs = params + extra   # (a fresh graph: reordering its inputs is safe)
    return [t for t, _ in captured.values()]


def _tensor_leaves(args) -> list:
    return [x for x in flatten(tuple(args))[0] if isinstance(x, Tensor)]


# -- running a graph as dualgraph ops (so it traces and records gradients) ------------------
def call_graph(graph: Graph, *args, run=apply) -> tuple:
    """Run ``graph``'s nodes through dispatch on tensors ``args``; returns its outputs.
    ``run(op, *inputs, **attrs)`` runs each node (another runner may expand ops)."""
    env = dict(zip(graph.inputs, args))
    for v, array in graph.constants.items():
        env[v] = creation.tensor(array)
    for node in graph.nodes:
        inputs = [env[x] if isinstance(x, Value) else x for x in node.inputs]
        outs = run(node.op, *inputs, **node.attrs)
        env.update(zip(node.outputs, (outs,) if node.op.num_outputs == 1 else outs))
    return tuple(env[v] for v in graph.outputs)


def _is_float(x) -> bool:
    return isinstance(x, Tensor) and is_float(x._data.dtype)


def vjp_call(graph: Graph, inputs: list, cotangents: list) -> list:
    """Per input of ``graph``, the gradient of ``sum(outputs * cotangents)`` (zeros when it
    does not depend on it; None for non-float inputs). ``cotangents`` holds None for outputs
    without one."""
    from ..autograd import engine   # (engine imports the op families)
    with enable_grad():
        xs = [x.detach().requires_grad_() if _is_float(x) else x for x in inputs]
        outs = call_graph(graph, *xs)
    pairs = [(o, c) for o, c in zip(outs, cotangents) if c is not None and o.requires_grad]
    wrt = [x for x in xs if _is_float(x)]
    grads = [None] * len(wrt)
    if pairs and wrt:
        grads = engine.grad([o for o, _ in pairs], wrt, [c for _, c in pairs],
                            allow_unused=True)
    it = iter(zip(wrt, grads))
    result = []
    for x in xs:
        if _is_float(x):
            w, g = next(it)
            result.append(g if g is not None else creation.zeros_like(w))
        else:
            result.append(None)
    return result


def _cotangents(g, outs) -> list:
    """The engine's output gradients as a list: zeros for float outputs without one, None
    for the others."""
    gs = g if isinstance(g, tuple) else (g,)
    return [(gi if gi is not None else creation.zeros_like(o)) if _is_float(o) else None
            for gi, o in zip(gs, outs)]


# -- shape rules -------------------------------------------------------------------------------
def _types(avals) -> str:
    return "(" + ", ".join(type_str(a.shape, a.dtype) for a in avals) + ")"


def _check_call(op: str, label: str, graph: Graph, avals) -> None:
    """The subgraph ``@label`` takes exactly ``avals``' types."""
    want = [(tuple(v.shape), v.dtype) for v in graph.inputs]
    got = [(tuple(a.shape), np.dtype(a.dtype)) for a in avals]
    if want != got:
        raise ShapeError(f"{op}: @{label} takes {_types(graph.inputs)} but is given "
                         f"{_types(avals)}")


def _check_returns(op: str, label: str, graph: Graph, types) -> None:
    want = [(tuple(t.shape), np.dtype(t.dtype)) for t in types]
    got = [(tuple(v.shape), v.dtype) for v in graph.outputs]
    if want != got:
        raise ShapeError(f"{op}: @{label} returns {_types(graph.outputs)} but must return "
                         f"{_types(types)}")


def _check_pred(op: str, pred) -> None:
    if tuple(pred.shape) != () or np.dtype(pred.dtype) != np.bool_:
        raise ShapeError(f"{op}: the predicate must be bool[], got "
                         f"{type_str(pred.shape, pred.dtype)}")


# -- cond ---------------------------------------------------------------------------------------
def _cond_kernel(pred, *args, true_graph, false_graph, run=interpret):
    return tuple(run(true_graph if pred else false_graph, *args))


def _cond_infer(pred, *args, true_graph, false_graph):
    _check_pred("cond", pred)
    _check_call("cond", "true_graph", true_graph, args)
    _check_call("cond", "false_graph", false_graph, args)
    _check_returns("cond", "false_graph", false_graph, [v.type for v in true_graph.outputs])
    return tuple(v.type for v in true_graph.outputs)


def _cond_vjp(g, out, pred, *args, true_graph, false_graph):
    gs = _cotangents(g, out)
    live = [j for j, c in enumerate(gs) if c is not None]
    wrt = [i for i, a in enumerate(args) if _is_float(a) and a.requires_grad]
    if not wrt:
        return (None,) * (1 + len(args))

    def vjp_of(graph):
        def branch(*xs):
            cts = [None] * len(gs)
            for j, c in zip(live, xs[len(args):]):
                cts[j] = c
            grads = vjp_call(graph, xs[:len(args)], cts)
            return tuple(grads[i] for i in wrt)
        return branch
    grads = cond(pred, vjp_of(true_graph), vjp_of(false_graph),
                 (*args, *(gs[j] for j in live)))
    result = [None] * (1 + len(args))
    for i, gi in zip(wrt, grads):
        result[1 + i] = gi
    return tuple(result)


_BOOL, _INT64 = ShapedType((), np.dtype(np.bool_)), ShapedType((), np.dtype(np.int64))


def _onnx_cond(e, node):
    """cond -> If. ONNX branches take no inputs but read the enclosing scope, so each
    branch graph's inputs are bound to the node's operands."""
    operands = [e.input(i) for i in range(1, len(node.inputs))]

    def branch(graph):
        return lambda sub, _: list(zip(sub.inline(graph, operands), graph.outputs))
    then_graph = e.subgraph(e.body_name("then"), [], branch(node.attrs["true_graph"]))
    else_graph = e.subgraph(e.body_name("else"), [], branch(node.attrs["false_graph"]))
    return e.outputs("If", [e.input(0, np.bool_)], len(node.outputs),
                     then_branch=then_graph, else_branch=else_graph)


COND = defop("cond", _cond_kernel, _cond_infer, vjp=_cond_vjp,
             attrs=("true_graph", "false_graph"), num_outputs=None, saves="i",
             onnx=_onnx_cond,
             bodies=True)


def as_pred(pred) -> Tensor:
    if pred.numel() != 1:
        raise ValueError(f"dg.cond: the predicate must have one element, got shape "
                         f"{tuple(pred.shape)}")
    if pred.ndim:
        pred = shape_ops.reshape(pred, ())
    return pred if pred._data.dtype == np.bool_ else elementwise.ne(pred, 0)


def _describe(body: Body) -> str:
    return ", ".join(type_str(t.shape, t.dtype) if isinstance(t, ShapedType) else repr(t[1])
                     for t in body.leaf_types())


def match_results(what: str, labels, bodies) -> None:
    """Both bodies return the same structure, tensors of equal types at the same places and
    equal Python values elsewhere; the error names the first difference."""
    a, b = bodies
    if a.spec != b.spec or len(a.kinds) != len(b.kinds):
        raise BodyMismatch(what, f"the {labels[0]} returns ({_describe(a)}) but the "
                           f"{labels[1]} returns ({_describe(b)})",
                           "Both must return the same structure.")
    for i, (ta, tb) in enumerate(zip(a.leaf_types(), b.leaf_types())):
        if isinstance(ta, ShapedType) and isinstance(tb, ShapedType):
            if tuple(ta.shape) == tuple(tb.shape) and ta.dtype == tb.dtype:
                continue
        elif not isinstance(ta, ShapedType) and not isinstance(tb, ShapedType):
            if same_value(ta[1], tb[1]):
                continue
        show = [type_str(t.shape, t.dtype) if isinstance(t, ShapedType) else repr(t[1])
                for t in (ta, tb)]
        raise BodyMismatch(what, f"output {i} is {show[0]} in the {labels[0]} but {show[1]} "
                           f"in the {labels[1]}", "They must have the same shape and dtype.")


def same_value(a, b) -> bool:
    """Python values that a traced body may return unchanged (compared without tensors)."""
    try:
        return a is b or type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def emit_cond(pred: Tensor, bodies: list, args: tuple):
    """The ``cond`` node for two traced branches (see :func:`trace_fn`) of ``args``."""
    match_results("dg.cond", ("true branch", "false branch"), bodies)
    if not bodies[0].graph.outputs:   # nothing to compute: the branches are pure
        return bodies[0].rebuild([])
    captured = align(bodies)
    outs = apply(COND, pred, *_tensor_leaves(args), *captured,
                 true_graph=bodies[0].graph, false_graph=bodies[1].graph)
    return bodies[0].rebuild(outs)


def cond(pred, true_fn, false_fn, operands=()):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as ``torch.cond``.

    Eager it is a Python ``if``. While tracing (dg.compile, dg.jit) a tensor ``pred``
    gives one ``cond`` node with both branches as subgraphs; the branches must return the
    same structure of tensors with equal shapes and dtypes.

    >>> import dualgraph as dg
    >>> x = dg.tensor([1.0, -2.0])
    >>> dg.cond(x.sum() > 0, lambda x: x * 2, lambda x: -x, (x,))
    tensor([-1.,  2.])
    """
    operands = tuple(operands) if isinstance(operands, (tuple, list)) else (operands,)
    if not modes.building_graph() or not isinstance(pred, Tensor):
        return (true_fn if pred else false_fn)(*operands)
    pred = as_pred(pred)
    bodies = [trace_fn(true_fn, operands, "true branch of dg.cond"),
              trace_fn(false_fn, operands, "false branch of dg.cond")]
    return emit_cond(pred, bodies, operands)


# -- while_loop ---------------------------------------------------------------------------------
def _while_kernel(*args, cond_graph, body_graph, max_iters, run=interpret, out=None):
    """(``out``, ``fills_out``: the final carries are written into their arrays where
    given; never views of the inputs)"""
    n = len(body_graph.outputs)
    carry, rest = list(args[:n]), args[n:]
    count = 0
    while run(cond_graph, *carry, *rest)[0]:
        if max_iters is not None and count >= max_iters:
            raise RuntimeError(f"while_loop ran more than max_iters={max_iters} iterations; "
                               "raise max_iters (it bounds the loop for its gradient)")
        carry = run(body_graph, *carry, *rest)
        count += 1
    return (*own_arrays(carry, out, args), np.asarray(count, np.int64))


def _while_infer(*args, cond_graph, body_graph, max_iters):
    n = len(body_graph.outputs)
    _check_call("while_loop", "cond_graph", cond_graph, args)
    _check_call("while_loop", "body_graph", body_graph, args)
    _check_returns("while_loop", "cond_graph", cond_graph, [ShapedType((), np.bool_)])
    _check_returns("while_loop", "body_graph", body_graph, args[:n])
    return (*(ShapedType(tuple(a.shape), a.dtype) for a in args[:n]),
            ShapedType((), np.int64))


def _while_vjp(g, out, *args, cond_graph, body_graph, max_iters):
    if max_iters is None:
        raise CaptureError("the gradient of a traced dg.while_loop without max_iters",
                           user_location(), "Pass max_iters= (a bound on the iterations) to "
                           "dg.while_loop, or use dg.scan for a fixed number of steps.")
    n = len(body_graph.outputs)
    init, rest, count = args[:n], args[n:], out[-1]
    gs = _cotangents(g[:n], out[:n])
    fc = [i for i in range(n) if _is_float(init[i])]
    fr = [j for j, r in enumerate(rest) if _is_float(r) and r.requires_grad]
    steps = creation.arange(max_iters)

    def forward(carry, t):   # step t runs the body while t < count, then holds the carry
        new = cond(t < count, lambda *c: call_graph(body_graph, *c, *rest),
                   lambda *c: c, carry)
        return tuple(new), carry
    _, before = scan(forward, tuple(init), steps)

    def active(c, g_c, g_r):
        cts = [None] * n
        for i, gi in zip(fc, g_c):
            cts[i] = gi
        grads = vjp_call(body_graph, [*c, *rest], cts)
        return (tuple(grads[i] for i in fc),
                tuple(gr + grads[n + j] for gr, j in zip(g_r, fr)))

    def backward(acc, step):
        c, t = step
        return cond(t < count, active, lambda c, g_c, g_r: (g_c, g_r), (c, *acc)), ()
    acc0 = (tuple(gs[i] for i in fc), tuple(creation.zeros_like(rest[j]) for j in fr))
    (g_c, g_r), _ = scan(backward, acc0, (before, steps), reverse=True)
    result = [None] * len(args)
    for i, gi in zip(fc, g_c):
        result[i] = gi
    for j, gj in zip(fr, g_r):
        result[n + j] = gj
    return tuple(result)


def _onnx_while_loop(e, node):
    """while_loop -> Loop(M = max_iters, cond = the condition of the initial carry). The
    body computes the new carry, then the condition on it; one more carried value counts
    the iterations (the node's last output). Past ``max_iters`` ONNX stops where dualgraph
    raises."""
    cond_graph, body_graph = node.attrs["cond_graph"], node.attrs["body_graph"]
    n = len(body_graph.outputs)
    names = e.inputs()
    carried, rest = names[:n], names[n:]
    types = [v.type for v in body_graph.outputs]

    def body(sub, formal):
        count, carry = formal[2], formal[3:]    # (after the iteration number and condition)
        new = sub.inline(body_graph, carry + rest)
        again = sub.inline(cond_graph, new + rest)[0]
        counted = sub.op("Add", [count, sub.scalar(1, np.int64, "one")])
        return [(again, _BOOL), (counted, _INT64), *zip(new, types)]
    graph = e.subgraph(e.body_name("body"), [("i", _INT64), ("cond", _BOOL),
                       ("count", _INT64), *(("carry", t) for t in types)], body)
    first = e.inline(cond_graph, carried + rest)[0]
    bound = node.attrs["max_iters"]
    m = None if bound is None else e.scalar(bound, np.int64, "max_iters")
    zero = e.scalar(0, np.int64, "zero")
    count, *final = e.outputs("Loop", [m, first, zero, *carried], n + 1, body=graph)
    return [*final, count]


WHILE = defop("while_loop", _while_kernel, _while_infer, vjp=_while_vjp,
              attrs=("cond_graph", "body_graph", "max_iters"), num_outputs=None,
              saves="io",
              onnx=_onnx_while_loop,
              bodies=True, fills_out=True)


def check_carry(what: str, old: list, new: list, names=None) -> None:
    """The loop body kept every carried value's type; the error names the one it changed
    (by ``names`` when given, else by position)."""
    if len(old) != len(new):
        raise BodyMismatch(what, f"the body returns {len(new)} values for {len(old)} "
                           "carried values", "Return the carried values in the same "
                           "structure.")
    for i, (a, b) in enumerate(zip(old, new)):
        label = repr(names[i]) if names and len(names) == len(old) else str(i)
        ta, tb = _leaf_type(a), _leaf_type(b)
        if ta != tb:
            raise BodyMismatch(what, f"the body changes carried value {label} from {ta} to "
                               f"{tb}", "A loop keeps the shape and dtype of what it carries.")


def _leaf_type(x) -> str:
    if isinstance(x, ShapedType):
        return type_str(x.shape, x.dtype)
    if isinstance(x, Tensor):
        return type_str(x._data.shape, x._data.dtype)
    if isinstance(x, tuple) and x and x[0] == "const":
        return repr(x[1])
    return repr(x)


def _as_carry(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def while_loop(cond_fn, body_fn, carried_inputs, *, max_iters=None):
    """Run ``carried = body_fn(*carried)`` while ``cond_fn(*carried)``; returns the final
    tuple, as torch's ``while_loop``. The body keeps the structure, shapes and dtypes of the
    carried tensors. Eager it is a Python loop; traced, one ``while_loop`` node. Gradients of
    a traced loop need ``max_iters``, a bound on its iterations (the loop raises past it).

    >>> import dualgraph as dg
    >>> dg.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2),
    ...               (dg.tensor(0), dg.tensor(1.0)))
    (tensor(3), tensor(8.))
    """
    carried = _as_carry(carried_inputs)
    if not modes.building_graph():
        count = 0
        while cond_fn(*carried):
            if max_iters is not None and count >= max_iters:
                raise RuntimeError(f"dg.while_loop ran more than max_iters={max_iters} "
                                   "iterations")
            new = _as_carry(body_fn(*carried))
            check_carry("dg.while_loop", flatten(carried)[0], flatten(new)[0])
            carried, count = new, count + 1
        return carried
    bodies = trace_loop(cond_fn, lambda *c: _as_carry(body_fn(*c)), carried, "dg.while_loop")
    return emit_while(bodies, carried, max_iters)


def trace_loop(cond_fn, body_fn, carried: tuple, what: str, names=None) -> list:
    """Trace a loop's condition and body over ``carried``, checking their results."""
    c = trace_fn(lambda *a: _loop_pred(what, cond_fn(*a)), carried, f"condition of {what}",
                 names)
    b = trace_fn(body_fn, carried, f"body of {what}", names)
    leaves = flatten(carried)[0]
    old = [x if isinstance(x, Tensor) else ("const", x) for x in leaves]
    check_carry(what, old, b.leaf_types(), names)
    if b.spec != flatten(carried)[1]:
        raise BodyMismatch(what, f"the body returns another structure than the carried "
                           f"values ({_describe(b)})", "Return the carried values in the "
                           "structure they came in.")
    return [c, b]


def _loop_pred(what: str, pred) -> Tensor:
    if not isinstance(pred, Tensor):
        raise TypeError(f"{what}: the condition returned {pred!r}; traced, it must return a "
                        "tensor")
    return as_pred(pred)


def emit_while(bodies: list, carried: tuple, max_iters=None):
    """The ``while_loop`` node for a traced condition and body (see :func:`trace_loop`)."""
    captured = align(bodies)
    outs = apply(WHILE, *_tensor_leaves(carried), *captured, cond_graph=bodies[0].graph,
                 body_graph=bodies[1].graph, max_iters=max_iters)
    return bodies[1].rebuild(outs[:-1])


# -- scan ---------------------------------------------------------------------------------------
def _scan_kernel(*args, body_graph, num_carry, num_xs, length, reverse, saves_carry=False,
                 run=interpret, out=None):
    """(``out``: a tuple of an array or None per output, ``fills_out``: each step's ys are
    written into their row of the stacked outputs' arrays, given or new, and the final
    carries into theirs)"""
    carry = list(args[:num_carry])
    xs, rest = args[num_carry:num_carry + num_xs], args[num_carry + num_xs:]
    out_types = body_graph.outputs[num_carry:]
    stacked = [np.empty((0, *v.shape), v.dtype) for v in out_types] if not length else None
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        outs = run(body_graph, *carry, *(x[i] for x in xs), *rest)
        carry = outs[:num_carry]
        if stacked is None:   # (the ys' shapes, symbolic in the body, known at the first step)
            stacked = [empty_into(out_part(out, num_carry + j), (length, *y.shape), y.dtype)
                       for j, y in enumerate(outs[num_carry:])]
        for ys, y in zip(stacked, outs[num_carry:]):
            ys[i] = y
    return (*own_arrays(carry, out, args), *stacked)


def own_arrays(results, out, inputs) -> list:
    """A loop's final carries ``results`` as its kernel returns them: each written into its
    array of ``out`` (a tuple of an array or None per output, or None) where one is given,
    else copied where it may share memory with an array of ``inputs``. A loop's body may
    return what it was given (an unchanged carry, a row of ``xs``), and the results of a
    ``fills_out`` kernel are never views of its inputs (codegen/buffers.py relies on it to
    reuse the inputs' buffers while the results live)."""
    arrays = [x for x in inputs if isinstance(x, np.ndarray)]
    owned = []
    for i, r in enumerate(results):
        o = out_part(out, i)
        if o is not None and o.shape == np.shape(r) and o.dtype == r.dtype:
            np.copyto(o, r)
            r = o
        elif any(np.may_share_memory(r, x) for x in arrays):
            r = np.array(r)
        owned.append(r)
    return owned


def _scan_infer(*args, body_graph, num_carry, num_xs, length, reverse, saves_carry=False):
    xs = args[num_carry:num_carry + num_xs]
    for k, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            raise ShapeError(f"scan: xs {k} has shape {tuple(x.shape)}; scanning {length} "
                             "steps needs a leading dim of that size")
    sliced = [ShapedType(tuple(x.shape[1:]), x.dtype) for x in xs]
    avals = [*args[:num_carry], *sliced, *args[num_carry + num_xs:]]
    _check_call("scan", "body_graph", body_graph, avals)
    carry_out = body_graph.outputs[:num_carry]
    _check_carry_types(args[:num_carry], carry_out)
    return (*(v.type for v in carry_out),
            *(ShapedType((length, *v.shape), v.dtype) for v in body_graph.outputs[num_carry:]))


def _check_carry_types(init, outs) -> None:
    for i, (a, v) in enumerate(zip(init, outs)):
        if tuple(a.shape) != tuple(v.shape) or np.dtype(a.dtype) != v.dtype:
            raise ShapeError(f"scan: @body_graph changes carry {i} from "
                             f"{type_str(a.shape, a.dtype)} to {type_str(v.shape, v.dtype)}")


def _scan_vjp(g, out, *args, body_graph, num_carry, num_xs, length, reverse,
              saves_carry=False):
    C, X = num_carry, num_xs
    init, xs, rest = args[:C], args[C:C + X], args[C + X:]
    gs = _cotangents(g, out)
    num_ys = len(out) - C - (C if saves_carry else 0)   # the saved carries come last
    fc = [i for i in range(C) if _is_float(init[i])]
    fx = [k for k in range(X) if _is_float(xs[k])]
    fr = [j for j, r in enumerate(rest) if _is_float(r) and r.requires_grad]
    fy = [j for j in range(num_ys) if gs[C + j] is not None]
    if saves_carry:   # the carry before every step, stacked by the forward node
        before = tuple(out[C + num_ys:])
    else:             # ... recomputed: the kernel keeps only the last
        def forward(carry, x):
            return call_graph(body_graph, *carry, *x, *rest)[:C], carry
        _, before = scan(forward, tuple(init), tuple(xs), length=length, reverse=reverse)

    def backward(acc, step):
        g_c, g_r = acc
        c, x, g_y = step
        cts = [None] * len(out)
        for i, gi in zip(fc, g_c):
            cts[i] = gi
        for j, gj in zip(fy, g_y):
            cts[C + j] = gj
        grads = vjp_call(body_graph, [*c, *x, *rest], cts)
        new = (tuple(grads[i] for i in fc),
               tuple(gr + grads[C + X + j] for gr, j in zip(g_r, fr)))
        return new, tuple(grads[C + k] for k in fx)
    acc0 = (tuple(gs[i] for i in fc), tuple(creation.zeros_like(rest[j]) for j in fr))
    (g_c, g_r), g_xs = scan(backward, acc0, (before, tuple(xs), tuple(gs[C + j] for j in fy)),
                            length=length, reverse=not reverse)
    result = [None] * len(args)
    for idx, grads in ((fc, g_c), ([C + k for k in fx], g_xs), ([C + X + j for j in fr], g_r)):
        for i, gi in zip(idx, grads):
            result[i] = gi
    return tuple(result)


def _onnx_scan(e, node):
    """scan -> Scan (the opset 9 form): carry = state variables, xs = scan inputs, ys =
    scan outputs stacked on axis 0, ``reverse`` = both directions reversed (the ys are
    prepended, so they keep the order of xs). Outer tensors the body reads come from the
    enclosing scope. A scan without xs gets a dummy scan input of ``length`` rows, since
    ONNX's Scan counts its steps by its scan inputs."""
    a = node.attrs
    graph, c, x = a["body_graph"], a["num_carry"], a["num_xs"]
    names = e.inputs()
    carry, xs, rest = names[:c], names[c:c + x], names[c + x:]
    slices = [ShapedType(tuple(v.shape[1:]), v.dtype) for v in node.inputs[c:c + x]]
    if not xs:
        xs, slices = [e.const(np.zeros(a["length"], np.bool_), "steps")], [_BOOL]

    def body(sub, formal):
        outs = sub.inline(graph, formal[:c] + formal[c:c + x] + rest)
        return list(zip(outs, [v.type for v in graph.outputs]))
    carry_types = [v.type for v in graph.outputs[:c]]
    proto = e.subgraph(e.body_name("body"), [*(("carry", t) for t in carry_types),
                       *(("x", t) for t in slices)], body)
    num_ys = len(graph.outputs) - c
    direction = int(bool(a["reverse"]))
    return e.outputs("Scan", carry + xs, len(node.outputs), body=proto,
                     num_scan_inputs=len(xs), scan_input_directions=[direction] * len(xs),
                     scan_output_directions=[direction] * num_ys if num_ys else None)


SCAN = defop("scan", _scan_kernel, _scan_infer, vjp=_scan_vjp,
             attrs=("body_graph", "num_carry", "num_xs", "length", "reverse", "saves_carry"),
             num_outputs=None, saves="io",
             onnx=_onnx_scan,
             bodies=True, fills_out=True)


def _scan_length(x_leaves, length) -> int:
    for k, x in enumerate(x_leaves):
        if not isinstance(x, Tensor) or not x.ndim:
            raise TypeError(f"dg.scan: xs leaf {k} must be a tensor with a leading axis, got "
                            f"{_leaf_type(x)}")
        n = x._data.shape[0]
        if length is not None and n != length:
            raise ValueError(f"dg.scan: xs leaf {k} has {n} rows but the scan has {length} "
                             "steps; every xs leaf needs the same leading size")
        length = n
    if length is None:
        raise ValueError("dg.scan: give xs or length (the number of steps)")
    return length


def scan(f, init, xs=None, length=None, reverse=False):
    """Loop ``f(carry, x) -> (carry, y)`` over the leading axis of ``xs``; returns the final
    carry and the ys stacked on a new leading axis, as ``jax.lax.scan`` (``init``, ``xs`` and
    the ys may be tuples/lists/dicts of tensors; ``xs=None`` needs ``length``; ``reverse``
    runs from the last row, keeping ys in the order of xs). Eager it is a Python loop;
    traced, one ``scan`` node.

    >>> import dualgraph as dg
    >>> dg.scan(lambda c, x: (c + x, c * x), dg.tensor(0.0), dg.tensor([1.0, 2.0, 3.0]))
    (tensor(6.), tensor([0., 2., 9.]))
    """
    x_leaves, x_spec = flatten(xs)
    if xs is None:
        x_leaves = []
    length = _scan_length(x_leaves, length)
    if not modes.building_graph():
        return _scan_eager(f, init, x_leaves, x_spec, length, reverse)
    return emit_scan(f, init, x_leaves, x_spec, length, reverse)


def emit_scan(f, init, x_leaves: list, x_spec, length: int, reverse=False, what="dg.scan",
              names=None, prune=None):
    """The ``scan`` node for ``f`` traced over ``init`` and a row of each of ``x_leaves``
    (``x_spec`` their structure); returns (carry, ys) as :func:`scan`. Errors call the loop
    ``what`` and its carried values ``names`` (one per leaf of ``init``) when given.
    ``prune(graph) -> graph`` drops what the traced body computes and nothing reads (the
    writes a converted loop moves out of it: ``capture/ast/rows.py``)."""
    slots = [Slot(tuple(x._data.shape[1:]), x._data.dtype,
                  getattr(x._data, "name", "x") + "_t") for x in x_leaves]
    carry_leaves, carry_spec = flatten(init)
    # For a gradient the VJP needs the carry before every step: with saves_carry the body
    # also returns it as a y (the node stacks them), instead of the VJP running the whole
    # forward loop again to recompute them.
    # (Which outer tensors the body reads is known once it is traced: it is traced again
    # without the saved carries when none of its tensors needs a gradient.)
    def traced(saves_carry: bool) -> Body:
        def step(c, x):
            if not saves_carry:
                return _split_step(f(c, x))
            # the carry's values now: an in-place write in f rebinds the tensors it is given
            leaves, spec = flatten(c)
            before = unflatten(spec, [Tensor._make(t._data) for t in leaves])
            new, y = _split_step(f(c, x))
            return new, (y, before)
        x = unflatten(x_spec, slots) if x_leaves else None   # (as eager: no xs, x is None)
        return trace_fn(step, (init, x), f"body of {what}")
    saves_carry = (grad_mode.enabled and bool(carry_leaves)
                   and all(isinstance(c, Tensor) for c in carry_leaves))
    body = traced(saves_carry)
    if saves_carry and not any(t.requires_grad for t in
                               [*carry_leaves, *x_leaves, *body.captured]):
        saves_carry, body = False, traced(False)
    _check_scan_body(body, carry_leaves, carry_spec, what, names)
    if prune is not None:
        body.graph = prune(body.graph)
    if not body.graph.outputs:   # nothing to compute: the body is pure
        return body.rebuild([])
    captured = align([body])
    num_carry = len(_tensor_leaves((init,)))
    outs = apply(SCAN, *_tensor_leaves((init,)), *x_leaves, *captured,
                 body_graph=body.graph, num_carry=num_carry, num_xs=len(x_leaves),
                 length=length, reverse=bool(reverse),
                 **({"saves_carry": True} if saves_carry else {}))
    new_carry, ys = body.rebuild(outs)
    return new_carry, (ys[0] if saves_carry else ys)


def _split_step(result):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError("dg.scan: f(carry, x) must return a pair (new carry, y)")
    return tuple(result)


def _check_scan_body(body: Body, carry_leaves: list, carry_spec, what: str, names) -> None:
    if body.spec[1][0] != carry_spec:
        raise BodyMismatch(what, f"f returns a carry of another structure than init "
                           f"({_describe(body)})", "Return the carry in the structure of init.")
    types = body.leaf_types()
    old = [x if isinstance(x, Tensor) else ("const", x) for x in carry_leaves]
    check_carry(what, old, types[:len(old)], names)
    for i, t in enumerate(types[len(old):]):
        if not isinstance(t, ShapedType):
            raise TypeError(f"dg.scan: y leaf {i} is {t[1]!r}; the ys must be tensors")


def _scan_eager(f, init, x_leaves, x_spec, length, reverse):
    carry, ys, y_spec = init, [], None
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        x = unflatten(x_spec, [x[i] for x in x_leaves]) if x_leaves else None
        new, y = _split_step(f(carry, x))
        check_carry("dg.scan", flatten(carry)[0], flatten(new)[0])
        carry = new
        y_leaves, y_spec = flatten(y)
        ys.append(y_leaves)
    if not ys:
        raise ValueError("dg.scan: zero steps in eager mode (the ys' shapes are unknown)")
    if reverse:
        ys.reverse()
    return carry, unflatten(y_spec, [shape_ops.stack(col) for col in zip(*ys)])


METHODS: dict = {}


# -- the recomputation barrier of a checkpointed region ------------------------------------------
def _barrier_infer(x, after):
    return ShapedType(tuple(x.shape), x.dtype)


RECOMPUTE_BARRIER = defop(
    "recompute_barrier", lambda x, after: x, _barrier_infer,
    vjp=lambda g, out, x, after: (g, None), saves="", view=True,
    doc="``x`` itself, read once ``after`` is computed. A checkpointed region's backward "
        "recomputes the region from its inputs passed through this op, with ``after`` an "
        "incoming gradient: so no pass merges the recomputation with the forward (cse) or "
        "runs it before the backward reaches the region (schedule).")


def recompute_barrier(x: Tensor, after: Tensor) -> Tensor:
    """``x``, as a value the graph computes only after ``after`` (see RECOMPUTE_BARRIER)."""
    return apply(RECOMPUTE_BARRIER, x, after)
