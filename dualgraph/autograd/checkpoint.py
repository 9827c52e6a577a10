"""Activation checkpointing: a region keeps its inputs, not its activations, and its backward
runs the region again.

``checkpoint(fn, *args)`` runs ``fn`` recording as usual, then replaces the nodes the region
recorded by one :class:`~dualgraph.autograd.tape.Node` whose op is a :class:`Checkpoint`.
That node's edges are the region's *boundary*: the nodes outside the region (earlier ops,
leaf accumulators of parameters) that its ops took gradients to; it saves only the tensors
at that boundary. The region's own nodes are freed at once, so its intermediate tensors die
as soon as the Python code drops them. The node's VJP runs ``fn`` again with grad on and the
random state of the forward (dropout draws the same masks), then backpropagates from the
recomputed outputs to the boundary only: the outer backward continues from there.

While tracing (``dg.compile`` of a training step), the same code puts the recomputation in
the backward part of the graph: the region's inputs (and the seeds its random draws read)
reach it through ``recompute_barrier`` nodes that wait for an incoming gradient, so no pass
merges it with the forward or runs it early, and its nodes are located ``(recompute)``.

``use_reentrant=True`` is torch's other variant: the forward runs under ``no_grad``, the
backward recomputes from detached inputs, parameters' gradients are accumulated by that
inner backward, and ``dg.autograd.grad`` through the region is refused.
"""
from __future__ import annotations

import contextlib
import warnings

from .._helpers import format_site, user_site
from .._pytree import flatten, unflatten
from ..dispatch import modes
from ..ops import random as rnd
from ..ops.control import recompute_barrier
from ..tensor import Tensor
from . import engine
from .tape import AccumulateGrad, Node, _sequence, edge_of, enable_grad, grad_mode, no_grad


class Checkpoint:
    """The tape's op for one checkpointed call (the OpDef facts the engine reads)."""

    name = "checkpoint"
    saves_inputs = saves_outputs = False
    saved_inputs = None
    differentiable_outputs = None

    def __init__(self, function, args, kwargs, positions, types, rng, edges, reentrant):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.positions = positions    # which leaves of the result are the node's outputs
        self.types = types            # their (shape, dtype): the recomputation must match
        self.num_outputs = len(positions)
        self.rng, self.edges, self.reentrant = rng, edges, reentrant
        self.site = None

    def vjp(self, g, out, *inputs):
        grads = (g,) if self.num_outputs == 1 else g
        if self.reentrant and grad_mode.partial:
            raise RuntimeError(
                f"checkpoint(use_reentrant=True) (called at {format_site(self.site)}) is "
                "incompatible with dg.autograd.grad() or backward(inputs=...); pass "
                "use_reentrant=False, or call .backward() without inputs")
        create = grad_mode.enabled
        token = next(x for x in grads if x is not None)
        args, kwargs = self.args, self.kwargs
        seeds = self.rng.seeds
        first = next(_sequence)
        with enable_grad():
            if modes.building_graph():   # the recomputation waits for the backward to get here
                args, kwargs = _tree_map(lambda t: recompute_barrier(t, token), (args, kwargs))
                seeds = [recompute_barrier(s, token) for s in seeds]
            if self.reentrant:
                args, kwargs = _tree_map(_detached, (args, kwargs))
            with self.rng.replay(seeds), _recomputing():
                result = self.function(*args, **kwargs)
        outs = self._outputs(result)
        roots, root_grads = [], []
        for t, gi in zip(outs, grads):
            if gi is not None and t.requires_grad:
                roots.append(t)
                root_grads.append(gi)
        if not roots:
            raise RuntimeError("checkpoint: none of the recomputed outputs requires grad, "
                               "so this checkpoint() is not necessary")
        if self.reentrant:   # parameters accumulate here; gradients stop at the inputs
            stop = [(t._accumulate_node(), 0) for t in _tensors(args)]
            return tuple(engine.run_backward(roots, root_grads, False, False, stop=stop))
        _, recomputed = _region([t.grad_fn for t in roots], first)
        unknown = [e for e in recomputed if e not in self.edges]
        if unknown:
            raise RuntimeError(
                f"checkpoint: the recomputation of the function checkpointed at "
                f"{format_site(self.site)} reads {len(unknown)} tensor(s) its forward did "
                "not read; the function must do the same thing every time it runs")
        return tuple(engine.run_backward(roots, root_grads, create, create,
                                         stop=list(self.edges)))

    def release(self):
        """Drop the saved inputs once the node is freed (after a backward without
        ``retain_graph``), as the engine drops a node's saved tensors."""
        self.args = self.kwargs = self.edges = None
        self.rng.seeds = []

    def _outputs(self, result) -> list:
        leaves, _ = flatten(result)
        outs = [leaves[i] if i < len(leaves) else None for i in self.positions]
        for t, (shape, dtype) in zip(outs, self.types):
            if not isinstance(t, Tensor) or (tuple(t.shape), t.dtype) != (shape, dtype):
                got = (f"{tuple(t.shape)} {t.dtype}" if isinstance(t, Tensor)
                       else type(t).__name__)
                raise RuntimeError(
                    f"checkpoint: the recomputation of the function checkpointed at "
                    f"{format_site(self.site)} returned {got} where the forward returned "
                    f"{shape} {dtype}; the function must do the same thing every time it "
                    "runs")
        return outs


class _RandomState:
    """The random state a region's forward started from, for its recomputation: the
    global generator's PCG64 stream (``nn.init``'s draws) and the seeds the draws of
    ``dg.rand`` and its kin read (eager or traced: ``ops/random.py``)."""

    def __init__(self, preserve: bool):
        self.state = rnd.default_generator.rng.bit_generator.state if preserve else None
        self.seeds: list = []

    @contextlib.contextmanager
    def replay(self, seeds):
        if self.state is None:
            yield
            return
        stream = rnd.default_generator.rng.bit_generator
        now = stream.state
        stream.state = self.state
        try:
            with rnd.replaying_draws(seeds):
                yield
        finally:
            stream.state = now


def checkpoint(function, *args, use_reentrant: bool = False, preserve_rng_state: bool = True,
               **kwargs):
    """``function(*args, **kwargs)``, keeping for the backward only the tensors the region
    reads from outside, not the activations inside it: the backward runs ``function``
    again (with the same random state, so dropout draws the same masks) and gives exactly
    the gradients of the plain call. As ``torch.utils.checkpoint.checkpoint``; compiled by
    ``dg.compile``, the recomputation is part of the backward graph.

    >>> import dualgraph as dg
    >>> from dualgraph.utils.checkpoint import checkpoint
    >>> x = dg.ones(3, requires_grad=True)
    >>> y = checkpoint(lambda t: (t * 2).exp(), x).sum()
    >>> y.backward()
    >>> bool(dg.allclose(x.grad, 2 * dg.exp(dg.full((3,), 2.0))))
    True
    """
    if use_reentrant and kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not callable(function):
        raise TypeError(f"checkpoint: the function must be callable, got "
                        f"{type(function).__name__}")
    if not grad_mode.enabled:   # nothing is recorded, so nothing would be kept either
        return function(*args, **kwargs)
    rng = _RandomState(preserve_rng_state)
    if use_reentrant:
        return _reentrant(function, args, rng)
    first = next(_sequence)
    with rnd.recording_draws() as rng.seeds:
        result = function(*args, **kwargs)
    leaves, _ = flatten(result)
    outs, positions = [], []
    for i, t in enumerate(leaves):
        if (isinstance(t, Tensor) and isinstance(t.grad_fn, Node) and t.grad_fn.seq > first
                and all(t is not o for o in outs)):
            outs.append(t)
            positions.append(i)
    if not outs:
        return result
    inner, edges = _region([t.grad_fn for t in outs], first)
    saved = list(edges.values())
    versions = _versions(_tensors((args, kwargs)) + saved)
    op = Checkpoint(function, args, kwargs, positions,
                    [(tuple(t.shape), t.dtype) for t in outs], rng, edges, False)
    _record(op, saved, outs, [e if e[1] else e[0] for e in edges], versions)   # (edge_of's)
    for node in inner:   # (breaks the node <-> tensor cycles: the activations die now)
        engine._free(node)
    return result


def _reentrant(function, args, rng):
    tensors = _tensors(args)
    if not any(t.requires_grad for t in tensors):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      stacklevel=3)
    with no_grad():
        result = function(*args)
    if not any(t.requires_grad for t in tensors):
        return result
    leaves, _ = flatten(result)
    outs, positions = [], []
    for i, t in enumerate(leaves):
        if (isinstance(t, Tensor) and t.dtype.is_floating_point
                and all(t is not a for a in tensors) and all(t is not o for o in outs)):
            outs.append(t)
            positions.append(i)
    if not outs:
        return result
    op = Checkpoint(function, args, {}, positions,
                    [(tuple(t.shape), t.dtype) for t in outs], rng, None, True)
    edges = [edge_of(t) if t.requires_grad else None for t in tensors]
    _record(op, tensors, outs, edges, _versions(tensors))
    return result


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool = False,
                          **kwargs):
    """Run ``functions`` (a ``Sequential`` or a list of modules or functions) one after the
    other on ``input``, checkpointing each of ``segments`` chunks but the last, as
    ``torch.utils.checkpoint.checkpoint_sequential``.

    >>> import dualgraph as dg
    >>> from dualgraph.utils.checkpoint import checkpoint_sequential
    >>> seq = dg.nn.Sequential(dg.nn.Linear(4, 4), dg.nn.Tanh(), dg.nn.Linear(4, 1))
    >>> tuple(checkpoint_sequential(seq, 2, dg.ones(2, 4)).shape)
    (2, 1)
    """
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if hasattr(functions, "children") and not isinstance(functions, (list, tuple)):
        functions = list(functions.children())
    functions = list(functions)

    def run(start, end):
        def forward(x):
            for f in functions[start:end + 1]:
                x = f(x)
            return x
        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)


def _record(op, inputs, outs, edges, versions):
    node = Node(op, inputs, tuple(outs), {}, edges, versions, user_site())
    op.site = node.site
    for i, t in enumerate(outs):
        t.requires_grad = True
        t.grad_fn = node
        t._output_nr = i


def _region(roots, first: int):
    """The nodes recorded after sequence number ``first`` that ``roots`` reach, and the
    boundary: ``{(node, output index): tensor}`` for each edge leaving them."""
    inner, edges = set(), {}
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in inner:
            continue
        inner.add(node)
        for j, edge in enumerate(node.next):
            if edge is None:
                continue
            if not isinstance(edge[0], AccumulateGrad) and edge[0].seq > first:
                stack.append(edge[0])
            elif edge not in edges:
                edges[edge] = node.inputs[j]
    return inner, edges


def _versions(tensors) -> list:
    seen = {}
    for t in tensors:
        seen.setdefault(id(t), t)
    return [(t, t._version[0]) for t in seen.values()]


def _tensors(tree) -> list:
    return [x for x in flatten(tree)[0] if isinstance(x, Tensor)]


def _tree_map(fn, tree):
    leaves, spec = flatten(tree)
    return unflatten(spec, [fn(x) if isinstance(x, Tensor) else x for x in leaves])


def _detached(t: Tensor) -> Tensor:
    return t.detach().requires_grad_(t.requires_grad)


@contextlib.contextmanager
def _recomputing():
    """While tracing, the recomputed nodes carry their own user lines, marked."""
    tracer = modes.tracer if modes.building_graph() else None
    if tracer is None:
        yield
        return
    outer = tracer.backward_site, tracer.recomputing
    tracer.backward_site, tracer.recomputing = None, True
    try:
        yield
    finally:
        tracer.backward_site, tracer.recomputing = outer
