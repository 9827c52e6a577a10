"""In-place ops: ``x.add_(y)`` is ``add(x, y)`` committed into ``x``'s storage.

Autograd treats an in-place op functionally: the new value gets the out-of-place op's
history, the old value's saved copies are protected by the version counter (a VJP that
needs an overwritten value raises instead of returning a wrong gradient), and while tracing
the tensor simply starts referring to the new symbolic value.

The op families build their in-place variants here, so this module imports none of them:
the cast to the target's dtype is the Tensor method ``to``, bound when ``dualgraph.ops``
loads.
"""
from __future__ import annotations

import numpy as np

from ..autograd.tape import grad_mode
from ..dispatch import modes
from ..tensor import Tensor


def commit_inplace(target: Tensor, result: Tensor) -> Tensor:
    """Make ``target`` hold ``result``: write into its storage (so views see it), bump its
    version (so saved copies are caught), and give it ``result``'s history."""
    if grad_mode.enabled and target.requires_grad and target.grad_fn is None:
        raise RuntimeError(
            "a leaf tensor that requires grad is being used in an in-place operation; "
            "wrap the update in `with dg.no_grad():` or work on a clone")
    base = target._base
    if grad_mode.enabled and result.requires_grad and base is not None and base.requires_grad:
        raise RuntimeError(
            "in-place operations on a view of a tensor that requires grad are not supported; "
            "compute the new value out of place (e.g. with dg.where or dg.cat)")
    data = target._data
    if type(data) is np.ndarray and type(result._data) is np.ndarray:
        if not data.flags.writeable:
            raise RuntimeError(
                "in-place operation on a tensor whose storage is read-only (an expanded or "
                "broadcast view); call .clone() first")
        np.copyto(data, result._data, casting="unsafe")
    else:  # tracing: the tensor now refers to the new symbolic value (functionalised)
        modes.tracer.note_mutation(target)
        target._data = result.to(target.dtype)._data
    target._version[0] += 1
    if result.requires_grad and grad_mode.enabled:
        result = result.to(target.dtype)
        target.requires_grad = True
        target.grad_fn = result.grad_fn
        target._output_nr = result._output_nr
    return target


def source_of(target: Tensor, *others) -> Tensor:
    """What an in-place op on ``target`` should compute from: ``target`` itself, or, when
    the result will be recorded for autograd, a copy of its current value with its
    history. The copy is what the backward node saves, so overwriting ``target`` does not
    invalidate it (``y.sin_()`` differentiates through the old ``y``, as in torch)."""
    if not grad_mode.enabled:
        return target
    if not (target.requires_grad
            or any(isinstance(o, Tensor) and o.requires_grad for o in others)):
        return target
    tracer = modes.tracer
    if tracer is None:
        snapshot = Tensor._make(target._data.copy())
    else:   # traced values are immutable: share it, but not the version counter
        snapshot = Tensor._make(tracer.value_of(target))
    snapshot.requires_grad = target.requires_grad
    snapshot.grad_fn = target.grad_fn
    snapshot._output_nr = target._output_nr
    return snapshot


def inplace(fn):
    """``x.fn_(*args)``: compute ``fn(x, *args)`` and commit it into ``x``."""
    def method(self, *args, **kwargs):
        source = source_of(self, *args, *kwargs.values())
        return commit_inplace(self, fn(source, *args, **kwargs))
    method.__name__ = fn.__name__ + "_"
    method.__doc__ = f"In-place version of :meth:`{fn.__name__}`."
    return method
