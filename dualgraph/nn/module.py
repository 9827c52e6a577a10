"""``nn.Module``: the base class of models, mirroring ``torch.nn.Module``.

A module keeps three ordered registries, filled by plain attribute assignment:
``_parameters`` (:class:`Parameter` values), ``_buffers`` (tensors that are state but not
weights, e.g. running statistics) and ``_modules`` (child modules). Everything that walks a
model (``named_parameters``, ``state_dict``, ``train``, ``to``, ``__repr__``) walks these
dicts in registration order, depth first, exactly as torch does, so state-dict keys and
printed models match torch's for the same structure.

A layer is written as in torch::

    class Scale(dg.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = dg.nn.Parameter(dg.ones(n))

        def forward(self, x):
            return x * self.weight

        def extra_repr(self):
            return f"n={self.weight.shape[0]}"
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from .. import devices, dtypes
from ..autograd import no_grad
from ..ops import creation
from ..ops.inplace import commit_inplace
from ..tensor import MUTATIONS, Tensor
from .backward_hooks import BackwardHook
from .parameter import Parameter

__all__ = ["Module", "RemovableHandle"]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys it did not find and the ones it ignored."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """Returned by ``register_*_hook``; ``handle.remove()`` unregisters the hook (also usable
    as a context manager that removes it on exit)."""

    _next_id = 0

    def __init__(self, *registries):
        self.registries = registries
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1

    def remove(self):
        _STRUCTURE_VERSION[0] += 1   # (a compiled call ran with the hook: guards see this)
        for registry in self.registries:
            if isinstance(registry, set):
                registry.discard(self.id)
            else:
                registry.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _addindent(text: str, spaces: int) -> str:
    """Indent every line but the first (torch's helper, so nested reprs match)."""
    first, *rest = text.split("\n")
    if not rest:
        return text
    return first + "\n" + "\n".join(" " * spaces + line for line in rest)


def _typename(value) -> str:
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"


_STRUCTURE_VERSION = [0]


class _Registry(OrderedDict):
    """A module's parameters, buffers or children: a dict whose every change counts as a
    change of the module (``_STRUCTURE_VERSION``), also when code writes it directly, as
    ``torch.func.functional_call``, parametrizations and users' code do
    (``module._parameters["weight"] = w``), so that compiled calls see the new tensor."""

    def __setitem__(self, key, value):
        _STRUCTURE_VERSION[0] += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        _STRUCTURE_VERSION[0] += 1
        super().__delitem__(key)

    def _changed(method):
        def changing(self, *args, **kwargs):
            _STRUCTURE_VERSION[0] += 1
            return method(self, *args, **kwargs)
        changing.__name__ = method.__name__
        return changing

    pop = _changed(OrderedDict.pop)
    popitem = _changed(OrderedDict.popitem)
    clear = _changed(OrderedDict.clear)
    update = _changed(OrderedDict.update)
    setdefault = _changed(OrderedDict.setdefault)
    move_to_end = _changed(OrderedDict.move_to_end)
    del _changed


class Module:
    """Base class of all models and layers: subclass it, assign parameters, buffers and
    submodules as attributes in ``__init__``, and define ``forward``.

    >>> import dualgraph as dg
    >>> class Affine(dg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = dg.nn.Parameter(dg.ones(2))
    ...     def forward(self, x):
    ...         return x * self.w
    >>> [name for name, _ in Affine().named_parameters()]
    ['w']
    """

    training: bool

    def __init__(self):
        # object.__setattr__: our own __setattr__ needs these dicts to exist first.
        for name, value in (("training", True), ("_parameters", _Registry()),
                            ("_buffers", _Registry()), ("_non_persistent_buffers_set", set()),
                            ("_modules", _Registry()), ("_forward_hooks", OrderedDict()),
                            ("_forward_hooks_with_kwargs", set()),
                            ("_forward_pre_hooks", OrderedDict()),
                            ("_forward_pre_hooks_with_kwargs", set()),
                            ("_backward_hooks", OrderedDict()),
                            ("_backward_pre_hooks", OrderedDict())):
            object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function')

    # -- calling --------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks):
            return self.forward(*args, **kwargs)
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            "a forward pre-hook registered with with_kwargs=True must return "
                            f"None or a tuple (args, kwargs), got {result!r}")
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        backward = None
        if self._backward_hooks or self._backward_pre_hooks:
            backward = BackwardHook(self, list(self._backward_hooks.values()),
                                    list(self._backward_pre_hooks.values()))
            args = backward.wrap_inputs(args)
        output = self.forward(*args, **kwargs)
        for hook_id, hook in list(self._forward_hooks.items()):
            if hook_id in self._forward_hooks_with_kwargs:
                result = hook(self, args, kwargs, output)
            else:
                result = hook(self, args, output)
            if result is not None:
                output = result
        if backward is not None:
            output = backward.wrap_outputs(output)
        return output

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """Call ``hook(module, args)`` before ``forward``; a non-None result replaces the
        positional arguments (a non-tuple is wrapped in one). With ``with_kwargs=True`` the
        hook is ``hook(module, args, kwargs)`` and may return a new ``(args, kwargs)``."""
        return self._add_hook(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs,
                              hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """Call ``hook(module, args, output)`` after ``forward``; a non-None result replaces
        the output. With ``with_kwargs=True``: ``hook(module, args, kwargs, output)``."""
        return self._add_hook(self._forward_hooks, self._forward_hooks_with_kwargs,
                              hook, prepend, with_kwargs)

    def register_full_backward_hook(self, hook, prepend=False):
        """Call ``hook(module, grad_input, grad_output)`` once the gradients of the
        module's positional inputs are computed (nn/backward_hooks.py); a non-None result
        (a tuple, one entry per input) replaces ``grad_input``."""
        return self._add_hook(self._backward_hooks, set(), hook, prepend, False)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """Call ``hook(module, grad_output)`` when the gradients of the module's outputs
        are known, before its backward; a non-None result (a tuple, one entry per output)
        replaces ``grad_output``."""
        return self._add_hook(self._backward_pre_hooks, set(), hook, prepend, False)

    @staticmethod
    def _add_hook(hooks: OrderedDict, with_kwargs_ids: set, hook, prepend, with_kwargs):
        _STRUCTURE_VERSION[0] += 1   # (a compiled call ran without the hook)
        handle = RemovableHandle(hooks, with_kwargs_ids)
        hooks[handle.id] = hook
        if with_kwargs:
            with_kwargs_ids.add(handle.id)
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        return handle

    # -- registration -----------------------------------------------------------------------
    def _check_new_name(self, kind: str, name, registry: dict):
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in registry:
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add ``param`` (a Parameter, or None to reserve the name) as ``self.<name>``."""
        _STRUCTURE_VERSION[0] += 1
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_new_name("parameter", name, self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                "(dualgraph.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must "
                f"be created explicitly. To express '{name}' as a function of another "
                "Tensor, compute the value in the forward() method.")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True):
        """Add ``tensor`` as state that is not a parameter (``self.<name>``). Persistent
        buffers are part of ``state_dict``; non-persistent ones are not."""
        _STRUCTURE_VERSION[0] += 1
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_new_name("buffer", name, self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                "(dualgraph Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module as ``self.<name>``."""
        _STRUCTURE_VERSION[0] += 1
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        self._check_new_name("module", name, self._modules)
        self._modules[name] = module

    register_module = add_module

    @staticmethod
    def _structure_version() -> int:
        """Bumped by every attribute change of any module: lets dg.compile's guards skip
        re-walking an unchanged model (its training flags and parameters) at every call."""
        return _STRUCTURE_VERSION[0]

    def __setattr__(self, name: str, value):
        _STRUCTURE_VERSION[0] += 1
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, keep=params)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as parameter '{name}' "
                    "(dualgraph.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            if "_modules" not in self.__dict__:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, keep=self._modules)
            self._modules[name] = value
        elif name in self.__dict__.get("_modules", ()):
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as child module '{name}' "
                    "(dualgraph.nn.Module or None expected)")
            self._modules[name] = None
        elif name in self.__dict__.get("_buffers", ()):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as buffer '{name}' "
                    "(dualgraph Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: dict):
        """Drop ``name`` from every registry but ``keep`` (an attribute changes kind)."""
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent_buffers_set.discard(name)

    def __getattr__(self, name: str):
        # Only called when normal lookup fails: look in the registries.
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str):
        _STRUCTURE_VERSION[0] += 1
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = (list(dir(type(self))) + list(self.__dict__) + list(self._parameters)
                + list(self._modules) + list(self._buffers))
        return sorted(k for k in keys if not k[0].isdigit())

    # -- walking the tree -----------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True):
        """``(dotted_name, module)`` for this module and all below it, depth first in
        registration order; a module reachable twice is yielded once unless
        ``remove_duplicate=False``."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub_prefix = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub_prefix, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        """``(name, module)`` for the direct children (each module once)."""
        seen = set()
        for name, module in self._modules.items():
            if module is not None and module not in seen:
                seen.add(module)
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, members, prefix: str, recurse: bool, remove_duplicate: bool):
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        seen = set()
        for module_prefix, module in modules:
            for name, value in members(module).items():
                if value is None or value in seen:
                    continue
                if remove_duplicate:
                    seen.add(value)
                yield module_prefix + ("." if module_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        """``(dotted_name, parameter)`` pairs; a parameter shared by two modules appears
        once (under its first name) unless ``remove_duplicate=False``."""
        return self._named_members(lambda m: m._parameters, prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True):
        return self._named_members(lambda m: m._buffers, prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def get_submodule(self, target: str) -> Module:
        """The module at dotted path ``target`` (``""`` is ``self``)."""
        module = self
        for item in target.split(".") if target else ():
            if not hasattr(module, item):
                raise AttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def get_parameter(self, target: str) -> Parameter:
        return self._get_member(target, "_parameters", "nn.Parameter")

    def get_buffer(self, target: str) -> Tensor:
        return self._get_member(target, "_buffers", "buffer")

    def _get_member(self, target: str, registry: str, kind: str):
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        if name not in getattr(module, registry):
            raise AttributeError(f"`{name}` is not a {kind}")
        return getattr(module, registry)[name]

    # -- state dict -------------------------------------------------------------------------
    def _local_state(self) -> dict:
        """This module's own parameters and persistent buffers (no children, no Nones)."""
        state = {k: v for k, v in self._parameters.items() if v is not None}
        state.update((k, v) for k, v in self._buffers.items()
                     if v is not None and k not in self._non_persistent_buffers_set)
        return state

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """An ``OrderedDict`` from dotted names to parameters and persistent buffers.

        Values are detached tensors sharing storage with the module (so the dict is a
        cheap snapshot that changes when the model trains; clone it to keep a copy), or
        the Parameter objects themselves with ``keep_vars=True``. A shared parameter
        appears under every name it is registered under, as in torch.
        """
        if destination is None:
            destination = OrderedDict()
        for name, value in self._local_state().items():
            destination[prefix + name] = value if keep_vars else value.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict: Mapping, strict: bool = True, assign: bool = False):
        """Copy ``state_dict``'s values into this module's parameters and buffers, in place
        (optimizers holding the parameters keep working).

        With ``strict=True`` (the default) the keys must match ``state_dict()``'s exactly;
        a shape mismatch is an error either way. Returns ``(missing_keys,
        unexpected_keys)``. With ``assign=True`` the module takes the given tensors instead
        of copying (parameters keep their ``requires_grad``).
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []
        for prefix, module in self.named_modules(remove_duplicate=False):
            prefix = prefix + "." if prefix else ""
            module._load_from_state_dict(state_dict, prefix, {"assign_to_params_buffers": assign},
                                         True, missing, unexpected, errors)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing,
                              unexpected, errors):
        """Load this module's own entries; record missing keys and, among the keys under
        ``prefix``, the ones neither this module nor a child claims. Same signature as
        torch's, so a layer that converts old checkpoint formats overrides it the same way
        (``strict`` is always True here; ``load_state_dict`` decides what is an error)."""
        assign = local_metadata.get("assign_to_params_buffers", False)
        local = self._local_state()
        for name, target in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                errors.append(
                    f'While copying the parameter named "{key}", expected dualgraph.Tensor '
                    f"from checkpoint but received {type(value)}")
            elif value.shape != target.shape:
                errors.append(
                    f"size mismatch for {key}: copying a param with shape {value.shape} "
                    f"from checkpoint, the shape in current model is {target.shape}.")
            elif assign:
                if isinstance(target, Parameter):
                    value = Parameter(value.detach(), requires_grad=target.requires_grad)
                setattr(self, name, value)
            else:
                with no_grad():
                    commit_inplace(target, value)
        for key in state_dict:
            if key.startswith(prefix):
                head = key[len(prefix):].split(".", 1)[0]
                if head not in self._modules and head not in local:
                    unexpected.append(key)

    # -- modes and bulk updates ---------------------------------------------------------
    def train(self, mode: bool = True):
        """Set training mode on this module and all below it (dropout, batch norm...)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the parameters' gradients: to None (the default) or to zeros in place."""
        for param in self.parameters():
            grad = param.grad
            if grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                grad.detach_()
                with no_grad():
                    commit_inplace(grad, creation.zeros_like(grad))

    def apply(self, fn):
        """Call ``fn(module)`` on every submodule (children first) and on ``self``."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def _apply(self, fn):
        """Replace every parameter's data (and grad) by ``fn(tensor)``, keeping the Parameter
        objects, and every buffer by ``fn(buffer)``; used by ``to``/``float``/..."""
        for module in self.children():
            module._apply(fn)
        with no_grad():
            for param in self._parameters.values():
                if param is None:
                    continue
                param._data = fn(param)._data
                if param.grad is not None:
                    param.grad._data = fn(param.grad)._data
                MUTATIONS[0] += 1   # (a new array: guards read the parameter again)
            for name, buf in self._buffers.items():
                if buf is not None:
                    self._buffers[name] = fn(buf)
        return self

    def to(self, *args, **kwargs):
        """``module.to(dtype)`` casts floating-point parameters and buffers in place (the
        Parameter objects stay the same); ``module.to("cpu")`` / ``to(dg.device("cpu"))`` are
        accepted (the only device; others raise ``ValueError``)."""
        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        dtypes.check_memory_format(kwargs.pop("memory_format", None), "to")
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for arg in args:
            if isinstance(arg, Tensor):
                dtype = arg.dtype
            elif isinstance(arg, devices.device) or (isinstance(arg, str)
                                                      and arg not in dtypes._BY_NAME):
                device = arg
            else:
                dtype = arg
        devices.check(device)
        if dtype is None:
            return self
        dtype = dtypes.as_dtype(dtype)
        if not dtype.is_floating_point:
            raise TypeError(
                f"nn.Module.to only accepts floating point dtypes, but got desired "
                f"dtype={dtype}")
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self):
        return self.to(dtypes.float32)

    def double(self):
        return self.to(dtypes.float64)

    def half(self):
        return self.to(dtypes.float16)

    def bfloat16(self):
        return self.to(dtypes.bfloat16)

    def cpu(self):
        return self

    def cuda(self, device=None):
        """Raises ``ValueError``: dualgraph has no CUDA device (``module.to(device)`` with
        ``device`` chosen by ``dg.cuda.is_available()`` runs everywhere)."""
        devices.check("cuda")

    # -- printing -------------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """Override to describe the module's settings inside its printed parentheses."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + _addindent(repr(module), 2)
                       for name, module in self._modules.items()]
        return _format_repr(self._get_name(), extra_lines, child_lines)


def _format_repr(name: str, extra_lines: list, child_lines: list) -> str:
    """torch's module layout: ``Name(extra)`` on one line when there is one extra line and
    no children, else one indented line per entry."""
    lines = extra_lines + child_lines
    if not lines:
        return name + "()"
    if len(extra_lines) == 1 and not child_lines:
        return f"{name}({extra_lines[0]})"
    return name + "(\n  " + "\n  ".join(lines) + "\n)"
