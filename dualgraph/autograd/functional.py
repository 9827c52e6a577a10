"""Derivatives of whole functions, as ``torch.autograd.functional``: :func:`jacobian`,
:func:`hessian`, :func:`vjp`, :func:`jvp`, :func:`vhp` and :func:`hvp`, over a function of a
tensor or a tuple of tensors that returns a tensor or a tuple of tensors.

Everything is reverse mode on the tape: a Jacobian is one backward pass per output
element (torch's ``vectorize=False`` way; ``vectorize=True`` is accepted and computes the
same), and a Jacobian-vector product is the transpose of a vector-Jacobian product
(differentiating ``u -> vjp(u)`` again, the double-backward trick), so ``jvp`` needs every op
of the function to have a differentiable gradient, as ``create_graph`` does. The functions
here also serve ``dg.func``'s ``jacrev``, ``jacfwd`` and ``hessian``."""
from __future__ import annotations

from ..ops import creation, shape as shape_ops
from ..tensor import Tensor
from .engine import grad
from .tape import enable_grad

__all__ = ["jacobian", "hessian", "vjp", "jvp", "vhp", "hvp"]


def _as_tuple(name: str, arg_name: str, value) -> tuple[bool, tuple]:
    """``(was_tuple, values)``; every value must be a tensor."""
    was_tuple = isinstance(value, (tuple, list))
    values = tuple(value) if was_tuple else (value,)
    for i, v in enumerate(values):
        if not isinstance(v, Tensor):
            where = f"{arg_name}[{i}]" if was_tuple else arg_name
            raise TypeError(f"autograd.functional.{name}: {where} must be a Tensor, got "
                            f"{type(v).__name__}")
    return was_tuple, values


def _prepared(inputs: tuple, create_graph: bool) -> tuple:
    """Inputs to differentiate with respect to: with ``create_graph`` and an input that
    already requires grad, the input itself (so the result stays connected to it); else a
    detached copy that requires grad."""
    return tuple(x if create_graph and x.requires_grad else x.detach().requires_grad_(True)
                 for x in inputs)


def gradients(outputs, inputs, grad_outputs, create_graph: bool, strict: bool = False,
              name: str = "gradients") -> tuple:
    """d(outputs . grad_outputs)/d(inputs) (``None`` in ``grad_outputs``: ones, for a
    one-element output), zeros for an input the outputs don't use (an error with
    ``strict``), detached unless ``create_graph``. The graph is kept for more products.
    (Also ``dg.func``'s: its transforms are these products too.)"""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        got = (None,) * len(inputs)
    else:
        got = grad([o for o, _ in pairs], inputs, [g for _, g in pairs], retain_graph=True,
                   create_graph=create_graph, allow_unused=True)
    out = []
    for i, (x, g) in enumerate(zip(inputs, got)):
        if g is None:
            if strict:
                raise RuntimeError(f"autograd.functional.{name}: the output is independent "
                                   f"of input {i} (strict=True)")
            g = creation.zeros_like(x)
        out.append(g if create_graph else g.detach())
    return tuple(out)


def jacobian_blocks(outputs: tuple, inputs: tuple, create_graph: bool, strict: bool = False,
                    name: str = "jacobian") -> list[list[Tensor]]:
    """``blocks[i][j]``: d outputs[i] / d inputs[j], of shape ``outputs[i].shape +
    inputs[j].shape``, one backward pass per output element."""
    blocks = []
    for out in outputs:
        flat = shape_ops.reshape(out, (-1,))
        rows = []
        for k in range(flat.shape[0]):
            if out.requires_grad:
                rows.append(gradients((flat[k],), inputs, (None,), create_graph, strict, name))
            elif strict:
                raise RuntimeError(f"autograd.functional.{name}: output does not require "
                                   "grad: it is independent of the inputs (strict=True)")
            else:
                rows.append(tuple(creation.zeros_like(x) for x in inputs))
        blocks.append([_stack_rows([r[j] for r in rows], out, x)
                       for j, x in enumerate(inputs)])
    return blocks


def _stack_rows(rows: list, out: Tensor, x: Tensor) -> Tensor:
    shape = tuple(out.shape) + tuple(x.shape)
    if not rows:
        return creation.zeros(shape, dtype=x.dtype)
    return shape_ops.reshape(shape_ops.stack(rows), shape)


def _shaped(blocks, outputs_tuple: bool, inputs_tuple: bool):
    """torch's nesting: a tensor, a tuple over inputs, a tuple over outputs, or both."""
    rows = [tuple(r) if inputs_tuple else r[0] for r in blocks]
    return tuple(rows) if outputs_tuple else rows[0]


def _call(func, inputs: tuple, was_tuple: bool, name: str):
    with enable_grad():
        result = func(*inputs) if was_tuple else func(inputs[0])
    return _as_tuple(name, "the function's output", result)


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for one input and one output a tensor of
    shape ``output.shape + input.shape``; tuples of such blocks otherwise (over outputs,
    then inputs). ``strategy="forward-mode"`` gives the same values (computed in reverse
    mode)."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError(f"jacobian: strategy must be 'reverse-mode' or 'forward-mode', got "
                         f"{strategy!r}")
    inputs_tuple, inputs = _as_tuple("jacobian", "inputs", inputs)
    inputs = _prepared(inputs, create_graph)
    outputs_tuple, outputs = _call(func, inputs, inputs_tuple, "jacobian")
    return _shaped(jacobian_blocks(outputs, inputs, create_graph, strict),
                   outputs_tuple, inputs_tuple)


def hessian(func, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of the scalar function ``func``: a tensor of shape ``input.shape * 2``
    for one input, ``H[i][j]`` blocks for a tuple."""
    inputs_tuple, inputs = _as_tuple("hessian", "inputs", inputs)

    def gradient(*xs):
        out_tuple, out = _call(func, xs, True, "hessian")
        if out_tuple or out[0].numel() != 1:
            raise RuntimeError("autograd.functional.hessian: the function must return a "
                               f"single-element Tensor, got shape {tuple(out[0].shape)}")
        return gradients(out, xs, (None,), True, strict, "hessian")
    xs = _prepared(inputs, create_graph)
    blocks = jacobian_blocks(gradient(*xs), xs, create_graph, strict, "hessian")
    return _shaped(blocks, inputs_tuple, inputs_tuple)


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T J)``; ``v`` may be left out when the output has one element."""
    inputs_tuple, inputs = _as_tuple("vjp", "inputs", inputs)
    xs = _prepared(inputs, create_graph)
    outputs_tuple, outputs = _call(func, xs, inputs_tuple, "vjp")
    cotangents = _vectors("vjp", v, outputs)
    grads = gradients(outputs, xs, cotangents, create_graph, strict, "vjp")
    outputs = tuple(o if create_graph else o.detach() for o in outputs)
    return (outputs if outputs_tuple else outputs[0],
            grads if inputs_tuple else grads[0])


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), J v)``, by differentiating the vector-Jacobian product ``u -> u^T J``
    with respect to ``u``; ``v`` may be left out when the input has one element."""
    inputs_tuple, inputs = _as_tuple("jvp", "inputs", inputs)
    tangents = _vectors("jvp", v, inputs)
    xs = _prepared(inputs, create_graph)
    outputs_tuple, outputs = _call(func, xs, inputs_tuple, "jvp")
    with enable_grad():
        dummies = tuple(creation.zeros_like(o).requires_grad_(True) for o in outputs)
        pulled = gradients(outputs, xs, dummies, True, strict, "jvp")
        pulled_used = [(p, t) for p, t in zip(pulled, tangents) if p.requires_grad]
    if pulled_used:
        pushed = gradients([p for p, _ in pulled_used], dummies, [t for _, t in pulled_used],
                        create_graph, strict, "jvp")
    else:
        pushed = tuple(creation.zeros_like(o) for o in outputs)
    outputs = tuple(o if create_graph else o.detach() for o in outputs)
    return (outputs if outputs_tuple else outputs[0],
            pushed if outputs_tuple else pushed[0])


def _vectors(name: str, v, like: tuple) -> tuple:
    """The vectors of a vjp/jvp, checked against the tensors they pair with."""
    if v is None:
        if len(like) != 1 or like[0].numel() != 1:
            raise RuntimeError(f"autograd.functional.{name}: v can be None only when the "
                               "function has a single input/output with one element")
        return (creation.ones_like(like[0]),)
    _, vs = _as_tuple(name, "v", v)
    if len(vs) != len(like):
        raise RuntimeError(f"autograd.functional.{name}: v has {len(vs)} tensors, expected "
                           f"{len(like)}")
    for i, (a, b) in enumerate(zip(vs, like)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f"autograd.functional.{name}: v[{i}] has shape "
                               f"{tuple(a.shape)}, expected {tuple(b.shape)}")
    return vs


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T H)`` of the scalar function ``func``."""
    return _hessian_product("vhp", func, inputs, v, create_graph, strict)


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), H v)``; the Hessian is symmetric, so this is :func:`vhp`'s product
    (torch computes it by a double backward too)."""
    return _hessian_product("hvp", func, inputs, v, create_graph, strict)


def _hessian_product(name, func, inputs, v, create_graph, strict):
    inputs_tuple, inputs = _as_tuple(name, "inputs", inputs)
    vs = _vectors(name, v, inputs)
    xs = _prepared(inputs, create_graph)
    outputs_tuple, out = _call(func, xs, inputs_tuple, name)
    if outputs_tuple or out[0].numel() != 1:
        raise RuntimeError(f"autograd.functional.{name}: the function must return a "
                           f"single-element Tensor, got shape {tuple(out[0].shape)}")
    with enable_grad():
        gradient = gradients(out, xs, (None,), True, strict, name)
    used = [(g, w) for g, w in zip(gradient, vs) if g.requires_grad]
    product = (gradients([g for g, _ in used], xs, [w for _, w in used], create_graph, strict,
                      name) if used else tuple(creation.zeros_like(x) for x in xs))
    value = out[0] if create_graph else out[0].detach()
    return value, product if inputs_tuple else product[0]

