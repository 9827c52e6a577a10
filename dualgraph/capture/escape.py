"""Tensors a trace made and left in Python state: ``self.state[p] = dg.zeros_like(p)``.

Tracing runs the function's Python once, so a tensor the function makes and keeps (an
optimiser's lazily created buffer, a module's cached attention mask) would hold a symbolic
value after the trace, and the Python branch that made it (``if p not in self.state``) ran
only because the state did not exist yet. :func:`created_state` finds such tensors in what
the function can reach (its closure and globals, the modules, optimisers and plain objects
they hold, their dicts, lists and tuples), so that the capture can compute them as outputs
and make them real tensors (capture/compile.py runs that graph once, then traces again).
A trace that ends in a graph break puts those places back as they were
(:func:`places` before the trace, :func:`undo` after), so the eager run makes the state
itself.

>>> import dualgraph as dg
>>> from dualgraph.capture.trace import Tracer
>>> cache = {}
>>> with Tracer() as tracer:
...     cache["mask"] = dg.ones(2, 2).tril()
>>> [name for name, _ in created_state({"cache": cache}, tracer)]
["cache['mask']"]
"""
from __future__ import annotations

import types

from .._helpers import format_site, user_site
from ..errors import CaptureError
from ..graph.ir import Value
from ..tensor import Tensor

MAX_DEPTH = 6
MAX_ITEMS = 10_000   # longer dicts (a vocabulary) are not looked into; of a longer list
                     # or tuple (a dataset, a kept history), only the last MAX_ITEMS items
_METHODS = (types.MethodType, types.BuiltinMethodType)
_OPAQUE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, type)
# (sets: not looked into, as before, without the cost of failing to)
_NOTHING_INSIDE = (Tensor, set, frozenset) + _OPAQUE
_NO_DICT = _NOTHING_INSIDE + (tuple,)


class _Absent:
    """A place that holds nothing (an item or attribute not there)."""


_ABSENT = _Absent()


def _walk(roots: dict, visit, skip=(), leaf=None) -> None:
    """Call ``visit(path, obj, container, key)`` for every object reachable from ``roots``
    (name -> object) through dicts, lists, tuples and objects' ``__dict__``; ``container``
    is the dict (or list, tuple) holding it under ``key``, ``path`` what :func:`_name`
    makes its name of (built only for the few objects a visit names). Tensors are not
    looked into (but for the closures of their gradient hooks), nor the objects whose ids
    are in ``skip``; an object reached again is not
    visited again. With ``leaf``, the tensors and scalars a container holds are handed to
    ``leaf(path, obj, container, key)`` instead, at every place (a kept history of a
    thousand losses is a thousand calls of ``leaf``, not of the walk)."""
    seen = set(skip)

    def walk(obj, name, container, key, depth):
        if depth > MAX_DEPTH or id(obj) in seen:
            return
        seen.add(id(obj))
        visit(name, obj, container, key)
        kind = type(obj)
        if isinstance(obj, Tensor):
            hooks(obj, name, depth)
        if kind is types.FunctionType:   # (a hook's closure or globals: ``stats[k] = out``;
            # at the function's depth: a hook sits deep in a model already)
            for k, value in _user_scope(obj):
                walk(value, (name, ".", k), None, None, depth)
            return
        if kind is types.MethodType and _user_function(obj.__func__):
            # (a hook that is a method of the user's object, which keeps state in its own
            # attributes: ``self.gradients = [grad] + self.gradients``; walked as a root's
            # attribute is, however deep in a model the hook sits)
            walk(obj.__self__, (name, ".", "__self__"), None, None, min(depth, 1))
            walk(obj.__func__, name, None, None, depth)
            return
        if kind in _SCALARS or isinstance(obj, _NOTHING_INSIDE):
            return
        if kind is list or kind is tuple:   # (a long list: its latest items, as appended)
            start = max(len(obj) - MAX_ITEMS, 0)
            holder, items, sep = obj, enumerate(obj[start:] if start else obj, start), "["
        else:
            holder = obj if isinstance(obj, dict) else getattr(obj, "__dict__", None)
            if holder is None or len(holder) > MAX_ITEMS:
                return
            items, sep = holder.items(), "[" if holder is obj else "."
        for k, child in items:
            if leaf is not None and (type(child) in _SCALARS or isinstance(child, Tensor)):
                leaf((name, sep, k), child, holder, k)
                if type(child) not in _SCALARS:
                    hooks(child, (name, sep, k), depth + 1)
            else:
                walk(child, (name, sep, k), holder, k, depth + 1)

    def hooks(t, name, depth):
        """The closures of ``t``'s gradient hooks (``p.register_hook(lambda g:
        log.append(g))``): a backward in the call runs them."""
        for i, hook in enumerate(_hooks_of(t)):
            walk(hook, (name, ".", f"_hooks[{i}]"), None, None, depth)

    for name, obj in roots.items():
        walk(obj, name, None, None, 0)


def _hooks_of(t: Tensor) -> list:
    """The functions registered on the leaf ``t`` (``register_hook``,
    ``register_post_accumulate_grad_hook``): a backward the call runs calls them, so the
    state their closures keep is state the call keeps."""
    return [*(t._hooks or ()), *(t._post_accumulate_hooks or ())]


def _user_function(fn) -> bool:
    return not (getattr(fn, "__module__", None) or "").startswith("dualgraph.")


def _user_scope(fn) -> list:
    """``[(name, value)]`` of the closure cells of ``fn``, a function outside dualgraph, and
    of the globals its code names, that hold containers or objects (a dict a forward hook
    keeps activations in): the walk looks into them. Not their tensors and scalars: a cell
    or a module's global is no container a kept tensor could be written back into."""
    if not _user_function(fn):
        return []
    code, glob = fn.__code__, fn.__globals__
    out = []
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            out.append((name, cell.cell_contents))
        except ValueError:   # (empty)
            continue
    out += [(name, glob[name]) for name in code.co_names if name in glob]
    return [(name, v) for name, v in out
            if type(v) not in _SCALARS and not isinstance(v, _NOTHING_INSIDE)]


def _ignore(path, obj, container, key) -> None:
    """A ``leaf`` of :func:`_walk` for walks that look for no tensor or scalar."""


def created_state(roots: dict, tracer) -> list:
    """``[(name, tensor)]``: the tensors reachable from ``roots`` (name -> object) that
    ``tracer`` made, holding values of its graph, other than its inputs (given back their
    storage when the trace ends); named by the tracer's ``names`` (id(tensor) -> name) where
    a tensor keys a dict (``opt.state[fc.weight]``). A tensor an earlier call made and left
    where no walk found it holds no value of this call, even when its Value is one of this
    graph's (a replayed call's Values are the tape's): it is not this call's state."""
    return [(name, t) for name, t, _, _ in _created(roots, tracer, tracer.names)]


def returned_inside(leaves, tracer) -> list:
    """Names of the tensors ``tracer`` made that the function returns inside an object of
    its own (a leaf of the flattened result that is no tensor, number, container or
    dataclass): the object itself would be returned at every call, holding traced values."""
    roots = {type(x).__name__: x for x in leaves
             if type(x) not in _SCALARS and not isinstance(x, _NOTHING_INSIDE)}
    return [name for name, *_ in _created(roots, tracer, tracer.names)] if roots else []


def refuse_kept_by_backward(roots: dict, tracer, kept: list) -> None:
    """Raise where the backward traced for a compiled forward (capture/autodiff.py) kept
    a tensor in Python state where the forward had not (``kept``): a gradient hook registered
    in ``forward`` storing its gradient (Grad-CAM's ``self.gradients = grad``, a log). That
    backward runs its hooks once, at the trace; each call's backward runs its graph, which
    would leave the trace's symbolic value there. A graph break: the forward runs eagerly,
    its hooks at each backward (torch.compile breaks at such a hook too). A place the
    forward keeps too is the forward's (a checkpointed block's forward hook, run again)."""
    before = {(id(container), key) for _, _, container, key in kept}
    late = [name for name, _, container, key in _created(roots, tracer, tracer.names)
            if (id(container), key) not in before]
    if late:
        raise CaptureError(f"a gradient hook that keeps a tensor of the backward ({late[0]})",
                           format_site(user_site()), "Keep it outside the hook, or compile "
                           "the whole training step (its backward is then in the graph).")


def kept_places(roots: dict, tracer) -> list:
    """``[(name, tensor, container, key)]``: :func:`created_state` with where each is kept
    (the dict, attribute dict or list, and its key)."""
    return _created(roots, tracer, tracer.names)


def made_here(obj, tracer) -> bool:
    """Whether ``obj`` is a tensor ``tracer``'s call made (holding a value of its graph),
    not one of its inputs."""
    return (isinstance(obj, Tensor) and type(obj._data) is Value and obj._data in tracer.graph
            and obj._trace_id in (0, tracer.trace_id) and id(obj) not in tracer._bound)


def _created(roots, tracer, names) -> list:
    found, bound = [], tracer._bound
    # views from before the trace that a write through their base made stale and the
    # trace refreshed (``buf = base[i]`` after ``base[j].copy_(...)``): they hold a
    # traced value until the trace ends and gets them back, but the trace did not make them
    seen = {i for i, (_, data, *_) in tracer._refreshed.items() if type(data) is not Value}

    def visit(path, obj, container, key):
        if made_here(obj, tracer) and id(obj) not in seen:   # (kept in two places: one)
            seen.add(id(obj))
            found.append((_name(path, names or {}), obj, container, key))

    _walk(roots, visit, bound, leaf=visit)
    return found


def reachable(roots: dict, kind) -> list:
    """``[(name, obj)]`` for the objects reachable from ``roots`` that are of ``kind`` (a
    class, a tuple of classes, or a predicate: capture knows some kinds by duck typing),
    also as the object of a bound method (``draw = rng.random``)."""
    found = []
    matches = kind if callable(kind) and not isinstance(kind, type) else (
        lambda obj: isinstance(obj, kind))

    def visit(path, obj, container, key):
        owner = obj.__self__ if isinstance(obj, _METHODS) else obj
        if matches(owner):
            found.append((_name(path, {}), owner))

    _walk(roots, visit, leaf=_ignore)
    return found


def user_code(roots: dict) -> dict:
    """``{name: function}``: the functions defined by the classes (outside dualgraph) of the
    objects reachable from ``roots``, and the functions outside dualgraph that those name
    as globals, transitively. A walk reaches an object's attributes, not the code its class
    runs, whose globals may name state too (a ``forward`` calling a helper that draws from
    a module-level generator); these are roots to walk for that."""
    found = {}

    def add(name, fn):
        if id(fn) in seen or (fn.__module__ or "").startswith("dualgraph"):
            return
        seen.add(id(fn))
        found[name] = fn
        glob = fn.__globals__
        for k in fn.__code__.co_names:
            if isinstance(glob.get(k), types.FunctionType):
                add(k, glob[k])

    def visit(path, obj, container, key):
        for cls in type(obj).__mro__:
            if not (getattr(cls, "__module__", None) or "").startswith(("dualgraph", "builtins")):
                for k, v in vars(cls).items():
                    if isinstance(v, types.FunctionType):
                        add(f"{cls.__qualname__}.{k}", v)

    seen = set()
    _walk(roots, visit, leaf=_ignore)
    for fn in [f for f in roots.values() if isinstance(f, types.FunctionType)]:
        add(fn.__qualname__, fn)
    return found


def _name(path, names: dict) -> str:
    """The name of the object a walk reached by ``path`` (a root's name, or ``(parent's
    path, "[" or ".", key)``): ``model.cache['mask']``, ``opt.state[fc.weight]``;
    ``names`` (id -> name) names tensor keys."""
    parts = []
    while type(path) is tuple:
        path, sep, key = path
        parts.append(f"[{_key(key, names)}]" if sep == "[" else f".{key}")
    return path + "".join(reversed(parts))


def places(roots: dict) -> dict:
    """``{id(container): (container, a shallow copy)}`` for every list, dict and attribute
    dict (of at most MAX_ITEMS items) reachable from ``roots``: what :func:`undo` puts
    back."""
    before = {}

    def visit(name, obj, container, key):
        holder = obj if type(obj) is list or isinstance(obj, dict) else None
        if holder is None and type(obj) not in _SCALARS and not isinstance(obj, _NO_DICT):
            holder = getattr(obj, "__dict__", None)
        if holder is not None and (type(holder) is list or len(holder) <= MAX_ITEMS):
            before[id(holder)] = (holder, holder.copy())

    _walk(roots, visit, leaf=_ignore)
    return before


_SCALARS = (bool, int, float, complex, str, type(None))


def undo(roots: dict, tracer, before: dict) -> None:
    """Put back what an aborted trace changed, so that the eager run of the same call
    starts from the same Python state (``before``, from :func:`places`): the places where it
    kept a tensor of ``graph`` (the old value, or no item/attribute at all), and the Python
    scalars it changed (a counter incremented, a flag toggled before the break)."""
    appended = []   # (list, index): items a list gained (``history.append(loss)``)
    for _, _, container, key in _created(roots, tracer, None):
        if not isinstance(container, (dict, list)):
            continue   # (a tuple item: it cannot have been set by the trace)
        old = _held(before.get(id(container)), key)
        if old is not _ABSENT:
            container[key] = old
        elif isinstance(container, list):
            appended.append((container, key))
        else:
            del container[key]
    for container, key in sorted(appended, key=lambda ck: -ck[1]):
        del container[key:]   # (and whatever the trace appended after it)
    for container, copied in before.values():
        if type(copied) is list:
            continue
        for key, old in copied.items():
            now = container.get(key, _ABSENT)
            if type(old) in _SCALARS and now is not old and _restorable(now):
                container[key] = old


def held_before(before: dict, container, key):
    """What ``container`` held under ``key`` when :func:`places` took ``before`` (None:
    nothing, or a container it did not see)."""
    old = _held(before.get(id(container)), key)
    return None if old is _ABSENT else old


def _held(saved, key):
    """What a container held under ``key`` before the trace (``saved``: its entry of
    :func:`places`, or None: it was not there), or _ABSENT."""
    if saved is None:
        return _ABSENT
    copied = saved[1]
    if type(copied) is list:
        return copied[key] if key < len(copied) else _ABSENT
    return copied.get(key, _ABSENT)


def restore_cells(cells: list) -> None:
    """Put back the Python scalars an aborted trace changed in closure cells
    (``cells``: ``[(cell, value)]`` taken before it)."""
    for cell, old in cells:
        try:
            now = cell.cell_contents
        except ValueError:   # (emptied)
            now = _ABSENT
        if now is not old and _restorable(now):
            cell.cell_contents = old


def _restorable(now) -> bool:
    """Whether a place an aborted trace left holding ``now`` is given its old scalar back:
    a scalar, nothing, or a traced Python number (capture/symbolic.py)."""
    return type(now) in _SCALARS + (_Absent,) or getattr(now, "symbolic_number", False)


def scalar_cells(fn) -> list:
    """``[(cell, value)]`` for the closure cells of ``fn`` holding Python scalars."""
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if type(value) in _SCALARS:
            found.append((cell, value))
    return found
def _key(k, names) -> str:
    return names.get(id(k), "<tensor>") if isinstance(k, Tensor) else repr(k)
