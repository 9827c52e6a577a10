"""``nn.utils.parametrize``: a module's parameter (or buffer) computed by a module from
stored originals, as torch's. ``register_parametrization(m, "weight", P())`` moves
``m.weight`` to ``m.parametrizations.weight.original`` (``P.right_inverse`` of it, when P
has one; ``original0``, ``original1``, ... when that returns several tensors) and makes
``m.weight`` a property of a subclass made for ``m`` (``Parametrized<Class>``) that returns
``P(original)``: computed at every read, so gradients reach the originals, the optimiser
updates those, and a compiled call computes the weight inside its graph. Assigning
``m.weight = value`` stores ``right_inverse(value)`` in the originals.

>>> import dualgraph as dg
>>> class Symmetric(dg.nn.Module):
...     def forward(self, X):
...         return X.triu() + X.triu(1).transpose(-1, -2)
>>> layer = dg.nn.Linear(3, 3)
>>> _ = register_parametrization(layer, "weight", Symmetric())
>>> w = layer.weight
>>> bool((w == w.T).all()), sorted(layer.state_dict())
(True, ['bias', 'parametrizations.weight.original'])
"""
from __future__ import annotations

import contextlib

from ...autograd import no_grad
from ...tensor import Tensor
from ..containers import ModuleDict, ModuleList
from ..module import Module
from ..parameter import Parameter

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized",
           "cached", "type_before_parametrizations", "ParametrizationList"]

_cache: dict | None = None   # (id(module), name) -> tensor, inside `cached()`


@contextlib.contextmanager
def cached():
    """Compute each parametrized tensor once inside the block (a weight read at every step
    of a recurrence), as torch's ``parametrize.cached()``."""
    global _cache
    outer = _cache
    _cache = {} if outer is None else outer
    try:
        yield
    finally:
        _cache = outer


def _as_original(t: Tensor, like: Tensor) -> Tensor:
    """``t`` stored the way the tensor it replaces was: a parameter, or a plain buffer."""
    t = t.detach()
    if isinstance(like, Parameter):
        return Parameter(t.clone(), requires_grad=like.requires_grad)
    return t.clone()


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order to its originals (attributes
    ``original`` or ``original0``, ``original1``, ...)."""

    def __init__(self, modules, original: Tensor, unsafe: bool = False):
        super().__init__(modules)
        self.unsafe = unsafe
        with no_grad():
            new = original
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    new = module.right_inverse(new)
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        kept = new is original and isinstance(original, Parameter)
        for i, t in enumerate([new] if self.is_tensor else new):
            name = "original" if self.is_tensor else f"original{i}"
            if not isinstance(t, Tensor):
                raise TypeError(f"right_inverse must return a tensor or a sequence of "
                                f"tensors, got {type(t).__name__} at position {i}")
            self._store(name, t if kept else _as_original(t, original))

    def _store(self, name: str, t: Tensor) -> None:
        if isinstance(t, Parameter):
            self.register_parameter(name, t)
        else:
            self.register_buffer(name, t)

    def originals(self) -> list:
        if self.is_tensor:
            return [self.original]
        return [getattr(self, f"original{i}") for i in range(self.ntensors)]

    def right_inverse(self, value: Tensor) -> None:
        """Store in the originals what makes the parametrized tensor ``value``."""
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
                elif not self.unsafe and module is not self[0]:
                    raise RuntimeError(f"parametrization {type(module).__name__} has no "
                                       "right_inverse, so the tensor can't be assigned")
            values = [value] if self.is_tensor else list(value)
            for original, v in zip(self.originals(), values):
                original.copy_(v)

    def forward(self) -> Tensor:
        x = self[0](*self.originals())
        for module in list(self)[1:]:
            x = module(x)
        return x


def _property(name: str) -> property:
    def get(module):
        key = (id(module), name)
        if _cache is not None and key in _cache:
            return _cache[key]
        value = module.parametrizations[name]()
        if _cache is not None:
            _cache[key] = value
        return value

    def set_(module, value):
        module.parametrizations[name].right_inverse(value)
    return property(get, set_, doc=f"{name}, computed by module.parametrizations.{name}")


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has parametrizations (of ``tensor_name``, when given)."""
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def type_before_parametrizations(module: Module) -> type:
    """The module's class as it was before its first parametrization."""
    cls = type(module)
    return cls.__bases__[0] if is_parametrized(module) else cls


def _check(module, tensor_name, plist, original) -> None:
    """Refuse a parametrization whose value is no tensor of the original's shape and dtype
    (torch's checks, skipped with ``unsafe=True``)."""
    value = plist()
    if not isinstance(value, Tensor):
        raise ValueError(f"a parametrization must return a tensor; the one of "
                         f"{type(module).__name__}.{tensor_name} returned "
                         f"{type(value).__name__}")
    if tuple(value.shape) != tuple(original.shape) or value.dtype != original.dtype:
        raise ValueError(
            f"registering a parametrization may not change the shape or dtype of the tensor "
            f"(unless unsafe=True): {type(module).__name__}.{tensor_name} was "
            f"{tuple(original.shape)} {original.dtype}, the parametrization gives "
            f"{tuple(value.shape)} {value.dtype}")


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` the value of ``parametrization`` on stored originals
    (a second registration on the same name is applied after the first); returns the
    module."""
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        before = plist()
        plist.append(parametrization)
        if not unsafe:
            _check(module, tensor_name, plist, before)
        return module
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise ValueError(f"Module '{type(module).__name__}' does not have a parameter, a "
                         f"buffer, or a parametrized element with name '{tensor_name}'")
    original = getattr(module, tensor_name)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    if not unsafe:
        _check(module, tensor_name, plist, original)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,),
                                {"__module__": cls.__module__})
        module.parametrizations = ModuleDict()
    setattr(type(module), tensor_name, _property(tensor_name))
    module.parametrizations[tensor_name] = plist
    return module


def remove_parametrizations(module: Module, tensor_name: str,
                            leave_parametrized: bool = True) -> Module:
    """Undo the parametrizations of ``tensor_name``: a plain parameter (or buffer) again,
    holding the parametrized value (``leave_parametrized=False``: the original, which needs
    a single original of the same shape)."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {type(module).__name__} does not have a parametrization "
                         f"on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    originals = plist.originals()
    if leave_parametrized:
        with no_grad():
            value = plist()
    elif plist.is_tensor:
        value = originals[0]
    else:
        raise ValueError("cannot leave unparametrized (leave_parametrized=False) a tensor "
                         "that is parametrized in terms of a sequence of tensors")
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    if isinstance(originals[0], Parameter):
        module.register_parameter(tensor_name, value if isinstance(value, Parameter) else
                                  Parameter(value.detach(),
                                            requires_grad=originals[0].requires_grad))
    else:
        module.register_buffer(tensor_name, value.detach())
    if not is_parametrized(module):
        del module.parametrizations
        module.__class__ = type(module).__bases__[0]
    return module
