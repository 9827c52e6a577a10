"""``nn.utils.weight_norm`` / ``remove_weight_norm``: a module's weight as a direction times
a magnitude, ``w = g * v / ||v||`` (Salimans & Kingma). As torch's, the parameter ``name``
is replaced by ``name_g`` (the norms over every dim but ``dim``, kept with size-1 dims) and
``name_v`` (the direction), so that gradients reach both and the state dict holds both.

Torch recomputes ``module.name`` in a forward pre-hook and stores it as a plain attribute;
here ``module.name`` is a property of a subclass made for the module (as torch's
``parametrize`` does), computed when read. The forward reads it once, so the numbers are
torch's, and a compiled call computes it in its graph rather than storing a new tensor in
the module at every call (which would change the attribute a graph captured)."""
from __future__ import annotations

from ..parameter import Parameter


def norm_except_dim(v, pow: float = 2, dim: int = 0):
    """The ``pow``-norm of ``v`` over every dim but ``dim`` (kept, size 1), or over all of
    it when ``dim`` is -1, as torch's ``norm_except_dim``."""
    if dim == -1:
        return v.norm(pow)
    dims = [d for d in range(v.dim()) if d != dim]
    return v.abs().pow(pow).sum(dims, keepdim=True).pow(1.0 / pow)


def _weight_property(name: str, dim: int) -> property:
    def get(module):
        v = getattr(module, name + "_v")
        return v * (getattr(module, name + "_g") / norm_except_dim(v, 2, dim))
    return property(get, doc=f"{name}_g * {name}_v / ||{name}_v|| (weight_norm, dim={dim})")


def parameter_to_reparametrise(module, name: str, registry: str, what: str) -> Parameter:
    """``module.<name>``, checked to be a parameter not yet reparametrised by ``what``
    (whose records the module's class keeps in ``registry``)."""
    cls = type(module)
    if name in getattr(cls, registry, {}):
        raise RuntimeError(f"cannot register two {what} hooks on the same parameter "
                           f"{name!r} of {cls.__name__}")
    weight = module._parameters.get(name)
    if not isinstance(weight, Parameter):
        raise TypeError(f"{what}: {cls.__name__}.{name} is not a parameter of the "
                        f"module; pass the name of one ({', '.join(module._parameters)})")
    return weight


def subclass_with(module, name: str, prop: property, registry: str, record) -> None:
    """Make ``module`` an instance of a subclass of its class whose ``name`` is ``prop``,
    noting ``record`` (with the class before) under ``registry``."""
    cls = type(module)
    records = {**getattr(cls, registry, {}), name: (record, cls)}
    module.__class__ = type(cls.__name__, (cls,), {name: prop, registry: records,
                                                   "__module__": cls.__module__})


def restore_class(module, name: str, registry: str, what: str):
    """Undo :func:`subclass_with` for ``name`` (the last one made); returns its record and
    the current value of ``module.<name>``, detached."""
    records = getattr(type(module), registry, {})
    if name not in records:
        raise ValueError(f"{what} of {name!r} not found in {type(module).__name__}")
    record, before = records[name]
    if type(module).__bases__[0] is not before:
        raise RuntimeError(f"remove the {what}s of {type(module).__name__} in the reverse "
                           f"order of adding them ({', '.join(reversed(records))})")
    weight = getattr(module, name).detach()
    module.__class__ = before
    return record, weight


def weight_norm(module, name: str = "weight", dim: int | None = 0):
    """Reparametrise ``module.<name>`` as ``<name>_g * <name>_v / ||<name>_v||`` (norms over
    every dim but ``dim``; ``dim=None``: over the whole tensor); returns the module."""
    dim = -1 if dim is None else dim
    weight = parameter_to_reparametrise(module, name, "_weight_norms", "weight_norm")
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, dim).detach()))
    module.register_parameter(name + "_v", Parameter(weight.detach().clone()))
    subclass_with(module, name, _weight_property(name, dim), "_weight_norms", dim)
    return module


def remove_weight_norm(module, name: str = "weight"):
    """Undo :func:`weight_norm`: ``module.<name>`` a plain parameter again, holding the
    current weight."""
    _, weight = restore_class(module, name, "_weight_norms", "weight_norm")
    del module._parameters[name + "_g"], module._parameters[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    return module
