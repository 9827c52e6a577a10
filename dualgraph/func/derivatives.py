"""Derivative transforms, as ``torch.func``: :func:`grad`, :func:`grad_and_value`,
:func:`vjp`, :func:`jvp`, :func:`jacrev`, :func:`jacfwd`, :func:`hessian`. All are reverse
mode on the tape (``jvp`` and ``jacfwd`` too: see ``dg.autograd.functional``), and nest:
``grad(grad(f))``, ``vmap(grad(f))``, ``jacrev(jacrev(f))``."""
from __future__ import annotations

import functools

from .. import _pytree
from ..autograd import functional as autograd_functional
from ..autograd.functional import gradients
from ..autograd.tape import enable_grad, is_grad_enabled
from ..tensor import Tensor


def _argnums(argnums, count: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums or any(not isinstance(n, int) for n in nums):
        raise ValueError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    for n in nums:
        if not -count <= n < count:
            raise ValueError(f"argnums {n} is out of range for a function called with "
                             f"{count} positional arguments")
    return tuple(n % count for n in nums)


class _Inputs:
    """The positional arguments with the leaves at ``argnums`` made differentiable: a
    tensor that already requires grad (an outer transform's input, or a user's leaf)
    stays connected to its graph; any other becomes a fresh leaf. ``nested`` tells
    whether some outer computation differentiates this one (then gradients are made with
    ``create_graph``)."""

    def __init__(self, args: tuple, argnums, name: str):
        self.nums = _argnums(argnums, len(args))
        self.single = isinstance(argnums, int)
        self.nested = is_grad_enabled() and any(
            isinstance(leaf, Tensor) and leaf.requires_grad
            for leaf in _pytree.flatten(list(args))[0])
        self.args, self.specs, self.leaves = list(args), [], []
        for n in self.nums:
            leaves, spec = _pytree.flatten(args[n])
            for leaf in leaves:
                if not isinstance(leaf, Tensor) or not leaf.is_floating_point():
                    raise TypeError(f"{name}: argument {n} must hold floating-point Tensors "
                                    f"only, got {type(leaf).__name__}"
                                    + (f" of {leaf.dtype}" if isinstance(leaf, Tensor) else ""))
            made = [x.view_as(x) if self.nested and x.requires_grad
                    else x.detach().requires_grad_(True) for x in leaves]
            self.args[n] = _pytree.unflatten(spec, made)
            self.specs.append(spec)
            self.leaves.append(made)

    def flat(self) -> list:
        return [x for leaves in self.leaves for x in leaves]

    def shaped(self, flat: list):
        """Per-leaf values (gradients) in the structure of the differentiated arguments."""
        out, at = [], 0
        for spec, leaves in zip(self.specs, self.leaves):
            out.append(_pytree.unflatten(spec, flat[at:at + len(leaves)]))
            at += len(leaves)
        return out[0] if self.single else tuple(out)

    def finish(self, value):
        """Outputs handed back: detached unless an outer computation differentiates them."""
        leaves, spec = _pytree.flatten(value)
        if not self.nested:
            leaves = [x.detach() if isinstance(x, Tensor) else x for x in leaves]
        return _pytree.unflatten(spec, leaves)


def _with_aux(out, has_aux: bool, name: str):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{name}(f, has_aux=True): f must return a (output, aux) tuple")
    return out


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """``(gradient, value)`` (``(gradient, (value, aux))`` with ``has_aux``) of a function
    returning a one-element tensor, with respect to the arguments ``argnums``."""
    @functools.wraps(func)
    def transformed(*args, **kwargs):
        inputs = _Inputs(args, argnums, "grad")
        with enable_grad():
            value, aux = _with_aux(func(*inputs.args, **kwargs), has_aux, "grad")
            if not isinstance(value, Tensor) or value.numel() != 1:
                raise RuntimeError("grad(f)(*args): f must return a Tensor with one element, "
                                   f"got {_described(value)}")
            grads = gradients((value,), inputs.flat(), (None,), inputs.nested)
        gradient = inputs.finish(inputs.shaped(list(grads)))
        value = inputs.finish(value)
        return (gradient, (value, inputs.finish(aux))) if has_aux else (gradient, value)
    return transformed


def grad(func, argnums=0, has_aux: bool = False):
    """The gradient of a function returning a one-element tensor, in the structure of the
    arguments ``argnums`` (``(gradient, aux)`` with ``has_aux``)."""
    both = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def transformed(*args, **kwargs):
        gradient, value = both(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient
    return transformed


def _described(value) -> str:
    if isinstance(value, Tensor):
        return f"a Tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def vjp(func, *primals, has_aux: bool = False):
    """``(output, vjp_fn)`` (and ``aux``): ``vjp_fn(cotangents)`` is the tuple of
    ``cotangents^T J`` for each primal, the cotangents shaped like the output."""
    inputs = _Inputs(primals, tuple(range(len(primals))), "vjp")
    with enable_grad():
        output, aux = _with_aux(func(*inputs.args), has_aux, "vjp")
    out_leaves, out_spec = _pytree.flatten(output)

    def vjp_fn(cotangents):
        cot_leaves, cot_spec = _pytree.flatten(cotangents)
        if cot_spec != out_spec:
            raise RuntimeError("vjp_fn: the cotangents must have the structure of the "
                               "function's output")
        nested = inputs.nested or any(c.requires_grad for c in cot_leaves)
        got = gradients(out_leaves, inputs.flat(), cot_leaves, nested)
        return inputs.shaped(list(got))     # (a tuple: one entry per primal)
    result = (inputs.finish(output), vjp_fn)
    return result + (inputs.finish(aux),) if has_aux else result


def jvp(func, primals, tangents, *, has_aux: bool = False):
    """``(output, J tangents)`` (and ``aux``); ``primals`` and ``tangents`` are tuples of
    tensors of the same shapes."""
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise RuntimeError("jvp: primals and tangents must be tuples of Tensors")
    aux_box = []

    def plain(*xs):
        out, aux = _with_aux(func(*xs), has_aux, "jvp")
        aux_box.append(aux)
        return out
    output, pushed = autograd_functional.jvp(plain, primals, tangents,
                                             create_graph=is_grad_enabled() and any(
                                                 t.requires_grad for t in primals + tangents))
    result = (output, pushed)
    return result + (aux_box[0],) if has_aux else result


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None):
    """The Jacobian of ``func`` with respect to the arguments ``argnums``: for each output
    tensor, a tensor of shape ``output.shape + argument.shape`` (a tuple of them with a
    tuple ``argnums``), in the output's structure."""
    @functools.wraps(func)
    def transformed(*args, **kwargs):
        inputs = _Inputs(args, argnums, "jacrev")
        with enable_grad():
            output, aux = _with_aux(func(*inputs.args, **kwargs), has_aux, "jacrev")
        out_leaves, out_spec = _pytree.flatten(output)
        for leaf in out_leaves:
            if not isinstance(leaf, Tensor):
                raise RuntimeError(f"jacrev: the function must return Tensors, got "
                                   f"{type(leaf).__name__}")
        blocks = autograd_functional.jacobian_blocks(tuple(out_leaves), tuple(inputs.flat()),
                                                     inputs.nested)
        jac = _pytree.unflatten(out_spec, [inputs.finish(inputs.shaped(row)) for row in blocks])
        return (jac, inputs.finish(aux)) if has_aux else jac
    return transformed


def jacfwd(func, argnums=0, has_aux: bool = False, *, randomness: str = "error"):
    """:func:`jacrev`'s Jacobian (torch computes it in forward mode; the values agree to
    rounding)."""
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    """The Hessian of a function returning a one-element tensor: ``jacfwd(jacrev(func))``."""
    return jacfwd(jacrev(func, argnums), argnums)
