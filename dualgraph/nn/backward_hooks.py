"""A module's backward hooks: ``register_full_backward_hook`` and
``register_full_backward_pre_hook``, with torch's semantics.

A call of a module that has them passes its tensor arguments, and then its tensor outputs,
through an identity :class:`~dualgraph.autograd.Function` (torch's ``BackwardHook`` does the
same). The backward of the one behind the outputs receives the gradients of the outputs:
it runs the pre-hooks (``hook(module, grad_output)``, which may return new ones) and keeps
them; the backward of the one behind the inputs runs after every op of the module's
backward, with the gradients of the inputs: it runs the hooks (``hook(module, grad_input,
grad_output)``, which may return new ``grad_input``). Both tuples have one entry per
positional argument (output): None for one that is no tensor or got no gradient; an input
tensor that needs none gets zeros, as torch gives it. When no input requires grad, the
hooks run with ``grad_input`` all None where the gradients of the outputs are known.

The hooks are Python that runs at every backward, so a module with them is a graph break
under ``dg.compile`` where grad mode is on (the call runs eagerly); a tensor given to or
returned by the module can't be modified in place while the hooks stand between it and
its history (torch refuses it too: autograd/function.py)."""
from __future__ import annotations

import warnings

from .._helpers import format_site, user_site
from ..autograd.function import Function
from ..autograd.tape import grad_mode
from ..dispatch import modes
from ..errors import CaptureError
from ..tensor import Tensor

__all__ = ["BackwardHook"]


class BackwardHookFunction(Function):
    """Its tensors as they are, behind one tape node whose backward hands their gradients
    to ``on_backward`` and passes on what it returns."""

    @staticmethod
    def forward(ctx, on_backward, materialize, *tensors):
        ctx.on_backward = on_backward
        ctx.set_materialize_grads(materialize)
        ctx.mark_non_differentiable(*[t for t in tensors if not t.requires_grad])
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(ctx.on_backward(grads))


class BackwardHook:
    """One call's link between the gradients of a module's outputs and of its inputs."""

    def __init__(self, module, hooks: list, pre_hooks: list):
        if modes.building_graph() and grad_mode.enabled:
            raise CaptureError(
                f"a call of {type(module).__name__} (a module with backward hooks)",
                format_site(user_site()),
                "Its hooks run Python at every backward: the call runs eagerly (a graph "
                "break). Remove the hooks (handle.remove()) for a compiled graph.")
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.grad_outputs = None
        self.n_inputs = self.n_outputs = 0
        self.input_index = self.output_index = None

    def wrap_inputs(self, args: tuple) -> tuple:
        """``args`` with its tensors behind the node that runs the hooks."""
        self.n_inputs = len(args)
        args, self.input_index = _wrap(args, self._on_inputs, True)
        return args

    def wrap_outputs(self, result):
        """``result`` (a tensor or a tuple) with its tensors behind the node that keeps the
        gradients of the outputs and runs the pre-hooks."""
        if not isinstance(result, (Tensor, tuple)):
            warnings.warn("For backward hooks to be called, module output should be a Tensor "
                          f"or a tuple of Tensors but received {type(result)}", stacklevel=3)
        single = not isinstance(result, tuple)
        outs = (result,) if single else result
        self.n_outputs = len(outs)
        outs, self.output_index = _wrap(outs, self._on_outputs, False)
        return outs[0] if single else outs

    def _on_outputs(self, grads: tuple) -> tuple:
        self.grad_outputs = _pack(self.output_index, grads, self.n_outputs)
        for hook in self.pre_hooks:
            new = hook(self.module, self.grad_outputs)
            if new is not None:
                self.grad_outputs = _checked(new, len(self.grad_outputs), "pre hook",
                                             "grad_output")
        grad_outputs = self.grad_outputs
        if self.input_index is None:   # (no input requires grad: the hooks run now)
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients.",
                          stacklevel=2)
            grad_inputs = (None,) * self.n_inputs
            for hook in self.hooks:
                new = hook(self.module, grad_inputs, self.grad_outputs)
                if new is not None and not (isinstance(new, tuple)
                                            and all(g is None for g in new)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return tuple(grad_outputs[i] for i in self.output_index)

    def _on_inputs(self, grads: tuple) -> tuple:
        if self.grad_outputs is None:   # (a gradient that did not come through the outputs)
            return grads
        grad_inputs = _pack(self.input_index, grads, self.n_inputs)
        for hook in self.hooks:
            new = hook(self.module, grad_inputs, self.grad_outputs)
            if new is not None:
                grad_inputs = _checked(new, len(grad_inputs), "hook", "grad_input")
        self.grad_outputs = None
        return tuple(grad_inputs[i] for i in self.input_index)


def _wrap(values: tuple, on_backward, materialize) -> tuple:
    """``values`` with its tensors passed through one :class:`BackwardHookFunction`, and their
    positions; unchanged (and None) when none requires grad or grad mode is off."""
    index = [i for i, v in enumerate(values) if isinstance(v, Tensor)]
    if not (grad_mode.enabled and any(values[i].requires_grad for i in index)):
        return values, None
    wrapped = BackwardHookFunction.apply(on_backward, materialize, *(values[i] for i in index))
    out = list(values)
    for i, t in zip(index, wrapped):
        out[i] = t
    return (tuple(out) if type(values) is tuple else type(values)(*out)), index


def _pack(index, grads, size) -> tuple:
    out = [None] * size
    for i, g in zip(index, grads):
        out[i] = g
    return tuple(out)


def _checked(new, expected: int, kind: str, what: str) -> tuple:
    if not isinstance(new, (tuple, list)):
        raise RuntimeError(f"Backward {kind} must return None or a tuple of {what} (one "
                           f"per entry), got {type(new).__name__}")
    if len(new) != expected:
        raise RuntimeError(f"Backward {kind} returned an invalid number of {what}, got "
                           f"{len(new)}, but expected {expected}")
    return tuple(new)
