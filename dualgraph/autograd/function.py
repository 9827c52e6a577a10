"""Custom autograd functions: ``dg.autograd.Function``, as ``torch.autograd.Function``.

A subclass gives a static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``;
``Fn.apply(*args)`` runs ``forward`` without recording (grad mode off), then records one
tape :class:`~dualgraph.autograd.tape.Node` whose op is a :class:`FunctionOp`: its VJP calls
the user's ``backward``. Straight-through estimators, gradient reversal and activations
with a hand-written derivative are written so.

The same code runs under ``dg.compile``: the forward's ops are traced as any other ops,
and when the traced step calls ``loss.backward()`` the engine calls the user's
``backward`` on traced tensors, so its ops are the backward part of the graph. A compiled
call differentiated from the outside with ``create_graph=True`` would replay the forward's
ops and differentiate them instead of calling ``backward``; the tracer is told of each
function applied (``tracer.custom_functions``), and that replay refuses them by name.

>>> import dualgraph as dg
>>> class Double(dg.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         return x * 2
...     @staticmethod
...     def backward(ctx, g):
...         return g * 2
>>> x = dg.ones(3, requires_grad=True)
>>> Double.apply(x).sum().backward()
>>> x.grad.tolist()
[2.0, 2.0, 2.0]
"""
from __future__ import annotations

import functools

import numpy as np

from .._helpers import format_site, user_site
from ..dispatch import _freeze, modes
from ..ops import creation
from ..ops._util import sum_to
from ..tensor import Tensor
from .tape import Node, edge_of, grad_mode, no_grad

__all__ = ["Function", "FunctionCtx", "once_differentiable"]

# stands on the tape for an output that is no tensor (forward may return numbers too)
_ABSENT = Tensor._make(np.empty(0))


class FunctionCtx:
    """The ``ctx`` a custom function's ``forward`` fills and its ``backward`` reads: saved
    tensors, ``needs_input_grad`` and any attribute the forward sets on it."""

    def __init__(self, needs_input_grad: tuple):
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._saved = ()
        self._non_differentiable: list = []
        self._freed = False

    def save_for_backward(self, *tensors):
        """Keep ``tensors`` (or None) for ``backward``; a later in-place change of one is
        an error in the backward, as in torch."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors or None, but "
                                f"argument {i} is a {type(t).__name__}; keep other values "
                                f"as attributes of ctx (ctx.name = value)")
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple:
        if self._freed:
            raise RuntimeError("trying to backward through the graph a second time (or "
                               "to read saved tensors after they were freed); pass "
                               "retain_graph=True to the first backward() if you need "
                               "to call it twice")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        """The outputs among ``tensors`` get no gradient (an argmax, a mask)."""
        self._non_differentiable.extend(tensors)

    def set_materialize_grads(self, value: bool):
        """With False, ``backward`` gets None (not zeros) for outputs that got no
        gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        raise NotImplementedError(
            "ctx.mark_dirty (a custom function that changes its input in place) is not "
            "supported by dualgraph; return a new tensor from forward instead")


class FunctionOp:
    """The tape's op for one ``apply`` call (the OpDef facts the engine reads)."""

    saves_inputs = saves_outputs = False
    saved_inputs = None
    differentiable_outputs = None
    takes_missing_grads = True   # (None for an output without gradient: vjp fills it)

    def __init__(self, cls, ctx, positions, num_args, num_outputs, site):
        self.cls, self.ctx = cls, ctx
        self.name = cls.__name__
        self.positions = positions     # the forward argument index of each tensor input
        self.num_args = num_args
        self.num_outputs = num_outputs
        self.site = site

    def vjp(self, g, out, *inputs):
        grads = (g,) if self.num_outputs == 1 else tuple(g)
        outs = (out,) if self.num_outputs == 1 else out
        if self.ctx.materialize_grads:
            grads = tuple(creation.zeros_like(o) if gi is None and o is not _ABSENT else gi
                          for gi, o in zip(grads, outs))
        result = self.cls.backward(self.ctx, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        where = (f"{self.name}.backward (the function applied at "
                 f"{format_site(self.site)})")
        if len(result) < self.num_args or any(r is not None
                                              for r in result[self.num_args:]):
            raise RuntimeError(f"{where} returned an incorrect number of gradients "
                               f"(expected {self.num_args}, got {len(result)}): one per "
                               f"forward argument, None for those that need none")
        tensor_grads = []
        for k in range(self.num_args):
            gk = result[k]
            if k not in self.positions:
                if gk is not None:
                    raise RuntimeError(f"{where} returned a gradient different from None "
                                       f"at position {k}, but forward argument {k} is not "
                                       f"a tensor")
                continue
            inp = inputs[self.positions.index(k)]
            tensor_grads.append(None if gk is None else _fit(gk, inp, k, where))
        return tuple(tensor_grads)

    def release(self):
        """Drop the saved tensors once the node is freed, as the engine does a node's."""
        self.ctx._saved = ()
        self.ctx._freed = True


def _fit(g, inp: Tensor, k: int, where: str):
    """The gradient ``g`` for input ``inp``, summed down from a broadcast shape as torch
    does; any other shape is an error."""
    if not isinstance(g, Tensor):
        raise TypeError(f"{where} returned a {type(g).__name__} as the gradient of "
                        f"argument {k}; return a tensor or None")
    want, got = tuple(inp.shape), tuple(g.shape)
    if got == want:
        return g
    lead = len(got) - len(want)
    if lead < 0 or any(w != 1 and w != d for w, d in zip(want, got[lead:])):
        raise RuntimeError(f"{where} returned a gradient of shape {got} for argument {k} "
                           f"of shape {want}; the shapes must match (or broadcast to it)")
    return sum_to(g, want)


class Function:
    """Base class of custom autograd functions; see the module docstring. ``forward``
    may also take no ``ctx`` when the class defines ``setup_context(ctx, inputs,
    output)``, as torch 2 allows."""

    def __call__(self, *args, **kwargs):
        name = type(self).__name__
        raise RuntimeError(
            f"{name}()(...): a custom autograd function is applied with {name}.apply(...), "
            f"with staticmethod forward and backward (torch's legacy style, an instance "
            f"called, is not supported)")

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a custom Function must define a staticmethod forward")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a custom Function must define a staticmethod backward "
                                  "to be differentiated")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{cls.__name__}.apply takes positional arguments only, got "
                            f"{', '.join(kwargs)}")
        positions = tuple(k for k, a in enumerate(args) if isinstance(a, Tensor))
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        separate = cls.setup_context is not Function.setup_context
        with no_grad():
            if separate:
                result = cls.forward(*args)
                cls.setup_context(ctx, args, result)
            else:
                result = cls.forward(ctx, *args)
        single = not isinstance(result, tuple)
        outs = (result,) if single else result
        # an input returned as it is becomes a new tensor on its storage (as torch's view),
        # non-differentiable if the input was marked so
        given = outs
        outs = tuple(o.detach() if isinstance(o, Tensor) and any(o is a for a in args)
                     else o for o in outs)
        ctx._non_differentiable += [o for o, g in zip(outs, given) if o is not g and any(
            g is n for n in ctx._non_differentiable)]
        if grad_mode.enabled and any(needs):
            _record(cls, ctx, args, positions, outs)
            for o, g in zip(outs, given):
                if o is not g and o.requires_grad:   # (one of those new tensors: an in-place
                    o._returned_by = cls.__name__    # write would bypass the node, which
                                                     # ops/inplace.py refuses)
        return outs[0] if single else outs


def _record(cls, ctx, args, positions, outs):
    """Put the outputs on the tape, behind one node whose VJP is ``cls.backward``."""
    tracer = modes.tracer
    tensors = tuple(args[k] for k in positions)
    if tracer is not None:
        tensors = _freeze(tensors)
    site = user_site()
    if tracer is not None and hasattr(tracer, "custom_functions"):
        tracer.custom_functions.append(f"{cls.__name__}.apply at {format_site(site)}")
    diff = [i for i, o in enumerate(outs)
            if isinstance(o, Tensor) and o.dtype.is_floating_point
            and not any(o is n for n in ctx._non_differentiable)]
    op = FunctionOp(cls, ctx, positions, len(args), len(outs), site)
    edges = [edge_of(t) if t.requires_grad else None for t in tensors]
    saved = {id(t): t for t in ctx._saved if t is not None}
    versions = [(t, t._version[0]) for t in saved.values()]
    node = Node(op, tensors, tuple(o if isinstance(o, Tensor) else _ABSENT for o in outs), {},
                edges, versions, site)
    for i in diff:
        outs[i].requires_grad = True
        outs[i].grad_fn = node
        outs[i]._output_nr = i


def once_differentiable(backward):
    """Decorate a ``backward`` that can't be differentiated again: it runs without
    recording, and differentiating its gradients (after a ``create_graph`` backward)
    raises instead of giving a wrong second derivative, as in torch."""
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            result = backward(ctx, *grads)
        recorded = [g for g in grads if isinstance(g, Tensor) and g.requires_grad]
        if not grad_mode.enabled or not recorded:
            return result
        single = not isinstance(result, tuple)
        marked = tuple(_refusing(r, recorded) for r in ((result,) if single else result))
        return marked[0] if single else marked
    return wrapper


class _Twice:
    """The op behind a once-differentiable backward's results: its VJP refuses."""

    name = "once_differentiable"
    saves_inputs = saves_outputs = False
    saved_inputs = differentiable_outputs = None
    num_outputs = 1

    def vjp(self, g, out, *inputs):
        raise RuntimeError(
            "trying to differentiate twice a function that was marked with "
            "@once_differentiable: its backward records no history; write backward with "
            "tensor ops and drop the decorator to take gradients of its gradients")


def _refusing(r, recorded):
    if not isinstance(r, Tensor) or not r.dtype.is_floating_point:
        return r
    out = Tensor._make(r._data)
    edges = [edge_of(t) for t in recorded]
    out.requires_grad = True
    out.grad_fn = Node(_Twice(), tuple(recorded), (out,), {}, edges, [], user_site())
    return out
