"""Container modules: ``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList`` and
``ParameterDict``, as in ``torch.nn``.

The list-like containers register their items under the names ``"0"``, ``"1"``, ... so
state-dict keys (``layers.0.weight``) match torch's.
"""
from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from ..tensor import Tensor
from .module import Module, _addindent
from .parameter import Parameter

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _abs_index(idx, size: int) -> int:
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexError(f"index {idx} is out of range")
    return idx % size


def _check_iterable(owner: str, method: str, values):
    if not isinstance(values, Iterable) or isinstance(values, Tensor):
        raise TypeError(f"{owner}.{method} should be called with an iterable, but got "
                        f"{type(values).__name__}")


class _ModuleSequence(Module):
    """What Sequential and ModuleList share: integer indexing into ``_modules`` (negative
    indices count from the end), renumbering after deletion, append/extend/insert/pop."""

    def _key_at(self, idx) -> str:
        return list(self._modules)[_abs_index(idx, len(self))]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __setitem__(self, idx, module):
        setattr(self, self._key_at(idx), module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for key in (keys[idx] if isinstance(idx, slice) else [self._key_at(idx)]):
            delattr(self, key)
        # Renumber so the names stay 0..n-1, as torch does.
        self._modules = OrderedDict(
            (str(i), m) for i, m in enumerate(self._modules.values()))

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        _check_iterable(type(self).__name__, "extend", modules)
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module):
        """Insert ``module`` before position ``index`` (negative counts from the end)."""
        if not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        index = index + n if index < 0 else index
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules = OrderedDict((str(i), m) for i, m in enumerate(modules))
        return self

    def pop(self, idx):
        module = self[idx]
        del self[idx]
        return module


class Sequential(_ModuleSequence):
    """Modules applied one after another: ``Sequential(a, b)(x) == b(a(x))``. Also accepts
    one ``OrderedDict`` of names to modules. Slicing returns a Sequential.

    >>> import dualgraph as dg
    >>> len(dg.nn.Sequential(dg.nn.Module(), dg.nn.Module()))
    2
    """

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._key_at(idx)]

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        return Sequential(*self, *other)

    def __iadd__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        return self.extend(other)

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(_ModuleSequence):
    """A list of modules whose parameters are registered (a plain Python list hides them
    from ``parameters()``). It has no ``forward``: iterate over it in yours."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[self._key_at(idx)]

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList([*self, *other])

    def __repr__(self):
        """torch's compact form: runs of identical modules print once as ``(0-2): 3 x``."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        runs = []  # [start, end, repr]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [_addindent(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}", 2)
                 for a, b, r in runs]
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


def _dict_items(owner: str, values):
    """The ``(key, value)`` pairs of a mapping (or Module/ParameterDict) or an iterable of
    pairs (``update``'s input)."""
    if isinstance(values, (Mapping, ModuleDict, ParameterDict)):
        return list(values.items())
    if isinstance(values, (Module, Tensor)) or not isinstance(values, Iterable):
        raise TypeError(f"{owner}.update should be called with an iterable of key/value "
                        f"pairs, but got {type(values).__name__}")
    pairs = []
    for j, pair in enumerate(values):
        if not isinstance(pair, Iterable) or len(pair) != 2:
            raise ValueError(f"{owner} update sequence element #{j} should be a "
                             f"(key, value) pair, got {pair!r}")
        pairs.append(tuple(pair))
    return pairs


class ModuleDict(Module):
    """A dict of modules whose parameters are registered, in insertion order."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module):
        self.add_module(key, module)

    def __delitem__(self, key: str):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        for key, module in _dict_items("ModuleDict", modules):
            self[key] = module


def _as_parameter(value):
    """Tensors put in a ParameterList/Dict become Parameters (sharing storage), as torch."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _describe_entry(key, value) -> str:
    if isinstance(value, Tensor):
        kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
        size = "x".join(str(d) for d in value.shape)
        return f"  ({key}): {kind} containing: [{value.dtype} of size {size}]"
    return f"  ({key}): Object of type: {type(value).__name__}"


class _ParameterContainer(Module):
    """ParameterList/Dict are holders, not layers."""

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__} should not be called.")


class ParameterList(_ParameterContainer):
    """A list of parameters registered as ``"0"``, ``"1"``, ... (tensors are wrapped as
    Parameters)."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_abs_index(idx, len(self))))

    def __setitem__(self, idx, value):
        setattr(self, str(_abs_index(idx, len(self))), _as_parameter(value))

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, value):
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
        _check_iterable("ParameterList", "extend", values)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(_describe_entry(i, p) for i, p in enumerate(self))


class ParameterDict(_ParameterContainer):
    """A dict of parameters keyed by strings, in insertion order (tensors are wrapped as
    Parameters)."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys: dict = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _check_key(key):
        if not isinstance(key, str):
            raise TypeError("Index given to ParameterDict cannot be used as a key as it is "
                            f"not a string (type is '{type(key).__name__}'). Open an issue "
                            "or use a string key.")
        return key

    def __getitem__(self, key: str):
        return getattr(self, self._check_key(key))

    def __setitem__(self, key: str, value):
        self._keys[self._check_key(key)] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str):
        del self._keys[key]
        delattr(self, key)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def get(self, key: str, default=None):
        return self[key] if key in self else default

    def setdefault(self, key: str, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str):
        value = self[key]
        del self[key]
        return value

    def clear(self):
        for key in list(self._keys):
            del self[key]

    def update(self, parameters):
        """Add or overwrite entries. A plain (unordered-by-contract) mapping is added in
        sorted key order, as torch does; an OrderedDict, a ParameterDict or a sequence of
        pairs keeps its order."""
        items = _dict_items("ParameterDict", parameters)
        if isinstance(parameters, Mapping) and not isinstance(parameters, OrderedDict):
            items.sort(key=lambda item: item[0])
        for key, value in items:
            self[key] = value

    def extra_repr(self) -> str:
        return "\n".join(_describe_entry(k, p) for k, p in self.items())
