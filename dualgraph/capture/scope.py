"""What a captured function can reach: its modules, optimisers and tensors, by name.

Capture sees modules and optimisers by duck typing (it never imports nn or optim). Names
found here label graph inputs (``%model.fc1.weight`` rather than ``%captured_3``), and the
optimisers found are guarded (their state and hyper-parameters).
"""
from __future__ import annotations

from ..tensor import Tensor


def is_module(obj) -> bool:
    """A module instance (not a module class the function names: ``Net(config)``)."""
    return (callable(obj) and hasattr(obj, "named_parameters") and hasattr(obj, "forward")
            and not isinstance(obj, type))


def is_optimizer(obj) -> bool:
    return hasattr(obj, "param_groups") and hasattr(obj, "state") and hasattr(obj, "step")


def scope_of(fn) -> dict:
    """The objects ``fn`` can name: its closure variables and the globals its code uses."""
    fn = getattr(fn, "forward", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    cells = getattr(fn, "__closure__", None) or ()
    scope = {name: cell.cell_contents for name, cell in zip(code.co_freevars, cells)
             if _has_contents(cell)}
    names = set(code.co_names)
    scope.update({k: fn.__globals__[k] for k in names if k in fn.__globals__})
    return scope


def held_objects(fn) -> list:
    """``(name, holder, key, obj)`` for each module, optimiser and tensor ``fn`` reads
    through a closure cell (``holder`` the cell, ``key`` None) or a global (``holder`` the
    globals dict): a graph binds these very objects, so one rebound to another object
    (``target = Net()``, ``model = torch.compile(model)``, a checkpoint loaded into a new
    optimiser) must not be served by it (see :func:`rebound`)."""
    fn = getattr(fn, "forward", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    held = [(name, cell, None, cell.cell_contents)
            for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ())
            if _has_contents(cell)]
    held += [(name, fn.__globals__, name, fn.__globals__[name])
             for name in set(code.co_names) if name in fn.__globals__]
    return [h for h in held
            if is_module(h[3]) or is_optimizer(h[3]) or isinstance(h[3], Tensor)]


def rebound(held: list) -> str | None:
    """The name of the first of ``held`` (:func:`held_objects`) that now holds another
    object (or none), or None when all still hold theirs."""
    for name, holder, key, obj in held:
        if key is None:
            now = holder.cell_contents if _has_contents(holder) else None
        else:
            now = holder.get(key)
        if now is not obj:
            return name
    return None


def readable_names(fn) -> dict:
    """id(tensor) -> a readable name for parameters, buffers, optimiser state and tensors
    that ``fn`` (a function or a module) can reach."""
    names: dict = {}
    if is_module(fn):
        _name_module(fn, "", names)
        return names
    for var, obj in scope_of(fn).items():
        if is_module(obj):
            _name_module(obj, var + ".", names)
        elif is_optimizer(obj):
            for state in obj.state.values():
                for key, val in state.items():
                    if isinstance(val, Tensor):
                        names.setdefault(id(val), f"{var}.state.{key}")
        elif isinstance(obj, Tensor):
            names.setdefault(id(obj), var)
    return names


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _name_module(module, prefix: str, names: dict) -> None:
    for name, p in module.named_parameters():
        names.setdefault(id(p), prefix + name)
    for name, b in module.named_buffers():
        names.setdefault(id(b), prefix + name)
