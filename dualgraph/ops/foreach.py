"""torch's ``_foreach_*`` functions (EMA and optimiser code calls them directly): the
Tensor method of the same name applied to each tensor of a list."""
from __future__ import annotations

# A list or tuple argument gives one value per tensor, anything else (a number, a tensor)
# is shared. The ``_`` forms update in place and return the list they were given, as
# torch's do. (Tensor method names, not ops: each call dispatches the method's own ops.)
FOREACH_BINARY = ("add", "sub", "mul", "div", "lerp", "addcmul", "addcdiv", "maximum",
                  "minimum", "pow", "clamp_min", "clamp_max", "copy")
FOREACH_UNARY = ("neg", "abs", "sqrt", "rsqrt", "exp", "log", "reciprocal", "sign", "sigmoid",
                 "zero", "norm", "trunc", "floor", "ceil", "round", "frac", "tanh", "sin",
                 "cos", "expm1", "log1p")
FOREACH_INPLACE_ONLY = ("zero", "copy")
FOREACH_OUT_OF_PLACE_ONLY = ("norm", "maximum", "minimum")


def _foreach(name: str, inplace: bool):
    method = name + "_" if inplace else name

    def function(tensors, *args, **kwargs):
        given, tensors = tensors, list(tensors)
        for arg in args:
            if isinstance(arg, (list, tuple)) and len(arg) != len(tensors):
                raise ValueError(f"_foreach_{method}: {len(tensors)} tensors but a list of "
                                 f"{len(arg)} values; give one value per tensor or one for all")
        results = [getattr(t, method)(*[a[i] if isinstance(a, (list, tuple)) else a
                                        for a in args], **kwargs)
                   for i, t in enumerate(tensors)]
        return given if inplace else results
    function.__name__ = function.__qualname__ = f"_foreach_{method}"
    function.__doc__ = f"``torch._foreach_{method}``: ``t.{method}(...)`` for each tensor."
    return function


_FOREACH = {f"_foreach_{name}{'_' if inplace else ''}": _foreach(name, inplace)
            for name in FOREACH_BINARY + FOREACH_UNARY for inplace in (False, True)
            if not (inplace and name in FOREACH_OUT_OF_PLACE_ONLY)
            and not (not inplace and name in FOREACH_INPLACE_ONLY)}
globals().update(_FOREACH)
__all__ = list(_FOREACH)
