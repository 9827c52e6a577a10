"""What a captured function can reach: its modules, optimisers and tensors, by name.

Capture sees modules, optimisers and schedulers by duck typing (it never imports nn or
optim). Names found here label graph inputs (``%model.fc1.weight`` rather than
``%captured_3``), and the optimisers found are guarded (their state and
hyper-parameters).
"""
from __future__ import annotations

import functools
import inspect
import types

from ..tensor import Tensor


def is_module(obj) -> bool:
    """A module instance (not a module class the function names: ``Net(config)``)."""
    return (callable(obj) and hasattr(obj, "named_parameters") and hasattr(obj, "forward")
            and not isinstance(obj, type))


def is_optimizer(obj) -> bool:
    return hasattr(obj, "param_groups") and hasattr(obj, "state") and hasattr(obj, "step")


def is_scheduler(obj) -> bool:
    """A learning-rate scheduler (``optim.lr_scheduler``'s or a user's subclass of it): it
    steps an optimiser and counts its epochs."""
    return (is_optimizer(getattr(obj, "optimizer", None)) and hasattr(obj, "last_epoch")
            and hasattr(obj, "step"))


def code_owner(fn):
    """The function whose code names what ``fn`` reads: a module's ``forward``, and under
    decorators that wrap (``@torch.no_grad()``, ``functools.wraps``) the function they
    wrap, whose globals and closure are the user's."""
    return inspect.unwrap(getattr(fn, "forward", fn))


def scope_of(fn) -> dict:
    """The objects ``fn`` can name: its closure variables and the globals its code uses."""
    fn = code_owner(fn)
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
    """``(name, read, obj)`` for each module, optimiser and tensor ``fn`` reads through a
    closure cell or a global, and each module and optimiser held one or two levels inside
    one (an item of a small list, tuple or dict, an attribute of a plain object:
    ``heads[0]``, ``nets["target"]``, ``cfg.model``); ``read()`` gives what the place holds
    now. A graph binds these very objects, so one rebound to another object (``target =
    Net()``, ``heads[0] = Net()``, ``model = torch.compile(model)``, a checkpoint loaded
    into a new optimiser) must not be served by it (see :func:`rebound`)."""
    fn = code_owner(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    held: list = []
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        if _has_contents(cell):
            _hold(held, name, functools.partial(_cell, cell), cell.cell_contents, 0)
    g = fn.__globals__
    for name in sorted(set(code.co_names)):
        if name in g:
            _hold(held, name, functools.partial(g.get, name), g[name], 0)
    return held


_MAX_ITEMS = 64   # larger containers (a dataset, a vocabulary) are not looked into


def _hold(held: list, name: str, read, obj, depth: int) -> None:
    """Add ``obj`` (read by ``read``) to ``held`` if a graph may bind it, else what it
    holds: items and public attributes, two levels deep (tensors only at the top: a list
    of tensors is state a step may rebind at every call)."""
    if is_module(obj) or is_optimizer(obj) or (depth == 0 and isinstance(obj, Tensor)):
        held.append((name, read, obj))
        return
    if depth >= 2:
        return
    if isinstance(obj, (list, tuple)) and len(obj) <= _MAX_ITEMS:
        items = [(f"{name}[{i}]", i, v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict) and len(obj) <= _MAX_ITEMS:
        items = [(f"{name}[{k!r}]", k, v) for k, v in obj.items()]
    elif plain_object(obj):
        items = [(f"{name}.{k}", _Attr(k), v) for k, v in vars(obj).items()
                 if not k.startswith("_")]
    else:
        return
    for label, key, value in items:
        _hold(held, label, functools.partial(_item, read, key), value, depth + 1)


class _Attr(str):
    """A key that names an attribute (``cfg.model``), not an item."""


def _item(read, key):
    """What ``read()``'s ``key`` holds now (None when it is gone)."""
    obj = read()
    try:
        return getattr(obj, key) if isinstance(key, _Attr) else obj[key]
    except (LookupError, TypeError, AttributeError):
        return None


def _cell(cell):
    return cell.cell_contents if _has_contents(cell) else None


def plain_object(obj) -> bool:
    """A user object whose attributes may be read: not a class, module, function, tensor or
    builtin container."""
    module = getattr(type(obj), "__module__", None) or ""   # (none: a class made by
    return (hasattr(obj, "__dict__") and not callable(obj)  # ``type()`` in exec'd code)
            and not isinstance(obj, (type, types.ModuleType, Tensor))
            and module != "builtins" and not module.startswith("dualgraph."))


def rebound(held: list) -> str | None:
    """The name of the first of ``held`` (:func:`held_objects`) that now holds another
    object (or none), or None when all still hold theirs."""
    for name, read, obj in held:
        if read() is not obj:
            return name
    return None


def readable_names(fn, arguments=()) -> dict:
    """id(tensor) -> a readable name for parameters, buffers, optimiser state and tensors
    that ``fn`` (a function or a module) can reach, and the parameters, buffers and
    optimiser state of the modules and optimisers among its ``arguments`` ((name, value)
    pairs: ``step(model, optimizer, x)`` reaches their state as it reaches its scope's)."""
    names: dict = {}
    if is_module(fn):
        _name_module(fn, "", names)
    passed = [(var, obj) for var, obj in arguments if is_module(obj) or is_optimizer(obj)]
    scope = {} if is_module(fn) else scope_of(fn)
    for var, obj in [*scope.items(), *passed]:
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
    """The parameters, buffers and plain tensor attributes (``self.cache``) of ``module``
    and its submodules."""
    for name, p in module.named_parameters():
        names.setdefault(id(p), prefix + name)
    for name, b in module.named_buffers():
        names.setdefault(id(b), prefix + name)
    for path, m in module.named_modules(prefix=prefix.rstrip(".")):
        for name, t in vars(m).items():
            if isinstance(t, Tensor):
                names.setdefault(id(t), f"{path}.{name}" if path else name)
