"""Activation modules, each a thin wrapper over its ``nn.functional`` form with torch's
constructor arguments and printed form. Activations that differ only in their functional
share a base class holding their settings (none, ``inplace``, ``alpha``, ``dim``) and are
made by ``_define``."""
from __future__ import annotations

import warnings

from .. import functional as F
from .. import init
from ..module import Module
from ._util import new_parameter


def _inplace_repr(inplace: bool, prefix: str = "") -> str:
    """torch's activations print ``inplace=True`` only when it is set."""
    if not inplace:
        return prefix
    return f"{prefix}, inplace=True" if prefix else "inplace=True"


class _InplaceActivation(Module):
    """An activation whose only setting is ``inplace``; ``_fn`` is its functional."""

    _fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return self._fn(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


def _define(name: str, base: type, fn, doc: str) -> type:
    """The activation class ``name``: ``base`` (which holds the settings) running ``fn``."""
    return type(name, (base,), {"_fn": staticmethod(fn), "__doc__": doc,
                                "__module__": __name__, "__qualname__": name})


ReLU = _define("ReLU", _InplaceActivation, F.relu, "``max(0, x)``.")
ReLU6 = _define("ReLU6", _InplaceActivation, F.relu6, "``min(max(0, x), 6)``.")
SiLU = _define("SiLU", _InplaceActivation, F.silu, "``x * sigmoid(x)`` (swish).")
Mish = _define("Mish", _InplaceActivation, F.mish, "``x * tanh(softplus(x))``.")
SELU = _define("SELU", _InplaceActivation, F.selu,
               "Scaled ELU with the self-normalising constants of Klambauer et al. (2017).")
Hardsigmoid = _define("Hardsigmoid", _InplaceActivation, F.hardsigmoid,
                      "``relu6(x + 3) / 6``.")
Hardswish = _define("Hardswish", _InplaceActivation, F.hardswish, "``x * hardsigmoid(x)``.")


class _Stateless(Module):
    """An activation without settings; ``_fn`` is its functional."""

    _fn = None

    def forward(self, input):
        return self._fn(input)


Tanh = _define("Tanh", _Stateless, F.tanh, "``tanh(x)``.")
Sigmoid = _define("Sigmoid", _Stateless, F.sigmoid, "``1 / (1 + exp(-x))``.")
LogSigmoid = _define("LogSigmoid", _Stateless, F.logsigmoid, "``log(sigmoid(x))``.")
Softsign = _define("Softsign", _Stateless, F.softsign, "``x / (1 + |x|)``.")
Tanhshrink = _define("Tanhshrink", _Stateless, F.tanhshrink, "``x - tanh(x)``.")


class GELU(Module):
    """``x * Phi(x)``; ``approximate='tanh'`` uses the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    """``x`` for positive ``x``, ``negative_slope * x`` otherwise."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace, f"negative_slope={self.negative_slope}")


class _AlphaActivation(Module):
    """ELU and CELU: one ``alpha`` and ``inplace``."""

    _fn = None

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return self._fn(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace, f"alpha={self.alpha}")


ELU = _define("ELU", _AlphaActivation, F.elu,
              "``x`` for positive ``x``, ``alpha * (exp(x) - 1)`` otherwise.")
CELU = _define("CELU", _AlphaActivation, F.celu,
               "``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``.")


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    """``x`` clamped to ``[min_val, max_val]``."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be greater than min_val "
                             f"({min_val})")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace, f"min_val={self.min_val}, max_val={self.max_val}")


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace, f"threshold={self.threshold}, value={self.value}")


class PReLU(Module):
    """Leaky ReLU with a learned slope: one, or one per channel (``num_parameters`` = C),
    starting at ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = new_parameter((num_parameters,), device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    """Gated linear unit over ``dim``: first half times the sigmoid of the second."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def _legacy_softmax_dim(name: str, ndim: int) -> int:
    """torch's implicit dim for Softmax(dim=None): 0 for 0-, 1- and 3-d input, else 1."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the "
                  "call to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class _SoftmaxLike(Module):
    _fn = None

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim
        if dim is None:
            dim = _legacy_softmax_dim(type(self).__name__.lower(), input.ndim)
        return self._fn(input, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


Softmax = _define("Softmax", _SoftmaxLike, F.softmax,
                  "``exp(x) / sum(exp(x))`` along ``dim``.")
LogSoftmax = _define("LogSoftmax", _SoftmaxLike, F.log_softmax,
                     "``log(softmax(x))`` along ``dim``, computed stably.")
Softmin = _define("Softmin", _SoftmaxLike, F.softmin, "``softmax(-x)`` along ``dim``.")


class _Shrink(Module):
    """A shrinkage activation; its setting is ``lambd``, ``_fn`` its functional."""

    _fn = None

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return self._fn(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


Hardshrink = _define("Hardshrink", _Shrink, F.hardshrink,
                     "``x`` where ``|x| > lambd``, else 0.")
Softshrink = _define("Softshrink", _Shrink, F.softshrink,
                     "``x`` moved ``lambd`` towards 0, and 0 where ``|x| <= lambd``.")


class RReLU(Module):
    """Leaky ReLU with a negative slope drawn from [lower, upper] per element in training
    and their mean in eval mode."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace, f"lower={self.lower}, upper={self.upper}")


class Softmax2d(Module):
    """Softmax over the channels of (N, C, H, W) or (C, H, W) input."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected a 3-D or 4-D input, got shape "
                             f"{tuple(input.shape)}")
        return F.softmax(input, -3)
