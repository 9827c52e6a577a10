"""Python values a capture reads: numbers, flags and strings outside the tensors.

Tracing runs the function's Python once, so every Python scalar it reads is baked into the
graph: ``x * self.scale``, a global ``SCALE``, ``config["p"]``, a hand-written optimiser's
``state["step"]``. Each such place is a :class:`Slot`; the slots found from the function
are guarded (their values are part of the call's signature: a change retraces, and
``explain()`` names the slot) and the ones the trace wrote (``state["step"] += 1``) are
written again after every cached call, as the Python the graph replaces would have.

Where slots are looked for (as TorchDynamo guards the attributes it reads):

- the globals the function's code loads (``LOAD_GLOBAL``, not attribute names) and its
  closure cells, holding a scalar, a dict or a list of scalars (``step = [0]``, a counter
  bumped by ``step[0] += 1``) or a plain object's scalar attributes;
  the same for the plain functions it names and the ``forward`` of its user-defined modules;
- the public scalar attributes of its optimisers and the scalar items of their per-parameter
  ``state`` dicts;
- the scalar items of dicts and lists and the public scalar attributes of plain objects (a
  config) that its modules hold (``self.cfg["p"]``, ``self.scales[1]``,
  ``self.config.dropout``): changed in place, they would not show in the module facts.

Module attributes (``self.scale``) are guarded with the module facts (capture/guards.py),
which are recomputed only when some module attribute changed.

>>> import dualgraph as dg
>>> SCALE = 2.0
>>> f = dg.compile(lambda x: x * SCALE)
>>> [s.name for s in find_slots(f.fn, [])]
['SCALE']
"""
from __future__ import annotations

import dis
import types

from ..tensor import Tensor
from .scope import is_module, is_optimizer, plain_object

SCALARS = (bool, int, float, str, type(None))
MAX_DICT = 64       # dicts and lists with more items (a vocabulary) are not looked into
ABSENT = object()   # a slot with no value (not created yet, or its container is gone)


def is_scalar(v) -> bool:
    """A Python value tracing bakes in: a scalar or a tuple of scalars."""
    t = type(v)
    return t in SCALARS or (t is tuple and all(type(x) in SCALARS for x in v))


def fact(v) -> tuple:
    """What a guard compares: the type too (``2``, ``2.0`` and ``True`` trace differently).
    A slot found holding a scalar may hold a tensor later (``self.out = None``, then ``h``):
    its type only, since a tensor's ``==`` is elementwise (the places holding tensors have
    guards of their own: capture/held.py, escape.py)."""
    return (type(v), v if v is ABSENT or is_scalar(v) else None)


class _Input:
    """In a guard's fact, the value of a slot that is a graph input (capture/symbolic.py):
    only its type is guarded."""

    def __repr__(self):
        return "a graph input"


INPUT = _Input()


class Slot:
    """A place holding a Python value: ``kind`` "cell" (a closure cell), "item" (``obj[key]``,
    a dict: globals, a config dict; or a list and an index), "attr" (``obj.key``, in its
    ``__dict__``) or "state" (``opt.state[param][key]``, looked up anew so that a replaced
    state dict is seen).
    ``parent`` is the slot holding ``obj`` when it is reached through one (``config["p"]``
    through the global ``config``), so a rebound container is seen too. ``number`` is
    ``int`` or ``float`` when the slot is a graph input (capture/symbolic.py): a value of that
    type is fed to the graph, not baked in, and only its type is guarded."""

    __slots__ = ("kind", "obj", "key", "name", "parent", "number")

    def __init__(self, kind, obj, key, name, parent=None):
        self.kind, self.obj, self.key, self.name, self.parent = kind, obj, key, name, parent
        self.number = None

    def fact(self) -> tuple:
        """What its guard compares now."""
        v = self.get()
        return (type(v), INPUT) if type(v) is self.number else fact(v)

    def container(self):
        return self.obj if self.parent is None else self.parent.get()

    def get(self):
        obj = self.container()
        try:
            if self.kind == "cell":
                return obj.cell_contents
            if self.kind == "item":
                if isinstance(obj, list):
                    return obj[self.key] if self.key < len(obj) else ABSENT
                return obj.get(self.key, ABSENT) if isinstance(obj, dict) else ABSENT
            if self.kind == "attr":
                return vars(obj).get(self.key, ABSENT)
            opt, param = obj
            return opt.state.get(param, {}).get(self.key, ABSENT)
        except (ValueError, TypeError, AttributeError):   # an empty cell, a gone container
            return ABSENT

    def set(self, value) -> None:
        """Write ``value`` back (``ABSENT``: delete) as the traced Python did."""
        obj = self.container()
        if self.kind == "cell":
            obj.cell_contents = value
            return
        if self.kind == "state":
            opt, param = obj
            obj = opt.state[param]
        if self.kind == "attr":
            if value is ABSENT:
                vars(obj).pop(self.key, None)
            else:
                setattr(obj, self.key, value)
        elif isinstance(obj, list):   # (an index the traced call appended, or popped)
            if value is ABSENT:
                del obj[self.key:]
            elif self.key == len(obj):
                obj.append(value)
            else:
                obj[self.key] = value
        elif value is ABSENT:
            obj.pop(self.key, None)
        else:
            obj[self.key] = value

    def identity(self) -> tuple:
        obj = tuple(map(id, self.obj)) if self.kind == "state" else id(self.obj)
        key = id(self.key) if isinstance(self.key, Tensor) else self.key   # (a parameter)
        return (self.kind, obj, key,
                None if self.parent is None else self.parent.identity())


def find_slots(fn, optimizers) -> list[Slot]:
    """The slots ``fn`` (a function or a module) and ``optimizers`` can read (see the module
    docstring), each once."""
    found: dict = {}
    seen_fns: set = set()

    def add(slot):
        found.setdefault(slot.identity(), slot)

    def container(obj, name, parent, depth):
        """The scalar slots inside ``obj``, a dict, a list or a plain object reached by
        ``parent`` (None: ``obj`` itself). Large dicts and lists (a vocabulary) are not
        guarded."""
        held = obj if parent is None else None
        if isinstance(obj, (dict, list)) and len(obj) <= MAX_DICT:
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            for pos, (k, v) in enumerate(list(items)):
                label = f"[{pos}]" if isinstance(k, Tensor) else f"[{k!r}]"
                if is_scalar(v):
                    add(Slot("item", held, k, f"{name}{label}", parent))
                elif isinstance(v, (dict, list)) and depth < 2:
                    container(v, f"{name}{label}", Slot("item", held, k, "", parent),
                              depth + 1)
        elif plain_object(obj):
            for k, v in list(vars(obj).items()):
                if k.startswith("_"):
                    continue
                if is_scalar(v):
                    add(Slot("attr", held, k, f"{name}.{k}", parent))
                elif isinstance(v, dict) and depth == 0:
                    # (a hand-written optimiser's ``self.state[p]["step"]``, a Python int)
                    container(v, f"{name}.{k}", Slot("attr", held, k, "", parent), 1)

    def function(f, depth):
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen_fns or depth > 2:
            return
        seen_fns.add(id(f))
        g = f.__globals__
        for name in _loaded_globals(code):
            if name in g:
                value(g[name], name, Slot("item", g, name, name), depth)
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            value(_contents(cell), name, Slot("cell", cell, None, name), depth)

    def value(v, name, slot, depth):
        if v is ABSENT:
            return
        if is_scalar(v):
            add(slot)
        elif isinstance(v, types.FunctionType):
            if not (v.__module__ or "").startswith("dualgraph."):   # (the library's own)
                function(v, depth + 1)
        elif is_module(v):
            modules.append((name, v))
        elif is_optimizer(v):
            optimizer(v, name)
        elif not isinstance(v, (type, types.ModuleType, Tensor)):
            container(v, name, slot, 0)

    def optimizer(opt, name):
        container(opt, name, None, 0)   # (its public attributes)
        for pos, (param, state) in enumerate(list(opt.state.items())):
            for k, v in state.items():
                if is_scalar(v):
                    add(Slot("state", (opt, param), k, f"{name}.state[{pos}][{k!r}]"))

    modules = [("self", fn)] if is_module(fn) else []
    function(getattr(fn, "forward", fn), 0)
    for i, opt in enumerate(optimizers):
        optimizer(opt, f"optimizer{i}")
    classes = set()
    for prefix, root in modules:
        for path, m in root.named_modules(prefix=prefix):
            for k, v in list(vars(m).items()):   # (dicts, lists and config objects it holds)
                if not k.startswith("_") and (isinstance(v, (dict, list)) or plain_object(v)):
                    container(v, f"{path}.{k}", Slot("attr", m, k, ""), 0)
            cls = type(m)   # (dualgraph's layers read only their own attributes)
            if cls not in classes and not (getattr(cls, "__module__", None) or "").startswith(
                    "dualgraph."):
                classes.add(cls)
                function(getattr(m.forward, "__func__", m.forward), 1)
    return list(found.values())


def _loaded_globals(code) -> set:
    """Names the code reads as globals (``LOAD_GLOBAL``/``LOAD_NAME``; ``co_names`` also holds
    attribute names, ``opt.step`` would name a global loop counter ``step``), in nested code
    objects too."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL"):
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _loaded_globals(const)
    return names


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return ABSENT


def object_scalars(obj) -> tuple:
    """``((name, fact), ...)`` of a plain object's public scalar attributes (none for other
    objects): an argument that is a config object is guarded by them, not only by its
    identity."""
    if not plain_object(obj):
        return ()
    return tuple(sorted((k, fact(v)) for k, v in vars(obj).items()
                        if not k.startswith("_") and is_scalar(v)))


def read(slots) -> tuple:
    """The guarded facts of ``slots`` now."""
    return tuple([s.fact() for s in slots])


def writes(slots, before: tuple) -> list:
    """``(slot, value)`` for each slot whose value the trace changed, from ``before``."""
    return [(s, s.get()) for s, b in zip(slots, before) if fact(s.get()) != b]
