"""What the layers share: the input-shape check with its error message, parameter
creation with torch's ``device=``/``dtype=`` arguments, and torch's default init of
linear and convolution weights."""
from __future__ import annotations

import math

from ... import devices
from ...ops import creation
from .. import init
from ...tensor import Tensor
from ..parameter import Parameter


def check_input(module, x, *layouts) -> None:
    """Raise a ValueError naming ``module`` unless ``x``'s shape fits one of ``layouts``.

    A layout is a tuple whose entries are an int (that exact size), a letter (any size)
    and at most one ``"*"`` (any number of dims), e.g. ``("N", 3, "H", "W")`` or ``("*",
    20)``. The message shows the module's repr, the expected and the actual shape::

        Conv2d(1, 6, kernel_size=(5, 5), stride=(1, 1)) expects input of shape
        (N, 1, H, W) or (1, H, W), got (64, 3, 28, 28)
    """
    # (every layer call checks its input: loops, not generators, and the array's own shape)
    shape = tuple(x._data.shape if isinstance(x, Tensor) else x.shape)
    for layout in layouts:
        if _fits(shape, layout):
            return
    expected = " or ".join("(" + ", ".join(str(d) for d in layout) + ")" for layout in layouts)
    raise ValueError(f"{module!r} expects input of shape {expected}, got {shape}")


def _fits(shape: tuple, layout: tuple) -> bool:
    if "*" in layout:   # any number of dims there: match the two ends
        cut = layout.index("*")
        tail = len(layout) - cut - 1
        if len(shape) < cut + tail:
            return False
        shape = shape[:cut] + shape[len(shape) - tail:]
        layout = layout[:cut] + layout[cut + 1:]
    elif len(shape) != len(layout):
        return False
    for got, want in zip(shape, layout):
        # symbolic sizes (while tracing) are not ints and are not checked
        if isinstance(want, int) and isinstance(got, int) and got != want:
            return False
    return True


def new_parameter(shape, device=None, dtype=None) -> Parameter:
    """An uninitialised parameter of ``shape`` (the caller's ``reset_parameters`` fills it)."""
    check_device(device)
    return Parameter(creation.empty(tuple(shape), dtype=dtype))


def optional_parameter(module, name: str, shape, present: bool, device=None,
                       dtype=None) -> None:
    """Register ``module.<name>``: a new parameter of ``shape``, or None when not ``present``
    (as torch, which keeps the name: ``Linear(2, 3, bias=False).bias is None``)."""
    module.register_parameter(name, new_parameter(shape, device, dtype) if present else None)


check_device = devices.check


def reset_kaiming_uniform(weight, bias) -> None:
    """torch's default init of Linear and Conv layers: weight ~ kaiming_uniform(a=sqrt(5)),
    i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)
