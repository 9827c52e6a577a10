"""Define-then-run: build a graph explicitly, then run it many times (TensorFlow 1 style).

>>> import dualgraph as dg
>>> prog = dg.static.Program()
>>> with prog:
...     x = dg.static.placeholder("x", [None, 3], dg.float32)
...     y = (x * 2).sum(1)
>>> dg.static.Session(prog).run(y, {"x": [[1.0, 2.0, 3.0]]})
array([12.], dtype=float32)

Inside ``with program:`` ops on placeholders are recorded, not run (it is the same tracer
that ``dg.compile`` uses). A session compiles the graph of each set of fetches once, as
``dg.compile`` does (the pass pipeline, fused kernels, reused buffers; ``passes=`` as
there), and runs that code (``session.code(fetches)`` prints it). Tensors created outside
the program (parameters, an optimiser's state) are bound by identity: a run reads their
current values, and a training op (:func:`minimize`) writes the updated values back into
them.
"""
from __future__ import annotations

import numpy as np

from ..autograd import engine
from ..autograd.tape import no_grad
from ..dispatch import modes
from ..codegen import Executable
from ..graph import Graph
from ..graph.ir import Value
from ..shapes import Sym
from ..tensor import Tensor, as_array, bump
from .._pytree import flatten, unflatten
from .subgraph import copy_nodes, needed_nodes
from .trace import Tracer


class Program:
    """A graph under construction; ``with program:`` makes it current."""

    def __init__(self):
        self.tracer = Tracer()
        self.tracer.program = self
        self.placeholders: dict[str, Tensor] = {}

    @property
    def graph(self) -> Graph:
        return self.tracer.graph

    def __enter__(self):
        self.tracer.__enter__()
        return self

    def __exit__(self, *exc):
        self.tracer.__exit__(*exc)
        return False

    def __str__(self):
        return str(self.graph)


class TrainOp:
    """A fetchable update: running it writes new values into parameters and state."""

    def __init__(self, program: Program, updates: list, loss: Tensor):
        self.program, self.updates, self.loss = program, updates, loss

    def __repr__(self):
        return f"<TrainOp: {len(self.updates)} tensors updated>"


def _current_program_tracer(what: str) -> Tracer:
    tracer = modes.tracer
    if not isinstance(tracer, Tracer):
        raise RuntimeError(f"{what} must be called inside `with program:`")
    return tracer


def placeholder(name: str, shape, dtype=None) -> Tensor:
    """A graph input fed at run time; ``None`` dims take any size (dim 0 is the shared
    batch size ``N``; other free dims get their own names)."""
    from .. import dtypes
    tracer = _current_program_tracer("placeholder()")
    program = _program_of(tracer)
    if name in program.placeholders:
        raise ValueError(f"placeholder {name!r} already exists in this program")
    dims = tuple(Sym("N") if d is None and i == 0 else Sym(f"{name}_{i}") if d is None
                 else int(d) for i, d in enumerate(shape))
    dt = dtypes.default_float() if dtype is None else dtypes.to_np(dtype)
    value = tracer.graph.add_input(dims, dt, name=name)
    t = Tensor._make(value)
    program.placeholders[name] = t
    return t


def _program_of(tracer: Tracer) -> Program:
    program = getattr(tracer, "program", None)
    if program is None:
        raise RuntimeError("the current trace is not a dg.static.Program")
    return program


def gradients(loss: Tensor, variables) -> list:
    """Symbolic gradients of ``loss`` with respect to ``variables`` (None where unused)."""
    _current_program_tracer("gradients()")
    single = isinstance(variables, Tensor)
    variables = [variables] if single else list(variables)
    grads = engine.run_backward([loss], [None], retain_graph=True, create_graph=False,
                                capture=variables)
    return grads[0] if single else grads


def minimize(optimizer, loss: Tensor) -> TrainOp:
    """A training op: gradients of ``loss`` for the optimiser's parameters, then its
    ``step()``, recorded into the program. Fetch it in ``Session.run`` to train."""
    tracer = _current_program_tracer("minimize()")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grads = gradients(loss, params)
    saved = [p.grad for p in params]
    for p, g in zip(params, grads):
        p.grad = g
    before = dict(tracer._mutated)
    tracer._mutated.clear()
    with no_grad():
        optimizer.step()
    updates = [(b.tensor, tracer.value_of(b.tensor)) for b in tracer._mutated.values()]
    tracer._mutated.clear()
    tracer._mutated.update(before)
    for p, g in zip(params, saved):
        p.grad = g
    return TrainOp(_program_of(tracer), updates, loss)


class Session:
    """Runs fetches of a program: ``Session(program).run(fetches, feed_dict)``.

    ``passes``: which optimisation passes the compiled graphs get, as in ``dg.compile``
    (None: all; False: none; pass names; or ``{name: False}``)."""

    def __init__(self, program: Program, passes=None):
        self.program = program
        self.passes = passes
        self._cache: dict = {}

    def run(self, fetches, feed_dict=None):
        """Evaluate ``fetches`` (tensors, TrainOps, or lists/tuples/dicts of them); returns
        NumPy arrays in the same structure (None for a TrainOp)."""
        leaves, spec = flatten(fetches)
        executable, bound, writebacks = self._compiled(leaves)
        graph = executable.source_graph
        feeds = self._feeds(feed_dict or {}, graph)
        arrays = [feeds[v.name] if b is None else b._data for v, b in zip(graph.inputs, bound)]
        outs = executable.run(arrays)
        results = iter(outs)
        values = [None if isinstance(x, TrainOp) else next(results) for x in leaves]
        for t, new in zip(writebacks, results):
            np.copyto(t._data, new)
            bump(t)
        return unflatten(spec, values)

    def code(self, fetches) -> str:
        """The generated code that computes ``fetches`` (compiled now if not yet run)."""
        return self._compiled(flatten(fetches)[0])[0].code

    def _compiled(self, leaves):
        key = tuple(id(x) for x in leaves)
        plan = self._cache.get(key)
        if plan is None:
            graph, bound, writebacks = self._plan(leaves)
            executable = Executable(graph, passes=self.passes, body_passes=self.passes)
            plan = self._cache[key] = executable, bound, writebacks
        return plan

    def _plan(self, leaves):
        """The pruned graph computing these fetches, its inputs' sources, its writebacks."""
        tracer = self.program.tracer
        outputs, writebacks = [], []
        for x in leaves:
            if isinstance(x, TrainOp):
                for t, v in x.updates:
                    writebacks.append((t, v))
            elif isinstance(x, Tensor) and isinstance(x._data, Value):
                outputs.append(x._data)
            else:
                raise TypeError(f"can't fetch {type(x).__name__}; fetch tensors built in the "
                                "program or TrainOps")
        wanted = outputs + [v for _, v in writebacks]
        graph, used_inputs = _prune(tracer.graph, wanted)
        by_value = {b.value: b.tensor for b in tracer.bindings}
        bound = [by_value.get(v) for v in used_inputs]
        return graph, bound, [t for t, _ in writebacks]

    def _feeds(self, feed_dict, graph) -> dict:
        names = {v.name: v for v in graph.inputs}
        feeds = {}
        for key, val in feed_dict.items():
            name = key if isinstance(key, str) else _placeholder_name(self.program, key)
            if name not in self.program.placeholders:
                raise KeyError(f"feed_dict names {name!r}, which is not a placeholder of "
                               f"this program (placeholders: {sorted(self.program.placeholders)})")
            ph = self.program.placeholders[name]._data
            array = as_array(val, ph.dtype) if not isinstance(val, np.ndarray) else val
            if array.dtype != ph.dtype:
                array = array.astype(ph.dtype)
            _check_feed(name, ph.shape, array.shape)
            feeds[name] = array
        for name, v in names.items():
            if name in self.program.placeholders and name not in feeds:
                raise KeyError(f"placeholder {name!r} (shape {_fmt(v.shape)}) must be fed: "
                               f"add it to feed_dict")
        return feeds


def _placeholder_name(program: Program, t) -> str:
    for name, ph in program.placeholders.items():
        if ph is t:
            return name
    raise KeyError("feed_dict keys must be placeholders of this program or their names")


def _fmt(shape) -> str:
    return "(" + ", ".join("None" if isinstance(d, Sym) else str(d) for d in shape) + ")"


def _check_feed(name, expected, got):
    ok = len(expected) == len(got) and all(
        isinstance(e, Sym) or e == g for e, g in zip(expected, got))
    if not ok:
        raise ValueError(f"placeholder {name!r} expects shape {_fmt(expected)}, got "
                         f"{tuple(got)}")


def _prune(graph: Graph, outputs: list):
    """A copy of ``graph`` with only the nodes ``outputs`` need; returns it and the
    original input Values it reads, in order."""
    keep = needed_nodes(graph, outputs)
    reads = {x for node in keep for x in node.inputs if isinstance(x, Value)} | set(outputs)
    used_inputs = [v for v in graph.inputs if v in reads]
    return copy_nodes(graph, used_inputs, keep, outputs), used_inputs
