"""Modules as functions of their tensors: :func:`functional_call` runs a module on given
parameters and buffers, :func:`stack_module_state` stacks several models' tensors for
``vmap`` (model ensembling), as ``torch.func``."""
from __future__ import annotations

import contextlib

from ..capture.compile import Compiled, compile as compile_function
from ..ops import shape as shape_ops


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False):
    """``module(*args, **kwargs)`` with the parameters and buffers named in the dict (or
    tuple of dicts) standing in for the module's own for the duration of the call. With
    ``tie_weights``, a tensor the module holds under several names is replaced under all
    of them when one is given; ``strict`` requires every parameter and buffer given."""
    dicts = (parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, (tuple, list))
             else (parameter_and_buffer_dicts,))
    values: dict = {}
    for d in dicts:
        for key, value in d.items():
            if key in values:
                raise ValueError(f"functional_call: {key!r} appeared in several of the "
                                 "given dicts; give each name once")
            values[key] = value
    if tie_weights:
        values = _tied(module, values)
    if strict:
        _check_strict(module, values)
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    if isinstance(module, Compiled) and module.module is not None:
        return _compiled_form(module)(values, args, kwargs or {})
    with _swapped(module, values):
        return module(*args, **(kwargs or {}))


def _compiled_form(compiled):
    """For a ``dg.compile``d module: its module's functional call compiled, the tensors
    given as arguments of the graph (one graph for every set of tensors of the same
    shapes, where the module compiled with them as its own would retrace for each set)."""
    form = compiled.__dict__.get("_functional_form")
    if form is None:
        module = compiled.module

        def call_with(values, args, kwargs):
            with _swapped(module, values):
                return module(*args, **kwargs)
        call_with.__name__ = f"functional_call({type(module).__name__})"
        form = compile_function(call_with, fullgraph=compiled.fullgraph,
                                dynamic=compiled.dynamic)
        object.__setattr__(compiled, "_functional_form", form)
    return form


def _held(module):
    """``(name, owner, registry, leaf)`` for every parameter and buffer, duplicates kept."""
    for prefix, owner in module.named_modules(remove_duplicate=False):
        for registry in (owner._parameters, owner._buffers):
            for leaf, tensor in registry.items():
                if tensor is not None:
                    yield (f"{prefix}.{leaf}" if prefix else leaf), owner, registry, leaf


def _tied(module, values: dict) -> dict:
    """The names that share a tensor with a given name get its value too."""
    by_tensor: dict = {}
    for name, owner, registry, leaf in _held(module):
        by_tensor.setdefault(id(registry[leaf]), []).append(name)
    out = dict(values)
    for names in by_tensor.values():
        given = {n: values[n] for n in names if n in values}
        if not given:
            continue
        first = next(iter(given.values()))
        if any(v is not first for v in given.values()):
            raise ValueError(f"functional_call got different values for the tied weights "
                             f"{sorted(given)}; pass one of them or tie_weights=False")
        out.update({n: first for n in names})
    return out


def _check_strict(module, values: dict) -> None:
    names = {name for name, *_ in _held(module)}
    missing, unexpected = sorted(names - set(values)), sorted(set(values) - names)
    if missing or unexpected:
        raise RuntimeError(f"functional_call(strict=True): missing keys {missing}, "
                           f"unexpected keys {unexpected}")


@contextlib.contextmanager
def _swapped(module, values: dict):
    """The module's registries hold ``values`` inside the block, their own tensors after
    (also when the call raises)."""
    saved = []
    try:
        for name, value in values.items():
            owner_path, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            registry = (owner._parameters if leaf in owner._parameters
                        else owner._buffers if leaf in owner._buffers else None)
            if registry is None:
                saved.append((owner.__dict__, leaf, owner.__dict__.get(leaf, _ABSENT)))
                owner.__dict__[leaf] = value
            else:
                saved.append((registry, leaf, registry[leaf]))
                registry[leaf] = value
        yield
    finally:
        for registry, leaf, old in reversed(saved):
            if old is _ABSENT:
                registry.pop(leaf, None)
            else:
                registry[leaf] = old


_ABSENT = object()


def stack_module_state(models) -> tuple[dict, dict]:
    """``(params, buffers)``: each name's tensors of the models stacked on a new first
    dimension; the stacked parameters are new leaves that require grad where the models'
    do (an ensemble's weights to train), the buffers plain tensors."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: expected at least one model, got 0")
    if len({type(m) for m in models}) != 1 or len({m.training for m in models}) != 1:
        raise RuntimeError("stack_module_state: expected all models to be of the same class "
                           "and in the same training/eval mode")

    def stacked(named):
        names = [dict(named(m)) for m in models]
        out = {}
        for key in names[0]:
            leaf = shape_ops.stack([n[key].detach() for n in names])
            out[key] = leaf.requires_grad_(names[0][key].requires_grad)
        return out
    return (stacked(lambda m: m.named_parameters()),
            stacked(lambda m: m.named_buffers()))
