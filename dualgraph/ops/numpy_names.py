"""NumPy's argument names where torch accepts them: every function of the ``torch``
namespace and every Tensor method that takes ``dim`` or ``keepdim`` also takes ``axis``
and ``keepdims`` (``x.sum(axis=-1)``, ``torch.mean(x, axis=0, keepdims=True)``: torch's
argument parser maps them; ``nn.functional`` does not, and neither does this).

The functions that take those arguments are wrapped once, at import; the wrapper renames
the keywords only when one of them is given, so a call without them costs one frame (the
hot view methods, ``HOT_VIEWS``, are left as they are)."""
from __future__ import annotations

import functools
import inspect

ALIASES = {"axis": "dim", "keepdims": "keepdim"}
# the view and size methods, called on every step of a model and with NumPy's names in no
# code we have seen: left unwrapped, so that they keep their cost (a wrapper's frame is ~9%
# of an eager unsqueeze)
HOT_VIEWS = frozenset(("size", "stride", "squeeze", "unsqueeze", "select", "narrow",
                       "unflatten", "split", "chunk", "unbind", "tensor_split"))


def takes_dim(fn) -> bool:
    """Whether ``fn`` takes ``dim`` or ``keepdim`` (and not NumPy's names itself)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):   # (builtins, classes without a signature)
        return False
    return ("dim" in params or "keepdim" in params) and not any(a in params for a in ALIASES)


def rename(fn_name: str, kwargs: dict) -> None:
    """``kwargs``'s ``axis``/``keepdims`` renamed, in place, to ``dim``/``keepdim``."""
    for alias, name in ALIASES.items():
        if alias in kwargs:
            if name in kwargs:
                raise TypeError(f"{fn_name}() got both {name!r} and its alias {alias!r}")
            kwargs[name] = kwargs.pop(alias)


def accepting_numpy_names(fn):
    """``fn``, taking ``axis``/``keepdims`` for its ``dim``/``keepdim`` too."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs and ("axis" in kwargs or "keepdims" in kwargs):
            rename(fn.__name__, kwargs)
        return fn(*args, **kwargs)
    call.__numpy_names__ = True
    return call


def install(namespace: dict, owner=None) -> None:
    """Wrap, in place, the functions of ``namespace`` (a module's globals, or a class's
    attributes when ``owner`` is the class) that take ``dim`` or ``keepdim``."""
    for name, fn in list(namespace.items()):
        if (name.startswith("_") or name in HOT_VIEWS or not inspect.isfunction(fn)
                or fn.__module__.startswith("dualgraph.nn")   # (F.*'s, as torch's F)
                or getattr(fn, "__numpy_names__", False) or not takes_dim(fn)):
            continue
        wrapped = accepting_numpy_names(fn)
        if owner is None:
            namespace[name] = wrapped
        else:
            setattr(owner, name, wrapped)
